//! tlsprof: an eBPF-based, server-side TLS performance profiler.
mod agent;
mod conns;
mod discovery;
mod elf;
mod http;
mod metrics;
mod preflight;
mod probes;
mod sockdiag;

use std::{net::SocketAddr, process::ExitCode, time::Duration};

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
    /// Which OpenSSL functions to hook: the handshake state machine (auto) or only the
    /// exported SSL_do_handshake/SSL_accept/SSL_connect (api; misses handshakes driven
    /// from SSL_read, as node's).
    #[arg(long, value_enum, default_value = "auto")]
    pub hooks: elf::HookMode,
    /// Log what tlsprof attaches to and why.
    #[arg(short, long)]
    pub verbose: bool,
}

impl RunArgs {
    pub fn scan_every(&self) -> Duration {
        Duration::from_secs_f64(self.scan_interval.clamp(0.1, 3600.0))
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Run(args) => agent::run(args),
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
