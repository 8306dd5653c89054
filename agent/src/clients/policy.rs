//! Candidate server policies, and what each would do with a client's offer: negotiate,
//! need a HelloRetryRequest (the client offered a group the policy accepts but no key share
//! the policy would pick), or fail. The report's findings quote these counts ("clients that
//! would fail"), the metrics count them per policy (tlsprof_client_policy_outcomes_total).
//!
//! Each policy is a whole server configuration, as data (`Policy`): versions, TLS 1.3 and
//! TLS 1.2 suites, groups and how the server picks one, certificates. The single-change
//! policies (ecdsa_only, tls13_only, no_cbc_3des, no_rsa_kex, x25519_p256_only,
//! pq_hybrid_first) are one change to a permissive server, `BASELINE`: OpenSSL 3.0's
//! defaults with both an ECDSA P-256 and an RSA 2048 certificate. The model, decision by
//! decision, is in docs/clients.md.
use super::facts::{sigalg_family, suite_info, Auth, Kx};
use crate::wire::tls::hello::Offer;

/// What a policy would do with one ClientHello.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Outcome {
    Negotiate,
    HelloRetry,
    Fail,
}

impl crate::metrics::LabelValue for Outcome {
    const ALL: &'static [Outcome] = &[Outcome::Negotiate, Outcome::HelloRetry, Outcome::Fail];
    /// The label value.
    fn label(self) -> &'static str {
        match self {
            Outcome::Negotiate => "negotiate",
            Outcome::HelloRetry => "hello_retry",
            Outcome::Fail => "fail",
        }
    }
}

/// A server certificate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cert {
    /// ECDSA on P-256: TLS 1.3 needs ecdsa_secp256r1_sha256 (0x0403) offered; TLS 1.2 an
    /// ECDSA signature algorithm with any hash, and P-256 among the client's groups if it
    /// sent supported_groups (RFC 8422 §5.1).
    EcdsaP256,
    /// RSA 2048: TLS 1.3 needs rsa_pss_rsae_* (0x0804..=0x0806) offered; TLS 1.2 an RSA
    /// signature algorithm (PKCS#1 v1.5 or PSS) for ECDHE_RSA and DHE_RSA, nothing for RSA
    /// key transport.
    Rsa2048,
}

/// How a TLS 1.3 server picks the key exchange group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupChoice {
    /// The first key share the client sent in a group the server accepts (OpenSSL up to
    /// 3.4, and 3.5's default of one group tuple): no HelloRetryRequest while any share
    /// fits; one when none does but a group is common.
    ClientShare,
    /// The server's most preferred group the client supports; a HelloRetryRequest when the
    /// client sent no share for it.
    ServerPreference,
}

/// A candidate server policy. `name` is the label value (tlsprof_client_policy_outcomes_total{policy}).
#[derive(Debug)]
pub struct Policy {
    pub name: &'static str,
    /// What the report calls it.
    pub title: &'static str,
    /// Lowest and highest protocol version (0x0303 TLS 1.2, 0x0304 TLS 1.3).
    pub min_version: u16,
    pub max_version: u16,
    pub tls13_suites: &'static [u16],
    /// TLS 1.2 suites (IANA codes); the server needs the certificate and, for ECDHE, a
    /// common group, to use one.
    pub tls12_suites: &'static [u16],
    /// Groups in the server's preference order.
    pub groups: &'static [u16],
    pub group_choice: GroupChoice,
    pub certs: &'static [Cert],
}

const TLS12: u16 = 0x0303;
const TLS13: u16 = 0x0304;

// Groups (IANA).
const SECP256R1: u16 = 23;
const SECP384R1: u16 = 24;
const SECP521R1: u16 = 25;
const X25519: u16 = 29;
const X448: u16 = 30;
const X25519MLKEM768: u16 = 0x11EC;
/// Groups TLS 1.2 ECDHE can use (no hybrids: they are TLS 1.3 only; no FFDHE: that is DHE).
const TLS12_EC_GROUPS: [u16; 5] = [SECP256R1, SECP384R1, SECP521R1, X25519, X448];

