//! Mirror of bpf/wire.h: the server's handshake output, as the kernel captures it.

pub const WIRE_EV_DATA: u8 = 1;
pub const WIRE_EV_RECORD: u8 = 2;
pub const WIRE_EV_END: u8 = 3;
/// The client's ClientHello bytes (bpf/hello.h): `offset` is their place in its stream.
pub const WIRE_EV_HELLO: u8 = 4;

/// WIRE_EV_HELLO flags: these bytes complete the ClientHello; in the high nibble, why the
/// capture gave up.
pub const HELLO_LAST: u8 = 0x01;
/// A QUIC connection's datagram (bpf/quic.h): data is a quic_head and an Initial packet.
pub const WIRE_EV_QUIC: u8 = 5;
/// WIRE_EV_QUIC flags: the client's datagram (else the server's); the client's first
/// Handshake or 1-RTT packet; the server's Retry.
pub const QUIC_F_CLIENT: u8 = 0x01;
pub const QUIC_F_DONE: u8 = 0x02;
pub const QUIC_F_RETRY: u8 = 0x04;
/// Bytes of the quic_head before a WIRE_EV_QUIC's packet.
pub const QUIC_HEAD: usize = 16;

/// Mirror of bpf/quic.h's struct quic_head (the layout test checks it); WireEvent::quic
/// reads it.
#[repr(C)]
pub struct quic_head {
    pub ts: u64,
    pub hs_len: u16,
    pub dgram: u16,
    pub pad: [u8; 4],
}

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

pub const HELLO_WHY_MASK: u8 = 0xf0;
pub const HELLO_UNREADABLE: u8 = 0x10;
pub const HELLO_CUT: u8 = 0x20;
pub const HELLO_GAP: u8 = 0x30;
pub const HELLO_BAD: u8 = 0x40;
/// Bytes of a client's stream the kernel reads at most.
pub const HELLO_MAX: usize = 8192;

#[cfg(test)]
pub const WIRE_END_FINISHED: u8 = 1;
pub const WIRE_END_ALERT: u8 = 2;
pub const WIRE_END_CLOSED: u8 = 3;
#[cfg(test)]
pub const WIRE_END_CAP: u8 = 4;
#[cfg(test)]
pub const WIRE_END_BAD: u8 = 5;
#[cfg(test)]
pub const WIRE_END_UNSUPPORTED: u8 = 6;
/// The client answered the server's TLS 1.3 flight with fewer bytes than any Finished: an
/// alert, it rejected the server (its certificate, most often).
pub const WIRE_END_CLIENT_ALERT: u8 = 7;

/// The protocol of a connection's plaintext preamble (bpf/wire.h), in a WIRE_EV_END's data.
pub const WIRE_PROTO_NONE: u8 = 0;
#[cfg(test)]
pub const WIRE_PROTO_OTHER: u8 = 1;
pub const WIRE_PROTO_SMTP: u8 = 2;
pub const WIRE_PROTO_FTP: u8 = 3;
pub const WIRE_PROTO_IMAP: u8 = 4;
pub const WIRE_PROTO_POP3: u8 = 5;
pub const WIRE_PROTO_LDAP: u8 = 6;
pub const WIRE_PROTO_XMPP: u8 = 7;
pub const WIRE_PROTO_NNTP: u8 = 8;
pub const WIRE_PROTO_POSTGRESQL: u8 = 9;
pub const WIRE_PROTO_MYSQL: u8 = 10;
/// Bytes of a WIRE_EV_END's data: the connection's accept time, its preamble's protocol.
pub const WIRE_END_LEN: usize = 9;

/// Mirror of bpf/wire.h's struct wire_end (the layout test checks it); WireEvent::end reads
/// it from a WIRE_EV_END's data.
#[cfg(test)]
#[repr(C)]
pub struct wire_end {
    pub conn_start: u64,
    pub proto: u8,
}

/// A preamble's protocol as a `protocol` label value (None: TLS from the first byte).
pub fn preamble_protocol(code: u8) -> Option<&'static str> {
    Some(match code {
        WIRE_PROTO_NONE => return None,
        WIRE_PROTO_SMTP => "smtp",
        WIRE_PROTO_FTP => "ftp",
        WIRE_PROTO_IMAP => "imap",
        WIRE_PROTO_POP3 => "pop3",
        WIRE_PROTO_LDAP => "ldap",
        WIRE_PROTO_XMPP => "xmpp",
        WIRE_PROTO_NNTP => "nntp",
        WIRE_PROTO_POSTGRESQL => "postgresql",
        WIRE_PROTO_MYSQL => "mysql",
        _ => "starttls_other",
    })
}

