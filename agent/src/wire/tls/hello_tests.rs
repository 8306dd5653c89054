//! The ClientHello parser on real clients' hellos (hello_fixtures.rs): each offers exactly
//! what its command told it to; and on hellos split, cut and broken on purpose.
use super::hello::*;
use super::hello_fixtures as fx;

pub fn bytes(hex: &str) -> Vec<u8> {
    let hex = hex.as_bytes();
    let d = |c: u8| (c as char).to_digit(16).unwrap() as u8;
    hex.chunks(2).map(|p| d(p[0]) << 4 | d(p[1])).collect()
}

pub fn offer(hex: &str) -> Offer {
    parse_client_hello(&bytes(hex)).unwrap()
}

// IANA codes used below.
const X25519: u16 = 29;
const P256: u16 = 23;
const P384: u16 = 24;
const P521: u16 = 25;
const X448: u16 = 30;
const FFDHE: [u16; 5] = [256, 257, 258, 259, 260];
const ECDSA_P256_SHA256: u16 = 0x0403;
const RSA_PSS_RSAE_SHA256: u16 = 0x0804;
const RSA_PKCS1_SHA256: u16 = 0x0401;
/// OpenSSL 3.0's default client suites (`DEFAULT`), in its order.
const OPENSSL_DEFAULT_SUITES: [u16; 30] = [
    0x1302, 0x1303, 0x1301, 0xc02c, 0xc030, 0x009f, 0xcca9, 0xcca8, 0xccaa, 0xc02b, 0xc02f, 0x009e, 0xc024, 0xc028,
    0x006b, 0xc023, 0xc027, 0x0067, 0xc00a, 0xc014, 0x0039, 0xc009, 0xc013, 0x0033, 0x009d, 0x009c, 0x003d, 0x003c,
    0x0035, 0x002f,
];
/// OpenSSL 3.0's default groups: x25519, P-256, x448, P-521, P-384, ffdhe2048..8192.
const OPENSSL_DEFAULT_GROUPS: [u16; 10] = [X25519, P256, X448, P521, P384, 256, 257, 258, 259, 260];

#[test]
fn openssl_default() {
    let o = offer(fx::OPENSSL_DEFAULT);
    assert_eq!(o.max_version, 0x0304);
    assert_eq!(o.suites, OPENSSL_DEFAULT_SUITES); // the renegotiation SCSV dropped
    assert_eq!(o.groups, OPENSSL_DEFAULT_GROUPS);
    assert_eq!(o.key_shares, [X25519]);
    assert_eq!(o.sigalgs.len(), 20);
    assert!(o.sigalgs.contains(&ECDSA_P256_SHA256));
    assert_eq!(o.alpn, 0);
    assert_eq!(o.sni.as_deref(), Some("example.com"));
    assert_eq!(o.resumption, Resumption::None); // a random session id alone is no offer
    assert!(!o.early_data);
}

#[test]
fn openssl_groups() {
    let o = offer(fx::OPENSSL_GROUPS_P384);
    assert_eq!((o.groups, o.key_shares), (vec![P384], vec![P384]));
    let o = offer(fx::OPENSSL_GROUPS_X448_P521);
    assert_eq!((o.groups, o.key_shares), (vec![X448, P521], vec![X448]));
}

#[test]
fn openssl_tls12_ciphers() {
    let o = offer(fx::OPENSSL_TLS12_AES128_SHA);
    assert_eq!(o.max_version, 0x0303);
    assert_eq!(o.suites, [0x002f]);
    // No ECC suite: OpenSSL sends no supported_groups.
    assert!(o.groups.is_empty() && o.key_shares.is_empty());
    for (hex, suite) in [
        (fx::OPENSSL_TLS12_ECDHE_RSA_GCM, 0xc02f),
        (fx::OPENSSL_TLS12_DHE_GCM, 0x009e),
        (fx::OPENSSL_TLS12_ECDHE_ECDSA_CBC, 0xc009),
    ] {
        let o = offer(hex);
        assert_eq!((o.max_version, o.suites), (0x0303, vec![suite]));
        assert!(o.key_shares.is_empty());
    }
    assert_eq!(
        offer(fx::OPENSSL_TLS12_ECDHE_RSA_GCM).groups,
        [X25519, P256, X448, P521, P384]
    );
}

