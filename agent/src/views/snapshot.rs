//! Two readings of the agent's figures (model.rs) turned into what happened between them,
//! per process name: the window `top` and `report` show.
use std::{
    collections::{BTreeMap, BTreeSet},
    time::Instant,
};

use anyhow::Result;

pub use super::{
    clients::{Clients, PolicyCount},
    failures::Failures,
};
use super::{
    model::{Figures, PortFigures, ProcFigures},
    reading::Reading,
    remote::Source,
};
use crate::{
    agent::no_probes::Method,
    bpf::{conn::ClosedBy, handshake::HandshakeResult},
    cpu::Category,
    wire::{tracker::Unread, AppProtocol, Negotiated, Transport},
};

/// The agent's figures at one moment.
#[derive(Debug, Clone)]
pub struct Snapshot {
    pub at: Instant,
    pub figures: Figures,
}

impl Snapshot {
    pub fn take(source: &Source) -> Result<Self> {
        Ok(Snapshot {
            at: Instant::now(),
            figures: source.fetch()?,
        })
    }

    /// The sum of the counters that move while connections come and go: the same in two
    /// snapshots when nothing happened between them.
    pub fn activity(&self) -> f64 {
        self.figures.activity
    }

    /// How many scans of /proc the agent had completed: its clock for what it counts per
    /// scan.
    pub fn scans(&self) -> f64 {
        self.figures.scans
    }
}

/// Handshakes of one negotiated configuration (server role) in a window.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Config {
    pub negotiated: Negotiated,
    /// Successful handshakes that negotiated it (tlsprof_handshakes_total: every one, in
    /// every mode): the figure rates and shares come from.
    pub handshakes: f64,
    /// Of them, those with a CPU measurement (all with --exact; in the default mode those
    /// in the overhead budget's windows), and their summed CPU seconds: the figure costs
    /// come from.
    pub timed: f64,
    pub cpu: f64,
    /// How the timed handshakes' CPU spread: (upper bound in seconds, handshakes at or
    /// below it), the last bound +Inf.
    pub cpu_buckets: Vec<(f64, f64)>,
}

impl Config {
    /// Handshakes whose negotiated parameters tlsprof did not see (all labels `other`:
    /// begun before it attached, or not on a watched connection).
    pub fn unlabelled(&self) -> bool {
        self.negotiated.unlabelled()
    }

    pub fn mean_cpu(&self) -> Option<f64> {
        (self.timed > 0.0).then(|| self.cpu / self.timed)
    }

    /// Its handshakes went over QUIC: no TCP connection, no TIME_WAIT, no keep-alive.
    pub fn over_quic(&self) -> bool {
        self.negotiated.transport == Transport::Quic
    }
}

/// The transports a window's handshakes are shown by, in this order: TCP, QUIC, and the
/// handshakes whose connection was not seen.
pub const TRANSPORTS: [Transport; 3] = [Transport::Tcp, Transport::Quic, Transport::Other];

/// One transport's successful handshakes in a window (the sum of its configurations).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ByTransport {
    pub transport: Transport,
    pub handshakes: f64,
    /// Of them, those timed, and their summed CPU seconds.
    pub timed: f64,
    pub cpu: f64,
}

impl ByTransport {
    pub fn mean_cpu(&self) -> Option<f64> {
        (self.timed > 0.0).then(|| self.cpu / self.timed)
    }
}

