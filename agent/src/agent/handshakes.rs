//! Counting handshakes: the join of what the probes timed with what the wire showed on the
//! same connection. Which of the two counts a handshake is the mode's (mode.rs); the
//! probes, where they do not count, time (CPU and duration histograms, labelled from the
//! wire).
//!
//! Plain code over decoded events: the kernel is not needed to test it.
use std::{borrow::Cow, collections::VecDeque, sync::Arc, time::Instant};

use super::{
    estimate::{Estimates, SETTLE},
    mode::Mode,
    quic_join::QuicJoin,
    sightings::Checks,
};
use crate::{
    bounds,
    bpf::abi::hello_untls,
    bpf::{
        handshake::{self as hs, HandshakeResult, Role},
        wire::WireEvent,
    },
    clients::join::HelloJoin,
    metrics::{
        found::Found, histogram::Histogram, FailureLabels, HandshakeLabels, KindPortLabels, LabelValue, Metrics,
        ParamLabels, ProtocolLabels, ReasonLabels, RoleLabels,
    },
    wire::{
        failure::{By, Failure, Reason},
        tracker::{self, ClientHello, Seen},
        AppProtocol, Lookup, Negotiated, Tracker, Transport, WireHandshake,
    },
};

/// Why a handshake's negotiated labels are `other` (tlsprof_handshakes_unlabelled_total):
/// the join found no connection for it, or the wire had not seen all of it.
pub const UNLABELLED_NO_CONNECTION: &str = "no_connection";
pub const UNLABELLED_INCOMPLETE: &str = "incomplete";

/// A process name traced for the first time: its unlabelled handshakes are exported at zero
/// from the start, so that rate() sees the first increment.
pub fn export_unlabelled(m: &Metrics, comm: &str) {
    for reason in [UNLABELLED_NO_CONNECTION, UNLABELLED_INCOMPLETE] {
        let _ = m.handshakes_unlabelled.get_or_create(&ReasonLabels {
            comm: comm.into(),
            reason: reason.into(),
        });
    }
}

/// What the join needs to know of a process.
pub trait ProcInfo {
    /// Its `comm` label (borrowed where it is known: asked per handshake).
    fn name(&self, tgid: u32) -> Cow<'_, str>;
    /// Traced now, or exited lately.
    fn known(&self, tgid: u32) -> bool;
    /// When its probes were last attached (bpf_ktime_get_ns clock), 0 if never.
    fn window_start_ns(&self, tgid: u32) -> u64;
    /// When its probes were first attached (the kernel estimates the connections accepted
    /// before: bpf/proc.h probed_ns), 0 if never.
    fn probed_since_ns(&self, tgid: u32) -> u64;
    /// Its probes' window (window_start_ns) while they are attached and its name is judged
    /// (do they see its handshakes? sightings.rs); None otherwise.
    fn judged_window(&self, tgid: u32) -> Option<u64>;
}

/// Successful handshakes the probes saw waiting for their connection's parameters, at
/// most: tracker::WAIT (2 s) of them at 30,000 handshakes a second. At the bound the oldest
/// is counted at once with what is known (`incomplete`), and so is the bound:
/// tlsprof_table_full_total{table="pending_handshakes"}.
pub const MAX_PENDING: usize = 65_536;

/// Whether a probe's call came less than tracker::WAIT after its process's first probes (a
/// process forked or executed per connection, whose connection the kernel may be estimating).
fn started_for_it(e: &hs::hs_event, procs: &impl ProcInfo) -> bool {
    let first = procs.probed_since_ns(e.tgid);
    first != 0 && e.end_ns.saturating_sub(first) < tracker::WAIT.as_nanos() as u64
}

pub struct Handshakes {
    metrics: Arc<Metrics>,
    /// What servers sent during their handshakes, per connection.
    wire: Tracker,
    /// Successful handshakes the probes saw, waiting for their connection's parameters.
    pending: VecDeque<(hs::hs_event, Instant)>,
    /// The kernel estimate's parts, per connection, until its capture ends.
    estimates: Estimates,
    /// Probes' calls tied to no connection, in a process whose probes came less than
    /// tracker::WAIT before (started per connection): held up to SETTLE for the estimated
    /// parts of its connection, which the call belongs to, to arrive (flush). One figure per
    /// handshake: counted alone, the call and the estimate were two.
    unlinked: VecDeque<(hs::hs_event, Instant)>,
    /// Handshakes of processes whose probes are judged, to be looked at (sightings.rs).
    checks: Checks,
    /// Handshakes looked at: (process, a probe timed it), for the targets' judges.
    pub sightings: Vec<(u32, bool)>,
    /// What each connection's client offered, joined with what its server did.
    clients: HelloJoin,
    /// The probes' figures of QUIC handshakes, waiting for their connection.
    quic: QuicJoin,
    /// Who counts a handshake, and whether the wire is captured (handshakes can be
    /// labelled from it).
    mode: Mode,
    /// The series a wire-counted handshake increments, found once per label set:
    /// tlsprof_protocol_handshakes_total's (comm, port, protocol) and tlsprof_handshakes_total's
    /// (comm, parameters, ok).
    protocol_series: Found<(u16, AppProtocol)>,
    wire_series: Found<(Negotiated, bool)>,
    /// A probe-timed handshake's series: tlsprof_handshakes_total's (comm, role, result,
    /// parameters), tlsprof_handshake_cpu_seconds' and _duration_seconds' (comm, role,
    /// parameters).
    probe_series: Found<(Role, HandshakeResult, Negotiated)>,
    cpu_series: Found<(Role, Negotiated), Histogram>,
    duration_series: Found<(Role, Negotiated), Histogram>,
}

