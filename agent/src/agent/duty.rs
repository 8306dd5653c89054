//! The overhead budget: tlsprof's handshake probes (uprobes, a trap into the kernel per hit)
//! are attached to a process only as long as their measured cost stays within the budget.
//!
//! Each process runs in cycles of `CYCLE`. At the start of a cycle its probes are attached;
//! while they are, the agent reads the process's hit counters (hs_hits) and turns them into
//! CPU time with the cost of one hit measured on this host at start (`calibrate`). Once the
//! probes have cost what the budget allows for the whole cycle (budget × CYCLE of CPU time),
//! they are detached until the next cycle. Under light load they stay attached all along
//! (duty cycle 1); the busier the process, the shorter the window.
use std::time::{Duration, Instant};

/// One duty cycle.
pub const CYCLE: Duration = Duration::from_secs(10);
/// Rate estimates are taken over at least this long.
const MIN_SPAN: Duration = Duration::from_millis(150);

/// Parses `--overhead-budget`: a share of one CPU, as "1%", "0.5 %" or "1" (percent).
pub fn parse_budget(s: &str) -> Result<f64, String> {
    let t = s.trim();
    let num = t.strip_suffix('%').unwrap_or(t).trim();
    let pct: f64 = num
        .parse()
        .map_err(|_| format!("{s:?} is not a percentage (e.g. 1%)"))?;
    if !(pct > 0.0 && pct <= 100.0) {
        return Err(format!(
            "{s:?}: the budget must be above 0% and at most 100% of one CPU"
        ));
    }
    Ok(pct / 100.0)
}

/// What to do with a process's probes now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Attach,
    Detach,
    Keep,
}

/// The duty cycle of one process's probes. The budget is kept in CPU time: what the probes
/// cost (hits x cost, counted by the kernel, also while they are being detached) may reach
/// budget x CYCLE per cycle; a cycle that spent more leaves the difference as a debt to
/// the next.
#[derive(Debug, Clone)]
pub struct Duty {
    /// CPU seconds per second the probes may cost (a share of one CPU).
    budget: f64,
    cycle_start: Instant,
    /// Probe CPU total at the start of this cycle.
    cycle_cpu0: f64,
    /// Probe CPU this cycle may spend (budget x CYCLE, less the last cycle's overspend).
    allowance: f64,
    /// Attached since, or None while detached.
    on_since: Option<Instant>,
    /// Time attached earlier in this cycle (before on_since).
    on_before: Duration,
    /// Probe CPU per second while attached (smoothed), None until measured.
    rate: Option<f64>,
    /// Where the last rate measurement started: time and the probe CPU total then.
    mark: (Instant, f64),
    /// How long detaching takes (the probes still cost until it is done), smoothed.
    detach_latency: Duration,
    /// Share of the last complete cycle the probes were attached (None before the first).
    pub last_duty: Option<f64>,
}

impl Duty {
    /// A process found now: its probes are attached at once (the caller does it).
    pub fn new(budget: f64, now: Instant, cpu_total: f64) -> Self {
        Self {
            budget,
            cycle_start: now,
            cycle_cpu0: cpu_total,
            allowance: budget * CYCLE.as_secs_f64(),
            on_since: Some(now),
            on_before: Duration::ZERO,
            rate: None,
            mark: (now, cpu_total),
            detach_latency: Duration::from_millis(200),
            last_duty: None,
        }
    }

    pub fn attached(&self) -> bool {
        self.on_since.is_some()
    }

    /// Probe CPU per second while attached, as last measured (None before).
    pub fn rate(&self) -> Option<f64> {
        self.rate
    }

    /// A detach took this long (from the decision until the kernel had removed them all).
    pub fn detached_after(&mut self, took: Duration) {
        self.detach_latency = (self.detach_latency + took) / 2;
    }

    fn on_so_far(&self, now: Instant) -> Duration {
        self.on_before
            + self
                .on_since
                .map_or(Duration::ZERO, |s| now.saturating_duration_since(s))
    }

