//! The report's rules: each reads a process's window (views/snapshot.rs) and, for what
//! the server does not use yet, the costs measured on this host (crate::hostcost), and says
//! what to change and what it would save. handshake.rs: resumption, key-exchange group,
//! certificate; record.rs: the record cipher; connection.rs: keep-alive and TIME_WAIT;
//! protocol.rs: what a port's protocol (SMTP, IMAP, PostgreSQL...) changes in the fixes;
//! failure.rs: why handshakes failed, and the connections that never offered TLS.
mod connection;
pub(crate) mod failure;
mod handshake;
mod protocol;
mod record;
#[cfg(test)]
mod tests;

pub use self::{
    connection::{keepalive, time_wait},
    failure::{failures, without_tls},
    handshake::{certificates, groups, resumption, resumption_refused, versions},
    record::record_ciphers,
};
use crate::{
    hostcost::HostCosts,
    views::snapshot::{Config, Proc, Window},
};

/// Fewer events than this in the window make no finding: too little to say anything.
pub const MIN_EVENTS: f64 = 20.0;
/// The record-cipher rule judges the suites of this many handshakes at least.
pub const MIN_CIPHER_HANDSHAKES: f64 = 5.0;
/// A cheaper alternative must save at least this share of what it replaces, where the
/// saving is the difference of two means of the process's own handshakes (both noisy).
pub const MIN_GAIN: f64 = 0.10;
/// The same where the saving is the difference of the two primitives timed on this host
/// (hostcost.rs), which no handshake's noise moves: P-384 over X25519 was 9.6% of an NSS
/// server's handshake in one CI run and 16% in others on the same VM (its speed moves the
/// two timings apart), so that the same configuration came and went under MIN_GAIN.
pub const MIN_GAIN_HOST: f64 = 0.05;
/// Requests per connection the keep-alive estimate assumes (Apache's default limit).
pub const TARGET_REQUESTS: f64 = 100.0;
/// Below this many requests per connection, connection churn is a finding.
pub const FEW_REQUESTS: f64 = 10.0;
/// Linux keeps a socket in TIME_WAIT this long (TCP_TIMEWAIT_LEN).
pub const TIME_WAIT_SECONDS: f64 = 60.0;
/// Connections that live this long on average (seconds) are in use, whatever their
/// exchange count says: an HTTP/2 client sends many requests per exchange, an HTTP/1.1
/// one may pipeline, a browser keeps idle connections; a handshake per half second of a
/// connection's life is little beside what the connection carries.
pub const REUSED_LIFETIME: f64 = 0.5;

/// What to change, why, and what it would save.
#[derive(Debug, Clone)]
pub struct Finding {
    pub rule: &'static str,
    pub comm: String,
    pub port: Option<String>,
    pub title: String,
    /// What was measured, in a sentence or two with the numbers.
    pub evidence: String,
    /// What to change.
    pub fix: String,
    /// CPU the change would save, in cores (CPU seconds per second), when it can be
    /// estimated; and as a share of the process's CPU.
    pub saving_cpu: Option<f64>,
    pub saving_share: Option<f64>,
    /// How the estimate was made.
    pub basis: String,
    /// What the clients seen in the window say about the change: how many would fail
    /// (or need a HelloRetryRequest) under the policy it leads to, from their ClientHellos;
    /// "clients: not seen" when no ClientHello was read. None where the rule has no policy.
    /// A failure's finding says here who its failing clients are (their rate, share of the
    /// port's ClientHellos, what they lacked, the sites they asked for), None where none of
    /// their ClientHellos was read.
    pub clients: Option<String>,
    /// The figures, by name, for scripts and tests.
    pub numbers: Vec<(&'static str, f64)>,
}

impl Finding {
    pub fn number(&self, key: &str) -> Option<f64> {
        self.numbers.iter().find(|(k, _)| *k == key).map(|(_, v)| *v)
    }
}

/// A sentence's first letter in upper case.
pub fn capitalized(s: &str) -> String {
    let mut c = s.chars();
    c.next()
        .map(|f| f.to_uppercase().collect::<String>() + c.as_str())
        .unwrap_or_default()
}

pub fn ms(s: f64) -> String {
    format!("{:.3} ms", s * 1e3)
}

pub(super) fn is_full(c: &Config) -> bool {
    !c.negotiated.resumed
}

/// The full handshake's certificate was seen: not a QUIC handshake's (QUIC sends it in
/// packets tlsprof does not open), nor one whose labels were not seen.
pub(super) fn cert_seen(c: &Config) -> bool {
    c.negotiated.cert != crate::wire::tls::OTHER
}

/// The configuration most full handshakes whose certificate was seen used.
pub(super) fn dominant(p: &Proc) -> Option<&Config> {
    p.configs
        .iter()
        .filter(|c| is_full(c) && cert_seen(c))
        .max_by(|a, b| a.handshakes.total_cmp(&b.handshakes))
}

/// What a policy is called in a finding: its title (clients/policy.rs).
pub fn policy_title(policy: &str) -> &'static str {
    crate::clients::policy::POLICIES
        .iter()
        .find(|p| p.name == policy)
        .map_or("this policy", |p| p.title)
}

