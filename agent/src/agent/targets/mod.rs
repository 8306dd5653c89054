//! Target selection: which processes are traced (the selector, or what their connections
//! carry), following them as they fork, exec and exit, and forgetting them. What is
//! attached to each is probes/'s to decide (handshake probes where a TLS library's entry
//! points are found; else CPU and connections only); this asks it and reports the outcome:
//! the "attached to" lines, readiness (ready.rs) once a process's listening ports are
//! watched too, and the gauges of what is attached (gauges.rs).
use std::{
    borrow::Cow,
    collections::{BTreeSet, HashMap},
    time::Instant,
};

use rustc_hash::FxHashMap;

mod examine;
mod lookup;

use super::{
    gauges::{self, Attached},
    handshakes::{self, ProcInfo},
    mode::Mode,
    no_probes::NoProbes,
    probes::{Probed, Prober, Probes, Probing},
    ready::Ready,
    recent::Recent,
    sightings::{Judges, Verdict},
};
use crate::{
    bounds::Dropped,
    bpf::{loader::Kernel, proc::PROC_TRACED_ENTRIES, Estimate},
    cli::RunArgs,
    cpu::Profiler,
    discovery::{
        files::ElfFiles,
        maps,
        procfs::{self, ProcStat},
        select::Selector,
    },
    metrics::Metrics,
};

/// A traced process.
pub struct Traced {
    /// The `comm` label (procfs::process_name).
    pub name: String,
    /// /proc/PID/comm when attached: a change means a new program (exec).
    pub comm: String,
    start_time: u64,
    /// Traced without a TLS library (NoProbes::NoTlsLibrary): its memory map's size when
    /// last looked at, looked at again when it changes (a library loaded late, as DeleGate
    /// loads libssl with dlopen).
    regrow: Option<u64>,
    /// When its memory map was read (bpf_ktime_get_ns clock): an exec the kernel saw before
    /// is one this examination has seen (on_exec).
    examined_ns: u64,
}

/// A selected process as examined: its stat, name and memory map, and when it was read.
struct Examined {
    pid: u32,
    st: ProcStat,
    name: String,
    maps: String,
    at_ns: u64,
}

/// A selected process with no TLS stack (yet): looked at again when its memory map grows.
struct Watched {
    start_time: u64,
    vsize: u64,
}

/// Processes traced at once, at most: half the kernel's `traced` map, the rest being for
/// processes that exited and are not swept yet. Beyond, a selected process is not attached
/// (it is looked at again at each scan), counted:
/// tlsprof_table_full_total{table="traced_processes"} (as is one the kernel map refused).
pub const MAX_TRACED: usize = PROC_TRACED_ENTRIES as usize / 2;
/// Selected processes without a TLS stack (yet), watched for their memory map to grow, at
/// most; beyond, one is examined again at every scan, counted: {table="watched_processes"}.
pub const MAX_WATCHED: usize = 16_384;
/// Names of processes that exited lately (kept one to two minutes: recent.rs), at most per
/// minute; beyond, the late events of one more are named from /proc or `unknown`, counted:
/// {table="recent_exits"}.
pub const MAX_RECENT_EXITS: usize = 16_384;
/// Process names ever attached (their gauges go to 0 rather than away), at most; beyond, a
/// new name's gauge stays at its last value when its processes are gone, counted:
/// {table="attached_names"}.
pub const MAX_NAMES: usize = 4096;
/// Processes forgotten before their kernel map entries are swept at the next scan, at
/// most: beyond, they are swept at once (nothing is lost).
pub const MAX_UNSWEPT: usize = 1024;

/// The "attached to" line of a process traced without probes (`what`: its stack, if said).
fn estimated(pid: u32, comm: &str, what: &str, why: NoProbes) -> String {
    format!(
        "attached to {pid} ({comm}): {what}no handshake probes ({}): handshake CPU estimated from the kernel",
        why.label()
    )
}

