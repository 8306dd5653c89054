//! The agent's side of the handshake probes: the options only they follow (--hooks,
//! --no-handshake-probes, --overhead-budget, --strict), what a process's files offer them
//! (inspect.rs), the plan made of it, the first attach and its failures, and the one line
//! that says why a process has none. Targets (targets/) chooses the processes; this
//! decides their probes.
use std::time::Instant;

use super::{Plan, Probes, Probing};
use crate::{
    agent::{
        duty::Duty,
        inspect::{tls_files, TlsFiles},
        mode::Mode,
        no_probes::{NoProbes, Said},
    },
    bounds::Dropped,
    bpf::loader::Kernel,
    cli::RunArgs,
    discovery::{files::ElfFiles, handshake::HookMode, procfs, stacks},
    metrics::{Metrics, ProbeLabels},
};

pub struct Prober {
    /// --hooks: which entry points of a TLS library are probed.
    hooks: HookMode,
    /// --no-handshake-probes: the kernel estimates every process's handshake CPU.
    no_probes: bool,
    /// --overhead-budget, in the modes that apply it (mode.rs): each process's probes get a
    /// duty cycle; None: they stay attached.
    overhead_budget: Option<f64>,
    /// --strict: an attach failure ends the run.
    strict: bool,
    /// What is known of the files processes map (shared with the CPU split).
    files: ElfFiles,
    /// --strict: the first attach failure, which ends the run.
    fatal: Option<String>,
    /// Why processes have no probes, said once per name and reason.
    said: Said,
}

/// A process's probes as planned from its files, not attached yet.
pub struct Planned {
    plan: Plan,
    /// Some entry probe is single-stepped by the kernel.
    stepped: bool,
    /// The "attached to" line of each library probed (ready.rs).
    pub lines: Vec<String>,
}

impl Prober {
    pub fn new(args: &RunArgs, mode: Mode, files: ElfFiles) -> Self {
        Self {
            hooks: args.hooks,
            no_probes: args.no_handshake_probes,
            overhead_budget: mode.budgeted().then_some(args.overhead_budget),
            strict: args.strict,
            files,
            fatal: None,
            said: Said::default(),
        }
    }

    /// The probes a process's files offer (`maps`: its memory map; `comm` for the "attached
    /// to" lines), None if none; and why none, if its files say (a TLS library unreadable,
    /// or read without its handshake functions, or --no-handshake-probes; an unreadable
    /// file is said even beside probes planned from others).
    pub fn plan(&self, pid: u32, comm: &str, maps: &str) -> (Option<Planned>, Option<(NoProbes, String)>) {
        let files = if self.no_probes {
            TlsFiles {
                why_none: Some((NoProbes::Disabled, "--no-handshake-probes".into())),
                ..TlsFiles::default()
            }
        } else {
            tls_files(pid, maps, &self.files, self.hooks)
        };
        if files.hooks.is_empty() {
            return (None, files.why_none);
        }
        let mut plan: Plan = Vec::new();
        let mut lines = Vec::new();
        for (file, h) in &files.hooks {
            plan.extend(
                h.plan()
                    .into_iter()
                    .map(|(prog, off)| (prog, off, file.host_path.clone())),
            );
            lines.push(format!(
                "attached to {pid} ({comm}): {} via {} ({})",
                file.path, h.source, h.library
            ));
        }
        let stepped = files.hooks.iter().any(|(_, h)| h.stepped);
        (Some(Planned { plan, stepped, lines }), files.why_none)
    }