/// Connections of one listening port in a window.
#[derive(Debug, Clone, Default)]
pub struct Port {
    /// Ended connections by who closed first.
    pub closed_by: BTreeMap<ClosedBy, f64>,
    pub time_wait: f64,
    /// Sockets in TIME_WAIT at the end of the window (a gauge).
    pub time_wait_sockets: f64,
    /// Exchanges carried by the connections that ended in the window, and those ended.
    pub requests: f64,
    pub ended: f64,
    /// Exchanges as they happened in the window (tlsprof_exchanges_total), open
    /// connections' included.
    pub exchanges: f64,
    /// Ended connections by requests carried: (upper bound, cumulative count).
    pub request_buckets: Vec<(f64, f64)>,
    /// TLS handshakes on its TCP connections by the application protocol: the plaintext
    /// preamble's (smtp, imap, postgresql...), else the one the server chose (h2, http/1.1,
    /// other, none, encrypted).
    pub protocols: BTreeMap<AppProtocol, f64>,
    /// QUIC connections on the UDP port of the same number whose handshake ended well: none
    /// of the other figures (all TCP's) counts them.
    pub quic: f64,
    /// Summed lifetime of the connections that ended, in seconds, and their number.
    pub lifetime_sum: f64,
    pub lifetime_count: f64,
    /// What the port's ClientHellos said in the window.
    pub clients: Clients,
}

/// The protocol most of these TLS connections were named by (`protocol` label: count),
/// those that name none aside; None when none was named.
pub fn named_protocol(protocols: &BTreeMap<AppProtocol, f64>) -> Option<AppProtocol> {
    protocols
        .iter()
        .filter(|(k, n)| **n > 0.0 && k.named())
        .max_by(|a, b| a.1.total_cmp(b.1))
        .map(|(k, _)| *k)
}

impl Port {
    /// What its TLS connections carry, for the views: the protocol of the plaintext preamble
    /// before TLS (smtp, imap, pop3, ldap, xmpp, ftp, nntp, postgresql, mysql; starttls: one
    /// tlsprof does not name), else the one the server chose by ALPN (h2, http/1.1), else `tls`
    /// (TLS from the first byte, its application protocol not shown: TLS 1.3 encrypts the
    /// server's choice, or it chose none); `quic` on a port that served QUIC alone; `-` while
    /// no TLS connection was seen.
    pub fn protocol_name(&self) -> &'static str {
        match named_protocol(&self.protocols) {
            Some(AppProtocol::StarttlsOther) => "starttls",
            Some(p) => p.label(),
            None if self.protocols.values().any(|n| *n > 0.0) => "tls",
            None if self.quic > 0.0 => AppProtocol::Quic.label(),
            None => "-",
        }
    }

    pub fn requests_per_connection(&self) -> Option<f64> {
        (self.ended > 0.0).then(|| self.requests / self.ended)
    }
    /// Share of the TLS connections whose ServerHello chose HTTP/2 (0 when none showed its
    /// choice): where exchanges do not stand for requests.
    pub fn h2_share(&self) -> f64 {
        let all: f64 = self.protocols.values().sum();
        if all > 0.0 {
            self.protocols.get(&AppProtocol::H2).copied().unwrap_or(0.0) / all
        } else {
            0.0
        }
    }
    /// The share of its TCP connections' ClientHellos that offered h2. The port's ClientHellos
    /// are read from its QUIC connections too (one each), which offer h3, never h2: they
    /// are left out, so that HTTP/3 clients do not hide HTTP/2 ones.
    pub fn tcp_h2_offered_share(&self) -> f64 {
        let h2 = self.clients.offered("alpn", "h2");
        let tcp = (self.clients.seen() - self.quic).max(h2);
        if tcp > 0.0 {
            h2 / tcp
        } else {
            0.0
        }
    }
    /// Most of its connections are HTTP/2: many requests go in one exchange.
    pub fn multiplexed(&self) -> bool {
        self.h2_share() >= 0.5
    }
    /// Mean lifetime of the connections that ended, in seconds.
    pub fn mean_lifetime(&self) -> Option<f64> {
        (self.lifetime_count > 0.0).then(|| self.lifetime_sum / self.lifetime_count)
    }
    /// Share of the TLS connections whose protocol choice the ServerHello hides (TLS 1.3
    /// encrypts it).
    pub fn hidden_protocol_share(&self) -> f64 {
        let all: f64 = self.protocols.values().sum();
        if all > 0.0 {
            self.protocols.get(&AppProtocol::Encrypted).copied().unwrap_or(0.0) / all
        } else {
            0.0
        }
    }
    pub fn closed(&self) -> f64 {
        self.closed_by.values().sum::<f64>() + 0.0 // an empty sum is -0.0
    }
    pub fn closed_share(&self, by: ClosedBy) -> f64 {
        let all = self.closed();
        if all > 0.0 {
            self.closed_by.get(&by).copied().unwrap_or(0.0) / all
        } else {
            0.0
        }
    }
    /// The request count k (1..=10) that at least `share` of the ended connections
    /// carried exactly, from the one-wide buckets.
    pub fn common_request_count(&self, share: f64) -> Option<(u32, f64)> {
        if self.ended <= 0.0 {
            return None;
        }
        let cum = |le: f64| {
            self.request_buckets
                .iter()
                .find(|(b, _)| (*b - le).abs() < 1e-9)
                .map(|(_, c)| *c)
        };
        (1..=10u32).find_map(|k| {
            let n = cum(k as f64)? - cum(k as f64 - 1.0)?;
            (n / self.ended >= share).then_some((k, n / self.ended))
        })
    }
}

