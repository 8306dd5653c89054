//! Loads the kernel side (bpf/tlsprof.bpf.c) and attaches its tracepoints; holds its maps
//! and ring buffers and is the agent's only way to them. Uprobes: uprobes.rs.
use std::{
    os::fd::{AsFd as _, AsRawFd as _},
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result};
use aya::{
    maps::{Array, HashMap as BpfHashMap, MapData, PerCpuArray, PerCpuValues, RingBuf},
    programs::{
        perf_event::{PerfEventConfig, PerfEventScope, SamplePolicy, SoftwareEvent},
        PerfEvent,
    },
    Btf, Ebpf, EbpfLoader,
};

use super::{
    abi::req_reads,
    conn::{self as cn, conn_port, conn_port_stats},
    cpu as pc,
    handshake::{self as hs, hs_hits, hs_key, hs_state},
    hello_cgroups::{self, HelloCgroups},
    hooks::{self, CONNECTIONS, HELLO_CAPTURE, READ_SIDE},
    proc::{proc_comm, proc_notice, proc_traced, PROC_COMMS},
    read_record,
    readside::{Estimate, ReadSide},
    served::{attach_capabilities, Served, Storage},
    shared_uprobes::SharedUprobes,
    sizes::{MapSizes, RINGS},
    stats::STAT_MAX,
    uprobes::{self, Detacher},
    wire::WireEvent,
};
use crate::{bounds::Dropped, clock::ktime_ns};

/// What the kernel reported since the last drain.
#[derive(Default)]
pub struct Events {
    pub wire: Vec<WireEvent>,
    pub handshakes: Vec<hs::hs_event>,
    pub conns: Vec<cn::conn_event>,
    pub notices: Vec<proc_notice>,
}

pub struct Kernel {
    pub(super) ebpf: Ebpf,
    /// What serves each capability here.
    pub served: Served,
    hs_events: RingBuf<MapData>,
    proc_events: RingBuf<MapData>,
    conn_events: RingBuf<MapData>,
    wire_events: RingBuf<MapData>,
    hs_conns: BpfHashMap<MapData, hs_key, hs_state>,
    hs_hits: BpfHashMap<MapData, u32, hs_hits>,
    /// Sockets that started or stopped listening so far (bpf/conn.bpf.h).
    listen_changes: Array<MapData, u64>,
    hs_detached: BpfHashMap<MapData, u32, u64>,
    stats: Array<MapData, u64>,
    conn_ports: BpfHashMap<MapData, conn_port, conn_port_stats>,
    /// The port numbers watched in any namespace (bpf/conn.bpf.h), and in how many.
    conn_port_nums: Array<MapData, u8>,
    port_nums: std::collections::HashMap<u16, u32>,
    /// Port numbers listened on (bpf/conn.bpf.h conn_listen_nums), as last set.
    conn_listen_nums: Array<MapData, u8>,
    listen_nums: std::collections::HashSet<u16>,
    /// UDP ports bound by traced processes (conn_port_nums' CONN_NUM_UDP: bpf/quic.bpf.h),
    /// as last set, and those processes (the QUIC egress program's cgroups).
    quic_nums: std::collections::HashSet<u16>,
    quic_pids: Vec<u32>,
    /// quic_pids changed since the cgroups were last synced.
    quic_changed: bool,
    /// Live exchange counters, a slot per watched port (bpf/conn.h), and the free slots
    /// (1-based, as conn_port_stats.slot holds them).
    conn_exchanges: PerCpuArray<MapData, u64>,
    free_slots: Vec<u32>,
    traced: BpfHashMap<MapData, u32, proc_traced>,
    /// The switches of the connection programs (requests.bpf.h), as last written.
    req_ctl: Array<MapData, cn::req_ctl>,
    ctl: cn::req_ctl,
    /// The read side's programs, attached while something needs them.
    read_side: ReadSide,
    /// Traced processes that need the read side for good (Go probes, a parent forking per
    /// connection), and those the kernel estimates now: while there are none (and neither
    /// the mode, `reads_all_along`, nor a kernel without the send capture needs it), the
    /// read side is detached (readside.rs).
    readers: std::collections::BTreeSet<u32>,
    reads_all_along: bool,
    /// No selector: processes are also found by their connections' TLS (`load`'s `find`).
    finding: bool,
    /// Traced processes the kernel estimates now, and how (readside.rs `Estimate`: beside
    /// probes still judged, the read side looks at handshake reads only).
    estimated: std::collections::BTreeMap<u32, Estimate>,
    pub(super) detacher: Detacher,
    /// Uprobes shared per file (shared_uprobes.rs), where tracefs allows.
    pub(super) shared_uprobes: Option<SharedUprobes>,
    /// Where the ClientHello capture reads packets (the traced processes' cgroups), when
    /// its packet program serves it.
    hello_cgroups: Option<HelloCgroups>,
    /// Handed to the Profiler (take_samples).
    cpu_samples: Option<RingBuf<MapData>>,
    /// Entries the agent could not put in a full map (traced, conn_ports, hs_detached) or
    /// queue (the detacher's): exported by agent/health.rs.
    pub full: Dropped,
}

