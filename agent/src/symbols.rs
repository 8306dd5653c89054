//! From sampled addresses to code: is it TLS library code, which crypto primitive, is it
//! kernel networking, and names for flame graphs.
//!
//! User space: each executable mapping of a process is read from its ELF file (through
//! /proc/PID/map_files, so containers and replaced files work). A file is TLS code as a
//! whole when it is a TLS or crypto library by name (libssl, libcrypto, libgnutls,
//! libnettle, libmbedtls, …); in an executable, TLS code is found by symbols: OpenSSL or
//! mbed TLS linked in (the span of their functions, as in node) or Go's crypto packages.
//! Function names come from .symtab, else from a debug file found by build id, else only
//! from .dynsym — where an address falls in no symbol's extent it has no name: nothing is
//! guessed from the nearest symbol.
//!
//! Kernel: /proc/kallsyms, each function classed once (networking, kernel TLS, tlsprof's own
//! probes, other).
use std::{
    collections::HashMap,
    fs::File,
    path::{Path, PathBuf},
    sync::Arc,
};

use object::{Object, ObjectSegment, ObjectSymbol, SymbolKind};

/// What a TLS-code address is doing. `None`: not TLS code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Prim {
    None,
    /// TLS code, but no primitive below: record layer, state machine, ASN.1, buffers.
    Other,
    Rsa,
    Ecdsa,
    Ecdh,
    X25519,
    /// Elliptic-curve arithmetic not (yet) tied to ECDSA or ECDH.
    Ec,
    /// Big-number arithmetic not tied to RSA or EC.
    Bignum,
    AesGcm,
    /// AES in other modes (CBC, CTR) and key schedules.
    Aes,
    Chacha20Poly1305,
    ShaHmac,
    /// TLS code in a file without function names: the primitive is not known.
    NoSymbols,
}

impl Prim {
    pub fn label(self) -> &'static str {
        match self {
            Prim::None => "none",
            Prim::Other => "other",
            Prim::Rsa => "rsa",
            Prim::Ecdsa => "ecdsa",
            Prim::Ecdh => "ecdh",
            Prim::X25519 => "x25519",
            Prim::Ec => "ec_arith",
            Prim::Bignum => "bignum",
            Prim::AesGcm => "aes_gcm",
            Prim::Aes => "aes_other",
            Prim::Chacha20Poly1305 => "chacha20_poly1305",
            Prim::ShaHmac => "sha_hmac",
            Prim::NoSymbols => "no_symbols",
        }
    }

    /// A leaf this generic is attributed to the nearest specific caller, if any.
    pub fn generic(self) -> bool {
        matches!(self, Prim::Other | Prim::Ec | Prim::Bignum)
    }
}

/// The primitive a TLS-code function's name says it implements (OpenSSL, BoringSSL,
/// GnuTLS/nettle, mbed TLS, Go and Linux crypto names).
pub fn classify_name(name: &str) -> Prim {
    let n = name.to_ascii_lowercase();
    let has = |pats: &[&str]| pats.iter().any(|p| n.contains(p));
    if has(&["chacha", "poly1305"]) {
        Prim::Chacha20Poly1305
    } else if has(&["gcm", "ghash", "gmult"]) {
        Prim::AesGcm
    } else if has(&["x25519", "curve25519", "fe51_", "fe64_", "edwards25519"]) {
        Prim::X25519
    } else if has(&["ecdsa"]) {
        Prim::Ecdsa
    } else if has(&["ecdh", "x448", "ecx_"]) {
        Prim::Ecdh
    } else if n.starts_with("rsa") || has(&["_rsa", "/rsa", ".rsa", "rsa_", "rsaz"]) {
        Prim::Rsa
    } else if has(&[
        "sha1", "sha256", "sha512", "sha3", "keccak", "hmac", "sha2", "/sha", "md5", "hkdf",
    ]) {
        Prim::ShaHmac
    } else if n.starts_with("bn_")
        || n.starts_with("bn.")
        || has(&["_bn_", "bignum", "bigmod", "mpi_", "mpn_", "gmpn", "math/big"])
    {
        Prim::Bignum
    } else if n.starts_with("ec_")
        || n.starts_with("ecp_")
        || has(&[
            "_ec_",
            "ec_gfp",
            "ec_point",
            "ec_scalar",
            "nistz256",
            "nistec",
            "p256",
            "p384",
            "p521",
            "felem",
            "ecc_",
            "ec_wnaf",
            "/ecc",
            "ecp_",
        ])
    {
        Prim::Ec
    } else if has(&["aes", "rijndael"]) {
        Prim::Aes
    } else {
        Prim::Other
    }
}

