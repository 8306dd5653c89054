//! Handshake rules: session resumption, the key-exchange group, the certificate.
use super::{dominant, finish, is_full, ms, Finding, MIN_EVENTS, MIN_GAIN};
use crate::views::{report::hostcost::HostCosts, snapshot::Proc};

/// Session resumption: full handshakes that a resumed one could replace.
pub fn resumption(p: &Proc, secs: f64, host: Option<&HostCosts>) -> Option<Finding> {
    let full = p.count(is_full);
    let resumed = p.count(|c| c.resumed);
    let share = resumed / (full + resumed).max(1.0);
    if full < MIN_EVENTS || share >= 0.5 {
        return None;
    }
    let c_full = p.mean_cpu(is_full)?;
    let measured = p.mean_cpu(|c| c.resumed).filter(|_| p.timed(|c| c.resumed) >= 5.0);
    // Without resumed handshakes to measure: a resumed handshake skips the certificate
    // signature (and, in TLS 1.2, the key exchange too).
    let estimated = || -> Option<f64> {
        let d = dominant(p)?;
        let host = host?;
        let mut skip = *host.sign.get(&d.cert)?;
        if d.version != "TLSv1.3" {
            skip += host.group.get(&d.group).copied().unwrap_or(0.0);
        }
        Some((c_full - skip).max(0.0))
    };
    let (c_res, basis) = match measured {
        Some(m) => (
            Some(m),
            "resumed handshakes of this process measured in the window".to_string(),
        ),
        None => match estimated() {
            Some(e) => (
                Some(e),
                format!(
                    "no resumed handshake to measure: a full handshake less the signature{} measured on this host",
                    if dominant(p).is_some_and(|d| d.version != "TLSv1.3") {
                        " and key exchange"
                    } else {
                        ""
                    }
                ),
            ),
            None => (
                None,
                "not estimated: no resumed handshake and no host measurement".to_string(),
            ),
        },
    };
    let full_rate = full / secs;
    let saving = c_res.map(|r| full_rate * (c_full - r).max(0.0));
    let mut numbers = vec![
        ("full_per_second", full_rate),
        ("resumed_share", share),
        ("cpu_per_full_seconds", c_full),
    ];
    if let Some(r) = c_res {
        numbers.push(("cpu_per_resumed_seconds", r));
    }
    let none = resumed == 0.0;
    Some(finish(
        Finding {
            rule: "resumption",
            comm: p.comm.clone(),
            port: None,
            title: format!(
                "{}: {:.0}% of handshakes are full; session resumption would skip most of their cost",
                p.comm,
                (1.0 - share) * 100.0
            ),
            evidence: format!(
                "{full_rate:.1} full handshakes/s at {} of CPU each{}; {:.0}% resumed{}.",
                ms(c_full),
                c_res.map(|r| format!(", a resumed one {}", ms(r))).unwrap_or_default(),
                share * 100.0,
                if none {
                    ": none at all, so either the server does not offer resumption or its clients never return with a session"
                } else {
                    ""
                }
            ),
            fix: "Offer resumption: a shared session cache and session tickets with keys shared by all \
                  workers and hosts (nginx `ssl_session_cache shared:SSL:10m; ssl_session_tickets on;`, \
                  Apache `SSLSessionCache shmcb:…` and `SSLSessionTickets on`, HAProxy `tune.ssl.cachesize`). \
                  Load generators such as ab and h2load do not resume; browsers and most HTTP clients do."
                .into(),
            saving_cpu: saving,
            saving_share: None,
            basis: format!("upper bound, if every full handshake were resumed; {basis}"),
            numbers,
        },
        p,
        secs,
    ))
}

