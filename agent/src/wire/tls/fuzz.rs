//! Property tests of the TLS parser on what a server — any local user's process — can send
//! (issue 19): arbitrary bytes, near-valid records, mutations and truncations of real and
//! built flights, fragmentations into records, and certificates.
//!
//! Also the harness every fuzz.rs shares: the case count, a watchdog that turns a hang
//! into a failure, and a heap meter.
use std::{
    alloc::{GlobalAlloc, Layout, System},
    cell::Cell,
    collections::HashSet,
    sync::{mpsc, OnceLock},
    time::Duration,
};

use proptest::{collection::vec, prelude::*, sample::Index, test_runner::TestCaseError};

use super::super::AppProtocol;
use super::{
    cert, cert_from_signature, group_name, parse, suite, version_name, Parsed, DHE_BY_SIZE, NAMED_DH, NONE, OTHER,
};
use crate::wire::fixtures::{self, Flight};

/// Cases per property: TLSPROF_FUZZ_CASES, else 8192, with which all the fuzz properties
/// together take about 12 s in a release build on 2 cores (`cargo test --release`; 20000
/// cases: about 30 s).
pub const DEFAULT_CASES: u32 = 8192;

pub fn config() -> ProptestConfig {
    let cases = std::env::var("TLSPROF_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(DEFAULT_CASES);
    ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// Longer than any case takes (debug builds included): past it the case is taken to loop
/// forever.
const HANG: Duration = Duration::from_secs(30);

/// Heap meter: the peak of the bytes the current thread holds while it is on.
struct Meter;

thread_local! {
    /// (live bytes, peak) while metering.
    static METER: Cell<Option<(isize, isize)>> = const { Cell::new(None) };
}

fn meter(delta: isize) {
    let _ = METER.try_with(|m| {
        if let Some((live, peak)) = m.get() {
            let live = live + delta;
            m.set(Some((live, peak.max(live))));
        }
    });
}

// SAFETY: System's, with the sizes noted on the side.
unsafe impl GlobalAlloc for Meter {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        meter(l.size() as isize);
        System.alloc(l)
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        meter(l.size() as isize);
        System.alloc_zeroed(l)
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        meter(-(l.size() as isize));
        System.dealloc(p, l)
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        meter(new as isize - l.size() as isize);
        System.realloc(p, l, new)
    }
}

#[global_allocator]
static HEAP: Meter = Meter;

/// Runs one case: returns its result and the most heap it held at once. Should it run past
/// `HANG`, the watchdog prints `what` (the input) and aborts the test binary, so that a
/// parser that loops forever fails CI instead of stalling it.
pub fn run_case<R>(what: impl FnOnce() -> String + Send + 'static, f: impl FnOnce() -> R) -> (R, usize) {
    let (done, wait) = mpsc::channel::<()>();
    let dog = std::thread::spawn(move || {
        if let Err(mpsc::RecvTimeoutError::Timeout) = wait.recv_timeout(HANG) {
            crate::testing::hung(format!("fuzz case still running after {HANG:?}: {}", what()));
        }
    });
    METER.with(|m| m.set(Some((0, 0))));
    let r = f();
    let peak = METER.with(|m| m.take()).map_or(0, |(_, peak)| peak.max(0) as usize);
    drop(done);
    let _ = dog.join();
    (r, peak)
}

/// Most heap a parse may hold: a small multiple of its input (each handshake message it
/// finds costs a fixed overhead), never what a length field claims.
fn heap_bound(input: usize) -> usize {
    32 * input + 4096
}

/// Every label value the parser can produce: the bounded tables.
fn label_values() -> &'static HashSet<&'static str> {
    static SET: OnceLock<HashSet<&'static str>> = OnceLock::new();
    SET.get_or_init(|| {
        let mut s: HashSet<&'static str> = [OTHER, NONE, "rsa"].into();
        s.extend(DHE_BY_SIZE.map(|(_, name)| name));
        s.extend(NAMED_DH.map(|(_, _, modp)| modp));
        for c in 0..=u16::MAX {
            s.extend([version_name(c), group_name(c), cert_from_signature(c).label()]);
            s.extend(suite(c).map(|s| s.name));
        }
        s
    })
}

/// Parses under the watchdog and the heap meter, and checks what every parse must hold.
fn check(plain: &[u8], sealed: &[u16], ended: bool) -> Result<Parsed, TestCaseError> {
    let (p, peak) = {
        let (pl, se) = (plain.to_vec(), sealed.to_vec());
        run_case(
            move || format!("parse({pl:02x?}, {se:?}, {ended})"),
            || parse(plain, sealed, ended),
        )
    };
    let input = plain.len() + 2 * sealed.len();
    prop_assert!(peak <= heap_bound(input), "{peak} bytes of heap for {input} of input");
    let l = p.negotiated();
    for v in [l.version.label(), l.cipher.label(), l.group.label(), l.cert.label()] {
        prop_assert!(label_values().contains(v), "label {v:?} not from a table");
    }
    if !p.hello {
        prop_assert_eq!(l, super::Negotiated::UNKNOWN_TCP);
    }
    prop_assert!(
        [
            AppProtocol::H2,
            AppProtocol::Http1,
            AppProtocol::Other,
            AppProtocol::None,
            AppProtocol::Encrypted
        ]
        .contains(&p.protocol),
        "protocol {:?} not from the table",
        p.protocol
    );
    Ok(p)
}

fn flights() -> &'static [Flight] {
    static F: OnceLock<Vec<Flight>> = OnceLock::new();
    F.get_or_init(fixtures::all)
}

