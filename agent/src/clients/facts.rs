//! The label values of a client's Offer (docs/clients.md): each from a fixed table, `other`
//! for anything the table does not know, so that whatever clients send, the series stay
//! bounded. `offers` gives every (offer, value) pair of one ClientHello for
//! tlsprof_client_offers_total{offer,value}, each value once.
//!
//! Also the cipher suite table the policies (policy.rs) read: key exchange, certificate
//! type and record protection of every suite a common client offers.
use crate::wire::tls::{
    group_name,
    hello::{Offer, ALPN_H2, ALPN_HTTP1, ALPN_OTHER},
    version_name, NONE, OTHER,
};

/// How a TLS 1.2 suite agrees on keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kx {
    /// TLS 1.3: the key exchange is not part of the suite.
    Tls13,
    Ecdhe,
    Dhe,
    /// RSA key transport (no forward secrecy).
    Rsa,
}

/// The certificate a TLS 1.2 suite needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Auth {
    /// TLS 1.3: the certificate is not part of the suite.
    Any,
    Ecdsa,
    Rsa,
    Dss,
}

/// How records are protected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bulk {
    /// GCM, CCM (CCM_8 included) or ChaCha20-Poly1305.
    Aead,
    /// A block cipher in CBC mode: AES, Camellia, ARIA, SEED.
    Cbc,
    /// 3DES (EDE CBC) or RC4.
    Des3Rc4,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SuiteInfo {
    pub kx: Kx,
    pub auth: Auth,
    pub bulk: Bulk,
}

/// The suites clients commonly offer, by IANA code (RFC 8446, 5246, 5289, 6655, 7905,
/// 6209, 6367, 5932, 4162, 2246); None for the rest (PSK, SRP, anonymous, static ECDH/DH,
/// export, NULL, GOST, …: no policy here accepts them, and their class is `other`).
pub fn suite_info(code: u16) -> Option<SuiteInfo> {
    use Auth::{Dss, Ecdsa, Rsa as RsaCert};
    use Bulk::*;
    use Kx::*;
    let i = |kx, auth, bulk| Some(SuiteInfo { kx, auth, bulk });
    match code {
        0x1301..=0x1305 => i(Tls13, Auth::Any, Aead),
        // ECDHE_ECDSA: AES-GCM, ChaCha20, AES-CCM(_8), ARIA-GCM, Camellia-GCM.
        0xC02B | 0xC02C | 0xCCA9 | 0xC0AC..=0xC0AF | 0xC05C | 0xC05D | 0xC086 | 0xC087 => i(Ecdhe, Ecdsa, Aead),
        // ECDHE_ECDSA: AES-CBC, ARIA-CBC, Camellia-CBC.
        0xC009 | 0xC00A | 0xC023 | 0xC024 | 0xC048 | 0xC049 | 0xC072 | 0xC073 => i(Ecdhe, Ecdsa, Cbc),
        0xC008 | 0xC007 => i(Ecdhe, Ecdsa, Des3Rc4),
        // ECDHE_RSA
        0xC02F | 0xC030 | 0xCCA8 | 0xC060 | 0xC061 | 0xC08A | 0xC08B => i(Ecdhe, RsaCert, Aead),
        0xC013 | 0xC014 | 0xC027 | 0xC028 | 0xC04C | 0xC04D | 0xC076 | 0xC077 => i(Ecdhe, RsaCert, Cbc),
        0xC012 | 0xC011 => i(Ecdhe, RsaCert, Des3Rc4),
        // DHE_RSA
        0x009E | 0x009F | 0xCCAA | 0xC09E | 0xC09F | 0xC0A2 | 0xC0A3 | 0xC052 | 0xC053 | 0xC07C | 0xC07D => {
            i(Dhe, RsaCert, Aead)
        }
        0x0033 | 0x0039 | 0x0067 | 0x006B | 0x0045 | 0x0088 | 0x00BE | 0x00C4 | 0x009A | 0xC044 | 0xC045 => {
            i(Dhe, RsaCert, Cbc)
        }
        0x0016 => i(Dhe, RsaCert, Des3Rc4),
        // DHE_DSS
        0x00A2 | 0x00A3 | 0xC056 | 0xC057 | 0xC080 | 0xC081 => i(Dhe, Dss, Aead),
        0x0032 | 0x0038 | 0x0040 | 0x006A | 0x0044 | 0x0087 | 0x00BD | 0x00C3 | 0x0099 | 0xC042 | 0xC043 => {
            i(Dhe, Dss, Cbc)
        }
        0x0013 => i(Dhe, Dss, Des3Rc4),
        // RSA key transport
        0x009C | 0x009D | 0xC09C | 0xC09D | 0xC0A0 | 0xC0A1 | 0xC050 | 0xC051 | 0xC07A | 0xC07B => {
            i(Rsa, RsaCert, Aead)
        }
        0x002F | 0x0035 | 0x003C | 0x003D | 0x0041 | 0x0084 | 0x00BA | 0x00C0 | 0x0096 | 0xC03C | 0xC03D => {
            i(Rsa, RsaCert, Cbc)
        }
        0x000A | 0x0004 | 0x0005 => i(Rsa, RsaCert, Des3Rc4),
        _ => None,
    }
}

