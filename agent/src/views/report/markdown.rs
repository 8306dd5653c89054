//! The report in Markdown (the default, to -o or stdout).
use std::fmt::Write as _;

use super::rules::{capitalized, ms, Finding, MIN_EVENTS};
use crate::bpf::conn::ClosedBy;
use crate::{
    agent::no_probes::Method,
    cpu::Category,
    hostcost::HostCosts,
    metrics::LabelValue,
    views::{
        snapshot::{ByTransport, Config, Proc, Window},
        top::short_cipher,
    },
};

pub(super) fn fmt_saving(f: &Finding) -> String {
    match (f.saving_cpu, f.saving_share) {
        (Some(c), Some(s)) => format!("{:.1}% of a core ({:.0}% of the process's CPU)", c * 100.0, s * 100.0),
        (Some(c), None) => format!("{:.1}% of a core", c * 100.0),
        _ => "not estimated in CPU".into(),
    }
}

pub(super) fn config_label(c: &Config) -> String {
    let quic = if c.over_quic() { " over QUIC" } else { "" };
    if c.unlabelled() {
        return format!(
            "labels not seen{}{quic}",
            if c.negotiated.resumed { " (resumed)" } else { "" }
        );
    }
    format!(
        "{} {} {} {}{}{quic}",
        c.negotiated.version,
        c.negotiated.group,
        c.negotiated.cert,
        short_cipher(c.negotiated.cipher.label()),
        if c.negotiated.resumed { " (resumed)" } else { "" }
    )
}

/// What the Transport part says before its table, or alone when no process served QUIC.
pub(super) const TRANSPORT_INTRO: &str = "Successful handshakes by what carried them: TCP, QUIC (HTTP/3), or \
     other (no connection seen). A process's share over QUIC is the share of its clients on HTTP/3. The \
     keep-alive and TIME_WAIT findings weigh its TCP handshakes alone; the resumption and group findings \
     all of them; the certificate finding those whose certificate was seen, which QUIC's is not. QUIC's \
     exchanges are not counted, so a process that served QUIC has no cost per exchange.";
pub(super) const NO_QUIC: &str = "No handshake over QUIC (HTTP/3) in the window.";

/// The Transport part's rows when a process served QUIC in the window (else none): each
/// process with handshakes, each of its transports with its share of them.
pub(super) fn transport_rows(w: &Window) -> Vec<(&Proc, ByTransport, f64)> {
    if !w.procs.iter().any(Proc::serves_quic) {
        return Vec::new();
    }
    let mut rows = Vec::new();
    for p in &w.procs {
        let all = p.count(|_| true);
        for t in p.transports() {
            rows.push((p, t, t.handshakes / all.max(1e-9)));
        }
    }
    rows
}

fn transport(o: &mut String, w: &Window) {
    let _ = writeln!(o, "## Transport\n");
    let rows = transport_rows(w);
    if rows.is_empty() {
        let _ = writeln!(o, "{NO_QUIC}\n");
        return;
    }
    let _ = writeln!(o, "{TRANSPORT_INTRO}\n");
    let _ = writeln!(
        o,
        "| Process | Transport | Handshakes/s | Share | CPU per handshake | Timed |"
    );
    let _ = writeln!(o, "|---|---|---:|---:|---:|---:|");
    for (p, t, share) in rows {
        let _ = writeln!(
            o,
            "| {} | {} | {:.1} | {:.0}% | {} | {:.0} |",
            p.comm,
            t.transport.label(),
            t.handshakes / w.seconds,
            share * 100.0,
            t.mean_cpu().map(ms).unwrap_or_else(|| "not timed".into()),
            t.timed
        );
    }
    let _ = writeln!(o);
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
        if let Some(c) = &f.clients {
            let _ = writeln!(o, "- {}", capitalized(c));
        }
        let _ = writeln!(o, "- Change: {}", f.fix);
        let _ = writeln!(o, "- Estimate: {}\n", f.basis);
    }
    transport(&mut o, w);
    let _ = writeln!(o, "## What was measured\n");
    cost_per_exchange(&mut o, w);
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
            p.share(Category::Handshake) * 100.0,
            p.share(Category::Crypto) * 100.0,
            p.share(Category::TlsLibrary) * 100.0,
            p.share(Category::KernelNet) * 100.0,
            p.share(Category::Probes) * 100.0,
            p.share(Category::Other) * 100.0
        );
        if !p.configs.is_empty() {
            if p.cpu_methods.contains(&Method::KernelEstimate) {
                let _ = writeln!(
                    o,
                    "CPU per handshake{}: the kernel's estimate (no handshake entry point probed: the server \
                     thread's on-CPU time from reading the client's handshake messages to answering them; \
                     docs/metrics.md).\n",
                    if p.cpu_methods.contains(&Method::Probes) {
                        " of some of these processes"
                    } else {
                        ""
                    }
                );
            }
            let (all, timed) = (p.count(|_| true), p.timed(|_| true));
            if timed < all {
                let _ = writeln!(
                    o,
                    "Handshakes/s counts every handshake; CPU per handshake is the mean of those the probes \
                     timed: {:.0}% of them here (in the default mode, those in the overhead budget's windows).\n",
                    timed / all * 100.0
                );
            }
            let _ = writeln!(
                o,
                "| Version | Group | Certificate | Cipher | Resumed | Handshakes/s | CPU per handshake | Timed | \
                 Transport |"
            );
            let _ = writeln!(o, "|---|---|---|---|---|---:|---:|---:|---|");
            let mut cs = p.configs.clone();
            cs.sort_by(|a, b| b.handshakes.total_cmp(&a.handshakes));
            for c in &cs {
                let _ = writeln!(
                    o,
                    "| {} | {} | {} | {} | {} | {:.1} | {} | {:.0} | {} |",
                    if c.unlabelled() {
                        "labels not seen"
                    } else {
                        c.negotiated.version.label()
                    },
                    if c.unlabelled() {
                        "-"
                    } else {
                        c.negotiated.group.label()
                    },
                    if c.unlabelled() { "-" } else { c.negotiated.cert.label() },
                    if c.unlabelled() {
                        "-"
                    } else {
                        c.negotiated.cipher.label()
                    },
                    c.negotiated.resumed,
                    c.handshakes / s,
                    c.mean_cpu().map(ms).unwrap_or_else(|| "not timed".into()),
                    c.timed,
                    c.negotiated.transport
                );
            }
            let _ = writeln!(o);
        }
        if !p.ports.is_empty() {
            let _ = writeln!(
                o,
                "| Port | Protocol | Connections/s | Exchanges per connection | HTTP/2 | Lifetime | Closed by server | \
                 TIME_WAIT/s | TIME_WAIT now |"
            );
            let _ = writeln!(o, "|---|---|---:|---:|---:|---:|---:|---:|---:|");
            for (port, v) in &p.ports {
                let _ = writeln!(
                    o,
                    "| {port} | {} | {:.1} | {} | {:.0}% | {} | {:.0}% | {:.1} | {:.0} |",
                    v.protocol_name(),
                    v.ended / s,
                    v.requests_per_connection()
                        .map(|r| format!("{r:.1}"))
                        .unwrap_or("-".into()),
                    v.h2_share() * 100.0,
                    v.mean_lifetime().map(ms).unwrap_or("-".into()),
                    v.closed_share(ClosedBy::Server) * 100.0,
                    v.time_wait / s,
                    v.time_wait_sockets
                );
            }
            let _ = writeln!(o);
        }
        failure_tables(&mut o, p, s);
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