/// A byte-level edit of an input.
#[derive(Debug, Clone)]
pub enum Edit {
    Set(Index, u8),
    Flip(Index, u8),
    /// A big-endian 16- or 24-bit length (or any value) written over the bytes there.
    Len16(Index, u16),
    Len24(Index, u32),
    Insert(Index, Vec<u8>),
    Remove(Index, u8),
    /// A copy of the bytes at the first place, inserted at the second.
    Dup(Index, Index, u8),
    Truncate(Index),
}

pub fn edit() -> impl Strategy<Value = Edit> {
    let len16 = prop_oneof![
        Just(0u16),
        Just(1),
        Just(4),
        Just(0x7f),
        Just(0x80),
        Just(0xff),
        Just(0x100),
        Just(0x4000),
        Just(0x4001),
        Just(0xffff),
        any::<u16>()
    ];
    let len24 = prop_oneof![
        Just(0u32),
        Just(1),
        Just(0xffff),
        Just(0x1_0000),
        Just(0xff_ffff),
        any::<u32>()
    ];
    prop_oneof![
        (any::<Index>(), any::<u8>()).prop_map(|(i, b)| Edit::Set(i, b)),
        (any::<Index>(), 0..8u8).prop_map(|(i, b)| Edit::Flip(i, b)),
        (any::<Index>(), len16).prop_map(|(i, v)| Edit::Len16(i, v)),
        (any::<Index>(), len24).prop_map(|(i, v)| Edit::Len24(i, v)),
        (any::<Index>(), vec(any::<u8>(), 1..16)).prop_map(|(i, b)| Edit::Insert(i, b)),
        (any::<Index>(), any::<u8>()).prop_map(|(i, n)| Edit::Remove(i, n)),
        (any::<Index>(), any::<Index>(), any::<u8>()).prop_map(|(a, b, n)| Edit::Dup(a, b, n)),
        any::<Index>().prop_map(Edit::Truncate),
    ]
}

pub fn apply(b: &mut Vec<u8>, e: &Edit) {
    if b.is_empty() {
        if let Edit::Insert(_, v) = e {
            b.extend_from_slice(v);
        }
        return;
    }
    let at = |i: &Index| i.index(b.len());
    match e {
        Edit::Set(i, v) => {
            let i = at(i);
            b[i] = *v;
        }
        Edit::Flip(i, bit) => {
            let i = at(i);
            b[i] ^= 1 << bit;
        }
        Edit::Len16(i, v) => {
            let i = at(i);
            let n = (b.len() - i).min(2);
            b[i..i + n].copy_from_slice(&v.to_be_bytes()[..n]);
        }
        Edit::Len24(i, v) => {
            let i = at(i);
            let n = (b.len() - i).min(3);
            b[i..i + n].copy_from_slice(&v.to_be_bytes()[1..1 + n]);
        }
        Edit::Insert(i, v) => {
            let i = at(i);
            b.splice(i..i, v.iter().copied());
        }
        Edit::Remove(i, n) => {
            let i = at(i);
            let end = (i + *n as usize).min(b.len());
            b.drain(i..end);
        }
        Edit::Dup(from, to, n) => {
            let (from, to) = (at(from), at(to));
            let piece = b[from..(from + *n as usize).min(b.len())].to_vec();
            b.splice(to..to, piece);
        }
        Edit::Truncate(i) => {
            let i = at(i);
            b.truncate(i);
        }
    }
}

