//! What a handshake negotiated, as one small `Copy` value of code points and enums. It is
//! decoded once where it shows (the TLS parser, mod.rs; QUIC's Initial packets, quic/),
//! turned into label strings only at the metrics edge (metrics/labels.rs) and decoded back
//! once by the views (views/model.rs): every part of tlsprof between holds this value.
//!
//! Each part takes its values from a fixed table (names.rs, cert.rs, mod.rs), and anything
//! else is `Other`, so the label combinations stay bounded whatever a peer sends.
use std::cmp::Ordering;

use super::names::{group_name, suite, version_name, GROUPS, SUITES, VERSIONS};
use super::{DHE_BY_SIZE, NAMED_DH, NONE, OTHER};
use crate::metrics::{label_enum, label_text, LabelValue};

/// The negotiated parameters of one handshake, and what carried it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct Negotiated {
    pub version: Version,
    pub cipher: Cipher,
    pub group: Group,
    pub cert: Cert,
    pub resumed: bool,
    pub transport: Transport,
}

impl Negotiated {
    /// The label names, in the order the metrics export them.
    pub const LABELS: [&'static str; 6] = ["version", "cipher", "group", "cert", "resumed", "transport"];

    pub const UNKNOWN: Negotiated = Negotiated {
        version: Version::OTHER,
        cipher: Cipher::OTHER,
        group: Group::Other,
        cert: Cert::Other,
        resumed: false,
        transport: Transport::Other,
    };
    /// Nothing negotiated shows, on a TCP connection.
    pub const UNKNOWN_TCP: Negotiated = Negotiated {
        transport: Transport::Tcp,
        ..Negotiated::UNKNOWN
    };

    /// Its label values, in the order of LABELS.
    pub fn label_values(&self) -> [&'static str; 6] {
        [
            self.version.label(),
            self.cipher.label(),
            self.group.label(),
            self.cert.label(),
            if self.resumed { "true" } else { "false" },
            self.transport.label(),
        ]
    }

    /// Decoded from its labels (`label` gives a label's value by name, empty for one
    /// missing); None where a value is not one this build writes. A label missing (an
    /// agent older than the label) reads as its `other`.
    pub fn from_labels(label: impl Fn(&str) -> String) -> Option<Negotiated> {
        fn part<T: LabelValue + Default>(value: String) -> Option<T> {
            match value.as_str() {
                "" => Some(T::default()),
                v => T::parse(v),
            }
        }
        Some(Negotiated {
            version: part(label("version"))?,
            cipher: part(label("cipher"))?,
            group: part(label("group"))?,
            cert: part(label("cert"))?,
            resumed: label("resumed").parse().ok()?,
            transport: part(label("transport"))?,
        })
    }

    /// Nothing negotiated showed (begun before tlsprof attached, or not on a watched
    /// connection).
    pub fn unlabelled(&self) -> bool {
        self.version == Version::OTHER
            && self.cipher == Cipher::OTHER
            && self.group == Group::Other
            && self.cert == Cert::Other
    }
}

impl Default for Negotiated {
    fn default() -> Self {
        Negotiated::UNKNOWN
    }
}

/// Ordered as its label values are: the order the views list configurations in.
impl Ord for Negotiated {
    fn cmp(&self, other: &Self) -> Ordering {
        let key = |n: &Self| (n.label_values(), n.resumed);
        key(self).cmp(&key(other))
    }
}

impl PartialOrd for Negotiated {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// A protocol version by its IANA code; Version::OTHER for one tlsprof does not name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Version(u16);

impl Version {
    pub const OTHER: Version = Version(0);
    #[cfg(test)]
    pub const TLS12: Version = Version(0x0303);
    pub const TLS13: Version = Version(0x0304);

    pub fn of(code: u16) -> Version {
        match VERSIONS.iter().any(|(c, _)| *c == code) {
            true => Version(code),
            false => Version::OTHER,
        }
    }

