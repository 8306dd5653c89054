//! Which TLS stack a process carries: a TLS library it maps (by name), or TLS code linked
//! into its executable (found by symbols).
use std::path::Path;

pub use super::basename;
use super::{
    elf::FileSyms,
    files::{ElfFiles, FileKey},
};

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

pub fn is_tls_code_library(path: &str) -> bool {
    let base = basename(path);
    stack_of_library(path).is_some() || TLS_CODE.iter().any(|lib| lib_matches(base, lib))
}

/// The TLS stack a process carries: a TLS library it maps (by name), else TLS code linked
/// into its executable (OpenSSL or mbed TLS found by symbols, Go's crypto/tls), as `files`
/// knows it or reads it (`maps`: its memory map).
pub fn process_tls_stack(pid: u32, maps: &str, files: &ElfFiles) -> Option<&'static str> {
    if let Some(s) = super::maps::files(maps).iter().find_map(|p| stack_of_library(p)) {
        return Some(s);
    }
    let exe = format!("/proc/{pid}/exe");
    let md = std::fs::metadata(&exe).ok()?;
    files.stack(FileKey::of(&md), || {
        let path = std::fs::read_link(&exe).ok()?;
        FileSyms::load(&path.to_string_lossy(), Path::new(&exe), &[], false)?.stack
    })
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
