//! What a TLS connection carries (the `protocol` label of
//! tlsprof_tls_connections_by_protocol_total): the protocol of its plaintext preamble
//! (STARTTLS, an SSLRequest: bpf/wire.h WIRE_PROTO_*), else what the server's output shows
//! of its choice (ALPN), else why that is not known; QUIC's connections apart.
use super::tls::{NONE, OTHER};
use crate::metrics::{label_enum, label_text};

label_enum!(
    /// An application protocol a TLS connection carries, or why it is not known.
    #[derive(Default)]
    AppProtocol {
        /// ALPN `h2`.
        H2 = "h2",
        /// ALPN `http/1.1`.
        Http1 = "http/1.1",
        /// Another ALPN value.
        Other = OTHER,
        /// The server chose no ALPN protocol.
        None = NONE,
        /// Not shown: TLS 1.3 sends the choice in its encrypted EncryptedExtensions (and a
        /// connection without a ServerHello has none to show). What a capture not parsed
        /// yet shows.
        #[default]
        Encrypted = "encrypted",
        /// HTTP/3: a QUIC connection on the UDP port of the same number.
        Quic = "quic",
        /// A STARTTLS preamble of no protocol tlsprof names.
        StarttlsOther = "starttls_other",
        Smtp = "smtp",
        Ftp = "ftp",
        Imap = "imap",
        Pop3 = "pop3",
        Ldap = "ldap",
        Xmpp = "xmpp",
        Nntp = "nntp",
        Postgresql = "postgresql",
        Mysql = "mysql",
    }
);
label_text!(AppProtocol => AppProtocol::Other);

impl AppProtocol {
    /// It names a protocol (not `encrypted`, `none` or `other`).
    pub fn named(self) -> bool {
        !matches!(self, AppProtocol::Encrypted | AppProtocol::None | AppProtocol::Other)
    }

    /// An ALPN protocol name.
    pub fn of_alpn(name: &[u8]) -> AppProtocol {
        match name {
            b"h2" => AppProtocol::H2,
            b"http/1.1" => AppProtocol::Http1,
            _ => AppProtocol::Other,
        }
    }
}
