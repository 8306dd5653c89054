//! QUIC connections' handshakes as the kernel's datagrams show them (bpf/quic.h): each
//! connection's Initial packets opened (initial.rs) and their CRYPTO frames put together
//! into the client's ClientHello and the server's ServerHello, and the handshake's end: the
//! client's first Handshake or 1-RTT packet (its Finished: the server's first flight already
//! carries 1-RTT data, so nothing the server sends marks the end).
//!
//! - ok: the kernel saw the client's Handshake packet long enough to hold a Finished, or a
//!   1-RTT packet (bpf/quic.h QUIC_MIN_FINISHED), and neither side closed the connection in
//!   an Initial packet;
//! - failed: a CONNECTION_CLOSE in an Initial packet (the server refused the ClientHello, or
//!   the client the server's), or no end within STALE of a client Initial that opened as one
//!   (the client gave up: a client that refuses the server's certificate closes in a
//!   Handshake packet too short for a Finished; or the server never answered).
//!
//! A connection is the kernel's (bpf/quic.bpf.h quic_flows: the client's address and port,
//! the server's port); a Retry keeps it, and the client's next Initial brings the
//! Destination Connection ID whose keys protect the server's Initial packets from then on.
//! Datagrams that do not open as the client's Initial (garbage, forged or truncated
//! packets) count nowhere: a connection is only followed once one did.
use std::{
    collections::HashMap,
    time::{Duration, Instant},
};

use super::{as_records, open_initial, CryptoStream};
use crate::{
    bounds,
    bpf::wire::{WireEvent, QUIC_F_CLIENT, QUIC_F_DONE, QUIC_F_RETRY},
    wire::{
        failure::{By, Failure, Reason},
        tls::{self, hello::parse_client_hello},
        tracker::{ClientHello, ConnId, Seen, Unread, WireHandshake},
    },
};

/// A connection that began and never ended is failed after this.
pub const STALE: Duration = Duration::from_secs(10);
/// Connections followed at most (handshakes under way at once): at the bound the oldest
/// sixteenth go, counted: tlsprof_table_full_total{table="quic_flows"}.
pub const MAX_FLOWS: usize = 32_768;
/// The `protocol` label of a QUIC connection (tlsprof_connections_by_protocol_total).
/// ClientHello and ServerHello bytes kept per connection at most.
const MAX_HELLO: usize = 16 * 1024;

struct Flow {
    tgid: u32,
    netns: u32,
    port: u16,
    since: Instant,
    /// When the client's first Initial passed (bpf_ktime_get_ns).
    start_ns: u64,
    /// The Destination Connection ID of the client's first Initial (after a Retry, of its
    /// first Initial after it): the keys of both sides' Initial packets, whatever connection
    /// IDs the packets carry later.
    dcid: Vec<u8>,
    client: CryptoStream,
    server: CryptoStream,
    /// The ClientHello was handed on (complete, or found unreadable).
    hello_done: bool,
    /// A side closed the connection in an Initial packet.
    closed: bool,
    /// The server sent a Retry: the client's next Initial brings new keys.
    retried: bool,
}

/// The QUIC connections whose handshakes are under way.
#[derive(Default)]
pub struct Flows {
    flows: HashMap<ConnId, Flow>,
    /// Datagrams that did not open (hostile or garbled), for the log.
    pub unopened: u64,
    /// The latest datagram's time (bpf_ktime_get_ns): how far the wire has come.
    pub latest_ns: u64,
    /// Connections evicted at MAX_FLOWS, not exported yet.
    pub evicted: u64,
}

/// The handshake message at the start of `b` (its 4-byte header and body), once complete.
fn message(b: &[u8]) -> Option<&[u8]> {
    let len = 4 + (usize::from(*b.get(1)?) << 16 | usize::from(*b.get(2)?) << 8 | usize::from(*b.get(3)?));
    b.get(..len)
}