/// What a process that is no longer traced leaves for its events still on their way: the
/// name they are counted under, and when its probes' window began and when they were first
/// attached (0: it had none), which say how its last handshakes were timed (handshakes.rs).
/// A process started per connection often exits before its handshake's last events are read.
struct Ended {
    name: String,
    window_start_ns: u64,
    first_ns: u64,
}

impl Ended {
    fn named(name: String) -> Self {
        Ended {
            name,
            window_start_ns: 0,
            first_ns: 0,
        }
    }
}

pub struct Targets {
    /// Which processes are traced: --pid, --comm and their descendants (none: every process
    /// found by what its connections carry).
    selector: Selector,
    /// The agent's own pid: never traced.
    self_pid: u32,
    /// The processes traced now.
    traced: FxHashMap<u32, Traced>,
    /// Selected processes without a TLS stack (yet), looked at again when their memory map
    /// grows.
    watched: HashMap<u32, Watched>,
    /// Their handshake probes: what to attach, from what their files offer, and why none.
    prober: Prober,
    /// Each traced process's handshake probes, or why it has none (CPU and connections
    /// only; the kernel estimates its handshakes' CPU): the same pids as `traced`.
    probed: Probed,
    /// Processes that exited lately, for events that arrive after the exit.
    recent_exits: Recent<u32, Ended>,
    /// Every process name attached so far: its gauges go to 0, not away, when the last goes.
    ever_attached: BTreeSet<String>,
    /// Processes forgotten since the kernel maps were last swept.
    exited: Vec<u32>,
    /// Readiness: the "attached to" lines and the ready file.
    ready: Ready,
    /// Entries dropped at the bounds, exported at each scan.
    dropped: Dropped,
    /// Processes found by what their connections carry (no selector: PROC_EV_FOUND), with
    /// the port; bounded by MAX_TRACED, forgotten with them.
    found: HashMap<u32, u16>,
    /// Processes that exited while their probes were being attached.
    early_exits: EarlyExits,
    /// Whether each name's probes see its handshakes (sightings.rs).
    judges: Judges,
}

/// Processes that exited while their probes were being attached (a process per connection:
/// a PostgreSQL backend, an inetd service): their handshakes' CPU is the kernel's estimate,
/// which the kernel ran from their fork or exec. Said in one line with a count, at most once
/// a minute, not a warning per process.
#[derive(Default)]
struct EarlyExits {
    count: u64,
    said: u64,
    said_at: Option<Instant>,
}

impl EarlyExits {
    fn add(&mut self) {
        self.count += 1;
    }

    fn say(&mut self, now: Instant) {
        if self.count == self.said || self.said_at.is_some_and(|t| now.duration_since(t).as_secs() < 60) {
            return;
        }
        log::info!(
            "{} processes exited before their handshake probes were attached (a process per connection): their \
             handshakes' CPU is the kernel's estimate",
            self.count
        );
        self.said = self.count;
        self.said_at = Some(now);
    }
}

impl Targets {
    pub fn new(args: &RunArgs, mode: Mode, files: ElfFiles) -> Self {
        Self {
            selector: Selector::new(&args.targets),
            self_pid: std::process::id(),
            traced: FxHashMap::default(),
            watched: HashMap::new(),
            prober: Prober::new(args, mode, files),
            probed: Probed::default(),
            recent_exits: Recent::new(MAX_RECENT_EXITS),
            ever_attached: BTreeSet::new(),
            exited: Vec::new(),
            ready: Ready::new(args.ready_file.clone()),
            dropped: Dropped::default(),
            early_exits: EarlyExits::default(),
            found: HashMap::new(),
            judges: Judges::new(mode.wire_counts()),
        }
    }

