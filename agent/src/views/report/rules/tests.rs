use super::*;
use crate::views::{report::fixtures::*, snapshot::Port};

#[test]
fn rules_fire_on_costly_configurations_only() {
    let h = host();
    let costly = proc_with(vec![cfg(
        "secp384r1",
        "rsa2048",
        "TLS_AES_256_GCM_SHA384",
        false,
        1000.0,
        2.5,
    )]);
    let g = groups(&costly, 10.0, Some(&h));
    assert_eq!(g.len(), 1);
    let extra = g[0].number("extra_cpu_per_handshake_seconds").unwrap();
    assert!((extra - 850e-6).abs() < 1e-9, "{extra}");
    assert!((g[0].saving_cpu.unwrap() - 100.0 * 850e-6).abs() < 1e-9);
    let c = certificates(&costly, 10.0, Some(&h));
    assert_eq!(c.len(), 1);
    assert!((c[0].number("extra_cpu_per_handshake_seconds").unwrap() - 970e-6).abs() < 1e-9);
    let r = resumption(&costly, 10.0, Some(&h)).unwrap();
    // TLS 1.3: a resumed handshake still pays for the key exchange, not the signature.
    assert!((r.number("cpu_per_resumed_seconds").unwrap() - 1.5e-3).abs() < 1e-9);
    assert!(resumption(&costly, 10.0, None).unwrap().saving_cpu.is_none());

    let cheap = proc_with(vec![
        cfg("x25519", "ecdsa_p256", "TLS_AES_256_GCM_SHA384", false, 300.0, 0.6),
        cfg("x25519", "ecdsa_p256", "TLS_AES_256_GCM_SHA384", true, 700.0, 0.3),
    ]);
    assert!(groups(&cheap, 10.0, Some(&h)).is_empty());
    assert!(certificates(&cheap, 10.0, Some(&h)).is_empty());
    assert!(resumption(&cheap, 10.0, Some(&h)).is_none());
    // Too few handshakes to say anything.
    let few = proc_with(vec![cfg(
        "secp384r1",
        "rsa2048",
        "TLS_AES_256_GCM_SHA384",
        false,
        19.0,
        2.5,
    )]);
    assert!(groups(&few, 10.0, Some(&h)).is_empty() && resumption(&few, 10.0, Some(&h)).is_none());
}

#[test]
fn finite_field_groups_are_explained_by_their_host_cost() {
    // nginx with `ssl_dhparam` of 2048 bits, TLS 1.2 DHE-RSA: 4.7 ms a handshake of which the
    // host measured 3.9 ms for the DHE exchange and 75 µs for X25519's (2026-11-30).
    let mut h = host();
    h.group.insert("dhe2048".into(), 3.9e-3);
    h.group.insert("ffdhe2048".into(), 2.35e-3);
    let mut c = cfg(
        "dhe2048",
        "rsa2048",
        "TLS_DHE_RSA_WITH_AES_128_GCM_SHA256",
        false,
        300.0,
        4.7,
    );
    c.negotiated.version = "TLSv1.2".into();
    let g = groups(&proc_with(vec![c]), 10.0, Some(&h));
    assert_eq!(g.len(), 1, "{g:?}");
    assert!((g[0].number("extra_cpu_per_handshake_seconds").unwrap() - (3.9e-3 - 50e-6)).abs() < 1e-9);
    assert!(
        g[0].title.contains("dhe2048") && g[0].fix.contains("ECDHE"),
        "{:?}",
        g[0]
    );
    assert!(
        g[0].clients.as_deref().unwrap().contains("no ECDHE suite"),
        "{:?}",
        g[0]
    );
    // RFC 7919's group (TLS 1.3): the group list is the fix
    let f = groups(
        &proc_with(vec![cfg(
            "ffdhe2048",
            "ecdsa_p256",
            "TLS_AES_128_GCM_SHA256",
            false,
            300.0,
            2.6,
        )]),
        10.0,
        Some(&h),
    );
    assert_eq!(f.len(), 1, "{f:?}");
    assert!(f[0].fix.contains("X25519 in the server's group list"), "{:?}", f[0]);
    // a size the host did not measure: no finding rather than a guess
    let n = groups(
        &proc_with(vec![cfg(
            "dhe8192",
            "rsa2048",
            "TLS_DHE_RSA_WITH_AES_128_GCM_SHA256",
            false,
            300.0,
            40.0,
        )]),
        10.0,
        Some(&h),
    );
    assert!(n.is_empty(), "{n:?}");
}

