//! The report as JSON (--json), for scripts: the findings with their figures, each
//! process's measurements, and the host's costs.
use std::collections::BTreeMap;

use serde::Serialize;

use super::{hostcost::HostCosts, rules::Finding};
use crate::views::snapshot::Window;

#[derive(Serialize)]
struct Report<'a> {
    window_seconds: f64,
    findings: Vec<FindingJson<'a>>,
    processes: Vec<Process<'a>>,
    host: Option<Host<'a>>,
}

#[derive(Serialize)]
struct FindingJson<'a> {
    rule: &'a str,
    comm: &'a str,
    port: Option<&'a str>,
    title: &'a str,
    /// What was measured, and what to change (as the Markdown report says them).
    evidence: &'a str,
    fix: &'a str,
    saving_cpu_cores: Option<f64>,
    saving_share: Option<f64>,
    /// What the clients seen say of the change (would fail under the policy it leads to),
    /// or "clients: not seen"; null where the rule has no policy.
    clients: Option<&'a str>,
    numbers: BTreeMap<&'a str, f64>,
}

#[derive(Serialize)]
struct Process<'a> {
    comm: &'a str,
    full: f64,
    resumed: f64,
    failed: f64,
    process_cpu_seconds: f64,
    cpu_seconds: &'a BTreeMap<String, f64>,
    /// Application data exchanges in the window, as they happened.
    exchanges: f64,
    /// process_cpu_seconds per exchange, and its TLS part (null without an exchange).
    cpu_per_exchange_seconds: Option<f64>,
    tls_cpu_per_exchange_seconds: Option<f64>,
    configs: Vec<ConfigJson<'a>>,
    /// Successful handshakes by transport (tcp, quic, other: no connection seen).
    transports: BTreeMap<&'a str, TransportJson>,
    /// The share of the successful handshakes over QUIC: of the clients on HTTP/3 (null
    /// without a handshake).
    quic_share: Option<f64>,
    ports: BTreeMap<&'a str, PortJson>,
    /// The ClientHellos read in the window (0 without the capture).
    clients: ClientsJson,
}

#[derive(Serialize)]
struct ClientsJson {
    /// ClientHellos read.
    hellos: f64,
    /// Handshakes whose client offered to resume a session (psk or ticket), and of them
    /// those that got a full handshake.
    returning: f64,
    returning_full: f64,
    /// ClientHellos by offer and value offered.
    offers: BTreeMap<String, BTreeMap<String, f64>>,
    /// Share of the ClientHellos each candidate policy would fail.
    would_fail_share: BTreeMap<String, f64>,
}

#[derive(Serialize)]
struct TransportJson {
    handshakes: f64,
    /// Of them, those whose CPU was measured; cpu_seconds is theirs.
    timed: f64,
    cpu_seconds: f64,
    /// cpu_seconds over timed (null when none was timed).
    cpu_per_handshake_seconds: Option<f64>,
}

#[derive(Serialize)]
struct ConfigJson<'a> {
    version: &'a str,
    cipher: &'a str,
    group: &'a str,
    cert: &'a str,
    resumed: bool,
    /// What carried them: tcp, quic, other.
    transport: &'a str,
    /// Every successful handshake with these parameters.
    handshakes: f64,
    /// Of them, those whose CPU was measured; cpu_seconds is theirs.
    timed: f64,
    cpu_seconds: f64,
}

#[derive(Serialize)]
struct PortJson {
    /// What its TLS connections carry (snapshot.rs Port::protocol_name).
    protocol: String,
    /// TLS handshakes on its TCP connections in the window by
    /// tlsprof_tls_connections_by_protocol_total's `protocol`.
    protocols: BTreeMap<String, f64>,
    /// QUIC connections (`protocol="quic"`) on the UDP port of the same number: the other
    /// figures are its TCP connections'.
    quic_connections: f64,
    ended: f64,
    requests: f64,
    exchanges: f64,
    time_wait: f64,
    time_wait_sockets: f64,
    server_close_share: f64,
}

#[derive(Serialize)]
struct Host<'a> {
    library: &'a str,
    group_seconds: &'a BTreeMap<String, f64>,
    sign_seconds: &'a BTreeMap<String, f64>,
    record_seconds: &'a BTreeMap<String, f64>,
}

/// The report as one JSON document (numbers that are not finite are null).
pub fn json(w: &Window, found: &[Finding], host: Option<&HostCosts>) -> String {
    let report = Report {
        window_seconds: w.seconds,
        findings: found
            .iter()
            .map(|f| FindingJson {
                rule: f.rule,
                comm: &f.comm,
                port: f.port.as_deref(),
                title: &f.title,
                evidence: &f.evidence,
                fix: &f.fix,
                saving_cpu_cores: f.saving_cpu,
                saving_share: f.saving_share,
                clients: f.clients.as_deref(),
                numbers: f.numbers.iter().copied().collect(),
            })
            .collect(),
        processes: w
            .procs
            .iter()
            .map(|p| Process {
                comm: &p.comm,
                full: p.full,
                resumed: p.resumed,
                failed: p.failed,
                process_cpu_seconds: p.process_cpu,
                cpu_seconds: &p.cpu,
                exchanges: p.exchanges(),
                cpu_per_exchange_seconds: p.cost_per_exchange().map(|c| c.0),
                tls_cpu_per_exchange_seconds: p.cost_per_exchange().map(|c| c.1),
                configs: p
                    .configs
                    .iter()
                    .map(|c| ConfigJson {
                        version: &c.version,
                        cipher: &c.cipher,
                        group: &c.group,
                        cert: &c.cert,
                        resumed: c.resumed,
                        transport: &c.transport,
                        handshakes: c.handshakes,
                        timed: c.timed,
                        cpu_seconds: c.cpu,
                    })
                    .collect(),
                transports: p
                    .transports()
                    .into_iter()
                    .map(|t| {
                        let json = TransportJson {
                            handshakes: t.handshakes,
                            timed: t.timed,
                            cpu_seconds: t.cpu,
                            cpu_per_handshake_seconds: t.mean_cpu(),
                        };
                        (t.name, json)
                    })
                    .collect(),
                quic_share: p.quic_share(),
                ports: p
                    .ports
                    .iter()
                    .map(|(k, v)| {
                        let port = PortJson {
                            protocol: v.protocol_name().to_string(),
                            protocols: v.protocols.clone(),
                            quic_connections: v.quic,
                            ended: v.ended,
                            requests: v.requests,
                            exchanges: v.exchanges,
                            time_wait: v.time_wait,
                            time_wait_sockets: v.time_wait_sockets,
                            server_close_share: v.closed_share("server"),
                        };
                        (k.as_str(), port)
                    })
                    .collect(),
                clients: {
                    let c = p.clients();
                    let (returning, returning_full) = c.returning();
                    let mut offers: BTreeMap<String, BTreeMap<String, f64>> = BTreeMap::new();
                    for ((o, v), n) in &c.offers {
                        offers.entry(o.clone()).or_default().insert(v.clone(), *n);
                    }
                    ClientsJson {
                        hellos: c.seen(),
                        returning,
                        returning_full,
                        offers,
                        would_fail_share: c
                            .policies()
                            .into_iter()
                            .filter_map(|name| Some((name.to_string(), c.policy(name)?.fail_share())))
                            .collect(),
                    }
                },
            })
            .collect(),
        host: host.map(|h| Host {
            library: &h.library,
            group_seconds: &h.group,
            sign_seconds: &h.sign,
            record_seconds: &h.record,
        }),
    };
    let mut out = serde_json::to_string(&report).expect("a report serializes");
    out.push('\n');
    out
}
