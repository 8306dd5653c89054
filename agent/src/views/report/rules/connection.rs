//! Connection rules: keep-alive (requests per connection) and TIME_WAIT. Both are TCP's:
//! a port's connections, exchanges and TIME_WAIT entries are its TCP connections', and so
//! are the handshakes and their cost they weigh (a QUIC handshake has no TCP connection to
//! reuse or leave in TIME_WAIT).
use super::{
    finish, ms, protocol::Protocol, Finding, FEW_REQUESTS, MIN_EVENTS, REUSED_LIFETIME, TARGET_REQUESTS,
    TIME_WAIT_SECONDS,
};
use crate::bpf::conn::ClosedBy;
use crate::views::snapshot::{Config, Port, Proc};

/// A port's connections that ended in the window and carried a handshake that ended well:
/// those a client could have reused. The ones that never offered TLS (health checks, plain
/// HTTP) and those whose handshake failed carried no request, and are no client that
/// reopens a connection for each (they have findings of their own).
pub(super) fn served(p: &Proc, port: &str, v: &Port) -> f64 {
    let failed: f64 = p.failures.by_failure_on(port).iter().map(|(_, n)| n).sum();
    let untls: f64 = p.failures.by_kind_on(port).iter().map(|(_, n)| n).sum();
    (v.ended - failed - untls).max(0.0)
}

/// Connections that carry few requests: each new one costs a handshake, a TCP set-up and
/// tear-down and, when the server closes, a TIME_WAIT socket; only those whose handshake
/// ended well are weighed (`served`). Requests are exchanges (client data, then the
/// server's answer): where those stand for fewer requests than there were (HTTP/2,
/// pipelining), reuse is judged by how long connections live, which needs no framing:
/// connections that last REUSED_LIFETIME on average are in use.
pub fn keepalive(p: &Proc, secs: f64) -> Vec<Finding> {
    let mut out = Vec::new();
    let all_ended: f64 = p.ports.iter().map(|(port, v)| served(p, port, v)).sum();
    let tcp = |c: &Config| !c.over_quic();
    let hs = p.count(tcp);
    let c_hs = p.mean_cpu(tcp);
    for (port, v) in &p.ports {
        let ended = served(p, port, v);
        if ended <= 0.0 {
            continue;
        }
        let r = v.requests / ended;
        let lifetime = v.mean_lifetime();
        if ended < MIN_EVENTS || r >= FEW_REQUESTS || lifetime.is_some_and(|l| l >= REUSED_LIFETIME) {
            continue;
        }
        // TLS 1.3 hides the server's protocol choice; when most of the port's clients
        // offered h2 there, its connections may well be HTTP/2, with many requests per
        // exchange: too little to say clients do not reuse connections.
        // A softer finding says so, without a saving.
        let offered_h2 = v.tcp_h2_offered_share();
        if !v.multiplexed() && v.hidden_protocol_share() >= 0.5 && offered_h2 >= 0.5 {
            out.push(finish(
                Finding {
                    rule: "keepalive_http2",
                    comm: p.comm.clone(),
                    port: Some(port.clone()),
                    title: format!(
                        "{}: port {port}: {r:.1} exchanges per connection, but most clients offered HTTP/2, which may \
                         multiplex",
                        p.comm
                    ),
                    evidence: format!(
                        "{:.1} connections/s ended carrying {r:.1} exchanges each{}; {:.0}% of the port's ClientHellos \
                         offered h2, and TLS 1.3 hides the server's choice on {:.0}% of its connections. Under HTTP/2 \
                         one exchange may carry many requests, so whether clients reuse connections cannot be told \
                         from the exchanges.",
                        ended / secs,
                        lifetime.map(|l| format!(", lasting {} on average", ms(l))).unwrap_or_default(),
                        offered_h2 * 100.0,
                        v.hidden_protocol_share() * 100.0
                    ),
                    fix: "If the server speaks HTTP/2 on this port (nginx `http2 on;`, Apache `Protocols h2 \
                          http/1.1`), nothing to change unless the clients' own counts show one request per \
                          connection; if it does not, its clients fall back to HTTP/1.1 and the keep-alive advice \
                          applies (nginx `keepalive_requests`, Apache `MaxKeepAliveRequests`, clients reusing \
                          connections)."
                        .into(),
                    saving_cpu: None,
                    saving_share: None,
                    clients: None,
                    basis: "not estimated: under HTTP/2 over TLS 1.3 the requests per connection are not seen".into(),
                    numbers: vec![
                        ("connections_per_second", ended / secs),
                        ("exchanges_per_connection", r),
                        ("clients_offering_h2_share", offered_h2),
                        ("hidden_protocol_share", v.hidden_protocol_share()),
                        ("mean_lifetime_seconds", lifetime.unwrap_or(0.0)),
                    ],
                },
                p,
                secs,
            ));
            continue;
        }
        let h2 = if v.multiplexed() {
            format!(
                " ({:.0}% HTTP/2: several requests per exchange; they lasted {} on average)",
                v.h2_share() * 100.0,
                lifetime.map(ms).unwrap_or_else(|| "-".into())
            )
        } else {
            String::new()
        };
        let server_closes = v.closed_share(ClosedBy::Server);
        let proto = Protocol::of_port(v);
        let unit = proto.unit();
        let one = proto.one();
        let whose = if proto == Protocol::Http {
            String::new()
        } else {
            format!("{} ", proto.name())
        };
        let limit = v
            .common_request_count(0.8)
            .filter(|(k, _)| *k >= 2 && server_closes >= 0.8);
        let (title, why) = match limit {
            Some((k, share)) => (
                format!(
                    "{}: port {port}: the server closes every connection after {k} {unit}",
                    p.comm
                ),
                format!(
                    "{:.0}% of connections carried exactly {k} {unit} and the server closed {:.0}% of them: a \
                     per-connection limit",
                    share * 100.0,
                    server_closes * 100.0
                ),
            ),
            None if r < 1.5 && server_closes >= 0.5 => (
                format!(
                    "{}: port {port}: one {one} per connection, and the server closes them",
                    p.comm
                ),
                format!(
                    "the server closed {:.0}% of connections after about one {one}: keep-alive looks off",
                    server_closes * 100.0
                ),
            ),
            None if r < 1.5 => (
                format!(
                    "{}: port {port}: {whose}clients open a new connection for every {one}",
                    p.comm
                ),
                format!(
                    "clients ended {:.0}% of connections after about one {one} ({:.0}% with a reset): they do not \
                     reuse connections",
                    (1.0 - server_closes) * 100.0,
                    v.closed_share(ClosedBy::Reset) * 100.0
                ),
            ),
            None => (
                format!("{}: port {port}: connections carry only {r:.1} {unit}", p.comm),
                format!("the server closed {:.0}% of them", server_closes * 100.0),
            ),
        };
        let conn_rate = ended / secs;
        // At TARGET_REQUESTS per connection, this share of the connections goes away.
        let gone = (1.0 - r / TARGET_REQUESTS).max(0.0);
        let port_share = if all_ended > 0.0 { ended / all_ended } else { 0.0 };
        let hs_removed = hs / secs * port_share * gone;
        let tw_removed = v.time_wait / secs * gone;
        let saving = c_hs.map(|c| hs_removed * c);
        out.push(finish(
            Finding {
                rule: "keepalive",
                comm: p.comm.clone(),
                port: Some(port.clone()),
                title,
                evidence: format!(
                    "{conn_rate:.1} connections/s ended carrying {r:.1} {unit} each{h2}; {why}. Each new connection \
                     costs a handshake ({}) and {:.2} TIME_WAIT entries.",
                    c_hs.map(ms).unwrap_or_else(|| "not measured".into()),
                    if v.ended > 0.0 { v.time_wait / v.ended } else { 0.0 },
                ),
                fix: proto.reuse_fix().into(),
                saving_cpu: saving,
                saving_share: None,
                clients: None,
                basis: format!(
                    "at {TARGET_REQUESTS:.0} requests per connection: {hs_removed:.1} handshakes/s and {tw_removed:.1} \
                     TIME_WAIT entries/s fewer, each handshake at this process's mean CPU over TCP; TCP set-up and \
                     tear-down in the kernel come on top"
                ),
                numbers: vec![
                    ("connections_per_second", conn_rate),
                    ("requests_per_connection", r),
                    ("server_close_share", server_closes),
                    ("http2_share", v.h2_share()),
                    ("clients_offering_h2_share", offered_h2),
                    ("mean_lifetime_seconds", lifetime.unwrap_or(0.0)),
                    ("request_limit", limit.map(|(k, _)| k as f64).unwrap_or(0.0)),
                    ("handshakes_removed_per_second", hs_removed),
                    ("time_wait_removed_per_second", tw_removed),
                ],
            },
            p,
            secs,
        ));
    }
    out
}

