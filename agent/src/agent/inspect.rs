//! What a process's files offer the handshake probes: its TLS libraries and executable
//! (discovery/handshake), analysed once per file (discovery/files.rs), and the check that
//! `--pid` names a process with a TLS stack.
use std::collections::HashMap;

use anyhow::{bail, Context as _, Result};

use super::no_probes::NoProbes;
use crate::discovery::{
    files::{ElfFiles, HooksFailure},
    handshake::{self, Candidate, HandshakeHooks, HookMode},
    maps,
    procfs::{self, ProcStat},
    select::Selector,
    stacks,
};

/// What a process's files offer the handshake probes.
#[derive(Default)]
pub struct TlsFiles {
    /// Every candidate file's hooks: (file, one library's hooks).
    pub hooks: Vec<(Candidate, HandshakeHooks)>,
    /// Where none were found, why, if the files say: a TLS library unreadable, or read
    /// without its handshake functions (else its stack has no entry point, or none is known).
    pub why_none: Option<(NoProbes, String)>,
}

/// The handshake hooks of every candidate file of a process.
pub fn tls_files(pid: u32, maps: &str, files: &ElfFiles, mode: HookMode) -> TlsFiles {
    let (found, unreadable) = handshake::candidates(pid, maps);
    let mut out = TlsFiles::default();
    for c in found {
        let analysis = files
            .hooks(c.file, c.version, || handshake::read_hooks(&c.host_path, mode))
            .map_err(|(kind, why)| match kind {
                HooksFailure::Unreadable => (NoProbes::FileUnreadable, why),
                HooksFailure::Unparsable => (NoProbes::SymbolNotFound, why),
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
    out
}

/// `--pid` must name a live process that carries a TLS stack, itself or in a child.
pub fn check_pids(pids: &[u32]) -> Result<()> {
    let elf = ElfFiles::new(Vec::new(), false);
    let has_tls = |pid: u32| -> Result<bool> {
        let maps = maps::read(&pid.to_string())?;
        let files = tls_files(pid, &maps, &elf, HookMode::Auto);
        Ok(!files.hooks.is_empty() || stacks::process_tls_stack(pid, &maps, &elf).is_some())
    };
    for &pid in pids {
        let st = procfs::stat(pid).map_err(|_| anyhow::anyhow!("no process with pid {pid}"))?;
        if has_tls(pid).with_context(|| format!("cannot read /proc/{pid}/maps of {pid} ({})", st.comm))? {
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
            .any(|(p, _)| has_tls(*p).unwrap_or(false));
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
