//! Failure rules: why a port's handshakes failed, each cause with what fixes it, and the
//! connections that never offered TLS there, which are what the clients did, not failures.
//! Both are counted from the wire (tlsprof_handshake_failures_total,
//! tlsprof_connections_without_tls_total) and save no CPU: a failed handshake is a client
//! that got no service, and its cost is the failure, not the server's CPU. Where the failing
//! clients' ClientHellos were read (tlsprof_client_failures_total), a finding says who they
//! are (the sites they asked for, their share of the port's ClientHellos) and, for versions
//! and parameters, what their ClientHellos lacked.
use std::collections::BTreeSet;

use super::{finish, with_clients, Finding, MIN_EVENTS};
use crate::{
    bpf::abi::hello_untls,
    clients::lacks::Lacks,
    metrics::LabelValue,
    views::{failures::ClientGroup, snapshot::Proc},
    wire::{
        failure::{By, Failure, Reason},
        tls::{Version, NONE, OTHER},
    },
};

/// Sites a finding names per kind of failing client, the rest left to "…".
const MAX_SITES: usize = 3;

/// What made handshakes fail, as far as the fix goes: the reasons, with the side that sent
/// them, that one fix answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Cause {
    /// The server refused every version the client offered.
    OldVersion,
    /// No cipher suite, group or signature algorithm in common.
    NoCommonParameters,
    /// Clients rejected the server's certificate (a TLS 1.3 client's encrypted alert too).
    CertificateRejected,
    /// The server rejected the clients' certificates, or got none (mutual TLS).
    ClientCertificate,
    /// The name a client asked for (SNI) is not served.
    UnknownName,
    /// No application protocol (ALPN) in common.
    NoApplicationProtocol,
    /// Clients closed or reset the connection after their ClientHello, with no alert.
    ClientGaveUp,
    /// QUIC clients that never finished their handshake.
    QuicUnfinished,
    /// The server closed the connection before the handshake ended, with no alert.
    ServerGaveUp,
    /// The server's TLS library failed and no capture says more.
    LibraryError,
    /// Any other alert, or a capture that did not show why.
    Other,
}

impl Cause {
    /// The cause of one failure.
    pub fn of(f: Failure) -> Cause {
        use Reason::*;
        match (f.by, f.reason) {
            (By::Server, ProtocolVersion) => Cause::OldVersion,
            (By::Server, HandshakeFailure | InsufficientSecurity) => Cause::NoCommonParameters,
            (By::Client, r) if r.is_about_a_certificate() || r == EncryptedAlert => Cause::CertificateRejected,
            (By::Server, r) if r.is_about_a_certificate() || matches!(r, CertificateRequired | AccessDenied) => {
                Cause::ClientCertificate
            }
            (_, UnrecognizedName) => Cause::UnknownName,
            (_, NoApplicationProtocol) => Cause::NoApplicationProtocol,
            (_, Unfinished) => Cause::QuicUnfinished,
            (By::Client, Closed | Reset) => Cause::ClientGaveUp,
            (By::Server, Closed | Reset) => Cause::ServerGaveUp,
            (_, LibraryError) => Cause::LibraryError,
            _ => Cause::Other,
        }
    }