/// A suite's classes (docs/clients.md): tls13_aead, ecdhe_aead, dhe_aead (DHE with an AEAD:
/// forward secret and AEAD, but a finite-field exchange, kept apart from ECDHE), cbc,
/// 3des_rc4, rsa_kex (RSA key transport, whatever the record protection: a suite can be
/// rsa_kex and cbc), other (a suite suite_info does not know). One or two classes.
pub fn suite_classes(code: u16) -> [Option<&'static str>; 2] {
    let Some(s) = suite_info(code) else {
        return [Some(OTHER), None];
    };
    let kx = (s.kx == Kx::Rsa).then_some("rsa_kex");
    let bulk = match (s.kx, s.bulk) {
        (Kx::Tls13, _) => "tls13_aead",
        (Kx::Ecdhe, Bulk::Aead) => "ecdhe_aead",
        (Kx::Dhe, Bulk::Aead) => "dhe_aead",
        // RSA key transport with an AEAD: rsa_kex alone.
        (Kx::Rsa, Bulk::Aead) => return [kx, None],
        (_, Bulk::Cbc) => "cbc",
        (_, Bulk::Des3Rc4) => "3des_rc4",
    };
    [Some(bulk), kx]
}

/// The signature algorithm's family (IANA TLS SignatureScheme, including TLS 1.2's
/// hash/signature pairs): ecdsa, rsa_pss, rsa_pkcs1, eddsa, other (DSA, ML-DSA, GOST, …).
pub fn sigalg_family(code: u16) -> &'static str {
    match code {
        // ecdsa_{sha1,sha224,secp256r1_sha256,secp384r1_sha384,secp521r1_sha512}
        0x0203 | 0x0303 | 0x0403 | 0x0503 | 0x0603 => "ecdsa",
        // ecdsa_brainpoolP{256,384,512}r1tls13_sha*
        0x081A..=0x081C => "ecdsa",
        // rsa_pss_rsae_sha*, rsa_pss_pss_sha*
        0x0804..=0x0806 | 0x0809..=0x080B => "rsa_pss",
        // rsa_pkcs1_{md5,sha1,sha224,sha256,sha384,sha512}
        0x0101 | 0x0201 | 0x0301 | 0x0401 | 0x0501 | 0x0601 => "rsa_pkcs1",
        0x0807 | 0x0808 => "eddsa",
        _ => OTHER,
    }
}

/// The highest version's label: version_name's (as the server side: SSLv3, TLSv1,
/// TLSv1.1, TLSv1.2, TLSv1.3, other).
pub fn version(o: &Offer) -> &'static str {
    version_name(o.max_version)
}

/// The ALPN labels: h2, http/1.1, other; none without the extension.
pub fn alpn(o: &Offer) -> Vec<&'static str> {
    let v: Vec<&'static str> = [(ALPN_H2, "h2"), (ALPN_HTTP1, "http/1.1"), (ALPN_OTHER, OTHER)]
        .into_iter()
        .filter(|(bit, _)| o.alpn & bit != 0)
        .map(|(_, name)| name)
        .collect();
    if v.is_empty() {
        vec![NONE]
    } else {
        v
    }
}

