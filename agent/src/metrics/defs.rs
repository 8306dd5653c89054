//! Every metric tlsprof exports, declared once: name, type, unit, help and label set. The
//! exporter registers them from here (mod.rs), the views decode a running agent's
//! exposition by these names (views/model.rs), and a test checks docs/metrics.md, the
//! dashboards and the rules against this list.
use std::marker::PhantomData;

use super::labels::*;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
    Histogram,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    Seconds,
    Bytes,
}

/// A metric, without its label set's type.
#[derive(Debug, Clone, Copy)]
pub struct Spec {
    /// The registered name, without the `tlsprof_` prefix and the unit.
    pub name: &'static str,
    pub kind: Kind,
    pub unit: Option<Unit>,
    pub help: &'static str,
    /// The label set's names (labels::LabelNames), for the docs and dashboards tests.
    #[cfg_attr(
        not(test),
        expect(dead_code, reason = "the label structs carry them to the exporter")
    )]
    pub labels: &'static [&'static str],
}

/// A metric whose series carry the label set `L`.
pub struct Def<L> {
    pub spec: Spec,
    labels: PhantomData<fn() -> L>,
}

impl<L: LabelNames> Def<L> {
    const fn new(name: &'static str, kind: Kind, unit: Option<Unit>, help: &'static str) -> Self {
        Def {
            spec: Spec {
                name,
                kind,
                unit,
                help,
                labels: L::NAMES,
            },
            labels: PhantomData,
        }
    }
}

impl<L> std::ops::Deref for Def<L> {
    type Target = Spec;
    fn deref(&self) -> &Spec {
        &self.spec
    }
}

impl Spec {
    /// The family's name in the exposition's HELP and TYPE lines of OpenMetrics
    /// (`tlsprof_<name>[_<unit>]`).
    pub fn family(&self) -> String {
        match self.unit {
            Some(Unit::Seconds) => format!("tlsprof_{}_seconds", self.name),
            Some(Unit::Bytes) => format!("tlsprof_{}_bytes", self.name),
            None => format!("tlsprof_{}", self.name),
        }
    }

    /// The name of its samples: `_total` for a counter; a histogram's are `_bucket`,
    /// `_sum` and `_count` (`series`).
    pub fn sample(&self) -> String {
        match self.kind {
            Kind::Counter => format!("{}_total", self.family()),
            _ => self.family(),
        }
    }

    /// A histogram's series: `_bucket`, `_sum` or `_count`.
    pub fn series(&self, suffix: &str) -> String {
        format!("{}_{suffix}", self.family())
    }

    /// Every sample name the exposition can carry for it.
    pub fn sample_names(&self) -> Vec<String> {
        match self.kind {
            Kind::Histogram => ["bucket", "sum", "count"].iter().map(|s| self.series(s)).collect(),
            _ => vec![self.sample()],
        }
    }

    #[cfg(test)]
    pub fn type_name(&self) -> &'static str {
        match self.kind {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        }
    }
}

use Kind::*;
use Unit::*;

