//! What tlsprof knows of one ELF file: whether (and where) it is TLS code, its functions'
//! crypto primitives and names, and whether an address follows a call instruction.
//!
//! A file is TLS code as a whole when it is a TLS or crypto library by name (libssl,
//! libcrypto, libgnutls, libnettle, libmbedtls, …); in an executable, TLS code is found by
//! symbols: OpenSSL or mbed TLS linked in (the span of their functions, as in node) or Go's
//! crypto packages. Function names come from .symtab, else from a debug file found by build
//! id, else only from .dynsym — where an address falls in no symbol's extent it has no name:
//! nothing is guessed from the nearest symbol.
use std::{
    fs::File,
    path::{Path, PathBuf},
};

use object::{Object, ObjectSegment, ObjectSymbol, SymbolKind};

use super::prim::{classify_name, Prim};
use crate::discovery::stacks::{basename, is_tls_code_library, stack_of_library};

/// Where a file's function names come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SymbolSource {
    /// .symtab of the file itself.
    Full,
    /// .symtab of a separate debug file (found by build id).
    DebugFile,
    /// A stripped Go executable's own function table (.gopclntab).
    GoPclntab,
    /// Only the exported .dynsym (internal functions have no names).
    Exported,
    None,
}

impl SymbolSource {
    pub fn label(self) -> &'static str {
        match self {
            SymbolSource::Full => "full",
            SymbolSource::DebugFile => "debug_file",
            SymbolSource::GoPclntab => "go_pclntab",
            SymbolSource::Exported => "exported_only",
            SymbolSource::None => "none",
        }
    }
}

#[derive(Debug, Clone)]
struct Func {
    start: u64,
    end: u64,
    prim: Prim,
    /// Index into FileSyms::names (flame graphs only).
    name: u32,
}

/// What tlsprof knows of one ELF file.
pub struct FileSyms {
    pub base: String,
    /// The TLS stack this file is or carries ("openssl", "gnutls", "go", …).
    pub stack: Option<&'static str>,
    /// All of the file's code is TLS code (a TLS or crypto library).
    whole: bool,
    /// Else: the TLS code's address ranges (virtual addresses of the file).
    ranges: Vec<(u64, u64)>,
    pub symbols: SymbolSource,
    /// Functions by start address: TLS code only, or all of them when names are kept.
    funcs: Vec<Func>,
    names: Vec<String>,
    /// Loadable segments: (file offset, virtual address, file size).
    segs: Vec<(u64, u64, u64)>,
    /// The file's bytes, for checking return addresses (every file, TLS or not).
    data: memmap2::Mmap,
}

/// OpenSSL (and mbed TLS) function names: the span they cover in an executable is TLS code.
fn openssl_anchor(name: &str) -> bool {
    const PREFIXES: &[&str] = &[
        "SSL_",
        "ssl_",
        "ssl3_",
        "tls1_",
        "tls13_",
        "dtls1_",
        "ossl_",
        "OSSL_",
        "OPENSSL_",
        "EVP_",
        "evp_",
        "BN_",
        "bn_",
        "EC_",
        "ec_",
        "ecp_",
        "RSA_",
        "rsa_",
        "X509",
        "x509",
        "ASN1_",
        "asn1_",
        "CRYPTO_",
        "ERR_",
        "BIO_",
        "PEM_",
        "OBJ_",
        "aesni_",
        "AES_",
        "sha1_",
        "sha256_",
        "sha512_",
        "SHA1",
        "SHA256",
        "SHA512",
        "ChaCha20_",
        "Poly1305_",
        "x25519_",
        "gcm_",
        "HMAC",
        "RAND_",
        "ECDSA_",
        "ECDH_",
        "PKCS",
        "i2d_",
        "d2i_",
        "mbedtls_",
    ];
    PREFIXES.iter().any(|p| name.starts_with(p))
}

/// Go's TLS and crypto packages.
fn go_crypto(name: &str) -> bool {
    name.starts_with("crypto/")
        || name.starts_with("vendor/golang.org/x/crypto/")
        || name.starts_with("golang.org/x/crypto/")
}

