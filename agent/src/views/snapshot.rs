//! What `tlsprof top` and `tlsprof report` read: the agent's own metrics (from the agent
//! running in this process, or from a running agent's /metrics), taken twice and turned
//! into per-process rates over the time between.
use std::{
    collections::{BTreeMap, BTreeSet},
    io::{Read as _, Write as _},
    net::{TcpStream, ToSocketAddrs as _},
    sync::Arc,
    time::{Duration, Instant},
};

use anyhow::{bail, Context as _, Result};

use crate::metrics::{
    defs,
    text::{parse, Sample},
    Metrics,
};

/// Where the metrics come from.
pub enum Source {
    /// The agent running in this process.
    Local(Arc<Metrics>),
    /// A running agent's /metrics endpoint (http://host:port/metrics).
    Remote { host: String, port: u16, path: String },
}

impl Source {
    pub fn remote(url: &str) -> Result<Self> {
        let rest = url
            .strip_prefix("http://")
            .with_context(|| format!("{url}: only http:// URLs are read (the agent serves plain HTTP)"))?;
        let (hostport, path) = match rest.find('/') {
            Some(i) => (&rest[..i], rest[i..].to_string()),
            None => (rest, "/metrics".to_string()),
        };
        let (host, port) = match hostport.rsplit_once(':') {
            Some((h, p)) if !h.ends_with(']') || h.starts_with('[') => (
                h.to_string(),
                p.parse::<u16>().with_context(|| format!("{url}: bad port"))?,
            ),
            _ => (hostport.to_string(), 80),
        };
        Ok(Source::Remote { host, port, path })
    }

    pub fn fetch(&self) -> Result<Vec<Sample>> {
        match self {
            Source::Local(m) => parse(&m.render_text()),
            Source::Remote { host, port, path } => {
                let h = host.trim_start_matches('[').trim_end_matches(']');
                let addr = (h, *port)
                    .to_socket_addrs()
                    .with_context(|| format!("cannot resolve {host}"))?
                    .next()
                    .with_context(|| format!("cannot resolve {host}"))?;
                let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(3))
                    .with_context(|| format!("cannot reach the agent at http://{host}:{port}{path}"))?;
                s.set_read_timeout(Some(Duration::from_secs(5)))?;
                s.set_write_timeout(Some(Duration::from_secs(5)))?;
                write!(s, "GET {path} HTTP/1.0\r\nHost: {host}\r\nAccept: text/plain\r\n\r\n")?;
                let mut body = Vec::new();
                s.take(256 << 20).read_to_end(&mut body)?;
                let text = String::from_utf8_lossy(&body);
                let (head, body) = text.split_once("\r\n\r\n").context("no HTTP response")?;
                let status = head.lines().next().unwrap_or("");
                if status.split_whitespace().nth(1) != Some("200") {
                    bail!("http://{host}:{port}{path} answered {status}");
                }
                let samples = parse(body)?;
                if !samples.iter().any(|s| s.name.starts_with("tlsprof_")) {
                    bail!("http://{host}:{port}{path} has no tlsprof metrics");
                }
                Ok(samples)
            }
        }
    }
}

/// A series: its name and labels.
type SeriesKey<'a> = (&'a str, Vec<(&'a str, &'a str)>);
/// A negotiated configuration: version, cipher, group, cert, resumed.
type ConfigKey = (String, String, String, String, bool);

/// The metrics at one moment.
#[derive(Debug, Clone)]
pub struct Snapshot {
    pub at: Instant,
    pub samples: Vec<Sample>,
}

impl Snapshot {
    pub fn take(source: &Source) -> Result<Self> {
        Ok(Snapshot {
            at: Instant::now(),
            samples: source.fetch()?,
        })
    }

    /// The sum of the counters that move while connections come and go (handshakes,
    /// connections accepted and ended, exchanges): the same in two snapshots when nothing
    /// happened between them.
    pub fn activity(&self) -> f64 {
        let moving = [
            defs::HANDSHAKES.name,
            defs::TCP_CONNECTIONS_ACCEPTED.name,
            defs::TCP_CONNECTIONS.name,
            defs::EXCHANGES.name,
        ];
        self.samples
            .iter()
            .filter(|s| defs::of_sample(&s.name).is_some_and(|d| moving.contains(&d.name)))
            .map(|s| s.value)
            .sum()
    }