    /// Sets the kernel estimate of every process of `name` with probes (attached or not,
    /// the budget's off part: a name's verdict is its processes').
    fn estimate_probed(&self, name: &str, estimate: Estimate, k: &mut Kernel) {
        for (pid, _) in self
            .traced
            .iter()
            .filter(|(pid, t)| t.name == name && self.probed.probes(**pid).is_some())
        {
            k.set_estimate(*pid, estimate);
        }
    }

    /// Handshakes of processes with probes, looked at (handshakes.rs): (process, a probe
    /// timed it). A name's verdict applies to every process of it: trusted probes stop the
    /// kernel estimate; probes that miss the handshakes leave them to it, said once.
    pub fn on_sightings(&mut self, looked: Vec<(u32, bool)>, k: &mut Kernel, m: &Metrics) {
        for (pid, seen) in looked {
            let Some(name) = self.traced_name(pid).map(str::to_string) else {
                continue;
            };
            let Some(verdict) = self.judges.sighted(&name, seen) else {
                continue;
            };
            let (timed, missed) = self.judges.tally(&name);
            self.estimate_probed(&name, verdict.estimate(), k);
            if verdict == Verdict::Unseen {
                let detail = format!(
                    "its probes reported none of the {missed} server handshakes its connections carried while they \
                     were attached: another TLS stack terminates its clients' TLS (its TLS library serves other calls)"
                );
                self.prober.say_why_none(pid, &name, NoProbes::UnseenByProbes, &detail);
                self.export_gauges(m);
            } else {
                log::debug!(
                    "{name}: its probes reported a server handshake ({timed} looked at, {missed} missed): trusted"
                );
            }
        }
        self.dropped
            .add("sighting_names", std::mem::take(&mut self.judges.dropped));
    }

    /// Forgets the processes gone or changed, and attaches to the selected ones that carry
    /// a TLS stack. The kernel maps of the processes forgotten since the last scan are
    /// swept first.
    pub fn scan(&mut self, k: &mut Kernel, prof: &mut Profiler, m: &Metrics) {
        let Ok(pids) = procfs::pids() else { return };
        let stats: HashMap<u32, ProcStat> = pids
            .into_iter()
            .filter(|p| *p != self.self_pid)
            .filter_map(|p| Some((p, procfs::stat(p).ok()?)))
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
        for pid in gone {
            self.forget(pid, k, prof);
        }
        k.sweep(&std::mem::take(&mut self.exited));
        self.watched
            .retain(|pid, w| stats.get(pid).is_some_and(|s| s.start_time == w.start_time));

        let parent_of = |p: u32| stats.get(&p).map(|s| s.ppid);
        let mut pids: Vec<u32> = stats.keys().copied().collect();
        pids.sort_unstable();
        for pid in pids {
            let st = &stats[&pid];
            if self.traced.contains_key(&pid) {
                self.regrown(pid, st, k, prof, m);
                continue;
            }
            if !self.selector.selects(pid, &st.comm, parent_of) {
                continue;
            }
            if self.watched.get(&pid).is_some_and(|w| w.vsize == st.vsize) {
                continue;
            }
            self.examine(pid, st.clone(), None, k, prof, m);
        }
        self.early_exits.say(Instant::now());
        self.export_dropped(m);
    }

    /// A process traced without a TLS library whose memory map changed: attached again if
    /// it now maps one (its probes, or its stack's name).
    fn regrown(&mut self, pid: u32, st: &ProcStat, k: &mut Kernel, prof: &mut Profiler, m: &Metrics) {
        let Some(t) = self.traced.get_mut(&pid) else { return };
        if t.regrow.is_none_or(|v| v == st.vsize) {
            return;
        }
        t.regrow = Some(st.vsize);
        let Ok(maps) = maps::read(&pid.to_string()) else { return };
        let found = self.prober.plan(pid, &st.comm, &maps).0.is_some() || self.prober.stack(pid, &maps).is_some();
        if found {
            // Examined again in place: the kernel goes on tracing it meanwhile (its state is
            // not swept), so that the connection it may be serving now (a process started for
            // one, whose TLS library came with that first handshake) keeps its estimate, even
            // where the process is gone before its probes are attached.
            log::debug!("{pid} ({}) maps a TLS library now: attaching again", st.comm);
            let Some(ended) = self.untrack(pid, k, prof) else {
                return;
            };
            self.examine(pid, st.clone(), None, k, prof, m);
            if !self.traced.contains_key(&pid) {
                self.gone(pid, ended, k); // gone meanwhile
            }
        }
    }