#[test]
fn in_process_comparison_wins_over_the_host_measurement() {
    let p = proc_with(vec![
        cfg("secp384r1", "ecdsa_p256", "TLS_AES_256_GCM_SHA384", false, 100.0, 1.4),
        cfg("x25519", "ecdsa_p256", "TLS_AES_256_GCM_SHA384", false, 100.0, 0.6),
    ]);
    let g = groups(&p, 10.0, Some(&host()));
    assert_eq!(g.len(), 1);
    assert!((g[0].number("extra_cpu_per_handshake_seconds").unwrap() - 0.8e-3).abs() < 1e-9);
    assert!(g[0].basis.contains("this process"), "{}", g[0].basis);
}

#[test]
fn keepalive_names_a_request_limit() {
    let mut p = proc_with(vec![cfg(
        "x25519",
        "ecdsa_p256",
        "TLS_AES_256_GCM_SHA384",
        false,
        200.0,
        0.6,
    )]);
    p.full = 200.0;
    let mut port = Port {
        requests: 1000.0,
        ended: 200.0,
        time_wait: 200.0,
        ..Default::default()
    };
    port.closed_by.insert(crate::bpf::conn::ClosedBy::Server, 200.0);
    port.request_buckets = (0..=10).map(|k| (k as f64, if k >= 5 { 200.0 } else { 0.0 })).collect();
    p.ports.insert("443".into(), port);
    let k = keepalive(&p, 10.0);
    assert_eq!(k.len(), 1);
    assert_eq!(k[0].number("request_limit"), Some(5.0));
    // 20 connections/s at 5 requests each; at 100 per connection 95% of them go.
    assert!((k[0].number("handshakes_removed_per_second").unwrap() - 19.0).abs() < 1e-9);
    assert!((k[0].saving_cpu.unwrap() - 19.0 * 0.6e-3).abs() < 1e-9);
    let t = time_wait(&p, 10.0);
    assert_eq!(t.len(), 1);
    assert_eq!(t[0].number("time_wait_per_second"), Some(20.0));
    let all = findings(
        &Window {
            seconds: 10.0,
            procs: vec![p],
        },
        None,
    );
    // ranked: the CPU-saving keep-alive finding before the TIME_WAIT one
    assert_eq!(
        all.iter().map(|f| f.rule).collect::<Vec<_>>(),
        vec!["keepalive", "time_wait", "resumption"]
    );
}

fn costly() -> Proc {
    proc_with(vec![cfg(
        "secp384r1",
        "rsa2048",
        "TLS_AES_256_GCM_SHA384",
        false,
        1000.0,
        2.5,
    )])
}

#[test]
fn certificate_and_group_findings_say_which_clients_would_fail() {
    let h = host();
    let p = seen_by(
        costly(),
        clients(
            200.0,
            &[],
            &[
                ("ecdsa_only", "fail", 6.0),
                ("ecdsa_only", "negotiate", 194.0),
                ("x25519_p256_only", "fail", 2.0),
                ("x25519_p256_only", "hello_retry", 50.0),
                ("x25519_p256_only", "negotiate", 148.0),
            ],
            &[],
        ),
    );
    let c = &certificates(&p, 10.0, Some(&h))[0];
    assert_eq!(
        c.clients.as_deref(),
        Some(
            "clients that would fail with an ECDSA certificate only: 6 (3.0%); of 200 ClientHellos read in the window"
        )
    );
    assert_eq!(c.number("would_fail_clients"), Some(6.0));
    assert_eq!(c.number("would_fail_share"), Some(0.03));
    let g = &groups(&p, 10.0, Some(&h))[0];
    assert_eq!(
        g.clients.as_deref(),
        Some(
            "clients that would fail with only X25519 and P-256: 2 (1.0%), and 50 (25.0%) would need a \
             HelloRetryRequest (an extra round trip); of 200 ClientHellos read in the window"
        )
    );
    assert_eq!(g.number("hello_retry_clients"), Some(50.0));
    // No ClientHello read in the window: "not seen", never 0.
    let unseen = certificates(&costly(), 10.0, Some(&h));
    let text = unseen[0].clients.as_deref().unwrap();
    assert!(text.starts_with("clients: not seen"), "{text}");
    assert_eq!(unseen[0].number("would_fail_clients"), None);
    let mut unread = costly();
    unread.hellos_unread.insert(crate::wire::tracker::Unread::Cut, 3.0);
    let text = groups(&unread, 10.0, Some(&h))[0].clients.clone().unwrap();
    assert!(text.contains("ClientHellos not read: 3 cut"), "{text}");
    // A finding without a policy has no clients line.
    assert!(resumption(&p, 10.0, Some(&h)).unwrap().clients.is_none());
}

