//! What changed in the configuration as the wire shows it: the negotiated versions, groups,
//! certificates, ciphers and transports (shares of the successful handshakes), and what
//! the clients offered (shares of the ClientHellos read).
use std::collections::BTreeMap;

use serde::Serialize;

use crate::{
    views::report::json::ProcessDoc,
    wire::{
        tls::{NONE, OTHER},
        Negotiated,
    },
};

/// A value's share must move by this much (10 points) to be said.
pub const MIN_SHIFT: f64 = 0.10;

/// A negotiated parameter whose mix changed.
#[derive(Serialize, Debug, Clone, PartialEq)]
pub struct ConfigChange {
    /// version, cipher, group, cert, transport
    pub what: &'static str,
    /// Share of the successful handshakes by value (values tlsprof did not see left out).
    pub before: BTreeMap<String, f64>,
    pub after: BTreeMap<String, f64>,
    pub text: String,
}

/// An offer whose share of the ClientHellos moved.
#[derive(Serialize, Debug, Clone, PartialEq)]
pub struct OfferChange {
    pub offer: String,
    pub value: String,
    pub before: f64,
    pub after: f64,
    pub text: String,
}

const PARAMETERS: [(&str, &str); 5] = [
    ("version", "the version"),
    ("cipher", "the cipher"),
    ("group", "the group"),
    ("cert", "the certificate"),
    ("transport", "the transport"),
];

/// Shares of the successful handshakes by the value of one parameter; `other` (not seen)
/// and `none` (a resumed handshake's certificate) are left out.
fn mix(p: &ProcessDoc, what: &str) -> BTreeMap<String, f64> {
    let mut by: BTreeMap<String, f64> = BTreeMap::new();
    let Some(label) = Negotiated::LABELS.iter().position(|l| *l == what) else {
        return by;
    };
    for c in &p.configs {
        let v = c.negotiated.label_values()[label];
        if v != OTHER && v != NONE && c.handshakes > 0.0 {
            *by.entry(v.into()).or_default() += c.handshakes;
        }
    }
    let all: f64 = by.values().sum();
    by.values_mut().for_each(|v| *v /= all);
    by
}

/// Some successful handshake's parameters were seen (their mix can be compared).
pub fn wire_seen(p: &ProcessDoc) -> bool {
    PARAMETERS.iter().any(|(what, _)| !mix(p, what).is_empty())
}

fn shifted(a: &BTreeMap<String, f64>, b: &BTreeMap<String, f64>) -> bool {
    let get = |m: &BTreeMap<String, f64>, k: &str| m.get(k).copied().unwrap_or(0.0);
    a.keys()
        .chain(b.keys())
        .any(|k| (get(a, k) - get(b, k)).abs() >= MIN_SHIFT)
}

fn listed(m: &BTreeMap<String, f64>) -> String {
    let mut v: Vec<_> = m.iter().collect();
    v.sort_by(|x, y| y.1.total_cmp(x.1));
    v.iter()
        .map(|(k, s)| format!("{k} {:.0}%", *s * 100.0))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The parameters whose mix moved between the two windows.
pub fn config_changes(before: &ProcessDoc, after: &ProcessDoc) -> Vec<ConfigChange> {
    PARAMETERS
        .iter()
        .filter_map(|&(what, noun)| {
            let (a, b) = (mix(before, what), mix(after, what));
            if a.is_empty() || b.is_empty() || !shifted(&a, &b) {
                return None;
            }
            let only = |m: &BTreeMap<String, f64>| (m.len() == 1).then(|| m.keys().next().cloned()).flatten();
            let text = match (only(&a), only(&b)) {
                (Some(x), Some(y)) => format!("{noun} went from {x} to {y}"),
                _ => format!("{noun}: {} → {}", listed(&a), listed(&b)),
            };
            Some(ConfigChange {
                what,
                before: a,
                after: b,
                text,
            })
        })
        .collect()
}

/// The offers whose share of the ClientHellos moved by MIN_SHIFT or more, the largest
/// moves first (at most `limit`).
pub fn offer_changes(before: &ProcessDoc, after: &ProcessDoc, limit: usize) -> Vec<OfferChange> {
    let (na, nb) = (before.clients.hellos, after.clients.hellos);
    if na <= 0.0 || nb <= 0.0 {
        return Vec::new();
    }
    let share = |p: &ProcessDoc, n: f64, o: &str, v: &str| {
        p.clients.offers.get(o).and_then(|m| m.get(v)).copied().unwrap_or(0.0) / n
    };
    let mut keys: Vec<(&String, &String)> = Vec::new();
    for p in [before, after] {
        for (o, vs) in &p.clients.offers {
            for v in vs.keys() {
                if !keys.contains(&(o, v)) {
                    keys.push((o, v));
                }
            }
        }
    }
    let mut out: Vec<OfferChange> = keys
        .into_iter()
        .map(|(o, v)| {
            let (a, b) = (share(before, na, o, v), share(after, nb, o, v));
            OfferChange {
                offer: o.clone(),
                value: v.clone(),
                before: a,
                after: b,
                text: format!("clients offering {o} {v}: {:.0}% → {:.0}%", a * 100.0, b * 100.0),
            }
        })
        .filter(|c| (c.after - c.before).abs() >= MIN_SHIFT)
        .collect();
    out.sort_by(|x, y| (y.after - y.before).abs().total_cmp(&(x.after - x.before).abs()));
    out.truncate(limit);
    out
}
