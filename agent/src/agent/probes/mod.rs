//! Handshake probes, and the one owner of whether they are attached: only this module plans
//! them (prober.rs: from a process's files, as the options say), attaches and detaches them
//! (at first, as the overhead budget says, when the process goes, at shutdown), and only it
//! tells the kernel (hs_detached, needs_reads) and the CPU split (Profiler::set_probes) that
//! they came or went. It keeps the overhead budget's state of each process (its duty cycle,
//! the hits and CPU charged so far); budget.rs asks for it. The rest ask:
//! `Probing::attached`, `Probing::why_none`, `Probes::window_start_ns`.
mod probed;
mod prober;

use std::{path::PathBuf, time::Instant};

pub use self::{probed::Probed, prober::Prober};
use super::{
    duty::{Action, Duty},
    no_probes::NoProbes,
    trap_cost::TrapCost,
};
use crate::{
    bpf::{
        handshake::hs_hits,
        loader::Kernel,
        uprobes::{is_return_probe, Link},
    },
    clock::ktime_ns,
    cpu::{Profiler, TrapTime},
};

/// The probes to attach: program, file offset, file.
pub type Plan = Vec<(&'static str, u64, PathBuf)>;

/// What a traced process has for its handshakes: probes, or the reason it has none (its
/// handshake CPU is then the kernel's estimate).
pub enum Probing {
    Probes(Box<Probes>),
    Without(NoProbes),
}

impl Probing {
    pub fn probes(&self) -> Option<&Probes> {
        match self {
            Probing::Probes(p) => Some(&**p),
            Probing::Without(_) => None,
        }
    }

    pub fn probes_mut(&mut self) -> Option<&mut Probes> {
        match self {
            Probing::Probes(p) => Some(&mut **p),
            Probing::Without(_) => None,
        }
    }

    /// Why it has no probes; None: it has.
    pub fn why_none(&self) -> Option<NoProbes> {
        match self {
            Probing::Probes(_) => None,
            Probing::Without(why) => Some(*why),
        }
    }

    /// Its probes are attached now (the overhead budget detaches them for part of a cycle).
    pub fn attached(&self) -> bool {
        self.probes().is_some_and(|p| !p.links.is_empty())
    }

    /// Its probes go, with the process (detached by the detacher thread).
    pub fn release(self, pid: u32, k: &mut Kernel) {
        if let Probing::Probes(p) = self {
            k.detach_later(pid, p.links);
        }
    }

    /// The process is traced now: the CPU split hears whether its probes are attached, and
    /// the kernel that a Go program's goroutines' stretches open and close at its reads.
    pub fn traced(&self, pid: u32, k: &mut Kernel, prof: &mut Profiler) {
        prof.set_probes(pid, self.attached());
        if self.probes().is_some_and(Probes::go) {
            k.needs_reads(pid);
        }
    }

    /// Shutting down: every process's probes detached at once (Kernel::detach_now), each
    /// process marked as being detached first (`Probes::detach`: the events drained after
    /// the removal take no free for a failed handshake).
    pub fn release_all<'a>(all: impl Iterator<Item = (u32, &'a mut Probing)>, k: &mut Kernel) {
        let mut links = Vec::new();
        for (pid, p) in all {
            let Some(probes) = p.probes_mut() else { continue };
            if !probes.links.is_empty() {
                k.mark_detaching(pid);
                links.append(&mut probes.links);
            }
        }
        k.detach_now(links);
    }
}

/// A process's handshake probes: what to attach, what is attached, and its budget.
pub struct Probes {
    plan: Plan,
    links: Vec<Link>,
    /// The overhead budget's duty cycle (default mode).
    duty: Option<Duty>,
    /// When the probes were last attached (bpf_ktime_get_ns clock): a handshake on a
    /// connection accepted before that may have had calls they missed.
    window_start_ns: u64,
    /// When they were first attached (bpf_ktime_get_ns clock).
    first_ns: u64,
    /// Hit counters (hs_hits) already exported: the highest read of each (budget.rs).
    hits_seen: hs_hits,
    /// The probes' CPU cost so far (hits x the cost of one trap, plus their programs' run
    /// time; budget.rs).
    probe_cpu: f64,
    /// What their traps cost this process by its own samples (trap_cost.rs).
    trap_cost: TrapCost,
    /// When they were handed to the detacher thread.
    detach_sent: Option<Instant>,
    /// Some entry probe is single-stepped by the kernel: an entry hit costs the stepped
    /// calibration, else the emulated one.
    stepped: bool,
}

