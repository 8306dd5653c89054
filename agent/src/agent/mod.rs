//! `tlsprof run`: sets up, then an event loop that only dispatches: kernel events to the
//! handshake join (handshakes.rs), connection churn (ports.rs) and process tracking
//! (targets/, which asks probes/ for each process's handshake probes); the overhead budget
//! (budget.rs, duty.rs) and the CPU split (cpu/) on their clocks; a /proc scan every
//! --scan-interval.
mod budget;
pub mod duty;
mod estimate;
mod gauges;
mod handshakes;
mod health;
mod inspect;
mod memory;
mod mode;
pub mod no_probes;
mod ports;
mod probes;
mod quic_join;
mod ready;
mod recent;
mod sightings;
mod targets;
mod trap_cost;

use std::{
    path::Path,
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use anyhow::{bail, Context as _, Result};

use self::{budget::Budget, handshakes::Handshakes, health::Health, mode::Mode, ports::Ports, targets::Targets};
use crate::{
    bpf::{
        abi::decode,
        calib::HitCost,
        hooks,
        loader::Kernel,
        proc::{proc_ev, proc_notice},
        rings::Events,
        uprobes::UPROBES,
    },
    cli::RunArgs,
    cpu::{flame, Profiler},
    discovery::{files::ElfFiles, select::Selector},
    metrics::{defs, FigureLabels, HookLabels, Metrics, ModeLabels, ProbeLabels, ScanLabels},
    preflight, web,
};

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

/// Asks a running agent (in this process) to stop.
pub fn request_stop() {
    STOP.store(true, Ordering::SeqCst);
}

/// Whether SIGINT/SIGTERM arrived or a stop was asked for.
pub fn stopping() -> bool {
    STOP.load(Ordering::SeqCst)
}

fn install_signal_handlers() {
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
        unsafe { libc::signal(sig, on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t) };
    }
}

/// Figures measured in the probes' windows in the default mode (tlsprof_sampled_figure_info).
fn sampled_figures() -> [String; 5] {
    [
        defs::HANDSHAKE_CPU.family(),
        defs::HANDSHAKE_DURATION.family(),
        defs::FAILED_HANDSHAKE_CPU.sample(),
        format!("{}{{role=client}}", defs::HANDSHAKES.sample()),
        format!("{}{{category=handshake}}", defs::CPU.sample()),
    ]
}

struct Agent {
    args: RunArgs,
    metrics: Arc<Metrics>,
    kernel: Kernel,
    targets: Targets,
    ports: Ports,
    handshakes: Handshakes,
    budget: Budget,
    profiler: Profiler,
    health: Health,
}

impl Agent {
    /// Looks for processes to attach to and forgets those gone; then their ports.
    /// Each part's time goes to tlsprof_scan_duration_seconds{scan}.
    fn scan(&mut self) {
        let t = Instant::now();
        self.targets.scan(&mut self.kernel, &mut self.profiler, &self.metrics);
        self.kernel.settle_read_side();
        self.kernel.release_idle_uprobes();
        let ports = Instant::now();
        self.refresh_ports();
        self.targets.export_gauges(&self.metrics);
        for (scan, took) in [("processes", ports - t), ("ports", ports.elapsed())] {
            self.metrics
                .scan_duration
                .get_or_create(&ScanLabels { scan: scan.into() })
                .observe(took.as_secs_f64());
        }
    }

    fn refresh_ports(&mut self) {
        // their cgroups first: the ClientHellos of a watched port's next connections
        let pids: Vec<u32> = self.targets.named().map(|(pid, _)| pid).collect();
        self.kernel.watch_cgroups(&pids, self.ports.listener_cgroups());
        let traced = self.targets.named();
        let sockets = self.ports.listener_cgroups().to_vec();
        for (comm, port, kind, n) in self.ports.refresh(traced, &mut self.kernel) {
            self.handshakes.without_tls(&comm, port, kind, n);
        }
        // the servers' datagrams of a QUIC port just found, from its next handshake; the
        // cgroup of a listening socket just found, from its next connection
        if self.kernel.ports.quic_changed() || sockets != self.ports.listener_cgroups() {
            self.kernel.watch_cgroups(&pids, self.ports.listener_cgroups());
        }
        self.targets.say_ready();
    }

