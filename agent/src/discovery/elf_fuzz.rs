//! Property tests of the ELF readers on what other local users control: the ELF files their
//! processes map (any bytes, and real ELF files — /bin/true, libssl — mutated where the
//! readers look and truncated) and the names those files are mapped under. The ELF
//! mutations and scratch directories are shared with discovery/fuzz.rs and the tests of
//! maps.rs and cpu/symbols.
use std::{
    fs,
    path::{Path, PathBuf},
    sync::OnceLock,
};

use object::{Object, ObjectSection, ObjectSegment, ObjectSymbol};
use proptest::{collection::vec, prelude::*, sample::Index};

use super::elf::{follows_call, FileSyms};
use crate::wire::tls::fuzz::{config, run_case};

/// A real ELF file to mutate, and the byte ranges its readers look at.
pub struct Seed {
    pub path: &'static str,
    pub bytes: Vec<u8>,
    /// Headers, symbol and string tables, dynamic section, relocations, notes, the
    /// SSL_METHOD tables and the code of the functions that return them; the whole file first.
    regions: Vec<(usize, usize)>,
    /// Addresses worth asking about: segment bounds, symbols.
    pub addrs: Vec<u64>,
    build_id: Option<Vec<u8>>,
}

fn seed(path: &'static str) -> Option<Seed> {
    let bytes = fs::read(path).ok()?;
    let file = object::File::parse(&*bytes).ok()?;
    let u16_at = |o: usize| u16::from_le_bytes([bytes[o], bytes[o + 1]]) as usize;
    let u64_at = |o: usize| u64::from_le_bytes(bytes[o..o + 8].try_into().unwrap()) as usize;
    let (phoff, shoff) = (u64_at(0x20), u64_at(0x28));
    let mut regions = vec![
        (0, bytes.len()),
        (0, 64),
        (phoff, phoff + u16_at(0x36) * u16_at(0x38)),
        (shoff, shoff + u16_at(0x3A) * u16_at(0x3C)),
    ];
    const LOOKED_AT: &[&str] = &[
        ".dynsym",
        ".dynstr",
        ".symtab",
        ".strtab",
        ".dynamic",
        ".rela.dyn",
        ".rela.plt",
        ".gnu.hash",
        ".hash",
        ".gnu.version",
        ".gnu.version_r",
        ".note.gnu.build-id",
        ".data.rel.ro",
        ".shstrtab",
    ];
    for s in file.sections() {
        if let (Ok(name), Some((off, size))) = (s.name(), s.file_range()) {
            if LOOKED_AT.contains(&name) {
                regions.push((off as usize, (off + size) as usize));
            }
        }
    }
    let mut addrs = vec![0, 1, u64::MAX, u64::MAX - 4];
    for s in file.segments() {
        let (a, size) = (s.address(), s.size());
        addrs.extend([a, a.wrapping_add(size).wrapping_sub(1), a.wrapping_add(size)]);
    }
    for s in file.dynamic_symbols().filter(|s| s.is_definition() && s.size() > 0) {
        let name = s.name().unwrap_or_default();
        if name.starts_with("TLS_") || name.starts_with("SSL_free") || name.starts_with("SSL_do") {
            let sect = file
                .sections()
                .find(|x| s.address() >= x.address() && s.address() < x.address() + x.size());
            if let Some((off, _)) = sect.and_then(|x| Some((s.address() - x.address() + x.file_range()?.0, ()))) {
                regions.push((off as usize, off as usize + 16));
            }
        }
        addrs.extend([s.address(), s.address() + 4, s.address() + s.size()]);
    }
    addrs.sort_unstable();
    addrs.dedup();
    addrs.truncate(256);
    regions.retain(|(a, b)| a < b && *b <= bytes.len());
    let build_id = file.build_id().ok().flatten().map(<[u8]>::to_vec);
    Some(Seed {
        path,
        bytes,
        regions,
        addrs,
        build_id,
    })
}

