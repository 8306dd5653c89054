//! The metrics tlsprof exports (documented in docs/metrics.md).
use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{counter::Counter, family::Family, gauge::Gauge, histogram::Histogram},
    registry::{Registry, Unit},
};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HandshakeLabels {
    pub comm: String,
    pub role: String,
    pub result: String,
    pub version: String,
    pub cipher: String,
    pub group: String,
    pub cert: String,
    pub resumed: String,
}

/// What a handshake negotiated (tls::Negotiated), with the process and role.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ParamLabels {
    pub comm: String,
    pub role: String,
    pub version: String,
    pub cipher: String,
    pub group: String,
    pub cert: String,
    pub resumed: String,
}

impl ParamLabels {
    pub fn new(comm: &str, role: &str, n: &crate::tls::Negotiated) -> Self {
        Self {
            comm: comm.into(),
            role: role.into(),
            version: n.version.into(),
            cipher: n.cipher.into(),
            group: n.group.into(),
            cert: n.cert.into(),
            resumed: n.resumed.to_string(),
        }
    }

    pub fn with_result(&self, result: &str) -> HandshakeLabels {
        HandshakeLabels {
            comm: self.comm.clone(),
            role: self.role.clone(),
            result: result.into(),
            version: self.version.clone(),
            cipher: self.cipher.clone(),
            group: self.group.clone(),
            cert: self.cert.clone(),
            resumed: self.resumed.clone(),
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabels {
    pub comm: String,
    pub reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RoleLabels {
    pub comm: String,
    pub role: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CommLabels {
    pub comm: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ProbeLabels {
    pub probe: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabels {
    pub kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PortLabels {
    pub comm: String,
    pub port: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ClosedByLabels {
    pub comm: String,
    pub port: String,
    pub closed_by: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OnlyPortLabels {
    pub port: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CategoryLabels {
    pub comm: String,
    pub category: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PrimitiveLabels {
    pub comm: String,
    pub primitive: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LibraryLabels {
    pub comm: String,
    pub library: String,
    pub symbols: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ModeLabels {
    pub mode: String,
    pub overhead_budget: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FigureLabels {
    pub figure: String,
}

/// A gauge with a fractional value.
pub type FGauge = Gauge<f64, std::sync::atomic::AtomicU64>;

type HistFamily<L> = Family<L, Histogram, fn() -> Histogram>;

/// Handshake CPU: 10 µs .. 1 s.
const CPU_BUCKETS: &[f64] = &[
    10e-6, 25e-6, 50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 100e-3, 250e-3, 1.0,
];
/// Handshake wall-clock duration: 50 µs .. 10 s (includes waiting for the peer).
const DURATION_BUCKETS: &[f64] = &[
    50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 100e-3, 250e-3, 500e-3, 1.0, 2.5, 10.0,
];

/// Connection lifetime: 1 ms .. 1 h.
const CONNECTION_BUCKETS: &[f64] = &[
    0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0,
];
/// Requests per connection: 0 (handshake only), 1 (no reuse), every count up to 10 (so a
/// low per-connection limit such as Domino's 5 shows exactly), Apache's 100, nginx's 1000.
const REQUEST_BUCKETS: &[f64] = &[
    0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0, 10000.0,
];

fn connection_histogram() -> Histogram {
    Histogram::new(CONNECTION_BUCKETS.iter().copied())
}
fn requests_histogram() -> Histogram {
    Histogram::new(REQUEST_BUCKETS.iter().copied())
}

fn cpu_histogram() -> Histogram {
    Histogram::new(CPU_BUCKETS.iter().copied())
}
fn duration_histogram() -> Histogram {
    Histogram::new(DURATION_BUCKETS.iter().copied())
}

pub struct Metrics {
    pub registry: Registry,
    pub handshakes: Family<HandshakeLabels, Counter>,
    pub handshake_cpu: HistFamily<ParamLabels>,
    pub handshake_duration: HistFamily<ParamLabels>,
    pub failed_handshake_cpu: Family<RoleLabels, Counter<f64>>,
    pub handshakes_unlabelled: Family<ReasonLabels, Counter>,
    pub attached_processes: Family<CommLabels, Gauge>,
    pub attached_probes: Gauge,
    pub events_lost: Counter,
    pub kernel_errors: Family<KindLabels, Counter>,
    pub attach_failures: Family<ProbeLabels, Counter>,
    pub agent_cpu: Counter<f64>,
    pub agent_memory: Gauge,
    pub connections_accepted: Family<PortLabels, Counter>,
    pub connections: Family<ClosedByLabels, Counter>,
    pub time_wait: Family<PortLabels, Counter>,
    pub time_wait_sockets: Family<OnlyPortLabels, Gauge>,
    pub connection_duration: HistFamily<PortLabels>,
    pub requests_per_connection: HistFamily<PortLabels>,
    pub process_cpu: Family<CommLabels, Counter<f64>>,
    pub cpu: Family<CategoryLabels, Counter<f64>>,
    pub crypto_cpu: Family<PrimitiveLabels, Counter<f64>>,
    pub tls_library: Family<LibraryLabels, Gauge>,
    pub cpu_samples: Counter,
    pub mode_info: Family<ModeLabels, Gauge>,
    pub sampled_figures: Family<FigureLabels, Gauge>,
    pub probe_duty_cycle: Family<CommLabels, FGauge>,
    pub probe_hits: Family<CommLabels, Counter>,
    pub probe_cpu: Family<CommLabels, Counter<f64>>,
    pub probe_hit_cost: Family<ProbeLabels, FGauge>,
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("tlsprof");
        let handshakes = Family::<HandshakeLabels, Counter>::default();
        registry.register(
            "handshakes",
            "TLS handshakes finished, by process name, role (server|client), result (ok|failed) and what was \
             negotiated: version, cipher (IANA), group (IANA, or rsa for RSA key transport), cert (the server \
             certificate's key) and resumed; unknown or rare values are other",
            handshakes.clone(),
        );
        let handshakes_unlabelled = Family::<ReasonLabels, Counter>::default();
        registry.register(
            "handshakes_unlabelled",
            "Handshakes counted with some negotiated labels other because tlsprof could not see them: \
             no_connection (not on a connection accepted on a watched port since tlsprof started: client role, \
             older connections), incomplete (the server's handshake output did not show them all)",
            handshakes_unlabelled.clone(),
        );
        let handshake_cpu = HistFamily::<ParamLabels>::new_with_constructor(cpu_histogram as fn() -> Histogram);
        registry.register_with_unit(
            "handshake_cpu",
            "On-CPU time (user and kernel) of the threads performing a successful handshake, summed over all its calls",
            Unit::Seconds,
            handshake_cpu.clone(),
        );
        let handshake_duration =
            HistFamily::<ParamLabels>::new_with_constructor(duration_histogram as fn() -> Histogram);
        registry.register_with_unit(
            "handshake_duration",
            "Wall-clock time of a successful handshake, from its first handshake call to the call that completed it",
            Unit::Seconds,
            handshake_duration.clone(),
        );
        let failed_handshake_cpu = Family::<RoleLabels, Counter<f64>>::default();
        registry.register_with_unit(
            "failed_handshake_cpu",
            "On-CPU time spent in handshakes that failed",
            Unit::Seconds,
            failed_handshake_cpu.clone(),
        );
        let attached_processes = Family::<CommLabels, Gauge>::default();
        registry.register(
            "attached_processes",
            "Processes tlsprof has attached its probes to",
            attached_processes.clone(),
        );
        let attached_probes = Gauge::default();
        registry.register(
            "attached_probes",
            "Uprobes and uretprobes attached now",
            attached_probes.clone(),
        );
        let events_lost = Counter::default();
        registry.register(
            "events_lost",
            "Finished handshakes the kernel could not report because the ring buffer was full",
            events_lost.clone(),
        );
        let kernel_errors = Family::<KindLabels, Counter>::default();
        registry.register(
            "kernel_errors",
            "Kernel-side failure paths taken (events_lost, thread_map_full, ssl_map_full, unmatched_return, \
             conn_events_lost, conn_storage_full, samples_lost, wire_events_lost)",
            kernel_errors.clone(),
        );
        let attach_failures = Family::<ProbeLabels, Counter>::default();
        registry.register(
            "probe_attach_failures",
            "Probes that failed to attach, by probe (program name)",
            attach_failures.clone(),
        );
        let agent_cpu = Counter::<f64>::default();
        registry.register_with_unit(
            "agent_cpu",
            "CPU time (user and system) used by the tlsprof agent itself",
            Unit::Seconds,
            agent_cpu.clone(),
        );
        let agent_memory = Gauge::default();
        registry.register_with_unit(
            "agent_resident_memory",
            "Resident memory of the tlsprof agent itself",
            Unit::Bytes,
            agent_memory.clone(),
        );
        let connections_accepted = Family::<PortLabels, Counter>::default();
        registry.register(
            "tcp_connections_accepted",
            "TCP connections accepted on a listening port of a traced process (the TCP handshake completed)",
            connections_accepted.clone(),
        );
        let connections = Family::<ClosedByLabels, Counter>::default();
        registry.register(
            "tcp_connections",
            "TCP connections accepted on a listening port of a traced process that ended, by who ended them: \
             server (sent the first FIN), client (sent the first FIN) or reset",
            connections.clone(),
        );
        let time_wait = Family::<PortLabels, Counter>::default();
        registry.register(
            "tcp_time_wait",
            "Server-side sockets that entered TIME_WAIT: the server closed first and the client closed cleanly",
            time_wait.clone(),
        );
        let time_wait_sockets = Family::<OnlyPortLabels, Gauge>::default();
        registry.register(
            "tcp_time_wait_sockets",
            "Sockets in TIME_WAIT now with this local port (sock_diag), summed over the network namespaces of the traced processes",
            time_wait_sockets.clone(),
        );
        let connection_duration =
            HistFamily::<PortLabels>::new_with_constructor(connection_histogram as fn() -> Histogram);
        registry.register_with_unit(
            "tcp_connection_duration",
            "Lifetime of an accepted connection, from the TCP handshake to the server's socket closing",
            Unit::Seconds,
            connection_duration.clone(),
        );
        let requests_per_connection =
            HistFamily::<PortLabels>::new_with_constructor(requests_histogram as fn() -> Histogram);
        registry.register(
            "requests_per_connection",
            "Application data exchanges (client data, then server data; TLS handshake traffic excluded) per ended connection",
            requests_per_connection.clone(),
        );
        let process_cpu = Family::<CommLabels, Counter<f64>>::default();
        registry.register_with_unit(
            "process_cpu",
            "On-CPU time (user and kernel) of the traced processes, summed by the kernel at every context switch",
            Unit::Seconds,
            process_cpu.clone(),
        );
        let cpu = Family::<CategoryLabels, Counter<f64>>::default();
        registry.register_with_unit(
            "cpu",
            "On-CPU time of the traced processes split by sampling into handshake, crypto (TLS record crypto), \
             tls_library (TLS code of stacks without handshake probes), kernel_net, probes (tlsprof's own) and other",
            Unit::Seconds,
            cpu.clone(),
        );
        let crypto_cpu = Family::<PrimitiveLabels, Counter<f64>>::default();
        registry.register_with_unit(
            "crypto_cpu",
            "On-CPU time in TLS library code (handshakes included) and kernel TLS, by crypto primitive; \
             no_symbols where the library has no function names",
            Unit::Seconds,
            crypto_cpu.clone(),
        );
        let tls_library = Family::<LibraryLabels, Gauge>::default();
        registry.register(
            "tls_library_info",
            "TLS code a traced process maps, and where its function names come from (full, debug_file, exported_only, none)",
            tls_library.clone(),
        );
        let cpu_samples = Counter::default();
        registry.register(
            "cpu_samples",
            "CPU samples of traced processes received from the kernel",
            cpu_samples.clone(),
        );
        let mode_info = Family::<ModeLabels, Gauge>::default();
        registry.register(
            "mode_info",
            "How tlsprof runs: mode (default: handshake probes duty-cycled under the overhead budget, handshakes \
             counted from the wire; exact: handshake probes always attached) and the budget (share of one CPU per \
             process)",
            mode_info.clone(),
        );
        let sampled_figures = Family::<FigureLabels, Gauge>::default();
        registry.register(
            "sampled_figure_info",
            "Figures (metric names) that are measured in sampled windows in this mode, not for every event: scale \
             them by tlsprof_probe_duty_cycle, or read them as averages (CPU per handshake)",
            sampled_figures.clone(),
        );
        let probe_duty_cycle = Family::<CommLabels, FGauge>::default();
        registry.register(
            "probe_duty_cycle",
            "Share of the last 10 s cycle the handshake probes were attached to the processes of this name (mean \
             over them): the sampling ratio of the sampled figures",
            probe_duty_cycle.clone(),
        );
        let probe_hits = Family::<CommLabels, Counter>::default();
        registry.register(
            "probe_hits",
            "Uprobe and uretprobe hits in the traced processes (each one a trap into the kernel)",
            probe_hits.clone(),
        );
        let probe_cpu = Family::<CommLabels, Counter<f64>>::default();
        registry.register_with_unit(
            "probe_cpu",
            "CPU time the handshake probes cost the traced processes: hits times the cost of one hit measured on \
             this host at start",
            Unit::Seconds,
            probe_cpu.clone(),
        );
        let probe_hit_cost = Family::<ProbeLabels, FGauge>::default();
        registry.register_with_unit(
            "probe_hit_cost",
            "CPU time of one probe hit on this host, measured at start (probe: uprobe, uretprobe)",
            Unit::Seconds,
            probe_hit_cost.clone(),
        );
        Self {
            mode_info,
            sampled_figures,
            probe_duty_cycle,
            probe_hits,
            probe_cpu,
            probe_hit_cost,
            process_cpu,
            cpu,
            crypto_cpu,
            tls_library,
            cpu_samples,
            connections_accepted,
            connections,
            time_wait,
            time_wait_sockets,
            connection_duration,
            requests_per_connection,
            agent_cpu,
            agent_memory,
            registry,
            handshakes,
            handshake_cpu,
            handshake_duration,
            failed_handshake_cpu,
            handshakes_unlabelled,
            attached_processes,
            attached_probes,
            events_lost,
            kernel_errors,
            attach_failures,
        }
    }

    /// The OpenMetrics text exposition, as prometheus-client writes it.
    pub fn render_openmetrics(&self) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry).expect("writing to a String cannot fail");
        out
    }

    /// The Prometheus text format (0.0.4), which `promtool check metrics` and older
    /// scrapers read.
    pub fn render_text(&self) -> String {
        openmetrics_to_text(&self.render_openmetrics())
    }
}

/// OpenMetrics names a counter family without `_total` in its HELP/TYPE lines, while
/// the Prometheus text format names it as its samples are named; OpenMetrics also has
/// `# UNIT` and `# EOF` lines that the older format does not.
pub fn openmetrics_to_text(om: &str) -> String {
    let counters: std::collections::HashSet<&str> = om
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE ")?.strip_suffix(" counter"))
        .collect();
    let mut out = String::with_capacity(om.len());
    for line in om.lines() {
        if line.starts_with("# UNIT ") || line == "# EOF" {
            continue;
        }
        let renamed = ["# HELP ", "# TYPE "].iter().find_map(|prefix| {
            let rest = line.strip_prefix(prefix)?;
            let (name, tail) = rest.split_once(' ').unwrap_or((rest, ""));
            counters.contains(name).then(|| format!("{prefix}{name}_total {tail}"))
        });
        out.push_str(renamed.as_deref().unwrap_or(line));
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_format_names_counters_like_their_samples() {
        let m = Metrics::new();
        let p = ParamLabels::new("nginx", "server", &crate::tls::Negotiated::UNKNOWN);
        m.handshakes.get_or_create(&p.with_result("ok")).inc_by(3);
        m.handshake_cpu.get_or_create(&p).observe(0.0004);
        let text = m.render_text();
        assert!(text.contains("# TYPE tlsprof_handshakes_total counter\n"), "{text}");
        assert!(
            text.contains("# HELP tlsprof_handshakes_total TLS handshakes"),
            "{text}"
        );
        assert!(
            text.contains(
                "tlsprof_handshakes_total{comm=\"nginx\",role=\"server\",result=\"ok\",version=\"other\",\
                 cipher=\"other\",group=\"other\",cert=\"other\",resumed=\"false\"} 3\n"
            ),
            "{text}"
        );
        assert!(
            text.contains("# TYPE tlsprof_handshake_cpu_seconds histogram\n"),
            "{text}"
        );
        assert!(
            text.contains(
                "tlsprof_handshake_cpu_seconds_bucket{le=\"0.0005\",comm=\"nginx\",role=\"server\",\
                 version=\"other\",cipher=\"other\",group=\"other\",cert=\"other\",resumed=\"false\"} 1\n"
            ),
            "{text}"
        );
        assert!(!text.contains("# EOF") && !text.contains("# UNIT"), "{text}");
        let om = m.render_openmetrics();
        assert!(
            om.ends_with("# EOF\n") && om.contains("# TYPE tlsprof_handshakes counter"),
            "{om}"
        );
    }
}
