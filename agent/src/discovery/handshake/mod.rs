//! Where each TLS library's handshake is hooked: one file per library (openssl.rs,
//! gnutls.rs, mbedtls.rs, wolfssl.rs, gotls.rs for Go's crypto/tls) says which files it ships in, which of its functions
//! drive a handshake, the role each call has, how a call's return value reads (done / call
//! again / failed) and which function frees a connection. The attach code (agent/targets/)
//! consumes only what is here: adding a library is one file, its test, and a line in
//! LIBRARIES.
//!
//! The kernel side (bpf/handshake.bpf.h) has one entry program per role and one return
//! program per way of reading a return value ([`Outcome`]); a library whose return value
//! reads like one already there needs no kernel change.
use std::{
    collections::HashMap,
    fs::{self, File},
    io,
    os::unix::fs::MetadataExt as _,
    path::{Path, PathBuf},
};

use object::{Object, ObjectSegment, ObjectSymbol};
use thiserror::Error;

use super::files::{FileKey, Hooks, HooksFailure};

mod entry;
pub mod gnutls;
pub mod gotls;
pub mod mbedtls;
pub mod openssl;
pub mod wolfssl;

pub use openssl::HookMode;

/// Every library tlsprof times handshakes in.
pub const LIBRARIES: &[&Library] = &[
    &openssl::LIBRARY,
    &gnutls::LIBRARY,
    &mbedtls::LIBRARY,
    &wolfssl::LIBRARY,
    &gotls::LIBRARY,
];

/// A TLS library: where it lives and how to find its handshake in a file.
pub struct Library {
    /// The `library` it is called in logs ("openssl", "gnutls", …).
    pub name: &'static str,
    /// Shared-object names it ships as: "libgnutls.so" matches libgnutls.so,
    /// libgnutls.so.30 (it may also be linked into an executable, which is always looked at).
    pub files: &'static [&'static str],
    /// The symbols `find` looks up (read from .dynsym, then .symtab where not stripped;
    /// symbol versions such as `@@GNUTLS_3_4` ignored).
    pub symbols: &'static [&'static str],
    /// Its hooks in one file, None if the file does not hold it.
    pub find: fn(&Image, HookMode) -> Option<HandshakeHooks>,
}

/// The role a handshake call has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Server,
    Client,
    /// Either (gnutls_handshake): a call that reads or writes an accepted connection of a
    /// watched port is the server's, otherwise it stays `unknown`.
    Unknown,
}

/// How a handshake call's return value reads: one kernel return program each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// OpenSSL: 1 done, 0 failed, < 0 again or failed (the free probe tells which).
    OneDoneZeroFailed,
    /// 0 done, anything else again or failed (GnuTLS, mbedTLS).
    ZeroDone,
    /// 1 done, anything else again or failed (wolfSSL).
    OneDone,
}

/// What one probe does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Probe {
    /// A function that drives the handshake: timed from entry to return, on CPU only.
    Call(Role, Outcome),
    /// Sets a connection's role before its handshake (SSL_set_accept_state).
    SetRole(Role),
    /// Makes a connection object ready for a new connection (mbedtls_ssl_session_reset).
    Reset,
    /// Frees a connection object: a handshake unfinished there failed.
    Free,
    /// Go: the entry of a function that runs a whole handshake on its goroutine.
    GoCall(Role),
    /// Go: one of that function's return instructions (Go code takes no return probes).
    GoReturn,
}

impl Probe {
    /// The kernel programs that implement it (bpf/handshake.bpf.h), entry before return.
    pub fn programs(self) -> Vec<&'static str> {
        match self {
            Probe::Call(role, outcome) => vec![
                match role {
                    Role::Server => "hs_enter_server",
                    Role::Client => "hs_enter_client",
                    Role::Unknown => "hs_enter_any",
                },
                match outcome {
                    Outcome::OneDoneZeroFailed => "hs_exit",
                    Outcome::ZeroDone => "hs_exit_zero_ok",
                    Outcome::OneDone => "hs_exit_one_ok",
                },
            ],
            Probe::SetRole(Role::Server) => vec!["ssl_set_accept_state"],
            Probe::SetRole(Role::Client) => vec!["ssl_set_connect_state"],
            Probe::SetRole(Role::Unknown) | Probe::Reset => vec!["ssl_reset"],
            Probe::Free => vec!["ssl_free"],
            Probe::GoCall(Role::Client) => vec!["hs_go_enter_client"],
            Probe::GoCall(_) => vec!["hs_go_enter_server"],
            Probe::GoReturn => vec!["hs_go_return"],
        }
    }
}

