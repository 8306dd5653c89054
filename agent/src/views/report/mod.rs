//! `tlsprof report`: observe for a while (observe.rs), then say what to change, with the
//! numbers measured and an estimate of what each change would save, ranked by savings
//! (rules/), in Markdown, HTML and JSON (markdown.rs, html.rs, json.rs). For what the
//! server does not use yet, the rules use costs measured on this host (crate::hostcost).
#[cfg(test)]
pub(crate) mod fixtures;
mod html;
pub mod json;
mod markdown;
mod observe;
pub(crate) mod rules;

use std::path::{Path, PathBuf};

use anyhow::{bail, Context as _, Result};

pub use self::html::esc;
use self::{
    html::html,
    json::{to_json, ReportDoc},
    markdown::markdown,
    observe::observe,
    rules::findings,
};
use crate::hostcost::{self, HostCosts};
use crate::views::{
    compare::{self, check_min_change, MinChange},
    live::{Live, ViewArgs},
    snapshot::Window,
};

#[derive(clap::Args, Debug, Clone)]
pub struct ReportArgs {
    #[command(flatten)]
    pub view: ViewArgs,
    /// How long to observe (at most, with --until-eof).
    #[arg(long, default_value_t = 30.0, value_name = "SECONDS")]
    pub seconds: f64,
    /// End the window when standard input reaches its end, once the last connections are
    /// counted: `load-test | tlsprof report --until-eof …` covers the load test (start the
    /// load once tlsprof says it is observing). SIGINT ends the window too.
    #[arg(long)]
    pub until_eof: bool,
    /// Write the Markdown report here (default: standard output).
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Also write an HTML report with charts.
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,
    /// Also write the findings and figures as JSON, for scripts.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Do not measure the alternatives' costs on this host (the estimates that need them
    /// are then left out).
    #[arg(long)]
    pub no_calibrate: bool,
    /// Compare this window with a baseline: a report's JSON written earlier (the same as
    /// `tlsprof compare BASELINE THIS.json`). The comparison goes to --compare-md (else it
    /// ends the Markdown report), --compare-html and --compare-json.
    #[arg(long, value_name = "FILE")]
    pub baseline: Option<PathBuf>,
    /// Write the comparison with the baseline in Markdown here.
    #[arg(long, value_name = "FILE", requires = "baseline")]
    pub compare_md: Option<PathBuf>,
    /// Write the comparison with the baseline in HTML here.
    #[arg(long, value_name = "FILE", requires = "baseline")]
    pub compare_html: Option<PathBuf>,
    /// Write the comparison with the baseline as JSON here.
    #[arg(long, value_name = "FILE", requires = "baseline")]
    pub compare_json: Option<PathBuf>,
    #[command(flatten)]
    pub min: MinChange,
}

pub fn run(args: ReportArgs) -> Result<()> {
    if !(args.seconds > 0.0 && args.seconds <= 86400.0) {
        bail!("--seconds must be between 0 and 86400");
    }
    // Fail on a bad baseline or an unwritable output before observing, not after.
    check_min_change(&args.min)?;
    let baseline = args.baseline.as_deref().map(ReportDoc::read).transpose()?;
    check_writable([
        &args.output,
        &args.html,
        &args.json,
        &args.compare_md,
        &args.compare_html,
        &args.compare_json,
    ])?;
    // The rate the CPU split is sampled at: the number of samples behind a share. An
    // agent read through --url does not say its own.
    let sample_hz = args
        .view
        .remote
        .url
        .is_none()
        .then(|| args.view.targets.sample_hz() as f64);
    let mut live = Live::start(&args.view)?;
    let seen = observe(&mut live, args.seconds, args.until_eof)?;
    let comms = live.comms.clone();
    live.stop()?;
    let window = Window::between(&seen.first, &seen.last, &comms);
    let host = if args.no_calibrate {
        None
    } else {
        calibrate_for(&window)
            .inspect_err(|e| log::warn!("cannot measure the alternatives on this host: {e:#}"))
            .ok()
    };
    let found = findings(&window, host.as_ref());
    let mut doc = ReportDoc::of(&window, &found, host.as_ref(), sample_hz);
    let parts: Vec<Window> = seen
        .parts
        .windows(2)
        .map(|p| Window::between(&p[0], &p[1], &comms))
        .collect();
    let mut by_part = compare::part_figures(&parts, sample_hz);
    for p in &mut doc.processes {
        p.batches = by_part.remove(&p.comm).unwrap_or_default();
    }
    let mut md = markdown(&window, &found, host.as_ref());
    if let (Some(before_doc), Some(path)) = (baseline, &args.baseline) {
        let c = compare::compare_runs(&[before_doc], std::slice::from_ref(&doc), args.min.min_change);
        let before = path.display().to_string();
        let after = args
            .json
            .as_ref()
            .map_or("this window".into(), |j| j.display().to_string());
        let to = compare::Outputs {
            markdown: args.compare_md.as_deref(),
            html: args.compare_html.as_deref(),
            json: args.compare_json.as_deref(),
        };
        if let Some(c) = compare::write(&c, &to, &before, &after)? {
            // the comparison ends the report, a section of it
            md += "\n";
            md += &c.replacen("# ", "## ", 1).replace("\n## ", "\n### ");
        }
    }
    match &args.output {
        Some(path) => write_file(path, md)?,
        None => print!("{md}"),
    }
    if let Some(path) = &args.html {
        write_file(path, html(&window, &found, host.as_ref(), &seen.series))?;
    }
    if let Some(path) = &args.json {
        write_file(path, to_json(&doc))?;
    }
    log::info!("{} finding(s)", found.len());
    Ok(())
}

