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

type HistFamily<L> = Family<L, Histogram, fn() -> Histogram>;

/// Handshake CPU: 10 µs .. 1 s.
const CPU_BUCKETS: &[f64] = &[
    10e-6, 25e-6, 50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 100e-3, 250e-3, 1.0,
];
/// Handshake wall-clock duration: 50 µs .. 10 s (includes waiting for the peer).
const DURATION_BUCKETS: &[f64] = &[
    50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 100e-3, 250e-3, 500e-3, 1.0, 2.5, 10.0,
];

fn cpu_histogram() -> Histogram {
    Histogram::new(CPU_BUCKETS.iter().copied())
}
fn duration_histogram() -> Histogram {
    Histogram::new(DURATION_BUCKETS.iter().copied())
}

pub struct Metrics {
    pub registry: Registry,
    pub handshakes: Family<HandshakeLabels, Counter>,
    pub handshake_cpu: HistFamily<RoleLabels>,
    pub handshake_duration: HistFamily<RoleLabels>,
    pub failed_handshake_cpu: Family<RoleLabels, Counter<f64>>,
    pub attached_processes: Family<CommLabels, Gauge>,
    pub attached_probes: Gauge,
    pub events_lost: Counter,
    pub kernel_errors: Family<KindLabels, Counter>,
    pub attach_failures: Family<ProbeLabels, Counter>,
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("tlsprof");
        let handshakes = Family::<HandshakeLabels, Counter>::default();
        registry.register(
            "handshakes",
            "TLS handshakes finished, by process name, role (server|client) and result (ok|failed)",
            handshakes.clone(),
        );
        let handshake_cpu = HistFamily::<RoleLabels>::new_with_constructor(cpu_histogram as fn() -> Histogram);
        registry.register_with_unit(
            "handshake_cpu",
            "On-CPU time (user and kernel) of the threads performing a successful handshake, summed over all its calls",
            Unit::Seconds,
            handshake_cpu.clone(),
        );
        let handshake_duration = HistFamily::<RoleLabels>::new_with_constructor(duration_histogram as fn() -> Histogram);
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
        registry.register("attached_processes", "Processes tlsprof has attached its probes to", attached_processes.clone());
        let attached_probes = Gauge::default();
        registry.register("attached_probes", "Uprobes and uretprobes attached now", attached_probes.clone());
        let events_lost = Counter::default();
        registry.register(
            "events_lost",
            "Finished handshakes the kernel could not report because the ring buffer was full",
            events_lost.clone(),
        );
        let kernel_errors = Family::<KindLabels, Counter>::default();
        registry.register(
            "kernel_errors",
            "Kernel-side failure paths taken (thread_map_full, ssl_map_full, unmatched_return)",
            kernel_errors.clone(),
        );
        let attach_failures = Family::<ProbeLabels, Counter>::default();
        registry.register(
            "probe_attach_failures",
            "Probes that failed to attach, by probe (program name)",
            attach_failures.clone(),
        );
        Self {
            registry,
            handshakes,
            handshake_cpu,
            handshake_duration,
            failed_handshake_cpu,
            attached_processes,
            attached_probes,
            events_lost,
            kernel_errors,
            attach_failures,
        }
    }

    pub fn render(&self) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry).expect("writing to a String cannot fail");
        out
    }
}
