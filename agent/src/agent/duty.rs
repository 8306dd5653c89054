//! The overhead budget: tlsprof's handshake probes (uprobes, a trap into the kernel per hit)
//! are attached to a process only as long as their measured cost stays within the budget.
//!
//! Each process runs in cycles of `CYCLE` (2 s). At the start of a cycle its probes are
//! attached; while they are, the agent reads the process's hit counters (hs_hits) every
//! few tens of milliseconds and turns them into CPU time with the cost of one trap measured
//! on this host at start (`calibrate`), plus the run time the probe programs measure of
//! themselves (a handshake's return program, which reads the configuration and emits the
//! event, runs about as long as its trap). Once the probes have cost what the budget allows
//! for the whole cycle (budget × CYCLE of CPU time, less what they will still cost while
//! they are being removed), they are detached until the next cycle. Under light load they
//! stay attached all along (duty cycle 1); the busier the process, the shorter the window:
//! at ~1,200 handshakes/s on this VM (~1.9 µs a hit, traps and programs, 5 hits a
//! handshake), ~0.8 s every 2 s at the default budget. The cycle is
//! short so that any window a user looks at (2 s and more) holds at most about one cycle's
//! allowance: a long cycle spent its whole allowance in its first second or two. Where even
//! the shortest window and its removal cost more than one cycle's allowance (a busy
//! process, a slow removal), the cycles without a window save theirs until one pays for it.
use std::time::{Duration, Instant};

/// One duty cycle.
pub const CYCLE: Duration = Duration::from_secs(2);
/// Rate estimates are taken over at least this long.
const MIN_SPAN: Duration = Duration::from_millis(50);
/// Cycles' allowances a process that could not afford a window saves up, at most: a
/// window opens once they pay for it and its removal (the kernel removes uprobes one at a
/// time, ~0.1 s each, and the remaining ones are hit meanwhile). Beyond (probes costing
/// about half a CPU while attached, at the default budget), none opens.
const SAVE_CYCLES: f64 = 30.0;
/// A server that uses less than this share of one CPU is budgeted as if it used this much:
/// a lightly loaded server's handshakes are all timed, at a cost no host notices (at the
/// default budget, at most 0.25% of one CPU). Half: at a quarter, a server on 15 handshakes
/// a second under CPU contention (traps and programs three times dearer) lost some of its
/// windows at a fifth of the default budget (tests/test_budget.py, a CI run).
pub const LIGHT_SERVER: f64 = 0.5;
/// Before a removal has been measured: what the probes still cost after the decision to
/// detach them, in time at their rate. The kernel removes a process's breakpoints first and
/// then waits for grace periods (hundreds of ms on a VM), during which nothing is hit.
const TAIL0: Duration = Duration::from_millis(100);

