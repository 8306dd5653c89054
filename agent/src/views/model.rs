//! The typed model between the agent and its views: what `top` and `report` read of the
//! agent's metrics at one moment, per process name and listening port, cumulative as the
//! counters are (snapshot.rs turns two into a window). It is filled from the agent's own
//! structures in process (`Figures::of`: the families and histograms the exporter renders,
//! not their text), or from a running agent's exposition, decoded once (`Figures::decode`).
//! Both go through `read!` below, the one table of which metric feeds which figure.
//!
//! Labels whose values are a closed set (role, result, who closed, a policy's outcome, what
//! a client offered to resume with and what it got, who ended a failed handshake and why,
//! what a failed client's ClientHello lacked, what a connection without TLS was) are decoded here, once, into the enums
//! the agent writes them from (`LabelValue`); the rest of the views match on those. A series
//! whose value this build does not know (an agent of another version) is skipped and counted
//! in `Figures::skipped`, never taken for a value it is not. Free-form labels (process name,
//! port, version, cipher, group, certificate, SNI, offers) stay strings.
use std::collections::{BTreeMap, BTreeSet, HashMap};

use anyhow::{bail, Result};
use prometheus_client::metrics::{counter::Counter, gauge::Gauge};

use super::{
    clients::Clients,
    failures::{ClientFailure, Failures},
};
use crate::{
    agent::no_probes::Method,
    bpf::{
        abi::hello_untls,
        conn::ClosedBy,
        handshake::{HandshakeResult, Role},
    },
    clients::{join::Answer, lacks::Lacks, policy::Outcome},
    cpu::Category,
    metrics::{
        defs::{self, Kind},
        histogram::{Histogram, HistogramValue},
        labels::*,
        text, FGauge, Metrics,
    },
    wire::{
        failure::{By, Failure, Reason},
        tls::hello::Resumption,
        tracker::Unread,
        AppProtocol, Negotiated,
    },
};

/// The agent's figures at one moment.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Figures {
    pub procs: BTreeMap<String, ProcFigures>,
    /// Sockets in TIME_WAIT now, by local port (a gauge).
    pub time_wait_sockets: BTreeMap<String, f64>,
    /// Scans of /proc the agent has completed: its clock for what it counts per scan.
    pub scans: f64,
    /// The sum of the counters that move while connections come and go (handshakes of
    /// either role and the failed ones' reasons, connections accepted, ended and without
    /// TLS, exchanges): the same at two moments when nothing happened between them.
    pub activity: f64,
    /// Labels of a closed set whose value this build does not know (an agent of another
    /// version): their series are skipped, not read as some other value.
    pub skipped: f64,
}

/// One process name's figures (its series of every metric the views read).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ProcFigures {
    /// How its handshakes' CPU is measured now: `probes`, `kernel_estimate`.
    pub cpu_methods: BTreeSet<Method>,
    /// TLS libraries it maps: (library, symbols).
    pub libraries: BTreeSet<(String, String)>,
    /// Server handshakes by result and negotiated configuration (with its transport).
    pub handshakes: BTreeMap<(HandshakeResult, Negotiated), f64>,
    /// Server handshakes timed (count), their summed CPU seconds (sum) and how they spread
    /// (buckets), by configuration.
    pub handshake_cpu: BTreeMap<Negotiated, HistogramValue>,
    pub process_cpu: f64,
    /// CPU seconds by category (handshake, crypto, tls_library, kernel_net, probes, other).
    pub cpu: BTreeMap<Category, f64>,
    pub ports: BTreeMap<String, PortFigures>,
    /// Connections whose ClientHello could not be read, by reason (unreadable, cut,
    /// malformed, lost).
    pub hellos_unread: BTreeMap<Unread, f64>,
    /// Handshakes of each role, every configuration summed: what the exit summary shows.
    pub roles: BTreeMap<Role, RoleFigures>,
    /// Its failed server handshakes by port and reason, the failing clients by port, site,
    /// reason and what they lacked, and its connections that never offered TLS by port and
    /// kind.
    pub failures: Failures,
}

