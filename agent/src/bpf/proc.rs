//! Mirror of bpf/proc.h: the traced set, the names `--comm` selects at exec, and forks,
//! execs and exits of traced processes.

/// Room in `traced`, hs_hits and hs_detached (the agent traces at most half as many).
pub const PROC_TRACED_ENTRIES: u32 = 8192;
pub const PROC_EV_FORK: u32 = 1;
pub const PROC_EV_EXIT: u32 = 2;
/// A traced process executed a new program, or an untraced one a program `--comm` names.
pub const PROC_EV_EXEC: u32 = 3;
/// Without --pid/--comm: a process not traced sent TLS on a connection it accepted
/// (`parent`: the port).
pub const PROC_EV_FOUND: u32 = 4;
/// A traced process started listening (`parent`: the port): its ports are read again now.
pub const PROC_EV_LISTEN: u32 = 5;
/// Names in `proc_comms` at most.
pub const PROC_COMMS: u32 = 64;

/// Key of `proc_comms`: a program's name as the kernel keeps it (NUL-padded).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct proc_comm {
    pub name: [u8; 16],
}

// SAFETY: a byte array, any bit pattern is valid.
unsafe impl aya::Pod for proc_comm {}

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

/// Value of `traced` (key: tgid).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct proc_traced {
    pub oncpu_ns: u64,
    pub exited: u32,
    /// No handshake probes: the kernel estimates its handshakes' CPU (bpf/estimate.bpf.h).
    pub estimate: u32,
    /// When its probes were attached (bpf_ktime_get_ns): its connections accepted before are
    /// estimated all the same.
    pub probed_ns: u64,
}

// SAFETY: plain integers, any bit pattern is valid; the map stores exactly this layout.
unsafe impl aya::Pod for proc_traced {}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct proc_notice {
    pub kind: u32,
    pub pid: u32,
    pub parent: u32,
    pub pad: u32,
    /// Its name as the kernel keeps it (NUL-padded): the child's at fork, the new program's
    /// at exec.
    pub comm: [u8; 16],
}

impl proc_notice {
    /// Its name, as /proc/PID/comm would give it.
    pub fn name(&self) -> String {
        let end = self.comm.iter().position(|&b| b == 0).unwrap_or(self.comm.len());
        String::from_utf8_lossy(&self.comm[..end]).into_owned()
    }
}
