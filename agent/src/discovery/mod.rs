//! Finding what to trace, through /proc: processes (procfs.rs) and their memory maps
//! (maps.rs), which of them the command line selects (select.rs), the TLS stack each
//! carries (stacks.rs), and where OpenSSL's handshake is in their files (openssl.rs).
#[cfg(test)]
mod fuzz;
pub mod maps;
pub mod openssl;
pub mod procfs;
pub mod select;
pub mod stacks;

/// The last component of a path.
pub fn basename(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}