pub fn resumption(o: &Offer) -> &'static str {
    crate::metrics::LabelValue::label(o.resumption)
}

/// The host name the client asked for, or `none` (the metrics fold rare names, as comm
/// and port).
pub fn sni(o: &Offer) -> &str {
    o.sni.as_deref().unwrap_or(NONE)
}

/// Values in first-seen order, each once.
fn dedup(values: impl IntoIterator<Item = &'static str>) -> Vec<&'static str> {
    let mut out: Vec<&'static str> = Vec::new();
    for v in values {
        if !out.contains(&v) {
            out.push(v);
        }
    }
    out
}

/// Every (offer, value) pair of one ClientHello, for tlsprof_client_offers_total: offer
/// version (one value), group, key_share, cipher, sigalg (each value once; nothing when the
/// client sent none), alpn (one value or more, `none` without the extension), resumption
/// (one value).
pub fn offers(o: &Offer) -> Vec<(&'static str, &'static str)> {
    let mut out = vec![("version", version(o))];
    let lists: [(&'static str, Vec<&'static str>); 4] = [
        ("group", dedup(o.groups.iter().map(|&g| group_name(g)))),
        ("key_share", dedup(o.key_shares.iter().map(|&g| group_name(g)))),
        (
            "cipher",
            dedup(o.suites.iter().flat_map(|&s| suite_classes(s)).flatten()),
        ),
        ("sigalg", dedup(o.sigalgs.iter().map(|&s| sigalg_family(s)))),
    ];
    for (offer, values) in lists {
        out.extend(values.into_iter().map(|v| (offer, v)));
    }
    out.extend(alpn(o).into_iter().map(|v| ("alpn", v)));
    out.push(("resumption", resumption(o)));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::tls::{hello_fixtures as fx, hello_tests::offer};

    fn values(o: &Offer, kind: &str) -> Vec<&'static str> {
        offers(o)
            .into_iter()
            .filter(|(k, _)| *k == kind)
            .map(|(_, v)| v)
            .collect()
    }

    #[test]
    fn openssl_default() {
        let o = offer(fx::OPENSSL_DEFAULT);
        assert_eq!(values(&o, "version"), ["TLSv1.3"]);
        assert_eq!(
            values(&o, "group"),
            [
                "x25519",
                "secp256r1",
                "x448",
                "secp521r1",
                "secp384r1",
                "ffdhe2048",
                "ffdhe3072",
                "ffdhe4096",
                "ffdhe6144",
                "ffdhe8192"
            ]
        );
        assert_eq!(values(&o, "key_share"), ["x25519"]);
        assert_eq!(
            values(&o, "cipher"),
            ["tls13_aead", "ecdhe_aead", "dhe_aead", "cbc", "rsa_kex"]
        );
        // OpenSSL 3.0 still offers DSA (0x0302, 0x0402, …): other.
        assert_eq!(
            values(&o, "sigalg"),
            ["ecdsa", "eddsa", "rsa_pss", "rsa_pkcs1", "other"]
        );
        assert_eq!(values(&o, "alpn"), ["none"]);
        assert_eq!(values(&o, "resumption"), ["none"]);
        assert_eq!(sni(&o), "example.com");
    }

    #[test]
    fn told_offers() {
        let v = |hex, kind| values(&offer(hex), kind);
        assert_eq!(v(fx::OPENSSL_GROUPS_P384, "group"), ["secp384r1"]);
        assert_eq!(v(fx::OPENSSL_GROUPS_X448_P521, "key_share"), ["x448"]);
        assert_eq!(v(fx::OPENSSL_TLS12_AES128_SHA, "cipher"), ["cbc", "rsa_kex"]);
        assert_eq!(v(fx::OPENSSL_TLS12_AES128_SHA, "version"), ["TLSv1.2"]);
        assert!(v(fx::OPENSSL_TLS12_AES128_SHA, "group").is_empty());
        assert_eq!(v(fx::OPENSSL_TLS12_ECDHE_RSA_GCM, "cipher"), ["ecdhe_aead"]);
        assert_eq!(v(fx::OPENSSL_TLS12_DHE_GCM, "cipher"), ["dhe_aead"]);
        assert_eq!(v(fx::OPENSSL_TLS12_ECDHE_ECDSA_CBC, "cipher"), ["cbc"]);
        assert_eq!(v(fx::OPENSSL_TLS13_CHACHA, "cipher"), ["tls13_aead"]);
        assert_eq!(v(fx::OPENSSL_SIGALGS_RSA, "sigalg"), ["rsa_pss", "rsa_pkcs1"]);
        assert_eq!(v(fx::OPENSSL_SIGALGS_ECDSA, "sigalg"), ["ecdsa"]);
        assert_eq!(v(fx::OPENSSL_ALPN, "alpn"), ["h2", "http/1.1", "other"]);
        assert_eq!(v(fx::CURL_HTTP2, "alpn"), ["h2", "http/1.1"]);
        assert_eq!(v(fx::CURL_HTTP1, "alpn"), ["http/1.1"]);
        assert_eq!(v(fx::OPENSSL_TLS13_PSK, "resumption"), ["psk"]);
        assert_eq!(v(fx::OPENSSL_TLS12_TICKET, "resumption"), ["ticket"]);
        assert_eq!(v(fx::GNUTLS_CLI, "key_share"), ["secp256r1", "x25519"]);
        // node offers DSS, ARIA and CCM suites too: all classified, none `other`.
        assert_eq!(
            v(fx::NODE, "cipher"),
            ["tls13_aead", "ecdhe_aead", "dhe_aead", "cbc", "rsa_kex"]
        );
        assert_eq!(sni(&offer(fx::OPENSSL_NO_SNI)), "none");
        assert_eq!(v(fx::NODE24, "group")[0], "X25519MLKEM768");
        assert_eq!(v(fx::NODE24, "key_share"), ["X25519MLKEM768", "x25519"]);
        assert_eq!(
            v(fx::NODE24, "sigalg"),
            ["other", "ecdsa", "eddsa", "rsa_pss", "rsa_pkcs1"]
        ); // ML-DSA: other
        assert_eq!(
            v(fx::GO, "group")[..3],
            ["X25519MLKEM768", "SecP256r1MLKEM768", "SecP384r1MLKEM1024"]
        );
    }

    #[test]
    fn tables() {
        // Two classes for RSA key transport over CBC, one for RSA over GCM.
        assert_eq!(suite_classes(0x002F), [Some("cbc"), Some("rsa_kex")]);
        assert_eq!(suite_classes(0x009C), [Some("rsa_kex"), None]);
        assert_eq!(suite_classes(0x000A), [Some("3des_rc4"), Some("rsa_kex")]);
        assert_eq!(suite_classes(0xC012), [Some("3des_rc4"), None]);
        assert_eq!(suite_classes(0x00FF), [Some("other"), None]);
        assert_eq!(suite_classes(0xC0AC), [Some("ecdhe_aead"), None]); // ECDHE_ECDSA AES_128_CCM
                                                                       // Every suite names.rs labels has a class other than `other`.
        for c in 0..=u16::MAX {
            if crate::wire::tls::suite(c).is_some() {
                assert!(suite_info(c).is_some(), "{c:#06x}");
            }
        }
        for (code, family) in [
            (0x0403, "ecdsa"),
            (0x0203, "ecdsa"),
            (0x0804, "rsa_pss"),
            (0x080b, "rsa_pss"),
            (0x0401, "rsa_pkcs1"),
            (0x0807, "eddsa"),
            (0x0402, "other"),
            (0x0904, "other"),
        ] {
            assert_eq!(sigalg_family(code), family, "{code:#06x}");
        }
        let o = Offer {
            max_version: 0x0301,
            groups: vec![0x6399, 0x11EC, 0x11EB, 0x11ED, 0x1234, 0x4321],
            ..Offer::default()
        };
        assert_eq!(values(&o, "version"), ["TLSv1"]);
        assert_eq!(
            values(&o, "group"),
            [
                "X25519Kyber768Draft00",
                "X25519MLKEM768",
                "SecP256r1MLKEM768",
                "SecP384r1MLKEM1024",
                "other"
            ]
        );
        assert_eq!(offers(&o).len(), 1 + 5 + 2); // version, groups, alpn none, resumption none
    }
}
