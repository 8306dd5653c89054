//! The figures a before/after compares, each read from a report's process (or port) with
//! its standard error from what it is made of: rates from their counts, shares from their
//! counts or the CPU split's samples, costs per handshake from the timed handshakes and
//! their histogram, costs per exchange from the exchanges counted.
use std::collections::BTreeMap;

use super::estimate::{t95, Estimate, Runs, Scale, Z95};
use crate::cpu::Category;
use crate::views::{
    report::json::{PortDoc, ProcessDoc, ReportDoc},
    snapshot::{Window, TLS_CATEGORIES},
};

/// What the agent samples the CPU split at unless told otherwise (cli.rs SAMPLE_HZ): the
/// rate assumed for a report that does not say (one read from a running agent, `--url`).
pub const ASSUMED_SAMPLE_HZ: f64 = crate::cli::SAMPLE_HZ as f64;

/// A share of the CPU split needs this many samples behind it to be compared.
pub const MIN_SAMPLES: f64 = 20.0;
/// How much more a sampled share moves between windows than its samples' binomial error
/// says: the agent splits each second's CPU by that second's samples, and credits the CPU at
/// context switches. nginx beside two memory copiers, four windows of one configuration
/// (~220 samples each, 2026-11-30): the record crypto share's standard deviation was 1.8
/// times its binomial error, the handshake share's 3.4 times (which is why the TLS share
/// takes the handshakes' CPU from the probes where they clock it).
pub const SAMPLED_SPREAD: f64 = 2.0;
/// The same for the TLS share read from the samples alone (its handshake, record crypto and
/// TLS library samples): 3.1 times in those windows.
pub const SAMPLED_TLS_SPREAD: f64 = 3.0;
/// A CPU per handshake needs this many timed handshakes behind it to be compared.
pub const MIN_TIMED: f64 = 20.0;
/// A figure's parts (ProcessDoc::batches) say how much it moves within its window from this
/// many on.
pub const MIN_PARTS: usize = 3;

/// How a figure is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    /// CPU seconds (per something): ms or µs.
    Seconds,
    PerSecond,
    Share,
    /// A plain number (requests per connection).
    Number,
}

/// One figure of one side.
#[derive(Debug, Clone, Copy)]
pub struct Figure {
    pub name: &'static str,
    pub label: &'static str,
    pub unit: Unit,
    pub scale: Scale,
    pub estimate: Option<Estimate>,
}

impl Figure {
    /// A rate (handshakes, failures, connections per second) is what the load did: a load
    /// that ran faster or slower moves it whatever the server's configuration. The costs
    /// (per handshake, per exchange, shares) are what the server did with it.
    pub fn of_the_load(&self) -> bool {
        self.unit == Unit::PerSecond
    }
}

/// A window's side of a process: its report figures, the window's length, the sample rate.
pub struct Side<'a> {
    pub p: &'a ProcessDoc,
    pub seconds: f64,
    pub sample_hz: f64,
}

fn fig(name: &'static str, label: &'static str, unit: Unit, estimate: Option<Estimate>) -> Figure {
    let scale = if unit == Unit::Share {
        Scale::Points
    } else {
        Scale::Relative
    };
    Figure {
        name,
        label,
        unit,
        scale,
        estimate,
    }
}

