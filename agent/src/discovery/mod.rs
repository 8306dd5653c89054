//! Finding what to trace and what it is, through /proc: processes (procfs.rs) and their
//! memory maps (maps.rs), which of them the command line selects (select.rs), the TLS
//! stack each carries (stacks.rs), where each TLS library's handshake is in their files
//! (handshake/), and what one ELF file holds: TLS code, crypto primitives, names (elf.rs,
//! prim.rs; the CPU split asks them). It imports nothing of cpu/.
pub mod elf;
#[cfg(test)]
pub(crate) mod elf_fuzz;
pub mod files;
#[cfg(test)]
mod fuzz;
pub mod gopclntab;
pub mod handshake;
pub mod maps;
pub mod prim;
pub mod procfs;
pub mod select;
pub mod stacks;

/// The last component of a path.
pub fn basename(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}
