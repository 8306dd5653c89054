//! The join of a connection's ClientHello with what the server did on it: its offers and
//! the policies' outcomes counted when it is read, then whether the server resumed the
//! session the client offered, and what the handshake cost, per site (SNI).
//!
//! Plain code over parsed offers: the kernel is not needed to test it.
use rustc_hash::FxHashMap;
use std::{
    collections::{HashSet, VecDeque},
    hash::{Hash, Hasher},
    sync::Arc,
    time::{Duration, Instant},
};

use prometheus_client::metrics::counter::Counter;

use super::{
    facts,
    lacks::{Lacking, Served},
    policy,
};
use crate::{
    bounds,
    metrics::{
        ClientFailureLabels, LabelValue, Metrics, OfferLabels, PolicyLabels, ReasonLabels, ResumptionLabels, SniLabels,
    },
    wire::{
        failure::Failure,
        tls::hello::{Offer, Resumption},
        tracker::{ConnId, Unread},
        Negotiated,
    },
};

/// What a client that offered to resume got (tlsprof_client_resumptions_total's `result`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Answer {
    Full,
    Resumed,
}

impl LabelValue for Answer {
    const ALL: &'static [Answer] = &[Answer::Full, Answer::Resumed];
    fn label(self) -> &'static str {
        match self {
            Answer::Full => "full",
            Answer::Resumed => "resumed",
        }
    }
}

/// How long a connection's offer is kept for what the server did: its capture ends within
/// a handshake of the ClientHello, a probe's event within tracker::WAIT of that.
const KEEP: Duration = Duration::from_secs(30);
/// Connections whose offer is kept at most: KEEP at ~8,700 handshakes a second. At the
/// bound the oldest go, counted: tlsprof_table_full_total{table="client_offers"}.
pub const MAX_KEPT: usize = 1 << 18;

/// Kinds of ClientHello (per process name and port) whose counters are kept found
/// (`HelloCounters`); past it they are all forgotten and found again.
const MAX_HELLO_KINDS: usize = 4096;

/// The counters one kind of ClientHello increments (its site's, its offers', its
/// policies'), found once: a busy server's clients send the same few ClientHellos, and
/// finding ~20 labelled series (their labels built and hashed) per connection was a third of
/// the agent's CPU at 2,000 connections a second. Keyed by a hash of (comm, port, offer),
/// the key kept beside to tell a collision.
struct HelloCounters {
    comm: Box<str>,
    port: u16,
    offer: Offer,
    counters: Vec<Counter>,
    /// Its site (the offer's SNI): found once, not per ClientHello.
    site: Arc<SniLabels>,
    /// ClientHellos of this kind not yet added to its counters (`flush`): one addition per
    /// counter and event loop turn, not per ClientHello (a kind has dozens of counters).
    unflushed: u64,
    /// What it lacks of what its server negotiates, as measured at that Served's generation.
    lacks: (u32, Lacking),
}

/// What the join keeps of a connection's ClientHello (24 bytes an entry).
struct Kept {
    /// Its site (comm, port, sni), shared by every offer kept for it.
    site: Arc<SniLabels>,
    resumption: Resumption,
    /// The server's answer was joined already (a capture ends once).
    answered: bool,
    /// What it lacked of what its server negotiated when it came.
    lacks: Lacking,
}

/// The counters a ClientHello offering `offer` at `site` (its process name, port and
/// name asked for) increments: its site's, one per offer (facts::offers) and one per
/// policy's outcome.
fn hello_counters(m: &Metrics, offer: &Offer, site: &SniLabels) -> Vec<Counter> {
    let (comm, port) = (&site.comm, &site.port);
    let mut out = vec![m.client_hellos.get_or_create(site).clone()];
    for (offer_kind, value) in facts::offers(offer) {
        let labels = OfferLabels {
            comm: comm.clone(),
            port: port.clone(),
            offer: offer_kind.into(),
            value: value.into(),
        };
        out.push(m.client_offers.get_or_create(&labels).clone());
    }
    for p in &policy::POLICIES {
        let labels = PolicyLabels {
            comm: comm.clone(),
            port: port.clone(),
            policy: p.name.into(),
            outcome: policy::evaluate(offer, p).label().into(),
        };
        out.push(m.client_policy.get_or_create(&labels).clone());
    }
    out
}

/// A server's key in HelloJoin::served: a hash of its process name and port.
fn server_key(comm: &str, port: u16) -> u64 {
    let mut h = rustc_hash::FxHasher::default();
    (comm, port).hash(&mut h);
    h.finish()
}

