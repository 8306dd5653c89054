//! Windows and host costs the report's unit tests share.
use crate::{
    bpf::conn::ClosedBy,
    clients::{join::Answer, policy::Outcome},
    hostcost::HostCosts,
    metrics::LabelValue,
    views::snapshot::{Clients, Config, Port, Proc},
    wire::{tls::hello::Resumption, Negotiated, Transport},
};

pub fn cfg(group: &str, cert: &str, cipher: &str, resumed: bool, count: f64, ms_each: f64) -> Config {
    Config {
        negotiated: Negotiated {
            version: "TLSv1.3".into(),
            cipher: cipher.into(),
            group: group.into(),
            cert: cert.into(),
            resumed,
            ..Negotiated::UNKNOWN_TCP
        },
        handshakes: count,
        timed: count,
        cpu: count * ms_each / 1e3,
        // every one within a fifth of the mean
        cpu_buckets: vec![
            (ms_each * 0.8e-3, 0.0),
            (ms_each * 1.2e-3, count),
            (f64::INFINITY, count),
        ],
    }
}

/// The same configuration's handshakes over QUIC (HTTP/3): their certificate not seen.
pub fn quic(c: Config) -> Config {
    Config {
        negotiated: Negotiated {
            transport: Transport::Quic,
            cert: if c.negotiated.resumed { "none" } else { "other" }.into(),
            ..c.negotiated
        },
        ..c
    }
}

pub fn host() -> HostCosts {
    let mut h = HostCosts {
        library: "libcrypto.so.3 (test)".into(),
        ..Default::default()
    };
    h.group.insert("x25519".into(), 50e-6);
    h.group.insert("secp384r1".into(), 900e-6);
    h.sign.insert("ecdsa_p256".into(), 30e-6);
    h.sign.insert("rsa2048".into(), 1000e-6);
    h.record.insert("aes_128_gcm".into(), 4e-6);
    h.record.insert("aes_128_cbc_hmac_sha1".into(), 20e-6);
    h
}

pub fn proc_with(configs: Vec<Config>) -> Proc {
    Proc {
        comm: "nginx".into(),
        process_cpu: 10.0,
        configs,
        ..Default::default()
    }
}

/// ClientHellos of a window: `hellos` read (no SNI), offers (offer, value, n), policy
/// outcomes (policy, outcome, n), resumptions (offered, result, n).
pub fn clients(
    hellos: f64,
    offers: &[(&str, &str, f64)],
    policy: &[(&str, &str, f64)],
    resumptions: &[(&str, &str, f64)],
) -> Clients {
    let pair = |a: &str, b: &str| (a.to_string(), b.to_string());
    let mut c = Clients::default();
    c.hellos.insert("none".into(), hellos);
    for (o, v, n) in offers {
        c.offers.insert(pair(o, v), *n);
    }
    for (p, o, n) in policy {
        c.policy.insert((p.to_string(), Outcome::parse(o).unwrap()), *n);
    }
    for (o, r, n) in resumptions {
        c.resumptions
            .insert((Resumption::parse(o).unwrap(), Answer::parse(r).unwrap()), *n);
    }
    c
}

/// The process with these ClientHellos on its port 443.
pub fn seen_by(mut p: Proc, c: Clients) -> Proc {
    p.ports.entry("443".into()).or_default().clients = c;
    p
}

/// The process with these failed handshakes (port, by, reason, n), counted in its `failed`
/// too, and these connections without TLS (port, kind, n), by their labels.
pub fn failing(mut p: Proc, failed: &[(&str, &str, &str, f64)], untls: &[(&str, &str, f64)]) -> Proc {
    use crate::{
        bpf::abi::hello_untls,
        wire::failure::{By, Failure, Reason},
    };
    for (port, by, reason, n) in failed {
        let f = Failure::new(By::parse(by).unwrap(), Reason::parse(reason).unwrap());
        *p.failures.handshakes.entry((port.to_string(), f)).or_default() += n;
        p.failed += n;
    }
    for (port, kind, n) in untls {
        let k = hello_untls::parse(kind).unwrap();
        *p.failures.without_tls.entry((port.to_string(), k)).or_default() += n;
    }
    p
}

/// The process with these failing clients (port, SNI, reason, what they lacked, n), whose
/// ClientHellos are counted on their port too, by their labels.
pub fn failing_clients(mut p: Proc, failed: &[(&str, &str, &str, &str, f64)]) -> Proc {
    use crate::{clients::lacks::Lacks, views::failures::ClientFailure, wire::failure::Reason};
    for (port, sni, reason, lacks, n) in failed {
        let c = ClientFailure {
            port: port.to_string(),
            sni: sni.to_string(),
            reason: Reason::parse(reason).unwrap(),
            lacks: Lacks::parse(lacks).unwrap(),
        };
        *p.failures.clients.entry(c).or_default() += n;
        let hellos = &mut p.ports.entry(port.to_string()).or_default().clients.hellos;
        *hellos.entry(sni.to_string()).or_default() += n;
    }
    p
}

/// nginx on port 443 over TCP (200 handshakes, 2.5 ms each, five requests per connection,
/// the server closing) and over QUIC (800 handshakes, 3.0 ms each): the same costly
/// configuration (QUIC's certificate not seen).
pub fn tcp_and_quic() -> Proc {
    let tls = || cfg("secp384r1", "rsa2048", "TLS_AES_256_GCM_SHA384", false, 200.0, 2.5);
    let mut p = proc_with(vec![
        tls(),
        quic(Config {
            handshakes: 800.0,
            timed: 800.0,
            cpu: 800.0 * 3.0e-3,
            ..tls()
        }),
    ]);
    p.full = 1000.0;
    let mut port = Port {
        requests: 1000.0,
        ended: 200.0,
        time_wait: 200.0,
        quic: 800.0,
        ..Default::default()
    };
    port.closed_by.insert(ClosedBy::Server, 200.0);
    port.protocols.insert("http/1.1".into(), 200.0);
    port.request_buckets = (0..=10).map(|k| (k as f64, if k >= 5 { 200.0 } else { 0.0 })).collect();
    p.ports.insert("443".into(), port);
    p
}
