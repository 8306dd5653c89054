//! The record-cipher rule: CBC and 3DES suites against AES-GCM.
use super::{finish, with_clients, would_fail, Finding, MIN_CIPHER_HANDSHAKES};
use crate::{
    cpu::Category,
    hostcost::HostCosts,
    views::{
        snapshot::{Config, Proc},
        top::short_cipher,
    },
};

/// Record protection in CBC mode with HMAC (or 3DES): several times the CPU of AES-GCM
/// per byte on CPUs with AES-NI and carry-less multiply.
pub fn record_ciphers(p: &Proc, secs: f64, host: Option<&HostCosts>) -> Option<Finding> {
    let slow =
        |c: &Config| c.negotiated.cipher.label().contains("_CBC_") || c.negotiated.cipher.label().contains("3DES");
    let all = p.count(|_| true);
    let n = p.count(slow);
    if n < MIN_CIPHER_HANDSHAKES || all <= 0.0 || n / all < 0.05 {
        return None;
    }
    let share = n / all;
    // Record crypto of the connections with slow ciphers: the crypto category, shared
    // out by handshakes (the primitives are not named in stripped libraries).
    let crypto = p.cpu_in(Category::Crypto);
    let slow_cpu = crypto * share;
    let proc_cpu = p.process_cpu.max(1e-9);
    if slow_cpu < 0.01 * proc_cpu {
        return None;
    }
    let des = p.configs.iter().any(|c| c.negotiated.cipher.label().contains("3DES"));
    // RSA key transport (TLS_RSA_WITH_…): no forward secrecy, and the suites to drop.
    let rsa_kex = p
        .configs
        .iter()
        .any(|c| slow(c) && c.negotiated.cipher.label().starts_with("TLS_RSA_WITH_"));
    let sha256 = p
        .configs
        .iter()
        .any(|c| slow(c) && c.negotiated.cipher.label().ends_with("SHA256"));
    let ratio = host.and_then(|h| {
        let key = if des {
            "des_ede3_cbc_hmac_sha1"
        } else if sha256 {
            "aes_128_cbc_hmac_sha256"
        } else {
            "aes_128_cbc_hmac_sha1"
        };
        Some((
            h.record.get("aes_128_gcm")? / h.record.get(key)?,
            key,
            h.library.clone(),
        ))
    });
    let mut ciphers: Vec<String> = p
        .configs
        .iter()
        .filter(|c| slow(c))
        .map(|c| short_cipher(c.negotiated.cipher.label()))
        .collect();
    ciphers.sort();
    ciphers.dedup();
    let saving = ratio.as_ref().map(|(r, _, _)| slow_cpu / secs * (1.0 - r).max(0.0));
    let mut numbers = vec![
        ("slow_cipher_share", share),
        ("slow_cipher_cpu_cores", slow_cpu / secs),
        ("slow_cipher_cpu_share", slow_cpu / proc_cpu),
    ];
    if let Some((r, _, _)) = &ratio {
        numbers.push(("gcm_to_slow_cost_ratio", *r));
    }
    let policies: &[&str] = if rsa_kex {
        &["no_cbc_3des", "no_rsa_kex"]
    } else {
        &["no_cbc_3des"]
    };
    let f = finish(
        Finding {
            rule: "record_cipher",
            comm: p.comm.clone(),
            port: None,
            title: format!(
                "{}: {:.0}% of connections use slow record protection ({})",
                p.comm,
                share * 100.0,
                ciphers.join(", ")
            ),
            evidence: format!(
                "{:.0}% of handshakes negotiated {}; their share of the record crypto is about {:.1}% of the process's CPU{}.",
                share * 100.0,
                ciphers.join(", "),
                slow_cpu / proc_cpu * 100.0,
                ratio
                    .as_ref()
                    .map(|(r, k, _)| format!(
                        "; on this host AES-128-GCM costs {:.0}% of {k} per 16 KiB record",
                        r * 100.0
                    ))
                    .unwrap_or_default()
            ),
            fix: "Put AEAD suites first and drop CBC and 3DES where clients allow (nginx `ssl_ciphers \
                  ECDHE+AESGCM:ECDHE+CHACHA20; ssl_prefer_server_ciphers on;`, Apache `SSLCipherSuite` and \
                  `SSLHonorCipherOrder on`); TLS 1.3 has only AEAD suites."
                .to_string()
                + if rsa_kex {
                    " Drop RSA key exchange too (suites TLS_RSA_WITH_…, `!kRSA` in OpenSSL's cipher strings): it \
                     has no forward secrecy."
                } else {
                    ""
                },
            saving_cpu: saving,
            saving_share: None,
            clients: None,
            basis: match &ratio {
                Some((_, k, lib)) => format!(
                    "if these connections used AES-128-GCM; record crypto CPU shared out by handshakes, and the \
                     GCM-to-{k} cost ratio measured on this host with {lib}"
                ),
                None => "not estimated: no host measurement".into(),
            },
            numbers,
        },
        p,
        secs,
    );
    Some(with_clients(f, would_fail(p, policies, false)))
}
