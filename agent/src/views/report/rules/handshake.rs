//! Handshake rules: session resumption, the key-exchange group, the certificate.
use super::{
    cert_seen, dominant, finish, is_full, ms, protocol::Protocol, with_clients, would_fail, Finding, MIN_EVENTS,
    MIN_GAIN, MIN_GAIN_HOST,
};
use crate::{
    clients::join::Answer,
    hostcost::HostCosts,
    views::snapshot::{Config, Proc},
    wire::tls::{hello::Resumption, Group, Version},
};

/// What a resumed handshake costs this process, and how that was found: resumed
/// handshakes measured in the window (at least 5 timed), else a full one less what a
/// resumed one skips — the certificate signature (TLS 1.2: and the key exchange) —
/// measured on this host.
fn resumed_cost(p: &Proc, c_full: f64, host: Option<&HostCosts>) -> (Option<f64>, String) {
    let measured = p
        .mean_cpu(|c| c.negotiated.resumed)
        .filter(|_| p.timed(|c| c.negotiated.resumed) >= 5.0);
    let estimated = || -> Option<f64> {
        let d = dominant(p)?;
        let host = host?;
        let mut skip = *host.sign.get(d.negotiated.cert.label())?;
        if d.negotiated.version != Version::TLS13 {
            skip += host.group.get(d.negotiated.group.label()).copied().unwrap_or(0.0);
        }
        Some((c_full - skip).max(0.0))
    };
    match measured {
        Some(m) => (
            Some(m),
            "resumed handshakes of this process measured in the window".to_string(),
        ),
        None => match estimated() {
            Some(e) => (
                Some(e),
                format!(
                    "no resumed handshake to measure: a full handshake less the signature{} measured on this host",
                    if dominant(p).is_some_and(|d| d.negotiated.version != Version::TLS13) {
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
    }
}

/// A refused share of returning clients at least this large is a finding.
pub const REFUSED_SHARE: f64 = 0.10;

/// Returning clients refused: handshakes whose client offered to resume (a TLS 1.3 PSK or
/// a TLS 1.2 session ticket) but got a full handshake. The share is exact: refused over
/// offered, both counted per handshake.
pub fn resumption_refused(p: &Proc, secs: f64, host: Option<&HostCosts>) -> Option<Finding> {
    let c = p.clients();
    let (offered, refused) = c.returning();
    let share = refused / offered.max(1e-9);
    if offered < MIN_EVENTS || share < REFUSED_SHARE {
        return None;
    }
    let by = |o: Resumption| c.resumptions_offered(o);
    let refused_by = |o: Resumption| c.resumptions_answered(o, Answer::Full);
    let (psk, ticket) = (by(Resumption::Psk), by(Resumption::Ticket));
    let c_full = p.mean_cpu(is_full);
    let (c_res, how) = match c_full {
        Some(f) => resumed_cost(p, f, host),
        None => (None, "not estimated: no full handshake timed".to_string()),
    };
    let rate = refused / secs;
    let diff = c_full.zip(c_res).map(|(f, r)| (f - r).max(0.0));
    let saving = diff.map(|d| rate * d);
    let mut numbers = vec![
        ("returning_clients", offered),
        ("refused", refused),
        ("refused_share", share),
        ("refused_per_second", rate),
        ("psk_offered", psk),
        ("psk_refused", refused_by(Resumption::Psk)),
        ("ticket_offered", ticket),
        ("ticket_refused", refused_by(Resumption::Ticket)),
    ];
    if let Some(f) = c_full {
        numbers.push(("cpu_per_full_seconds", f));
    }
    if let Some(r) = c_res {
        numbers.push(("cpu_per_resumed_seconds", r));
    }
    let offers = [
        (Resumption::Psk, "a TLS 1.3 PSK", psk),
        (Resumption::Ticket, "a TLS 1.2 session ticket", ticket),
    ]
    .iter()
    .filter(|(_, _, n)| *n > 0.0)
    .map(|(o, what, n)| format!("{n:.0} offered {what} ({:.0} refused)", refused_by(*o)))
    .collect::<Vec<_>>()
    .join(", ");
    Some(finish(
        Finding {
            rule: "resumption_refused",
            comm: p.comm.clone(),
            port: None,
            title: format!(
                "{}: {:.0}% of returning clients got a full handshake",
                p.comm,
                share * 100.0
            ),
            evidence: format!(
                "{refused:.0} of {offered:.0} handshakes whose client offered to resume a session ({offers}) were full \
                 handshakes instead ({:.1}%, {rate:.1}/s){}. The clients kept their session; the server no longer \
                 accepted it: its session cache is too small or its timeout too short for how long clients stay \
                 away, its ticket keys are not shared by all worker processes or by all hosts behind the load \
                 balancer, or a restart or reload changed the ticket keys.",
                share * 100.0,
                c_full
                    .map(|f| format!(
                        "; a full handshake costs {}{}",
                        ms(f),
                        c_res.map(|r| format!(", a resumed one {}", ms(r))).unwrap_or_default()
                    ))
                    .unwrap_or_default()
            ),
            fix: [
                "Keep sessions long enough and share them: nginx `ssl_session_cache shared:SSL:50m;` (one cache for \
                  all workers; about 4000 sessions per MiB), `ssl_session_timeout` (default 5m), `ssl_session_tickets \
                  on;` with the same `ssl_session_ticket_key` file on every host (rotated together); Apache \
                  `SSLSessionCache shmcb:…(512000)`, `SSLSessionCacheTimeout` (default 300), `SSLSessionTickets on` \
                  (with `SSLSessionTicketKeyFile` shared by the hosts); HAProxy `tune.ssl.cachesize` (default 20000 \
                  sessions), `tune.ssl.lifetime` (default 300s) and `tls-ticket-keys` on the bind line; Node.js \
                  `tls.createServer({ sessionTimeout, ticketKeys })` with the same 48-byte ticketKeys in every \
                  cluster worker and host; HCL Domino: `SSL_RESUMABLE_SESSIONS` in NOTES.INI, the number of sessions \
                  its cache keeps (default only the 50 most recent; 1 turns resumption off; their lifetime \
                  cannot be set). Behind a load balancer, \
                  share the ticket keys between hosts or keep a client on one host.",
                Protocol::of_proc(p).resumption_fix(),
            ]
            .concat(),
            saving_cpu: saving,
            saving_share: None,
            clients: None,
            basis: format!(
                "if these {rate:.1} handshakes/s had resumed: each at the measured difference between a full and a \
                 resumed handshake{}; {how}",
                diff.map(|d| format!(" ({})", ms(d))).unwrap_or_default()
            ),
            numbers,
        },
        p,
        secs,
    ))
}

/// The protocol version: handshakes below TLS 1.3 pay a round trip more, and TLS 1.0 and
/// 1.1 are deprecated (RFC 8996). Says whether the clients or the server hold them back.
pub fn versions(p: &Proc, secs: f64) -> Option<Finding> {
    let all = p.count(|c| !c.unlabelled());
    let old = |c: &super::Config| {
        !c.unlabelled() && c.negotiated.version != Version::TLS13 && c.negotiated.version != Version::OTHER
    };
    let n = p.count(old);
    if n < MIN_EVENTS || n < 0.1 * all {
        return None;
    }
    let share = n / all;
    let mut versions: Vec<&str> = p
        .configs
        .iter()
        .filter(|c| old(c))
        .map(|c| c.negotiated.version.label())
        .collect();
    versions.sort();
    versions.dedup();
    let c = p.clients();
    let offered_13 = c.offered_share("version", "TLSv1.3");
    let who = if c.seen() > 0.0 {
        format!(
            " Clients still offering at most TLS 1.2: {:.1}%{}.",
            (1.0 - offered_13) * 100.0,
            if offered_13 > (1.0 - share) + 0.05 {
                "; more clients offer TLS 1.3 than get it: the server holds them back"
            } else {
                ""
            }
        )
    } else {
        String::new()
    };
    let f = finish(
        Finding {
            rule: "version",
            comm: p.comm.clone(),
            port: None,
            title: format!(
                "{}: {:.0}% of handshakes negotiate {} rather than TLS 1.3",
                p.comm,
                share * 100.0,
                versions.join(", ")
            ),
            evidence: format!(
                "{:.1} handshakes/s ({:.0}%) negotiated {}: a new connection waits a round trip more than with TLS \
                 1.3, and TLS 1.0 and 1.1 are deprecated (RFC 8996).{who}",
                n / secs,
                share * 100.0,
                versions.join(", ")
            ),
            fix: "Offer TLS 1.3 beside TLS 1.2 and turn off TLS 1.0 and 1.1: nginx `ssl_protocols TLSv1.2 TLSv1.3;`, \
                  Apache `SSLProtocol -all +TLSv1.2 +TLSv1.3`, HAProxy `ssl-min-ver TLSv1.2` (and no `ssl-max-ver` \
                  below TLSv1.3), Node.js `minVersion: 'TLSv1.2'`; a TLS library older than OpenSSL 1.1.1 has no \
                  TLS 1.3."
                .into(),
            saving_cpu: None,
            saving_share: None,
            clients: None,
            basis: "none in CPU: the round trip is the client's wait, not the server's CPU".into(),
            numbers: vec![
                ("below_tls13_per_second", n / secs),
                ("below_tls13_share", share),
                ("clients_offering_tls13_share", offered_13),
            ],
        },
        p,
        secs,
    );
    Some(with_clients(f, would_fail(p, &["tls13_only"], false)))
}

/// Session resumption: full handshakes that a resumed one could replace.
pub fn resumption(p: &Proc, secs: f64, host: Option<&HostCosts>) -> Option<Finding> {
    let full = p.count(is_full);
    let resumed = p.count(|c| c.negotiated.resumed);
    let share = resumed / (full + resumed).max(1.0);
    if full < MIN_EVENTS || share >= 0.5 {
        return None;
    }
    let c_full = p.mean_cpu(is_full)?;
    let (c_res, basis) = resumed_cost(p, c_full, host);
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
            fix: [
                "Offer resumption: a shared session cache and session tickets with keys shared by all \
                  workers and hosts (nginx `ssl_session_cache shared:SSL:10m; ssl_session_tickets on;`, \
                  Apache `SSLSessionCache shmcb:…` and `SSLSessionTickets on`, HAProxy `tune.ssl.cachesize`). \
                  Load generators such as ab and h2load do not resume; browsers and most HTTP clients do.",
                Protocol::of_proc(p).resumption_fix(),
            ]
            .concat(),
            saving_cpu: saving,
            saving_share: None,
            clients: None,
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
    let mut seen: Vec<Group> = p.configs.iter().map(|c| c.negotiated.group).collect();
    seen.sort();
    seen.dedup();
    for group in seen {
        if matches!(group, Group::X25519 | Group::Rsa | Group::Other | Group::None) {
            continue;
        }
        let g = group.label();
        let n_full = p.count(|c| is_full(c) && c.negotiated.group == group);
        if n_full < MIN_EVENTS || n_full < 0.1 * full {
            continue;
        }
        let Some(mean_g) = p.mean_cpu(|c| is_full(c) && c.negotiated.group == group) else {
            continue;
        };
        let cert = dominant(p).map(|d| d.negotiated.cert).unwrap_or_default();
        let with =
            |group: Group| move |c: &Config| is_full(c) && c.negotiated.group == group && c.negotiated.cert == cert;
        let in_process = (p.timed(with(Group::X25519)) >= MIN_EVENTS)
            .then(|| {
                let with_g = p.mean_cpu(with(group))?;
                let x = p.mean_cpu(with(Group::X25519))?;
                Some((
                    with_g - x,
                    "X25519 handshakes of this process with the same certificate".to_string(),
                    MIN_GAIN,
                ))
            })
            .flatten();
        let on_host = || -> Option<(f64, String, f64)> {
            let h = host?;
            Some((
                h.group.get(g)? - h.group.get("x25519")?,
                format!("{g} and X25519 key exchanges measured on this host with {}", h.library),
                MIN_GAIN_HOST,
            ))
        };
        let Some((diff, basis, gate)) = in_process.or_else(on_host) else {
            continue;
        };
        // A host measurement cannot save more than the handshake costs.
        let diff = diff.min(mean_g);
        if diff < gate * mean_g {
            continue;
        }
        // Resumed TLS 1.3 handshakes with a key share pay for the group too.
        let rate = p.count(|c| c.negotiated.group == group) / secs;
        // TLS 1.2 DHE with the server's parameters: its own (dhe2048), or RFC 3526's
        // (modp2048, OpenSSL's automatic ones); not a group the client names (ffdhe2048)
        let own_prime = group.own_prime();
        out.push(with_clients(
            finish(
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
                fix: if own_prime { DHE_FIX } else { GROUP_FIX }.into(),
                saving_cpu: Some(rate * diff),
                saving_share: None,
                clients: None,
                basis: format!("if these handshakes used X25519; from {basis}"),
                numbers: vec![
                    ("handshakes_per_second", rate),
                    ("cpu_per_full_seconds", mean_g),
                    ("extra_cpu_per_handshake_seconds", diff),
                ],
            },
            p,
            secs,
        ),
            if own_prime {
                // no policy of the what-if model takes DHE away
                ("clients: those that offer no ECDHE suite (none of today's browsers or \
                  libraries) would fall back to RSA key exchange, or fail without it; not counted"
                    .into(), vec![])
            } else {
                would_fail(p, &["x25519_p256_only"], true)
            },
        ));
    }
    out
}

const GROUP_FIX: &str = "Prefer X25519 in the server's group list, with secp256r1 after it for clients without \
     it (nginx `ssl_ecdh_curve X25519:prime256v1;`, Apache `SSLOpenSSLConfCmd Groups \
     X25519:P-256`, HAProxy `curves X25519:P-256`, node `ecdhCurve: 'X25519:P-256'`).";

/// A TLS 1.2 DHE suite with the server's own prime: the suite decides, not the group list.
const DHE_FIX: &str = "Prefer ECDHE suites to DHE ones: list them first and let the server's order decide \
     (nginx `ssl_prefer_server_ciphers on;`, Apache `SSLHonorCipherOrder on`, HAProxy \
     `prefer-client-ciphers` off, its default), or leave DHE out (`!kDHE` in the cipher \
     list); with X25519 first in the group list.";

/// The certificate: an RSA (or large ECDSA) key's signature cost over ECDSA P-256.
pub fn certificates(p: &Proc, secs: f64, host: Option<&HostCosts>) -> Vec<Finding> {
    let full = p.count(|c| is_full(c) && cert_seen(c));
    // what QUIC's full handshakes sign with is not seen: said, not guessed
    let quic_unseen = p.count(|c| is_full(c) && c.over_quic() && !cert_seen(c)) / secs;
    let mut out = Vec::new();
    let mut seen: Vec<&str> = p
        .configs
        .iter()
        .filter(|c| is_full(c))
        .map(|c| c.negotiated.cert.label())
        .collect();
    seen.sort();
    seen.dedup();
    for cert in seen {
        if !(cert.starts_with("rsa") || cert == "ecdsa_p384" || cert == "ecdsa_p521") {
            continue;
        }
        let n = p.count(|c| is_full(c) && c.negotiated.cert == cert);
        if n < MIN_EVENTS || n < 0.1 * full {
            continue;
        }
        let Some(mean_c) = p.mean_cpu(|c| is_full(c) && c.negotiated.cert == cert) else {
            continue;
        };
        let group = dominant(p).map(|d| d.negotiated.group).unwrap_or_default();
        let in_process = (p.timed(|c| is_full(c) && c.negotiated.cert == "ecdsa_p256" && c.negotiated.group == group)
            >= MIN_EVENTS)
            .then(|| {
                let with = p.mean_cpu(|c| is_full(c) && c.negotiated.cert == cert && c.negotiated.group == group)?;
                let e =
                    p.mean_cpu(|c| is_full(c) && c.negotiated.cert == "ecdsa_p256" && c.negotiated.group == group)?;
                Some((
                    with - e,
                    "ECDSA P-256 handshakes of this process with the same group".to_string(),
                    MIN_GAIN,
                ))
            })
            .flatten();
        let on_host = || -> Option<(f64, String, f64)> {
            let h = host?;
            Some((
                h.sign.get(cert)? - h.sign.get("ecdsa_p256")?,
                format!(
                    "{cert} and ECDSA P-256 signatures measured on this host with {}",
                    h.library
                ),
                MIN_GAIN_HOST,
            ))
        };
        let Some((diff, basis, gate)) = in_process.or_else(on_host) else {
            continue;
        };
        // A host measurement cannot save more than the handshake costs.
        let diff = diff.min(mean_c);
        if diff < gate * mean_c {
            continue;
        }
        let rate = n / secs;
        out.push(with_clients(
            finish(
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
                    "{rate:.1} full handshakes/s sign with a {cert} key; one costs {} of CPU, of which {} ({:.0}%) is what the key costs over ECDSA P-256.{}",
                    ms(mean_c),
                    ms(diff),
                    diff / mean_c * 100.0,
                    if quic_unseen > 0.0 {
                        format!(
                            " Not counted: {quic_unseen:.1} full handshakes/s over QUIC, whose certificate is not seen \
                             (QUIC sends it in packets tlsprof does not open); those signing with this key would save \
                             as much each."
                        )
                    } else {
                        String::new()
                    }
                ),
                fix: "Add an ECDSA P-256 certificate and keep the RSA one for the few clients without ECDSA: \
                      nginx and Apache take both (two ssl_certificate / SSLCertificateFile lines) and each \
                      client gets the one it supports."
                    .into(),
                saving_cpu: Some(rate * diff),
                saving_share: None,
                clients: None,
                basis: format!("if these handshakes signed with ECDSA P-256; from {basis}"),
                numbers: vec![
                    ("full_per_second", rate),
                    ("cpu_per_full_seconds", mean_c),
                    ("extra_cpu_per_handshake_seconds", diff),
                    ("quic_full_per_second_certificate_unseen", quic_unseen),
                ],
            },
            p,
            secs,
        ),
            would_fail(p, &["ecdsa_only"], false),
        ));
    }
    out
}
