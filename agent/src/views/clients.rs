//! What a port's clients said in their ClientHellos: one type for a reading of the agent's
//! counters (model.rs, per port) and for what moved in a window (snapshot.rs takes it with
//! `Reading::since`), with what the views ask of it.
use std::collections::BTreeMap;

use super::reading::Reading;
use crate::{clients::join::Answer, clients::policy::Outcome, wire::tls::hello::Resumption};

/// The ClientHellos of a port (or, summed, of a process), cumulative or in a window: how
/// many were read, what they offered, what each candidate policy would do with them, how
/// returning clients fared, and the handshake CPU per site.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Clients {
    /// ClientHellos read, by host name asked for (SNI; `none`).
    pub hellos: BTreeMap<String, f64>,
    /// ClientHellos by (offer, value) offered.
    pub offers: BTreeMap<(String, String), f64>,
    /// ClientHellos by (policy, outcome).
    pub policy: BTreeMap<(String, Outcome), f64>,
    /// Handshakes whose client offered to resume, by (what it offered, what it got).
    pub resumptions: BTreeMap<(Resumption, Answer), f64>,
    /// Handshake CPU seconds by host name.
    pub site_cpu: BTreeMap<String, f64>,
}

/// What a candidate policy would do with the clients seen in a window.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PolicyCount {
    /// ClientHellos it was evaluated on.
    pub evaluated: f64,
    pub fail: f64,
    pub hello_retry: f64,
}

impl PolicyCount {
    pub fn fail_share(&self) -> f64 {
        self.fail / self.evaluated.max(1e-9)
    }
    pub fn hello_retry_share(&self) -> f64 {
        self.hello_retry / self.evaluated.max(1e-9)
    }
}

impl Clients {
    /// ClientHellos read in the window.
    pub fn seen(&self) -> f64 {
        self.hellos.values().sum::<f64>() + 0.0 // an empty sum is -0.0
    }
    /// ClientHellos that offered `value` for `offer`.
    pub fn offered(&self, offer: &str, value: &str) -> f64 {
        self.offers
            .get(&(offer.to_string(), value.to_string()))
            .copied()
            .unwrap_or(0.0)
    }
    /// The share of the ClientHellos that offered it (0 when none was read).
    pub fn offered_share(&self, offer: &str, value: &str) -> f64 {
        let n = self.seen();
        if n > 0.0 {
            self.offered(offer, value) / n
        } else {
            0.0
        }
    }
    /// The values offered for `offer`, most offered first, with their ClientHellos.
    pub fn values(&self, offer: &str) -> Vec<(&str, f64)> {
        let mut v: Vec<(&str, f64)> = self
            .offers
            .iter()
            .filter(|((o, _), n)| o == offer && **n > 0.0)
            .map(|((_, value), n)| (value.as_str(), *n))
            .collect();
        // most offered first; among equals (every client offers ten groups), the groups a
        // server picks first, not the alphabet's (ffdhe2048 before x25519)
        let rank = crate::wire::tls::group_rank;
        v.sort_by(|a, b| b.1.total_cmp(&a.1).then(rank(a.0).cmp(&rank(b.0))).then(a.0.cmp(b.0)));
        v
    }
    /// What `policy` would do with the ClientHellos of the window: None when none was
    /// evaluated (no ClientHello read: an older agent, or the capture unavailable).
    pub fn policy(&self, policy: &str) -> Option<PolicyCount> {
        let get = |o: Outcome| self.policy.get(&(policy.to_string(), o)).copied().unwrap_or(0.0);
        let (n, h, f) = (get(Outcome::Negotiate), get(Outcome::HelloRetry), get(Outcome::Fail));
        (n + h + f > 0.0).then_some(PolicyCount {
            evaluated: n + h + f,
            fail: f,
            hello_retry: h,
        })
    }
    /// The policies evaluated, in name order.
    pub fn policies(&self) -> Vec<&str> {
        let mut v: Vec<&str> = self.policy.keys().map(|(p, _)| p.as_str()).collect();
        v.dedup();
        v
    }
    /// Handshakes whose client offered to resume (psk or ticket), and of them those that
    /// got a full handshake.
    pub fn returning(&self) -> (f64, f64) {
        let mut offered = 0.0;
        let mut full = 0.0;
        for ((o, r), n) in &self.resumptions {
            if matches!(o, Resumption::Psk | Resumption::Ticket) {
                offered += n;
                if *r == Answer::Full {
                    full += n;
                }
            }
        }
        (offered, full)
    }
    /// Clients that offered to resume with `offered`, whatever they got.
    pub fn resumptions_offered(&self, offered: Resumption) -> f64 {
        self.resumptions
            .iter()
            .filter(|((o, _), _)| *o == offered)
            .map(|(_, n)| *n)
            .sum::<f64>()
            + 0.0 // an empty sum is -0.0
    }
    /// Of them, those that got `answer`.
    pub fn resumptions_answered(&self, offered: Resumption, answer: Answer) -> f64 {
        self.resumptions.get(&(offered, answer)).copied().unwrap_or(0.0)
    }
    /// Adds another port's.
    pub fn add(&mut self, o: &Clients) {
        fn add<K: Ord + Clone>(to: &mut BTreeMap<K, f64>, from: &BTreeMap<K, f64>) {
            for (k, v) in from {
                *to.entry(k.clone()).or_default() += v;
            }
        }
        add(&mut self.hellos, &o.hellos);
        add(&mut self.offers, &o.offers);
        add(&mut self.policy, &o.policy);
        add(&mut self.resumptions, &o.resumptions);
        add(&mut self.site_cpu, &o.site_cpu);
    }
}

impl Reading for Clients {
    fn since(&self, earlier: &Clients) -> Clients {
        Clients {
            hellos: self.hellos.since(&earlier.hellos),
            offers: self.offers.since(&earlier.offers),
            policy: self.policy.since(&earlier.policy),
            resumptions: self.resumptions.since(&earlier.resumptions),
            site_cpu: self.site_cpu.since(&earlier.site_cpu),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// ab offers ten groups, each in every ClientHello: the ones servers pick come first,
    /// not the alphabet's ffdhe groups (a view shows the first few).
    #[test]
    fn equally_offered_groups_come_in_the_order_servers_prefer() {
        let mut c = Clients::default();
        for g in [
            "ffdhe2048",
            "ffdhe3072",
            "secp256r1",
            "x25519",
            "secp384r1",
            "brainpoolP256r1",
        ] {
            c.offers.insert(("group".into(), g.into()), 10.0);
        }
        c.offers.insert(("group".into(), "x448".into()), 4.0);
        let order: Vec<&str> = c.values("group").into_iter().map(|(v, _)| v).collect();
        assert_eq!(
            order,
            [
                "x25519",
                "secp256r1",
                "secp384r1",
                "ffdhe2048",
                "ffdhe3072",
                "brainpoolP256r1",
                "x448"
            ]
        );
    }
}