/// One role's handshakes of a process, every configuration summed.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RoleFigures {
    /// Handshakes counted, by result.
    pub handshakes: BTreeMap<HandshakeResult, f64>,
    /// Successful handshakes the probes timed: their CPU seconds, and their wall-clock
    /// seconds from first call to last (count and sum of each).
    pub cpu: HistogramValue,
    pub wall: HistogramValue,
    /// CPU seconds of the failed handshakes the probes timed.
    pub failed_cpu: f64,
}

/// One listening port's figures.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PortFigures {
    /// Ended connections by who closed first.
    pub closed_by: BTreeMap<ClosedBy, f64>,
    /// TLS handshakes on its TCP connections by the application protocol they carry.
    pub protocols: BTreeMap<AppProtocol, f64>,
    /// QUIC connections whose handshake ended well on the UDP port of the same number
    /// (the `protocol="quic"` series, kept apart: the TCP figures are not theirs).
    pub quic: f64,
    pub exchanges: f64,
    pub time_wait: f64,
    /// Lifetime of the connections that ended, in seconds.
    pub lifetime: HistogramValue,
    /// Exchanges carried by the connections that ended.
    pub requests: HistogramValue,
    /// What its clients' ClientHellos said.
    pub clients: Clients,
}

/// A metric's value as the model takes it: a counter's or gauge's as f64, a histogram's
/// whole.
pub trait Value {
    type Out;
    fn value(&self) -> Self::Out;
}

impl Value for Counter {
    type Out = f64;
    fn value(&self) -> f64 {
        self.get() as f64
    }
}

impl Value for Counter<f64> {
    type Out = f64;
    fn value(&self) -> f64 {
        self.get()
    }
}

impl Value for Gauge {
    type Out = f64;
    fn value(&self) -> f64 {
        self.get() as f64
    }
}

impl Value for FGauge {
    type Out = f64;
    fn value(&self) -> f64 {
        self.get()
    }
}

impl Value for Histogram {
    type Out = HistogramValue;
    fn value(&self) -> HistogramValue {
        self.get()
    }
}

/// One series of an exposition, decoded: its labels (a histogram's without `le`) and its
/// value, or a histogram's values.
#[derive(Debug, Default)]
struct Series {
    labels: Labels,
    value: f64,
    histogram: HistogramValue,
}

impl Series {
    fn label(&self, key: &str) -> String {
        self.labels
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.clone())
            .unwrap_or_default()
    }
}

/// An exposition's labels: (name, value).
type Labels = Vec<(String, String)>;

/// A decoded series' value, as the model's method for its metric takes it.
trait FromSeries {
    fn from_series(s: &Series) -> Self;
}

impl FromSeries for f64 {
    fn from_series(s: &Series) -> f64 {
        s.value
    }
}

impl FromSeries for HistogramValue {
    fn from_series(s: &Series) -> HistogramValue {
        s.histogram.clone()
    }
}

/// What the views read of each metric: the field of `Metrics` that holds it and the method
/// of `Figures` that takes each of its series (its labels as the exporter's own label set,
/// and its value). In process the fields' series are walked; an exposition's series are
/// matched to the metric by name, here and nowhere else.
macro_rules! read {
    ($($def:ident: $field:ident => $method:ident),* $(,)?) => {
        impl Figures {
            /// The figures of the agent running in this process, from its own structures.
            pub fn of(m: &Metrics) -> Figures {
                let mut f = Figures::default();
                $( m.$field.each(|labels, metric| f.$method(labels, metric.value())); )*
                f
            }

            /// Gives a decoded series of the metric `spec` to the method that takes it.
            fn take(&mut self, spec: &defs::Spec, s: &Series) {
                $( if spec.name == defs::$def.name {
                    return match FromLabels::from_labels(|k| s.label(k)) {
                        Some(labels) => self.$method(&labels, FromSeries::from_series(s)),
                        None => self.skipped += 1.0,
                    };
                } )*
            }
        }
    };
}

