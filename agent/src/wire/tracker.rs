//! What each connection's server sent during its handshake (bpf/wire.h), gathered from the
//! wire events and parsed (tls/): the parameters a handshake the probes saw on that
//! connection is labelled with (the join itself: agent/handshakes.rs), and, when a capture
//! ends, the handshake as the wire shows it (how servers without probes are counted).
//!
//! The kernel reports the wire bytes and the handshakes through two ring buffers, and a
//! memory-BIO server (node) writes a flight after the handshake call that made it: a
//! handshake whose connection's parameters are not known yet waits (at most `WAIT`) for them.
//!
//! The same ring buffer carries each connection's ClientHello as the server read it
//! (bpf/hello.h, wire_ev::Hello): gathered here per connection, bounded, and parsed once
//! complete (tls::hello): a `Seen::Hello`.
use rustc_hash::FxHashMap;
use std::{
    collections::VecDeque,
    time::{Duration, Instant},
};

use super::{
    failure::Failure,
    quic::flows::Flows,
    tls::{self, hello::Offer, Negotiated},
};
use crate::{
    bounds::{self, Dropped},
    bpf::{
        abi::{decode, WIRE_MAX_SEALED},
        wire::{hello_why, wire_end, wire_ev, WireEvent, HELLO_ALERT, HELLO_LAST, HELLO_MAX, HELLO_WHY_MASK},
    },
};

/// A connection: its identity in the kernel's events (bpf/conn.h conn_life.id).
pub type ConnId = u64;

/// How long a handshake waits for its connection's parameters.
pub const WAIT: Duration = Duration::from_secs(2);
/// How long an ended capture is kept for a handshake event that comes after it.
const KEEP: Duration = Duration::from_secs(30);
/// A capture without an end (its END event lost) is dropped after this.
const STALE: Duration = Duration::from_secs(120);
/// Plaintext kept per connection (the kernel copies at most 16 KiB).
const MAX_PLAIN: usize = 16 * 1024;
/// Captures in flight at most: handshakes under way at once (20,000 clients reconnecting
/// at once after a restart; a client that stalls in its handshake keeps one until it
/// answers or closes, or STALE), and their plaintext at most (TLS 1.2 flights carry the
/// certificate chain, 2-5 KiB; TLS 1.3 ones only the ServerHello). At either bound the
/// oldest sixteenth is dropped (their handshakes are not counted from the wire), counted:
/// tlsprof_table_full_total{table="wire_captures"}.
pub const MAX_CAPTURES: usize = 32_768;
pub const MAX_CAPTURE_BYTES: usize = 64 << 20;
/// Ended captures kept for late handshake events at most: KEEP at ~8,700 handshakes a
/// second. When full, those older than KEEP_WHEN_FULL go (a handshake event comes within a
/// ring-buffer poll of its capture's end), then the oldest, counted:
/// tlsprof_table_full_total{table="wire_ended"}.
pub const MAX_ENDED: usize = 1 << 18;
/// How long an ended capture is kept while their table is full.
const KEEP_WHEN_FULL: Duration = Duration::from_secs(5);

/// ClientHellos being gathered at most, and their bytes at most (a ClientHello is 0.2-2 KB,
/// the kernel sends at most HELLO_MAX): clients that stall halfway keep one until STALE. At
/// either bound the oldest sixteenth go, counted: tlsprof_table_full_total{table="client_hellos"}.
pub const MAX_HELLOS: usize = 32_768;
pub const MAX_HELLO_BYTES: usize = 32 << 20;

/// What the wire showed: a handshake (its capture ended) or a client's ClientHello.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Seen {
    Handshake(WireHandshake),
    Hello(ClientHello),
}

impl Seen {
    #[cfg(test)]
    pub fn handshake(self) -> Option<WireHandshake> {
        match self {
            Seen::Handshake(h) => Some(h),
            Seen::Hello(_) => None,
        }
    }
}

/// A connection's ClientHello, complete or given up on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientHello {
    pub conn: ConnId,
    /// The process that read it.
    pub tgid: u32,
    pub netns: u32,
    pub port: u16,
    pub offer: Result<Offer, Unread>,
}