/// Joins each connection's ClientHello to how its handshake ended: the offers counted by
/// outcome, the failing clients by what they lacked, the CPU by site.
pub struct HelloJoin {
    metrics: Arc<Metrics>,
    kept: FxHashMap<ConnId, Kept>,
    order: VecDeque<(ConnId, Instant)>,
    /// The sites of the offers kept and of the kinds of ClientHello, each once (those
    /// neither holds go at `expire`).
    sites: HashSet<Arc<SniLabels>>,
    /// The counters of each kind of ClientHello seen, by hash (at most MAX_HELLO_KINDS).
    hello_kinds: FxHashMap<u64, HelloCounters>,
    /// The kinds with ClientHellos not yet flushed.
    unflushed: Vec<u64>,
    /// What each server (process name, port) negotiated in its successful handshakes, for
    /// what a failed handshake's ClientHello lacked (at most MAX_HELLO_KINDS: past it they
    /// are all forgotten and learnt again).
    /// Keyed by `server_key` (no allocation per ClientHello).
    served: FxHashMap<u64, Served>,
    /// Offers dropped at the bound, for the owner to export.
    pub evicted: u64,
}

impl HelloJoin {
    pub fn new(metrics: Arc<Metrics>) -> Self {
        Self {
            metrics,
            kept: FxHashMap::default(),
            order: VecDeque::new(),
            sites: HashSet::new(),
            hello_kinds: FxHashMap::default(),
            unflushed: Vec::new(),
            served: FxHashMap::default(),
            evicted: 0,
        }
    }

    /// A ClientHello read on a connection of `comm` accepted on `port`: its offers and the
    /// policies' outcomes counted now, the rest kept for what the server does.
    pub fn on_hello(&mut self, conn: ConnId, comm: &str, port: u16, offer: &Offer, now: Instant) {
        let mut h = rustc_hash::FxHasher::default();
        (comm, port, offer).hash(&mut h);
        let kind = h.finish();
        let known = self
            .hello_kinds
            .get(&kind)
            .is_some_and(|k| &*k.comm == comm && k.port == port && &k.offer == offer);
        if !known {
            if self.hello_kinds.len() >= MAX_HELLO_KINDS {
                self.flush();
                self.hello_kinds.clear();
            }
            let site = SniLabels {
                comm: comm.into(),
                port: port.to_string(),
                sni: facts::sni(offer).to_string(),
            };
            let site = match self.sites.get(&site) {
                Some(s) => Arc::clone(s),
                None => {
                    let s = Arc::new(site);
                    self.sites.insert(Arc::clone(&s));
                    s
                }
            };
            let counters = hello_counters(&self.metrics, offer, &site);
            let k = HelloCounters {
                comm: comm.into(),
                port,
                offer: offer.clone(),
                counters,
                site,
                unflushed: 0,
                lacks: (u32::MAX, Lacking::UNKNOWN),
            };
            self.hello_kinds.insert(kind, k);
        }
        let k = self.hello_kinds.get_mut(&kind).expect("inserted above");
        if k.unflushed == 0 {
            self.unflushed.push(kind);
        }
        k.unflushed += 1;
        let site = Arc::clone(&k.site);
        let lacks = match self.served.get(&server_key(comm, port)) {
            None => Lacking::UNKNOWN,
            Some(s) if s.generation == k.lacks.0 => k.lacks.1,
            Some(s) => {
                k.lacks = (s.generation, s.lacking(offer));
                k.lacks.1
            }
        };
        if self.kept.len() >= MAX_KEPT {
            self.evict_oldest();
        }
        self.kept.insert(
            conn,
            Kept {
                site,
                resumption: offer.resumption,
                answered: false,
                lacks,
            },
        );
        self.order.push_back((conn, now));
    }

    /// Adds the ClientHellos seen since the last flush to their kinds' counters (the event
    /// loop flushes at every turn: the counters are at most one turn behind).
    pub fn flush(&mut self) {
        for kind in self.unflushed.drain(..) {
            let Some(k) = self.hello_kinds.get_mut(&kind) else {
                continue;
            };
            for c in &k.counters {
                c.inc_by(k.unflushed);
            }
            k.unflushed = 0;
        }
    }

    /// A connection whose ClientHello could not be read.
    pub fn on_unread(&self, comm: &str, why: Unread) {
        self.metrics
            .client_hellos_unread
            .get_or_create(&ReasonLabels {
                comm: comm.into(),
                reason: why.label().into(),
            })
            .inc();
    }

