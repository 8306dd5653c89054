//! The observation window: snapshots of the agent's metrics from the start to the end of
//! --seconds (or SIGINT, or the end of standard input with --until-eof), and the CPU split
//! of each process second by second for the HTML chart.
use std::{
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use anyhow::Result;

use crate::{
    cpu::Category,
    metrics::LabelValue,
    views::{
        live::Live,
        snapshot::{Snapshot, Window},
    },
};

/// The CPU split of each process, second by second, for the chart.
pub struct Series {
    pub comm: String,
    /// (seconds since the start, CPU cores by category)
    pub points: Vec<(f64, Vec<(Category, f64)>)>,
}

/// What was observed: the first and last snapshots and the series between, and the
/// snapshots that part the window (the first and the last among them).
pub struct Observed {
    pub first: Snapshot,
    pub last: Snapshot,
    pub series: Vec<Series>,
    pub parts: Vec<Snapshot>,
}

/// The window is parted in parts of PART_SECONDS while they are at most 2 × PARTS, then
/// two by two into parts twice as long: PARTS to 2 × PARTS parts of one length, however long
/// the window turns out (SIGINT, --until-eof), a snapshot kept per part. A part shorter than
/// half of one at the end joins the one before. Not shorter than two snapshots: the agent
/// reads a process's CPU at its scans, a second apart, and a part's CPU may be off by up to
/// a scan. How much a figure moves from one part to the next is the noise a comparison
/// holds (compare/figures.rs).
pub const PARTS: usize = 10;
pub const PART_SECONDS: Duration = Duration::from_secs(2);

/// Keeps `now` as the end of a part when the part has lasted `len`; `last`: the window's
/// end, which ends the last part (joining a short one to the one before).
fn part(parts: &mut Vec<Snapshot>, now: &Snapshot, len: &mut Duration, last: bool) {
    let Some(start) = parts.last() else {
        parts.push(now.clone());
        return;
    };
    let lasted = now.at.saturating_duration_since(start.at);
    if lasted >= *len {
        parts.push(now.clone());
    } else if last && parts.len() >= 2 {
        if lasted < *len / 2 {
            parts.pop();
        }
        parts.push(now.clone());
    }
    if !last && parts.len() > 2 * PARTS + 1 {
        // the ends of every other part go: half as many parts, twice as long
        let mut i = 0;
        parts.retain(|_| {
            i += 1;
            i % 2 == 1
        });
        *len *= 2;
    }
}

/// Why the window ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// --seconds passed.
    Seconds,
    /// SIGINT or SIGTERM.
    Interrupted,
    /// Standard input reached its end (--until-eof).
    InputClosed,
}

/// How long the window goes on after standard input closed, at most, for the last
/// connections' closes and handshakes to be counted. It ends sooner, after two of the
/// agent's scans of which the last saw nothing more.
const SETTLE_MAX: Duration = Duration::from_secs(10);
const SETTLE_STEP: Duration = Duration::from_millis(200);

/// Observes for `seconds`, a snapshot a second; SIGINT ends it early with what was seen,
/// and so does the end of standard input with `until_eof`, once the counts have settled.
pub fn observe(live: &mut Live, seconds: f64, until_eof: bool) -> Result<Observed> {
    let input_closed = until_eof.then(watch_stdin);
    let closed = || input_closed.as_ref().is_some_and(|c| c.load(Ordering::SeqCst));
    log::info!(
        "observing for {seconds} s{}",
        if until_eof {
            " or until standard input closes"
        } else {
            ""
        }
    );
    let first = live.snapshot()?;
    let mut last = first.clone();
    let mut series: Vec<Series> = Vec::new();
    let mut len = PART_SECONDS;
    let mut parts = vec![first.clone()];
    let end = first.at + Duration::from_secs_f64(seconds);
    let mut ended = End::Seconds;
    while last.at < end {
        let step = end
            .saturating_duration_since(Instant::now())
            .min(Duration::from_secs(1));
        if !live.sleep_unless(step, closed) {
            ended = if closed() { End::InputClosed } else { End::Interrupted };
        }
        let now = live.snapshot()?;
        add_point(&mut series, &first, &last, &now, &live.comms);
        part(&mut parts, &now, &mut len, false);
        last = now;
        if ended != End::Seconds {
            break;
        }
    }
    match ended {
        End::Seconds => {}
        End::Interrupted => log::info!("interrupted: reporting on what was observed"),
        End::InputClosed => {
            log::info!("standard input closed: reporting once the last events are counted");
            last = settle(live, &first, last, &mut series)?;
        }
    }
    if parts.last().is_none_or(|p| p.at != last.at) {
        part(&mut parts, &last, &mut len, true);
    }
    Ok(Observed {
        first,
        last,
        series,
        parts,
    })
}

