//! What a process's files offer the handshake probes: its TLS libraries and executable
//! (discovery/handshake), analysed once per file (discovery/files.rs), and the check that
//! `--pid` names a live process.
use anyhow::Result;

use super::no_probes::NoProbes;
use crate::discovery::{
    files::{ElfFiles, HooksFailure},
    handshake::{self, Candidate, HandshakeHooks, HookMode},
    procfs,
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

/// `--pid` must name a live process (whatever its TLS stack: one tlsprof does not know is
/// counted from its connections).
pub fn check_pids(pids: &[u32]) -> Result<()> {
    for &pid in pids {
        procfs::stat(pid).map_err(|_| anyhow::anyhow!("no process with pid {pid}"))?;
    }
    Ok(())
}