#[test]
fn openssl_tls13_suite() {
    let o = offer(fx::OPENSSL_TLS13_CHACHA);
    assert_eq!(o.max_version, 0x0304);
    assert_eq!(o.suites, [0x1303]);
    // TLS 1.3 only: no PKCS#1 v1.5 or SHA-1/SHA-224 signatures offered for the handshake.
    assert_eq!(o.sigalgs.len(), 14);
}

#[test]
fn openssl_sigalgs() {
    let o = offer(fx::OPENSSL_SIGALGS_RSA);
    assert_eq!(o.sigalgs, [RSA_PSS_RSAE_SHA256, RSA_PKCS1_SHA256]);
    let o = offer(fx::OPENSSL_SIGALGS_ECDSA);
    assert_eq!(o.sigalgs, [ECDSA_P256_SHA256]);
}

#[test]
fn alpn() {
    assert_eq!(offer(fx::OPENSSL_ALPN).alpn, ALPN_H2 | ALPN_HTTP1 | ALPN_OTHER);
    assert_eq!(offer(fx::CURL_HTTP2).alpn, ALPN_H2 | ALPN_HTTP1);
    assert_eq!(offer(fx::CURL_HTTP1).alpn, ALPN_HTTP1);
    assert_eq!(offer(fx::PYTHON_SSL).alpn, ALPN_HTTP1);
    assert_eq!(offer(fx::NODE).alpn, ALPN_H2 | ALPN_HTTP1);
    // h2load offers h2 and its drafts (h2-16, h2-14) and http/1.1.
    assert_eq!(offer(fx::H2LOAD).alpn, ALPN_H2 | ALPN_HTTP1 | ALPN_OTHER);
    assert_eq!(offer(fx::GNUTLS_CLI).alpn, 0);
}

#[test]
fn sni() {
    assert_eq!(offer(fx::OPENSSL_NO_SNI).sni, None);
    // h2load to an IP address: no server_name (RFC 6066: no literal IPs).
    assert_eq!(offer(fx::H2LOAD).sni, None);
    for (_, hex) in fx::ALL
        .iter()
        .filter(|(n, _)| !["OPENSSL_NO_SNI", "H2LOAD"].contains(n))
    {
        assert_eq!(offer(hex).sni.as_deref(), Some("example.com"));
    }
}

#[test]
fn resumption() {
    let o = offer(fx::OPENSSL_TLS13_PSK);
    assert_eq!((o.max_version, o.resumption), (0x0304, Resumption::Psk));
    // -sess_in restricts the suites to the session's TLS 1.3 ones.
    assert_eq!(o.suites, [0x1302, 0x1303, 0x1301]);
    assert!(!o.early_data); // s_client sends early data only with -early_data
    let o = offer(fx::OPENSSL_TLS12_TICKET);
    assert_eq!((o.max_version, o.resumption), (0x0303, Resumption::Ticket));
    for (name, hex) in fx::ALL
        .iter()
        .filter(|(n, _)| !n.contains("PSK") && !n.contains("TICKET"))
    {
        assert_eq!(offer(hex).resumption, Resumption::None, "{name}");
    }
}

#[test]
fn other_clients() {
    let o = offer(fx::GNUTLS_CLI);
    assert_eq!(o.max_version, 0x0304);
    assert_eq!(o.groups, [P256, P384, P521, X25519, X448, 256, 257, 258, 259, 260]);
    assert_eq!(o.key_shares, [P256, X25519]); // GnuTLS sends two shares
    assert!(o.suites.contains(&0x1304)); // TLS_AES_128_CCM_SHA256
    let o = offer(fx::NODE);
    assert_eq!(
        (o.max_version, o.groups, o.key_shares),
        (0x0304, OPENSSL_DEFAULT_GROUPS.to_vec(), vec![X25519])
    );
    let o = offer(fx::H2LOAD);
    assert_eq!(o.groups, [X25519, P256, P384, P521]);
    assert_eq!(o.suites[..4], [0x1301, 0x1302, 0x1303, 0x1304]);
    let o = offer(fx::PYTHON_SSL);
    assert_eq!(
        (o.max_version, o.groups, o.key_shares),
        (0x0304, OPENSSL_DEFAULT_GROUPS.to_vec(), vec![X25519])
    );
    // Post-quantum hybrids: node 24 (OpenSSL 3.5) and Go send an X25519MLKEM768 share.
    let o = offer(fx::NODE24);
    assert_eq!(o.groups, [0x11EC, X25519, P256, X448, P384, P521, 256, 257]);
    assert_eq!(o.key_shares, [0x11EC, X25519]);
    assert_eq!(o.sigalgs[..3], [0x0905, 0x0906, 0x0904]); // ML-DSA
    let o = offer(fx::NODE24_X25519_FIRST);
    assert_eq!((o.groups, o.key_shares), (vec![X25519, 0x11EC], vec![X25519]));
    let o = offer(fx::NODE24_MLKEM_ONLY);
    assert_eq!((o.groups, o.key_shares), (vec![0x11EC], vec![0x11EC]));
    let o = offer(fx::GO);
    assert_eq!(o.groups, [0x11EC, 0x11EB, 0x11ED, X25519, P256, P384, P521]);
    assert_eq!(o.key_shares, [0x11EC, X25519]);
    assert_eq!(o.suites[o.suites.len() - 3..], [0x1301, 0x1302, 0x1303]); // Go lists TLS 1.3's last
    let o = offer(fx::NODE16);
    assert_eq!(
        (o.groups, o.key_shares),
        (vec![X25519, P256, X448, P521, P384], vec![X25519])
    );
    assert!(!FFDHE.iter().any(|g| offer(fx::H2LOAD).groups.contains(g)));
}

