//! Target selection and attach planning: which processes are traced, what is attached to
//! each (handshake probes where OpenSSL is found, else CPU and connections only), and
//! forgetting them when they exit or exec. Readiness: the `attached to` log lines and the
//! --ready-file, once a process's listening ports are watched too.
use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    path::{Path, PathBuf},
    time::Instant,
};

use anyhow::{bail, Context as _, Result};

use super::{
    budget::{self, Probes},
    duty::Duty,
    handshakes::ProcInfo,
    no_probes::{self, NoProbes, Said},
};
use crate::{
    bounds::{self, Dropped},
    bpf::{loader::Kernel, proc::PROC_TRACED_ENTRIES, uprobes::Link},
    cli::RunArgs,
    clock::ktime_ns,
    cpu::Profiler,
    discovery::{
        handshake::{self, Candidate, HandshakeHooks, HookMode},
        procfs::{self, ProcStat},
        select::Selector,
        stacks::{self, StackMemo},
    },
    metrics::{CommLabels, MethodLabels, Metrics, ProbeLabels, ReasonLabels},
};

/// Why a handshake's negotiated labels are `other` (tlsprof_handshakes_unlabelled_total).
pub const UNLABELLED_NO_CONNECTION: &str = "no_connection";
pub const UNLABELLED_INCOMPLETE: &str = "incomplete";

