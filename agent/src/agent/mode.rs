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
//! - Exact because the kernel's sends cannot be captured (`--exact` or not): the probes
//!   count what they see; there is no wire to count.
//! - Client-role handshakes are seen by the probes only: they count them in every mode.
//! - The kernel estimate (processes without probes) never counts: the wire does.

/// Why the probes count handshakes and stay attached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExactWhy {
    /// `--exact`, where the kernel captures the server's sends.
    Asked,
    /// No hook on the server's sends (`--exact` or not): the wire cannot count.
    NoWireCapture,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Default,
    Exact(ExactWhy),
}

impl Mode {
    /// From `--exact` and whether the kernel captures the server's sends
    /// (bpf::Served::sends_captured, known once the kernel side has attached). Without the
    /// capture there is no wire to count, `--exact` or not: the probes count.
    pub fn new(asked_exact: bool, sends_captured: bool) -> Self {
        match (asked_exact, sends_captured) {
            (_, false) => Mode::Exact(ExactWhy::NoWireCapture),
            (true, true) => Mode::Exact(ExactWhy::Asked),
            (false, true) => Mode::Default,
        }
    }

    /// The kernel captures the server's sends (what Mode::new was given): a handshake the
    /// probes timed on a connection can be joined with its wire capture, for its labels.
    pub fn sends_captured(self) -> bool {
        self != Mode::Exact(ExactWhy::NoWireCapture)
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
        self.sends_captured()
    }

    /// Does the read side serve processes that live for one connection? Where the probes
    /// stay attached and time every handshake: such a process (inetd's, a forking server's
    /// child) has its handshake before the agent knows it, and only the kernel estimate,
    /// whose windows open at reads, times it (the kernel decides when the reads are on:
    /// agent/src/bpf/read_switch.rs `configure`). The reads do not mark connections as TLS for
    /// it (bpf/requests.bpf.h): where the wire counts, a connection the server wrote nothing
    /// on is the wire's failed handshake.
    pub fn per_connection_reads(self) -> bool {
        !self.budgeted()
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
        assert_eq!(Mode::new(true, true), Mode::Exact(ExactWhy::Asked));
        // --exact without a wire: the probes count (else no one would count the servers)
        assert_eq!(Mode::new(true, false), Mode::Exact(ExactWhy::NoWireCapture));
        for (asked, sends) in [(false, false), (false, true), (true, false), (true, true)] {
            let mode = Mode::new(asked, sends);
            assert_eq!(mode.sends_captured(), sends, "{mode:?}");
            // A handshake call's reads mark its connection as TLS (bpf/requests.bpf.h) only
            // without the send capture: there the probes count its failure. Where the wire
            // counts, a connection the server wrote nothing on is the wire's failed handshake
            // (closed before any TLS), in every mode.
            assert_eq!(mode.probes_count(false, false), !sends, "{mode:?}");
            assert_eq!(mode.per_connection_reads(), asked || !sends, "{mode:?}");
        }
        assert!(
            Mode::Exact(ExactWhy::Asked).wire_counts(),
            "under --exact a process forked per connection has handshakes only the wire saw"
        );
    }
}
