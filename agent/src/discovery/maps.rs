//! /proc/PID/maps, parsed in one place for everyone: the files a process maps
//! (discovery), its executable mappings (CPU attribution), and where the agent's own code
//! lies (the probe-cost calibration).
use std::{collections::BTreeSet, io, path::PathBuf};

/// One line of /proc/PID/maps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MapEntry<'a> {
    pub start: u64,
    pub end: u64,
    pub perms: &'a str,
    pub offset: u64,
    /// "major:minor", as the kernel writes it.
    pub dev: &'a str,
    pub inode: u64,
    /// The path, `[vdso]`-like names, or "" for anonymous memory; may hold spaces and end
    /// with " (deleted)".
    pub path: &'a str,
}

impl<'a> MapEntry<'a> {
    pub fn executable(&self) -> bool {
        self.perms.as_bytes().get(2) == Some(&b'x')
    }

    /// The file mapped here, if this maps a file (not anonymous memory, not `[vdso]`).
    pub fn file(&self) -> Option<&'a str> {
        (self.inode != 0 && self.path.starts_with('/')).then_some(self.path)
    }

    /// The mapped file's name as the process knew it, without the " (deleted)" the kernel
    /// adds once the name leads elsewhere (a library replaced on disk by an update).
    pub fn name(&self) -> Option<&'a str> {
        self.file().map(|p| p.strip_suffix(DELETED).unwrap_or(p))
    }

    /// The file's name no longer leads to the mapped file.
    pub fn deleted(&self) -> bool {
        self.file().is_some_and(|p| p.ends_with(DELETED))
    }

    /// The one path that opens the mapped file itself, whatever its name leads to from
    /// here: a chroot (the name is inside it, not on the host), a container's root, a file
    /// deleted or replaced since it was mapped. The kernel resolves it too (a uprobe's
    /// target). Reading it needs CAP_SYS_ADMIN or CAP_CHECKPOINT_RESTORE. Its name is the
    /// range in unpadded hex, where maps pads to 8 digits.
    pub fn open_path(&self, pid: u32) -> PathBuf {
        PathBuf::from(format!("/proc/{pid}/map_files/{:x}-{:x}", self.start, self.end))
    }
}

const DELETED: &str = " (deleted)";

/// The lines of a maps file that parse (the address, offset and inode in the kernel's
/// formats). Lines end at '\n' only: the kernel escapes that one in a path, not '\r'.
pub fn parse(text: &str) -> impl Iterator<Item = MapEntry<'_>> {
    text.split('\n').filter_map(|line| {
        // address perms offset dev inode path: the path is the 6th field and may hold spaces
        let mut it = line.splitn(6, char::is_whitespace);
        let (range, perms, offset, dev, inode) = (it.next()?, it.next()?, it.next()?, it.next()?, it.next()?);
        let (start, end) = range.split_once('-')?;
        Some(MapEntry {
            start: u64::from_str_radix(start, 16).ok()?,
            end: u64::from_str_radix(end, 16).ok()?,
            perms,
            offset: u64::from_str_radix(offset, 16).ok()?,
            dev,
            inode: inode.parse().ok()?,
            path: it.next().unwrap_or("").trim_start(),
        })
    })
}

/// The maps file of a process ("self" for the agent). File names are bytes: one that is not
/// UTF-8 (any user can make one and map it) must not hide the process's other mappings.
pub fn read(pid: &str) -> io::Result<String> {
    Ok(String::from_utf8_lossy(&std::fs::read(format!("/proc/{pid}/maps"))?).into_owned())
}

/// The names of the files a process maps (MapEntry::name: those deleted since included).
pub fn files(text: &str) -> BTreeSet<String> {
    parse(text).filter_map(|m| m.name().map(str::to_string)).collect()
}

