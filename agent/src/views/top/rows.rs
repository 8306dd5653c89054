//! The rows and lines `top` shows of a process: its summary row, its configurations,
//! transports and ports, what its clients offered and why its handshakes failed, each as
//! text cells the terminal view and `--once` both lay out (mod.rs).
use super::super::snapshot::Proc;
use crate::bpf::conn::ClosedBy;
use crate::cpu::Category;
use crate::metrics::LabelValue;
use crate::wire::Transport;

/// H3%: the share of its handshakes over QUIC, i.e. of its clients on HTTP/3.
pub(super) const PROC_HEADER: [&str; 12] = [
    "COMM", "FULL/s", "RES/s", "FAIL/s", "CPU%", "HS%", "CRY%", "NET%", "OTH%", "TW/s", "EX/C", "H3%",
];
// 78 columns in all: the width of an 80-column terminal inside the table's borders
pub(super) const PROC_WIDTHS: [u16; 12] = [15, 6, 5, 6, 6, 4, 4, 4, 4, 5, 5, 3];

pub(super) fn rate(n: f64, secs: f64) -> String {
    let r = n / secs;
    if r >= 1000.0 {
        format!("{r:.0}")
    } else {
        format!("{r:.1}")
    }
}

pub(super) fn pct(x: f64) -> String {
    format!("{:.0}", x * 100.0)
}

/// A mean of a few units (requests per connection, milliseconds) in at most five or six
/// characters: one decimal (three for milliseconds) below 100, none above.
pub(super) fn mean(x: f64, decimals: usize) -> String {
    if x >= 100.0 {
        format!("{x:.0}")
    } else {
        format!("{x:.decimals$}")
    }
}

pub(super) fn proc_row(p: &Proc, secs: f64) -> [String; 12] {
    let other = p.share(Category::Other) + p.share(Category::TlsLibrary) + p.share(Category::Probes);
    let req = p.ended();
    [
        p.comm.clone(),
        rate(p.full, secs),
        rate(p.resumed, secs),
        rate(p.failed, secs),
        format!("{:.1}", p.process_cpu / secs * 100.0),
        pct(p.share(Category::Handshake)),
        pct(p.share(Category::Crypto)),
        pct(p.share(Category::KernelNet)),
        pct(other),
        rate(p.time_wait(), secs),
        if req > 0.0 {
            mean(p.requests() / req, 1)
        } else {
            "-".into()
        },
        p.quic_share().map(pct).unwrap_or_else(|| "-".into()),
    ]
}

/// The process's CPU per exchange and its TLS part, for a table's title ("" without one).
pub(super) fn exchange_cost(p: &Proc) -> String {
    p.cost_per_exchange()
        .map(|(c, t)| format!("; CPU per exchange {:.3} ms, TLS {:.3} ms", c * 1e3, t * 1e3))
        .unwrap_or_default()
}

/// A cipher suite's name without what the other columns say.
pub fn short_cipher(c: &str) -> String {
    let c = c.strip_prefix("TLS_").unwrap_or(c);
    for kx in ["ECDHE_ECDSA_WITH_", "ECDHE_RSA_WITH_", "DHE_RSA_WITH_", "RSA_WITH_"] {
        if let Some(rest) = c.strip_prefix(kx) {
            return rest.to_string();
        }
    }
    c.to_string()
}

/// VIA: the transport that carried the handshakes, `tcp` or `quic` (HTTP/3).
pub(super) const CONFIG_HEADER: [&str; 8] = ["VERSION", "GROUP", "CERT", "CIPHER", "RES", "HS/s", "CPU ms", "VIA"];
pub(super) const CONFIG_WIDTHS: [u16; 8] = [7, 10, 10, 24, 3, 7, 6, 4];

/// A transport as top names it: `-` for handshakes whose connection was not seen.
pub(super) fn via(transport: Transport) -> String {
    match transport {
        Transport::Other => "-".into(),
        t => t.label().into(),
    }
}

pub(super) fn config_rows(p: &Proc, secs: f64) -> Vec<[String; 8]> {
    let mut cs = p.configs.clone();
    cs.sort_by(|a, b| b.handshakes.total_cmp(&a.handshakes));
    cs.iter()
        .map(|c| {
            let (version, group, cert, cipher) = if c.unlabelled() {
                ("-".into(), "-".into(), "-".into(), "(labels not seen)".into())
            } else {
                (
                    c.negotiated.version.label().into(),
                    c.negotiated.group.label().into(),
                    c.negotiated.cert.label().into(),
                    short_cipher(c.negotiated.cipher.label()),
                )
            };
            [
                version,
                group,
                cert,
                cipher,
                if c.negotiated.resumed { "yes" } else { "no" }.into(),
                rate(c.handshakes, secs),
                c.mean_cpu().map(|m| mean(m * 1e3, 3)).unwrap_or_else(|| "-".into()),
                via(c.negotiated.transport),
            ]
        })
        .collect()
}

