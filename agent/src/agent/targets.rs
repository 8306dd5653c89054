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

use super::{
    gauges::{self, Attached},
    handshakes::{self, ProcInfo},
    mode::Mode,
    no_probes::NoProbes,
    probes::{Prober, Probes, Probing},
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
    /// Its handshake probes, or why it has none (CPU and connections only; the kernel
    /// estimates its handshakes' CPU).
    probing: Probing,
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
            .filter(|(_, t)| t.name == name && t.probing.probes().is_some())
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

    /// Attaches to a selected process if it carries a TLS stack, else watches it.
    fn examine(
        &mut self,
        pid: u32,
        st: ProcStat,
        given: Option<String>,
        k: &mut Kernel,
        prof: &mut Profiler,
        m: &Metrics,
    ) {
        if !self.room_to_trace(pid, &st.comm) {
            return;
        }
        // Named now, beside the comm just read: attaching takes a while, and a process that
        // renames itself meanwhile would be named from two different moments.
        let name = given.unwrap_or_else(|| procfs::process_name(pid, &st.comm));
        // The process's memory map, read once for everything that looks at it here.
        let at_ns = crate::clock::ktime_ns();
        let maps = maps::read(&pid.to_string());
        if maps.as_ref().is_ok_and(String::is_empty) || (maps.is_err() && procfs::exited(pid, st.start_time)) {
            // a process per connection that has let go of its memory (exiting: an empty map
            // is read before it is a zombie) or is gone: its events on their way are still
            // its, not `unknown`, and it is not watched for a map that will not grow
            self.exited_early(pid, Ended::named(name));
            return;
        }
        let maps = maps.unwrap_or_else(|e| {
            log::debug!("cannot read the memory map of {pid} ({}): {e}", st.comm);
            String::new()
        });
        let seen = Examined {
            pid,
            st,
            name,
            maps,
            at_ns,
        };
        let (planned, why_none) = self.prober.plan(pid, &seen.st.comm, &seen.maps);
        if matches!(why_none, Some((NoProbes::FileUnreadable, _))) && procfs::exited(pid, seen.st.start_time) {
            // a process per connection, gone while its files were read: not a failure
            self.exited_early(pid, Ended::named(seen.name));
            return;
        }
        let Some(mut planned) = planned else {
            // A TLS stack without an entry point to probe (NSS, Go, a server's own), a TLS
            // library that cannot be read or has lost its symbols, or --no-handshake-probes:
            // CPU and connections, handshake CPU from the kernel.
            if let Some(stack) = self.prober.stack(pid, &seen.maps) {
                self.watched.remove(&pid);
                let (why, detail) = why_none.unwrap_or_else(|| {
                    let detail = format!("its TLS stack ({stack}) has no entry point tlsprof probes");
                    (NoProbes::NoEntryPoint, detail)
                });
                let msg = estimated(pid, &seen.st.comm, &format!("TLS stack {stack}, "), why);
                self.prober.say_why_none(pid, &seen.name, why, &detail);
                if self.track(seen, Probing::Without(why), k, prof, m) {
                    self.ready.add(msg);
                }
                return;
            }
            // Asked for by pid or name, or (no selector) found by its connections: its TLS
            // stack is none tlsprof knows (Java's JSSE, rustls, a stripped static
            // executable, a stack of its own), or it has none: counted and labelled from
            // what its connections carry, as any other.
            let found = self.found.get(&pid).copied().filter(|_| !self.selector.explicit());
            if found.is_some() || self.selector.explicit() {
                self.watched.remove(&pid);
                let why = NoProbes::NoTlsLibrary;
                let how = match found {
                    Some(port) => format!("found by its connections (TLS on port {port}), no TLS library found, "),
                    None => "no TLS library found, counted from its connections, ".to_string(),
                };
                let msg = estimated(pid, &seen.st.comm, &how, why);
                let detail = "no TLS library or TLS code found in its files: its handshakes are counted from what its \
                              connections carry";
                self.prober.say_why_none(pid, &seen.name, why, detail);
                if self.track(seen, Probing::Without(why), k, prof, m) {
                    self.ready.add(msg);
                }
                return;
            }
            let watched = Watched {
                start_time: seen.st.start_time,
                vsize: seen.st.vsize,
            };
            self.watch(pid, watched);
            return;
        };
        self.watched.remove(&pid);
        let mut lines = std::mem::take(&mut planned.lines);
        let attaching_ns = crate::clock::ktime_ns();
        let Some(probing) = self.prober.attach(k, pid, &seen.name, &seen.st, planned, m) else {
            // gone while its probes were attached: some may have timed a call meanwhile
            let ended = Ended {
                name: seen.name,
                window_start_ns: attaching_ns,
                first_ns: attaching_ns,
            };
            self.exited_early(pid, ended);
            return;
        };
        if let Some(why) = probing.why_none() {
            lines = vec![estimated(pid, &seen.st.comm, "", why)];
        }
        if self.track(seen, probing, k, prof, m) {
            // logged once everything is in place: operators read it as "ready"
            self.ready.extend(lines);
        }
    }

    /// A process that exited while it was being attached: counted (said once a minute),
    /// named for its events still on their way, its kernel entries swept.
    fn exited_early(&mut self, pid: u32, ended: Ended) {
        self.early_exits.add();
        self.remember_exit(pid, ended);
        self.exited.push(pid);
    }

    /// Starts following a process: forks, CPU, listening ports.
    fn track(&mut self, e: Examined, probing: Probing, k: &mut Kernel, prof: &mut Profiler, m: &Metrics) -> bool {
        let Examined {
            pid,
            st,
            name,
            maps,
            at_ns,
        } = e;
        let probed = probing.attached();
        let probed_ns = probing.probes().map_or(0, Probes::first_ns);
        // with probes, estimated beside them while they are judged, or where they miss the
        // handshakes (sightings.rs)
        let estimate = if probed {
            self.judges.traced(&name)
        } else {
            Estimate::Alone
        };
        if !k.trace(pid, estimate, probed_ns) {
            // the kernel's traced map is full (Kernel counts it): not attached after all
            probing.release(pid, k);
            return false;
        }
        if self.first_attach(&name) {
            handshakes::export_unlabelled(m, &name);
        }
        prof.add(pid, &name, probed, &maps);
        probing.traced(pid, k, prof);
        self.traced.insert(
            pid,
            Traced {
                name,
                comm: st.comm,
                start_time: st.start_time,
                regrow: matches!(probing, Probing::Without(NoProbes::NoTlsLibrary)).then_some(st.vsize),
                probing,
                examined_ns: at_ns,
            },
        );
        self.export_gauges(m);
        true
    }

    /// Shutting down: every process's probes detached at once (probes/).
    pub fn detach_everything(&mut self, k: &mut Kernel) {
        Probing::release_all(self.traced.iter_mut().map(|(pid, t)| (*pid, &mut t.probing)), k);
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
        let probes = t.probing.probes();
        let ended = Ended {
            window_start_ns: probes.map_or(0, Probes::window_start_ns),
            first_ns: probes.map_or(0, Probes::first_ns),
            name: t.name,
        };
        t.probing.release(pid, k);
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

    /// Says which processes are ready (ready.rs), once their listening ports are watched
    /// too (the default mode counts handshakes there).
    pub fn say_ready(&mut self) {
        self.ready
            .say(self.traced.iter().map(|(p, t)| (*p, t.name.clone())).collect());
    }

    /// Removes the ready file (at exit: nothing is attached any more).
    pub fn unready(&self) {
        self.ready.remove();
    }

    /// tlsprof_attached_processes, tlsprof_handshake_cpu_method_info and
    /// tlsprof_attached_probes (gauges.rs).
    pub fn export_gauges(&self, m: &Metrics) {
        let traced = self.traced.values().map(|t| Attached {
            name: &t.name,
            why_no_probes: t.probing.why_none().or((t.probing.probes().is_some()
                && self.judges.verdict(&t.name) == Verdict::Unseen)
                .then_some(NoProbes::UnseenByProbes)),
            probes: t.probing.probes().map_or(0, Probes::count),
        });
        gauges::export(m, traced, &self.ever_attached);
    }

    /// Names of processes that exited are kept a while, for their late events.
    pub fn age_recent_exits(&mut self) {
        self.recent_exits.age();
    }

    /// Each traced process and its name.
    /// A traced process's name (None when it is not traced).
    pub fn traced_name(&self, pid: u32) -> Option<&str> {
        self.traced.get(&pid).map(|t| t.name.as_str())
    }

    /// The name of a process traced now or lately (None for any other).
    pub fn known_name(&self, pid: u32) -> Option<&str> {
        self.traced_name(pid)
            .or_else(|| self.recent_exits.get(&pid).map(|e| e.name.as_str()))
    }

    pub fn named(&self) -> impl Iterator<Item = (u32, &str)> {
        self.traced.iter().map(|(pid, t)| (*pid, t.name.as_str()))
    }

    /// A traced process's probes, if it has any.
    pub fn probes_mut(&mut self, pid: u32) -> Option<&mut Probes> {
        self.traced.get_mut(&pid)?.probing.probes_mut()
    }

    /// Each process with probes: pid, name, comm and its probes.
    pub fn probed_mut(&mut self) -> impl Iterator<Item = (u32, &str, &str, &mut Probes)> {
        self.traced.iter_mut().filter_map(|(pid, t)| {
            let p = t.probing.probes_mut()?;
            Some((*pid, t.name.as_str(), t.comm.as_str(), p))
        })
    }

    /// Each process with probes: its name and probes.
    pub fn probed(&self) -> impl Iterator<Item = (&str, &Probes)> {
        self.traced
            .values()
            .filter_map(|t| Some((t.name.as_str(), t.probing.probes()?)))
    }

    /// The names the traced processes are reported under, sorted, once each.
    pub fn names(&self) -> Vec<&str> {
        let mut names: Vec<&str> = self.traced.values().map(|t| t.name.as_str()).collect();
        names.sort_unstable();
        names.dedup();
        names
    }
}

impl ProcInfo for Targets {
    fn name(&self, tgid: u32) -> Cow<'_, str> {
        if let Some(t) = self.traced.get(&tgid) {
            return Cow::Borrowed(&t.name);
        }
        if let Some(e) = self.recent_exits.get(&tgid) {
            return Cow::Borrowed(&e.name);
        }
        procfs::stat(tgid).map_or_else(|_| "unknown".into(), |s| procfs::process_name(tgid, &s.comm).into())
    }

    fn known(&self, tgid: u32) -> bool {
        self.traced.contains_key(&tgid) || self.recent_exits.contains(&tgid)
    }

    fn window_start_ns(&self, tgid: u32) -> u64 {
        match self.traced.get(&tgid) {
            Some(t) => t.probing.probes().map_or(0, Probes::window_start_ns),
            None => self.recent_exits.get(&tgid).map_or(0, |e| e.window_start_ns),
        }
    }

    fn probed_since_ns(&self, tgid: u32) -> u64 {
        match self.traced.get(&tgid) {
            Some(t) => t.probing.probes().map_or(0, Probes::first_ns),
            None => self.recent_exits.get(&tgid).map_or(0, |e| e.first_ns),
        }
    }

    fn judged_window(&self, tgid: u32) -> Option<u64> {
        let t = self.traced.get(&tgid)?;
        (t.probing.attached() && self.judges.verdict(&t.name) == Verdict::Judging)
            .then(|| t.probing.probes().map(Probes::window_start_ns))
            .flatten()
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
            probing: Probing::Without(NoProbes::NoEntryPoint),
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
