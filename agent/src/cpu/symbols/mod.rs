//! From sampled addresses to code: is it TLS library code, which crypto primitive, is it
//! kernel networking, and names for flame graphs.
//!
//! User space: each executable mapping of a process is read from its ELF file (through
//! /proc/PID/map_files, so containers and replaced files work): discovery/elf.rs, which
//! this module asks. Kernel: /proc/kallsyms: kallsyms.rs.
#[cfg(test)]
mod fuzz;
mod kallsyms;

use std::{collections::HashMap, path::PathBuf, sync::Arc};

use crate::discovery::maps;

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

/// Files whose symbols are held at once, at most: the executable files the traced
/// processes map. Beyond (after dropping those no process maps), a new file is not read:
/// its code is `[unknown]`, counted by the owner:
/// tlsprof_table_full_total{table="symbol_files"}.
pub const MAX_SYMBOL_FILES: usize = 1024;

/// Files read so far, by (device, inode) as /proc/PID/maps names them.
pub struct FileCache {
    files: HashMap<(String, u64), Option<Arc<FileSyms>>>,
    debug_dirs: Vec<PathBuf>,
    keep_names: bool,
    /// Mappings left without their file at the bound, not exported yet.
    pub dropped: u64,
}

impl FileCache {
    pub fn new(debug_dirs: Vec<PathBuf>, keep_names: bool) -> Self {
        Self {
            files: HashMap::new(),
            debug_dirs,
            keep_names,
            dropped: 0,
        }
    }

    /// The executable mappings of a process, its memory map read now.
    pub fn mappings(&mut self, pid: u32) -> std::io::Result<Vec<Mapping>> {
        Ok(self.mappings_in(pid, &maps::read(&pid.to_string())?))
    }

    /// The executable mappings of a process, from its memory map (`text`).
    pub fn mappings_in(&mut self, pid: u32, text: &str) -> Vec<Mapping> {
        let mut out = Vec::new();
        for m in maps::parse(text).filter(|m| m.executable()) {
            let (start, end, offset) = (m.start, m.end, m.offset);
            let Some(path) = m.file() else {
                // [vdso], JIT code, anonymous memory
                out.push(Mapping {
                    start,
                    end,
                    offset,
                    file: None,
                    anon: m.path.is_empty(),
                });
                continue;
            };
            let key = (m.dev.to_string(), m.inode);
            if !self.files.contains_key(&key) && self.files.len() >= MAX_SYMBOL_FILES {
                // files no process maps, and those that could not be read (tried again)
                self.files
                    .retain(|_, f| f.as_ref().is_some_and(|f| Arc::strong_count(f) > 1));
                if self.files.len() >= MAX_SYMBOL_FILES {
                    self.dropped += 1;
                    out.push(Mapping {
                        start,
                        end,
                        offset,
                        file: None,
                        anon: false,
                    });
                    continue;
                }
            }
            let keep = self.keep_names;
            let dirs = &self.debug_dirs;
            let file = self
                .files
                .entry(key)
                .or_insert_with(|| {
                    let host = m.open_path(pid);
                    FileSyms::load(m.name().unwrap_or(path), &host, dirs, keep).map(Arc::new)
                })
                .clone();
            out.push(Mapping {
                start,
                end,
                offset,
                file,
                anon: false,
            });
        }
        out.sort_unstable_by_key(|m| m.start);
        out
    }

    /// Drops files no process maps any more (those only the cache holds).
    pub fn trim(&mut self) {
        self.files
            .retain(|_, f| f.as_ref().is_none_or(|f| Arc::strong_count(f) > 1));
    }
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

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    /// The files this process maps, none cached before.
    fn own_files(c: &mut FileCache) -> usize {
        let maps = c.mappings(std::process::id()).unwrap();
        maps.iter().filter(|m| m.file.is_some()).count()
    }

    #[test]
    fn the_cache_is_bounded() {
        let mut c = FileCache::new(Vec::new(), false);
        // full of files that could not be read: they make room
        for i in 0..MAX_SYMBOL_FILES as u64 {
            c.files.insert(("fake".into(), i), None);
        }
        assert!(own_files(&mut c) > 0);
        assert_eq!(c.dropped, 0);
        // full of files processes map: a new one is not read, and counted
        let exe = Arc::new(FileSyms::load("/proc/self/exe", Path::new("/proc/self/exe"), &[], false).unwrap());
        let mut c = FileCache::new(Vec::new(), false);
        let held: Vec<Arc<FileSyms>> = (0..MAX_SYMBOL_FILES).map(|_| exe.clone()).collect();
        for (i, f) in held.iter().enumerate() {
            c.files.insert(("fake".into(), i as u64), Some(f.clone()));
        }
        assert_eq!(own_files(&mut c), 0);
        assert!(c.dropped > 0);
        assert_eq!(c.files.len(), MAX_SYMBOL_FILES);
    }
}