    /// The TLS stack a process carries, if one is known by its libraries or executable
    /// (discovery/stacks.rs), probed or not.
    pub fn stack(&self, pid: u32, maps: &str) -> Option<&'static str> {
        stacks::process_tls_stack(pid, maps, &self.files)
    }

    /// Attaches a process's probes as planned: its probes, or (AttachRefused, said) why it
    /// has none. None: the process exited meanwhile (a process started per connection: not
    /// a failure), whatever was attached released. Each failure is counted
    /// (tlsprof_attach_failures_total), the first said once, and with --strict kept to end
    /// the run (re-attaching in a later cycle may race the process's exit: that is only
    /// logged). A file that vanished from the process's memory while its probes were
    /// attached (its dynamic loader still mapping the library: a process examined right
    /// after its exec, as Postfix's smtpd is) is planned and attached once more, from the
    /// map as it is then: attached in part, a handshake call whose return probe is missing
    /// never ends, and its process's handshakes had no CPU figure.
    pub fn attach(
        &mut self,
        k: &mut Kernel,
        pid: u32,
        name: &str,
        st: &procfs::ProcStat,
        planned: Planned,
        m: &Metrics,
    ) -> Option<Probing> {
        let mut planned = planned;
        let mut again = true;
        loop {
            let Planned { plan, stepped, .. } = planned;
            let duty = self.overhead_budget.map(|b| Duty::new(b, Instant::now(), 0.0));
            let mut failed: Vec<(&'static str, anyhow::Error)> = Vec::new();
            let probes = Probes::attach(k, pid, plan, stepped, duty, |prog, e| failed.push((prog, e)));
            // a process started per connection may be gone already, or exiting (ESRCH while
            // its /proc entry still reads as running): not a failure
            let exiting = failed.iter().any(|(_, e)| errno(e) == Some(libc::ESRCH));
            if !failed.is_empty() && (exiting || procfs::exited(pid, st.start_time)) {
                if let Some(p) = probes {
                    Probing::Probes(Box::new(p)).release(pid, k);
                }
                return None;
            }
            if again && failed.iter().any(|(_, e)| errno(e) == Some(libc::ENOENT)) {
                again = false;
                if let Some(p) = probes {
                    Probing::Probes(Box::new(p)).release(pid, k);
                }
                let maps = crate::discovery::maps::read(&pid.to_string()).unwrap_or_default();
                if let (Some(p), _) = self.plan(pid, &st.comm, &maps) {
                    log::debug!(
                        "{pid} ({}): a library's mapping changed while attached: once more",
                        st.comm
                    );
                    planned = p;
                    continue;
                }
                return None; // its library gone from its memory: exiting, or exec'd again
            }
            let mut refused = None;
            for (prog, e) in failed {
                m.attach_failures
                    .get_or_create(&ProbeLabels { probe: prog.into() })
                    .inc();
                if self.strict {
                    self.fatal.get_or_insert(format!("{pid} ({}): {e:#}", st.comm));
                }
                refused.get_or_insert(format!("{e:#}"));
            }
            return Some(match (probes, refused) {
                (Some(p), refused) => {
                    if let Some(e) = refused {
                        log::warn!("{pid} ({}): some handshake probes refused: {e}", st.comm);
                    }
                    Probing::Probes(Box::new(p))
                }
                (None, refused) => {
                    let e = refused.unwrap_or_default();
                    self.said.say(pid, name, NoProbes::AttachRefused, &e);
                    Probing::Without(NoProbes::AttachRefused)
                }
            });
        }
    }

    /// Says why a process has no probes (or, UnseenByProbes, why they miss its
    /// handshakes): once per name and reason (no_probes.rs).
    pub fn say_why_none(&mut self, pid: u32, name: &str, why: NoProbes, detail: &str) {
        self.said.say(pid, name, why, detail);
    }

    /// --strict: the first attach failure, once.
    pub fn take_fatal(&mut self) -> Option<String> {
        self.fatal.take()
    }

    /// What the file analyses' bounds dropped since last asked.
    pub fn take_dropped(&self, dropped: &mut Dropped) {
        self.files.take_dropped(dropped);
    }
}

/// The system's error an attach failed with (ENOENT: the file it named is no longer in the
/// process's memory, its mapping changed under the attach; ESRCH: the process is exiting).
fn errno(e: &anyhow::Error) -> Option<i32> {
    e.chain()
        .find_map(|c| c.downcast_ref::<std::io::Error>()?.raw_os_error())
}