impl Handshakes {
    pub fn new(metrics: Arc<Metrics>, mode: Mode) -> Self {
        Self {
            metrics: metrics.clone(),
            wire: Tracker::default(),
            pending: VecDeque::new(),
            estimates: Estimates::default(),
            unlinked: VecDeque::new(),
            checks: Checks::default(),
            sightings: Vec::new(),
            clients: HelloJoin::new(metrics.clone()),
            protocol_series: Found::default(),
            wire_series: Found::default(),
            probe_series: Found::default(),
            cpu_series: Found::default(),
            duration_series: Found::default(),
            quic: QuicJoin::default(),
            mode,
        }
    }

    /// Wire events: captures grow, and those that end are handshakes seen on the wire.
    pub fn on_wire(&mut self, events: Vec<WireEvent>, procs: &impl ProcInfo, now: Instant) {
        for e in events {
            match self.wire.on_event(e, now) {
                Some(Seen::Handshake(h)) => {
                    self.on_wire_handshake(h, procs, now);
                }
                Some(Seen::Hello(h)) => self.on_client_hello(h, procs, now),
                None => {}
            }
        }
        self.wire.dropped.export(&self.metrics);
    }

    /// A capture ended. For a server without handshake probes this is the handshake: a
    /// ServerHello was sent (or a fatal alert instead), and the server finished its part.
    /// In the default mode this counts every server's handshakes, with or without probes.
    fn on_wire_handshake(&mut self, h: WireHandshake, procs: &impl ProcInfo, now: Instant) {
        if h.negotiated.transport == Transport::Quic {
            // no connection of its own in the kernel: neither estimated nor looked at for
            // the probes' sightings; its figure is joined by time (quic_join.rs)
            if procs.known(h.tgid) {
                self.quic.on_handshake(&procs.name(h.tgid), &h, now);
            }
        } else {
            let probed = procs.window_start_ns(h.tgid) != 0;
            self.estimates.capture_ended(h.conn, h.ok, probed, now);
            if let (true, Some(window)) = (h.ok && h.hello, procs.judged_window(h.tgid)) {
                self.checks.add(h.conn, h.tgid, h.conn_start, window, now);
            }
        }
        if h.hello {
            self.clients.on_server_hello(h.conn, h.negotiated.resumed);
        }
        if let Some(f) = h.failure {
            self.clients.on_failed(h.conn, f);
        }
        if h.ok && procs.known(h.tgid) {
            if h.complete {
                self.clients.on_served(&procs.name(h.tgid), h.port, &h.negotiated);
            }
            let m = &self.metrics;
            let find = |comm: &str, (port, protocol): (u16, AppProtocol)| {
                let labels = ProtocolLabels {
                    comm: comm.into(),
                    port: port.to_string(),
                    protocol: protocol.label().into(),
                };
                m.protocols.get_or_create(&labels).clone()
            };
            self.protocol_series
                .inc(&procs.name(h.tgid), (h.port, h.protocol), find);
        }
        if !self.mode.wire_counts() {
            return; // the probes count the handshakes
        }
        if !procs.known(h.tgid) || (!h.hello && !h.alert) {
            return;
        }
        let comm = procs.name(h.tgid);
        if let Some(f) = h.failure {
            self.count_failures(&comm, &h.port.to_string(), f, 1);
        }
        let result = if h.ok {
            HandshakeResult::Ok
        } else {
            HandshakeResult::Failed
        };
        let m = &self.metrics;
        let find = |comm: &str, (n, _): (Negotiated, bool)| {
            let labels = HandshakeLabels::new(comm, Role::Server, result, n);
            m.handshakes.get_or_create(&labels).clone()
        };
        if h.hello && !h.complete {
            self.count_unlabelled(&comm, UNLABELLED_INCOMPLETE);
        }
        self.wire_series.inc(&comm, (h.negotiated, h.ok), find);
    }

    /// A connection's ClientHello, as the server read it: what it offered (clients/join.rs),
    /// or why it could not be read.
    fn on_client_hello(&mut self, h: ClientHello, procs: &impl ProcInfo, now: Instant) {
        if !procs.known(h.tgid) {
            return;
        }
        let comm = procs.name(h.tgid);
        match h.offer {
            Ok(offer) => self.clients.on_hello(h.conn, &comm, h.port, &offer, now),
            Err(why) => {
                log::debug!("client hello: conn {:#x} port {}: {}", h.conn, h.port, why.label());
                self.clients.on_unread(&comm, why);
            }
        }
    }

    /// A handshake waits for its connection's parameters; at the bound the oldest waiting is
    /// counted now with what is known.
    fn wait(&mut self, e: hs::hs_event, procs: &impl ProcInfo, now: Instant) {
        if self.pending.len() >= MAX_PENDING {
            if let Some((old, _)) = self.pending.pop_front() {
                bounds::count(&self.metrics, "pending_handshakes", 1);
                let (l, complete) = self.wire.give_up(old.conn_id);
                self.count(&old, &l, (!complete).then_some(UNLABELLED_INCOMPLETE), procs);
            }
        }
        self.pending.push_back((e, now));
    }

