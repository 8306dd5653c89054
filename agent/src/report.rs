//! `tlsprof report`: observe for a while, then say what to change, with the numbers
//! measured and an estimate of what each change would save, ranked by savings.
//!
//! Each rule reads the window's measurements (snapshot::Proc) and, for what the server
//! does not use yet, the costs measured on this host (calibrate::HostCosts).
use std::{fmt::Write as _, path::PathBuf, time::Duration};

use anyhow::{bail, Context as _, Result};

use crate::{
    calibrate::{self, HostCosts},
    live::{Live, ViewArgs},
    snapshot::{Config, Proc, Window},
    top::short_cipher,
};

#[derive(clap::Args, Debug, Clone)]
pub struct ReportArgs {
    #[command(flatten)]
    pub view: ViewArgs,
    /// How long to observe.
    #[arg(long, default_value_t = 30.0, value_name = "SECONDS")]
    pub seconds: f64,
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
}

/// Fewer events than this in the window make no finding: too little to say anything.
pub const MIN_EVENTS: f64 = 20.0;
/// A cheaper alternative must save at least this share of what it replaces.
pub const MIN_GAIN: f64 = 0.10;
/// Requests per connection the keep-alive estimate assumes (Apache's default limit).
pub const TARGET_REQUESTS: f64 = 100.0;
/// Below this many requests per connection, connection churn is a finding.
pub const FEW_REQUESTS: f64 = 10.0;
/// Linux keeps a socket in TIME_WAIT this long (TCP_TIMEWAIT_LEN).
pub const TIME_WAIT_SECONDS: f64 = 60.0;