/// Goes on until the agent has completed two scans since standard input closed and its
/// counts did not move during the last (at most SETTLE_MAX); then the agent started here
/// is stopped, which counts what it still holds, and the last snapshot is taken.
fn settle(live: &mut Live, first: &Snapshot, mut last: Snapshot, series: &mut Vec<Series>) -> Result<Snapshot> {
    let until = Instant::now() + SETTLE_MAX;
    let closed_at = last.scans();
    let mut at_scan = (closed_at, last.activity());
    while Instant::now() < until && live.sleep(SETTLE_STEP) {
        let now = live.snapshot()?;
        let scans = now.scans();
        if scans <= at_scan.0 {
            continue;
        }
        let quiet = now.activity() == at_scan.1;
        at_scan = (scans, now.activity());
        add_point(series, first, &last, &now, &live.comms);
        last = now;
        if quiet && scans >= closed_at + 2.0 {
            break;
        }
    }
    live.finish()?;
    live.snapshot()
}

/// The CPU split of each process between two snapshots, as a point of the chart.
fn add_point(series: &mut Vec<Series>, first: &Snapshot, last: &Snapshot, now: &Snapshot, comms: &[String]) {
    let w = Window::between(last, now, comms);
    let t = now.at.duration_since(first.at).as_secs_f64();
    // A sliver of a second at the end says nothing about the split, which is
    // updated once a second.
    let points = if w.seconds >= 0.5 { &w.procs[..] } else { &[] };
    for p in points {
        let point = Category::ALL.iter().map(|c| (*c, p.cpu_in(*c) / w.seconds)).collect();
        match series.iter_mut().find(|s| s.comm == p.comm) {
            Some(s) => s.points.push((t, point)),
            None => series.push(Series {
                comm: p.comm.clone(),
                points: vec![(t, point)],
            }),
        }
    }
}

/// A thread that reads standard input to its end (and drops what it reads); the flag is
/// set then, or at once when standard input cannot be read.
fn watch_stdin() -> Arc<AtomicBool> {
    let closed = Arc::new(AtomicBool::new(false));
    let flag = closed.clone();
    let spawned = std::thread::Builder::new().name("tlsprof-stdin".into()).spawn(move || {
        let _ = std::io::copy(&mut std::io::stdin().lock(), &mut std::io::sink());
        flag.store(true, Ordering::SeqCst);
    });
    if spawned.is_err() {
        closed.store(true, Ordering::SeqCst);
    }
    closed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_is_parted_evenly_its_short_end_joined() {
        let t0 = Instant::now();
        let at = |s: f64| Snapshot {
            at: t0 + Duration::from_secs_f64(s),
            figures: Default::default(),
        };
        let ends = |parts: &[Snapshot]| -> Vec<f64> { parts.iter().map(|p| (p.at - t0).as_secs_f64()).collect() };
        let run = |seconds: &[f64], end: f64| {
            let mut len = PART_SECONDS;
            let mut parts = vec![at(0.0)];
            for &s in seconds {
                part(&mut parts, &at(s), &mut len, false);
            }
            part(&mut parts, &at(end), &mut len, true);
            (ends(&parts), len)
        };
        // snapshots a second apart, then the end 0.8 s after the last: under half a part,
        // joined to the one before
        let (e, len) = run(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], 6.8);
        assert_eq!((e, len), (vec![0.0, 2.0, 4.0, 6.8], PART_SECONDS));
        // the end 1 s after: a part of its own
        assert_eq!(run(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], 7.0).0, [0.0, 2.0, 4.0, 6.0, 7.0]);
        // 21 parts of 2 s: 10 of 4 s, then of 4 s on; 90 s: 11 of 8 s and the last 2 s
        // joined (under half a part)
        let seconds: Vec<f64> = (1..=90).map(f64::from).collect();
        let (e, len) = run(&seconds, 90.0);
        assert_eq!(len, PART_SECONDS * 4);
        assert_eq!(
            e,
            [0.0, 8.0, 16.0, 24.0, 32.0, 40.0, 48.0, 56.0, 64.0, 72.0, 80.0, 90.0]
        );
        // shorter than one part: none
        assert_eq!(run(&[1.0], 1.5).0, [0.0]);
    }
}
