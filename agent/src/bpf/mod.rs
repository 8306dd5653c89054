//! The kernel side as the agent sees it: the embedded object (bpf/tlsprof.bpf.c), its
//! loader, the types and constants of its shared headers (abi.rs, generated from them at
//! build time), and one module per shared header with the decoding of its events.
pub mod abi;
pub mod calib;
pub mod conn;
pub mod cpu;
pub mod handshake;
pub mod hello_cgroups;
pub mod hooks;
pub mod loader;
pub mod port_table;
pub mod proc;
pub mod read_switch;
mod readside;
pub use readside::Estimate;
pub mod rings;
mod served;
mod shared_uprobes;
pub mod sizes;
pub mod stats;
pub mod uprobes;
pub mod wire;

/// The compiled object of bpf/tlsprof.bpf.c, 8-byte aligned as aya wants it.
pub const OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/tlsprof.bpf.o"));

/// Gives back the pages the object takes in memory once aya has parsed it (aya keeps its own
/// copy of what it needs): ~1.9 MB, BTF and debug info mostly, that would stay resident. Read
/// again, they come from the executable's file again.
pub fn release_object(object: &'static [u8]) {
    // SAFETY: sysconf has no preconditions.
    let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) })
        .unwrap_or(4096)
        .max(4096);
    let start = (object.as_ptr() as usize).next_multiple_of(page);
    let end = (object.as_ptr() as usize + object.len()) / page * page;
    if end > start {
        // SAFETY: whole pages inside `object`, a static in the executable's read-only mapping
        // of its file, never written: dropped, they are read from the file on the next access.
        unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_DONTNEED) };
    }
}

/// Reads a kernel struct (abi.rs: every bit pattern a value) from a ring buffer record.
pub fn read_record<T: aya::Pod>(bytes: &[u8]) -> Option<T> {
    // SAFETY: T is Pod (any bytes are a value) and the length is checked; read_unaligned
    // copes with any alignment.
    (bytes.len() >= std::mem::size_of::<T>()).then(|| unsafe { std::ptr::read_unaligned(bytes.as_ptr().cast::<T>()) })
}
