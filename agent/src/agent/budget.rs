//! The overhead budget in the default mode: when each probed process's handshake probes
//! are attached and detached (which probes/ does, and where each one's cycle and charges
//! are kept), as its duty cycle says (the arithmetic: duty.rs), from the hits
//! the kernel counts, the cost of one trap measured at start (bpf/calib.rs) and the probe
//! programs' own run time, which they time themselves (hs_hits.prog_ns), scaled to what
//! the process's own samples show its traps cost it (trap_cost.rs); what they
//! cost is exported (tlsprof_probe_hits_total, tlsprof_probe_cpu_seconds_total,
//! tlsprof_probe_duty_cycle).
use std::{collections::BTreeMap, time::Instant};

use super::targets::Targets;
use crate::{
    bpf::{calib::HitCost, loader::Kernel},
    cpu::Profiler,
    metrics::{CommLabels, Metrics},
};

pub struct Budget {
    /// CPU seconds of each kind of probe hit here (None: not measured).
    hit_cost: Option<HitCost>,
}

impl Budget {
    pub fn new(hit_cost: Option<HitCost>) -> Self {
        Self { hit_cost }
    }

    /// Reads each probed process's hits, exports them and their cost, and attaches or
    /// detaches its probes as its duty cycle says. Returns when it should run next at the
    /// latest.
    pub fn tick(&mut self, t: &mut Targets, k: &mut Kernel, prof: &mut Profiler, m: &Metrics) -> Option<Instant> {
        for pid in k.detached() {
            if let Some(p) = t.probes_mut(pid) {
                p.detached(pid, k);
            }
        }
        let now = Instant::now();
        let c = self.hit_cost.unwrap_or_default();
        let mut next: Option<Instant> = None;
        let mut changed = false;
        for (pid, name, comm, p) in t.probed_mut() {
            let new = p.new_hits(k.hits(pid));
            let ce = if p.stepped() { c.stepped } else { c.emulated };
            // The traps, as calibrated (with a no-op program) and scaled to what the
            // process's own samples show they cost it, and the programs' own time.
            let programs = new.prog_ns as f64 * 1e-9;
            let traps = new.entries as f64 * ce + new.returns as f64 * c.ret;
            let cpu = p.charge(traps, programs, prof.trap_time(pid));
            if new.entries + new.returns > 0 {
                let c = CommLabels { comm: name.to_string() };
                m.probe_hits.get_or_create(&c).inc_by(new.entries + new.returns);
                m.probe_cpu.get_or_create(&c).inc_by(cpu);
                m.probe_program.get_or_create(&c).inc_by(programs);
            }
            let Some((due, moved)) = p.step_duty(now, pid, comm, k, prof) else {
                continue;
            };
            next = Some(next.map_or(due, |n: Instant| n.min(due)));
            changed |= moved;
        }
        if changed {
            t.export_gauges(m);
        }
        export_duty(t, m);
        next
    }
}

/// tlsprof_probe_duty_cycle: per process name, the mean over its probed processes
/// weighted by how fast their probes are hit while attached (an idle nginx master does
/// not dilute its busy workers' ratio); the plain mean while all are idle.
fn export_duty(t: &Targets, m: &Metrics) {
    let now = Instant::now();
    let mut per: BTreeMap<&str, (f64, f64, f64, u32)> = BTreeMap::new();
    for (name, p) in t.probed() {
        let (d, w) = p.duty_now(now);
        let e = per.entry(name).or_default();
        e.0 += d * w;
        e.1 += w;
        e.2 += d;
        e.3 += 1;
    }
    for (comm, (weighted, weight, sum, n)) in per {
        let duty = if weight > 0.0 {
            weighted / weight
        } else {
            sum / n as f64
        };
        m.probe_duty_cycle
            .get_or_create(&CommLabels { comm: comm.into() })
            .set(duty);
    }
}
