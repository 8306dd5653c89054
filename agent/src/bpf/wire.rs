//! The server's handshake output, as the kernel captures it (bpf/wire.h; its types
//! generated: abi.rs), and its events' decoding.

pub use super::abi::{
    conn_by, hello_why, quic_head, wire_end, wire_ev, wire_event, wire_proto, HELLO_ALERT, HELLO_LAST, HELLO_MAX,
    HELLO_WHY_MASK, QUIC_F_CLIENT, QUIC_F_DONE, QUIC_F_RETRY,
};
use crate::wire::AppProtocol;

use super::abi::{decode, wire_end_data, QUIC_HEAD, WIRE_END_CLOSED_LEN, WIRE_END_LEN, WIRE_EVENT_HEADER};

// The sizes bpf/wire.h and quic.h state as numbers, checked against the types they size.
const _: () = assert!(std::mem::offset_of!(wire_event, data) == WIRE_EVENT_HEADER as usize);
const _: () = assert!(std::mem::size_of::<quic_head>() == QUIC_HEAD as usize);
const _: () = assert!(std::mem::offset_of!(wire_end_data, proto) + 1 == WIRE_END_LEN as usize);
const _: () = assert!(std::mem::offset_of!(wire_end_data, by) + 1 == WIRE_END_CLOSED_LEN as usize);

/// A WIRE_EV_QUIC's head and packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuicDatagram<'a> {
    /// When it passed (bpf_ktime_get_ns).
    pub ts: u64,
    /// The Length of the client's first Handshake packet (QUIC_F_DONE; 0: a 1-RTT packet).
    pub hs_len: u16,
    /// The datagram's UDP payload length.
    pub dgram: u16,
    /// The Initial packet at its head (empty: none).
    pub initial: &'a [u8],
}

impl wire_proto {
    /// A preamble's protocol as a `protocol` label value (None: TLS from the first byte).
    pub fn protocol(self) -> Option<AppProtocol> {
        Some(match self {
            wire_proto::None => return None,
            wire_proto::Other => AppProtocol::StarttlsOther,
            wire_proto::Smtp => AppProtocol::Smtp,
            wire_proto::Ftp => AppProtocol::Ftp,
            wire_proto::Imap => AppProtocol::Imap,
            wire_proto::Pop3 => AppProtocol::Pop3,
            wire_proto::Ldap => AppProtocol::Ldap,
            wire_proto::Xmpp => AppProtocol::Xmpp,
            wire_proto::Nntp => AppProtocol::Nntp,
            wire_proto::Postgresql => AppProtocol::Postgresql,
            wire_proto::Mysql => AppProtocol::Mysql,
        })
    }
}

/// An event as read from the ring buffer: the fixed header and its `len` bytes of data
/// (the kernel sends only those, not the whole array).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WireEvent {
    /// The connection's identity (bpf/conn.h conn_life.id).
    pub conn_id: u64,
    pub tgid: u32,
    pub netns: u32,
    pub port: u16,
    pub kind: wire_ev,
    /// What `kind` says: WIRE_END_* (wire_end) of an END, HELLO_* of a HELLO, QUIC_F_* of a QUIC.
    pub flags: u8,
    /// WIRE_EV_HELLO: the client stream's offset of data[0].
    pub offset: u16,
    pub data: Vec<u8>,
}

impl WireEvent {
    /// A WIRE_EV_END's data (struct wire_end_data): the connection's accept time
    /// (bpf_ktime_get_ns), its preamble's protocol and who had ended the connection; (0,
    /// None, None) if the kernel sent none, a None where the kernel's code is one bpf/wire.h
    /// or conn.h does not name (counted by `decode`; a `by` of 0: no one yet).
    pub fn end(&self) -> End {
        match self.data.get(..WIRE_END_LEN as usize) {
            Some(d) => End {
                conn_start: u64::from_le_bytes(d[..8].try_into().unwrap_or_default()),
                proto: decode(d[8]),
                // sent where the connection's close ended the capture
                by: self.data.get(WIRE_END_LEN as usize).and_then(|b| ended_by(*b)),
            },
            None => End {
                conn_start: 0,
                proto: Some(wire_proto::None),
                by: None,
            },
        }
    }
}

/// Who had ended a connection by its capture's end, from wire_end_data.by (conn_life's
/// first_fin and reset), as bpf/conn.bpf.h conn_closed tells it at the close: the client's
/// FIN first, else a reset, else the server's FIN; None while no one has.
fn ended_by(raw: u8) -> Option<conn_by> {
    let (first_fin, reset) = (raw & 0x0f, raw >> 4 != 0);
    if first_fin == conn_by::Client as u8 {
        Some(conn_by::Client)
    } else if reset {
        Some(conn_by::Reset)
    } else if first_fin == 0 {
        None
    } else {
        decode(first_fin) // the server's FIN; a value bpf/conn.h does not name is counted
    }
}

