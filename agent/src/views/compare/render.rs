//! A comparison in words: each figure's sentence ("CPU per full handshake 0.820 → 0.410 ms,
//! −50% ± 4%"), the Markdown and the HTML (a chart per figure, before beside after, with
//! each side's 95% interval, as inline SVG with no script and no network).
use std::fmt::Write as _;

use super::{
    estimate::{Scale, Z95},
    figures::Unit,
    reasons::{per_second, ReasonRates},
    Compared, Comparison,
};
use crate::views::report::esc;

/// How a figure's values are shown: the factor they are multiplied by and their unit (CPU
/// seconds in ms, or µs below a tenth of a millisecond, the same for both sides).
fn scale(f: &Compared) -> (f64, &'static str) {
    match f.unit {
        Unit::Seconds if f.before.into_iter().chain(f.after).fold(0.0f64, |m, v| m.max(v.abs())) >= 1e-4 => {
            (1e3, " ms")
        }
        Unit::Seconds => (1e6, " µs"),
        Unit::PerSecond => (1.0, "/s"),
        Unit::Share => (100.0, "%"),
        Unit::Number => (1.0, ""),
    }
}

fn number(v: f64) -> String {
    if v.abs() >= 100.0 {
        format!("{v:.0}")
    } else if v.abs() >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

/// The two sides of a figure, in one unit: ("0.820", "0.410", " ms").
fn values(f: &Compared) -> (String, String, String) {
    let (k, u) = scale(f);
    let show = |v: Option<f64>| {
        v.map(|v| match (f.unit, u) {
            (Unit::Seconds, " ms") => format!("{:.3}", v * k),
            (Unit::Seconds | Unit::PerSecond | Unit::Share, _) => format!("{:.1}", v * k),
            (Unit::Number, _) => number(v),
        })
        .unwrap_or_else(|| "none".into())
    };
    (show(f.before), show(f.after), u.to_string())
}

/// The two sides with their unit, "none" alone.
fn cells(f: &Compared) -> (String, String) {
    let (a, b, u) = values(f);
    let with = |v: String| if v == "none" { v } else { format!("{v}{u}") };
    (with(a), with(b))
}

fn signed(v: f64, decimals: usize) -> String {
    let s = format!("{:.*}", decimals, v.abs());
    if s.chars().all(|c| c == '0' || c == '.') {
        s
    } else if v < 0.0 {
        format!("−{s}")
    } else {
        format!("+{s}")
    }
}

/// The change and its interval: "−50% ± 4%", "+95.0 points ± 2.1", "" without a ratio.
pub fn change_text(f: &Compared) -> String {
    let (Some(c), Some(i)) = (f.change, f.interval) else {
        return String::new();
    };
    if f.unit == Unit::Share {
        return format!("{} points ± {:.1}", signed(c * 100.0, 1), i * 100.0);
    }
    if f.scale == Scale::Points {
        return format!("{} ± {:.2}", signed(c, 2), i);
    }
    let d = if c.abs() < 0.1 && i < 0.1 { 1 } else { 0 };
    format!("{}% ± {:.*}%", signed(c * 100.0, d), d, i * 100.0)
}

fn label(f: &Compared) -> String {
    match &f.port {
        Some(p) => format!("port {p}: {}", f.label),
        None => f.label.to_string(),
    }
}

/// The figure in a sentence.
pub fn sentence(f: &Compared) -> String {
    let (a, b, u) = values(f);
    let ch = change_text(f);
    let ch = if ch.is_empty() { ch } else { format!(", {ch}") };
    match f.verdict {
        "up" | "down" => format!("{} {a} → {b}{u}{ch}", label(f)),
        "no_change" => format!("no measurable change in {} ({a} → {b}{u}{ch})", label(f)),
        "small" => format!(
            "{} changed by less than the smallest change called one ({a} → {b}{u}{ch})",
            label(f)
        ),
        "load" => format!("{} {a} → {b}{u}{ch}: the load's doing", label(f)),
        "too_little" => format!("too little behind {} to compare ({a} → {b}{u}{ch})", label(f)),
        _ => {
            let with = |v: &str| if v == "none" { v.to_string() } else { format!("{v}{u}") };
            format!("{}: {} before, {} after", label(f), with(&a), with(&b))
        }
    }
}

fn secs(s: f64) -> String {
    format!("{s:.1} s")
}

/// A fraction as a percentage, with a decimal where it has one: 10%, 2.5%.
fn pct(x: f64) -> String {
    let p = x * 100.0;
    if (p - p.round()).abs() < 1e-9 {
        format!("{p:.0}%")
    } else {
        format!("{p:.1}%")
    }
}

fn intro(c: &Comparison, before: &str, after: &str) -> String {
    let runs = if c.runs_before > 1 || c.runs_after > 1 {
        format!(
            " Runs of each configuration: {} before, {} after; each figure is their mean, and its \
             interval is widened to the runs' own spread where that is the wider.",
            c.runs_before, c.runs_after
        )
    } else {
        " One run of each: the intervals cannot hold how much the server's own cost differs from \
         one run to the next with nothing changed; compare two runs of the baseline to see it, and \
         pass more runs with --also-before and --also-after."
            .into()
    };
    let text = format!(
        "Before: `{before}` ({} window); after: `{after}` ({}). A change is called one when it is beyond \
         its 95% interval and at least {} ({} points of a share); each interval comes from what its \
         figure is made of: the counts behind a rate, the timed handshakes and their spread behind a CPU \
         per handshake, the CPU samples behind a share.",
        secs(c.before_seconds),
        secs(c.after_seconds),
        pct(c.min_change),
        pct(c.min_change).trim_end_matches('%')
    );
    text + &runs
}

fn verdict_word(v: &str) -> &'static str {
    match v {
        "up" => "higher",
        "down" => "lower",
        "no_change" => "no change",
        "small" => "under the threshold",
        "load" => "the load",
        "too_little" => "too little to say",
        _ => "one side only",
    }
}