fn take<T>(ebpf: &mut Ebpf, name: &str) -> Result<T>
where
    T: TryFrom<aya::maps::Map>,
    <T as TryFrom<aya::maps::Map>>::Error: std::error::Error + Send + Sync + 'static,
{
    let map = ebpf.take_map(name).with_context(|| format!("BPF map {name} missing"))?;
    T::try_from(map).with_context(|| format!("BPF map {name}"))
}

/// Loads the object with its load-time settings (read-only globals: fixed once loaded);
/// programs are loaded later, one by one.
/// `find`: no --pid or --comm: processes are also found by what their connections carry
/// (bpf/proc.bpf.h proc_find).
fn load_object(cpus: usize, sample_hz: u64, find: bool, storage: Storage) -> Result<Ebpf> {
    let cpu_accounting = u32::from(sample_hz > 0);
    let proc_find = u32::from(find);
    let conn_hash = u32::from(storage == Storage::Hash);
    let sizes = MapSizes::here(cpus);
    let mut loader = EbpfLoader::new();
    loader
        .map_max_entries("hs_conns", sizes.connections)
        .map_max_entries("conn_hash_store", sizes.connections);
    for (ring, bytes) in RINGS {
        loader.map_max_entries(ring, bytes * sizes.ring_scale);
    }
    log::debug!(
        "kernel maps for {cpus} CPUs: {} connections (hs_conns, conn_hash_store), event rings x{}",
        sizes.connections,
        sizes.ring_scale
    );
    let object: &'static [u8] = super::OBJECT;
    let ebpf = loader
        .map_max_entries("cpu_samples", sample_ring_bytes(cpus, sample_hz))
        .override_global("cpu_accounting", &cpu_accounting, true)
        .override_global("conn_hash", &conn_hash, true)
        .override_global("proc_find", &proc_find, true)
        .load(object)
        .context("cannot load tlsprof's BPF programs into the kernel")?;
    super::release_object(object);
    Ok(ebpf)
}

/// Bytes of the sample ring buffer: a second of samples from every CPU (the agent reads it
/// five times a second), as a power of two.
fn sample_ring_bytes(cpus: usize, hz: u64) -> u32 {
    let record = std::mem::size_of::<pc::cpu_sample>() as u64 + 8;
    let want = (cpus as u64 * hz * record).clamp(256 * 1024, 64 * 1024 * 1024);
    want.next_power_of_two() as u32
}

