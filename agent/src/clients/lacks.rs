//! What a ClientHello lacked against what its server negotiates: the versions, cipher suites
//! and groups a port's successful handshakes showed (`Served`), and an offer measured
//! against them (`Lacks`), so that a failed handshake says what in its ClientHello made
//! the failure certain (tlsprof_client_failures_total's `lacks`).
//!
//! Plain code over parsed offers and labels: the kernel is not needed to test it.
use crate::{
    metrics::LabelValue,
    wire::{
        failure::Reason,
        tls::{hello::Offer, Cipher, Group, Version, NONE, OTHER},
        Negotiated,
    },
};

/// What an offer lacked against what its server negotiates (the `lacks` label).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Lacks {
    /// Only versions older than every one the server negotiates (TLS 1.0/1.1 to a TLS 1.2+
    /// server).
    Version,
    /// No cipher suite the server negotiates.
    Cipher,
    /// No key-exchange group the server negotiates.
    Group,
    /// Each of them: the failure lies elsewhere (the certificate, SNI, ALPN, a timeout).
    Nothing,
    /// The server had negotiated nothing yet to measure it against.
    #[default]
    Unknown,
}

impl LabelValue for Lacks {
    const ALL: &'static [Lacks] = &[
        Lacks::Version,
        Lacks::Cipher,
        Lacks::Group,
        Lacks::Nothing,
        Lacks::Unknown,
    ];
    fn label(self) -> &'static str {
        match self {
            Lacks::Version => "version",
            Lacks::Cipher => "cipher",
            Lacks::Group => "group",
            Lacks::Nothing => "none",
            Lacks::Unknown => "unknown",
        }
    }
}

/// Distinct values kept per kind at most (a server negotiates a handful).
const MAX_VALUES: usize = 32;

/// What a server (a process name's port) negotiated in its successful handshakes.
#[derive(Debug, Default)]
pub struct Served {
    versions: Vec<Version>,
    ciphers: Vec<Cipher>,
    groups: Vec<Group>,
    /// Moves at every value added: an offer measured at an older one is measured again.
    pub generation: u32,
}

/// Adds a value this server negotiated, unless it is `other`, `none` or already there.
fn add<T: LabelValue + PartialEq>(values: &mut Vec<T>, v: T) -> bool {
    if v.label() == OTHER || v.label() == NONE || values.contains(&v) || values.len() >= MAX_VALUES {
        return false;
    }
    values.push(v);
    true
}

impl Served {
    /// A successful handshake's parameters.
    pub fn add(&mut self, n: &Negotiated) {
        let changed =
            add(&mut self.versions, n.version) | add(&mut self.ciphers, n.cipher) | add(&mut self.groups, n.group);
        if changed {
            self.generation = self.generation.wrapping_add(1);
        }
    }

    /// What `offer` lacked of what this server negotiates, each kind it lacked (a failure's
    /// reason then says which mattered: `Lacking::for_reason`).
    pub fn lacking(&self, offer: &Offer) -> Lacking {
        // (the versions' codes are in order, oldest first; every one kept is named)
        let Some(oldest) = self.versions.iter().map(|v| v.code()).min() else {
            return Lacking::UNKNOWN;
        };
        let mut out = Lacking(0);
        let newest = Version::of(offer.max_version);
        if newest != Version::OTHER && newest.code() < oldest {
            out.0 |= Lacking::VERSION;
        }
        let mut suites = offer.suites.iter().map(|c| Cipher::of(*c));
        if !self.ciphers.is_empty() && !suites.any(|s| self.ciphers.contains(&s)) {
            out.0 |= Lacking::CIPHER;
        }
        let mut groups = offer.groups.iter().map(|c| Group::iana(*c));
        if !self.groups.is_empty() && !groups.any(|g| self.groups.contains(&g)) {
            out.0 |= Lacking::GROUP;
        }
        out
    }
}

/// The kinds of value an offer lacked of what its server negotiated, as bits (one byte in
/// each kept offer).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Lacking(u8);

impl Lacking {
    const VERSION: u8 = 1;
    const CIPHER: u8 = 2;
    const GROUP: u8 = 4;
    /// The server had negotiated nothing to measure the offer against.
    pub const UNKNOWN: Lacking = Lacking(0x80);

