//! What a TLS server negotiated, read from the bytes it sent during its handshake (as
//! bpf/wire.h captures them): the plaintext records before encryption starts (ServerHello;
//! in TLS 1.2 also Certificate and ServerKeyExchange) and the lengths of the encrypted
//! records that follow in TLS 1.3. No library, no struct offsets: the same for OpenSSL of
//! any version, Go's crypto/tls, GnuTLS or a server's own TLS stack.
//!
//! Every label value comes from a fixed table; anything else is `other`, so the number of
//! label combinations stays bounded whatever a client or server sends.

mod cert;
#[cfg(test)]
pub(crate) mod fuzz;
pub mod hello;
#[cfg(test)]
pub(crate) mod hello_fixtures;
#[cfg(test)]
mod hello_fuzz;
#[cfg(test)]
pub(crate) mod hello_tests;
mod names;
mod negotiated;

use std::borrow::Cow;

use super::AppProtocol;

use cert::cert_from_chain;
pub use cert::cert_from_signature;
pub use names::{group_name, group_rank, suite, version_name, Kx, Suite};
pub use negotiated::{Cert, Cipher, Group, Negotiated, Transport, Version};

pub const OTHER: &str = "other";
/// No certificate was sent (resumption), or no key exchange took place (TLS 1.2
/// resumption, TLS 1.3 psk_ke).
pub const NONE: &str = "none";

/// What the server's output says so far.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Parsed {
    /// The ServerHello (after any HelloRetryRequest) was seen.
    pub hello: bool,
    pub version: u16,
    pub cipher: u16,
    /// Key-exchange group (TLS 1.3 key_share, TLS 1.2 ServerKeyExchange), if one was named.
    pub group: Option<Group>,
    pub cert: Option<Cert>,
    pub resumed: bool,
    /// Every label is known: later bytes cannot change them.
    pub complete: bool,
    /// The server sent a fatal alert in the clear: its description.
    pub alert: Option<u8>,
    /// The application protocol the server chose (ALPN), where its output shows it.
    pub protocol: AppProtocol,
    /// Read from QUIC's Initial packets (wire/quic/), not a TCP stream.
    pub quic: bool,
}

impl Parsed {
    pub fn negotiated(&self) -> Negotiated {
        let transport = if self.quic { Transport::Quic } else { Transport::Tcp };
        if !self.hello {
            // nothing negotiated shows; what carried it does
            return Negotiated {
                transport,
                ..Negotiated::UNKNOWN
            };
        }
        let suite = suite(self.cipher);
        let tls13 = self.version == 0x0304;
        let group = match (self.group, suite) {
            (Some(g), _) => g,
            _ if self.resumed => Group::None,
            (None, Some(s)) if !tls13 && s.kx == Kx::Rsa => Group::Rsa,
            _ if tls13 && self.complete => Group::None, // psk_ke: no key share
            _ => Group::Other,
        };
        Negotiated {
            version: Version::of(self.version),
            cipher: Cipher::of(self.cipher),
            group,
            cert: if self.resumed {
                Cert::None
            } else {
                self.cert.unwrap_or(Cert::Other)
            },
            resumed: self.resumed,
            transport,
        }
    }
}

/// SHA-256("HelloRetryRequest"): the random of a HelloRetryRequest.
pub(super) const HRR_RANDOM: [u8; 32] = [
    0xCF, 0x21, 0xAD, 0x74, 0xE5, 0x9A, 0x61, 0x11, 0xBE, 0x1D, 0x8C, 0x02, 0x1E, 0x65, 0xB8, 0x91, 0xC2, 0xA2, 0x11,
    0x16, 0x7A, 0xBB, 0x8C, 0x5E, 0x07, 0x9E, 0x09, 0xE2, 0xC8, 0xA8, 0x33, 0x9C,
];

