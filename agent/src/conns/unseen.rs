//! Connection ends no program on the kernel's hook took: found by reconciling a watched
//! port's accepted count with the ends reported and the connections still open.
//!
//! Every connection the kernel counts accepted on a port (conn_port_stats.accepted) has
//! state in socket storage from its accept (bpf/conn.bpf.h conn_accepted) until its close
//! event, after which that state is deleted. So each one has either ended, reported by its
//! close event, or is open: a socket on the port that still has the state, which sock_diag
//! hands over with the socket (churn.rs asks for it in its TIME_WAIT dumps). A connection
//! that is neither ended without its close reaching any program on the hook: under CPU
//! contention (12 in 80,159 on a 2-core VM beside two memory-copying processes:
//! bench/lost_ends.py; docs/how-it-works.md, "Per connection"). It is counted ended,
//! closed by `unknown`.
//!
//! Connections are told apart by their accept time (conn_life.start_ns, in each close event
//! and each socket's state), compared with the times of the count's readings:
//! - a port's ledger starts at its first reading, and sums the connections accepted after
//!   it, and those accepted up to MARGIN_NS before it, which may be in that count or not
//!   (a program's run between the accept time it takes and the count it adds to): summed
//!   with the ended and open ones while maybe not in the count, they can only hide as many
//!   unseen ends, never add one;
//! - a dump is compared with the last reading before it (`cut`): every connection in that
//!   count was accepted before the reading ended; the ends and open connections counted
//!   are those accepted up to then, which may be a few more than the count (accepted while
//!   it was read): never fewer, so an unseen end is never counted where there is none;
//! - each dump is compared with the ends reported up to the next one: a close reported
//!   after the dump read its socket removes it from the open ones, and one whose socket
//!   was gone before the dump read it has reached the agent by the next (its event is
//!   written before its state is deleted, and the rings are drained every 50 ms).
//!
//! Not in the sums: connections taken on at their first read or send (conn_adopt: in no
//! port's count) and every connection in hash mode (no socket storage: kernels before
//! 5.11), where no end is found unseen.
use rustc_hash::{FxHashMap, FxHashSet};

use crate::bpf::conn as cn;

/// How long before a port's first reading a connection may have been accepted and not yet
/// counted: far longer than a program's run.
const MARGIN_NS: u64 = 1_000_000;

/// The open connections, and the ends reported after the last dump, one port's ledger
/// holds (16 bytes each at most): a port with more is not reconciled until it has fewer.
pub const MAX_HELD: usize = 1 << 18;

/// One watched port's sums.
struct Ledger {
    /// The process listening there, for the metrics.
    comm: String,
    /// Connections accepted after this (ns, the kernel's monotonic clock) are reconciled.
    base: u64,
    /// The port's accepted count at its first reading.
    accepted0: u64,
    /// The latest reading: when it ended, and the count.
    reading: (u64, u64),
    /// The reading the last dump is compared with; None before the first dump.
    cut: Option<(u64, u64)>,
    /// Ends reported of connections accepted in (base, cut].
    ended: u64,
    /// Accept times of the ends reported of connections accepted after the cut.
    later: Vec<u64>,
    /// Connections accepted in (base, cut], open at the last dump and not ended since.
    open: FxHashSet<u64>,
    /// Ends found unseen so far.
    unseen: u64,
}

impl Ledger {
    fn new(comm: &str, before: u64, after: u64, accepted: u64) -> Self {
        Self {
            comm: comm.to_string(),
            base: before.saturating_sub(MARGIN_NS),
            accepted0: accepted,
            reading: (after, accepted),
            cut: None,
            ended: 0,
            later: Vec::new(),
            open: FxHashSet::default(),
            unseen: 0,
        }
    }
}

/// A connection open at a dump: its state's identity, port and accept time.
pub struct Open {
    pub port: cn::conn_port,
    pub id: u64,
    pub start_ns: u64,
}

impl Open {
    /// From a socket's value in the connections' socket storage; None for one taken on at
    /// its first read or send (conn_adopt: in no port's count) or a value of another size.
    pub fn of(value: &[u8]) -> Option<Self> {
        if value.len() != size_of::<cn::conn_state>() {
            return None;
        }
        let s: cn::conn_state = crate::bpf::read_record(value)?;
        (s.life.adopted == 0).then(|| Self {
            port: cn::conn_port::new(s.life.netns, s.life.port),
            id: s.life.id,
            start_ns: s.life.start_ns,
        })
    }
}