    /// A handshake the probes saw: labelled by what its connection's server sent, which may
    /// still be on its way.
    pub fn on_probe(&mut self, e: hs::hs_event, procs: &impl ProcInfo, now: Instant) {
        if e.estimate != 0 {
            return self.estimates.add(&e, now); // measured once its capture ends (flush)
        }
        if e.server() && procs.judged_window(e.tgid).is_some() {
            self.sightings.push((e.tgid, true)); // its probes see server handshakes
        }
        if !self.mode.measures_before_window()
            && !e.client()
            && e.conn_start != 0
            && e.conn_start < procs.window_start_ns(e.tgid)
        {
            // The connection came before the probes' window: its first calls may be missing.
            // The wire counts it. Where the kernel estimated it outside the probed calls (a
            // connection accepted before its process's first probes: bpf/proc.h probed_ns,
            // a process forked or executed per connection), this call's CPU is the rest of
            // that one figure; else (accepted while the budget had the probes detached) the
            // calls before it went unseen, and it is not timed.
            if e.conn_start < procs.probed_since_ns(e.tgid) {
                self.estimates.add(&e, now);
            }
            return;
        }
        if !e.client() {
            // the probe's figure is this handshake's: not the kernel estimate's too
            match e.conn_id {
                0 => {
                    // a process whose one connection the kernel is estimating (started for
                    // it: the probes came in its middle): this call is a part of that figure
                    if self.estimates.absorb_unlinked(&e, now) {
                        return;
                    }
                    if started_for_it(&e, procs) && self.unlinked.len() < MAX_PENDING {
                        // that connection's parts may still be on their way (flush)
                        self.unlinked.push_back((e, now));
                        return;
                    }
                    return self.unlinked_alone(e, procs, now);
                }
                id => self.estimates.timed(id, now),
            }
        }
        self.probe_figure(e, procs, now)
    }

    /// A probe's call that no connection's estimate took: a handshake of its own, whose
    /// estimated parts over the same time are not a second figure.
    fn unlinked_alone(&mut self, e: hs::hs_event, procs: &impl ProcInfo, now: Instant) {
        self.estimates
            .timed_during(e.tgid, e.end_ns.saturating_sub(e.duration_ns), e.end_ns);
        self.probe_figure(e, procs, now)
    }

    /// A probe's figure, counted with its connection's parameters (or waiting for them).
    fn probe_figure(&mut self, e: hs::hs_event, procs: &impl ProcInfo, now: Instant) {
        if e.conn_id == 0 && !e.client() && self.mode.sends_captured() {
            let name = procs.name(e.tgid);
            if self.quic.serves(&name) {
                self.quic.wait(e, name.into_owned(), now);
                return self.join_quic(false, procs, now);
            }
        }
        if e.conn_id == 0 || !self.mode.sends_captured() {
            return self.count(&e, &Negotiated::UNKNOWN, Some(UNLABELLED_NO_CONNECTION), procs);
        }
        let id = e.conn_id;
        match self.wire.lookup(id) {
            Lookup::Ready(l, complete) => self.count(&e, &l, (!complete).then_some(UNLABELLED_INCOMPLETE), procs),
            // a failed handshake may have sent nothing: take what is known
            Lookup::Wait if !e.ok() => self.count(&e, &self.wire.give_up(id).0, None, procs),
            Lookup::Wait => self.wait(e, procs, now),
        }
    }

    /// The QUIC handshakes' figures that found their handshake, labelled by it, and those
    /// that waited in vain, as figures without a connection.
    fn join_quic(&mut self, all: bool, procs: &impl ProcInfo, now: Instant) {
        let (joined, alone) = self.quic.take(all, now, self.wire.quic_latest_ns());
        for (e, labels) in joined {
            self.count(&e, &labels, None, procs);
        }
        for e in alone {
            self.count(&e, &Negotiated::UNKNOWN, Some(UNLABELLED_NO_CONNECTION), procs);
        }
    }

    /// Counts the waiting handshakes whose parameters arrived, and those that waited too
    /// long (or all, at exit) with what is known; and the ClientHellos seen since the last
    /// flush in their offers' counters.
    pub fn flush(&mut self, all: bool, procs: &impl ProcInfo, now: Instant) {
        self.clients.flush();
        self.join_quic(all, procs, now);
        let estimates = &self.estimates;
        let looked = self.checks.due(
            now,
            |tgid| procs.judged_window(tgid),
            |conn, tgid, start| estimates.probe_timed(conn, tgid, start),
        );
        self.sightings.extend(looked);
        for (e, since) in std::mem::take(&mut self.unlinked) {
            if self.estimates.absorb_unlinked(&e, now) {
                continue;
            }
            if all || now.duration_since(since) >= SETTLE {
                self.unlinked_alone(e, procs, now);
            } else {
                self.unlinked.push_back((e, since));
            }
        }
        for e in self.estimates.finished(all, now) {
            let (l, complete) = self.wire.give_up(e.conn_id);
            self.count(&e, &l, (!complete).then_some(UNLABELLED_INCOMPLETE), procs);
        }
        for (e, since) in std::mem::take(&mut self.pending) {
            let id = e.conn_id;
            match self.wire.lookup(id) {
                Lookup::Ready(l, complete) => self.count(&e, &l, (!complete).then_some(UNLABELLED_INCOMPLETE), procs),
                Lookup::Wait if all || now.duration_since(since) >= tracker::WAIT => {
                    let (l, complete) = self.wire.give_up(id);
                    self.count(&e, &l, (!complete).then_some(UNLABELLED_INCOMPLETE), procs);
                }
                Lookup::Wait => self.pending.push_back((e, since)),
            }
        }
    }

    /// Drops captures no handshake event will ask for any more; counts the QUIC handshakes
    /// that never ended as failed.
    pub fn expire(&mut self, procs: &impl ProcInfo, now: Instant) {
        for h in self.wire.expire(now) {
            self.on_wire_handshake(h, procs, now);
        }
        self.wire
            .dropped
            .add("quic_waiting", std::mem::take(&mut self.quic.dropped));
        self.estimates.expire(now);
        self.clients.expire(now);
        self.wire
            .dropped
            .add("client_offers", std::mem::take(&mut self.clients.evicted));
        self.wire
            .dropped
            .add("estimate_parts", std::mem::take(&mut self.estimates.evicted));
        self.wire
            .dropped
            .add("sighting_checks", std::mem::take(&mut self.checks.dropped));
        self.wire.dropped.export(&self.metrics);
        bounds::shrink_deque(&mut self.pending);
        bounds::shrink_deque(&mut self.unlinked);
        self.checks.shrink();
    }