    /// What the bounds dropped since the last export: tlsprof_table_full_total.
    fn export_dropped(&mut self, m: &Metrics) {
        self.prober.take_dropped(&mut self.dropped);
        self.dropped.export(m);
    }

    /// A traced process forked (the kernel traces the child from its fork: bpf/proc.bpf.h):
    /// the child is attached at once if it is selected (nginx -s reload, a PostgreSQL
    /// backend), else the kernel forgets it. Returns whether it was attached.
    /// The child runs its parent's program: it goes by its parent's name (a PostgreSQL
    /// backend rewrites its argv, which process_name would read), else by `comm`.
    pub fn on_fork(
        &mut self,
        pid: u32,
        parent: u32,
        comm: &str,
        k: &mut Kernel,
        prof: &mut Profiler,
        m: &Metrics,
    ) -> bool {
        if self.traced.contains_key(&pid) {
            return false;
        }
        let inherited = self.traced_name(parent).map(str::to_string);
        let name = inherited.clone().unwrap_or_else(|| comm.to_string());
        let attached = self.examine_new(pid, &name, inherited, k, prof, m);
        if !attached {
            self.exited.push(pid); // the kernel's entry goes at the next sweep
        }
        attached
    }

    /// A process executed a new program: a traced one (its probes went with its old
    /// memory), or one whose name `--comm` selects, which the kernel traces from its exec.
    /// Examined afresh at once; the kernel forgets it if it is not traced after all.
    pub fn on_exec(&mut self, pid: u32, name: &str, k: &mut Kernel, prof: &mut Profiler, m: &Metrics) -> bool {
        let seen_since = |t: &Traced| {
            let exec_ns = k.exec_ns(pid);
            exec_ns != 0 && exec_ns < t.examined_ns
        };
        if self.traced.get(&pid).is_some_and(seen_since) {
            // a scan found it first, running its new program: examined again, its probes
            // would go in the middle of the handshake it may be making now
            log::debug!("{pid} ({name}): examined after its exec already");
            return true;
        }
        if let Some(old) = self.untrack(pid, k, prof) {
            log::debug!("{pid} ({}) executed a new program: examined again", old.name);
        }
        self.watched.remove(&pid);
        let attached = self.examine_new(pid, name, None, k, prof, m);
        if !attached {
            self.exited.push(pid);
        }
        attached
    }

    /// Without a selector, a process not traced sent TLS on a connection it accepted on
    /// `port` (the kernel traces it from then: bpf/proc.bpf.h proc_found): traced whatever
    /// its TLS stack, found by what its connections carry, said once in the log.
    pub fn on_found(
        &mut self,
        pid: u32,
        port: u16,
        name: &str,
        k: &mut Kernel,
        prof: &mut Profiler,
        m: &Metrics,
    ) -> bool {
        if self.traced.contains_key(&pid) {
            return false;
        }
        if self.found.len() < MAX_TRACED {
            self.found.insert(pid, port);
        }
        self.watched.remove(&pid);
        let attached = self.examine_new(pid, name, None, k, prof, m);
        if !attached {
            self.found.remove(&pid);
            self.exited.push(pid);
        }
        attached
    }

