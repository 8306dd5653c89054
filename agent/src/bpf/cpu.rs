//! Mirror of bpf/cpu.h: CPU samples (the per-process on-CPU time is in proc.rs).

pub const CPU_KSTACK_MAX: usize = 48;
pub const CPU_USTACK_MAX: usize = 64;
pub const CPU_SAMPLE_HANDSHAKE: u32 = 1;
pub const CPU_SAMPLE_USER: u32 = 2;

#[repr(C)]
#[derive(Clone, Copy)]
pub struct cpu_sample {
    pub tgid: u32,
    pub tid: u32,
    pub flags: u32,
    pub kdepth: u16,
    pub udepth: u16,
    pub sp_word: u64,
    pub kstack: [u64; CPU_KSTACK_MAX],
    pub ustack: [u64; CPU_USTACK_MAX],
}

impl cpu_sample {
    pub fn kernel_frames(&self) -> &[u64] {
        &self.kstack[..(self.kdepth as usize).min(CPU_KSTACK_MAX)]
    }
    pub fn user_frames(&self) -> &[u64] {
        &self.ustack[..(self.udepth as usize).min(CPU_USTACK_MAX)]
    }
}
