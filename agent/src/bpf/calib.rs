//! What the trap of one probe hit costs on this host, measured at start (the overhead
//! budget turns hits into CPU with it, and adds the run time the handshake programs measure
//! of themselves where they run): the agent attaches calib.bpf.h's no-op programs to functions of
//! its own and times calls with and without them. Two kinds of entry hit: on an instruction
//! the kernel single-steps (a second exception), and on a branch it emulates (where the
//! handshake probes are placed when they can be: discovery/handshake/entry.rs).
//!
//! Each timed call comes after the agent has read through a buffer larger than a core's
//! caches (`EVICT_BYTES`), as a server's handshake call comes after its own work: a trap
//! timed in a hot loop costs a third of what it costs in a busy server. Measured on nginx
//! (perf, `--exact`, 2026-11-24): an emulated entry trap 2.74 µs and a return 0.98 µs in the
//! worker; 0.75 and 0.83 µs in a hot loop; 2.1-3.0 and 1.1-1.3 µs after an 8 MiB read-through.
use std::{
    path::PathBuf,
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result};

use super::loader::Kernel;
use crate::discovery::maps;

/// Calibration targets: never inlined, so that every call from `time_cold_calls` runs their
/// first instruction and returns through its return address. `calib_entry` gets an entry
/// probe, `calib_both` an entry and a return probe, `calib_plain` none.
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
calibration_target!(tlsprof_calib_both, 7);

/// A calibration target whose first instruction is a jump the kernel emulates (x86-64).
#[cfg(target_arch = "x86_64")]
#[unsafe(naked)]
#[no_mangle]
pub extern "C" fn tlsprof_calib_branch(x: u64) -> u64 {
    core::arch::naked_asm!("jmp 2f", "2:", "lea rax, [rdi + rdi * 8 + 1]", "ret")
}
#[cfg(not(target_arch = "x86_64"))]
calibration_target!(tlsprof_calib_branch, 9);

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

/// What is read through before each timed call: more than a core's own caches (L1, L2) and
/// a good part of a shared L3, so that the trap's code and data come from where a busy
/// server's would.
pub const EVICT_BYTES: usize = 8 << 20;

/// The time of one call of each calibration target: the median of `n` calls of each on
/// this thread, made in turns (one of each per round, so that all see the same moments of
/// the host), each timed alone after `evict` was read through (one word per cache line).
/// Wall time, but the median of short calls leaves out the few that an interrupt or a
/// preemption lengthened. Rounds stop early, after `MIN_ROUNDS`, once `limit` has passed
/// (a slow or emulated host: tlsprof's start is not held up).
pub fn time_cold_calls<const K: usize>(fs: [Target; K], n: usize, evict: &[u64], limit: Duration) -> [Duration; K] {
    const MIN_ROUNDS: usize = 21;
    let fs = std::hint::black_box(fs);
    let mut times: [Vec<Duration>; K] = std::array::from_fn(|_| Vec::with_capacity(n));
    let mut acc = 0u64;
    let started = Instant::now();
    for i in 0..n.max(1) {
        if i >= MIN_ROUNDS && started.elapsed() > limit {
            break;
        }
        for (f, t) in fs.iter().zip(times.iter_mut()) {
            for w in evict.iter().step_by(64 / std::mem::size_of::<u64>()) {
                // SAFETY: `w` is a reference into `evict`; a volatile read keeps the loop
                acc = acc.wrapping_add(unsafe { std::ptr::read_volatile(w) });
            }
            let t0 = Instant::now();
            acc = acc.wrapping_add(f(i as u64));
            t.push(t0.elapsed());
        }
    }
    std::hint::black_box(acc);
    times.map(|mut t| {
        t.sort_unstable();
        t[t.len() / 2]
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
/// entry and return probes, and with an entry probe on an emulated branch.
pub fn hit_costs(n: u64, none: Duration, entry: Duration, both: Duration, branch: Duration) -> HitCost {
    let per = |d: Duration| d.as_secs_f64() / n as f64;
    HitCost {
        stepped: (per(entry) - per(none)).max(0.0),
        emulated: (per(branch) - per(none)).max(0.0),
        ret: (per(both) - per(entry)).max(0.0),
    }
}

impl Kernel {
    /// What a uprobe hit (of each kind) and a uretprobe hit cost on this host, in CPU
    /// seconds: the agent calls four functions of its own, one without a probe, one with an
    /// entry probe, one with an entry and a return probe, one with an entry probe on a jump,
    /// each call after a read-through of `EVICT_BYTES` (the median call of each counts; ~0.1 s
    /// in all here, at most ~0.4 s on a slow host), then detaches them on the detacher thread.
    pub fn calibrate(&mut self) -> Result<HitCost> {
        const N: usize = 201;
        let pid = std::process::id();
        let (exe, entry_off) =
            target_location(tlsprof_calib_entry).context("the agent's own code is not mapped from a file")?;
        let (_, both_off) = target_location(tlsprof_calib_both).context("the agent's own code")?;
        let (_, branch_off) = target_location(tlsprof_calib_branch).context("the agent's own code")?;
        let mut links = Vec::new();
        let attached = (|| -> Result<()> {
            links.push(self.attach_own_uprobe("calib_entry", entry_off, &exe, pid)?);
            links.push(self.attach_own_uprobe("calib_entry", both_off, &exe, pid)?);
            links.push(self.attach_own_uprobe("calib_return", both_off, &exe, pid)?);
            links.push(self.attach_own_uprobe("calib_entry", branch_off, &exe, pid)?);
            Ok(())
        })();
        let mut t = [Duration::ZERO; 4];
        if attached.is_ok() {
            let evict = vec![1u64; EVICT_BYTES / std::mem::size_of::<u64>()];
            let started = Instant::now();
            t = time_cold_calls(
                [
                    tlsprof_calib_plain,
                    tlsprof_calib_entry,
                    tlsprof_calib_both,
                    tlsprof_calib_branch,
                ],
                N,
                &evict,
                Duration::from_millis(400),
            );
            log::debug!(
                "calibration calls (none, entry, entry and return, emulated entry): {t:?} in {:?}",
                started.elapsed()
            );
        }
        self.detach_later(0, links);
        attached?;
        Ok(hit_costs(1, t[0], t[1], t[2], t[3]))
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
        let c = hit_costs(1000, ms(1), ms(11), ms(12), ms(4));
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
        let (_, b) = target_location(tlsprof_calib_both).unwrap();
        assert!(path.exists() && a > 0 && a != b, "{path:?} {a:#x} {b:#x}");
        assert!(
            time_cold_calls([tlsprof_calib_plain], 11, &[0u64; 4096], Duration::from_secs(1))[0]
                < Duration::from_secs(1)
        );
        // the jump target computes what its kind does
        assert_eq!(tlsprof_calib_branch(2), 19);
        #[cfg(target_arch = "x86_64")]
        {
            // its first instruction is a jump the kernel emulates (a short jmp, eb)
            let (path, off) = target_location(tlsprof_calib_branch).unwrap();
            let code = std::fs::read(path).unwrap();
            assert_eq!(code[off as usize], 0xeb, "{:x?}", &code[off as usize..off as usize + 4]);
        }
    }
}