read! {
    HANDSHAKES: handshakes => handshakes,
    HANDSHAKE_CPU: handshake_cpu => handshake_cpu,
    HANDSHAKE_DURATION: handshake_duration => handshake_wall,
    FAILED_HANDSHAKE_CPU: failed_handshake_cpu => failed_cpu,
    ATTACHED_PROCESSES: attached_processes => attached,
    HANDSHAKE_CPU_METHOD: handshake_cpu_method => cpu_method,
    TLS_LIBRARY_INFO: tls_library => library,
    PROCESS_CPU: process_cpu => process_cpu,
    CPU: cpu => cpu,
    TCP_CONNECTIONS_ACCEPTED: connections_accepted => accepted,
    TCP_CONNECTIONS: connections => closed,
    CONNECTION_PROTOCOLS: protocols => protocol,
    TCP_CONNECTION_DURATION: connection_duration => lifetime,
    EXCHANGES: exchanges => exchanges,
    TCP_TIME_WAIT: time_wait => time_wait,
    TCP_TIME_WAIT_SOCKETS: time_wait_sockets => time_wait_sockets,
    REQUESTS_PER_CONNECTION: requests_per_connection => requests,
    SCAN_DURATION: scan_duration => scan,
    CLIENT_HELLOS: client_hellos => client_hellos,
    CLIENT_OFFERS: client_offers => client_offers,
    CLIENT_POLICY_OUTCOMES: client_policy => client_policy,
    CLIENT_RESUMPTIONS: client_resumptions => client_resumptions,
    SITE_HANDSHAKE_CPU: site_handshake_cpu => site_cpu,
    CLIENT_HELLOS_UNREAD: client_hellos_unread => hellos_unread,
    HANDSHAKE_FAILURES: handshake_failures => failure,
    CLIENT_FAILURES: client_failures => client_failure,
    CONNECTIONS_WITHOUT_TLS: connections_without_tls => without_tls,
}

fn add(by: &mut BTreeMap<String, f64>, key: &str, v: f64) {
    *by.entry(key.into()).or_default() += v;
}

fn add2<K: Ord>(by: &mut BTreeMap<K, f64>, key: K, v: f64) {
    *by.entry(key).or_default() += v;
}

/// The methods `read!` names: each takes one series of its metric.
impl Figures {
    fn proc(&mut self, comm: &str) -> &mut ProcFigures {
        self.procs.entry(comm.into()).or_default()
    }

    fn port(&mut self, l: &PortLabels) -> &mut PortFigures {
        self.proc(&l.comm).ports.entry(l.port.clone()).or_default()
    }

    fn clients(&mut self, comm: &str, port: &str) -> &mut Clients {
        &mut self.proc(comm).ports.entry(port.into()).or_default().clients
    }

    /// A closed-set label's value decoded; None, counted in `skipped`, for one this build
    /// does not know.
    fn known<T>(&mut self, decoded: Option<T>) -> Option<T> {
        if decoded.is_none() {
            self.skipped += 1.0;
        }
        decoded
    }

    fn handshakes(&mut self, l: &HandshakeLabels, v: f64) {
        self.activity += v;
        let role = Role::parse(&l.role);
        let result = HandshakeResult::parse(&l.result);
        let (Some(role), Some(result)) = (self.known(role), self.known(result)) else {
            return;
        };
        let key = l.negotiated;
        let p = self.proc(&l.comm);
        add2(&mut p.roles.entry(role).or_default().handshakes, result, v);
        if role == Role::Server {
            add2(&mut p.handshakes, (result, key), v);
        }
    }

    fn handshake_cpu(&mut self, l: &ParamLabels, h: HistogramValue) {
        let Some(role) = self.known(Role::parse(&l.role)) else {
            return;
        };
        let key = l.negotiated;
        let p = self.proc(&l.comm);
        p.roles.entry(role).or_default().cpu.add(&h);
        if role == Role::Server {
            p.handshake_cpu.entry(key).or_default().add(&h);
        }
    }

    fn handshake_wall(&mut self, l: &ParamLabels, h: HistogramValue) {
        let Some(role) = self.known(Role::parse(&l.role)) else {
            return;
        };
        self.proc(&l.comm).roles.entry(role).or_default().wall.add(&h);
    }

