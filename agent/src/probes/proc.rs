//! Mirror of bpf/proc.h: fork and exit of traced processes.

pub const OBJECT: &[u8] = super::bpf_object!("proc");

pub const PROC_EV_FORK: u32 = 1;
pub const PROC_EV_EXIT: u32 = 2;

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct proc_notice {
    pub kind: u32,
    pub pid: u32,
    pub parent: u32,
    pub pad: u32,
}