/// A traced process.
pub struct Traced {
    /// The `comm` label (procfs::process_name).
    pub name: String,
    /// /proc/PID/comm when attached: a change means a new program (exec).
    pub comm: String,
    start_time: u64,
    /// Its handshake probes, where a TLS library was found (None: CPU and connections only).
    pub probes: Option<Probes>,
    /// Why no probe attached at first (the kernel estimates its handshakes' CPU); None: probes.
    why_no_probes: Option<NoProbes>,
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
/// Files whose OpenSSL hooks are known (ELF analysis), at most; beyond, an arbitrary one
/// is forgotten (read again if needed), counted: {table="hook_cache"}.
pub const MAX_HOOK_FILES: usize = 1024;
/// Names of processes that exited lately (cleared every minute), at most; beyond, the late
/// events of one more are named from /proc or `unknown`, counted: {table="recent_exits"}.
pub const MAX_RECENT_EXITS: usize = 16_384;
/// Process names ever attached (their gauges go to 0 rather than away), at most; beyond, a
/// new name's gauge stays at its last value when its processes are gone, counted:
/// {table="attached_names"}.
pub const MAX_NAMES: usize = 4096;
/// Processes forgotten before their kernel map entries are swept at the next scan, at
/// most: beyond, they are swept at once (nothing is lost).
pub const MAX_UNSWEPT: usize = 1024;

/// A file's identity: device, inode, size, mtime.
type FileId = (u64, u64, u64, i64);

/// What ELF analysis made of a file: its hooks, or why it could not be analysed.
type Analysis = Result<Vec<HandshakeHooks>, (NoProbes, String)>;

/// ELF analysis of files by identity, at most MAX_HOOK_FILES.
#[derive(Default)]
struct HookCache {
    files: HashMap<FileId, Analysis>,
    /// Entries forgotten at the bound, not exported yet.
    evicted: u64,
}

impl HookCache {
    /// What is known of a file, else what `analyze` says of it, remembered.
    fn get_or_analyze(&mut self, id: FileId, analyze: impl FnOnce() -> Analysis) -> Analysis {
        if let Some(h) = self.files.get(&id) {
            return h.clone();
        }
        self.evicted += bounds::make_room(&mut self.files, MAX_HOOK_FILES);
        self.files.entry(id).or_insert_with(analyze).clone()
    }
}

/// What a process's files offer the handshake probes.
#[derive(Default)]
struct TlsFiles {
    /// Every candidate file's hooks: (file, one library's hooks).
    hooks: Vec<(Candidate, HandshakeHooks)>,
    /// Where none were found, why, if the files say: a TLS library unreadable, or read
    /// without its handshake functions (else its stack has no entry point, or none is known).
    why_none: Option<(NoProbes, String)>,
}

/// The handshake hooks of every candidate file of a process.
fn tls_files(pid: u32, cache: &mut HookCache, mode: HookMode) -> std::io::Result<TlsFiles> {
    let (found, unreadable) = handshake::candidates(pid)?;
    let mut out = TlsFiles::default();
    for c in found {
        let analysis = cache.get_or_analyze(c.identity, || {
            handshake::handshake_hooks(&c.host_path, mode).map_err(|e| match e {
                handshake::ElfError::Open { .. } => (NoProbes::FileUnreadable, e.to_string()),
                handshake::ElfError::Parse { .. } => (NoProbes::SymbolNotFound, e.to_string()),
            })
        });
        // the executable need hold no TLS code: only a TLS library's file says why not
        let library = handshake::library_of_file(&c.path).map(|l| l.name);
        match analysis {
            Ok(hooks) if !hooks.is_empty() => out.hooks.extend(hooks.into_iter().map(|h| (c.clone(), h))),
            Ok(_) => {
                if let Some(lib) = library {
                    let why = format!("{} ({lib}): its handshake functions are not among its symbols", c.path);
                    out.why_none.get_or_insert((NoProbes::SymbolNotFound, why));
                }
            }
            Err(why) => {
                log::debug!("{}", why.1);
                if library.is_some() {
                    out.why_none.get_or_insert(why);
                }
            }
        }
    }
    if let Some(u) = unreadable.first() {
        out.why_none = Some((NoProbes::FileUnreadable, format!("cannot open {}: {}", u.path, u.error)));
    }
    Ok(out)
}

/// The "attached to" line of a process traced without probes (`what`: its stack, if said).
fn estimated(pid: u32, comm: &str, what: &str, why: NoProbes) -> String {
    format!(
        "attached to {pid} ({comm}): {what}no handshake probes ({}): handshake CPU estimated from the kernel",
        why.label()
    )
}

pub struct Targets {
    selector: Selector,
    hooks: HookMode,
    /// --no-handshake-probes: the kernel estimates every process's handshake CPU.
    no_probes: bool,
    exact: bool,
    overhead_budget: f64,
    strict: bool,
    self_pid: u32,
    pub traced: HashMap<u32, Traced>,
    watched: HashMap<u32, Watched>,
    hooks_cache: HookCache,
    stack_memo: StackMemo,
    /// Names of processes that exited lately, for events that arrive after the exit.
    recent_exits: HashMap<u32, String>,
    /// Every process name attached so far: its gauges go to 0, not away, when the last goes.
    ever_attached: BTreeSet<String>,
    /// Processes forgotten since the kernel maps were last swept.
    exited: Vec<u32>,
    /// "attached to" lines waiting for the processes' ports to be watched (say_ready).
    ready: Vec<String>,
    ready_file: Option<PathBuf>,
    /// What the ready file says now.
    ready_written: Option<BTreeMap<u32, String>>,
    /// --strict: the first attach failure, which ends the run.
    pub fatal: Option<String>,
    /// Why processes have no probes, said once per name and reason.
    said: Said,
    /// Entries dropped at the bounds, exported at each scan.
    dropped: Dropped,
}

impl Targets {
    pub fn new(args: &RunArgs, exact: bool) -> Self {
        Self {
            selector: Selector::new(&args.targets),
            hooks: args.hooks,
            no_probes: args.no_handshake_probes,
            exact,
            overhead_budget: args.overhead_budget,
            strict: args.strict,
            self_pid: std::process::id(),
            traced: HashMap::new(),
            watched: HashMap::new(),
            hooks_cache: HookCache::default(),
            stack_memo: StackMemo::default(),
            recent_exits: HashMap::new(),
            ever_attached: BTreeSet::new(),
            exited: Vec::new(),
            ready: Vec::new(),
            ready_file: args.ready_file.clone(),
            ready_written: None,
            fatal: None,
            said: Said::default(),
            dropped: Dropped::default(),
        }
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
            if self.traced.contains_key(&pid) || !self.selector.selects(pid, &st.comm, parent_of) {
                continue;
            }
            if self.watched.get(&pid).is_some_and(|w| w.vsize == st.vsize) {
                continue;
            }
            self.examine(pid, st.clone(), k, prof, m);
        }
        self.export_dropped(m);
    }

    /// What the bounds dropped since the last export: tlsprof_table_full_total.
    fn export_dropped(&mut self, m: &Metrics) {
        self.dropped
            .add("hook_cache", std::mem::take(&mut self.hooks_cache.evicted));
        self.dropped
            .add("stack_memo", std::mem::take(&mut self.stack_memo.evicted));
        self.dropped.export(m);
    }

    /// A traced process forked: the child is attached at once if it is selected (nginx -s
    /// reload). Returns whether it was.
    pub fn on_fork(&mut self, pid: u32, parent: u32, k: &mut Kernel, prof: &mut Profiler, m: &Metrics) -> bool {
        if !self.traced.contains_key(&parent) || self.traced.contains_key(&pid) {
            return false;
        }
        let Ok(st) = procfs::stat(pid) else { return false };
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
        self.examine(pid, st, k, prof, m);
        self.export_dropped(m);
        true
    }