/// The records of a flight: (type, whole record).
fn records(plain: &[u8]) -> Vec<(u8, &[u8])> {
    let mut out = Vec::new();
    let mut rest = plain;
    while rest.len() >= 5 {
        let n = (5 + (usize::from(rest[3]) << 8 | usize::from(rest[4]))).min(rest.len());
        out.push((rest[0], &rest[..n]));
        rest = &rest[n..];
    }
    out
}

/// The flight with its leading handshake records' bytes (all before change_cipher_spec)
/// cut into records at other places: sizes from `cuts`, zero-length records included.
fn refragment(plain: &[u8], cuts: &[Index]) -> Vec<u8> {
    let recs = records(plain);
    let lead = recs.iter().take_while(|(t, _)| *t == 22).count();
    let stream: Vec<u8> = recs[..lead].iter().flat_map(|(_, r)| r[5..].iter().copied()).collect();
    let mut at: Vec<usize> = cuts.iter().map(|c| c.index(stream.len() + 1)).collect();
    at.push(0);
    at.push(stream.len());
    at.sort_unstable();
    let mut out = Vec::new();
    for w in at.windows(2) {
        out.extend(fixtures::record(22, &stream[w[0]..w[1]]));
    }
    for (_, r) in &recs[lead..] {
        out.extend_from_slice(r);
    }
    out
}

/// Near-valid output: records of the types the parser reads, holding handshake messages
/// of the types it reads, with lengths mostly right.
fn near_valid() -> impl Strategy<Value = Vec<u8>> {
    let ext = (
        prop_oneof![Just(0x002bu16), Just(0x0033), Just(0x0029), Just(0xff01), any::<u16>()],
        prop_oneof![
            Just(vec![3, 4]),
            Just(fixtures::key_share(29, 32)),
            Just(vec![0, 23]),
            vec(any::<u8>(), 0..8)
        ],
    );
    let cipher = prop_oneof![
        Just(0x1301u16),
        Just(0x1302),
        Just(0x1305),
        Just(0xC02B),
        Just(0xC030),
        Just(0x009E),
        Just(0x002F),
        any::<u16>()
    ];
    let hello = (any::<bool>(), cipher, vec(ext, 0..4))
        .prop_map(|(retry, c, e)| fixtures::server_hello(if retry { fixtures::HRR_RANDOM } else { [1; 32] }, c, &e));
    let body = prop_oneof![
        vec(any::<u8>(), 0..64),
        Just(fixtures::chain(&[fixtures::cert_with_spki(&fixtures::ec_spki(
            fixtures::OID_P384
        ))])),
        Just(vec![3, 0, 29, 32]),
        Just(vec![1, 0, 0xFF, 0xFF]),
    ];
    let other = (
        prop_oneof![Just(4u8), Just(8), Just(11), Just(12), Just(13), Just(14), any::<u8>()],
        body,
    )
        .prop_map(|(t, b)| fixtures::msg(t, &b));
    let message = prop_oneof![hello, other];
    let rec = (
        prop_oneof![Just(22u8), Just(22), Just(20), Just(21), Just(23), any::<u8>()],
        vec(message, 0..4),
        vec(any::<u8>(), 0..3),
    )
        .prop_map(|(t, msgs, alert)| match t {
            22 => fixtures::record(22, &msgs.concat()),
            20 => fixtures::record(20, &[1]),
            21 => fixtures::record(21, &alert),
            t => fixtures::record(t, &msgs.concat()),
        });
    (vec(rec, 0..6), vec(edit(), 0..3)).prop_map(|(recs, edits)| {
        let mut b = recs.concat();
        for e in &edits {
            apply(&mut b, e);
        }
        b
    })
}