/// One perf event per online CPU, sampling whatever runs there at `hz`; cpu_sample keeps the
/// samples of traced processes.
fn attach_sampler(ebpf: &mut Ebpf, cpus: &[u32], hz: u64) -> Result<()> {
    let p: &mut PerfEvent = ebpf
        .program_mut("cpu_sample")
        .context("program cpu_sample missing")?
        .try_into()?;
    p.load().context("the kernel rejected program cpu_sample")?;
    for &cpu in cpus {
        p.attach(
            PerfEventConfig::Software(SoftwareEvent::CpuClock),
            PerfEventScope::AllProcessesOneCpu { cpu },
            SamplePolicy::Frequency(hz),
            false,
        )
        .with_context(|| {
            format!(
                "cannot open a cpu-clock perf event on CPU {cpu} (run with --sample-hz 0 to profile without sampling)"
            )
        })?;
    }
    Ok(())
}

/// Reads every record of a ring buffer.
fn drain_ring<T>(ring: &mut RingBuf<MapData>, decode: impl Fn(&[u8]) -> Option<T>) -> Vec<T> {
    let mut out = Vec::new();
    while let Some(item) = ring.next() {
        out.extend(decode(&item));
    }
    out
}

/// Uprobes shared per file, unless avoided or tracefs is out of reach (then said once:
/// each process gets uprobes of its own, whose removal takes ~0.1 s per probe, and which
/// the kernel opens only for CAP_SYS_ADMIN).
fn open_shared_uprobes(avoid: &[String]) -> Option<SharedUprobes> {
    let why = if avoid.iter().any(|a| a == hooks::SHARED_UPROBES) {
        format!("--avoid-hook {}", hooks::SHARED_UPROBES)
    } else {
        match SharedUprobes::open() {
            Ok(s) => {
                log::debug!("uprobes: shared per file, through {}", s.place());
                return Some(s);
            }
            Err(e) => format!("{e:#}"),
        }
    };
    if crate::preflight::has_sys_admin() {
        log::info!(
            "uprobes: one of its own per process and probe, each removed in ~0.1 s ({why}); with tracefs \
             writable (root, or CAP_DAC_OVERRIDE) they are shared per library file"
        );
    } else {
        log::warn!(
            "without CAP_SYS_ADMIN the kernel refuses uprobes of a process's own, and the shared ones need a \
             writable tracefs ({why}): no handshake probes (handshakes are counted from what servers send, their \
             CPU is the kernel's estimate)"
        );
    }
    None
}