/// How a handshake is observed in one file. All offsets are file offsets, as uprobes want.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HandshakeHooks {
    /// Library::name.
    pub library: &'static str,
    /// How they were found ("symbols", "statem-method-table", …): the `attached to` line.
    pub source: &'static str,
    pub probes: Vec<(Probe, u64)>,
    /// Some entry probe is single-stepped by the kernel (not on an instruction it
    /// emulates: entry.rs): its hits cost more (the calibration measures both kinds).
    pub stepped: bool,
}

impl HandshakeHooks {
    /// The probes to attach: (kernel program, file offset).
    pub fn plan(&self) -> Vec<(&'static str, u64)> {
        self.probes
            .iter()
            .flat_map(|(p, off)| p.programs().into_iter().map(move |prog| (prog, *off)))
            .collect()
    }
}

/// Hooks of a library found by its exported symbols alone: every `calls` symbol present is
/// hooked (at least one must be), and `free` must be there.
pub fn by_symbols(image: &Image, library: &'static str, calls: &[(&str, Probe)], free: &str) -> Option<HandshakeHooks> {
    let mut probes: Vec<(Probe, u64)> = calls
        .iter()
        .filter_map(|(sym, probe)| Some((*probe, image.sym_offset(sym)?)))
        .collect();
    if !probes.iter().any(|(p, _)| matches!(p, Probe::Call(..))) {
        return None;
    }
    probes.push((Probe::Free, image.sym_offset(free)?));
    Some(HandshakeHooks {
        library,
        source: "symbols",
        probes,
        stepped: true,
    })
}

/// A shared-object file name that is `lib` ("libssl.so" matches libssl.so, libssl.so.3,
/// not libssl3.so).
pub fn file_is(path: &str, lib: &str) -> bool {
    let base = super::basename(path);
    base.strip_prefix(lib)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('.'))
}

/// The library a shared-object file is, if tlsprof hooks it.
pub fn library_of_file(path: &str) -> Option<&'static Library> {
    LIBRARIES
        .iter()
        .copied()
        .find(|l| l.files.iter().any(|f| file_is(path, f)))
}

/// A file a process maps that may hold a TLS library, as a path the agent can open and the
/// kernel can resolve to the very file mapped (maps::MapEntry::open_path): so libraries in
/// containers' roots, in chroots and deleted or replaced on disk since are found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    /// Path as the process sees it (for logs and labels).
    pub path: String,
    /// Path the agent opens and attaches to.
    pub host_path: PathBuf,
    /// The file, as discovery/files.rs knows it.
    pub file: FileKey,
    /// Its (size, mtime): a file rewritten in place is analysed again.
    pub version: (u64, i64),
}

/// A TLS library file a process maps that the agent could not open: its name, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unreadable {
    pub path: String,
    pub error: String,
}

fn candidate(path: &str, host_path: PathBuf) -> io::Result<Candidate> {
    let md = fs::metadata(&host_path)?;
    Ok(Candidate {
        path: path.to_string(),
        host_path,
        file: FileKey::of(&md),
        version: (md.size(), md.mtime()),
    })
}

/// A mapped library as the agent can open it: through map_files; without the privilege
/// that needs, by its name from the process's root if that still leads to the same inode
/// (never another file at that name: its offsets would be another build's).
fn mapped_library(pid: u32, m: &super::maps::MapEntry, name: &str) -> Result<Candidate, Unreadable> {
    let by_map = m.open_path(pid);
    let error = match candidate(name, by_map.clone()) {
        Ok(c) => return Ok(c),
        Err(e) => format!("{}: {e}", by_map.display()),
    };
    let by_name = PathBuf::from(format!("/proc/{pid}/root{name}"));
    if !m.deleted() {
        if let Some(c) = candidate(name, by_name).ok().filter(|c| c.file.ino() == m.inode) {
            return Ok(c);
        }
    }
    Err(Unreadable {
        path: name.to_string(),
        error,
    })
}

/// The executable (a library may be linked into it, as OpenSSL is in node) and every
/// library file of LIBRARIES it maps; those it could not open apart.
pub fn candidates(pid: u32, maps: &str) -> (Vec<Candidate>, Vec<Unreadable>) {
    let (mut found, mut unreadable) = (Vec::new(), Vec::new());
    // /proc/PID/exe resolves to the executable even inside a container or after it was replaced.
    if let Ok(exe) = fs::read_link(format!("/proc/{pid}/exe")) {
        let exe = exe.to_string_lossy();
        let name = exe.strip_suffix(" (deleted)").unwrap_or(&exe);
        found.extend(candidate(name, PathBuf::from(format!("/proc/{pid}/exe"))).ok());
    }
    for m in super::maps::first_mappings(maps) {
        let Some(name) = m.name().filter(|n| library_of_file(n).is_some()) else {
            continue;
        };
        match mapped_library(pid, &m, name) {
            Ok(c) => found.push(c),
            Err(u) => unreadable.push(u),
        }
    }
    (found, unreadable)
}

