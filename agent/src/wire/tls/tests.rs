//! Tests of the handshake parser (mod.rs).
use super::{
    cert::{OID_EC, OID_P384},
    *,
};

use crate::wire::fixtures::{msg, record, server_hello as hello};
fn share(group: u16, key: usize) -> Vec<u8> {
    let mut v = group.to_be_bytes().to_vec();
    v.extend_from_slice(&(key as u16).to_be_bytes());
    v.extend(std::iter::repeat_n(9, key));
    v
}

#[test]
fn tls13_full_handshake() {
    let sh = hello([1; 32], 0x1301, &[(0x002b, vec![3, 4]), (0x0033, share(29, 32))]);
    let mut plain = record(22, &sh);
    plain.extend(record(20, &[1]));
    // EE, Certificate, CertificateVerify (ECDSA P-256, 71 bytes), Finished (SHA-256)
    let sealed = [40, 600, 71 + 25, 53];
    let p = parse(&plain, &sealed, false);
    assert!(p.complete);
    assert_eq!(
        p.negotiated(),
        Negotiated {
            version: "TLSv1.3".into(),
            cipher: "TLS_AES_128_GCM_SHA256".into(),
            group: "x25519".into(),
            cert: "ecdsa_p256".into(),
            resumed: false,
            transport: "tcp".into()
        }
    );
    // RSA-2048 behind a SHA-384 suite, with a CertificateRequest
    let sh = hello([1; 32], 0x1302, &[(0x002b, vec![3, 4]), (0x0033, share(24, 97))]);
    let p = parse(&record(22, &sh), &[30, 80, 1200, 256 + 25, 69], false);
    assert_eq!(
        (p.negotiated().cert.label(), p.negotiated().group.label()),
        ("rsa2048", "secp384r1")
    );
    // not yet seen Finished: incomplete, unless the capture ended
    let p = parse(&record(22, &sh), &[30, 1200], false);
    assert!(!p.complete && p.negotiated().cert == OTHER);
    assert!(parse(&record(22, &sh), &[30, 1200], true).complete);
}

#[test]
fn tls13_retry_and_resumption() {
    let hrr = hello(
        HRR_RANDOM,
        0x1303,
        &[(0x002b, vec![3, 4]), (0x0033, 23u16.to_be_bytes().to_vec())],
    );
    let sh = hello(
        [2; 32],
        0x1303,
        &[(0x002b, vec![3, 4]), (0x0033, share(23, 65)), (0x0029, vec![0, 0])],
    );
    let mut plain = record(22, &hrr);
    plain.extend(record(20, &[1]));
    plain.extend(record(22, &sh)); // after change_cipher_spec, one ServerHello per record
    let p = parse(&plain, &[30, 53], false);
    assert!(p.complete && p.resumed);
    assert_eq!(
        p.negotiated(),
        Negotiated {
            version: "TLSv1.3".into(),
            cipher: "TLS_CHACHA20_POLY1305_SHA256".into(),
            group: "secp256r1".into(),
            cert: NONE.into(),
            resumed: true,
            transport: "tcp".into()
        }
    );
}

fn ec_cert(curve: &[u8]) -> Vec<u8> {
    fn tlv(tag: u8, body: &[u8]) -> Vec<u8> {
        let mut v = vec![tag];
        if body.len() < 128 {
            v.push(body.len() as u8);
        } else {
            v.extend_from_slice(&[0x82, (body.len() >> 8) as u8, body.len() as u8]);
        }
        v.extend_from_slice(body);
        v
    }
    let alg = [tlv(6, OID_EC), tlv(6, curve)].concat();
    let spki = [tlv(0x30, &alg), tlv(3, &[0; 66])].concat();
    let name = tlv(0x30, &tlv(0x31, b"x"));
    let tbs = [
        tlv(0xA0, &tlv(2, &[2])),
        tlv(2, &[1, 2, 3]),
        tlv(0x30, &tlv(6, &[1])),
        name.clone(),
        tlv(0x30, b"validity"),
        name,
        tlv(0x30, &spki),
    ]
    .concat();
    tlv(0x30, &[tlv(0x30, &tbs), tlv(0x30, b"sigalg"), tlv(3, b"sig")].concat())
}

