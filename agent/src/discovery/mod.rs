//! Finding what to trace, through /proc: processes (procfs.rs) and their memory maps
//! (maps.rs), which of them the command line selects (select.rs), the TLS stack each
//! carries (stacks.rs), and where each TLS library's handshake is in their files (handshake/).
#[cfg(test)]
mod fuzz;
pub mod gopclntab;
pub mod handshake;
pub mod maps;
pub mod procfs;
pub mod select;
pub mod stacks;

/// The last component of a path.
pub fn basename(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}