/// Cuts a capture's handshake bytes into records of `size` bytes (the last shorter).
pub fn split(capture: &[u8], size: usize) -> Vec<u8> {
    let hs = &capture[5..];
    hs.chunks(size)
        .flat_map(|c| [&[22, 3, 1, (c.len() >> 8) as u8, c.len() as u8][..], c].concat())
        .collect()
}

#[test]
fn split_over_records() {
    for (name, hex) in fx::ALL {
        let whole = bytes(hex);
        let o = parse_client_hello(&whole).unwrap();
        for size in [1, 2, 3, 4, 5, 100, 300] {
            assert_eq!(
                parse_client_hello(&split(&whole, size)).as_ref(),
                Ok(&o),
                "{name} in {size}-byte records"
            );
        }
        // Bytes after the ClientHello are not read.
        let more = [whole.clone(), vec![20, 3, 3, 0, 1, 1]].concat();
        assert_eq!(parse_client_hello(&more).as_ref(), Ok(&o));
    }
}

#[test]
fn truncated_gives_no_offer() {
    for (name, hex) in fx::ALL {
        let whole = bytes(hex);
        for n in 0..whole.len() {
            assert_eq!(
                parse_client_hello(&whole[..n]),
                Err(HelloError::Truncated),
                "{name} cut at {n}"
            );
        }
        let parts = split(&whole, 64);
        for n in 0..parts.len() {
            let r = parse_client_hello(&parts[..n]);
            assert_eq!(r, Err(HelloError::Truncated), "{name} in records cut at {n}");
        }
    }
}

#[test]
fn not_hellos() {
    // HTTP, an SSLv2-compatible hello, an alert, a ServerHello.
    for b in [
        &b"GET / HTTP/1.1\r\n"[..],
        &[0x80, 0x2e, 1, 3, 1],
        &[21, 3, 3, 0, 2, 2, 40],
        &[22, 3, 3, 0, 4, 2, 0, 0, 0],
    ] {
        assert_eq!(parse_client_hello(b), Err(HelloError::NotHello), "{b:x?}");
    }
    // An alert after the hello's first record.
    let parts = split(&bytes(fx::OPENSSL_DEFAULT), 100);
    let bad = [&parts[..105], &[21, 3, 3, 0, 2, 2, 40]].concat();
    assert_eq!(parse_client_hello(&bad), Err(HelloError::Malformed));
}

/// A ClientHello around `exts` (extension bytes, without the list's length).
pub fn hello(suites: &[u16], exts: &[u8]) -> Vec<u8> {
    let mut body = vec![3, 3];
    body.extend([7; 32]);
    body.push(0);
    body.extend(((suites.len() * 2) as u16).to_be_bytes());
    body.extend(suites.iter().flat_map(|s| s.to_be_bytes()));
    body.extend([1, 0]);
    body.extend((exts.len() as u16).to_be_bytes());
    body.extend(exts);
    let mut hs = vec![1, 0, (body.len() >> 8) as u8, body.len() as u8];
    hs.extend(body);
    [vec![22, 3, 1, (hs.len() >> 8) as u8, hs.len() as u8], hs].concat()
}

pub fn ext(kind: u16, data: &[u8]) -> Vec<u8> {
    [&kind.to_be_bytes()[..], &(data.len() as u16).to_be_bytes(), data].concat()
}

fn list16(items: &[u16]) -> Vec<u8> {
    let mut v = ((items.len() * 2) as u16).to_be_bytes().to_vec();
    v.extend(items.iter().flat_map(|s| s.to_be_bytes()));
    v
}