#[test]
fn application_protocol_from_the_server_hello() {
    let alpn = |name: &[u8]| {
        let mut v = vec![0, name.len() as u8 + 1, name.len() as u8];
        v.extend_from_slice(name);
        (0x0010, v)
    };
    let tls12 = |ext: &[(u16, Vec<u8>)]| {
        let flight = [hello([1; 32], 0xC02B, ext), msg(14, &[])].concat();
        parse(&record(22, &flight), &[], false).protocol
    };
    assert_eq!(tls12(&[alpn(b"h2")]), AppProtocol::H2);
    assert_eq!(tls12(&[(0xff01, vec![0]), alpn(b"http/1.1")]), AppProtocol::Http1);
    assert_eq!(tls12(&[alpn(b"spdy/3")]), OTHER);
    assert_eq!(tls12(&[(0x0010, vec![0, 9, 8])]), OTHER); // cut short
    assert_eq!(tls12(&[]), AppProtocol::None);
    // TLS 1.3: the choice is in the encrypted flight, whatever the ServerHello carries
    let sh = hello(
        [1; 32],
        0x1301,
        &[(0x002b, vec![3, 4]), (0x0033, share(29, 32)), alpn(b"h2")],
    );
    assert_eq!(parse(&record(22, &sh), &[], false).protocol, AppProtocol::Encrypted);
    assert_eq!(parse(&[], &[], true).protocol, AppProtocol::Encrypted);
}

#[test]
fn dhe_groups_by_prime() {
    let ske = |p: &[u8]| [&[(p.len() >> 8) as u8, p.len() as u8][..], p, &[0, 1, 2]].concat();
    let dhe = Some(Kx::Dhe);
    // a server's own 2048-bit prime (top bit set), a 1024-bit one with a leading zero
    // byte, and sizes that are not counted as their own value
    let own = |bits: usize| {
        let mut p = vec![0x5a; bits / 8];
        p[0] = 0xc3;
        p
    };
    assert_eq!(ske_group(&ske(&own(2048)), dhe), "dhe2048");
    assert_eq!(ske_group(&ske(&[&[0][..], &own(1024)].concat()), dhe), "dhe1024");
    assert_eq!(ske_group(&ske(&own(3072)), dhe), "dhe3072");
    assert_eq!(ske_group(&ske(&own(4096)), dhe), "dhe4096");
    let mut odd = own(2048);
    odd[0] = 0x7f; // 2047 bits
    assert_eq!(ske_group(&ske(&odd), dhe), OTHER);
    assert_eq!(ske_group(&ske(&own(1280)), dhe), OTHER);
    // RFC 7919's ffdhe2048 is named as such, not by its size
    let mut ffdhe = vec![0xFF; 256];
    ffdhe[8..16].copy_from_slice(&[0xAD, 0xF8, 0x54, 0x58, 0xA2, 0xBB, 0x4A, 0x9A]);
    assert_eq!(ske_group(&ske(&ffdhe), dhe), "ffdhe2048");
    // RFC 3526's (OpenSSL's automatic DH parameters) likewise
    let mut modp = vec![0xFF; 384];
    modp[8..16].copy_from_slice(&[0xC9, 0x0F, 0xDA, 0xA2, 0x21, 0x68, 0xC2, 0x34]);
    assert_eq!(ske_group(&ske(&modp), dhe), "modp3072");
    // RFC 2409's 1024-bit prime has RFC 3526's form, but no group of OpenSSL's: by its size
    modp.truncate(128);
    assert_eq!(ske_group(&ske(&modp), dhe), "dhe1024");
    assert_eq!(ske_group(&ske(&[0, 0]), dhe), OTHER);
}

