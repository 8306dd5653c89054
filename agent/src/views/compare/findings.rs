//! The baseline's findings carried over: each resolved, still there, or new; a resolved
//! one with the CPU the change saved measured (the unit figure's fall times the baseline's
//! rate) beside what the baseline estimated, so users learn how good the estimates are.
use serde::Serialize;

use super::{
    figures::{Per, Side},
    Compared, ProcessComparison,
};
use crate::views::report::{
    json::{FindingDoc, ProcessDoc, ReportDoc},
    rules::{MIN_CIPHER_HANDSHAKES, MIN_EVENTS},
};

#[derive(Serialize, Debug, Clone)]
pub struct CarriedFinding {
    pub rule: String,
    pub comm: String,
    pub port: Option<String>,
    pub title: String,
    /// resolved (the baseline's, gone after), remains, new (after's alone), unseen (the
    /// baseline's, its process not in the later window), unjudged (the baseline's, gone
    /// after, but the later window had too few of what the rule weighs to make it).
    pub status: &'static str,
    /// What the baseline estimated the change would save (null for a new one, or where the
    /// rule estimates none); for a finding still there, the later estimate.
    pub estimated_saving_cpu_cores: Option<f64>,
    pub estimated_saving_now_cpu_cores: Option<f64>,
    /// For a resolved finding whose saving is CPU: what the change saved, measured, and
    /// the 95% half-width of that.
    pub measured_saving_cpu_cores: Option<f64>,
    pub measured_interval_cpu_cores: Option<f64>,
    /// The figure the saving is measured by.
    pub measured_by: Option<&'static str>,
    /// The baseline's findings of the process the change resolved that its saving shows in
    /// too (counted per the same thing), this one included; and the measured saving over
    /// their estimates summed.
    pub resolved_with: Vec<String>,
    pub measured_over_estimated: Option<f64>,
    pub text: String,
}

/// What a rule's saving is counted per: its change shows in the process's CPU per handshake
/// (resumption, groups, certificates) or per exchange (keep-alive, record ciphers). Rules
/// without a CPU saving have none.
fn unit(rule: &str) -> Option<Per> {
    match rule {
        "resumption" | "resumption_refused" | "group" | "certificate" => Some(Per::Handshake),
        "keepalive" | "record_cipher" => Some(Per::Exchange),
        _ => None,
    }
}

/// Whether the later window's process had enough of what the rule weighs for the finding's
/// absence to mean something (the rules make no finding on fewer than MIN_EVENTS): its
/// handshakes for a handshake's rules (those that began, failed ones too, for the failures'
/// and the connections without TLS: the later window had clients), the exchanges on the
/// port (or the process) for the others; else why not.
fn judged(f: &FindingDoc, p: &ProcessDoc) -> Result<(), String> {
    let (n, what, need) = match (unit(&f.rule), &f.port) {
        // what the clients did: weighed on the clients that came
        _ if f.rule.starts_with("failure_") || f.rule == "without_tls" => {
            (p.full + p.resumed + p.failed, "handshakes that began", MIN_EVENTS)
        }
        // what a full handshake costs: weighed on full handshakes
        _ if matches!(f.rule.as_str(), "group" | "certificate") => (p.full, "full handshakes", MIN_EVENTS),
        // returning clients, from their ClientHellos
        _ if f.rule == "resumption_refused" => (p.clients.returning, "returning clients", MIN_EVENTS),
        // the suites of its handshakes: five are enough for the rule
        _ if f.rule == "record_cipher" => (p.full + p.resumed, "successful handshakes", MIN_CIPHER_HANDSHAKES),
        (Some(Per::Handshake), _) | (None, None) => (p.full + p.resumed, "successful handshakes", MIN_EVENTS),
        (_, Some(port)) => (
            p.ports.get(port).map_or(0.0, |x| x.exchanges),
            "exchanges on the port",
            MIN_EVENTS,
        ),
        (Some(Per::Exchange), None) => (p.exchanges, "exchanges", MIN_EVENTS),
    };
    if n >= need {
        Ok(())
    } else {
        Err(format!(
            "{n:.0} {what} in the later window, fewer than the {need:.0} the rule needs"
        ))
    }
}