/// The spans of OpenSSL-named functions in an address-sorted function list: runs of
/// anchors with at most `GAP` other functions between two of them, kept when they hold
/// enough anchors to be a linked-in library rather than a few wrappers.
fn anchor_spans(funcs: &[(u64, u64, bool)]) -> Vec<(u64, u64)> {
    const GAP: usize = 400;
    const MIN_ANCHORS: usize = 200;
    let mut out = Vec::new();
    let mut run: Option<(usize, usize, usize)> = None; // (first, last, anchors)
    for (i, f) in funcs.iter().enumerate() {
        if !f.2 {
            continue;
        }
        run = match run {
            Some((first, last, n)) if i - last <= GAP => Some((first, i, n + 1)),
            Some((first, last, n)) => {
                if n >= MIN_ANCHORS {
                    out.push((funcs[first].0, funcs[last].1));
                }
                Some((i, i, 1))
            }
            None => Some((i, i, 1)),
        };
    }
    if let Some((first, last, n)) = run {
        if n >= MIN_ANCHORS {
            out.push((funcs[first].0, funcs[last].1));
        }
    }
    out
}

fn text_symbols<'d>(file: &object::File<'d>, dynamic: bool) -> Vec<(u64, u64, &'d str)> {
    let syms: Box<dyn Iterator<Item = object::Symbol<'d, '_>>> = if dynamic {
        Box::new(file.dynamic_symbols())
    } else {
        Box::new(file.symbols())
    };
    let mut out: Vec<(u64, u64, &str)> = syms
        .filter(|s| s.kind() == SymbolKind::Text && s.is_definition() && s.address() != 0 && s.size() > 0)
        .filter_map(|s| Some((s.address(), s.address().checked_add(s.size())?, s.name().ok()?)))
        .map(|(a, e, n)| (a, e, n.split('@').next().unwrap_or(n)))
        .collect();
    out.sort_unstable_by_key(|f| (f.0, std::cmp::Reverse(f.1)));
    out.dedup_by_key(|f| f.0);
    out
}

fn debug_file(build_id: &[u8], dirs: &[PathBuf]) -> Option<PathBuf> {
    let hex: String = build_id.iter().map(|b| format!("{b:02x}")).collect();
    if hex.len() < 3 {
        return None;
    }
    dirs.iter()
        .map(|d| d.join(".build-id").join(&hex[..2]).join(format!("{}.debug", &hex[2..])))
        .find(|p| p.is_file())
}

impl FileSyms {
    /// Reads `host_path` (the file as the agent can open it); `path` is the name the process
    /// maps it under. `keep_names`: keep every function's name (flame graphs), not just what
    /// TLS attribution needs.
    pub fn load(path: &str, host_path: &Path, debug_dirs: &[PathBuf], keep_names: bool) -> Option<FileSyms> {
        let f = File::open(host_path).ok()?;
        // SAFETY: read-only private mapping of a file; a concurrent truncation could fault,
        // as for every profiler that reads binaries in place.
        let data = unsafe { memmap2::Mmap::map(&f) }.ok()?;
        let file = object::File::parse(&*data).ok()?;
        let segs: Vec<(u64, u64, u64)> = file
            .segments()
            .map(|s| {
                let (off, size) = s.file_range();
                (off, s.address(), size)
            })
            .collect();
        let whole = is_tls_code_library(path);
        let mut stack = stack_of_library(path);

        // Names: the file's .symtab, a debug file's, or the exports.
        let debug_data;
        let debug_parsed;
        let mut symbols = SymbolSource::Full;
        let mut syms = text_symbols(&file, false);
        if syms.is_empty() {
            let found = file
                .build_id()
                .ok()
                .flatten()
                .and_then(|id| debug_file(id, debug_dirs))
                .and_then(|p| File::open(p).ok())
                // SAFETY: as above.
                .and_then(|f| unsafe { memmap2::Mmap::map(&f) }.ok());
            debug_data = found;
            debug_parsed = debug_data.as_deref().and_then(|d| object::File::parse(d).ok());
            if let Some(dbg) = &debug_parsed {
                syms = text_symbols(dbg, false);
                symbols = SymbolSource::DebugFile;
            }
            if syms.is_empty() {
                if let Some(go) = crate::discovery::gopclntab::functions(&file) {
                    syms = go;
                    symbols = SymbolSource::GoPclntab;
                }
            }
            if syms.is_empty() {
                syms = text_symbols(&file, true);
                symbols = if syms.is_empty() {
                    SymbolSource::None
                } else {
                    SymbolSource::Exported
                };
            }
        }

        let mut ranges = Vec::new();
        if !whole {
            let anchors: Vec<(u64, u64, bool)> = syms.iter().map(|s| (s.0, s.1, openssl_anchor(s.2))).collect();
            let spans = anchor_spans(&anchors);
            if !spans.is_empty() {
                stack = Some(if syms.iter().any(|s| s.2.starts_with("mbedtls_ssl_")) {
                    "mbedtls"
                } else {
                    "openssl"
                });
            }
            ranges.extend(spans);
            let before = ranges.len();
            ranges.extend(syms.iter().filter(|s| go_crypto(s.2)).map(|s| (s.0, s.1)));
            if ranges.len() > before && syms.iter().any(|s| s.2.starts_with("crypto/tls.")) {
                stack = Some("go");
            }
            ranges.sort_unstable();
            // merge touching ranges
            let mut merged: Vec<(u64, u64)> = Vec::with_capacity(ranges.len());
            for r in ranges {
                match merged.last_mut() {
                    Some(last) if r.0 <= last.1 => last.1 = last.1.max(r.1),
                    _ => merged.push(r),
                }
            }
            ranges = merged;
        }
        let in_ranges = |a: u64| {
            let i = ranges.partition_point(|r| r.0 <= a);
            i > 0 && a < ranges[i - 1].1
        };
        let mut names = Vec::new();
        let mut funcs = Vec::new();
        for (start, end, name) in syms {
            let tls = whole || in_ranges(start);
            if !tls && !keep_names {
                continue;
            }
            let idx = if keep_names {
                names.push(name.to_string());
                (names.len() - 1) as u32
            } else {
                u32::MAX
            };
            funcs.push(Func {
                start,
                end,
                prim: if tls { classify_name(name) } else { Prim::None },
                name: idx,
            });
        }
        // The symbols are read: the pages that took are given back (the file stays mapped for
        // the return addresses, a page read again where one is checked).
        // SAFETY: a shared read-only mapping of a file: a page dropped is read again from it.
        let _ = unsafe { data.unchecked_advise(memmap2::UncheckedAdvice::DontNeed) };
        Some(FileSyms {
            base: basename(path).to_string(),
            stack,
            whole,
            ranges,
            symbols,
            funcs,
            names,
            segs,
            data,
        })
    }