    /// (table, entries, bytes of its room) of the join's tables, for the -v log of the
    /// agent's memory.
    pub fn footprint(&self) -> Vec<(&'static str, usize, usize)> {
        let mut out = vec![(
            "pending_handshakes",
            self.pending.len(),
            bounds::deque_bytes(&self.pending),
        )];
        out.extend(self.wire.footprint());
        out.extend(self.clients.footprint());
        out.extend(self.estimates.footprint());
        out.push(self.checks.footprint());
        out
    }

    /// A handshake the probes timed, counted too where the mode says the probes count.
    fn count(&mut self, e: &hs::hs_event, n: &Negotiated, unlabelled: Option<&str>, procs: &impl ProcInfo) {
        let Some((role, result)) = e.decoded() else {
            return;
        };
        let comm = procs.name(e.tgid);
        let cpu = e.cpu_ns as f64 / 1e9;
        let m = &self.metrics;
        let counts = self.mode.probes_count(e.client(), e.estimate != 0);
        if counts {
            let find = |comm: &str, (role, result, n): (Role, HandshakeResult, Negotiated)| {
                m.handshakes
                    .get_or_create(&HandshakeLabels::new(comm, role, result, n))
                    .clone()
            };
            self.probe_series.inc(&comm, (role, result, *n), find);
            if let Some(reason) = unlabelled {
                self.count_unlabelled(&comm, reason);
            }
            if !e.ok() && e.server() {
                // no wire says more (the probes count where the sends are not captured)
                let f = Failure::new(By::Server, Reason::LibraryError);
                self.count_failures(&comm, crate::wire::tls::OTHER, f, 1);
            }
        }
        if e.ok() {
            if e.conn_id != 0 && !e.client() {
                self.clients.on_timed(e.conn_id, cpu);
            }
            self.cpu_series
                .get(&comm, (role, *n), |comm, (role, n)| {
                    m.handshake_cpu.get_or_create(&ParamLabels::new(comm, role, n)).clone()
                })
                .observe(cpu);
            self.duration_series
                .get(&comm, (role, *n), |comm, (role, n)| {
                    m.handshake_duration
                        .get_or_create(&ParamLabels::new(comm, role, n))
                        .clone()
                })
                .observe(e.duration_ns as f64 / 1e9);
        } else {
            let rl = RoleLabels {
                comm: comm.into_owned(),
                role: role.label().into(),
            };
            self.metrics.failed_handshake_cpu.get_or_create(&rl).inc_by(cpu);
        }
    }

    /// `n` connections accepted on `port` of a process named `comm`, a port that carries
    /// TLS, that closed before their server sent any TLS, of one `kind` (bpf/hello.h
    /// HELLO_UNTLS_*): handshakes that failed before the server answered their ClientHello,
    /// or connections that never offered TLS, counted apart (neither ok nor failed).
    pub fn without_tls(&mut self, comm: &str, port: u16, kind: hello_untls, n: u64) {
        if n == 0 {
            return;
        }
        let port = port.to_string();
        let Some(failure) = kind.failure() else {
            let labels = KindPortLabels {
                comm: comm.into(),
                port,
                kind: kind.label().into(),
            };
            self.metrics.connections_without_tls.get_or_create(&labels).inc_by(n);
            return;
        };
        self.metrics
            .handshakes
            .get_or_create(&HandshakeLabels::new(
                comm,
                Role::Server,
                HandshakeResult::Failed,
                Negotiated::UNKNOWN_TCP,
            ))
            .inc_by(n);
        self.count_failures(comm, &port, failure, n);
    }

    /// `n` failed server handshakes' reason.
    fn count_failures(&self, comm: &str, port: &str, f: Failure, n: u64) {
        let labels = FailureLabels {
            comm: comm.into(),
            port: port.into(),
            by: f.by.label().into(),
            reason: f.reason.label().into(),
        };
        self.metrics.handshake_failures.get_or_create(&labels).inc_by(n);
    }

