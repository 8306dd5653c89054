//! Opening Initial packets (RFC 9001 §5): the keys every observer can derive from the
//! client's Destination Connection ID (§5.2; RFC 9369 §3.3 for v2), header protection
//! (§5.4), AES-128-GCM payload protection (§5.3), and the frames an Initial packet may
//! carry (RFC 9000 §12.4, §19).
use ring::{
    aead::{self, quic::HeaderProtectionKey, Aad, LessSafeKey, Nonce, UnboundKey},
    hkdf,
};

use super::{header, Cursor, LongType, QuicError, Version, TAG_LEN};

/// initial_salt of QUIC v1 (RFC 9001 §5.2).
const SALT_V1: [u8; 20] = [
    0x38, 0x76, 0x2c, 0xf7, 0xf5, 0x59, 0x34, 0xb3, 0x4d, 0x17, 0x9a, 0xe6, 0xa4, 0xc8, 0x0c, 0xad, 0xcc, 0xbb, 0x7f,
    0x0a,
];
/// initial_salt of QUIC v2 (RFC 9369 §3.3.1).
const SALT_V2: [u8; 20] = [
    0x0d, 0xed, 0xe3, 0xde, 0xf7, 0x00, 0xa6, 0xdb, 0x81, 0x93, 0x81, 0xbe, 0x6e, 0x26, 0x9d, 0xcb, 0xf9, 0xbd, 0x2e,
    0xd9,
];
/// Bytes of the header-protection sample (RFC 9001 §5.4.2), taken 4 bytes past the start
/// of the packet number field whatever the packet number's length.
const SAMPLE_LEN: usize = 16;
/// Separate CRYPTO frames one Initial packet may carry here (successive frames that
/// continue each other count as one). Real stacks send a handful, Chrome's reordering
/// ("chaos protection") a few more; the cap keeps `Initial` a small multiple of the packet.
pub const MAX_CRYPTO_FRAMES: usize = 64;
/// Largest stream offset plus length (RFC 9000 §19.6).
const MAX_STREAM_END: u64 = (1 << 62) - 1;

/// An opened Initial packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Initial {
    /// The packet's QUIC version.
    pub version: Version,
    /// The packet's Destination Connection ID.
    pub dcid: Vec<u8>,
    /// The packet's Source Connection ID.
    pub scid: Vec<u8>,
    /// The packet number as sent (1 to 4 bytes, not expanded: the first packets of a
    /// connection have small numbers).
    pub packet_number: u64,
    /// CRYPTO frames: (offset, bytes)
    ///
    /// In the packet's order; successive frames that continue each other are joined, and
    /// empty ones left out.
    pub crypto: Vec<(u64, Vec<u8>)>,
    /// A CONNECTION_CLOSE frame (0x1c or 0x1d): its error code
    ///
    /// (the first one's, if several; its reason phrase is never kept).
    pub close: Option<u64>,
}

/// The AEAD key, IV and header-protection key that protect one side's Initial packets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Keys {
    pub(super) key: [u8; 16],
    pub(super) iv: [u8; 12],
    pub(super) hp: [u8; 16],
}

/// An HKDF output length, as ring takes it.
struct Len(usize);

impl hkdf::KeyType for Len {
    fn len(&self) -> usize {
        self.0
    }
}

/// HKDF-Expand-Label (RFC 8446 §7.1) with an empty context, filling `out`.
fn expand_label(prk: &hkdf::Prk, label: &[u8], out: &mut [u8]) -> Option<()> {
    const PREFIX: &[u8] = b"tls13 ";
    let len = u16::try_from(out.len()).ok()?.to_be_bytes();
    let label_len = [u8::try_from(PREFIX.len() + label.len()).ok()?];
    let info: [&[u8]; 5] = [&len, &label_len, PREFIX, label, &[0]];
    prk.expand(&info, Len(out.len())).ok()?.fill(out).ok()
}

/// client_initial_secret or server_initial_secret (RFC 9001 §5.2): HKDF-Extract with the
/// version's salt over the client's Destination Connection ID, expanded with "client in"
/// or "server in".
pub(super) fn side_secret(version: Version, client_dcid: &[u8], from_client: bool) -> Option<[u8; 32]> {
    let salt = match version {
        Version::V1 => &SALT_V1,
        Version::V2 => &SALT_V2,
    };
    let initial = hkdf::Salt::new(hkdf::HKDF_SHA256, salt).extract(client_dcid);
    let label: &[u8] = if from_client { b"client in" } else { b"server in" };
    let mut secret = [0; 32];
    expand_label(&initial, label, &mut secret)?;
    Some(secret)
}