/// The ledgers of the watched ports.
#[derive(Default)]
pub struct Unseen {
    ports: FxHashMap<cn::conn_port, Ledger>,
    /// Ports whose ledger outgrew MAX_HELD since the last call of `overflowed`.
    overflowed: u64,
}

impl Unseen {
    /// A reading of a port's accepted count, taken between the kernel's monotonic times
    /// `before` and `after`. A count lower than the last starts a new ledger: the port was
    /// removed and added again, which counts from zero.
    pub fn reading(&mut self, key: cn::conn_port, comm: &str, before: u64, after: u64, accepted: u64) {
        match self.ports.get_mut(&key) {
            Some(l) if accepted >= l.reading.1 => {
                l.reading = (after, accepted);
                if l.comm != comm {
                    l.comm = comm.to_string();
                }
            }
            _ => {
                self.ports.insert(key, Ledger::new(comm, before, after, accepted));
            }
        }
    }

    /// Forgets the ports no longer watched (their counts go with their kernel entries).
    pub fn retain(&mut self, watched: impl Fn(&cn::conn_port) -> bool) {
        self.ports.retain(|k, _| watched(k));
    }

    /// A close the kernel reported.
    pub fn ended(&mut self, e: &cn::conn_event) {
        if e.adopted != 0 {
            return;
        }
        let Some(l) = self.ports.get_mut(&cn::conn_port::new(e.netns, e.port)) else {
            return;
        };
        if e.start_ns <= l.base {
            return;
        }
        if l.open.remove(&e.conn_id) || l.cut.is_some_and(|(at, _)| e.start_ns <= at) {
            l.ended += 1;
        } else if l.later.len() < MAX_HELD {
            l.later.push(e.start_ns);
        } else {
            // too many to hold: this port starts again from its next reading
            self.ports.remove(&cn::conn_port::new(e.netns, e.port));
            self.overflowed += 1;
        }
    }

    /// Before a dump: each port's connections accepted up to its cut that are neither
    /// ended nor open, beyond those already found; (port, its process, how many).
    pub fn found(&mut self) -> Vec<(cn::conn_port, String, u64)> {
        let mut out = Vec::new();
        for (key, l) in &mut self.ports {
            let Some((_, accepted)) = l.cut else { continue };
            let accounted = l.ended + l.open.len() as u64;
            let missing = (accepted - l.accepted0).saturating_sub(accounted);
            if missing > l.unseen {
                out.push((*key, l.comm.clone(), missing - l.unseen));
                l.unseen = missing;
            }
        }
        out
    }

    /// A dump of namespace `netns` read: `open`, the connections open in it. Each of its
    /// ports is compared from now on with its latest reading.
    pub fn dumped(&mut self, netns: u32, open: &[Open]) {
        let mut by_port: FxHashMap<u16, Vec<&Open>> = FxHashMap::default();
        for o in open.iter().filter(|o| o.port.netns == netns) {
            by_port.entry(o.port.port).or_default().push(o);
        }
        let mut over = Vec::new();
        for (key, l) in self.ports.iter_mut().filter(|(k, _)| k.netns == netns) {
            let cut = l.reading;
            let (at, _) = cut;
            let held = l.later.len();
            l.later.retain(|s| *s > at);
            l.ended += (held - l.later.len()) as u64;
            l.open.clear();
            let mine = by_port.get(&key.port).map_or(&[][..], Vec::as_slice);
            l.open.extend(
                mine.iter()
                    .filter(|o| o.start_ns > l.base && o.start_ns <= at)
                    .map(|o| o.id),
            );
            l.cut = Some(cut);
            if l.open.len() > MAX_HELD {
                over.push(*key);
            }
        }
        for key in over {
            self.ports.remove(&key);
            self.overflowed += 1;
        }
    }

    /// Whether any port is reconciled (the dump then asks for the connections' state).
    pub fn any(&self) -> bool {
        !self.ports.is_empty()
    }

    /// Ports given up since the last call (bounds::count's `reconciled_connections`).
    pub fn overflowed(&mut self) -> u64 {
        std::mem::take(&mut self.overflowed)
    }