fn called(f: &&Compared) -> bool {
    matches!(f.verdict, "up" | "down")
}

/// What the failures' part says before its table.
const FAILURES_INTRO: &str = "What the clients did: failed handshakes by why (who ended them) and connections that \
     never offered TLS, per second of each window. They are the load's and its clients' doing as much as the \
     server's, shown side by side and not judged against the noise.";

fn failures_markdown(o: &mut String, rows: &[ReasonRates]) {
    if rows.is_empty() {
        return;
    }
    let _ = write!(
        o,
        "\n{FAILURES_INTRO}\n\n| Port | What | Before | After |\n|---|---|---:|---:|\n"
    );
    for r in rows {
        let _ = writeln!(
            o,
            "| {} | {} | {} | {} |",
            r.port,
            r.label(),
            per_second(r.before_per_second),
            per_second(r.after_per_second)
        );
    }
}

fn failures_html(o: &mut String, rows: &[ReasonRates]) {
    if rows.is_empty() {
        return;
    }
    let _ = write!(
        o,
        "<p>{}</p><table class=\"failures\"><tr><th>Port</th><th>What</th><th>Before</th><th>After</th></tr>",
        esc(FAILURES_INTRO)
    );
    for r in rows {
        let _ = write!(
            o,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&r.port),
            esc(&r.label()),
            per_second(r.before_per_second),
            per_second(r.after_per_second)
        );
    }
    o.push_str("</table>");
}

pub fn markdown(c: &Comparison, before: &str, after: &str) -> String {
    let mut o = String::from("# Before and after\n\n");
    o += &intro(c, before, after);
    o += "\n";
    if c.processes.is_empty() {
        o += "\nNo traced process was seen in either window.\n";
    }
    for p in &c.processes {
        let _ = write!(o, "\n## {}\n\n", p.comm);
        match p.seen {
            "before" => o += "Seen before only: not in the later window.\n\n",
            "after" => o += "Seen after only: not in the baseline.\n\n",
            _ => {}
        }
        if p.config_changes.is_empty() && p.offer_changes.is_empty() {
            if p.wire_compared {
                o += "The wire shows no change in the negotiated parameters or the clients' offers.\n\n";
            } else if p.seen == "both" {
                o += "Nothing to compare on the wire: one side has no handshake whose parameters were seen.\n\n";
            }
        } else {
            o += "What changed on the wire:\n\n";
            for x in &p.config_changes {
                let _ = writeln!(o, "- {}", x.text);
            }
            for x in &p.offer_changes {
                let _ = writeln!(o, "- {}", x.text);
            }
            o += "\n";
        }
        let changed: Vec<&Compared> = p.figures.iter().filter(called).collect();
        if !changed.is_empty() {
            o += "Changed beyond the noise:\n\n";
            for f in &changed {
                let _ = writeln!(o, "- {}", f.text);
            }
            o += "\n";
        }
        let load: Vec<&Compared> = p.figures.iter().filter(|f| f.verdict == "load").collect();
        if !load.is_empty() {
            o += "What the load did (its rates moved; a load run faster or slower moves them whatever the \
                  server's configuration, so they are not called a change of the server):\n\n";
            for f in &load {
                let _ = writeln!(o, "- {}", f.text);
            }
            o += "\n";
        }
        let labels =
            |verdict: &str| -> Vec<String> { p.figures.iter().filter(|f| f.verdict == verdict).map(label).collect() };
        let same = labels("no_change");
        if !same.is_empty() {
            let _ = writeln!(o, "No measurable change in: {}.\n", same.join("; "));
        }
        let small = labels("small");
        if !small.is_empty() {
            let _ = writeln!(o, "Changed by less than {}: {}.\n", pct(c.min_change), small.join("; "));
        }
        let little = labels("too_little");
        if !little.is_empty() {
            let _ = writeln!(
                o,
                "Too little behind these to compare (an interval wider than the figure): {}.\n",
                little.join("; ")
            );
        }
        o += "| Figure | Before | After | Change | |\n|---|---:|---:|---:|---|\n";
        for f in &p.figures {
            let (a, b) = cells(f);
            let _ = writeln!(
                o,
                "| {} | {a} | {b} | {} | {} |",
                label(f),
                change_text(f),
                verdict_word(f.verdict)
            );
        }
        failures_markdown(&mut o, &p.failures);
    }
    o += "\n## The baseline's findings\n\n";
    if c.findings.is_empty() {
        o += "Neither report had a finding.\n";
    }
    for f in &c.findings {
        let _ = writeln!(o, "- **{}** (`{}`): {}", f.title, f.rule, f.text);
    }
    o
}