    /// How many scans of /proc the agent had completed: its clock for what it counts per
    /// scan.
    pub fn scans(&self) -> f64 {
        self.samples
            .iter()
            .filter(|s| {
                defs::of_sample(&s.name).is_some_and(|d| d.name == defs::SCAN_DURATION.name)
                    && s.name.ends_with("_count")
                    && s.label("scan") == "processes"
            })
            .map(|s| s.value)
            .sum()
    }

    fn index(&self) -> BTreeMap<SeriesKey<'_>, f64> {
        self.samples
            .iter()
            .map(|s| {
                (
                    (
                        s.name.as_str(),
                        s.labels.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect(),
                    ),
                    s.value,
                )
            })
            .collect()
    }
}

/// Handshakes of one negotiated configuration (server role) in a window.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Config {
    pub version: String,
    pub cipher: String,
    pub group: String,
    pub cert: String,
    pub resumed: bool,
    /// Successful handshakes that negotiated it (tlsprof_handshakes_total: every one, in
    /// every mode): the figure rates and shares come from.
    pub handshakes: f64,
    /// Of them, those with a CPU measurement (all with --exact; in the default mode those
    /// in the overhead budget's windows), and their summed CPU seconds: the figure costs
    /// come from.
    pub timed: f64,
    pub cpu: f64,
}

impl Config {
    /// Handshakes whose negotiated parameters tlsprof did not see (all labels `other`:
    /// begun before it attached, or not on a watched connection).
    pub fn unlabelled(&self) -> bool {
        [&self.version, &self.cipher, &self.group, &self.cert]
            .iter()
            .all(|v| *v == "other")
    }

    pub fn mean_cpu(&self) -> Option<f64> {
        (self.timed > 0.0).then(|| self.cpu / self.timed)
    }
}

/// Connections of one listening port in a window.
#[derive(Debug, Clone, Default)]
pub struct Port {
    pub accepted: f64,
    /// Ended connections by who closed first (server, client, reset).
    pub closed_by: BTreeMap<String, f64>,
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
    /// TLS handshakes by the application protocol the server chose (h2, http/1.1, other,
    /// none, encrypted).
    pub protocols: BTreeMap<String, f64>,
    /// Summed lifetime of the connections that ended, in seconds, and their number.
    pub lifetime_sum: f64,
    pub lifetime_count: f64,
}