crate::metrics::label_enum!(
    /// Why a ClientHello gave no offer (the `reason` label of
    /// tlsprof_client_hellos_unread_total).
    Unread {
        /// A read the kernel hook cannot follow (io_uring, several iovec segments, a buffer
        /// it cannot find), or bytes read where no hook saw them.
        Unreadable = "unreadable",
        /// Longer than the kernel reads (HELLO_MAX bytes, 16 records).
        Cut = "cut",
        /// Not a ClientHello, or one that does not parse.
        Malformed = "malformed",
        /// Some of its bytes were lost on the way (the ring buffer was full).
        Lost = "lost",
    }
);

struct HelloCapture {
    netns: u32,
    port: u16,
    bytes: Vec<u8>,
    /// An event was missed: what comes is not contiguous.
    lost: bool,
    since: Instant,
}

struct Capture {
    netns: u32,
    port: u16,
    plain: Vec<u8>,
    sealed: Sealed,
    since: Instant,
}

/// The lengths of a capture's encrypted records, kept in place: the kernel sends at most
/// WIRE_MAX_SEALED a connection.
#[derive(Default)]
struct Sealed {
    lens: [u16; WIRE_MAX_SEALED as usize],
    n: u8,
}

impl Sealed {
    fn extend(&mut self, lens: impl Iterator<Item = u16>) {
        for len in lens {
            let Some(slot) = self.lens.get_mut(usize::from(self.n)) else {
                return;
            };
            *slot = len;
            self.n += 1;
        }
    }

    fn as_slice(&self) -> &[u16] {
        &self.lens[..usize::from(self.n)]
    }
}

/// A handshake seen on the wire only (the capture ended).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WireHandshake {
    /// The connection.
    pub conn: ConnId,
    pub tgid: u32,
    pub netns: u32,
    pub port: u16,
    pub negotiated: Negotiated,
    /// The server completed its part (TLS 1.2 Finished sent, or the client answered the
    /// server's TLS 1.3 flight).
    pub ok: bool,
    /// A ServerHello was sent: the server took part in a TLS handshake.
    pub hello: bool,
    /// The server sent a fatal alert in the clear.
    pub alert: bool,
    /// Why it failed (None: it did not).
    pub failure: Option<Failure>,
    /// Every label is known.
    pub complete: bool,
    /// The application protocol: its plaintext preamble's (STARTTLS, an SSLRequest:
    /// bpf/wire.h WIRE_PROTO_*), else as far as the output shows it.
    pub protocol: super::AppProtocol,
    /// When the connection was accepted (bpf_ktime_get_ns; 0 if the kernel did not say);
    /// QUIC: when the client's first Initial came.
    pub conn_start: u64,
    /// QUIC: when the client's datagram that ended the handshake came (0: TCP, or never).
    pub end_ns: u64,
}

/// What is known of a connection's parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lookup {
    /// Known for good (the parse is complete, or the capture ended).
    Ready(Negotiated, bool),
    /// Not yet: wait.
    Wait,
}

#[derive(Default)]
pub struct Tracker {
    caps: FxHashMap<ConnId, Capture>,
    /// Ended captures: what they negotiated (40 bytes an entry), settled, when.
    ended: FxHashMap<ConnId, (Negotiated, bool, Instant)>,
    /// QUIC connections' handshakes under way.
    quic: Flows,
    ended_order: VecDeque<(ConnId, Instant)>,
    /// Plaintext bytes the captures in flight hold.
    plain_bytes: usize,
    hellos: FxHashMap<ConnId, HelloCapture>,
    /// Bytes the ClientHellos in flight hold.
    hello_bytes: usize,
    /// The alert a client sent in the clear right after its ClientHello (bpf/hello.h
    /// HELLO_ALERT): its description, until its connection's capture ends. At most
    /// MAX_HELLOS; past it the oldest sixteenth go (their failures say only how the
    /// connection closed), counted: tlsprof_table_full_total{table="client_alerts"}.
    client_alerts: FxHashMap<ConnId, (u8, Instant)>,
    /// Entries dropped at the bounds, for the owner to export.
    pub dropped: Dropped,
}

impl Tracker {
    /// Takes one event; returns the handshake when a capture ends, the ClientHello when its
    /// last bytes come.
    pub fn on_event(&mut self, e: WireEvent, now: Instant) -> Option<Seen> {
        match e.kind {
            wire_ev::Hello => self.on_hello(e, now).map(Seen::Hello),
            wire_ev::Quic => self.on_quic(e, now),
            wire_ev::Data | wire_ev::Record | wire_ev::End => self.on_server(e, now).map(Seen::Handshake),
        }
    }