pub const HANDSHAKES: Def<HandshakeLabels> = Def::new(
    "handshakes",
    Counter,
    None,
    "TLS handshakes finished, by process name, role (server|client), result (ok|failed: began and did not finish; \
     why in tlsprof_handshake_failures_total, and connections that never offered TLS are in neither) and what was \
     negotiated: version, cipher (IANA), group (IANA, or rsa for RSA key transport), cert (the server \
     certificate's key), resumed, and transport (tcp, or quic for HTTP/3's); unknown or rare values are other",
);
pub const HANDSHAKES_UNLABELLED: Def<ReasonLabels> = Def::new(
    "handshakes_unlabelled",
    Counter,
    None,
    "Handshakes counted with some negotiated labels other because tlsprof could not see them: \
     no_connection (not on a connection accepted on a watched port since tlsprof started: client role, \
     older connections), incomplete (the server's handshake output did not show them all)",
);
pub const HANDSHAKE_CPU: Def<ParamLabels> = Def::new(
    "handshake_cpu",
    Histogram,
    Some(Seconds),
    "On-CPU time (user and kernel) of the threads performing a successful handshake, summed over all its calls",
);
pub const HANDSHAKE_DURATION: Def<ParamLabels> = Def::new(
    "handshake_duration",
    Histogram,
    Some(Seconds),
    "Wall-clock time of a successful handshake, from its first handshake call to the call that completed it",
);
pub const HANDSHAKE_FAILURES: Def<FailureLabels> = Def::new(
    "handshake_failures",
    Counter,
    None,
    "Failed server handshakes by why, from the wire in every mode (one per failed handshake): by (client|server) \
     the side that sent the alert or ended the connection first, reason the alert's description where it was \
     sent in the clear (protocol_version, handshake_failure, unknown_ca, ...), else encrypted_alert (a TLS 1.3 \
     client's rejection), closed, reset, unfinished (QUIC), library_error (the probes count: no wire), unknown",
);
pub const CONNECTIONS_WITHOUT_TLS: Def<KindPortLabels> = Def::new(
    "connections_without_tls",
    Counter,
    None,
    "Connections accepted on a port that carries TLS which never offered TLS, counted apart from handshakes: kind \
     silent (closed or reset before any byte: TCP health checks, port scans), http, http2, ssh (the client's \
     first bytes), other (bytes of no protocol tlsprof knows)",
);
pub const FAILED_HANDSHAKE_CPU: Def<RoleLabels> = Def::new(
    "failed_handshake_cpu",
    Counter,
    Some(Seconds),
    "On-CPU time spent in handshakes that failed",
);
pub const ATTACHED_PROCESSES: Def<CommLabels> = Def::new(
    "attached_processes",
    Gauge,
    None,
    "Processes tlsprof has attached its probes to",
);
pub const HANDSHAKE_CPU_METHOD: Def<MethodLabels> = Def::new(
    "handshake_cpu_method_info",
    Gauge,
    None,
    "How the handshake CPU and duration histograms of the processes of this name are measured, and how many \
     are attached so measured now: method probes (the TLS library's handshake calls, on CPU) or kernel_estimate \
     (the server thread's on-CPU time from reading the client's handshake messages to answering them, where no \
     entry point is probed or the probes miss the handshakes: docs/metrics.md)",
);
pub const ATTACHED_PROBES: Def<NoLabels> =
    Def::new("attached_probes", Gauge, None, "Uprobes and uretprobes attached now");