/// OpenSSL 3.0's default TLS 1.3 suites: TLS_AES_256_GCM_SHA384, TLS_CHACHA20_POLY1305_SHA256,
/// TLS_AES_128_GCM_SHA256.
const OPENSSL_TLS13: &[u16] = &[0x1302, 0x1303, 0x1301];
/// OpenSSL 3.0's `DEFAULT` TLS 1.2 suites, in its order (as `openssl ciphers -s -tls1_2`
/// lists them, and its s_client offers them: hello_fixtures.rs OPENSSL_DEFAULT): ECDHE and
/// DHE with AES-GCM and ChaCha20, ECDHE and DHE with AES-CBC, RSA key transport with AES-GCM
/// and AES-CBC. No 3DES, RC4 or DSS.
const OPENSSL_TLS12: &[u16] = &[
    0xC02C, 0xC030, 0x009F, 0xCCA9, 0xCCA8, 0xCCAA, 0xC02B, 0xC02F, 0x009E, 0xC024, 0xC028, 0x006B, 0xC023, 0xC027,
    0x0067, 0xC00A, 0xC014, 0x0039, 0xC009, 0xC013, 0x0033, 0x009D, 0x009C, 0x003D, 0x003C, 0x0035, 0x002F,
];
/// OPENSSL_TLS12 with only AEAD suites (GCM, ChaCha20).
const OPENSSL_TLS12_AEAD: &[u16] = &[
    0xC02C, 0xC030, 0x009F, 0xCCA9, 0xCCA8, 0xCCAA, 0xC02B, 0xC02F, 0x009E, 0x009D, 0x009C,
];
/// OPENSSL_TLS12 without RSA key transport.
const OPENSSL_TLS12_NO_RSA_KEX: &[u16] = &[
    0xC02C, 0xC030, 0x009F, 0xCCA9, 0xCCA8, 0xCCAA, 0xC02B, 0xC02F, 0x009E, 0xC024, 0xC028, 0x006B, 0xC023, 0xC027,
    0x0067, 0xC00A, 0xC014, 0x0039, 0xC009, 0xC013, 0x0033,
];
/// OpenSSL 3.0's default groups: x25519, secp256r1, x448, secp521r1, secp384r1,
/// ffdhe2048 … ffdhe8192.
const OPENSSL_GROUPS: &[u16] = &[X25519, SECP256R1, X448, SECP521R1, SECP384R1, 256, 257, 258, 259, 260];
const BOTH_CERTS: &[Cert] = &[Cert::EcdsaP256, Cert::Rsa2048];

/// Mozilla Server Side TLS guidelines version 5.8, from mozilla/ssl-config-generator
/// src/static/guidelines/5.8.json at commit 858f8f74a4fd1293a3a7f5ab0c16eb1eb891393a (the
/// file last changed in 46b2a5e3aac47a15a9992d877a56e61420360bd1): "ciphersuites" (both
/// configurations) TLS_AES_128_GCM_SHA256, TLS_AES_256_GCM_SHA384, TLS_CHACHA20_POLY1305_SHA256.
const MOZILLA_TLS13: &[u16] = &[0x1301, 0x1302, 0x1303];
/// 5.8 intermediate "ciphers": ECDHE-ECDSA-AES128-GCM-SHA256, ECDHE-RSA-AES128-GCM-SHA256,
/// ECDHE-ECDSA-AES256-GCM-SHA384, ECDHE-RSA-AES256-GCM-SHA384, ECDHE-ECDSA-CHACHA20-POLY1305,
/// ECDHE-RSA-CHACHA20-POLY1305 (the JSON's own IANA names give these codes).
const MOZILLA_INTERMEDIATE_TLS12: &[u16] = &[0xC02B, 0xC02F, 0xC02C, 0xC030, 0xCCA9, 0xCCA8];
/// 5.8 "tls_curves" (both): X25519MLKEM768, X25519, prime256v1, secp384r1.
const MOZILLA_GROUPS: &[u16] = &[X25519MLKEM768, X25519, SECP256R1, SECP384R1];
// Sources (docs/clients.md): Mozilla Server Side TLS 5.8, mozilla/ssl-config-generator
// src/static/guidelines/5.8.json at commit 858f8f74a4fd1293a3a7f5ab0c16eb1eb891393a; the
// baseline is OpenSSL 3.0's defaults (TLS 1.2-1.3, DEFAULT suites, default groups) with
// ECDSA P-256 and RSA 2048 certificates.