/// What a set of resolved findings estimated together: their estimates added, but those
/// that estimate one saving twice counted once (the larger): `resumption_refused`'s
/// handshakes are among those `resumption` would resume.
pub(super) fn joint_estimate(findings: &[&FindingDoc]) -> Option<f64> {
    let cost = |rule: &str| {
        if rule == "resumption_refused" {
            "resumption"
        } else {
            rule
        }
        .to_string()
    };
    let mut by: Vec<(String, f64)> = Vec::new();
    for f in findings {
        let Some(e) = f.saving_cpu_cores else { continue };
        match by.iter_mut().find(|(c, _)| *c == cost(&f.rule)) {
            Some((_, x)) => *x = x.max(e),
            None => by.push((cost(&f.rule), e)),
        }
    }
    by.into_iter().map(|(_, e)| e).reduce(|a, b| a + b)
}

/// A finding as carried over, with nothing measured yet.
fn carried(f: &FindingDoc, status: &'static str, text: String) -> CarriedFinding {
    CarriedFinding {
        rule: f.rule.clone(),
        comm: f.comm.clone(),
        port: f.port.clone(),
        title: f.title.clone(),
        status,
        estimated_saving_cpu_cores: None,
        estimated_saving_now_cpu_cores: None,
        measured_saving_cpu_cores: None,
        measured_interval_cpu_cores: None,
        measured_by: None,
        resolved_with: Vec::new(),
        measured_over_estimated: None,
        text,
    }
}

fn same(a: &FindingDoc, b: &FindingDoc) -> bool {
    a.rule == b.rule && a.comm == b.comm && a.port == b.port
}

fn cores(c: f64) -> String {
    format!("{:.1}% of a core", c * 100.0)
}

/// The measured saving of the process's change at the baseline's rate: (CPU per unit before
/// less after) × units per second before, with its 95% half-width, and the unit figure as
/// compared (its verdict: whether the fall is beyond the noise and --min-change).
fn measured<'a>(per: Per, before: &Side, figures: &'a [Compared]) -> Option<(f64, f64, &'a Compared)> {
    let name = match per {
        Per::Handshake => "process_cpu_per_handshake_seconds",
        Per::Exchange => "process_cpu_per_exchange_seconds",
    };
    let f = figures.iter().find(|f| f.name == name && f.port.is_none())?;
    let (b, a, interval) = (f.before?, f.after?, f.interval?);
    let rate = before.rate(per)?;
    Some(((b - a) * rate, interval * b * rate, f))
}