impl Port {
    pub fn requests_per_connection(&self) -> Option<f64> {
        (self.ended > 0.0).then(|| self.requests / self.ended)
    }
    /// Share of the TLS connections whose ServerHello chose HTTP/2 (0 when none showed its
    /// choice): where exchanges do not stand for requests.
    pub fn h2_share(&self) -> f64 {
        let all: f64 = self.protocols.values().sum();
        if all > 0.0 {
            self.protocols.get("h2").copied().unwrap_or(0.0) / all
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
    pub fn closed(&self) -> f64 {
        self.closed_by.values().sum::<f64>() + 0.0 // an empty sum is -0.0
    }
    pub fn closed_share(&self, by: &str) -> f64 {
        let all = self.closed();
        if all > 0.0 {
            self.closed_by.get(by).copied().unwrap_or(0.0) / all
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
pub const TLS_CATEGORIES: [&str; 3] = ["handshake", "crypto", "tls_library"];

/// One process name over a window: counts (not rates) of what happened in it.
#[derive(Debug, Clone, Default)]
pub struct Proc {
    pub comm: String,
    pub attached: f64,
    pub full: f64,
    pub resumed: f64,
    pub failed: f64,
    pub process_cpu: f64,
    /// CPU seconds by category (handshake, crypto, tls_library, kernel_net, probes, other).
    pub cpu: BTreeMap<String, f64>,
    /// CPU seconds in TLS code by crypto primitive.
    pub crypto: BTreeMap<String, f64>,
    pub configs: Vec<Config>,
    pub ports: BTreeMap<String, Port>,
    /// TLS libraries the process maps: (library, symbols).
    pub libraries: BTreeSet<(String, String)>,
    /// How its handshakes' CPU is measured now (tlsprof_handshake_cpu_method_info):
    /// `probes`, `kernel_estimate`.
    pub cpu_methods: BTreeSet<String>,
}

impl Proc {
    pub fn handshakes(&self) -> f64 {
        self.full + self.resumed
    }
    pub fn cpu_in(&self, category: &str) -> f64 {
        self.cpu.get(category).copied().unwrap_or(0.0)
    }
    /// The share of the process's CPU in a category (0 when no CPU was seen).
    pub fn share(&self, category: &str) -> f64 {
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
        self.process_cpu * TLS_CATEGORIES.iter().map(|c| self.share(c)).sum::<f64>()
    }
    /// CPU seconds per exchange, and of it in TLS (None without an exchange).
    pub fn cost_per_exchange(&self) -> Option<(f64, f64)> {
        let n = self.exchanges();
        (n > 0.0).then(|| (self.process_cpu / n, self.tls_cpu() / n))
    }
}

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

/// Adds an increase to a figure kept by a label's value.
fn add(by: &mut BTreeMap<String, f64>, key: &str, d: f64) {
    *by.entry(key.into()).or_default() += d;
}

/// The configuration a handshake series' labels name, in a process's table.
fn config<'a>(
    configs: &'a mut BTreeMap<String, BTreeMap<ConfigKey, Config>>,
    comm: &str,
    s: &Sample,
) -> &'a mut Config {
    let key = (
        s.label("version").to_string(),
        s.label("cipher").to_string(),
        s.label("group").to_string(),
        s.label("cert").to_string(),
        s.label("resumed") == "true",
    );
    configs
        .entry(comm.to_string())
        .or_default()
        .entry(key.clone())
        .or_insert_with(|| Config {
            version: key.0,
            cipher: key.1,
            group: key.2,
            cert: key.3,
            resumed: key.4,
            ..Default::default()
        })
}

impl Window {
    pub fn between(a: &Snapshot, b: &Snapshot, comms: &[String]) -> Window {
        let seconds = b.at.duration_since(a.at).as_secs_f64().max(1e-3);
        let before = a.index();
        // A counter's increase: a series new since `a` counts from zero, and a reset
        // (the agent restarted) counts from zero again.
        let delta = |s: &Sample| -> f64 {
            let key = (
                s.name.as_str(),
                s.labels
                    .iter()
                    .map(|(k, v)| (k.as_str(), v.as_str()))
                    .collect::<Vec<_>>(),
            );
            match before.get(&key) {
                Some(&old) if s.value >= old => s.value - old,
                _ => s.value,
            }
        };
        let mut procs: BTreeMap<String, Proc> = BTreeMap::new();
        let mut tw_sockets: BTreeMap<String, f64> = BTreeMap::new();
        let mut configs: BTreeMap<String, BTreeMap<ConfigKey, Config>> = BTreeMap::new();
        for s in &b.samples {
            let Some(d) = defs::of_sample(&s.name) else { continue };
            let comm = s.label("comm");
            if d.name == defs::TCP_TIME_WAIT_SOCKETS.name {
                *tw_sockets.entry(s.label("port").to_string()).or_default() += s.value;
                continue;
            }
            if comm.is_empty() || !wanted(comms, comm) {
                continue;
            }
            let p = procs.entry(comm.to_string()).or_insert_with(|| Proc {
                comm: comm.to_string(),
                ..Default::default()
            });
            let port = || s.label("port").to_string();
            let is = |def: &defs::Spec| d.name == def.name;
            let series = |suffix: &str| s.name == d.series(suffix);
            if is(&defs::ATTACHED_PROCESSES) {
                p.attached = s.value;
            } else if is(&defs::HANDSHAKE_CPU_METHOD) {
                if s.value > 0.0 {
                    p.cpu_methods.insert(s.label("method").into());
                }
            } else if is(&defs::TLS_LIBRARY_INFO) {
                p.libraries
                    .insert((s.label("library").into(), s.label("symbols").into()));
            } else if is(&defs::HANDSHAKES) && s.label("role") == "server" {
                let d = delta(s);
                match (s.label("result"), s.label("resumed")) {
                    ("ok", "true") => p.resumed += d,
                    ("ok", _) => p.full += d,
                    _ => p.failed += d,
                }
                if s.label("result") == "ok" {
                    config(&mut configs, comm, s).handshakes += d;
                }
            } else if is(&defs::HANDSHAKE_CPU) && s.label("role") == "server" && !series("bucket") {
                let c = config(&mut configs, comm, s);
                if series("sum") {
                    c.cpu += delta(s);
                } else {
                    c.timed += delta(s);
                }
            } else if is(&defs::PROCESS_CPU) {
                p.process_cpu += delta(s);
            } else if is(&defs::CPU) {
                add(&mut p.cpu, s.label("category"), delta(s));
            } else if is(&defs::CRYPTO_CPU) {
                add(&mut p.crypto, s.label("primitive"), delta(s));
            } else if is(&defs::TCP_CONNECTIONS_ACCEPTED) {
                p.ports.entry(port()).or_default().accepted += delta(s);
            } else if is(&defs::TCP_CONNECTIONS) {
                add(
                    &mut p.ports.entry(port()).or_default().closed_by,
                    s.label("closed_by"),
                    delta(s),
                );
            } else if is(&defs::CONNECTION_PROTOCOLS) {
                add(
                    &mut p.ports.entry(port()).or_default().protocols,
                    s.label("protocol"),
                    delta(s),
                );
            } else if is(&defs::TCP_CONNECTION_DURATION) && !series("bucket") {
                let v = p.ports.entry(port()).or_default();
                if series("sum") {
                    v.lifetime_sum += delta(s);
                } else {
                    v.lifetime_count += delta(s);
                }
            } else if is(&defs::EXCHANGES) {
                p.ports.entry(port()).or_default().exchanges += delta(s);
            } else if is(&defs::TCP_TIME_WAIT) {
                p.ports.entry(port()).or_default().time_wait += delta(s);
            } else if is(&defs::REQUESTS_PER_CONNECTION) {
                let v = p.ports.entry(port()).or_default();
                if series("sum") {
                    v.requests += delta(s);
                } else if series("count") {
                    v.ended += delta(s);
                } else {
                    let le = s.label("le").parse::<f64>().unwrap_or(f64::INFINITY);
                    v.request_buckets.push((le, delta(s)));
                }
            }
        }
        for (comm, cs) in configs {
            if let Some(p) = procs.get_mut(&comm) {
                p.configs = cs
                    .into_values()
                    .filter(|c| c.handshakes > 0.0 || c.timed > 0.0)
                    .collect();
            }
        }
        for p in procs.values_mut() {
            for (port, v) in p.ports.iter_mut() {
                v.time_wait_sockets = tw_sockets.get(port).copied().unwrap_or(0.0);
                v.request_buckets.sort_by(|x, y| x.0.total_cmp(&y.0));
            }
        }
        Window {
            seconds,
            procs: procs.into_values().collect(),
        }
    }

    #[cfg(test)]
    pub fn proc(&self, comm: &str) -> Option<&Proc> {
        self.procs.iter().find(|p| p.comm == comm)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_takes_increases_from_the_agents_own_metrics() {
        use crate::metrics::{ClosedByLabels, ParamLabels, PortLabels};
        let m = Metrics::new();
        let n = crate::wire::Negotiated::UNKNOWN;
        let p = ParamLabels::new("nginx", "server", &n);
        m.handshakes.get_or_create(&p.with_result("ok")).inc_by(10);
        m.handshake_cpu.get_or_create(&p).observe(0.001);
        let a = Snapshot {
            at: Instant::now(),
            samples: parse(&m.render_text()).unwrap(),
        };
        m.handshakes.get_or_create(&p.with_result("ok")).inc_by(4);
        m.handshakes.get_or_create(&p.with_result("failed")).inc_by(2);
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
            samples: parse(&m.render_text()).unwrap(),
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
        assert_eq!(port.closed_share("server"), 1.0);
        assert!(Window::between(&a, &b, &["apache2".into()]).procs.is_empty());
    }
}