/// Fails on an output that cannot be written, before any work.
pub fn check_writable<'a>(paths: impl IntoIterator<Item = &'a Option<PathBuf>>) -> Result<()> {
    for path in paths.into_iter().flatten() {
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(())
}

/// Writes one of the views' outputs, with one line that says why not.
pub fn write_file(path: &Path, text: String) -> Result<()> {
    std::fs::write(path, text).with_context(|| format!("cannot write {}", path.display()))
}

/// Measures what the rules need: the groups and certificates seen, with the libcrypto
/// the processes map (by name, as the host's dynamic linker finds it).
fn calibrate_for(w: &Window) -> Result<HostCosts> {
    let mut groups = Vec::new();
    let mut certs = Vec::new();
    let mut lib = None;
    for p in &w.procs {
        for c in &p.configs {
            groups.push(c.negotiated.group.label().to_string());
            certs.push(c.negotiated.cert.label().to_string());
        }
        lib = lib.or_else(|| {
            p.libraries
                .iter()
                .find(|(l, _)| l.starts_with("libcrypto.so"))
                .map(|(l, _)| l.clone())
        });
    }
    hostcost::measure(lib.as_deref().unwrap_or("libcrypto.so.3"), &groups, &certs)
}

#[cfg(test)]
mod tests {
    use super::{fixtures::*, json::json, observe::Series, *};
    use crate::{cpu::Category, metrics::LabelValue};

    #[test]
    fn reports_are_well_formed() {
        let p = proc_with(vec![cfg(
            "secp384r1",
            "rsa2048",
            "TLS_AES_256_GCM_SHA384",
            false,
            1000.0,
            2.5,
        )]);
        let w = Window {
            seconds: 10.0,
            procs: vec![p],
        };
        let h = host();
        let f = findings(&w, Some(&h));
        let md = markdown(&w, &f, Some(&h));
        // ranked by saving: resumption 0.1 core, the certificate 0.097, the group 0.085
        let at = |s: &str| md.find(s).unwrap_or_else(|| panic!("{s} not in {md}"));
        assert!(at("### 1. nginx: 100% of handshakes are full") < at("### 2. nginx: the rsa2048 certificate"));
        assert!(at("### 2. nginx: the rsa2048") < at("### 3. nginx: the secp384r1 key exchange"));
        assert!(md.contains("0% resumed: none at all"), "{md}");
        // No ClientHello in the window: the certificate and group findings say so.
        assert!(md.contains("- Clients: not seen (no ClientHello read"), "{md}");
        let j: serde_json::Value = serde_json::from_str(&json(&w, &f, Some(&h))).unwrap();
        assert_eq!(j["window_seconds"], 10.0, "{j}");
        assert!(
            j["findings"].as_array().unwrap().iter().any(|f| f["rule"] == "group"),
            "{j}"
        );
        let certificate = j["findings"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["rule"] == "certificate")
            .unwrap();
        assert!(
            certificate["clients"]
                .as_str()
                .unwrap()
                .starts_with("clients: not seen"),
            "{j}"
        );
        // With ClientHellos: how many would fail, in every renderer.
        let seen = Window {
            seconds: 10.0,
            procs: vec![seen_by(
                w.procs[0].clone(),
                clients(
                    50.0,
                    &[],
                    &[("ecdsa_only", "fail", 5.0), ("ecdsa_only", "negotiate", 45.0)],
                    &[],
                ),
            )],
        };
        let f2 = findings(&seen, Some(&h));
        let line =
            "lients that would fail with an ECDSA certificate only: 5 (10.0%); of 50 ClientHellos read in the window";
        assert!(markdown(&seen, &f2, Some(&h)).contains(&format!("- C{line}")));
        assert!(html(&seen, &f2, Some(&h), &[]).contains(&format!("<p class=\"clients\">C{line}</p>")));
        let j2: serde_json::Value = serde_json::from_str(&json(&seen, &f2, Some(&h))).unwrap();
        assert!(j2["findings"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f["clients"] == format!("c{line}").as_str() && f["numbers"]["would_fail_clients"] == 5.0));
        let series = vec![Series {
            comm: "nginx<x>".into(),
            points: vec![(1.0, Category::ALL.iter().map(|c| (*c, 0.1)).collect())],
        }];
        let html = html(&w, &f, Some(&h), &series);
        assert!(
            html.contains("nginx&lt;x&gt;") && html.contains("class=\"cat-handshake\""),
            "{html}"
        );
        assert!(
            html.contains("<code>ssl_ecdh_curve X25519:prime256v1;</code>"),
            "{html}"
        );
        assert!(!html.contains('`'), "{html}");
        let empty = Window {
            seconds: 1.0,
            procs: vec![],
        };
        assert!(markdown(&empty, &[], None).contains("no traced process was seen"));
    }

    /// The Transport part, in every renderer: each process's handshakes by transport, their
    /// share and CPU per handshake; a TCP-only window says it saw no QUIC.
    #[test]
    fn reports_show_quic_beside_tcp() {
        let mut nginx = tcp_and_quic();
        nginx.ports.get_mut("443").unwrap().exchanges = 1000.0;
        let w = Window {
            seconds: 10.0,
            procs: vec![nginx],
        };
        let h = host();
        let f = findings(&w, Some(&h));
        let md = markdown(&w, &f, Some(&h));
        for want in [
            "## Transport\n\nSuccessful handshakes by what carried them",
            "| Process | Transport | Handshakes/s | Share | CPU per handshake | Timed |\n\
             |---|---|---:|---:|---:|---:|\n\
             | nginx | tcp | 20.0 | 20% | 2.500 ms | 200 |\n\
             | nginx | quic | 80.0 | 80% | 3.000 ms | 800 |\n",
            "| TLSv1.3 | secp384r1 | other | TLS_AES_256_GCM_SHA384 | false | 80.0 | 3.000 ms | 800 | quic |",
        ] {
            assert!(md.contains(want), "{want:?} not in\n{md}");
        }
        // its exchanges are TCP's alone: no cost per exchange over them
        assert!(!md.contains("Cost per exchange"), "{md}");
        let html = html(&w, &f, Some(&h), &[]);
        assert!(
            html.contains("<tr><td>nginx</td><td>quic</td><td>80.0</td><td>80%</td><td>3.000 ms</td><td>800</td></tr>"),
            "{html}"
        );
        assert!(html.contains("secp384r1 other AES_256_GCM_SHA384 over QUIC<"), "{html}");
        let j: serde_json::Value = serde_json::from_str(&json(&w, &f, Some(&h))).unwrap();
        let p = &j["processes"][0];
        assert_eq!(p["quic_share"], 0.8, "{p}");
        assert_eq!(p["transports"]["quic"]["handshakes"], 800.0, "{p}");
        assert_eq!(p["transports"]["tcp"]["cpu_per_handshake_seconds"], 2.5e-3, "{p}");
        assert_eq!(p["ports"]["443"]["quic_connections"], 800.0, "{p}");
        assert_eq!(p["cpu_per_exchange_seconds"], serde_json::Value::Null, "{p}");
        assert_eq!(p["configs"][1]["transport"], "quic", "{p}");
        // TCP alone
        let tcp = Window {
            seconds: 10.0,
            procs: vec![proc_with(vec![cfg(
                "x25519",
                "ecdsa_p256",
                "TLS_AES_128_GCM_SHA256",
                false,
                100.0,
                0.5,
            )])],
        };
        let md = markdown(&tcp, &[], None);
        assert!(
            md.contains("## Transport\n\nNo handshake over QUIC (HTTP/3) in the window.\n"),
            "{md}"
        );
        let j: serde_json::Value = serde_json::from_str(&json(&tcp, &[], None)).unwrap();
        assert_eq!(j["processes"][0]["quic_share"], 0.0);
    }

    /// Failed handshakes and connections without TLS, in every renderer: the findings with
    /// their fixes, the tables of what was measured, and the JSON's rows, by port, who ended
    /// them and why, which `tlsprof compare` reads back.
    #[test]
    fn reports_say_why_handshakes_failed() {
        let mut ok = proc_with(vec![cfg(
            "x25519",
            "ecdsa_p256",
            "TLS_AES_128_GCM_SHA256",
            false,
            100.0,
            0.5,
        )]);
        ok.full = 100.0;
        let p = failing(
            ok,
            &[
                ("8443", "server", "protocol_version", 20.0),
                ("8443", "client", "closed", 3.0),
            ],
            &[("8443", "silent", 30.0), ("8443", "http", 20.0)],
        );
        let p = failing_clients(p, &[("8443", "localhost", "protocol_version", "version", 20.0)]);
        let w = Window {
            seconds: 10.0,
            procs: vec![p],
        };
        let f = findings(&w, None);
        let md = markdown(&w, &f, None);
        for want in [
            "nginx: port 8443: 2.0 handshakes/s fail with protocol_version: clients offer only versions the server \
             refuses\n\n- Rule: `failure_version`\n- Saves: not estimated in CPU\n- Measured: 20 handshakes in the \
             window (2.0/s, 16.3% of the process's handshakes that began) failed (20 with protocol_version from the \
             server)",
            "- Clients: 2.0/s fail with protocol_version (100.0% of the port's ClientHellos): they offer only \
             versions older than every one this server negotiates (TLSv1.3 in the window) — sites: localhost 2.0/s\n\
             - Change: Enable TLS 1.2 on those clients",
            "nginx: 5.0 connections/s on port 8443 never offered TLS: 3.0/s silent (TCP health checks or port \
             scans), 2.0/s plain HTTP\n\n- Rule: `without_tls`",
            "Handshakes/s: 10.0 full, 0.0 resumed, 2.3 failed.",
            "| Port | Reason | By | Failed/s | In the window |\n\
             |---|---|---|---:|---:|\n\
             | 8443 | protocol_version | server | 2.0 | 20 |\n\
             | 8443 | closed | client | 0.3 | 3 |\n",
            "| Port | Kind | Connections/s | In the window |\n\
             |---|---|---:|---:|\n\
             | 8443 | silent | 3.0 | 30 |\n\
             | 8443 | http | 2.0 | 20 |\n",
        ] {
            assert!(md.contains(want), "{want:?} not in\n{md}");
        }
        let html = html(&w, &f, None, &[]);
        for want in [
            "<div class=\"finding\" data-rule=\"failure_version\">",
            "<p class=\"clients\">Clients: 2.0/s fail with protocol_version (100.0% of the port's ClientHellos)",
            "<div class=\"finding\" data-rule=\"without_tls\">",
            "<tr><td>8443</td><td>protocol_version</td><td>server</td><td>2.0</td><td>20</td></tr>",
            "<tr><td>8443</td><td>silent</td><td>3.0</td><td>30</td></tr>",
            "<code>error_page 497 =301 https://$host:$server_port$request_uri;</code>",
        ] {
            assert!(html.contains(want), "{want:?} not in\n{html}");
        }
        let j: serde_json::Value = serde_json::from_str(&json(&w, &f, None)).unwrap();
        let p = &j["processes"][0];
        assert_eq!(
            p["failures"][0],
            serde_json::json!({"port": "8443", "by": "server", "reason": "protocol_version", "handshakes": 20.0})
        );
        assert_eq!(p["failures"][1]["reason"], "closed");
        assert_eq!(
            p["without_tls"][1],
            serde_json::json!({"port": "8443", "kind": "http", "connections": 20.0})
        );
        assert_eq!(
            p["client_failures"],
            serde_json::json!([{"port": "8443", "sni": "localhost", "reason": "protocol_version", "lacks": "version",
                "handshakes": 20.0}])
        );
        let rules: Vec<&str> = j["findings"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["rule"].as_str().unwrap())
            .collect();
        assert!(
            rules.contains(&"failure_version") && rules.contains(&"without_tls"),
            "{rules:?}"
        );
        let v = j["findings"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["rule"] == "failure_version")
            .unwrap();
        assert_eq!(
            (v["port"].as_str(), &v["numbers"]["failed"]),
            (Some("8443"), &serde_json::json!(20.0))
        );
        assert_eq!(v["numbers"]["lacks_version"], 20.0, "{v}");
        assert!(v["clients"].as_str().unwrap().contains("sites: localhost 2.0/s"), "{v}");
        // a report written before the failing clients were counted reads: none
        let older: ReportDoc =
            serde_json::from_str(r#"{"window_seconds": 10, "processes": [{"comm": "nginx", "failures": []}]}"#)
                .unwrap();
        assert!(older.processes[0].client_failures.is_empty());
    }
}
