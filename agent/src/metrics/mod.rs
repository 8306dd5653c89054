//! The metrics tlsprof exports (documented in docs/metrics.md): declared in defs.rs, their
//! label sets in labels.rs, registered and rendered here; text.rs reads an exposition back.
//! The views read the same structures in process (views/model.rs): the capped families list
//! their series, and histogram.rs's histograms give their counts.
pub mod capped;
pub mod defs;
pub mod found;
pub mod histogram;
pub mod labels;
pub mod text;

use prometheus_client::{
    metrics::{counter::Counter, family::Family, gauge::Gauge},
    registry::{Metric, Registry},
};

pub use self::{capped::Capped, histogram::Histogram, labels::*};
use self::{
    defs::{Def, Unit},
    text::openmetrics_to_text,
};

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
fn hist<L: Clone + std::hash::Hash + Eq>(buckets: fn() -> Histogram) -> HistFamily<L> {
    HistFamily::new_with_constructor(buckets)
}

/// A scan of /proc or sock_diag: 100 µs .. 10 s.
const SCAN_BUCKETS: &[f64] = &[1e-4, 1e-3, 5e-3, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0];

fn scan_histogram() -> Histogram {
    Histogram::new(SCAN_BUCKETS.iter().copied())
}

fn duration_histogram() -> Histogram {
    Histogram::new(DURATION_BUCKETS.iter().copied())
}

/// A metric's label set, so that registering it with its declaration checks they agree.
pub trait Labelled {
    type Labels: LabelNames;
}

impl<L: LabelNames, M, C> Labelled for Family<L, M, C> {
    type Labels = L;
}

impl<N, A> Labelled for Counter<N, A> {
    type Labels = NoLabels;
}

impl<N, A> Labelled for Gauge<N, A> {
    type Labels = NoLabels;
}

/// Registers a family whose label values other local users control (process names, ports,
/// library files) under its declaration, capped at `max` series (capped.rs).
fn capped<L, M, C>(
    r: &mut Registry,
    def: &Def<L>,
    family: Family<L, M, C>,
    max: usize,
    folded: &Family<MetricLabels, Counter>,
) -> Capped<L, M, C>
where
    L: LabelNames + capped::Fold + Clone + std::hash::Hash + Eq + std::fmt::Debug,
    Family<L, M, C>: Metric + Clone,
    C: prometheus_client::metrics::family::MetricConstructor<M>,
{
    Capped::new(register(r, def, family), def.name, max, folded)
}

/// Registers a metric under its declaration; returns it, for the field that keeps it.
fn register<M: Labelled + Metric + Clone>(r: &mut Registry, def: &Def<M::Labels>, m: M) -> M {
    let unit = def.unit.map(|u| match u {
        Unit::Seconds => prometheus_client::registry::Unit::Seconds,
        Unit::Bytes => prometheus_client::registry::Unit::Bytes,
    });
    match unit {
        Some(u) => r.register_with_unit(def.name, def.help, u, m.clone()),
        None => r.register(def.name, def.help, m.clone()),
    }
    m
}