    /// Everything the kernel reported, each to whom it concerns.
    fn drain(&mut self) {
        self.profiler.drain();
        let Events {
            wire,
            handshakes,
            conns,
            notices,
        } = self.kernel.rings.drain();
        // Processes the kernel began tracing first (a process per connection may be gone
        // by now: named from the notice), so that their connections' events find them; then
        // wire bytes: a handshake event finds its connection's parameters; and handshakes
        // before exits: a process's last handshakes arrive before its exit.
        let (started, exits): (Vec<_>, Vec<_>) = notices
            .into_iter()
            .filter_map(|n| Some((decode(n.kind)?, n)))
            .partition(|(kind, _)| *kind != proc_ev::Exit);
        let mut refresh = false;
        let mut seq = 0u32; // the latest start read (counts wrap)
        for (kind, n) in started {
            refresh |= self.on_started(kind, &n);
            if n.seq != 0 && (seq == 0 || n.seq.wrapping_sub(seq) as i32 > 0) {
                seq = n.seq;
            }
        }
        // each examined: the kernel's reads for their sake give way to what they need
        self.kernel.reads.starts_read(seq);
        if refresh {
            self.refresh_ports(); // once for them all
        }
        let targets = &self.targets;
        let learned = self
            .ports
            .learn(&wire, |pid| targets.known_name(pid).map(str::to_string));
        if learned {
            self.refresh_ports();
        }
        let wire = self.ports.own_client_hellos(wire);
        let now = Instant::now();
        self.handshakes.on_wire(wire, &self.targets, now);
        for e in handshakes {
            self.handshakes.on_probe(e, &self.targets, now);
        }
        self.handshakes.flush(false, &self.targets, now);
        let looked = std::mem::take(&mut self.handshakes.sightings);
        if !looked.is_empty() {
            self.targets.on_sightings(looked, &mut self.kernel, &self.metrics);
        }
        for e in conns {
            self.ports.on_conn(&e);
        }
        for (_, n) in exits {
            self.targets.on_exit(n.pid, &mut self.kernel, &mut self.profiler);
            self.targets.export_gauges(&self.metrics);
        }
    }

    /// A process the kernel traces from its fork, its exec or its connections: examined
    /// now; or one that started listening. Whether the ports are to be read again.
    fn on_started(&mut self, kind: proc_ev, n: &proc_notice) -> bool {
        let name = n.name();
        let traced = match kind {
            proc_ev::Fork => {
                // its parent forks per connection, perhaps: the estimate's reads for the
                // children the probes come too late for (while the agent traces the parent:
                // it stops needing them when it goes)
                if self.targets.traced_name(n.parent).is_some() {
                    self.kernel.needs_reads(n.parent);
                }
                self.targets.on_fork(
                    n.pid,
                    n.parent,
                    &name,
                    &mut self.kernel,
                    &mut self.profiler,
                    &self.metrics,
                )
            }
            proc_ev::Exec => self
                .targets
                .on_exec(n.pid, &name, &mut self.kernel, &mut self.profiler, &self.metrics),
            proc_ev::Listen => {
                // its ports, read again below
                self.kernel.ports.listened(n.parent as u16);
                true
            }
            proc_ev::Found => self.targets.on_found(
                n.pid,
                n.parent as u16,
                &name,
                &mut self.kernel,
                &mut self.profiler,
                &self.metrics,
            ),
            proc_ev::Exit => false,
        };
        traced
    }

    /// The CPU split, from the kernel's per-process on-CPU time.
    fn split_cpu(&mut self) {
        let k = &self.kernel;
        self.profiler.tick(|pid| k.oncpu_ns(pid));
    }

    fn write_flamegraph(&self, out: &Path) -> Result<()> {
        let folded = self.profiler.folded.as_ref().context("no stacks collected")?;
        let samples: u64 = folded.stacks.values().sum();
        if samples == 0 {
            bail!(
                "no CPU samples of the selected processes in {:.0} s (idle, or not attached): no flame graph written",
                self.args.duration.unwrap_or(0.0)
            );
        }
        let title = format!(
            "tlsprof: {} ({} samples at {} Hz)",
            self.targets.names().join(", "),
            samples,
            self.args.targets.sample_hz()
        );
        let file = std::fs::File::create(out).with_context(|| format!("cannot create {}", out.display()))?;
        flame::render(folded, &title, std::io::BufWriter::new(file))
            .with_context(|| format!("writing {}", out.display()))?;
        log::info!(
            "wrote {} ({samples} samples, {} stacks)",
            out.display(),
            folded.stacks.len()
        );
        Ok(())
    }
}

