//! What is known of each file the traced processes map, by file identity: one cache for
//! everything tlsprof reads out of ELF files — a TLS library's handshake hooks
//! (agent/inspect.rs asks), the TLS stack linked into an executable (stacks.rs), and a
//! file's TLS code, primitives and names for the CPU split (cpu/symbols asks). Each fact
//! is read when first asked and kept with the file's other facts; the agent and the CPU
//! split share one `ElfFiles`.
use std::{
    collections::HashMap,
    os::unix::fs::MetadataExt as _,
    path::PathBuf,
    sync::{Arc, Mutex, MutexGuard},
};

use super::{elf::FileSyms, handshake::HandshakeHooks, maps::MapEntry};
use crate::bounds::Dropped;

/// Files known at once, at most; beyond, those whose symbols no process holds are
/// forgotten (read again if needed), counted: tlsprof_table_full_total{table="elf_files"}.
pub const MAX_FILES: usize = 4096;
/// Files whose symbols are held at once, at most: the executable files the traced
/// processes map. Beyond (after dropping those no process maps), a new file's are not
/// read: its code is `[unknown]`, counted: tlsprof_table_full_total{table="symbol_files"}.
pub const MAX_SYMBOL_FILES: usize = 1024;

/// A file: its device and inode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FileKey {
    dev: u64,
    ino: u64,
}

impl FileKey {
    pub fn of(md: &std::fs::Metadata) -> Self {
        Self {
            dev: md.dev(),
            ino: md.ino(),
        }
    }

    pub fn ino(&self) -> u64 {
        self.ino
    }

    /// As a line of /proc/PID/maps names it: "major:minor" in hex, and the inode.
    pub fn of_mapping(m: &MapEntry) -> Option<Self> {
        let (major, minor) = m.dev.split_once(':')?;
        let dev = libc::makedev(
            u32::from_str_radix(major, 16).ok()?,
            u32::from_str_radix(minor, 16).ok()?,
        );
        Some(Self { dev, ino: m.inode })
    }
}

/// Why a file's handshake hooks could not be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HooksFailure {
    /// The file could not be opened or mapped.
    Unreadable,
    /// It is not an ELF file the reader understands.
    Unparsable,
}

/// A file's handshake hooks, or why they could not be read (and the message).
pub type Hooks = Result<Vec<HandshakeHooks>, (HooksFailure, String)>;

#[derive(Default)]
struct Entry {
    /// With the (size, mtime) they were read at: a file rewritten in place is read again.
    hooks: Option<((u64, i64), Hooks)>,
    stack: Option<Option<&'static str>>,
    /// None: not asked yet; Some(None): could not be read.
    syms: Option<Option<Arc<FileSyms>>>,
}

impl Entry {
    fn holds_symbols(&self) -> bool {
        matches!(&self.syms, Some(Some(_)))
    }

    /// Some process's mappings hold its symbols.
    fn in_use(&self) -> bool {
        matches!(&self.syms, Some(Some(s)) if Arc::strong_count(s) > 1)
    }
}

struct Inner {
    files: HashMap<FileKey, Entry>,
    debug_dirs: Vec<PathBuf>,
    keep_names: bool,
    /// Entries forgotten at MAX_FILES, and symbol files not read at MAX_SYMBOL_FILES,
    /// not exported yet.
    evicted: u64,
    symbols_refused: u64,
}

impl Inner {
    /// The entry of a file, making room for it at MAX_FILES.
    fn entry(&mut self, key: FileKey) -> &mut Entry {
        if !self.files.contains_key(&key) && self.files.len() >= MAX_FILES {
            let before = self.files.len();
            let mut room = before + 1 - MAX_FILES;
            self.files.retain(|_, e| {
                if room > 0 && !e.in_use() {
                    room -= 1;
                    return false;
                }
                true
            });
            self.evicted += (before - self.files.len()) as u64;
        }
        self.files.entry(key).or_default()
    }
}

/// The cache, shared (cheap to clone).
#[derive(Clone)]
pub struct ElfFiles(Arc<Mutex<Inner>>);