    /// Probe CPU still to spend before detaching: what the allowance leaves, less what
    /// the probes will cost while they are being detached.
    fn left(&self, cpu_total: f64) -> f64 {
        let spent = cpu_total - self.cycle_cpu0;
        let lag = self.rate.unwrap_or(0.0) * self.detach_latency.as_secs_f64();
        self.allowance - spent - lag
    }

    /// Takes the process's probe CPU total (seconds, from its hit counters) at `now` and
    /// says whether to attach or detach its probes.
    pub fn step(&mut self, now: Instant, cpu_total: f64) -> Action {
        if self.attached() {
            let (t0, c0) = self.mark;
            let span = now.saturating_duration_since(t0);
            if span >= MIN_SPAN {
                let r = ((cpu_total - c0) / span.as_secs_f64()).max(0.0);
                self.rate = Some(self.rate.map_or(r, |old| 0.5 * old + 0.5 * r));
                self.mark = (now, cpu_total);
            }
        }
        if now.saturating_duration_since(self.cycle_start) >= CYCLE {
            let span = now.saturating_duration_since(self.cycle_start);
            self.last_duty = Some(self.on_so_far(now).min(span).as_secs_f64() / span.as_secs_f64());
            let per_cycle = self.budget * CYCLE.as_secs_f64();
            let overspent = (cpu_total - self.cycle_cpu0 - self.allowance).max(0.0);
            // a debt is paid over the next cycles, never more than one cycle's worth at once
            self.allowance = per_cycle - overspent.min(per_cycle);
            self.cycle_start = now;
            self.cycle_cpu0 = cpu_total;
            self.on_before = Duration::ZERO;
            if self.attached() {
                self.on_since = Some(now);
            } else if self.left(cpu_total) > 0.0 {
                self.on_since = Some(now);
                self.mark = (now, cpu_total);
                return Action::Attach;
            }
        }
        // Light load stays attached: the probes cannot spend the allowance in a cycle.
        let light = self.rate.is_some_and(|r| r * CYCLE.as_secs_f64() <= self.allowance);
        if self.attached() && !light && self.rate.is_some() && self.left(cpu_total) <= 0.0 {
            self.on_before = self.on_so_far(now);
            self.on_since = None;
            return Action::Detach;
        }
        Action::Keep
    }

    /// The duty cycle to report: the last complete cycle's, or the current one's so far.
    pub fn duty(&self, now: Instant) -> f64 {
        if let Some(d) = self.last_duty {
            return d;
        }
        let span = now.saturating_duration_since(self.cycle_start);
        if span.is_zero() {
            return 1.0;
        }
        (self.on_so_far(now).min(span).as_secs_f64() / span.as_secs_f64()).min(1.0)
    }