fn sni_ext(name: &[u8]) -> Vec<u8> {
    let entry = [&[0u8][..], &(name.len() as u16).to_be_bytes(), name].concat();
    ext(0, &[&(entry.len() as u16).to_be_bytes()[..], &entry].concat())
}

#[test]
fn grease_and_scsv_dropped() {
    let exts = [
        ext(0x0a0a, &[]),
        ext(10, &list16(&[0x2a2a, X25519, P256])),
        ext(13, &list16(&[0xfafa, ECDSA_P256_SHA256])),
        ext(43, &[6, 0x3a, 0x3a, 3, 4, 3, 3]),
        ext(51, &[0, 10, 0x2a, 0x2a, 0, 1, 0, 0, 29, 0, 1, 9]),
        ext(16, &[0, 6, 2, 0x1a, 0x1a, 2, b'h', b'2']),
        ext(35, &[]),
        ext(42, &[]),
    ]
    .concat();
    let o = parse_client_hello(&hello(&[0x4a4a, 0x1301, 0x00ff, 0x5600, 0xc02b], &exts)).unwrap();
    assert_eq!(o.suites, [0x1301, 0xc02b]);
    assert_eq!(o.groups, [X25519, P256]);
    assert_eq!(o.sigalgs, [ECDSA_P256_SHA256]);
    assert_eq!(o.max_version, 0x0304);
    assert_eq!(o.key_shares, [X25519]);
    assert_eq!(o.alpn, ALPN_H2);
    assert_eq!(o.resumption, Resumption::None); // an empty session_ticket asks for one, offers none
    assert!(o.early_data);
    // A TLS 1.3 draft (0x7f1c) above TLS 1.2: the known version is the highest.
    let o = parse_client_hello(&hello(&[0x1301], &ext(43, &[4, 0x7f, 0x1c, 3, 3]))).unwrap();
    assert_eq!(o.max_version, 0x0303);
    for v in [0x0a0a, 0x1a1a, 0xfafa] {
        assert!(is_grease(v));
    }
    for v in [0x0a1a, 0x1301, 0x00ff, 0xaaaa_u16 ^ 0x0001] {
        assert!(!is_grease(v));
    }
}

#[test]
fn lists_capped() {
    let many: Vec<u16> = (0x0100..0x0300).collect();
    let o = parse_client_hello(&hello(&many, &ext(10, &list16(&many)))).unwrap();
    assert_eq!((o.suites.len(), o.groups.len()), (MAX_LIST, MAX_LIST));
    assert_eq!(o.suites[..], many[..MAX_LIST]);
}

#[test]
fn server_names() {
    let name = |n: &[u8]| parse_client_hello(&hello(&[0x1301], &sni_ext(n))).unwrap().sni;
    assert_eq!(name(b"WWW.Example.COM").as_deref(), Some("www.example.com"));
    assert_eq!(name(&[b'a'; 253]).map(|s| s.len()), Some(253));
    assert_eq!(name(&[b'a'; 254]), None);
    assert_eq!(name(b""), None);
    assert_eq!(name(b"a b"), None);
    assert_eq!(name(b"caf\xc3\xa9"), None);
    assert_eq!(name(b"a\x00b"), None);
}

#[test]
fn malformed() {
    let ok = hello(&[0x1301], &ext(10, &list16(&[29])));
    assert!(parse_client_hello(&ok).is_ok());
    for (what, exts) in [
        ("odd group list", ext(10, &[0, 3, 0, 29, 0])),
        ("list longer than its extension", ext(10, &[0, 4, 0, 29])),
        ("bytes after the list", ext(10, &[0, 2, 0, 29, 0])),
        (
            "duplicate extension",
            [ext(10, &list16(&[29])), ext(10, &list16(&[23]))].concat(),
        ),
        ("empty key share", ext(51, &[0, 4, 0, 29, 0, 0])),
        ("empty ALPN name", ext(16, &[0, 1, 0])),
        ("extension past the list", vec![0, 10, 0, 9]),
    ] {
        assert_eq!(
            parse_client_hello(&hello(&[0x1301], &exts)),
            Err(HelloError::Malformed),
            "{what}"
        );
    }
    // A record longer than 2^14.
    let mut big = ok.clone();
    big[3..5].copy_from_slice(&0x4001u16.to_be_bytes());
    assert_eq!(parse_client_hello(&big), Err(HelloError::Malformed));
}