pub const EVENTS_LOST: Def<NoLabels> = Def::new(
    "events_lost",
    Counter,
    None,
    "Finished handshakes the kernel could not report because the ring buffer was full",
);
pub const KERNEL_ERRORS: Def<KindLabels> = Def::new(
    "kernel_errors",
    Counter,
    None,
    "Kernel-side failure paths taken (events_lost, thread_map_full, ssl_map_full, conn_events_lost, \
     conn_storage_full, samples_lost, wire_events_lost, hs_hits_full, hs_last_full, \
     proc_events_full, req_recv_calls_full, unknown_value)",
);
pub const UNMATCHED_RETURNS: Def<NoLabels> = Def::new(
    "unmatched_returns",
    Counter,
    None,
    "Return probes that fired without their entry: the call began before the probes were attached (at start, \
     or when the overhead budget attaches them again); not a failure",
);
pub const PROBE_ATTACH_FAILURES: Def<ProbeLabels> = Def::new(
    "probe_attach_failures",
    Counter,
    None,
    "Probes that failed to attach, by probe (program name)",
);
pub const AGENT_CPU: Def<NoLabels> = Def::new(
    "agent_cpu",
    Counter,
    Some(Seconds),
    "CPU time (user and system) used by the tlsprof agent itself",
);
pub const SCAN_DURATION: Def<ScanLabels> = Def::new(
    "scan_duration",
    Histogram,
    Some(Seconds),
    "Wall-clock time of the agent's periodic scans (every --scan-interval), by scan: processes (/proc for \
     new and exited processes and late-loaded TLS libraries, attaching to new ones) or ports (each traced \
     network namespace's listening and TIME_WAIT sockets by sock_diag)",
);
pub const AGENT_RESIDENT_MEMORY: Def<NoLabels> = Def::new(
    "agent_resident_memory",
    Gauge,
    Some(Bytes),
    "Resident memory of the tlsprof agent itself",
);
pub const TCP_CONNECTIONS_ACCEPTED: Def<PortLabels> = Def::new(
    "tcp_connections_accepted",
    Counter,
    None,
    "TCP connections accepted on a listening port of a traced process (the TCP handshake completed)",
);
pub const TCP_CONNECTIONS: Def<ClosedByLabels> = Def::new(
    "tcp_connections",
    Counter,
    None,
    "TCP connections accepted on a listening port of a traced process that ended, by who ended them: \
     server (sent the first FIN), client (sent the first FIN) or reset",
);
pub const TCP_TIME_WAIT: Def<PortLabels> = Def::new(
    "tcp_time_wait",
    Counter,
    None,
    "Server-side sockets that entered TIME_WAIT: the server closed first and the client closed cleanly",
);
pub const TCP_TIME_WAIT_SOCKETS: Def<OnlyPortLabels> = Def::new(
    "tcp_time_wait_sockets",
    Gauge,
    None,
    "Sockets in TIME_WAIT now with this local port (sock_diag), summed over the network namespaces of the traced processes",
);
pub const TCP_CONNECTION_DURATION: Def<PortLabels> = Def::new(
    "tcp_connection_duration",
    Histogram,
    Some(Seconds),
    "Lifetime of an accepted connection, from the TCP handshake to the server's socket closing",
);
pub const REQUESTS_PER_CONNECTION: Def<PortLabels> = Def::new(
    "requests_per_connection",
    Histogram,
    None,
    "Application data exchanges (client data, then server data; TLS handshake traffic excluded) per ended connection",
);
pub const EXCHANGES: Def<PortLabels> = Def::new(
    "exchanges",
    Counter,
    None,
    "Application data exchanges (client data, then server data; TLS handshake traffic excluded) on connections \
     accepted on this port, counted as they happen: requests where each request is answered before the next \
     (HTTP/1.x without pipelining), fewer on HTTP/2 and pipelined connections",
);
pub const CONNECTION_PROTOCOLS: Def<ProtocolLabels> = Def::new(
    "tls_connections_by_protocol",
    Counter,
    None,
    "TLS handshakes on connections accepted on this port, by the application protocol the server chose (ALPN) \
     as its ServerHello shows it: h2 (HTTP/2: exchanges are not requests), http/1.1, other, none (no ALPN); \
     encrypted: TLS 1.3 sends the choice encrypted; or the protocol of the plaintext preamble before TLS: smtp, \
     ftp, imap, pop3, ldap, xmpp, nntp, postgresql, mysql, starttls_other",
);
pub const PROCESS_CPU: Def<CommLabels> = Def::new(
    "process_cpu",
    Counter,
    Some(Seconds),
    "On-CPU time (user and kernel) of the traced processes, summed by the kernel at every context switch",
);
pub const CPU: Def<CategoryLabels> = Def::new(
    "cpu",
    Counter,
    Some(Seconds),
    "On-CPU time of the traced processes split by sampling into handshake, crypto (TLS record crypto), \
     tls_library (TLS code of stacks without handshake probes), kernel_net, probes (tlsprof's own) and other",
);
pub const CRYPTO_CPU: Def<PrimitiveLabels> = Def::new(
    "crypto_cpu",
    Counter,
    Some(Seconds),
    "On-CPU time in TLS library code (handshakes included) and kernel TLS, by crypto primitive; \
     no_symbols where the library has no function names",
);
pub const TLS_LIBRARY_INFO: Def<LibraryLabels> = Def::new(
    "tls_library_info",
    Gauge,
    None,
    "TLS code a traced process maps, and where its function names come from (full, debug_file, exported_only, none)",
);
pub const CPU_SAMPLES: Def<NoLabels> = Def::new(
    "cpu_samples",
    Counter,
    None,
    "CPU samples of traced processes received from the kernel",
);
pub const MODE_INFO: Def<ModeLabels> = Def::new(
    "mode_info",
    Gauge,
    None,
    "How tlsprof runs: mode (default: handshake probes duty-cycled under the overhead budget, handshakes \
     counted from the wire; exact: handshake probes always attached) and the budget (share of each \
     process's own CPU)",
);
pub const SAMPLED_FIGURE_INFO: Def<FigureLabels> = Def::new(
    "sampled_figure_info",
    Gauge,
    None,
    "Figures (metric names) that are measured in sampled windows in this mode, not for every event: scale \
     them by tlsprof_probe_duty_cycle, or read them as averages (CPU per handshake)",
);
pub const PROBE_DUTY_CYCLE: Def<CommLabels> = Def::new(
    "probe_duty_cycle",
    Gauge,
    None,
    "Share of the last 2 s cycle the handshake probes were attached to the processes of this name (mean \
     over them): the sampling ratio of the sampled figures",
);
pub const PROBE_HITS: Def<CommLabels> = Def::new(
    "probe_hits",
    Counter,
    None,
    "Uprobe and uretprobe hits in the traced processes (each one a trap into the kernel)",
);
pub const PROBE_CPU: Def<CommLabels> = Def::new(
    "probe_cpu",
    Counter,
    Some(Seconds),
    "CPU time the handshake probes cost the traced processes: hits times the cost of one trap measured on \
     this host at start, plus the probe programs' own run time",
);
pub const PROBE_PROGRAM: Def<CommLabels> = Def::new(
    "probe_program",
    Counter,
    Some(Seconds),
    "Of tlsprof_probe_cpu_seconds_total: the probe programs' own run time, which they time themselves \
     (the rest is the traps, at the cost measured at start)",
);
pub const PROBE_HIT_COST: Def<ProbeLabels> = Def::new(
    "probe_hit_cost",
    Gauge,
    Some(Seconds),
    "CPU time of one probe hit on this host, measured at start with cold caches (probe: uprobe, on an instruction the kernel \
     single-steps; uprobe_emulated, on a jump it emulates; uretprobe)",
);

