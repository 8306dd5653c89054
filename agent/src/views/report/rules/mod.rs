//! The report's rules: each reads a process's window (views/snapshot.rs) and, for what
//! the server does not use yet, the costs measured on this host (hostcost.rs), and says
//! what to change and what it would save. handshake.rs: resumption, key-exchange group,
//! certificate; record.rs: the record cipher; connection.rs: keep-alive and TIME_WAIT.
mod connection;
mod handshake;
mod record;
#[cfg(test)]
mod tests;

pub use self::{
    connection::{keepalive, time_wait},
    handshake::{certificates, groups, resumption},
    record::record_ciphers,
};
use super::hostcost::HostCosts;
use crate::views::snapshot::{Config, Proc, Window};

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
/// Connections that live this long on average (seconds) are in use, whatever their
/// exchange count says: an HTTP/2 client sends many requests per exchange, an HTTP/1.1
/// one may pipeline, a browser keeps idle connections; a handshake per half second of a
/// connection's life is little beside what the connection carries.
pub const REUSED_LIFETIME: f64 = 0.5;

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

pub fn ms(s: f64) -> String {
    format!("{:.3} ms", s * 1e3)
}

pub(super) fn is_full(c: &Config) -> bool {
    !c.resumed
}

/// The configuration most full handshakes used.
pub(super) fn dominant(p: &Proc) -> Option<&Config> {
    p.configs
        .iter()
        .filter(|c| is_full(c))
        .max_by(|a, b| a.handshakes.total_cmp(&b.handshakes))
}

/// Process CPU in cores over the window (at least a tiny amount, to divide by).
pub(super) fn cores(p: &Proc, secs: f64) -> f64 {
    (p.process_cpu / secs).max(1e-9)
}

/// Sets the saving's share of the process's CPU.
pub(super) fn finish(mut f: Finding, p: &Proc, secs: f64) -> Finding {
    f.saving_share = f.saving_cpu.map(|s| (s / cores(p, secs)).min(1.0));
    f
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