    fn count_unlabelled(&self, comm: &str, reason: &str) {
        self.metrics
            .handshakes_unlabelled
            .get_or_create(&ReasonLabels {
                comm: comm.into(),
                reason: reason.into(),
            })
            .inc();
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;
    use crate::agent::mode::ExactWhy;
    use crate::wire::tls::{Cert, Cipher, Group, Version};
    use crate::{
        bpf::wire::{wire_end, wire_ev},
        metrics::HandshakeLabels,
        wire::fixtures::resumed12,
    };

    const NGINX: u32 = 7;
    const GNUTLS: u32 = 8;

    /// Processes as Targets would describe them: nginx with probes attached at t=100,
    /// lighttpd+GnuTLS without probes.
    /// (name, has probes) per process; the probes' window while judged (sightings.rs).
    struct Procs(HashMap<u32, (&'static str, bool)>, Option<u64>);

    fn procs() -> Procs {
        Procs(
            HashMap::from([(NGINX, ("nginx", true)), (GNUTLS, ("lighttpd", false))]),
            None,
        )
    }

    impl ProcInfo for Procs {
        fn name(&self, tgid: u32) -> Cow<'_, str> {
            self.0.get(&tgid).map_or("unknown", |p| p.0).into()
        }
        fn known(&self, tgid: u32) -> bool {
            self.0.contains_key(&tgid)
        }
        fn window_start_ns(&self, tgid: u32) -> u64 {
            if self.0.get(&tgid).is_some_and(|p| p.1) {
                100
            } else {
                0
            }
        }
        fn probed_since_ns(&self, tgid: u32) -> u64 {
            if self.0.get(&tgid).is_some_and(|p| p.1) {
                50
            } else {
                0
            }
        }
        fn judged_window(&self, tgid: u32) -> Option<u64> {
            self.1.filter(|_| self.0.get(&tgid).is_some_and(|p| p.1))
        }
    }

    fn wire(tgid: u32, conn: u64, kind: wire_ev, flags: u8, data: &[u8]) -> WireEvent {
        WireEvent {
            conn_id: conn,
            tgid,
            netns: 1,
            port: 8443,
            kind,
            flags,
            offset: 0,
            data: data.to_vec(),
        }
    }

    /// A whole capture: the flight, then its end.
    fn captured(tgid: u32, conn: u64, end: wire_end) -> Vec<WireEvent> {
        vec![
            wire(tgid, conn, wire_ev::Data, 0, &resumed12()),
            wire(tgid, conn, wire_ev::End, end as u8, &[]),
        ]
    }

    fn probe(role: hs::hs_role, result: hs::hs_result, conn: u64, cpu_ns: u64) -> hs::hs_event {
        hs::hs_event {
            duration_ns: 2 * cpu_ns,
            cpu_ns,
            tgid: NGINX,
            calls: 2,
            role: role as u8,
            result: result as u8,
            estimate: 0,
            pad: [0; 5],
            conn_id: conn,
            conn_start: conn,
            end_ns: 0,
        }
    }

    const RESUMED: Negotiated = Negotiated {
        version: Version::TLS12,
        cipher: Cipher::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
        group: Group::None,
        cert: Cert::None,
        resumed: true,
        ..Negotiated::UNKNOWN_TCP
    };

    fn count(m: &Metrics, comm: &str, role: &str, result: &str, n: &Negotiated) -> u64 {
        let (role, result) = (Role::parse(role).unwrap(), HandshakeResult::parse(result).unwrap());
        m.handshakes
            .get_or_create(&HandshakeLabels::new(comm, role, result, *n))
            .get()
    }

    fn timed(m: &Metrics, comm: &str, role: &str, n: &Negotiated) -> (u64, f64) {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &m.registry).unwrap();
        // every label but the transport (the probes' figure of a connection not seen is `other`)
        let mut want = vec![format!("comm=\"{comm}\""), format!("role=\"{role}\"")];
        let labels = Negotiated::LABELS.iter().zip(n.label_values());
        want.extend(
            labels
                .filter(|(k, _)| **k != "transport")
                .map(|(k, v)| format!("{k}=\"{v}\"")),
        );
        let find = |series: &str| {
            text.lines()
                .find(|l| l.starts_with(series) && want.iter().all(|w| l.contains(w.as_str())))
                .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
                .unwrap_or(0.0)
        };
        (
            find("tlsprof_handshake_cpu_seconds_count") as u64,
            find("tlsprof_handshake_cpu_seconds_sum"),
        )
    }

    fn unlabelled(m: &Metrics, comm: &str, reason: &str) -> u64 {
        m.handshakes_unlabelled
            .get_or_create(&ReasonLabels {
                comm: comm.into(),
                reason: reason.into(),
            })
            .get()
    }

    #[test]
    fn a_call_tied_to_no_connection_waits_for_the_estimate_it_belongs_to() {
        // A process started for one connection (accepted at 10, before its probes at 50):
        // the kernel estimates it, and a probe's call tied to no connection comes before
        // that connection's estimated part does. One handshake, one figure, both parts in it.
        let m = Arc::new(Metrics::new());
        let mut h = Handshakes::new(m.clone(), Mode::Exact(ExactWhy::Asked));
        let (p, t0) = (procs(), Instant::now());
        h.on_wire(captured(NGINX, 7, wire_end::Finished), &p, t0);
        let call = hs::hs_event {
            conn_start: 0,
            end_ns: 60,
            duration_ns: 5,
            ..probe(hs::hs_role::Server, hs::hs_result::Ok, 0, 31_000)
        };
        h.on_probe(call, &p, t0);
        let part = hs::hs_event {
            estimate: 1,
            conn_start: 10,
            end_ns: 70,
            duration_ns: 3,
            calls: 1,
            ..probe(hs::hs_role::Server, hs::hs_result::Ok, 7, 9_000)
        };
        h.on_probe(part, &p, t0);
        h.flush(false, &p, t0);
        h.flush(true, &p, t0 + tracker::WAIT);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &m.registry).unwrap();
        let figures: f64 = text
            .lines()
            .filter(|l| l.starts_with("tlsprof_handshake_cpu_seconds_count{comm=\"nginx\""))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum();
        assert_eq!(figures, 1.0, "{text}");
        let (n, sum) = timed(&m, "nginx", "server", &RESUMED);
        assert_eq!(n, 1);
        assert!((sum - 40e-6).abs() < 1e-12, "{sum}");
    }

    #[test]
    fn default_mode_counts_from_the_wire_and_times_from_the_probes() {
        let m = Arc::new(Metrics::new());
        let mut h = Handshakes::new(m.clone(), Mode::Default);
        let (p, t0) = (procs(), Instant::now());
        // the wire ends first, the probe event comes after: counted once, timed once
        h.on_wire(captured(NGINX, 200, wire_end::Finished), &p, t0);
        h.on_probe(probe(hs::hs_role::Server, hs::hs_result::Ok, 200, 500_000), &p, t0);
        // a probe event before its connection's bytes: it waits for them
        h.on_probe(probe(hs::hs_role::Server, hs::hs_result::Ok, 300, 700_000), &p, t0);
        assert_eq!(timed(&m, "nginx", "server", &RESUMED).0, 1);
        h.on_wire(captured(NGINX, 300, wire_end::Finished), &p, t0);
        h.flush(false, &p, t0);
        assert_eq!(count(&m, "nginx", "server", "ok", &RESUMED), 2);
        let (n, sum) = timed(&m, "nginx", "server", &RESUMED);
        assert_eq!(n, 2);
        assert!((sum - 0.0012).abs() < 1e-12, "{sum}");
        assert_eq!(count(&m, "nginx", "server", "ok", &Negotiated::UNKNOWN), 0);
        // a connection accepted before the probes' window opened is not timed
        h.on_probe(probe(hs::hs_role::Server, hs::hs_result::Ok, 50, 900_000), &p, t0);
        assert_eq!(timed(&m, "nginx", "server", &RESUMED).0, 2);
        let table = summary(&m);
        assert!(table.contains("nginx            server  ok               2"), "{table}");
    }