    fn failed_cpu(&mut self, l: &RoleLabels, v: f64) {
        let Some(role) = self.known(Role::parse(&l.role)) else {
            return;
        };
        self.proc(&l.comm).roles.entry(role).or_default().failed_cpu += v;
    }

    /// A process name attached shows before it does anything.
    fn attached(&mut self, l: &CommLabels, _: f64) {
        self.proc(&l.comm);
    }

    fn cpu_method(&mut self, l: &MethodLabels, v: f64) {
        let Some(method) = self.known(Method::parse(&l.method)) else {
            return;
        };
        let p = self.proc(&l.comm);
        if v > 0.0 {
            p.cpu_methods.insert(method);
        }
    }

    fn library(&mut self, l: &LibraryLabels, _: f64) {
        self.proc(&l.comm)
            .libraries
            .insert((l.library.clone(), l.symbols.clone()));
    }

    fn process_cpu(&mut self, l: &CommLabels, v: f64) {
        self.proc(&l.comm).process_cpu += v;
    }

    fn cpu(&mut self, l: &CategoryLabels, v: f64) {
        let Some(category) = self.known(Category::parse(&l.category)) else {
            return;
        };
        add2(&mut self.proc(&l.comm).cpu, category, v);
    }

    /// Connections accepted on a port (the port shows); only their activity is read.
    fn accepted(&mut self, l: &PortLabels, v: f64) {
        self.activity += v;
        self.port(l);
    }

    fn closed(&mut self, l: &ClosedByLabels, v: f64) {
        self.activity += v;
        let Some(by) = self.known(ClosedBy::parse(&l.closed_by)) else {
            return;
        };
        let port = PortLabels {
            comm: l.comm.clone(),
            port: l.port.clone(),
        };
        add2(&mut self.port(&port).closed_by, by, v);
    }

    fn protocol(&mut self, l: &ProtocolLabels, v: f64) {
        let port = PortLabels {
            comm: l.comm.clone(),
            port: l.port.clone(),
        };
        let Some(protocol) = self.known(AppProtocol::parse(&l.protocol)) else {
            return;
        };
        let p = self.port(&port);
        if protocol == AppProtocol::Quic {
            p.quic += v;
        } else {
            add2(&mut p.protocols, protocol, v);
        }
    }

    fn lifetime(&mut self, l: &PortLabels, h: HistogramValue) {
        self.port(l).lifetime = h;
    }

    fn exchanges(&mut self, l: &PortLabels, v: f64) {
        self.activity += v;
        self.port(l).exchanges += v;
    }

    fn time_wait(&mut self, l: &PortLabels, v: f64) {
        self.port(l).time_wait += v;
    }

    fn time_wait_sockets(&mut self, l: &OnlyPortLabels, v: f64) {
        *self.time_wait_sockets.entry(l.port.clone()).or_default() += v;
    }

    fn requests(&mut self, l: &PortLabels, h: HistogramValue) {
        self.port(l).requests = h;
    }

    fn client_hellos(&mut self, l: &SniLabels, v: f64) {
        add(&mut self.clients(&l.comm, &l.port).hellos, &l.sni, v);
    }

    fn client_offers(&mut self, l: &OfferLabels, v: f64) {
        let key = (l.offer.clone(), l.value.clone());
        add2(&mut self.clients(&l.comm, &l.port).offers, key, v);
    }

    fn client_policy(&mut self, l: &PolicyLabels, v: f64) {
        let Some(outcome) = self.known(Outcome::parse(&l.outcome)) else {
            return;
        };
        add2(
            &mut self.clients(&l.comm, &l.port).policy,
            (l.policy.clone(), outcome),
            v,
        );
    }

    fn client_resumptions(&mut self, l: &ResumptionLabels, v: f64) {
        let (offered, answer) = (Resumption::parse(&l.offered), Answer::parse(&l.result));
        let (Some(offered), Some(answer)) = (self.known(offered), self.known(answer)) else {
            return;
        };
        add2(&mut self.clients(&l.comm, &l.port).resumptions, (offered, answer), v);
    }

    fn site_cpu(&mut self, l: &SniLabels, v: f64) {
        add(&mut self.clients(&l.comm, &l.port).site_cpu, &l.sni, v);
    }