const HS_SERVER_HELLO: u8 = 2;
const HS_NEW_SESSION_TICKET: u8 = 4;
const HS_CERTIFICATE: u8 = 11;
const HS_SERVER_KEY_EXCHANGE: u8 = 12;
const HS_SERVER_HELLO_DONE: u8 = 14;

/// A big-endian reader that never panics.
pub(super) struct Rd<'a>(pub(super) &'a [u8]);

impl<'a> Rd<'a> {
    pub(super) fn u8(&mut self) -> Option<u8> {
        let (&b, rest) = self.0.split_first()?;
        self.0 = rest;
        Some(b)
    }
    pub(super) fn u16(&mut self) -> Option<u16> {
        Some(u16::from(self.u8()?) << 8 | u16::from(self.u8()?))
    }
    pub(super) fn u24(&mut self) -> Option<usize> {
        Some((self.u8()? as usize) << 16 | (self.u8()? as usize) << 8 | self.u8()? as usize)
    }
    pub(super) fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Some(a)
    }
}

/// The handshake byte stream of the plaintext records of the output, and what else those
/// records say: (the stream, change_cipher_spec seen, the first fatal alert's description).
fn handshake_stream<'a>(plain: &'a [u8]) -> (Cow<'a, [u8]>, bool, Option<u8>) {
    // The bodies of the handshake records before change_cipher_spec, and after it only a
    // record holding exactly one ServerHello (TLS 1.3 after a HelloRetryRequest); TLS 1.2's
    // Finished after it is encrypted. Borrowed while they are one record's (a TLS 1.3
    // ServerHello).
    let mut stream: Cow<'a, [u8]> = Cow::Borrowed(&[]);
    let append = |stream: &mut Cow<'a, [u8]>, body: &'a [u8]| {
        if stream.is_empty() {
            *stream = Cow::Borrowed(body);
        } else {
            stream.to_mut().extend_from_slice(body);
        }
    };
    let (mut ccs, mut alert) = (false, None);
    let mut r = Rd(plain);
    while let (Some(t), Some(_), Some(len)) = (r.u8(), r.u16(), r.u16()) {
        let body = match r.take(len as usize) {
            Some(b) => b,
            None => r.take(r.0.len()).unwrap_or_default(), // cut short by the capture
        };
        match t {
            20 => ccs = true,
            // a description cut off by the capture: one no RFC names
            21 if alert.is_none() && body.first() == Some(&2) => alert = Some(body.get(1).copied().unwrap_or(u8::MAX)),
            22 if !ccs => append(&mut stream, body),
            22 => {
                let one_hello = body.len() >= 4
                    && body[0] == HS_SERVER_HELLO
                    && (body[1] as usize) << 16 | (body[2] as usize) << 8 | body[3] as usize == body.len() - 4;
                if one_hello {
                    append(&mut stream, body);
                }
            }
            _ => {}
        }
    }
    (stream, ccs, alert)
}

/// The handshake messages of a handshake stream: (type, body — the last possibly cut short).
fn messages(stream: &[u8]) -> Vec<(u8, &[u8])> {
    let mut out = Vec::new();
    let mut m = Rd(stream);
    while let (Some(t), Some(len)) = (m.u8(), m.u24()) {
        let body = m.take(len).unwrap_or(m.0);
        let whole = body.len() == len;
        if !whole && t == HS_SERVER_HELLO {
            break; // cut short, its extensions (the version among them) are not known yet
        }
        out.push((t, body));
        if !whole {
            break;
        }
    }
    out
}

struct Hello {
    version: u16,
    cipher: u16,
    group: Option<u16>,
    psk: bool,
    retry: bool,
    /// ALPN's choice (TLS 1.2: in the ServerHello)
    alpn: Option<AppProtocol>,
}