/// Exports what is known from the start: the mode, the sampled figures, the cost of a probe
/// hit, the hook serving each kernel capability, and every probe at zero (a capability's
/// first program at one where nothing serves it), so that dashboards and alerts see the
/// series and rate() sees the first failure.
fn export_setup(m: &Metrics, args: &RunArgs, mode: Mode, k: &Kernel, hit_cost: Option<HitCost>) {
    m.mode_info
        .get_or_create(&ModeLabels {
            mode: mode.label().into(),
            overhead_budget: if mode.budgeted() {
                format!("{}", args.overhead_budget)
            } else {
                "none".into()
            },
        })
        .set(1);
    if mode.budgeted() {
        for figure in sampled_figures() {
            m.sampled_figures.get_or_create(&FigureLabels { figure }).set(1);
        }
    }
    if let Some(c) = hit_cost {
        for (probe, v) in [
            ("uprobe", c.stepped),
            ("uprobe_emulated", c.emulated),
            ("uretprobe", c.ret),
        ] {
            m.probe_hit_cost
                .get_or_create(&ProbeLabels { probe: probe.into() })
                .set(v);
        }
    }
    let first_programs = hooks::ALL
        .iter()
        .filter(|c| !c.required)
        .map(|c| c.hooks[0].programs[0].0);
    for program in UPROBES.iter().copied().chain(first_programs) {
        let _ = m.attach_failures.get_or_create(&ProbeLabels { probe: program.into() });
    }
    for (c, s) in &k.served.capabilities {
        if matches!(s, hooks::Serving::Unserved(_)) {
            let probe = c.hooks[0].programs[0].0.into();
            m.attach_failures.get_or_create(&ProbeLabels { probe }).inc();
        }
    }
    crate::bounds::export_zero(m);
    for (capability, hook) in k.served.info() {
        m.kernel_hooks
            .get_or_create(&HookLabels {
                capability: capability.into(),
                hook: hook.into(),
            })
            .set(1);
    }
}

pub fn run(mut args: RunArgs) -> Result<()> {
    hooks::check_avoid(&args.avoid_hooks)?;
    let web = match &args.web_config_file {
        Some(path) => web::WebConfig::load(path)?,
        None => web::WebConfig::none(),
    };
    preflight::privileges()?;
    let btf = preflight::btf()?;
    let listener = match (&args.flamegraph, &args.metrics_out) {
        (None, None) => Some(preflight::listen(args.listen)?),
        _ => None,
    };
    inspect::check_pids(&args.targets.pids)?;
    preflight::raise_fd_limit();
    preflight::bpf_stats();

    let sample_hz = args.targets.sample_hz();
    // What the kernel offers first, then the mode made of it and the flags, then the kernel
    // configured for that mode.
    let mut kernel = Kernel::load(
        &btf,
        sample_hz,
        !Selector::new(&args.targets).explicit(),
        &args.avoid_hooks,
        !args.no_client_hellos,
    )?;
    let mode = Mode::new(args.exact, kernel.served.sends_captured());
    kernel.configure(mode.per_connection_reads(), &btf)?;
    // The kernel's types are needed no further (every program is loaded and relocated):
    // their parse (~9 MiB) would stay resident.
    drop(btf);
    kernel.select_comms(&args.targets.comms)?;
    if mode == Mode::Exact(mode::ExactWhy::NoWireCapture) {
        log::warn!(
            "without a hook on the server's sends (send_capture) the handshakes can only be counted by the handshake probes: they stay \
             attached all the time and --overhead-budget is not applied"
        );
    }
    let hit_cost = kernel
        .calibrate()
        .inspect_err(|e| log::debug!("cannot measure the cost of a probe hit here: {e:#}"))
        .ok();
    let metrics = Arc::new(Metrics::with_max_series(args.max_series));
    // What is known of the files processes map: one cache for the targets and the CPU split.
    let files = ElfFiles::new(args.targets.debug_dirs.clone(), args.flamegraph.is_some());
    let profiler = Profiler::new(
        metrics.clone(),
        kernel.rings.take_samples().context("cpu_samples taken")?,
        files.clone(),
        args.flamegraph.is_some(),
        sample_hz > 0,
    );
    export_setup(&metrics, &args, mode, &kernel, hit_cost);
    if let Some(listener) = listener {
        let scheme = if web.tls.is_some() { "https" } else { "http" };
        let auth = if web.users.is_empty() { "" } else { " (basic auth)" };
        web::serve(listener, metrics.clone(), web)?;
        log::info!("serving metrics on {scheme}://{}/metrics{auth}", args.listen);
    }
    install_signal_handlers();

    let metrics_out = args.metrics_out.take();
    let mut agent = Agent {
        targets: Targets::new(&args, mode, files),
        ports: Ports::new(metrics.clone()),
        handshakes: Handshakes::new(metrics.clone(), mode),
        budget: Budget::new(hit_cost),
        health: Health::default(),
        metrics,
        kernel,
        profiler,
        args,
    };
    agent.scan();
    agent.health.sync_self(&agent.metrics);
    if let Some(out) = metrics_out {
        // `top` and `report` read the metrics from here on: the first scan has attached.
        let _ = out.send(agent.metrics.clone());
    }
    let result = event_loop(&mut agent);
    agent.targets.unready();
    agent.targets.detach_everything(&mut agent.kernel);
    result?;

    agent.drain();
    agent.handshakes.flush(true, &agent.targets, Instant::now());
    agent.split_cpu();
    agent.ports.churn.dump_now();
    agent.refresh_ports();
    agent.ports.churn.finish();
    agent.health.sync_kernel(&mut agent.kernel, &agent.metrics);
    if let Some(out) = agent.args.flamegraph.clone() {
        return agent.write_flamegraph(&out);
    }
    if !agent.args.quiet {
        print!(
            "{}",
            crate::views::summary::table(&crate::views::model::Figures::of(&agent.metrics))
        );
    }
    Ok(())
}