    fn hellos_unread(&mut self, l: &ReasonLabels, v: f64) {
        let Some(why) = self.known(Unread::parse(&l.reason)) else {
            return;
        };
        add2(&mut self.proc(&l.comm).hellos_unread, why, v);
    }

    /// A failed handshake moves its result's series too; counted in the activity all the
    /// same, its reason coming with it.
    fn failure(&mut self, l: &FailureLabels, v: f64) {
        self.activity += v;
        let (by, reason) = (By::parse(&l.by), Reason::parse(&l.reason));
        let (Some(by), Some(reason)) = (self.known(by), self.known(reason)) else {
            return;
        };
        let key = (l.port.clone(), Failure::new(by, reason));
        add2(&mut self.proc(&l.comm).failures.handshakes, key, v);
    }

    /// A failed handshake's ClientHello: its failure is in the activity already.
    fn client_failure(&mut self, l: &ClientFailureLabels, v: f64) {
        let (reason, lacks) = (Reason::parse(&l.reason), Lacks::parse(&l.lacks));
        let (Some(reason), Some(lacks)) = (self.known(reason), self.known(lacks)) else {
            return;
        };
        let key = ClientFailure {
            port: l.port.clone(),
            sni: l.sni.clone(),
            reason,
            lacks,
        };
        add2(&mut self.proc(&l.comm).failures.clients, key, v);
    }

    /// Connections without TLS are counted at the agent's scans, after they ended: in the
    /// activity, so that a window waits for them.
    fn without_tls(&mut self, l: &KindPortLabels, v: f64) {
        self.activity += v;
        let Some(kind) = self.known(hello_untls::parse(&l.kind)) else {
            return;
        };
        let key = (l.port.clone(), kind);
        add2(&mut self.proc(&l.comm).failures.without_tls, key, v);
    }

    fn scan(&mut self, l: &ScanLabels, h: HistogramValue) {
        if l.scan == "processes" {
            self.scans += h.count;
        }
    }
}