#[test]
fn tls12_full_and_resumed() {
    let sh = hello([1; 32], 0xC02B, &[(0xff01, vec![0])]);
    let cert = ec_cert(OID_P384);
    let mut chain = vec![0, 0, 0];
    chain.extend_from_slice(&[0, (cert.len() >> 8) as u8, cert.len() as u8]);
    chain.extend_from_slice(&cert);
    let n = chain.len() - 3;
    chain[..3].copy_from_slice(&[0, (n >> 8) as u8, n as u8]);
    let ske = [vec![3, 0, 29, 32], vec![5; 32]].concat();
    let flight = [
        sh.clone(),
        msg(HS_CERTIFICATE, &chain),
        msg(HS_SERVER_KEY_EXCHANGE, &ske),
        msg(14, &[]),
    ]
    .concat();
    let p = parse(&record(22, &flight), &[], false);
    assert!(p.complete);
    assert_eq!(
        p.negotiated(),
        Negotiated {
            version: "TLSv1.2".into(),
            cipher: "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256".into(),
            group: "x25519".into(),
            cert: "ecdsa_p384".into(),
            resumed: false,
            transport: "tcp".into()
        }
    );
    // the flight split over records and cut short in the certificate: not complete
    let all = record(22, &flight);
    assert!(!parse(&all[..100], &[], false).complete);
    // RSA key transport: no ServerKeyExchange
    let sh = hello([1; 32], 0x002F, &[]);
    let flight = [sh, msg(HS_CERTIFICATE, &chain), msg(14, &[])].concat();
    let l = parse(&record(22, &flight), &[], false).negotiated();
    assert_eq!(
        (l.cipher.label(), l.group.label()),
        ("TLS_RSA_WITH_AES_128_CBC_SHA", "rsa")
    );
    // resumed: ServerHello, change_cipher_spec, encrypted Finished
    let sh = hello([1; 32], 0xC030, &[]);
    let mut plain = record(22, &sh);
    plain.extend(record(20, &[1]));
    plain.extend(record(22, &[0; 40]));
    let p = parse(&plain, &[], false);
    assert!(p.complete);
    assert_eq!(
        p.negotiated(),
        Negotiated {
            version: "TLSv1.2".into(),
            cipher: "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384".into(),
            group: NONE.into(),
            cert: NONE.into(),
            resumed: true,
            transport: "tcp".into()
        }
    );
}

/// Found by fuzz::truncations_at_every_length: a TLS 1.3 ServerHello cut inside its
/// key_share was taken as one without a key share, and with the encrypted records seen
/// the parse said complete with group `none`. Cut inside supported_versions, it read as
/// TLS 1.2. A ServerHello counts once it is whole.
#[test]
fn server_hello_cut_short_is_not_seen_yet() {
    let sh = hello([1; 32], 0x1301, &[(0x002b, vec![3, 4]), (0x0033, share(29, 32))]);
    let sealed = [40, 600, 71 + 25, 53];
    for cut in [sh.len() - 10, sh.len() - 43] {
        let p = parse(&record(22, &sh)[..5 + cut], &sealed, false);
        assert!(!p.hello && !p.complete, "cut at {cut}: {p:?}");
    }
    let p = parse(&record(22, &sh), &sealed, false);
    assert_eq!((p.negotiated().group.label(), p.complete), ("x25519", true));
}

#[test]
fn alerts_and_garbage() {
    let p = parse(&record(21, &[2, 40]), &[], true);
    assert!(p.alert == Some(40) && !p.hello);
    assert_eq!(p.negotiated(), Negotiated::UNKNOWN_TCP);
    for junk in [
        &b"HTTP/1.1 400 Bad Request\r\n"[..],
        &[22, 3, 3, 0xff, 0xff, 2, 0, 0],
        &[],
    ] {
        assert_eq!(parse(junk, &[1, 2, 3], true).negotiated(), Negotiated::UNKNOWN_TCP);
    }
    assert_eq!(suite(0x0005).map(|s| s.name), None);
    assert_eq!(group_name(0x6399), "X25519Kyber768Draft00");
    assert_eq!(group_name(0x6398), OTHER);
    assert_eq!(version_name(0x7f1c), OTHER);
}

#[test]
fn signature_lengths() {
    assert_eq!(cert_from_signature(256), "rsa2048");
    assert_eq!(cert_from_signature(512), "rsa4096");
    assert_eq!(cert_from_signature(71), "ecdsa_p256");
    assert_eq!(cert_from_signature(103), "ecdsa_p384");
    assert_eq!(cert_from_signature(64), "ed25519");
    assert_eq!(cert_from_signature(200), OTHER);
}