pub(super) const TRANSPORT_HEADER: [&str; 3] = ["TRANSPORT", "HS/s", "CPU ms"];
pub(super) const TRANSPORT_WIDTHS: [u16; 3] = [9, 8, 8];

/// The handshakes of a process that served QUIC in the window, by transport, with the
/// share over QUIC for a title; None for one that did not.
pub(super) fn transport_rows(p: &Proc, secs: f64) -> Option<(String, Vec<[String; 3]>)> {
    let share = p.quic_share().filter(|_| p.serves_quic())?;
    let rows = p
        .transports()
        .iter()
        .map(|t| {
            [
                via(t.transport),
                rate(t.handshakes, secs),
                t.mean_cpu().map(|m| mean(m * 1e3, 3)).unwrap_or_else(|| "-".into()),
            ]
        })
        .collect();
    Some((format!("{}% over QUIC (HTTP/3)", pct(share)), rows))
}

/// The same in one line, for the bottom of the configurations' box.
pub(super) fn transport_line(p: &Proc, secs: f64) -> Option<String> {
    let (share, rows) = transport_rows(p, secs)?;
    let each: Vec<String> = rows
        .iter()
        .map(|[t, r, m]| match m.as_str() {
            "-" => format!("{t} {r}/s"),
            m => format!("{t} {r}/s {m} ms"),
        })
        .collect();
    Some(format!(" by transport: {}; {share} ", each.join(", ")))
}

pub(super) const PORT_HEADER: [&str; 8] = [
    "PORT",
    "PROTO",
    "CONN/s",
    "TW/s",
    "TW NOW",
    "EX/C",
    "SRV CLOSE",
    "CLI CLOSE",
];
pub(super) const PORT_WIDTHS: [u16; 8] = [6, 10, 8, 8, 7, 7, 9, 9];

pub(super) fn port_rows(p: &Proc, secs: f64) -> Vec<[String; 8]> {
    p.ports
        .iter()
        .map(|(port, v)| {
            [
                port.clone(),
                // what its connections carry: STARTTLS's protocol, the SSLRequest's, ALPN's
                v.protocol_name().to_string(),
                // Ended connections: accepted ones are synced at each scan, ended ones as they end.
                rate(v.closed(), secs),
                rate(v.time_wait, secs),
                format!("{:.0}", v.time_wait_sockets),
                // HTTP/2: exchanges are not requests; how long connections last says more
                if v.multiplexed() {
                    v.mean_lifetime()
                        .map(|l| format!("h2 {l:.1}s"))
                        .unwrap_or_else(|| "h2".into())
                } else {
                    v.requests_per_connection()
                        .map(|r| format!("{r:.1}"))
                        .unwrap_or_else(|| "-".into())
                },
                if v.closed() > 0.0 {
                    format!("{}%", pct(v.closed_share(ClosedBy::Server)))
                } else {
                    "-".into()
                },
                if v.closed() > 0.0 {
                    format!("{}%", pct(v.closed_share(ClosedBy::Client)))
                } else {
                    "-".into()
                },
            ]
        })
        .collect()
}

/// What the clients offered, and the policies: one row per offer, "value share%" (of the
/// ClientHellos read in the window) most offered first, wrapped at 80 columns.
pub(super) const CLIENT_ROWS: [(&str, &str); 5] = [
    ("version", "version"),
    ("group", "groups"),
    ("key_share", "key share"),
    ("alpn", "alpn"),
    ("resumption", "resumption"),
];

pub(super) fn wrapped(label: &str, items: &[String], max_lines: usize) -> Vec<String> {
    let mut out = Vec::new();
    let mut line = format!("{label:<10}");
    let mut empty = true;
    for item in items {
        if !empty && line.chars().count() + 2 + item.chars().count() > 80 {
            if out.len() + 1 >= max_lines {
                break; // the rest (least offered) does not fit
            }
            out.push(std::mem::replace(&mut line, " ".repeat(10)));
            empty = true;
        }
        line.push_str(if empty { " " } else { "  " });
        line.push_str(item);
        empty = false;
    }
    out.push(line);
    out
}

