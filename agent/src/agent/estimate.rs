//! The user half of the kernel-only estimate of handshake CPU (bpf/estimate.bpf.h): the
//! kernel sends one part per window (a server thread's on-CPU time from reading the client's
//! handshake messages to sending its answer); the parts of a connection are summed until its
//! handshake capture ends, then measured as one handshake, labelled from the wire like a
//! probed one (handshakes.rs).
use rustc_hash::FxHashMap;
use std::{
    collections::{HashMap, VecDeque},
    time::{Duration, Instant},
};

use crate::{
    bounds,
    bpf::handshake::{self as hs, hs_event},
    wire::tracker::{ConnId, WAIT},
};

/// Connections with parts and no end yet, at most: beyond, the oldest sixteenth go, counted:
/// tlsprof_table_full_total{table="estimate_parts"}.
pub const MAX_OPEN: usize = 65_536;
/// Parts older than this with no end of their capture are dropped (the capture was given up,
/// or the connection is not a handshake).
const STALE_SECS: u64 = 60;
/// How long after its capture's end a handshake's last part may still come.
pub const SETTLE: Duration = Duration::from_millis(200);

struct Sum {
    tgid: u32,
    /// When its connection was accepted (hs_event.conn_start).
    conn_start: u64,
    first_ns: u64,
    last_ns: u64,
    cpu_ns: u64,
    parts: u32,
    since: Instant,
}

#[derive(Default)]
pub struct Estimates {
    open: FxHashMap<ConnId, Sum>,
    /// Captures that ended: (connection, the handshake succeeded, when), oldest first. The
    /// last window of a handshake closes when the server reads the first request (or turns
    /// to another connection), just after the capture's end (TLS 1.3 session tickets come
    /// after it): a handshake is measured SETTLE after its capture ended.
    ended: VecDeque<(ConnId, bool, Instant)>,
    /// The same, for processes with probes (estimated beside them: sightings.rs): measured
    /// `tracker::WAIT` after, so that a probe's figure for the same handshake, which comes
    /// when the client has answered the server's flight, is there first and is the one.
    ended_probed: VecDeque<(ConnId, bool, Instant)>,
    /// Connections whose handshake a probe timed (a process whose probes were attached while
    /// the kernel estimated it, as a process forked per connection is): their parts are not
    /// a second figure. Bounded by MAX_OPEN, the oldest going first.
    timed: FxHashMap<ConnId, Instant>,
    /// Per process, the time a probe last timed one of its handshakes it could not tie to a
    /// connection (timed_during): parts within it that come later are that handshake's too.
    timed_unlinked: HashMap<u32, (u64, u64)>,
    /// Entries dropped at the bound, not exported yet.
    pub evicted: u64,
}

impl Estimates {
    /// One part from the kernel (hs_event with `estimate` set).
    pub fn add(&mut self, e: &hs_event, now: Instant) {
        let id = e.conn_id;
        if self.timed.contains_key(&id) {
            return;
        }
        let first = e.end_ns.saturating_sub(e.duration_ns);
        if self
            .timed_unlinked
            .get(&e.tgid)
            .is_some_and(|&(a, b)| first <= b && e.end_ns >= a)
        {
            return;
        }
        if !self.open.contains_key(&id) && self.open.len() >= MAX_OPEN {
            let out = bounds::evict_oldest(&mut self.open, MAX_OPEN, |s| s.since);
            self.evicted += out.len() as u64;
        }
        let s = self.open.entry(id).or_insert(Sum {
            tgid: e.tgid,
            conn_start: e.conn_start,
            first_ns: first,
            last_ns: e.end_ns,
            cpu_ns: 0,
            parts: 0,
            since: now,
        });
        s.first_ns = s.first_ns.min(first);
        s.last_ns = s.last_ns.max(e.end_ns);
        s.cpu_ns += e.cpu_ns;
        s.parts += 1;
    }

    /// A probe timed this connection's handshake: every handshake gets one CPU figure, from
    /// one source, and the probe's is the measurement.
    pub fn timed(&mut self, id: ConnId, now: Instant) {
        self.open.remove(&id);
        if self.timed.len() >= MAX_OPEN {
            bounds::evict_oldest(&mut self.timed, MAX_OPEN, |t| *t);
        }
        self.timed.insert(id, now);
    }

    /// A probe's handshake call it could not tie to a connection, in a process whose one
    /// connection in progress the kernel is estimating (a process started for it, whose
    /// probes came in its middle): a part of that connection's figure. False where the
    /// process has no such connection, or more than one.
    pub fn absorb_unlinked(&mut self, e: &hs_event, now: Instant) -> bool {
        let mut open = self.open.iter().filter(|(_, s)| s.tgid == e.tgid).map(|(id, _)| *id);
        let (Some(id), None) = (open.next(), open.next()) else {
            return false;
        };
        let part = hs_event { conn_id: id, ..*e };
        self.add(&part, now);
        true
    }

    /// A probe timed a handshake of process `tgid` from `first_ns` to `last_ns` that it
    /// could not tie to its connection (a server whose TLS library reads through a memory
    /// BIO pair, as Dovecot's does): the parts of that process's connections estimated over
    /// the same time are that handshake's, and go.
    pub fn timed_during(&mut self, tgid: u32, first_ns: u64, last_ns: u64) {
        self.open
            .retain(|_, s| s.tgid != tgid || s.last_ns < first_ns || s.first_ns > last_ns);
        if self.timed_unlinked.len() < MAX_OPEN || self.timed_unlinked.contains_key(&tgid) {
            self.timed_unlinked.insert(tgid, (first_ns, last_ns));
        }
    }