    /// The finding's rule.
    pub fn rule(self) -> &'static str {
        match self {
            Cause::OldVersion => "failure_version",
            Cause::NoCommonParameters => "failure_parameters",
            Cause::CertificateRejected => "failure_certificate",
            Cause::ClientCertificate => "failure_client_certificate",
            Cause::UnknownName => "failure_sni",
            Cause::NoApplicationProtocol => "failure_alpn",
            Cause::ClientGaveUp => "failure_client_gave_up",
            Cause::QuicUnfinished => "failure_quic_unfinished",
            Cause::ServerGaveUp => "failure_server_gave_up",
            Cause::LibraryError => "failure_library",
            Cause::Other => "failure_other",
        }
    }

    /// Its failing clients are told apart by what their ClientHellos lacked: the causes
    /// that lie in what they offer (tlsprof_client_failures_total's `lacks`).
    fn lies_in_the_offer(self) -> bool {
        matches!(self, Cause::OldVersion | Cause::NoCommonParameters)
    }

    /// What happened, for the title.
    fn what(self) -> &'static str {
        match self {
            Cause::OldVersion => "clients offer only versions the server refuses",
            Cause::NoCommonParameters => "clients and server share no cipher suite, group or signature algorithm",
            Cause::CertificateRejected => "clients reject the server's certificate",
            Cause::ClientCertificate => "the server rejects the clients' certificates",
            Cause::UnknownName => "clients ask for a name the server does not serve (SNI)",
            Cause::NoApplicationProtocol => "clients and server share no application protocol (ALPN)",
            Cause::ClientGaveUp => "clients give up after their ClientHello",
            Cause::QuicUnfinished => "QUIC clients do not finish their handshake",
            Cause::ServerGaveUp => "the server ends handshakes without an alert",
            Cause::LibraryError => "the server's TLS library fails handshakes",
            Cause::Other => "handshakes end with another alert",
        }
    }

    /// What the reasons mean, for the evidence.
    fn why(self) -> &'static str {
        match self {
            Cause::OldVersion => {
                "the server answered their ClientHello with protocol_version, as they offer no version it accepts, \
                 most often TLS 1.0 or 1.1 alone (old Java, Windows and embedded clients, scripts on an old OpenSSL) \
                 against a server set to TLS 1.2 and up."
            }
            Cause::NoCommonParameters => {
                "the server answered their ClientHello with handshake_failure or insufficient_security: nothing they \
                 offer is enabled on it (an old client's CBC or RSA key-exchange suites against AEAD suites only, a \
                 client restricted to one curve or to FIPS suites, a security level above the client's keys)."
            }
            Cause::CertificateRejected => {
                "the clients ended the handshake after the server's certificate: unknown_ca (its chain leads to no \
                 CA they trust: an intermediate missing, a private CA), certificate_expired, bad_certificate or \
                 certificate_unknown (a name that is not the one asked for, a signature or key usage they refuse); \
                 encrypted_alert is a TLS 1.3 client's rejection, encrypted, most often of the certificate too."
            }
            Cause::ClientCertificate => {
                "the server (mutual TLS) refused the clients' certificates: none sent where one is required \
                 (certificate_required), one no CA it trusts signed (unknown_ca), expired, revoked, or refused \
                 (access_denied)."
            }
            Cause::UnknownName => {
                "unrecognized_name: the host name in their ClientHello (SNI) matches no site configured on this \
                 port, or they sent none where the server needs one."
            }
            Cause::NoApplicationProtocol => {
                "no_application_protocol: the protocols the clients offer by ALPN (h2, http/1.1, gRPC's h2, a \
                 protocol of their own) include none the server speaks on this port."
            }
            Cause::ClientGaveUp => {
                "after their ClientHello they closed (closed) or reset (reset) the connection with no alert, \
                 before the handshake ended: a client's timeout while the server was slow to answer, a client \
                 stopped or crashed, or a scanner or TLS health check that reads the server's hello and leaves."
            }
            Cause::QuicUnfinished => {
                "their handshake never ended (unfinished): the client gave up, rejected the server in an alert QUIC \
                 encrypts (its certificate, most often), or the server's datagrams did not reach it (a firewall, a \
                 path that drops large UDP datagrams)."
            }
            Cause::ServerGaveUp => {
                "after the ClientHello the server closed the connection with no alert: a handshake timeout (the \
                 client too slow), a limit reached (connections, handshakes in progress), a worker that crashed or \
                 restarted, or an error its TLS library did not send as an alert."
            }
            Cause::LibraryError => {
                "the server's TLS library returned a failure and no capture of the connection says more \
                 (library_error: where the server's sends are not captured, the probes count)."
            }
            Cause::Other => {
                "an alert of another kind: a malformed or unexpected message (decode_error, unexpected_message, \
                 illegal_parameter), a failure inside a TLS library (internal_error, decrypt_error), or a capture \
                 that ended without showing why (unknown)."
            }
        }
    }

    /// What to change.
    fn fix(self) -> &'static str {
        match self {
            Cause::OldVersion => {
                "Enable TLS 1.2 on those clients (Java 7 `-Dhttps.protocols=TLSv1.2`, .NET 4.5 \
                 `ServicePointManager.SecurityProtocol`, an OpenSSL 1.0.1 or later build), or, if those clients \
                 matter more than the deprecated versions' risk (RFC 8996), accept their version on this server: \
                 nginx `ssl_protocols TLSv1.1 TLSv1.2 TLSv1.3;` (OpenSSL 3 also needs `@SECLEVEL=0` in \
                 `ssl_ciphers`), Apache `SSLProtocol -all +TLSv1.1 +TLSv1.2 +TLSv1.3`, HAProxy `ssl-min-ver \
                 TLSv1.1`."
            }
            Cause::NoCommonParameters => {
                "Compare what the clients offer (`tlsprof top`'s client lines, tlsprof_client_offers_total) with \
                 the server's lists (nginx `ssl_ciphers` and `ssl_ecdh_curve`, Apache `SSLCipherSuite` and \
                 `SSLOpenSSLConfCmd Curves`, HAProxy `ciphers`, `ciphersuites` and `curves`) and add one suite and \
                 group they share (ECDHE-RSA-AES128-GCM-SHA256 with P-256 serves most old clients), or update the \
                 clients; `openssl s_client -connect HOST:PORT -cipher SUITE` plays such a client."
            }
            Cause::CertificateRejected => {
                "Serve the whole chain: the leaf then the intermediates (nginx `ssl_certificate` with an ACME \
                 client's `fullchain.pem`, Apache 2.4.8+ the same in `SSLCertificateFile`, HAProxy the chain in the \
                 `crt` PEM); renew an expired certificate; make its names cover the names clients ask for; for a \
                 private CA, install it on the clients. `openssl s_client -connect HOST:PORT -servername NAME \
                 -showcerts` shows what clients get."
            }
            Cause::ClientCertificate => {
                "Give these clients a certificate a CA the server trusts signed, and renew expired ones (nginx \
                 `ssl_client_certificate` and `ssl_verify_depth`, Apache `SSLCACertificateFile` and \
                 `SSLVerifyDepth`, HAProxy `ca-file` on the bind line); where they need none, `ssl_verify_client \
                 optional` (Apache `SSLVerifyClient optional`). The server's error log names the certificate it \
                 refused."
            }
            Cause::UnknownName => {
                "Serve the names clients ask for on this port (nginx `server_name`, Apache `ServerName` and \
                 `ServerAlias` in its TLS virtual host), with a certificate that covers them, or make one site the \
                 default for unknown names (nginx `listen … ssl default_server`, Apache's first virtual host); or \
                 point the clients at a name served. The names asked for: tlsprof_client_hellos_total's `sni`."
            }
            Cause::NoApplicationProtocol => {
                "Speak what the clients ask for (nginx `http2 on;`, Apache `Protocols h2 http/1.1`, HAProxy `alpn \
                 h2,http/1.1` on the bind line), or make the clients offer a protocol the server speaks (gRPC needs \
                 h2 end to end)."
            }
            Cause::ClientGaveUp => {
                "If the server is slow to answer (its CPU busy, its accept queue full: `ss -ltn`, a slow session \
                 cache or OCSP look-up), find out why; a client's connect timeout can be raised. Scanners and TLS \
                 health checks need no fix, or a check that completes the handshake."
            }
            Cause::QuicUnfinished => {
                "Check the certificate as for TCP clients (whole chain, dates, names), that UDP from this port \
                 reaches the clients (firewalls, load balancers that do not pass QUIC), and that the server's \
                 datagrams fit the path (nginx `quic_gso`, a smaller maximum UDP payload); clients fall back to TCP, \
                 so this costs them time more than service."
            }
            Cause::ServerGaveUp => {
                "Read the server's error log at the failures' times (nginx `error_log … info` logs each failed \
                 SSL_do_handshake() with its reason, Apache `LogLevel ssl:info`); check its handshake timeout \
                 (nginx `ssl_handshake_timeout`, default 60s), its connection limits (nginx `worker_connections`, \
                 Apache `MaxRequestWorkers`, HAProxy `maxconn` and `maxsslconn`) and its restarts."
            }
            Cause::LibraryError => {
                "Read the server's error log for its library's reason (nginx `error_log … info`, Apache `LogLevel \
                 ssl:info`); where tlsprof can capture the server's connections, the failures come with their alert."
            }
            Cause::Other => {
                "Read the server's error log at the failures' times (nginx `error_log … info`, Apache `LogLevel \
                 ssl:info`) and the clients' own: one of them refused a message. `openssl s_client -connect \
                 HOST:PORT -msg` replays a handshake; a middlebox or a client's unusual TLS stack is the usual \
                 cause."
            }
        }
    }
}

