//! What the trap of one probe hit costs on this host, measured at start (the overhead
//! budget turns hits into CPU with it, and adds the run time the handshake programs measure
//! of themselves where they run): the agent attaches calib.bpf.h's no-op programs to functions of
//! its own and times calls with and without them. Two kinds of entry hit: on an instruction
//! the kernel single-steps (a second exception), and on a branch it emulates (where the
//! handshake probes are placed when they can be: discovery/handshake/entry.rs).
//!
//! The calls are timed warm (`time_warm_calls`), in blocks, each block against one of the
//! function without a probe in the same round, and charged at `SERVER_TRAPS` times that: what
//! a server that hits its probes thousands of times a second was measured to pay, until that
//! process's own samples say what it pays (agent/trap_cost.rs).
//! bench/attributed.py prints, per run, what the budget charged beside what perf found in
//! the worker's own stacks (bench/README.md gives the relation).
use std::{
    path::PathBuf,
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result};

use super::loader::Kernel;
use crate::discovery::maps;

/// Calibration targets: never inlined, so that every call from `time_warm_calls` runs their
/// first instruction and returns through its return address. `calib_entry` gets an entry
/// probe, `calib_plain` none.
macro_rules! calibration_target {
    ($name:ident, $k:expr) => {
        #[no_mangle]
        #[inline(never)]
        pub extern "C" fn $name(x: u64) -> u64 {
            std::hint::black_box(x).wrapping_mul($k).wrapping_add(1)
        }
    };
}
calibration_target!(tlsprof_calib_plain, 3);
calibration_target!(tlsprof_calib_entry, 5);

/// A calibration target whose first instruction is a jump the kernel emulates (x86-64).
#[cfg(target_arch = "x86_64")]
#[unsafe(naked)]
#[no_mangle]
pub extern "C" fn tlsprof_calib_branch(x: u64) -> u64 {
    core::arch::naked_asm!("jmp 2f", "2:", "lea rax, [rdi + rdi * 8 + 1]", "ret")
}
#[cfg(not(target_arch = "x86_64"))]
calibration_target!(tlsprof_calib_branch, 9);

/// The same, for an entry and a return probe: the return's cost is what this costs over
/// `tlsprof_calib_branch`, both entries emulated (a single-stepped entry costs ten times
/// more here, and varies more than a return costs).
#[cfg(target_arch = "x86_64")]
#[unsafe(naked)]
#[no_mangle]
pub extern "C" fn tlsprof_calib_branch_both(x: u64) -> u64 {
    core::arch::naked_asm!("jmp 2f", "2:", "lea rax, [rdi + rdi * 4 + 1]", "ret")
}
#[cfg(not(target_arch = "x86_64"))]
calibration_target!(tlsprof_calib_branch_both, 5);

/// CPU seconds of one hit of each kind.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct HitCost {
    /// An entry probe whose instruction the kernel single-steps.
    pub stepped: f64,
    /// An entry probe on an instruction the kernel emulates.
    pub emulated: f64,
    /// A return probe.
    pub ret: f64,
}

pub type Target = extern "C" fn(u64) -> u64;

/// What a server's trap costs over the same trap timed warm here: its caches hold the
/// server's work between two handshakes, not the trap path alone. Measured on nginx
/// (bench/attributed.py, default and --exact, this 2-core VM): on 2026-11-27 the worker's
/// traps (perf: its samples in them, less the programs' own time) took 1.53-2.09 times the
/// warm calibration, and 2.0 was charged; the 17 runs of new connections since (default
/// mode, 30 s each, before the process's own samples scale the charge: trap_cost.rs) found
/// its traps took 0.69-1.98 times that charge, 1.35 in the median, so that the probes took
/// more than the budget in most. 3.0 is charged: it covers 12 of those 17 runs, and the
/// samples correct it either way within a minute or two.
pub const SERVER_TRAPS: f64 = 3.0;

impl HitCost {
    /// Each cost times `k`.
    pub fn scaled(self, k: f64) -> Self {
        Self {
            stepped: self.stepped * k,
            emulated: self.emulated * k,
            ret: self.ret * k,
        }
    }
}

/// Calls of each target per timed block: enough that the clock's own cost and resolution
/// vanish in the mean, few enough that a round takes well under a millisecond.
pub const BLOCK: usize = 32;

/// The time of one call of each calibration target, warm: per round, `BLOCK` calls of each
/// target in turn (so that all see the same moments of the host), each block's mean; the
/// result is the median over rounds, per target, of each block's mean less the first
/// target's in the same round (the first, the target without a probe, reads 0). Rounds
/// stop early, after `MIN_ROUNDS`, once `limit` has passed (a slow or emulated host).
///
/// Warm, because that is how a server pays its traps when their cost matters: the budget
/// only binds on a process hitting its probes thousands of times a second, whose trap path
/// stays in the caches. Measured against the server's own call stacks (bench/attributed.py,
/// nginx, 2026-11-27): calls timed after reading 8 MiB through, as this did before, charged
/// 2.7-3.8 times what the worker's traps took.
pub fn time_warm_calls<const K: usize>(fs: [Target; K], rounds: usize, limit: Duration) -> [Duration; K] {
    const MIN_ROUNDS: usize = 21;
    let fs = std::hint::black_box(fs);
    let mut diffs: [Vec<f64>; K] = std::array::from_fn(|_| Vec::with_capacity(rounds));
    let mut acc = 0u64;
    let started = Instant::now();
    for i in 0..rounds.max(1) {
        if i >= MIN_ROUNDS && started.elapsed() > limit {
            break;
        }
        let mut means = [0f64; K];
        for (f, m) in fs.iter().zip(means.iter_mut()) {
            let t0 = Instant::now();
            for j in 0..BLOCK {
                acc = acc.wrapping_add(f((i * BLOCK + j) as u64));
            }
            *m = t0.elapsed().as_secs_f64() / BLOCK as f64;
        }
        for (d, m) in diffs.iter_mut().zip(means) {
            d.push(m - means[0]);
        }
    }
    std::hint::black_box(acc);
    diffs.map(|mut d| {
        d.sort_unstable_by(f64::total_cmp);
        Duration::from_secs_f64(d[d.len() / 2].max(0.0))
    })
}