#[test]
fn cipher_finding_counts_clients_without_cbc_and_rsa_key_exchange() {
    let mut p = proc_with(vec![
        cfg("rsa", "rsa2048", "TLS_RSA_WITH_AES_128_CBC_SHA", false, 100.0, 1.0),
        cfg("x25519", "rsa2048", "TLS_AES_128_GCM_SHA256", false, 300.0, 1.0),
    ]);
    p.cpu.insert("crypto".into(), 4.0);
    p.cpu.insert("other".into(), 6.0);
    let p = seen_by(
        p,
        clients(
            400.0,
            &[],
            &[
                ("no_cbc_3des", "fail", 10.0),
                ("no_cbc_3des", "negotiate", 390.0),
                ("no_rsa_kex", "fail", 4.0),
                ("no_rsa_kex", "negotiate", 396.0),
            ],
            &[],
        ),
    );
    let f = record_ciphers(&p, 10.0, Some(&host())).unwrap();
    assert_eq!(
        f.clients.as_deref(),
        Some(
            "clients that would fail with no CBC or 3DES suites: 10 (2.5%); clients that would fail with no RSA key \
             exchange: 4 (1.0%); of 400 ClientHellos read in the window"
        )
    );
    assert_eq!(f.number("no_rsa_kex_fail_clients"), Some(4.0));
    assert!(f.fix.contains("Drop RSA key exchange"), "{}", f.fix);
}

#[test]
fn version_finding_says_who_holds_tls13_back() {
    let mut old = cfg(
        "x25519",
        "ecdsa_p256",
        "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
        false,
        100.0,
        0.6,
    );
    old.negotiated.version = "TLSv1.2".into();
    let p = proc_with(vec![
        old,
        cfg("x25519", "ecdsa_p256", "TLS_AES_128_GCM_SHA256", false, 300.0, 0.6),
    ]);
    assert!(versions(
        &proc_with(vec![cfg(
            "x25519",
            "ecdsa_p256",
            "TLS_AES_128_GCM_SHA256",
            false,
            300.0,
            0.6
        )]),
        10.0
    )
    .is_none());
    let unseen = versions(&p, 10.0).unwrap();
    assert_eq!(
        unseen.title,
        "nginx: 25% of handshakes negotiate TLSv1.2 rather than TLS 1.3"
    );
    assert!(unseen.clients.as_deref().unwrap().starts_with("clients: not seen"));
    let p = seen_by(
        p,
        clients(
            400.0,
            &[("version", "TLSv1.3", 380.0), ("version", "TLSv1.2", 20.0)],
            &[("tls13_only", "fail", 20.0), ("tls13_only", "negotiate", 380.0)],
            &[],
        ),
    );
    let v = versions(&p, 10.0).unwrap();
    assert!(
        v.evidence.contains(
            "Clients still offering at most TLS 1.2: 5.0%; more clients offer TLS 1.3 than get it: the server holds them back."
        ),
        "{}",
        v.evidence
    );
    assert_eq!(
        v.clients.as_deref(),
        Some("clients that would fail with TLS 1.3 only: 20 (5.0%); of 400 ClientHellos read in the window")
    );
    assert_eq!(v.number("below_tls13_per_second"), Some(10.0));
    assert_eq!(v.saving_cpu, None);
}

