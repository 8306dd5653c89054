//! QUIC Initial packets read the way anyone holding the packets can (RFC 9001 §5.2): their
//! keys come from the client's Destination Connection ID and a salt every implementation
//! knows, so the ClientHello and ServerHello they carry are as readable as TLS over TCP's.
//! QUIC version 1 (RFC 9000, RFC 9001) and version 2 (RFC 9369).
//!
//! What this module will and will not read (the product's privacy promise): it parses the
//! clear part of long headers, and it decrypts Initial packets only — never Handshake,
//! 0-RTT or 1-RTT packets, whose keys it does not have and does not derive. Of an Initial
//! packet's frames it returns only the CRYPTO frames' bytes (the TLS handshake messages)
//! and a CONNECTION_CLOSE frame's error code; everything else is skipped, the reason
//! phrase of a CONNECTION_CLOSE included.
//!
//! Every function here takes bytes from the network: none panics on any input, and none
//! allocates more than a small multiple of its input (CryptoStream: of its `max`). Each
//! connection's handshake, from the kernel's datagrams (bpf/quic.h): `flows.rs`.

pub mod flows;
mod initial;
#[cfg(test)]
mod tests;

#[cfg(test)]
use std::ops::Range;

#[allow(unused_imports)] // Initial and MAX_CRYPTO_FRAMES: the tests'
pub use initial::{open_initial, Initial, MAX_CRYPTO_FRAMES};

/// The Version field of QUIC version 1's long headers (RFC 9000 §15).
const WIRE_V1: u32 = 0x0000_0001;
/// The Version field of QUIC version 2's long headers (RFC 9369 §3.1).
const WIRE_V2: u32 = 0x6b33_43cf;
/// Longest connection ID QUIC versions 1 and 2 allow (RFC 9000 §17.2).
const MAX_CID: usize = 20;
/// Length of the AEAD tag that ends every protected packet (AES-128-GCM).
const TAG_LEN: usize = 16;
#[cfg(test)]
/// Most packets `packets` reports from one datagram.
pub const MAX_PACKETS: usize = 8;

/// QUIC versions whose Initial packets can be opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    /// QUIC version 1 (RFC 9000), Version field 0x00000001.
    V1,
    /// QUIC version 2 (RFC 9369), Version field 0x6b3343cf.
    V2,
}

impl Version {
    /// The version a long header's Version field names; None for any other value (Version
    /// Negotiation's 0, drafts, other versions, reserved ones).
    pub fn from_wire(v: u32) -> Option<Version> {
        match v {
            WIRE_V1 => Some(Version::V1),
            WIRE_V2 => Some(Version::V2),
            _ => None,
        }
    }

    #[cfg(test)]
    /// The version as a label value: "quic1" or "quic2".
    pub fn label(self) -> &'static str {
        match self {
            Version::V1 => "quic1",
            Version::V2 => "quic2",
        }
    }

    /// The packet type that the two type bits of a long header's first byte name in this
    /// version (they differ between v1 and v2).
    fn long_type(self, bits: u8) -> LongType {
        match (self, bits & 3) {
            (Version::V1, 0) | (Version::V2, 1) => LongType::Initial,
            (Version::V1, 1) | (Version::V2, 2) => LongType::ZeroRtt,
            (Version::V1, 2) | (Version::V2, 3) => LongType::Handshake,
            _ => LongType::Retry,
        }
    }
}

/// A long-header packet's type, version-independent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LongType {
    /// Carries the first handshake messages (ClientHello, ServerHello); opened here.
    Initial,
    /// Early application data; never opened here.
    ZeroRtt,
    /// The rest of the handshake (encrypted with handshake keys); never opened here.
    Handshake,
    /// A server's request that the client prove its address; carries no frames.
    Retry,
}

/// What a packet's clear header says (no decryption).
///
/// Before header protection is removed the packet number's length is not known: the
/// header proper ends somewhere in the 1 to 4 bytes from `pn_offset`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    /// The Version field (a version `Version::from_wire` knows).
    pub version: u32,
    /// The packet's type.
    pub kind: LongType,
    /// Destination Connection ID (at most 20 bytes).
    pub dcid: Vec<u8>,
    /// Source Connection ID (at most 20 bytes).
    pub scid: Vec<u8>,
    /// The Token's length: an Initial's address-validation token, a Retry's Retry Token;
    /// 0 for 0-RTT and Handshake packets, which have none.
    pub token_len: usize,
    /// offset of the packet-number field (for Retry, which has none: where its Retry
    /// Token starts)
    pub pn_offset: usize,
    /// the whole packet's length in the datagram (header + Length field's value); for Retry
    /// the rest of the datagram
    pub packet_len: usize,
}

