//! Why a handshake failed, and what a connection that never offered TLS was: one closed set
//! each, from the kernel's codes (bpf/wire.h `wire_end`, bpf/conn.h `conn_by`, bpf/hello.h
//! `hello_untls`, the alerts' bytes) to the labels of tlsprof_handshake_failures_total and
//! tlsprof_connections_without_tls_total, decided here and nowhere else.
//!
//! Plain code over decoded values: the kernel is not needed to test it.
use crate::{
    bpf::abi::{conn_by, hello_untls, wire_end},
    metrics::LabelValue,
};

/// Which side ended a failed handshake (the `by` label): the one that sent the alert,
/// closed or reset first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum By {
    Server,
    Client,
}

impl LabelValue for By {
    const ALL: &'static [By] = &[By::Client, By::Server];
    fn label(self) -> &'static str {
        match self {
            By::Server => "server",
            By::Client => "client",
        }
    }
}

/// The alert descriptions of TLS 1.0-1.3 (RFC 5246 7.2, RFC 8446 6), and what a failed
/// handshake shows where no alert was sent in the clear.
macro_rules! reasons {
    ($($(#[$doc:meta])* $variant:ident = $label:literal $(: $code:literal)?),* $(,)?) => {
        /// Why a handshake failed (the `reason` label).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum Reason {
            $($(#[$doc])* $variant),*
        }

        impl LabelValue for Reason {
            const ALL: &'static [Reason] = &[$(Reason::$variant),*];
            fn label(self) -> &'static str {
                match self {
                    $(Reason::$variant => $label),*
                }
            }
        }

        impl Reason {
            /// An alert's description byte; OtherAlert for one no RFC names.
            pub fn of_alert(description: u8) -> Reason {
                match description {
                    $($($code => Reason::$variant,)?)*
                    _ => Reason::OtherAlert,
                }
            }
        }
    };
}

reasons! {
    // an alert sent in the clear, by its description
    CloseNotify = "close_notify": 0,
    UnexpectedMessage = "unexpected_message": 10,
    BadRecordMac = "bad_record_mac": 20,
    RecordOverflow = "record_overflow": 22,
    HandshakeFailure = "handshake_failure": 40,
    BadCertificate = "bad_certificate": 42,
    UnsupportedCertificate = "unsupported_certificate": 43,
    CertificateRevoked = "certificate_revoked": 44,
    CertificateExpired = "certificate_expired": 45,
    CertificateUnknown = "certificate_unknown": 46,
    IllegalParameter = "illegal_parameter": 47,
    UnknownCa = "unknown_ca": 48,
    AccessDenied = "access_denied": 49,
    DecodeError = "decode_error": 50,
    DecryptError = "decrypt_error": 51,
    ProtocolVersion = "protocol_version": 70,
    InsufficientSecurity = "insufficient_security": 71,
    InternalError = "internal_error": 80,
    InappropriateFallback = "inappropriate_fallback": 86,
    UserCanceled = "user_canceled": 90,
    NoRenegotiation = "no_renegotiation": 100,
    MissingExtension = "missing_extension": 109,
    UnsupportedExtension = "unsupported_extension": 110,
    UnrecognizedName = "unrecognized_name": 112,
    BadCertificateStatusResponse = "bad_certificate_status_response": 113,
    UnknownPskIdentity = "unknown_psk_identity": 115,
    CertificateRequired = "certificate_required": 116,
    NoApplicationProtocol = "no_application_protocol": 120,
    OtherAlert = "other_alert",
    // no alert in the clear
    /// The client answered the server's TLS 1.3 flight with fewer bytes than any Finished:
    /// an alert, encrypted (it rejected the server: its certificate, most often).
    EncryptedAlert = "encrypted_alert",
    /// After the ClientHello the side closed (FIN) before the handshake was over: a client
    /// that gave up or crashed; a server that gave up (a timeout) or failed without an alert.
    Closed = "closed",
    /// ... or reset the connection.
    Reset = "reset",
    /// The server's TLS library returned a failure, and no wire capture says more (where
    /// the kernel's sends cannot be captured, the probes count).
    LibraryError = "library_error",
    /// A QUIC handshake whose client never sent the datagram that ends it (its alert, if
    /// any, is in an encrypted Handshake packet).
    Unfinished = "unfinished",
    /// The capture ended without showing why (a cap, output it cannot read).
    Unknown = "unknown",
}

impl Reason {
    /// An alert about the peer's certificate: what the side that sent it could not accept.
    pub fn is_about_a_certificate(self) -> bool {
        matches!(
            self,
            Reason::UnknownCa
                | Reason::BadCertificate
                | Reason::CertificateUnknown
                | Reason::CertificateExpired
                | Reason::UnsupportedCertificate
                | Reason::CertificateRevoked
        )
    }
}

/// A failed handshake: who ended it, and why.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Failure {
    pub by: By,
    pub reason: Reason,
}

impl Failure {
    pub const fn new(by: By, reason: Reason) -> Self {
        Self { by, reason }
    }

    /// A connection ended by `by` (bpf/conn.h CONN_BY_*; None: the kernel did not say)
    /// before its handshake was over, with no alert in the clear.
    pub fn ended_by(by: Option<conn_by>) -> Self {
        match by {
            Some(conn_by::Client) => Failure::new(By::Client, Reason::Closed),
            Some(conn_by::Reset) => Failure::new(By::Client, Reason::Reset),
            Some(conn_by::Server) => Failure::new(By::Server, Reason::Closed),
            Some(conn_by::Unknown) | None => Failure::new(By::Server, Reason::Unknown),
        }
    }

    /// A failed capture's reason: the server's alert in the clear (its description), else
    /// the client's (read after its ClientHello: bpf/hello.h HELLO_ALERT), else how the
    /// capture ended (`why`) and who ended the connection (`by`).
    pub fn of_capture(
        server_alert: Option<u8>,
        client_alert: Option<u8>,
        why: Option<wire_end>,
        by: Option<conn_by>,
    ) -> Self {
        if let Some(d) = server_alert {
            return Failure::new(By::Server, Reason::of_alert(d));
        }
        if let Some(d) = client_alert {
            return Failure::new(By::Client, Reason::of_alert(d));
        }
        match why {
            Some(wire_end::ClientAlert) => Failure::new(By::Client, Reason::EncryptedAlert),
            Some(wire_end::Closed) => Failure::ended_by(by),
            Some(wire_end::Alert | wire_end::Finished | wire_end::Cap | wire_end::Bad | wire_end::Unsupported)
            | None => Failure::new(By::Server, Reason::Unknown),
        }
    }
}

/// What a connection that closed before its server sent TLS was (bpf/hello.h
/// HELLO_UNTLS_*): not a handshake (the `kind` label of
/// tlsprof_connections_without_tls_total), or a handshake that failed before the server
/// answered its ClientHello.
impl LabelValue for hello_untls {
    /// The kinds that are no handshake, the only ones the label takes.
    const ALL: &'static [hello_untls] = &[
        hello_untls::Silent,
        hello_untls::Http,
        hello_untls::Http2,
        hello_untls::Ssh,
        hello_untls::Other,
    ];
    fn label(self) -> &'static str {
        match self {
            hello_untls::Silent => "silent",
            hello_untls::Http => "http",
            hello_untls::Http2 => "http2",
            hello_untls::Ssh => "ssh",
            hello_untls::Other => "other",
            // handshakes, counted as failed (`failure`): never this label's
            hello_untls::HelloClient | hello_untls::HelloReset | hello_untls::HelloServer => "client_hello",
        }
    }
}