#[test]
fn resumption_refused_gives_the_exact_share_and_the_saving() {
    let h = host();
    let p = || {
        proc_with(vec![
            cfg("x25519", "ecdsa_p256", "TLS_AES_128_GCM_SHA256", false, 1000.0, 2.5),
            cfg("x25519", "ecdsa_p256", "TLS_AES_128_GCM_SHA256", true, 100.0, 0.5),
        ])
    };
    let refused = seen_by(
        p(),
        clients(
            1100.0,
            &[],
            &[],
            &[
                ("psk", "full", 30.0),
                ("psk", "resumed", 10.0),
                ("ticket", "full", 20.0),
                ("none", "full", 9.0),
            ],
        ),
    );
    let f = resumption_refused(&refused, 10.0, Some(&h)).unwrap();
    assert_eq!(f.title, "nginx: 83% of returning clients got a full handshake");
    // exactly refused / offered; "none" offered nothing to resume
    assert_eq!(f.number("refused_share"), Some(50.0 / 60.0));
    assert_eq!(
        (f.number("returning_clients"), f.number("refused")),
        (Some(60.0), Some(50.0))
    );
    assert_eq!(
        (f.number("psk_refused"), f.number("ticket_offered")),
        (Some(30.0), Some(20.0))
    );
    assert!(
        f.evidence.starts_with(
            "50 of 60 handshakes whose client offered to resume a session (40 offered a TLS 1.3 PSK (30 refused), 20 \
             offered a TLS 1.2 session ticket (20 refused)) were full handshakes instead (83.3%, 5.0/s); a full \
             handshake costs 2.500 ms, a resumed one 0.500 ms."
        ),
        "{}",
        f.evidence
    );
    // 5 refused/s, each 2 ms more than a resumed one
    assert!((f.saving_cpu.unwrap() - 5.0 * 2e-3).abs() < 1e-12);
    for directive in [
        "ssl_session_cache",
        "ssl_session_timeout",
        "ssl_session_tickets",
        "ssl_session_ticket_key",
        "SSLSessionCache ",
        "SSLSessionCacheTimeout",
        "SSLSessionTickets",
        "tune.ssl.cachesize",
        "tune.ssl.lifetime",
        "sessionTimeout",
        "ticketKeys",
        "HCL Domino: `SSL_RESUMABLE_SESSIONS`",
    ] {
        assert!(f.fix.contains(directive), "{directive}: {}", f.fix);
    }
    for cause in ["too small", "timeout too short", "not shared", "load", "restart"] {
        assert!(f.evidence.contains(cause), "{cause}: {}", f.evidence);
    }
    // Below 10% refused, or fewer than 20 returning clients: no finding.
    let fine = seen_by(
        p(),
        clients(100.0, &[], &[], &[("psk", "full", 5.0), ("psk", "resumed", 55.0)]),
    );
    assert!(resumption_refused(&fine, 10.0, Some(&h)).is_none());
    let few = seen_by(p(), clients(100.0, &[], &[], &[("ticket", "full", 19.0)]));
    assert!(resumption_refused(&few, 10.0, Some(&h)).is_none());
    assert!(
        resumption_refused(&p(), 10.0, Some(&h)).is_none(),
        "no ClientHello read"
    );
    // Every handshake refused (cache and tickets off): the share is exactly 1, the resumed
    // cost from the host (a full one less the signature).
    let all = seen_by(
        proc_with(vec![cfg(
            "x25519",
            "ecdsa_p256",
            "TLS_AES_128_GCM_SHA256",
            false,
            1000.0,
            2.5,
        )]),
        clients(1000.0, &[], &[], &[("psk", "full", 700.0)]),
    );
    let f = resumption_refused(&all, 10.0, Some(&h)).unwrap();
    assert_eq!(f.number("refused_share"), Some(1.0));
    assert!(
        (f.saving_cpu.unwrap() - 70.0 * 30e-6).abs() < 1e-12,
        "{:?}",
        f.saving_cpu
    );
}

#[test]
fn keepalive_spares_clients_that_offered_h2_behind_tls13() {
    // h2load over TLS 1.3: 100 clients, 30 requests each on 30 concurrent streams: one
    // exchange or so per connection, short-lived, the server's ALPN choice encrypted.
    let h2load = |alpn: &str| {
        let mut p = proc_with(vec![cfg(
            "x25519",
            "ecdsa_p256",
            "TLS_AES_128_GCM_SHA256",
            false,
            100.0,
            0.6,
        )]);
        p.full = 100.0;
        let mut port = Port {
            requests: 100.0,
            ended: 100.0,
            lifetime_sum: 10.0,
            lifetime_count: 100.0,
            ..Default::default()
        };
        port.closed_by.insert(crate::bpf::conn::ClosedBy::Client, 100.0);
        port.protocols.insert("encrypted".into(), 100.0);
        p.ports.insert("443".into(), port);
        if alpn.is_empty() {
            p
        } else {
            seen_by(p, clients(100.0, &[("alpn", alpn, 100.0)], &[], &[]))
        }
    };
    let soft = keepalive(&h2load("h2"), 10.0);
    assert_eq!(soft.len(), 1);
    assert_eq!(soft[0].rule, "keepalive_http2", "not the keep-alive finding");
    assert_eq!(
        soft[0].title,
        "nginx: port 443: 1.0 exchanges per connection, but most clients offered HTTP/2, which may multiplex"
    );
    assert!(!soft[0].title.contains("new connection for every request"));
    assert!(
        soft[0].evidence.starts_with(
            "10.0 connections/s ended carrying 1.0 exchanges each, lasting 100.000 ms on average; 100% of the port's \
             ClientHellos offered h2, and TLS 1.3 hides the server's choice on 100% of its connections."
        ),
        "{}",
        soft[0].evidence
    );
    assert_eq!(soft[0].saving_cpu, None);
    // Clients that offered only HTTP/1.1, or no ClientHello read: the finding as before.
    for alpn in ["http/1.1", ""] {
        let k = keepalive(&h2load(alpn), 10.0);
        assert_eq!(k.len(), 1, "{alpn}");
        assert_eq!(
            k[0].title,
            "nginx: port 443: clients open a new connection for every request"
        );
    }
}