impl Probes {
    /// Attaches a process's probes for the first time (Prober::attach); `failed` hears of
    /// each that did not attach. None: none did. `duty`: the budget's cycle, in the default
    /// mode.
    fn attach(
        k: &mut Kernel,
        pid: u32,
        plan: Plan,
        stepped: bool,
        duty: Option<Duty>,
        failed: impl FnMut(&'static str, anyhow::Error),
    ) -> Option<Probes> {
        let links = attach_plan(k, pid, &plan, failed);
        (!links.is_empty()).then(|| Probes {
            plan,
            links,
            duty,
            window_start_ns: ktime_ns(),
            first_ns: ktime_ns(),
            hits_seen: hs_hits::default(),
            probe_cpu: 0.0,
            trap_cost: TrapCost::default(),
            detach_sent: None,
            stepped,
        })
    }

    pub fn window_start_ns(&self) -> u64 {
        self.window_start_ns
    }

    /// When they were first attached (the kernel's proc_traced.probed_ns): the kernel
    /// estimates the connections accepted before, outside the probed calls.
    pub fn first_ns(&self) -> u64 {
        self.first_ns
    }

    /// How many are attached now.
    pub fn count(&self) -> usize {
        self.links.len()
    }

    /// Whether a Go program's (its goroutines' stretches open and close at its reads).
    fn go(&self) -> bool {
        self.plan.iter().any(|(prog, _, _)| prog.starts_with("hs_go_"))
    }

    /// Some entry probe is single-stepped by the kernel (the cost of its hits: budget.rs).
    pub fn stepped(&self) -> bool {
        self.stepped
    }

    /// The hits counted since the last call (`hits`: the kernel's counters now); the
    /// highest read of each is remembered.
    pub fn new_hits(&mut self, hits: hs_hits) -> hs_hits {
        let seen = &mut self.hits_seen;
        let new = hs_hits {
            entries: hits.entries.saturating_sub(seen.entries),
            returns: hits.returns.saturating_sub(seen.returns),
            prog_ns: hits.prog_ns.saturating_sub(seen.prog_ns),
        };
        seen.entries = seen.entries.max(hits.entries);
        seen.returns = seen.returns.max(hits.returns);
        seen.prog_ns = seen.prog_ns.max(hits.prog_ns);
        new
    }

    /// The probes cost more (budget.rs): their traps `traps` seconds by the calibration,
    /// charged as this process's trap samples so far (`sampled`) scale it, and their
    /// programs `programs` seconds, as they time themselves. Returns the charge.
    pub fn charge(&mut self, traps: f64, programs: f64, sampled: Option<TrapTime>) -> f64 {
        let cpu = self.trap_cost.charge(traps, sampled) + programs;
        self.probe_cpu += cpu;
        cpu
    }

    /// One step of the budget's duty cycle (default mode): detached or attached again as it
    /// says. None without a cycle; else when it should step next at the latest, and whether
    /// the probes came or went.
    pub fn step_duty(
        &mut self,
        now: Instant,
        pid: u32,
        comm: &str,
        k: &mut Kernel,
        prof: &mut Profiler,
    ) -> Option<(Instant, bool)> {
        let total = self.probe_cpu;
        let d = self.duty.as_mut()?;
        // the budget is a share of the server's own CPU, which the kernel sums where CPU
        // attribution is on (else a share of one CPU)
        if let Some(ns) = k.oncpu_ns(pid).filter(|_| prof.enabled()) {
            d.server_cpu(now, ns as f64 * 1e-9);
        }
        let action = d.step(now, total);
        let due = d.next_step(total);
        let changed = match action {
            Action::Detach => {
                self.detach(pid, k, prof);
                true
            }
            Action::Attach => {
                let attached = self.reattach(pid, comm, k, prof);
                if !attached {
                    if let Some(d) = self.duty.as_mut() {
                        d.attach_failed();
                    }
                }
                attached
            }
            Action::Keep => false,
        };
        Some((due, changed))
    }

    /// The duty cycle now and the rate the probes are hit at while attached (0 before it
    /// is measured); (1, 0) without a cycle (tlsprof_probe_duty_cycle).
    pub fn duty_now(&self, now: Instant) -> (f64, f64) {
        self.duty
            .as_ref()
            .map_or((1.0, 0.0), |d| (d.duty(now), d.rate().unwrap_or(0.0)))
    }

    /// The budget's off part begins: handed to the detacher thread.
    fn detach(&mut self, pid: u32, k: &mut Kernel, prof: &mut Profiler) {
        let links = std::mem::take(&mut self.links);
        log::debug!("budget: detaching {} probes from {pid}", links.len());
        self.detach_sent = Some(Instant::now());
        k.mark_detaching(pid);
        k.detach_later(pid, links);
        prof.set_probes(pid, false);
    }

    /// The detacher thread removed them: a thread that was inside a handshake call then
    /// will not return through the probe (hs_detached, in the kernel).
    pub fn detached(&mut self, pid: u32, k: &mut Kernel) {
        k.mark_detached(pid);
        if let (Some(d), Some(sent)) = (self.duty.as_mut(), self.detach_sent.take()) {
            d.detached();
            log::debug!(
                "budget: probes of {pid} detached in {:.0} ms",
                sent.elapsed().as_secs_f64() * 1e3
            );
        }
    }

    /// The budget's on part begins: attached again. False when none would attach (the
    /// next cycle tries again).
    fn reattach(&mut self, pid: u32, comm: &str, k: &mut Kernel, prof: &mut Profiler) -> bool {
        let t0 = Instant::now();
        self.links = attach_plan(k, pid, &self.plan, |_, e| {
            log::debug!("re-attaching to {pid} ({comm}): {e:#}")
        });
        if self.links.is_empty() {
            log::debug!("budget: no probe of {pid} attached again; next cycle tries again");
            return false;
        }
        log::debug!(
            "budget: attached {} probes to {pid} in {:.1} ms",
            self.links.len(),
            t0.elapsed().as_secs_f64() * 1e3
        );
        self.window_start_ns = ktime_ns();
        prof.set_probes(pid, true);
        true
    }
}

/// Attaches the probes of a plan to a process; `failed` hears of each that did not attach.
fn attach_plan(
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
