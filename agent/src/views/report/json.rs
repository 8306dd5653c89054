//! The report as JSON (--json), for scripts and for `tlsprof compare`, which reads two back
//! (views/compare/): the findings with their figures, each process's measurements, and the
//! host's costs. One definition, written and read.
use std::{collections::BTreeMap, path::Path};

use anyhow::{bail, Context as _, Result};
use serde::{Deserialize, Serialize};

use super::rules::Finding;
use crate::{
    bpf::{abi::hello_untls, conn::ClosedBy},
    cpu::Category,
    hostcost::HostCosts,
    metrics::LabelValue,
    views::{
        failures::ClientFailure,
        snapshot::{Proc, Window},
    },
    wire::{failure::Failure, AppProtocol, Negotiated},
};

#[derive(Serialize, Deserialize, Debug, Clone, Default)]
#[serde(default)]
pub struct ReportDoc {
    pub window_seconds: f64,
    /// The rate at which the CPU split was sampled (per second of a process's CPU time): the
    /// number of samples behind a share is its process CPU seconds times this. Null when the
    /// agent was another process's (`--url`): its default, 49, is assumed then.
    pub sample_hz: Option<f64>,
    pub findings: Vec<FindingDoc>,
    pub processes: Vec<ProcessDoc>,
    pub host: Option<HostDoc>,
}

#[derive(Serialize, Deserialize, Debug, Clone, Default)]
#[serde(default)]
pub struct FindingDoc {
    pub rule: String,
    pub comm: String,
    pub port: Option<String>,
    pub title: String,
    /// What was measured, and what to change (as the Markdown report says them).
    pub evidence: String,
    pub fix: String,
    pub saving_cpu_cores: Option<f64>,
    pub saving_share: Option<f64>,
    /// What the clients seen say of the change (would fail under the policy it leads to),
    /// or "clients: not seen"; for a failure, who the failing clients are (their rate, share
    /// of the port's ClientHellos, what they lacked, their sites); null where the rule has
    /// no policy, or no failing client's ClientHello was read.
    pub clients: Option<String>,
    /// The finding's figures by name (null: not a finite number).
    pub numbers: BTreeMap<String, Option<f64>>,
}

#[derive(Serialize, Deserialize, Debug, Clone, Default)]
#[serde(default)]
pub struct ProcessDoc {
    pub comm: String,
    pub full: f64,
    pub resumed: f64,
    pub failed: f64,
    pub process_cpu_seconds: f64,
    pub cpu_seconds: BTreeMap<Category, f64>,
    /// Application data exchanges in the window, as they happened.
    pub exchanges: f64,
    /// process_cpu_seconds per exchange, and its TLS part (null without an exchange).
    pub cpu_per_exchange_seconds: Option<f64>,
    pub tls_cpu_per_exchange_seconds: Option<f64>,
    pub configs: Vec<ConfigDoc>,
    /// Successful handshakes by transport (tcp, quic, other: no connection seen).
    pub transports: BTreeMap<String, TransportDoc>,
    /// The share of the successful handshakes over QUIC: of the clients on HTTP/3 (null
    /// without a handshake).
    pub quic_share: Option<f64>,
    pub ports: BTreeMap<String, PortDoc>,
    /// The ClientHellos read in the window (0 without the capture).
    pub clients: ClientsDoc,
    /// Its failed server handshakes in the window by port, who ended them and why
    /// (tlsprof_handshake_failures_total), each port's most first: what `failed` is made of.
    pub failures: Vec<FailureDoc>,
    /// Its connections that never offered TLS by port and kind
    /// (tlsprof_connections_without_tls_total): no handshakes, counted apart.
    pub without_tls: Vec<WithoutTlsDoc>,
    /// Its failed handshakes whose ClientHello was read, by port, site, reason and what the
    /// ClientHello lacked (tlsprof_client_failures_total), each port's most first: who the
    /// failing clients are. Empty from an older agent, and in an older report.
    pub client_failures: Vec<ClientFailureDoc>,
    /// The process's compared figures in each part of the window (observe.rs: 10 to 20
    /// parts of one length, 2 s at least), by name: how much each moved from one part to
    /// the next, which widens its interval in a comparison (compare/figures.rs). Empty in an
    /// older report, or a window too short to part.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub batches: Vec<BTreeMap<String, f64>>,
}