/// QUIC handshakes count in the rules about handshakes (resumption, groups; certificates
/// where the certificate is seen, which QUIC's is not) and not in those about TCP
/// connections (keep-alive, TIME_WAIT): 100 handshakes/s in all, 20/s over TCP.
#[test]
fn quic_handshakes_weigh_in_the_handshake_rules_and_not_in_the_connection_rules() {
    let h = host();
    let p = tcp_and_quic();
    assert_eq!(p.quic_share(), Some(0.8));
    // keep-alive: at 100 requests per connection 95% of the 20 TCP handshakes/s go, each
    // at a TCP handshake's 2.5 ms (counting QUIC's: 95/s at 2.9 ms)
    let k = keepalive(&p, 10.0);
    assert_eq!(k.len(), 1, "{k:?}");
    let removed = k[0].number("handshakes_removed_per_second").unwrap();
    assert!((removed - 19.0).abs() < 1e-9, "{removed}");
    assert!(
        (k[0].saving_cpu.unwrap() - 19.0 * 2.5e-3).abs() < 1e-12,
        "{:?}",
        k[0].saving_cpu
    );
    assert!(
        k[0].evidence.contains("costs a handshake (2.500 ms)"),
        "{}",
        k[0].evidence
    );
    // TIME_WAIT: per TCP request
    let t = time_wait(&p, 10.0);
    assert_eq!(t.len(), 1);
    assert_eq!(t[0].number("time_wait_per_request"), Some(0.2));
    // resumption and group: every handshake, QUIC's too
    let r = resumption(&p, 10.0, Some(&h)).unwrap();
    assert_eq!(r.number("full_per_second"), Some(100.0));
    assert!((r.number("cpu_per_full_seconds").unwrap() - 2.9e-3).abs() < 1e-12);
    // a resumed one: less the signature of the certificate seen (the TCP handshakes'),
    // though most full handshakes are QUIC's, their certificate unseen
    assert!(
        (r.number("cpu_per_resumed_seconds").unwrap() - 1.9e-3).abs() < 1e-12,
        "{r:?}"
    );
    let g = groups(&p, 10.0, Some(&h));
    assert_eq!(g[0].number("handshakes_per_second"), Some(100.0));
    assert!((g[0].saving_cpu.unwrap() - 100.0 * 850e-6).abs() < 1e-9);
    // certificate: the handshakes whose certificate was seen, QUIC's said to be left out
    let c = certificates(&p, 10.0, Some(&h));
    assert_eq!(c.len(), 1);
    assert!(
        (c[0].saving_cpu.unwrap() - 20.0 * 970e-6).abs() < 1e-9,
        "{:?}",
        c[0].saving_cpu
    );
    assert_eq!(c[0].number("quic_full_per_second_certificate_unseen"), Some(80.0));
    assert!(
        c[0].evidence
            .contains("Not counted: 80.0 full handshakes/s over QUIC, whose certificate is not seen"),
        "{}",
        c[0].evidence
    );

    // QUIC alone (a server on HTTP/3 only): no TCP connection, so no keep-alive or
    // TIME_WAIT finding, whatever its handshakes; the group and resumption findings all the
    // same (no certificate seen: none about it).
    let mut only = tcp_and_quic();
    only.comm = "caddy".into();
    only.configs.retain(Config::over_quic);
    only.full = 800.0;
    only.ports.insert(
        "443".into(),
        Port {
            quic: 800.0,
            ..Default::default()
        },
    );
    assert_eq!(only.ports["443"].protocol_name(), "quic");
    let all = findings(
        &Window {
            seconds: 10.0,
            procs: vec![only],
        },
        Some(&h),
    );
    let mut rules: Vec<&str> = all.iter().map(|f| f.rule).collect();
    rules.sort();
    assert_eq!(rules, ["group", "resumption"], "{all:?}");
    let r = all.iter().find(|f| f.rule == "resumption").unwrap();
    assert_eq!(r.number("full_per_second"), Some(80.0));
}

/// On a port that serves HTTP/3 beside HTTP/2 over TLS 1.3, the QUIC clients (who offer
/// h3) do not hide that the TCP ones offered h2: the softer finding, as without QUIC.
#[test]
fn keepalive_judges_http2_by_the_tcp_clients_alone() {
    let mut p = proc_with(vec![cfg(
        "x25519",
        "ecdsa_p256",
        "TLS_AES_128_GCM_SHA256",
        false,
        100.0,
        0.6,
    )]);
    p.full = 100.0;
    let mut port = Port {
        requests: 100.0,
        ended: 100.0,
        lifetime_sum: 10.0,
        lifetime_count: 100.0,
        quic: 300.0,
        ..Default::default()
    };
    port.closed_by.insert(crate::bpf::conn::ClosedBy::Client, 100.0);
    port.protocols.insert("encrypted".into(), 100.0);
    p.ports.insert("443".into(), port);
    // 400 ClientHellos: the TCP connections' 100 offered h2, the QUIC ones' 300 h3 (other)
    let p = seen_by(
        p,
        clients(400.0, &[("alpn", "h2", 100.0), ("alpn", "other", 300.0)], &[], &[]),
    );
    let v = &p.ports["443"];
    assert_eq!(
        (v.clients.offered_share("alpn", "h2"), v.tcp_h2_offered_share()),
        (0.25, 1.0)
    );
    assert_eq!((v.protocol_name(), v.hidden_protocol_share()), ("tls", 1.0));
    let k = keepalive(&p, 10.0);
    assert_eq!(k.len(), 1);
    assert_eq!(k[0].rule, "keepalive_http2", "{}", k[0].title);
    assert_eq!(k[0].number("clients_offering_h2_share"), Some(1.0));
}

