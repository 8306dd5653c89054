//! The functions of a Go executable from its `.gopclntab` section: the table the Go runtime
//! itself needs for stack traces, kept when the binary is stripped (`-ldflags="-s -w"`, as
//! most container images ship Go servers). Read for the handshake probes
//! (`handshake/gotls.rs`) and the CPU split's names where `.symtab` is gone. Formats: Go
//! 1.16-1.17 (magic 0xfffffffa), 1.18-1.19 (0xfffffff0), 1.20+ (0xfffffff1); anything else
//! (or a malformed table) reads as no functions.
use object::{Object, ObjectSection};

const GO116: u32 = 0xffff_fffa;
const GO118: u32 = 0xffff_fff0;
const GO120: u32 = 0xffff_fff1;

/// Every function: (start address, end address, name), sorted by start. None when the file
/// has no Go function table this reads.
pub fn functions<'d>(file: &object::File<'d>) -> Option<Vec<(u64, u64, &'d str)>> {
    let tab = file.section_by_name(".gopclntab")?.data().ok()?;
    let text = file.section_by_name(".text")?.address();
    parse(tab, text)
}

fn read_u32(d: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(d.get(at..at.checked_add(4)?)?.try_into().ok()?))
}

fn read_word(d: &[u8], at: usize, ptr: usize) -> Option<u64> {
    match ptr {
        8 => Some(u64::from_le_bytes(d.get(at..at.checked_add(8)?)?.try_into().ok()?)),
        4 => read_u32(d, at).map(u64::from),
        _ => None,
    }
}

fn cstr(d: &[u8], at: usize) -> Option<&str> {
    let rest = d.get(at..)?;
    let end = rest.iter().position(|b| *b == 0)?;
    std::str::from_utf8(&rest[..end]).ok()
}

/// The table `tab` (little-endian), `text`: the address function offsets count from when the
/// header leaves it 0 (it is filled at run time).
pub fn parse(tab: &[u8], text: u64) -> Option<Vec<(u64, u64, &str)>> {
    let magic = read_u32(tab, 0)?;
    let ptr = usize::from(*tab.get(7)?);
    let word = |i: usize| -> Option<usize> { usize::try_from(read_word(tab, 8 + i * ptr, ptr)?).ok() };
    let nfunc = word(0)?;
    // the header's words after nfunc and nfiles
    let (text_start, names, pcln) = match magic {
        GO116 => (0, word(2)?, word(6)?),
        GO118 | GO120 => (read_word(tab, 8 + 2 * ptr, ptr)?, word(3)?, word(7)?),
        _ => return None,
    };
    let base = if text_start != 0 { text_start } else { text };
    // functab: nfunc + 1 (entry, func offset) pairs, the last one the end of the last function
    let pair = if magic == GO116 { 2 * ptr } else { 8 };
    if nfunc.checked_add(1)?.checked_mul(pair)? > tab.len().saturating_sub(pcln) {
        return None;
    }
    let entry = |i: usize| -> Option<(u64, usize)> {
        let at = pcln + i * pair;
        if magic == GO116 {
            Some((
                read_word(tab, at, ptr)?,
                usize::try_from(read_word(tab, at + ptr, ptr)?).ok()?,
            ))
        } else {
            let off = u64::from(read_u32(tab, at)?);
            Some((base.checked_add(off)?, usize::try_from(read_u32(tab, at + 4)?).ok()?))
        }
    };
    let mut out = Vec::with_capacity(nfunc);
    let mut next = entry(0)?;
    for i in 0..nfunc {
        let (start, func) = next;
        next = entry(i + 1)?;
        // the _func record: its entry (a word, or a u32 offset), then its name's offset
        let name_at = pcln
            .checked_add(func)?
            .checked_add(if magic == GO116 { ptr } else { 4 })?;
        let name_off = usize::try_from(read_u32(tab, name_at)?).ok()?;
        let Some(name) = cstr(tab, names.checked_add(name_off)?) else {
            continue;
        };
        if next.0 > start {
            out.push((start, next.0, name));
        }
    }
    out.sort_unstable_by_key(|f| f.0);
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A Go 1.20+ table built by hand: two functions, names and offsets where the header says.
    #[test]
    fn go120_table() {
        let mut t = Vec::new();
        t.extend(GO120.to_le_bytes());
        t.extend([0, 0, 1, 8]);
        let header_words = 8; // nfunc nfiles textStart funcname cu filetab pctab pcln
        let names_at = 8 + 8 * header_words;
        let names = b"main.a\0crypto/tls.(*Conn).serverHandshake\0";
        let pcln_at = names_at + names.len();
        for w in [2u64, 0, 0, names_at as u64, 0, 0, 0, pcln_at as u64] {
            t.extend(w.to_le_bytes());
        }
        t.extend(names);
        // functab: (0x0, func 24), (0x40, func 32), end 0x100; then the two _func records
        for (entry, func) in [(0u32, 24u32), (0x40, 32), (0x100, 0)] {
            t.extend(entry.to_le_bytes());
            t.extend(func.to_le_bytes());
        }
        for name_off in [0u32, 7] {
            t.extend(0u32.to_le_bytes());
            t.extend(name_off.to_le_bytes());
        }
        let f = parse(&t, 0x401000).unwrap();
        assert_eq!(
            f,
            [
                (0x401000, 0x401040, "main.a"),
                (0x401040, 0x401100, "crypto/tls.(*Conn).serverHandshake")
            ]
        );
        // truncated anywhere: no panic, and no function read past the end
        for n in 0..t.len() {
            let _ = parse(&t[..n], 0x401000);
        }
        assert_eq!(parse(b"\x01\x02\x03\x04\0\0\x01\x08", 0), None);
    }
}