    /// The client's ClientHello bytes, in stream order from its start (`offset` says where
    /// each event's go: one missing makes the ClientHello lost).
    fn on_hello(&mut self, e: WireEvent, now: Instant) -> Option<ClientHello> {
        let id = e.conn_id;
        if e.flags & HELLO_ALERT as u8 != 0 {
            // the record after a ClientHello: an alert (level, description)
            if let [_, description] = e.data[..] {
                if self.client_alerts.len() >= MAX_HELLOS {
                    let out = bounds::evict_oldest(&mut self.client_alerts, MAX_HELLOS, |a| a.1);
                    self.dropped.add("client_alerts", out.len() as u64);
                }
                self.client_alerts.insert(id, (description, now));
            }
            return None;
        }
        let new = !self.hellos.contains_key(&id);
        let why = u32::from(e.flags) & HELLO_WHY_MASK;
        let last = u32::from(e.flags) & HELLO_LAST != 0 || why != 0;
        if new && last {
            // the whole ClientHello in one event (nearly every one): read where it lies
            let whole = e.offset == 0 && e.data.len() <= HELLO_MAX as usize;
            return Some(ClientHello {
                conn: id,
                tgid: e.tgid,
                netns: e.netns,
                port: e.port,
                offer: Self::offer(whole, why, &e.data),
            });
        }
        self.make_room_hellos(new, e.data.len());
        let c = self.hellos.entry(id).or_insert_with(|| HelloCapture {
            netns: e.netns,
            port: e.port,
            bytes: Vec::new(),
            lost: false,
            since: now,
        });
        if usize::from(e.offset) != c.bytes.len() || c.bytes.len() + e.data.len() > HELLO_MAX as usize {
            c.lost = true;
        }
        if c.lost {
            self.hello_bytes -= c.bytes.len();
            c.bytes = Vec::new();
        } else {
            c.bytes.extend_from_slice(&e.data);
            self.hello_bytes += e.data.len();
        }
        if !last {
            return None;
        }
        let c = self.hellos.remove(&id)?;
        self.hello_bytes -= c.bytes.len();
        Some(ClientHello {
            conn: id,
            tgid: e.tgid,
            netns: c.netns,
            port: c.port,
            offer: Self::offer(!c.lost, why, &c.bytes),
        })
    }

    /// What a ClientHello offered, from its `bytes` (`whole`: none of them lost) and why
    /// the kernel stopped reading it (`why`, HELLO_WHY_*).
    fn offer(whole: bool, why: u32, bytes: &[u8]) -> Result<Offer, Unread> {
        if !whole {
            return Err(Unread::Lost);
        }
        match decode(why) {
            Some(hello_why::None) => tls::hello::parse_client_hello(bytes).map_err(|_| Unread::Malformed),
            Some(hello_why::Cut) => Err(Unread::Cut),
            Some(hello_why::Unreadable | hello_why::Gap) => Err(Unread::Unreadable),
            // a reason bpf/hello.h does not name is counted by `decode`
            Some(hello_why::Bad) | None => Err(Unread::Malformed),
        }
    }

    /// Room for a `new` ClientHello and `more` bytes: at either bound the oldest sixteenth go,
    /// counted.
    fn make_room_hellos(&mut self, new: bool, more: usize) {
        let full = (new && self.hellos.len() >= MAX_HELLOS) || self.hello_bytes + more > MAX_HELLO_BYTES;
        if !full || self.hellos.is_empty() {
            return;
        }
        let cap = self.hellos.len().min(MAX_HELLOS);
        let out = bounds::evict_oldest(&mut self.hellos, cap, |c| c.since);
        self.hello_bytes -= out.iter().map(|(_, c)| c.bytes.len()).sum::<usize>();
        self.dropped.add("client_hellos", out.len() as u64);
    }

