//! From sampled addresses to code: is it TLS library code, which crypto primitive, is it
//! kernel networking, and names for flame graphs.
//!
//! User space: each executable mapping of a process is read from its ELF file (through
//! /proc/PID/map_files, so containers and replaced files work): discovery/elf.rs, which
//! this module asks. Kernel: /proc/kallsyms: kallsyms.rs.
#[cfg(test)]
mod fuzz;
mod kallsyms;

use std::sync::Arc;

use crate::discovery::{
    files::{ElfFiles, FileKey},
    maps,
};

pub use crate::discovery::{elf::FileSyms, prim::Prim};
pub use kallsyms::{KClass, Kallsyms};

/// One executable mapping of a process.
#[derive(Clone)]
pub struct Mapping {
    pub start: u64,
    pub end: u64,
    pub offset: u64,
    /// None: anonymous executable memory (JIT code) or a file that could not be read.
    pub file: Option<Arc<FileSyms>>,
    pub anon: bool,
}

/// The executable mappings of a process, its memory map read now.
pub fn mappings(files: &ElfFiles, pid: u32) -> std::io::Result<Vec<Mapping>> {
    Ok(mappings_in(files, pid, &maps::read(&pid.to_string())?))
}

/// The executable mappings of a process, from its memory map (`text`); each file's
/// symbols as `files` knows or reads them.
pub fn mappings_in(files: &ElfFiles, pid: u32, text: &str) -> Vec<Mapping> {
    let mut out = Vec::new();
    for m in maps::parse(text).filter(|m| m.executable()) {
        let (start, end, offset) = (m.start, m.end, m.offset);
        let file = match (m.file(), FileKey::of_mapping(&m)) {
            (Some(path), Some(key)) => files.symbols(key, |dirs, keep| {
                FileSyms::load(m.name().unwrap_or(path), &m.open_path(pid), dirs, keep)
            }),
            _ => None,
        };
        out.push(Mapping {
            start,
            end,
            offset,
            file,
            // [vdso], JIT code, anonymous memory
            anon: m.file().is_none() && m.path.is_empty(),
        });
    }
    out.sort_unstable_by_key(|m| m.start);
    out
}

/// The mapping holding an address.
pub fn find(maps: &[Mapping], addr: u64) -> Option<&Mapping> {
    let i = maps.partition_point(|m| m.start <= addr);
    let m = maps.get(i.checked_sub(1)?)?;
    (addr < m.end).then_some(m)
}

impl Mapping {
    /// The file's virtual address for a process address.
    pub fn vaddr(&self, addr: u64) -> Option<u64> {
        self.file.as_ref()?.vaddr(addr - self.start + self.offset)
    }
}
