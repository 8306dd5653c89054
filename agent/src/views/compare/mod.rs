//! `tlsprof compare BEFORE.json AFTER.json` (and `tlsprof report --baseline`): what a
//! configuration change did to the server. Per process and port, each figure before and
//! after with its change and whether the change is beyond the noise (figures.rs: which
//! figures, and what each is made of; estimate.rs: the intervals), what the wire shows
//! changed in the configuration (configs.rs), what the clients did (reasons.rs: the failed
//! handshakes by why, the connections without TLS, side by side), and the baseline's
//! findings carried over with the saving measured (findings.rs); in Markdown, HTML and
//! JSON (render.rs).
mod configs;
mod estimate;
mod figures;
mod findings;
mod reasons;
mod render;
#[cfg(test)]
mod tests;

use std::path::{Path, PathBuf};

use anyhow::{bail, Result};
use serde::Serialize;

use self::{
    configs::{config_changes, offer_changes, wire_seen, ConfigChange, OfferChange},
    estimate::{change_runs, Estimate, Runs, Scale, Verdict},
    figures::{port_figures, Figure, Side, Unit, ASSUMED_SAMPLE_HZ},
    findings::{carry, CarriedFinding},
    reasons::{reason_rates, ReasonRates},
};
pub use self::{
    figures::part_figures,
    render::{html, markdown},
};
use crate::views::report::{
    check_writable,
    json::{to_json, ReportDoc},
    write_file,
};

/// A change smaller than this (10%, or 10 points of a share) is not called one, whatever its
/// interval. The intervals say how precisely each window measured its figure; they cannot
/// see how much the server itself differs from one run to the next, which no single window
/// shows: two windows of one unchanged nginx on the development VM differed in CPU per
/// handshake by under 10% in 12 of 20 pairs, by up to 24% in the others
/// (bench/results-noise.txt); repeated runs (--also-before) put that spread in the
/// intervals.
pub const MIN_CHANGE: f64 = 0.10;

#[derive(clap::Args, Debug, Clone)]
pub struct CompareArgs {
    /// The baseline: a report's JSON (`tlsprof report --json`).
    pub before: PathBuf,
    /// The later report's JSON.
    pub after: PathBuf,
    /// Another run of the baseline's configuration (repeatable): the runs' spread, the
    /// server's own noise from one run to the next, widens each interval.
    #[arg(long = "also-before", value_name = "FILE")]
    pub also_before: Vec<PathBuf>,
    /// Another run of the later configuration (repeatable).
    #[arg(long = "also-after", value_name = "FILE")]
    pub also_after: Vec<PathBuf>,
    #[command(flatten)]
    pub out: CompareOut,
}

/// Where a comparison goes, and the smallest change it calls one.
#[derive(clap::Args, Debug, Clone)]
pub struct CompareOut {
    /// Write the comparison in Markdown here (default: standard output).
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Also write it in HTML, a chart per figure.
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,
    /// Also write it as JSON.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    #[command(flatten)]
    pub min: MinChange,
}

#[derive(clap::Args, Debug, Clone)]
pub struct MinChange {
    /// The smallest change called one, as a fraction (0.1: 10%, or 10 points of a share);
    /// smaller ones are "under the threshold", those within their 95% interval "no
    /// measurable change".
    #[arg(long, default_value_t = MIN_CHANGE, value_name = "FRACTION")]
    pub min_change: f64,
}

impl Default for MinChange {
    fn default() -> Self {
        MinChange { min_change: MIN_CHANGE }
    }
}

/// One figure compared.
#[derive(Serialize, Debug, Clone)]
pub struct Compared {
    pub name: &'static str,
    /// The listening port, for a port's figures.
    pub port: Option<String>,
    pub label: &'static str,
    pub before: Option<f64>,
    pub after: Option<f64>,
    /// after ÷ before − 1; for a share (`…_share`, `time_wait_per_request`), after − before.
    pub change: Option<f64>,
    /// The 95% half-width of the change, in its unit.
    pub interval: Option<f64>,
    /// up, down (called), no_change (within its interval), small (beyond it, under
    /// --min-change), load (a rate of the load that moved: the clients' doing, not called),
    /// too_little (an interval wider than the figure on both sides), not_comparable (one
    /// side only).
    pub verdict: &'static str,
    pub text: String,
    #[serde(skip)]
    pub unit: Unit,
    #[serde(skip)]
    pub scale: Scale,
    #[serde(skip)]
    pub before_se: Option<f64>,
    #[serde(skip)]
    pub after_se: Option<f64>,
}