impl Kernel {
    /// Loads the object and attaches a hook for each capability, choosing where connection
    /// state lives by what this kernel accepts: socket storage where every capability that
    /// keeps connection state works with it, else a hash, if that serves more of them.
    /// `sample_hz` 0 leaves CPU attribution off; `avoid` names hooks not to use
    /// (--avoid-hook); `client_hellos` false leaves the ClientHello capture detached
    /// (--no-client-hellos). The uprobe programs are loaded, not attached (the agent attaches them
    /// per process). What the run's mode needs of the kernel is set by `configure`, once the
    /// mode is known from what serves here (`served`).
    pub fn load(btf: &Btf, sample_hz: u64, find: bool, avoid: &[String], client_hellos: bool) -> Result<Self> {
        let cpus = aya::util::online_cpus()
            .map_err(|(_, e)| e)
            .context("cannot read the online CPUs")?;
        let first = if avoid.iter().any(|a| a == hooks::SK_STORAGE) {
            Storage::Hash
        } else {
            Storage::Socket
        };
        let mut ebpf = load_object(cpus.len(), sample_hz, find, first)?;
        let mut served = attach_capabilities(&mut ebpf, btf, first, avoid, client_hellos)?;
        if first == Storage::Socket && served.connections_short() {
            let mut hash = load_object(cpus.len(), sample_hz, find, Storage::Hash)?;
            let hash_served = attach_capabilities(&mut hash, btf, Storage::Hash, avoid, client_hellos)?;
            if hash_served.connection_score() > served.connection_score() {
                (ebpf, served) = (hash, hash_served);
            }
        }
        for (c, s) in &served.capabilities {
            match s {
                hooks::Serving::By(h) => log::debug!(
                    "kernel: {} by {}{}",
                    c.name,
                    h.label,
                    if h.bounded { " (bounded loop)" } else { "" }
                ),
                hooks::Serving::NotNeeded => log::debug!("kernel: {} not needed", c.name),
                hooks::Serving::Unserved(why) => {
                    log::warn!("kernel: no hook for {} ({}): {}", c.name, why.join("; "), c.lost)
                }
            }
        }
        log::debug!("kernel: connection state in {}", served.storage.label());
        uprobes::load(&mut ebpf)?;
        let mut req_ctl: Array<MapData, cn::req_ctl> = take(&mut ebpf, "req_ctl")?;
        // until `configure`: the read side attached, switched on only where this kernel
        // itself needs it (no send capture)
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
        let read_hook = match served.of(READ_SIDE.name) {
            Some(hooks::Serving::By(h)) => Some(*h),
            _ => None,
        };
        let read_side = ReadSide::new(read_hook, std::mem::take(&mut served.read_side_links));
        if sample_hz > 0 {
            attach_sampler(&mut ebpf, &cpus, sample_hz)?;
        }
        let hello_cgroups = match served.of(HELLO_CAPTURE.name) {
            Some(hooks::Serving::By(h)) if h.programs.iter().any(|(_, how)| *how == hooks::Attach::CgroupIngress) => {
                hello_cgroups::cgroup2_root().map(HelloCgroups::new)
            }
            _ => None,
        };
        Ok(Self {
            served,
            hs_events: take(&mut ebpf, "hs_events")?,
            proc_events: take(&mut ebpf, "proc_events")?,
            conn_events: take(&mut ebpf, "conn_events")?,
            wire_events: take(&mut ebpf, "wire_events")?,
            hs_conns: take(&mut ebpf, "hs_conns")?,
            hs_hits: take(&mut ebpf, "hs_hits")?,
            listen_changes: take(&mut ebpf, "listen_changes")?,
            hs_detached: take(&mut ebpf, "hs_detached")?,
            stats: take(&mut ebpf, "stats")?,
            conn_ports: take(&mut ebpf, "conn_ports")?,
            conn_port_nums: take(&mut ebpf, "conn_port_nums")?,
            port_nums: Default::default(),
            conn_listen_nums: take(&mut ebpf, "conn_listen_nums")?,
            listen_nums: Default::default(),
            quic_nums: Default::default(),
            quic_pids: Vec::new(),
            quic_changed: false,
            conn_exchanges: take(&mut ebpf, "conn_exchanges")?,
            free_slots: (1..=cn::CONN_EXCHANGE_SLOTS).rev().collect(),
            traced: take(&mut ebpf, "traced")?,
            req_ctl,
            ctl,
            read_side,
            readers: Default::default(),
            reads_all_along: false,
            finding: find,
            estimated: Default::default(),
            hello_cgroups,
            cpu_samples: Some(take(&mut ebpf, "cpu_samples")?),
            detacher: Detacher::start()?,
            shared_uprobes: open_shared_uprobes(avoid),
            full: Dropped::default(),
            ebpf,
        })
    }

    /// Once, before anything is traced. `per_connection` (agent/mode.rs
    /// Mode::per_connection_reads): the kernel estimate must time processes that live for one
    /// connection. Where processes are found by their TLS (no selector), any process's first
    /// read may be such a handshake's: the reads are on for the whole run. With a selector,
    /// such a process is a traced one's fork, or traced from its exec: the read side stays
    /// attached, switched off, and the kernel switches it on at each fork or exec
    /// (`reads_at_fork`, bpf/requests.bpf.h), before the new process runs, until the agent
    /// has read of it (`starts_read`). Else, where the
    /// server's sends are captured, it is detached until something needs it (readside.rs).
    pub fn configure(&mut self, per_connection: bool, btf: &Btf) -> Result<()> {
        self.reads_all_along = per_connection && self.finding;
        let mut ctl = self.ctl;
        ctl.reads_at_fork = u32::from(per_connection && !self.finding);
        let ctl = self.switches(&ctl);
        self.req_ctl.set(0, ctl, 0).context("BPF map req_ctl")?;
        self.ctl = ctl;
        if ctl.reads_at_fork != 0 {
            self.read_side.stay_attached();
        } else if ctl.reads == req_reads::Off as u32 {
            self.read_side.detach_at_start(&mut self.ebpf, btf);
        }
        Ok(())
    }