fn server_hello(b: &[u8]) -> Option<Hello> {
    let mut r = Rd(b);
    let legacy = r.u16()?;
    let random = r.take(32)?;
    let sid = r.u8()? as usize;
    r.take(sid)?;
    let cipher = r.u16()?;
    r.u8()?; // compression
    let mut h = Hello {
        version: legacy,
        cipher,
        group: None,
        psk: false,
        retry: random == HRR_RANDOM,
        alpn: None,
    };
    let Some(ext_len) = r.u16() else { return Some(h) };
    let mut e = Rd(r.take(ext_len as usize).unwrap_or(r.0));
    while let (Some(t), Some(len)) = (e.u16(), e.u16()) {
        let Some(body) = e.take(len as usize) else { break };
        let mut b = Rd(body);
        match t {
            0x002b => h.version = b.u16().unwrap_or(legacy),
            0x0033 => h.group = b.u16(),
            0x0029 => h.psk = true,
            // application_layer_protocol_negotiation: a list of exactly one name
            0x0010 => {
                h.alpn = Some(
                    b.u16()
                        .and_then(|_| b.u8())
                        .and_then(|n| b.take(n as usize))
                        .map_or(AppProtocol::Other, AppProtocol::of_alpn),
                )
            }
            _ => {}
        }
    }
    Some(h)
}

/// Parses the server's output: `plain` the plaintext-phase bytes, `sealed` the lengths of
/// the encrypted records after them, `ended` whether the capture is over.
pub fn parse(plain: &[u8], sealed: &[u16], ended: bool) -> Parsed {
    let (stream, ccs, alert) = handshake_stream(plain);
    let msgs = messages(&stream);
    let mut p = Parsed {
        alert,
        ..Parsed::default()
    };
    // the last ServerHello that is not a HelloRetryRequest, and the messages after it
    let mut hello = None;
    let mut after = Vec::new();
    for (t, body) in &msgs {
        if *t == HS_SERVER_HELLO {
            if let Some(h) = server_hello(body) {
                if !h.retry {
                    hello = Some(h);
                    after.clear();
                    continue;
                }
            }
        }
        if hello.is_some() {
            after.push((*t, *body));
        }
    }
    let Some(h) = hello else {
        p.protocol = AppProtocol::Encrypted; // nothing shown
        return p;
    };
    p.hello = true;
    p.version = h.version;
    p.cipher = h.cipher;
    p.protocol = match (h.version, h.alpn) {
        (0x0304, _) => AppProtocol::Encrypted,
        (_, Some(a)) => a,
        (_, None) => AppProtocol::None,
    };
    let suite = suite(h.cipher);
    if h.version == 0x0304 {
        p.group = h.group.map(Group::iana);
        p.resumed = h.psk;
        if h.psk {
            p.complete = true;
        } else if let Some(s) = suite {
            p.cert = cert_from_verify(sealed, s);
            p.complete = p.cert.is_some() || ended;
        } else {
            p.complete = ended;
        }
        return p;
    }
    // TLS 1.2 and older: a full handshake sends Certificate (or ServerKeyExchange for
    // anonymous suites) after ServerHello; a resumed one goes to change_cipher_spec.
    let full = after
        .iter()
        .any(|(t, _)| matches!(*t, HS_CERTIFICATE | HS_SERVER_KEY_EXCHANGE | HS_SERVER_HELLO_DONE));
    if !full {
        let resumed = ccs || after.iter().any(|(t, _)| *t == HS_NEW_SESSION_TICKET);
        p.resumed = resumed;
        p.complete = resumed || ended;
        return p;
    }
    for (t, body) in &after {
        match *t {
            HS_CERTIFICATE => p.cert = Some(cert_from_chain(body)),
            HS_SERVER_KEY_EXCHANGE => p.group = Some(ske_group(body, suite.map(|s| s.kx))),
            HS_SERVER_HELLO_DONE => p.complete = true,
            _ => {} // CertificateRequest, CertificateStatus, …
        }
    }
    p.complete |= ended;
    p
}