#[derive(Serialize, Debug, Clone)]
pub struct ProcessComparison {
    pub comm: String,
    /// before, after, both: where the process was seen.
    pub seen: &'static str,
    pub figures: Vec<Compared>,
    pub config_changes: Vec<ConfigChange>,
    pub offer_changes: Vec<OfferChange>,
    /// Both sides had handshakes whose parameters were seen: no change in config_changes
    /// means none on the wire.
    pub wire_compared: bool,
    /// The failed handshakes by port, why and who ended them, and the connections without
    /// TLS by kind, each side's first run: what the clients did, side by side.
    pub failures: Vec<ReasonRates>,
}

#[derive(Serialize, Debug, Clone)]
pub struct Comparison {
    /// The first run's window of each side.
    pub before_seconds: f64,
    pub after_seconds: f64,
    /// Runs of each configuration compared (the figures are their means).
    pub runs_before: usize,
    pub runs_after: usize,
    pub min_change: f64,
    pub processes: Vec<ProcessComparison>,
    pub findings: Vec<CarriedFinding>,
}

fn side<'a>(r: &'a ReportDoc, comm: &str) -> Option<Side<'a>> {
    let p = r.processes.iter().find(|p| p.comm == comm)?;
    Some(Side {
        p,
        seconds: r.window_seconds,
        sample_hz: r.sample_hz.unwrap_or(ASSUMED_SAMPLE_HZ),
    })
}

/// One figure of every run of one side: their mean and spread (None when no run has it).
fn runs_of(runs: &[Vec<Figure>], name: &str) -> (Option<Figure>, Option<Runs>) {
    let found: Vec<Figure> = runs
        .iter()
        .filter_map(|r| r.iter().find(|f| f.name == name).copied())
        .collect();
    // A figure that is not a finite number (counts too large to divide) is not compared.
    let estimates: Vec<Estimate> = found
        .iter()
        .filter_map(|f| f.estimate)
        .filter(|e| e.value.is_finite() && e.se.is_finite())
        .collect();
    (found.first().copied(), Runs::of(&estimates))
}

fn compared(a: &[Vec<Figure>], b: &[Vec<Figure>], name: &str, port: Option<&str>, min_change: f64) -> Option<Compared> {
    let ((fa, ra), (fb, rb)) = (runs_of(a, name), runs_of(b, name));
    let f = fa.or(fb)?;
    let (ea, eb) = (ra.map(|r| r.mean), rb.map(|r| r.mean));
    // Nothing on either side, or nothing but zeros: not a figure of this server.
    if [ea, eb].iter().all(|e| e.is_none_or(|e| e.value == 0.0)) {
        return None;
    }
    let mut c = change_runs(ra, rb, f.scale, min_change);
    if f.of_the_load() && matches!(c.verdict, Verdict::Up | Verdict::Down | Verdict::Small) {
        c.verdict = Verdict::Load;
    }
    let mut out = Compared {
        name: f.name,
        port: port.map(str::to_string),
        label: f.label,
        before: ea.map(|e| e.value),
        after: eb.map(|e| e.value),
        change: c.change,
        interval: c.interval,
        verdict: c.verdict.label(),
        text: String::new(),
        unit: f.unit,
        scale: f.scale,
        before_se: ea.map(|e| e.se),
        after_se: eb.map(|e| e.se),
    };
    out.text = render::sentence(&out);
    Some(out)
}

/// The figures of each side's runs compared, in the order the figures come.
fn compare_figures(a: &[Vec<Figure>], b: &[Vec<Figure>], port: Option<&str>, min_change: f64) -> Vec<Compared> {
    let mut names: Vec<&str> = Vec::new();
    for f in a.iter().chain(b).flatten() {
        if !names.contains(&f.name) {
            names.push(f.name);
        }
    }
    names
        .into_iter()
        .filter_map(|n| compared(a, b, n, port, min_change))
        .collect()
}

/// The comparison of two reports, one window each.
#[cfg(test)]
pub fn compare(before: &ReportDoc, after: &ReportDoc, min_change: f64) -> Comparison {
    compare_runs(std::slice::from_ref(before), std::slice::from_ref(after), min_change)
}