    /// The ClientHello capture's packet program on the cgroups of the traced processes
    /// (`pids`: all of them) and of their listening sockets (`sockets`: cgroup ids), where
    /// it serves (hello_cgroups.rs).
    pub fn watch_cgroups(&mut self, pids: &[u32], sockets: &[u64]) {
        self.quic_changed = false;
        if let Some(h) = &mut self.hello_cgroups {
            h.sync(&mut self.ebpf, pids, sockets, &self.quic_pids, &mut self.full);
        }
    }

    /// The CPU samples' ring buffer, for the Profiler (once).
    pub fn take_samples(&mut self) -> Option<RingBuf<MapData>> {
        self.cpu_samples.take()
    }

    /// The names `--comm` selects, for the kernel to trace a process that executes one from
    /// its first instruction (bpf/proc.bpf.h); longer names are left to the /proc scan.
    pub fn select_comms(&mut self, comms: &[String]) -> Result<()> {
        let mut map: BpfHashMap<_, proc_comm, u8> =
            BpfHashMap::try_from(self.ebpf.map_mut("proc_comms").context("proc_comms map missing")?)?;
        for key in comms.iter().filter_map(|c| proc_comm::of(c)).take(PROC_COMMS as usize) {
            map.insert(key, 1, 0).context("cannot fill proc_comms")?;
        }
        Ok(())
    }

    /// Adds a process to the traced set (forks, exit, CPU accounting, samples). False, and
    /// counted (traced_processes), when the map has no room.
    /// `estimate`: whether the kernel estimates its handshakes' CPU (it has no handshake
    /// probes, or they miss its handshakes, or they are not judged yet: agent/sightings.rs).
    pub fn trace(&mut self, pid: u32, estimate: Estimate, probed_ns: u64) -> bool {
        // the kernel may trace it already (from its fork or exec): its CPU so far is kept
        let value = proc_traced {
            estimate: (estimate != Estimate::Off).into(),
            probed_ns,
            ..self.traced.get(&pid, 0).unwrap_or_default()
        };
        let ok = self.traced.insert(pid, value, 0);
        if let Err(e) = &ok {
            log::debug!("cannot add {pid} to the traced set: {e}");
            self.full.add("traced_processes", 1);
        }
        self.estimating(pid, if ok.is_ok() { estimate } else { Estimate::Off });
        ok.is_ok()
    }

    /// Turns the kernel estimate of a traced process's handshakes on or off, or changes how
    /// (a process with probes is estimated beside them until they are judged, for good if
    /// they miss its handshakes: agent/sightings.rs).
    pub fn set_estimate(&mut self, pid: u32, estimate: Estimate) {
        let Ok(mut value) = self.traced.get(&pid, 0) else {
            return; // gone meanwhile: swept with it
        };
        let on = estimate != Estimate::Off;
        if (value.estimate != 0) != on {
            value.estimate = on.into();
            if let Err(e) = self.traced.insert(pid, value, 0) {
                log::debug!("cannot set the estimate of {pid}: {e}");
                return;
            }
        }
        self.estimating(pid, estimate);
        if !on && self.ctl.reads == req_reads::Off as u32 && self.ctl.reads_at_hello == 0 {
            // the process stays: no child of a forking server will need the reads again soon
            // (nor a name still judged, whose ClientHellos switch them on)
            self.read_side.unneeded_at_once();
        }
    }

