//! Do a process's probes see its handshakes? A server may map a TLS library tlsprof probes
//! while its own stack terminates its clients' TLS (an HCL Domino task maps OpenSSL for its
//! outbound calls only; a JVM given libssl by LD_PRELOAD): its probes are attached, and the
//! wire shows handshakes they never time. The one owner of that question:
//!
//! - `Checks` (the join's half, handshakes.rs): each server handshake the wire counted on a
//!   connection of a process whose probes were attached when it was accepted and when its
//!   capture ended, looked at `tracker::WAIT` after (did a probe time it? estimate.rs
//!   `probe_timed`); and every server handshake a probe reports, at once.
//! - `Judges` (the targets' half, targets/): per process name, the verdict. One server
//!   handshake a probe reports and the name's probes are trusted (`Seen`); two the wire
//!   counted and no probe timed, with none reported, and they are not (`Unseen`): the kernel
//!   estimates that name's handshakes for good (a probe's figure stays the one where it
//!   comes) and says so (tlsprof_handshake_cpu_method_info reason="unseen_by_probes"). So
//!   that every handshake has a CPU figure from the first, whenever the first traffic
//!   comes, the kernel estimates a name's processes beside their probes for as long as it is
//!   judged (`Estimate::BesideProbes`): the read side is switched on by the kernel at the
//!   first ClientHello it sees, and looks only at reads within a connection's first bytes
//!   (bpf/estimate.bpf.h EST_GATE), so that a keep-alive server judged for long, whose
//!   connections were open before tlsprof came, pays one array lookup per read for it.
use std::{
    collections::{HashMap, VecDeque},
    time::Instant,
};

use crate::{
    bounds,
    bpf::Estimate,
    wire::tracker::{ConnId, WAIT},
};

/// Handshakes a name's probes must miss, none reported, for its handshakes to be the kernel
/// estimate's for good. Two, not one: a client slower to answer the server's flight than
/// `tracker::WAIT` makes a probe's figure come after its handshake was looked at.
pub const UNSEEN_TO_ESTIMATE: u32 = 2;
/// Handshakes waiting to be looked at, at most (tracker::WAIT of them at 30,000 a second);
/// beyond, a new one is not looked at (judging takes longer), counted:
/// tlsprof_table_full_total{table="sighting_checks"}.
pub const MAX_CHECKS: usize = 65_536;
/// Names judged, at most (as targets/ MAX_NAMES); beyond, a new name is judged `Seen` at
/// once (its probes are trusted, as before judging was), counted: {table="sighting_names"}.
pub const MAX_NAMES: usize = 4096;

/// A name's verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Not yet: the kernel estimates beside the probes.
    Judging,
    /// The probes time its handshakes.
    Seen,
    /// Its probes miss its handshakes: the kernel estimate gives their CPU.
    Unseen,
}

impl Verdict {
    /// How the kernel estimates the handshakes of a process of a name with this verdict.
    pub fn estimate(self) -> Estimate {
        match self {
            Verdict::Judging => Estimate::BesideProbes,
            Verdict::Seen => Estimate::Off,
            Verdict::Unseen => Estimate::Alone,
        }
    }
}

/// A handshake counted by the wire, to be looked at once its probe's figure had time to come.
struct Check {
    conn: ConnId,
    tgid: u32,
    conn_start: u64,
    /// The probes' window it happened in (Probes::window_start_ns).
    window: u64,
    at: Instant,
}

/// The join's half: handshakes to look at.
#[derive(Default)]
pub struct Checks {
    waiting: VecDeque<Check>,
    /// Handshakes not looked at for want of room, not exported yet.
    pub dropped: u64,
}

impl Checks {
    /// A server handshake the wire counted on connection `conn` (accepted at `conn_start`) of
    /// process `tgid`, whose probes are attached since `window` and whose name is being judged.
    pub fn add(&mut self, conn: ConnId, tgid: u32, conn_start: u64, window: u64, now: Instant) {
        if conn_start == 0 || conn_start < window {
            return; // its first calls may have come before the probes: nothing to judge by
        }
        if self.waiting.len() >= MAX_CHECKS {
            self.dropped += 1;
            return;
        }
        self.waiting.push_back(Check {
            conn,
            tgid,
            conn_start,
            window,
            at: now,
        });
    }

    /// The handshakes looked at now: (process, a probe timed it). `window(tgid)`: its probes'
    /// window if they are attached now and its name is still judged (a handshake of a
    /// window that ended, or of a name judged meanwhile, is not looked at); `timed(conn, tgid,
    /// conn_start)`: whether a probe timed it.
    pub fn due(
        &mut self,
        now: Instant,
        window: impl Fn(u32) -> Option<u64>,
        timed: impl Fn(ConnId, u32, u64) -> bool,
    ) -> Vec<(u32, bool)> {
        let mut out = Vec::new();
        while let Some(c) = self.waiting.front() {
            if now.duration_since(c.at) < WAIT {
                break;
            }
            let c = self.waiting.pop_front().expect("front exists");
            if window(c.tgid) == Some(c.window) {
                out.push((c.tgid, timed(c.conn, c.tgid, c.conn_start)));
            }
        }
        out
    }

    pub fn shrink(&mut self) {
        bounds::shrink_deque(&mut self.waiting);
    }

    pub fn footprint(&self) -> (&'static str, usize, usize) {
        (
            "sighting_checks",
            self.waiting.len(),
            bounds::deque_bytes(&self.waiting),
        )
    }
}

