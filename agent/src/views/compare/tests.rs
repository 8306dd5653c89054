//! Comparisons of report windows built from the report's own fixtures, through the report's
//! JSON as `tlsprof compare` reads it back.
use super::*;
use crate::views::report::json::FindingDoc;
use crate::views::{
    report::{
        fixtures::{cfg, clients, failing, host, proc_with, quic, seen_by},
        rules::findings,
    },
    snapshot::{Config, Port, Proc, Window},
};

/// A window's report, written as JSON and read back, as `tlsprof compare` gets it.
fn doc(p: Proc) -> ReportDoc {
    doc_with(p, host())
}

/// The same, with these costs measured on the host.
fn doc_with(p: Proc, h: crate::hostcost::HostCosts) -> ReportDoc {
    let w = Window {
        seconds: 10.0,
        procs: vec![p],
    };
    let found = findings(&w, Some(&h));
    let text = to_json(&ReportDoc::of(&w, &found, Some(&h), Some(49.0)));
    serde_json::from_str(&text).expect("a report's JSON reads back")
}

/// nginx's handshakes of one configuration, `ms` each, with the process's CPU their sum
/// and a third more, every sample of it TLS but `other_share`.
fn nginx(group: &str, cert: &str, n: f64, ms: f64) -> Proc {
    let mut p = proc_with(vec![cfg(group, cert, "TLS_AES_256_GCM_SHA384", false, n, ms)]);
    p.full = n;
    p.process_cpu = n * ms / 1e3 * 4.0 / 3.0;
    p.cpu.insert("handshake".into(), n * ms / 1e3);
    p.cpu.insert("other".into(), n * ms / 1e3 / 3.0);
    p
}

/// The figures called changed (up or down).
fn called(c: &Comparison) -> Vec<&str> {
    c.processes[0]
        .figures
        .iter()
        .filter(|f| matches!(f.verdict, "up" | "down"))
        .map(|f| f.name)
        .collect()
}

fn figure<'a>(c: &'a Comparison, name: &str) -> &'a Compared {
    c.processes[0]
        .figures
        .iter()
        .find(|f| f.name == name)
        .unwrap_or_else(|| panic!("no {name}"))
}

#[test]
fn a_cheaper_configuration_is_measured_and_its_findings_resolved() {
    let before = doc(nginx("secp384r1", "rsa2048", 1000.0, 2.5));
    let after = doc(nginx("x25519", "ecdsa_p256", 1000.0, 0.5));
    let c = compare(&before, &after, MIN_CHANGE);
    let p = &c.processes[0];
    let wire: Vec<&str> = p.config_changes.iter().map(|x| x.text.as_str()).collect();
    assert_eq!(
        wire,
        [
            "the group went from secp384r1 to x25519",
            "the certificate went from rsa2048 to ecdsa_p256"
        ]
    );
    let full = figure(&c, "cpu_per_full_handshake_seconds");
    assert_eq!(full.verdict, "down");
    assert!((full.change.unwrap() + 0.8).abs() < 1e-9, "{full:?}");
    // every handshake within a fifth of its mean (fixtures.rs): a narrow interval
    assert!(full.interval.unwrap() < 0.01, "{full:?}");
    assert_eq!(full.text, "CPU per full handshake 2.500 → 0.500 ms, −80% ± 1%");
    assert_eq!(figure(&c, "handshakes_per_second").verdict, "no_change");
    assert_eq!(figure(&c, "process_cpu_per_handshake_seconds").verdict, "down");
    // The baseline's group and certificate findings are gone: each resolved, the saving
    // measured (the process's CPU per handshake, 3.333 → 0.667 ms, at 100 handshakes/s).
    for rule in ["group", "certificate"] {
        let f = c.findings.iter().find(|f| f.rule == rule).unwrap();
        assert_eq!(f.status, "resolved", "{f:?}");
        assert!((f.measured_saving_cpu_cores.unwrap() - 0.26667).abs() < 1e-4, "{f:?}");
        let mut with = f.resolved_with.clone();
        with.sort();
        assert_eq!(with, ["certificate", "group"]);
        assert!(f.text.contains("(measured) against"), "{}", f.text);
    }
    let md = markdown(&c, "a.json", "b.json");
    assert!(
        md.contains("- the certificate went from rsa2048 to ecdsa_p256\n"),
        "{md}"
    );
    assert!(
        md.contains("| CPU per full handshake | 2.500 ms | 0.500 ms | −80% ± 1% | lower |"),
        "{md}"
    );
    let html = html(&c, "a.json", "b.json");
    assert!(html.contains("<rect class=\"after\""), "{html}");
    assert!(
        html.contains("<li>the group went from secp384r1 to x25519</li>"),
        "{html}"
    );
    let j: serde_json::Value = serde_json::from_str(&to_json(&c)).unwrap();
    assert_eq!(
        j["processes"][0]["config_changes"][1]["after"]["ecdsa_p256"], 1.0,
        "{j}"
    );
    assert_eq!(j["findings"][0]["status"], "remains", "{j}");
}

