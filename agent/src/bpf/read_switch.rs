//! The read side's switch: what the kernel's read programs do now (`req_ctl`,
//! bpf/requests.bpf.h) and whether they are attached (readside.rs), from what needs them:
//! the run's mode, a kernel without the send capture, traced processes that need every
//! read (Go probes, a parent forking per connection), and those whose handshake CPU the
//! kernel estimates.
use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

use anyhow::{Context as _, Result};
use aya::{
    maps::{Array, MapData},
    Btf, Ebpf,
};

use super::{
    abi::req_reads,
    conn as cn,
    hooks::{self, READ_SIDE},
    loader::take,
    readside::{Estimate, ReadSide},
    served::Served,
};

pub struct ReadSwitch {
    /// The switches of the connection programs, and as last written.
    req_ctl: Array<MapData, cn::req_ctl>,
    ctl: cn::req_ctl,
    /// The read side's programs, attached while something needs them.
    side: ReadSide,
    /// Traced processes that need the read side for good (Go probes, a parent forking per
    /// connection), and those the kernel estimates now: while there are none (and neither
    /// the mode, `reads_all_along`, nor a kernel without the send capture needs it), the
    /// read side is detached (readside.rs).
    readers: BTreeSet<u32>,
    reads_all_along: bool,
    /// No selector: processes are also found by their connections' TLS.
    finding: bool,
    /// Traced processes the kernel estimates now, and how (readside.rs `Estimate`: beside
    /// probes still judged, the read side looks at handshake reads only).
    estimated: BTreeMap<u32, Estimate>,
    /// The ClientHello capture's packet program serves here: it switches the handshakes'
    /// reads on at a ClientHello (`reads_at_hello`).
    at_hello: bool,
}

impl ReadSwitch {
    /// Until `configure`: the read side attached, switched on only where this kernel itself
    /// needs it (no send capture).
    pub(super) fn open(ebpf: &mut Ebpf, served: &mut Served, finding: bool, at_hello: bool) -> Result<Self> {
        let mut req_ctl: Array<MapData, cn::req_ctl> = take(ebpf, "req_ctl")?;
        let ctl = cn::req_ctl {
            sends_captured: served.sends_captured().into(),
            reads: if served.sends_captured() {
                req_reads::Off
            } else {
                req_reads::All
            } as u32,
            reads_at_fork: 0,
            starts_seen: 0,
            reads_at_hello: 0,
        };
        req_ctl.set(0, ctl, 0).context("BPF map req_ctl")?;
        let hook = match served.of(READ_SIDE.name) {
            Some(hooks::Serving::By(h)) => Some(*h),
            _ => None,
        };
        Ok(Self {
            req_ctl,
            ctl,
            side: ReadSide::new(hook, std::mem::take(&mut served.read_side_links)),
            readers: BTreeSet::new(),
            reads_all_along: false,
            finding,
            estimated: BTreeMap::new(),
            at_hello,
        })
    }

    /// Kernel::configure's part.
    pub(super) fn configure(&mut self, per_connection: bool, ebpf: &mut Ebpf, btf: &Btf) -> Result<()> {
        self.reads_all_along = per_connection && self.finding;
        let mut ctl = self.ctl;
        ctl.reads_at_fork = u32::from(per_connection && !self.finding);
        let ctl = self.switches(&ctl);
        self.req_ctl.set(0, ctl, 0).context("BPF map req_ctl")?;
        self.ctl = ctl;
        if ctl.reads_at_fork != 0 {
            self.side.stay_attached();
        } else if ctl.reads == req_reads::Off as u32 {
            self.side.detach_at_start(ebpf, btf);
        }
        Ok(())
    }

    /// The estimate's reads: needed while the kernel estimates the process.
    pub(super) fn estimating(&mut self, pid: u32, estimate: Estimate, ebpf: &mut Ebpf) {
        let was = if estimate == Estimate::Off {
            self.estimated.remove(&pid)
        } else {
            self.estimated.insert(pid, estimate)
        };
        if was.unwrap_or(Estimate::Off) != estimate {
            self.sync(ebpf);
        }
    }