/// Library file names that are TLS protocol stacks (a process mapping one has TLS).
const TLS_STACKS: &[(&str, &str)] = &[
    ("libssl.so", "openssl"),
    ("libgnutls.so", "gnutls"),
    ("libmbedtls.so", "mbedtls"),
    ("libwolfssl.so", "wolfssl"),
    ("libssl3.so", "nss"),
    ("libnss3.so", "nss"),
    ("libs2n.so", "s2n"),
    ("libtls.so", "libressl"),
    ("libboringssl.so", "boringssl"),
    ("libbotan", "botan"),
];

/// Libraries that are TLS code as a whole: the stacks and the crypto they build on.
const TLS_CODE: &[&str] = &[
    "libcrypto.so",
    "libnettle.so",
    "libhogweed.so",
    "libgmp.so",
    "libmbedcrypto.so",
    "libmbedx509.so",
    "libgcrypt.so",
    "libfreebl3.so",
    "libfreeblpriv3.so",
    "libsoftokn3.so",
    "libsmime3.so",
];

fn basename(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

fn lib_matches(base: &str, lib: &str) -> bool {
    if lib.ends_with(".so") {
        base == lib || base.strip_prefix(lib).is_some_and(|rest| rest.starts_with('.'))
    } else {
        base.starts_with(lib)
    }
}

/// The TLS stack a library file name is, if any.
pub fn stack_of_library(path: &str) -> Option<&'static str> {
    let base = basename(path);
    TLS_STACKS
        .iter()
        .find(|(lib, _)| lib_matches(base, lib))
        .map(|(_, s)| *s)
}

fn is_tls_code_library(path: &str) -> bool {
    let base = basename(path);
    stack_of_library(path).is_some() || TLS_CODE.iter().any(|lib| lib_matches(base, lib))
}

/// Where a file's function names come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SymbolSource {
    /// .symtab of the file itself.
    Full,
    /// .symtab of a separate debug file (found by build id).
    DebugFile,
    /// Only the exported .dynsym (internal functions have no names).
    Exported,
    None,
}

impl SymbolSource {
    pub fn label(self) -> &'static str {
        match self {
            SymbolSource::Full => "full",
            SymbolSource::DebugFile => "debug_file",
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
        .filter_map(|s| Some((s.address(), s.address() + s.size(), s.name().ok()?)))
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
            .find(|(o, _, size)| off >= *o && off < o + size)
            .map(|(o, v, _)| off - o + v)
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
            .find(|(_, v, size)| vaddr >= *v && vaddr < v + size)
            .map(|(o, v, _)| vaddr - v + o)
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

/// Kernel function classes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KClass {
    Other,
    Net,
    /// Kernel TLS (the tls module).
    Ktls,
    /// uprobe traps and BPF programs: what tlsprof itself costs.
    Probe,
}

const NET_PREFIXES: &[&str] = &[
    "tcp",
    "__tcp",
    "inet",
    "__inet",
    "ip_",
    "ip6",
    "__ip",
    "ipv4",
    "ipv6",
    "udp",
    "__udp",
    "raw_",
    "sock_",
    "__sock",
    "sk_",
    "__sk_",
    "skb_",
    "__skb",
    "kfree_skb",
    "consume_skb",
    "alloc_skb",
    "__alloc_skb",
    "__sys_accept",
    "__sys_send",
    "__sys_recv",
    "__sys_connect",
    "__sys_shutdown",
    "__sys_socket",
    "__sys_bind",
    "__sys_listen",
    "__sys_setsockopt",
    "__sys_getsockopt",
    "__sys_getsockname",
    "__sys_getpeername",
    "do_accept",
    "move_addr_to",
    "ep_",
    "do_epoll",
    "__x64_sys_epoll",
    "__do_sys_epoll",
    "__se_sys_epoll",
    "net_",
    "__net",
    "netif_",
    "__netif",
    "napi_",
    "__napi",
    "dev_queue_xmit",
    "__dev_queue_xmit",
    "dev_hard_start_xmit",
    "loopback_xmit",
    "process_backlog",
    "validate_xmit",
    "nf_",
    "__nf_",
    "nft_",
    "ipt_",
    "unix_",
    "security_socket",
    "security_sock",
    "lock_sock",
    "release_sock",
    "__release_sock",
    "__lock_sock",
    "sockfd_",
    "__x64_sys_accept",
    "__x64_sys_send",
    "__x64_sys_recv",
    "__x64_sys_connect",
    "__x64_sys_shutdown",
    "__x64_sys_socket",
    "__x64_sys_setsockopt",
    "__x64_sys_getsockopt",
    "__x64_sys_listen",
    "__x64_sys_bind",
];

pub fn kernel_class(name: &str, module: Option<&str>) -> KClass {
    if module == Some("tls") {
        return KClass::Ktls;
    }
    if module == Some("bpf")
        || name.contains("uprobe")
        || name.starts_with("handle_swbp")
        || name.starts_with("bpf_prog_")
        || name.starts_with("bpf_trace_run")
        || name.starts_with("__bpf_trace_run")
        || name.starts_with("__bpf_prog_run")
    {
        return KClass::Probe;
    }
    if NET_PREFIXES.iter().any(|p| name.starts_with(p)) {
        return KClass::Net;
    }
    KClass::Other
}

/// /proc/kallsyms, sorted, each function classed.
pub struct Kallsyms {
    addrs: Vec<u64>,
    class: Vec<KClass>,
    prim: Vec<Prim>,
    names: Vec<String>,
}

impl Kallsyms {
    pub fn load(keep_names: bool) -> Option<Kallsyms> {
        let text = std::fs::read_to_string("/proc/kallsyms").ok()?;
        Self::parse(&text, keep_names)
    }

