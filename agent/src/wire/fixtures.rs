//! Server flights the wire tests share.

/// A TLS 1.2 resumed flight: ServerHello (TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256),
/// change_cipher_spec, encrypted Finished.
pub fn resumed12() -> Vec<u8> {
    let mut sh = vec![2, 0, 0, 70, 3, 3];
    sh.extend_from_slice(&[1; 32]);
    sh.push(32);
    sh.extend_from_slice(&[5; 32]);
    sh.extend_from_slice(&[0xC0, 0x2F, 0]);
    let mut v = vec![22, 3, 3, 0, sh.len() as u8];
    v.extend_from_slice(&sh);
    v.extend_from_slice(&[20, 3, 3, 0, 1, 1, 22, 3, 3, 0, 40]);
    v.extend_from_slice(&[0; 40]);
    v
}

/// A server's output as bpf/wire.h captures it: `plain` the records before its first
/// encrypted one (TLS 1.2's encrypted Finished included: the capture copies it), `sealed`
/// the lengths of the encrypted records after it.
#[derive(Debug, Clone)]
pub struct Flight {
    pub name: &'static str,
    pub plain: Vec<u8>,
    pub sealed: Vec<u16>,
}

pub fn record(t: u8, body: &[u8]) -> Vec<u8> {
    let mut v = vec![t, 3, 3, (body.len() >> 8) as u8, body.len() as u8];
    v.extend_from_slice(body);
    v
}

pub fn msg(t: u8, body: &[u8]) -> Vec<u8> {
    let mut v = vec![t, (body.len() >> 16) as u8, (body.len() >> 8) as u8, body.len() as u8];
    v.extend_from_slice(body);
    v
}

/// SHA-256("HelloRetryRequest"), the random of a HelloRetryRequest.
pub const HRR_RANDOM: [u8; 32] = super::tls::HRR_RANDOM;

/// A ServerHello message.
pub fn server_hello(random: [u8; 32], cipher: u16, exts: &[(u16, Vec<u8>)]) -> Vec<u8> {
    let mut b = vec![3, 3];
    b.extend_from_slice(&random);
    b.push(32);
    b.extend_from_slice(&[7; 32]);
    b.extend_from_slice(&cipher.to_be_bytes());
    b.push(0);
    let mut e = Vec::new();
    for (t, body) in exts {
        e.extend_from_slice(&t.to_be_bytes());
        e.extend_from_slice(&(body.len() as u16).to_be_bytes());
        e.extend_from_slice(body);
    }
    b.extend_from_slice(&(e.len() as u16).to_be_bytes());
    b.extend_from_slice(&e);
    msg(2, &b)
}

/// A TLS 1.3 key_share extension body.
pub fn key_share(group: u16, key: usize) -> Vec<u8> {
    let mut v = group.to_be_bytes().to_vec();
    v.extend_from_slice(&(key as u16).to_be_bytes());
    v.extend(std::iter::repeat_n(9, key));
    v
}

fn tlv(tag: u8, body: &[u8]) -> Vec<u8> {
    let mut v = vec![tag];
    match body.len() {
        n @ 0..=127 => v.push(n as u8),
        n @ 128..=255 => v.extend_from_slice(&[0x81, n as u8]),
        n => v.extend_from_slice(&[0x82, (n >> 8) as u8, n as u8]),
    }
    v.extend_from_slice(body);
    v
}

/// An X.509 certificate around a subjectPublicKeyInfo (nothing else in it is checked).
pub fn cert_with_spki(spki: &[u8]) -> Vec<u8> {
    let name = tlv(0x30, &tlv(0x31, b"x"));
    let tbs = [
        tlv(0xA0, &tlv(2, &[2])),
        tlv(2, &[1, 2, 3]),
        tlv(0x30, &tlv(6, &[1])),
        name.clone(),
        tlv(0x30, b"validity"),
        name,
        spki.to_vec(),
    ]
    .concat();
    tlv(0x30, &[tlv(0x30, &tbs), tlv(0x30, b"sigalg"), tlv(3, b"sig")].concat())
}

