//! What a client offers, read from its ClientHello (the first handshake message of its byte
//! stream, as bpf/hello.bpf.h captures it: record headers included, nothing past the
//! ClientHello's last record). GREASE values (RFC 8701) are dropped here; every list is
//! capped, so whatever a client sends, an `Offer` stays small. The label values made from
//! it, and the policies it is evaluated against, are in `crate::clients`.

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
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum Resumption {
    /// Nothing (a TLS 1.2 session id alone is not counted: TLS 1.3 clients send a random one).
    #[default]
    None,
    /// A non-empty TLS 1.2 session_ticket extension.
    Ticket,
    /// A TLS 1.3 pre_shared_key extension.
    Psk,
}

/// A ClientHello's offers, GREASE removed, in the client's order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Offer {
    /// The highest version offered: supported_versions if present, else legacy_version.
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

/// The client's Offer from the bytes of its stream, from its first byte: TLS records, the
/// ClientHello possibly split over several of them.
// Placeholder until the parser lands (issue 36): it reads nothing yet.
pub fn parse_client_hello(bytes: &[u8]) -> Result<Offer, HelloError> {
    let _ = bytes;
    Err(HelloError::NotHello)
}
