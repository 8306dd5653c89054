//! The allocator's settings: glibc malloc gives memory back to the kernel (docs/metrics.md,
//! "Bounds": the agent's memory). Its defaults keep what a multi-threaded process once used:
//! a freed table larger than the mmap threshold raises that threshold to its size, so the
//! next ones are carved from the heap, where a free page below the top is never returned.
//! The musl (static) build has none of this: its allocator returns freed pages itself.

/// Allocations from this size on are mmapped, and unmapped when freed: the tables that grow
/// with the load (wire/tracker.rs, clients/join.rs, conns/churn.rs) are all above it at
/// their peak.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const MMAP_THRESHOLD: i32 = 256 << 10;
/// Free memory at the heap's top above this is returned at once.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const TRIM_THRESHOLD: i32 = 1 << 20;
/// Arenas at most: the event loop allocates nearly everything, the web server and the
/// detacher a little (each thread its own arena is glibc's default, up to 8 per CPU).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const ARENA_MAX: i32 = 2;

/// Sets them; before any other thread starts.
pub fn configure() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets the allocator's parameters; called before other threads exist.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, ARENA_MAX);
        libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD);
        libc::mallopt(libc::M_TRIM_THRESHOLD, TRIM_THRESHOLD);
    }
}

/// Returns the free pages inside the heap to the kernel (those below its top, which the
/// trim threshold does not reach): after the tables shrank. A walk of the free chunks,
/// well under a millisecond at the agent's sizes.
pub fn trim() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim is thread-safe and only releases free memory.
    unsafe {
        libc::malloc_trim(0);
    }
}
