//! The clocks tlsprof reads: the kernel's monotonic clock (what bpf_ktime_get_ns reads)
//! and a thread's CPU time.
use std::time::Duration;

fn clock(id: libc::clockid_t) -> Duration {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes the clock's time into ts, a valid timespec.
    unsafe { libc::clock_gettime(id, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// The kernel's monotonic clock in nanoseconds, as bpf_ktime_get_ns reads it.
pub fn ktime_ns() -> u64 {
    clock(libc::CLOCK_MONOTONIC).as_nanos() as u64
}

/// This thread's CPU time.
pub fn thread_cpu() -> Duration {
    clock(libc::CLOCK_THREAD_CPUTIME_ID)
}