/// Old clients (TLS 1.1 only), clients with no suite in common, and clients that reject the
/// certificate in the clear and encrypted: a finding per cause and port, the most failed
/// first, each naming its reasons with who sent them and its fix; causes under MIN_EVENTS
/// make none.
#[test]
fn each_cause_of_failure_is_a_finding_with_its_fix() {
    let mut ok = proc_with(vec![cfg(
        "x25519",
        "ecdsa_p256",
        "TLS_AES_128_GCM_SHA256",
        false,
        300.0,
        0.5,
    )]);
    ok.full = 300.0;
    let p = failing(
        ok,
        &[
            ("443", "server", "protocol_version", 40.0),
            ("443", "server", "handshake_failure", 20.0),
            ("443", "client", "unknown_ca", 30.0),
            ("443", "client", "encrypted_alert", 20.0),
            ("443", "client", "closed", 19.0),
            ("8443", "server", "protocol_version", 25.0),
            ("other", "server", "library_error", 20.0),
        ],
        &[],
    );
    let f = failures(&p, 10.0);
    let rules: Vec<(&str, Option<&str>)> = f.iter().map(|f| (f.rule, f.port.as_deref())).collect();
    assert_eq!(
        rules,
        [
            ("failure_certificate", Some("443")),
            ("failure_version", Some("443")),
            ("failure_version", Some("8443")),
            ("failure_parameters", Some("443")),
            ("failure_library", None),
        ],
        "the 19 clients that gave up are too few"
    );
    let v = &f[1];
    assert_eq!(
        v.title,
        "nginx: port 443: 4.0 handshakes/s fail with protocol_version: clients offer only versions the server refuses"
    );
    // 40 of the 300 + 174 handshakes that began
    assert!(
        v.evidence.starts_with(
            "40 handshakes in the window (4.0/s, 8.4% of the process's handshakes that began) failed (40 with \
             protocol_version from the server): the server answered their ClientHello with protocol_version"
        ),
        "{}",
        v.evidence
    );
    assert!(
        v.fix.contains("Enable TLS 1.2 on those clients") && v.fix.contains("ssl_protocols"),
        "{}",
        v.fix
    );
    assert_eq!(
        (
            v.number("failed"),
            v.number("failed_per_second"),
            v.number("protocol_version")
        ),
        (Some(40.0), Some(4.0), Some(40.0))
    );
    assert_eq!((v.saving_cpu, v.clients.as_deref()), (None, None));
    let c = &f[0];
    assert_eq!(
        c.title,
        "nginx: port 443: 5.0 handshakes/s fail with unknown_ca, encrypted_alert: clients reject the server's \
         certificate"
    );
    assert!(
        c.evidence
            .contains("(30 with unknown_ca from the client, 20 with encrypted_alert from the client)"),
        "{}",
        c.evidence
    );
    assert!(c.fix.contains("fullchain.pem"), "{}", c.fix);
    assert_eq!((c.number("by_client"), c.number("by_server")), (Some(50.0), Some(0.0)));
    assert!(
        f[3].title
            .contains("share no cipher suite, group or signature algorithm"),
        "{}",
        f[3].title
    );
    assert!(f[3].fix.contains("ssl_ciphers"), "{}", f[3].fix);
    assert_eq!(
        f[4].title,
        "nginx: 2.0 handshakes/s fail with library_error: the server's TLS library fails handshakes"
    );
    // in the ranking: after the findings that save CPU, in the order made
    let all = findings(
        &Window {
            seconds: 10.0,
            procs: vec![p],
        },
        None,
    );
    let ranked: Vec<&str> = all.iter().map(|f| f.rule).collect();
    assert_eq!(ranked[0], "resumption", "{ranked:?}");
    assert_eq!(
        &ranked[1..],
        [
            "failure_certificate",
            "failure_version",
            "failure_version",
            "failure_parameters",
            "failure_library"
        ]
    );
}