    /// A connection's handshake capture ended (`probed`: its process has handshake probes).
    pub fn capture_ended(&mut self, id: ConnId, ok: bool, probed: bool, now: Instant) {
        let q = if probed {
            &mut self.ended_probed
        } else {
            &mut self.ended
        };
        if q.len() < MAX_OPEN {
            q.push_back((id, ok, now));
        }
    }

    /// Whether a probe timed the handshake on connection `id` of process `tgid`, accepted at
    /// `conn_start`: tied to it, or (a memory-BIO server's) timed by the process after it came.
    pub fn probe_timed(&self, id: ConnId, tgid: u32, conn_start: u64) -> bool {
        self.timed.contains_key(&id)
            || self
                .timed_unlinked
                .get(&tgid)
                .is_some_and(|&(_, last)| last >= conn_start)
    }

    /// The handshakes whose capture ended SETTLE ago or more (`all`: every one, at exit),
    /// each the sum of its parts, as a probed handshake would be reported.
    pub fn finished(&mut self, all: bool, now: Instant) -> Vec<hs_event> {
        let mut out = Vec::new();
        let mut ends = Vec::new();
        for (q, settle) in [(&mut self.ended, SETTLE), (&mut self.ended_probed, WAIT)] {
            while let Some(&(id, ok, at)) = q.front() {
                if !all && now.duration_since(at) < settle {
                    break;
                }
                q.pop_front();
                ends.push((id, ok));
            }
        }
        for (id, ok) in ends {
            let Some(s) = self.open.remove(&id) else { continue };
            out.push(hs_event {
                duration_ns: s.last_ns.saturating_sub(s.first_ns),
                cpu_ns: s.cpu_ns,
                tgid: s.tgid,
                calls: s.parts,
                role: hs::hs_role::Server as u8,
                result: if ok {
                    hs::hs_result::Ok as u8
                } else {
                    hs::hs_result::Failed as u8
                },
                estimate: 1,
                pad: [0; 5],
                conn_id: id,
                conn_start: s.conn_start,
                end_ns: s.last_ns,
            });
        }
        out
    }

    /// Drops the parts whose capture never ended.
    pub fn expire(&mut self, now: Instant) {
        self.open
            .retain(|_, s| now.duration_since(s.since).as_secs() < STALE_SECS);
        self.timed.retain(|_, t| now.duration_since(*t).as_secs() < STALE_SECS);
        bounds::shrink(&mut self.open);
        bounds::shrink(&mut self.timed);
        bounds::shrink_deque(&mut self.ended);
        bounds::shrink_deque(&mut self.ended_probed);
    }

    /// (table, entries, bytes of its room) for the -v log of the agent's memory.
    pub fn footprint(&self) -> [(&'static str, usize, usize); 3] {
        let ended = self.ended.len() + self.ended_probed.len();
        let ended_bytes = bounds::deque_bytes(&self.ended) + bounds::deque_bytes(&self.ended_probed);
        [
            ("estimate_parts", self.open.len(), bounds::map_bytes(&self.open)),
            ("estimate_timed", self.timed.len(), bounds::map_bytes(&self.timed)),
            ("estimate_ended", ended, ended_bytes),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn part(conn: u64, end_ns: u64, duration_ns: u64, cpu_ns: u64) -> hs_event {
        hs_event {
            duration_ns,
            cpu_ns,
            tgid: 7,
            calls: 1,
            role: hs::hs_role::Server as u8,
            result: hs::hs_result::Ok as u8,
            estimate: 1,
            pad: [0; 5],
            conn_id: conn,
            conn_start: 1,
            end_ns,
        }
    }

    /// TLS 1.2: the ClientHello's part and the ClientKeyExchange's, summed; the duration runs
    /// from the first read to the last answer.
    #[test]
    fn parts_of_a_connection_are_summed_at_its_end() {
        let t0 = Instant::now();
        let mut e = Estimates::default();
        e.add(&part(100, 1_000_000, 400_000, 300_000), t0);
        e.add(&part(200, 1_100_000, 100_000, 90_000), t0);
        e.add(&part(100, 3_000_000, 200_000, 150_000), t0);
        assert!(e.finished(false, t0).is_empty(), "no capture ended yet");
        e.capture_ended(100, true, false, t0);
        e.capture_ended(999, true, false, t0); // a probed connection: no parts
        assert!(e.finished(false, t0).is_empty(), "its last part may still come");
        let done = e.finished(false, t0 + SETTLE);
        assert_eq!(done.len(), 1);
        let h = done[0];
        assert_eq!(
            (h.cpu_ns, h.duration_ns, h.calls, h.result),
            (450_000, 2_400_000, 2, hs::hs_result::Ok as u8)
        );
        assert_eq!((h.conn_id, h.conn_start, h.estimate, h.tgid), (100, 1, 1, 7));
        e.capture_ended(200, false, false, t0);
        assert_eq!(e.finished(true, t0)[0].result, hs::hs_result::Failed as u8);
        assert!(e.open.is_empty());
    }

    #[test]
    fn parts_without_an_end_expire_and_are_bounded() {
        let t0 = Instant::now();
        let mut e = Estimates::default();
        for conn in 0..MAX_OPEN as u64 + 10 {
            e.add(&part(conn, 1_000, 10, 10), t0);
        }
        assert!(e.open.len() <= MAX_OPEN && e.evicted > 0);
        e.expire(t0 + std::time::Duration::from_secs(STALE_SECS));
        assert!(e.open.is_empty());
    }
}
