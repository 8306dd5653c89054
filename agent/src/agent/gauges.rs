//! What is attached, as gauges: tlsprof_attached_processes, tlsprof_handshake_cpu_method_info
//! and tlsprof_attached_probes, from the traced processes (targets/).
use std::collections::{BTreeMap, BTreeSet};

use super::no_probes::{self, NoProbes};
use crate::metrics::{CommLabels, LabelValue, MethodLabels, Metrics};

/// A traced process, as the gauges see it.
pub struct Attached<'a> {
    pub name: &'a str,
    /// Why it has no handshake probes; None: it has.
    pub why_no_probes: Option<NoProbes>,
    /// Probes attached now.
    pub probes: usize,
}

/// Exports the gauges of the processes traced now; the names in `ever_attached` that are
/// no longer traced go to zero rather than vanish, so that rates and alerts stay sane.
pub fn export<'a>(m: &Metrics, traced: impl Iterator<Item = Attached<'a>>, ever_attached: &BTreeSet<String>) {
    let mut per_comm: BTreeMap<&str, i64> = BTreeMap::new();
    let mut per_method: BTreeMap<(&str, Option<NoProbes>), i64> = BTreeMap::new();
    let mut probes = 0;
    for t in traced {
        *per_comm.entry(t.name).or_default() += 1;
        *per_method.entry((t.name, t.why_no_probes)).or_default() += 1;
        probes += t.probes as i64;
    }
    for comm in ever_attached {
        if !per_comm.contains_key(comm.as_str()) {
            m.attached_processes
                .get_or_create(&CommLabels { comm: comm.clone() })
                .set(0);
        }
        for why in std::iter::once(None).chain(NoProbes::ALL.map(Some)) {
            if !per_method.contains_key(&(comm.as_str(), why)) {
                let (method, reason) = no_probes::labels(why);
                let labels = MethodLabels {
                    comm: comm.clone(),
                    method: method.label().into(),
                    reason: reason.into(),
                };
                // only where it was ever set: a name gets one series per method it had
                if m.handshake_cpu_method.exists(&labels) {
                    m.handshake_cpu_method.get_or_create(&labels).set(0);
                }
            }
        }
    }
    for ((comm, why), n) in per_method {
        let (method, reason) = no_probes::labels(why);
        m.handshake_cpu_method
            .get_or_create(&MethodLabels {
                comm: comm.into(),
                method: method.label().into(),
                reason: reason.into(),
            })
            .set(n);
    }
    for (comm, n) in per_comm {
        m.attached_processes
            .get_or_create(&CommLabels { comm: comm.into() })
            .set(n);
    }
    m.attached_probes.set(probes);
}
