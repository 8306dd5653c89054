//! The handshake uprobes (bpf/handshake.bpf.h) and calibration probes (bpf/calib.bpf.h):
//! attached per process, and detached on a thread of their own, because the kernel waits
//! for a grace period per uprobe it removes.
use std::{
    num::NonZeroU32,
    path::Path,
    sync::mpsc::{self, Receiver, SyncSender, TrySendError},
};

use anyhow::{Context as _, Result};
use aya::{
    programs::{
        uprobe::{UProbeAttachLocation, UProbeLink, UProbeLinkId, UProbeScope},
        UProbe,
    },
    Ebpf,
};

use super::loader::Kernel;

/// The handshake probes: their program names are also the `probe` label of
/// tlsprof_probe_attach_failures_total.
pub const UPROBES: &[&str] = &[
    "hs_enter_server",
    "hs_enter_client",
    "hs_enter_any",
    "hs_exit",
    "hs_exit_zero_ok",
    "hs_exit_one_ok",
    "ssl_set_accept_state",
    "ssl_set_connect_state",
    "ssl_reset",
    "ssl_free",
    "hs_go_enter_server",
    "hs_go_enter_client",
    "hs_go_return",
];
/// Attached to the agent itself at start, to measure what one probe hit costs here.
const CALIBRATION: &[&str] = &["calib_entry", "calib_return"];

/// The return probes (one per way a library's return value reads, and Go's return
/// instructions): attached first (budget::attach_plan) and detached first (detach_later).
pub fn is_return_probe(program: &str) -> bool {
    program.starts_with("hs_exit") || program == "hs_go_return"
}

/// One attached program: which, and its link.
pub struct Link {
    pub program: &'static str,
    id: UProbeLinkId,
}

/// Loads the uprobe programs (attached later, per process).
pub(super) fn load(ebpf: &mut Ebpf) -> Result<()> {
    for name in UPROBES.iter().chain(CALIBRATION) {
        let p: &mut UProbe = ebpf
            .program_mut(name)
            .with_context(|| format!("program {name} missing"))?
            .try_into()?;
        p.load()
            .with_context(|| format!("the kernel rejected program {name}"))?;
    }
    Ok(())
}

/// Processes whose probes wait for the detacher thread, at most. Beyond (a burst of exits
/// faster than the kernel's grace periods), a process's probes are detached on the event
/// loop itself, which then waits, and counted: tlsprof_table_full_total{table="detach_queue"}.
pub const MAX_DETACH_QUEUE: usize = 1024;

/// Removals under way at once, at most. The kernel removes uprobes one at a time: each
/// removal waits for RCU grace periods while holding a global mutex (event_mutex; ~0.1 s per
/// probe on Linux 6.18), so threads overlap only what lies outside it (the BPF link's
/// release): 200 probes took 20.5 s from 64 threads, 22 s from one. Bounded, so that a
/// burst of exits does not start hundreds of threads.
const DETACH_THREADS: usize = 64;

/// Detaches probes, in parallel: on up to DETACH_THREADS threads, each removing its share
/// in turn (where a thread cannot be started, its share is removed here).
fn detach_all(mut links: Vec<UProbeLink>) {
    let per = links.len().div_ceil(DETACH_THREADS).max(1);
    std::thread::scope(|s| {
        while !links.is_empty() {
            let share: Vec<UProbeLink> = links.drain(..per.min(links.len())).collect();
            // a share the thread could not take is dropped, detached, on this one
            let _ = std::thread::Builder::new()
                .name("detach".into())
                .spawn_scoped(s, move || drop(share));
        }
    });
}

/// The detacher thread, and its answers: which process's probes are gone.
pub(super) struct Detacher {
    /// None once finished (shutting down): probes are then detached on the caller.
    work: Option<SyncSender<(u32, Vec<UProbeLink>)>>,
    done: Receiver<u32>,
    thread: Option<std::thread::JoinHandle<()>>,
    /// Processes whose probes were detached here, the queue being full.
    done_here: Vec<u32>,
}