/// A failure's reason and the side that sent it, as the findings name it:
/// "protocol_version from the server".
fn named(f: Failure) -> String {
    format!("{} from the {}", f.reason.label(), f.by.label())
}

/// A port as a finding holds it: None where no connection was seen (`other`).
fn finding_port(port: &str) -> Option<String> {
    (port != OTHER).then(|| port.to_string())
}

/// Failed handshakes by cause, a finding per listening port and cause with at least
/// MIN_EVENTS of them in the window, the most failed first: what happened, what the reasons
/// mean, what fixes it.
pub fn failures(p: &Proc, secs: f64) -> Vec<Finding> {
    let begun = p.handshakes() + p.failed;
    let mut out: Vec<(f64, Finding)> = Vec::new();
    for port in p.failures.failing_ports() {
        let each = p.failures.by_failure_on(port);
        let mut causes: Vec<Cause> = each.iter().map(|(f, _)| Cause::of(*f)).collect();
        causes.sort();
        causes.dedup();
        for cause in causes {
            let of: Vec<(Failure, f64)> = each.iter().copied().filter(|(f, _)| Cause::of(*f) == cause).collect();
            let n: f64 = of.iter().map(|(_, n)| n).sum();
            if n < MIN_EVENTS {
                continue;
            }
            out.push((n, failure_finding(p, secs, port, cause, &of, n / begun.max(n))));
        }
    }
    out.sort_by(|a, b| b.0.total_cmp(&a.0));
    out.into_iter().map(|(_, f)| f).collect()
}