/// The CPU categories that are TLS's part of a process's work.
pub const TLS_CATEGORIES: [Category; 3] = [Category::Handshake, Category::Crypto, Category::TlsLibrary];

/// One process name over a window: counts (not rates) of what happened in it.
#[derive(Debug, Clone, Default)]
pub struct Proc {
    pub comm: String,
    pub full: f64,
    pub resumed: f64,
    pub failed: f64,
    pub process_cpu: f64,
    /// CPU seconds by category (handshake, crypto, tls_library, kernel_net, probes, other).
    pub cpu: BTreeMap<Category, f64>,
    pub configs: Vec<Config>,
    pub ports: BTreeMap<String, Port>,
    /// TLS libraries the process maps: (library, symbols).
    pub libraries: BTreeSet<(String, String)>,
    /// How its handshakes' CPU is measured now (tlsprof_handshake_cpu_method_info):
    /// `probes`, `kernel_estimate`.
    pub cpu_methods: BTreeSet<Method>,
    /// Connections whose ClientHello could not be read, by reason.
    pub hellos_unread: BTreeMap<Unread, f64>,
    /// Its failed server handshakes by port and reason (of the `failed` ones), and its
    /// connections that never offered TLS by port and kind (none of the handshakes).
    pub failures: Failures,
}