    /// What made a failure with this reason certain: an offer older than every version the
    /// server negotiates fails with protocol_version; one without its suites or groups with
    /// handshake_failure (or insufficient_security). Anything else (the certificate, a
    /// client that hung up, a server seen with TLS 1.3 only failing a TLS 1.2 offer on its
    /// suites) lies elsewhere than what the offer is measured on: `Nothing`.
    pub fn for_reason(self, reason: Reason) -> Lacks {
        if self == Lacking::UNKNOWN {
            return Lacks::Unknown;
        }
        let has = |bit: u8| self.0 & bit != 0;
        match reason {
            Reason::ProtocolVersion if has(Lacking::VERSION) => Lacks::Version,
            Reason::HandshakeFailure | Reason::InsufficientSecurity if has(Lacking::CIPHER) => Lacks::Cipher,
            Reason::HandshakeFailure | Reason::InsufficientSecurity if has(Lacking::GROUP) => Lacks::Group,
            _ => Lacks::Nothing,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::Transport;

    fn negotiated(version: &'static str, cipher: &'static str, group: &'static str) -> Negotiated {
        Negotiated {
            version: version.into(),
            cipher: cipher.into(),
            group: group.into(),
            ..Negotiated::UNKNOWN
        }
    }

    fn offer(max_version: u16, suites: &[u16], groups: &[u16]) -> Offer {
        Offer {
            max_version,
            suites: suites.to_vec(),
            groups: groups.to_vec(),
            key_shares: Vec::new(),
            sigalgs: Vec::new(),
            alpn: 0,
            sni: None,
            resumption: Default::default(),
            early_data: false,
        }
    }

    #[test]
    fn an_offer_is_measured_against_what_the_server_negotiated() {
        let mut s = Served::default();
        let any = offer(0x0304, &[0x1301], &[0x001d]);
        let why = |s: &Served, o: &Offer, r| s.lacking(o).for_reason(r);
        assert_eq!(
            why(&s, &any, Reason::HandshakeFailure),
            Lacks::Unknown,
            "nothing negotiated yet"
        );
        s.add(&negotiated("TLSv1.3", "TLS_AES_128_GCM_SHA256", "x25519"));
        s.add(&negotiated(
            "TLSv1.2",
            "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
            "x25519",
        ));
        let g = s.generation;
        s.add(&negotiated(
            "TLSv1.2",
            "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
            "x25519",
        ));
        assert_eq!(s.generation, g, "nothing new");
        assert_eq!(why(&s, &any, Reason::HandshakeFailure), Lacks::Nothing);
        // TLS 1.1 at most: older than all the server negotiates
        let old = offer(0x0302, &[0xC02B], &[0x001d]);
        assert_eq!(why(&s, &old, Reason::ProtocolVersion), Lacks::Version);
        // TLS 1.2 with only AES128-SHA (RSA key transport)
        assert_eq!(
            why(&s, &offer(0x0303, &[0x002F], &[0x001d]), Reason::HandshakeFailure),
            Lacks::Cipher
        );
        // the right suites, only P-521
        assert_eq!(
            why(&s, &offer(0x0303, &[0xC02B], &[0x0019]), Reason::HandshakeFailure),
            Lacks::Group
        );
        // what the offer lacked did not make a certificate's rejection
        assert_eq!(why(&s, &old, Reason::UnknownCa), Lacks::Nothing);
        // a server seen with TLS 1.3 only: a TLS 1.2 client's cipher mismatch is not taken for
        // a version it lacked unless the server said protocol_version
        let mut t = Served::default();
        t.add(&negotiated("TLSv1.3", "TLS_AES_128_GCM_SHA256", "x25519"));
        let tls12 = offer(0x0303, &[0x1301, 0x002F], &[0x001d]);
        assert_eq!(why(&t, &tls12, Reason::UnknownCa), Lacks::Nothing);
        // a value no name stands for is never one the server negotiated
        let mut q = Served::default();
        q.add(&Negotiated {
            transport: Transport::Quic,
            ..Negotiated::UNKNOWN
        });
        assert_eq!(why(&q, &any, Reason::HandshakeFailure), Lacks::Unknown);
        for l in Lacks::ALL {
            assert_eq!(Lacks::parse(l.label()), Some(*l));
        }
    }
}