    /// While a name's probes are judged, a server handshake a probe reports tells at once,
    /// and each the wire counted on a connection accepted in their window is looked at
    /// tracker::WAIT later: did a probe time it? And a kernel estimate beside the probes is measured only after that wait too,
    /// where the probe's figure is the one.
    #[test]
    fn handshakes_are_looked_at_while_probes_are_judged() {
        let m = Arc::new(Metrics::new());
        let mut h = Handshakes::new(m.clone(), Mode::Default);
        let (p, t0) = (Procs(procs().0, Some(100)), Instant::now());
        let accepted = |conn: u64, start: u64| {
            let mut end = start.to_le_bytes().to_vec();
            end.extend([0, 0]); // no preamble; no one had closed
            vec![
                wire(NGINX, conn, wire_ev::Data, 0, &resumed12()),
                wire(NGINX, conn, wire_ev::End, wire_end::Finished as u8, &end),
            ]
        };
        h.on_wire(accepted(200, 150), &p, t0); // timed by a probe below
        h.on_wire(accepted(201, 160), &p, t0); // never timed: another stack's
        h.on_wire(accepted(202, 50), &p, t0); // accepted before the window: not looked at
        h.on_probe(probe(hs::hs_role::Server, hs::hs_result::Ok, 200, 500_000), &p, t0);
        // the kernel's estimate of the one the probes missed, and of the one they timed
        let mut part = probe(hs::hs_role::Server, hs::hs_result::Ok, 201, 300_000);
        part.estimate = 1;
        h.on_probe(part, &p, t0);
        h.on_probe(hs::hs_event { conn_id: 200, ..part }, &p, t0);
        assert_eq!(
            std::mem::take(&mut h.sightings),
            vec![(NGINX, true)],
            "a probe's report, at once"
        );
        h.flush(false, &p, t0 + tracker::WAIT / 2);
        assert!(h.sightings.is_empty());
        assert_eq!(
            timed(&m, "nginx", "server", &RESUMED).0,
            1,
            "the estimate waits for a late probe"
        );
        h.flush(false, &p, t0 + tracker::WAIT);
        assert_eq!(h.sightings, vec![(NGINX, true), (NGINX, false)]);
        let (n, sum) = timed(&m, "nginx", "server", &RESUMED);
        assert_eq!(
            n, 2,
            "one figure each: the probe's, and the estimate's where no probe timed it"
        );
        assert!((sum - 0.0008).abs() < 1e-12, "{sum}");
    }

    #[test]
    fn servers_without_probes_and_unknown_processes() {
        let m = Arc::new(Metrics::new());
        let mut h = Handshakes::new(m.clone(), Mode::Default);
        let (p, t0) = (procs(), Instant::now());
        h.on_wire(captured(GNUTLS, 200, wire_end::Finished), &p, t0);
        // closed after its ServerHello: the server's part did not finish
        h.on_wire(captured(GNUTLS, 201, wire_end::Closed), &p, t0);
        // a process tlsprof does not trace (its port's owner exited long ago): ignored
        h.on_wire(captured(99, 202, wire_end::Finished), &p, t0);
        assert_eq!(count(&m, "lighttpd", "server", "ok", &RESUMED), 1);
        assert_eq!(count(&m, "lighttpd", "server", "failed", &RESUMED), 1);
        assert_eq!(count(&m, "unknown", "server", "ok", &RESUMED), 0);
    }

    #[test]
    fn exact_mode_counts_from_the_wire_where_it_captures() {
        let m = Arc::new(Metrics::new());
        let mut h = Handshakes::new(m.clone(), Mode::Exact(ExactWhy::Asked));
        let (p, t0) = (procs(), Instant::now());
        h.on_wire(captured(NGINX, 200, wire_end::Finished), &p, t0);
        h.on_wire(captured(GNUTLS, 201, wire_end::Finished), &p, t0);
        assert_eq!(
            count(&m, "nginx", "server", "ok", &RESUMED),
            1,
            "the wire counts nginx's"
        );
        assert_eq!(count(&m, "lighttpd", "server", "ok", &RESUMED), 1, "and lighttpd's");
        // the probes time nginx's: measured, not counted again
        h.on_probe(probe(hs::hs_role::Server, hs::hs_result::Ok, 200, 500_000), &p, t0);
        assert_eq!(count(&m, "nginx", "server", "ok", &RESUMED), 1);
        assert_eq!(timed(&m, "nginx", "server", &RESUMED).0, 1);
    }

