//! What a client offers, read from its ClientHello (the first handshake message of its byte
//! stream, as bpf/hello.bpf.h captures it: record headers included, nothing past the
//! ClientHello's last record). GREASE values (RFC 8701) are dropped here; every list is
//! capped, so whatever a client sends, an `Offer` stays small. The label values made from
//! it, and the policies it is evaluated against, are in `crate::clients`.
// Nothing outside the tests calls the parser until the capture tracker does (issue 36,
// another change): remove this then.

/// Entries kept per list (suites, groups, key shares, signature algorithms): real clients
/// send at most ~60 suites; the rest is dropped.
pub const MAX_LIST: usize = 128;
/// Longest host name kept (DNS: 253).
pub const MAX_SNI: usize = 253;

/// Offer::alpn bits.
pub const ALPN_H2: u8 = 1;
pub const ALPN_HTTP1: u8 = 2;
pub const ALPN_OTHER: u8 = 4;

/// What the client offered to resume with.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Resumption {
    /// Nothing (a TLS 1.2 session id alone is not counted: TLS 1.3 clients send a random one).
    #[default]
    None,
    /// A non-empty TLS 1.2 session_ticket extension.
    Ticket,
    /// A TLS 1.3 pre_shared_key extension.
    Psk,
}

impl crate::metrics::LabelValue for Resumption {
    const ALL: &'static [Resumption] = &[Resumption::None, Resumption::Ticket, Resumption::Psk];
    /// The `resumption` offer's value and tlsprof_client_resumptions_total's `offered`.
    fn label(self) -> &'static str {
        match self {
            Resumption::None => super::NONE,
            Resumption::Ticket => "ticket",
            Resumption::Psk => "psk",
        }
    }
}

/// A ClientHello's offers, GREASE removed, in the client's order.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Offer {
    /// The highest version offered: supported_versions if present (the highest of SSL 3.0
    /// to TLS 1.3 in it; drafts and GREASE only when nothing else), else legacy_version.
    pub max_version: u16,
    /// Cipher suites (signalling values such as TLS_EMPTY_RENEGOTIATION_INFO_SCSV removed).
    pub suites: Vec<u16>,
    /// supported_groups.
    pub groups: Vec<u16>,
    /// Groups the key_share extension carries a share for.
    pub key_shares: Vec<u16>,
    /// signature_algorithms; empty when the extension is absent.
    pub sigalgs: Vec<u16>,
    /// ALPN protocols offered: ALPN_* bits, 0 without the extension.
    pub alpn: u8,
    /// server_name's host name, lower-cased; None without one or when it is not a
    /// printable ASCII name of at most MAX_SNI bytes.
    pub sni: Option<String>,
    pub resumption: Resumption,
    /// The early_data extension (0-RTT data offered).
    pub early_data: bool,
}

/// Why a capture did not give an Offer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HelloError {
    /// Not a TLS handshake record, or not a ClientHello.
    NotHello,
    /// The bytes end before the ClientHello does.
    Truncated,
    /// A length or list inside it does not add up.
    Malformed,
}

/// The TLS record type of handshake messages, and the handshake type of a ClientHello.
const HANDSHAKE: u8 = 22;
const CLIENT_HELLO: u8 = 1;
/// Longest record payload a peer may send (RFC 8446 §5.1: 2^14).
const MAX_RECORD: usize = 1 << 14;

/// Extension types read (IANA TLS ExtensionType Values).
const EXT_SERVER_NAME: u16 = 0;
const EXT_SUPPORTED_GROUPS: u16 = 10;
const EXT_SIGNATURE_ALGORITHMS: u16 = 13;
const EXT_ALPN: u16 = 16;
const EXT_SESSION_TICKET: u16 = 35;
const EXT_PRE_SHARED_KEY: u16 = 41;
const EXT_EARLY_DATA: u16 = 42;
const EXT_SUPPORTED_VERSIONS: u16 = 43;
const EXT_KEY_SHARE: u16 = 51;

/// Signalling cipher suite values, not suites: TLS_EMPTY_RENEGOTIATION_INFO_SCSV (RFC 5746)
/// and TLS_FALLBACK_SCSV (RFC 7507).
const SCSVS: [u16; 2] = [0x00FF, 0x5600];

/// A GREASE value (RFC 8701): 0x0A0A, 0x1A1A, …, 0xFAFA, in every 16-bit code point space
/// (suites, groups, versions, signature algorithms, extension types).
pub fn is_grease(v: u16) -> bool {
    v & 0x0F0F == 0x0A0A && v >> 8 == v & 0xFF
}

