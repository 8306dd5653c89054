//! Property tests of the wire tracker (issue 19): the kernel cuts a server's output into
//! DATA events wherever its writes and the 4 KiB event size fall, and the tracker joins
//! them (up to its 16 KiB cap), so however the same bytes are cut, what it says is the same.
use std::time::Instant;

use proptest::{collection::vec, prelude::*, sample::Index};

use super::{
    fixtures,
    tls::fuzz::{apply, config, edit, run_case},
    tracker::{Seen, Tracker, WireHandshake},
    Lookup,
};
use crate::bpf::wire::wire_ev;

use fixtures::{wire_event as ev, WIRE_CONN as ID};

/// Feeds the output cut at `cuts`, each encrypted record's header after the chunk it names
/// (modulo their number); returns what the tracker says before and at the end.
fn feed(plain: &[u8], cuts: &[usize], records: &[(usize, Vec<u8>)], end: u8) -> (Lookup, Option<WireHandshake>) {
    let t0 = Instant::now();
    let mut t = Tracker::default();
    let mut at: Vec<usize> = cuts.to_vec();
    at.extend([0, plain.len()]);
    at.sort_unstable();
    let chunks = at.len() - 1;
    for (i, w) in at.windows(2).enumerate() {
        t.on_event(ev(wire_ev::Data, 0, &plain[w[0]..w[1]]), t0);
        for (_, r) in records.iter().filter(|(after, _)| after % chunks == i) {
            t.on_event(ev(wire_ev::Record, 0, r), t0);
        }
        // asking in between must work whatever has arrived
        let _ = (t.lookup(ID), t.give_up(ID));
    }
    let before = t.lookup(ID);
    (
        before,
        t.on_event(ev(wire_ev::End, end, &[]), t0).and_then(Seen::handshake),
    )
}

fn output() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        // a flight, mutated
        (any::<Index>(), vec(edit(), 0..4)).prop_map(|(which, edits)| {
            let all = fixtures::built();
            let mut b = which.get(&all).plain.clone();
            for e in &edits {
                apply(&mut b, e);
            }
            b
        }),
        vec(any::<u8>(), 0..512),
        // past the tracker's cap
        (any::<u8>(), 16_000..20_000usize).prop_map(|(b, n)| vec![b; n]),
    ]
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn chunking_does_not_matter(
        plain in output(),
        cuts in vec(any::<Index>(), 0..16),
        records in vec((any::<usize>(), vec(any::<u8>(), 0..8)), 0..6),
        end in 0..9u8,
    ) {
        let cuts: Vec<usize> = cuts.iter().map(|c| c.index(plain.len() + 1)).collect();
        let in_one: Vec<(usize, Vec<u8>)> = records.iter().map(|(_, r)| (0, r.clone())).collect();
        let (one, _) = {
            let p = plain.clone();
            run_case(move || format!("{p:02x?}"), || feed(&plain, &[], &in_one, end))
        };
        let (cut, _) = {
            let p = plain.clone();
            run_case(move || format!("{p:02x?}"), || feed(&plain, &cuts, &records, end))
        };
        prop_assert_eq!(one, cut);
    }
}