/// The comparison of two configurations, one report or more each (runs of it, the first the
/// one whose configuration, clients and findings are compared; none is empty).
pub fn compare_runs(before: &[ReportDoc], after: &[ReportDoc], min_change: f64) -> Comparison {
    let mut comms: Vec<&str> = Vec::new();
    for p in before.iter().chain(after).flat_map(|r| &r.processes) {
        if !comms.contains(&p.comm.as_str()) {
            comms.push(&p.comm);
        }
    }
    let processes: Vec<ProcessComparison> = comms
        .into_iter()
        .map(|comm| {
            let a: Vec<Side> = before.iter().filter_map(|r| side(r, comm)).collect();
            let b: Vec<Side> = after.iter().filter_map(|r| side(r, comm)).collect();
            let figures_of = |s: &[Side]| s.iter().map(Side::figures).collect::<Vec<_>>();
            let mut figures = compare_figures(&figures_of(&a), &figures_of(&b), None, min_change);
            let mut ports: Vec<&String> = a.iter().chain(&b).flat_map(|s| s.p.ports.keys()).collect();
            ports.sort();
            ports.dedup();
            ports.sort_by_key(|p| p.parse::<u32>().unwrap_or(u32::MAX));
            for port in ports {
                let of = |s: &[Side]| {
                    s.iter()
                        .filter_map(|s| s.p.ports.get(port).map(|d| port_figures(d, s.seconds)))
                        .collect::<Vec<_>>()
                };
                figures.extend(compare_figures(&of(&a), &of(&b), Some(port), min_change));
            }
            let (config_changes, offer_changes) = match (a.first(), b.first()) {
                (Some(a), Some(b)) => (config_changes(a.p, b.p), offer_changes(a.p, b.p, 10)),
                _ => Default::default(),
            };
            let wire_compared = a
                .first()
                .zip(b.first())
                .is_some_and(|(a, b)| wire_seen(a.p) && wire_seen(b.p));
            let failures = reason_rates(a.first(), b.first());
            ProcessComparison {
                comm: comm.to_string(),
                seen: match (a.is_empty(), b.is_empty()) {
                    (false, false) => "both",
                    (false, true) => "before",
                    _ => "after",
                },
                figures,
                config_changes,
                offer_changes,
                wire_compared,
                failures,
            }
        })
        .collect();
    let findings = carry(&before[0], &after[0], side, &processes);
    Comparison {
        before_seconds: before[0].window_seconds,
        after_seconds: after[0].window_seconds,
        runs_before: before.len(),
        runs_after: after.len(),
        min_change,
        findings,
        processes,
    }
}

pub fn check_min_change(m: &MinChange) -> Result<()> {
    if !(0.0..=10.0).contains(&m.min_change) {
        bail!("--min-change must be a fraction between 0 and 10 (0.1: 10%)");
    }
    Ok(())
}

/// Writes a comparison where `out` says; the Markdown to standard output without -o.
/// Where a comparison is written: Markdown, HTML and JSON, each where named.
pub struct Outputs<'a> {
    pub markdown: Option<&'a Path>,
    pub html: Option<&'a Path>,
    pub json: Option<&'a Path>,
}

/// Writes a comparison of `before` and `after` (as the reader is to name them) to its
/// outputs, the one writer of both `tlsprof compare` and `report --baseline`; gives the
/// Markdown back when no file is named for it (compare prints it, report ends its own
/// with it).
pub fn write(c: &Comparison, to: &Outputs, before: &str, after: &str) -> Result<Option<String>> {
    let md = markdown(c, before, after);
    let unwritten = match to.markdown {
        Some(p) => {
            write_file(p, md)?;
            None
        }
        None => Some(md),
    };
    if let Some(p) = to.html {
        write_file(p, html(c, before, after))?;
    }
    if let Some(p) = to.json {
        write_file(p, to_json(c))?;
    }
    Ok(unwritten)
}

pub fn run(args: CompareArgs) -> Result<()> {
    check_min_change(&args.out.min)?;
    let read = |first: &PathBuf, more: &[PathBuf]| {
        std::iter::once(first)
            .chain(more)
            .map(|p| ReportDoc::read(p))
            .collect::<Result<Vec<_>>>()
    };
    let before = read(&args.before, &args.also_before)?;
    let after = read(&args.after, &args.also_after)?;
    check_writable([&args.out.output, &args.out.html, &args.out.json])?;
    let c = compare_runs(&before, &after, args.out.min.min_change);
    let to = Outputs {
        markdown: args.out.output.as_deref(),
        html: args.out.html.as_deref(),
        json: args.out.json.as_deref(),
    };
    if let Some(md) = write(
        &c,
        &to,
        &args.before.display().to_string(),
        &args.after.display().to_string(),
    )? {
        print!("{md}");
    }
    let called = c
        .processes
        .iter()
        .flat_map(|p| &p.figures)
        .filter(|f| matches!(f.verdict, "up" | "down"))
        .count();
    log::info!("{called} figure(s) changed beyond the noise");
    Ok(())
}