/// The client's Offer from the bytes of its stream, from its first byte: TLS records, the
/// ClientHello possibly split over several of them.
///
/// - `NotHello`: the first record is not a handshake record, or the first handshake message
///   is not a ClientHello (an SSLv2-compatible hello is not read either).
/// - `Truncated`: the bytes end before the ClientHello does. A truncated hello gives no
///   partial Offer: every fact depends on an extension that may lie past the cut
///   (supported_versions, key_share, pre_shared_key, which RFC 8446 puts last), and a
///   partial one would read as a different client — a TLS 1.3 client as TLS 1.2 only, a
///   client with key shares as one that needs a HelloRetryRequest — so the policy counts
///   would count failures no client has. Such hellos belong in
///   tlsprof_client_hellos_unread_total{reason="cut"} instead.
/// - `Malformed`: the ClientHello is complete but its lengths do not add up, a record
///   other than a handshake record comes before it ends, a record is longer than 2^14
///   bytes, or an extension read here appears twice (RFC 8446 §4.2: a server aborts).
///
/// Bytes past the ClientHello (in its last record or after it) are not read. Never panics;
/// allocates at most the input's size plus the Offer's capped lists.
pub fn parse_client_hello(bytes: &[u8]) -> Result<Offer, HelloError> {
    let body = reassemble(bytes)?;
    parse_body(&body)
}

/// The ClientHello's body (past its 4-byte handshake header), put together from the
/// handshake records that carry it.
fn reassemble(bytes: &[u8]) -> Result<std::borrow::Cow<'_, [u8]>, HelloError> {
    use std::borrow::Cow;
    let mut rest = bytes;
    // The first record decides whether this is a TLS handshake at all.
    if let Some(&t) = rest.first() {
        if t != HANDSHAKE {
            return Err(HelloError::NotHello);
        }
    }
    // Handshake bytes collected so far when the message spans records.
    let mut joined: Vec<u8> = Vec::new();
    let mut records = 0usize;
    loop {
        if rest.len() < 5 {
            return Err(HelloError::Truncated);
        }
        if rest[0] != HANDSHAKE {
            return Err(if records == 0 {
                HelloError::NotHello
            } else {
                HelloError::Malformed
            });
        }
        records += 1;
        let len = usize::from(u16::from_be_bytes([rest[3], rest[4]]));
        if len > MAX_RECORD {
            return Err(HelloError::Malformed);
        }
        let available = rest.len() - 5;
        let payload = &rest[5..5 + len.min(available)];
        // The whole message in one record (the common case): no copy.
        if joined.is_empty() && payload.len() >= 4 && payload[0] == CLIENT_HELLO {
            let need = hs_len(payload);
            if payload.len() >= 4 + need {
                return Ok(Cow::Borrowed(&payload[4..4 + need]));
            }
        }
        joined.extend_from_slice(payload);
        if joined.len() >= 4 {
            if joined[0] != CLIENT_HELLO {
                return Err(HelloError::NotHello);
            }
            let need = hs_len(&joined);
            if joined.len() >= 4 + need {
                joined.truncate(4 + need);
                joined.drain(..4);
                return Ok(Cow::Owned(joined));
            }
        }
        if len > available {
            return Err(HelloError::Truncated);
        }
        rest = &rest[5 + len..];
    }
}

/// The 24-bit length of the handshake message that `h` (at least 4 bytes) starts with.
fn hs_len(h: &[u8]) -> usize {
    usize::from(h[1]) << 16 | usize::from(h[2]) << 8 | usize::from(h[3])
}

/// A cursor over bytes whose reads fail (as `Malformed`) past the end.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], HelloError> {
        if self.0.len() < n {
            return Err(HelloError::Malformed);
        }
        let (head, tail) = self.0.split_at(n);
        self.0 = tail;
        Ok(head)
    }
    fn u8(&mut self) -> Result<u8, HelloError> {
        Ok(self.take(1)?[0])
    }
    fn u16(&mut self) -> Result<u16, HelloError> {
        let b = self.take(2)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }
    /// A vector with a 1-byte length.
    fn vec8(&mut self) -> Result<Reader<'a>, HelloError> {
        let n = usize::from(self.u8()?);
        Ok(Reader(self.take(n)?))
    }
    /// A vector with a 2-byte length.
    fn vec16(&mut self) -> Result<Reader<'a>, HelloError> {
        let n = usize::from(self.u16()?);
        Ok(Reader(self.take(n)?))
    }
    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
    /// Fails unless everything was read.
    fn end(&self) -> Result<(), HelloError> {
        if self.0.is_empty() {
            Ok(())
        } else {
            Err(HelloError::Malformed)
        }
    }
    /// A list of 16-bit values filling the rest: GREASE and `drop` removed, capped at MAX_LIST.
    fn u16_list(&mut self, drop: &[u16]) -> Result<Vec<u16>, HelloError> {
        if !self.0.len().is_multiple_of(2) {
            return Err(HelloError::Malformed);
        }
        // sized once (the client's list, at most MAX_LIST): grown one push at a time it was
        // most of the agent's allocations per handshake
        let mut out = Vec::with_capacity((self.0.len() / 2).min(MAX_LIST));
        while !self.is_empty() {
            let v = self.u16()?;
            if !is_grease(v) && !drop.contains(&v) && out.len() < MAX_LIST {
                out.push(v);
            }
        }
        Ok(out)
    }
}

