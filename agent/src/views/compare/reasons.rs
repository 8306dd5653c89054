//! What the clients did before and after: the failed handshakes by port, why and who ended
//! them, and the connections that never offered TLS by kind, as rates side by side. They
//! say what the load and its clients were (old clients, health checks, a certificate they
//! reject), which a configuration change moves as much as a new client mix does: no
//! interval and no verdict, unlike the cost figures.
use serde::Serialize;

use super::figures::Side;

/// One reason (or kind) of one port, before and after.
#[derive(Serialize, Debug, Clone, PartialEq)]
pub struct ReasonRates {
    pub port: String,
    /// `failed` (handshakes that failed) or `without_tls` (connections that never offered
    /// TLS: no handshakes).
    pub what: &'static str,
    /// Who ended the failed handshakes: client, server (null for connections without TLS).
    pub by: Option<String>,
    /// Why they failed (protocol_version, unknown_ca, closed...), or what the connections
    /// without TLS were (silent, http...).
    pub reason: String,
    /// Per second of each side's window, and the counts: null where the process was not
    /// seen on that side.
    pub before_per_second: Option<f64>,
    pub after_per_second: Option<f64>,
    pub before: Option<f64>,
    pub after: Option<f64>,
    pub text: String,
}

impl ReasonRates {
    /// What it counts, as the views name it: "failed: protocol_version (server)",
    /// "no TLS: silent".
    pub fn label(&self) -> String {
        match &self.by {
            Some(by) => format!("failed: {} ({by})", self.reason),
            None => format!("no TLS: {}", self.reason),
        }
    }
}

/// What a row counts: (port, what, by, reason).
type Key = (String, &'static str, Option<String>, String);
/// A side's rows: (what, count).
type Rows = Vec<(Key, f64)>;

/// A side's count of one key: 0 where the side did not count it, None without the side.
fn count(side: &Option<Rows>, key: &Key) -> Option<f64> {
    let rows = side.as_ref()?;
    Some(rows.iter().filter(|(k, _)| k == key).map(|(_, n)| n).sum::<f64>() + 0.0)
}

fn rows(s: &Side) -> Rows {
    let failed = s.p.failures.iter().map(|f| {
        let key = (f.port.clone(), "failed", Some(f.by.clone()), f.reason.clone());
        (key, f.handshakes)
    });
    let untls = s.p.without_tls.iter().map(|w| {
        let key = (w.port.clone(), "without_tls", None, w.kind.clone());
        (key, w.connections)
    });
    failed.chain(untls).collect()
}

/// Rates of a side, in one unit: "2.0/s", "none" where the process was not seen.
pub fn per_second(v: Option<f64>) -> String {
    v.map_or("none".into(), |v| format!("{v:.1}/s"))
}

/// Every reason and kind either side counted, by port (by number), the failures before the
/// connections without TLS, then the most frequent (on either side) first.
pub fn reason_rates(before: Option<&Side>, after: Option<&Side>) -> Vec<ReasonRates> {
    let (a, b) = (before.map(rows), after.map(rows));
    let mut keys: Vec<_> = a.iter().chain(&b).flatten().map(|(k, _)| k.clone()).collect();
    keys.sort();
    keys.dedup();
    let mut out: Vec<ReasonRates> = keys
        .into_iter()
        .map(|key| {
            let (ca, cb) = (count(&a, &key), count(&b, &key));
            let (port, what, by, reason) = key;
            let mut r = ReasonRates {
                port,
                what,
                by,
                reason,
                before_per_second: ca.zip(before).map(|(n, s)| n / s.seconds),
                after_per_second: cb.zip(after).map(|(n, s)| n / s.seconds),
                before: ca,
                after: cb,
                text: String::new(),
            };
            r.text = format!(
                "port {}: {} {} → {}",
                r.port,
                r.label(),
                per_second(r.before_per_second),
                per_second(r.after_per_second)
            );
            r
        })
        .collect();
    let most = |r: &ReasonRates| {
        r.before_per_second
            .unwrap_or(0.0)
            .max(r.after_per_second.unwrap_or(0.0))
    };
    out.sort_by(|x, y| {
        let port = |r: &ReasonRates| (r.port.parse::<u32>().unwrap_or(u32::MAX), r.port.clone());
        port(x)
            .cmp(&port(y))
            .then(x.what.cmp(y.what))
            .then(most(y).total_cmp(&most(x)))
    });
    out
}
