//! The figures `top` and `report` watch: from an agent started in this process (attached
//! like `tlsprof run`, without an HTTP endpoint) or from a running agent's /metrics
//! (remote.rs).
use std::{
    sync::{mpsc, Arc},
    thread::JoinHandle,
    time::Duration,
};

use anyhow::{anyhow, Context as _, Result};

use super::{
    remote::{Remote, RemoteArgs, Source},
    snapshot::Snapshot,
};
use crate::{
    agent,
    cli::{RunArgs, TargetArgs},
    metrics::Metrics,
};

#[derive(clap::Args, Debug, Clone)]
pub struct ViewArgs {
    #[command(flatten)]
    pub targets: TargetArgs,
    #[command(flatten)]
    pub remote: RemoteArgs,
    /// Log what tlsprof attaches to and why (on stderr once the view is down).
    #[arg(short, long)]
    pub verbose: bool,
}

pub struct Live {
    pub source: Source,
    /// Process names to show (empty: all).
    pub comms: Vec<String>,
    agent: Option<JoinHandle<Result<()>>>,
}

impl Live {
    pub fn start(args: &ViewArgs) -> Result<Live> {
        if let Some(url) = &args.remote.url {
            let mut comms = args.targets.comms.clone();
            for pid in &args.targets.pids {
                let comm = std::fs::read_to_string(format!("/proc/{pid}/comm"))
                    .with_context(|| format!("no process with pid {pid}"))?;
                comms.push(comm.trim().to_string());
            }
            let source = Source::Remote(Remote::new(url, &args.remote)?);
            source.fetch()?;
            return Ok(Live {
                source,
                comms,
                agent: None,
            });
        }
        let (tx, rx) = mpsc::channel::<Arc<Metrics>>();
        let run = RunArgs {
            metrics_out: Some(tx),
            ..RunArgs::embedded(args.targets.clone())
        };
        let handle = std::thread::Builder::new()
            .name("tlsprof-agent".into())
            .spawn(move || agent::run(run))
            .context("cannot start the agent thread")?;
        match rx.recv() {
            Ok(metrics) => Ok(Live {
                source: Source::Local(metrics),
                comms: Vec::new(),
                agent: Some(handle),
            }),
            // The agent ended before attaching: its error is the answer.
            Err(_) => Err(match handle.join() {
                Ok(Err(e)) => e,
                Ok(Ok(())) => anyhow!("the agent stopped before attaching"),
                Err(_) => anyhow!("the agent thread panicked"),
            }),
        }
    }

    /// The metrics now. An agent that ended on SIGINT/SIGTERM has detached, but its
    /// metrics are still here to read; one that failed gives its error.
    pub fn snapshot(&mut self) -> Result<Snapshot> {
        if self.agent.as_ref().is_some_and(|h| h.is_finished()) {
            let h = self.agent.take().expect("checked");
            match h.join() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => return Err(e),
                Err(_) => return Err(anyhow!("the agent thread panicked")),
            }
        }
        Snapshot::take(&self.source)
    }

    /// Sleeps up to `d`, returning early (false) when SIGINT/SIGTERM arrived.
    pub fn sleep(&self, d: Duration) -> bool {
        self.sleep_unless(d, || false)
    }

    /// Sleeps up to `d`, returning early (false) when SIGINT/SIGTERM arrived or `done()`.
    pub fn sleep_unless(&self, d: Duration, done: impl Fn() -> bool) -> bool {
        let until = std::time::Instant::now() + d;
        while std::time::Instant::now() < until {
            if agent::stopping() || done() {
                return false;
            }
            std::thread::sleep(Duration::from_millis(50).min(until - std::time::Instant::now()));
        }
        !(agent::stopping() || done())
    }

    /// Stops the agent started here (when there is one): it reads the events still queued
    /// and counts the handshakes and connections it still holds, then detaches. Its metrics
    /// stay readable.
    pub fn finish(&mut self) -> Result<()> {
        match self.agent.take() {
            Some(h) => {
                agent::request_stop();
                match h.join() {
                    Ok(r) => r,
                    Err(_) => Err(anyhow!("the agent thread panicked")),
                }
            }
            None => Ok(()),
        }
    }

    /// Detaches the probes (when attached from here) and waits for the agent to end.
    pub fn stop(mut self) -> Result<()> {
        self.finish()
    }
}

impl Drop for Live {
    fn drop(&mut self) {
        if let Some(h) = self.agent.take() {
            agent::request_stop();
            let _ = h.join();
        }
    }
}