/// The packet-protection key, IV and header-protection key from one side's initial secret
/// (RFC 9001 §5.1; v2's labels: RFC 9369 §3.3.2).
pub(super) fn keys_from_secret(version: Version, secret: &[u8; 32]) -> Option<Keys> {
    let (key_label, iv_label, hp_label): (&[u8], &[u8], &[u8]) = match version {
        Version::V1 => (b"quic key", b"quic iv", b"quic hp"),
        Version::V2 => (b"quicv2 key", b"quicv2 iv", b"quicv2 hp"),
    };
    let prk = hkdf::Prk::new_less_safe(hkdf::HKDF_SHA256, secret);
    let mut k = Keys {
        key: [0; 16],
        iv: [0; 12],
        hp: [0; 16],
    };
    expand_label(&prk, key_label, &mut k.key)?;
    expand_label(&prk, iv_label, &mut k.iv)?;
    expand_label(&prk, hp_label, &mut k.hp)?;
    Some(k)
}

/// The keys of one side's Initial packets for a connection whose client chose
/// `client_dcid`.
pub(super) fn initial_keys(version: Version, client_dcid: &[u8], from_client: bool) -> Option<Keys> {
    keys_from_secret(version, &side_secret(version, client_dcid, from_client)?)
}

/// Opens one Initial packet (`packet` = exactly its bytes, as `packets` delimits them):
/// `from_client` says whose keys ("client in" or "server in"); `client_dcid` is the
/// Destination Connection ID of the client's Initial packets (the key material; after a
/// Retry, the one the client uses in its later Initials). Header protection removed,
/// payload decrypted with AES-128-GCM, frames walked: PADDING, PING, ACK (0x02/0x03, skipped
/// correctly incl. ECN counts), CRYPTO (0x06), CONNECTION_CLOSE (0x1c/0x1d) — any other
/// frame type in an Initial packet is a protocol violation: error.
///
/// Bytes past the packet's Length (a whole datagram passed in) are ignored. Packets of any
/// other type than Initial give `NotLong` and are not decrypted. Allocates copies of the
/// packet's header and payload, the connection IDs, and the CRYPTO bytes (at most
/// `MAX_CRYPTO_FRAMES` entries).
pub fn open_initial(packet: &[u8], from_client: bool, client_dcid: &[u8]) -> Result<Initial, QuicError> {
    let h = header(packet)?;
    if h.kind != LongType::Initial {
        return Err(QuicError::NotLong);
    }
    let version = Version::from_wire(h.version).ok_or(QuicError::UnknownVersion)?;
    let packet = packet.get(..h.packet_len).ok_or(QuicError::Truncated)?;
    let pn_offset = h.pn_offset;
    // The sample starts as if the packet number were 4 bytes long (RFC 9001 §5.4.2); a
    // packet too short for it cannot be opened (and a sender pads to make it long enough).
    let sample = packet
        .get(pn_offset + 4..pn_offset + 4 + SAMPLE_LEN)
        .ok_or(QuicError::Short)?;
    let keys = initial_keys(version, client_dcid, from_client).ok_or(QuicError::Decrypt)?;
    let hp = HeaderProtectionKey::new(&aead::quic::AES_128, &keys.hp).map_err(|_| QuicError::Decrypt)?;
    let mask = hp.new_mask(sample).map_err(|_| QuicError::Decrypt)?;

    // Long headers protect the first byte's low 4 bits: reserved bits and packet number
    // length (RFC 9001 §5.4.1).
    let first = packet[0] ^ (mask[0] & 0x0f);
    let pn_len = usize::from(first & 0x03) + 1;
    let header_end = pn_offset + pn_len;
    let mut aad = packet[..header_end].to_vec();
    aad[0] = first;
    let mut packet_number = 0u64;
    for (b, m) in aad[pn_offset..].iter_mut().zip(&mask[1..]) {
        *b ^= m;
        packet_number = packet_number << 8 | u64::from(*b);
    }

    // The nonce: the IV XORed with the packet number, left-padded to the IV's length.
    let mut nonce = keys.iv;
    for (n, p) in nonce[4..].iter_mut().zip(packet_number.to_be_bytes()) {
        *n ^= p;
    }
    let key = UnboundKey::new(&aead::AES_128_GCM, &keys.key).map_err(|_| QuicError::Decrypt)?;
    let key = LessSafeKey::new(key);
    let mut payload = packet[header_end..].to_vec();
    if payload.len() < TAG_LEN {
        return Err(QuicError::Short);
    }
    let plain = key
        .open_in_place(Nonce::assume_unique_for_key(nonce), Aad::from(&aad[..]), &mut payload)
        .map_err(|_| QuicError::Decrypt)?;
    // Reserved bits must be 0, checked only once the packet is authentic (RFC 9000 §17.2).
    if first & 0x0c != 0 {
        return Err(QuicError::BadFrame);
    }
    let (crypto, close) = frames(plain)?;
    Ok(Initial {
        version,
        dcid: h.dcid,
        scid: h.scid,
        packet_number,
        crypto,
        close,
    })
}