    /// File offset -> virtual address.
    pub fn vaddr(&self, off: u64) -> Option<u64> {
        self.segs
            .iter()
            .find(|&&(o, _, size)| off.checked_sub(o).is_some_and(|d| d < size))
            .and_then(|&(o, v, _)| v.checked_add(off - o))
    }

    pub fn is_tls(&self, vaddr: u64) -> bool {
        if self.whole {
            return true;
        }
        let i = self.ranges.partition_point(|r| r.0 <= vaddr);
        i > 0 && vaddr < self.ranges[i - 1].1
    }

    pub fn has_tls_code(&self) -> bool {
        self.whole || !self.ranges.is_empty()
    }

    fn func(&self, vaddr: u64) -> Option<&Func> {
        let i = self.funcs.partition_point(|f| f.start <= vaddr);
        let f = self.funcs.get(i.checked_sub(1)?)?;
        (vaddr < f.end).then_some(f)
    }

    /// The primitive at a TLS-code address (`Prim::None` outside TLS code).
    pub fn prim(&self, vaddr: u64) -> Prim {
        if !self.is_tls(vaddr) {
            return Prim::None;
        }
        match self.func(vaddr) {
            Some(f) if f.prim != Prim::None => f.prim,
            _ => match self.symbols {
                SymbolSource::Full | SymbolSource::DebugFile => Prim::Other,
                _ => Prim::NoSymbols,
            },
        }
    }

    /// The function name at an address, if the file names it.
    pub fn name(&self, vaddr: u64) -> Option<&str> {
        let f = self.func(vaddr)?;
        self.names.get(f.name as usize).map(String::as_str)
    }

    /// Whether `vaddr` follows a call instruction: a frame-pointer walk through code built
    /// without frame pointers yields values that are not return addresses, and the stack
    /// is cut there.
    pub fn follows_call(&self, vaddr: u64) -> bool {
        let Some(off) = self
            .segs
            .iter()
            .find(|&&(_, v, size)| vaddr.checked_sub(v).is_some_and(|d| d < size))
            .and_then(|&(o, v, _)| o.checked_add(vaddr - v))
        else {
            return false;
        };
        follows_call(&self.data, off as usize)
    }
}

