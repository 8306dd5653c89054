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
    port.closed_by.insert("server".into(), 200.0);
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