    #[test]
    fn without_a_wire_capture_the_probes_count() {
        let m = Arc::new(Metrics::new());
        let mut h = Handshakes::new(m.clone(), Mode::Exact(ExactWhy::NoWireCapture));
        let (p, t0) = (procs(), Instant::now());
        h.on_wire(captured(NGINX, 200, wire_end::Finished), &p, t0);
        assert_eq!(
            count(&m, "nginx", "server", "ok", &RESUMED),
            0,
            "the probes count nginx's"
        );
        // every handshake is counted, even on a connection from before the window, at once:
        // there is no wire capture to wait for
        h.on_probe(probe(hs::hs_role::Server, hs::hs_result::Ok, 200, 500_000), &p, t0);
        h.on_probe(probe(hs::hs_role::Server, hs::hs_result::Ok, 50, 500_000), &p, t0);
        assert_eq!(count(&m, "nginx", "server", "ok", &Negotiated::UNKNOWN), 2);
        assert_eq!(unlabelled(&m, "nginx", UNLABELLED_NO_CONNECTION), 2);
        assert!(h.pending.is_empty());
        h.on_probe(probe(hs::hs_role::Server, hs::hs_result::Failed, 400, 100_000), &p, t0);
        assert_eq!(count(&m, "nginx", "server", "failed", &Negotiated::UNKNOWN), 1);
        let failed_cpu = m
            .failed_handshake_cpu
            .get_or_create(&RoleLabels {
                comm: "nginx".into(),
                role: "server".into(),
            })
            .get();
        assert!((failed_cpu - 1e-4).abs() < 1e-12);
    }

    #[test]
    fn a_probe_figure_waits_for_its_wire_capture_within_bounds() {
        // where the wire captures, the probes' figures wait for their connection's labels
        let m = Arc::new(Metrics::new());
        let mut h = Handshakes::new(m.clone(), Mode::Default);
        let (p, t0) = (procs(), Instant::now());
        h.on_wire(captured(NGINX, 200, wire_end::Finished), &p, t0);
        h.on_probe(probe(hs::hs_role::Server, hs::hs_result::Ok, 200, 500_000), &p, t0);
        assert_eq!(timed(&m, "nginx", "server", &RESUMED).0, 1, "labelled by the wire");
        // one waits for bytes that never come: timed with what is known
        h.on_probe(probe(hs::hs_role::Server, hs::hs_result::Ok, 300, 500_000), &p, t0);
        assert_eq!(h.pending.len(), 1);
        h.flush(false, &p, t0 + tracker::WAIT);
        assert_eq!(timed(&m, "nginx", "server", &Negotiated::UNKNOWN_TCP).0, 1);
        assert!(h.pending.is_empty());
        // a failed handshake that sent nothing is not kept waiting
        h.on_probe(probe(hs::hs_role::Server, hs::hs_result::Failed, 400, 100_000), &p, t0);
        assert!(h.pending.is_empty());
        let failed_cpu = m
            .failed_handshake_cpu
            .get_or_create(&RoleLabels {
                comm: "nginx".into(),
                role: "server".into(),
            })
            .get();
        assert!((failed_cpu - 1e-4).abs() < 1e-12);
        assert_eq!(
            count(&m, "nginx", "server", "ok", &RESUMED),
            1,
            "counted by the wire alone"
        );
    }

    #[test]
    fn client_handshakes_are_counted_by_the_probes_in_every_mode() {
        for mode in [Mode::Default, Mode::Exact(ExactWhy::Asked)] {
            let m = Arc::new(Metrics::new());
            let mut h = Handshakes::new(m.clone(), mode);
            let (p, t0) = (procs(), Instant::now());
            h.on_probe(probe(hs::hs_role::Client, hs::hs_result::Ok, 0, 300_000), &p, t0);
            assert_eq!(count(&m, "nginx", "client", "ok", &Negotiated::UNKNOWN), 1, "{mode:?}");
            assert_eq!(unlabelled(&m, "nginx", UNLABELLED_NO_CONNECTION), 1);
        }
    }

    fn table_full(m: &Metrics, table: &str) -> u64 {
        m.table_full
            .get_or_create(&crate::metrics::TableLabels { table: table.into() })
            .get()
    }

    #[test]
    fn waiting_handshakes_are_bounded() {
        let m = Arc::new(Metrics::new());
        let mut h = Handshakes::new(m.clone(), Mode::Default);
        let (p, t0) = (procs(), Instant::now());
        // handshakes whose connections' bytes never come
        for conn in 0..MAX_PENDING as u64 + 3 {
            h.on_probe(probe(hs::hs_role::Server, hs::hs_result::Ok, 1000 + conn, 1000), &p, t0);
            assert!(h.pending.len() <= MAX_PENDING);
        }
        // the oldest three were timed at once, with what was known
        assert_eq!(h.pending.len(), MAX_PENDING);
        assert_eq!(table_full(&m, "pending_handshakes"), 3);
        assert_eq!(timed(&m, "nginx", "server", &Negotiated::UNKNOWN_TCP).0, 3);
        h.flush(true, &p, t0);
        assert_eq!(
            timed(&m, "nginx", "server", &Negotiated::UNKNOWN_TCP).0,
            MAX_PENDING as u64 + 3
        );
        assert!(h.pending.is_empty());
    }

    /// The exit summary, drawn from the metrics (views/summary.rs).
    fn summary(m: &Metrics) -> String {
        crate::views::summary::table(&crate::views::model::Figures::of(m))
    }

    /// The exit summary reads the metrics, whose series are capped: past the cap, a new
    /// name's handshakes are summed under `other`.
    #[test]
    fn the_summary_is_bounded() {
        const CAP: usize = 8;
        let m = Arc::new(Metrics::with_max_series(CAP));
        let mut h = Handshakes::new(m.clone(), Mode::Exact(ExactWhy::NoWireCapture));
        for i in 0..CAP + 2 {
            h.without_tls(&format!("p{i}"), 443, hello_untls::HelloClient, 1);
        }
        // a row that exists still counts
        h.without_tls("p0", 443, hello_untls::HelloClient, 1);
        let table = summary(&m);
        let rows: Vec<Vec<&str>> = table.lines().skip(2).map(|l| l.split_whitespace().collect()).collect();
        assert_eq!(rows.len(), CAP + 1, "the cap, and `other`: {table}");
        assert!(
            rows.contains(&vec!["other", "server", "failed", "2", "0.0", "-"]),
            "{table}"
        );
        assert!(
            rows.contains(&vec!["p0", "server", "failed", "2", "0.0", "-"]),
            "{table}"
        );
    }

