//! QUIC handshakes' CPU: the probes' figure of a handshake that travelled over QUIC, joined
//! to the connection the wire saw (wire/quic/flows.rs). A TLS library's handshake call on a
//! QUIC connection reads and writes no socket of its own (the server's QUIC layer feeds it
//! the CRYPTO frames from a UDP socket every connection shares), so the kernel links no
//! connection to it (hs_event.conn_id 0); its place in time does. A figure from a process
//! whose name served QUIC lately waits (at most tracker::WAIT) for a QUIC handshake of the
//! same name that began before its first call (the client's first Initial) and ended before
//! its last return (the client's Finished), and takes the one that began last among them:
//! one figure per handshake, one handshake per figure. A figure is joined only once the wire
//! has shown a datagram later than its end (or CATCH_UP passed): the end of its own handshake
//! may still be on its way in the other ring buffer, and a handshake that overlapped it
//! would fit it too. What finds none is counted as before (no connection).
//!
//! Plain code over decoded events: the kernel is not needed to test it.
use std::{
    collections::{HashMap, VecDeque},
    time::{Duration, Instant},
};

use crate::{
    bpf::handshake as hs,
    wire::{tracker, ConnId, Negotiated, WireHandshake},
};

/// A QUIC handshake ended ok and not timed yet is kept this long for its figure.
const KEEP: Duration = Duration::from_secs(30);
/// A process name serves QUIC for this long after its last QUIC handshake.
const SERVING: Duration = Duration::from_secs(120);
/// The kernel's timestamps of a datagram and of a probe come from different CPUs' clocks.
const SLACK_NS: u64 = 1_000_000;
/// A figure waits at most this long for the wire to show a datagram later than its end.
const CATCH_UP: Duration = Duration::from_millis(250);
/// Handshakes ended and figures waiting, at most each: WAIT (2 s) of them at 30,000
/// handshakes a second. At the bound the oldest go, counted:
/// tlsprof_table_full_total{table="quic_waiting"}.
pub const MAX_WAITING: usize = 65_536;

/// A QUIC handshake ended ok, waiting for its figure.
struct Ended {
    conn: ConnId,
    start_ns: u64,
    end_ns: u64,
    negotiated: Negotiated,
    at: Instant,
}

#[derive(Default)]
pub struct QuicJoin {
    /// Per process name, the handshakes not timed yet, in the order they ended.
    ended: HashMap<String, VecDeque<Ended>>,
    /// Figures without a connection from names that serve QUIC.
    waiting: VecDeque<(hs::hs_event, String, Instant)>,
    /// Names that served QUIC, and when last.
    serving: HashMap<String, Instant>,
    /// Entries dropped at MAX_WAITING, not exported yet.
    pub dropped: u64,
}

/// A figure joined: the event (its connection and role now the QUIC handshake's) and the
/// handshake's labels.
pub type Joined = (hs::hs_event, Negotiated);

impl QuicJoin {
    /// A QUIC handshake the wire counted, of process `name`.
    pub fn on_handshake(&mut self, name: &str, h: &WireHandshake, now: Instant) {
        self.serving.insert(name.to_string(), now);
        if !h.ok || h.end_ns == 0 {
            return;
        }
        let q = self.ended.entry(name.to_string()).or_default();
        if q.len() >= MAX_WAITING {
            q.pop_front();
            self.dropped += 1;
        }
        q.push_back(Ended {
            conn: h.conn,
            start_ns: h.conn_start,
            end_ns: h.end_ns,
            negotiated: h.negotiated,
            at: now,
        });
    }

    /// Whether a figure without a connection from `name` may be a QUIC handshake's.
    pub fn serves(&self, name: &str) -> bool {
        !self.serving.is_empty() && self.serving.contains_key(name)
    }

    /// A figure waits for its handshake.
    pub fn wait(&mut self, e: hs::hs_event, name: String, now: Instant) {
        if self.waiting.len() >= MAX_WAITING {
            self.waiting.pop_front();
            self.dropped += 1;
        }
        self.waiting.push_back((e, name, now));
    }