    /// When `step` should run next at the latest: when the allowance runs out at the
    /// measured rate, or the start of the next cycle.
    pub fn next_step(&self, cpu_total: f64) -> Instant {
        let next_cycle = self.cycle_start + CYCLE;
        match (self.on_since, self.rate) {
            (Some(_), Some(r)) if r > 0.0 => {
                let secs = (self.left(cpu_total) / r).clamp(0.0, CYCLE.as_secs_f64());
                (Instant::now() + Duration::from_secs_f64(secs)).min(next_cycle)
            }
            _ => next_cycle,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn budgets() {
        assert_eq!(parse_budget("1%"), Ok(0.01));
        assert_eq!(parse_budget(" 0.5 % "), Ok(0.005));
        assert_eq!(parse_budget("2"), Ok(0.02));
        assert!(parse_budget("0%").is_err());
        assert!(parse_budget("150%").is_err());
        assert!(parse_budget("a lot").is_err());
    }

    /// Drives a Duty with probes that cost `rate` CPU seconds per second while attached,
    /// for `secs`, stepping every 100 ms; returns the share of time attached.
    fn simulate(budget: f64, rate: f64, secs: u64) -> (f64, Duty) {
        let t0 = Instant::now();
        let mut d = Duty::new(budget, t0, 0.0);
        for _ in 0..20 {
            d.detached_after(Duration::ZERO); // detaching takes no time here
        }
        let (mut cpu, mut on, mut attached) = (0.0, Duration::ZERO, true);
        let step = ms(100);
        for i in 1..=(secs * 10) {
            if attached {
                cpu += rate * step.as_secs_f64();
                on += step;
            }
            match d.step(t0 + step * i as u32, cpu) {
                Action::Attach => {
                    assert!(!attached);
                    attached = true
                }
                Action::Detach => {
                    assert!(attached);
                    attached = false
                }
                Action::Keep => {}
            }
            assert_eq!(attached, d.attached());
        }
        (on.as_secs_f64() / secs as f64, d)
    }

    #[test]
    fn light_load_stays_attached() {
        // 0.2% of a CPU against a 1% budget: never detached
        let (share, d) = simulate(0.01, 0.002, 60);
        assert_eq!(share, 1.0);
        assert_eq!(d.last_duty, Some(1.0));
    }

    #[test]
    fn heavy_load_follows_the_budget() {
        // probes at 5% of a CPU while attached, budget 1%: attached a fifth of the time, and
        // their average cost is the budget (within a step of 100 ms per cycle)
        for (rate, want) in [(0.05, 0.2), (0.10, 0.1), (0.02, 0.5)] {
            let (share, d) = simulate(0.01, rate, 100);
            assert!(
                (share - want).abs() < 0.02,
                "rate {rate}: attached {share}, want {want}"
            );
            let duty = d.last_duty.unwrap();
            assert!((duty - want).abs() < 0.02, "rate {rate}: duty {duty}");
            assert!(
                share * rate <= 0.01 * 1.1,
                "rate {rate}: cost {} over the budget",
                share * rate
            );
        }
    }

    #[test]
    fn load_changes_move_the_duty() {
        let t0 = Instant::now();
        let mut d = Duty::new(0.01, t0, 0.0);
        for _ in 0..20 {
            d.detached_after(Duration::ZERO);
        }
        let (mut cpu, mut t, mut attached) = (0.0, t0, true);
        let mut run = |rate: f64, secs: u64, d: &mut Duty| {
            for _ in 0..secs * 10 {
                t += ms(100);
                if attached {
                    cpu += rate * 0.1;
                }
                match d.step(t, cpu) {
                    Action::Attach => attached = true,
                    Action::Detach => attached = false,
                    Action::Keep => {}
                }
            }
        };
        run(0.001, 30, &mut d);
        assert_eq!(d.last_duty, Some(1.0));
        run(0.05, 40, &mut d);
        let duty = d.last_duty.unwrap();
        assert!((duty - 0.2).abs() < 0.03, "{duty}");
        run(0.001, 40, &mut d);
        assert_eq!(d.last_duty, Some(1.0));
    }

    #[test]
    fn overspending_is_paid_back() {
        // the detach came late: a cycle that spent three times its allowance skips the next
        // cycle (its debt, at most one cycle's worth, is paid first)
        let t0 = Instant::now();
        let mut d = Duty::new(0.01, t0, 0.0);
        assert_eq!(d.step(t0 + ms(500), 0.025), Action::Keep); // 5% of a CPU: 2 s allowed
        assert_eq!(d.step(t0 + ms(6000), 0.3), Action::Detach);
        assert_eq!(d.step(t0 + CYCLE, 0.3), Action::Keep, "in debt: no window this cycle");
        assert_eq!(d.step(t0 + CYCLE * 2, 0.3), Action::Attach);
    }

    #[test]
    fn detach_latency_is_budgeted() {
        // probes that keep costing for 1 s after the decision: detached that much earlier
        let t0 = Instant::now();
        let mut d = Duty::new(0.01, t0, 0.0);
        d.detached_after(ms(1800)); // smoothed with the initial 0.2 s: 1 s
        d.step(t0 + ms(500), 0.025);
        let mut t = t0 + ms(500);
        let mut cpu = 0.025;
        while d.step(t, cpu) == Action::Keep {
            t += ms(100);
            cpu += 0.005;
        }
        // 0.1 s allowance at 0.05 CPU-s/s: 2 s in all, less 1 s of detach latency
        assert!(t >= t0 + ms(900) && t <= t0 + ms(1100), "{:?}", t - t0);
    }
}