    pub fn code(self) -> u16 {
        self.0
    }
}

impl LabelValue for Version {
    const ALL: &'static [Self] = &{
        let mut all = [Version::OTHER; VERSIONS.len() + 1];
        let mut i = 0;
        while i < VERSIONS.len() {
            all[i] = Version(VERSIONS[i].0);
            i += 1;
        }
        all
    };
    fn label(self) -> &'static str {
        version_name(self.0)
    }
}

/// A cipher suite by its IANA code; Cipher::OTHER for one tlsprof does not name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Cipher(u16);

impl Cipher {
    /// (0x0000 is TLS_NULL_WITH_NULL_NULL, which no handshake negotiates.)
    pub const OTHER: Cipher = Cipher(0);
    #[cfg(test)]
    pub const TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256: Cipher = Cipher(0xC02F);

    pub fn of(code: u16) -> Cipher {
        match SUITES.iter().any(|(c, _)| *c == code) {
            true => Cipher(code),
            false => Cipher::OTHER,
        }
    }
}

impl LabelValue for Cipher {
    const ALL: &'static [Self] = &{
        let mut all = [Cipher::OTHER; SUITES.len() + 1];
        let mut i = 0;
        while i < SUITES.len() {
            all[i] = Cipher(SUITES[i].0);
            i += 1;
        }
        all
    };
    fn label(self) -> &'static str {
        suite(self.0).map_or(OTHER, |s| s.name)
    }
}

/// The key exchange's group. Made by `Group::iana`, `Group::dhe` and `Group::modp`, which
/// keep to the tables (anything else is `Other`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub enum Group {
    /// A named group by IANA code (names.rs GROUPS): curves, RFC 7919's ffdhe groups,
    /// hybrids.
    Iana(u16),
    /// RFC 3526's prime of this many bits (OpenSSL's automatic DH parameters).
    Modp(u16),
    /// A server's own DH prime of this many bits.
    Dhe(u16),
    /// TLS 1.2 RSA key transport: no key exchange group.
    Rsa,
    /// No key exchange took place (TLS 1.2 resumption, TLS 1.3 psk_ke).
    None,
    #[default]
    Other,
}

impl Group {
    pub const X25519: Group = Group::Iana(29);

    pub fn iana(code: u16) -> Group {
        match GROUPS.iter().any(|(c, _)| *c == code) {
            true => Group::Iana(code),
            false => Group::Other,
        }
    }

    pub fn dhe(bits: u16) -> Group {
        match DHE_BY_SIZE.iter().any(|(b, _)| *b == bits) {
            true => Group::Dhe(bits),
            false => Group::Other,
        }
    }

    pub fn modp(bits: u16) -> Group {
        match NAMED_DH.iter().any(|(b, _, _)| *b == bits) {
            true => Group::Modp(bits),
            false => Group::Other,
        }
    }

    /// A finite-field group whose prime is the server's choice (dheN, modpN), not one of
    /// RFC 7919's: its clients cannot ask for it by name.
    pub fn own_prime(self) -> bool {
        matches!(self, Group::Dhe(_) | Group::Modp(_))
    }
}

const GROUPS_ALL: usize = GROUPS.len() + NAMED_DH.len() + DHE_BY_SIZE.len() + 3;

impl LabelValue for Group {
    const ALL: &'static [Self] = &{
        let mut all = [Group::Other; GROUPS_ALL];
        let mut i = 0;
        while i < GROUPS.len() {
            all[i] = Group::Iana(GROUPS[i].0);
            i += 1;
        }
        let mut j = 0;
        while j < NAMED_DH.len() {
            all[i + j] = Group::Modp(NAMED_DH[j].0);
            j += 1;
        }
        let mut k = 0;
        while k < DHE_BY_SIZE.len() {
            all[i + j + k] = Group::Dhe(DHE_BY_SIZE[k].0);
            k += 1;
        }
        all[i + j + k] = Group::Rsa;
        all[i + j + k + 1] = Group::None;
        all
    };
    fn label(self) -> &'static str {
        match self {
            Group::Iana(code) => group_name(code),
            Group::Modp(bits) => NAMED_DH
                .iter()
                .find(|(b, _, _)| *b == bits)
                .map_or(OTHER, |(_, _, n)| n),
            Group::Dhe(bits) => DHE_BY_SIZE.iter().find(|(b, _)| *b == bits).map_or(OTHER, |(_, n)| n),
            Group::Rsa => "rsa",
            Group::None => NONE,
            Group::Other => OTHER,
        }
    }
}