    /// (table, entries, bytes of its room) for the -v log of the agent's memory.
    pub fn footprint(&self) -> (&'static str, usize, usize) {
        let held: usize = self.ports.values().map(|l| l.open.len() + l.later.len()).sum();
        let bytes = self
            .ports
            .values()
            .map(|l| l.open.capacity() * 16 + l.later.capacity() * 8)
            .sum();
        ("reconciled_connections", held, bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NS: u32 = 4026531840;

    fn key() -> cn::conn_port {
        cn::conn_port::new(NS, 443)
    }

    fn end(id: u64, start_ns: u64) -> cn::conn_event {
        cn::conn_event {
            conn_id: id,
            start_ns,
            netns: NS,
            port: 443,
            ..Default::default()
        }
    }

    fn open(id: u64, start_ns: u64) -> Open {
        Open {
            port: key(),
            id,
            start_ns,
        }
    }

    /// Accepted 1-5 after the first reading: 1 and 2 end before the dump, 3 ends after the
    /// dump read it, 4 is open, 5 ends without any close reported.
    #[test]
    fn an_end_neither_reported_nor_open_is_found_once() {
        let mut u = Unseen::default();
        u.reading(key(), "nginx", 10_000_000, 10_000_100, 7);
        for (id, start) in [(1, 11_000_000), (2, 12_000_000)] {
            u.ended(&end(id, start));
        }
        u.reading(key(), "nginx", 20_000_000, 20_000_100, 12);
        assert!(u.found().is_empty(), "no dump yet");
        u.dumped(NS, &[open(3, 13_000_000), open(4, 14_000_000), open(7, 21_000_000)]);
        u.ended(&end(3, 13_000_000));
        // accepted after the cut: counted at the next dump
        u.ended(&end(8, 22_000_000));
        let found = u.found();
        assert_eq!(found.len(), 1);
        assert_eq!((found[0].1.as_str(), found[0].2), ("nginx", 1));
        assert!(u.found().is_empty(), "found once");
        // 4 ends: all accounted still
        u.ended(&end(4, 14_000_000));
        assert!(u.found().is_empty());
    }

    /// Connections accepted before the first reading are left out, but for those within
    /// the margin before it, which may be in its count or not: summed, never unseen.
    #[test]
    fn the_first_reading_is_left_out_but_its_margin() {
        let mut u = Unseen::default();
        u.reading(key(), "nginx", 10_000_000, 10_000_100, 7);
        u.ended(&end(1, 9_500_000)); // within the margin: in the 7 here
        u.ended(&end(2, 5_000_000));
        u.reading(key(), "nginx", 20_000_000, 20_000_100, 7);
        u.dumped(NS, &[open(3, 1_000), open(4, 9_900_000)]);
        assert!(u.found().is_empty());
        let l = &u.ports[&key()];
        assert_eq!((l.ended, l.open.len()), (1, 1));
    }

    /// A connection accepted while the count was read (in the sums, not in the count)
    /// never makes an end unseen; the next cut takes it into the count.
    #[test]
    fn accepted_while_read_is_never_unseen() {
        let mut u = Unseen::default();
        u.reading(key(), "nginx", 10_000_000, 10_000_100, 0);
        u.reading(key(), "nginx", 20_000_000, 20_000_100, 1);
        // accepted at 20,000,050: its count came after the reading
        u.dumped(NS, &[open(1, 15_000_000), open(2, 20_000_050)]);
        assert!(u.found().is_empty());
        u.ended(&end(2, 20_000_050));
        u.ended(&end(1, 15_000_000));
        u.reading(key(), "nginx", 30_000_000, 30_000_100, 2);
        u.dumped(NS, &[]);
        assert!(u.found().is_empty());
        // then one gone unreported
        u.reading(key(), "nginx", 40_000_000, 40_000_100, 3);
        u.dumped(NS, &[]);
        assert_eq!(u.found().iter().map(|f| f.2).sum::<u64>(), 1);
    }

    /// A port added again counts from zero: a new ledger.
    #[test]
    fn a_count_gone_down_starts_again() {
        let mut u = Unseen::default();
        u.reading(key(), "nginx", 10_000_000, 10_000_100, 50);
        u.reading(key(), "nginx", 20_000_000, 20_000_100, 2);
        assert_eq!(u.ports[&key()].accepted0, 2);
        u.dumped(NS, &[]);
        assert!(u.found().is_empty());
    }

    /// Taken on at a first read or send: in no count, never in the sums.
    #[test]
    fn adopted_connections_are_not_in_the_sums() {
        let mut u = Unseen::default();
        u.reading(key(), "imap-login", 10_000_000, 10_000_100, 0);
        let mut e = end(1, 15_000_000);
        e.adopted = 1;
        u.ended(&e);
        u.reading(key(), "imap-login", 20_000_000, 20_000_100, 0);
        u.dumped(NS, &[]);
        assert!(u.found().is_empty());
        assert_eq!(u.ports[&key()].ended, 0);
    }
}
