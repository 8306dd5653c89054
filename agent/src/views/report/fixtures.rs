//! Windows and host costs the report's unit tests share.
use super::hostcost::HostCosts;
use crate::views::snapshot::{Clients, Config, Proc};

pub fn cfg(group: &str, cert: &str, cipher: &str, resumed: bool, count: f64, ms_each: f64) -> Config {
    Config {
        version: "TLSv1.3".into(),
        cipher: cipher.into(),
        group: group.into(),
        cert: cert.into(),
        resumed,
        transport: "tcp".into(),
        handshakes: count,
        timed: count,
        cpu: count * ms_each / 1e3,
    }
}

/// The same configuration's handshakes over QUIC (HTTP/3).
pub fn quic(c: Config) -> Config {
    Config {
        transport: "quic".into(),
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
        c.policy.insert(pair(p, o), *n);
    }
    for (o, r, n) in resumptions {
        c.resumptions.insert(pair(o, r), *n);
    }
    c
}

/// The process with these ClientHellos on its port 443.
pub fn seen_by(mut p: Proc, c: Clients) -> Proc {
    p.ports.entry("443".into()).or_default().clients = c;
    p
}