/// Parses `--overhead-budget`: a share of the server's CPU, as "1%", "0.5 %" or "1" (percent).
pub fn parse_budget(s: &str) -> Result<f64, String> {
    let t = s.trim();
    let num = t.strip_suffix('%').unwrap_or(t).trim();
    let pct: f64 = num
        .parse()
        .map_err(|_| format!("{s:?} is not a percentage (e.g. 1%)"))?;
    if !(pct > 0.0 && pct <= 100.0) {
        return Err(format!(
            "{s:?}: the budget must be above 0% and at most 100% of the server's CPU"
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
/// budget x the server's own CPU time per cycle (`server_cpu`; the last cycle's, at least
/// LIGHT_SERVER x CYCLE; budget x CYCLE, a share of one CPU, where it is not known); a cycle
/// that spent more leaves the difference as a debt to the next.
#[derive(Debug, Clone)]
pub struct Duty {
    /// The probes' CPU time per second of the server's own CPU time.
    budget: f64,
    /// The server's CPU total (seconds) at the start of this cycle, and when that was (None
    /// until `server_cpu` is first told).
    server0: Option<(Instant, f64)>,
    /// The server's CPU total as last told.
    server_now: Option<f64>,
    /// The server's CPU seconds per second over the last complete cycle (in the first, over
    /// its first MIN_SPAN or more); None until measured.
    server_rate: Option<f64>,
    cycle_start: Instant,
    /// Probe CPU total at the start of this cycle.
    cycle_cpu0: f64,
    /// Probe CPU this cycle may spend (budget x CYCLE, less the last cycle's overspend).
    allowance: f64,
    /// Attached since, or None while detached.
    on_since: Option<Instant>,
    /// Time attached earlier in this cycle (before on_since).
    on_before: Duration,
    /// Whether this cycle has had its window.
    opened: bool,
    /// Probe CPU per second while attached (smoothed), None until measured.
    rate: Option<f64>,
    /// Where the last rate measurement started: time and the probe CPU total then.
    mark: (Instant, f64),
    /// A detach under way: the probe CPU total when it was decided.
    detaching: Option<f64>,
    /// The last detach is done; its cost after the decision is read at the next step.
    removed: Option<f64>,
    /// Probe CPU spent after deciding to detach, until the kernel had removed them (smoothed).
    tail: Option<f64>,
    /// Share of the last complete cycle the probes were attached (None before the first).
    pub last_duty: Option<f64>,
}

impl Duty {
    /// A process found now: its probes are attached at once (the caller does it).
    pub fn new(budget: f64, now: Instant, cpu_total: f64) -> Self {
        Self {
            budget,
            server0: None,
            server_now: None,
            server_rate: None,
            cycle_start: now,
            cycle_cpu0: cpu_total,
            allowance: budget * CYCLE.as_secs_f64(),
            on_since: Some(now),
            on_before: Duration::ZERO,
            opened: true,
            rate: None,
            mark: (now, cpu_total),
            detaching: None,
            removed: None,
            tail: None,
            last_duty: None,
        }
    }

    pub fn attached(&self) -> bool {
        self.on_since.is_some()
    }

    /// The server's own CPU total (seconds, all its threads) at `now`, told before each
    /// step: the budget is a share of it. In the first cycle, the allowance is set again
    /// from the server's rate once it can be measured (MIN_SPAN after the first call).
    pub fn server_cpu(&mut self, now: Instant, total: f64) {
        self.server_now = Some(total);
        let Some((t0, c0)) = self.server0 else {
            self.server0 = Some((now, total));
            return;
        };
        let span = now.saturating_duration_since(t0);
        if self.server_rate.is_none() && span >= MIN_SPAN {
            self.server_rate = Some(((total - c0) / span.as_secs_f64()).max(0.0));
            self.allowance = self.allowance.min(self.per_cycle());
        }
    }

    /// The probe CPU a cycle may spend: budget x the server's CPU time in a cycle at its last
    /// measured rate (at least LIGHT_SERVER of one CPU), or budget x CYCLE before any.
    fn per_cycle(&self) -> f64 {
        let cpus = self.server_rate.map_or(1.0, |r| r.max(LIGHT_SERVER));
        self.budget * cpus * CYCLE.as_secs_f64()
    }

    /// Probe CPU per second while attached, as last measured (None before).
    pub fn rate(&self) -> Option<f64> {
        self.rate
    }

    /// The probes could not be attached again (the caller says why): this cycle's window
    /// is over, and the next cycle tries again. Without this, the window would look attached
    /// and never hit, like a light load, and stay so.
    pub fn attach_failed(&mut self) {
        self.on_since = None;
    }

    /// The kernel has removed the probes of the last detach.
    pub fn detached(&mut self) {
        self.removed = self.detaching.take();
    }

    fn on_so_far(&self, now: Instant) -> Duration {
        self.on_before
            + self
                .on_since
                .map_or(Duration::ZERO, |s| now.saturating_duration_since(s))
    }

    /// What detaching will still cost: as measured, else TAIL0 at the current rate.
    fn tail_cost(&self) -> f64 {
        self.tail
            .unwrap_or_else(|| self.rate.unwrap_or(0.0) * TAIL0.as_secs_f64())
    }

    /// Probe CPU still to spend before detaching: what the allowance leaves, less what
    /// the probes will cost while they are being detached.
    fn left(&self, cpu_total: f64) -> f64 {
        self.allowance - (cpu_total - self.cycle_cpu0) - self.tail_cost()
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
        if let Some(c0) = self.removed.take() {
            let t = (cpu_total - c0).max(0.0);
            self.tail = Some(self.tail.map_or(t, |old| 0.5 * old + 0.5 * t));
        }
        if now.saturating_duration_since(self.cycle_start) >= CYCLE {
            let span = now.saturating_duration_since(self.cycle_start);
            self.last_duty = Some(self.on_so_far(now).min(span).as_secs_f64() / span.as_secs_f64());
            if let (Some((t0, c0)), Some(total)) = (self.server0, self.server_now) {
                let span = now.saturating_duration_since(t0).as_secs_f64();
                if span > 0.0 {
                    self.server_rate = Some(((total - c0) / span).max(0.0));
                }
                self.server0 = Some((now, total));
            }
            let per_cycle = self.per_cycle();
            let spent = cpu_total - self.cycle_cpu0;
            self.allowance = if self.opened {
                // a debt is paid over the next cycles, never more than one cycle's worth at once
                per_cycle - (spent - self.allowance).max(0.0).min(per_cycle)
            } else {
                // No window this cycle (one and its removal cost more than the allowance, or
                // the last removal took the whole cycle): what it leaves is saved for the
                // next, so that a window opens every few cycles instead of never again.
                (self.allowance - spent + per_cycle).min(SAVE_CYCLES * per_cycle)
            };
            self.cycle_start = now;
            self.cycle_cpu0 = cpu_total;
            self.on_before = Duration::ZERO;
            self.opened = self.attached();
            if self.attached() {
                self.on_since = Some(now);
            }
        }
        if !self.attached() {
            // once per cycle, when the last removal is done and there is room for a window
            let room = self.rate.map_or(0.0, |r| r * MIN_SPAN.as_secs_f64());
            if !self.opened && self.detaching.is_none() && self.left(cpu_total) > room {
                self.opened = true;
                self.on_since = Some(now);
                self.mark = (now, cpu_total);
                return Action::Attach;
            }
            return Action::Keep;
        }
        // Light load stays attached: the probes cannot spend the allowance in a cycle.
        let light = self.rate.is_some_and(|r| r * CYCLE.as_secs_f64() <= self.allowance);
        if !light && self.rate.is_some() && self.left(cpu_total) <= 0.0 {
            self.on_before = self.on_so_far(now);
            self.on_since = None;
            self.detaching = Some(cpu_total);
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

    /// When `step` should run next at the latest: while attached, when the allowance runs
    /// out at the measured rate (or when the rate can first be measured); else the start of
    /// the next cycle.
    pub fn next_step(&self, cpu_total: f64) -> Instant {
        let next_cycle = self.cycle_start + CYCLE;
        match (self.on_since, self.rate) {
            (Some(_), Some(r)) if r > 0.0 => {
                let secs = (self.left(cpu_total) / r).clamp(0.0, CYCLE.as_secs_f64());
                (Instant::now() + Duration::from_secs_f64(secs)).min(next_cycle)
            }
            (Some(_), None) => (self.mark.0 + MIN_SPAN).min(next_cycle),
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
    /// stepping every 10 ms for `secs`; a detach keeps costing for `tail` and is then done.
    /// Returns the share of time attached, the Duty, and the probe CPU total at each step.
    fn drive(d: &mut Duty, t0: Instant, rate: f64, secs: f64, tail: Duration) -> (f64, Vec<f64>) {
        let step = ms(10);
        let (mut cpu, mut on, mut attached) = (0.0, Duration::ZERO, true);
        let mut removing: Option<Instant> = None;
        let mut totals = Vec::new();
        for i in 1..=(secs * 100.0) as u32 {
            let now = t0 + step * i;
            if attached || removing.is_some() {
                cpu += rate * step.as_secs_f64();
            }
            if attached {
                on += step;
            }
            if removing.is_some_and(|r| now >= r + tail) {
                removing = None;
                d.detached();
            }
            match d.step(now, cpu) {
                Action::Attach => {
                    assert!(!attached && removing.is_none(), "attached while a removal is under way");
                    attached = true
                }
                Action::Detach => {
                    assert!(attached);
                    attached = false;
                    removing = Some(now);
                }
                Action::Keep => {}
            }
            assert_eq!(attached, d.attached());
            totals.push(cpu);
        }
        (on.as_secs_f64() / secs, totals)
    }

    fn simulate(budget: f64, rate: f64, secs: u64) -> (f64, Duty, Vec<f64>) {
        let t0 = Instant::now();
        let mut d = Duty::new(budget, t0, 0.0);
        let (share, totals) = drive(&mut d, t0, rate, secs as f64, Duration::ZERO);
        (share, d, totals)
    }

    /// The most probe CPU spent in any window of `secs` (steps of 10 ms).
    fn worst_window(totals: &[f64], secs: f64) -> f64 {
        let n = (secs * 100.0) as usize;
        (0..totals.len().saturating_sub(n))
            .map(|i| totals[i + n] - totals[i])
            .fold(totals.get(n.min(totals.len() - 1)).copied().unwrap_or(0.0), f64::max)
    }

    #[test]
    fn light_load_stays_attached() {
        // 0.2% of a CPU against a 1% budget: never detached
        let (share, d, _) = simulate(0.01, 0.002, 60);
        assert_eq!(share, 1.0);
        assert_eq!(d.last_duty, Some(1.0));
    }

    #[test]
    fn heavy_load_follows_the_budget() {
        // probes at 5% of a CPU while attached, budget 1%: attached a fifth of the time, and
        // their average cost is the budget
        for (rate, want) in [(0.05, 0.2), (0.10, 0.1), (0.02, 0.5)] {
            let (share, d, _) = simulate(0.01, rate, 100);
            assert!(
                (share - want).abs() < 0.02,
                "rate {rate}: attached {share}, want {want}"
            );
            let duty = d.last_duty.unwrap();
            assert!((duty - want).abs() < 0.03, "rate {rate}: duty {duty}");
            assert!(
                share * rate <= 0.01 * 1.05,
                "rate {rate}: cost {} over the budget",
                share * rate
            );
        }
    }

    #[test]
    fn every_window_holds_about_one_allowance() {
        // any 2 s, from the first on, costs at most two cycles' allowance (a window may end
        // one cycle's window and start the next's); any 10 s at most its share and one more.
        // Where the shortest window (50 ms) costs more than an allowance (0.5 of a CPU),
        // windows come every other cycle, on savings: a 2 s span may hold one of them and
        // the window before it (the first, at start).
        for rate in [0.02, 0.05, 0.10, 0.5] {
            let (_, _, totals) = simulate(0.01, rate, 60);
            let allowance = 0.01 * CYCLE.as_secs_f64();
            // the first 2 s: the allowance, or what the first rate measurement (50 ms) costs
            let first = totals[199];
            assert!(
                first <= (allowance * 1.05).max(rate * 0.065),
                "rate {rate}: the first 2 s cost {first}"
            );
            let w2 = worst_window(&totals, 2.0);
            let saved = if rate * MIN_SPAN.as_secs_f64() > allowance {
                allowance
            } else {
                0.0
            };
            assert!(
                w2 <= (2.0 * allowance + saved) * 1.05,
                "rate {rate}: a 2 s window cost {w2}"
            );
            let w10 = worst_window(&totals, 10.0);
            assert!(
                w10 <= (6.0 * allowance + saved) * 1.05,
                "rate {rate}: a 10 s window cost {w10}"
            );
            let w60 = totals[5999];
            assert!(w60 <= (30.0 * allowance + saved) * 1.05, "rate {rate}: 60 s cost {w60}");
        }
    }

    #[test]
    fn load_changes_move_the_duty() {
        let t0 = Instant::now();
        let mut d = Duty::new(0.01, t0, 0.0);
        drive(&mut d, t0, 0.001, 30.0, Duration::ZERO);
        assert_eq!(d.last_duty, Some(1.0));
        // a fresh drive starts attached, as the Duty is after light load
        drive(&mut d, t0 + Duration::from_secs(30), 0.05, 40.0, Duration::ZERO);
        let duty = d.last_duty.unwrap();
        assert!((duty - 0.2).abs() < 0.03, "{duty}");
        let back = drive_from_detached(&mut d, t0 + Duration::from_secs(70), 0.001, 40.0);
        assert!(back, "light load again: attached for good");
        assert_eq!(d.last_duty, Some(1.0));
    }

    /// Like `drive`, from a Duty whose probes may be detached; true when attached at the end.
    fn drive_from_detached(d: &mut Duty, t0: Instant, rate: f64, secs: f64) -> bool {
        let mut cpu = 10.0;
        let mut attached = d.attached();
        for i in 1..=(secs * 100.0) as u32 {
            if attached {
                cpu += rate * 0.01;
            }
            match d.step(t0 + ms(10) * i, cpu) {
                Action::Attach => attached = true,
                Action::Detach => {
                    attached = false;
                    d.detached();
                }
                Action::Keep => {}
            }
        }
        attached
    }

    #[test]
    fn overspending_is_paid_back() {
        // the detach came late: a cycle that spent three times its allowance skips the next
        // cycle (its debt, at most one cycle's worth, is paid first)
        let t0 = Instant::now();
        let mut d = Duty::new(0.01, t0, 0.0); // 0.02 s of probe CPU per 2 s cycle
        assert_eq!(d.step(t0 + ms(100), 0.005), Action::Keep); // 5% of a CPU
        assert_eq!(d.step(t0 + ms(1500), 0.06), Action::Detach);
        d.detached();
        assert_eq!(d.step(t0 + CYCLE, 0.06), Action::Keep, "in debt: no window this cycle");
        assert_eq!(d.step(t0 + CYCLE * 2, 0.06), Action::Attach);
    }

    #[test]
    fn no_window_while_the_last_removal_is_under_way() {
        let t0 = Instant::now();
        let mut d = Duty::new(0.01, t0, 0.0);
        d.step(t0 + ms(100), 0.005);
        assert_eq!(d.step(t0 + ms(400), 0.02), Action::Detach);
        assert_eq!(
            d.step(t0 + CYCLE + ms(10), 0.02),
            Action::Keep,
            "the kernel still removes them"
        );
        d.detached();
        assert_eq!(
            d.step(t0 + CYCLE + ms(500), 0.02),
            Action::Attach,
            "done: this cycle's window"
        );
        assert_eq!(d.step(t0 + CYCLE + ms(520), 0.02), Action::Keep);
    }

    #[test]
    fn a_removal_dearer_than_the_allowance_still_leaves_windows() {
        // probes at 5% of a CPU that keep costing for 600 ms after each decision (five
        // uprobes removed one at a time): 0.03 s per removal, more than a cycle's 0.02 s.
        // Windows still open, every few cycles, and the cost stays about the budget.
        let t0 = Instant::now();
        let mut d = Duty::new(0.01, t0, 0.0);
        let (_, totals) = drive(&mut d, t0, 0.05, 120.0, ms(600));
        // windows in the last 100 s: steps where the total rose after a flat stretch
        let opened = (2001..totals.len())
            .filter(|&i| totals[i] > totals[i - 1] && totals[i - 1] == totals[i.saturating_sub(100)])
            .count();
        assert!(opened >= 10, "{opened} windows in 100 s");
        let per_second = (totals[11999] - totals[1999]) / 100.0;
        assert!(
            per_second <= 0.01 * 1.1,
            "cost {per_second} of a CPU against a budget of 0.01"
        );
        assert!(per_second >= 0.01 * 0.7, "cost only {per_second}");
    }

    #[test]
    fn a_failed_attach_is_tried_again_next_cycle() {
        let t0 = Instant::now();
        let mut d = Duty::new(0.01, t0, 0.0);
        d.step(t0 + ms(100), 0.005);
        assert_eq!(d.step(t0 + ms(400), 0.02), Action::Detach);
        d.detached();
        assert_eq!(d.step(t0 + CYCLE, 0.02), Action::Attach);
        d.attach_failed();
        assert!(!d.attached());
        assert_eq!(
            d.step(t0 + CYCLE + ms(500), 0.02),
            Action::Keep,
            "this cycle's window is spent"
        );
        assert_eq!(
            d.step(t0 + CYCLE * 2, 0.02),
            Action::Attach,
            "the next cycle tries again"
        );
    }

    #[test]
    fn the_cost_of_removing_is_budgeted() {
        // probes that keep costing for 200 ms after each decision: once measured, windows end
        // that much earlier, and each cycle costs about its allowance
        let t0 = Instant::now();
        let mut d = Duty::new(0.01, t0, 0.0);
        let (share, totals) = drive(&mut d, t0, 0.05, 60.0, ms(200));
        let per_cycle = (totals[5999] - totals[1999]) / 20.0; // 40 s, 20 cycles, after the first ones
        assert!(per_cycle <= 0.02 * 1.1, "a cycle cost {per_cycle}");
        assert!(per_cycle >= 0.02 * 0.8, "a cycle cost only {per_cycle}");
        assert!(
            share < 0.2,
            "attached {share}: the removal's cost taken off the windows"
        );
    }

    /// Drives a Duty whose server uses `server` CPUs and whose probes cost `rate` CPU
    /// seconds per second while attached (detached at once), stepping every 10 ms; returns
    /// the probe CPU spent in all.
    fn drive_server(d: &mut Duty, t0: Instant, rate: f64, server: f64, secs: f64) -> f64 {
        let (mut cpu, mut attached) = (0.0, true);
        for i in 1..=(secs * 100.0) as u32 {
            let now = t0 + ms(10) * i;
            if attached {
                cpu += rate * 0.01;
            }
            d.server_cpu(now, server * 0.01 * f64::from(i));
            match d.step(now, cpu) {
                Action::Attach => attached = true,
                Action::Detach => {
                    attached = false;
                    d.detached();
                }
                Action::Keep => {}
            }
        }
        cpu
    }

    #[test]
    fn the_budget_is_a_share_of_the_servers_cpu() {
        // a server on half a CPU, probes at 5% of a CPU while attached, budget 1%: they may
        // cost 1% of half a CPU (0.01 s a cycle), attached about a tenth of the time
        let t0 = Instant::now();
        let mut d = Duty::new(0.01, t0, 0.0);
        let cost = drive_server(&mut d, t0, 0.05, 0.5, 60.0) / 60.0;
        assert!(cost <= 0.01 * 0.5 * 1.1, "cost {cost} of a CPU, budget 1% of 0.5");
        assert!(cost >= 0.01 * 0.5 * 0.7, "cost only {cost}");
        let duty = d.last_duty.unwrap();
        assert!((duty - 0.1).abs() < 0.03, "{duty}");
        // on four CPUs, four times as much
        let mut d = Duty::new(0.01, t0, 0.0);
        let cost = drive_server(&mut d, t0, 0.5, 4.0, 60.0) / 60.0;
        assert!((cost / 0.04 - 1.0).abs() < 0.15, "cost {cost} of a CPU, budget 1% of 4");
    }

    #[test]
    fn a_light_server_is_budgeted_as_half_a_cpu() {
        // a server on 2% of a CPU whose probes cost 0.2% while attached: under 1% of half a
        // CPU, so attached all along (every handshake timed)
        let t0 = Instant::now();
        let mut d = Duty::new(0.01, t0, 0.0);
        drive_server(&mut d, t0, 0.002, 0.02, 20.0);
        assert_eq!(d.last_duty, Some(1.0));
        // and at 5% while attached, held to 1% of that half
        let mut d = Duty::new(0.01, t0, 0.0);
        let cost = drive_server(&mut d, t0, 0.05, 0.02, 60.0) / 60.0;
        assert!(cost <= 0.01 * LIGHT_SERVER * 1.1, "cost {cost}");
    }
}