/// /bin/true and libssl where they are installed (a property with none to mutate checks
/// arbitrary bytes only).
pub fn seeds() -> &'static [Seed] {
    static S: OnceLock<Vec<Seed>> = OnceLock::new();
    S.get_or_init(|| {
        ["/bin/true", "/usr/lib/x86_64-linux-gnu/libssl.so.3"]
            .into_iter()
            .filter_map(|p| {
                let s = seed(p);
                if s.is_none() {
                    crate::testing::skipped(format!("fuzz seed {p}: not there, not mutated"));
                }
                s
            })
            .collect()
    })
}

/// A value written into an ELF file: as is, or relative to the file's size.
#[derive(Debug, Clone)]
pub enum Val {
    Abs(u64),
    Len(i8),
}

#[derive(Debug, Clone)]
pub struct ElfEdit {
    region: Index,
    at: Index,
    val: Val,
    /// Bytes written (little-endian): 1, 2, 4 or 8.
    width: u8,
}

/// A real ELF file, mutated, or any bytes.
#[derive(Debug, Clone)]
pub enum ElfInput {
    Mutated {
        seed: Index,
        edits: Vec<ElfEdit>,
        truncate: Option<Index>,
    },
    Bytes(Vec<u8>),
}

pub fn elf_input() -> impl Strategy<Value = ElfInput> {
    let val = prop_oneof![
        prop_oneof![
            Just(0u64),
            Just(1),
            Just(0x7f),
            Just(0x80),
            Just(0xff),
            Just(0xffff),
            Just(0x7fff_ffff),
            Just(0xffff_ffff),
            Just(i64::MAX as u64),
            Just(u64::MAX),
            Just(u64::MAX - 7),
            any::<u64>()
        ]
        .prop_map(Val::Abs),
        (-8i8..8).prop_map(Val::Len),
    ];
    let edit = (
        any::<Index>(),
        any::<Index>(),
        val,
        prop_oneof![Just(1u8), Just(2), Just(4), Just(8)],
    )
        .prop_map(|(region, at, val, width)| ElfEdit { region, at, val, width });
    prop_oneof![
        4 => (any::<Index>(), vec(edit, 1..8), proptest::option::weighted(0.2, any::<Index>()))
            .prop_map(|(seed, edits, truncate)| ElfInput::Mutated { seed, edits, truncate }),
        1 => prop_oneof![
            vec(any::<u8>(), 0..512),
            // an ELF header and then anything
            vec(any::<u8>(), 0..512).prop_map(|b| [&b"\x7fELF\x02\x01\x01\0"[..], &[0; 8], &b].concat()),
        ]
        .prop_map(ElfInput::Bytes),
    ]
}

impl ElfInput {
    /// The file's bytes, and the seed they come from.
    pub fn bytes(&self) -> (Vec<u8>, Option<&'static Seed>) {
        let (seed, edits, truncate) = match self {
            ElfInput::Bytes(b) => return (b.clone(), None),
            ElfInput::Mutated { seed, edits, truncate } => match seeds() {
                [] => return (Vec::new(), None),
                all => (seed.get(all), edits, truncate),
            },
        };
        let mut b = seed.bytes.clone();
        for e in edits {
            let (start, end) = *e.region.get(&seed.regions);
            let at = start + e.at.index(end - start);
            let v = match e.val {
                Val::Abs(v) => v,
                Val::Len(d) => (b.len() as u64).wrapping_add_signed(i64::from(d)),
            };
            let n = (e.width as usize).min(b.len() - at);
            b[at..at + n].copy_from_slice(&v.to_le_bytes()[..n]);
        }
        if let Some(t) = truncate {
            b.truncate(t.index(b.len() + 1));
        }
        (b, Some(seed))
    }