impl Side<'_> {
    pub fn handshakes(&self) -> f64 {
        self.p.full + self.p.resumed
    }

    /// The mean CPU of the timed handshakes that match, from their summed histograms; none
    /// on fewer than MIN_TIMED, whose spread a histogram cannot say.
    fn handshake_cpu(&self, keep: impl Fn(bool) -> bool) -> Option<Estimate> {
        let cs: Vec<_> = self
            .p
            .configs
            .iter()
            .filter(|c| keep(c.negotiated.resumed) && c.timed > 0.0)
            .collect();
        let n: f64 = cs.iter().map(|c| c.timed).sum();
        let sum: f64 = cs.iter().map(|c| c.cpu_seconds).sum();
        // The configurations' histograms share their bounds: summed bucket by bucket.
        let mut buckets: Vec<[f64; 2]> = Vec::new();
        for c in &cs {
            for (i, &[le, k]) in c.cpu_buckets.iter().enumerate() {
                match buckets.get_mut(i) {
                    Some(b) if b[0] == le => b[1] += k,
                    _ => buckets.push([le, k]),
                }
            }
        }
        if cs.iter().any(|c| c.cpu_buckets.is_empty()) {
            buckets.clear();
        }
        if n < MIN_TIMED {
            return None;
        }
        Estimate::mean(sum, n, &buckets, false)
    }

    /// The CPU split's samples behind the process's shares.
    fn samples(&self) -> f64 {
        self.p.process_cpu_seconds * self.sample_hz
    }

    /// The share of the process's sampled CPU in these categories; none on fewer than
    /// MIN_SAMPLES samples, which say little (raise --sample-hz for short windows). Its error
    /// is the samples' binomial one times SAMPLED_SPREAD.
    fn cpu_share(&self, categories: &[Category], spread: f64) -> Option<Estimate> {
        let all: f64 = self.p.cpu_seconds.values().sum();
        let some: f64 = categories.iter().filter_map(|c| self.p.cpu_seconds.get(c)).sum();
        let n = self.samples();
        let share = (all > 0.0 && n >= MIN_SAMPLES)
            .then(|| Estimate::share(some / all * n, n))
            .flatten()?;
        Some(Estimate {
            se: share.se * spread,
            ..share
        })
    }

    /// Whether the probes timed every handshake of the window (1% aside): the overhead
    /// budget did not keep them away. While they are away, the samples cannot tell a
    /// handshake's work in the TLS library from record crypto, and the agent moves an
    /// estimate of it to the handshakes (cpu/profiler.rs, hidden_handshake): nginx beside
    /// two copiers, its probes away two thirds of the time, once read 0.116 ms of record
    /// crypto per exchange in a window between two of 0.000 and 0.011 ms.
    fn all_timed(&self) -> bool {
        self.handshakes() > 0.0 && self.timed() >= 0.99 * self.handshakes()
    }

    /// The handshakes the probes timed.
    fn timed(&self) -> f64 {
        self.p.configs.iter().map(|c| c.timed).sum()
    }

    /// The TLS share of the process's CPU. Where the probes timed every handshake: their CPU
    /// with the sampled record crypto and TLS library, over the process's CPU; else the
    /// samples alone (all_timed says why). The samples' handshake share
    /// moves far beyond its samples' error between windows of one configuration on a busy
    /// host (2026-11-30, nginx beside two memory copiers, eight pairs of ~550 samples: by
    /// up to 0.16, where a binomial error is 0.026), the clocked CPU per handshake by 4%.
    fn tls_share(&self) -> Option<Estimate> {
        let cpu = self.p.process_cpu_seconds;
        let Some(hs) = self.handshake_cpu(|_| true).filter(|_| cpu > 0.0 && self.all_timed()) else {
            return self.cpu_share(&TLS_CATEGORIES, SAMPLED_TLS_SPREAD);
        };
        let rest = self.cpu_share(&[Category::Crypto, Category::TlsLibrary], SAMPLED_SPREAD)?;
        let per_cpu = self.handshakes() / cpu;
        Some(Estimate {
            value: (hs.value * per_cpu + rest.value).min(1.0),
            se: ((hs.se * per_cpu).powi(2) + rest.se.powi(2)).sqrt(),
        })
    }

    /// Exchanges on TCP connections, and the process's CPU over them (its TCP connections'
    /// part where a few handshakes came over QUIC: snapshot.rs cost_per_exchange); none
    /// where they do not stand for its work.
    fn exchanges(&self) -> Option<(f64, f64)> {
        let n = self.p.exchanges;
        let per = self.p.cpu_per_exchange_seconds.filter(|_| n > 0.0)?;
        Some((n, per * n))
    }

    /// The process's figures, each with an error no smaller than what the window's parts
    /// say of it (held).
    pub fn figures(&self) -> Vec<Figure> {
        self.measured().into_iter().map(|f| self.held(f)).collect()
    }

    /// A figure's error widened to how much it moved from one part of the window to the
    /// next (batch means: the parts' values' standard deviation over √parts, at Student's
    /// t on their degrees of freedom, said at the normal's 1.96 the change is judged by).
    /// What varies within a window the count, the histogram and the samples do not hold:
    /// the host's other work, the server's own drift.
    fn held(&self, f: Figure) -> Figure {
        let Some(e) = f.estimate.filter(|_| !FROM_PROCESS_CPU.contains(&f.name)) else {
            return f;
        };
        let parts: Vec<Estimate> = self
            .p
            .batches
            .iter()
            .filter_map(|b| b.get(f.name).copied())
            .filter(|v| v.is_finite())
            .map(|value| Estimate { value, se: 0.0 })
            .collect();
        let Some(runs) = Runs::of(&parts).filter(|_| parts.len() >= MIN_PARTS) else {
            return f;
        };
        // the parts' spread, as repeated runs' (estimate.rs Runs)
        let k = runs.k;
        let se = (runs.ss / (k - 1.0)).sqrt() / k.sqrt() * t95(k - 1.0) / Z95;
        Figure {
            estimate: Some(Estimate { se: e.se.max(se), ..e }),
            ..f
        }
    }

    /// The process's figures as its window's counts, histograms and samples make them, in
    /// the order they are shown.
    fn measured(&self) -> Vec<Figure> {
        let hs = self.handshakes();
        let cpu = self.p.process_cpu_seconds;
        // An exchange's cost is not seen alone: taken to vary as much as its mean.
        let per_exchange = self.exchanges().and_then(|(n, cpu)| Estimate::per_event(cpu, n, 1.0));
        // A connection's cost varies as its handshake's does, which is seen (1 without).
        let all = self.handshake_cpu(|_| true);
        let cv = all.and_then(|e| e.cv(self.timed())).unwrap_or(1.0);
        // record crypto only where no handshake work can hide in it
        let crypto = self
            .all_timed()
            .then(|| self.cpu_share(&[Category::Crypto], SAMPLED_SPREAD))
            .flatten();
        vec![
            fig(
                "handshakes_per_second",
                "successful handshakes",
                Unit::PerSecond,
                Some(Estimate::rate(hs, self.seconds)),
            ),
            fig(
                "failed_per_second",
                "failed handshakes",
                Unit::PerSecond,
                Some(Estimate::rate(self.p.failed, self.seconds)),
            ),
            fig(
                "resumed_share",
                "resumed handshakes",
                Unit::Share,
                Estimate::share(self.p.resumed, hs),
            ),
            fig("cpu_per_handshake_seconds", "CPU per handshake", Unit::Seconds, all),
            fig(
                "cpu_per_full_handshake_seconds",
                "CPU per full handshake",
                Unit::Seconds,
                self.handshake_cpu(|r| !r),
            ),
            fig(
                "cpu_per_resumed_handshake_seconds",
                "CPU per resumed handshake",
                Unit::Seconds,
                self.handshake_cpu(|r| r),
            ),
            fig(
                "process_cpu_per_handshake_seconds",
                "process CPU per handshake",
                Unit::Seconds,
                Estimate::per_event(cpu, hs, cv),
            ),
            fig(
                "process_cpu_per_exchange_seconds",
                "process CPU per exchange",
                Unit::Seconds,
                per_exchange,
            ),
            fig(
                "tls_cpu_share",
                "TLS share of the process's CPU",
                Unit::Share,
                self.tls_share(),
            ),
            fig(
                "record_crypto_cpu_per_exchange_seconds",
                "TLS record crypto per exchange",
                Unit::Seconds,
                per_exchange.zip(crypto).map(|(e, s)| e.times(s)),
            ),
            fig(
                "quic_share",
                "handshakes over QUIC (HTTP/3)",
                Unit::Share,
                self.p
                    .transports
                    .get("quic")
                    .and_then(|q| Estimate::share(q.handshakes, hs)),
            ),
        ]
    }

    /// The rate a finding's saving is counted at: handshakes or exchanges per second.
    pub fn rate(&self, per: Per) -> Option<f64> {
        match per {
            Per::Handshake => Some(self.handshakes() / self.seconds),
            Per::Exchange => self.exchanges().map(|(n, _)| n / self.seconds),
        }
    }
}