/// x86-64: does the instruction ending at `off` call? `call rel32` (E8), or `call r/m64`
/// (FF /2) in any addressing form, whose length is checked against its ModRM/SIB bytes.
pub fn follows_call(code: &[u8], off: usize) -> bool {
    if off >= 5 && off <= code.len() && code[off - 5] == 0xE8 {
        return true;
    }
    for k in 2..=7usize {
        if off < k || off > code.len() || code[off - k] != 0xFF {
            continue;
        }
        let modrm = code[off - k + 1];
        let (md, reg, rm) = (modrm >> 6, (modrm >> 3) & 7, modrm & 7);
        if reg != 2 {
            continue;
        }
        let mut len = 2;
        if md != 3 && rm == 4 {
            len += 1; // SIB
            if md == 0 && off - k + 2 < code.len() && code[off - k + 2] & 7 == 5 {
                len += 4;
            }
        }
        len += match (md, rm) {
            (0, 5) => 4,
            (1, _) => 1,
            (2, _) => 4,
            _ => 0,
        };
        if len == k {
            return true;
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn call_instructions() {
        // call rel32; call *%rax; call *0x10(%rbx); call *0x1234(%rip); call *(%rax,%rbx,8)
        let cases: [(&[u8], bool); 7] = [
            (&[0x90, 0xE8, 1, 2, 3, 4], true),
            (&[0x90, 0xFF, 0xD0], true),
            (&[0x41, 0xFF, 0xD3], true),
            (&[0xFF, 0x53, 0x10], true),
            (&[0xFF, 0x15, 0x34, 0x12, 0, 0], true),
            (&[0xFF, 0x14, 0xD8], true),
            (&[0x48, 0x89, 0xE5, 0x90, 0x90, 0x90], false),
        ];
        for (code, want) in cases {
            assert_eq!(follows_call(code, code.len()), want, "{code:02x?}");
        }
        assert!(!follows_call(&[0xFF, 0xE0], 2), "jmp *%rax is not a call");
    }

    /// Found by fuzz::elf_files (overflow-checked builds): a segment at the top of the
    /// address space, or at a file offset there, overflowed `offset + size` and
    /// `vaddr - start + offset` (a panic; in release builds a wrapped, wrong address).
    #[test]
    fn segments_at_the_top_of_the_address_space() {
        use crate::discovery::elf_fuzz::{elf_with_segment, Scratch};
        let dir = Scratch::new("elf-top");
        let path = dir.0.join("top");
        std::fs::write(&path, elf_with_segment(0, u64::MAX, 0x10)).unwrap();
        let f = FileSyms::load("/top", &path, &[], false).unwrap();
        assert_eq!(f.vaddr(0), Some(u64::MAX));
        assert_eq!(f.vaddr(1), None, "past the address space");
        std::fs::write(&path, elf_with_segment(u64::MAX - 0x0f, u64::MAX - 0x0f, 0x10)).unwrap();
        let f = FileSyms::load("/top", &path, &[], false).unwrap();
        assert_eq!(f.vaddr(u64::MAX), Some(u64::MAX));
        assert!(!f.follows_call(u64::MAX), "its file offset is past the file");
        std::fs::write(&path, elf_with_segment(u64::MAX, 0x1000, 0x10)).unwrap();
        let f = FileSyms::load("/top", &path, &[], false).unwrap();
        assert_eq!(f.vaddr(u64::MAX), Some(0x1000), "offset + size overflows");
        assert!(!f.follows_call(0x1005), "offset + (vaddr - start) overflows");
    }

    #[test]
    fn node_carries_openssl_with_names() {
        let node = Path::new("/usr/bin/node");
        if !node.exists() {
            return;
        }
        let f = FileSyms::load("/usr/bin/node", node, &[], false).unwrap();
        assert_eq!(f.stack, Some("openssl"));
        assert_eq!(f.symbols, SymbolSource::Full);
        let file = std::fs::read(node).unwrap();
        let obj = object::File::parse(&*file).unwrap();
        let addr = |n: &str| obj.symbols().find(|s| s.name() == Ok(n)).unwrap().address();
        assert_eq!(f.prim(addr("aesni_gcm_encrypt") + 4), Prim::AesGcm);
        assert_eq!(f.prim(addr("ossl_statem_accept") + 4), Prim::Other);
        assert_eq!(f.prim(addr("ecp_nistz256_mul_mont") + 4), Prim::Ec);
        assert_eq!(f.prim(addr("main") + 4), Prim::None, "node's own code is not TLS code");
    }
}