/// What the window's clients say of the change a finding recommends: the policies it
/// leads to, each with the ClientHellos that would fail under it (and, with `retry`, those
/// that would need a HelloRetryRequest). "clients: not seen" when no ClientHello was read
/// in the window (an older agent, or the capture unavailable): never 0. The numbers are the
/// first policy's.
pub(super) fn would_fail(p: &Proc, policies: &[&str], retry: bool) -> (String, Vec<(&'static str, f64)>) {
    let c = p.clients();
    let seen = c.seen();
    let counted: Vec<_> = policies
        .iter()
        .filter_map(|&name| Some((name, c.policy(name)?)))
        .collect();
    if seen <= 0.0 || counted.is_empty() {
        let unread: Vec<String> = p
            .hellos_unread
            .iter()
            .filter(|(_, n)| **n > 0.0)
            .map(|(r, n)| format!("{n:.0} {}", crate::metrics::LabelValue::label(*r)))
            .collect();
        return (
            format!(
                "clients: not seen (no ClientHello read in the window: an older agent, or the capture unavailable{})",
                if unread.is_empty() {
                    String::new()
                } else {
                    format!("; ClientHellos not read: {}", unread.join(", "))
                }
            ),
            vec![],
        );
    }
    let mut parts = Vec::new();
    let mut numbers = vec![("clients_seen", seen)];
    for (i, (name, n)) in counted.iter().enumerate() {
        let mut s = format!(
            "clients that would fail with {}: {:.0} ({:.1}%)",
            policy_title(name),
            n.fail,
            n.fail_share() * 100.0
        );
        if retry {
            s.push_str(&format!(
                ", and {:.0} ({:.1}%) would need a HelloRetryRequest (an extra round trip)",
                n.hello_retry,
                n.hello_retry_share() * 100.0
            ));
        }
        parts.push(s);
        if i == 0 {
            numbers.push(("would_fail_clients", n.fail));
            numbers.push(("would_fail_share", n.fail_share()));
            if retry {
                numbers.push(("hello_retry_clients", n.hello_retry));
                numbers.push(("hello_retry_share", n.hello_retry_share()));
            }
        } else if *name == "no_rsa_kex" {
            numbers.push(("no_rsa_kex_fail_clients", n.fail));
            numbers.push(("no_rsa_kex_fail_share", n.fail_share()));
        }
    }
    (
        format!("{}; of {seen:.0} ClientHellos read in the window", parts.join("; ")),
        numbers,
    )
}

/// Sets a finding's clients line and its numbers.
pub(super) fn with_clients(mut f: Finding, (text, numbers): (String, Vec<(&'static str, f64)>)) -> Finding {
    f.clients = Some(text);
    f.numbers.extend(numbers);
    f
}

/// Process CPU in cores over the window (at least a tiny amount, to divide by).
pub(super) fn cores(p: &Proc, secs: f64) -> f64 {
    (p.process_cpu / secs).max(1e-9)
}

/// Sets the saving's share of the process's CPU.
pub(super) fn finish(mut f: Finding, p: &Proc, secs: f64) -> Finding {
    f.saving_share = f.saving_cpu.map(|s| (s / cores(p, secs)).min(1.0));
    f
}

/// Every rule over every process, ranked: by CPU saved, then by TIME_WAIT entries; those
/// that save nothing (versions, failures, connections without TLS) in the order made.
pub fn findings(w: &Window, host: Option<&HostCosts>) -> Vec<Finding> {
    let mut out = Vec::new();
    for p in &w.procs {
        out.extend(resumption(p, w.seconds, host));
        out.extend(resumption_refused(p, w.seconds, host));
        out.extend(versions(p, w.seconds));
        out.extend(groups(p, w.seconds, host));
        out.extend(certificates(p, w.seconds, host));
        out.extend(keepalive(p, w.seconds));
        out.extend(record_ciphers(p, w.seconds, host));
        out.extend(time_wait(p, w.seconds));
        out.extend(failures(p, w.seconds));
        out.extend(without_tls(p, w.seconds));
    }
    out.sort_by(|a, b| {
        let key = |f: &Finding| {
            (
                f.saving_cpu.unwrap_or(-1.0),
                f.number("time_wait_per_second").unwrap_or(0.0),
            )
        };
        let (ka, kb) = (key(a), key(b));
        kb.0.total_cmp(&ka.0).then(kb.1.total_cmp(&ka.1))
    });
    out
}