    /// An event of the server's output.
    fn on_server(&mut self, e: WireEvent, now: Instant) -> Option<WireHandshake> {
        let id = e.conn_id;
        match e.kind {
            wire_ev::Data | wire_ev::Record => {
                let more = if e.kind == wire_ev::Data { e.data.len() } else { 0 };
                self.make_room(!self.caps.contains_key(&id), more);
                let c = self.caps.entry(id).or_insert_with(|| Capture {
                    netns: e.netns,
                    port: e.port,
                    plain: Vec::new(),
                    sealed: Sealed::default(),
                    since: now,
                });
                if e.kind == wire_ev::Data {
                    let room = MAX_PLAIN.saturating_sub(c.plain.len());
                    let n = e.data.len().min(room);
                    c.plain.extend_from_slice(&e.data[..n]);
                    self.plain_bytes += n;
                } else {
                    // the encrypted record headers one send held, 5 bytes each
                    let heads = e.data.chunks_exact(5);
                    c.sealed.extend(heads.map(|h| u16::from(h[3]) << 8 | u16::from(h[4])));
                }
                None
            }
            wire_ev::End => {
                let c = self.caps.remove(&id)?;
                self.plain_bytes -= c.plain.len();
                let p = tls::parse(&c.plain, c.sealed.as_slice(), true);
                let why = decode(e.flags);
                // the server's alert, the client's (TLS 1.3: its answer to the server's flight
                // too short for a Finished), or a close before the end; an end bpf/wire.h does
                // not name (counted by `decode`) leaves it to the bytes seen
                let failed = p.alert.is_some()
                    || match why {
                        Some(wire_end::Alert | wire_end::ClientAlert | wire_end::Closed) => true,
                        Some(wire_end::Finished | wire_end::Cap | wire_end::Bad | wire_end::Unsupported) | None => {
                            false
                        }
                    };
                let end = e.end();
                let client_alert = self.client_alerts.remove(&id).map(|a| a.0);
                let ok = p.hello && !failed;
                let h = WireHandshake {
                    conn: id,
                    tgid: e.tgid,
                    netns: c.netns,
                    port: c.port,
                    negotiated: p.negotiated(),
                    ok,
                    hello: p.hello,
                    alert: p.alert.is_some() || why == Some(wire_end::Alert),
                    failure: (!ok).then(|| Failure::of_capture(p.alert, client_alert, why, end.by)),
                    complete: p.complete,
                    protocol: end
                        .proto
                        .and_then(crate::bpf::wire::wire_proto::protocol)
                        .unwrap_or(p.protocol),
                    conn_start: end.conn_start,
                    end_ns: 0,
                };
                // nothing was negotiated (an alert, or closed before a ServerHello): the
                // labels are other, and that is all there is to know
                let settled = p.complete || (!p.hello && (h.alert || why == Some(wire_end::Closed)));
                self.end(id, p.negotiated(), settled, now);
                Some(h)
            }
            wire_ev::Hello | wire_ev::Quic => None,
        }
    }

    /// A capture ended: its labels kept KEEP for the handshake events that ask for them.
    fn end(&mut self, id: ConnId, labels: Negotiated, settled: bool, now: Instant) {
        self.make_room_ended(now);
        self.ended.insert(id, (labels, settled, now));
        self.ended_order.push_back((id, now));
    }

    /// A QUIC connection's datagram (wire/quic/flows.rs).
    fn on_quic(&mut self, e: WireEvent, now: Instant) -> Option<Seen> {
        if self.ended.contains_key(&e.conn_id) {
            return None; // a late datagram of a handshake already counted (a resent Initial)
        }
        let seen = self.quic.on_event(&e, now);
        if let Some(Seen::Handshake(h)) = &seen {
            self.end(h.conn, h.negotiated, true, now);
        }
        seen
    }

    /// The latest QUIC datagram the kernel reported (bpf_ktime_get_ns; 0: none yet).
    pub fn quic_latest_ns(&self) -> u64 {
        self.quic.latest_ns
    }

    /// The parameters of a connection's handshake, as far as known.
    pub fn lookup(&self, id: ConnId) -> Lookup {
        if let Some((labels, settled, _)) = self.ended.get(&id) {
            return Lookup::Ready(*labels, *settled);
        }
        if let Some(c) = self.caps.get(&id) {
            let p = tls::parse(&c.plain, c.sealed.as_slice(), false);
            if p.complete {
                return Lookup::Ready(p.negotiated(), true);
            }
        }
        Lookup::Wait
    }

    /// The best that is known when a handshake has waited long enough.
    pub fn give_up(&self, id: ConnId) -> (Negotiated, bool) {
        match self.lookup(id) {
            Lookup::Ready(l, complete) => (l, complete),
            Lookup::Wait => match self.caps.get(&id) {
                Some(c) => (tls::parse(&c.plain, c.sealed.as_slice(), true).negotiated(), false),
                None => (Negotiated::UNKNOWN_TCP, false),
            },
        }
    }

