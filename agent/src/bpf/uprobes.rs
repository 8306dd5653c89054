//! The handshake uprobes (bpf/handshake.bpf.h) and calibration probes (bpf/calib.bpf.h):
//! attached per process, shared per file where tracefs allows (shared_uprobes.rs), else
//! through the perf uprobe PMU, one uprobe per process and probe; and detached on a thread
//! of their own, because the kernel waits for grace periods per uprobe it removes.
use std::{
    num::NonZeroU32,
    os::fd::{AsFd as _, OwnedFd},
    path::Path,
    sync::mpsc::{self, Receiver, SyncSender, TrySendError},
};

use anyhow::{Context as _, Result};
use aya::{
    programs::{
        uprobe::{UProbeAttachLocation, UProbeLinkId, UProbeScope},
        UProbe,
    },
    Ebpf,
};

use super::{loader::Kernel, shared_uprobes};

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

/// One attached program: which, and how.
pub struct Link {
    pub program: &'static str,
    how: How,
}

enum How {
    /// A uprobe of the process's own (the perf uprobe PMU, through aya).
    Own(UProbeLinkId),
    /// The process's perf event on a shared uprobe (shared_uprobes.rs).
    Shared(shared_uprobes::Key, OwnedFd),
}

/// What is removed by dropping it (as hooks::detach_links's links): a process's own uprobe
/// (~0.1 s in the kernel), its perf event on a shared uprobe (at once), or a shared uprobe
/// no process uses any more (shared_uprobes::Released, ~0.1 s).
type Removal = Box<dyn Send>;

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
fn detach_all(mut links: Vec<Removal>) {
    let per = links.len().div_ceil(DETACH_THREADS).max(1);
    std::thread::scope(|s| {
        while !links.is_empty() {
            let share: Vec<Removal> = links.drain(..per.min(links.len())).collect();
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
    work: Option<SyncSender<(u32, Vec<Removal>)>>,
    done: Receiver<u32>,
    thread: Option<std::thread::JoinHandle<()>>,
    /// Processes whose probes were detached here, the queue being full.
    done_here: Vec<u32>,
}

impl Detacher {
    pub(super) fn start() -> Result<Self> {
        let (work, todo) = mpsc::sync_channel::<(u32, Vec<Removal>)>(MAX_DETACH_QUEUE);
        let (done_tx, done) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("detacher".into())
            .spawn(move || {
                // every set queued meanwhile in one go (detach_all's threads)
                while let Ok(first) = todo.recv() {
                    let (pids, links): (Vec<u32>, Vec<Vec<Removal>>) =
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

    /// Attaches a uprobe program at a file offset, for one process only: on the file's
    /// shared uprobe where tracefs allows, else a uprobe of the process's own.
    pub fn attach_uprobe(&mut self, program: &'static str, offset: u64, target: &Path, pid: u32) -> Result<Link> {
        if let Some(shared) = self.shared_uprobes.as_mut() {
            let prog = self
                .ebpf
                .program(program)
                .and_then(|p| <&UProbe>::try_from(p).ok())
                .expect("every uprobe program is loaded");
            let fd = prog.fd().context("program not loaded")?.as_fd();
            match shared.attach(program, fd, is_return_probe(program), offset, target, pid) {
                Ok((key, fd)) => {
                    return Ok(Link {
                        program,
                        how: How::Shared(key, fd),
                    })
                }
                // the process is gone, or may not be traced: the same below
                Err(e) => log::debug!("uprobes: {e:#}; attaching {program} for {pid} alone"),
            }
        }
        self.attach_own_uprobe(program, offset, target, pid)
    }

    /// Attaches a uprobe of the process's own (the perf uprobe PMU).
    pub fn attach_own_uprobe(&mut self, program: &'static str, offset: u64, target: &Path, pid: u32) -> Result<Link> {
        let scope = UProbeScope::OneProcess(NonZeroU32::new(pid).context("pid 0")?);
        let id = self
            .uprobe(program)
            .attach(UProbeAttachLocation::AbsoluteOffset(offset), target, scope)
            .with_context(|| format!("attaching {program} to {} at {offset:#x}", target.display()))?;
        Ok(Link {
            program,
            how: How::Own(id),
        })
    }

    /// Links turned into removals, return probes first: a call that enters while the rest
    /// go leaves a stale entry (cleaned by hs_detached), not a return without its entry.
    fn removals(&mut self, mut links: Vec<Link>) -> Vec<Removal> {
        links.sort_by_key(|l| !is_return_probe(l.program));
        let mut out: Vec<Removal> = Vec::with_capacity(links.len());
        for l in links {
            match l.how {
                How::Own(id) => {
                    if let Ok(link) = self.uprobe(l.program).take_link(id) {
                        out.push(Box::new(link));
                    }
                }
                How::Shared(key, fd) => {
                    if let Some(s) = self.shared_uprobes.as_mut() {
                        s.put(&key);
                    }
                    out.push(Box::new(fd));
                }
            }
        }
        out
    }

    /// Detaches a process's probes (it may be gone already; the perf events are closed
    /// either way) on the detacher thread: the kernel waits for grace periods per uprobe of
    /// a process's own it removes (~150 ms each here), which would stall the event loop.
    /// `detached` says when they are all gone.
    pub fn detach_later(&mut self, pid: u32, links: Vec<Link>) {
        let owned = self.removals(links);
        self.queue_removals(pid, owned);
    }

    fn queue_removals(&mut self, pid: u32, owned: Vec<Removal>) {
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

    /// Shared uprobes no process has used for shared_uprobes::RELEASE_AFTER, removed on
    /// the detacher thread (pid 0: no process waits for them).
    pub fn release_idle_uprobes(&mut self) {
        let Some(s) = self.shared_uprobes.as_mut() else { return };
        let gone: Vec<Removal> = s.release(false).into_iter().map(|r| Box::new(r) as Removal).collect();
        if !gone.is_empty() {
            log::debug!("uprobes: releasing {} shared uprobes no process uses", gone.len());
            self.queue_removals(0, gone);
        }
    }

    /// Detaches every process's probes, and what the detacher thread has queued, before
    /// returning (shutting down); then the shared uprobes. A process's perf event on a
    /// shared uprobe goes at once, a uprobe takes ~0.1 s (docs/how-it-works.md): one per
    /// probe and file when shared, one per probe and process otherwise. Return probes go
    /// first, the agent is still alive and logging meanwhile, and `-v` says how long.
    pub fn detach_now(&mut self, links: Vec<Link>) {
        let owned = self.removals(links);
        let (n, t) = (owned.len(), std::time::Instant::now());
        let detacher = &mut self.detacher;
        std::thread::scope(|s| {
            s.spawn(|| detacher.finish());
            detach_all(owned);
        });
        let shared: Vec<Removal> = self
            .shared_uprobes
            .as_mut()
            .map(|s| s.release(true))
            .unwrap_or_default()
            .into_iter()
            .map(|r| Box::new(r) as Removal)
            .collect();
        let m = shared.len();
        detach_all(shared);
        log::debug!(
            "detached {n} probes and removed {m} shared uprobes in {:?}",
            t.elapsed()
        );
    }

    /// Processes whose probes the detacher thread has removed since the last call.
    pub fn detached(&mut self) -> Vec<u32> {
        let mut out = std::mem::take(&mut self.detacher.done_here);
        out.extend(self.detacher.done.try_iter());
        out
    }
}
