//! The command line of `tlsprof run` and `tlsprof flamegraph`, and the target flags every
//! command that attaches shares (`top` and `report` add theirs in views/).
use std::{net::SocketAddr, path::PathBuf, time::Duration};

use crate::{agent::duty, discovery::handshake::HookMode};

/// Which processes to attach to, and how to sample them: the same flags for every command.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct TargetArgs {
    /// This process and the processes it forks (repeatable).
    #[arg(long = "pid", value_name = "PID")]
    pub pids: Vec<u32>,
    /// Every process with this command name, as in /proc/PID/comm (repeatable).
    #[arg(long = "comm", value_name = "NAME")]
    pub comms: Vec<String>,
    /// CPU samples per second on each CPU, for the split of each process's CPU time
    /// (0: CPU attribution off, no sampling and no per-process CPU accounting)
    /// [default: 49; flamegraph: 99].
    #[arg(long, value_name = "HZ")]
    pub sample_hz: Option<u64>,
    /// Directories holding debug files by build id (<DIR>/.build-id/xx/yyyy.debug), for
    /// crypto primitives in stripped libraries (repeatable).
    #[arg(long = "debug-dir", value_name = "DIR", default_value = "/usr/lib/debug")]
    pub debug_dirs: Vec<PathBuf>,
}

/// Samples per second unless --sample-hz says otherwise.
pub const SAMPLE_HZ: u64 = 49;

impl TargetArgs {
    pub fn sample_hz(&self) -> u64 {
        self.sample_hz.unwrap_or(SAMPLE_HZ)
    }
}

#[derive(clap::Args, Debug, Clone)]
#[command(group(clap::ArgGroup::new("target").required(true).multiple(true).args(["pids", "comms"])))]
pub struct FlameArgs {
    #[command(flatten)]
    pub targets: TargetArgs,
    /// How long to sample.
    #[arg(long, default_value_t = 10.0, value_name = "SECONDS")]
    pub seconds: f64,
    /// Where to write the SVG.
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: PathBuf,
    /// Log what tlsprof attaches to and why.
    #[arg(short, long)]
    pub verbose: bool,
}