fn sealed_lengths() -> impl Strategy<Value = Vec<u16>> {
    vec(
        prop_oneof![
            Just(40u16),
            Just(53),
            Just(69),
            Just(96),
            Just(281),
            Just(0),
            Just(u16::MAX),
            any::<u16>()
        ],
        0..16,
    )
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn arbitrary_bytes(plain in vec(any::<u8>(), 0..4096), sealed in vec(any::<u16>(), 0..16), ended: bool) {
        check(&plain, &sealed, ended)?;
    }

    #[test]
    fn near_valid_records(plain in near_valid(), sealed in sealed_lengths(), ended: bool) {
        check(&plain, &sealed, ended)?;
    }

    #[test]
    fn mutated_flights(
        which: Index,
        edits in vec(edit(), 1..6),
        sealed_edits in vec((any::<Index>(), any::<u16>()), 0..3),
        ended: bool,
    ) {
        let f = which.get(flights());
        let mut plain = f.plain.clone();
        for e in &edits {
            apply(&mut plain, e);
        }
        let mut sealed = f.sealed.clone();
        for (i, v) in &sealed_edits {
            match sealed.len() {
                0 => sealed.push(*v),
                n => sealed[i.index(n)] = *v,
            }
        }
        check(&plain, &sealed, ended)?;
    }

    /// Cutting the handshake bytes into records differently changes nothing.
    #[test]
    fn fragmentations(which: Index, cuts in vec(any::<Index>(), 0..12), ended: bool) {
        let f = which.get(flights());
        let whole = check(&f.plain, &f.sealed, ended)?;
        let cut = refragment(&f.plain, &cuts);
        prop_assert_eq!(check(&cut, &f.sealed, ended)?, whole, "{}", f.name);
    }

    /// Certificates as a TLS 1.2 server sends them: real ones mutated, and any bytes.
    #[test]
    fn certificates(which: Index, edits in vec(edit(), 0..6), junk in vec(any::<u8>(), 0..512)) {
        static CERTS: OnceLock<Vec<Vec<u8>>> = OnceLock::new();
        let certs = CERTS.get_or_init(|| {
            let mut c = fixtures::system_certs();
            c.push(fixtures::cert_with_spki(&fixtures::ec_spki(fixtures::OID_P384)));
            c
        });
        let mut c = which.get(certs).clone();
        for e in &edits {
            apply(&mut c, e);
        }
        for der in [&c, &junk] {
            let chain = fixtures::chain(std::slice::from_ref(der));
            let (label, peak) = {
                let d = der.clone();
                run_case(move || format!("{d:02x?}"), || (cert::spki_label(der), cert::cert_from_chain(&chain)))
            };
            prop_assert!(peak <= heap_bound(chain.len()));
            prop_assert!(label_values().contains(label.1.label()), "{:?}", label);
            prop_assert!(label.0.is_none_or(|l| label_values().contains(l.label())));
        }
    }
}

/// Every flight cut at every length (plain bytes and encrypted records alike): no panic,
/// and a parse that says it is complete has the labels of the whole flight ("later bytes
/// cannot change them").
#[test]
fn truncations_at_every_length() {
    for f in flights() {
        let whole = parse(&f.plain, &f.sealed, true).negotiated();
        for n in 0..=f.plain.len() {
            for ended in [false, true] {
                let p = check(&f.plain[..n], &f.sealed, ended).unwrap();
                if p.complete && !ended {
                    assert_eq!(p.negotiated(), whole, "{} cut at {n}", f.name);
                }
            }
        }
        for n in 0..=f.sealed.len() {
            let p = check(&f.plain, &f.sealed[..n], false).unwrap();
            if p.complete {
                assert_eq!(p.negotiated(), whole, "{} with {n} encrypted records", f.name);
            }
        }
    }
}

/// The flights the properties start from are what they claim to be: each reaches the
/// parser's ServerHello and further (so mutations start deep), the real ones included.
#[test]
fn seed_flights_parse() {
    let all = flights();
    assert!(all.iter().any(|f| f.name.starts_with("rustls")));
    for f in all {
        let p = parse(&f.plain, &f.sealed, true);
        if f.name == "alert" {
            assert!(p.alert.is_some() && !p.hello);
            continue;
        }
        let l = p.negotiated();
        assert!(p.hello && p.complete, "{}: {p:?}", f.name);
        assert!(l.version != OTHER && l.cipher != OTHER, "{}: {l:?}", f.name);
        if f.name.contains("resumed") {
            assert!(l.resumed, "{}: {l:?}", f.name);
        }
    }
}

/// The most heap per input byte: a capture full of empty handshake messages (each costs a
/// list entry), after a ServerHello (each is kept as one that follows it).
#[test]
fn heap_of_many_messages() {
    let hello = fixtures::server_hello([1; 32], 0xC02F, &[]);
    let body = [hello, [14u8, 0, 0, 0].repeat(4000)].concat();
    let mut plain = Vec::new();
    for piece in body.chunks(16 * 1024 - 5) {
        plain.extend(fixtures::record(22, piece));
    }
    let p = check(&plain, &[], false).unwrap();
    assert!(p.complete);
}