/// How often the ring buffers are drained at the latest. The kernel wakes the agent only once
/// a buffer is a quarter full (bpf/common.bpf.h RB_LAZY), and then at every event it submits
/// until the agent has drained it: each such wakeup an interrupt the server's CPU sends
/// itself (on a VM, a write to the APIC that exits to the hypervisor). Drained every 50 ms,
/// the largest buffer (the send capture's and ClientHellos', 2 MiB) stays under its quarter
/// up to ~7,000 new connections a second (~1.5 KiB of events each); at 200 ms it passed it
/// at 1,700 a second, and those interrupts cost an nginx worker 0.10-0.15% of its CPU.
const DRAIN_EVERY: Duration = Duration::from_millis(50);

/// Until SIGINT/SIGTERM or --duration: waits for the kernel's events and dispatches them,
/// and runs each periodic task when it is due.
fn event_loop(agent: &mut Agent) -> Result<()> {
    let every = agent.args.scan_every();
    let deadline = agent
        .args
        .duration
        .map(|s| Instant::now() + Duration::from_secs_f64(s.max(0.0)));
    let mut next_scan = Instant::now() + every;
    let mut next_split = Instant::now() + Duration::from_secs(1);
    let mut names_aged = Instant::now();
    let mut next_duty: Option<Instant> = None;
    let mut memory = memory::Memory::new(Instant::now());
    while !stopping() {
        if let Some(msg) = agent.targets.take_fatal() {
            bail!("a probe failed to attach (--strict): {msg}");
        }
        let now = Instant::now();
        if deadline.is_some_and(|d| now >= d) {
            break;
        }
        let mut until = next_scan.saturating_duration_since(now).min(DRAIN_EVERY);
        if let Some(d) = next_duty {
            until = until.min(d.saturating_duration_since(now));
        }
        agent
            .kernel
            .rings
            .wait(until.min(next_split.saturating_duration_since(now)));
        agent.drain();
        next_duty = agent.budget.tick(
            &mut agent.targets,
            &mut agent.kernel,
            &mut agent.profiler,
            &agent.metrics,
        );
        if Instant::now() >= next_split {
            agent.split_cpu();
            next_split = Instant::now() + Duration::from_secs(1);
        }
        if Instant::now() >= next_scan {
            agent.scan();
            agent.health.sync_kernel(&mut agent.kernel, &agent.metrics);
            agent.health.sync_self(&agent.metrics);
            agent.handshakes.expire(&agent.targets, Instant::now());
            memory.tick(Instant::now(), || {
                let mut t = agent.handshakes.footprint();
                t.extend(agent.ports.churn.footprint());
                t
            });
            next_scan = Instant::now() + every;
            if names_aged.elapsed() > Duration::from_secs(60) {
                agent.targets.age_recent_exits();
                agent.ports.age_names();
                names_aged = Instant::now();
            }
        }
    }
    Ok(())
}