    /// A process the kernel reported (fork, exec; `name`: its comm then): examined if
    /// selected. Whether it is traced now. One gone already is remembered by that name: its
    /// connections' events, still on their way, are its.
    /// `given`: the name it goes by (a forked child's, its parent's), else read now.
    fn examine_new(
        &mut self,
        pid: u32,
        name: &str,
        given: Option<String>,
        k: &mut Kernel,
        prof: &mut Profiler,
        m: &Metrics,
    ) -> bool {
        let Ok(st) = procfs::stat(pid) else {
            self.remember_exit(pid, Ended::named(name.to_string()));
            return false;
        };
        // The ancestry the selector walks: the child's stat is in hand, its ancestors' are read.
        let child_ppid = st.ppid;
        let parent_of = |p: u32| {
            if p == pid {
                Some(child_ppid)
            } else {
                procfs::stat(p).ok().map(|s| s.ppid)
            }
        };
        if !self.selector.selects(pid, &st.comm, parent_of) {
            return false;
        }
        self.examine(pid, st, given, k, prof, m);
        self.export_dropped(m);
        self.traced.contains_key(&pid)
    }

    /// A traced process exited: detached at once; the kernel maps are swept at the next
    /// scan, for all exits together (a sweep walks hs_conns). One the kernel traced that
    /// the agent never attached to (it exited first) is swept too.
    pub fn on_exit(&mut self, pid: u32, k: &mut Kernel, prof: &mut Profiler) {
        if self.traced.contains_key(&pid) {
            self.forget(pid, k, prof);
        } else {
            self.exited.push(pid);
        }
    }

    /// Shutting down: every process's probes detached at once (probes/).
    pub fn detach_everything(&mut self, k: &mut Kernel) {
        self.probed.release_all(k);
    }

    /// --strict: the first attach failure, which ends the run.
    pub fn take_fatal(&mut self) -> Option<String> {
        self.prober.take_fatal()
    }

    fn forget(&mut self, pid: u32, k: &mut Kernel, prof: &mut Profiler) {
        self.found.remove(&pid);
        if let Some(ended) = self.untrack(pid, k, prof) {
            log::debug!("forgetting {pid} ({})", ended.name);
            self.gone(pid, ended, k);
        }
    }

    /// Stops following a traced process here (its probes released, its CPU split ended)
    /// and returns what it leaves for its late events (Ended); the kernel goes on tracing
    /// it until it is swept.
    fn untrack(&mut self, pid: u32, k: &mut Kernel, prof: &mut Profiler) -> Option<Ended> {
        let t = self.traced.remove(&pid)?;
        let probing = self.probed.remove(pid);
        let probes = probing.as_ref().and_then(Probing::probes);
        let ended = Ended {
            window_start_ns: probes.map_or(0, Probes::window_start_ns),
            first_ns: probes.map_or(0, Probes::first_ns),
            name: t.name,
        };
        if let Some(probing) = probing {
            probing.release(pid, k);
        }
        prof.remove(pid, k.oncpu_ns(pid));
        Some(ended)
    }

    /// A process no longer traced: named for its last events, and swept from the kernel's
    /// maps with the next exits (at once past MAX_UNSWEPT).
    fn gone(&mut self, pid: u32, ended: Ended, k: &mut Kernel) {
        self.remember_exit(pid, ended);
        self.exited.push(pid);
        if self.exited.len() >= MAX_UNSWEPT {
            k.sweep(&std::mem::take(&mut self.exited));
        }
    }

    /// Whether one more process may be traced (MAX_TRACED); counted when not.
    fn room_to_trace(&mut self, pid: u32, comm: &str) -> bool {
        if self.traced.len() < MAX_TRACED {
            return true;
        }
        log::debug!("not attaching to {pid} ({comm}): {MAX_TRACED} processes traced already");
        self.dropped.add("traced_processes", 1);
        false
    }

    /// A selected process without a TLS stack, watched within MAX_WATCHED.
    fn watch(&mut self, pid: u32, w: Watched) {
        if self.watched.len() >= MAX_WATCHED && !self.watched.contains_key(&pid) {
            self.dropped.add("watched_processes", 1);
            return;
        }
        self.watched.insert(pid, w);
    }