impl hello_untls {
    /// The handshake's failure, where the client's ClientHello came; None for a connection
    /// that never offered TLS.
    pub fn failure(self) -> Option<Failure> {
        match self {
            hello_untls::HelloClient => Some(Failure::ended_by(Some(conn_by::Client))),
            hello_untls::HelloReset => Some(Failure::ended_by(Some(conn_by::Reset))),
            hello_untls::HelloServer => Some(Failure::ended_by(Some(conn_by::Server))),
            hello_untls::Silent | hello_untls::Http | hello_untls::Http2 | hello_untls::Ssh | hello_untls::Other => {
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alerts_are_named_by_their_description() {
        assert_eq!(Reason::of_alert(70), Reason::ProtocolVersion);
        assert_eq!(Reason::of_alert(48), Reason::UnknownCa);
        assert_eq!(Reason::of_alert(112).label(), "unrecognized_name");
        assert_eq!(Reason::of_alert(255), Reason::OtherAlert);
        // every label read back is its variant
        for r in Reason::ALL {
            assert_eq!(Reason::parse(r.label()), Some(*r));
        }
    }

    #[test]
    fn a_capture_says_the_first_thing_known() {
        use wire_end::*;
        let f = Failure::of_capture(Some(40), Some(48), Some(Closed), Some(conn_by::Client));
        assert_eq!(f, Failure::new(By::Server, Reason::HandshakeFailure));
        let f = Failure::of_capture(None, Some(48), Some(Closed), Some(conn_by::Client));
        assert_eq!(f, Failure::new(By::Client, Reason::UnknownCa));
        let f = Failure::of_capture(None, None, Some(ClientAlert), Some(conn_by::Client));
        assert_eq!(f, Failure::new(By::Client, Reason::EncryptedAlert));
        let f = Failure::of_capture(None, None, Some(Closed), Some(conn_by::Reset));
        assert_eq!(f, Failure::new(By::Client, Reason::Reset));
        let f = Failure::of_capture(None, None, Some(Closed), Some(conn_by::Server));
        assert_eq!(f, Failure::new(By::Server, Reason::Closed));
        let f = Failure::of_capture(None, None, Some(Cap), None);
        assert_eq!(f, Failure::new(By::Server, Reason::Unknown));
    }

    #[test]
    fn connections_without_tls_are_no_handshake_unless_a_client_hello_came() {
        for k in hello_untls::ALL {
            assert_eq!(k.failure(), None, "{k:?}");
        }
        assert_eq!(
            hello_untls::HelloClient.failure(),
            Some(Failure::new(By::Client, Reason::Closed))
        );
        assert_eq!(
            hello_untls::HelloServer.failure(),
            Some(Failure::new(By::Server, Reason::Closed))
        );
        assert_eq!(hello_untls::try_from(3u8), Ok(hello_untls::Ssh));
    }
}