/// The permissive server the single-change policies change one thing of: OpenSSL 3.0's
/// defaults (TLS 1.2 and 1.3 — OpenSSL 3.0 allows TLS 1.0 and 1.1 only at security level
/// 0 —, its DEFAULT suites, its default groups, automatic DH parameters for DHE as
/// `openssl s_server` sets them), with an ECDSA P-256 and an RSA 2048 certificate.
/// Not a policy itself (no label).
pub const BASELINE: Policy = Policy {
    name: "baseline",
    title: "OpenSSL 3.0 defaults, ECDSA and RSA certificates",
    min_version: TLS12,
    max_version: TLS13,
    tls13_suites: OPENSSL_TLS13,
    tls12_suites: OPENSSL_TLS12,
    groups: OPENSSL_GROUPS,
    group_choice: GroupChoice::ClientShare,
    certs: BOTH_CERTS,
};

/// The candidate policies, in the label's order.
pub const POLICIES: [Policy; 8] = [
    // Modern: TLS 1.3 only, "certificate_types": ["ecdsa"] (P-256).
    Policy {
        name: "mozilla_modern",
        title: "Mozilla's modern configuration (5.8)",
        min_version: TLS13,
        max_version: TLS13,
        tls13_suites: MOZILLA_TLS13,
        tls12_suites: &[],
        groups: MOZILLA_GROUPS,
        group_choice: GroupChoice::ClientShare,
        certs: &[Cert::EcdsaP256],
    },
    // Intermediate: TLS 1.2 and 1.3. "certificate_types" allows ECDSA or RSA; the what-if
    // assumes the ECDSA P-256 certificate alone (Mozilla's recommended type, modern's): a
    // server with an RSA certificate too differs only for clients ecdsa_only fails.
    Policy {
        name: "mozilla_intermediate",
        title: "Mozilla's intermediate configuration (5.8, ECDSA certificate)",
        min_version: TLS12,
        max_version: TLS13,
        tls13_suites: MOZILLA_TLS13,
        tls12_suites: MOZILLA_INTERMEDIATE_TLS12,
        groups: MOZILLA_GROUPS,
        group_choice: GroupChoice::ClientShare,
        certs: &[Cert::EcdsaP256],
    },
    Policy {
        name: "ecdsa_only",
        title: "an ECDSA certificate only",
        certs: &[Cert::EcdsaP256],
        ..BASELINE
    },
    Policy {
        name: "tls13_only",
        title: "TLS 1.3 only",
        min_version: TLS13,
        ..BASELINE
    },
    Policy {
        name: "no_cbc_3des",
        title: "no CBC or 3DES suites",
        tls12_suites: OPENSSL_TLS12_AEAD,
        ..BASELINE
    },
    Policy {
        name: "no_rsa_kex",
        title: "no RSA key exchange",
        tls12_suites: OPENSSL_TLS12_NO_RSA_KEX,
        ..BASELINE
    },
    Policy {
        name: "x25519_p256_only",
        title: "only X25519 and P-256",
        groups: &[X25519, SECP256R1],
        ..BASELINE
    },
    // Needs a server with ML-KEM (OpenSSL 3.5 and later); otherwise the baseline's.
    Policy {
        name: "pq_hybrid_first",
        title: "the post-quantum hybrid X25519MLKEM768 first",
        groups: &[X25519MLKEM768, X25519, SECP256R1, SECP384R1],
        group_choice: GroupChoice::ServerPreference,
        ..BASELINE
    },
];

