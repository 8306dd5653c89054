//! What failed on a process's ports, and what never offered TLS there: one type for a
//! reading of the agent's counters (model.rs, per process, keyed by port) and for what moved
//! in a window (snapshot.rs takes it with `Reading::since`), with what the views ask of it.
//! The reasons, kinds and what a failed client's ClientHello lacked are the agent's own enums
//! (wire/failure.rs, clients/lacks.rs), decoded once.
use std::{cmp::Ordering, collections::BTreeMap};

use super::reading::Reading;
use crate::{
    bpf::abi::hello_untls,
    clients::lacks::Lacks,
    metrics::LabelValue,
    wire::failure::{Failure, Reason},
};

/// A process's failed server handshakes and its connections that never offered TLS,
/// cumulative or in a window.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Failures {
    /// Failed server handshakes by (listening port, who ended them and why)
    /// (tlsprof_handshake_failures_total; port `other` where no connection was seen: the
    /// TLS library's failures).
    pub handshakes: BTreeMap<(String, Failure), f64>,
    /// Connections accepted on a TLS port that never offered TLS, by (port, kind)
    /// (tlsprof_connections_without_tls_total): no handshakes, counted apart.
    pub without_tls: BTreeMap<(String, hello_untls), f64>,
    /// Failed handshakes whose ClientHello was read, by port, host name asked for, reason
    /// and what the ClientHello lacked (tlsprof_client_failures_total; none from an older
    /// agent): who the failing clients are.
    pub clients: BTreeMap<ClientFailure, f64>,
}

/// A failed handshake whose ClientHello was read, as tlsprof_client_failures_total labels
/// it (who ended it is not among them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientFailure {
    pub port: String,
    /// The host name the client asked for (SNI; `none` without one).
    pub sni: String,
    pub reason: Reason,
    /// What its ClientHello lacked of what the server negotiates.
    pub lacks: Lacks,
}

/// `Lacks`'s place in `Lacks::ALL`: the order the views show them in (it has no `Ord`).
fn lacks_rank(l: Lacks) -> usize {
    Lacks::ALL.iter().position(|x| *x == l).unwrap_or(usize::MAX)
}

impl ClientFailure {
    fn key(&self) -> (&str, &str, Reason, usize) {
        (&self.port, &self.sni, self.reason, lacks_rank(self.lacks))
    }
}

impl Ord for ClientFailure {
    fn cmp(&self, o: &Self) -> Ordering {
        self.key().cmp(&o.key())
    }
}

impl PartialOrd for ClientFailure {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}

/// The failing clients of a port of one reason (and, where told apart, of one thing their
/// ClientHellos lacked): how many, and the host names they asked for, most first.
#[derive(Debug, Clone, PartialEq)]
pub struct ClientGroup<'a> {
    pub reason: Reason,
    /// None where the groups are by reason alone.
    pub lacks: Option<Lacks>,
    pub failed: f64,
    pub sites: Vec<(&'a str, f64)>,
}

impl<'a> ClientGroup<'a> {
    fn new(reason: Reason, lacks: Option<Lacks>, sites: BTreeMap<&'a str, f64>) -> Self {
        let mut sites: Vec<(&str, f64)> = sites.into_iter().collect();
        sites.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(b.0)));
        ClientGroup {
            reason,
            lacks,
            failed: sites.iter().map(|(_, n)| n).sum(),
            sites,
        }
    }
    /// Most failed first; equal ones by reason, then by what they lacked.
    fn order(&self, o: &Self) -> Ordering {
        let lacks = |g: &Self| g.lacks.map(lacks_rank);
        o.failed
            .total_cmp(&self.failed)
            .then(self.reason.cmp(&o.reason))
            .then(lacks(self).cmp(&lacks(o)))
    }
}

/// Counts by key, summed over the ports that `keep` takes, largest first (equal ones in
/// the key's order); those that count nothing left out.
fn ranked<K: Ord + Copy>(by: &BTreeMap<(String, K), f64>, keep: impl Fn(&str) -> bool) -> Vec<(K, f64)> {
    let mut sum: BTreeMap<K, f64> = BTreeMap::new();
    for ((port, k), n) in by {
        if keep(port) {
            *sum.entry(*k).or_default() += n;
        }
    }
    let mut v: Vec<(K, f64)> = sum.into_iter().filter(|(_, n)| *n > 0.0).collect();
    v.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    v
}