/// The first mapping of each file a process maps, by (device, inode): the same name may
/// stand for two files (one deleted since, its successor mapped later).
pub fn first_mappings(text: &str) -> Vec<MapEntry<'_>> {
    let mut seen = BTreeSet::new();
    parse(text)
        .filter(|m| m.file().is_some() && seen.insert((m.dev, m.inode)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "\
55d0c0a00000-55d0c0a2c000 r--p 00000000 fe:01 1311234                    /usr/sbin/nginx
7f1c2c000000-7f1c2c021000 rw-p 00000000 00:00 0 
7f1c2d400000-7f1c2d45d000 r--p 00000000 fe:01 1319000                    /usr/lib/x86_64-linux-gnu/libssl.so.3
7f1c2d45d000-7f1c2d4b6000 r-xp 0005d000 fe:01 1319000                    /usr/lib/x86_64-linux-gnu/libssl.so.3
7f1c2d600000-7f1c2d601000 r-xp 00000000 fe:01 1319001                    /opt/my app/libssl.so.1.1
7f1c2d700000-7f1c2d701000 r-xp 00000000 fe:01 1319002                    /usr/lib/libssl.so.3 (deleted)
7ffd5a3c1000-7ffd5a3e2000 rw-p 00000000 00:00 0                          [stack]
7ffd5a3f0000-7ffd5a3f2000 r-xp 00000000 00:00 0                          [vdso]
";

    #[test]
    fn mapped_files() {
        let paths = files(TEXT);
        let v: Vec<&str> = paths.iter().map(String::as_str).collect();
        assert_eq!(
            v,
            [
                "/opt/my app/libssl.so.1.1",
                "/usr/lib/libssl.so.3",
                "/usr/lib/x86_64-linux-gnu/libssl.so.3",
                "/usr/sbin/nginx"
            ]
        );
        let firsts: Vec<(u64, &str)> = first_mappings(TEXT)
            .into_iter()
            .map(|m| (m.start, m.name().unwrap()))
            .collect();
        assert_eq!(
            firsts,
            [
                (0x55d0c0a00000, "/usr/sbin/nginx"),
                (0x7f1c2d400000, "/usr/lib/x86_64-linux-gnu/libssl.so.3"),
                (0x7f1c2d600000, "/opt/my app/libssl.so.1.1"),
                (0x7f1c2d700000, "/usr/lib/libssl.so.3"),
            ]
        );
        assert!(first_mappings(TEXT)[3].deleted() && !first_mappings(TEXT)[2].deleted());
        assert_eq!(
            first_mappings(TEXT)[1].open_path(42),
            PathBuf::from("/proc/42/map_files/7f1c2d400000-7f1c2d45d000")
        );
    }

    /// A file deleted after it was mapped still opens through map_files (with the privilege
    /// it needs: the unit tests also run unprivileged, where the kernel refuses it).
    #[test]
    fn deleted_file_opens_through_map_files() {
        let dir = crate::discovery::elf_fuzz::Scratch::new("maps-deleted");
        let path = dir.0.join("libgone.so");
        std::fs::write(&path, b"the mapped bytes").unwrap();
        let file = std::fs::File::open(&path).unwrap();
        // SAFETY: a private read-only mapping of a file only this test writes.
        let _map = unsafe { memmap2::Mmap::map(&file) }.unwrap();
        std::fs::remove_file(&path).unwrap();
        let text = read("self").unwrap();
        let m = first_mappings(&text)
            .into_iter()
            .find(|m| m.name().is_some_and(|n| n.ends_with("libgone.so")))
            .unwrap();
        assert!(m.deleted());
        match std::fs::read(m.open_path(std::process::id())) {
            Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
                crate::testing::skipped(format!("map_files needs CAP_SYS_ADMIN or CAP_CHECKPOINT_RESTORE ({e})"))
            }
            read => assert_eq!(read.unwrap(), b"the mapped bytes"),
        }
    }

    #[test]
    fn entries() {
        let all: Vec<MapEntry> = parse(TEXT).collect();
        assert_eq!(all.len(), 8);
        let ssl = &all[3];
        assert_eq!(
            (ssl.start, ssl.end, ssl.offset, ssl.dev, ssl.inode),
            (0x7f1c2d45d000, 0x7f1c2d4b6000, 0x5d000, "fe:01", 1319000)
        );
        assert!(ssl.executable() && !all[2].executable());
        assert_eq!(all[1].path, "");
        assert_eq!(all[1].file(), None);
        assert_eq!(all[7].file(), None, "[vdso] is not a file");
        assert_eq!(all[5].file(), Some("/usr/lib/libssl.so.3 (deleted)"));
        assert!(parse("garbage\n").next().is_none());
    }

    /// Found by fuzz::maps_lines: `lines()` took a path's trailing '\r' for part of the line
    /// end, naming another file than the one mapped.
    #[test]
    fn path_ending_in_carriage_return() {
        let text = "7f1c2d600000-7f1c2d601000 r-xp 00000000 fe:01 1319001    /tmp/libssl.so.3\r\n";
        let m = parse(text).next().unwrap();
        assert_eq!(m.path, "/tmp/libssl.so.3\r");
    }

    /// Issue 19 (found writing fuzz::maps_any_text): a path is bytes, and read_to_string
    /// refused the whole file for one that is not UTF-8, hiding a process's libssl and code.
    #[test]
    fn path_not_utf8() {
        use std::os::unix::ffi::OsStrExt as _;
        let dir = crate::discovery::elf_fuzz::Scratch::new("maps-utf8");
        let path = dir.0.join(std::ffi::OsStr::from_bytes(b"lib\xffname.so"));
        std::fs::write(&path, [0u8; 4096]).unwrap();
        let file = std::fs::File::open(&path).unwrap();
        // SAFETY: a private read-only mapping of a file only this test writes.
        let _map = unsafe { memmap2::Mmap::map(&file) }.unwrap();
        let text = read("self").unwrap();
        assert!(files(&text).iter().any(|p| p.ends_with("lib\u{fffd}name.so")));
    }

    #[test]
    fn own_maps_hold_this_test() {
        let text = read("self").unwrap();
        let here = own_maps_hold_this_test as fn() as usize as u64;
        assert!(parse(&text).any(|m| m.executable() && (m.start..m.end).contains(&here)));
    }
}