    /// The figures that found their handshake, and those that waited tracker::WAIT for one
    /// in vain (all of them with `all`, at exit). `wire_ns`: the latest QUIC datagram the
    /// wire has shown (bpf_ktime_get_ns).
    pub fn take(&mut self, all: bool, now: Instant, wire_ns: u64) -> (Vec<Joined>, Vec<hs::hs_event>) {
        let (mut joined, mut alone) = (Vec::new(), Vec::new());
        for (mut e, name, since) in std::mem::take(&mut self.waiting) {
            if !all && wire_ns < e.end_ns && now.duration_since(since) < CATCH_UP {
                self.waiting.push_back((e, name, since)); // its handshake's end may be on its way
                continue;
            }
            let begin = e.end_ns.saturating_sub(e.duration_ns);
            let found = self.ended.get_mut(&name).and_then(|q| {
                let i = q
                    .iter()
                    .enumerate()
                    .filter(|(_, h)| h.start_ns <= begin + SLACK_NS && h.end_ns <= e.end_ns + SLACK_NS)
                    .max_by_key(|(_, h)| h.start_ns)
                    .map(|(i, _)| i)?;
                q.remove(i)
            });
            match found {
                Some(h) => {
                    e.conn_id = h.conn;
                    e.role = hs::hs_role::Server as u8;
                    joined.push((e, h.negotiated));
                }
                None if all || now.duration_since(since) >= tracker::WAIT => alone.push(e),
                None => self.waiting.push_back((e, name, since)),
            }
        }
        for q in self.ended.values_mut() {
            while q.front().is_some_and(|h| now.duration_since(h.at) >= KEEP) {
                q.pop_front();
            }
        }
        self.ended.retain(|_, q| !q.is_empty());
        self.serving.retain(|_, at| now.duration_since(*at) < SERVING);
        (joined, alone)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::Transport;

    fn quic(conn: ConnId, start_ns: u64, end_ns: u64) -> WireHandshake {
        WireHandshake {
            conn,
            tgid: 1,
            netns: 1,
            port: 443,
            negotiated: Negotiated {
                transport: Transport::Quic,
                ..Negotiated::UNKNOWN
            },
            ok: true,
            hello: true,
            alert: false,
            failure: None,
            complete: true,
            protocol: crate::wire::AppProtocol::Quic,
            conn_start: start_ns,
            end_ns,
        }
    }

    fn figure(first_ns: u64, end_ns: u64) -> hs::hs_event {
        hs::hs_event {
            duration_ns: end_ns - first_ns,
            end_ns,
            role: 0,
            result: hs::hs_result::Ok as u8,
            ..Default::default()
        }
    }

    #[test]
    fn each_figure_takes_the_handshake_it_timed() {
        let t = Instant::now();
        let mut j = QuicJoin::default();
        assert!(!j.serves("nginx"));
        // two handshakes one after the other, then two at once
        j.on_handshake("nginx", &quic(1, 100_000_000, 103_000_000), t);
        j.on_handshake("nginx", &quic(2, 110_000_000, 113_000_000), t);
        j.on_handshake("nginx", &quic(3, 120_000_000, 126_000_000), t);
        j.on_handshake("nginx", &quic(4, 121_000_000, 125_000_000), t);
        assert!(j.serves("nginx") && !j.serves("caddy"));
        // the second's figure arrives first: it does not take the first handshake
        j.wait(figure(110_500_000, 113_200_000), "nginx".into(), t);
        j.wait(figure(100_400_000, 103_100_000), "nginx".into(), t);
        j.wait(figure(121_200_000, 125_100_000), "nginx".into(), t);
        j.wait(figure(120_300_000, 126_300_000), "nginx".into(), t);
        // a figure of a handshake the wire has not ended yet waits
        j.wait(figure(130_000_000, 131_000_000), "nginx".into(), t);
        let (joined, alone) = j.take(false, t, u64::MAX);
        let conns: Vec<ConnId> = joined.iter().map(|(e, _)| e.conn_id).collect();
        assert_eq!(conns, [2, 1, 4, 3]);
        assert!(joined
            .iter()
            .all(|(e, l)| e.role == hs::hs_role::Server as u8 && l.transport == Transport::Quic));
        assert!(alone.is_empty());
        j.on_handshake("nginx", &quic(5, 129_900_000, 130_800_000), t);
        let (joined, _) = j.take(false, t, u64::MAX);
        assert_eq!(joined.iter().map(|(e, _)| e.conn_id).collect::<Vec<_>>(), [5]);
        // one that never finds its handshake is let go after WAIT, as one without connection
        j.wait(figure(200_000_000, 201_000_000), "nginx".into(), t);
        assert_eq!(j.take(false, t, u64::MAX).1.len(), 0);
        assert_eq!(j.take(false, t + tracker::WAIT, u64::MAX).1.len(), 1);
    }

    #[test]
    fn a_figure_never_takes_a_handshake_that_began_after_it() {
        let t = Instant::now();
        let mut j = QuicJoin::default();
        j.on_handshake("nginx", &quic(1, 500_000_000, 503_000_000), t);
        j.wait(figure(100_000_000, 600_000_000), "nginx".into(), t);
        j.wait(figure(400_000_000, 502_000_000), "nginx".into(), t);
        let (joined, alone) = j.take(true, t, 0);
        assert!(
            joined.is_empty(),
            "began before the handshake's first datagram, or ended before its last"
        );
        assert_eq!(alone.len(), 2);
        // failed handshakes get no figure of an ok one; they mark the name as serving
        let mut failed = quic(2, 1, 2);
        failed.ok = false;
        j.on_handshake("caddy", &failed, t);
        assert!(j.serves("caddy"));
        j.wait(figure(1, 3), "caddy".into(), t);
        assert!(j.take(true, t, 0).0.is_empty());
    }

    #[test]
    fn a_figure_waits_for_the_wire_to_pass_its_end() {
        // A (100-110 ms) and B (105-115 ms) overlap; B's figure comes while B's end is still
        // on its way: it must not take A, whose times fit it too
        let t = Instant::now();
        let mut j = QuicJoin::default();
        j.on_handshake("nginx", &quic(1, 100_000_000, 110_000_000), t);
        j.wait(figure(105_500_000, 115_500_000), "nginx".into(), t);
        let (joined, alone) = j.take(false, t, 110_000_000);
        assert!(
            joined.is_empty() && alone.is_empty(),
            "waits: the wire is behind its end"
        );
        j.on_handshake("nginx", &quic(2, 105_000_000, 115_000_000), t);
        j.wait(figure(100_200_000, 110_300_000), "nginx".into(), t);
        let (joined, _) = j.take(false, t, 116_000_000);
        let pairs: Vec<(u64, ConnId)> = joined.iter().map(|(e, _)| (e.end_ns, e.conn_id)).collect();
        assert_eq!(pairs, [(115_500_000, 2), (110_300_000, 1)]);
        // the wire never passes a figure's end (no later datagram): joined after CATCH_UP
        j.on_handshake("nginx", &quic(3, 200_000_000, 201_000_000), t);
        j.wait(figure(200_100_000, 201_100_000), "nginx".into(), t);
        assert!(j.take(false, t, 201_000_000).0.is_empty());
        let (joined, _) = j.take(false, t + CATCH_UP, 201_000_000);
        assert_eq!(joined.iter().map(|(e, _)| e.conn_id).collect::<Vec<_>>(), [3]);
    }
}
