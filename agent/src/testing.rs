//! What the unit tests say besides pass or fail, in one place: a test that cannot run here
//! (a library not installed, a privilege the test user lacks) says so and why, and a fuzz
//! case that hangs names its input before the test binary aborts. (The agent itself logs
//! through logger.rs; these are for the test runner's output only.)
use std::fmt::Display;

/// This test (or part of it) did not run here, and why.
pub fn skipped(why: impl Display) {
    eprintln!("skipped: {why}");
}

/// A fuzz case hangs: names it and aborts the test binary, so that CI fails instead of
/// stalling.
pub fn hung(what: impl Display) -> ! {
    eprintln!("a hang: {what}");
    std::process::abort();
}
