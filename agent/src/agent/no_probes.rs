//! Why a traced process has no handshake probes: the `reason` label of
//! tlsprof_handshake_cpu_method_info (its handshake CPU is then the kernel's estimate), and
//! the one log line that says it, once per process name and reason.
use std::collections::BTreeSet;

/// Why a traced process's handshake CPU is the kernel's estimate: no handshake probe is
/// attached to it, or (UnseenByProbes) those attached do not see its handshakes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum NoProbes {
    /// --no-handshake-probes.
    Disabled,
    /// Its TLS stack has no entry point tlsprof probes (NSS, Go before 1.17, a server's
    /// own stack, an executable whose TLS code is known only by name).
    NoEntryPoint,
    /// A TLS library file it maps could not be opened (not through /proc/PID/map_files,
    /// nor by its name from the process's root).
    FileUnreadable,
    /// A TLS library file was read, but its handshake functions were not found in it
    /// (stripped of symbols, or a build tlsprof does not know).
    SymbolNotFound,
    /// The kernel refused every probe (privileges, uprobes unsupported, the process gone).
    AttachRefused,
    /// No TLS library or TLS code was found in its files (Java's JSSE, rustls, a stripped
    /// static executable, a stack of its own): selected by `--pid` or `--comm`, it is traced
    /// from what its connections carry.
    NoTlsLibrary,
    /// Its probes are attached, but the wire shows handshakes they never time: another TLS
    /// stack terminates its clients' TLS (an HCL Domino task maps OpenSSL for its outbound
    /// calls only): those handshakes' CPU is the kernel's estimate (sightings.rs).
    UnseenByProbes,
}

impl NoProbes {
    pub const ALL: [NoProbes; 7] = [
        Self::Disabled,
        Self::NoEntryPoint,
        Self::FileUnreadable,
        Self::SymbolNotFound,
        Self::AttachRefused,
        Self::NoTlsLibrary,
        Self::UnseenByProbes,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Self::Disabled => "disabled",
            Self::NoEntryPoint => "no_entry_point",
            Self::FileUnreadable => "file_unreadable",
            Self::SymbolNotFound => "symbol_not_found",
            Self::AttachRefused => "attach_refused",
            Self::NoTlsLibrary => "no_tls_library",
            Self::UnseenByProbes => "unseen_by_probes",
        }
    }

    /// Worth a warning: something an operator can change (privileges, debug symbols),
    /// where the others are what the process is or what was asked for.
    fn warns(self) -> bool {
        matches!(self, Self::FileUnreadable | Self::SymbolNotFound | Self::AttachRefused)
    }
}

crate::metrics::label_enum!(
    /// How a process's handshake CPU is measured (the `method` label).
    Method {
        Probes = "probes",
        KernelEstimate = "kernel_estimate",
    }
);

/// The `method` and `reason` labels of a process: probes, or the estimate and why.
pub fn labels(why: Option<NoProbes>) -> (Method, &'static str) {
    match why {
        None => (Method::Probes, ""),
        Some(w) => (Method::KernelEstimate, w.label()),
    }
}

/// Names and reasons said already, at most this many; beyond, each is said at debug level.
const MAX_SAID: usize = 4096;

/// Says why a process has no probes: a warning (or an info line for what is expected) the
/// first time for its name and reason, at debug level after that (64 nginx workers get one
/// line, not 64).
#[derive(Default)]
pub struct Said(BTreeSet<(String, NoProbes)>);

impl Said {
    pub fn say(&mut self, pid: u32, name: &str, why: NoProbes, detail: &str) {
        let line = match why {
            NoProbes::UnseenByProbes => format!(
                "handshake probes of {pid} ({name}) miss its handshakes: {}: {detail}; their CPU is estimated from the \
                 kernel",
                why.label()
            ),
            _ => format!(
                "no handshake probes for {pid} ({name}): {}: {detail}; its handshake CPU is estimated from the kernel",
                why.label()
            ),
        };
        let first = self.0.len() < MAX_SAID && self.0.insert((name.to_string(), why));
        match (first, why.warns()) {
            (true, true) => log::warn!("{line}"),
            (true, false) => log::info!("{line}"),
            (false, _) => log::debug!("{line}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::LabelValue;

    #[test]
    fn labels_are_distinct_and_said_once_per_name() {
        let mut l: Vec<&str> = NoProbes::ALL.iter().map(|w| w.label()).collect();
        l.dedup();
        assert_eq!(l.len(), NoProbes::ALL.len());
        let labels = |why| {
            let (method, reason) = labels(why);
            (method.label(), reason)
        };
        assert_eq!(labels(None), ("probes", ""));
        assert_eq!(
            labels(Some(NoProbes::AttachRefused)),
            ("kernel_estimate", "attach_refused")
        );
        let mut said = Said::default();
        said.say(1, "nginx", NoProbes::FileUnreadable, "x");
        said.say(2, "nginx", NoProbes::FileUnreadable, "x");
        said.say(3, "nginx", NoProbes::SymbolNotFound, "x");
        assert_eq!(said.0.len(), 2);
    }
}