    /// Drops what no handshake event will ask for any more; returns the QUIC handshakes
    /// that never ended (failed).
    pub fn expire(&mut self, now: Instant) -> Vec<WireHandshake> {
        let stale = self.quic.expire(now);
        for h in &stale {
            self.end(h.conn, h.negotiated, true, now);
        }
        if self.quic.unopened > 0 {
            log::debug!("quic: {} datagrams did not open as Initial packets", self.quic.unopened);
            self.quic.unopened = 0;
        }
        self.dropped.add("quic_flows", std::mem::take(&mut self.quic.evicted));
        self.expire_ended(|at| now.duration_since(at) >= KEEP);
        let mut freed = 0;
        self.caps.retain(|_, c| {
            let keep = now.duration_since(c.since) < STALE;
            if !keep {
                freed += c.plain.len();
            }
            keep
        });
        self.plain_bytes -= freed;
        // a ClientHello never completed (the client stalled or closed halfway)
        let mut freed = 0;
        self.hellos.retain(|_, c| {
            let keep = now.duration_since(c.since) < STALE;
            if !keep {
                freed += c.bytes.len();
            }
            keep
        });
        self.hello_bytes -= freed;
        // a client's alert whose connection's capture never ended (its server sent no TLS)
        self.client_alerts.retain(|_, a| now.duration_since(a.1) < KEEP);
        bounds::shrink(&mut self.client_alerts);
        bounds::shrink(&mut self.caps);
        bounds::shrink(&mut self.ended);
        bounds::shrink_deque(&mut self.ended_order);
        bounds::shrink(&mut self.hellos);
        stale
    }