/// Why a packet could not be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QuicError {
    /// Fewer bytes than a long header's fixed part, or a packet too short to hold a packet
    /// number, the 16-byte header-protection sample and an AEAD tag.
    Short,
    /// Not a long-header packet (a short header: 1-RTT). From `open_initial` also a long
    /// header of another type than Initial: only Initial packets are ever opened.
    NotLong,
    /// A Version field other than QUIC v1's or v2's (Version Negotiation, drafts, others).
    UnknownVersion,
    /// A length in the header runs past the end of the bytes, or over what the version
    /// allows (a connection ID longer than 20 bytes).
    Truncated,
    /// The payload did not decrypt: other key material (another Destination Connection ID,
    /// the other side's keys) or bytes changed on the way.
    Decrypt,
    /// The decrypted payload breaks QUIC's rules for an Initial packet: no frame at all, a
    /// frame type not allowed in Initial packets, a frame that runs past the end, reserved
    /// header bits set, or too many separate CRYPTO frames.
    BadFrame,
}

impl std::fmt::Display for QuicError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            QuicError::Short => "too short for a QUIC packet",
            QuicError::NotLong => "not a QUIC Initial packet",
            QuicError::UnknownVersion => "unknown QUIC version",
            QuicError::Truncated => "a QUIC header length runs past the packet",
            QuicError::Decrypt => "the QUIC Initial packet did not decrypt",
            QuicError::BadFrame => "the QUIC Initial packet's frames are malformed",
        })
    }
}

impl std::error::Error for QuicError {}

/// A cursor over bytes whose reads give None past the end.
struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn new(bytes: &'a [u8]) -> Self {
        Cursor { bytes, pos: 0 }
    }

    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let end = self.pos.checked_add(n)?;
        let b = self.bytes.get(self.pos..end)?;
        self.pos = end;
        Some(b)
    }

    fn u8(&mut self) -> Option<u8> {
        Some(self.take(1)?[0])
    }

    /// A variable-length integer (RFC 9000 §16): the first byte's top two bits give its
    /// length, 1, 2, 4 or 8 bytes.
    fn varint(&mut self) -> Option<u64> {
        let first = *self.bytes.get(self.pos)?;
        let len = 1usize << (first >> 6);
        let b = self.take(len)?;
        let mut v = u64::from(first & 0x3f);
        for &x in &b[1..] {
            v = v << 8 | u64::from(x);
        }
        Some(v)
    }

    /// A varint that is a length of bytes still to come in this buffer.
    fn length(&mut self) -> Option<usize> {
        usize::try_from(self.varint()?).ok()
    }

    fn rest(&self) -> usize {
        self.bytes.len() - self.pos
    }
}

/// Parses the long header at the start of `datagram` (error for a short header, an unknown
/// version, or lengths past the end).
///
/// `datagram` may go on past this packet (coalesced packets): `packet_len` says where it
/// ends. Only the clear fields are read; nothing is decrypted.
pub fn header(datagram: &[u8]) -> Result<Header, QuicError> {
    let first = *datagram.first().ok_or(QuicError::Short)?;
    if first & 0x80 == 0 {
        return Err(QuicError::NotLong);
    }
    // first byte, version, DCID length
    if datagram.len() < 6 {
        return Err(QuicError::Short);
    }
    let wire = u32::from_be_bytes([datagram[1], datagram[2], datagram[3], datagram[4]]);
    let mut c = Cursor::new(datagram);
    c.pos = 5;
    let version = Version::from_wire(wire).ok_or(QuicError::UnknownVersion)?;
    let kind = version.long_type(first >> 4);
    let cid = |c: &mut Cursor| -> Result<Vec<u8>, QuicError> {
        let n = usize::from(c.u8().ok_or(QuicError::Truncated)?);
        if n > MAX_CID {
            return Err(QuicError::Truncated);
        }
        Ok(c.take(n).ok_or(QuicError::Truncated)?.to_vec())
    };
    let dcid = cid(&mut c)?;
    let scid = cid(&mut c)?;
    if kind == LongType::Retry {
        // Retry Token, then the 16-byte Retry Integrity Tag, to the datagram's end
        let token_len = c.rest().checked_sub(TAG_LEN).ok_or(QuicError::Truncated)?;
        return Ok(Header {
            version: wire,
            kind,
            dcid,
            scid,
            token_len,
            pn_offset: c.pos,
            packet_len: datagram.len(),
        });
    }
    let mut token_len = 0;
    if kind == LongType::Initial {
        token_len = c.length().ok_or(QuicError::Truncated)?;
        c.take(token_len).ok_or(QuicError::Truncated)?;
    }
    let length = c.length().ok_or(QuicError::Truncated)?;
    let pn_offset = c.pos;
    if length > c.rest() {
        return Err(QuicError::Truncated);
    }
    Ok(Header {
        version: wire,
        kind,
        dcid,
        scid,
        token_len,
        pn_offset,
        packet_len: pn_offset + length,
    })
}

#[cfg(test)]
/// One packet of a datagram, as `packets` finds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Packet {
    /// A long-header packet: its clear header (offsets in it relative to the packet's
    /// start) and the packet's bytes in the datagram.
    Long(Header, Range<usize>),
    /// A short-header (1-RTT) packet starting at this offset: it runs to the datagram's
    /// end, and nothing in it is read.
    Short(usize),
}