pub const KERNEL_HOOK_INFO: Def<HookLabels> = Def::new(
    "kernel_hook_info",
    Gauge,
    None,
    "Which kernel hook serves each capability on this kernel (none: nothing does, and what it measures is \
     missing; not_needed: another capability covers it), chosen at start by loading and attaching",
);

pub const TABLE_FULL: Def<TableLabels> = Def::new(
    "table_full",
    Counter,
    None,
    "Entries an agent-side table dropped or evicted because it was at its bound (table: which one; \
     docs/metrics.md lists them with their bounds)",
);
pub const SERIES_FOLDED: Def<MetricLabels> = Def::new(
    "series_folded",
    Counter,
    None,
    "Updates of a metric that went to its comm/port/library=\"other\" series because the metric had \
     reached its series cap (--max-series)",
);
pub const SCRAPES_REFUSED: Def<RefusalLabels> = Def::new(
    "scrapes_refused",
    Counter,
    None,
    "Connections to the metrics endpoint closed without a response or refused (reason: evicted, deadline, \
     too_large, unauthorized, tls)",
);

pub const CLIENT_HELLOS: Def<SniLabels> = Def::new(
    "client_hellos",
    Counter,
    None,
    "ClientHellos read by a traced server on connections accepted on this port, by the host name the client \
     asked for (SNI; none without one; capped like comm and port): one per connection",
);
pub const CLIENT_OFFERS: Def<OfferLabels> = Def::new(
    "client_offers",
    Counter,
    None,
    "What the ClientHellos offered (GREASE ignored, unknown values other), one count per ClientHello and value: \
     offer=version (the highest: TLSv1.3, TLSv1.2, TLSv1.1, TLSv1, SSLv3), group, key_share (groups with a key \
     share; the group label's names), cipher (suite classes: tls13_aead, ecdhe_aead, dhe_aead, cbc, 3des_rc4, \
     rsa_kex, other), sigalg (ecdsa, rsa_pss, rsa_pkcs1, eddsa, other), alpn (h2, http/1.1, other, none), \
     resumption (psk, ticket, none)",
);
pub const CLIENT_POLICY_OUTCOMES: Def<PolicyLabels> = Def::new(
    "client_policy_outcomes",
    Counter,
    None,
    "Each ClientHello evaluated against candidate server policies (policy: mozilla_modern, mozilla_intermediate, \
     ecdsa_only, tls13_only, no_cbc_3des, no_rsa_kex, x25519_p256_only, pq_hybrid_first): outcome negotiate, \
     hello_retry (would need a HelloRetryRequest) or fail",
);
pub const CLIENT_RESUMPTIONS: Def<ResumptionLabels> = Def::new(
    "client_resumptions",
    Counter,
    None,
    "Handshakes whose client offered to resume a session (offered: psk, TLS 1.3 pre_shared_key; ticket, a \
     non-empty TLS 1.2 session ticket), by what the server did: result resumed or full",
);
pub const SITE_HANDSHAKE_CPU: Def<SniLabels> = Def::new(
    "site_handshake_cpu",
    Counter,
    Some(Seconds),
    "On-CPU time of a traced server's timed handshakes, by the host name its client asked for (SNI): the \
     per-site share of tlsprof_handshake_cpu_seconds",
);
pub const CLIENT_FAILURES: Def<ClientFailureLabels> = Def::new(
    "client_failures",
    Counter,
    None,
    "Failed handshakes whose ClientHello was read, by the host name the client asked for (SNI), reason (as in \
     tlsprof_handshake_failures_total) and what the ClientHello lacked of what this server negotiated in its \
     successful handshakes: lacks=version (only older versions), cipher (no cipher suite), group (no key-exchange \
     group), none (all of them: the cause lies elsewhere), unknown (the server had negotiated nothing yet)",
);
pub const CLIENT_HELLOS_UNREAD: Def<ReasonLabels> = Def::new(
    "client_hellos_unread",
    Counter,
    None,
    "Connections whose ClientHello tlsprof could not read, by reason: unreadable (read in a way the capture \
     cannot follow: io_uring, several buffers), cut (longer than the capture keeps), malformed (not a \
     ClientHello), lost (its bytes were dropped)",
);