impl Failures {
    /// Failed server handshakes, every port and reason summed.
    pub fn failed(&self) -> f64 {
        self.handshakes.values().sum::<f64>() + 0.0 // an empty sum is -0.0
    }
    /// Connections that never offered TLS, every port and kind summed.
    pub fn untls(&self) -> f64 {
        self.without_tls.values().sum::<f64>() + 0.0 // an empty sum is -0.0
    }
    /// Failed handshakes by who ended them and why, every port summed, most first.
    pub fn by_failure(&self) -> Vec<(Failure, f64)> {
        ranked(&self.handshakes, |_| true)
    }
    /// The same on one port.
    pub fn by_failure_on(&self, port: &str) -> Vec<(Failure, f64)> {
        ranked(&self.handshakes, |p| p == port)
    }
    /// Connections without TLS by kind, every port summed, most first.
    pub fn by_kind(&self) -> Vec<(hello_untls, f64)> {
        ranked(&self.without_tls, |_| true)
    }
    /// The same on one port.
    pub fn by_kind_on(&self, port: &str) -> Vec<(hello_untls, f64)> {
        ranked(&self.without_tls, |p| p == port)
    }
    /// The ports with a failed handshake, in port order (numbers first, `other` last).
    pub fn failing_ports(&self) -> Vec<&str> {
        ports(
            self.handshakes
                .iter()
                .filter(|(_, n)| **n > 0.0)
                .map(|((p, _), _)| p.as_str()),
        )
    }
    /// The ports with a connection that never offered TLS, in port order.
    pub fn untls_ports(&self) -> Vec<&str> {
        ports(
            self.without_tls
                .iter()
                .filter(|(_, n)| **n > 0.0)
                .map(|((p, _), _)| p.as_str()),
        )
    }
    /// Failed handshakes by port, in port order, and on each by failure, most first: the
    /// rows of the views' tables.
    pub fn by_port(&self) -> Vec<(&str, Failure, f64)> {
        let each = |port| self.by_failure_on(port).into_iter().map(move |(f, n)| (port, f, n));
        self.failing_ports().into_iter().flat_map(each).collect()
    }
    /// Connections without TLS by port, in port order, and on each by kind, most first.
    pub fn untls_by_port(&self) -> Vec<(&str, hello_untls, f64)> {
        let each = |port| self.by_kind_on(port).into_iter().map(move |(k, n)| (port, k, n));
        self.untls_ports().into_iter().flat_map(each).collect()
    }
    /// The clients of `port` that failed with one of `reasons`, by reason and, with
    /// `by_lacks`, by what their ClientHellos lacked: most failed first, each with its host
    /// names; empty without tlsprof_client_failures_total (an older agent).
    pub fn client_groups(&self, port: &str, reasons: &[Reason], by_lacks: bool) -> Vec<ClientGroup<'_>> {
        let mut groups: Vec<(Reason, Option<Lacks>, BTreeMap<&str, f64>)> = Vec::new();
        for (c, n) in &self.clients {
            if c.port != port || !reasons.contains(&c.reason) || *n <= 0.0 {
                continue;
            }
            let lacks = by_lacks.then_some(c.lacks);
            let at = match groups.iter().position(|g| g.0 == c.reason && g.1 == lacks) {
                Some(at) => at,
                None => {
                    groups.push((c.reason, lacks, BTreeMap::new()));
                    groups.len() - 1
                }
            };
            *groups[at].2.entry(c.sni.as_str()).or_default() += n;
        }
        let mut v: Vec<ClientGroup> = groups.into_iter().map(|(r, l, s)| ClientGroup::new(r, l, s)).collect();
        v.sort_by(ClientGroup::order);
        v
    }
    /// Failed handshakes whose ClientHello was read, by port (in port order), then most
    /// first: the JSON's rows.
    pub fn clients_by_port(&self) -> Vec<(&ClientFailure, f64)> {
        let mut v: Vec<(&ClientFailure, f64)> = self
            .clients
            .iter()
            .filter(|(_, n)| **n > 0.0)
            .map(|(c, n)| (c, *n))
            .collect();
        let port = |c: &ClientFailure| c.port.parse::<u32>().unwrap_or(u32::MAX);
        v.sort_by(|a, b| {
            (port(a.0), &a.0.port)
                .cmp(&(port(b.0), &b.0.port))
                .then(b.1.total_cmp(&a.1))
                .then(a.0.cmp(b.0))
        });
        v
    }
}

/// Ports once each, by number (a name that is none, `other`, last).
fn ports<'a>(all: impl Iterator<Item = &'a str>) -> Vec<&'a str> {
    let mut v: Vec<&str> = all.collect();
    v.sort_by_key(|p| (p.parse::<u32>().unwrap_or(u32::MAX), *p));
    v.dedup();
    v
}