/// What the failure tables say before them.
pub(super) const FAILURES_INTRO: &str = "Failed handshakes by why: the alert on the wire, sent by the client or the \
     server, or the side that ended the connection (tlsprof_handshake_failures_total; port `other`: no connection \
     seen).";
pub(super) const WITHOUT_TLS_INTRO: &str = "Connections that never offered TLS (no handshakes, counted apart: \
     tlsprof_connections_without_tls_total): silent ones sent no byte (TCP health checks, port scans).";

/// The failure tables of a process, when it had a failure or a connection without TLS.
fn failure_tables(o: &mut String, p: &Proc, s: f64) {
    let (failed, untls) = (p.failures.by_port(), p.failures.untls_by_port());
    if !failed.is_empty() {
        let _ = writeln!(o, "{FAILURES_INTRO}\n");
        let _ = writeln!(o, "| Port | Reason | By | Failed/s | In the window |");
        let _ = writeln!(o, "|---|---|---|---:|---:|");
        for (port, f, n) in failed {
            let (reason, by) = (f.reason.label(), f.by.label());
            let _ = writeln!(o, "| {port} | {reason} | {by} | {:.1} | {n:.0} |", n / s);
        }
        let _ = writeln!(o);
    }
    if !untls.is_empty() {
        let _ = writeln!(o, "{WITHOUT_TLS_INTRO}\n");
        let _ = writeln!(o, "| Port | Kind | Connections/s | In the window |");
        let _ = writeln!(o, "|---|---|---:|---:|");
        for (port, kind, n) in untls {
            let _ = writeln!(o, "| {port} | {} | {:.1} | {n:.0} |", kind.label(), n / s);
        }
        let _ = writeln!(o);
    }
}

/// Each process's CPU per application data exchange and its TLS part, to compare set-ups
/// (a server doing its own TLS, or an offloader in front of it): with several processes,
/// their sum is what a request that passes through each of them costs.
fn cost_per_exchange(o: &mut String, w: &Window) {
    let rows: Vec<_> = w
        .procs
        .iter()
        .filter_map(|p| Some((p, p.cost_per_exchange()?)))
        .collect();
    if rows.is_empty() {
        return;
    }
    let _ = writeln!(
        o,
        "Cost per exchange (client data, then the server's answer: a request where each is answered \
         before the next; docs/metrics.md): the process's CPU time (exact) over its exchanges, and its TLS \
         part (handshake, record crypto and TLS library, by the sampled split).\n"
    );
    let _ = writeln!(
        o,
        "| Process | Exchanges/s | CPU per exchange | of it TLS | TLS share |"
    );
    let _ = writeln!(o, "|---|---:|---:|---:|---:|");
    let (mut all, mut tls) = (0.0, 0.0);
    for (p, (c, t)) in &rows {
        all += c;
        tls += t;
        let _ = writeln!(
            o,
            "| {} | {:.1} | {} | {} | {:.0}% |",
            p.comm,
            p.exchanges() / w.seconds,
            ms(*c),
            ms(*t),
            t / c.max(1e-12) * 100.0
        );
    }
    if rows.len() > 1 {
        let _ = writeln!(
            o,
            "| sum (a request through each) | - | {} | {} | {:.0}% |",
            ms(all),
            ms(tls),
            tls / all.max(1e-12) * 100.0
        );
    }
    let _ = writeln!(o);
}