/// Sockets the server leaves in TIME_WAIT, by listening port.
pub fn time_wait(p: &Proc, secs: f64) -> Vec<Finding> {
    let mut out = Vec::new();
    for (port, v) in &p.ports {
        let per_request = v.time_wait / v.requests.max(v.ended).max(1.0);
        if v.time_wait < MIN_EVENTS || per_request < 0.1 {
            continue;
        }
        let rate = v.time_wait / secs;
        out.push(finish(
            Finding {
                rule: "time_wait",
                comm: p.comm.clone(),
                port: Some(port.clone()),
                title: format!(
                    "{}: port {port}: {rate:.1} sockets/s enter TIME_WAIT on the server",
                    p.comm
                ),
                evidence: format!(
                    "The server closed first on {:.0}% of connections: {rate:.1} TIME_WAIT entries/s ({per_request:.2} per \
                     request), {:.0} sockets in TIME_WAIT at the end of the window; at this rate about {:.0} are held \
                     at any time (each for {TIME_WAIT_SECONDS:.0} s), each a kernel socket and a port pair a client cannot reuse.",
                    v.closed_share(ClosedBy::Server) * 100.0,
                    v.time_wait_sockets,
                    rate * TIME_WAIT_SECONDS
                ),
                fix: "Fewer, longer connections (see the keep-alive finding), and let clients close first: \
                      servers that close after each response (keep-alive off, a low per-connection request \
                      limit such as Domino's default of 5) hold the TIME_WAIT sockets themselves."
                    .into(),
                saving_cpu: None,
                saving_share: None,
                clients: None,
                basis: "TIME_WAIT entries counted by the kernel tracepoint; the sockets by sock_diag".into(),
                numbers: vec![
                    ("time_wait_per_second", rate),
                    ("time_wait_per_request", per_request),
                    ("time_wait_sockets", v.time_wait_sockets),
                    ("steady_state_sockets", rate * TIME_WAIT_SECONDS),
                ],
            },
            p,
            secs,
        ));
    }
    out
}