label_enum!(
    /// The server certificate's key.
    #[derive(Default)]
    Cert {
        Ed25519 = "ed25519",
        Ed448 = "ed448",
        EcdsaP256 = "ecdsa_p256",
        EcdsaP384 = "ecdsa_p384",
        EcdsaP521 = "ecdsa_p521",
        Rsa1024 = "rsa1024",
        Rsa2048 = "rsa2048",
        Rsa3072 = "rsa3072",
        Rsa4096 = "rsa4096",
        Mldsa44 = "mldsa44",
        Mldsa65 = "mldsa65",
        Mldsa87 = "mldsa87",
        /// No certificate was sent (resumption).
        None = NONE,
        #[default]
        Other = OTHER,
    }
);

label_enum!(
    /// What carried a handshake: TLS over TCP, QUIC's handshake (quic/), or not known (no
    /// connection was seen).
    #[derive(Default)]
    Transport {
        Tcp = "tcp",
        Quic = "quic",
        #[default]
        Other = OTHER,
    }
);

// Every part is written, read and compared by its label (labels.rs `label_text!`); one
// that is not known reads as its `Other`.
label_text!(
    Version => Version::OTHER,
    Cipher => Cipher::OTHER,
    Group => Group::Other,
    Cert => Cert::Other,
    Transport => Transport::Other,
);

impl Default for Version {
    fn default() -> Self {
        Version::OTHER
    }
}

impl Default for Cipher {
    fn default() -> Self {
        Cipher::OTHER
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_value_reads_back_from_its_label() {
        fn round_trip<T: LabelValue + PartialEq + std::fmt::Debug>() {
            for v in T::ALL {
                assert_eq!(T::parse(v.label()), Some(*v), "{}", v.label());
            }
            let mut labels: Vec<_> = T::ALL.iter().map(|v| v.label()).collect();
            labels.sort();
            labels.dedup();
            assert_eq!(labels.len(), T::ALL.len(), "one label per value");
        }
        round_trip::<Version>();
        round_trip::<Cipher>();
        round_trip::<Group>();
        round_trip::<Cert>();
        round_trip::<Transport>();
    }

    #[test]
    fn codes_outside_the_tables_are_other() {
        assert_eq!(Version::of(0x7f1c), Version::OTHER);
        assert_eq!(Cipher::of(0xffff), Cipher::OTHER);
        assert_eq!(
            (Group::iana(0x2a2a), Group::dhe(512), Group::modp(1024)),
            (Group::Other, Group::Other, Group::Other)
        );
        assert_eq!(
            (
                Group::iana(29).label(),
                Group::dhe(2048).label(),
                Group::modp(2048).label()
            ),
            ("x25519", "dhe2048", "modp2048")
        );
    }

    #[test]
    fn one_handshake_in_twelve_bytes() {
        // the tracker keeps tens of thousands of ended captures, each with one
        assert_eq!(std::mem::size_of::<Negotiated>(), 12);
        let n = Negotiated {
            version: Version::TLS13,
            cipher: Cipher::of(0x1301),
            group: Group::iana(29),
            cert: Cert::EcdsaP256,
            resumed: false,
            transport: Transport::Tcp,
        };
        let json = serde_json::to_string(&n).unwrap();
        assert_eq!(
            json,
            r#"{"version":"TLSv1.3","cipher":"TLS_AES_128_GCM_SHA256","group":"x25519","cert":"ecdsa_p256","resumed":false,"transport":"tcp"}"#
        );
        assert_eq!(serde_json::from_str::<Negotiated>(&json).unwrap(), n);
        let labels = n.label_values();
        let back = Negotiated::from_labels(|k| {
            let i = Negotiated::LABELS.iter().position(|l| *l == k).unwrap();
            labels[i].to_string()
        });
        assert_eq!(back, Some(n));
    }
}