    pub fn parse(text: &str, keep_names: bool) -> Option<Kallsyms> {
        let mut all: Vec<(u64, KClass, Prim, String)> = text
            .lines()
            .filter_map(|l| {
                let mut it = l.split_whitespace();
                let addr = u64::from_str_radix(it.next()?, 16).ok()?;
                let kind = it.next()?;
                let name = it.next()?;
                let module = it.next().map(|m| m.trim_matches(|c| c == '[' || c == ']'));
                if addr == 0 || !matches!(kind, "T" | "t" | "W" | "w") {
                    return None;
                }
                let class = kernel_class(name, module);
                let prim = if class == KClass::Ktls || module == Some("tls") {
                    Prim::Other
                } else {
                    classify_name(name)
                };
                Some((
                    addr,
                    class,
                    prim,
                    if keep_names { name.to_string() } else { String::new() },
                ))
            })
            .collect();
        if all.is_empty() {
            return None; // kptr_restrict: addresses hidden
        }
        all.sort_unstable_by_key(|s| s.0);
        Some(Kallsyms {
            addrs: all.iter().map(|s| s.0).collect(),
            class: all.iter().map(|s| s.1).collect(),
            prim: all.iter().map(|s| s.2).collect(),
            names: if keep_names {
                all.into_iter().map(|s| s.3).collect()
            } else {
                Vec::new()
            },
        })
    }

    fn index(&self, addr: u64) -> Option<usize> {
        self.addrs.partition_point(|a| *a <= addr).checked_sub(1)
    }

    pub fn class(&self, addr: u64) -> KClass {
        self.index(addr).map_or(KClass::Other, |i| self.class[i])
    }

    /// The crypto primitive a kernel function's name says (aesni_gcm_*, chacha20_*, …).
    pub fn prim(&self, addr: u64) -> Prim {
        self.index(addr).map_or(Prim::Other, |i| self.prim[i])
    }

    pub fn name(&self, addr: u64) -> Option<&str> {
        self.index(addr).and_then(|i| self.names.get(i)).map(String::as_str)
    }
}

/// One executable mapping of a process.
#[derive(Clone)]
pub struct Mapping {
    pub start: u64,
    pub end: u64,
    pub offset: u64,
    /// None: anonymous executable memory (JIT code) or a file that could not be read.
    pub file: Option<Arc<FileSyms>>,
    pub anon: bool,
}

/// Files read so far, by (device, inode) as /proc/PID/maps names them.
pub struct FileCache {
    files: HashMap<(String, u64), Option<Arc<FileSyms>>>,
    debug_dirs: Vec<PathBuf>,
    keep_names: bool,
}

impl FileCache {
    pub fn new(debug_dirs: Vec<PathBuf>, keep_names: bool) -> Self {
        Self {
            files: HashMap::new(),
            debug_dirs,
            keep_names,
        }
    }