/// One cause's finding: its failures `of` (failure, count) on `port`, `share` of the
/// process's handshakes that began; its clients line says who failed, where their
/// ClientHellos were read.
fn failure_finding(p: &Proc, secs: f64, port: &str, cause: Cause, of: &[(Failure, f64)], share: f64) -> Finding {
    let n: f64 = of.iter().map(|(_, n)| n).sum();
    let rate = n / secs;
    let reasons: Vec<&str> = of.iter().map(|(f, _)| f.reason.label()).fold(Vec::new(), |mut v, r| {
        if !v.contains(&r) {
            v.push(r);
        }
        v
    });
    let counted: Vec<String> = of.iter().map(|(f, k)| format!("{k:.0} with {}", named(*f))).collect();
    let on = match finding_port(port) {
        Some(port) => format!("port {port}: "),
        None => String::new(),
    };
    let by = |side: By| of.iter().filter(|(f, _)| f.by == side).map(|(_, k)| k).sum::<f64>() + 0.0;
    let mut numbers = vec![
        ("failed_per_second", rate),
        ("failed", n),
        ("failed_share", share),
        ("by_client", by(By::Client)),
        ("by_server", by(By::Server)),
    ];
    for &r in &reasons {
        numbers.push((
            r,
            of.iter().filter(|(f, _)| f.reason.label() == r).map(|(_, k)| k).sum(),
        ));
    }
    let f = finish(
        Finding {
            rule: cause.rule(),
            comm: p.comm.clone(),
            port: finding_port(port),
            title: format!(
                "{}: {on}{rate:.1} handshakes/s fail with {}: {}",
                p.comm,
                reasons.join(", "),
                cause.what()
            ),
            evidence: format!(
                "{n:.0} handshakes in the window ({rate:.1}/s, {:.1}% of the process's handshakes that began) failed \
                 ({}): {}",
                share * 100.0,
                counted.join(", "),
                cause.why()
            ),
            fix: cause.fix().into(),
            saving_cpu: None,
            saving_share: None,
            clients: None,
            basis: "none in CPU: each is a client that got no service; the reasons are the alerts on the wire, or \
                    who ended the connection (tlsprof_handshake_failures_total)"
                .into(),
            numbers,
        },
        p,
        secs,
    );
    match failing_clients(p, secs, port, cause, of) {
        Some(clients) => with_clients(f, clients),
        None => f,
    }
}