/// What a WIRE_EV_END says besides why the capture ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct End {
    pub conn_start: u64,
    pub proto: Option<wire_proto>,
    pub by: Option<conn_by>,
}

impl WireEvent {
    /// A WIRE_EV_QUIC's head and packet; None if the data is shorter than the head.
    pub fn quic(&self) -> Option<QuicDatagram<'_>> {
        use std::mem::offset_of;
        let d = self.data.get(..QUIC_HEAD as usize)?;
        let u16_at = |o: usize| u16::from_le_bytes([d[o], d[o + 1]]);
        Some(QuicDatagram {
            ts: u64::from_le_bytes(d[..8].try_into().ok()?),
            hs_len: u16_at(offset_of!(quic_head, hs_len)),
            dgram: u16_at(offset_of!(quic_head, dgram)),
            initial: &self.data[QUIC_HEAD as usize..],
        })
    }

    /// None if the record is shorter than its header and `len`, or its kind is one
    /// bpf/wire.h does not name (counted by `decode`).
    pub fn decode(b: &[u8]) -> Option<Self> {
        const HEADER: usize = WIRE_EVENT_HEADER as usize;
        if b.len() < HEADER {
            return None;
        }
        use std::mem::offset_of;
        let u64_at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap());
        let u32_at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().unwrap());
        let u16_at = |o: usize| u16::from_le_bytes(b[o..o + 2].try_into().unwrap());
        let len = u16_at(offset_of!(wire_event, len)) as usize;
        let data = b.get(HEADER..HEADER + len)?.to_vec();
        Some(Self {
            conn_id: u64_at(offset_of!(wire_event, conn_id)),
            tgid: u32_at(offset_of!(wire_event, tgid)),
            netns: u32_at(offset_of!(wire_event, netns)),
            port: u16_at(offset_of!(wire_event, port)),
            kind: decode(b[offset_of!(wire_event, kind)])?,
            flags: b[offset_of!(wire_event, flags)],
            offset: u16_at(offset_of!(wire_event, offset)),
            data,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decode_matches_the_layout() {
        const HEADER: usize = WIRE_EVENT_HEADER as usize;
        let mut raw = vec![0u8; HEADER];
        raw[0..8].copy_from_slice(&7u64.to_le_bytes());
        raw[8..12].copy_from_slice(&1234u32.to_le_bytes());
        raw[12..16].copy_from_slice(&4026531840u32.to_le_bytes());
        raw[16..18].copy_from_slice(&8443u16.to_le_bytes());
        raw[18] = wire_ev::Data as u8;
        raw[19] = 0;
        raw[20..22].copy_from_slice(&3u16.to_le_bytes());
        raw[22..24].copy_from_slice(&517u16.to_le_bytes());
        raw.extend_from_slice(&[22, 3, 3]);
        let e = WireEvent::decode(&raw).unwrap();
        assert_eq!(
            (e.conn_id, e.tgid, e.netns, e.port, e.kind),
            (7, 1234, 4026531840, 8443, wire_ev::Data)
        );
        assert_eq!((e.data, e.offset), (vec![22, 3, 3], 517));
        assert!(WireEvent::decode(&raw[..HEADER + 2]).is_none());
        assert_eq!(std::mem::offset_of!(wire_event, data), HEADER);
        assert_eq!(std::mem::offset_of!(wire_event, len), 20);
        // a kind bpf/wire.h does not name: not decoded (and counted), never read as another
        raw[18] = 99;
        assert!(WireEvent::decode(&raw).is_none());
    }

    /// Who ended a connection, as conn_closed tells it: the client's FIN first, else a
    /// reset (after the server's FIN too), else the server's FIN.
    #[test]
    fn who_ended_it() {
        let (client, server) = (conn_by::Client as u8, conn_by::Server as u8);
        assert_eq!(ended_by(0), None);
        assert_eq!(ended_by(client), Some(conn_by::Client));
        assert_eq!(ended_by(client | 0x10), Some(conn_by::Client));
        assert_eq!(ended_by(0x10), Some(conn_by::Reset));
        assert_eq!(ended_by(server | 0x10), Some(conn_by::Reset));
        assert_eq!(ended_by(server), Some(conn_by::Server));
    }
}