fn parse_body(body: &[u8]) -> Result<Offer, HelloError> {
    let mut r = Reader(body);
    let legacy_version = r.u16()?;
    r.take(32)?; // random
    let session_id = r.vec8()?;
    if session_id.0.len() > 32 {
        return Err(HelloError::Malformed);
    }
    let mut offer = Offer {
        max_version: legacy_version,
        suites: r.vec16()?.u16_list(&SCSVS)?,
        ..Offer::default()
    };
    let compression = r.vec8()?;
    if compression.is_empty() {
        return Err(HelloError::Malformed);
    }
    // No extensions at all (SSLv3-era clients): the rest of the Offer stays empty.
    if r.is_empty() {
        return Ok(offer);
    }
    let mut exts = r.vec16()?;
    r.end()?;
    // Extensions read, as bits, to refuse duplicates.
    let mut seen: u16 = 0;
    let mut ticket = false;
    let mut psk = false;
    while !exts.is_empty() {
        let kind = exts.u16()?;
        let mut data = exts.vec16()?;
        let bit = match kind {
            EXT_SERVER_NAME => 1,
            EXT_SUPPORTED_GROUPS => 2,
            EXT_SIGNATURE_ALGORITHMS => 4,
            EXT_ALPN => 8,
            EXT_SESSION_TICKET => 16,
            EXT_PRE_SHARED_KEY => 32,
            EXT_EARLY_DATA => 64,
            EXT_SUPPORTED_VERSIONS => 128,
            EXT_KEY_SHARE => 256,
            _ => continue,
        };
        if seen & bit != 0 {
            return Err(HelloError::Malformed);
        }
        seen |= bit;
        match kind {
            EXT_SERVER_NAME => offer.sni = server_name(&mut data)?,
            EXT_SUPPORTED_GROUPS => {
                offer.groups = data.vec16()?.u16_list(&[])?;
                data.end()?;
            }
            EXT_SIGNATURE_ALGORITHMS => {
                offer.sigalgs = data.vec16()?.u16_list(&[])?;
                data.end()?;
            }
            EXT_ALPN => {
                let mut list = data.vec16()?;
                data.end()?;
                while !list.is_empty() {
                    let name = list.vec8()?.0;
                    offer.alpn |= match name {
                        b"h2" => ALPN_H2,
                        b"http/1.1" => ALPN_HTTP1,
                        [] => return Err(HelloError::Malformed),
                        // GREASE ALPN identifiers (RFC 8701 §2): two bytes 0x?A?A.
                        [a, b] if is_grease(u16::from_be_bytes([*a, *b])) => 0,
                        _ => ALPN_OTHER,
                    };
                }
            }
            EXT_SESSION_TICKET => ticket = !data.is_empty(),
            EXT_PRE_SHARED_KEY => {
                // identities<7..2^16-1>, binders<33..2^16-1>: present and well-formed.
                let identities = data.vec16()?;
                let binders = data.vec16()?;
                data.end()?;
                if identities.is_empty() || binders.is_empty() {
                    return Err(HelloError::Malformed);
                }
                psk = true;
            }
            EXT_EARLY_DATA => {
                data.end()?;
                offer.early_data = true;
            }
            EXT_SUPPORTED_VERSIONS => {
                let versions = data.vec8()?.u16_list(&[])?;
                data.end()?;
                // RFC 8446 §4.2.1: with the extension, legacy_version is not read. The
                // highest of SSL 3.0 to TLS 1.3; without any (drafts, DTLS, only GREASE)
                // the highest value (a label `other`), 0 for none.
                let known = versions.iter().copied().filter(|v| (0x0300..=0x0304).contains(v)).max();
                offer.max_version = known.or_else(|| versions.iter().copied().max()).unwrap_or(0);
            }
            EXT_KEY_SHARE => {
                let mut shares = data.vec16()?;
                data.end()?;
                while !shares.is_empty() {
                    let group = shares.u16()?;
                    let key = shares.vec16()?;
                    if key.is_empty() {
                        return Err(HelloError::Malformed);
                    }
                    if !is_grease(group) && offer.key_shares.len() < MAX_LIST {
                        offer.key_shares.push(group);
                    }
                }
            }
            _ => {}
        }
    }
    offer.resumption = if psk {
        Resumption::Psk
    } else if ticket {
        Resumption::Ticket
    } else {
        Resumption::None
    };
    Ok(offer)
}

/// server_name (RFC 6066 §3): the first host_name entry, lower-cased, if it is 1 to MAX_SNI
/// printable ASCII bytes (0x21..=0x7E); None otherwise. The list must add up.
fn server_name(data: &mut Reader) -> Result<Option<String>, HelloError> {
    let mut list = data.vec16()?;
    data.end()?;
    let mut host = None;
    while !list.is_empty() {
        let kind = list.u8()?;
        let name = list.vec16()?.0;
        if kind == 0 && host.is_none() {
            host = Some(name);
        }
    }
    Ok(host.and_then(|n| {
        (!n.is_empty() && n.len() <= MAX_SNI && n.iter().all(|b| (0x21..=0x7E).contains(b)))
            .then(|| String::from_utf8_lossy(n).to_ascii_lowercase())
    }))
}