/// CRYPTO frames and a CONNECTION_CLOSE error code, from an Initial packet's decrypted
/// payload.
type Frames = (Vec<(u64, Vec<u8>)>, Option<u64>);

/// Walks an Initial packet's frames (RFC 9000 §19): only PADDING, PING, ACK, CRYPTO and
/// CONNECTION_CLOSE may be there (§12.4, Table 3).
pub(super) fn frames(plain: &[u8]) -> Result<Frames, QuicError> {
    const BAD: QuicError = QuicError::BadFrame;
    // A packet without a frame is a protocol violation (RFC 9000 §12.4).
    if plain.is_empty() {
        return Err(BAD);
    }
    let mut crypto: Vec<(u64, Vec<u8>)> = Vec::new();
    let mut close = None;
    let mut c = Cursor::new(plain);
    while c.rest() > 0 {
        // Frame types are varints in their shortest encoding (§12.4): every type allowed
        // here is one byte, and a first byte of 0x40 or more is some other type.
        match c.u8().ok_or(BAD)? {
            // PADDING, PING
            0x00 | 0x01 => {}
            // ACK: Largest Acknowledged, ACK Delay, ACK Range Count, First ACK Range, the
            // ranges (Gap, ACK Range Length), with 0x03 the three ECN counts (§19.3). Every
            // range reads at least two bytes, so a huge count ends at the payload's end.
            t @ (0x02 | 0x03) => {
                for _ in 0..2 {
                    c.varint().ok_or(BAD)?;
                }
                let ranges = c.varint().ok_or(BAD)?;
                c.varint().ok_or(BAD)?;
                for _ in 0..ranges {
                    c.varint().ok_or(BAD)?;
                    c.varint().ok_or(BAD)?;
                }
                if t == 0x03 {
                    for _ in 0..3 {
                        c.varint().ok_or(BAD)?;
                    }
                }
            }
            // CRYPTO: Offset, Length, Crypto Data (§19.6).
            0x06 => {
                let offset = c.varint().ok_or(BAD)?;
                let len = c.length().ok_or(BAD)?;
                let data = c.take(len).ok_or(BAD)?;
                let end = offset.checked_add(len as u64).ok_or(BAD)?;
                if end > MAX_STREAM_END {
                    return Err(BAD);
                }
                if data.is_empty() {
                    continue;
                }
                let full = crypto.len() >= MAX_CRYPTO_FRAMES;
                match crypto.last_mut() {
                    Some((o, d)) if *o + d.len() as u64 == offset => d.extend_from_slice(data),
                    _ if full => return Err(BAD),
                    _ => crypto.push((offset, data.to_vec())),
                }
            }
            // CONNECTION_CLOSE: Error Code, (0x1c only) Frame Type, Reason Phrase Length,
            // Reason Phrase (§19.19). The phrase is skipped, never kept.
            t @ (0x1c | 0x1d) => {
                let code = c.varint().ok_or(BAD)?;
                if t == 0x1c {
                    c.varint().ok_or(BAD)?;
                }
                let reason = c.length().ok_or(BAD)?;
                c.take(reason).ok_or(BAD)?;
                close = close.or(Some(code));
            }
            _ => return Err(BAD),
        }
    }
    Ok((crypto, close))
}
