//! `tlsprof run`: discovery, attachment and the event loop.
use std::{
    collections::{BTreeMap, HashMap, VecDeque},
    num::NonZeroU32,
    os::fd::AsRawFd as _,
    path::{Path, PathBuf},
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use anyhow::{bail, Context as _, Result};
use aya::{
    maps::{Array, HashMap as BpfHashMap, MapData, RingBuf},
    programs::{
        perf_event::{PerfEventConfig, PerfEventScope, SamplePolicy, SoftwareEvent},
        uprobe::{UProbeAttachLocation, UProbeLinkId, UProbeScope},
        BtfTracePoint, PerfEvent, UProbe,
    },
    Btf, Ebpf, EbpfLoader,
};

use crate::{
    conns::Churn,
    cpu::{self, Profiler},
    discovery::{self, ProcStat},
    duty::{self, Action, Duty},
    elf::{self, HandshakeHooks},
    http,
    metrics::{
        CommLabels, FigureLabels, KindLabels, Metrics, ModeLabels, ParamLabels, ProbeLabels, ReasonLabels, RoleLabels,
    },
    preflight,
    probes::{conn as cn, cpu as pc, handshake as hs, proc as pr, read_record, wire::WireEvent},
    symbols::{self, StackMemo},
    tls::Negotiated,
    wire::{self, Lookup, Tracker, WireHandshake},
    RunArgs,
};

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

/// Asks a running agent (in this process) to stop.
pub fn request_stop() {
    STOP.store(true, Ordering::SeqCst);
}

/// Whether SIGINT/SIGTERM arrived or a stop was asked for.
pub fn stopping() -> bool {
    STOP.load(Ordering::SeqCst)
}

fn install_signal_handlers() {
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
        unsafe { libc::signal(sig, on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t) };
    }
}

/// Which processes to trace.
struct Selector {
    pids: Vec<u32>,
    comms: Vec<String>,
}

impl Selector {
    fn all(&self) -> bool {
        self.pids.is_empty() && self.comms.is_empty()
    }

    /// A process is selected by its comm, by its pid, or by descending from a selected pid.
    fn selects(&self, pid: u32, stats: &HashMap<u32, ProcStat>) -> bool {
        self.selects_with(pid, stats, discovery::exe_name)
    }

    /// `exe_name` gives a process's executable name (read from /proc, or made up in tests).
    fn selects_with(&self, pid: u32, stats: &HashMap<u32, ProcStat>, exe_name: impl Fn(u32) -> Option<String>) -> bool {
        if self.all() {
            return true;
        }
        let Some(st) = stats.get(&pid) else { return false };
        if self.comms.contains(&st.comm) {
            return true;
        }
        // `--comm node` also finds a node whose main thread renamed itself.
        if !self.comms.is_empty()
            && exe_name(pid).is_some_and(|e| {
                self.comms
                    .iter()
                    .any(|c| *c == e || (c.len() == 15 && e.starts_with(c.as_str())))
            })
        {
            return true;
        }
        let mut cur = pid;
        for _ in 0..64 {
            if self.pids.contains(&cur) {
                return true;
            }
            match stats.get(&cur) {
                Some(s) if s.ppid > 1 => cur = s.ppid,
                _ => return false,
            }
        }
        false
    }
}

/// One attached program: which, and its link.
struct Link {
    program: &'static str,
    id: UProbeLinkId,
}

