//! tlsprof: an eBPF-based, server-side TLS performance profiler.
mod agent;
mod calibrate;
mod conns;
mod cpu;
mod discovery;
mod duty;
mod elf;
mod http;
mod live;
mod metrics;
mod preflight;
mod probes;
mod report;
mod snapshot;
mod sockdiag;
mod symbols;
mod tls;
mod top;
mod wire;

use std::{net::SocketAddr, path::PathBuf, process::ExitCode, time::Duration};

use clap::{Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(
    name = "tlsprof",
    version,
    about = "What does TLS cost your server? eBPF TLS profiler"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Attach to TLS server processes and serve Prometheus metrics.
    Run(RunArgs),
    /// Sample the selected processes for a while and write an SVG flame graph, TLS frames in red.
    Flamegraph(FlameArgs),
    /// A live view, refreshed every second, of what TLS costs each server process (q quits).
    Top(top::TopArgs),
    /// Observe for a while, then write what to change, with the numbers and the savings.
    Report(report::ReportArgs),
}

#[derive(clap::Args, Debug, Clone)]
#[command(group(clap::ArgGroup::new("target").required(true).multiple(true).args(["pids", "comms"])))]
pub struct FlameArgs {
    /// Sample this process and the processes it forks (repeatable).
    #[arg(long = "pid", value_name = "PID")]
    pub pids: Vec<u32>,
    /// Sample every process with this command name (repeatable).
    #[arg(long = "comm", value_name = "NAME")]
    pub comms: Vec<String>,
    /// How long to sample.
    #[arg(long, default_value_t = 10.0, value_name = "SECONDS")]
    pub seconds: f64,
    /// Where to write the SVG.
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: PathBuf,
    /// Samples per second on each CPU.
    #[arg(long, default_value_t = 99, value_name = "HZ")]
    pub sample_hz: u64,
    /// Directories holding debug files by build id (<DIR>/.build-id/xx/yyyy.debug) (repeatable).
    #[arg(long = "debug-dir", value_name = "DIR", default_value = "/usr/lib/debug")]
    pub debug_dirs: Vec<PathBuf>,
    /// Log what tlsprof attaches to and why.
    #[arg(short, long)]
    pub verbose: bool,
}

#[derive(clap::Args, Debug, Clone)]
pub struct RunArgs {
    /// Trace this process and the processes it forks (repeatable).
    #[arg(long = "pid", value_name = "PID")]
    pub pids: Vec<u32>,
    /// Trace every process with this command name, as in /proc/PID/comm (repeatable).
    #[arg(long = "comm", value_name = "NAME")]
    pub comms: Vec<String>,
    /// Address of the /metrics endpoint.
    #[arg(long, default_value = "127.0.0.1:9435", value_name = "ADDR")]
    pub listen: SocketAddr,
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
    /// Keep the handshake probes attached all the time: every handshake timed (CPU and
    /// duration), counted by the probes. Costs one uprobe trap per handshake call (~5% of a
    /// full handshake on a VM). Default: the probes come and go under --overhead-budget and
    /// server handshakes are counted from what the server sends.
    #[arg(long)]
    pub exact: bool,
    /// Share of one CPU that the handshake probes may cost each traced process, averaged
    /// over 10 s cycles (e.g. 0.5%, 2%): they stay attached while under it and are detached
    /// for the rest of the cycle when not. Ignored with --exact.
    #[arg(long, default_value = "0.5%", value_name = "PERCENT", value_parser = duty::parse_budget)]
    pub overhead_budget: f64,
    /// Which OpenSSL functions to hook: the handshake state machine (auto) or only the
    /// exported SSL_do_handshake/SSL_accept/SSL_connect (api; misses handshakes driven
    /// from SSL_read, as node's).
    #[arg(long, value_enum, default_value = "auto")]
    pub hooks: elf::HookMode,
    /// CPU samples per second on each CPU, for the split of each process's CPU time
    /// (0: CPU attribution off, no sampling and no per-process CPU accounting).
    #[arg(long, default_value_t = 49, value_name = "HZ")]
    pub sample_hz: u64,
    /// Directories holding debug files by build id (<DIR>/.build-id/xx/yyyy.debug), for
    /// crypto primitives in stripped libraries (repeatable).
    #[arg(long = "debug-dir", value_name = "DIR", default_value = "/usr/lib/debug")]
    pub debug_dirs: Vec<PathBuf>,
    /// Log what tlsprof attaches to and why.
    #[arg(short, long)]
    pub verbose: bool,
    /// Set by `tlsprof flamegraph`: collect stacks and write them here instead of serving metrics.
    #[arg(skip)]
    pub flamegraph: Option<PathBuf>,
    /// Set by `tlsprof top` and `tlsprof report`: no HTTP endpoint; the metrics are handed
    /// over here once the first scan has attached.
    #[arg(skip)]
    pub metrics_out: Option<std::sync::mpsc::Sender<std::sync::Arc<metrics::Metrics>>>,
}

impl RunArgs {
    /// The agent run by another command (flamegraph, top, report): no /metrics endpoint
    /// of its own, no summary, a scan every second; the caller sets what it needs.
    pub fn embedded(pids: Vec<u32>, comms: Vec<String>, sample_hz: u64, debug_dirs: Vec<PathBuf>) -> Self {
        RunArgs {
            pids,
            comms,
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            scan_interval: 1.0,
            duration: None,
            quiet: true,
            strict: false,
            exact: false,
            overhead_budget: 0.005,
            hooks: elf::HookMode::Auto,
            sample_hz,
            debug_dirs,
            verbose: false,
            flamegraph: None,
            metrics_out: None,
        }
    }

    pub fn scan_every(&self) -> Duration {
        Duration::from_secs_f64(self.scan_interval.clamp(0.1, 3600.0))
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Run(args) => agent::run(args),
        Command::Flamegraph(f) => agent::run(RunArgs {
            duration: Some(f.seconds),
            verbose: f.verbose,
            flamegraph: Some(f.output),
            ..RunArgs::embedded(f.pids, f.comms, f.sample_hz.max(1), f.debug_dirs)
        }),
        Command::Top(t) => top::run(t),
        Command::Report(r) => report::run(r),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // One line: the error and its causes, outermost first.
            let msg = e.chain().map(|c| c.to_string()).collect::<Vec<_>>().join(": ");
            eprintln!("tlsprof: error: {msg}");
            ExitCode::from(1)
        }
    }
}