pub struct Metrics {
    pub registry: Registry,
    pub handshakes: Capped<HandshakeLabels, Counter>,
    pub handshakes_unlabelled: Capped<ReasonLabels, Counter>,
    pub handshake_cpu: Capped<ParamLabels, Histogram, fn() -> Histogram>,
    pub handshake_duration: Capped<ParamLabels, Histogram, fn() -> Histogram>,
    pub handshake_failures: Capped<FailureLabels, Counter>,
    pub connections_without_tls: Capped<KindPortLabels, Counter>,
    pub failed_handshake_cpu: Capped<RoleLabels, Counter<f64>>,
    pub attached_processes: Capped<CommLabels, Gauge>,
    pub handshake_cpu_method: Capped<MethodLabels, Gauge>,
    pub attached_probes: Gauge,
    pub events_lost: Counter,
    pub kernel_errors: Family<KindLabels, Counter>,
    pub unmatched_returns: Counter,
    pub attach_failures: Family<ProbeLabels, Counter>,
    pub agent_cpu: Counter<f64>,
    pub agent_memory: Gauge,
    pub connections_accepted: Capped<PortLabels, Counter>,
    pub connections: Capped<ClosedByLabels, Counter>,
    pub time_wait: Capped<PortLabels, Counter>,
    pub time_wait_sockets: Capped<OnlyPortLabels, Gauge>,
    pub connection_duration: Capped<PortLabels, Histogram, fn() -> Histogram>,
    pub requests_per_connection: Capped<PortLabels, Histogram, fn() -> Histogram>,
    pub exchanges: Capped<PortLabels, Counter>,
    pub protocols: Capped<ProtocolLabels, Counter>,
    pub client_hellos: Capped<SniLabels, Counter>,
    pub client_offers: Capped<OfferLabels, Counter>,
    pub client_policy: Capped<PolicyLabels, Counter>,
    pub client_resumptions: Capped<ResumptionLabels, Counter>,
    pub site_handshake_cpu: Capped<SniLabels, Counter<f64>>,
    pub client_failures: Capped<ClientFailureLabels, Counter>,
    pub client_hellos_unread: Capped<ReasonLabels, Counter>,
    pub process_cpu: Capped<CommLabels, Counter<f64>>,
    pub cpu: Capped<CategoryLabels, Counter<f64>>,
    pub crypto_cpu: Capped<PrimitiveLabels, Counter<f64>>,
    pub tls_library: Capped<LibraryLabels, Gauge>,
    pub cpu_samples: Counter,
    pub mode_info: Family<ModeLabels, Gauge>,
    pub sampled_figures: Family<FigureLabels, Gauge>,
    pub probe_duty_cycle: Capped<CommLabels, FGauge>,
    pub probe_hits: Capped<CommLabels, Counter>,
    pub probe_cpu: Capped<CommLabels, Counter<f64>>,
    pub probe_program: Capped<CommLabels, Counter<f64>>,
    pub probe_hit_cost: Family<ProbeLabels, FGauge>,
    pub kernel_hooks: Family<HookLabels, Gauge>,
    pub table_full: Family<TableLabels, Counter>,
    /// Capped only to list its series for the views: its labels are tlsprof's own.
    pub scan_duration: Capped<ScanLabels, Histogram, fn() -> Histogram>,
    pub scrapes_refused: Family<RefusalLabels, Counter>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Every metric of defs::ALL, registered in that order, with the default series cap.
    pub fn new() -> Self {
        Self::with_max_series(capped::DEFAULT_MAX_SERIES)
    }