impl Reading for Failures {
    fn since(&self, earlier: &Failures) -> Failures {
        Failures {
            handshakes: self.handshakes.since(&earlier.handshakes),
            without_tls: self.without_tls.since(&earlier.without_tls),
            clients: self.clients.since(&earlier.clients),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::failure::{By, Reason};

    #[test]
    fn failures_are_ranked_and_summed_over_ports() {
        let pv = Failure::new(By::Server, Reason::ProtocolVersion);
        let ca = Failure::new(By::Client, Reason::UnknownCa);
        let mut f = Failures::default();
        f.handshakes.insert(("443".into(), ca), 3.0);
        f.handshakes.insert(("8443".into(), pv), 2.0);
        f.handshakes.insert(("443".into(), pv), 6.0);
        f.handshakes.insert(("other".into(), ca), 0.0);
        f.without_tls.insert(("80".into(), hello_untls::Http), 1.0);
        f.without_tls.insert(("443".into(), hello_untls::Silent), 1.0);
        assert_eq!(f.by_failure(), [(pv, 8.0), (ca, 3.0)]);
        assert_eq!(f.by_failure_on("443"), [(pv, 6.0), (ca, 3.0)]);
        assert_eq!(f.failed(), 11.0);
        assert_eq!(
            f.failing_ports(),
            ["443", "8443"],
            "a port that failed nothing left out"
        );
        // equal counts in the kinds' order
        assert_eq!(f.by_kind(), [(hello_untls::Silent, 1.0), (hello_untls::Http, 1.0)]);
        assert_eq!(f.untls_ports(), ["80", "443"]);
        assert_eq!(f.by_port(), [("443", pv, 6.0), ("443", ca, 3.0), ("8443", pv, 2.0)]);
        assert_eq!(f.untls_by_port()[0], ("80", hello_untls::Http, 1.0));
        assert_eq!(Failures::default().failed().to_string(), "0");
        // a window: what moved
        let mut later = f.clone();
        *later.handshakes.get_mut(&("443".into(), pv)).unwrap() += 4.0;
        let w = later.since(&f);
        assert_eq!((w.failed(), w.by_failure()), (4.0, vec![(pv, 4.0)]));
    }

    /// The failing clients of a port, by reason and what they lacked (or by reason alone):
    /// most failed first, each with its host names, most first.
    #[test]
    fn failing_clients_are_grouped_with_their_sites() {
        let mut f = Failures::default();
        let mut add = |port: &str, sni: &str, reason, lacks, n| {
            let c = ClientFailure {
                port: port.into(),
                sni: sni.into(),
                reason,
                lacks,
            };
            f.clients.insert(c, n);
        };
        add("443", "a.example", Reason::HandshakeFailure, Lacks::Group, 2.0);
        add("443", "b.example", Reason::HandshakeFailure, Lacks::Cipher, 5.0);
        add("443", "a.example", Reason::HandshakeFailure, Lacks::Cipher, 3.0);
        add("443", "none", Reason::UnknownCa, Lacks::Nothing, 9.0);
        add("8443", "a.example", Reason::HandshakeFailure, Lacks::Cipher, 7.0);
        add("443", "c.example", Reason::HandshakeFailure, Lacks::Unknown, 0.0);
        let hf = [Reason::HandshakeFailure];
        let g = f.client_groups("443", &hf, true);
        assert_eq!(
            g.iter().map(|g| (g.lacks, g.failed)).collect::<Vec<_>>(),
            [(Some(Lacks::Cipher), 8.0), (Some(Lacks::Group), 2.0)],
            "a count of nothing left out"
        );
        assert_eq!(g[0].sites, [("b.example", 5.0), ("a.example", 3.0)]);
        let g = f.client_groups("443", &hf, false);
        assert_eq!((g.len(), g[0].lacks, g[0].failed), (1, None, 10.0));
        assert_eq!(
            g[0].sites,
            [("a.example", 5.0), ("b.example", 5.0)],
            "equal ones by name"
        );
        assert!(f.client_groups("80", &hf, true).is_empty());
        let rows: Vec<(&str, f64)> = f.clients_by_port().iter().map(|(c, n)| (c.port.as_str(), *n)).collect();
        assert_eq!(
            rows,
            [("443", 9.0), ("443", 5.0), ("443", 3.0), ("443", 2.0), ("8443", 7.0)]
        );
        // a window: what moved
        let mut later = f.clone();
        for n in later.clients.values_mut() {
            *n += 1.0;
        }
        assert_eq!(later.since(&f).clients.values().sum::<f64>(), 6.0);
    }
}