/// Two bars, before and after, each with its 95% interval.
fn chart(f: &Compared) -> String {
    let (w, h, bottom) = (280.0, 150.0, 22.0);
    let (k, u) = scale(f);
    let sides = [
        ("before", f.before, f.before_se, "#7f7f7f"),
        ("after", f.after, f.after_se, "#1f77b4"),
    ];
    let top = sides
        .iter()
        .map(|s| (s.1.unwrap_or(0.0) + Z95 * s.2.unwrap_or(0.0)) * k)
        .fold(0.0f64, f64::max)
        .max(1e-9)
        * 1.15;
    let y = |v: f64| (h - bottom) - (v * k / top) * (h - bottom - 10.0);
    let mut svg = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" role=\"img\" aria-label=\"{}\">",
        esc(&f.text)
    );
    for (i, (name, v, se, colour)) in sides.iter().enumerate() {
        let x = 40.0 + i as f64 * 110.0;
        if let Some(v) = v {
            let _ = write!(
                svg,
                "<rect class=\"{name}\" x=\"{x}\" y=\"{:.1}\" width=\"70\" height=\"{:.1}\" fill=\"{colour}\"/>",
                y(*v),
                (h - bottom) - y(*v)
            );
            let e = Z95 * se.unwrap_or(0.0);
            let (lo, hi) = (y((v - e).max(0.0)), y(v + e));
            let cx = x + 35.0;
            let _ = write!(
                svg,
                "<path d=\"M{cx} {lo:.1}V{hi:.1}M{} {hi:.1}H{}M{} {lo:.1}H{}\" stroke=\"#000\"/>",
                cx - 8.0,
                cx + 8.0,
                cx - 8.0,
                cx + 8.0
            );
            let _ = write!(
                svg,
                "<text x=\"{cx}\" y=\"{:.1}\" font-size=\"11\" text-anchor=\"middle\">{}</text>",
                (hi - 4.0).max(10.0),
                esc(&format!("{}{u}", number(v * k)))
            );
        }
        let _ = write!(
            svg,
            "<text x=\"{}\" y=\"{}\" font-size=\"11\" text-anchor=\"middle\">{name}</text>",
            x + 35.0,
            h - 6.0
        );
    }
    svg += "</svg>";
    svg
}

pub fn html(c: &Comparison, before: &str, after: &str) -> String {
    let mut o = String::from(
        "<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>tlsprof: before and after</title><style>\
         body{font-family:sans-serif;max-width:1000px;margin:2em auto}table{border-collapse:collapse}\
         td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}td:first-child,th:first-child{text-align:left}\
         .figure{display:inline-block;margin:6px;vertical-align:top;width:290px}\
         .figure p{font-size:12px;margin:0}.up,.down{font-weight:bold}</style></head><body>\
         <h1>Before and after</h1>",
    );
    let _ = write!(o, "<p>{}</p>", esc(&intro(c, before, after).replace('`', "")));
    for p in &c.processes {
        let _ = write!(o, "<h2>{}</h2>", esc(&p.comm));
        let wire: Vec<&String> = p
            .config_changes
            .iter()
            .map(|x| &x.text)
            .chain(p.offer_changes.iter().map(|x| &x.text))
            .collect();
        if !wire.is_empty() {
            o += "<p>What changed on the wire:</p><ul>";
            for t in wire {
                let _ = write!(o, "<li>{}</li>", esc(t));
            }
            o += "</ul>";
        }
        o += "<table><tr><th>Figure</th><th>Before</th><th>After</th><th>Change</th><th></th></tr>";
        for f in &p.figures {
            let (a, b) = cells(f);
            let _ = write!(
                o,
                "<tr class=\"{}\"><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                f.verdict,
                esc(&label(f)),
                esc(&a),
                esc(&b),
                esc(&change_text(f)),
                verdict_word(f.verdict)
            );
        }
        o += "</table>";
        failures_html(&mut o, &p.failures);
        for f in p.figures.iter().filter(|f| f.verdict != "not_comparable") {
            let _ = write!(
                o,
                "<div class=\"figure\">{}<p class=\"{}\">{}</p></div>",
                chart(f),
                f.verdict,
                esc(&f.text)
            );
        }
    }
    o += "<h2>The baseline's findings</h2><ul>";
    for f in &c.findings {
        let _ = write!(
            o,
            "<li class=\"{}\"><b>{}</b> ({}): {}</li>",
            f.status,
            esc(&f.title),
            esc(&f.rule),
            esc(&f.text)
        );
    }
    o += "</ul></body></html>\n";
    o
}