/// What a CPU saving is counted per.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Per {
    Handshake,
    Exchange,
}

/// The figures made with the process's CPU, which a part of a window does not hold: the
/// kernel credits a process's CPU time at its context switches and the agent splits it once
/// a second, so a 2 s part gets CPU of the part before or after it (nginx beside two memory
/// copiers, 2026-11-30: process CPU per handshake 0.21, 0.41, 0.40 then 1.23 ms in the four
/// parts of one window, 0.41 ms over the whole). Their window's own errors stand.
const FROM_PROCESS_CPU: [&str; 4] = [
    "process_cpu_per_handshake_seconds",
    "process_cpu_per_exchange_seconds",
    "tls_cpu_share",
    "record_crypto_cpu_per_exchange_seconds",
];

/// Each process's figures in each part of a window (observe.rs), by process name: what
/// ProcessDoc::batches holds.
pub fn part_figures(parts: &[Window], sample_hz: Option<f64>) -> BTreeMap<String, Vec<BTreeMap<String, f64>>> {
    let mut out: BTreeMap<String, Vec<BTreeMap<String, f64>>> = BTreeMap::new();
    for w in parts.iter().filter(|w| w.seconds > 0.0) {
        let doc = ReportDoc::of(w, &[], None, sample_hz);
        for p in &doc.processes {
            let side = Side {
                p,
                seconds: w.seconds,
                sample_hz: sample_hz.unwrap_or(ASSUMED_SAMPLE_HZ),
            };
            let values = side
                .measured()
                .into_iter()
                .filter(|f| !FROM_PROCESS_CPU.contains(&f.name))
                .filter_map(|f| Some((f.name.to_string(), f.estimate?.value)))
                .filter(|(_, v)| v.is_finite())
                .collect();
            out.entry(p.comm.clone()).or_default().push(values);
        }
    }
    out
}

/// A port's figures.
pub fn port_figures(port: &PortDoc, seconds: f64) -> Vec<Figure> {
    // Entries per request of the connections that ended, as the time_wait rule has it: at
    // most one per connection, so a share of them, whose change is said as a difference.
    let requests = port.requests.max(port.ended);
    let time_wait = Estimate::share(port.time_wait.min(requests), requests).map(|e| Estimate {
        value: port.time_wait / requests,
        ..e
    });
    vec![
        fig(
            "connections_per_second",
            "connections ended",
            Unit::PerSecond,
            Some(Estimate::rate(port.ended, seconds)),
        ),
        fig(
            "requests_per_connection",
            "requests per connection",
            Unit::Number,
            Estimate::mean(port.requests, port.ended, &port.request_buckets, true),
        ),
        Figure {
            scale: Scale::Points,
            ..fig(
                "time_wait_per_request",
                "TIME_WAIT entries per request",
                Unit::Number,
                time_wait,
            )
        },
    ]
}
