//! Property tests of the ClientHello parser on what any client can send (issue 36): it
//! reads bytes a remote peer chose, before any authentication. Arbitrary bytes, real
//! hellos mutated and cut into records at random places, and built hellos with random
//! extensions: never a panic or a hang, a heap bounded by the input, and every Offer within
//! its bounds. The harness (case count, watchdog, heap meter) is fuzz.rs's.
use proptest::{collection::vec, prelude::*, sample::Index, test_runner::TestCaseError};

use super::fuzz::{apply, config, edit, run_case};
use super::hello::*;
use super::hello_fixtures as fx;
use super::hello_tests::{bytes, ext, hello};

/// Most heap a parse may hold: a copy of the input when the hello spans records, the Offer's
/// capped lists, its host name.
fn heap_bound(input: usize) -> usize {
    2 * input + 4 * 2 * MAX_LIST + 2 * MAX_SNI + 1024
}

fn check(b: &[u8]) -> Result<Result<Offer, HelloError>, TestCaseError> {
    let (r, peak) = {
        let copy = b.to_vec();
        run_case(
            move || format!("parse_client_hello({copy:02x?})"),
            || parse_client_hello(b),
        )
    };
    prop_assert!(
        peak <= heap_bound(b.len()),
        "{peak} bytes of heap for {} of input",
        b.len()
    );
    if let Ok(o) = &r {
        for l in [&o.suites, &o.groups, &o.key_shares, &o.sigalgs] {
            prop_assert!(l.len() <= MAX_LIST);
            prop_assert!(!l.iter().any(|&v| is_grease(v)));
        }
        prop_assert!(!o.suites.iter().any(|s| [0x00ff, 0x5600].contains(s)));
        prop_assert!(o.alpn & !(ALPN_H2 | ALPN_HTTP1 | ALPN_OTHER) == 0);
        if let Some(s) = &o.sni {
            prop_assert!(!s.is_empty() && s.len() <= MAX_SNI);
            prop_assert!(s.bytes().all(|c| (0x21..=0x7e).contains(&c) && !c.is_ascii_uppercase()));
        }
    }
    Ok(r)
}

fn seeds() -> Vec<Vec<u8>> {
    fx::ALL.iter().map(|(_, h)| bytes(h)).collect()
}

/// The capture's handshake bytes cut into records at the given places (zero-length records
/// included).
fn refragment(capture: &[u8], cuts: &[Index]) -> Vec<u8> {
    let hs = &capture[5.min(capture.len())..];
    let mut at: Vec<usize> = cuts.iter().map(|c| c.index(hs.len() + 1)).collect();
    at.extend([0, hs.len()]);
    at.sort_unstable();
    at.windows(2)
        .flat_map(|w| {
            let c = &hs[w[0]..w[1]];
            [&[22, 3, 1, (c.len() >> 8) as u8, c.len() as u8][..], c].concat()
        })
        .collect()
}

/// Extensions the parser reads, with contents mostly well-formed.
fn extension() -> impl Strategy<Value = Vec<u8>> {
    let kind = prop_oneof![
        Just(0u16),
        Just(10),
        Just(13),
        Just(16),
        Just(35),
        Just(41),
        Just(42),
        Just(43),
        Just(51),
        Just(0x0a0a),
        any::<u16>()
    ];
    let u16s = vec(
        prop_oneof![Just(0x1a1au16), Just(29), Just(0x0304), any::<u16>()],
        0..200,
    );
    let data = prop_oneof![
        u16s.clone().prop_map(|v| {
            let mut d = ((v.len() * 2) as u16).to_be_bytes().to_vec();
            d.extend(v.iter().flat_map(|x| x.to_be_bytes()));
            d
        }),
        u16s.clone().prop_map(|v| {
            let mut d = vec![(v.len() * 2) as u8];
            d.extend(v.iter().flat_map(|x| x.to_be_bytes()));
            d
        }),
        vec((any::<u16>(), vec(any::<u8>(), 0..40)), 0..8).prop_map(|items| {
            let mut l = Vec::new();
            for (g, k) in items {
                l.extend(g.to_be_bytes());
                l.extend((k.len() as u16).to_be_bytes());
                l.extend(k);
            }
            [&(l.len() as u16).to_be_bytes()[..], &l].concat()
        }),
        vec(vec(any::<u8>(), 0..300), 0..4).prop_map(|names| {
            let mut l = Vec::new();
            for n in names {
                l.push(0);
                l.extend((n.len() as u16).to_be_bytes());
                l.extend(n);
            }
            [&(l.len() as u16).to_be_bytes()[..], &l].concat()
        }),
        vec(any::<u8>(), 0..16),
    ];
    (kind, data).prop_map(|(k, d)| ext(k, &d))
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn any_bytes(b in vec(any::<u8>(), 0..600)) {
        let _ = check(&b)?;
    }

    #[test]
    fn any_records(head in vec(any::<u8>(), 0..8), b in vec(any::<u8>(), 0..600), cuts in vec(any::<Index>(), 0..6)) {
        // Random handshake bytes behind a ClientHello header, in records.
        let body = [&[1u8, 0][..], &head, &b].concat();
        let _ = check(&refragment(&[&[22, 3, 1, 0, 0][..], &body].concat(), &cuts))?;
    }

    #[test]
    fn mutated_real_hellos(i in any::<Index>(), edits in vec(edit(), 1..8)) {
        let mut b = seeds()[i.index(fx::ALL.len())].clone();
        for e in &edits {
            apply(&mut b, e);
        }
        let _ = check(&b)?;
    }

    #[test]
    fn refragmented_real_hellos(i in any::<Index>(), cuts in vec(any::<Index>(), 0..12), edits in vec(edit(), 0..3)) {
        let whole = &seeds()[i.index(fx::ALL.len())];
        let mut b = refragment(whole, &cuts);
        let unedited = edits.is_empty();
        for e in &edits {
            apply(&mut b, e);
        }
        let r = check(&b)?;
        if unedited {
            prop_assert_eq!(r, parse_client_hello(whole));
        }
    }

    #[test]
    fn built_hellos(suites in vec(any::<u16>(), 0..80), exts in vec(extension(), 0..12), cuts in vec(any::<Index>(), 0..4)) {
        let b = hello(&suites, &exts.concat());
        let whole = check(&b)?;
        prop_assert_eq!(check(&refragment(&b, &cuts))?, whole);
    }
}