impl Detacher {
    pub(super) fn start() -> Result<Self> {
        let (work, todo) = mpsc::sync_channel::<(u32, Vec<UProbeLink>)>(MAX_DETACH_QUEUE);
        let (done_tx, done) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("detacher".into())
            .spawn(move || {
                // every set queued meanwhile in one go (detach_all's threads)
                while let Ok(first) = todo.recv() {
                    let (pids, links): (Vec<u32>, Vec<Vec<UProbeLink>>) =
                        std::iter::once(first).chain(todo.try_iter()).unzip();
                    detach_all(links.into_iter().flatten().collect());
                    for pid in pids {
                        let _ = done_tx.send(pid);
                    }
                }
            })
            .context("cannot start a thread")?;
        Ok(Self {
            work: Some(work),
            done,
            thread: Some(thread),
            done_here: Vec::new(),
        })
    }

    /// Waits for the thread to detach what is queued, and stops it.
    fn finish(&mut self) {
        self.work = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Kernel {
    fn uprobe(&mut self, program: &str) -> &mut UProbe {
        self.ebpf
            .program_mut(program)
            .and_then(|p| <&mut UProbe>::try_from(p).ok())
            .expect("every uprobe program is loaded")
    }

    /// Attaches a uprobe program at a file offset, for one process only.
    pub fn attach_uprobe(&mut self, program: &'static str, offset: u64, target: &Path, pid: u32) -> Result<Link> {
        let scope = UProbeScope::OneProcess(NonZeroU32::new(pid).context("pid 0")?);
        let id = self
            .uprobe(program)
            .attach(UProbeAttachLocation::AbsoluteOffset(offset), target, scope)
            .with_context(|| format!("attaching {program} to {} at {offset:#x}", target.display()))?;
        Ok(Link { program, id })
    }

    /// Detaches a process's probes (it may be gone already; the perf events are closed
    /// either way) on the detacher thread: the kernel waits for a grace period per uprobe it
    /// removes (~150 ms each here), which would stall the event loop. `detached` says when
    /// they are all gone.
    pub fn detach_later(&mut self, pid: u32, mut links: Vec<Link>) {
        // Return probes first: a call that enters while the rest go leaves a stale entry
        // (cleaned by hs_detached), not a return without its entry.
        links.sort_by_key(|l| !is_return_probe(l.program));
        let mut owned = Vec::with_capacity(links.len());
        for l in links {
            if let Ok(link) = self.uprobe(l.program).take_link(l.id) {
                owned.push(link);
            }
        }
        // With the queue full (or the thread gone) the links are dropped, detached, here.
        let Some(work) = &self.detacher.work else {
            detach_all(owned);
            self.detacher.done_here.push(pid);
            return;
        };
        match work.try_send((pid, owned)) {
            Ok(()) => {}
            Err(TrySendError::Full((_, links))) => {
                self.full.add("detach_queue", 1);
                detach_all(links);
                self.detacher.done_here.push(pid);
            }
            Err(TrySendError::Disconnected((_, links))) => {
                detach_all(links);
                self.detacher.done_here.push(pid);
            }
        }
    }

    /// Detaches every process's probes, and what the detacher thread has queued, before
    /// returning (shutting down). It takes as long as the kernel closing the agent's files
    /// at its exit would (~0.1 s per probe: README, "At scale"), but return probes go
    /// first, the agent is still alive and logging meanwhile, and `-v` says how long.
    pub fn detach_now(&mut self, mut links: Vec<Link>) {
        links.sort_by_key(|l| !is_return_probe(l.program));
        let mut owned = Vec::new();
        for l in links {
            if let Ok(link) = self.uprobe(l.program).take_link(l.id) {
                owned.push(link);
            }
        }
        let (n, t) = (owned.len(), std::time::Instant::now());
        let detacher = &mut self.detacher;
        std::thread::scope(|s| {
            s.spawn(|| detacher.finish());
            detach_all(owned);
        });
        log::debug!("detached {n} probes in {:?}", t.elapsed());
    }

    /// Processes whose probes the detacher thread has removed since the last call.
    pub fn detached(&mut self) -> Vec<u32> {
        let mut out = std::mem::take(&mut self.detacher.done_here);
        out.extend(self.detacher.done.try_iter());
        out
    }
}
