//! Property tests of discovery's parsers on what other local users control (issue 19): the
//! ELF files the TLS libraries' entry points are looked for in (mutations of real ones, shared with
//! cpu/symbols/fuzz.rs), the lines of /proc/PID/maps (file names hold any byte but the
//! newline, which the kernel escapes), /proc/PID/stat (comm holds any byte), and a Go
//! executable's function table (a stripped Go binary's `.gopclntab`).
use std::fs;

use proptest::{collection::vec, prelude::*};

use super::{
    gopclntab,
    handshake::{handshake_hooks, library_of_file, HookMode},
    maps,
    procfs::parse_stat,
};
use crate::{
    discovery::elf_fuzz::{elf_input, Scratch},
    wire::tls::fuzz::{config, run_case},
};

/// The fields of a maps line: start, end, perms, offset, dev, inode, path.
type Fields = (u64, u64, String, u64, String, u64, String);

/// A maps line as the kernel writes it, and its fields.
fn maps_line() -> impl Strategy<Value = (String, Fields)> {
    let path = prop_oneof![
        Just(String::new()),
        Just("[vdso]".to_string()),
        Just("/usr/lib/x86_64-linux-gnu/libssl.so.3 (deleted)".to_string()),
        "/[^\n]{0,40}",
        "/[^\n]{0,40}( \\(deleted\\))?",
        "/[ \t\r]{1,3}",
        (0..5000usize).prop_map(|n| format!("/{}", "a b".repeat(n))),
    ];
    (
        any::<u64>(),
        any::<u64>(),
        "[r-][w-][x-][ps]",
        any::<u64>(),
        "[0-9a-f]{2,3}:[0-9a-f]{2}",
        any::<u64>(),
        path,
    )
        .prop_map(|(start, end, perms, offset, dev, inode, path)| {
            let head = format!("{start:08x}-{end:08x} {perms} {offset:08x} {dev} {inode} ");
            let pad = if path.is_empty() {
                0
            } else {
                73usize.saturating_sub(head.len())
            };
            (
                format!("{head}{}{path}", " ".repeat(pad)),
                (start, end, perms, offset, dev, inode, path),
            )
        })
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn tls_libraries_in_elf_files(input in elf_input(), api: bool) {
        let scratch = Scratch::new("openssl");
        let (bytes, _) = input.bytes();
        let path = scratch.0.join("libssl.so.3");
        fs::write(&path, &bytes).unwrap();
        let mode = if api { HookMode::Api } else { HookMode::Auto };
        let (_, peak) = run_case({
            let d = input.describe();
            move || d
        }, || {
            let _ = handshake_hooks(&path, mode);
        });
        prop_assert!(peak <= 16 * bytes.len() + (1 << 20), "{} bytes of heap for a file of {}", peak, bytes.len());
    }

    /// Well-formed lines read back as written, whatever the path holds.
    #[test]
    fn maps_lines(lines in vec(maps_line(), 0..8)) {
        let text: String = lines.iter().map(|(l, _)| format!("{l}\n")).collect();
        let got: Vec<maps::MapEntry> = maps::parse(&text).collect();
        prop_assert_eq!(got.len(), lines.len());
        for (m, (_, (start, end, perms, offset, dev, inode, path))) in got.iter().zip(&lines) {
            prop_assert_eq!(
                (m.start, m.end, m.perms, m.offset, m.dev, m.inode, m.path),
                (*start, *end, perms.as_str(), *offset, dev.as_str(), *inode, path.as_str())
            );
        }
        for f in maps::files(&text) {
            prop_assert!(f.starts_with('/') && !f.ends_with(" (deleted)"), "{:?}", f);
            let _ = library_of_file(&f);
        }
    }

    #[test]
    fn maps_any_text(text in any::<String>(), junk in vec(any::<u8>(), 0..256)) {
        for t in [text, String::from_utf8_lossy(&junk).into_owned()] {
            for m in maps::parse(&t) {
                let _ = (m.executable(), m.file());
            }
            let _ = maps::files(&t);
        }
    }

    /// /proc/PID/stat reads back whatever the comm holds.
    #[test]
    fn stat_lines(comm in prop_oneof![any::<String>(), "[()a ]{0,16}"], ppid: u32, start: u64, vsize: u64, junk in any::<String>()) {
        let text = format!(
            "1234 ({comm}) S {ppid} 1234 1234 0 -1 4194560 100 0 0 0 5 3 0 0 20 0 1 0 {start} {vsize} 300 18446744073709551615 1 1 0 0 0\n"
        );
        let s = parse_stat(&text);
        prop_assert_eq!(s.map(|s| (s.comm, s.ppid, s.start_time, s.vsize)), Some((comm, ppid, start, vsize)));
        let _ = parse_stat(&junk);
    }

    /// A Go function table with any header (magic of each version, any pointer size, any
    /// counts and offsets) over any bytes: no panic, no more functions than the table holds
    /// pairs for, each one a non-empty range.
    #[test]
    fn go_function_tables(
        magic in prop_oneof![Just(0xffff_fffau32), Just(0xffff_fff0), Just(0xffff_fff1), any::<u32>()],
        ptr in prop_oneof![Just(8u8), Just(4u8), any::<u8>()],
        words in vec(prop_oneof![0u64..64, 0u64..4096, any::<u64>()], 8),
        tail in vec(any::<u8>(), 0..2048),
        text: u64,
    ) {
        let mut t = Vec::new();
        t.extend(magic.to_le_bytes());
        t.extend([0, 0, 1, ptr]);
        for w in &words {
            if ptr == 4 { t.extend((*w as u32).to_le_bytes()) } else { t.extend(w.to_le_bytes()) }
        }
        t.extend(&tail);
        let (_, peak) = run_case({
            let n = t.len();
            move || format!("table of {n} bytes")
        }, || {
            if let Some(f) = gopclntab::parse(&t, text) {
                assert!(f.len() <= t.len() / 8);
                assert!(f.iter().all(|(start, end, _)| start < end));
            }
        });
        prop_assert!(peak <= 16 * t.len() + (1 << 16), "{} bytes of heap for a table of {}", peak, t.len());
    }
}
