//! tlsprof's own health: the kernel side's failure counters (and the kernel's values the
//! agent could not decode) and the agent's CPU and memory.
use crate::{
    bpf::{
        abi,
        loader::Kernel,
        stats::{STATS, STAT_HS_EVENTS_LOST, STAT_HS_UNMATCHED_RETURN},
    },
    discovery::procfs,
    metrics::{KindLabels, Metrics},
};

/// The kind of tlsprof_kernel_errors_total counting program runs the kernel skipped.
const PROGRAM_SKIPPED: &str = "program_skipped";
/// The kind counting event fields whose value their C enum does not name (bpf/abi.rs).
const UNKNOWN_VALUE: &str = "unknown_value";

#[derive(Default)]
pub struct Health {
    /// Kernel failure counters already exported.
    stats_seen: [u64; STATS.len()],
    /// Return probes without their entry already exported (not a failure).
    unmatched_seen: u64,
    /// Unknown enum values already exported.
    unknown_seen: u64,
    /// Each program's runs the kernel skipped, already exported.
    skipped_seen: std::collections::HashMap<String, u64>,
    /// The agent's own CPU seconds already exported.
    cpu_seen: f64,
}

impl Health {
    /// tlsprof_kernel_errors_total{kind} (and tlsprof_events_lost_total) from bpf/stats.h,
    /// and apart from them tlsprof_unmatched_returns_total; tlsprof_table_full_total for
    /// what the agent could not put in a full kernel map.
    pub fn sync_kernel(&mut self, k: &mut Kernel, m: &Metrics) {
        k.full.export(m);
        for (i, &(idx, kind)) in STATS.iter().enumerate() {
            let Some(v) = k.stat(idx) else { continue };
            let delta = v.saturating_sub(self.stats_seen[i]);
            self.stats_seen[i] = v;
            if idx == STAT_HS_EVENTS_LOST {
                m.events_lost.inc_by(delta);
            }
            m.kernel_errors
                .get_or_create(&KindLabels { kind: kind.into() })
                .inc_by(delta);
        }
        if let Some(v) = k.stat(STAT_HS_UNMATCHED_RETURN) {
            m.unmatched_returns.inc_by(v.saturating_sub(self.unmatched_seen));
            self.unmatched_seen = v;
        }
        self.sync_skipped(k, m);
        let unknown = abi::unknown_values();
        if unknown > self.unknown_seen {
            let kind = UNKNOWN_VALUE.into();
            m.kernel_errors
                .get_or_create(&KindLabels { kind })
                .inc_by(unknown - self.unknown_seen);
            self.unknown_seen = unknown;
        }
    }

    /// tlsprof_kernel_errors_total{kind="program_skipped"}: runs of its programs the kernel
    /// skipped (a hook that fired again, from an interrupt, while its program ran on that
    /// CPU); said once per program when it first happens.
    fn sync_skipped(&mut self, k: &Kernel, m: &Metrics) {
        for (name, n) in k.skipped_runs() {
            let seen = self.skipped_seen.get(name).copied().unwrap_or(0);
            if n <= seen {
                continue;
            }
            if seen == 0 {
                log::warn!(
                    "the kernel skipped {n} run(s) of program {name}: the hook fired again, from an interrupt, \
                     while the program ran on that CPU; what those runs would have counted is missing \
                     (tlsprof_kernel_errors_total{{kind=\"program_skipped\"}})"
                );
            }
            let kind = PROGRAM_SKIPPED.into();
            m.kernel_errors.get_or_create(&KindLabels { kind }).inc_by(n - seen);
            self.skipped_seen.insert(name.to_string(), n);
        }
    }

    /// The agent's own CPU time and resident memory, from /proc/self.
    pub fn sync_self(&mut self, m: &Metrics) {
        if let Some((cpu, rss)) = procfs::self_usage() {
            let delta = cpu - self.cpu_seen;
            if delta > 0.0 {
                m.agent_cpu.inc_by(delta);
                self.cpu_seen = cpu;
            }
            m.agent_memory.set(rss as i64);
        }
    }
}