/// DHE with a prime that is not RFC 7919's: the group label by the prime's size in bits.
pub(super) const DHE_BY_SIZE: [(u16, &str); 7] = [
    (1024, "dhe1024"),
    (1536, "dhe1536"),
    (2048, "dhe2048"),
    (3072, "dhe3072"),
    (4096, "dhe4096"),
    (6144, "dhe6144"),
    (8192, "dhe8192"),
];

/// DHE primes by size in bits: (bits, RFC 7919's group of that size by IANA code, RFC
/// 3526's label); 1536 bits is RFC 3526's alone.
pub(super) const NAMED_DH: [(u16, Option<u16>, &str); 6] = [
    (1536, None, "modp1536"),
    (2048, Some(256), "modp2048"),
    (3072, Some(257), "modp3072"),
    (4096, Some(258), "modp4096"),
    (6144, Some(259), "modp6144"),
    (8192, Some(260), "modp8192"),
];

/// TLS 1.2 ServerKeyExchange: the named curve (ECDHE) or the prime's size (DHE).
fn ske_group(b: &[u8], kx: Option<Kx>) -> Group {
    let mut r = Rd(b);
    match kx {
        Some(Kx::Ecdhe) => {
            if r.u8() != Some(3) {
                return Group::Other; // explicit curves
            }
            r.u16().map_or(Group::Other, Group::iana)
        }
        Some(Kx::Dhe) => {
            let Some(p) = r.u16().and_then(|n| r.take(n as usize)) else {
                return Group::Other;
            };
            let p = match p.iter().position(|&b| b != 0) {
                Some(i) => &p[i..],
                None => return Group::Other,
            };
            // RFC 7919's primes: 2^b - 2^(b-64) + {[2^(b-130) e] + X} * 2^64 - 1; RFC 3526's
            // the same with pi: OpenSSL 3 knows both, which changes what an exchange costs
            // (a short private key, and the peer's key checked), so each is named.
            const E: [u8; 8] = [0xAD, 0xF8, 0x54, 0x58, 0xA2, 0xBB, 0x4A, 0x9A];
            const PI: [u8; 8] = [0xC9, 0x0F, 0xDA, 0xA2, 0x21, 0x68, 0xC2, 0x34];
            if p.len() > 16 && p[..8] == [0xFF; 8] && p.ends_with(&[0xFF; 8]) {
                let by_size = NAMED_DH.iter().find(|(bits, _, _)| usize::from(*bits) == p.len() * 8);
                if let Some(&(bits, ffdhe, _)) = by_size {
                    match &p[8..16] {
                        top if top == E => return ffdhe.map_or(Group::Other, Group::iana),
                        top if top == PI => return Group::modp(bits),
                        _ => {}
                    }
                }
            }
            // The server's own prime (a dhparam file, a library default): by its size, a
            // handful of values so that the label stays bounded.
            let bits = p.len() * 8 - p[0].leading_zeros() as usize;
            u16::try_from(bits).map_or(Group::Other, Group::dhe)
        }
        _ => Group::Other,
    }
}

/// TLS 1.3: the certificate's key from the length of the CertificateVerify record, the one
/// before Finished, whose length the suite's hash fixes. Needs one message per record (as
/// OpenSSL, Go, GnuTLS and NSS send them) and no record padding; otherwise None.
fn cert_from_verify(sealed: &[u16], s: Suite) -> Option<Cert> {
    let overhead = 1 + s.tag; // inner content type, AEAD tag
    let finished = 4 + s.hash + overhead;
    // EncryptedExtensions, [CertificateRequest], Certificate, CertificateVerify, Finished
    for i in 2..=3 {
        if sealed.len() > i + 1 && sealed[i + 1] == finished && sealed[i - 1] > 100 {
            let sig = sealed[i].checked_sub(4 + 2 + 2 + overhead)?;
            return Some(cert_from_signature(sig));
        }
    }
    None
}

#[cfg(test)]
mod tests;
