//! The traced set (bpf/proc.h; its types generated: abi.rs), the names `--comm` selects at exec, and forks,
//! execs and exits of traced processes.

pub use super::abi::{proc_comm, proc_ev, proc_notice, proc_traced, PROC_COMMS, PROC_TRACED_ENTRIES};

impl proc_comm {
    /// The key of a `--comm` name, None for one the kernel never gives a process (empty, or
    /// longer than its 15 bytes: such a name is matched by the agent's scan alone).
    pub fn of(name: &str) -> Option<Self> {
        let b = name.as_bytes();
        if b.is_empty() || b.len() > 15 {
            return None;
        }
        let mut k = Self::default();
        k.name[..b.len()].copy_from_slice(b);
        Some(k)
    }
}

impl proc_notice {
    /// Its name, as /proc/PID/comm would give it.
    pub fn name(&self) -> String {
        let end = self.comm.iter().position(|&b| b == 0).unwrap_or(self.comm.len());
        String::from_utf8_lossy(&self.comm[..end]).into_owned()
    }
}