    /// The estimate's reads: needed while the kernel estimates the process.
    fn estimating(&mut self, pid: u32, estimate: Estimate) {
        let was = if estimate == Estimate::Off {
            self.estimated.remove(&pid)
        } else {
            self.estimated.insert(pid, estimate)
        };
        if was.unwrap_or(Estimate::Off) != estimate {
            self.sync_reads();
        }
    }

    /// Removes a process from the traced set.
    pub fn untrace(&mut self, pid: u32) {
        let _ = self.traced.remove(&pid);
        let (a, b) = (self.readers.remove(&pid), self.estimated.remove(&pid));
        if a || b.is_some() {
            self.sync_reads();
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

    /// When the kernel saw `pid` execute a program last (bpf_ktime_get_ns), 0 if it has not
    /// since it is traced, or is not traced.
    pub fn exec_ns(&self, pid: u32) -> u64 {
        self.traced.get(&pid, 0).map_or(0, |v| v.exec_ns)
    }

    /// A traced process needs the read side for as long as it is traced (Go probes, a
    /// parent forking per connection).
    pub fn needs_reads(&mut self, pid: u32) {
        if self.readers.insert(pid) {
            self.sync_reads();
        }
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
        let at_hello = needed == req_reads::Handshakes && self.hello_cgroups.is_some();
        cn::req_ctl {
            reads: if at_hello { req_reads::Off } else { needed } as u32,
            reads_at_hello: at_hello.into(),
            ..*ctl
        }
    }

    /// Switches the read side on while anything needs it, off when nothing does.
    fn sync_reads(&mut self) {
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
            self.read_side.need(&mut self.ebpf);
        } else {
            self.read_side.unneeded(Instant::now());
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

    /// Detaches the read side once nothing has needed it for a while (readside.rs).
    pub fn settle_read_side(&mut self) {
        self.read_side.settle(&mut self.ebpf, Instant::now());
    }

    /// A traced process's on-CPU time so far, as the kernel summed it.
    pub fn oncpu_ns(&self, pid: u32) -> Option<u64> {
        self.traced.get(&pid, 0).ok().map(|t| t.oncpu_ns)
    }

    /// How many times a TCP socket started or stopped listening so far, machine-wide: None
    /// where no hook follows socket states (the listening sockets must then be read at
    /// every scan).
    pub fn listen_changes(&self) -> Option<u64> {
        if matches!(
            self.served.of(CONNECTIONS.name),
            Some(hooks::Serving::Unserved(_)) | None
        ) {
            return None;
        }
        self.listen_changes.get(&0, 0).ok()
    }

    /// The uprobe hits of a process so far.
    pub fn hits(&self, pid: u32) -> hs_hits {
        self.hs_hits.get(&pid, 0).unwrap_or_default()
    }

    /// A process's handshake probes are about to be removed, the return probes first: until
    /// `mark_detached`, an object freed with its handshake unfinished is not a failed
    /// handshake (its end may have gone unseen). The time of the last removal is kept.
    pub fn mark_detaching(&mut self, pid: u32) {
        let last = self.hs_detached.get(&pid, 0).unwrap_or(0);
        if self.hs_detached.insert(pid, last | hs::HS_DETACHING as u64, 0).is_err() {
            self.full.add("hs_detached", 1);
        }
    }

    /// A process's handshake probes are gone: calls entered before now never return
    /// through them (bpf/handshake.bpf.h, hs_detached).
    pub fn mark_detached(&mut self, pid: u32) {
        if self.hs_detached.insert(pid, ktime_ns(), 0).is_err() {
            self.full.add("hs_detached", 1);
        }
    }

    /// A descriptor of the connections' socket-storage map, for sock_diag to hand over each
    /// socket's state (conns/unseen.rs); None in hash mode, where there is none.
    pub fn conn_store_fd(&self) -> Option<std::os::fd::OwnedFd> {
        if self.served.storage != Storage::Socket {
            return None;
        }
        match self.ebpf.map("conn_store")? {
            aya::maps::Map::SkStorage(m) => std::os::fd::AsFd::as_fd(m.fd()).try_clone_to_owned().ok(),
            _ => None,
        }
    }

    /// A watched port's kernel-side state (flags, exchange slot, accepted count).
    pub fn port(&self, key: &conn_port) -> Option<conn_port_stats> {
        self.conn_ports.get(key, 0).ok()
    }

    /// Exchanges on a watched port's connections so far, summed over the CPUs (0 for a
    /// port without a slot).
    pub fn exchanges(&self, port: &conn_port_stats) -> u64 {
        let Some(idx) = port.slot.checked_sub(1) else { return 0 };
        self.conn_exchanges.get(&idx, 0).map(|v| v.iter().sum()).unwrap_or(0)
    }

    /// Starts watching a listening port (a no-op for one already watched), with a live
    /// exchange counter while there are free ones (else counted: exchange_slots). False,
    /// and counted (watched_ports), when the map has no room.
    pub fn watch_port(&mut self, key: &conn_port) -> bool {
        if self.port(key).is_some() {
            return true;
        }
        let slot = self.free_slots.pop().unwrap_or(0);
        if slot == 0 {
            self.full.add("exchange_slots", 1);
        } else {
            // a slot freed by a port gone counts from zero for the next
            let zeros = aya::util::nr_cpus().ok().map(|n| vec![0u64; n]);
            if let Some(z) = zeros.and_then(|z| PerCpuValues::try_from(z).ok()) {
                let _ = self.conn_exchanges.set(slot - 1, z, 0);
            }
        }
        let fresh = conn_port_stats {
            flags: cn::CONN_PORT_LISTEN,
            slot,
            ..Default::default()
        };
        let ok = self.conn_ports.insert(key, fresh, 0);
        if ok.is_ok() {
            let n = self.port_nums.entry(key.port).or_default();
            *n += 1;
            if *n == 1 {
                self.write_port_num(key.port);
            }
        }
        if let Err(e) = &ok {
            log::debug!("cannot watch port {} (netns {}): {e}", key.port, key.netns);
            self.full.add("watched_ports", 1);
            if slot != 0 {
                self.free_slots.push(slot);
            }
        }
        ok.is_ok()
    }

    /// The port numbers listened on in the namespaces the agent reads (conn_listen_nums):
    /// a traced process's connection accepted there is taken on at its first read or send
    /// even where no traced process listens (bpf/conn.bpf.h conn_adopt).
    pub fn set_listening(&mut self, ports: std::collections::HashSet<u16>) {
        for gone in self.listen_nums.difference(&ports) {
            let _ = self.conn_listen_nums.set(u32::from(*gone), 0, 0);
        }
        for new in ports.difference(&self.listen_nums) {
            let _ = self.conn_listen_nums.set(u32::from(*new), 1, 0);
        }
        self.listen_nums = ports;
    }

    /// A traced process started listening on `port`: the kernel set it in conn_listen_nums
    /// at once (bpf/conn.bpf.h conn_state_changed), and the next set_listening keeps it or
    /// clears it (a listener closed before it was read).
    pub fn listened(&mut self, port: u16) {
        self.listen_nums.insert(port);
    }

    /// A port number's conn_port_nums value: whether it is watched for TCP, for UDP.
    fn write_port_num(&mut self, port: u16) {
        let tcp = if self.port_nums.contains_key(&port) {
            cn::CONN_NUM_TCP as u8
        } else {
            0
        };
        let udp = if self.quic_nums.contains(&port) {
            cn::CONN_NUM_UDP as u8
        } else {
            0
        };
        let _ = self.conn_port_nums.set(u32::from(port), tcp | udp, 0);
    }

    /// Whether the traced processes with a watched UDP port changed since the cgroups were
    /// last synced (watch_cgroups): the QUIC egress program goes to theirs at once.
    pub fn quic_changed(&self) -> bool {
        self.quic_changed
    }

    /// The UDP ports bound by traced processes in any namespace (`ports`), and those
    /// processes (`pids`): their QUIC handshakes are read (bpf/quic.bpf.h). Whether the
    /// packet programs that read them are attached (else QUIC is not seen).
    pub fn set_quic_ports(&mut self, ports: std::collections::HashSet<u16>, pids: Vec<u32>) -> bool {
        let changed: Vec<u16> = self.quic_nums.symmetric_difference(&ports).copied().collect();
        self.quic_nums = ports;
        for port in changed {
            self.write_port_num(port);
        }
        self.quic_changed |= pids != self.quic_pids;
        self.quic_pids = pids;
        self.hello_cgroups.is_some()
    }

    pub fn unwatch_port(&mut self, key: &conn_port) {
        if let Some(p) = self.port(key) {
            if p.slot != 0 {
                self.free_slots.push(p.slot);
            }
        }
        if self.conn_ports.remove(key).is_ok() {
            if let std::collections::hash_map::Entry::Occupied(mut n) = self.port_nums.entry(key.port) {
                *n.get_mut() -= 1;
                if *n.get() == 0 {
                    n.remove();
                    self.write_port_num(key.port);
                }
            }
        }
    }

    /// A failure counter (bpf/stats.h).
    pub fn stat(&self, idx: u32) -> Option<u64> {
        (idx < STAT_MAX).then(|| self.stats.get(&idx, 0).ok()).flatten()
    }

    /// Runs of each loaded program the kernel skipped because that same program was
    /// already running on the CPU (an interrupt came in its middle and ran the hook again):
    /// `recursion_misses` of the program's fdinfo, 5.12 and later (nothing before). What
    /// such a run would have recorded is missing: a connection's end, a handshake's time.
    /// (Not the programs whose skipped runs another takes: hooks::skips_taken.)
    pub fn skipped_runs(&self) -> Vec<(&str, u64)> {
        self.ebpf
            .programs()
            .filter(|(name, _)| !super::hooks::skips_taken(name))
            .filter_map(|(name, p)| {
                let fd = p.fd().ok()?.as_fd().as_raw_fd();
                let info = std::fs::read_to_string(format!("/proc/self/fdinfo/{fd}")).ok()?;
                let misses = info.lines().find_map(|l| l.strip_prefix("recursion_misses:"))?;
                Some((name, misses.trim().parse().ok()?))
            })
            .collect()
    }

    /// Everything the ring buffers hold now.
    pub fn drain(&mut self) -> Events {
        Events {
            wire: drain_ring(&mut self.wire_events, WireEvent::decode),
            handshakes: drain_ring(&mut self.hs_events, read_record),
            conns: drain_ring(&mut self.conn_events, read_record),
            notices: drain_ring(&mut self.proc_events, read_record),
        }
    }

    /// Waits until a ring buffer has something to say, at most `timeout`.
    pub fn wait(&self, timeout: Duration) {
        let mut fds =
            [&self.hs_events, &self.proc_events, &self.conn_events, &self.wire_events].map(|r| libc::pollfd {
                fd: r.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            });
        // rounded up: a wait cut short of its deadline would find nothing due yet, and spin
        let ms = timeout.as_micros().div_ceil(1000).min(i32::MAX as u128) as i32;
        // SAFETY: fds is a valid array of pollfd for the length given.
        unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
    }

    /// Forgets the kernel-side state of processes that exited.
    pub fn sweep(&mut self, gone: &[u32]) {
        if gone.is_empty() {
            return;
        }
        let conns: Vec<hs_key> = self
            .hs_conns
            .keys()
            .filter_map(|k| k.ok())
            .filter(|k| gone.contains(&k.tgid))
            .collect();
        for k in conns {
            let _ = self.hs_conns.remove(&k);
        }
        // hs_threads entries go with their thread (proc_exit, in the kernel).
        for pid in gone {
            self.untrace(*pid);
            let _ = self.hs_hits.remove(pid);
            let _ = self.hs_detached.remove(pid);
        }
    }
}