#[test]
fn a_larger_dhe_prime_is_explained_by_its_finding() {
    // nginx's own 1024- then 2048-bit DHE prime (2026-11-30 on this VM: 0.99 then 4.39 ms a
    // handshake; the host timed the exchanges at 0.56 and 3.9 ms)
    let mut h = host();
    h.group.insert("dhe1024".into(), 0.56e-3);
    h.group.insert("dhe2048".into(), 3.9e-3);
    let a = doc_with(nginx("dhe1024", "rsa2048", 300.0, 0.99), h.clone());
    let b = doc_with(nginx("dhe2048", "rsa2048", 300.0, 4.39), h);
    let c = compare(&a, &b, MIN_CHANGE);
    assert_eq!(figure(&c, "cpu_per_full_handshake_seconds").verdict, "up");
    let group = c.findings.iter().find(|f| f.rule == "group").expect("a group finding");
    assert_eq!(group.status, "remains", "{group:?}");
    assert!(
        group.title.contains("dhe1024") && group.text.contains("now: nginx: the dhe2048 key exchange costs"),
        "{group:?}"
    );
}

#[test]
fn one_configuration_twice_is_no_change() {
    let a = doc(seen_by(
        nginx("x25519", "ecdsa_p256", 500.0, 0.5),
        clients(500.0, &[("group", "x25519", 500.0)], &[], &[]),
    ));
    let mut p = nginx("x25519", "ecdsa_p256", 510.0, 0.51);
    p.cpu.insert("other".into(), 0.09);
    let b = doc(seen_by(p, clients(510.0, &[("group", "x25519", 510.0)], &[], &[])));
    let c = compare(&a, &b, MIN_CHANGE);
    let called = called(&c);
    assert!(called.is_empty(), "{called:?}");
    // the 2% of CPU per handshake is beyond its interval, under the 10% called a change
    assert_eq!(figure(&c, "cpu_per_full_handshake_seconds").verdict, "small");
    assert!(c.processes[0].config_changes.is_empty() && c.processes[0].offer_changes.is_empty());
    assert!(c.findings.iter().all(|f| f.status == "remains"), "{:?}", c.findings);
    let md = markdown(&c, "a", "b");
    assert!(md.contains("The wire shows no change"), "{md}");
    assert!(md.contains("No measurable change in: successful handshakes.\n"), "{md}");
    assert!(
        md.contains("Changed by less than 10%: CPU per handshake; CPU per full handshake;"),
        "{md}"
    );
    // A 2% change beyond its interval is still no change at 5%, and a change at 1%.
    let c1 = compare(&a, &b, 0.01);
    assert_eq!(figure(&c1, "cpu_per_full_handshake_seconds").verdict, "up");
}

#[test]
fn a_process_seen_on_one_side_is_not_compared() {
    let a = doc(nginx("x25519", "ecdsa_p256", 500.0, 0.5));
    let mut other = nginx("x25519", "ecdsa_p256", 500.0, 0.5);
    other.comm = "haproxy".into();
    let c = compare(&a, &doc(other), MIN_CHANGE);
    assert_eq!(c.processes.len(), 2);
    assert_eq!(c.processes[0].seen, "before");
    assert!(c.processes[0].figures.iter().all(|f| f.verdict == "not_comparable"));
    assert_eq!(
        figure(&c, "cpu_per_handshake_seconds").text,
        "CPU per handshake: 0.500 ms before, none after"
    );
    assert!(c
        .findings
        .iter()
        .filter(|f| f.comm == "nginx")
        .all(|f| f.status == "unseen"));
    assert!(c
        .findings
        .iter()
        .filter(|f| f.comm == "haproxy")
        .all(|f| f.status == "new"));
}