/// The reasons of a finding's failures `of` that no other cause shares on its port: the
/// failing clients of those reasons are its own (tlsprof_client_failures_total does not say
/// who ended the handshake: `closed` by the client and by the server are two causes).
fn own_reasons(p: &Proc, port: &str, cause: Cause, of: &[(Failure, f64)]) -> Vec<Reason> {
    let on = p.failures.by_failure_on(port);
    let mut v: Vec<Reason> = of.iter().map(|(f, _)| f.reason).collect();
    v.retain(|r| on.iter().all(|(f, _)| f.reason != *r || Cause::of(*f) == cause));
    v.sort();
    v.dedup();
    v
}

/// Who a finding's failing clients are, from their ClientHellos: per reason (and, where
/// the cause lies in the offer, per thing they lacked) their rate, their share of the port's
/// ClientHellos, what they lacked and the sites they asked for; with the numbers. None
/// where none was read (an older agent, or the capture unavailable): the finding as before.
fn failing_clients(
    p: &Proc,
    secs: f64,
    port: &str,
    cause: Cause,
    of: &[(Failure, f64)],
) -> Option<(String, Vec<(&'static str, f64)>)> {
    let reasons = own_reasons(p, port, cause, of);
    let groups = p.failures.client_groups(port, &reasons, cause.lies_in_the_offer());
    if groups.is_empty() {
        return None;
    }
    let failed: f64 = groups.iter().map(|g| g.failed).sum();
    let hellos = p.ports.get(port).map_or(0.0, |x| x.clients.seen()).max(failed);
    let versions = negotiated_versions(p);
    let told: Vec<String> = groups
        .iter()
        .map(|g| client_group(g, secs, hellos, &versions))
        .collect();
    let mut numbers = vec![("clients_failed", failed), ("clients_failed_share", failed / hellos)];
    for g in &groups {
        let Some(lacks) = g.lacks else { continue };
        match numbers.iter_mut().find(|(k, _)| *k == lacks_number(lacks)) {
            Some((_, n)) => *n += g.failed,
            None => numbers.push((lacks_number(lacks), g.failed)),
        }
    }
    Some((format!("clients: {}", told.join("; ")), numbers))
}

/// One kind of failing client, in a finding: "2.0/s fail with protocol_version (44.4% of
/// the port's ClientHellos): they offer only versions … — sites: localhost 2.0/s".
fn client_group(g: &ClientGroup, secs: f64, hellos: f64, versions: &str) -> String {
    let what = g.lacks.map_or(String::new(), |l| format!(": {}", lacked(l, versions)));
    format!(
        "{:.1}/s fail with {} ({:.1}% of the port's ClientHellos){what} — sites: {}",
        g.failed / secs,
        g.reason.label(),
        g.failed / hellos * 100.0,
        sites(g, secs)
    )
}

/// The sites a kind of failing client asked for, most first: at most MAX_SITES, then "…".
fn sites(g: &ClientGroup, secs: f64) -> String {
    let name = |sni: &str| {
        if sni == NONE {
            "no SNI".to_string()
        } else {
            sni.to_string()
        }
    };
    let mut v: Vec<String> = g
        .sites
        .iter()
        .take(MAX_SITES)
        .map(|(sni, n)| format!("{} {:.1}/s", name(sni), n / secs))
        .collect();
    if g.sites.len() > MAX_SITES {
        v.push("…".into());
    }
    v.join(", ")
}

/// What the failing clients' ClientHellos lacked of what the server negotiates.
fn lacked(lacks: Lacks, versions: &str) -> String {
    match lacks {
        Lacks::Version => format!("they offer only versions older than every one this server negotiates{versions}"),
        Lacks::Cipher => "they offer none of the cipher suites this server negotiates".into(),
        Lacks::Group => "they offer none of the key-exchange groups this server negotiates".into(),
        Lacks::Nothing => {
            "they lack none of the versions, cipher suites and groups this server negotiates: the cause lies \
             elsewhere"
                .into()
        }
        Lacks::Unknown => "the server had negotiated nothing yet to compare their offers with".into(),
    }
}

/// A finding's number for the failing clients that lacked it.
fn lacks_number(lacks: Lacks) -> &'static str {
    match lacks {
        Lacks::Version => "lacks_version",
        Lacks::Cipher => "lacks_cipher",
        Lacks::Group => "lacks_group",
        Lacks::Nothing => "lacks_none",
        Lacks::Unknown => "lacks_unknown",
    }
}