struct Traced {
    /// The `comm` label (discovery::process_name).
    name: String,
    /// /proc/PID/comm when attached: a change means a new program (exec).
    comm: String,
    start_time: u64,
    /// The handshake probes to attach: program, file offset, file.
    plan: Vec<(&'static str, u64, PathBuf)>,
    /// The attached ones.
    links: Vec<Link>,
    /// The overhead budget's duty cycle (default mode, processes with probes).
    duty: Option<Duty>,
    /// When the probes were last attached (bpf_ktime_get_ns clock): a handshake on a
    /// connection accepted before that may have had calls they missed.
    window_start_ns: u64,
    /// Hit counters (hs_hits) already exported.
    hits_seen: (u64, u64),
    /// The probes' CPU cost so far (hits x the cost of one hit).
    probe_cpu: f64,
    /// When its probes were handed to the detacher thread.
    detach_sent: Option<Instant>,
}

/// The kernel's monotonic clock, as bpf_ktime_get_ns reads it.
fn ktime_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: ts is a valid timespec to write to.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// A selected process with no OpenSSL (yet): looked at again when its memory map grows.
struct Watched {
    start_time: u64,
    vsize: u64,
}

#[derive(Default)]
struct Summary {
    count: u64,
    /// Handshakes the probes timed (all of them with --exact; those in the probes' windows
    /// otherwise), and their sums.
    measured: u64,
    cpu_ns: u64,
    duration_ns: u64,
}

struct Probes {
    /// Optional kernel hooks this kernel refused (program names), counted as attach failures.
    missing: Vec<&'static str>,
    hs: Ebpf,
    _proc: Ebpf,
    hs_events: RingBuf<MapData>,
    proc_events: RingBuf<MapData>,
    hs_conns: BpfHashMap<MapData, hs::hs_key, hs::hs_state>,
    hs_stats: Array<MapData, u64>,
    hs_ports: BpfHashMap<MapData, hs::hs_port, hs::hs_port_stats>,
    conn_events: RingBuf<MapData>,
    wire_events: RingBuf<MapData>,
    proc_traced: BpfHashMap<MapData, u32, u8>,
    hs_hits: BpfHashMap<MapData, u32, hs::hs_hits>,
    hs_detached: BpfHashMap<MapData, u32, u64>,
    /// tcp_sendmsg_locked is attached: server handshakes and requests are counted from
    /// what servers send.
    wire_counts: bool,
    /// The detacher thread (detach_later), and its answers: which process's probes are gone.
    detacher: std::sync::mpsc::Sender<(u32, Vec<aya::programs::uprobe::UProbeLink>)>,
    detached: std::sync::mpsc::Receiver<u32>,
    /// Moved into the Profiler.
    cpu_samples: Option<RingBuf<MapData>>,
    cpu_procs: Option<BpfHashMap<MapData, u32, pc::cpu_proc>>,
}

const UPROBES: &[&str] = &[
    "hs_enter_server",
    "hs_enter_client",
    "hs_enter_any",
    "hs_exit",
    "ssl_set_accept_state",
    "ssl_set_connect_state",
    "ssl_free",
];
/// Attached to the agent itself at start, to measure what one probe hit costs here.
const CALIBRATION: &[&str] = &["calib_entry", "calib_return"];

/// Programs whose tracepoint a kernel may lack, and what tlsprof does without them.
/// tcp_sendmsg_locked, which hands over what a server sends, came with Linux 6.12;
/// sock_recv_length/sock_send_length with Linux 6.3. wire_send comes first: where it is
/// attached it also counts requests, and the other two are not needed (sock_recv_length
/// only with --exact, to tell which connections a handshake call read).
const OPTIONAL_PROGRAMS: &[(&str, &str, &str)] = &[
    (
        "wire_send",
        "tcp_sendmsg_locked",
        "handshakes will not be labelled by version, cipher, group, certificate and resumption, servers \
         without handshake probes get no handshake counts, and the handshake probes stay attached (--exact)",
    ),
    ("conn_recv", "sock_recv_length", NO_CONN_IO),
    ("conn_send", "sock_send_length", NO_CONN_IO),
];
const NO_CONN_IO: &str = "requests per connection and connections without a handshake will not be counted";

/// Figures measured in the probes' windows in the default mode (tlsprof_sampled_figure_info).
const SAMPLED_FIGURES: &[&str] = &[
    "tlsprof_handshake_cpu_seconds",
    "tlsprof_handshake_duration_seconds",
    "tlsprof_failed_handshake_cpu_seconds_total",
    "tlsprof_handshakes_total{role=client}",
    "tlsprof_cpu_seconds_total{category=handshake}",
];

/// Why a handshake's negotiated labels are `other` (tlsprof_handshakes_unlabelled_total).
const UNLABELLED_NO_CONNECTION: &str = "no_connection";
const UNLABELLED_INCOMPLETE: &str = "incomplete";

fn take<T>(ebpf: &mut Ebpf, name: &str) -> Result<T>
where
    T: TryFrom<aya::maps::Map>,
    <T as TryFrom<aya::maps::Map>>::Error: std::error::Error + Send + Sync + 'static,
{
    let map = ebpf.take_map(name).with_context(|| format!("BPF map {name} missing"))?;
    T::try_from(map).with_context(|| format!("BPF map {name}"))
}

fn attach_tp_btf(ebpf: &mut Ebpf, program: &str, tracepoint: &str, btf: &Btf) -> Result<()> {
    let p: &mut BtfTracePoint = ebpf
        .program_mut(program)
        .with_context(|| format!("program {program} missing"))?
        .try_into()?;
    p.load(tracepoint, btf)
        .and_then(|()| p.attach().map(|_| ()))
        .with_context(|| {
            format!("this kernel refused the BTF tracepoint {tracepoint} (tlsprof needs tp_btf, Linux 5.5+)")
        })
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
fn attach_sampler(hs: &mut Ebpf, cpus: &[u32], hz: u64) -> Result<()> {
    let p: &mut PerfEvent = hs
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

impl Probes {
    fn load(btf: &Btf, sample_hz: u64, exact: bool) -> Result<Self> {
        let cpus = aya::util::online_cpus()
            .map_err(|(_, e)| e)
            .context("cannot read the online CPUs")?;
        let mut hs = EbpfLoader::new()
            .map_max_entries("cpu_samples", sample_ring_bytes(cpus.len(), sample_hz))
            .load(hs::OBJECT)
            .context("cannot load the handshake probes into the kernel")?;
        for name in UPROBES.iter().chain(CALIBRATION) {
            let p: &mut UProbe = hs
                .program_mut(name)
                .with_context(|| format!("program {name} missing"))?
                .try_into()?;
            p.load()
                .with_context(|| format!("the kernel rejected program {name}"))?;
        }
        attach_tp_btf(&mut hs, "hs_sched_switch", "sched_switch", btf)?;
        attach_tp_btf(&mut hs, "hs_thread_exit", "sched_process_exit", btf)?;
        attach_tp_btf(&mut hs, "conn_state_change", "inet_sock_set_state", btf)?;
        attach_tp_btf(&mut hs, "conn_rcv_reset", "tcp_receive_reset", btf)?;
        attach_tp_btf(&mut hs, "conn_send_reset", "tcp_send_reset", btf)?;
        let mut missing = Vec::new();
        let mut wire_counts = false;
        for &(program, tracepoint, without) in OPTIONAL_PROGRAMS {
            let needed = match program {
                "wire_send" => true,
                "conn_recv" => !wire_counts || exact,
                _ => !wire_counts,
            };
            if !needed {
                continue;
            }
            match attach_tp_btf(&mut hs, program, tracepoint, btf) {
                Ok(()) => wire_counts |= program == "wire_send",
                Err(e) => {
                    eprintln!("tlsprof: warning: {e:#}: {without}");
                    missing.push(program);
                }
            }
        }
        let mut ctl: Array<MapData, hs::hs_ctl> = take(&mut hs, "hs_ctl")?;
        ctl.set(
            0,
            hs::hs_ctl {
                wire_counts: wire_counts as u32,
                pad: 0,
            },
            0,
        )
        .context("BPF map hs_ctl")?;
        if sample_hz > 0 {
            attach_sampler(&mut hs, &cpus, sample_hz)?;
        }
        let (detacher, work) = std::sync::mpsc::channel::<(u32, Vec<aya::programs::uprobe::UProbeLink>)>();
        let (done, detached) = std::sync::mpsc::channel();
        std::thread::Builder::new()
            .name("detacher".into())
            .spawn(move || {
                for (pid, links) in work {
                    // each removal waits for a grace period of its own: in parallel
                    std::thread::scope(|s| {
                        for link in links {
                            s.spawn(move || drop(link));
                        }
                    });
                    let _ = done.send(pid);
                }
            })
            .context("cannot start a thread")?;
        let mut proc_ = Ebpf::load(pr::OBJECT).context("cannot load the process probes into the kernel")?;
        attach_tp_btf(&mut proc_, "proc_fork", "sched_process_fork", btf)?;
        attach_tp_btf(&mut proc_, "proc_exit", "sched_process_exit", btf)?;
        Ok(Self {
            missing,
            hs_events: take(&mut hs, "hs_events")?,
            hs_conns: take(&mut hs, "hs_conns")?,
            hs_stats: take(&mut hs, "hs_stats")?,
            hs_ports: take(&mut hs, "hs_ports")?,
            conn_events: take(&mut hs, "conn_events")?,
            wire_events: take(&mut hs, "wire_events")?,
            proc_events: take(&mut proc_, "proc_events")?,
            proc_traced: take(&mut proc_, "proc_traced")?,
            hs_hits: take(&mut hs, "hs_hits")?,
            hs_detached: take(&mut hs, "hs_detached")?,
            wire_counts,
            detacher,
            detached,
            cpu_samples: Some(take(&mut hs, "cpu_samples")?),
            cpu_procs: Some(take(&mut hs, "cpu_procs")?),
            hs,
            _proc: proc_,
        })
    }

    fn uprobe(&mut self, program: &str) -> &mut UProbe {
        self.hs
            .program_mut(program)
            .and_then(|p| <&mut UProbe>::try_from(p).ok())
            .expect("every uprobe in UPROBES is loaded")
    }

    fn attach(&mut self, program: &'static str, offset: u64, target: &Path, pid: u32) -> Result<Link> {
        let scope = UProbeScope::OneProcess(NonZeroU32::new(pid).context("pid 0")?);
        let id = self
            .uprobe(program)
            .attach(UProbeAttachLocation::AbsoluteOffset(offset), target, scope)
            .with_context(|| format!("attaching {program} to {} at {offset:#x}", target.display()))?;
        Ok(Link { program, id })
    }

    /// Detaches a process's probes (it may be gone already; the perf events are closed
    /// either way) on the detacher thread: the kernel waits for a grace
    /// period per uprobe it removes (~150 ms each here), which would stall the event loop.
    /// The thread says when they are all gone.
    fn detach_later(&mut self, pid: u32, mut links: Vec<Link>) {
        // Return probes first: a call that enters while the rest go leaves a stale entry
        // (cleaned by hs_detached), not a return without its entry.
        links.sort_by_key(|l| l.program != "hs_exit");
        let mut owned = Vec::with_capacity(links.len());
        for l in links {
            if let Ok(link) = self.uprobe(l.program).take_link(l.id) {
                owned.push(link);
            }
        }
        // if the thread is gone, the links are dropped (detached) here with the message
        let _ = self.detacher.send((pid, owned));
    }

    /// What one uprobe hit and one uretprobe hit cost on this host, in CPU seconds: the
    /// agent calls three functions of its own, one without a probe, one with an entry probe,
    /// one with an entry and a return probe, in rounds (the fastest round of each counts:
    /// noise only adds), then detaches them on the detacher thread.
    fn calibrate(&mut self) -> Result<(f64, f64)> {
        const N: u64 = 2000;
        let pid = std::process::id();
        let (exe, entry_off) = duty::target_location(duty::tlsprof_calib_entry)
            .context("the agent's own code is not mapped from a file")?;
        let (_, both_off) = duty::target_location(duty::tlsprof_calib_both).context("the agent's own code")?;
        let mut links = Vec::new();
        let attached = (|| -> Result<()> {
            links.push(self.attach("calib_entry", entry_off, &exe, pid)?);
            links.push(self.attach("calib_entry", both_off, &exe, pid)?);
            links.push(self.attach("calib_return", both_off, &exe, pid)?);
            Ok(())
        })();
        let mut best = [Duration::MAX; 3];
        if attached.is_ok() {
            for _ in 0..4 {
                best[0] = best[0].min(duty::time_calls(duty::tlsprof_calib_plain, N));
                best[1] = best[1].min(duty::time_calls(duty::tlsprof_calib_entry, N));
                best[2] = best[2].min(duty::time_calls(duty::tlsprof_calib_both, N));
            }
        }
        self.detach_later(0, links);
        attached?;
        Ok(duty::hit_costs(N, best[0], best[1], best[2]))
    }

    /// Forgets the kernel-side state of processes that exited.
    fn sweep(&mut self, gone: &[u32]) {
        if gone.is_empty() {
            return;
        }
        let conns: Vec<hs::hs_key> = self
            .hs_conns
            .keys()
            .filter_map(|k| k.ok())
            .filter(|k| gone.contains(&k.tgid))
            .collect();
        for k in conns {
            let _ = self.hs_conns.remove(&k);
        }
        // hs_threads entries go with their thread (hs_thread_exit, in the kernel).
        for pid in gone {
            let _ = self.proc_traced.remove(pid);
            let _ = self.hs_hits.remove(pid);
            let _ = self.hs_detached.remove(pid);
        }
    }
}

struct Agent {
    args: RunArgs,
    selector: Selector,
    metrics: Arc<Metrics>,
    probes: Probes,
    self_pid: u32,
    traced: HashMap<u32, Traced>,
    watched: HashMap<u32, Watched>,
    hooks_cache: HashMap<(u64, u64, u64, i64), Option<HandshakeHooks>>,
    /// Names of processes that exited lately, for events that arrive after the exit.
    recent_exits: HashMap<u32, String>,
    stats_seen: [u64; 8],
    summary: BTreeMap<(String, &'static str, &'static str), Summary>,
    /// --strict: the first attach failure, which ends the run.
    fatal: Option<String>,
    /// The agent's own CPU seconds already exported.
    cpu_seen: f64,
    /// Every process name attached so far: its gauge goes to 0, not away, when the last goes.
    ever_attached: std::collections::BTreeSet<String>,
    /// Listening ports of traced processes, and the name of the process listening.
    ports: BTreeMap<hs::hs_port, String>,
    /// Connections closed without a handshake on ports not (yet) known to carry TLS.
    unhandshaken: BTreeMap<hs::hs_port, u64>,
    /// Names of ports no longer listened on, for connections that close afterwards.
    port_names: HashMap<hs::hs_port, String>,
    churn: Churn,
    /// Processes forgotten since the last sweep of the kernel maps.
    exited: Vec<u32>,
    profiler: Profiler,
    stack_memo: StackMemo,
    /// What servers sent during their handshakes, per connection (captured where
    /// tcp_sendmsg_locked is attached: probes.wire_counts).
    wire: Tracker,
    /// Successful handshakes waiting for their connection's parameters.
    pending: VecDeque<(hs::hs_event, Instant)>,
    /// The handshake probes stay attached and count handshakes (--exact, or no wire capture).
    exact: bool,
    /// CPU seconds of one uprobe hit and one uretprobe hit here (None: not measured).
    hit_cost: Option<(f64, f64)>,
    /// "attached to" lines waiting for the ports to be watched (say_ready).
    ready: Vec<String>,
}

/// The OpenSSL hooks of every candidate file of a process.
fn tls_files(
    pid: u32,
    cache: &mut HashMap<(u64, u64, u64, i64), Option<HandshakeHooks>>,
    mode: elf::HookMode,
    verbose: bool,
) -> std::io::Result<Vec<(discovery::Candidate, HandshakeHooks)>> {
    let mut out = Vec::new();
    for c in discovery::candidates(pid)? {
        let hooks = cache
            .entry(c.identity)
            .or_insert_with(|| match elf::handshake_hooks(&c.host_path, mode) {
                Ok(h) => h,
                Err(e) => {
                    if verbose {
                        eprintln!("tlsprof: {e}");
                    }
                    None
                }
            })
            .clone();
        if let Some(h) = hooks {
            out.push((c, h));
        }
    }
    Ok(out)
}

impl Agent {
    fn log(&self, msg: impl AsRef<str>) {
        if self.args.verbose {
            eprintln!("tlsprof: {}", msg.as_ref());
        }
    }

    fn scan(&mut self) {
        let Ok(pids) = discovery::pids() else { return };
        let stats: HashMap<u32, ProcStat> = pids
            .into_iter()
            .filter(|p| *p != self.self_pid)
            .filter_map(|p| Some((p, discovery::stat(p).ok()?)))
            .collect();

        let gone: Vec<u32> = self
            .traced
            .iter()
            .filter(|(pid, t)| {
                stats
                    .get(pid)
                    .is_none_or(|s| s.start_time != t.start_time || s.comm != t.comm)
            })
            .map(|(pid, _)| *pid)
            .collect();
        for pid in &gone {
            self.forget(*pid);
        }
        self.exited.extend(gone);
        self.probes.sweep(&std::mem::take(&mut self.exited));
        self.watched
            .retain(|pid, w| stats.get(pid).is_some_and(|s| s.start_time == w.start_time));

        let mut pids: Vec<u32> = stats.keys().copied().collect();
        pids.sort_unstable();
        for pid in pids {
            if self.traced.contains_key(&pid) || !self.selector.selects(pid, &stats) {
                continue;
            }
            let st = &stats[&pid];
            if self.watched.get(&pid).is_some_and(|w| w.vsize == st.vsize) {
                continue;
            }
            self.examine(pid, st.clone());
        }
        self.refresh_ports();
        self.say_ready();
        self.update_gauges();
    }

    /// Keeps hs_ports equal to the listening ports of the traced processes, exports the
    /// kernel's per-port counts, reads TIME_WAIT sockets, and counts the connections without
    /// a handshake on ports now known to carry TLS.
    fn refresh_ports(&mut self) {
        // Accepted connections of the ports watched until now, before any is removed.
        let counts: HashMap<hs::hs_port, u64> = self
            .ports
            .keys()
            .filter_map(|k| Some((*k, self.probes.hs_ports.get(k, 0).ok()?.accepted)))
            .collect();
        self.churn.sync_accepted(&self.ports, &counts);

        let mut now: BTreeMap<hs::hs_port, String> = BTreeMap::new();
        // Each namespace's listening sockets, read once (nginx's master and workers share one).
        let mut listeners: HashMap<u32, Vec<(u16, u64)>> = HashMap::new();
        let mut ns_paths: HashMap<u32, PathBuf> = HashMap::new();
        for (pid, t) in &self.traced {
            let (Ok(netns), Ok(inodes)) = (discovery::netns(*pid), discovery::socket_inodes(*pid)) else {
                continue;
            };
            let path = PathBuf::from(format!("/proc/{pid}/ns/net"));
            let table = listeners.entry(netns).or_insert_with(|| {
                self.churn
                    .listeners(netns, &path)
                    .unwrap_or_else(|| discovery::proc_listeners(*pid))
            });
            ns_paths.entry(netns).or_insert(path);
            for (port, _) in table.iter().filter(|(_, ino)| inodes.contains(ino)) {
                now.entry(hs::hs_port {
                    netns,
                    port: *port,
                    pad: 0,
                })
                .or_insert_with(|| t.name.clone());
            }
        }
        // Each namespace: a way into it, and its watched ports.
        let mut namespaces: HashMap<u32, (PathBuf, Vec<u16>)> = ns_paths
            .into_iter()
            .map(|(ns, path)| (ns, (path, Vec::new())))
            .collect();
        for key in now.keys() {
            if let Some((_, ports)) = namespaces.get_mut(&key.netns) {
                ports.push(key.port);
            }
        }
        for (key, name) in self.ports.iter().filter(|(k, _)| !now.contains_key(k)) {
            let _ = self.probes.hs_ports.remove(key);
            // connections accepted there may still close
            self.port_names.insert(*key, name.clone());
        }
        for key in now.keys() {
            if self.probes.hs_ports.get(key, 0).is_err() {
                let fresh = hs::hs_port_stats {
                    flags: hs::HS_PORT_LISTEN,
                    ..Default::default()
                };
                let _ = self.probes.hs_ports.insert(key, fresh, 0);
            }
        }
        self.ports = now;
        self.churn.refresh(&namespaces);
        self.churn.retain_namespaces(&namespaces.keys().copied().collect());

        let pending: Vec<hs::hs_port> = self.unhandshaken.keys().copied().collect();
        for key in pending {
            if self.port_is_tls(&key) {
                let n = self.unhandshaken.remove(&key).unwrap_or(0);
                self.count_unhandshaken(&key, n);
            } else if !self.ports.contains_key(&key) {
                self.unhandshaken.remove(&key);
            }
        }
    }

    fn port_is_tls(&self, key: &hs::hs_port) -> bool {
        self.probes
            .hs_ports
            .get(key, 0)
            .is_ok_and(|f| f.flags & hs::HS_PORT_TLS != 0)
    }

    /// Connections accepted on a TLS port that closed before any handshake call read from
    /// them: the server never handed them to its TLS library. Counted as failed handshakes.
    fn count_unhandshaken(&mut self, key: &hs::hs_port, n: u64) {
        if n == 0 {
            return;
        }
        let Some(name) = self.ports.get(key).cloned() else {
            return;
        };
        self.metrics
            .handshakes
            .get_or_create(&ParamLabels::new(&name, "server", &Negotiated::UNKNOWN).with_result("failed"))
            .inc_by(n);
        self.summary.entry((name, "server", "failed")).or_default().count += n;
    }

    fn on_unhandshaken(&mut self, key: hs::hs_port) {
        if self.port_is_tls(&key) {
            self.count_unhandshaken(&key, 1);
        } else {
            *self.unhandshaken.entry(key).or_default() += 1;
        }
    }

    /// Attaches to a selected process if it carries OpenSSL, else watches it.
    fn examine(&mut self, pid: u32, st: ProcStat) {
        let files = tls_files(pid, &mut self.hooks_cache, self.args.hooks, self.args.verbose).unwrap_or_else(|e| {
            self.log(format!("cannot read the memory map of {pid} ({}): {e}", st.comm));
            Vec::new()
        });
        if files.is_empty() {
            // Another TLS stack (GnuTLS, Go, …): no handshake probes, but CPU and connections.
            if let Some(stack) = symbols::process_tls_stack(pid, &mut self.stack_memo) {
                self.watched.remove(&pid);
                let msg = format!(
                    "attached to {pid} ({}): TLS stack {stack}, no handshake probes",
                    st.comm
                );
                self.track(pid, st, Vec::new());
                self.ready.push(msg);
                return;
            }
            let watched = Watched {
                start_time: st.start_time,
                vsize: st.vsize,
            };
            self.watched.insert(pid, watched);
            return;
        }
        self.watched.remove(&pid);
        let mut plan_all = Vec::new();
        let mut attached = Vec::new();
        for (file, h) in &files {
            let mut plan: Vec<(&'static str, u64)> = Vec::new();
            for (prog, off) in [
                ("hs_enter_server", h.accept),
                ("hs_enter_client", h.connect),
                ("hs_enter_any", h.do_handshake),
            ] {
                if let Some(off) = off {
                    plan.push((prog, off));
                    plan.push(("hs_exit", off));
                }
            }
            if let Some(off) = h.set_accept_state {
                plan.push(("ssl_set_accept_state", off));
            }
            if let Some(off) = h.set_connect_state {
                plan.push(("ssl_set_connect_state", off));
            }
            plan.push(("ssl_free", h.free));
            plan_all.extend(plan.into_iter().map(|(prog, off)| (prog, off, file.host_path.clone())));
            attached.push(format!(
                "attached to {pid} ({}): {} via {}",
                st.comm,
                file.path,
                h.source.as_str()
            ));
        }
        let comm = st.comm.clone();
        let links = self.attach_plan(pid, &comm, &plan_all, true);
        self.track(pid, st, links);
        if let Some(t) = self.traced.get_mut(&pid) {
            t.plan = plan_all;
            t.window_start_ns = ktime_ns();
            if !self.exact && !t.links.is_empty() {
                t.duty = Some(Duty::new(self.args.overhead_budget, Instant::now(), 0.0));
            }
        }
        self.profiler.set_probes(pid, true);
        // logged once everything is in place: tests and operators read it as "ready"
        self.ready.extend(attached);
    }

    /// Logs the processes attached since the last call: "attached to PID" is said once
    /// their listening ports are watched too (refresh_ports), since in the default mode the
    /// handshakes are counted on those ports. Tests and operators read it as "ready".
    fn say_ready(&mut self) {
        for msg in std::mem::take(&mut self.ready) {
            self.log(msg);
        }
    }

    /// Attaches a process's handshake probes. A failure is counted and said (once, when
    /// the process is first attached; re-attaching in a later cycle may race its exit).
    fn attach_plan(&mut self, pid: u32, comm: &str, plan: &[(&'static str, u64, PathBuf)], first: bool) -> Vec<Link> {
        let mut links = Vec::new();
        for (prog, off, path) in plan {
            match self.probes.attach(prog, *off, path, pid) {
                Ok(l) => links.push(l),
                Err(e) if first => {
                    self.metrics
                        .attach_failures
                        .get_or_create(&ProbeLabels { probe: (*prog).into() })
                        .inc();
                    let msg = format!("{pid} ({comm}): {e:#}");
                    if self.args.strict {
                        self.fatal.get_or_insert(msg);
                    } else {
                        eprintln!("tlsprof: warning: {msg}");
                    }
                }
                Err(e) => self.log(format!("re-attaching to {pid} ({comm}): {e:#}")),
            }
        }
        links
    }

    /// The overhead budget: reads each probed process's hits, exports them and their cost,
    /// and attaches or detaches its probes as its duty cycle says. Returns when it should
    /// run next at the latest.
    fn duty_tick(&mut self) -> Option<Instant> {
        // Probes the detacher thread removed: a thread that was inside a handshake call then
        // will not return through the probe (hs_detached, in the kernel).
        while let Ok(pid) = self.probes.detached.try_recv() {
            if let Some(t) = self.traced.get_mut(&pid) {
                let _ = self.probes.hs_detached.insert(pid, ktime_ns(), 0);
                if let (Some(d), Some(sent)) = (t.duty.as_mut(), t.detach_sent.take()) {
                    d.detached_after(sent.elapsed());
                    self.log(format!(
                        "budget: probes of {pid} detached in {:.0} ms",
                        sent.elapsed().as_secs_f64() * 1e3
                    ));
                }
            }
        }
        let now = Instant::now();
        let (ce, cr) = self.hit_cost.unwrap_or((0.0, 0.0));
        let pids: Vec<u32> = self.traced.keys().copied().collect();
        let mut next: Option<Instant> = None;
        let mut changed = false;
        for pid in pids {
            if self.traced.get(&pid).is_none_or(|t| t.plan.is_empty()) {
                continue; // no handshake probes: no hits to read
            }
            let hits = self.probes.hs_hits.get(&pid, 0).unwrap_or_default();
            let Some(t) = self.traced.get_mut(&pid) else { continue };
            let (de, dr) = (
                hits.entries.saturating_sub(t.hits_seen.0),
                hits.returns.saturating_sub(t.hits_seen.1),
            );
            t.hits_seen = (hits.entries.max(t.hits_seen.0), hits.returns.max(t.hits_seen.1));
            let cpu = de as f64 * ce + dr as f64 * cr;
            t.probe_cpu += cpu;
            if de + dr > 0 {
                let c = CommLabels { comm: t.name.clone() };
                self.metrics.probe_hits.get_or_create(&c).inc_by(de + dr);
                self.metrics.probe_cpu.get_or_create(&c).inc_by(cpu);
            }
            let total = t.probe_cpu;
            let Some(d) = t.duty.as_mut() else { continue };
            let action = d.step(now, total);
            let due = d.next_step(total);
            next = Some(next.map_or(due, |n: Instant| n.min(due)));
            match action {
                Action::Detach => {
                    let links = std::mem::take(&mut t.links);
                    if self.args.verbose {
                        eprintln!("tlsprof: budget: detaching {} probes from {pid}", links.len());
                    }
                    t.detach_sent = Some(Instant::now());
                    self.probes.detach_later(pid, links);
                    self.profiler.set_probes(pid, false);
                    changed = true;
                }
                Action::Attach => {
                    let (comm, plan) = (t.comm.clone(), t.plan.clone());
                    let t0 = Instant::now();
                    let links = self.attach_plan(pid, &comm, &plan, false);
                    if self.args.verbose {
                        eprintln!(
                            "tlsprof: budget: attached {} probes to {pid} in {:.1} ms",
                            links.len(),
                            t0.elapsed().as_secs_f64() * 1e3
                        );
                    }
                    if let Some(t) = self.traced.get_mut(&pid) {
                        t.links = links;
                        t.window_start_ns = ktime_ns();
                    }
                    self.profiler.set_probes(pid, true);
                    changed = true;
                }
                Action::Keep => {}
            }
        }
        if changed {
            self.update_gauges();
        }
        self.export_duty();
        next
    }

    /// tlsprof_probe_duty_cycle: per process name, the mean over its probed processes
    /// weighted by how fast their probes are hit while attached (an idle nginx master does
    /// not dilute its busy workers' ratio); the plain mean while all are idle.
    fn export_duty(&self) {
        let now = Instant::now();
        let mut per: BTreeMap<&str, (f64, f64, f64, u32)> = BTreeMap::new();
        for t in self.traced.values().filter(|t| !t.plan.is_empty()) {
            let (d, w) = t
                .duty
                .as_ref()
                .map_or((1.0, 0.0), |d| (d.duty(now), d.rate().unwrap_or(0.0)));
            let e = per.entry(&t.name).or_default();
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
            self.metrics
                .probe_duty_cycle
                .get_or_create(&CommLabels { comm: comm.into() })
                .set(duty);
        }
    }

    /// Starts following a process: forks, CPU, listening ports.
    fn track(&mut self, pid: u32, st: ProcStat, links: Vec<Link>) {
        let _ = self.probes.proc_traced.insert(pid, 1, 0);
        let name = discovery::process_name(pid, &st.comm);
        if self.ever_attached.insert(name.clone()) {
            // Exported at zero from the start, so that rate() sees the first increment.
            for reason in [UNLABELLED_NO_CONNECTION, UNLABELLED_INCOMPLETE] {
                let _ = self.metrics.handshakes_unlabelled.get_or_create(&ReasonLabels {
                    comm: name.clone(),
                    reason: reason.into(),
                });
            }
        }
        self.profiler.add(pid, &name, !links.is_empty());
        self.traced.insert(
            pid,
            Traced {
                name,
                comm: st.comm,
                start_time: st.start_time,
                plan: Vec::new(),
                links,
                duty: None,
                window_start_ns: 0,
                hits_seen: (0, 0),
                probe_cpu: 0.0,
                detach_sent: None,
            },
        );
        self.update_gauges();
    }

    fn forget(&mut self, pid: u32) {
        if let Some(t) = self.traced.remove(&pid) {
            self.log(format!("forgetting {pid} ({})", t.name));
            self.probes.detach_later(pid, t.links);
            self.profiler.remove(pid);
            self.recent_exits.insert(pid, t.name);
        }
    }

    fn update_gauges(&mut self) {
        let mut per_comm: BTreeMap<&str, i64> = BTreeMap::new();
        let mut probes = 0;
        for t in self.traced.values() {
            *per_comm.entry(&t.name).or_default() += 1;
            probes += t.links.len() as i64;
        }
        // Names no longer traced go to zero rather than vanish, so rates and alerts stay sane.
        for comm in &self.ever_attached {
            if !per_comm.contains_key(comm.as_str()) {
                self.metrics
                    .attached_processes
                    .get_or_create(&CommLabels { comm: comm.clone() })
                    .set(0);
            }
        }
        for (comm, n) in per_comm {
            self.metrics
                .attached_processes
                .get_or_create(&CommLabels { comm: comm.into() })
                .set(n);
        }
        self.metrics.attached_probes.set(probes);
    }

    fn sync_kernel_stats(&mut self) {
        for &(idx, kind) in hs::STATS {
            let Ok(v) = self.probes.hs_stats.get(&idx, 0) else {
                continue;
            };
            let delta = v.saturating_sub(self.stats_seen[idx as usize]);
            self.stats_seen[idx as usize] = v;
            if idx == 0 {
                self.metrics.events_lost.inc_by(delta);
            }
            self.metrics
                .kernel_errors
                .get_or_create(&KindLabels { kind: kind.into() })
                .inc_by(delta);
        }
    }

    /// The agent's own CPU time and resident memory, from /proc/self.
    fn sync_self_usage(&mut self) {
        if let Some((cpu, rss)) = discovery::self_usage() {
            let delta = cpu - self.cpu_seen;
            if delta > 0.0 {
                self.metrics.agent_cpu.inc_by(delta);
                self.cpu_seen = cpu;
            }
            self.metrics.agent_memory.set(rss as i64);
        }
    }

    fn comm_of(&self, tgid: u32) -> String {
        if let Some(t) = self.traced.get(&tgid) {
            return t.name.clone();
        }
        if let Some(c) = self.recent_exits.get(&tgid) {
            return c.clone();
        }
        discovery::stat(tgid)
            .map(|s| discovery::process_name(tgid, &s.comm))
            .unwrap_or_else(|_| "unknown".into())
    }

    /// A connection accepted on a watched port ended.
    fn on_conn(&mut self, e: cn::conn_event) {
        let key = hs::hs_port {
            netns: e.netns,
            port: e.port,
            pad: 0,
        };
        let comm = self
            .ports
            .get(&key)
            .or_else(|| self.port_names.get(&key))
            .map_or("unknown", String::as_str)
            .to_string();
        self.churn.on_event(&e, &comm);
        if e.tls == 0 {
            self.on_unhandshaken(key);
        }
    }

    /// A handshake the probes saw: labelled by what its connection's server sent, which may
    /// still be on its way (see wire.rs).
    fn on_handshake(&mut self, e: hs::hs_event) {
        if !self.exact && e.role != hs::HS_ROLE_CLIENT && e.conn_start != 0 {
            // the connection came before the probes' window: its first calls may be missing
            let window = self.traced.get(&e.tgid).map_or(0, |t| t.window_start_ns);
            if e.conn_start < window {
                return;
            }
        }
        if e.conn_sk == 0 || !self.probes.wire_counts {
            return self.count_handshake(&e, &Negotiated::UNKNOWN, Some(UNLABELLED_NO_CONNECTION));
        }
        let id = (e.conn_sk, e.conn_start);
        match self.wire.lookup(id) {
            Lookup::Ready(l, complete) => self.count_handshake(&e, &l, (!complete).then_some(UNLABELLED_INCOMPLETE)),
            // a failed handshake may have sent nothing: take what is known
            Lookup::Wait if e.result != hs::HS_RESULT_OK => self.count_handshake(&e, &self.wire.give_up(id).0, None),
            Lookup::Wait => self.pending.push_back((e, Instant::now())),
        }
    }

    /// Counts the waiting handshakes whose parameters arrived, and those that waited too
    /// long (or all, at exit) with what is known.
    fn flush_pending(&mut self, all: bool) {
        let now = Instant::now();
        for (e, since) in std::mem::take(&mut self.pending) {
            let id = (e.conn_sk, e.conn_start);
            match self.wire.lookup(id) {
                Lookup::Ready(l, complete) => {
                    self.count_handshake(&e, &l, (!complete).then_some(UNLABELLED_INCOMPLETE))
                }
                Lookup::Wait if all || now.duration_since(since) >= wire::WAIT => {
                    let (l, complete) = self.wire.give_up(id);
                    self.count_handshake(&e, &l, (!complete).then_some(UNLABELLED_INCOMPLETE));
                }
                Lookup::Wait => self.pending.push_back((e, since)),
            }
        }
    }

    /// A handshake the probes timed. With --exact they count it too; otherwise a server's
    /// handshakes are counted from the wire (on_wire_handshake) and this only measures it.
    fn count_handshake(&mut self, e: &hs::hs_event, n: &Negotiated, unlabelled: Option<&str>) {
        let comm = self.comm_of(e.tgid);
        let role = hs::role_label(e.role);
        let result = hs::result_label(e.result);
        let cpu = e.cpu_ns as f64 / 1e9;
        let p = ParamLabels::new(&comm, role, n);
        let counts = self.exact || e.role == hs::HS_ROLE_CLIENT;
        if counts {
            self.metrics.handshakes.get_or_create(&p.with_result(result)).inc();
            if let Some(reason) = unlabelled {
                self.count_unlabelled(&comm, reason);
            }
        }
        if e.result == hs::HS_RESULT_OK {
            self.metrics.handshake_cpu.get_or_create(&p).observe(cpu);
            self.metrics
                .handshake_duration
                .get_or_create(&p)
                .observe(e.duration_ns as f64 / 1e9);
        } else {
            let rl = RoleLabels {
                comm: comm.clone(),
                role: role.into(),
            };
            self.metrics.failed_handshake_cpu.get_or_create(&rl).inc_by(cpu);
        }
        let s = self.summary.entry((comm, role, result)).or_default();
        s.count += counts as u64;
        s.measured += 1;
        s.cpu_ns += e.cpu_ns;
        s.duration_ns += e.duration_ns;
    }

    fn count_unlabelled(&self, comm: &str, reason: &str) {
        self.metrics
            .handshakes_unlabelled
            .get_or_create(&ReasonLabels {
                comm: comm.into(),
                reason: reason.into(),
            })
            .inc();
    }

    /// A capture ended. For a server without handshake probes this is the handshake: a
    /// ServerHello was sent (or a fatal alert instead), and the server finished its part.
    /// In the default mode this counts every server's handshakes, with or without probes.
    fn on_wire_handshake(&mut self, h: WireHandshake) {
        let probes_count = self.exact && self.traced.get(&h.tgid).is_none_or(|t| !t.plan.is_empty());
        if probes_count {
            return; // --exact: the probes count this process's handshakes
        }
        if !self.traced.contains_key(&h.tgid) && !self.recent_exits.contains_key(&h.tgid) {
            return;
        }
        if !h.hello && !h.alert {
            return;
        }
        let comm = self.comm_of(h.tgid);
        let result = if h.ok { "ok" } else { "failed" };
        let p = ParamLabels::new(&comm, "server", &h.labels);
        self.metrics.handshakes.get_or_create(&p.with_result(result)).inc();
        if h.hello && !h.complete {
            self.count_unlabelled(&comm, UNLABELLED_INCOMPLETE);
        }
        self.summary.entry((comm, "server", result)).or_default().count += 1;
    }

    fn on_proc(&mut self, n: pr::proc_notice) {
        match n.kind {
            pr::PROC_EV_FORK => {
                // nginx -s reload: new workers forked by a traced master. Attach at once.
                let Ok(st) = discovery::stat(n.pid) else { return };
                let selected = self.traced.contains_key(&n.parent) && self.descends_from_selected(n.pid, &st);
                if selected && !self.traced.contains_key(&n.pid) {
                    self.examine(n.pid, st);
                    self.refresh_ports();
                    self.say_ready();
                    self.update_gauges();
                }
            }
            pr::PROC_EV_EXIT => {
                // Detach at once; the kernel maps are swept once per scan, for all exits
                // together (a sweep walks hs_conns).
                self.forget(n.pid);
                self.exited.push(n.pid);
                self.update_gauges();
            }
            _ => {}
        }
    }

    fn descends_from_selected(&self, pid: u32, st: &ProcStat) -> bool {
        // The ancestry the selector walks: the child's stat is in hand, its ancestors' are read.
        let mut stats = HashMap::from([(pid, st.clone())]);
        let mut next = st.ppid;
        for _ in 0..64 {
            if next <= 1 {
                break;
            }
            let Ok(s) = discovery::stat(next) else { break };
            let parent = s.ppid;
            stats.insert(next, s);
            next = parent;
        }
        self.selector.selects(pid, &stats)
    }

    fn drain(&mut self) {
        self.profiler.drain();
        // Wire bytes first: a handshake event finds its connection's parameters.
        let now = Instant::now();
        let mut wire_done = Vec::new();
        while let Some(item) = self.probes.wire_events.next() {
            if let Some(h) = WireEvent::decode(&item).and_then(|e| self.wire.on_event(e, now)) {
                wire_done.push(h);
            }
        }
        let mut events = Vec::new();
        while let Some(item) = self.probes.hs_events.next() {
            if let Some(e) = read_record::<hs::hs_event>(&item) {
                events.push(e);
            }
        }
        let mut conns = Vec::new();
        while let Some(item) = self.probes.conn_events.next() {
            if let Some(e) = read_record::<cn::conn_event>(&item) {
                conns.push(e);
            }
        }
        let mut notices = Vec::new();
        while let Some(item) = self.probes.proc_events.next() {
            if let Some(n) = read_record::<pr::proc_notice>(&item) {
                notices.push(n);
            }
        }
        // Handshake events first: a process's last handshakes arrive before its exit.
        for h in wire_done {
            self.on_wire_handshake(h);
        }
        for e in events {
            self.on_handshake(e);
        }
        self.flush_pending(false);
        for e in conns {
            self.on_conn(e);
        }
        for n in notices {
            self.on_proc(n);
        }
    }

    fn wait(&self, timeout: Duration) {
        let mut fds = [
            libc::pollfd {
                fd: self.probes.hs_events.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: self.probes.proc_events.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: self.probes.conn_events.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: self.probes.wire_events.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
        // SAFETY: fds is a valid array of pollfd for the length given.
        unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
    }

    fn print_summary(&self) {
        println!("tlsprof: handshakes seen");
        println!(
            "{:<16} {:<7} {:<7} {:>10} {:>14} {:>14}",
            "COMM", "ROLE", "RESULT", "COUNT", "CPU/HS (us)", "WALL/HS (us)"
        );
        for ((comm, role, result), s) in &self.summary {
            let n = s.measured.max(1) as f64;
            println!(
                "{:<16} {:<7} {:<7} {:>10} {:>14.1} {:>14.1}",
                comm,
                role,
                result,
                s.count,
                s.cpu_ns as f64 / n / 1e3,
                s.duration_ns as f64 / n / 1e3
            );
        }
    }
}

/// `--pid` must name a live process that carries a TLS stack, itself or in a child.
fn check_pids(pids: &[u32]) -> Result<()> {
    let mut cache = HashMap::new();
    let mut memo = StackMemo::default();
    let mut has_tls = |pid: u32, cache: &mut HashMap<_, _>| -> Result<bool> {
        let files = tls_files(pid, cache, elf::HookMode::Auto, false)?;
        Ok(!files.is_empty() || symbols::process_tls_stack(pid, &mut memo).is_some())
    };
    for &pid in pids {
        let st = discovery::stat(pid).map_err(|_| anyhow::anyhow!("no process with pid {pid}"))?;
        if has_tls(pid, &mut cache).with_context(|| format!("cannot read /proc/{pid}/maps of {pid} ({})", st.comm))? {
            continue;
        }
        let stats: HashMap<u32, ProcStat> = discovery::pids()?
            .into_iter()
            .filter_map(|p| Some((p, discovery::stat(p).ok()?)))
            .collect();
        let sel = Selector {
            pids: vec![pid],
            comms: vec![],
        };
        let child_has_tls = stats
            .keys()
            .filter(|p| **p != pid && sel.selects(**p, &stats))
            .any(|p| has_tls(*p, &mut cache).unwrap_or(false));
        if !child_has_tls {
            bail!(
                "process {pid} ({}) maps no TLS library (libssl, libgnutls, libmbedtls, …) and its executable \
                 carries no TLS code found by symbols (OpenSSL, mbed TLS or Go's crypto/tls linked in; a \
                 stripped executable hides it): nothing to trace",
                st.comm
            );
        }
    }
    Ok(())
}

pub fn run(args: RunArgs) -> Result<()> {
    preflight::privileges()?;
    let btf = preflight::btf()?;
    let listener = match (&args.flamegraph, &args.metrics_out) {
        (None, None) => Some(preflight::listen(args.listen)?),
        _ => None,
    };
    check_pids(&args.pids)?;
    preflight::raise_fd_limit();

    let mut probes = Probes::load(&btf, args.sample_hz, args.exact)?;
    let exact = args.exact || !probes.wire_counts;
    if !args.exact && exact {
        eprintln!(
            "tlsprof: warning: without tcp_sendmsg_locked the handshakes can only be counted by the handshake \
             probes: they stay attached (as with --exact) and --overhead-budget is not applied"
        );
    }
    let hit_cost = match probes.calibrate() {
        Ok(c) => Some(c),
        Err(e) => {
            if args.verbose {
                eprintln!("tlsprof: cannot measure the cost of a probe hit here: {e:#}");
            }
            None
        }
    };
    let metrics = Arc::new(Metrics::new());
    let profiler = Profiler::new(
        metrics.clone(),
        probes.cpu_samples.take().context("cpu_samples taken")?,
        probes.cpu_procs.take().context("cpu_procs taken")?,
        args.debug_dirs.clone(),
        args.flamegraph.is_some(),
        args.verbose,
        args.sample_hz > 0,
    );
    // Every probe is exported from the start (at zero when it attached), so that dashboards
    // and alerts see the series and rate() sees the first failure.
    metrics
        .mode_info
        .get_or_create(&ModeLabels {
            mode: if exact { "exact" } else { "default" }.into(),
            overhead_budget: if exact {
                "none".into()
            } else {
                format!("{}", args.overhead_budget)
            },
        })
        .set(1);
    if !exact {
        for figure in SAMPLED_FIGURES {
            metrics
                .sampled_figures
                .get_or_create(&FigureLabels {
                    figure: (*figure).into(),
                })
                .set(1);
        }
    }
    if let Some((e, r)) = hit_cost {
        for (probe, v) in [("uprobe", e), ("uretprobe", r)] {
            metrics
                .probe_hit_cost
                .get_or_create(&ProbeLabels { probe: probe.into() })
                .set(v);
        }
    }
    for program in UPROBES.iter().chain(OPTIONAL_PROGRAMS.iter().map(|(p, _, _)| p)) {
        let _ = metrics.attach_failures.get_or_create(&ProbeLabels {
            probe: (*program).into(),
        });
    }
    for program in &probes.missing {
        metrics
            .attach_failures
            .get_or_create(&ProbeLabels {
                probe: (*program).into(),
            })
            .inc();
    }
    if let Some(listener) = listener {
        http::serve(listener, metrics.clone());
    }
    install_signal_handlers();

    let churn = Churn::new(metrics.clone(), args.verbose);
    let mut agent = Agent {
        selector: Selector {
            pids: args.pids.clone(),
            comms: args.comms.clone(),
        },
        metrics,
        probes,
        self_pid: std::process::id(),
        traced: HashMap::new(),
        watched: HashMap::new(),
        hooks_cache: HashMap::new(),
        recent_exits: HashMap::new(),
        stats_seen: [0; 8],
        summary: BTreeMap::new(),
        fatal: None,
        cpu_seen: 0.0,
        ever_attached: Default::default(),
        ports: BTreeMap::new(),
        unhandshaken: BTreeMap::new(),
        port_names: HashMap::new(),
        churn,
        exited: Vec::new(),
        profiler,
        stack_memo: StackMemo::default(),
        wire: Tracker::default(),
        pending: VecDeque::new(),
        exact,
        hit_cost,
        ready: Vec::new(),
        args,
    };
    if agent.args.flamegraph.is_none() && agent.args.metrics_out.is_none() {
        eprintln!("tlsprof: serving metrics on http://{}/metrics", agent.args.listen);
    }
    agent.scan();
    agent.sync_self_usage();
    if let Some(out) = agent.args.metrics_out.take() {
        // `top` and `report` read the metrics from here on: the first scan has attached.
        let _ = out.send(agent.metrics.clone());
    }

    let every = agent.args.scan_every();
    let deadline = agent
        .args
        .duration
        .map(|s| Instant::now() + Duration::from_secs_f64(s.max(0.0)));
    let mut next_scan = Instant::now() + every;
    let mut next_split = Instant::now() + Duration::from_secs(1);
    let mut exits_cleared = Instant::now();
    let mut next_duty: Option<Instant> = None;
    while !STOP.load(Ordering::SeqCst) {
        if let Some(msg) = agent.fatal.take() {
            bail!("a probe failed to attach (--strict): {msg}");
        }
        let now = Instant::now();
        if deadline.is_some_and(|d| now >= d) {
            break;
        }
        let mut until = next_scan.saturating_duration_since(now).min(Duration::from_millis(200));
        if let Some(d) = next_duty {
            until = until.min(d.saturating_duration_since(now));
        }
        agent.wait(until.min(next_split.saturating_duration_since(now)));
        agent.drain();
        next_duty = agent.duty_tick();
        if Instant::now() >= next_split {
            agent.profiler.tick();
            next_split = Instant::now() + Duration::from_secs(1);
        }
        if Instant::now() >= next_scan {
            agent.scan();
            agent.sync_kernel_stats();
            agent.sync_self_usage();
            agent.wire.expire(Instant::now());
            next_scan = Instant::now() + every;
            if exits_cleared.elapsed() > Duration::from_secs(60) {
                agent.recent_exits.clear();
                agent.port_names.clear();
                exits_cleared = Instant::now();
            }
        }
    }
    agent.drain();
    agent.flush_pending(true);
    agent.profiler.tick();
    agent.refresh_ports();
    agent.churn.finish();
    agent.sync_kernel_stats();
    if let Some(out) = agent.args.flamegraph.clone() {
        return write_flamegraph(&agent, &out);
    }
    if !agent.args.quiet {
        agent.print_summary();
    }
    Ok(())
}

fn write_flamegraph(agent: &Agent, out: &Path) -> Result<()> {
    let folded = agent.profiler.folded.as_ref().context("no stacks collected")?;
    let samples: u64 = folded.stacks.values().sum();
    if samples == 0 {
        bail!(
            "no CPU samples of the selected processes in {:.0} s (idle, or not attached): no flame graph written",
            agent.args.duration.unwrap_or(0.0)
        );
    }
    let mut names: Vec<&str> = agent.traced.values().map(|t| t.name.as_str()).collect();
    names.sort_unstable();
    names.dedup();
    let title = format!(
        "tlsprof: {} ({} samples at {} Hz)",
        names.join(", "),
        samples,
        agent.args.sample_hz
    );
    let file = std::fs::File::create(out).with_context(|| format!("cannot create {}", out.display()))?;
    cpu::render(folded, &title, std::io::BufWriter::new(file)).with_context(|| format!("writing {}", out.display()))?;
    eprintln!(
        "tlsprof: wrote {} ({samples} samples, {} stacks)",
        out.display(),
        folded.stacks.len()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn st(comm: &str, ppid: u32) -> ProcStat {
        ProcStat {
            comm: comm.into(),
            ppid,
            start_time: 1,
            vsize: 1,
        }
    }

    #[test]
    fn selection() {
        // 100 nginx master -> 101, 102 workers; 200 bash -> 201 curl; 300 node;
        // 400 a node that renamed its main thread
        let stats: HashMap<u32, ProcStat> = [
            (100, st("nginx", 1)),
            (101, st("nginx", 100)),
            (102, st("nginx", 100)),
            (200, st("bash", 1)),
            (201, st("curl", 200)),
            (300, st("node", 1)),
            (400, st("MainThread", 1)),
        ]
        .into_iter()
        .collect();
        let exe = |pid: u32| matches!(pid, 300 | 400).then(|| "node".to_string());
        let cases: &[(&[u32], &[&str], &[u32])] = &[
            (&[], &[], &[100, 101, 102, 200, 201, 300, 400]), // default: everything (TLS is checked later)
            (&[100], &[], &[100, 101, 102]),                  // --pid master: its workers too
            (&[101], &[], &[101]),                            // --pid worker: not its siblings
            (&[], &["nginx"], &[100, 101, 102]),              // --comm
            (&[], &["node"], &[300, 400]),                    // --comm also matches the executable
            (&[200], &["node"], &[200, 201, 300, 400]),       // both: union
            (&[999], &[], &[]),                               // a pid that is not there
        ];
        for (pids, comms, want) in cases {
            let sel = Selector {
                pids: pids.to_vec(),
                comms: comms.iter().map(|c| c.to_string()).collect(),
            };
            let mut got: Vec<u32> = stats
                .keys()
                .copied()
                .filter(|p| sel.selects_with(*p, &stats, exe))
                .collect();
            got.sort_unstable();
            assert_eq!(&got, want, "--pid {pids:?} --comm {comms:?}");
        }
    }
}