#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq)]
#[serde(default)]
pub struct ClientFailureDoc {
    pub port: String,
    /// The host name the client asked for (SNI; `none` without one).
    pub sni: String,
    /// As in `failures` (who ended them is not told).
    pub reason: String,
    /// What the ClientHello lacked of what the server negotiates: version, cipher, group,
    /// none (the cause lies elsewhere), unknown (nothing negotiated yet to compare).
    pub lacks: String,
    pub handshakes: f64,
}

#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq)]
#[serde(default)]
pub struct FailureDoc {
    /// The listening port (`other`: no connection seen).
    pub port: String,
    /// The side that sent the alert or ended the connection first: client, server.
    pub by: String,
    /// The alert's description (protocol_version, unknown_ca...), or encrypted_alert, closed,
    /// reset, unfinished, library_error, unknown.
    pub reason: String,
    pub handshakes: f64,
}

#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq)]
#[serde(default)]
pub struct WithoutTlsDoc {
    pub port: String,
    /// silent (no byte: TCP health checks, port scans), http, http2, ssh, other.
    pub kind: String,
    pub connections: f64,
}

#[derive(Serialize, Deserialize, Debug, Clone, Default)]
#[serde(default)]
pub struct ClientsDoc {
    /// ClientHellos read.
    pub hellos: f64,
    /// Handshakes whose client offered to resume a session (psk or ticket), and of them
    /// those that got a full handshake.
    pub returning: f64,
    pub returning_full: f64,
    /// ClientHellos by offer and value offered.
    pub offers: BTreeMap<String, BTreeMap<String, f64>>,
    /// Share of the ClientHellos each candidate policy would fail.
    pub would_fail_share: BTreeMap<String, f64>,
}

#[derive(Serialize, Deserialize, Debug, Clone, Default)]
#[serde(default)]
pub struct TransportDoc {
    pub handshakes: f64,
    /// Of them, those whose CPU was measured; cpu_seconds is theirs.
    pub timed: f64,
    pub cpu_seconds: f64,
    /// cpu_seconds over timed (null when none was timed).
    pub cpu_per_handshake_seconds: Option<f64>,
}

#[derive(Serialize, Deserialize, Debug, Clone, Default)]
#[serde(default)]
pub struct ConfigDoc {
    /// What they negotiated, and what carried them (tcp, quic, other): its labels.
    #[serde(flatten)]
    pub negotiated: Negotiated,
    /// Every successful handshake with these parameters.
    pub handshakes: f64,
    /// Of them, those whose CPU was measured; cpu_seconds is theirs.
    pub timed: f64,
    pub cpu_seconds: f64,
    /// How the timed handshakes' CPU spread: [upper bound in seconds, handshakes in that
    /// bucket alone], the buckets of tlsprof_handshake_cpu_seconds; those above the last
    /// bound are `timed` less the rest.
    pub cpu_buckets: Vec<[f64; 2]>,
}

#[derive(Serialize, Deserialize, Debug, Clone, Default)]
#[serde(default)]
pub struct PortDoc {
    /// What its TLS connections carry (snapshot.rs Port::protocol_name).
    pub protocol: String,
    /// TLS handshakes on its TCP connections in the window by
    /// tlsprof_tls_connections_by_protocol_total's `protocol`.
    pub protocols: BTreeMap<AppProtocol, f64>,
    /// QUIC connections (`protocol="quic"`) on the UDP port of the same number: the other
    /// figures are its TCP connections'.
    pub quic_connections: f64,
    pub ended: f64,
    pub requests: f64,
    pub exchanges: f64,
    pub time_wait: f64,
    pub time_wait_sockets: f64,
    pub server_close_share: f64,
    /// How the requests of the connections that ended spread: [upper bound, connections in
    /// that bucket alone], the buckets of tlsprof_requests_per_connection; those above the
    /// last bound are `ended` less the rest.
    pub request_buckets: Vec<[f64; 2]>,
}