pub const WIRE_CHUNK: usize = 4096;
/// Bytes before `data` in an event.
pub const WIRE_EVENT_HEADER: usize = 24;

#[repr(C)]
#[derive(Clone, Copy)]
/// Mirror of bpf/wire.h (the layout test checks it); WireEvent::decode reads by its offsets.
pub struct wire_event {
    pub conn_id: u64,
    pub tgid: u32,
    pub netns: u32,
    pub port: u16,
    pub kind: u8,
    pub flags: u8,
    pub len: u16,
    pub offset: u16,
    pub data: [u8; WIRE_CHUNK],
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
    pub kind: u8,
    pub flags: u8,
    /// WIRE_EV_HELLO: the client stream's offset of data[0].
    pub offset: u16,
    pub data: Vec<u8>,
}

impl WireEvent {
    /// A WIRE_EV_END's data: the connection's accept time (bpf_ktime_get_ns) and its
    /// preamble's protocol (WIRE_PROTO_*); (0, NONE) if the kernel sent none.
    pub fn end(&self) -> (u64, u8) {
        match self.data.get(..WIRE_END_LEN) {
            Some(d) => (u64::from_le_bytes(d[..8].try_into().unwrap_or_default()), d[8]),
            None => (0, WIRE_PROTO_NONE),
        }
    }
}

impl WireEvent {
    /// A WIRE_EV_QUIC's head and packet; None if the data is shorter than the head.
    pub fn quic(&self) -> Option<QuicDatagram<'_>> {
        use std::mem::offset_of;
        let d = self.data.get(..QUIC_HEAD)?;
        let u16_at = |o: usize| u16::from_le_bytes([d[o], d[o + 1]]);
        Some(QuicDatagram {
            ts: u64::from_le_bytes(d[..8].try_into().ok()?),
            hs_len: u16_at(offset_of!(quic_head, hs_len)),
            dgram: u16_at(offset_of!(quic_head, dgram)),
            initial: &self.data[QUIC_HEAD..],
        })
    }

    pub fn decode(b: &[u8]) -> Option<Self> {
        if b.len() < WIRE_EVENT_HEADER {
            return None;
        }
        use std::mem::offset_of;
        let u64_at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap());
        let u32_at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().unwrap());
        let u16_at = |o: usize| u16::from_le_bytes(b[o..o + 2].try_into().unwrap());
        let len = u16_at(offset_of!(wire_event, len)) as usize;
        let data = b.get(WIRE_EVENT_HEADER..WIRE_EVENT_HEADER + len)?.to_vec();
        Some(Self {
            conn_id: u64_at(offset_of!(wire_event, conn_id)),
            tgid: u32_at(offset_of!(wire_event, tgid)),
            netns: u32_at(offset_of!(wire_event, netns)),
            port: u16_at(offset_of!(wire_event, port)),
            kind: b[offset_of!(wire_event, kind)],
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
        let mut raw = vec![0u8; WIRE_EVENT_HEADER];
        raw[0..8].copy_from_slice(&7u64.to_le_bytes());
        raw[8..12].copy_from_slice(&1234u32.to_le_bytes());
        raw[12..16].copy_from_slice(&4026531840u32.to_le_bytes());
        raw[16..18].copy_from_slice(&8443u16.to_le_bytes());
        raw[18] = WIRE_EV_DATA;
        raw[19] = 0;
        raw[20..22].copy_from_slice(&3u16.to_le_bytes());
        raw[22..24].copy_from_slice(&517u16.to_le_bytes());
        raw.extend_from_slice(&[22, 3, 3]);
        let e = WireEvent::decode(&raw).unwrap();
        assert_eq!(
            (e.conn_id, e.tgid, e.netns, e.port, e.kind),
            (7, 1234, 4026531840, 8443, WIRE_EV_DATA)
        );
        assert_eq!((e.data, e.offset), (vec![22, 3, 3], 517));
        assert!(WireEvent::decode(&raw[..WIRE_EVENT_HEADER + 2]).is_none());
        assert_eq!(std::mem::offset_of!(wire_event, data), WIRE_EVENT_HEADER);
        assert_eq!(std::mem::offset_of!(wire_event, len), 20);
    }
}
