//! Label values by IANA code: protocol versions, cipher suites, groups.
use super::OTHER;

/// Protocol versions by IANA code.
pub const VERSIONS: [(u16, &str); 5] = [
    (0x0300, "SSLv3"),
    (0x0301, "TLSv1"),
    (0x0302, "TLSv1.1"),
    (0x0303, "TLSv1.2"),
    (0x0304, "TLSv1.3"),
];

pub fn version_name(v: u16) -> &'static str {
    VERSIONS.iter().find(|(c, _)| *c == v).map_or(OTHER, |(_, n)| n)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kx {
    Ecdhe,
    Dhe,
    Rsa,
    /// TLS 1.3: the key exchange is not part of the suite.
    Any,
}

#[derive(Debug, Clone, Copy)]
pub struct Suite {
    pub name: &'static str,
    pub kx: Kx,
    /// Hash length (TLS 1.3 Finished) and AEAD tag length.
    pub hash: u16,
    pub tag: u16,
}

const fn s(name: &'static str, kx: Kx, hash: u16) -> Suite {
    Suite {
        name,
        kx,
        hash,
        tag: 16,
    }
}

/// Cipher suites by IANA code: those OpenSSL, Go, GnuTLS and the common clients negotiate.
pub const SUITES: [(u16, Suite); 36] = [
    (0x1301, s("TLS_AES_128_GCM_SHA256", Kx::Any, 32)),
    (0x1302, s("TLS_AES_256_GCM_SHA384", Kx::Any, 48)),
    (0x1303, s("TLS_CHACHA20_POLY1305_SHA256", Kx::Any, 32)),
    (0x1304, s("TLS_AES_128_CCM_SHA256", Kx::Any, 32)),
    (
        0x1305,
        Suite {
            name: "TLS_AES_128_CCM_8_SHA256",
            kx: Kx::Any,
            hash: 32,
            tag: 8,
        },
    ),
    (0xC02B, s("TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256", Kx::Ecdhe, 0)),
    (0xC02C, s("TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384", Kx::Ecdhe, 0)),
    (0xCCA9, s("TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256", Kx::Ecdhe, 0)),
    (0xC009, s("TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA", Kx::Ecdhe, 0)),
    (0xC00A, s("TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA", Kx::Ecdhe, 0)),
    (0xC023, s("TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256", Kx::Ecdhe, 0)),
    (0xC024, s("TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA384", Kx::Ecdhe, 0)),
    (0xC008, s("TLS_ECDHE_ECDSA_WITH_3DES_EDE_CBC_SHA", Kx::Ecdhe, 0)),
    (0xC02F, s("TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256", Kx::Ecdhe, 0)),
    (0xC030, s("TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384", Kx::Ecdhe, 0)),
    (0xCCA8, s("TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256", Kx::Ecdhe, 0)),
    (0xC013, s("TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA", Kx::Ecdhe, 0)),
    (0xC014, s("TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA", Kx::Ecdhe, 0)),
    (0xC027, s("TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256", Kx::Ecdhe, 0)),
    (0xC028, s("TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA384", Kx::Ecdhe, 0)),
    (0xC012, s("TLS_ECDHE_RSA_WITH_3DES_EDE_CBC_SHA", Kx::Ecdhe, 0)),
    (0x009E, s("TLS_DHE_RSA_WITH_AES_128_GCM_SHA256", Kx::Dhe, 0)),
    (0x009F, s("TLS_DHE_RSA_WITH_AES_256_GCM_SHA384", Kx::Dhe, 0)),
    (0xCCAA, s("TLS_DHE_RSA_WITH_CHACHA20_POLY1305_SHA256", Kx::Dhe, 0)),
    (0x0033, s("TLS_DHE_RSA_WITH_AES_128_CBC_SHA", Kx::Dhe, 0)),
    (0x0039, s("TLS_DHE_RSA_WITH_AES_256_CBC_SHA", Kx::Dhe, 0)),
    (0x0067, s("TLS_DHE_RSA_WITH_AES_128_CBC_SHA256", Kx::Dhe, 0)),
    (0x006B, s("TLS_DHE_RSA_WITH_AES_256_CBC_SHA256", Kx::Dhe, 0)),
    (0x0016, s("TLS_DHE_RSA_WITH_3DES_EDE_CBC_SHA", Kx::Dhe, 0)),
    (0x009C, s("TLS_RSA_WITH_AES_128_GCM_SHA256", Kx::Rsa, 0)),
    (0x009D, s("TLS_RSA_WITH_AES_256_GCM_SHA384", Kx::Rsa, 0)),
    (0x002F, s("TLS_RSA_WITH_AES_128_CBC_SHA", Kx::Rsa, 0)),
    (0x0035, s("TLS_RSA_WITH_AES_256_CBC_SHA", Kx::Rsa, 0)),
    (0x003C, s("TLS_RSA_WITH_AES_128_CBC_SHA256", Kx::Rsa, 0)),
    (0x003D, s("TLS_RSA_WITH_AES_256_CBC_SHA256", Kx::Rsa, 0)),
    (0x000A, s("TLS_RSA_WITH_3DES_EDE_CBC_SHA", Kx::Rsa, 0)),
];

pub fn suite(code: u16) -> Option<Suite> {
    SUITES.iter().find(|(c, _)| *c == code).map(|(_, s)| *s)
}

/// IANA TLS Supported Groups names.
/// Where a group stands in OpenSSL 3.5's default preference (X25519MLKEM768, X25519,
/// secp256r1, X448, secp384r1, secp521r1, then the finite-field groups), 255 for any other
/// name: among groups every client offers, those a server picks come first in a view.
pub fn group_rank(name: &str) -> u8 {
    const PREFERRED: [&str; 11] = [
        "X25519MLKEM768",
        "x25519",
        "secp256r1",
        "x448",
        "secp384r1",
        "secp521r1",
        "ffdhe2048",
        "ffdhe3072",
        "ffdhe4096",
        "ffdhe6144",
        "ffdhe8192",
    ];
    PREFERRED.iter().position(|g| *g == name).map_or(255, |i| i as u8)
}

/// IANA TLS Supported Groups, by code.
pub const GROUPS: [(u16, &str); 17] = [
    (23, "secp256r1"),
    (24, "secp384r1"),
    (25, "secp521r1"),
    (26, "brainpoolP256r1"),
    (27, "brainpoolP384r1"),
    (28, "brainpoolP512r1"),
    (29, "x25519"),
    (30, "x448"),
    (256, "ffdhe2048"),
    (257, "ffdhe3072"),
    (258, "ffdhe4096"),
    (259, "ffdhe6144"),
    (260, "ffdhe8192"),
    (0x11EB, "SecP256r1MLKEM768"),
    (0x11EC, "X25519MLKEM768"),
    (0x11ED, "SecP384r1MLKEM1024"),
    (0x6399, "X25519Kyber768Draft00"),
];

pub fn group_name(code: u16) -> &'static str {
    GROUPS.iter().find(|(c, _)| *c == code).map_or(OTHER, |(_, n)| n)
}