#[derive(clap::Args, Debug, Clone)]
pub struct RunArgs {
    #[command(flatten)]
    pub targets: TargetArgs,
    /// Address of the /metrics endpoint.
    #[arg(long, default_value = "127.0.0.1:9435", value_name = "ADDR")]
    pub listen: SocketAddr,
    /// TLS and basic authentication of the /metrics endpoint: a Prometheus exporter-toolkit
    /// web configuration file (tls_server_config, basic_auth_users, http_server_config), as
    /// node_exporter's --web.config.file reads.
    #[arg(long = "web.config.file", value_name = "FILE")]
    pub web_config_file: Option<PathBuf>,
    /// Series per metric at most, for the metrics whose labels other local users control
    /// (comm: any process can rename itself; port; library): past it, new values are
    /// counted under "other" (tlsprof_series_folded_total says how often).
    #[arg(long, default_value_t = crate::metrics::capped::DEFAULT_MAX_SERIES, value_name = "N")]
    pub max_series: usize,
    /// Seconds between scans of /proc for new processes and late-loaded TLS libraries.
    #[arg(long, default_value_t = 2.0, value_name = "SECONDS")]
    pub scan_interval: f64,
    /// Stop after this many seconds (default: run until SIGINT/SIGTERM).
    #[arg(long, value_name = "SECONDS")]
    pub duration: Option<f64>,
    /// Do not print the summary table at exit.
    #[arg(long)]
    pub quiet: bool,
    /// Exit with an error when a probe fails to attach (default: log and count it).
    #[arg(long)]
    pub strict: bool,
    /// Keep the handshake probes attached all the time: every handshake they see timed (CPU
    /// and duration); server handshakes are still counted from what the server sends (by the
    /// probes only where the kernel's sends cannot be captured). Costs one uprobe trap per
    /// handshake call: 4.32% of a server's CPU under new connections, against 1.85% by
    /// default (docs/how-it-works.md). Default: the probes come and go under
    /// --overhead-budget.
    #[arg(long)]
    pub exact: bool,
    /// Share of each traced process's own CPU time that its handshake probes may cost, in
    /// every 2 s cycle (e.g. 0.5%, 2%; a process on less than half a CPU counts as half a
    /// CPU): they stay attached while under it and are detached for the rest of the
    /// cycle when not. Ignored with --exact.
    #[arg(long, default_value = "0.5%", value_name = "PERCENT", value_parser = duty::parse_budget)]
    pub overhead_budget: f64,
    /// Which OpenSSL functions to hook: the handshake state machine (auto) or only the
    /// exported SSL_do_handshake/SSL_accept/SSL_connect (api; misses handshakes driven
    /// from SSL_read, as node's).
    #[arg(long, value_enum, default_value = "auto")]
    pub hooks: HookMode,
    /// Attach no handshake probes: every traced server's handshake CPU is the kernel's
    /// estimate (its thread's on-CPU time between reading the client's handshake messages and
    /// sending its answer), as for stacks tlsprof cannot probe; handshakes are still counted
    /// and labelled from what the server sends. To compare the estimate with the probes.
    #[arg(long, conflicts_with = "exact")]
    pub no_handshake_probes: bool,
    /// Do not read clients' ClientHellos: no client metrics (offers, policies, returning
    /// clients), and none of the capture's cost: a program per packet of the traced
    /// processes' sockets, or, where it reads from the server's reads, at every socket read
    /// of the machine (docs/how-it-works.md).
    #[arg(long)]
    pub no_client_hellos: bool,
    /// Write the processes attached so far to this file ("PID COMM" per line), replaced
    /// whole each time the set changes, once their listening ports are watched too: it
    /// appears after the first scan. For scripts and readiness probes to wait on.
    #[arg(long, value_name = "FILE")]
    pub ready_file: Option<PathBuf>,
    /// Kernel hooks not to use, by a part of their name as `-v` and tlsprof_kernel_hook_info
    /// give it (e.g. `fentry`, `kprobe`, `tp_btf/inet_sock_set_state`), or `bpf_loop` (walk
    /// with a bounded loop), `sk_storage` (keep connections in a hash) or `shared_uprobes`
    /// (a uprobe of its own per process, as without tracefs): the next hook of the
    /// capability's chain serves it. For a kernel that mishandles a hook, and to test the
    /// fallbacks (repeatable).
    #[arg(long = "avoid-hook", value_name = "NAME")]
    pub avoid_hooks: Vec<String>,
    /// Log what tlsprof attaches to and why.
    #[arg(short, long)]
    pub verbose: bool,
    /// Set by `tlsprof flamegraph`: collect stacks and write them here instead of serving metrics.
    #[arg(skip)]
    pub flamegraph: Option<PathBuf>,
    /// Set by `tlsprof top` and `tlsprof report`: no HTTP endpoint; the metrics are handed
    /// over here once the first scan has attached.
    #[arg(skip)]
    pub metrics_out: Option<std::sync::mpsc::Sender<std::sync::Arc<crate::metrics::Metrics>>>,
}

impl RunArgs {
    /// The agent run by another command (flamegraph, top, report): no /metrics endpoint
    /// of its own, no summary, a scan every second; the caller sets what it needs.
    pub fn embedded(targets: TargetArgs) -> Self {
        RunArgs {
            targets,
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            web_config_file: None,
            max_series: crate::metrics::capped::DEFAULT_MAX_SERIES,
            scan_interval: 1.0,
            duration: None,
            quiet: true,
            strict: false,
            exact: false,
            overhead_budget: 0.005,
            hooks: HookMode::Auto,
            no_handshake_probes: false,
            no_client_hellos: false,
            ready_file: None,
            avoid_hooks: Vec::new(),
            verbose: false,
            flamegraph: None,
            metrics_out: None,
        }
    }

    pub fn scan_every(&self) -> Duration {
        Duration::from_secs_f64(self.scan_interval.clamp(0.1, 3600.0))
    }
}