    /// Every metric of defs::ALL, registered in that order; those with labels other users
    /// control capped at `max_series` series each.
    pub fn with_max_series(max_series: usize) -> Self {
        use defs::*;
        let mut r = Registry::with_prefix("tlsprof");
        let folded = Family::<MetricLabels, Counter>::default();
        Self {
            handshakes: capped(&mut r, &HANDSHAKES, Family::default(), max_series, &folded),
            handshakes_unlabelled: capped(&mut r, &HANDSHAKES_UNLABELLED, Family::default(), max_series, &folded),
            handshake_cpu: capped(&mut r, &HANDSHAKE_CPU, hist(cpu_histogram), max_series, &folded),
            handshake_duration: capped(
                &mut r,
                &HANDSHAKE_DURATION,
                hist(duration_histogram),
                max_series,
                &folded,
            ),
            handshake_failures: capped(&mut r, &HANDSHAKE_FAILURES, Family::default(), max_series, &folded),
            connections_without_tls: capped(&mut r, &CONNECTIONS_WITHOUT_TLS, Family::default(), max_series, &folded),
            failed_handshake_cpu: capped(&mut r, &FAILED_HANDSHAKE_CPU, Family::default(), max_series, &folded),
            attached_processes: capped(&mut r, &ATTACHED_PROCESSES, Family::default(), max_series, &folded),
            handshake_cpu_method: capped(&mut r, &HANDSHAKE_CPU_METHOD, Family::default(), max_series, &folded),
            attached_probes: register(&mut r, &ATTACHED_PROBES, Gauge::default()),
            events_lost: register(&mut r, &EVENTS_LOST, Counter::default()),
            kernel_errors: register(&mut r, &KERNEL_ERRORS, Family::default()),
            unmatched_returns: register(&mut r, &UNMATCHED_RETURNS, Counter::default()),
            attach_failures: register(&mut r, &PROBE_ATTACH_FAILURES, Family::default()),
            agent_cpu: register(&mut r, &AGENT_CPU, Counter::default()),
            agent_memory: register(&mut r, &AGENT_RESIDENT_MEMORY, Gauge::default()),
            connections_accepted: capped(
                &mut r,
                &TCP_CONNECTIONS_ACCEPTED,
                Family::default(),
                max_series,
                &folded,
            ),
            connections: capped(&mut r, &TCP_CONNECTIONS, Family::default(), max_series, &folded),
            time_wait: capped(&mut r, &TCP_TIME_WAIT, Family::default(), max_series, &folded),
            time_wait_sockets: capped(&mut r, &TCP_TIME_WAIT_SOCKETS, Family::default(), max_series, &folded),
            connection_duration: capped(
                &mut r,
                &TCP_CONNECTION_DURATION,
                hist(connection_histogram),
                max_series,
                &folded,
            ),
            requests_per_connection: capped(
                &mut r,
                &REQUESTS_PER_CONNECTION,
                hist(requests_histogram),
                max_series,
                &folded,
            ),
            exchanges: capped(&mut r, &EXCHANGES, Family::default(), max_series, &folded),
            protocols: capped(&mut r, &CONNECTION_PROTOCOLS, Family::default(), max_series, &folded),
            client_hellos: capped(&mut r, &CLIENT_HELLOS, Family::default(), max_series, &folded),
            client_offers: capped(&mut r, &CLIENT_OFFERS, Family::default(), max_series, &folded),
            client_policy: capped(&mut r, &CLIENT_POLICY_OUTCOMES, Family::default(), max_series, &folded),
            client_resumptions: capped(&mut r, &CLIENT_RESUMPTIONS, Family::default(), max_series, &folded),
            site_handshake_cpu: capped(&mut r, &SITE_HANDSHAKE_CPU, Family::default(), max_series, &folded),
            client_failures: capped(&mut r, &CLIENT_FAILURES, Family::default(), max_series, &folded),
            client_hellos_unread: capped(&mut r, &CLIENT_HELLOS_UNREAD, Family::default(), max_series, &folded),
            process_cpu: capped(&mut r, &PROCESS_CPU, Family::default(), max_series, &folded),
            cpu: capped(&mut r, &CPU, Family::default(), max_series, &folded),
            crypto_cpu: capped(&mut r, &CRYPTO_CPU, Family::default(), max_series, &folded),
            tls_library: capped(&mut r, &TLS_LIBRARY_INFO, Family::default(), max_series, &folded),
            cpu_samples: register(&mut r, &CPU_SAMPLES, Counter::default()),
            mode_info: register(&mut r, &MODE_INFO, Family::default()),
            sampled_figures: register(&mut r, &SAMPLED_FIGURE_INFO, Family::default()),
            probe_duty_cycle: capped(&mut r, &PROBE_DUTY_CYCLE, Family::default(), max_series, &folded),
            probe_hits: capped(&mut r, &PROBE_HITS, Family::default(), max_series, &folded),
            probe_cpu: capped(&mut r, &PROBE_CPU, Family::default(), max_series, &folded),
            probe_program: capped(&mut r, &PROBE_PROGRAM, Family::default(), max_series, &folded),
            probe_hit_cost: register(&mut r, &PROBE_HIT_COST, Family::default()),
            kernel_hooks: register(&mut r, &KERNEL_HOOK_INFO, Family::default()),
            table_full: register(&mut r, &TABLE_FULL, Family::default()),
            scan_duration: capped(&mut r, &SCAN_DURATION, hist(scan_histogram), usize::MAX, &folded),
            // Fed by the capped metrics, which share `folded`.
            scrapes_refused: {
                register(&mut r, &SERIES_FOLDED, folded);
                register(&mut r, &SCRAPES_REFUSED, Family::default())
            },
            registry: r,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bpf::handshake::{HandshakeResult, Role};

    #[test]
    fn text_format_names_counters_like_their_samples() {
        let m = Metrics::new();
        let p = ParamLabels::new("nginx", Role::Server, crate::wire::Negotiated::UNKNOWN);
        m.handshakes
            .get_or_create(&p.with_result(HandshakeResult::Ok))
            .inc_by(3);
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
                 cipher=\"other\",group=\"other\",cert=\"other\",resumed=\"false\",transport=\"other\"} 3\n"
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
                 version=\"other\",cipher=\"other\",group=\"other\",cert=\"other\",resumed=\"false\",transport=\"other\"} 1\n"
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

    /// Every declared metric is in the exposition, in order, with its type and help.
    #[test]
    fn exposition_follows_the_declarations() {
        let om = Metrics::new().render_openmetrics();
        let mut at = 0;
        for d in defs::ALL {
            let om_name = d.family();
            let ty = format!("# TYPE {om_name} {}\n", d.type_name());
            let found = om[at..]
                .find(&ty)
                .unwrap_or_else(|| panic!("{ty:?} not in order in:\n{om}"));
            at += found;
            // prometheus-client ends each help with a full stop
            assert!(
                om.contains(&format!("# HELP {om_name} {}.\n", d.help)),
                "help of {om_name}: {om}"
            );
        }
        let families = om.lines().filter(|l| l.starts_with("# TYPE ")).count();
        assert_eq!(
            families,
            defs::ALL.len(),
            "registered metrics that defs::ALL does not list:\n{om}"
        );
        for d in defs::ALL {
            assert_eq!(defs::of_sample(&d.sample_names()[0]).map(|s| s.name), Some(d.name));
        }
    }

    fn project_file(rel: &str) -> String {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(rel);
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    }

    /// How docs/metrics.md names a metric in its tables: as its samples are named, a
    /// histogram by its family.
    fn documented_name(d: &defs::Spec) -> String {
        match d.kind {
            defs::Kind::Histogram => d.family(),
            _ => d.sample(),
        }
    }

    /// Every `tlsprof_…` name in a text, with the label names of a `{…}` selector after it.
    fn mentions(text: &str) -> Vec<(String, Vec<String>)> {
        let text = text.replace("\\\"", "\"");
        let mut out = Vec::new();
        let mut rest = text.as_str();
        while let Some(i) = rest.find("tlsprof_") {
            let ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
            let preceded = rest[..i].chars().next_back().is_some_and(|c| ident(c) || c == ':');
            let after = &rest[i..];
            let end = after.find(|c: char| !ident(c)).unwrap_or(after.len());
            let name = after[..end].to_string();
            rest = &after[end..];
            if preceded {
                continue;
            }
            let mut labels = Vec::new();
            if let Some(sel) = rest.strip_prefix('{') {
                let close = sel.find('}').unwrap_or(sel.len());
                for matcher in sel[..close].split(',') {
                    let key: String = matcher.trim().chars().take_while(|c| ident(*c)).collect();
                    if !key.is_empty() {
                        labels.push(key);
                    }
                }
            }
            out.push((name, labels));
        }
        out
    }

    /// docs/metrics.md documents every metric with its type and labels, and names no other.
    #[test]
    fn docs_match_the_declarations() {
        let doc = project_file("docs/metrics.md");
        let rows: Vec<(String, String, Vec<String>)> = doc
            .lines()
            .filter_map(|l| {
                let cells: Vec<&str> = l.split('|').map(str::trim).collect();
                let name = cells.get(1)?.strip_prefix('`')?.strip_suffix('`')?;
                let ty = cells.get(2)?.split_whitespace().next()?;
                if !matches!(ty, "counter" | "gauge" | "histogram") || name.contains('`') {
                    return None;
                }
                let labels = cells.get(3)?.split(',').map(|l| l.trim().trim_matches('`').to_string());
                Some((
                    name.to_string(),
                    ty.to_string(),
                    labels.filter(|l| !l.is_empty() && l != "—").collect(),
                ))
            })
            .collect();
        for d in defs::ALL {
            let name = documented_name(d);
            let row = rows
                .iter()
                .find(|r| r.0 == name)
                .unwrap_or_else(|| panic!("docs/metrics.md has no table row for {name}"));
            assert_eq!(row.1, d.type_name(), "docs/metrics.md: type of {name}");
            assert_eq!(row.2, d.labels, "docs/metrics.md: labels of {name}");
        }
        assert_eq!(
            rows.len(),
            defs::ALL.len(),
            "docs/metrics.md documents metrics tlsprof does not export"
        );
        for file in [
            "README.md",
            "docs/metrics.md",
            "docs/runbook.md",
            "docs/how-it-works.md",
            "docs/endpoint.md",
            "docs/security.md",
            "docs/troubleshooting.md",
            "docs/hosts.md",
            "docs/dashboards.md",
            "docs/report.md",
            "docs/getting-started.md",
            "docs/privileges.md",
        ] {
            check_mentions(file, &project_file(file));
        }
    }

    fn check_mentions(file: &str, text: &str) {
        for (name, labels) in mentions(text) {
            let d = defs::ALL
                .iter()
                .find(|d| d.sample_names().contains(&name) || d.family() == name)
                .unwrap_or_else(|| panic!("{file} names {name}, which tlsprof does not export"));
            for l in labels {
                assert!(
                    d.labels.contains(&l.as_str()) || ["le", "instance", "job"].contains(&l.as_str()),
                    "{file}: {name} has no label {l} (it has {:?})",
                    d.labels
                );
            }
        }
    }

    /// Every metric the dashboards and the Prometheus rules query is exported, with the
    /// labels they select on.
    #[test]
    fn dashboards_and_rules_query_declared_metrics() {
        let mut seen = 0;
        for file in [
            "dashboards/tlsprof-overview.json",
            "dashboards/tlsprof-process.json",
            "dashboards/build.py",
            "deploy/prometheus/tlsprof-rules.yml",
        ] {
            let text = project_file(file);
            seen += mentions(&text).len();
            check_mentions(file, &text);
        }
        assert!(seen > 50, "the dashboards and rules name only {seen} metrics");
    }
}
