//! What a port's protocol changes in the advice. A port is named by its traffic: the
//! protocol of the plaintext preamble its connections begin with (STARTTLS, PostgreSQL's
//! SSLRequest; bpf/wire.h WIRE_PROTO_*), else HTTP (ALPN, or TLS from the first byte). The
//! fixes then name that protocol's servers and settings, and exchanges stay exchanges where
//! the protocol has no requests.
use std::collections::BTreeMap;

use crate::{
    views::snapshot::{named_protocol, Port, Proc},
    wire::AppProtocol,
};

/// A port's protocol, as far as the advice goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    /// HTTPS, or TLS from the first byte whatever it carries.
    Http,
    Smtp,
    Imap,
    Pop3,
    Ldap,
    Xmpp,
    Ftp,
    Nntp,
    Postgresql,
    Mysql,
    /// A preamble of no protocol tlsprof names.
    Other,
}

impl Protocol {
    /// The protocol most of a port's TLS connections were named by
    /// (tlsprof_tls_connections_by_protocol_total's `protocol`).
    pub fn of_port(port: &Port) -> Self {
        Self::of(&port.protocols)
    }

    /// The protocol most of a process's TLS connections were named by, over its ports.
    pub fn of_proc(p: &Proc) -> Self {
        let mut all: BTreeMap<AppProtocol, f64> = BTreeMap::new();
        for port in p.ports.values() {
            for (k, v) in &port.protocols {
                *all.entry(*k).or_default() += v;
            }
        }
        Self::of(&all)
    }

    fn of(protocols: &BTreeMap<AppProtocol, f64>) -> Self {
        let Some(named) = named_protocol(protocols) else {
            return Self::Http;
        };
        match named {
            AppProtocol::Smtp => Self::Smtp,
            AppProtocol::Imap => Self::Imap,
            AppProtocol::Pop3 => Self::Pop3,
            AppProtocol::Ldap => Self::Ldap,
            AppProtocol::Xmpp => Self::Xmpp,
            AppProtocol::Ftp => Self::Ftp,
            AppProtocol::Nntp => Self::Nntp,
            AppProtocol::Postgresql => Self::Postgresql,
            AppProtocol::Mysql => Self::Mysql,
            AppProtocol::StarttlsOther => Self::Other,
            AppProtocol::H2
            | AppProtocol::Http1
            | AppProtocol::Quic
            | AppProtocol::Other
            | AppProtocol::None
            | AppProtocol::Encrypted => Self::Http,
        }
    }