    /// The executable mappings of a process.
    pub fn mappings(&mut self, pid: u32) -> std::io::Result<Vec<Mapping>> {
        let text = std::fs::read_to_string(format!("/proc/{pid}/maps"))?;
        let mut out = Vec::new();
        for line in text.lines() {
            let mut it = line.splitn(6, char::is_whitespace);
            let (Some(range), Some(perms), Some(off), Some(dev), Some(inode)) =
                (it.next(), it.next(), it.next(), it.next(), it.next())
            else {
                continue;
            };
            if perms.as_bytes().get(2) != Some(&b'x') {
                continue;
            }
            let path = it.next().unwrap_or("").trim_start();
            let Some((s, e)) = range.split_once('-') else { continue };
            let (Ok(start), Ok(end), Ok(offset), Ok(inode)) = (
                u64::from_str_radix(s, 16),
                u64::from_str_radix(e, 16),
                u64::from_str_radix(off, 16),
                inode.parse::<u64>(),
            ) else {
                continue;
            };
            if inode == 0 || !path.starts_with('/') {
                // [vdso], JIT code, anonymous memory
                out.push(Mapping {
                    start,
                    end,
                    offset,
                    file: None,
                    anon: path.is_empty(),
                });
                continue;
            }
            let key = (dev.to_string(), inode);
            let keep = self.keep_names;
            let dirs = &self.debug_dirs;
            let file = self
                .files
                .entry(key)
                .or_insert_with(|| {
                    // map_files names are unpadded hex, where maps pads to 8 digits
                    let host = PathBuf::from(format!("/proc/{pid}/map_files/{start:x}-{end:x}"));
                    let clean = path.trim_end_matches(" (deleted)");
                    FileSyms::load(clean, &host, dirs, keep).map(Arc::new)
                })
                .clone();
            out.push(Mapping {
                start,
                end,
                offset,
                file,
                anon: false,
            });
        }
        out.sort_unstable_by_key(|m| m.start);
        Ok(out)
    }

    /// Drops files no process maps any more (those only the cache holds).
    pub fn trim(&mut self) {
        self.files
            .retain(|_, f| f.as_ref().is_none_or(|f| Arc::strong_count(f) > 1));
    }
}

/// Which TLS stack each executable carries, by (device, inode), so that a process is
/// examined without re-reading its executable's symbols.
#[derive(Default)]
pub struct StackMemo(HashMap<(u64, u64), Option<&'static str>>);

/// The TLS stack a process carries: a TLS library it maps (by name), else TLS code linked
/// into its executable (OpenSSL or mbed TLS found by symbols, Go's crypto/tls).
pub fn process_tls_stack(pid: u32, memo: &mut StackMemo) -> Option<&'static str> {
    use std::os::unix::fs::MetadataExt as _;
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).ok()?;
    if let Some(s) = crate::discovery::parse_maps(&maps)
        .iter()
        .find_map(|p| stack_of_library(p))
    {
        return Some(s);
    }
    let exe = format!("/proc/{pid}/exe");
    let md = std::fs::metadata(&exe).ok()?;
    *memo.0.entry((md.dev(), md.ino())).or_insert_with(|| {
        let path = std::fs::read_link(&exe).ok()?;
        FileSyms::load(&path.to_string_lossy(), Path::new(&exe), &[], false)?.stack
    })
}

/// The mapping holding an address.
pub fn find(maps: &[Mapping], addr: u64) -> Option<&Mapping> {
    let i = maps.partition_point(|m| m.start <= addr);
    let m = maps.get(i.checked_sub(1)?)?;
    (addr < m.end).then_some(m)
}