#[derive(Debug, Error)]
pub enum ElfError {
    #[error("cannot open {path}: {source}")]
    Open { path: String, source: std::io::Error },
    #[error("{path} is not an ELF file we can read: {source}")]
    Parse { path: String, source: object::Error },
}

/// A parsed ELF file and the addresses of the symbols the libraries ask for.
pub struct Image<'d> {
    pub(super) file: object::File<'d>,
    data: &'d [u8],
    /// Wanted symbol -> (virtual address, size).
    syms: HashMap<&'static str, (u64, u64)>,
    /// They were read from a stripped Go executable's function table, not a symbol table.
    pub from_go_pclntab: bool,
}

impl<'d> Image<'d> {
    pub fn parse(data: &'d [u8]) -> Result<Self, object::Error> {
        let file = object::File::parse(data)?;
        let wanted: HashMap<&'static str, ()> = LIBRARIES
            .iter()
            .flat_map(|l| l.symbols.iter().map(|s| (*s, ())))
            .collect();
        let mut syms = HashMap::new();
        // .dynsym first (what the library exports), then .symtab where not stripped.
        for sym in file.dynamic_symbols().chain(file.symbols()) {
            if !sym.is_definition() || sym.address() == 0 {
                continue;
            }
            let Ok(name) = sym.name() else { continue };
            let name = name.split('@').next().unwrap_or(name);
            if let Some((w, ())) = wanted.get_key_value(name) {
                syms.entry(*w).or_insert((sym.address(), sym.size()));
            }
        }
        // A stripped Go executable still has its runtime's function table.
        let mut from_go_pclntab = false;
        if syms.is_empty() {
            for (start, end, name) in super::gopclntab::functions(&file).unwrap_or_default() {
                if let Some((w, ())) = wanted.get_key_value(name) {
                    syms.entry(*w).or_insert((start, end - start));
                }
            }
            from_go_pclntab = !syms.is_empty();
        }
        Ok(Self {
            file,
            data,
            syms,
            from_go_pclntab,
        })
    }

    /// Virtual address -> file offset, through the loadable segments.
    pub fn file_offset(&self, addr: u64) -> Option<u64> {
        self.file.segments().find_map(|seg| {
            let (off, size) = seg.file_range();
            let d = addr.checked_sub(seg.address()).filter(|d| *d < size)?;
            off.checked_add(d)
        })
    }

    pub fn bytes_at(&self, addr: u64, len: usize) -> Option<&'d [u8]> {
        let off = usize::try_from(self.file_offset(addr)?).ok()?;
        self.data.get(off..off.checked_add(len)?)
    }

    /// A wanted symbol's virtual address.
    pub fn sym_addr(&self, name: &str) -> Option<u64> {
        self.syms.get(name).map(|(addr, _)| *addr)
    }

    /// A wanted function's code: its virtual address and bytes (as long as its symbol says).
    pub fn sym_code(&self, name: &str) -> Option<(u64, &'d [u8])> {
        let (addr, size) = *self.syms.get(name)?;
        Some((addr, self.bytes_at(addr, usize::try_from(size).ok()?)?))
    }

    pub fn architecture(&self) -> object::Architecture {
        self.file.architecture()
    }

    /// A wanted symbol's file offset.
    pub fn sym_offset(&self, name: &str) -> Option<u64> {
        self.file_offset(self.sym_addr(name)?)
    }

    /// Every library's hooks in this file, each entry probe of a C library moved onto the
    /// first instruction the kernel emulates where that sees the same call (entry.rs).
    pub fn hooks(&self, mode: HookMode) -> Vec<HandshakeHooks> {
        let mut all: Vec<HandshakeHooks> = LIBRARIES.iter().filter_map(|l| (l.find)(self, mode)).collect();
        if self.architecture() == object::Architecture::X86_64 {
            for h in &mut all {
                h.stepped = false;
                for (probe, off) in &mut h.probes {
                    // Go's ABI and stack: its probes are left where they are
                    let go = matches!(probe, Probe::GoCall(_) | Probe::GoReturn);
                    let code = usize::try_from(*off)
                        .ok()
                        .and_then(|o| self.data.get(o..o.saturating_add(32).min(self.data.len())));
                    match code.filter(|_| !go).and_then(entry::emulated_entry) {
                        Some(skip) => *off += skip,
                        None => h.stepped = true,
                    }
                }
            }
        }
        all
    }
}