    /// (table, entries, bytes of its room) for the -v log of the agent's memory.
    pub fn footprint(&self) -> [(&'static str, usize, usize); 5] {
        [
            (
                "client_alerts",
                self.client_alerts.len(),
                bounds::map_bytes(&self.client_alerts),
            ),
            (
                "wire_captures",
                self.caps.len(),
                bounds::map_bytes(&self.caps) + self.plain_bytes,
            ),
            (
                "client_hellos",
                self.hellos.len(),
                bounds::map_bytes(&self.hellos) + self.hello_bytes,
            ),
            ("wire_ended", self.ended.len(), bounds::map_bytes(&self.ended)),
            (
                "wire_ended_order",
                self.ended_order.len(),
                bounds::deque_bytes(&self.ended_order),
            ),
        ]
    }

    /// Room for a `new` capture and `more` plaintext bytes: at either bound the oldest
    /// sixteenth of the captures go, counted.
    fn make_room(&mut self, new: bool, more: usize) {
        let full = (new && self.caps.len() >= MAX_CAPTURES) || self.plain_bytes + more > MAX_CAPTURE_BYTES;
        if !full || self.caps.is_empty() {
            return;
        }
        let cap = self.caps.len().min(MAX_CAPTURES);
        let out = bounds::evict_oldest(&mut self.caps, cap, |c| c.since);
        self.plain_bytes -= out.iter().map(|(_, c)| c.plain.len()).sum::<usize>();
        self.dropped.add("wire_captures", out.len() as u64);
    }

    /// Drops ended captures from the oldest on, while `done` says so of their end time.
    fn expire_ended(&mut self, done: impl Fn(Instant) -> bool) {
        while let Some(&(id, at)) = self.ended_order.front() {
            if !done(at) {
                break;
            }
            self.ended_order.pop_front();
            if self.ended.get(&id).is_some_and(|(_, _, t)| *t == at) {
                self.ended.remove(&id);
            }
        }
    }

    /// Room for one more ended capture: those older than KEEP_WHEN_FULL go first, then the
    /// oldest, counted.
    fn make_room_ended(&mut self, now: Instant) {
        if self.ended.len() < MAX_ENDED && self.ended_order.len() < 2 * MAX_ENDED {
            return;
        }
        self.expire_ended(|at| now.duration_since(at) >= KEEP_WHEN_FULL);
        let mut evicted = 0;
        while self.ended.len() >= MAX_ENDED {
            let Some((id, at)) = self.ended_order.pop_front() else {
                break;
            };
            if self.ended.get(&id).is_some_and(|(_, _, t)| *t == at) {
                self.ended.remove(&id);
                evicted += 1;
            }
        }
        self.dropped.add("wire_ended", evicted);
    }

    #[cfg(test)]
    pub fn in_flight(&self) -> usize {
        self.caps.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::wire::fixtures::{resumed12, wire_event as ev};

    #[test]
    fn data_split_over_events_then_end() {
        let t0 = Instant::now();
        let mut t = Tracker::default();
        let id = crate::wire::fixtures::WIRE_CONN;
        let bytes = resumed12();
        assert_eq!(t.lookup(id), Lookup::Wait);
        assert!(t.on_event(ev(wire_ev::Data, 0, &bytes[..50]), t0).is_none());
        assert_eq!(t.lookup(id), Lookup::Wait, "ServerHello cut in half");
        assert!(t.on_event(ev(wire_ev::Data, 0, &bytes[50..]), t0).is_none());
        let Lookup::Ready(l, true) = t.lookup(id) else {
            panic!("{:?}", t.lookup(id))
        };
        assert_eq!(
            (l.version.label(), l.resumed, l.cert.label()),
            ("TLSv1.2", true, tls::NONE)
        );
        let h = t
            .on_event(ev(wire_ev::End, wire_end::Finished as u8, &[]), t0)
            .and_then(Seen::handshake)
            .unwrap();
        assert!(h.ok && h.hello && h.complete);
        assert_eq!((h.tgid, h.port, h.negotiated), (7, 8443, l));
        assert_eq!(t.in_flight(), 0);
        // kept for a late handshake event, then dropped
        assert!(matches!(t.lookup(id), Lookup::Ready(..)));
        t.expire(t0 + KEEP + Duration::from_secs(1));
        assert_eq!(t.lookup(id), Lookup::Wait);
    }

    #[test]
    fn alerts_and_closes_fail() {
        let t0 = Instant::now();
        let mut t = Tracker::default();
        t.on_event(ev(wire_ev::Data, 0, &[21, 3, 3, 0, 2, 2, 40]), t0);
        let h = t
            .on_event(ev(wire_ev::End, wire_end::Alert as u8, &[]), t0)
            .and_then(Seen::handshake)
            .unwrap();
        assert!(!h.ok && !h.hello);
        assert_eq!(h.negotiated, Negotiated::UNKNOWN_TCP);
        // closed after the ServerHello: the server's part did not finish
        let bytes = resumed12();
        t.on_event(ev(wire_ev::Data, 0, &bytes[..79]), t0);
        let h = t
            .on_event(ev(wire_ev::End, wire_end::Closed as u8, &[]), t0)
            .and_then(Seen::handshake)
            .unwrap();
        assert!(!h.ok && h.hello);
        // gave up on a cap after the ServerHello: counted, labels as far as seen
        t.on_event(ev(wire_ev::Data, 0, &bytes), t0);
        let h = t
            .on_event(ev(wire_ev::End, wire_end::Cap as u8, &[]), t0)
            .and_then(Seen::handshake)
            .unwrap();
        assert!(h.ok && h.hello);
        // the client answered the server's TLS 1.3 flight with an alert: failed, labelled
        t.on_event(ev(wire_ev::Data, 0, &bytes), t0);
        let h = t
            .on_event(ev(wire_ev::End, wire_end::ClientAlert as u8, &[]), t0)
            .and_then(Seen::handshake)
            .unwrap();
        assert!(!h.ok && h.hello && !h.alert);
        // an END without a capture (lost events) says nothing
        assert!(t
            .on_event(ev(wire_ev::End, wire_end::Finished as u8, &[]), t0)
            .is_none());
    }

    fn conn_ev(conn_id: u64, kind: wire_ev, flags: u8, data: &[u8]) -> WireEvent {
        WireEvent {
            conn_id,
            ..ev(kind, flags, data)
        }
    }

    #[test]
    fn captures_in_flight_are_bounded() {
        let t0 = Instant::now();
        let mut t = Tracker::default();
        for i in 0..=MAX_CAPTURES as u64 {
            let at = t0 + Duration::from_millis(i);
            t.on_event(conn_ev(i, wire_ev::Data, 0, &[22, 3, 3]), at);
            assert!(t.in_flight() <= MAX_CAPTURES);
        }
        // the oldest sixteenth made room for the last
        let evicted = (MAX_CAPTURES / 16) as u64;
        assert_eq!(t.dropped.get("wire_captures"), evicted);
        assert_eq!(t.in_flight(), MAX_CAPTURES + 1 - evicted as usize);
        assert!(!t.caps.contains_key(&(evicted - 1)) && t.caps.contains_key(&evicted));
        // more data of a capture in flight takes no room
        t.on_event(conn_ev(evicted, wire_ev::Data, 0, &[0]), t0);
        assert_eq!(t.dropped.get("wire_captures"), evicted);
        // what ends, expires or is evicted gives its bytes back
        t.expire(t0 + STALE + Duration::from_secs(60));
        assert_eq!((t.in_flight(), t.plain_bytes), (0, 0));
    }

    #[test]
    fn captured_bytes_are_bounded() {
        let t0 = Instant::now();
        let mut t = Tracker::default();
        let flight = vec![22u8; MAX_PLAIN];
        let fit = MAX_CAPTURE_BYTES / MAX_PLAIN;
        for i in 0..=fit as u64 {
            t.on_event(conn_ev(i, wire_ev::Data, 0, &flight), t0 + Duration::from_millis(i));
            assert!(t.plain_bytes <= MAX_CAPTURE_BYTES);
        }
        let evicted = (fit / 16) as u64;
        assert_eq!(t.dropped.get("wire_captures"), evicted);
        assert_eq!(t.plain_bytes, (fit + 1 - evicted as usize) * MAX_PLAIN);
        let ended = t
            .on_event(conn_ev(fit as u64, wire_ev::End, wire_end::Closed as u8, &[]), t0)
            .and_then(Seen::handshake);
        assert!(ended.is_some());
        assert_eq!(t.plain_bytes, (fit - evicted as usize) * MAX_PLAIN);
    }

    #[test]
    fn ended_captures_are_bounded() {
        let t0 = Instant::now();
        let mut t = Tracker::default();
        let alert = [21, 3, 3, 0, 2, 2, 40];
        let end = |t: &mut Tracker, sk: u64, at: Instant| {
            t.on_event(conn_ev(sk, wire_ev::Data, 0, &alert), at);
            t.on_event(conn_ev(sk, wire_ev::End, wire_end::Alert as u8, &[]), at)
                .and_then(Seen::handshake)
                .unwrap();
        };
        for sk in 0..MAX_ENDED as u64 + 10 {
            end(&mut t, sk, t0);
        }
        // all as young: the oldest went, counted
        assert_eq!((t.ended.len(), t.dropped.get("wire_ended")), (MAX_ENDED, 10));
        assert!(matches!(t.lookup(10), Lookup::Ready(..)));
        assert_eq!(t.lookup(9), Lookup::Wait);
        // full of ends older than KEEP_WHEN_FULL: they go first, uncounted
        end(&mut t, u64::MAX, t0 + KEEP_WHEN_FULL);
        assert_eq!((t.ended.len(), t.dropped.get("wire_ended")), (1, 10));
    }

    /// An ended capture's entry stays small (docs/metrics.md gives the table's memory from
    /// it), and a table emptied by expiry gives its room back.
    #[test]
    fn ended_captures_are_small_and_shrink() {
        assert_eq!(std::mem::size_of::<(ConnId, (Negotiated, bool, Instant))>(), 40);
        let t0 = Instant::now();
        let mut t = Tracker::default();
        for sk in 0..20_000 {
            t.end(sk, Negotiated::UNKNOWN_TCP, true, t0);
        }
        let peak = bounds::map_bytes(&t.ended) + bounds::deque_bytes(&t.ended_order);
        t.end(u64::MAX, Negotiated::UNKNOWN_TCP, true, t0 + KEEP);
        t.expire(t0 + KEEP);
        assert_eq!(t.ended.len(), 1);
        let after = bounds::map_bytes(&t.ended) + bounds::deque_bytes(&t.ended_order);
        assert!(after * 100 < peak, "{after} of {peak} bytes kept");
        assert!(matches!(t.lookup(u64::MAX), Lookup::Ready(l, true) if l == Negotiated::UNKNOWN_TCP));
    }

    #[test]
    fn give_up_uses_what_was_seen() {
        let t0 = Instant::now();
        let mut t = Tracker::default();
        let id = crate::wire::fixtures::WIRE_CONN;
        assert_eq!(t.give_up(id), (Negotiated::UNKNOWN_TCP, false));
        let bytes = resumed12();
        t.on_event(ev(wire_ev::Data, 0, &bytes[..80]), t0);
        let (l, complete) = t.give_up(id);
        assert_eq!(
            (l.version.label(), l.cipher.label(), complete),
            ("TLSv1.2", "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256", false)
        );
        t.expire(t0 + STALE);
        assert_eq!(t.in_flight(), 0);
    }

    fn hello_ev(conn_id: u64, offset: u16, flags: u8, data: &[u8]) -> WireEvent {
        WireEvent {
            conn_id,
            offset,
            ..ev(wire_ev::Hello, flags, data)
        }
    }

    fn hello(seen: Option<Seen>) -> ClientHello {
        match seen {
            Some(Seen::Hello(h)) => h,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn client_hellos_gathered_by_offset() {
        let t0 = Instant::now();
        let mut t = Tracker::default();
        // in two events: nothing until the last; the placeholder parser or the real one,
        // these bytes are no ClientHello
        assert!(t.on_event(hello_ev(1, 0, 0, &[22, 3, 1, 0, 4]), t0).is_none());
        let h = hello(t.on_event(hello_ev(1, 5, HELLO_LAST as u8, &[1, 0, 0, 0]), t0));
        assert_eq!((h.conn, h.tgid, h.port, h.offer), (1, 7, 8443, Err(Unread::Malformed)));
        assert_eq!((t.hellos.len(), t.hello_bytes), (0, 0));
        // one event missing: lost, once
        t.on_event(hello_ev(2, 0, 0, &[22; 10]), t0);
        assert!(t.on_event(hello_ev(2, 20, 0, &[22; 10]), t0).is_none());
        assert_eq!(
            hello(t.on_event(hello_ev(2, 30, HELLO_LAST as u8, &[1]), t0)).offer,
            Err(Unread::Lost)
        );
        assert_eq!((t.hellos.len(), t.hello_bytes), (0, 0));
        // the kernel gave up: why
        for (why, unread) in [
            (hello_why::Unreadable as u8, Unread::Unreadable),
            (hello_why::Gap as u8, Unread::Unreadable),
            (hello_why::Cut as u8, Unread::Cut),
            (hello_why::Bad as u8, Unread::Malformed),
        ] {
            t.on_event(hello_ev(3, 0, 0, &[22, 3, 1]), t0);
            assert_eq!(hello(t.on_event(hello_ev(3, 3, why, &[]), t0)).offer, Err(unread));
            // or before any byte
            assert_eq!(hello(t.on_event(hello_ev(4, 0, why, &[]), t0)).offer, Err(unread));
        }
        // an unfinished one expires
        t.on_event(hello_ev(5, 0, 0, &[22; 100]), t0);
        t.expire(t0 + STALE);
        assert_eq!((t.hellos.len(), t.hello_bytes), (0, 0));
        // the server's output is not mixed in
        assert!(t.on_event(hello_ev(6, 0, 0, &[22; 3]), t0).is_none());
        assert_eq!(t.in_flight(), 0);
    }

    #[test]
    fn client_hellos_in_flight_are_bounded() {
        let t0 = Instant::now();
        let mut t = Tracker::default();
        for i in 0..=MAX_HELLOS as u64 {
            t.on_event(hello_ev(i, 0, 0, &[22, 3, 1]), t0 + Duration::from_millis(i));
            assert!(t.hellos.len() <= MAX_HELLOS);
        }
        let evicted = (MAX_HELLOS / 16) as u64;
        assert_eq!(t.dropped.get("client_hellos"), evicted);
        assert!(!t.hellos.contains_key(&(evicted - 1)) && t.hellos.contains_key(&evicted));
        assert_eq!(t.hello_bytes, 3 * t.hellos.len());
        // more than the kernel ever sends for one: lost, and its bytes given back
        let big = vec![0u8; HELLO_MAX as usize];
        t.on_event(hello_ev(evicted, 3, 0, &big), t0);
        assert_eq!(
            hello(t.on_event(hello_ev(evicted, 3, HELLO_LAST as u8, &[]), t0)).offer,
            Err(Unread::Lost)
        );
        assert_eq!(t.hello_bytes, 3 * t.hellos.len());
    }
}