/// The client mix and the share of clients each candidate policy would fail, for the
/// selected process: empty without a ClientHello read in the window.
pub(super) fn client_lines(p: &Proc, secs: f64) -> Vec<String> {
    let c = p.clients();
    let seen = c.seen();
    if seen <= 0.0 {
        return Vec::new();
    }
    let mut out = vec![format!(
        "{}: clients, {} ClientHellos/s; % offering each, % a policy would fail",
        p.comm,
        rate(seen, secs)
    )];
    for (offer, label) in CLIENT_ROWS {
        let items: Vec<String> = c
            .values(offer)
            .iter()
            .map(|(v, n)| format!("{v} {}", pct(n / seen)))
            .collect();
        if !items.is_empty() {
            out.extend(wrapped(label, &items, 1)); // most offered first: one line each
        }
    }
    let (offered, refused) = c.returning();
    if offered > 0.0 {
        out.push(format!(
            "{:<10} {} returning/s, {}% got a full handshake",
            "returning",
            rate(offered, secs),
            pct(refused / offered)
        ));
    }
    // the policies that would break (or retry) the most clients first
    let mut ranked: Vec<_> = c
        .policies()
        .into_iter()
        .filter_map(|name| c.policy(name).map(|n| (name, n)))
        .collect();
    ranked.sort_by(|a, b| {
        let key = |n: &crate::views::snapshot::PolicyCount| n.fail_share() + n.hello_retry_share();
        key(&b.1).total_cmp(&key(&a.1))
    });
    let policies: Vec<String> = ranked
        .into_iter()
        .map(|(name, n)| {
            if n.hello_retry > 0.0 {
                format!("{name} {}(+{} HRR)", pct(n.fail_share()), pct(n.hello_retry_share()))
            } else {
                format!("{name} {}", pct(n.fail_share()))
            }
        })
        .collect();
    if !policies.is_empty() {
        out.extend(wrapped("would fail", &policies, 2));
    }
    out
}

/// Items listed after a head ("head: a, b, c"), wrapped at `width` columns between items
/// (the next lines indented by two), in at most `max_lines` lines: the items that do not
/// fit (the last, least counted) are left out, said with "…".
pub(super) fn listed(head: &str, items: &[String], max_lines: usize, width: usize) -> Vec<String> {
    let n = items.len();
    let mut out = vec![format!("{head}:")];
    // the space before the current line's first item: what is before it is never cut
    let mut start = out[0].len();
    for (i, item) in items.iter().enumerate() {
        let word = if i + 1 < n { format!("{item},") } else { item.clone() };
        let full = out.len() >= max_lines;
        let line = out.last_mut().expect("a line");
        let empty = line.len() == start;
        if empty || line.chars().count() + 1 + word.chars().count() <= width {
            line.push(' ');
            line.push_str(&word);
            continue;
        }
        if full {
            while line.chars().count() + 2 > width {
                match line.rfind(' ') {
                    Some(at) if at > start => line.truncate(at),
                    _ => break,
                }
            }
            line.push_str(" …");
            break;
        }
        out.push(format!("  {word}"));
        start = 1;
    }
    out
}

/// A process's failed handshakes by why, with who ended them, and its connections that
/// never offered TLS by kind, most first, after a title line; each only when it counted
/// something in the window (empty when neither did). `max_lines`: the most lines each.
pub(super) fn failure_lines(p: &Proc, secs: f64, max_lines: usize) -> Vec<String> {
    let f = &p.failures;
    let mut out = Vec::new();
    let failed = f.by_failure();
    if !failed.is_empty() {
        let items: Vec<String> = failed
            .iter()
            .map(|(x, n)| format!("{} ({}) {}/s", x.reason.label(), x.by.label(), rate(*n, secs)))
            .collect();
        out.extend(listed(
            &format!("failed {}/s", rate(f.failed(), secs)),
            &items,
            max_lines,
            80,
        ));
    }
    let kinds = f.by_kind();
    if !kinds.is_empty() {
        let items: Vec<String> = kinds
            .iter()
            .map(|(k, n)| format!("{} {}/s", k.label(), rate(*n, secs)))
            .collect();
        out.extend(listed(
            &format!("no TLS {}/s", rate(f.untls(), secs)),
            &items,
            max_lines,
            80,
        ));
    }
    if !out.is_empty() {
        out.insert(
            0,
            format!("{}: failures by why (who ended them), connections without TLS", p.comm),
        );
    }
    out
}