    /// The estimate of a process that stays traced ended: where nothing needs the reads
    /// now, no child of a forking server will need them again soon (nor a name still
    /// judged, whose ClientHellos switch them on), and they go at once.
    pub(super) fn estimate_ended(&mut self) {
        if self.ctl.reads == req_reads::Off as u32 && self.ctl.reads_at_hello == 0 {
            self.side.unneeded_at_once();
        }
    }

    /// A process no longer traced needs nothing.
    pub(super) fn forget(&mut self, pid: u32, ebpf: &mut Ebpf) {
        let (a, b) = (self.readers.remove(&pid), self.estimated.remove(&pid));
        if a || b.is_some() {
            self.sync(ebpf);
        }
    }

    /// A traced process needs the read side for as long as it is traced.
    pub(super) fn needs(&mut self, pid: u32, ebpf: &mut Ebpf) {
        if self.readers.insert(pid) {
            self.sync(ebpf);
        }
    }

    /// The process starts the agent has read of (the largest `seq` of the fork and exec
    /// notices just read, each examined: bpf/requests.bpf.h req_process_started): the
    /// kernel kept the reads on since, for their sake; from here what the agent decided for
    /// them rules. A start still on its way keeps them on (its count is higher).
    pub fn starts_read(&mut self, seq: u32) {
        let ahead = seq.wrapping_sub(self.ctl.starts_seen) as i32 > 0;
        if self.ctl.reads_at_fork == 0 || seq == 0 || !ahead {
            return;
        }
        let ctl = cn::req_ctl {
            starts_seen: seq,
            ..self.ctl
        };
        match self.req_ctl.set(0, ctl, 0) {
            Ok(()) => self.ctl = ctl,
            Err(e) => log::warn!("cannot switch the read side: {e}"),
        }
    }

    /// Detaches the read side once nothing has needed it for a while (readside.rs).
    pub(super) fn settle(&mut self, ebpf: &mut Ebpf) {
        self.side.settle(ebpf, Instant::now());
    }

    /// The switches `ctl` with what the read side must do now: every read for the mode
    /// (`configure`), a kernel without the send capture (requests, TLS 1.3's end and
    /// handshake calls' connections seen from reads), or a traced process that needs them;
    /// the handshakes' reads for processes estimated beside their probes, from the first
    /// ClientHello the packet program sees on (`reads_at_hello`: the kernel switches them
    /// on before the server reads it; where the reads capture ClientHellos, from now);
    /// else nothing.
    fn switches(&self, ctl: &cn::req_ctl) -> cn::req_ctl {
        let all = self.reads_all_along || ctl.sends_captured == 0 || !self.readers.is_empty();
        let needed = if all {
            req_reads::All
        } else {
            self.estimated.values().max().map_or(req_reads::Off, |e| e.reads())
        };
        let at_hello = needed == req_reads::Handshakes && self.at_hello;
        cn::req_ctl {
            reads: if at_hello { req_reads::Off } else { needed } as u32,
            reads_at_hello: at_hello.into(),
            ..*ctl
        }
    }

    /// Switches the read side on while anything needs it, off when nothing does.
    fn sync(&mut self, ebpf: &mut Ebpf) {
        let mut ctl = self.switches(&self.ctl);
        if ctl == self.ctl {
            return;
        }
        if ctl.reads_at_hello != 0 {
            // a ClientHello may have switched them on meanwhile: kept on
            let handshakes = req_reads::Handshakes as u32;
            if self.req_ctl.get(&0, 0).is_ok_and(|now| now.reads == handshakes) {
                ctl.reads = handshakes;
            }
        }
        if ctl.reads != req_reads::Off as u32 || ctl.reads_at_hello != 0 {
            self.side.need(ebpf);
        } else {
            self.side.unneeded(Instant::now());
        }
        match self.req_ctl.set(0, ctl, 0) {
            Ok(()) => {
                self.ctl = ctl;
                log::debug!(
                    "kernel: read side {} (at a ClientHello: {})",
                    ctl.reads,
                    ctl.reads_at_hello
                );
            }
            Err(e) => log::warn!("cannot switch the read side: {e}"),
        }
    }
}