/// Every reason with the side that sends it: one cause each, as the findings group them.
#[test]
fn reasons_have_the_cause_their_fix_answers() {
    use crate::wire::failure::{By, Failure, Reason};
    use failure::Cause;
    let cause = |by, reason| Cause::of(Failure::new(by, reason));
    assert_eq!(cause(By::Server, Reason::ProtocolVersion), Cause::OldVersion);
    assert_eq!(
        cause(By::Server, Reason::InsufficientSecurity),
        Cause::NoCommonParameters
    );
    assert_eq!(
        cause(By::Client, Reason::CertificateExpired),
        Cause::CertificateRejected
    );
    assert_eq!(cause(By::Server, Reason::CertificateRequired), Cause::ClientCertificate);
    assert_eq!(
        cause(By::Server, Reason::UnknownCa),
        Cause::ClientCertificate,
        "mutual TLS"
    );
    assert_eq!(cause(By::Server, Reason::UnrecognizedName), Cause::UnknownName);
    assert_eq!(
        cause(By::Server, Reason::NoApplicationProtocol),
        Cause::NoApplicationProtocol
    );
    assert_eq!(cause(By::Client, Reason::Reset), Cause::ClientGaveUp);
    assert_eq!(cause(By::Client, Reason::Unfinished), Cause::QuicUnfinished);
    assert_eq!(cause(By::Server, Reason::Closed), Cause::ServerGaveUp);
    assert_eq!(cause(By::Client, Reason::ProtocolVersion), Cause::Other);
    assert_eq!(cause(By::Server, Reason::Unknown), Cause::Other);
    // every rule named once, every cause with a fix of its own
    let mut rules: Vec<&str> = Vec::new();
    for by in [By::Client, By::Server] {
        for reason in <Reason as crate::metrics::LabelValue>::ALL {
            let c = cause(by, *reason);
            assert!(c.rule().starts_with("failure_"));
            if !rules.contains(&c.rule()) {
                rules.push(c.rule());
            }
        }
    }
    assert_eq!(rules.len(), 11, "{rules:?}");
}

/// Connections without TLS: a fact about the port's clients, a finding per port with what
/// each kind is and what to do about plain HTTP; too few make none.
#[test]
fn connections_without_tls_are_told_by_kind() {
    let p = failing(
        proc_with(vec![]),
        &[],
        &[("443", "silent", 40.0), ("443", "http", 10.0), ("8443", "silent", 19.0)],
    );
    let w = without_tls(&p, 10.0);
    assert_eq!(w.len(), 1, "{w:?}");
    let f = &w[0];
    assert_eq!((f.rule, f.port.as_deref()), ("without_tls", Some("443")));
    assert_eq!(
        f.title,
        "nginx: 5.0 connections/s on port 443 never offered TLS: 4.0/s silent (TCP health checks or port scans), \
         1.0/s plain HTTP"
    );
    assert!(
        f.evidence.starts_with(
            "50 connections in the window (5.0/s) were accepted on port 443 and ended without a byte of TLS from the \
             client (40 silent, 10 http). They are no handshakes"
        ),
        "{}",
        f.evidence
    );
    assert!(f.fix.starts_with("Silent connections"), "{}", f.fix);
    assert!(
        f.fix.contains("error_page 497") && f.fix.contains("return 301 https://"),
        "{}",
        f.fix
    );
    assert_eq!(
        (f.number("silent"), f.number("http"), f.number("connections")),
        (Some(40.0), Some(10.0), Some(50.0))
    );
    assert_eq!(p.failed, 0.0, "no failed handshake");
    // silent alone: nothing about plain HTTP
    let quiet = without_tls(&failing(proc_with(vec![]), &[], &[("443", "silent", 20.0)]), 10.0);
    assert!(!quiet[0].fix.contains("plain HTTP"), "{}", quiet[0].fix);
}

/// Health checks and failing clients end connections that carried no request: they are no
/// clients that open a connection per request, and the keep-alive finding weighs the
/// connections whose handshake ended well alone.
#[test]
fn keepalive_leaves_out_connections_without_a_handshake() {
    let reused = |failed: &[(&str, &str, &str, f64)], untls: &[(&str, &str, f64)]| {
        let mut p = proc_with(vec![cfg(
            "x25519",
            "ecdsa_p256",
            "TLS_AES_128_GCM_SHA256",
            false,
            10.0,
            0.6,
        )]);
        p.full = 10.0;
        let n: f64 = failed.iter().map(|x| x.3).sum::<f64>() + untls.iter().map(|x| x.2).sum::<f64>();
        let port = Port {
            // ten clients with 50 requests each, and the rest none
            requests: 500.0,
            ended: 10.0 + n,
            ..Default::default()
        };
        p.ports.insert("443".into(), port);
        failing(p, failed, untls)
    };
    let p = reused(
        &[("443", "server", "protocol_version", 40.0)],
        &[("443", "silent", 60.0)],
    );
    assert!(keepalive(&p, 10.0).is_empty(), "{:?}", keepalive(&p, 10.0));
    // the same connections, their failures unknown (an older agent): 4.5 requests each
    let mut unknown = p.clone();
    unknown.failures = Default::default();
    let k = keepalive(&unknown, 10.0);
    assert_eq!(k[0].number("requests_per_connection"), Some(500.0 / 110.0));
}

