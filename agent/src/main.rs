//! tlsprof: an eBPF-based, server-side TLS performance profiler. docs/architecture.md
//! maps each step to its folder.
mod agent;
mod alloc;
mod bounds;
mod bpf;
mod cli;
mod clients;
mod clock;
mod conns;
mod cpu;
mod discovery;
mod hostcost;
mod logger;
mod metrics;
mod preflight;
#[cfg(test)]
mod testing;
mod views;
mod web;
mod wire;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::{
    cli::{FlameArgs, RunArgs, TargetArgs},
    views::{compare, report, top},
};

/// `tlsprof --version`: which release, which commit, built for which machine (build.rs).
const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("TLSPROF_COMMIT"),
    ", ",
    env!("TLSPROF_TARGET"),
    ")"
);

#[derive(Parser, Debug)]
#[command(
    name = "tlsprof",
    version = VERSION,
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
    /// What a configuration change did: two reports' JSON, before and after, figure by
    /// figure, with the noise said.
    Compare(compare::CompareArgs),
}

/// Flame graphs sample more often than the CPU split does.
const FLAME_SAMPLE_HZ: u64 = 99;

fn main() -> ExitCode {
    alloc::configure();
    let cli = Cli::parse();
    logger::init(match &cli.command {
        Command::Run(a) => a.verbose,
        Command::Flamegraph(f) => f.verbose,
        Command::Top(t) => t.view.verbose,
        Command::Report(r) => r.view.verbose,
        Command::Compare(_) => false,
    });
    let result = match cli.command {
        Command::Run(args) => agent::run(args),
        Command::Flamegraph(f) => agent::run(RunArgs {
            duration: Some(f.seconds),
            verbose: f.verbose,
            flamegraph: Some(f.output),
            ..RunArgs::embedded(TargetArgs {
                sample_hz: Some(f.targets.sample_hz.unwrap_or(FLAME_SAMPLE_HZ).max(1)),
                ..f.targets
            })
        }),
        Command::Top(t) => top::run(t),
        Command::Report(r) => report::run(r),
        Command::Compare(c) => compare::run(c),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // One line: the error and its causes, outermost first.
            let msg = e.chain().map(|c| c.to_string()).collect::<Vec<_>>().join(": ");
            log::error!("{msg}");
            ExitCode::from(1)
        }
    }
}