/// Where to hook handshakes in the ELF file at `path`: one entry per library it holds
/// (none when it holds none).
pub fn handshake_hooks(path: &Path, mode: HookMode) -> Result<Vec<HandshakeHooks>, ElfError> {
    let shown = path.display().to_string();
    let file = File::open(path).map_err(|source| ElfError::Open {
        path: shown.clone(),
        source,
    })?;
    // SAFETY: read-only private mapping; a file truncated under us could fault, which
    // is the same risk every ELF reader that maps libraries takes (and libraries are
    // replaced by rename, not rewritten in place).
    let map = unsafe { memmap2::Mmap::map(&file) }.map_err(|source| ElfError::Open {
        path: shown.clone(),
        source,
    })?;
    let image = Image::parse(&map).map_err(|source| ElfError::Parse { path: shown, source })?;
    Ok(image.hooks(mode))
}

/// A file's hooks as discovery/files.rs keeps them: the failure's kind and message.
pub fn read_hooks(path: &Path, mode: HookMode) -> Hooks {
    handshake_hooks(path, mode).map_err(|e| {
        let kind = match e {
            ElfError::Open { .. } => HooksFailure::Unreadable,
            ElfError::Parse { .. } => HooksFailure::Unparsable,
        };
        (kind, e.to_string())
    })
}

/// Test helper: the hooks found in an installed file, None when it is not installed.
#[cfg(test)]
pub fn installed(path: &str) -> Option<Vec<HandshakeHooks>> {
    if !Path::new(path).exists() {
        crate::testing::skipped(format!("{path} not installed"));
        return None;
    }
    Some(handshake_hooks(Path::new(path), HookMode::Auto).unwrap())
}

/// Test helper: the one library an installed file holds, as (library, source, the kernel
/// programs of its plan in order); None when the file is not installed.
#[cfg(test)]
pub fn installed_plan(path: &str) -> Option<(&'static str, &'static str, Vec<&'static str>)> {
    let found = installed(path)?;
    let [h] = found.as_slice() else {
        panic!("{path}: {found:?}")
    };
    Some((h.library, h.source, h.plan().into_iter().map(|(p, _)| p).collect()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_probe_has_its_programs_loaded() {
        let roles = [Role::Server, Role::Client, Role::Unknown];
        let outcomes = [Outcome::OneDoneZeroFailed, Outcome::ZeroDone, Outcome::OneDone];
        for r in roles {
            for o in outcomes {
                let p = Probe::Call(r, o).programs();
                assert_eq!(p.len(), 2);
                assert!(p[0].starts_with("hs_enter_") && p[1].starts_with("hs_exit"), "{p:?}");
                assert!(p.iter().all(|n| crate::bpf::uprobes::UPROBES.contains(n)), "{p:?}");
            }
            assert!(Probe::SetRole(r)
                .programs()
                .iter()
                .all(|n| crate::bpf::uprobes::UPROBES.contains(n)));
        }
        assert_eq!(
            Probe::Call(Role::Client, Outcome::ZeroDone).programs(),
            ["hs_enter_client", "hs_exit_zero_ok"]
        );
        assert_eq!(
            Probe::Call(Role::Server, Outcome::OneDone).programs(),
            ["hs_enter_server", "hs_exit_one_ok"]
        );
        assert_eq!(Probe::Free.programs(), ["ssl_free"]);
        assert_eq!(Probe::Reset.programs(), ["ssl_reset"]);
    }

    #[test]
    fn library_file_names() {
        let lib = |p| library_of_file(p).map(|l| l.name);
        assert_eq!(lib("/usr/lib/x86_64-linux-gnu/libssl.so.3"), Some("openssl"));
        assert_eq!(lib("/usr/lib/x86_64-linux-gnu/libgnutls.so.30"), Some("gnutls"));
        assert_eq!(lib("/usr/lib/x86_64-linux-gnu/libmbedtls.so.14"), Some("mbedtls"));
        assert_eq!(lib("/usr/lib/x86_64-linux-gnu/libwolfssl.so.35.3.0"), Some("wolfssl"));
        assert_eq!(lib("/usr/lib/x86_64-linux-gnu/libssl3.so"), None); // NSS: no entry point
        assert_eq!(lib("/usr/lib/x86_64-linux-gnu/libgnutls-dane.so.0"), None);
        assert_eq!(lib("/usr/lib/libssl.so.3/other"), None);
    }

    #[test]
    fn files_without_a_library_have_no_hooks() {
        assert_eq!(handshake_hooks(Path::new("/bin/sh"), HookMode::Auto).unwrap(), vec![]);
        assert!(handshake_hooks(Path::new("/etc/hostname"), HookMode::Auto).is_err());
        assert!(handshake_hooks(Path::new("/nonexistent"), HookMode::Auto).is_err());
    }
}