struct Judge {
    seen: u32,
    unseen: u32,
    verdict: Option<Verdict>,
}

/// The targets' half: each name's verdict.
pub struct Judges {
    /// The wire is captured: without it nothing can be judged, and every name is `Seen`.
    on: bool,
    names: HashMap<String, Judge>,
    /// Names judged `Seen` at once for want of room, not exported yet.
    pub dropped: u64,
}

impl Judges {
    pub fn new(wire_captured: bool) -> Self {
        Self {
            on: wire_captured,
            names: HashMap::new(),
            dropped: 0,
        }
    }

    pub fn verdict(&self, name: &str) -> Verdict {
        if !self.on {
            return Verdict::Seen;
        }
        match self.names.get(name) {
            Some(j) => j.verdict.unwrap_or(Verdict::Judging),
            None if self.names.len() >= MAX_NAMES => Verdict::Seen,
            None => Verdict::Judging,
        }
    }

    /// A process of this name is traced with probes: how the kernel estimates its
    /// handshakes (beside them while its name is judged; alone where they miss them).
    pub fn traced(&mut self, name: &str) -> Estimate {
        let verdict = self.verdict(name);
        if verdict == Verdict::Judging {
            if !self.names.contains_key(name) && self.names.len() >= MAX_NAMES {
                self.dropped += 1;
                return Estimate::Off;
            }
            self.names.entry(name.to_string()).or_insert(Judge {
                seen: 0,
                unseen: 0,
                verdict: None,
            });
        }
        verdict.estimate()
    }

    /// A server handshake of a process of this name: `seen`, a probe reported it; else the
    /// wire counted it and no probe timed it. The verdict, when this one gives it.
    pub fn sighted(&mut self, name: &str, seen: bool) -> Option<Verdict> {
        if self.verdict(name) != Verdict::Judging {
            return None;
        }
        let j = self.names.get_mut(name)?; // traced() entered it
        if seen {
            j.seen += 1;
        } else {
            j.unseen += 1;
        }
        let v = if seen {
            Verdict::Seen
        } else if j.unseen >= UNSEEN_TO_ESTIMATE {
            Verdict::Unseen
        } else {
            return None;
        };
        j.verdict = Some(v);
        Some(v)
    }

    /// How many of a name's server handshakes were looked at: (reported by its probes,
    /// missed).
    pub fn tally(&self, name: &str) -> (u32, u32) {
        self.names.get(name).map_or((0, 0), |j| (j.seen, j.unseen))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn one_handshake_a_probe_reports_and_the_probes_are_trusted() {
        let mut j = Judges::new(true);
        assert_eq!(j.verdict("nginx"), Verdict::Judging);
        assert_eq!(
            j.traced("nginx"),
            Estimate::BesideProbes,
            "estimated beside the probes while judged"
        );
        assert_eq!(j.sighted("nginx", false), None, "one slow client is not a verdict");
        assert_eq!(j.sighted("nginx", true), Some(Verdict::Seen));
        assert_eq!(j.verdict("nginx"), Verdict::Seen);
        assert_eq!(j.sighted("nginx", false), None, "judged once");
        assert_eq!(
            j.traced("nginx"),
            Estimate::Off,
            "a later process of the name starts without the estimate"
        );
    }

    #[test]
    fn probes_that_miss_handshakes_leave_them_to_the_estimate() {
        let mut j = Judges::new(true);
        assert_eq!(j.traced("smtp"), Estimate::BesideProbes);
        assert_eq!(j.traced("nhttp"), Estimate::BesideProbes);
        assert_eq!(j.sighted("smtp", false), None);
        assert_eq!(j.sighted("smtp", false), Some(Verdict::Unseen));
        assert_eq!(j.verdict("smtp"), Verdict::Unseen);
        assert_eq!(j.verdict("nhttp"), Verdict::Judging, "each name on its own");
        assert_eq!(j.tally("smtp"), (0, 2));
        // the one judged is estimated alone; the other still beside its probes, however long
        assert_eq!(j.traced("smtp"), Estimate::Alone);
        assert_eq!(j.traced("nhttp"), Estimate::BesideProbes);
        assert_eq!(j.sighted("nhttp", false), None);
        assert_eq!(j.sighted("nhttp", false), Some(Verdict::Unseen));
    }

    #[test]
    fn without_the_wire_every_name_is_trusted() {
        let mut j = Judges::new(false);
        assert_eq!(j.verdict("nginx"), Verdict::Seen);
        assert_eq!(j.traced("nginx"), Estimate::Off);
        assert_eq!(j.sighted("nginx", false), None);
    }

    #[test]
    fn a_handshake_is_looked_at_once_its_probe_had_time_to_come() {
        let t0 = Instant::now();
        let mut c = Checks::default();
        c.add(1, 7, 100, 50, t0);
        c.add(2, 7, 40, 50, t0); // accepted before the probes' window: not judged
        c.add(3, 8, 0, 50, t0); // accept time unknown: not judged
        c.add(4, 9, 100, 50, t0);
        let window = |tgid| (tgid != 9).then_some(50); // 9's probes went meanwhile
        assert!(c.due(t0 + WAIT / 2, window, |_, _, _| true).is_empty());
        let out = c.due(t0 + WAIT + Duration::from_millis(1), window, |conn, _, _| conn != 1);
        assert_eq!(out, vec![(7, false)]);
        assert!(c.waiting.is_empty());
    }
}