/// Every metric, in the order they are registered (and exported).
pub const ALL: &[&Spec] = &[
    &HANDSHAKES.spec,
    &HANDSHAKES_UNLABELLED.spec,
    &HANDSHAKE_CPU.spec,
    &HANDSHAKE_DURATION.spec,
    &HANDSHAKE_FAILURES.spec,
    &CONNECTIONS_WITHOUT_TLS.spec,
    &FAILED_HANDSHAKE_CPU.spec,
    &ATTACHED_PROCESSES.spec,
    &HANDSHAKE_CPU_METHOD.spec,
    &ATTACHED_PROBES.spec,
    &EVENTS_LOST.spec,
    &KERNEL_ERRORS.spec,
    &UNMATCHED_RETURNS.spec,
    &PROBE_ATTACH_FAILURES.spec,
    &AGENT_CPU.spec,
    &AGENT_RESIDENT_MEMORY.spec,
    &TCP_CONNECTIONS_ACCEPTED.spec,
    &TCP_CONNECTIONS.spec,
    &TCP_TIME_WAIT.spec,
    &TCP_TIME_WAIT_SOCKETS.spec,
    &TCP_CONNECTION_DURATION.spec,
    &REQUESTS_PER_CONNECTION.spec,
    &EXCHANGES.spec,
    &CONNECTION_PROTOCOLS.spec,
    &CLIENT_HELLOS.spec,
    &CLIENT_OFFERS.spec,
    &CLIENT_POLICY_OUTCOMES.spec,
    &CLIENT_RESUMPTIONS.spec,
    &SITE_HANDSHAKE_CPU.spec,
    &CLIENT_FAILURES.spec,
    &CLIENT_HELLOS_UNREAD.spec,
    &PROCESS_CPU.spec,
    &CPU.spec,
    &CRYPTO_CPU.spec,
    &TLS_LIBRARY_INFO.spec,
    &CPU_SAMPLES.spec,
    &MODE_INFO.spec,
    &SAMPLED_FIGURE_INFO.spec,
    &PROBE_DUTY_CYCLE.spec,
    &PROBE_HITS.spec,
    &PROBE_CPU.spec,
    &PROBE_PROGRAM.spec,
    &PROBE_HIT_COST.spec,
    &KERNEL_HOOK_INFO.spec,
    &TABLE_FULL.spec,
    &SCAN_DURATION.spec,
    &SERIES_FOLDED.spec,
    &SCRAPES_REFUSED.spec,
];

/// The metric a sample name belongs to (`tlsprof_handshakes_total` -> HANDSHAKES).
pub fn of_sample(name: &str) -> Option<&'static Spec> {
    static BY_SAMPLE: std::sync::LazyLock<std::collections::HashMap<String, &'static Spec>> =
        std::sync::LazyLock::new(|| {
            ALL.iter()
                .flat_map(|s| s.sample_names().into_iter().map(move |n| (n, *s)))
                .collect()
        });
    BY_SAMPLE.get(name).copied()
}