/// What to change, why, and what it would save.
#[derive(Debug, Clone)]
pub struct Finding {
    pub rule: &'static str,
    pub comm: String,
    pub port: Option<String>,
    pub title: String,
    /// What was measured, in a sentence or two with the numbers.
    pub evidence: String,
    /// What to change.
    pub fix: String,
    /// CPU the change would save, in cores (CPU seconds per second), when it can be
    /// estimated; and as a share of the process's CPU.
    pub saving_cpu: Option<f64>,
    pub saving_share: Option<f64>,
    /// How the estimate was made.
    pub basis: String,
    /// The figures, by name, for scripts and tests.
    pub numbers: Vec<(&'static str, f64)>,
}

impl Finding {
    pub fn number(&self, key: &str) -> Option<f64> {
        self.numbers.iter().find(|(k, _)| *k == key).map(|(_, v)| *v)
    }
}

fn ms(s: f64) -> String {
    format!("{:.3} ms", s * 1e3)
}

fn is_full(c: &Config) -> bool {
    !c.resumed
}

/// The configuration most full handshakes used.
fn dominant(p: &Proc) -> Option<&Config> {
    p.configs
        .iter()
        .filter(|c| is_full(c))
        .max_by(|a, b| a.count.total_cmp(&b.count))
}

/// Process CPU in cores over the window (at least a tiny amount, to divide by).
fn cores(p: &Proc, secs: f64) -> f64 {
    (p.process_cpu / secs).max(1e-9)
}

/// Sets the saving's share of the process's CPU.
fn finish(mut f: Finding, p: &Proc, secs: f64) -> Finding {
    f.saving_share = f.saving_cpu.map(|s| (s / cores(p, secs)).min(1.0));
    f
}

/// Session resumption: full handshakes that a resumed one could replace.
pub fn resumption(p: &Proc, secs: f64, host: Option<&HostCosts>) -> Option<Finding> {
    let full = p.count(is_full);
    let resumed = p.count(|c| c.resumed);
    let share = resumed / (full + resumed).max(1.0);
    if full < MIN_EVENTS || share >= 0.5 {
        return None;
    }
    let c_full = p.mean_cpu(is_full)?;
    let measured = p.mean_cpu(|c| c.resumed).filter(|_| resumed >= 5.0);
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
        let in_process = (p.count(|c| is_full(c) && c.group == "x25519" && c.cert == cert) >= MIN_EVENTS)
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
        let in_process = (p.count(|c| is_full(c) && c.cert == "ecdsa_p256" && c.group == group) >= MIN_EVENTS)
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

/// Connections that carry few requests: each new one costs a handshake, a TCP set-up and
/// tear-down and, when the server closes, a TIME_WAIT socket.
pub fn keepalive(p: &Proc, secs: f64) -> Vec<Finding> {
    let mut out = Vec::new();
    let all_ended = p.ended();
    let hs = p.handshakes();
    let c_hs = p.mean_cpu(|_| true);
    for (port, v) in &p.ports {
        let Some(r) = v.requests_per_connection() else { continue };
        if v.ended < MIN_EVENTS || r >= FEW_REQUESTS {
            continue;
        }
        let server_closes = v.closed_share("server");
        let limit = v
            .common_request_count(0.8)
            .filter(|(k, _)| *k >= 2 && server_closes >= 0.8);
        let (title, why) = match limit {
            Some((k, share)) => (
                format!(
                    "{}: port {port}: the server closes every connection after {k} requests",
                    p.comm
                ),
                format!(
                    "{:.0}% of connections carried exactly {k} requests and the server closed {:.0}% of them: a \
                     per-connection request limit",
                    share * 100.0,
                    server_closes * 100.0
                ),
            ),
            None if r < 1.5 && server_closes >= 0.5 => (
                format!(
                    "{}: port {port}: one request per connection, and the server closes them",
                    p.comm
                ),
                format!(
                    "the server closed {:.0}% of connections after about one request: keep-alive looks off",
                    server_closes * 100.0
                ),
            ),
            None if r < 1.5 => (
                format!(
                    "{}: port {port}: clients open a new connection for every request",
                    p.comm
                ),
                format!(
                    "clients ended {:.0}% of connections after about one request ({:.0}% with a reset): they do not \
                     reuse connections",
                    (1.0 - server_closes) * 100.0,
                    v.closed_share("reset") * 100.0
                ),
            ),
            None => (
                format!("{}: port {port}: connections carry only {r:.1} requests", p.comm),
                format!("the server closed {:.0}% of them", server_closes * 100.0),
            ),
        };
        let conn_rate = v.ended / secs;
        // At TARGET_REQUESTS per connection, this share of the connections goes away.
        let gone = (1.0 - r / TARGET_REQUESTS).max(0.0);
        let port_share = if all_ended > 0.0 { v.ended / all_ended } else { 0.0 };
        let hs_removed = hs / secs * port_share * gone;
        let tw_removed = v.time_wait / secs * gone;
        let saving = c_hs.map(|c| hs_removed * c);
        out.push(finish(
            Finding {
                rule: "keepalive",
                comm: p.comm.clone(),
                port: Some(port.clone()),
                title,
                evidence: format!(
                    "{conn_rate:.1} connections/s ended carrying {r:.1} requests each; {why}. Each new connection costs a \
                     handshake ({}) and {:.2} TIME_WAIT entries.",
                    c_hs.map(ms).unwrap_or_else(|| "not measured".into()),
                    if v.ended > 0.0 { v.time_wait / v.ended } else { 0.0 },
                ),
                fix: "Let connections carry many requests: raise the per-connection request limit (nginx \
                      `keepalive_requests` (default 1000), Apache `MaxKeepAliveRequests` (100), HCL Domino's \
                      \"Maximum requests per persistent connection\" (default 5)), turn keep-alive on (nginx \
                      `keepalive_timeout 75s`, Apache `KeepAlive On`), and make clients reuse connections \
                      (ab -k, HTTP client connection pools)."
                    .into(),
                saving_cpu: saving,
                saving_share: None,
                basis: format!(
                    "at {TARGET_REQUESTS:.0} requests per connection: {hs_removed:.1} handshakes/s and {tw_removed:.1} \
                     TIME_WAIT entries/s fewer, each handshake at this process's mean CPU; TCP set-up and tear-down \
                     in the kernel come on top"
                ),
                numbers: vec![
                    ("connections_per_second", conn_rate),
                    ("requests_per_connection", r),
                    ("server_close_share", server_closes),
                    ("request_limit", limit.map(|(k, _)| k as f64).unwrap_or(0.0)),
                    ("handshakes_removed_per_second", hs_removed),
                    ("time_wait_removed_per_second", tw_removed),
                ],
            },
            p,
            secs,
        ));
    }
    out
}

/// Record protection in CBC mode with HMAC (or 3DES): several times the CPU of AES-GCM
/// per byte on CPUs with AES-NI and carry-less multiply.
pub fn record_ciphers(p: &Proc, secs: f64, host: Option<&HostCosts>) -> Option<Finding> {
    let slow = |c: &Config| c.cipher.contains("_CBC_") || c.cipher.contains("3DES");
    let all = p.count(|_| true);
    let n = p.count(slow);
    if n < 5.0 || all <= 0.0 || n / all < 0.05 {
        return None;
    }
    let share = n / all;
    // Record crypto of the connections with slow ciphers: the crypto category, shared
    // out by handshakes (the primitives are not named in stripped libraries).
    let crypto = p.cpu_in("crypto");
    let slow_cpu = crypto * share;
    let proc_cpu = p.process_cpu.max(1e-9);
    if slow_cpu < 0.01 * proc_cpu {
        return None;
    }
    let des = p.configs.iter().any(|c| c.cipher.contains("3DES"));
    let sha256 = p.configs.iter().any(|c| slow(c) && c.cipher.ends_with("SHA256"));
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
        .map(|c| short_cipher(&c.cipher))
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
    Some(finish(
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
                .into(),
            saving_cpu: saving,
            saving_share: None,
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
    ))
}

/// Sockets the server leaves in TIME_WAIT, by listening port.
pub fn time_wait(p: &Proc, secs: f64) -> Vec<Finding> {
    let mut out = Vec::new();
    for (port, v) in &p.ports {
        let per_request = v.time_wait / v.requests.max(v.ended).max(1.0);
        if v.time_wait < MIN_EVENTS || per_request < 0.1 {
            continue;
        }
        let rate = v.time_wait / secs;
        out.push(finish(
            Finding {
                rule: "time_wait",
                comm: p.comm.clone(),
                port: Some(port.clone()),
                title: format!(
                    "{}: port {port}: {rate:.1} sockets/s enter TIME_WAIT on the server",
                    p.comm
                ),
                evidence: format!(
                    "The server closed first on {:.0}% of connections: {rate:.1} TIME_WAIT entries/s ({per_request:.2} per \
                     request), {:.0} sockets in TIME_WAIT at the end of the window; at this rate about {:.0} are held \
                     at any time (each for {TIME_WAIT_SECONDS:.0} s), each a kernel socket and a port pair a client cannot reuse.",
                    v.closed_share("server") * 100.0,
                    v.time_wait_sockets,
                    rate * TIME_WAIT_SECONDS
                ),
                fix: "Fewer, longer connections (see the keep-alive finding), and let clients close first: \
                      servers that close after each response (keep-alive off, a low per-connection request \
                      limit such as Domino's default of 5) hold the TIME_WAIT sockets themselves."
                    .into(),
                saving_cpu: None,
                saving_share: None,
                basis: "TIME_WAIT entries counted by the kernel tracepoint; the sockets by sock_diag".into(),
                numbers: vec![
                    ("time_wait_per_second", rate),
                    ("time_wait_per_request", per_request),
                    ("time_wait_sockets", v.time_wait_sockets),
                    ("steady_state_sockets", rate * TIME_WAIT_SECONDS),
                ],
            },
            p,
            secs,
        ));
    }
    out
}

/// Every rule over every process, ranked: by CPU saved, then by TIME_WAIT entries.
pub fn findings(w: &Window, host: Option<&HostCosts>) -> Vec<Finding> {
    let mut out = Vec::new();
    for p in &w.procs {
        out.extend(resumption(p, w.seconds, host));
        out.extend(groups(p, w.seconds, host));
        out.extend(certificates(p, w.seconds, host));
        out.extend(keepalive(p, w.seconds));
        out.extend(record_ciphers(p, w.seconds, host));
        out.extend(time_wait(p, w.seconds));
    }
    out.sort_by(|a, b| {
        let key = |f: &Finding| {
            (
                f.saving_cpu.unwrap_or(-1.0),
                f.number("time_wait_per_second").unwrap_or(0.0),
            )
        };
        let (ka, kb) = (key(a), key(b));
        kb.0.total_cmp(&ka.0).then(kb.1.total_cmp(&ka.1))
    });
    out
}

/// The CPU split of each process, second by second, for the chart.
pub struct Series {
    pub comm: String,
    /// (seconds since the start, CPU cores by category)
    pub points: Vec<(f64, Vec<(String, f64)>)>,
}

pub const CATEGORIES: [&str; 6] = ["handshake", "crypto", "tls_library", "kernel_net", "probes", "other"];

pub fn run(args: ReportArgs) -> Result<()> {
    if !(args.seconds > 0.0 && args.seconds <= 86400.0) {
        bail!("--seconds must be between 0 and 86400");
    }
    // Fail on an unwritable output before observing, not after.
    for path in [&args.output, &args.html, &args.json].into_iter().flatten() {
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    let mut live = Live::start(&args.view)?;
    eprintln!("tlsprof: observing for {} s", args.seconds);
    let first = live.snapshot()?;
    let mut last = first.clone();
    let mut series: Vec<Series> = Vec::new();
    let end = first.at + Duration::from_secs_f64(args.seconds);
    let mut interrupted = false;
    while last.at < end {
        let step = end
            .saturating_duration_since(std::time::Instant::now())
            .min(Duration::from_secs(1));
        if !live.sleep(step) {
            interrupted = true;
        }
        let now = live.snapshot()?;
        let w = Window::between(&last, &now, &live.comms);
        let t = now.at.duration_since(first.at).as_secs_f64();
        // A sliver of a second at the end says nothing about the split, which is
        // updated once a second.
        let points = if w.seconds >= 0.5 { &w.procs[..] } else { &[] };
        for p in points {
            let point = CATEGORIES
                .iter()
                .map(|c| (c.to_string(), p.cpu_in(c) / w.seconds))
                .collect();
            match series.iter_mut().find(|s| s.comm == p.comm) {
                Some(s) => s.points.push((t, point)),
                None => series.push(Series {
                    comm: p.comm.clone(),
                    points: vec![(t, point)],
                }),
            }
        }
        last = now;
        if interrupted {
            eprintln!("tlsprof: interrupted: reporting on what was observed");
            break;
        }
    }
    let comms = live.comms.clone();
    live.stop()?;
    let window = Window::between(&first, &last, &comms);
    let host = if args.no_calibrate {
        None
    } else {
        match calibrate_for(&window) {
            Ok(h) => Some(h),
            Err(e) => {
                eprintln!("tlsprof: warning: cannot measure the alternatives on this host: {e:#}");
                None
            }
        }
    };
    let found = findings(&window, host.as_ref());
    let md = markdown(&window, &found, host.as_ref());
    match &args.output {
        Some(path) => std::fs::write(path, &md).with_context(|| format!("cannot write {}", path.display()))?,
        None => print!("{md}"),
    }
    if let Some(path) = &args.html {
        std::fs::write(path, html(&window, &found, host.as_ref(), &series))
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    if let Some(path) = &args.json {
        std::fs::write(path, json(&window, &found, host.as_ref()))
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    eprintln!("tlsprof: {} finding(s)", found.len());
    Ok(())
}

/// Measures what the rules need: the groups and certificates seen, with the libcrypto
/// the processes map (by name, as the host's dynamic linker finds it).
fn calibrate_for(w: &Window) -> Result<HostCosts> {
    let mut groups = Vec::new();
    let mut certs = Vec::new();
    let mut lib = None;
    for p in &w.procs {
        for c in &p.configs {
            groups.push(c.group.clone());
            certs.push(c.cert.clone());
        }
        lib = lib.or_else(|| {
            p.libraries
                .iter()
                .find(|(l, _)| l.starts_with("libcrypto.so"))
                .map(|(l, _)| l.clone())
        });
    }
    calibrate::measure(lib.as_deref().unwrap_or("libcrypto.so.3"), &groups, &certs)
}

fn fmt_saving(f: &Finding) -> String {
    match (f.saving_cpu, f.saving_share) {
        (Some(c), Some(s)) => format!("{:.1}% of a core ({:.0}% of the process's CPU)", c * 100.0, s * 100.0),
        (Some(c), None) => format!("{:.1}% of a core", c * 100.0),
        _ => "not estimated in CPU".into(),
    }
}

fn config_label(c: &Config) -> String {
    if c.unlabelled() {
        return format!("labels not seen{}", if c.resumed { " (resumed)" } else { "" });
    }
    format!(
        "{} {} {} {}{}",
        c.version,
        c.group,
        c.cert,
        short_cipher(&c.cipher),
        if c.resumed { " (resumed)" } else { "" }
    )
}

pub fn markdown(w: &Window, found: &[Finding], host: Option<&HostCosts>) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "# tlsprof report\n");
    if w.procs.is_empty() {
        let _ = writeln!(
            o,
            "Observed {:.1} s; no traced process was seen (check --pid/--comm, and that the server uses TLS).\n",
            w.seconds
        );
    } else {
        let _ = writeln!(
            o,
            "Observed {:.1} s; {} process name(s): {}.\n",
            w.seconds,
            w.procs.len(),
            w.procs.iter().map(|p| p.comm.as_str()).collect::<Vec<_>>().join(", ")
        );
    }
    let _ = writeln!(o, "## Findings, ranked by what they would save\n");
    if found.is_empty() {
        let _ = writeln!(o, "Nothing to change: no rule found enough to say (each needs at least {MIN_EVENTS:.0} events in the window).\n");
    }
    for (i, f) in found.iter().enumerate() {
        let _ = writeln!(o, "### {}. {}\n", i + 1, f.title);
        let _ = writeln!(o, "- Rule: `{}`", f.rule);
        let _ = writeln!(o, "- Saves: {}", fmt_saving(f));
        let _ = writeln!(o, "- Measured: {}", f.evidence);
        let _ = writeln!(o, "- Change: {}", f.fix);
        let _ = writeln!(o, "- Estimate: {}\n", f.basis);
    }
    let _ = writeln!(o, "## What was measured\n");
    for p in &w.procs {
        let s = w.seconds;
        let _ = writeln!(o, "### {}\n", p.comm);
        let _ = writeln!(
            o,
            "Handshakes/s: {:.1} full, {:.1} resumed, {:.1} failed. CPU: {:.1}% of a core; of it handshake {:.0}%, \
             crypto {:.0}%, TLS library {:.0}%, kernel network {:.0}%, tlsprof's probes {:.1}%, other {:.0}%.\n",
            p.full / s,
            p.resumed / s,
            p.failed / s,
            p.process_cpu / s * 100.0,
            p.share("handshake") * 100.0,
            p.share("crypto") * 100.0,
            p.share("tls_library") * 100.0,
            p.share("kernel_net") * 100.0,
            p.share("probes") * 100.0,
            p.share("other") * 100.0
        );
        if !p.configs.is_empty() {
            let _ = writeln!(
                o,
                "| Version | Group | Certificate | Cipher | Resumed | Handshakes/s | CPU per handshake |"
            );
            let _ = writeln!(o, "|---|---|---|---|---|---:|---:|");
            let mut cs = p.configs.clone();
            cs.sort_by(|a, b| b.count.total_cmp(&a.count));
            for c in &cs {
                let _ = writeln!(
                    o,
                    "| {} | {} | {} | {} | {} | {:.1} | {} |",
                    if c.unlabelled() { "labels not seen" } else { &c.version },
                    if c.unlabelled() { "-" } else { &c.group },
                    if c.unlabelled() { "-" } else { &c.cert },
                    if c.unlabelled() { "-" } else { &c.cipher },
                    c.resumed,
                    c.count / s,
                    c.mean_cpu().map(ms).unwrap_or_default()
                );
            }
            let _ = writeln!(o);
        }
        if !p.ports.is_empty() {
            let _ = writeln!(
                o,
                "| Port | Connections/s | Requests per connection | Closed by server | TIME_WAIT/s | TIME_WAIT now |"
            );
            let _ = writeln!(o, "|---|---:|---:|---:|---:|---:|");
            for (port, v) in &p.ports {
                let _ = writeln!(
                    o,
                    "| {port} | {:.1} | {} | {:.0}% | {:.1} | {:.0} |",
                    v.ended / s,
                    v.requests_per_connection()
                        .map(|r| format!("{r:.1}"))
                        .unwrap_or("-".into()),
                    v.closed_share("server") * 100.0,
                    v.time_wait / s,
                    v.time_wait_sockets
                );
            }
            let _ = writeln!(o);
        }
    }
    if let Some(h) = host {
        let _ = writeln!(o, "## Costs measured on this host\n");
        let _ = writeln!(o, "With {}, one thread, CPU time per operation:\n", h.library);
        let _ = writeln!(o, "| Operation | CPU |");
        let _ = writeln!(o, "|---|---:|");
        for (g, t) in &h.group {
            let _ = writeln!(o, "| key exchange {g} (key pair and shared secret) | {} |", ms(*t));
        }
        for (c, t) in &h.sign {
            let _ = writeln!(o, "| signature {c} | {} |", ms(*t));
        }
        for (r, t) in &h.record {
            let _ = writeln!(o, "| 16 KiB record {r} | {} |", ms(*t));
        }
        let _ = writeln!(o);
    }
    o
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// Escaped, with the Markdown `code` spans of the findings' texts as <code>.
fn esc_code(s: &str) -> String {
    s.split('`')
        .enumerate()
        .map(|(i, part)| {
            if i % 2 == 1 {
                format!("<code>{}</code>", esc(part))
            } else {
                esc(part)
            }
        })
        .collect()
}

/// Category colours, the same in every chart.
pub fn colour(category: &str) -> &'static str {
    match category {
        "handshake" => "#d62728",
        "crypto" => "#ff7f0e",
        "tls_library" => "#9467bd",
        "kernel_net" => "#1f77b4",
        "probes" => "#7f7f7f",
        _ => "#2ca02c",
    }
}

/// A stacked area chart of one process's CPU by category over time (SVG).
fn split_chart(s: &Series) -> String {
    let (w, h, left, bottom) = (640.0, 220.0, 50.0, 24.0);
    let t_max = s.points.last().map(|p| p.0).unwrap_or(1.0).max(1.0);
    let total = |p: &(f64, Vec<(String, f64)>)| p.1.iter().map(|x| x.1).sum::<f64>();
    let y_max = s.points.iter().map(total).fold(0.0f64, f64::max).max(0.01) * 1.1;
    let x = |t: f64| left + (t / t_max) * (w - left - 10.0);
    let y = |v: f64| (h - bottom) - v / y_max * (h - bottom - 10.0);
    let mut svg = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" role=\"img\" \
         aria-label=\"CPU split of {} over time\">",
        esc(&s.comm)
    );
    let mut base = vec![0.0; s.points.len()];
    for (ci, cat) in CATEGORIES.iter().enumerate() {
        let top: Vec<f64> = s.points.iter().enumerate().map(|(i, p)| base[i] + p.1[ci].1).collect();
        if top.iter().zip(&base).all(|(t, b)| t - b <= 0.0) {
            continue;
        }
        let mut d = String::new();
        // A one-point series is drawn as a band across the chart.
        let pts: Vec<(f64, f64, f64)> = if s.points.len() == 1 {
            vec![(0.0, base[0], top[0]), (t_max, base[0], top[0])]
        } else {
            s.points
                .iter()
                .enumerate()
                .map(|(i, p)| (p.0, base[i], top[i]))
                .collect()
        };
        for (i, (t, _, v)) in pts.iter().enumerate() {
            let _ = write!(d, "{}{:.1},{:.1} ", if i == 0 { "M" } else { "L" }, x(*t), y(*v));
        }
        for (t, b, _) in pts.iter().rev() {
            let _ = write!(d, "L{:.1},{:.1} ", x(*t), y(*b));
        }
        let _ = write!(
            svg,
            "<path class=\"cat-{cat}\" d=\"{d}Z\" fill=\"{}\" stroke=\"none\"><title>{cat}</title></path>",
            colour(cat)
        );
        base = top;
    }
    let _ = write!(
        svg,
        "<line x1=\"{left}\" y1=\"{:.1}\" x2=\"{:.1}\" y2=\"{:.1}\" stroke=\"#333\"/>\
         <line x1=\"{left}\" y1=\"10\" x2=\"{left}\" y2=\"{:.1}\" stroke=\"#333\"/>\
         <text x=\"4\" y=\"20\" font-size=\"11\">{:.0}%</text><text x=\"4\" y=\"{:.1}\" font-size=\"11\">0</text>\
         <text x=\"{:.1}\" y=\"{:.1}\" font-size=\"11\" text-anchor=\"end\">{t_max:.0} s</text></svg>",
        h - bottom,
        w - 10.0,
        h - bottom,
        h - bottom,
        y_max * 100.0,
        h - bottom,
        w - 10.0,
        h - 6.0
    );
    svg
}

/// Horizontal bars: CPU per handshake by negotiated configuration (SVG).
fn cost_chart(p: &Proc) -> String {
    let mut cs = p.configs.clone();
    cs.sort_by(|a, b| b.mean_cpu().unwrap_or(0.0).total_cmp(&a.mean_cpu().unwrap_or(0.0)));
    let max = cs.iter().filter_map(|c| c.mean_cpu()).fold(0.0f64, f64::max).max(1e-6);
    let (w, row, label_w) = (640.0, 26.0, 300.0);
    let h = row * cs.len() as f64 + 10.0;
    let mut svg = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" role=\"img\" \
         aria-label=\"CPU per handshake of {} by configuration\">",
        esc(&p.comm)
    );
    for (i, c) in cs.iter().enumerate() {
        let m = c.mean_cpu().unwrap_or(0.0);
        let y0 = 5.0 + i as f64 * row;
        let bw = (m / max) * (w - label_w - 90.0);
        let _ = write!(
            svg,
            "<text x=\"0\" y=\"{:.1}\" font-size=\"11\">{}</text>\
             <rect class=\"cost-bar\" x=\"{label_w}\" y=\"{y0:.1}\" width=\"{bw:.1}\" height=\"{:.1}\" fill=\"{}\"/>\
             <text x=\"{:.1}\" y=\"{:.1}\" font-size=\"11\">{}</text>",
            y0 + 15.0,
            esc(&config_label(c)),
            row - 6.0,
            if c.resumed { "#98df8a" } else { "#d62728" },
            label_w + bw + 4.0,
            y0 + 15.0,
            ms(m)
        );
    }
    svg.push_str("</svg>");
    svg
}

/// One process's handshake and port figures as HTML tables.
fn measured_tables(p: &Proc, s: f64) -> String {
    let mut o = format!(
        "<p>Handshakes/s: {:.1} full, {:.1} resumed, {:.1} failed. CPU: {:.1}% of a core.</p>",
        p.full / s,
        p.resumed / s,
        p.failed / s,
        p.process_cpu / s * 100.0
    );
    if !p.configs.is_empty() {
        o.push_str("<table><tr><th>Configuration</th><th>Handshakes/s</th><th>CPU per handshake</th></tr>");
        let mut cs = p.configs.clone();
        cs.sort_by(|a, b| b.count.total_cmp(&a.count));
        for c in &cs {
            let _ = write!(
                o,
                "<tr><td>{}</td><td>{:.1}</td><td>{}</td></tr>",
                esc(&config_label(c)),
                c.count / s,
                c.mean_cpu().map(ms).unwrap_or_default()
            );
        }
        o.push_str("</table>");
    }
    if !p.ports.is_empty() {
        o.push_str(
            "<p></p><table><tr><th>Port</th><th>Connections/s</th><th>Requests per connection</th>\
             <th>Closed by server</th><th>TIME_WAIT/s</th><th>TIME_WAIT now</th></tr>",
        );
        for (port, v) in &p.ports {
            let _ = write!(
                o,
                "<tr><td>{}</td><td>{:.1}</td><td>{}</td><td>{:.0}%</td><td>{:.1}</td><td>{:.0}</td></tr>",
                esc(port),
                v.ended / s,
                v.requests_per_connection()
                    .map(|r| format!("{r:.1}"))
                    .unwrap_or("-".into()),
                v.closed_share("server") * 100.0,
                v.time_wait / s,
                v.time_wait_sockets
            );
        }
        o.push_str("</table>");
    }
    o
}

pub fn html(w: &Window, found: &[Finding], host: Option<&HostCosts>, series: &[Series]) -> String {
    let mut o = String::from(
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>tlsprof report</title><style>\
         body{font-family:sans-serif;max-width:980px;margin:1em auto;color:#222}\
         table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:2px 6px;font-size:13px}\
         .finding{border-left:4px solid #d62728;padding:0 1em;margin:1em 0}.saving{font-weight:bold}\
         .legend span{display:inline-block;margin-right:1em}.legend i{display:inline-block;width:12px;height:12px;margin-right:4px}\
         </style></head><body><h1>tlsprof report</h1>",
    );
    let _ = write!(
        o,
        "<p>Observed {:.1} s; {} process name(s).</p><h2>Findings, ranked by what they would save</h2>",
        w.seconds,
        w.procs.len()
    );
    if found.is_empty() {
        o.push_str("<p id=\"no-findings\">Nothing to change.</p>");
    }
    let max_saving = found
        .iter()
        .filter_map(|f| f.saving_share)
        .fold(0.0f64, f64::max)
        .max(1e-9);
    for f in found {
        let bar = f
            .saving_share
            .map(|s| {
                format!(
                    "<svg width=\"300\" height=\"14\"><rect class=\"saving-bar\" width=\"{:.1}\" height=\"14\" fill=\"#2ca02c\"/></svg>",
                    s / max_saving * 300.0
                )
            })
            .unwrap_or_default();
        let _ = write!(
            o,
            "<div class=\"finding\" data-rule=\"{}\"><h3>{}</h3><p class=\"saving\">Saves: {} {bar}</p>\
             <p>{}</p><p><b>Change:</b> {}</p><p><small>Estimate: {}</small></p></div>",
            f.rule,
            esc(&f.title),
            esc(&fmt_saving(f)),
            esc_code(&f.evidence),
            esc_code(&f.fix),
            esc_code(&f.basis)
        );
    }
    o.push_str("<h2>CPU split over time</h2><p class=\"legend\">");
    for c in CATEGORIES {
        let _ = write!(o, "<span><i style=\"background:{}\"></i>{c}</span>", colour(c));
    }
    o.push_str("</p>");
    for s in series {
        let _ = write!(o, "<h3>{} (share of one core)</h3>{}", esc(&s.comm), split_chart(s));
    }
    o.push_str("<h2>CPU per handshake by configuration</h2>");
    for p in &w.procs {
        if !p.configs.is_empty() {
            let _ = write!(o, "<h3>{}</h3>{}", esc(&p.comm), cost_chart(p));
        }
    }
    o.push_str("<h2>What was measured</h2>");
    for p in &w.procs {
        let _ = write!(o, "<h3>{}</h3>{}", esc(&p.comm), measured_tables(p, w.seconds));
    }
    if let Some(h) = host {
        let _ = write!(
            o,
            "<h2>Costs measured on this host</h2><p>{}</p><table><tr><th>Operation</th><th>CPU</th></tr>",
            esc(&h.library)
        );
        for (k, t) in h
            .group
            .iter()
            .map(|(k, t)| (format!("key exchange {k}"), t))
            .chain(h.sign.iter().map(|(k, t)| (format!("signature {k}"), t)))
        {
            let _ = write!(o, "<tr><td>{}</td><td>{}</td></tr>", esc(&k), ms(*t));
        }
        o.push_str("</table>");
    }
    o.push_str("</body></html>\n");
    o
}

fn js(s: &str) -> String {
    let mut o = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            '\n' => o.push_str("\\n"),
            c if (c as u32) < 0x20 => {
                let _ = write!(o, "\\u{:04x}", c as u32);
            }
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

fn jn(v: f64) -> String {
    if v.is_finite() {
        format!("{v}")
    } else {
        "null".into()
    }
}

pub fn json(w: &Window, found: &[Finding], host: Option<&HostCosts>) -> String {
    let mut o = format!("{{\"window_seconds\":{},\"findings\":[", jn(w.seconds));
    for (i, f) in found.iter().enumerate() {
        let numbers: Vec<String> = f.numbers.iter().map(|(k, v)| format!("{}:{}", js(k), jn(*v))).collect();
        let _ = write!(
            o,
            "{}{{\"rule\":{},\"comm\":{},\"port\":{},\"title\":{},\"saving_cpu_cores\":{},\"saving_share\":{},\"numbers\":{{{}}}}}",
            if i > 0 { "," } else { "" },
            js(f.rule),
            js(&f.comm),
            f.port.as_deref().map(js).unwrap_or("null".into()),
            js(&f.title),
            f.saving_cpu.map(jn).unwrap_or("null".into()),
            f.saving_share.map(jn).unwrap_or("null".into()),
            numbers.join(",")
        );
    }
    o.push_str("],\"processes\":[");
    for (i, p) in w.procs.iter().enumerate() {
        let cfgs: Vec<String> = p
            .configs
            .iter()
            .map(|c| {
                format!(
                    "{{\"version\":{},\"cipher\":{},\"group\":{},\"cert\":{},\"resumed\":{},\"count\":{},\"cpu_seconds\":{}}}",
                    js(&c.version),
                    js(&c.cipher),
                    js(&c.group),
                    js(&c.cert),
                    c.resumed,
                    jn(c.count),
                    jn(c.cpu)
                )
            })
            .collect();
        let cpu: Vec<String> = p.cpu.iter().map(|(k, v)| format!("{}:{}", js(k), jn(*v))).collect();
        let ports: Vec<String> = p
            .ports
            .iter()
            .map(|(k, v)| {
                format!(
                    "{}:{{\"ended\":{},\"requests\":{},\"time_wait\":{},\"time_wait_sockets\":{},\"server_close_share\":{}}}",
                    js(k),
                    jn(v.ended),
                    jn(v.requests),
                    jn(v.time_wait),
                    jn(v.time_wait_sockets),
                    jn(v.closed_share("server"))
                )
            })
            .collect();
        let _ = write!(
            o,
            "{}{{\"comm\":{},\"full\":{},\"resumed\":{},\"failed\":{},\"process_cpu_seconds\":{},\"cpu_seconds\":{{{}}},\"configs\":[{}],\"ports\":{{{}}}}}",
            if i > 0 { "," } else { "" },
            js(&p.comm),
            jn(p.full),
            jn(p.resumed),
            jn(p.failed),
            jn(p.process_cpu),
            cpu.join(","),
            cfgs.join(","),
            ports.join(",")
        );
    }
    o.push_str("],\"host\":");
    match host {
        None => o.push_str("null"),
        Some(h) => {
            let map = |m: &std::collections::BTreeMap<String, f64>| -> String {
                m.iter()
                    .map(|(k, v)| format!("{}:{}", js(k), jn(*v)))
                    .collect::<Vec<_>>()
                    .join(",")
            };
            let _ = write!(
                o,
                "{{\"library\":{},\"group_seconds\":{{{}}},\"sign_seconds\":{{{}}},\"record_seconds\":{{{}}}}}",
                js(&h.library),
                map(&h.group),
                map(&h.sign),
                map(&h.record)
            );
        }
    }
    o.push_str("}\n");
    o
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::Port;

    fn cfg(group: &str, cert: &str, cipher: &str, resumed: bool, count: f64, ms_each: f64) -> Config {
        Config {
            version: "TLSv1.3".into(),
            cipher: cipher.into(),
            group: group.into(),
            cert: cert.into(),
            resumed,
            count,
            cpu: count * ms_each / 1e3,
        }
    }

    fn host() -> HostCosts {
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

    fn proc_with(configs: Vec<Config>) -> Proc {
        Proc {
            comm: "nginx".into(),
            process_cpu: 10.0,
            configs,
            ..Default::default()
        }
    }

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
        let j = json(&w, &f, Some(&h));
        assert!(
            j.starts_with("{\"window_seconds\":10,") && j.contains("\"rule\":\"group\""),
            "{j}"
        );
        let series = vec![Series {
            comm: "nginx<x>".into(),
            points: vec![(1.0, CATEGORIES.iter().map(|c| (c.to_string(), 0.1)).collect())],
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
}
