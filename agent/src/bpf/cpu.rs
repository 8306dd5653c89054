//! CPU samples (bpf/cpu.h; its types generated: abi.rs) (the per-process on-CPU time is in proc.rs).

pub use super::abi::{cpu_sample, CPU_SAMPLE_HANDSHAKE, CPU_SAMPLE_USER};

impl cpu_sample {
    pub fn kernel_frames(&self) -> &[u64] {
        &self.kstack[..(self.kdepth as usize).min(self.kstack.len())]
    }
    pub fn user_frames(&self) -> &[u64] {
        &self.ustack[..(self.udepth as usize).min(self.ustack.len())]
    }
}