impl Proc {
    /// The ClientHellos of all its ports in the window.
    pub fn clients(&self) -> Clients {
        let mut c = Clients::default();
        for p in self.ports.values() {
            c.add(&p.clients);
        }
        c
    }
    pub fn handshakes(&self) -> f64 {
        self.full + self.resumed
    }
    /// Its successful handshakes by transport (TRANSPORTS' order), those with none left out.
    pub fn transports(&self) -> Vec<ByTransport> {
        TRANSPORTS
            .iter()
            .map(|&transport| ByTransport {
                transport,
                handshakes: self.count(|c| c.negotiated.transport == transport),
                timed: self.timed(|c| c.negotiated.transport == transport),
                cpu: self
                    .configs
                    .iter()
                    .filter(|c| c.negotiated.transport == transport)
                    .map(|c| c.cpu)
                    .sum::<f64>()
                    + 0.0,
            })
            .filter(|t| t.handshakes > 0.0 || t.timed > 0.0)
            .collect()
    }
    /// The share of its successful handshakes that went over QUIC: the share of its clients
    /// on HTTP/3 (None without a handshake).
    pub fn quic_share(&self) -> Option<f64> {
        let all = self.count(|_| true);
        (all > 0.0).then(|| self.count(Config::over_quic) / all)
    }
    /// It served QUIC in the window.
    pub fn serves_quic(&self) -> bool {
        self.count(Config::over_quic) > 0.0
    }
    pub fn cpu_in(&self, category: Category) -> f64 {
        self.cpu.get(&category).copied().unwrap_or(0.0)
    }
    /// The share of the process's CPU in a category (0 when no CPU was seen).
    pub fn share(&self, category: Category) -> f64 {
        let all: f64 = self.cpu.values().sum();
        if all > 0.0 {
            self.cpu_in(category) / all
        } else {
            0.0
        }
    }
    /// Mean CPU per handshake over the timed handshakes of the configurations that match.
    pub fn mean_cpu(&self, keep: impl Fn(&Config) -> bool) -> Option<f64> {
        let (n, s) = self
            .configs
            .iter()
            .filter(|c| keep(c))
            .fold((0.0, 0.0), |(n, s), c| (n + c.timed, s + c.cpu));
        (n > 0.0).then(|| s / n)
    }
    /// Successful handshakes of the configurations that match: every one (rates, shares).
    pub fn count(&self, keep: impl Fn(&Config) -> bool) -> f64 {
        self.configs
            .iter()
            .filter(|c| keep(c))
            .map(|c| c.handshakes)
            .sum::<f64>()
            + 0.0
        // an empty sum is -0.0
    }
    /// Of them, the timed ones: how much a mean cost rests on.
    pub fn timed(&self, keep: impl Fn(&Config) -> bool) -> f64 {
        self.configs.iter().filter(|c| keep(c)).map(|c| c.timed).sum::<f64>() + 0.0
        // an empty sum is -0.0
    }
    pub fn time_wait(&self) -> f64 {
        self.ports.values().map(|p| p.time_wait).sum::<f64>() + 0.0 // an empty sum is -0.0
    }
    pub fn requests(&self) -> f64 {
        self.ports.values().map(|p| p.requests).sum::<f64>() + 0.0 // an empty sum is -0.0
    }
    pub fn ended(&self) -> f64 {
        self.ports.values().map(|p| p.ended).sum::<f64>() + 0.0 // an empty sum is -0.0
    }
    /// Exchanges on all its ports in the window, as they happened.
    pub fn exchanges(&self) -> f64 {
        self.ports.values().map(|p| p.exchanges).sum::<f64>() + 0.0 // an empty sum is -0.0
    }
    /// The process's CPU seconds in TLS: handshakes, record crypto and the rest of the TLS
    /// library, by the sampled split of its exact CPU time.
    pub fn tls_cpu(&self) -> f64 {
        self.process_cpu * TLS_CATEGORIES.iter().map(|c| self.share(*c)).sum::<f64>()
    }
    /// CPU seconds per exchange, and of it in TLS (None without an exchange). Exchanges are
    /// counted on TCP connections only: a process that served some of its handshakes over
    /// QUIC (at most QUIC_MINOR of them) has its CPU taken in the TCP connections' part,
    /// a QUIC connection costing what a TCP one does; one that served more has none, its
    /// CPU over the TCP exchanges alone overstating each.
    pub fn cost_per_exchange(&self) -> Option<(f64, f64)> {
        let n = self.exchanges();
        let quic = self.quic_share().unwrap_or(0.0);
        let tcp = 1.0 - quic;
        (n > 0.0 && quic <= QUIC_MINOR).then(|| (self.process_cpu * tcp / n, self.tls_cpu() * tcp / n))
    }
}

/// The largest share of a process's handshakes over QUIC with which its CPU per exchange is
/// still given (cost_per_exchange): off by at most this share of how much dearer a QUIC
/// connection is than a TCP one.
pub const QUIC_MINOR: f64 = 0.05;

/// What happened between two snapshots, per process name.
#[derive(Debug, Clone, Default)]
pub struct Window {
    pub seconds: f64,
    pub procs: Vec<Proc>,
}

/// Keeps a process name when the filter is empty or names it.
pub fn wanted(comms: &[String], comm: &str) -> bool {
    comms.is_empty() || comms.iter().any(|c| c == comm)
}

/// The configuration a handshake series names, in a process's table.
fn config<'a>(configs: &'a mut BTreeMap<Negotiated, Config>, key: &Negotiated) -> &'a mut Config {
    configs.entry(*key).or_insert_with(|| Config {
        negotiated: *key,
        ..Default::default()
    })
}