/// An EC subjectPublicKeyInfo on the curve of this OID.
pub fn ec_spki(curve: &[u8]) -> Vec<u8> {
    const OID_EC: &[u8] = &[0x2A, 0x86, 0x48, 0xCE, 0x3D, 0x02, 0x01];
    let alg = [tlv(6, OID_EC), tlv(6, curve)].concat();
    tlv(0x30, &[tlv(0x30, &alg), tlv(3, &[0; 66])].concat())
}
pub const OID_P384: &[u8] = &[0x2B, 0x81, 0x04, 0x00, 0x22];

/// A TLS 1.2 Certificate message body.
pub fn chain(certs: &[Vec<u8>]) -> Vec<u8> {
    let mut list = Vec::new();
    for c in certs {
        list.extend_from_slice(&[(c.len() >> 16) as u8, (c.len() >> 8) as u8, c.len() as u8]);
        list.extend_from_slice(c);
    }
    let mut v = vec![(list.len() >> 16) as u8, (list.len() >> 8) as u8, list.len() as u8];
    v.extend(list);
    v
}

/// The CA certificates of the machine (DER), the real X.509 at hand; none if absent.
pub fn system_certs() -> Vec<Vec<u8>> {
    use rustls_pki_types::{pem::PemObject, CertificateDer};
    CertificateDer::pem_file_iter("/etc/ssl/certs/ca-certificates.crt")
        .map(|it| it.filter_map(Result::ok).map(|c| c.to_vec()).collect())
        .unwrap_or_default()
}

/// Flights built by hand, as the parser's tests build them: TLS 1.3 full and after a
/// HelloRetryRequest with resumption, TLS 1.2 ECDHE, DHE, RSA key transport, resumed by
/// session id and by ticket, and an alert; plus a TLS 1.2 flight around each of a few
/// real certificates.
pub fn built() -> Vec<Flight> {
    let f = |name, plain: Vec<u8>, sealed: &[u16]| Flight {
        name,
        plain,
        sealed: sealed.to_vec(),
    };
    let tls13 = |cipher, group, key| {
        server_hello(
            [1; 32],
            cipher,
            &[(0x002b, vec![3, 4]), (0x0033, key_share(group, key))],
        )
    };
    let ccs = record(20, &[1]);
    let leaf = cert_with_spki(&ec_spki(OID_P384));
    let tls12 = |cipher: u16, leaf: &[u8], ske: Option<Vec<u8>>| {
        let mut m = [
            server_hello([1; 32], cipher, &[(0xff01, vec![0])]),
            msg(11, &chain(&[leaf.to_vec()])),
        ]
        .concat();
        if let Some(ske) = ske {
            m.extend(msg(12, &ske));
        }
        m.extend(msg(14, &[]));
        record(22, &m)
    };
    let ecdhe = [vec![3, 0, 29, 32], vec![5; 32], vec![4, 3, 0, 2, 0xAA, 0xBB]].concat();
    let mut prime = vec![
        0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xAD, 0xF8, 0x54, 0x58, 0xA2, 0xBB, 0x4A, 0x9A,
    ];
    prime.extend(std::iter::repeat_n(0x5A, 256 - 16 - 8));
    prime.extend([0xFF; 8]);
    let dhe = [vec![1, 0], prime, vec![0, 1, 2, 0, 1, 9]].concat();
    let hrr = server_hello(
        HRR_RANDOM,
        0x1303,
        &[(0x002b, vec![3, 4]), (0x0033, 23u16.to_be_bytes().to_vec())],
    );
    let psk = server_hello(
        [2; 32],
        0x1303,
        &[(0x002b, vec![3, 4]), (0x0033, key_share(23, 65)), (0x0029, vec![0, 0])],
    );
    let mut out = vec![
        f(
            "tls13_full",
            [record(22, &tls13(0x1301, 29, 32)), ccs.clone()].concat(),
            &[40, 600, 96, 53],
        ),
        f(
            "tls13_certreq",
            record(22, &tls13(0x1302, 24, 97)),
            &[30, 80, 1200, 281, 69],
        ),
        f(
            "tls13_retry_resumed",
            [record(22, &hrr), ccs.clone(), record(22, &psk)].concat(),
            &[30, 53],
        ),
        f("tls12_ecdhe", tls12(0xC02B, &leaf, Some(ecdhe)), &[]),
        f("tls12_dhe", tls12(0x009E, &leaf, Some(dhe)), &[]),
        f("tls12_rsa", tls12(0x002F, &leaf, None), &[]),
        f("tls12_resumed", resumed12(), &[]),
        f(
            "tls12_ticket",
            [
                record(
                    22,
                    &[
                        server_hello([3; 32], 0xC030, &[(0x0023, vec![])]),
                        msg(4, &[0, 0, 1, 0, 0, 2, 1, 2]),
                    ]
                    .concat(),
                ),
                ccs,
                record(22, &[0; 40]),
            ]
            .concat(),
            &[],
        ),
        f("alert", record(21, &[2, 40]), &[]),
    ];
    for c in system_certs().iter().step_by(37).take(4) {
        out.push(f("tls12_system_cert", tls12(0xC02F, c, Some(vec![3, 0, 23, 0])), &[]));
    }
    out
}