/// The key-exchange group: each non-X25519 group's extra cost per handshake.
pub fn groups(p: &Proc, secs: f64, host: Option<&HostCosts>) -> Vec<Finding> {
    let full = p.count(is_full);
    let mut out = Vec::new();
    let mut seen: Vec<&str> = p.configs.iter().map(|c| c.group.as_str()).collect();
    seen.sort();
    seen.dedup();
    for g in seen {
        if matches!(g, "x25519" | "rsa" | "other" | "none" | "") {
            continue;
        }
        let n_full = p.count(|c| is_full(c) && c.group == g);
        if n_full < MIN_EVENTS || n_full < 0.1 * full {
            continue;
        }
        let Some(mean_g) = p.mean_cpu(|c| is_full(c) && c.group == g) else {
            continue;
        };
        let cert = dominant(p).map(|d| d.cert.clone()).unwrap_or_default();
        let in_process = (p.timed(|c| is_full(c) && c.group == "x25519" && c.cert == cert) >= MIN_EVENTS)
            .then(|| {
                let with = p.mean_cpu(|c| is_full(c) && c.group == g && c.cert == cert)?;
                let x = p.mean_cpu(|c| is_full(c) && c.group == "x25519" && c.cert == cert)?;
                Some((
                    with - x,
                    "X25519 handshakes of this process with the same certificate".to_string(),
                ))
            })
            .flatten();
        let on_host = || -> Option<(f64, String)> {
            let h = host?;
            Some((
                h.group.get(g)? - h.group.get("x25519")?,
                format!("{g} and X25519 key exchanges measured on this host with {}", h.library),
            ))
        };
        let Some((diff, basis)) = in_process.or_else(on_host) else {
            continue;
        };
        // A host measurement cannot save more than the handshake costs.
        let diff = diff.min(mean_g);
        if diff < MIN_GAIN * mean_g {
            continue;
        }
        // Resumed TLS 1.3 handshakes with a key share pay for the group too.
        let rate = p.count(|c| c.group == g) / secs;
        out.push(finish(
            Finding {
                rule: "group",
                comm: p.comm.clone(),
                port: None,
                title: format!(
                    "{}: the {g} key exchange costs {} more per handshake than X25519",
                    p.comm,
                    ms(diff)
                ),
                evidence: format!(
                    "{rate:.1} handshakes/s use {g}; a full one costs {} of CPU, of which {} ({:.0}%) is what {g} costs over X25519.",
                    ms(mean_g),
                    ms(diff),
                    diff / mean_g * 100.0
                ),
                fix: "Prefer X25519 in the server's group list, with secp256r1 after it for clients without \
                      it (nginx `ssl_ecdh_curve X25519:prime256v1;`, Apache `SSLOpenSSLConfCmd Groups \
                      X25519:P-256`, HAProxy `curves X25519:P-256`, node `ecdhCurve: 'X25519:P-256'`)."
                    .into(),
                saving_cpu: Some(rate * diff),
                saving_share: None,
                basis: format!("if these handshakes used X25519; from {basis}"),
                numbers: vec![
                    ("handshakes_per_second", rate),
                    ("cpu_per_full_seconds", mean_g),
                    ("extra_cpu_per_handshake_seconds", diff),
                ],
            },
            p,
            secs,
        ));
    }
    out
}

/// The certificate: an RSA (or large ECDSA) key's signature cost over ECDSA P-256.
pub fn certificates(p: &Proc, secs: f64, host: Option<&HostCosts>) -> Vec<Finding> {
    let full = p.count(is_full);
    let mut out = Vec::new();
    let mut seen: Vec<&str> = p
        .configs
        .iter()
        .filter(|c| is_full(c))
        .map(|c| c.cert.as_str())
        .collect();
    seen.sort();
    seen.dedup();
    for cert in seen {
        if !(cert.starts_with("rsa") || cert == "ecdsa_p384" || cert == "ecdsa_p521") {
            continue;
        }
        let n = p.count(|c| is_full(c) && c.cert == cert);
        if n < MIN_EVENTS || n < 0.1 * full {
            continue;
        }
        let Some(mean_c) = p.mean_cpu(|c| is_full(c) && c.cert == cert) else {
            continue;
        };
        let group = dominant(p).map(|d| d.group.clone()).unwrap_or_default();
        let in_process = (p.timed(|c| is_full(c) && c.cert == "ecdsa_p256" && c.group == group) >= MIN_EVENTS)
            .then(|| {
                let with = p.mean_cpu(|c| is_full(c) && c.cert == cert && c.group == group)?;
                let e = p.mean_cpu(|c| is_full(c) && c.cert == "ecdsa_p256" && c.group == group)?;
                Some((
                    with - e,
                    "ECDSA P-256 handshakes of this process with the same group".to_string(),
                ))
            })
            .flatten();
        let on_host = || -> Option<(f64, String)> {
            let h = host?;
            Some((
                h.sign.get(cert)? - h.sign.get("ecdsa_p256")?,
                format!(
                    "{cert} and ECDSA P-256 signatures measured on this host with {}",
                    h.library
                ),
            ))
        };
        let Some((diff, basis)) = in_process.or_else(on_host) else {
            continue;
        };
        // A host measurement cannot save more than the handshake costs.
        let diff = diff.min(mean_c);
        if diff < MIN_GAIN * mean_c {
            continue;
        }
        let rate = n / secs;
        out.push(finish(
            Finding {
                rule: "certificate",
                comm: p.comm.clone(),
                port: None,
                title: format!(
                    "{}: the {cert} certificate costs {} more per full handshake than ECDSA P-256",
                    p.comm,
                    ms(diff)
                ),
                evidence: format!(
                    "{rate:.1} full handshakes/s sign with a {cert} key; one costs {} of CPU, of which {} ({:.0}%) is what the key costs over ECDSA P-256.",
                    ms(mean_c),
                    ms(diff),
                    diff / mean_c * 100.0
                ),
                fix: "Add an ECDSA P-256 certificate and keep the RSA one for the few clients without ECDSA: \
                      nginx and Apache take both (two ssl_certificate / SSLCertificateFile lines) and each \
                      client gets the one it supports."
                    .into(),
                saving_cpu: Some(rate * diff),
                saving_share: None,
                basis: format!("if these handshakes signed with ECDSA P-256; from {basis}"),
                numbers: vec![
                    ("full_per_second", rate),
                    ("cpu_per_full_seconds", mean_c),
                    ("extra_cpu_per_handshake_seconds", diff),
                ],
            },
            p,
            secs,
        ));
    }
    out
}