    /// Short enough to print: the edits, not the bytes.
    pub fn describe(&self) -> String {
        match self {
            ElfInput::Mutated { seed, .. } => {
                let s = seeds().get(seed.index(seeds().len().max(1))).map_or("-", |s| s.path);
                format!("{s}: {self:?}")
            }
            ElfInput::Bytes(_) => format!("{self:?}"),
        }
    }
}

/// The smallest ELF file the readers take: a header and one loadable segment (no
/// sections, no symbols); what the fuzzing found, minimised, is put in this form.
pub fn elf_with_segment(offset: u64, vaddr: u64, size: u64) -> Vec<u8> {
    let mut b = b"\x7fELF\x02\x01\x01\0\0\0\0\0\0\0\0\0".to_vec();
    b.extend(3u16.to_le_bytes()); // ET_DYN
    b.extend(0x3eu16.to_le_bytes()); // x86-64
    b.extend(1u32.to_le_bytes());
    b.extend([0u64, 64, 0].iter().flat_map(|v| v.to_le_bytes())); // entry, phoff, shoff
    b.extend(0u32.to_le_bytes());
    b.extend([64u16, 56, 1, 64, 0, 0].iter().flat_map(|v| v.to_le_bytes()));
    b.extend(1u32.to_le_bytes()); // PT_LOAD
    b.extend(5u32.to_le_bytes()); // r-x
    b.extend(
        [offset, vaddr, vaddr, size, size, 0x1000]
            .iter()
            .flat_map(|v| v.to_le_bytes()),
    );
    b.extend([0xE8; 64]);
    b
}

/// A directory of this test's own, removed when dropped.
pub struct Scratch(pub PathBuf);

impl Scratch {
    pub fn new(what: &str) -> Scratch {
        let d = std::env::temp_dir().join(format!("tlsprof-fuzz-{}-{what}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d).unwrap();
        Scratch(d)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// Where the file is written: at the debug-file path of its build id, so that the
/// reader, finding no .symtab, also reads it as its own debug file.
fn place(dir: &Path, build_id: Option<&[u8]>) -> PathBuf {
    let hex: String = build_id.unwrap_or(b"none").iter().map(|b| format!("{b:02x}")).collect();
    let sub = dir.join(".build-id").join(&hex[..2]);
    fs::create_dir_all(&sub).unwrap();
    sub.join(format!("{}.debug", &hex[2..]))
}

fn mapped_name() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("/usr/lib/x86_64-linux-gnu/libssl.so.3".to_string()),
        Just("/usr/lib/x86_64-linux-gnu/libcrypto.so.3 (deleted)".to_string()),
        Just("/usr/bin/true".to_string()),
        Just("/opt/my app/libssl.so.1.1/".to_string()),
        any::<String>(),
    ]
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn elf_files(input in elf_input(), name in mapped_name(), keep_names: bool, extra in vec(any::<u64>(), 0..8)) {
        let scratch = Scratch::new("elf");
        let (bytes, seed) = input.bytes();
        let host = place(&scratch.0, seed.and_then(|s| s.build_id.as_deref()));
        fs::write(&host, &bytes).unwrap();
        let addrs: Vec<u64> = seed.map_or(&[][..], |s| &s.addrs[..]).iter().chain(&extra).copied().collect();
        let dirs = [scratch.0.clone()];
        let (_, peak) = run_case({
            let d = input.describe();
            move || d
        }, || {
            let Some(f) = FileSyms::load(&name, &host, &dirs, keep_names) else { return };
            let _ = f.has_tls_code();
            for &a in &addrs {
                let _ = (f.vaddr(a), f.is_tls(a), f.prim(a), f.name(a), f.follows_call(a));
            }
        });
        prop_assert!(peak <= 16 * bytes.len() + (1 << 20), "{} bytes of heap for a file of {}", peak, bytes.len());
    }

    #[test]
    fn call_checks(code in vec(any::<u8>(), 0..16), off in 0..24usize) {
        let _ = follows_call(&code, off);
        let _ = follows_call(&code, usize::MAX);
    }

}
