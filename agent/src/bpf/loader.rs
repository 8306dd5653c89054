//! Loads the kernel side (bpf/tlsprof.bpf.c) and attaches its tracepoints; holds its maps
//! and ring buffers and is the agent's only way to them. Uprobes: uprobes.rs.
use std::os::fd::{AsFd as _, AsRawFd as _};

use anyhow::{Context as _, Result};
use aya::{
    maps::{Array, HashMap as BpfHashMap, MapData},
    programs::{
        perf_event::{PerfEventConfig, PerfEventScope, SamplePolicy, SoftwareEvent},
        PerfEvent,
    },
    Btf, Ebpf, EbpfLoader,
};

use super::{
    cpu as pc,
    handshake::{self as hs, hs_hits, hs_key, hs_state},
    hello_cgroups::{self, HelloCgroups},
    hooks::{self, CONNECTIONS, HELLO_CAPTURE},
    port_table::PortTable,
    proc::{proc_comm, proc_traced, PROC_COMMS},
    read_switch::ReadSwitch,
    readside::Estimate,
    rings::Rings,
    served::{attach_capabilities, Served, Storage},
    shared_uprobes::SharedUprobes,
    sizes::{MapSizes, RINGS},
    stats::STAT_MAX,
    uprobes::{self, Detacher},
};
use crate::{bounds::Dropped, clock::ktime_ns};

pub struct Kernel {
    pub(super) ebpf: Ebpf,
    /// What serves each capability here.
    pub served: Served,
    /// The event ring buffers, and their drain.
    pub rings: Rings,
    /// The watched ports.
    pub ports: PortTable,
    /// Whether the read side runs, and what it reads.
    pub reads: ReadSwitch,
    /// The traced processes (bpf/proc.h), their handshakes' connections, uprobe hits and
    /// probes' removal (bpf/handshake.bpf.h).
    traced: BpfHashMap<MapData, u32, proc_traced>,
    hs_conns: BpfHashMap<MapData, hs_key, hs_state>,
    hs_hits: BpfHashMap<MapData, u32, hs_hits>,
    hs_detached: BpfHashMap<MapData, u32, u64>,
    stats: Array<MapData, u64>,
    pub(super) detacher: Detacher,
    /// Uprobes shared per file (shared_uprobes.rs), where tracefs allows.
    pub(super) shared_uprobes: Option<SharedUprobes>,
    /// Where the ClientHello capture reads packets (the traced processes' cgroups), when
    /// its packet program serves it.
    hello_cgroups: Option<HelloCgroups>,
    /// Entries the agent could not put in a full map (traced, conn_ports, hs_detached) or
    /// queue (the detacher's): exported by agent/health.rs.
    pub full: Dropped,
}

/// A map of the loaded object, taken out of it for its owner.
pub(super) fn take<T>(ebpf: &mut Ebpf, name: &str) -> Result<T>
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
            rings: Rings::open(&mut ebpf)?,
            ports: PortTable::open(&mut ebpf)?,
            reads: ReadSwitch::open(&mut ebpf, &mut served, find, hello_cgroups.is_some())?,
            served,
            hs_conns: take(&mut ebpf, "hs_conns")?,
            hs_hits: take(&mut ebpf, "hs_hits")?,
            hs_detached: take(&mut ebpf, "hs_detached")?,
            stats: take(&mut ebpf, "stats")?,
            traced: take(&mut ebpf, "traced")?,
            hello_cgroups,
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
        self.reads.configure(per_connection, &mut self.ebpf, btf)
    }

    /// The ClientHello capture's packet program on the cgroups of the traced processes
    /// (`pids`: all of them) and of their listening sockets (`sockets`: cgroup ids), where
    /// it serves (hello_cgroups.rs).
    pub fn watch_cgroups(&mut self, pids: &[u32], sockets: &[u64]) {
        let quic_pids = self.ports.quic_synced();
        if let Some(h) = &mut self.hello_cgroups {
            h.sync(&mut self.ebpf, pids, sockets, quic_pids, &mut self.full);
        }
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
        let estimate = if ok.is_ok() { estimate } else { Estimate::Off };
        self.reads.estimating(pid, estimate, &mut self.ebpf);
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
        self.reads.estimating(pid, estimate, &mut self.ebpf);
        if !on {
            self.reads.estimate_ended();
        }
    }

    /// Removes a process from the traced set.
    pub fn untrace(&mut self, pid: u32) {
        let _ = self.traced.remove(&pid);
        self.reads.forget(pid, &mut self.ebpf);
    }

    /// When the kernel saw `pid` execute a program last (bpf_ktime_get_ns), 0 if it has not
    /// since it is traced, or is not traced.
    pub fn exec_ns(&self, pid: u32) -> u64 {
        self.traced.get(&pid, 0).map_or(0, |v| v.exec_ns)
    }

    /// A traced process needs the read side for as long as it is traced (Go probes, a
    /// parent forking per connection).
    pub fn needs_reads(&mut self, pid: u32) {
        self.reads.needs(pid, &mut self.ebpf);
    }

    /// Detaches the read side once nothing has needed it for a while (readside.rs).
    pub fn settle_read_side(&mut self) {
        self.reads.settle(&mut self.ebpf);
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
        self.ports.listen_changes()
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

    /// The UDP ports bound by traced processes and those processes (PortTable::
    /// set_quic_ports); whether the packet programs that read their QUIC handshakes are
    /// attached (else QUIC is not seen).
    pub fn set_quic_ports(&mut self, ports: std::collections::HashSet<u16>, pids: Vec<u32>) -> bool {
        self.ports.set_quic_ports(ports, pids);
        self.hello_cgroups.is_some()
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