impl ElfFiles {
    /// `debug_dirs`: where debug files are looked up by build id; `keep_names`: keep every
    /// function's name (flame graphs), not only those of TLS code.
    pub fn new(debug_dirs: Vec<PathBuf>, keep_names: bool) -> Self {
        Self(Arc::new(Mutex::new(Inner {
            files: HashMap::new(),
            debug_dirs,
            keep_names,
            evicted: 0,
            symbols_refused: 0,
        })))
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A file's handshake hooks, read by `read` unless known for this version (size,
    /// mtime).
    pub fn hooks(&self, key: FileKey, version: (u64, i64), read: impl FnOnce() -> Hooks) -> Hooks {
        let mut inner = self.lock();
        let e = inner.entry(key);
        match &e.hooks {
            Some((v, h)) if *v == version => h.clone(),
            _ => {
                let h = read();
                e.hooks = Some((version, h.clone()));
                h
            }
        }
    }

    /// The TLS stack an executable carries, read by `read` unless known.
    pub fn stack(&self, key: FileKey, read: impl FnOnce() -> Option<&'static str>) -> Option<&'static str> {
        let mut inner = self.lock();
        if let Some(Some(s)) = inner.files.get(&key).and_then(|e| e.syms.as_ref()) {
            return s.stack; // its symbols were read already
        }
        *inner.entry(key).stack.get_or_insert_with(read)
    }

    /// A file's symbols, read by `load` (given the debug directories and whether to keep
    /// every name) unless known; None when it cannot be read, or at MAX_SYMBOL_FILES.
    pub fn symbols(
        &self,
        key: FileKey,
        load: impl FnOnce(&[PathBuf], bool) -> Option<FileSyms>,
    ) -> Option<Arc<FileSyms>> {
        let mut inner = self.lock();
        if let Some(s) = inner.files.get(&key).and_then(|e| e.syms.as_ref()) {
            return s.clone();
        }
        let held = inner.files.values().filter(|e| e.holds_symbols()).count();
        if held >= MAX_SYMBOL_FILES {
            // symbols no process maps make room
            for e in inner.files.values_mut() {
                if e.holds_symbols() && !e.in_use() {
                    e.syms = None;
                }
            }
            if inner.files.values().filter(|e| e.holds_symbols()).count() >= MAX_SYMBOL_FILES {
                inner.symbols_refused += 1;
                return None;
            }
        }
        let syms = load(&inner.debug_dirs, inner.keep_names).map(Arc::new);
        inner.entry(key).syms = Some(syms.clone());
        syms
    }

    /// Drops the symbols no process maps any more (those only the cache holds).
    pub fn trim(&self) {
        for e in self.lock().files.values_mut() {
            if e.holds_symbols() && !e.in_use() {
                e.syms = None;
            }
        }
    }

    /// Adds what the bounds dropped since the last call to `dropped` (exported as
    /// tlsprof_table_full_total).
    pub fn take_dropped(&self, dropped: &mut Dropped) {
        let mut inner = self.lock();
        dropped.add("elf_files", std::mem::take(&mut inner.evicted));
        dropped.add("symbol_files", std::mem::take(&mut inner.symbols_refused));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(i: u64) -> FileKey {
        FileKey { dev: 1, ino: i }
    }

    #[test]
    fn files_are_bounded_and_known_ones_not_read_again() {
        let f = ElfFiles::new(Vec::new(), false);
        for i in 0..MAX_FILES as u64 + 7 {
            assert_eq!(f.stack(key(i), || Some("openssl")), Some("openssl"));
        }
        assert_eq!(f.lock().files.len(), MAX_FILES);
        let mut d = Dropped::default();
        f.take_dropped(&mut d);
        assert_eq!((d.get("elf_files"), d.get("symbol_files")), (7, 0));
        f.take_dropped(&mut d);
        assert_eq!(d.get("elf_files"), 7, "taken: nothing more");
        let last = key(MAX_FILES as u64 + 6);
        assert_eq!(f.stack(last, || panic!("read again")), Some("openssl"));
    }

    #[test]
    fn symbols_held_by_processes_stay_and_bound_the_new() {
        let small = || FileSyms::load("/bin/true", std::path::Path::new("/bin/true"), &[], false);
        let f = ElfFiles::new(Vec::new(), false);
        // full of symbols no process maps: they make room
        for i in 0..MAX_SYMBOL_FILES as u64 {
            assert!(f.symbols(key(i), |_, _| small()).is_some());
        }
        assert!(f.symbols(key(1 << 20), |_, _| small()).is_some());
        let mut d = Dropped::default();
        f.take_dropped(&mut d);
        assert_eq!(d.get("symbol_files"), 0);
        // full of symbols processes hold: a new file's are not read, and counted
        let held: Vec<Arc<FileSyms>> = (0..MAX_SYMBOL_FILES as u64)
            .map(|i| f.symbols(key(100_000 + i), |_, _| small()).unwrap())
            .collect();
        assert!(f
            .symbols(key(1 << 21), |_, _| panic!("not read at the bound"))
            .is_none());
        f.take_dropped(&mut d);
        assert_eq!(d.get("symbol_files"), 1);
        drop(held);
        f.trim();
        assert!(f.symbols(key(1 << 21), |_, _| small()).is_some());
        // known: not read again
        assert!(f.symbols(key(1 << 21), |_, _| panic!("read again")).is_some());
    }

    #[test]
    fn hooks_are_read_again_when_the_file_changes_in_place() {
        let f = ElfFiles::new(Vec::new(), false);
        let v = |md: &std::fs::Metadata| (FileKey::of(md), (md.size(), md.mtime()));
        let (k, ver) = v(&std::fs::metadata("/proc/self/exe").unwrap());
        assert!(f.hooks(k, ver, || Ok(Vec::new())).unwrap().is_empty());
        assert!(f.hooks(k, ver, || panic!("read again")).unwrap().is_empty());
        let dir = super::super::elf_fuzz::Scratch::new("files-hooks");
        let p = dir.0.join("lib");
        std::fs::write(&p, b"one").unwrap();
        let (k, before) = v(&std::fs::metadata(&p).unwrap());
        assert!(f
            .hooks(k, before, || Err((HooksFailure::Unparsable, "x".into())))
            .is_err());
        std::fs::write(&p, b"longer now").unwrap();
        let (k2, after) = v(&std::fs::metadata(&p).unwrap());
        assert_eq!(k, k2, "the same file");
        assert!(
            f.hooks(k, after, || Ok(Vec::new())).is_ok(),
            "rewritten in place: read again"
        );
    }

    #[test]
    fn a_mapping_and_a_stat_name_the_same_file() {
        let text = crate::discovery::maps::read("self").unwrap();
        let m = crate::discovery::maps::parse(&text)
            .find(|m| m.file().is_some() && !m.deleted())
            .unwrap();
        let md = std::fs::metadata(m.open_path(std::process::id())).unwrap();
        assert_eq!(FileKey::of_mapping(&m), Some(FileKey::of(&md)), "{m:?}");
    }
}