/// Real flights: rustls handshakes in memory (keys made for the test, certificates around
/// their public keys that the client does not check): TLS 1.3 full, resumed and after a
/// HelloRetryRequest, TLS 1.2 full and resumed.
pub fn rustls() -> Vec<Flight> {
    use std::sync::Arc;

    use rustls::{
        client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier},
        crypto::{ring as provider, CryptoProvider},
        pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName, UnixTime},
        server::{ClientHello, ResolvesServerCert},
        sign::CertifiedKey,
        ClientConfig, ClientConnection, DigitallySignedStruct, ServerConfig, ServerConnection, SignatureScheme,
        SupportedCipherSuite, SupportedProtocolVersion,
    };

    #[derive(Debug)]
    struct AnyCert;
    impl ServerCertVerifier for AnyCert {
        fn verify_server_cert(
            &self,
            _: &CertificateDer<'_>,
            _: &[CertificateDer<'_>],
            _: &ServerName<'_>,
            _: &[u8],
            _: UnixTime,
        ) -> Result<ServerCertVerified, rustls::Error> {
            Ok(ServerCertVerified::assertion())
        }
        fn verify_tls12_signature(
            &self,
            _: &[u8],
            _: &CertificateDer<'_>,
            _: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, rustls::Error> {
            Ok(HandshakeSignatureValid::assertion())
        }
        fn verify_tls13_signature(
            &self,
            _: &[u8],
            _: &CertificateDer<'_>,
            _: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, rustls::Error> {
            Ok(HandshakeSignatureValid::assertion())
        }
        fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
            provider::default_provider()
                .signature_verification_algorithms
                .supported_schemes()
        }
    }
    #[derive(Debug)]
    struct OneKey(Arc<CertifiedKey>);
    impl ResolvesServerCert for OneKey {
        fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
            Some(self.0.clone())
        }
    }

    let rng = ring::rand::SystemRandom::new();
    let key = |pkcs8: &[u8]| {
        let der = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(pkcs8.to_vec()));
        let signer = provider::sign::any_supported_type(&der).unwrap();
        let cert = cert_with_spki(&signer.public_key().unwrap());
        Arc::new(CertifiedKey::new(vec![CertificateDer::from(cert)], signer))
    };
    use ring::signature::{
        EcdsaKeyPair, Ed25519KeyPair, ECDSA_P256_SHA256_ASN1_SIGNING, ECDSA_P384_SHA384_ASN1_SIGNING,
    };
    let p256 = key(EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, &rng)
        .unwrap()
        .as_ref());
    let p384 = key(EcdsaKeyPair::generate_pkcs8(&ECDSA_P384_SHA384_ASN1_SIGNING, &rng)
        .unwrap()
        .as_ref());
    let ed25519 = key(Ed25519KeyPair::generate_pkcs8(&rng).unwrap().as_ref());

    let prov = |suites: &[SupportedCipherSuite], kx: &[&'static dyn rustls::crypto::SupportedKxGroup]| {
        Arc::new(CryptoProvider {
            cipher_suites: suites.to_vec(),
            kx_groups: kx.to_vec(),
            ..provider::default_provider()
        })
    };
    let configs = |version: &'static SupportedProtocolVersion,
                   suites: &[SupportedCipherSuite],
                   server_kx: &[&'static dyn rustls::crypto::SupportedKxGroup],
                   client_kx: &[&'static dyn rustls::crypto::SupportedKxGroup],
                   key: &Arc<CertifiedKey>| {
        let server = ServerConfig::builder_with_provider(prov(suites, server_kx))
            .with_protocol_versions(&[version])
            .unwrap()
            .with_no_client_auth()
            .with_cert_resolver(Arc::new(OneKey(key.clone())));
        let client = ClientConfig::builder_with_provider(prov(suites, client_kx))
            .with_protocol_versions(&[version])
            .unwrap()
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AnyCert))
            .with_no_client_auth();
        (Arc::new(server), Arc::new(client))
    };
    // One handshake: the server's output, as captured.
    let run = |(server, client): &(Arc<ServerConfig>, Arc<ClientConfig>)| {
        let mut c = ClientConnection::new(client.clone(), ServerName::try_from("fuzz.test").unwrap()).unwrap();
        let mut s = ServerConnection::new(server.clone()).unwrap();
        let mut rounds = Vec::new();
        for _ in 0..8 {
            let mut to_server = Vec::new();
            while c.wants_write() {
                c.write_tls(&mut to_server).unwrap();
            }
            let mut rd = &to_server[..];
            while !rd.is_empty() {
                s.read_tls(&mut rd).unwrap();
                s.process_new_packets().unwrap();
            }
            s.process_new_packets().unwrap();
            let mut to_client = Vec::new();
            while s.wants_write() {
                s.write_tls(&mut to_client).unwrap();
            }
            let mut rd = &to_client[..];
            while !rd.is_empty() {
                c.read_tls(&mut rd).unwrap();
                c.process_new_packets().unwrap();
            }
            rounds.push(to_client);
            if !c.is_handshaking() && !s.is_handshaking() && !c.wants_write() {
                break;
            }
        }
        // plaintext records until the first encrypted one; headers after it; over once the
        // client answered an encrypted flight (TLS 1.3) or the handshake is (TLS 1.2)
        let (mut plain, mut sealed) = (Vec::new(), Vec::new());
        for out in rounds {
            if !sealed.is_empty() {
                break;
            }
            let mut rest = &out[..];
            while rest.len() >= 5 {
                let n = (5 + (usize::from(rest[3]) << 8 | usize::from(rest[4]))).min(rest.len());
                if rest[0] == 23 || !sealed.is_empty() {
                    sealed.push((n - 5) as u16);
                } else {
                    plain.extend_from_slice(&rest[..n]);
                }
                rest = &rest[n..];
            }
        }
        (plain, sealed)
    };
    use provider::{cipher_suite::*, kx_group::*};
    let mut out = Vec::new();
    let mut add = |name, (plain, sealed)| out.push(Flight { name, plain, sealed });
    let tls13 = configs(
        &rustls::version::TLS13,
        &[TLS13_AES_128_GCM_SHA256],
        &[X25519],
        &[X25519],
        &p256,
    );
    add("rustls13_p256", run(&tls13));
    add("rustls13_resumed", run(&tls13));
    let retry = configs(
        &rustls::version::TLS13,
        &[TLS13_CHACHA20_POLY1305_SHA256],
        &[SECP384R1],
        &[X25519, SECP384R1],
        &ed25519,
    );
    add("rustls13_retry_ed25519", run(&retry));
    let tls12 = configs(
        &rustls::version::TLS12,
        &[TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384],
        &[SECP256R1],
        &[SECP256R1],
        &p384,
    );
    add("rustls12_p384", run(&tls12));
    add("rustls12_resumed", run(&tls12));
    out
}

/// Every flight at hand.
pub fn all() -> Vec<Flight> {
    [built(), rustls()].concat()
}

/// The connection of `wire_event` (its conn_life.id: CPU 1, its 42nd).
pub const WIRE_CONN: u64 = 0x0001_0000_0000_002a;

/// A wire event of the kernel's on connection WIRE_CONN.
pub fn wire_event(kind: crate::bpf::wire::wire_ev, flags: u8, data: &[u8]) -> crate::bpf::wire::WireEvent {
    crate::bpf::wire::WireEvent {
        conn_id: WIRE_CONN,
        tgid: 7,
        netns: 1,
        port: 8443,
        kind,
        flags,
        offset: 0,
        data: data.to_vec(),
    }
}