    #[test]
    fn without_the_wire_nothing_waits() {
        let m = Arc::new(Metrics::new());
        let mut h = Handshakes::new(m.clone(), Mode::Exact(ExactWhy::NoWireCapture));
        let (p, t0) = (procs(), Instant::now());
        h.on_probe(probe(hs::hs_role::Server, hs::hs_result::Ok, 200, 500_000), &p, t0);
        assert_eq!(count(&m, "nginx", "server", "ok", &Negotiated::UNKNOWN), 1);
        assert_eq!(unlabelled(&m, "nginx", UNLABELLED_NO_CONNECTION), 1);
        h.without_tls("nginx", 443, hello_untls::HelloReset, 3);
        assert_eq!(count(&m, "nginx", "server", "failed", &Negotiated::UNKNOWN_TCP), 3);
        let table = summary(&m);
        assert!(table.contains("nginx            server  failed           3"), "{table}");
    }

    fn failures(m: &Metrics, by: &str, reason: &str) -> u64 {
        m.handshake_failures
            .get_or_create(&FailureLabels {
                comm: "nginx".into(),
                port: "8443".into(),
                by: by.into(),
                reason: reason.into(),
            })
            .get()
    }

    /// A connection that never offered TLS is no handshake: counted apart, by kind; one
    /// whose ClientHello came and that closed before the server answered failed, and says
    /// who ended it.
    #[test]
    fn connections_without_tls_are_apart_from_handshakes() {
        let m = Arc::new(Metrics::new());
        let mut h = Handshakes::new(m.clone(), Mode::Default);
        h.without_tls("nginx", 8443, hello_untls::Silent, 4);
        h.without_tls("nginx", 8443, hello_untls::Http, 2);
        assert_eq!(count(&m, "nginx", "server", "failed", &Negotiated::UNKNOWN_TCP), 0);
        let kind = |k: &str| {
            m.connections_without_tls
                .get_or_create(&KindPortLabels {
                    comm: "nginx".into(),
                    port: "8443".into(),
                    kind: k.into(),
                })
                .get()
        };
        assert_eq!((kind("silent"), kind("http"), kind("other")), (4, 2, 0));
        h.without_tls("nginx", 8443, hello_untls::HelloServer, 3);
        assert_eq!(count(&m, "nginx", "server", "failed", &Negotiated::UNKNOWN_TCP), 3);
        assert_eq!(failures(&m, "server", "closed"), 3);
    }

    /// A failed capture's reason goes with its count: the server's alert in the clear, or
    /// the client's read after its ClientHello.
    #[test]
    fn a_failed_capture_says_why() {
        use crate::bpf::wire::HELLO_ALERT;
        let m = Arc::new(Metrics::new());
        let mut h = Handshakes::new(m.clone(), Mode::Default);
        let (p, t0) = (procs(), Instant::now());
        // the server's protocol_version alert in the clear
        let end = |by: u8| {
            let mut d = vec![0u8; 10];
            d[9] = by;
            d
        };
        h.on_wire(
            vec![
                wire(NGINX, 1, wire_ev::Data, 0, &[21, 3, 3, 0, 2, 2, 70]),
                wire(NGINX, 1, wire_ev::End, wire_end::Alert as u8, &end(0)),
            ],
            &p,
            t0,
        );
        assert_eq!(failures(&m, "server", "protocol_version"), 1);
        // a TLS 1.2 client's unknown_ca after the server's flight, then its close
        let flight = resumed12();
        h.on_wire(
            vec![
                wire(NGINX, 2, wire_ev::Data, 0, &flight),
                wire(NGINX, 2, wire_ev::Hello, HELLO_ALERT as u8, &[2, 48]),
                wire(NGINX, 2, wire_ev::End, wire_end::Closed as u8, &end(2)),
            ],
            &p,
            t0,
        );
        assert_eq!(failures(&m, "client", "unknown_ca"), 1);
        // no alert: who closed
        h.on_wire(
            vec![
                wire(NGINX, 3, wire_ev::Data, 0, &flight),
                wire(NGINX, 3, wire_ev::End, wire_end::Closed as u8, &end(0x10)),
            ],
            &p,
            t0,
        );
        assert_eq!(failures(&m, "client", "reset"), 1);
        assert_eq!(count(&m, "nginx", "server", "failed", &Negotiated::UNKNOWN_TCP), 1);
    }

    #[test]
    fn client_hellos_counted_by_why_they_were_not_read() {
        use crate::bpf::wire::{hello_why, HELLO_LAST};
        let m = Arc::new(Metrics::new());
        let mut h = Handshakes::new(m.clone(), Mode::Default);
        let (p, t0) = (procs(), Instant::now());
        let unread = |reason: &str| {
            m.client_hellos_unread
                .get_or_create(&ReasonLabels {
                    comm: "nginx".into(),
                    reason: reason.into(),
                })
                .get()
        };
        h.on_wire(vec![wire(NGINX, 1, wire_ev::Hello, hello_why::Cut as u8, &[])], &p, t0);
        assert_eq!(unread("cut"), 1);
        // not a ClientHello (whatever the parser): malformed, once
        h.on_wire(
            vec![wire(
                NGINX,
                2,
                wire_ev::Hello,
                HELLO_LAST as u8,
                &[21, 3, 3, 0, 2, 2, 40],
            )],
            &p,
            t0,
        );
        assert_eq!(unread("malformed"), 1);
        // a process no longer known: not counted
        h.on_wire(vec![wire(99, 3, wire_ev::Hello, hello_why::Cut as u8, &[])], &p, t0);
        assert_eq!(unread("cut"), 1);
        assert_eq!(m.client_hellos.len(), 0);
    }
}
