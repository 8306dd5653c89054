//! The agent's own memory, as the scans go: the tables that shrank give their room back to
//! the kernel (alloc::trim), and `-v` logs where the memory is, table by table.
use std::time::{Duration, Instant};

use crate::alloc;

/// How often the allocator's free pages are returned (after the tables' expiry).
const TRIM_EVERY: Duration = Duration::from_secs(10);
/// How often the tables' footprint is logged (debug).
const LOG_EVERY: Duration = Duration::from_secs(30);

pub struct Memory {
    next_trim: Instant,
    next_log: Instant,
}

impl Memory {
    pub fn new(now: Instant) -> Self {
        Self {
            next_trim: now + TRIM_EVERY,
            next_log: now + LOG_EVERY,
        }
    }

    /// After a scan's expiry: `tables` lists (table, entries, bytes of its room).
    pub fn tick(&mut self, now: Instant, tables: impl FnOnce() -> Vec<(&'static str, usize, usize)>) {
        if now >= self.next_trim {
            alloc::trim();
            self.next_trim = now + TRIM_EVERY;
        }
        if now >= self.next_log && log::log_enabled!(log::Level::Debug) {
            let t = tables();
            let total: usize = t.iter().map(|x| x.2).sum();
            let each: Vec<String> = t
                .iter()
                .filter(|x| x.2 > 0)
                .map(|(name, n, bytes)| format!("{name} {n} ({:.1} MiB)", *bytes as f64 / 1048576.0))
                .collect();
            log::debug!("tables: {:.1} MiB: {}", total as f64 / 1048576.0, each.join(", "));
            self.next_log = now + LOG_EVERY;
        }
    }
}