#[test]
fn bad_baselines_say_why() {
    let dir = std::env::temp_dir().join(format!("tlsprof-compare-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join("x.json");
    std::fs::write(&p, "{\"findings\": 3}").unwrap();
    let e = format!("{:#}", ReportDoc::read(&p).unwrap_err());
    assert!(e.contains("is not a report's JSON"), "{e}");
    let e = format!("{:#}", ReportDoc::read(&dir.join("none.json")).unwrap_err());
    assert!(e.starts_with("cannot read"), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn one_saving_estimated_twice_counts_once() {
    let f = |rule: &str, e: f64| FindingDoc {
        rule: rule.into(),
        saving_cpu_cores: Some(e),
        ..Default::default()
    };
    let (r, rr, g) = (f("resumption", 0.008), f("resumption_refused", 0.006), f("group", 0.1));
    assert_eq!(findings::joint_estimate(&[&r, &rr]), Some(0.008));
    assert!((findings::joint_estimate(&[&r, &rr, &g]).unwrap() - 0.108).abs() < 1e-12);
    assert_eq!(findings::joint_estimate(&[]), None);
}

/// Old clients gone after the change, health checks on both sides, and clients that began
/// to reject the certificate: each reason's rate before and after, side by side with no
/// verdict; the baseline's failure finding resolved, the connections without TLS remaining.
#[test]
fn what_the_clients_did_is_shown_side_by_side() {
    let before = doc(failing(
        nginx("x25519", "ecdsa_p256", 500.0, 0.5),
        &[("443", "server", "protocol_version", 30.0)],
        &[("443", "silent", 40.0), ("443", "http", 5.0)],
    ));
    let after = doc(failing(
        nginx("x25519", "ecdsa_p256", 500.0, 0.5),
        &[("443", "client", "unknown_ca", 20.0)],
        &[("443", "silent", 40.0)],
    ));
    let c = compare(&before, &after, MIN_CHANGE);
    let rows: Vec<&str> = c.processes[0].failures.iter().map(|r| r.text.as_str()).collect();
    assert_eq!(
        rows,
        [
            "port 443: failed: protocol_version (server) 3.0/s → 0.0/s",
            "port 443: failed: unknown_ca (client) 0.0/s → 2.0/s",
            "port 443: no TLS: silent 4.0/s → 4.0/s",
            "port 443: no TLS: http 0.5/s → 0.0/s",
        ]
    );
    let r = &c.processes[0].failures[0];
    assert_eq!(
        (r.before, r.after, r.by.as_deref()),
        (Some(30.0), Some(0.0), Some("server"))
    );
    // the failed handshakes' rate is a figure compared as before
    assert_eq!(figure(&c, "failed_per_second").before, Some(3.0));
    let md = markdown(&c, "a", "b");
    assert!(
        md.contains(
            "| Port | What | Before | After |\n|---|---|---:|---:|\n\
             | 443 | failed: protocol_version (server) | 3.0/s | 0.0/s |\n\
             | 443 | failed: unknown_ca (client) | 0.0/s | 2.0/s |\n"
        ),
        "{md}"
    );
    assert!(md.contains("not judged against the noise"), "{md}");
    let html = html(&c, "a", "b");
    assert!(
        html.contains("<tr><td>443</td><td>no TLS: silent</td><td>4.0/s</td><td>4.0/s</td></tr>"),
        "{html}"
    );
    let j: serde_json::Value = serde_json::from_str(&to_json(&c)).unwrap();
    let first = &j["processes"][0]["failures"][0];
    assert_eq!(
        (first["what"].as_str(), first["before_per_second"].as_f64()),
        (Some("failed"), Some(3.0)),
        "{j}"
    );
    assert_eq!(j["processes"][0]["failures"][2]["by"], serde_json::Value::Null, "{j}");
    let status = |rule: &str| c.findings.iter().find(|f| f.rule == rule).map(|f| f.status);
    assert_eq!(status("failure_version"), Some("resolved"));
    assert_eq!(status("without_tls"), Some("remains"));
    assert_eq!(status("failure_certificate"), Some("new"));
    // a process seen on one side: none on the other, not 0
    let mut other = nginx("x25519", "ecdsa_p256", 500.0, 0.5);
    other.comm = "haproxy".into();
    let c = compare(&before, &doc(other), MIN_CHANGE);
    assert_eq!(
        c.processes[0].failures[0].text,
        "port 443: failed: protocol_version (server) 3.0/s → none"
    );
}

#[test]
fn a_faster_load_is_the_loads_doing_not_a_change() {
    // the same configuration and cost under four times the rate (a fixed count run faster)
    let before = doc(nginx("x25519", "ecdsa_p256", 1000.0, 0.5));
    let after = doc(nginx("x25519", "ecdsa_p256", 4000.0, 0.5));
    let c = compare(&before, &after, MIN_CHANGE);
    let rate = figure(&c, "handshakes_per_second");
    assert_eq!(rate.verdict, "load", "{rate:?}");
    assert_eq!(
        rate.text,
        "successful handshakes 100.0 → 400.0/s, +300% ± 14%: the load's doing"
    );
    let called = called(&c);
    assert!(called.is_empty(), "{called:?}");
    let md = markdown(&c, "a.json", "b.json");
    assert!(!md.contains("Changed beyond the noise"), "{md}");
    assert!(md.contains("What the load did"), "{md}");
    assert!(
        md.contains("| successful handshakes | 100.0/s | 400.0/s | +300% ± 14% | the load |"),
        "{md}"
    );
}

#[test]
fn a_few_quic_handshakes_keep_the_figures_whole() {
    // 5,003 over TCP and 22 over QUIC, 10,000 exchanges on TCP, each side: the CPU per
    // exchange is the TCP connections' part of the process's CPU over them
    let side = |ms: f64| {
        let tcp = || cfg("x25519", "ecdsa_p256", "TLS_AES_256_GCM_SHA384", false, 5003.0, ms);
        let mut p = proc_with(vec![
            tcp(),
            quic(Config {
                handshakes: 22.0,
                timed: 22.0,
                cpu: 22.0 * ms / 1e3,
                ..tcp()
            }),
        ]);
        p.full = 5025.0;
        p.process_cpu = 5025.0 * ms / 1e3 * 2.0;
        p.ports.insert(
            "443".into(),
            Port {
                exchanges: 10_000.0,
                ..Default::default()
            },
        );
        doc(p)
    };
    let c = compare(&side(0.5), &side(0.25), MIN_CHANGE);
    let per = figure(&c, "process_cpu_per_exchange_seconds");
    assert_eq!(per.verdict, "down", "{per:?}");
    // 5,025 × 1 ms × 5,003/5,025 over 10,000 exchanges
    assert!((per.before.unwrap() - 5003.0e-3 / 10_000.0).abs() < 1e-12, "{per:?}");
    assert!((per.change.unwrap() + 0.5).abs() < 1e-9, "{per:?}");
}

#[test]
fn a_figure_that_moves_within_its_window_holds_that_noise() {
    // 1,000 handshakes each side, 0.30 then 0.26 ms: −13%, its sample's interval ±1%
    let before = doc(nginx("x25519", "ecdsa_p256", 1000.0, 0.30));
    let after = doc(nginx("x25519", "ecdsa_p256", 1000.0, 0.26));
    assert_eq!(
        figure(&compare(&before, &after, MIN_CHANGE), "cpu_per_handshake_seconds").verdict,
        "down"
    );
    // the same windows, whose parts moved by ±20% (a busy host): within that noise
    let parts = |doc: &mut ReportDoc, mean: f64| {
        doc.processes[0].batches = [0.8, 1.2, 1.0, 0.9, 1.1]
            .iter()
            .map(|k| {
                [("cpu_per_handshake_seconds".to_string(), mean * k)]
                    .into_iter()
                    .collect()
            })
            .collect();
    };
    let (mut b, mut a) = (before.clone(), after.clone());
    parts(&mut b, 0.30e-3);
    parts(&mut a, 0.26e-3);
    let c = compare(&b, &a, MIN_CHANGE);
    let f = figure(&c, "cpu_per_handshake_seconds");
    assert_eq!(f.verdict, "no_change", "{f:?}");
    // each side's error: sd 0.158 × mean over √5, at t(4) 2.776 over 1.96
    let se = 0.158_113_9 * 0.30e-3 / 5f64.sqrt() * 2.776 / 1.96;
    assert!((f.before_se.unwrap() - se).abs() < 1e-9, "{f:?}");
    // parts that agree leave the sample's interval
    let steady = |doc: &mut ReportDoc, mean: f64| {
        doc.processes[0].batches = (0..5)
            .map(|_| [("cpu_per_handshake_seconds".to_string(), mean)].into_iter().collect())
            .collect();
    };
    let (mut b, mut a) = (before.clone(), after.clone());
    steady(&mut b, 0.30e-3);
    steady(&mut a, 0.26e-3);
    assert_eq!(
        figure(&compare(&b, &a, MIN_CHANGE), "cpu_per_handshake_seconds").verdict,
        "down"
    );
    // fewer than MIN_PARTS parts say nothing of it
    let (mut b, mut a) = (before, after);
    parts(&mut b, 0.30e-3);
    parts(&mut a, 0.26e-3);
    b.processes[0].batches.truncate(2);
    a.processes[0].batches.truncate(2);
    assert_eq!(
        figure(&compare(&b, &a, MIN_CHANGE), "cpu_per_handshake_seconds").verdict,
        "down"
    );
}