impl Figures {
    /// The figures of an exposition (Prometheus text format or OpenMetrics), read once:
    /// each sample to its metric by name, a histogram's samples gathered into one series.
    pub fn decode(exposition: &str) -> Result<Figures> {
        let mut series: Vec<(&'static defs::Spec, Series)> = Vec::new();
        // A histogram's series by metric and labels, at its index in `series`.
        let mut histograms: HashMap<(&'static str, Labels), usize> = HashMap::new();
        let mut metrics = 0;
        for s in text::parse(exposition)? {
            let Some(spec) = defs::of_sample(&s.name) else { continue };
            metrics += 1;
            // A value that is no number (NaN, or an infinite count) counts nothing: the
            // figures are sums and differences, which it would make no number either.
            if !s.value.is_finite() {
                continue;
            }
            if spec.kind != Kind::Histogram {
                series.push((
                    spec,
                    Series {
                        labels: s.labels,
                        value: s.value,
                        ..Default::default()
                    },
                ));
                continue;
            }
            let le = s.labels.iter().find(|(k, _)| k == "le").map(|(_, v)| v.clone());
            let labels: Vec<_> = s.labels.into_iter().filter(|(k, _)| k != "le").collect();
            let at = *histograms.entry((spec.name, labels.clone())).or_insert_with(|| {
                series.push((
                    spec,
                    Series {
                        labels,
                        ..Default::default()
                    },
                ));
                series.len() - 1
            });
            let h = &mut series[at].1.histogram;
            if s.name == spec.series("sum") {
                h.sum = s.value;
            } else if s.name == spec.series("count") {
                h.count = s.value;
            } else {
                let le = le.as_deref().map_or(Ok(f64::INFINITY), text::parse_value)?;
                h.buckets.push((le, s.value));
            }
        }
        if metrics == 0 {
            bail!("no tlsprof metrics in it");
        }
        let mut f = Figures::default();
        for (spec, mut s) in series {
            s.histogram.buckets.sort_by(|x, y| x.0.total_cmp(&y.0));
            f.take(spec, &s);
        }
        Ok(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Metrics with a series of every metric the views read, some twice.
    pub fn busy_metrics() -> Metrics {
        let m = Metrics::new();
        let n = crate::wire::Negotiated::UNKNOWN;
        for (comm, k) in [("nginx", 1), ("we ird, x", 3)] {
            let p = ParamLabels::new(comm, Role::Server, n);
            m.handshakes
                .get_or_create(&p.with_result(HandshakeResult::Ok))
                .inc_by(10 * k);
            m.handshakes
                .get_or_create(&p.with_result(HandshakeResult::Failed))
                .inc_by(k);
            m.handshakes
                .get_or_create(&ParamLabels::new(comm, Role::Client, n).with_result(HandshakeResult::Ok))
                .inc_by(7);
            m.handshake_cpu.get_or_create(&p).observe(0.001 * k as f64);
            m.handshake_cpu.get_or_create(&p).observe(0.0025);
            let c = CommLabels { comm: comm.into() };
            m.attached_processes.get_or_create(&c).set(2);
            m.process_cpu.get_or_create(&c).inc_by(1.25);
            m.cpu
                .get_or_create(&CategoryLabels {
                    comm: comm.into(),
                    category: "handshake".into(),
                })
                .inc_by(0.5);
            m.tls_library
                .get_or_create(&LibraryLabels {
                    comm: comm.into(),
                    library: "libssl.so.3".into(),
                    symbols: "full".into(),
                })
                .set(1);
            let port = PortLabels {
                comm: comm.into(),
                port: "443".into(),
            };
            for r in [5.0, 5.0, 2.0] {
                m.requests_per_connection.get_or_create(&port).observe(r);
            }
            m.connection_duration.get_or_create(&port).observe(0.3);
            m.exchanges.get_or_create(&port).inc_by(12);
            m.time_wait.get_or_create(&port).inc_by(3);
            m.connections
                .get_or_create(&ClosedByLabels {
                    comm: comm.into(),
                    port: "443".into(),
                    closed_by: "server".into(),
                })
                .inc_by(3);
            for sni in ["www.example.com", "none"] {
                let l = SniLabels {
                    comm: comm.into(),
                    port: "443".into(),
                    sni: sni.into(),
                };
                m.client_hellos.get_or_create(&l).inc_by(5 * k);
                m.site_handshake_cpu.get_or_create(&l).inc_by(0.125 * k as f64);
            }
            for (offer, value, n) in [("version", "TLSv1.3", 8), ("version", "TLSv1.2", 2), ("alpn", "h2", 9)] {
                m.client_offers
                    .get_or_create(&OfferLabels {
                        comm: comm.into(),
                        port: "443".into(),
                        offer: offer.into(),
                        value: value.into(),
                    })
                    .inc_by(n * k);
            }
            for (policy, outcome, n) in [("tls13_only", "fail", 2), ("tls13_only", "negotiate", 8)] {
                m.client_policy
                    .get_or_create(&PolicyLabels {
                        comm: comm.into(),
                        port: "443".into(),
                        policy: policy.into(),
                        outcome: outcome.into(),
                    })
                    .inc_by(n * k);
            }
            for (offered, result, n) in [("psk", "full", 3), ("psk", "resumed", 1), ("ticket", "full", 1)] {
                m.client_resumptions
                    .get_or_create(&ResumptionLabels {
                        comm: comm.into(),
                        port: "443".into(),
                        offered: offered.into(),
                        result: result.into(),
                    })
                    .inc_by(n * k);
            }
            m.client_hellos_unread
                .get_or_create(&ReasonLabels {
                    comm: comm.into(),
                    reason: "cut".into(),
                })
                .inc_by(k);
            for (port, by, reason, n) in [
                ("443", "server", "protocol_version", 4),
                ("443", "client", "unknown_ca", 2),
                ("8443", "server", "protocol_version", 1),
                ("other", "server", "library_error", 1),
            ] {
                m.handshake_failures
                    .get_or_create(&FailureLabels {
                        comm: comm.into(),
                        port: port.into(),
                        by: by.into(),
                        reason: reason.into(),
                    })
                    .inc_by(n * k);
            }
            for (sni, reason, lacks, n) in [
                ("www.example.com", "protocol_version", "version", 3),
                ("none", "protocol_version", "version", 1),
                ("www.example.com", "unknown_ca", "none", 2),
            ] {
                m.client_failures
                    .get_or_create(&ClientFailureLabels {
                        comm: comm.into(),
                        port: "443".into(),
                        sni: sni.into(),
                        reason: reason.into(),
                        lacks: lacks.into(),
                    })
                    .inc_by(n * k);
            }
            for (kind, n) in [("silent", 5), ("http", 2)] {
                m.connections_without_tls
                    .get_or_create(&KindPortLabels {
                        comm: comm.into(),
                        port: "443".into(),
                        kind: kind.into(),
                    })
                    .inc_by(n * k);
            }
        }
        m.handshake_cpu_method
            .get_or_create(&MethodLabels {
                comm: "nginx".into(),
                method: "probes".into(),
                reason: "".into(),
            })
            .set(1);
        m.time_wait_sockets
            .get_or_create(&OnlyPortLabels { port: "443".into() })
            .set(4);
        m.scan_duration
            .get_or_create(&ScanLabels {
                scan: "processes".into(),
            })
            .observe(0.01);
        m
    }

    /// The two ways into the model agree: the agent's structures read in process, and
    /// their exposition decoded, in either format.
    #[test]
    fn in_process_and_decoded_figures_agree() {
        let m = busy_metrics();
        let f = Figures::of(&m);
        assert_eq!(Figures::decode(&m.render_text()).unwrap(), f);
        assert_eq!(Figures::decode(&m.render_openmetrics()).unwrap(), f);
        let p = &f.procs["nginx"];
        assert_eq!(p.handshakes.values().sum::<f64>(), 11.0, "server handshakes only");
        let cpu = p.handshake_cpu.values().next().unwrap();
        assert_eq!(cpu.count, 2.0);
        assert!((cpu.sum - 0.0035).abs() < 1e-12);
        assert!(cpu.buckets.contains(&(2.5e-3, 2.0)), "{cpu:?}");
        assert!(p.cpu_methods.contains(&Method::Probes));
        let port = &p.ports["443"];
        assert_eq!((port.requests.sum, port.requests.count), (12.0, 3.0));
        assert!(port.requests.buckets.contains(&(5.0, 3.0)));
        assert_eq!(port.requests.buckets.last(), Some(&(f64::INFINITY, 3.0)));
        assert_eq!(f.time_wait_sockets["443"], 4.0);
        assert_eq!(f.scans, 1.0);
        // handshakes of both roles (11 + 7, 33 + 7), accepted (none), ended, exchanges,
        // the failures' reasons (8, 24), connections without TLS (7, 21)
        assert_eq!(f.activity, 18.0 + 40.0 + 3.0 * 2.0 + 12.0 * 2.0 + 32.0 + 28.0);
        assert!(f.procs.contains_key("we ird, x"));
        // the client figures, per port
        let c = &port.clients;
        assert_eq!(c.hellos.values().sum::<f64>(), 10.0);
        assert_eq!(c.offers[&("alpn".into(), "h2".into())], 9.0);
        assert_eq!(c.policy[&("tls13_only".into(), Outcome::Fail)], 2.0);
        assert_eq!(c.resumptions[&(Resumption::Psk, Answer::Full)], 3.0);
        assert_eq!(c.site_cpu["www.example.com"], 0.125);
        assert_eq!(p.hellos_unread[&Unread::Cut], 1.0);
        let w = &f.procs["we ird, x"].ports["443"].clients;
        assert_eq!(w.resumptions[&(Resumption::Ticket, Answer::Full)], 3.0);
        // the failures by port and reason, their enums; connections without TLS by kind
        let pv = Failure::new(By::Server, Reason::ProtocolVersion);
        assert_eq!(p.failures.handshakes[&("443".into(), pv)], 4.0);
        assert_eq!(p.failures.by_failure()[0], (pv, 5.0));
        let lib = Failure::new(By::Server, Reason::LibraryError);
        assert_eq!(p.failures.handshakes[&("other".into(), lib)], 1.0);
        assert!(
            !p.ports.contains_key("other"),
            "no connection, no port: {:?}",
            p.ports.keys()
        );
        assert_eq!(
            p.failures.by_kind(),
            [(hello_untls::Silent, 5.0), (hello_untls::Http, 2.0)]
        );
        assert_eq!(f.procs["we ird, x"].failures.failed(), 24.0);
        // the failing clients by site, reason and what they lacked, the latter two enums
        let old = p.failures.client_groups("443", &[Reason::ProtocolVersion], true);
        assert_eq!((old.len(), old[0].lacks, old[0].failed), (1, Some(Lacks::Version), 4.0));
        assert_eq!(old[0].sites, [("www.example.com", 3.0), ("none", 1.0)]);
    }

    /// A closed-set label's value this build does not write is skipped and counted, not
    /// read as another: a handshake of an unknown result counts neither as ok nor failed.
    #[test]
    fn unknown_label_values_are_skipped_and_counted() {
        let f = Figures::decode(concat!(
            "tlsprof_tcp_connections_total{comm=\"nginx\",port=\"443\",closed_by=\"sideways\"} 3\n",
            "tlsprof_tcp_connections_total{comm=\"nginx\",port=\"443\",closed_by=\"reset\"} 2\n",
            "tlsprof_handshakes_total{comm=\"nginx\",role=\"server\",result=\"maybe\",version=\"other\",",
            "cipher=\"other\",group=\"other\",cert=\"other\",resumed=\"false\",transport=\"tcp\"} 4\n",
            "tlsprof_handshake_failures_total{comm=\"nginx\",port=\"443\",by=\"server\",reason=\"moon_phase\"} 5\n",
            "tlsprof_handshake_failures_total{comm=\"nginx\",port=\"443\",by=\"both\",reason=\"closed\"} 1\n",
            "tlsprof_handshake_failures_total{comm=\"nginx\",port=\"443\",by=\"client\",reason=\"reset\"} 6\n",
            "tlsprof_connections_without_tls_total{comm=\"nginx\",port=\"443\",kind=\"gopher\"} 7\n",
            "tlsprof_client_failures_total{comm=\"nginx\",port=\"443\",sni=\"none\",reason=\"unknown_ca\",lacks=\"spirit\"} 2\n",
            "tlsprof_client_failures_total{comm=\"nginx\",port=\"443\",sni=\"none\",reason=\"moon_phase\",lacks=\"none\"} 2\n",
            "tlsprof_client_failures_total{comm=\"nginx\",port=\"443\",sni=\"a\",reason=\"reset\",lacks=\"none\"} 3\n",
            // a ClientHello came: a failed handshake, never this metric's kind
            "tlsprof_connections_without_tls_total{comm=\"nginx\",port=\"443\",kind=\"client_hello\"} 1\n",
        ))
        .unwrap();
        assert_eq!(f.skipped, 8.0);
        let p = &f.procs["nginx"];
        assert_eq!(p.ports["443"].closed_by, BTreeMap::from([(ClosedBy::Reset, 2.0)]));
        assert!(p.handshakes.is_empty() && p.roles.is_empty(), "{p:?}");
        let reset = Failure::new(By::Client, Reason::Reset);
        assert_eq!(p.failures.handshakes, BTreeMap::from([(("443".into(), reset), 6.0)]));
        assert!(p.failures.without_tls.is_empty(), "{p:?}");
        let clients: Vec<_> = p
            .failures
            .clients
            .iter()
            .map(|(c, n)| (c.reason, c.lacks, *n))
            .collect();
        assert_eq!(clients, [(Reason::Reset, Lacks::Nothing, 3.0)]);
        assert_eq!(f.activity, 9.0 + 12.0 + 8.0, "activity counts whatever the labels");
    }

    #[test]
    fn decodes_only_tlsprof_metrics() {
        assert!(Figures::decode("go_goroutines 8\n")
            .unwrap_err()
            .to_string()
            .contains("no tlsprof metrics"));
        assert!(Figures::decode("tlsprof_x{a=\"1} 3\n").is_err());
        assert_eq!(
            Figures::decode("tlsprof_attached_probes 3\n").unwrap(),
            Figures::default()
        );
    }
}