impl Mapping {
    /// The file's virtual address for a process address.
    pub fn vaddr(&self, addr: u64) -> Option<u64> {
        self.file.as_ref()?.vaddr(addr - self.start + self.offset)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn primitive_names() {
        let cases = [
            ("aesni_gcm_encrypt", Prim::AesGcm),
            ("gcm_ghash_avx", Prim::AesGcm),
            ("ChaCha20_ctr32", Prim::Chacha20Poly1305),
            ("Poly1305_blocks", Prim::Chacha20Poly1305),
            ("x25519_fe51_mul", Prim::X25519),
            ("ossl_ecdsa_sign", Prim::Ecdsa),
            ("ossl_ecdh_compute_key", Prim::Ecdh),
            ("ecp_nistz256_mul_mont", Prim::Ec),
            ("rsa_ossl_private_encrypt", Prim::Rsa),
            ("RSA_sign", Prim::Rsa),
            ("rsaz_1024_mul_avx2", Prim::Rsa),
            ("bn_mul_mont", Prim::Bignum),
            ("BN_mod_exp_mont", Prim::Bignum),
            ("sha256_block_data_order_avx2", Prim::ShaHmac),
            ("HMAC_Update", Prim::ShaHmac),
            ("aesni_cbc_encrypt", Prim::Aes),
            ("tls_process_client_hello", Prim::Other),
            ("ssl3_read_bytes", Prim::Other),
            ("crypto/internal/fips140/aes/gcm.seal", Prim::AesGcm),
            ("crypto/internal/fips140/nistec.(*P256Point).ScalarMult", Prim::Ec),
            (
                "crypto/ecdsa.signFIPS[go.shape.*crypto/internal/fips140/nistec.P256Point]",
                Prim::Ecdsa,
            ),
            ("crypto/internal/fips140/sha256.blockAVX2", Prim::ShaHmac),
            (
                "vendor/golang.org/x/crypto/chacha20poly1305.(*chacha20poly1305).seal",
                Prim::Chacha20Poly1305,
            ),
            ("crypto/tls.(*Conn).readRecordOrCCS", Prim::Other),
            ("nettle_gcm_encrypt", Prim::AesGcm),
            ("_nettle_ecc_mul_a", Prim::Ec),
            ("mbedtls_mpi_exp_mod", Prim::Bignum),
            ("traverse_tree", Prim::Other),
        ];
        for (name, want) in cases {
            assert_eq!(classify_name(name), want, "{name}");
        }
    }

    #[test]
    fn library_names() {
        assert_eq!(
            stack_of_library("/usr/lib/x86_64-linux-gnu/libssl.so.3"),
            Some("openssl")
        );
        assert_eq!(
            stack_of_library("/usr/lib/x86_64-linux-gnu/libgnutls.so.30"),
            Some("gnutls")
        );
        assert_eq!(stack_of_library("/usr/lib/x86_64-linux-gnu/libssl3.so"), Some("nss"));
        assert_eq!(stack_of_library("/usr/lib/x86_64-linux-gnu/libcrypto.so.3"), None);
        assert!(is_tls_code_library("/usr/lib/x86_64-linux-gnu/libcrypto.so.3"));
        assert!(is_tls_code_library("/usr/lib/x86_64-linux-gnu/libnettle.so.8"));
        assert!(!is_tls_code_library("/usr/lib/x86_64-linux-gnu/libc.so.6"));
        assert!(!is_tls_code_library("/usr/lib/x86_64-linux-gnu/libsslx.so"));
    }

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

    #[test]
    fn kernel_classes() {
        let text = "ffffffff81000000 T _text\n\
                    ffffffff81100000 T tcp_sendmsg\n\
                    ffffffff81100400 t do_epoll_wait\n\
                    ffffffff81200000 T uprobe_notify_resume\n\
                    ffffffff81300000 T aesni_gcm_enc_update\n\
                    ffffffff81400000 T filemap_read\n\
                    ffffffffc0000000 t tls_sw_sendmsg\t[tls]\n\
                    0000000000000000 A fixed_percpu_data\n";
        let k = Kallsyms::parse(text, true).unwrap();
        assert_eq!(k.class(0xffffffff81100010), KClass::Net);
        assert_eq!(k.class(0xffffffff81100410), KClass::Net);
        assert_eq!(k.class(0xffffffff81200010), KClass::Probe);
        assert_eq!(k.class(0xffffffff81400010), KClass::Other);
        assert_eq!(k.class(0xffffffffc0000010), KClass::Ktls);
        assert_eq!(k.prim(0xffffffff81300010), Prim::AesGcm);
        assert_eq!(k.name(0xffffffff81100010), Some("tcp_sendmsg"));
        assert!(Kallsyms::parse("0000000000000000 T tcp_sendmsg\n", false).is_none());
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