#[derive(Serialize, Deserialize, Debug, Clone, Default)]
#[serde(default)]
pub struct HostDoc {
    pub library: String,
    pub group_seconds: BTreeMap<String, f64>,
    pub sign_seconds: BTreeMap<String, f64>,
    pub record_seconds: BTreeMap<String, f64>,
}

/// Cumulative buckets (upper bound, count at or below it; the last +Inf) as the finite
/// buckets' own counts.
fn own_buckets(cumulative: &[(f64, f64)]) -> Vec<[f64; 2]> {
    let mut below = 0.0;
    cumulative
        .iter()
        .filter(|(le, _)| le.is_finite())
        .map(|&(le, n)| {
            let own = (n - below).max(0.0);
            below = n;
            [le, own]
        })
        .collect()
}

/// A process's failed handshakes by port, who ended them and why, as the JSON gives them.
fn failure_docs(p: &Proc) -> Vec<FailureDoc> {
    let doc = |(port, f, n): (&str, Failure, f64)| FailureDoc {
        port: port.into(),
        by: f.by.label().into(),
        reason: f.reason.label().into(),
        handshakes: n,
    };
    p.failures.by_port().into_iter().map(doc).collect()
}

/// Its failed handshakes whose ClientHello was read, by port, site, reason and what it
/// lacked.
fn client_failure_docs(p: &Proc) -> Vec<ClientFailureDoc> {
    let doc = |(c, n): (&ClientFailure, f64)| ClientFailureDoc {
        port: c.port.clone(),
        sni: c.sni.clone(),
        reason: c.reason.label().into(),
        lacks: c.lacks.label().into(),
        handshakes: n,
    };
    p.failures.clients_by_port().into_iter().map(doc).collect()
}

/// Its connections without TLS by port and kind.
fn without_tls_docs(p: &Proc) -> Vec<WithoutTlsDoc> {
    let doc = |(port, k, n): (&str, hello_untls, f64)| WithoutTlsDoc {
        port: port.into(),
        kind: k.label().into(),
        connections: n,
    };
    p.failures.untls_by_port().into_iter().map(doc).collect()
}