    /// The name of a process that exited, kept within MAX_RECENT_EXITS.
    fn remember_exit(&mut self, pid: u32, ended: Ended) {
        if !self.recent_exits.insert(pid, ended) {
            self.dropped.add("recent_exits", 1);
        }
    }

    /// A name attached for the first time: remembered within MAX_NAMES.
    fn first_attach(&mut self, name: &str) -> bool {
        if self.ever_attached.contains(name) {
            return false;
        }
        if self.ever_attached.len() >= MAX_NAMES {
            self.dropped.add("attached_names", 1);
        } else {
            self.ever_attached.insert(name.to_string());
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::TargetArgs;

    fn targets() -> Targets {
        Targets::new(
            &RunArgs::embedded(TargetArgs::default()),
            Mode::Default,
            ElfFiles::new(Vec::new(), false),
        )
    }

    fn traced(name: &str) -> Traced {
        Traced {
            name: name.into(),
            comm: name.into(),
            start_time: 0,
            regrow: None,
            examined_ns: 0,
        }
    }

    /// A process started per connection exits before its handshake's last events are read:
    /// they are judged by the probes' window it had, not as a process that never had probes.
    #[test]
    fn an_exited_process_keeps_its_name_and_probes_window() {
        let mut t = targets();
        let pid = 4242;
        assert_eq!(
            (t.window_start_ns(pid), t.probed_since_ns(pid), t.known(pid)),
            (0, 0, false)
        );
        t.remember_exit(
            pid,
            Ended {
                name: "postgres".into(),
                window_start_ns: 900,
                first_ns: 700,
            },
        );
        assert_eq!((t.window_start_ns(pid), t.probed_since_ns(pid)), (900, 700));
        assert_eq!((t.name(pid), t.known_name(pid)), ("postgres".into(), Some("postgres")));
        t.age_recent_exits();
        assert_eq!(t.window_start_ns(pid), 900, "kept one to two minutes");
        t.age_recent_exits();
        assert_eq!(
            (t.window_start_ns(pid), t.probed_since_ns(pid), t.known(pid)),
            (0, 0, false)
        );
    }

    #[test]
    fn tables_of_processes_are_bounded() {
        let mut t = targets();
        for pid in 0..MAX_TRACED as u32 {
            assert!(t.room_to_trace(pid, "nginx"));
            t.traced.insert(pid, traced("nginx"));
        }
        assert!(!t.room_to_trace(1_000_000, "nginx"));
        for pid in 0..MAX_WATCHED as u32 + 3 {
            t.watch(
                pid,
                Watched {
                    start_time: 0,
                    vsize: 0,
                },
            );
        }
        for pid in 0..MAX_RECENT_EXITS as u32 + 4 {
            t.remember_exit(pid, Ended::named("nginx".into()));
        }
        for i in 0..MAX_NAMES + 5 {
            assert!(t.first_attach(&format!("name{i}")));
        }
        assert!(!t.first_attach("name0"), "remembered");
        assert_eq!(
            (t.watched.len(), t.recent_exits.len(), t.ever_attached.len()),
            (MAX_WATCHED, MAX_RECENT_EXITS, MAX_NAMES)
        );
        for (table, n) in [
            ("traced_processes", 1),
            ("watched_processes", 3),
            ("recent_exits", 4),
            ("attached_names", 5),
        ] {
            assert_eq!(t.dropped.get(table), n, "{table}");
        }
        let m = Metrics::new();
        t.export_dropped(&m);
        assert_eq!(t.dropped.get("recent_exits"), 0, "exported");
        let exported = m
            .table_full
            .get_or_create(&crate::metrics::TableLabels {
                table: "recent_exits".into(),
            })
            .get();
        assert_eq!(exported, 4);
    }
}
