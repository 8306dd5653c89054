//! The report in HTML (--html): the same findings and tables, with charts of the CPU split
//! over time and of the cost per handshake, as inline SVG with no script and no network.
use std::fmt::Write as _;

use super::{
    markdown::{config_label, fmt_saving, transport_rows, FAILURES_INTRO, NO_QUIC, TRANSPORT_INTRO, WITHOUT_TLS_INTRO},
    observe::Series,
    rules::{ms, Finding},
};
use crate::bpf::conn::ClosedBy;
use crate::cpu::Category;
use crate::hostcost::HostCosts;
use crate::metrics::LabelValue;
use crate::views::snapshot::{Proc, Window};

pub fn esc(s: &str) -> String {
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
pub fn colour(category: Category) -> &'static str {
    match category {
        Category::Handshake => "#d62728",
        Category::Crypto => "#ff7f0e",
        Category::TlsLibrary => "#9467bd",
        Category::KernelNet => "#1f77b4",
        Category::Probes => "#7f7f7f",
        Category::Other => "#2ca02c",
    }
}

/// A stacked area chart of one process's CPU by category over time (SVG).
fn split_chart(s: &Series) -> String {
    let (w, h, left, bottom) = (640.0, 220.0, 50.0, 24.0);
    let t_max = s.points.last().map(|p| p.0).unwrap_or(1.0).max(1.0);
    let total = |p: &(f64, Vec<(Category, f64)>)| p.1.iter().map(|x| x.1).sum::<f64>();
    let y_max = s.points.iter().map(total).fold(0.0f64, f64::max).max(0.01) * 1.1;
    let x = |t: f64| left + (t / t_max) * (w - left - 10.0);
    let y = |v: f64| (h - bottom) - v / y_max * (h - bottom - 10.0);
    let mut svg = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" role=\"img\" \
         aria-label=\"CPU split of {} over time\">",
        esc(&s.comm)
    );
    let mut base = vec![0.0; s.points.len()];
    for (ci, cat) in Category::ALL.iter().enumerate() {
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
            colour(*cat)
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
            if c.negotiated.resumed { "#98df8a" } else { "#d62728" },
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
        "<p>Handshakes/s: {:.1} full, {:.1} resumed, {:.1} failed. CPU: {:.1}% of a core.{}</p>",
        p.full / s,
        p.resumed / s,
        p.failed / s,
        p.process_cpu / s * 100.0,
        p.cost_per_exchange()
            .map(|(c, t)| format!(
                " Per exchange ({:.1}/s): {} of CPU, of it TLS {}.",
                p.exchanges() / s,
                ms(c),
                ms(t)
            ))
            .unwrap_or_default()
    );
    if !p.configs.is_empty() {
        o.push_str("<table><tr><th>Configuration</th><th>Handshakes/s</th><th>CPU per handshake</th></tr>");
        let mut cs = p.configs.clone();
        cs.sort_by(|a, b| b.handshakes.total_cmp(&a.handshakes));
        for c in &cs {
            let _ = write!(
                o,
                "<tr><td>{}</td><td>{:.1}</td><td>{}</td></tr>",
                esc(&config_label(c)),
                c.handshakes / s,
                c.mean_cpu().map(ms).unwrap_or_default()
            );
        }
        o.push_str("</table>");
    }
    if !p.ports.is_empty() {
        o.push_str(
            "<p></p><table><tr><th>Port</th><th>Protocol</th><th>Connections/s</th><th>Exchanges per connection</th>\
             <th>Closed by server</th><th>TIME_WAIT/s</th><th>TIME_WAIT now</th></tr>",
        );
        for (port, v) in &p.ports {
            let _ = write!(
                o,
                "<tr><td>{}</td><td>{}</td><td>{:.1}</td><td>{}</td><td>{:.0}%</td><td>{:.1}</td><td>{:.0}</td></tr>",
                esc(port),
                esc(v.protocol_name()),
                v.ended / s,
                v.requests_per_connection()
                    .map(|r| format!("{r:.1}"))
                    .unwrap_or("-".into()),
                v.closed_share(ClosedBy::Server) * 100.0,
                v.time_wait / s,
                v.time_wait_sockets
            );
        }
        o.push_str("</table>");
    }
    let (failed, untls) = (p.failures.by_port(), p.failures.untls_by_port());
    if !failed.is_empty() {
        let _ = write!(
            o,
            "<p>{}</p><table class=\"failures\"><tr><th>Port</th><th>Reason</th><th>By</th><th>Failed/s</th>\
             <th>In the window</th></tr>",
            esc_code(FAILURES_INTRO)
        );
        for (port, f, n) in failed {
            let _ = write!(
                o,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{:.1}</td><td>{n:.0}</td></tr>",
                esc(port),
                f.reason.label(),
                f.by.label(),
                n / s
            );
        }
        o.push_str("</table>");
    }
    if !untls.is_empty() {
        let _ = write!(
            o,
            "<p>{}</p><table class=\"without-tls\"><tr><th>Port</th><th>Kind</th><th>Connections/s</th>\
             <th>In the window</th></tr>",
            esc_code(WITHOUT_TLS_INTRO)
        );
        for (port, kind, n) in untls {
            let _ = write!(
                o,
                "<tr><td>{}</td><td>{}</td><td>{:.1}</td><td>{n:.0}</td></tr>",
                esc(port),
                kind.label(),
                n / s
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
             <p>{}</p>{}<p><b>Change:</b> {}</p><p><small>Estimate: {}</small></p></div>",
            f.rule,
            esc(&f.title),
            esc(&fmt_saving(f)),
            esc_code(&f.evidence),
            f.clients
                .as_ref()
                .map(|c| format!("<p class=\"clients\">{}</p>", esc(&super::rules::capitalized(c))))
                .unwrap_or_default(),
            esc_code(&f.fix),
            esc_code(&f.basis)
        );
    }
    o.push_str("<h2>CPU split over time</h2><p class=\"legend\">");
    for &c in Category::ALL {
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
    o.push_str("<h2>Transport</h2>");
    let rows = transport_rows(w);
    if rows.is_empty() {
        let _ = write!(o, "<p>{}</p>", esc(NO_QUIC));
    } else {
        let _ = write!(
            o,
            "<p>{}</p><table class=\"transport\"><tr><th>Process</th><th>Transport</th><th>Handshakes/s</th>\
             <th>Share</th><th>CPU per handshake</th><th>Timed</th></tr>",
            esc(TRANSPORT_INTRO)
        );
        for (p, t, share) in rows {
            let _ = write!(
                o,
                "<tr><td>{}</td><td>{}</td><td>{:.1}</td><td>{:.0}%</td><td>{}</td><td>{:.0}</td></tr>",
                esc(&p.comm),
                t.transport.label(),
                t.handshakes / w.seconds,
                share * 100.0,
                t.mean_cpu().map(ms).unwrap_or_else(|| "not timed".into()),
                t.timed
            );
        }
        o.push_str("</table>");
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