    /// A traced process exited: detached at once; the kernel maps are swept at the next
    /// scan, for all exits together (a sweep walks hs_conns).
    pub fn on_exit(&mut self, pid: u32, k: &mut Kernel, prof: &mut Profiler) {
        self.forget(pid, k, prof);
    }

    /// Attaches to a selected process if it carries a TLS stack, else watches it.
    fn examine(&mut self, pid: u32, st: ProcStat, k: &mut Kernel, prof: &mut Profiler, m: &Metrics) {
        if !self.room_to_trace(pid, &st.comm) {
            return;
        }
        // Named now, beside the comm just read: attaching takes a while, and a process that
        // renames itself meanwhile would be named from two different moments.
        let name = procfs::process_name(pid, &st.comm);
        let files = if self.no_probes {
            TlsFiles {
                why_none: Some((NoProbes::Disabled, "--no-handshake-probes".into())),
                ..TlsFiles::default()
            }
        } else {
            tls_files(pid, &mut self.hooks_cache, self.hooks).unwrap_or_else(|e| {
                log::debug!("cannot read the memory map of {pid} ({}): {e}", st.comm);
                TlsFiles::default()
            })
        };
        if files.hooks.is_empty() {
            // A TLS stack without an entry point to probe (NSS, Go, a server's own), a TLS
            // library that cannot be read or has lost its symbols, or --no-handshake-probes:
            // CPU and connections, handshake CPU from the kernel.
            if let Some(stack) = stacks::process_tls_stack(pid, &mut self.stack_memo) {
                self.watched.remove(&pid);
                let (why, detail) = files.why_none.unwrap_or_else(|| {
                    let detail = format!("its TLS stack ({stack}) has no entry point tlsprof probes");
                    (NoProbes::NoEntryPoint, detail)
                });
                let msg = estimated(pid, &st.comm, &format!("TLS stack {stack}, "), why);
                self.said.say(pid, &name, why, &detail);
                if self.track(pid, st, name, (None, Some(why)), k, prof, m) {
                    self.ready.push(msg);
                }
                return;
            }
            let watched = Watched {
                start_time: st.start_time,
                vsize: st.vsize,
            };
            self.watch(pid, watched);
            return;
        }
        self.watched.remove(&pid);
        let mut plan: Vec<(&'static str, u64, PathBuf)> = Vec::new();
        let mut attached = Vec::new();
        for (file, h) in &files.hooks {
            plan.extend(
                h.plan()
                    .into_iter()
                    .map(|(prog, off)| (prog, off, file.host_path.clone())),
            );
            attached.push(format!(
                "attached to {pid} ({}): {} via {} ({})",
                st.comm, file.path, h.source, h.library
            ));
        }
        let (links, refused) = self.attach_first(pid, &st.comm, &plan, k, m);
        let why = match refused {
            Some(e) if links.is_empty() => {
                self.said.say(pid, &name, NoProbes::AttachRefused, &e);
                attached = vec![estimated(pid, &st.comm, "", NoProbes::AttachRefused)];
                Some(NoProbes::AttachRefused)
            }
            Some(e) => {
                log::warn!("{pid} ({}): some handshake probes refused: {e}", st.comm);
                None
            }
            None => None,
        };
        let duty = (!self.exact && !links.is_empty()).then(|| Duty::new(self.overhead_budget, Instant::now(), 0.0));
        let go = plan.iter().any(|(prog, _, _)| prog.starts_with("hs_go_"));
        let stepped = files.hooks.iter().any(|(_, h)| h.stepped);
        let probes = Probes::new(plan, links, duty, stepped, ktime_ns());
        if self.track(pid, st, name, (Some(probes), why), k, prof, m) {
            // logged once everything is in place: operators read it as "ready"
            self.ready.extend(attached);
            if go {
                k.needs_reads(pid); // a goroutine's stretches open and close at its reads
            }
        }
    }

    /// Attaches a process's handshake probes for the first time: each failure is counted,
    /// the first returned to be said once (re-attaching in a later cycle may race its exit:
    /// budget.rs only logs it).
    fn attach_first(
        &mut self,
        pid: u32,
        comm: &str,
        plan: &[(&'static str, u64, PathBuf)],
        k: &mut Kernel,
        m: &Metrics,
    ) -> (Vec<Link>, Option<String>) {
        let mut first = None;
        let links = budget::attach_plan(k, pid, plan, |prog, e| {
            m.attach_failures
                .get_or_create(&ProbeLabels { probe: prog.into() })
                .inc();
            if self.strict {
                self.fatal.get_or_insert(format!("{pid} ({comm}): {e:#}"));
            }
            first.get_or_insert(format!("{e:#}"));
        });
        (links, first)
    }

    /// Starts following a process: forks, CPU, listening ports.
    fn track(
        &mut self,
        pid: u32,
        st: ProcStat,
        name: String,
        (probes, why_no_probes): (Option<Probes>, Option<NoProbes>),
        k: &mut Kernel,
        prof: &mut Profiler,
        m: &Metrics,
    ) -> bool {
        let probed = probes.as_ref().is_some_and(|p| !p.links.is_empty());
        if !k.trace(pid, !probed) {
            // the kernel's traced map is full (Kernel counts it): not attached after all
            if let Some(p) = probes {
                k.detach_later(pid, p.links);
            }
            return false;
        }
        if self.first_attach(&name) {
            // Exported at zero from the start, so that rate() sees the first increment.
            for reason in [UNLABELLED_NO_CONNECTION, UNLABELLED_INCOMPLETE] {
                let _ = m.handshakes_unlabelled.get_or_create(&ReasonLabels {
                    comm: name.clone(),
                    reason: reason.into(),
                });
            }
        }
        prof.add(pid, &name, probed);
        prof.set_probes(pid, probed);
        self.traced.insert(
            pid,
            Traced {
                name,
                comm: st.comm,
                start_time: st.start_time,
                probes,
                why_no_probes,
            },
        );
        self.export_gauges(m);
        true
    }

    /// Shutting down: every process's probes detached at once (Kernel::detach_now).
    pub fn detach_everything(&mut self, k: &mut Kernel) {
        let links = self
            .traced
            .values_mut()
            .filter_map(|t| Some(std::mem::take(&mut t.probes.as_mut()?.links)))
            .flatten()
            .collect();
        k.detach_now(links);
    }

    fn forget(&mut self, pid: u32, k: &mut Kernel, prof: &mut Profiler) {
        if let Some(t) = self.traced.remove(&pid) {
            log::debug!("forgetting {pid} ({})", t.name);
            k.detach_later(pid, t.probes.map(|p| p.links).unwrap_or_default());
            prof.remove(pid, k.oncpu_ns(pid));
            self.remember_exit(pid, t.name);
            self.exited.push(pid);
            if self.exited.len() >= MAX_UNSWEPT {
                k.sweep(&std::mem::take(&mut self.exited));
            }
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
    fn remember_exit(&mut self, pid: u32, name: String) {
        if self.recent_exits.len() >= MAX_RECENT_EXITS && !self.recent_exits.contains_key(&pid) {
            self.dropped.add("recent_exits", 1);
            return;
        }
        self.recent_exits.insert(pid, name);
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

    /// Says which processes are ready: the "attached to" lines, once their listening ports
    /// are watched too (the default mode counts handshakes there), and the ready file.
    pub fn say_ready(&mut self) {
        for msg in std::mem::take(&mut self.ready) {
            log::debug!("{msg}");
        }
        let Some(path) = &self.ready_file else { return };
        let now: BTreeMap<u32, String> = self.traced.iter().map(|(p, t)| (*p, t.name.clone())).collect();
        if self.ready_written.as_ref() == Some(&now) {
            return;
        }
        let text: String = now.iter().map(|(p, n)| format!("{p} {n}\n")).collect();
        match write_atomically(path, &text) {
            Ok(()) => self.ready_written = Some(now),
            Err(e) => log::warn!("cannot write {}: {e:#}", path.display()),
        }
    }

    /// Removes the ready file (at exit: nothing is attached any more).
    pub fn unready(&self) {
        if let Some(path) = &self.ready_file {
            let _ = std::fs::remove_file(path);
        }
    }

    /// tlsprof_attached_processes, tlsprof_handshake_cpu_method_info and
    /// tlsprof_attached_probes.
    pub fn export_gauges(&self, m: &Metrics) {
        let mut per_comm: BTreeMap<&str, i64> = BTreeMap::new();
        let mut per_method: BTreeMap<(&str, Option<NoProbes>), i64> = BTreeMap::new();
        let mut probes = 0;
        for t in self.traced.values() {
            *per_comm.entry(&t.name).or_default() += 1;
            *per_method.entry((&t.name, t.why_no_probes)).or_default() += 1;
            probes += t.probes.as_ref().map_or(0, |p| p.links.len()) as i64;
        }
        // Names no longer traced go to zero rather than vanish, so rates and alerts stay sane.
        for comm in &self.ever_attached {
            if !per_comm.contains_key(comm.as_str()) {
                m.attached_processes
                    .get_or_create(&CommLabels { comm: comm.clone() })
                    .set(0);
            }
            for why in std::iter::once(None).chain(NoProbes::ALL.map(Some)) {
                if !per_method.contains_key(&(comm.as_str(), why)) {
                    let (method, reason) = no_probes::labels(why);
                    let labels = MethodLabels {
                        comm: comm.clone(),
                        method: method.into(),
                        reason: reason.into(),
                    };
                    // only where it was ever set: a name gets one series per method it had
                    if m.handshake_cpu_method.exists(&labels) {
                        m.handshake_cpu_method.get_or_create(&labels).set(0);
                    }
                }
            }
        }
        for ((comm, why), n) in per_method {
            let (method, reason) = no_probes::labels(why);
            m.handshake_cpu_method
                .get_or_create(&MethodLabels {
                    comm: comm.into(),
                    method: method.into(),
                    reason: reason.into(),
                })
                .set(n);
        }
        for (comm, n) in per_comm {
            m.attached_processes
                .get_or_create(&CommLabels { comm: comm.into() })
                .set(n);
        }
        m.attached_probes.set(probes);
    }

    /// Names of processes that exited are kept a while, for their late events.
    pub fn clear_recent_exits(&mut self) {
        self.recent_exits.clear();
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
    fn name(&self, tgid: u32) -> String {
        if let Some(t) = self.traced.get(&tgid) {
            return t.name.clone();
        }
        if let Some(c) = self.recent_exits.get(&tgid) {
            return c.clone();
        }
        procfs::stat(tgid)
            .map(|s| procfs::process_name(tgid, &s.comm))
            .unwrap_or_else(|_| "unknown".into())
    }

    fn known(&self, tgid: u32) -> bool {
        self.traced.contains_key(&tgid) || self.recent_exits.contains_key(&tgid)
    }

    fn has_probes(&self, tgid: u32) -> Option<bool> {
        self.traced.get(&tgid).map(|t| t.probes.is_some())
    }

    fn window_start_ns(&self, tgid: u32) -> u64 {
        self.traced
            .get(&tgid)
            .and_then(|t| t.probes.as_ref())
            .map_or(0, |p| p.window_start_ns)
    }
}

fn write_atomically(path: &Path, text: &str) -> Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, path).context("renaming it")?;
    Ok(())
}

/// `--pid` must name a live process that carries a TLS stack, itself or in a child.
pub fn check_pids(pids: &[u32]) -> Result<()> {
    let mut cache = HookCache::default();
    let mut memo = StackMemo::default();
    let mut has_tls = |pid: u32, cache: &mut HookCache| -> Result<bool> {
        let files = tls_files(pid, cache, HookMode::Auto)?;
        Ok(!files.hooks.is_empty() || stacks::process_tls_stack(pid, &mut memo).is_some())
    };
    for &pid in pids {
        let st = procfs::stat(pid).map_err(|_| anyhow::anyhow!("no process with pid {pid}"))?;
        if has_tls(pid, &mut cache).with_context(|| format!("cannot read /proc/{pid}/maps of {pid} ({})", st.comm))? {
            continue;
        }
        let stats: HashMap<u32, ProcStat> = procfs::pids()?
            .into_iter()
            .filter_map(|p| Some((p, procfs::stat(p).ok()?)))
            .collect();
        let sel = Selector::descendants_of(pid);
        let parent_of = |p: u32| stats.get(&p).map(|s| s.ppid);
        let child_has_tls = stats
            .iter()
            .filter(|(p, s)| **p != pid && sel.selects(**p, &s.comm, parent_of))
            .any(|(p, _)| has_tls(*p, &mut cache).unwrap_or(false));
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::TargetArgs;

    fn targets() -> Targets {
        Targets::new(&RunArgs::embedded(TargetArgs::default()), false)
    }

    fn traced(name: &str) -> Traced {
        Traced {
            name: name.into(),
            comm: name.into(),
            start_time: 0,
            probes: None,
            why_no_probes: Some(NoProbes::NoEntryPoint),
        }
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
            t.remember_exit(pid, "nginx".into());
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

    #[test]
    fn the_hook_cache_is_bounded() {
        let mut c = HookCache::default();
        for i in 0..MAX_HOOK_FILES as u64 + 7 {
            assert!(c.get_or_analyze((1, i, 0, 0), || Ok(Vec::new())).unwrap().is_empty());
        }
        assert_eq!((c.files.len(), c.evicted), (MAX_HOOK_FILES, 7));
        let last = (1, MAX_HOOK_FILES as u64 + 6, 0, 0);
        assert!(c.get_or_analyze(last, || panic!("analyzed again")).unwrap().is_empty());
    }
}