impl ReportDoc {
    /// The report's figures and findings as the JSON gives them.
    pub fn of(w: &Window, found: &[Finding], host: Option<&HostCosts>, sample_hz: Option<f64>) -> ReportDoc {
        ReportDoc {
            window_seconds: w.seconds,
            sample_hz,
            findings: found
                .iter()
                .map(|f| FindingDoc {
                    rule: f.rule.into(),
                    comm: f.comm.clone(),
                    port: f.port.clone(),
                    title: f.title.clone(),
                    evidence: f.evidence.clone(),
                    fix: f.fix.clone(),
                    saving_cpu_cores: f.saving_cpu,
                    saving_share: f.saving_share,
                    clients: f.clients.clone(),
                    numbers: f.numbers.iter().map(|(k, v)| (k.to_string(), Some(*v))).collect(),
                })
                .collect(),
            processes: w
                .procs
                .iter()
                .map(|p| ProcessDoc {
                    comm: p.comm.clone(),
                    full: p.full,
                    resumed: p.resumed,
                    failed: p.failed,
                    process_cpu_seconds: p.process_cpu,
                    cpu_seconds: p.cpu.clone(),
                    exchanges: p.exchanges(),
                    cpu_per_exchange_seconds: p.cost_per_exchange().map(|c| c.0),
                    tls_cpu_per_exchange_seconds: p.cost_per_exchange().map(|c| c.1),
                    configs: p
                        .configs
                        .iter()
                        .map(|c| ConfigDoc {
                            negotiated: c.negotiated,
                            handshakes: c.handshakes,
                            timed: c.timed,
                            cpu_seconds: c.cpu,
                            cpu_buckets: own_buckets(&c.cpu_buckets),
                        })
                        .collect(),
                    transports: p
                        .transports()
                        .into_iter()
                        .map(|t| {
                            let doc = TransportDoc {
                                handshakes: t.handshakes,
                                timed: t.timed,
                                cpu_seconds: t.cpu,
                                cpu_per_handshake_seconds: t.mean_cpu(),
                            };
                            (t.transport.label().to_string(), doc)
                        })
                        .collect(),
                    quic_share: p.quic_share(),
                    ports: p
                        .ports
                        .iter()
                        .map(|(k, v)| {
                            let port = PortDoc {
                                protocol: v.protocol_name().to_string(),
                                protocols: v.protocols.clone(),
                                quic_connections: v.quic,
                                ended: v.ended,
                                requests: v.requests,
                                exchanges: v.exchanges,
                                time_wait: v.time_wait,
                                time_wait_sockets: v.time_wait_sockets,
                                server_close_share: v.closed_share(ClosedBy::Server),
                                request_buckets: own_buckets(&v.request_buckets),
                            };
                            (k.clone(), port)
                        })
                        .collect(),
                    clients: {
                        let c = p.clients();
                        let (returning, returning_full) = c.returning();
                        let mut offers: BTreeMap<String, BTreeMap<String, f64>> = BTreeMap::new();
                        for ((o, v), n) in &c.offers {
                            offers.entry(o.clone()).or_default().insert(v.clone(), *n);
                        }
                        ClientsDoc {
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
                    failures: failure_docs(p),
                    without_tls: without_tls_docs(p),
                    client_failures: client_failure_docs(p),
                    batches: Vec::new(),
                })
                .collect(),
            host: host.map(|h| HostDoc {
                library: h.library.clone(),
                group_seconds: h.group.clone(),
                sign_seconds: h.sign.clone(),
                record_seconds: h.record.clone(),
            }),
        }
    }
}

impl ReportDoc {
    /// A report's JSON read back (one written by any tlsprof: a field it did not write yet
    /// reads as none), with one line that says why not; counts must be numbers, not
    /// negative, and the window longer than nothing.
    pub fn read(path: &Path) -> Result<ReportDoc> {
        let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
        let not_one = || format!("{} is not a report's JSON (tlsprof report --json)", path.display());
        let value: serde_json::Value = serde_json::from_str(&text).with_context(not_one)?;
        if !value.is_object() {
            bail!("{}", not_one());
        }
        let doc: ReportDoc = serde_json::from_value(value).with_context(not_one)?;
        let count = |x: f64| x.is_finite() && x >= 0.0;
        if !(doc.window_seconds.is_finite() && doc.window_seconds > 0.0) {
            bail!("{}: its window_seconds is not a positive number", path.display());
        }
        if doc.sample_hz.is_some_and(|h| !(h.is_finite() && h > 0.0)) {
            bail!("{}: its sample_hz is not a positive number", path.display());
        }
        for p in &doc.processes {
            let configs = p.configs.iter().flat_map(|c| [c.handshakes, c.timed, c.cpu_seconds]);
            let ports = p
                .ports
                .values()
                .flat_map(|x| [x.ended, x.requests, x.exchanges, x.time_wait]);
            let buckets = p.configs.iter().flat_map(|c| c.cpu_buckets.iter().flatten().copied());
            let split = p.cpu_seconds.values().copied();
            let failures = p.failures.iter().map(|f| f.handshakes);
            let without_tls = p.without_tls.iter().map(|w| w.connections);
            let client_failures = p.client_failures.iter().map(|c| c.handshakes);
            if ![
                p.full,
                p.resumed,
                p.failed,
                p.process_cpu_seconds,
                p.exchanges,
                p.clients.hellos,
                p.clients.returning,
            ]
            .into_iter()
            .chain(configs)
            .chain(ports)
            .chain(buckets)
            .chain(split)
            .chain(failures)
            .chain(without_tls)
            .chain(client_failures)
            .all(count)
            {
                bail!(
                    "{}: process {:?} has a count that is negative or not a number",
                    path.display(),
                    p.comm
                );
            }
        }
        Ok(doc)
    }
}

/// A document as one line of JSON (numbers that are not finite are null).
pub fn to_json<T: Serialize>(doc: &T) -> String {
    let mut out = serde_json::to_string(doc).expect("a document serializes");
    out.push('\n');
    out
}

/// The report as one JSON document (the unit tests read it).
#[cfg(test)]
pub fn json(w: &Window, found: &[Finding], host: Option<&HostCosts>) -> String {
    to_json(&ReportDoc::of(w, found, host, None))
}