/// Where the failing clients' ClientHellos were read (tlsprof_client_failures_total), a
/// failure's finding says who they are: per reason their rate and share of the port's
/// ClientHellos, for versions and parameters what they lacked, and the sites they asked for
/// (three, then "…"). A reason two causes share on the port (`closed` by either side) is
/// neither's; without the metric (an older agent) the finding is as before.
#[test]
fn failure_findings_say_what_the_failing_clients_lacked_and_who_they_are() {
    let mut ok = proc_with(vec![cfg(
        "x25519",
        "ecdsa_p256",
        "TLS_AES_128_GCM_SHA256",
        false,
        365.0,
        0.5,
    )]);
    ok.full = 365.0;
    let p = failing(
        seen_by(ok, clients(365.0, &[], &[], &[])),
        &[
            ("443", "server", "protocol_version", 40.0),
            ("443", "server", "handshake_failure", 20.0),
            ("443", "client", "unknown_ca", 30.0),
            ("443", "client", "closed", 25.0),
            ("443", "server", "closed", 20.0),
            ("8443", "server", "protocol_version", 25.0),
        ],
        &[],
    );
    let p = failing_clients(
        p,
        &[
            ("443", "a.example", "protocol_version", "version", 30.0),
            ("443", "b.example", "protocol_version", "version", 6.0),
            ("443", "c.example", "protocol_version", "version", 2.0),
            ("443", "d.example", "protocol_version", "version", 1.0),
            ("443", "none", "protocol_version", "version", 1.0),
            ("443", "a.example", "handshake_failure", "cipher", 15.0),
            ("443", "b.example", "handshake_failure", "group", 5.0),
            ("443", "none", "unknown_ca", "none", 30.0),
            ("443", "a.example", "closed", "none", 45.0),
        ],
    );
    assert_eq!(p.ports["443"].clients.seen(), 500.0);
    let f = failures(&p, 10.0);
    let find = |rule: &str, port: &str| {
        f.iter()
            .find(|f| f.rule == rule && f.port.as_deref() == Some(port))
            .unwrap_or_else(|| panic!("no {rule} on {port}: {f:?}"))
    };
    let v = find("failure_version", "443");
    assert_eq!(
        v.clients.as_deref(),
        Some(
            "clients: 4.0/s fail with protocol_version (8.0% of the port's ClientHellos): they offer only versions \
             older than every one this server negotiates (TLSv1.3 in the window) — sites: a.example 3.0/s, \
             b.example 0.6/s, c.example 0.2/s, …"
        )
    );
    assert_eq!(
        (
            v.number("clients_failed"),
            v.number("clients_failed_share"),
            v.number("lacks_version")
        ),
        (Some(40.0), Some(0.08), Some(40.0))
    );
    assert!(v.evidence.starts_with("40 handshakes in the window"), "{}", v.evidence);
    let c = find("failure_parameters", "443");
    assert_eq!(
        c.clients.as_deref(),
        Some(
            "clients: 1.5/s fail with handshake_failure (3.0% of the port's ClientHellos): they offer none of the \
             cipher suites this server negotiates — sites: a.example 1.5/s; 0.5/s fail with handshake_failure \
             (1.0% of the port's ClientHellos): they offer none of the key-exchange groups this server negotiates \
             — sites: b.example 0.5/s"
        )
    );
    assert_eq!(
        (c.number("lacks_cipher"), c.number("lacks_group")),
        (Some(15.0), Some(5.0))
    );
    // a certificate rejected: who, not what they lacked
    let r = find("failure_certificate", "443");
    assert_eq!(
        r.clients.as_deref(),
        Some("clients: 3.0/s fail with unknown_ca (6.0% of the port's ClientHellos) — sites: no SNI 3.0/s")
    );
    assert_eq!(r.number("lacks_none"), None);
    // `closed`: the clients' and the server's, not told apart
    for rule in ["failure_client_gave_up", "failure_server_gave_up"] {
        let g = find(rule, "443");
        assert_eq!(
            (g.clients.as_deref(), g.number("clients_failed")),
            (None, None),
            "{rule}"
        );
    }
    // no failing client's ClientHello read on 8443: as before
    let old = find("failure_version", "8443");
    assert_eq!((old.clients.as_deref(), old.number("clients_failed")), (None, None));
}
