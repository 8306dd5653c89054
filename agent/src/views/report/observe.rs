//! The observation window: snapshots of the agent's metrics from the start to the end of
//! --seconds (or SIGINT), and the CPU split of each process second by second for the
//! HTML chart.
use std::time::{Duration, Instant};

use anyhow::Result;

use crate::{
    cpu::Category,
    views::{
        live::Live,
        snapshot::{Snapshot, Window},
    },
};

/// The CPU split of each process, second by second, for the chart.
pub struct Series {
    pub comm: String,
    /// (seconds since the start, CPU cores by category)
    pub points: Vec<(f64, Vec<(String, f64)>)>,
}

/// The categories of the CPU split, in chart order.
pub const CATEGORIES: [&str; 6] = Category::ALL_LABELS;

/// What was observed: the first and last snapshots and the series between.
pub struct Observed {
    pub first: Snapshot,
    pub last: Snapshot,
    pub series: Vec<Series>,
}

/// Observes for `seconds`, a snapshot a second; SIGINT ends it early with what was seen.
pub fn observe(live: &mut Live, seconds: f64) -> Result<Observed> {
    log::info!("observing for {seconds} s");
    let first = live.snapshot()?;
    let mut last = first.clone();
    let mut series: Vec<Series> = Vec::new();
    let end = first.at + Duration::from_secs_f64(seconds);
    let mut interrupted = false;
    while last.at < end {
        let step = end
            .saturating_duration_since(Instant::now())
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
            log::info!("interrupted: reporting on what was observed");
            break;
        }
    }
    Ok(Observed { first, last, series })
}