    /// Its name in a finding's title.
    pub fn name(self) -> &'static str {
        match self {
            Self::Http => "HTTPS",
            Self::Smtp => "SMTP",
            Self::Imap => "IMAP",
            Self::Pop3 => "POP3",
            Self::Ldap => "LDAP",
            Self::Xmpp => "XMPP",
            Self::Ftp => "FTP",
            Self::Nntp => "NNTP",
            Self::Postgresql => "PostgreSQL",
            Self::Mysql => "MySQL",
            Self::Other => "this protocol",
        }
    }

    /// What one exchange on it is called: HTTP has requests; the others exchanges.
    pub fn unit(self) -> &'static str {
        if self == Self::Http {
            "requests"
        } else {
            "exchanges"
        }
    }

    /// One of them.
    pub fn one(self) -> &'static str {
        if self == Self::Http {
            "request"
        } else {
            "exchange"
        }
    }

    /// How to make its clients open fewer connections (the keep-alive finding).
    pub fn reuse_fix(self) -> &'static str {
        match self {
            Self::Http => {
                "Let connections carry many requests: raise the per-connection request limit (nginx \
                 `keepalive_requests` (default 1000), Apache `MaxKeepAliveRequests` (100), HCL Domino's \
                 \"Maximum requests per persistent connection\" (default 5)), turn keep-alive on (nginx \
                 `keepalive_timeout 75s`, Apache `KeepAlive On`), and make clients reuse connections \
                 (ab -k, HTTP client connection pools)."
            }
            Self::Postgresql | Self::Mysql => {
                "The clients open a database connection per transaction: put a connection pool between them \
                 and the server (PgBouncer or Pgpool-II for PostgreSQL, ProxySQL or MySQL Router for \
                 MySQL/MariaDB; or the application's own pool: HikariCP, SQLAlchemy's, pgx's), so that a few \
                 long connections carry the transactions; then the server's own settings (PostgreSQL \
                 `max_connections`, MySQL `max_connections` and `thread_cache_size`) can shrink."
            }
            Self::Smtp => {
                "Let SMTP clients deliver many messages per connection: connection caching on the sending \
                 side (Postfix `smtp_connection_cache_on_demand = yes`, `smtp_connection_cache_destinations`, \
                 `smtp_connection_reuse_time_limit`; HCL Domino's SMTP keeps connections to the same host \
                 open); on this server, `smtpd_client_connection_rate_limit` bounds clients that do not."
            }
            Self::Imap | Self::Pop3 => {
                "Mail clients that log in for every check open a connection each time: configure them to keep \
                 one connection open (IMAP IDLE, a longer check interval), and keep the login processes for \
                 many connections (Dovecot `service imap-login { service_count = 0 }`, the high-performance \
                 mode, with `process_min_avail`)."
            }
            Self::Ldap => {
                "Directory clients that bind per lookup open a connection each time: use a connection pool in \
                 the client (nslcd/sssd keep connections; JNDI `com.sun.jndi.ldap.connect.pool=true`) and a \
                 longer idle timeout on the server (OpenLDAP `idletimeout`)."
            }
            Self::Xmpp | Self::Ftp | Self::Nntp | Self::Other => {
                "Clients open a new connection for every exchange: make them keep their connection (the \
                 client's session or idle settings) and raise the server's idle timeout."
            }
        }
    }

    /// How to let its clients resume TLS sessions (the resumption findings), beside the web
    /// servers' settings.
    pub fn resumption_fix(self) -> &'static str {
        match self {
            Self::Xmpp | Self::Ftp | Self::Nntp => "",
            Self::Http | Self::Other => {
                " For a Java server (JSSE): `javax.net.ssl.sessionCacheSize` (default 20480 sessions) and the \
                 session timeout (`SSLSessionContext.setSessionTimeout`, default 86400 s)."
            }
            Self::Smtp => {
                " For Postfix: `smtpd_tls_session_cache_database = btree:${data_directory}/smtpd_scache` and \
                 `smtpd_tls_session_cache_timeout` (default 3600s; tickets: `tls_session_ticket_cipher`)."
            }
            Self::Imap | Self::Pop3 => {
                " For Dovecot: its login processes keep no session cache of their own, so resumption needs \
                 long-lived login processes (`service_count = 0`) or TLS 1.3 tickets (OpenSSL's default \
                 there)."
            }
            Self::Postgresql => {
                " For PostgreSQL: a backend is forked per connection and keeps no session cache (and libpq \
                 does not offer resumption): a connection pool is the fix, not resumption."
            }
            Self::Mysql => {
                " For MySQL/MariaDB: the server caches sessions itself (`ssl_session_cache_mode = ON`, \
                 `ssl_session_cache_timeout`); clients must ask for reuse (MySQL 8.0.29+ connectors)."
            }
            Self::Ldap => {
                " For OpenLDAP: `olcTLSCACertificate` aside, its session cache follows the TLS library \
                 (OpenSSL's internal cache); Java clients: `javax.net.ssl.sessionCacheSize`."
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_port_is_named_by_its_most_common_protocol() {
        let port = |pairs: &[(&str, f64)]| Port {
            protocols: pairs.iter().map(|(k, v)| ((*k).into(), *v)).collect(),
            ..Port::default()
        };
        assert_eq!(
            Protocol::of_port(&port(&[("smtp", 10.0), ("encrypted", 2.0)])),
            Protocol::Smtp
        );
        assert_eq!(Protocol::of_port(&port(&[("postgresql", 3.0)])), Protocol::Postgresql);
        assert_eq!(
            Protocol::of_port(&port(&[("h2", 3.0), ("encrypted", 9.0)])),
            Protocol::Http
        );
        assert_eq!(Protocol::of_port(&port(&[])), Protocol::Http);
        // TLS 1.3 hides the server's choice from most: what is named decides
        assert_eq!(
            Protocol::of_port(&port(&[("imap", 2.0), ("encrypted", 9.0)])),
            Protocol::Imap
        );
        assert_eq!(port(&[("encrypted", 9.0), ("h2", 1.0)]).protocol_name(), "h2");
        assert_eq!(port(&[("encrypted", 9.0), ("none", 1.0)]).protocol_name(), "tls");
        assert_eq!(port(&[("starttls_other", 1.0)]).protocol_name(), "starttls");
        assert_eq!(port(&[("postgresql", 4.0)]).protocol_name(), "postgresql");
        assert_eq!(port(&[]).protocol_name(), "-");
        assert_eq!(Protocol::Postgresql.unit(), "exchanges");
        assert!(Protocol::Postgresql.reuse_fix().contains("PgBouncer"));
        assert!(Protocol::Smtp
            .resumption_fix()
            .contains("smtpd_tls_session_cache_database"));
    }
}