    /// The server answered the connection's ClientHello (its ServerHello, as the wire
    /// capture read it): a client that offered to resume got it, or a full handshake.
    pub fn on_server_hello(&mut self, conn: ConnId, resumed: bool) {
        let Some(k) = self.kept.get_mut(&conn) else { return };
        if k.answered {
            return;
        }
        k.answered = true;
        if k.resumption == Resumption::None {
            return;
        }
        let answer = if resumed { Answer::Resumed } else { Answer::Full };
        self.metrics
            .client_resumptions
            .get_or_create(&ResumptionLabels {
                comm: k.site.comm.clone(),
                port: k.site.port.clone(),
                offered: k.resumption.label().into(),
                result: answer.label().into(),
            })
            .inc();
    }

    /// A handshake the probes timed on the connection: its CPU time, per site.
    pub fn on_timed(&mut self, conn: ConnId, cpu_seconds: f64) {
        let Some(k) = self.kept.get(&conn) else { return };
        self.metrics
            .site_handshake_cpu
            .get_or_create(&k.site)
            .inc_by(cpu_seconds);
    }

    /// A successful handshake of `comm`'s `port`: what its server negotiates.
    pub fn on_served(&mut self, comm: &str, port: u16, n: &Negotiated) {
        let key = server_key(comm, port);
        if !self.served.contains_key(&key) && self.served.len() >= MAX_HELLO_KINDS {
            self.served.clear();
        }
        self.served.entry(key).or_default().add(n);
    }

    /// A connection's handshake failed: counted by its site, why, and what its ClientHello
    /// lacked of what the server negotiates (where its ClientHello was read).
    pub fn on_failed(&mut self, conn: ConnId, f: Failure) {
        let Some(k) = self.kept.get(&conn) else { return };
        let labels = ClientFailureLabels {
            comm: k.site.comm.clone(),
            port: k.site.port.clone(),
            sni: k.site.sni.clone(),
            reason: f.reason.label().into(),
            lacks: k.lacks.for_reason(f.reason).label().into(),
        };
        self.metrics.client_failures.get_or_create(&labels).inc();
    }

    /// Forgets the offers older than KEEP.
    pub fn expire(&mut self, now: Instant) {
        while let Some(&(conn, since)) = self.order.front() {
            if now.saturating_duration_since(since) < KEEP {
                break;
            }
            self.order.pop_front();
            self.kept.remove(&conn);
        }
        self.sites.retain(|s| Arc::strong_count(s) > 1);
        bounds::shrink(&mut self.kept);
        bounds::shrink_deque(&mut self.order);
    }

    /// (table, entries, bytes of its room) for the -v log of the agent's memory.
    pub fn footprint(&self) -> [(&'static str, usize, usize); 2] {
        [
            ("client_offers", self.kept.len(), bounds::map_bytes(&self.kept)),
            (
                "client_offers_order",
                self.order.len(),
                bounds::deque_bytes(&self.order),
            ),
        ]
    }

    fn evict_oldest(&mut self) {
        while let Some((conn, _)) = self.order.pop_front() {
            if self.kept.remove(&conn).is_some() {
                self.evicted += 1;
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A kept offer is an id and a shared site (docs/metrics.md gives the table's memory from
    /// it); the sites and the table's room go with the offers.
    #[test]
    fn kept_offers_are_small_and_shrink() {
        assert_eq!(std::mem::size_of::<(ConnId, Kept)>(), 24);
        let mut c = HelloJoin::new(Arc::new(Metrics::new()));
        let t0 = Instant::now();
        let offer = Offer::default();
        for conn in 0..10_000 {
            c.on_hello(conn, "nginx", 443 + (conn % 2) as u16, &offer, t0);
        }
        assert_eq!((c.kept.len(), c.sites.len()), (10_000, 2));
        c.on_timed(1, 0.001);
        c.on_hello(u64::MAX, "nginx", 8443, &offer, t0 + KEEP);
        c.expire(t0 + KEEP);
        // the sites of the offers still kept, and of the kinds of ClientHello seen (443,
        // 444, 8443: each kind finds its site once)
        assert_eq!((c.kept.len(), c.sites.len()), (1, 3));
        c.hello_kinds.clear();
        c.expire(t0 + KEEP);
        assert_eq!((c.kept.len(), c.sites.len()), (1, 1));
        assert!(c.kept.capacity() < 100 && c.order.capacity() < 100);
        let cpu = c.metrics.site_handshake_cpu.get_or_create(&SniLabels {
            comm: "nginx".into(),
            port: "444".into(),
            sni: facts::sni(&offer).into(),
        });
        assert_eq!(cpu.get(), 0.001);
    }
}