/// The versions the process's successful handshakes negotiated in the window, as the
/// finding names them: " (TLSv1.3 in the window)"; nothing where none was seen.
fn negotiated_versions(p: &Proc) -> String {
    let seen: BTreeSet<&str> = p
        .configs
        .iter()
        .filter(|c| c.handshakes > 0.0 && c.negotiated.version != Version::OTHER)
        .map(|c| c.negotiated.version.label())
        .collect();
    if seen.is_empty() {
        return String::new();
    }
    format!(" ({} in the window)", seen.into_iter().collect::<Vec<_>>().join(", "))
}

/// What a kind of connection without TLS is, in a finding.
fn kind_name(kind: hello_untls) -> &'static str {
    match kind {
        hello_untls::Silent => "silent (TCP health checks or port scans)",
        hello_untls::Http => "plain HTTP",
        hello_untls::Http2 => "HTTP/2 without TLS",
        hello_untls::Ssh => "SSH",
        _ => "of another protocol",
    }
}

/// What to make of one kind, and what to do where something is to be done.
fn kind_advice(kind: hello_untls) -> &'static str {
    match kind {
        hello_untls::Silent => {
            "Silent connections (a connect and a close, no byte) are a load balancer's TCP checks (HAProxy `check`, \
             a Kubernetes `tcpSocket` probe, a cloud load balancer) or port scans: nothing to fix, each costs an \
             accept and no handshake; many more than the balancers' intervals explain mean a short check interval \
             (HAProxy `inter`, the probe's `periodSeconds`)."
        }
        hello_untls::Http | hello_untls::Http2 => {
            "Plain HTTP on a TLS port comes from clients given `http://` with this port, or a proxy or check that \
             speaks HTTP to it: correct their URL or check; nginx can answer them with a redirect (`error_page 497 \
             =301 https://$host:$server_port$request_uri;`), and plain HTTP belongs on port 80, redirected there \
             (`return 301 https://$host$request_uri;`)."
        }
        hello_untls::Ssh => {
            "SSH clients pointed at this port: a client's wrong port, or a multiplexer (sslh) meant to sit in front."
        }
        _ => "Other bytes: a client of another protocol pointed at this port, or a scanner.",
    }
}

/// Connections that never offered TLS, a finding per port with at least MIN_EVENTS of them
/// in the window: what they were, as a fact about the clients (no handshake, so no failure).
pub fn without_tls(p: &Proc, secs: f64) -> Vec<Finding> {
    let mut out = Vec::new();
    for port in p.failures.untls_ports() {
        let kinds = p.failures.by_kind_on(port);
        let n: f64 = kinds.iter().map(|(_, k)| k).sum();
        if n < MIN_EVENTS {
            continue;
        }
        let rate = n / secs;
        let each: Vec<String> = kinds
            .iter()
            .map(|(k, c)| format!("{:.1}/s {}", c / secs, kind_name(*k)))
            .collect();
        let counted: Vec<String> = kinds.iter().map(|(k, c)| format!("{c:.0} {}", k.label())).collect();
        let mut numbers = vec![("connections_per_second", rate), ("connections", n)];
        numbers.extend(kinds.iter().map(|(k, c)| (k.label(), *c)));
        out.push(finish(
            Finding {
                rule: "without_tls",
                comm: p.comm.clone(),
                port: finding_port(port),
                title: format!(
                    "{}: {rate:.1} connections/s on port {port} never offered TLS: {}",
                    p.comm,
                    each.join(", ")
                ),
                evidence: format!(
                    "{n:.0} connections in the window ({rate:.1}/s) were accepted on port {port} and ended without a \
                     byte of TLS from the client ({}). They are no handshakes: not counted as failed ones \
                     (tlsprof_connections_without_tls_total).",
                    counted.join(", ")
                ),
                fix: kinds.iter().map(|(k, _)| kind_advice(*k)).collect::<Vec<_>>().join(" "),
                saving_cpu: None,
                saving_share: None,
                clients: None,
                basis: "none in CPU: a connection without TLS costs an accept and no handshake".into(),
                numbers,
            },
            p,
            secs,
        ));
    }
    out
}
