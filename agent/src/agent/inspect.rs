//! What a process's files offer the handshake probes: its TLS libraries and executable
//! (discovery/handshake), analysed once per file identity (HookCache), and the check that
//! `--pid` names a process with a TLS stack.
use std::collections::HashMap;

use anyhow::{bail, Context as _, Result};

use super::no_probes::NoProbes;
use crate::{
    bounds,
    discovery::{
        handshake::{self, Candidate, HandshakeHooks, HookMode},
        maps,
        procfs::{self, ProcStat},
        select::Selector,
        stacks::{self, StackMemo},
    },
};

/// Files whose OpenSSL hooks are known (ELF analysis), at most; beyond, an arbitrary one
/// is forgotten (read again if needed), counted: {table="hook_cache"}.
pub const MAX_HOOK_FILES: usize = 1024;

/// A file's identity: device, inode, size, mtime.
type FileId = (u64, u64, u64, i64);

/// What ELF analysis made of a file: its hooks, or why it could not be analysed.
type Analysis = Result<Vec<HandshakeHooks>, (NoProbes, String)>;

/// ELF analysis of files by identity, at most MAX_HOOK_FILES.
#[derive(Default)]
pub struct HookCache {
    files: HashMap<FileId, Analysis>,
    /// Entries forgotten at the bound, not exported yet.
    pub evicted: u64,
}

impl HookCache {
    /// What is known of a file, else what `analyze` says of it, remembered.
    pub fn get_or_analyze(&mut self, id: FileId, analyze: impl FnOnce() -> Analysis) -> Analysis {
        if let Some(h) = self.files.get(&id) {
            return h.clone();
        }
        self.evicted += bounds::make_room(&mut self.files, MAX_HOOK_FILES);
        self.files.entry(id).or_insert_with(analyze).clone()
    }
}

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
pub fn tls_files(pid: u32, maps: &str, cache: &mut HookCache, mode: HookMode) -> TlsFiles {
    let (found, unreadable) = handshake::candidates(pid, maps);
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
    out
}

/// `--pid` must name a live process that carries a TLS stack, itself or in a child.
pub fn check_pids(pids: &[u32]) -> Result<()> {
    let mut cache = HookCache::default();
    let mut memo = StackMemo::default();
    let mut has_tls = |pid: u32, cache: &mut HookCache| -> Result<bool> {
        let maps = maps::read(&pid.to_string())?;
        let files = tls_files(pid, &maps, cache, HookMode::Auto);
        Ok(!files.hooks.is_empty() || stacks::process_tls_stack(pid, &maps, &mut memo).is_some())
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