impl Proc {
    /// What one process name did between two readings of its figures.
    fn between(comm: &str, a: Option<&ProcFigures>, b: &ProcFigures, tw_sockets: &BTreeMap<String, f64>) -> Proc {
        let mut p = Proc {
            comm: comm.to_string(),
            cpu_methods: b.cpu_methods.clone(),
            libraries: b.libraries.clone(),
            process_cpu: b.process_cpu.since_opt(a.map(|a| &a.process_cpu)),
            cpu: b.cpu.since_opt(a.map(|a| &a.cpu)),
            hellos_unread: b.hellos_unread.since_opt(a.map(|a| &a.hellos_unread)),
            failures: b.failures.since_opt(a.map(|a| &a.failures)),
            ..Default::default()
        };
        let mut configs = BTreeMap::new();
        for ((result, cfg), d) in b.handshakes.since_opt(a.map(|a| &a.handshakes)) {
            match (result, cfg.resumed) {
                (HandshakeResult::Ok, true) => p.resumed += d,
                (HandshakeResult::Ok, false) => p.full += d,
                (HandshakeResult::Failed, _) => p.failed += d,
            }
            if result == HandshakeResult::Ok {
                config(&mut configs, &cfg).handshakes += d;
            }
        }
        for (key, h) in b.handshake_cpu.since_opt(a.map(|a| &a.handshake_cpu)) {
            let c = config(&mut configs, &key);
            c.timed += h.count;
            c.cpu += h.sum;
            c.cpu_buckets = h.buckets;
        }
        p.configs = configs
            .into_values()
            .filter(|c| c.handshakes > 0.0 || c.timed > 0.0)
            .collect();
        for (port, now) in &b.ports {
            let before = a.and_then(|a| a.ports.get(port));
            let time_wait_sockets = tw_sockets.get(port).copied().unwrap_or(0.0);
            p.ports
                .insert(port.clone(), Port::between(before, now, time_wait_sockets));
        }
        p
    }
}

impl Port {
    /// What one port's connections did between two readings of its figures; the TIME_WAIT
    /// sockets at the end (a gauge) as they are.
    fn between(a: Option<&PortFigures>, b: &PortFigures, time_wait_sockets: f64) -> Port {
        let lifetime = b.lifetime.since_opt(a.map(|a| &a.lifetime));
        let requests = b.requests.since_opt(a.map(|a| &a.requests));
        Port {
            closed_by: b.closed_by.since_opt(a.map(|a| &a.closed_by)),
            time_wait: b.time_wait.since_opt(a.map(|a| &a.time_wait)),
            time_wait_sockets,
            requests: requests.sum,
            ended: requests.count,
            exchanges: b.exchanges.since_opt(a.map(|a| &a.exchanges)),
            request_buckets: requests.buckets,
            protocols: b.protocols.since_opt(a.map(|a| &a.protocols)),
            quic: b.quic.since_opt(a.map(|a| &a.quic)),
            lifetime_sum: lifetime.sum,
            lifetime_count: lifetime.count,
            clients: b.clients.since_opt(a.map(|a| &a.clients)),
        }
    }
}

impl Window {
    pub fn between(a: &Snapshot, b: &Snapshot, comms: &[String]) -> Window {
        let seconds = b.at.duration_since(a.at).as_secs_f64().max(1e-3);
        let procs = b
            .figures
            .procs
            .iter()
            .filter(|(comm, _)| !comm.is_empty() && wanted(comms, comm))
            .map(|(comm, now)| Proc::between(comm, a.figures.procs.get(comm), now, &b.figures.time_wait_sockets))
            .collect();
        Window { seconds, procs }
    }