/// The baseline's findings carried over, their savings measured by the processes' compared
/// figures.
pub fn carry(
    before: &ReportDoc,
    after: &ReportDoc,
    side: impl for<'a> Fn(&'a ReportDoc, &str) -> Option<Side<'a>>,
    compared: &[ProcessComparison],
) -> Vec<CarriedFinding> {
    let figures = |comm: &str| compared.iter().find(|p| p.comm == comm).map(|p| &p.figures[..]);
    let mut out = Vec::new();
    for f in &before.findings {
        let estimated = f.saving_cpu_cores.map(cores);
        let Some(p) = after.processes.iter().find(|p| p.comm == f.comm) else {
            let text = "not seen after: the process was not in the later window".into();
            out.push(CarriedFinding {
                estimated_saving_cpu_cores: f.saving_cpu_cores,
                ..carried(f, "unseen", text)
            });
            continue;
        };
        if let Some(g) = after.findings.iter().find(|g| same(f, g)) {
            let mut text = match (&estimated, g.saving_cpu_cores) {
                (Some(e), Some(n)) => format!("remains: estimated to save {e} before, {} now", cores(n)),
                _ => "remains".into(),
            };
            // what it says now, where that moved (a group or certificate of another size)
            if g.title != f.title {
                text += &format!("; now: {}", g.title);
            }
            out.push(CarriedFinding {
                estimated_saving_cpu_cores: f.saving_cpu_cores,
                estimated_saving_now_cpu_cores: g.saving_cpu_cores,
                ..carried(f, "remains", text)
            });
            continue;
        }
        if let Err(why) = judged(f, p) {
            out.push(CarriedFinding {
                estimated_saving_cpu_cores: f.saving_cpu_cores,
                ..carried(f, "unjudged", format!("not judged after: {why}"))
            });
            continue;
        }
        let mut c = CarriedFinding {
            estimated_saving_cpu_cores: f.saving_cpu_cores,
            ..carried(f, "resolved", String::new())
        };
        c.text = {
            let per = unit(&f.rule);
            let m = per
                .zip(side(before, &f.comm))
                .zip(figures(&f.comm))
                .and_then(|((per, a), figs)| measured(per, &a, figs));
            if let Some((saved, half, by)) = m {
                c.measured_saving_cpu_cores = Some(saved);
                c.measured_interval_cpu_cores = Some(half);
                c.measured_by = Some(by.name);
            }
            // The change shows in one figure for every finding it resolved that is
            // counted per the same thing: their estimates are set against it together.
            let with: Vec<&FindingDoc> = before
                .findings
                .iter()
                .filter(|g| {
                    g.comm == f.comm
                        && per.is_some()
                        && unit(&g.rule) == per
                        && !after.findings.iter().any(|h| same(g, h))
                        && judged(g, p).is_ok()
                })
                .collect();
            let together = joint_estimate(&with);
            c.resolved_with = with.iter().map(|g| g.rule.clone()).collect();
            c.measured_over_estimated = m.zip(together.filter(|e| *e > 0.0)).map(|((m, _, _), e)| m / e);
            let estimate = match (with.len(), together) {
                (0 | 1, Some(e)) => format!("{} estimated", cores(e)),
                (_, Some(e)) => format!(
                    "{} estimated together for the {} findings it resolved ({})",
                    cores(e),
                    with.len(),
                    with.iter().map(|g| g.rule.as_str()).collect::<Vec<_>>().join(", ")
                ),
                _ => String::new(),
            };
            let saved = |m: f64, half: f64| format!("{:.1}% ± {:.1}% of a core", m * 100.0, half * 100.0);
            let against = if estimate.is_empty() {
                String::new()
            } else {
                format!(" against {estimate}")
            };
            match m {
                Some((m, half, by)) if by.verdict != "down" => format!(
                    "resolved, but the {} did not fall beyond the noise and the smallest change called one: \
                         {} saved (measured){against}",
                    by.label,
                    saved(m, half)
                ),
                Some((m, half, _)) => {
                    let ratio = together
                        .filter(|e| *e > 0.0)
                        .map(|e| format!("; measured ÷ estimated {:.2}", m / e))
                        .unwrap_or_default();
                    format!(
                        "resolved: the change saved {} (measured){against}{ratio}",
                        saved(m, half)
                    )
                }
                None => match estimated {
                    Some(e) => format!("resolved (estimated to save {e}; the saving could not be measured)"),
                    None => "resolved".into(),
                },
            }
        };
        out.push(c);
    }
    for g in after
        .findings
        .iter()
        .filter(|g| !before.findings.iter().any(|f| same(f, g)))
    {
        let text = match g.saving_cpu_cores {
            Some(e) => format!("new: estimated to save {}", cores(e)),
            None => "new".into(),
        };
        out.push(CarriedFinding {
            estimated_saving_now_cpu_cores: g.saving_cpu_cores,
            ..carried(g, "new", text)
        });
    }
    out
}
