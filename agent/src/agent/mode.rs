//! The run's mode and its counting policy: the one place that decides which of tlsprof's
//! two sources counts a handshake, the wire (what servers send, wire/tracker.rs) or the
//! handshake probes (what the TLS library's calls return), and whether the probes come and
//! go under the overhead budget.
//!
//! - Default: the probes come and go under the budget and only time handshakes; the wire
//!   counts every server's handshakes, probed or not.
//! - Exact (`--exact`): the probes stay attached and time every handshake they see; the
//!   wire still counts every server's handshakes (a process forked or executed per
//!   connection has its first handshakes before its probes: the kernel estimate times them).
//! - Exact because the kernel's sends cannot be captured: the probes count what they see.
//! - Client-role handshakes are seen by the probes only: they count them in every mode.
//! - The kernel estimate (processes without probes) never counts: the wire does.

/// Why the probes count handshakes and stay attached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExactWhy {
    /// `--exact`.
    Asked,
    /// No hook on the server's sends: the wire cannot count.
    NoWireCapture,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Default,
    Exact(ExactWhy),
}

impl Mode {
    /// From `--exact` and whether the kernel captures the server's sends.
    pub fn new(asked_exact: bool, wire_capture: bool) -> Self {
        match (asked_exact, wire_capture) {
            (true, _) => Mode::Exact(ExactWhy::Asked),
            (false, false) => Mode::Exact(ExactWhy::NoWireCapture),
            (false, true) => Mode::Default,
        }
    }

    /// tlsprof_mode_info{mode}.
    pub fn label(self) -> &'static str {
        match self {
            Mode::Default => "default",
            Mode::Exact(_) => "exact",
        }
    }

    /// The probes come and go under the overhead budget (else they stay attached).
    pub fn budgeted(self) -> bool {
        self == Mode::Default
    }

    /// A server handshake its wire capture ended with: does the wire count it? Wherever
    /// there is a wire capture.
    pub fn wire_counts(self) -> bool {
        self != Mode::Exact(ExactWhy::NoWireCapture)
    }

    /// A handshake the probes timed (`client`: the process was the client; `estimate`: the
    /// kernel estimate's, not a probe's): do they count it too?
    pub fn probes_count(self, client: bool, estimate: bool) -> bool {
        client || (self == Mode::Exact(ExactWhy::NoWireCapture) && !estimate)
    }

    /// A server handshake the probes timed on a connection accepted before their window
    /// opened (their first calls on it may have been missed): is it measured? Only where
    /// the probes count every handshake; elsewhere the kernel estimate times it.
    pub fn measures_before_window(self) -> bool {
        self.probes_count(false, false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_handshake_is_counted_by_exactly_one_source() {
        for mode in [
            Mode::Default,
            Mode::Exact(ExactWhy::Asked),
            Mode::Exact(ExactWhy::NoWireCapture),
        ] {
            // a server: the wire or the probes, never both, never neither
            assert!(mode.wire_counts() ^ mode.probes_count(false, false), "{mode:?}");
            // never the estimate
            assert!(!mode.probes_count(false, true), "{mode:?}");
            // a client: the probes
            assert!(mode.probes_count(true, false), "{mode:?}");
        }
        assert!(Mode::new(false, true).budgeted());
        assert_eq!(Mode::new(false, false), Mode::Exact(ExactWhy::NoWireCapture));
        assert_eq!(Mode::new(true, false), Mode::Exact(ExactWhy::Asked));
        assert!(
            Mode::Exact(ExactWhy::Asked).wire_counts(),
            "under --exact a process forked per connection has handshakes only the wire saw"
        );
    }
}