/// The file offset of a function of the agent in its executable, from where it is mapped
/// (/proc/self/maps), and that executable's path.
pub fn target_location(f: Target) -> Option<(PathBuf, u64)> {
    let addr = f as *const () as usize as u64;
    let text = maps::read("self").ok()?;
    let m = maps::parse(&text).find(|m| m.executable() && (m.start..m.end).contains(&addr))?;
    Some((m.file()?.into(), addr - m.start + m.offset))
}

/// The cost of one hit from timings of `n` calls without probes, with an entry probe, with
/// an entry probe on an emulated branch, and with that and a return probe.
pub fn hit_costs(n: u64, none: Duration, entry: Duration, branch: Duration, branch_both: Duration) -> HitCost {
    let per = |d: Duration| d.as_secs_f64() / n as f64;
    HitCost {
        stepped: (per(entry) - per(none)).max(0.0),
        emulated: (per(branch) - per(none)).max(0.0),
        ret: (per(branch_both) - per(branch)).max(0.0),
    }
}

impl Kernel {
    /// What a uprobe hit (of each kind) and a uretprobe hit cost on this host, in CPU
    /// seconds: the agent calls four functions of its own, one without a probe, one with an
    /// entry probe, one with an entry and a return probe, one with an entry probe on a jump,
    /// in warm blocks (`time_warm_calls`: ~20 ms in all here, at most ~0.2 s on a slow
    /// host), then detaches them on the detacher thread.
    pub fn calibrate(&mut self) -> Result<HitCost> {
        const N: usize = 201;
        let pid = std::process::id();
        let (exe, entry_off) =
            target_location(tlsprof_calib_entry).context("the agent's own code is not mapped from a file")?;
        let (_, branch_off) = target_location(tlsprof_calib_branch).context("the agent's own code")?;
        let (_, both_off) = target_location(tlsprof_calib_branch_both).context("the agent's own code")?;
        let mut links = Vec::new();
        let attached = (|| -> Result<()> {
            links.push(self.attach_own_uprobe("calib_entry", entry_off, &exe, pid)?);
            links.push(self.attach_own_uprobe("calib_entry", branch_off, &exe, pid)?);
            links.push(self.attach_own_uprobe("calib_entry", both_off, &exe, pid)?);
            links.push(self.attach_own_uprobe("calib_return", both_off, &exe, pid)?);
            Ok(())
        })();
        let mut t = [Duration::ZERO; 4];
        if attached.is_ok() {
            let started = Instant::now();
            t = time_warm_calls(
                [
                    tlsprof_calib_plain,
                    tlsprof_calib_entry,
                    tlsprof_calib_branch,
                    tlsprof_calib_branch_both,
                ],
                N,
                Duration::from_millis(200),
            );
            log::debug!(
                "calibration calls over one without a probe (entry, emulated entry, and with a return): \
                 {:?} in {:?}",
                &t[1..],
                started.elapsed()
            );
        }
        self.detach_later(0, links);
        attached?;
        Ok(hit_costs(1, Duration::ZERO, t[1], t[2], t[3]).scaled(SERVER_TRAPS))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn hit_cost_arithmetic() {
        let c = hit_costs(1000, ms(1), ms(11), ms(4), ms(5));
        let close = |a: f64, b: f64| (a - b).abs() < 1e-12;
        assert!(
            close(c.stepped, 10e-6) && close(c.ret, 1e-6) && close(c.emulated, 3e-6),
            "{c:?}"
        );
        assert_eq!(hit_costs(1000, ms(5), ms(4), ms(4), ms(4)), HitCost::default());
    }

    #[test]
    fn calibration_targets_are_found() {
        let (path, a) = target_location(tlsprof_calib_entry).expect("the agent's own code is mapped");
        let (_, b) = target_location(tlsprof_calib_branch_both).unwrap();
        assert!(path.exists() && a > 0 && a != b, "{path:?} {a:#x} {b:#x}");
        // against itself: 0
        assert_eq!(
            time_warm_calls([tlsprof_calib_plain, tlsprof_calib_plain], 11, Duration::from_secs(1))[0],
            Duration::ZERO
        );
        let [_, entry] = time_warm_calls([tlsprof_calib_plain, tlsprof_calib_entry], 21, Duration::from_secs(1));
        assert!(entry < Duration::from_millis(1), "{entry:?}");
        // the jump target computes what its kind does
        assert_eq!(tlsprof_calib_branch(2), 19);
        assert_eq!(tlsprof_calib_branch_both(2), 11);
        #[cfg(target_arch = "x86_64")]
        {
            // its first instruction is a jump the kernel emulates (a short jmp, eb)
            let (path, off) = target_location(tlsprof_calib_branch).unwrap();
            let code = std::fs::read(path).unwrap();
            assert_eq!(code[off as usize], 0xeb, "{:x?}", &code[off as usize..off as usize + 4]);
        }
    }
}