#[cfg(test)]
/// Walks a datagram's coalesced packets (RFC 9000 §12.2) by their Length fields: each
/// long-header packet's header and its byte range. Stops at a short-header packet (which
/// takes the rest of the datagram), after a Retry (likewise), at bytes that do not parse
/// as a long header (an unknown version, lengths past the end), or at trailing zero bytes
/// (padding some stacks add after their packets). At most `MAX_PACKETS` (8) packets.
pub fn packets(datagram: &[u8]) -> Vec<Packet> {
    let mut out = Vec::new();
    let mut at = 0;
    while at < datagram.len() && out.len() < MAX_PACKETS {
        let rest = &datagram[at..];
        if rest.iter().all(|&b| b == 0) {
            break;
        }
        if rest[0] & 0x80 == 0 {
            out.push(Packet::Short(at));
            break;
        }
        let Ok(h) = header(rest) else { break };
        let len = h.packet_len;
        let retry = h.kind == LongType::Retry;
        out.push(Packet::Long(h, at..at + len));
        if retry {
            break;
        }
        at += len;
    }
    out
}

/// Bytes of handshake data a `CryptoStream::default()` keeps: a ClientHello with
/// post-quantum key shares and ECH is ~2-3 KiB, a ServerHello far less.
pub const DEFAULT_CRYPTO_MAX: usize = 16 * 1024;
/// Frames beyond the contiguous bytes that a CryptoStream holds back at most.
const MAX_PENDING: usize = 64;

/// Puts CRYPTO frames together: the contiguous bytes from offset 0 (gaps end it; overlapping
/// frames fine), at most `max` bytes.
///
/// Frames that start past the contiguous bytes wait until the gap before them is filled
/// (at most 64 of them, of at most `max` bytes together; more are dropped). Where frames
/// overlap, the bytes that came first are kept. Memory: at most about twice `max`.
#[derive(Debug, Clone)]
pub struct CryptoStream {
    max: usize,
    /// The bytes from offset 0 on, without gaps.
    data: Vec<u8>,
    /// Frames past `data`'s end: (offset, bytes), cut to `max`.
    pending: Vec<(usize, Vec<u8>)>,
    /// The bytes in `pending`.
    pending_bytes: usize,
}

impl Default for CryptoStream {
    /// A stream that keeps at most `DEFAULT_CRYPTO_MAX` bytes.
    fn default() -> Self {
        CryptoStream::new(DEFAULT_CRYPTO_MAX)
    }
}

impl CryptoStream {
    /// An empty stream that keeps at most `max` bytes (bytes at offsets from `max` on are
    /// dropped).
    pub fn new(max: usize) -> Self {
        CryptoStream {
            max,
            data: Vec::new(),
            pending: Vec::new(),
            pending_bytes: 0,
        }
    }

    /// Adds a CRYPTO frame's bytes at its offset in the stream.
    pub fn add(&mut self, offset: u64, data: &[u8]) {
        let Ok(offset) = usize::try_from(offset) else { return };
        if offset >= self.max {
            return;
        }
        let keep = data.len().min(self.max - offset);
        let data = &data[..keep];
        let end = offset + keep;
        let have = self.data.len();
        if end <= have {
            return;
        }
        if offset <= have {
            self.data.extend_from_slice(&data[have - offset..]);
            self.drain_pending();
        } else if self.pending.len() < MAX_PENDING && self.pending_bytes + keep <= self.max {
            self.pending_bytes += keep;
            self.pending.push((offset, data.to_vec()));
        }
    }

    /// Moves the waiting frames that now touch the contiguous bytes into them, and drops
    /// those they cover.
    fn drain_pending(&mut self) {
        loop {
            let have = self.data.len();
            let Some(i) = self.pending.iter().position(|(o, _)| *o <= have) else {
                return;
            };
            let (o, d) = self.pending.swap_remove(i);
            self.pending_bytes -= d.len();
            if o + d.len() > have {
                self.data.extend_from_slice(&d[have - o..]);
            }
        }
    }

    /// The bytes from offset 0 up to the first gap (at most `max`).
    pub fn contiguous(&self) -> &[u8] {
        &self.data
    }
}

/// TLS record content type of handshake messages.
const RECORD_HANDSHAKE: u8 = 22;
/// Longest TLS plaintext record payload (RFC 8446 §5.1).
const MAX_RECORD: usize = 1 << 14;

/// Wraps handshake-message bytes (a ClientHello or ServerHello as carried in CRYPTO frames)
/// into TLS plaintext handshake records (type 22, legacy version 0x0303, ≤16384 bytes each),
/// so the crate's TLS record parsers read them. No bytes give no records.
pub fn as_records(handshake: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(handshake.len() + handshake.len().div_ceil(MAX_RECORD) * 5);
    for chunk in handshake.chunks(MAX_RECORD) {
        out.push(RECORD_HANDSHAKE);
        out.extend_from_slice(&[0x03, 0x03]);
        out.extend_from_slice(&(chunk.len() as u16).to_be_bytes());
        out.extend_from_slice(chunk);
    }
    out
}
