//! The read side (`req_recv` on `sock_recv_length`, or its fallbacks: bpf/requests.bpf.h)
//! is attached only while something needs it: a process whose handshake CPU the kernel
//! estimates (beside probes still judged: switched on by the kernel at the first
//! ClientHello, `req_ctl.reads_at_hello`, and then only for a connection's first bytes), a
//! Go process's probes, `--exact` (for the estimate of processes that live for
//! one connection: without a selector all along; with one it stays attached, switched off
//! until a traced process forks or execs, read_switch.rs `configure`), or a kernel whose sends
//! cannot be captured.
//! Attached, it runs at every socket read of the machine (~27 per new TLS connection, ~4 per
//! keep-alive request, both ends of loopback traffic counted); the `req_ctl.reads` switch
//! made each such run return after one array lookup, detaching it makes them not happen.
//! It is found and attached at start like every capability (agent/src/bpf/hooks.rs), then
//! detached at once when nothing needs it, attached again (no new load: the programs stay
//! verified) when something does, and detached again once nothing has needed it for
//! `LINGER` (at once where a process's estimate ended and the process stays). Where the kernel cannot attach a detached fexit program again (before 5.13:
//! Debian 11's 5.10), it stays attached and `req_ctl.reads` alone switches it.
use std::time::{Duration, Instant};

use aya::{Btf, Ebpf};

use super::{
    abi::req_reads,
    hooks::{self, Hook, LinkRef},
};

/// Whether the kernel estimates a traced process's handshake CPU, and so what its reads need.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Estimate {
    /// No: its probes time its handshakes.
    Off,
    /// Beside its probes, until a handshake tells whether they see them (agent/sightings.rs):
    /// a figure for every handshake from the first, whenever it comes, read from the reads
    /// within a connection's first bytes only (`REQ_READS_HANDSHAKES`).
    BesideProbes,
    /// Its handshakes' CPU is the estimate's (no probes, or probes that miss them): every
    /// read of its connections.
    Alone,
}

impl Estimate {
    /// What the read side must do for it.
    pub fn reads(self) -> req_reads {
        match self {
            Estimate::Off => req_reads::Off,
            Estimate::BesideProbes => req_reads::Handshakes,
            Estimate::Alone => req_reads::All,
        }
    }
}

/// How long the read side stays attached after the last process that needed it left: the
/// short-lived children of a forking server do not attach and detach it each time.
const LINGER: Duration = Duration::from_secs(10);

pub(super) struct ReadSide {
    /// The hook that serves it on this kernel (None: nothing does).
    hook: Option<Hook>,
    links: Vec<(&'static str, LinkRef)>,
    unneeded_since: Option<Instant>,
    /// Attached for good, the `req_ctl.reads` switch alone turns it off: this kernel cannot
    /// attach its programs again once detached, or the kernel switches it on by itself.
    pinned: bool,
}

impl ReadSide {
    pub(super) fn new(hook: Option<Hook>, links: Vec<(&'static str, LinkRef)>) -> Self {
        Self {
            hook,
            links,
            unneeded_since: None,
            pinned: false,
        }
    }

    /// At start, nothing needs it: detached, once it is known that this kernel can attach it
    /// again. fentry/fexit programs (5.10 and 6.1 serve the read side with fexit) cannot be
    /// attached again before Linux 5.13: tried here, and where the kernel refuses, loaded
    /// anew and kept attached (pinned).
    pub(super) fn detach_at_start(&mut self, ebpf: &mut Ebpf, btf: &Btf) {
        let Some(hook) = self.hook else { return };
        if !self.attached() {
            return;
        }
        // dropped here: a tracing program is attached again only once its link is gone
        drop(hooks::detach_links(ebpf, std::mem::take(&mut self.links)));
        if !hooks::has_tracing_programs(&hook) {
            log::debug!("kernel: read side detached until something needs it");
            return;
        }
        match hooks::reattach_hook(ebpf, &hook) {
            Ok(links) => {
                drop(hooks::detach_links(ebpf, links));
                log::debug!("kernel: read side detached until something needs it");
            }
            Err(e) => {
                log::debug!("kernel: read side kept attached (switched off): {e:#}");
                self.pinned = true;
                match hooks::reload_hook(ebpf, btf, &hook) {
                    Ok(links) => self.links = links,
                    Err(e) => log::warn!("cannot attach the read side again ({}): {e:#}", hook.label),
                }
            }
        }
    }

    /// Attached for the whole run, switched by `req_ctl.reads` alone: the kernel switches
    /// it on by itself (`reads_at_fork`), which it could not do detached.
    pub(super) fn stay_attached(&mut self) {
        self.pinned = true;
    }

    /// Whether its programs are attached now.
    pub(super) fn attached(&self) -> bool {
        !self.links.is_empty()
    }

    /// Something needs the reads: attached again if it was detached.
    pub(super) fn need(&mut self, ebpf: &mut Ebpf) {
        self.unneeded_since = None;
        let Some(hook) = self.hook else { return };
        if self.attached() {
            return;
        }
        match hooks::reattach_hook(ebpf, &hook) {
            Ok(links) => {
                self.links = links;
                log::debug!("kernel: read side attached ({})", hook.label);
            }
            Err(e) => log::warn!("cannot attach the read side again ({}): {e:#}", hook.label),
        }
    }

    /// Nothing needs the reads from now on (detached by `settle`).
    pub(super) fn unneeded(&mut self, now: Instant) {
        self.unneeded_since.get_or_insert(now);
    }

    /// Nothing needs the reads, and nothing is likely to soon (a traced process's estimate
    /// ended, not a process gone): detached at the next `settle`.
    pub(super) fn unneeded_at_once(&mut self) {
        let now = Instant::now();
        self.unneeded_since = Some(now.checked_sub(LINGER).unwrap_or(now));
    }

    /// Detaches it once nothing has needed it for `LINGER`. Removing a link may wait for a
    /// kernel grace period (fexit, kretprobe): that happens on a thread of its own.
    pub(super) fn settle(&mut self, ebpf: &mut Ebpf, now: Instant) {
        let due = self
            .unneeded_since
            .is_some_and(|t| now.saturating_duration_since(t) >= LINGER);
        if !due || !self.attached() || self.pinned {
            return;
        }
        let owned = hooks::detach_links(ebpf, std::mem::take(&mut self.links));
        log::debug!("kernel: read side detached");
        if let Err(e) = std::thread::Builder::new()
            .name("read-side-off".into())
            .spawn(move || drop(owned))
        {
            log::debug!("no thread to detach the read side on ({e}): detached here");
        }
    }
}