impl Flows {
    /// A WIRE_EV_QUIC event: the ClientHello once complete, the handshake once over.
    pub fn on_event(&mut self, e: &WireEvent, now: Instant) -> Option<Seen> {
        let d = e.quic()?;
        self.latest_ns = self.latest_ns.max(d.ts);
        let from_client = u32::from(e.flags) & QUIC_F_CLIENT != 0;
        if !self.flows.contains_key(&e.conn_id) {
            // only a client's Initial that opens begins a connection
            if !from_client || d.initial.is_empty() {
                return None;
            }
            let Ok(h) = super::header(d.initial) else {
                self.unopened += 1;
                return None;
            };
            if !open_initial(d.initial, true, &h.dcid).is_ok_and(|i| i.crypto.iter().any(|(o, _)| *o == 0)) {
                self.unopened += 1;
                return None;
            }
            self.make_room();
            self.flows.insert(
                e.conn_id,
                Flow {
                    tgid: e.tgid,
                    netns: e.netns,
                    port: e.port,
                    since: now,
                    start_ns: d.ts,
                    dcid: h.dcid,
                    client: CryptoStream::new(MAX_HELLO),
                    server: CryptoStream::new(MAX_HELLO),
                    hello_done: false,
                    closed: false,
                    retried: false,
                },
            );
        }
        let f = self.flows.get_mut(&e.conn_id)?;
        if e.tgid != 0 {
            (f.tgid, f.netns) = (e.tgid, e.netns);
        }
        if u32::from(e.flags) & QUIC_F_RETRY != 0 {
            log::debug!("quic: conn {:#x} port {}: the server sent a Retry", e.conn_id, e.port);
            f.retried = true;
        }
        if !d.initial.is_empty() {
            if from_client && f.retried {
                // the client's first Initial after a Retry: the Retry's connection ID is the
                // keys' from now on (RFC 9001 §5.2); an Initial sent before the Retry that
                // comes late still has the old one
                if let Ok(h) = super::header(d.initial) {
                    if h.dcid != f.dcid {
                        f.dcid = h.dcid;
                        f.retried = false;
                    }
                }
            }
            match open_initial(d.initial, from_client, &f.dcid) {
                Ok(i) => {
                    let s = if from_client { &mut f.client } else { &mut f.server };
                    for (offset, bytes) in &i.crypto {
                        s.add(*offset, bytes);
                    }
                    f.closed |= i.close.is_some();
                }
                Err(_) => self.unopened += 1,
            }
        }
        if u32::from(e.flags) & QUIC_F_DONE != 0 || f.closed {
            let f = self.flows.remove(&e.conn_id)?;
            return Some(Seen::Handshake(handshake(e.conn_id, &f, !f.closed, d.ts)));
        }
        if from_client && !f.hello_done {
            if let Some(m) = message(f.client.contiguous()) {
                f.hello_done = true;
                return Some(Seen::Hello(ClientHello {
                    conn: e.conn_id,
                    tgid: f.tgid,
                    netns: f.netns,
                    port: f.port,
                    offer: parse_client_hello(&as_records(m)).map_err(|_| Unread::Malformed),
                }));
            }
        }
        None
    }

    /// The connections that never ended within STALE: failed handshakes.
    pub fn expire(&mut self, now: Instant) -> Vec<WireHandshake> {
        let stale: Vec<ConnId> = self
            .flows
            .iter()
            .filter(|(_, f)| now.duration_since(f.since) >= STALE)
            .map(|(id, _)| *id)
            .collect();
        stale
            .into_iter()
            .filter_map(|id| {
                let f = self.flows.remove(&id)?;
                Some(handshake(id, &f, false, 0))
            })
            .collect()
    }

    /// Room for one more connection: at the bound the oldest sixteenth go, counted.
    fn make_room(&mut self) {
        if self.flows.len() < MAX_FLOWS {
            return;
        }
        let out = bounds::evict_oldest(&mut self.flows, MAX_FLOWS, |f| f.since);
        self.evicted += out.len() as u64;
    }
}

/// A connection's handshake as its Initial packets showed it. `end_ns`: when the client's
/// datagram that ended it passed (0: it never ended).
fn handshake(conn: ConnId, f: &Flow, ok: bool, end_ns: u64) -> WireHandshake {
    let server = message(f.server.contiguous()).map(as_records).unwrap_or_default();
    let mut p = tls::parse(&server, &[], true);
    p.quic = true;
    WireHandshake {
        conn,
        tgid: f.tgid,
        netns: f.netns,
        port: f.port,
        negotiated: p.negotiated(),
        ok,
        // a handshake took place (its ServerHello unseen where the server's datagrams are
        // not read); one that failed is counted as one the server refused
        hello: p.hello || ok,
        alert: !ok,
        failure: (!ok).then_some(Failure::new(By::Client, Reason::Unfinished)),
        complete: p.hello,
        protocol: crate::wire::AppProtocol::Quic,
        conn_start: f.start_ns,
        end_ns,
    }
}