    #[cfg(test)]
    pub fn proc(&self, comm: &str) -> Option<&Proc> {
        self.procs.iter().find(|p| p.comm == comm)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bpf::handshake::{HandshakeResult, Role};

    #[test]
    fn window_takes_increases_from_the_agents_own_metrics() {
        use std::time::Duration;

        use crate::metrics::{ClosedByLabels, Metrics, ParamLabels, PortLabels};
        let m = Metrics::new();
        let n = crate::wire::Negotiated::UNKNOWN;
        let p = ParamLabels::new("nginx", Role::Server, n);
        m.handshakes
            .get_or_create(&p.with_result(HandshakeResult::Ok))
            .inc_by(10);
        m.handshake_cpu.get_or_create(&p).observe(0.001);
        let a = Snapshot {
            at: Instant::now(),
            figures: Figures::of(&m),
        };
        m.handshakes
            .get_or_create(&p.with_result(HandshakeResult::Ok))
            .inc_by(4);
        m.handshakes
            .get_or_create(&p.with_result(HandshakeResult::Failed))
            .inc_by(2);
        m.handshake_cpu.get_or_create(&p).observe(0.002);
        m.handshake_cpu.get_or_create(&p).observe(0.004);
        let port = PortLabels {
            comm: "nginx".into(),
            port: "443".into(),
        };
        for n in [5.0, 5.0, 5.0, 2.0] {
            m.requests_per_connection.get_or_create(&port).observe(n);
        }
        m.time_wait.get_or_create(&port).inc_by(3);
        m.connections
            .get_or_create(&ClosedByLabels {
                comm: "nginx".into(),
                port: "443".into(),
                closed_by: "server".into(),
            })
            .inc_by(3);
        let b = Snapshot {
            at: a.at + Duration::from_secs(2),
            figures: Figures::of(&m),
        };
        let w = Window::between(&a, &b, &[]);
        assert_eq!(w.seconds, 2.0);
        let p = w.proc("nginx").unwrap();
        assert_eq!((p.full, p.resumed, p.failed), (4.0, 0.0, 2.0));
        assert_eq!(p.configs.len(), 1);
        // the rate from every handshake (4), the cost from the timed ones (2)
        assert_eq!((p.configs[0].handshakes, p.configs[0].timed), (4.0, 2.0));
        assert_eq!(p.count(|_| true), 4.0);
        assert!((p.mean_cpu(|_| true).unwrap() - 0.003).abs() < 1e-12);
        assert!((p.configs[0].cpu - 0.006).abs() < 1e-12);
        let port = &p.ports["443"];
        assert_eq!((port.requests, port.ended, port.time_wait), (17.0, 4.0, 3.0));
        assert_eq!(port.common_request_count(0.7), Some((5, 0.75)));
        assert_eq!(port.common_request_count(0.8), None);
        assert_eq!(port.closed_share(ClosedBy::Server), 1.0);
        assert!(Window::between(&a, &b, &["apache2".into()]).procs.is_empty());
        assert_eq!(p.clients().seen(), 0.0, "no ClientHello read");
        assert!(p.clients().policy("tls13_only").is_none());
    }

    /// Handshakes over TCP and over QUIC on one port number: each transport's handshakes
    /// and their CPU apart, the QUIC share, and the port's TCP figures without QUIC's
    /// connections; the same read in process and decoded.
    #[test]
    fn window_gives_handshakes_and_cpu_by_transport() {
        use std::time::Duration;

        use crate::{
            metrics::{Metrics, ParamLabels, ProtocolLabels},
            wire::Negotiated,
        };
        let m = Metrics::new();
        let tls13 = |transport| Negotiated {
            version: "TLSv1.3".into(),
            cipher: "TLS_AES_128_GCM_SHA256".into(),
            group: "x25519".into(),
            cert: "ecdsa_p256".into(),
            transport,
            ..Negotiated::UNKNOWN
        };
        let tcp = ParamLabels::new("nginx", Role::Server, tls13(Transport::Tcp));
        let quic = ParamLabels::new("nginx", Role::Server, tls13(Transport::Quic));
        let protocol = |protocol: &str| ProtocolLabels {
            comm: "nginx".into(),
            port: "443".into(),
            protocol: protocol.into(),
        };
        let a = Snapshot {
            at: Instant::now(),
            figures: Figures::of(&m),
        };
        m.handshakes
            .get_or_create(&tcp.with_result(HandshakeResult::Ok))
            .inc_by(30);
        m.handshakes
            .get_or_create(&quic.with_result(HandshakeResult::Ok))
            .inc_by(10);
        m.handshakes
            .get_or_create(&quic.with_result(HandshakeResult::Failed))
            .inc_by(5);
        for _ in 0..3 {
            m.handshake_cpu.get_or_create(&tcp).observe(0.001);
        }
        m.handshake_cpu.get_or_create(&quic).observe(0.004);
        m.protocols.get_or_create(&protocol("encrypted")).inc_by(30);
        m.protocols.get_or_create(&protocol("quic")).inc_by(10);
        let b = Snapshot {
            at: a.at + Duration::from_secs(2),
            figures: Figures::of(&m),
        };
        assert_eq!(Figures::decode(&m.render_text()).unwrap(), b.figures);
        let w = Window::between(&a, &b, &[]);
        let p = w.proc("nginx").unwrap();
        let t = p.transports();
        assert_eq!(
            t.iter()
                .map(|t| (t.transport.label(), t.handshakes, t.timed))
                .collect::<Vec<_>>(),
            [("tcp", 30.0, 3.0), ("quic", 10.0, 1.0)]
        );
        assert!((t[0].mean_cpu().unwrap() - 0.001).abs() < 1e-12);
        assert!((t[1].mean_cpu().unwrap() - 0.004).abs() < 1e-12);
        assert_eq!(p.quic_share(), Some(0.25), "10 of the 40 that ended well");
        assert_eq!(p.failed, 5.0);
        assert_eq!(p.configs.iter().filter(|c| c.over_quic()).count(), 1);
        let port = &p.ports["443"];
        assert_eq!((port.quic, port.protocols.get(&AppProtocol::Quic)), (10.0, None));
        assert_eq!((port.protocol_name(), port.hidden_protocol_share()), ("tls", 1.0));
    }

    /// Failed handshakes by port and reason, the failing clients by site and what they
    /// lacked, and connections without TLS by kind: what moved in the window, read in process
    /// and decoded alike; a reason new in the window counts from zero.
    #[test]
    fn failures_are_windowed() {
        use std::time::Duration;

        use crate::{
            bpf::abi::hello_untls,
            clients::lacks::Lacks,
            metrics::{ClientFailureLabels, FailureLabels, KindPortLabels, Metrics},
            wire::failure::{By, Failure, Reason},
        };
        let m = Metrics::new();
        let failure = |by: &str, reason: &str| FailureLabels {
            comm: "nginx".into(),
            port: "443".into(),
            by: by.into(),
            reason: reason.into(),
        };
        let kind = |kind: &str| KindPortLabels {
            comm: "nginx".into(),
            port: "443".into(),
            kind: kind.into(),
        };
        m.handshake_failures
            .get_or_create(&failure("server", "protocol_version"))
            .inc_by(50);
        m.connections_without_tls.get_or_create(&kind("silent")).inc_by(9);
        let old = |sni: &str| ClientFailureLabels {
            comm: "nginx".into(),
            port: "443".into(),
            sni: sni.into(),
            reason: "protocol_version".into(),
            lacks: "version".into(),
        };
        m.client_failures.get_or_create(&old("a.example")).inc_by(40);
        let a = Snapshot {
            at: Instant::now(),
            figures: Figures::of(&m),
        };
        m.handshake_failures
            .get_or_create(&failure("server", "protocol_version"))
            .inc_by(16);
        m.handshake_failures
            .get_or_create(&failure("client", "closed"))
            .inc_by(2);
        m.connections_without_tls.get_or_create(&kind("silent")).inc_by(8);
        m.connections_without_tls.get_or_create(&kind("http")).inc_by(2);
        m.client_failures.get_or_create(&old("a.example")).inc_by(12);
        m.client_failures.get_or_create(&old("b.example")).inc_by(4);
        let b = Snapshot {
            at: a.at + Duration::from_secs(2),
            figures: Figures::of(&m),
        };
        assert_eq!(Figures::decode(&m.render_text()).unwrap(), b.figures);
        let w = Window::between(&a, &b, &[]);
        let f = &w.proc("nginx").unwrap().failures;
        assert_eq!(
            f.by_failure(),
            [
                (Failure::new(By::Server, Reason::ProtocolVersion), 16.0),
                (Failure::new(By::Client, Reason::Closed), 2.0)
            ]
        );
        assert_eq!(
            f.by_kind_on("443"),
            [(hello_untls::Silent, 8.0), (hello_untls::Http, 2.0)]
        );
        assert_eq!((f.failed(), f.untls()), (18.0, 10.0));
        let g = f.client_groups("443", &[Reason::ProtocolVersion], true);
        assert_eq!((g.len(), g[0].lacks, g[0].failed), (1, Some(Lacks::Version), 16.0));
        assert_eq!(g[0].sites, [("a.example", 12.0), ("b.example", 4.0)]);
    }

    #[test]
    fn client_figures_are_windowed() {
        use std::time::Duration;

        use crate::metrics::{Metrics, OfferLabels, PolicyLabels, ResumptionLabels, SniLabels};
        let m = Metrics::new();
        let sni = SniLabels {
            comm: "nginx".into(),
            port: "443".into(),
            sni: "a.example".into(),
        };
        let offer = |value: &str| OfferLabels {
            comm: "nginx".into(),
            port: "443".into(),
            offer: "alpn".into(),
            value: value.into(),
        };
        let policy = |outcome: &str| PolicyLabels {
            comm: "nginx".into(),
            port: "443".into(),
            policy: "x25519_p256_only".into(),
            outcome: outcome.into(),
        };
        let res = |result: &str| ResumptionLabels {
            comm: "nginx".into(),
            port: "443".into(),
            offered: "ticket".into(),
            result: result.into(),
        };
        m.client_hellos.get_or_create(&sni).inc_by(100);
        m.client_offers.get_or_create(&offer("h2")).inc_by(90);
        m.client_policy.get_or_create(&policy("fail")).inc_by(7);
        m.client_resumptions.get_or_create(&res("full")).inc_by(50);
        m.site_handshake_cpu.get_or_create(&sni).inc_by(1.0);
        let a = Snapshot {
            at: Instant::now(),
            figures: Figures::of(&m),
        };
        m.client_hellos.get_or_create(&sni).inc_by(40);
        m.client_offers.get_or_create(&offer("h2")).inc_by(30);
        m.client_offers.get_or_create(&offer("http/1.1")).inc_by(40);
        m.client_policy.get_or_create(&policy("fail")).inc_by(4);
        m.client_policy.get_or_create(&policy("hello_retry")).inc_by(6);
        m.client_policy.get_or_create(&policy("negotiate")).inc_by(30);
        m.client_resumptions.get_or_create(&res("full")).inc_by(15);
        m.client_resumptions.get_or_create(&res("resumed")).inc_by(5);
        m.site_handshake_cpu.get_or_create(&sni).inc_by(0.5);
        let b = Snapshot {
            at: a.at + Duration::from_secs(2),
            figures: Figures::of(&m),
        };
        let c = Window::between(&a, &b, &[]).proc("nginx").unwrap().clients();
        assert_eq!(c.seen(), 40.0);
        assert_eq!(c.offered_share("alpn", "h2"), 0.75);
        assert_eq!(c.values("alpn"), vec![("http/1.1", 40.0), ("h2", 30.0)]);
        let x = c.policy("x25519_p256_only").unwrap();
        assert_eq!((x.evaluated, x.fail, x.hello_retry), (40.0, 4.0, 6.0));
        assert_eq!(c.returning(), (20.0, 15.0));
        assert_eq!(c.site_cpu["a.example"], 0.5);
    }
}
