//! Mirror of bpf/proc.h: the traced set, and forks and exits of traced processes.

/// Room in `traced`, hs_hits and hs_detached (the agent traces at most half as many).
pub const PROC_TRACED_ENTRIES: u32 = 8192;
pub const PROC_EV_FORK: u32 = 1;
pub const PROC_EV_EXIT: u32 = 2;

/// Value of `traced` (key: tgid).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct proc_traced {
    pub oncpu_ns: u64,
    pub exited: u32,
    /// No handshake probes: the kernel estimates its handshakes' CPU (bpf/estimate.bpf.h).
    pub estimate: u32,
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
}