/// What the server `p` would do with the ClientHello `o` (docs/clients.md#policies):
///
/// 1. Version: the client's highest version, capped at the server's highest; below the
///    server's lowest (or not SSL 3.0 to TLS 1.3): fail. (Only the highest version is in an
///    Offer: a client is taken to support every version from the server's lowest to its
///    highest, as every real client does. The server does not fall back to TLS 1.2 when
///    TLS 1.3 fails, as OpenSSL does not.)
/// 2. TLS 1.3: a common TLS 1.3 suite; a certificate whose signature algorithm the client
///    offered (no signature_algorithms: fail, RFC 8446 §4.2.3); a common group (none, or
///    no supported_groups: fail). Then a key share: `GroupChoice` decides between negotiate
///    and hello_retry. A PSK offer does not help: the what-if server holds none of the
///    client's sessions.
/// 3. TLS 1.2: negotiate if any suite both offer can be used: its certificate is there and
///    fits the client's signature algorithms (none sent: RFC 5246 §7.4.1.4.1 takes SHA-1
///    with the certificate's type, so either fits) and, for ECDSA, the client's groups;
///    ECDHE needs a common TLS 1.2 curve (no supported_groups: any, RFC 8422 §4); DHE and
///    RSA key transport need the RSA certificate. Else fail: TLS 1.2 has no
///    HelloRetryRequest.
pub fn evaluate(o: &Offer, p: &Policy) -> Outcome {
    if !(0x0300..=TLS13).contains(&o.max_version) {
        return Outcome::Fail;
    }
    let version = o.max_version.min(p.max_version);
    if version < p.min_version {
        return Outcome::Fail;
    }
    if version == TLS13 {
        tls13(o, p)
    } else if version == TLS12 && tls12_suite(o, p) {
        Outcome::Negotiate
    } else {
        Outcome::Fail
    }
}

fn tls13(o: &Offer, p: &Policy) -> Outcome {
    if !o.suites.iter().any(|s| p.tls13_suites.contains(s)) {
        return Outcome::Fail;
    }
    let cert_fits = p.certs.iter().any(|c| match c {
        Cert::EcdsaP256 => o.sigalgs.contains(&0x0403),
        Cert::Rsa2048 => o.sigalgs.iter().any(|s| (0x0804..=0x0806).contains(s)),
    });
    if !cert_fits {
        return Outcome::Fail;
    }
    match p.group_choice {
        GroupChoice::ClientShare => {
            if o.key_shares
                .iter()
                .any(|g| p.groups.contains(g) && o.groups.contains(g))
            {
                Outcome::Negotiate
            } else if o.groups.iter().any(|g| p.groups.contains(g)) {
                Outcome::HelloRetry
            } else {
                Outcome::Fail
            }
        }
        GroupChoice::ServerPreference => match p.groups.iter().find(|g| o.groups.contains(g)) {
            None => Outcome::Fail,
            Some(g) if o.key_shares.contains(g) => Outcome::Negotiate,
            Some(_) => Outcome::HelloRetry,
        },
    }
}

/// Whether some TLS 1.2 suite both sides offer can be used.
fn tls12_suite(o: &Offer, p: &Policy) -> bool {
    let no_sigalgs = o.sigalgs.is_empty();
    let signs = |family: &str| no_sigalgs || o.sigalgs.iter().any(|&s| sigalg_family(s) == family && s < 0x0800);
    let rsa_signs = no_sigalgs
        || o.sigalgs
            .iter()
            .any(|&s| matches!(sigalg_family(s), "rsa_pkcs1" | "rsa_pss") && !(0x0809..=0x080B).contains(&s));
    let ecdsa_cert =
        p.certs.contains(&Cert::EcdsaP256) && signs("ecdsa") && (o.groups.is_empty() || o.groups.contains(&SECP256R1));
    let rsa_cert = p.certs.contains(&Cert::Rsa2048);
    let curve = p
        .groups
        .iter()
        .any(|g| TLS12_EC_GROUPS.contains(g) && (o.groups.is_empty() || o.groups.contains(g)));
    o.suites.iter().filter(|s| p.tls12_suites.contains(s)).any(|&s| {
        let Some(info) = suite_info(s) else { return false };
        let cert = match info.auth {
            Auth::Ecdsa => ecdsa_cert,
            Auth::Rsa if info.kx == Kx::Rsa => rsa_cert,
            Auth::Rsa => rsa_cert && rsa_signs,
            Auth::Dss | Auth::Any => false,
        };
        let kx = match info.kx {
            Kx::Ecdhe => curve,
            Kx::Dhe | Kx::Rsa => true,
            Kx::Tls13 => false,
        };
        cert && kx
    })
}
