//! The overhead budget in the default mode: each probed process's handshake probes are
//! attached and detached as its duty cycle says (the arithmetic: duty.rs), from the hits
//! the kernel counts, the cost of one trap measured at start (bpf/calib.rs) and the probe
//! programs' own run time, which they time themselves (hs_hits.prog_ns); what they
//! cost is exported (tlsprof_probe_hits_total, tlsprof_probe_cpu_seconds_total,
//! tlsprof_probe_duty_cycle).
use std::{collections::BTreeMap, path::PathBuf, time::Instant};

use super::{
    duty::{Action, Duty},
    targets::Targets,
};
use crate::{
    bpf::{
        calib::HitCost,
        handshake::hs_hits,
        loader::Kernel,
        uprobes::{is_return_probe, Link},
    },
    clock::ktime_ns,
    cpu::Profiler,
    metrics::{CommLabels, Metrics},
};

/// A process's handshake probes: what to attach, what is attached, and its budget.
pub struct Probes {
    /// The probes to attach: program, file offset, file.
    pub plan: Vec<(&'static str, u64, PathBuf)>,
    /// The attached ones.
    pub links: Vec<Link>,
    /// The overhead budget's duty cycle (default mode, when any probe attached).
    duty: Option<Duty>,
    /// When the probes were last attached (bpf_ktime_get_ns clock): a handshake on a
    /// connection accepted before that may have had calls they missed.
    pub window_start_ns: u64,
    /// Hit counters (hs_hits) already exported: the highest read of each.
    hits_seen: hs_hits,
    /// The probes' CPU cost so far (hits x the cost of one trap, plus their programs' run time).
    probe_cpu: f64,
    /// When they were handed to the detacher thread.
    detach_sent: Option<Instant>,
    /// Some entry probe is single-stepped by the kernel: an entry hit costs the stepped
    /// calibration, else the emulated one.
    pub stepped: bool,
}

impl Probes {
    pub fn new(
        plan: Vec<(&'static str, u64, PathBuf)>,
        links: Vec<Link>,
        duty: Option<Duty>,
        stepped: bool,
        now_ns: u64,
    ) -> Self {
        Self {
            plan,
            links,
            duty,
            window_start_ns: now_ns,
            hits_seen: hs_hits::default(),
            probe_cpu: 0.0,
            detach_sent: None,
            stepped,
        }
    }
}

/// Attaches the probes of a plan to a process; `failed` hears of each that did not attach.
pub fn attach_plan(
    k: &mut Kernel,
    pid: u32,
    plan: &[(&'static str, u64, PathBuf)],
    mut failed: impl FnMut(&'static str, anyhow::Error),
) -> Vec<Link> {
    let mut links = Vec::new();
    // Return probes first: a call under way while the rest attach then shows a return
    // without its entry (counted, ignored), never an entry without its return, which would
    // leave the thread's call open (bpf/handshake.bpf.h, hs_enter).
    let mut plan: Vec<_> = plan.iter().collect();
    plan.sort_by_key(|(prog, _, _)| !is_return_probe(prog));
    for (prog, off, path) in plan {
        match k.attach_uprobe(prog, *off, path, pid) {
            Ok(l) => links.push(l),
            Err(e) => failed(prog, e),
        }
    }
    links
}

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
        // Probes the detacher thread removed: a thread that was inside a handshake call then
        // will not return through the probe (hs_detached, in the kernel).
        for pid in k.detached() {
            let Some(p) = t.traced.get_mut(&pid).and_then(|t| t.probes.as_mut()) else {
                continue;
            };
            k.mark_detached(pid);
            if let (Some(d), Some(sent)) = (p.duty.as_mut(), p.detach_sent.take()) {
                d.detached();
                log::debug!(
                    "budget: probes of {pid} detached in {:.0} ms",
                    sent.elapsed().as_secs_f64() * 1e3
                );
            }
        }
        let now = Instant::now();
        let c = self.hit_cost.unwrap_or_default();
        let mut next: Option<Instant> = None;
        let mut changed = false;
        for (&pid, traced) in t.traced.iter_mut() {
            let Some(p) = traced.probes.as_mut() else {
                continue; // no handshake probes: no hits to read
            };
            let hits = k.hits(pid);
            let seen = &mut p.hits_seen;
            let (de, dr, dns) = (
                hits.entries.saturating_sub(seen.entries),
                hits.returns.saturating_sub(seen.returns),
                hits.prog_ns.saturating_sub(seen.prog_ns),
            );
            seen.entries = seen.entries.max(hits.entries);
            seen.returns = seen.returns.max(hits.returns);
            seen.prog_ns = seen.prog_ns.max(hits.prog_ns);
            let ce = if p.stepped { c.stepped } else { c.emulated };
            // The traps, as calibrated (with a no-op program), and the programs' own time.
            let programs = dns as f64 * 1e-9;
            let cpu = de as f64 * ce + dr as f64 * c.ret + programs;
            p.probe_cpu += cpu;
            if de + dr > 0 {
                let c = CommLabels {
                    comm: traced.name.clone(),
                };
                m.probe_hits.get_or_create(&c).inc_by(de + dr);
                m.probe_cpu.get_or_create(&c).inc_by(cpu);
                m.probe_program.get_or_create(&c).inc_by(programs);
            }
            let total = p.probe_cpu;
            let Some(d) = p.duty.as_mut() else { continue };
            let action = d.step(now, total);
            let due = d.next_step(total);
            next = Some(next.map_or(due, |n: Instant| n.min(due)));
            match action {
                Action::Detach => {
                    let links = std::mem::take(&mut p.links);
                    log::debug!("budget: detaching {} probes from {pid}", links.len());
                    p.detach_sent = Some(Instant::now());
                    k.detach_later(pid, links);
                    prof.set_probes(pid, false);
                    changed = true;
                }
                Action::Attach => {
                    let t0 = Instant::now();
                    let comm = &traced.comm;
                    p.links = attach_plan(k, pid, &p.plan, |_, e| {
                        log::debug!("re-attaching to {pid} ({comm}): {e:#}")
                    });
                    if p.links.is_empty() {
                        log::debug!("budget: no probe of {pid} attached again; next cycle tries again");
                        d.attach_failed();
                        continue;
                    }
                    log::debug!(
                        "budget: attached {} probes to {pid} in {:.1} ms",
                        p.links.len(),
                        t0.elapsed().as_secs_f64() * 1e3
                    );
                    p.window_start_ns = ktime_ns();
                    prof.set_probes(pid, true);
                    changed = true;
                }
                Action::Keep => {}
            }
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
    for traced in t.traced.values() {
        let Some(p) = &traced.probes else { continue };
        let (d, w) = p
            .duty
            .as_ref()
            .map_or((1.0, 0.0), |d| (d.duty(now), d.rate().unwrap_or(0.0)));
        let e = per.entry(&traced.name).or_default();
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
