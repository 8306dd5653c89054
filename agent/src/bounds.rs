//! Bounds on what grows with what other processes do. Every table the agent keeps whose
//! size others decide (connections, handshakes, processes, files, ports) has a constant for
//! its bound, beside the table; an entry it drops or evicts there is counted in
//! tlsprof_table_full_total{table} (docs/metrics.md, "Bounds", lists them all). Code that
//! has no metrics keeps a `Dropped` tally that its owner exports.
use std::{
    collections::{BTreeMap, HashMap, VecDeque},
    hash::{BuildHasher, Hash},
};

use crate::metrics::{Metrics, TableLabels};

/// Every bounded table: the `table` label of tlsprof_table_full_total (docs/metrics.md,
/// "Bounds", says what each holds and what its bound drops).
pub const TABLES: &[&str] = &[
    // kernel maps and queues the agent fills (bpf/loader.rs and its parts, bpf/uprobes.rs)
    "watched_ports",
    "exchange_slots",
    "traced_processes",
    "hs_detached",
    "detach_queue",
    "hello_cgroups",
    // the handshake join (agent/handshakes.rs, wire/tracker.rs, clients/join.rs)
    "pending_handshakes",
    "wire_captures",
    "wire_ended",
    "client_hellos",
    "client_alerts",
    "quic_flows",
    "quic_waiting",
    "client_offers",
    "estimate_parts",
    "sighting_checks",
    // ports and connections (agent/ports.rs, conns/churn.rs, conns/unseen.rs)
    "port_names",
    "unsettled_connections",
    "reconciled_connections",
    // processes (agent/targets/) and the files they map (discovery/files.rs)
    "watched_processes",
    "elf_files",
    "recent_exits",
    "attached_names",
    "sighting_names",
    // CPU attribution (cpu/)
    "tls_libraries",
    "symbol_files",
    "flame_stacks",
];

/// Every table's counter at zero, so that dashboards and alerts see the series and
/// rate() sees the first increment.
pub fn export_zero(m: &Metrics) {
    for table in TABLES {
        let _ = m.table_full.get_or_create(&TableLabels { table: (*table).into() });
    }
}

/// Counts `n` entries `table` dropped or evicted at its bound.
pub fn count(m: &Metrics, table: &str, n: u64) {
    if n > 0 {
        m.table_full
            .get_or_create(&TableLabels { table: table.into() })
            .inc_by(n);
    }
}

/// Entries dropped or evicted at their bound, per table, not exported yet.
#[derive(Default, Debug)]
pub struct Dropped(BTreeMap<&'static str, u64>);

impl Dropped {
    pub fn add(&mut self, table: &'static str, n: u64) {
        if n > 0 {
            *self.0.entry(table).or_default() += n;
        }
    }

    /// Exports the tally, and starts a new one.
    pub fn export(&mut self, m: &Metrics) {
        for (table, n) in std::mem::take(&mut self.0) {
            count(m, table, n);
        }
    }

    /// What is tallied for a table (tests).
    #[cfg(test)]
    pub fn get(&self, table: &str) -> u64 {
        self.0.get(table).copied().unwrap_or(0)
    }
}

/// Makes room for one more entry in a table at its bound (`cap` entries) by taking out its
/// oldest entries by `age` (smallest first): a sixteenth of the table at once, so that a
/// table kept at its bound is sorted once per `cap / 16` inserts, not at each. Returns what
/// was taken out, for the caller to settle and count.
pub fn evict_oldest<K, V, A, S>(map: &mut HashMap<K, V, S>, cap: usize, age: impl Fn(&V) -> A) -> Vec<(K, V)>
where
    K: Eq + Hash + Copy,
    A: Ord,
    S: BuildHasher,
{
    if map.len() < cap {
        return Vec::new();
    }
    let n = (map.len() + 1 - cap).max(cap / 16).clamp(1, map.len());
    let mut by_age: Vec<(A, K)> = map.iter().map(|(k, v)| (age(v), *k)).collect();
    by_age.select_nth_unstable_by(n - 1, |a, b| a.0.cmp(&b.0));
    by_age.truncate(n);
    by_age.into_iter().filter_map(|(_, k)| map.remove_entry(&k)).collect()
}

/// A table keeps the room of its peak: one that holds under a quarter of it (and more than
/// SHRINK_FROM entries' room) is shrunk to twice what it holds, so that the memory a burst
/// took goes back (alloc.rs returns it to the kernel).
const SHRINK_FROM: usize = 1024;

pub fn shrink<K: Eq + Hash, V, S: BuildHasher>(map: &mut HashMap<K, V, S>) {
    if map.capacity() > SHRINK_FROM && map.len() < map.capacity() / 4 {
        map.shrink_to(map.len() * 2);
    }
}

pub fn shrink_deque<T>(q: &mut VecDeque<T>) {
    if q.capacity() > SHRINK_FROM && q.len() < q.capacity() / 4 {
        q.shrink_to(q.len() * 2);
    }
}

/// The bytes a hash map's room takes (its buckets and their control bytes), as hashbrown
/// sizes it: for the -v log of the agent's memory.
pub fn map_bytes<K, V, S>(map: &HashMap<K, V, S>) -> usize {
    let buckets = if map.capacity() == 0 {
        0
    } else {
        (map.capacity() * 8 / 7 + 1).next_power_of_two()
    };
    buckets * (std::mem::size_of::<(K, V)>() + 1)
}

pub fn deque_bytes<T>(q: &VecDeque<T>) -> usize {
    q.capacity() * std::mem::size_of::<T>()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evict_oldest_takes_the_oldest_sixteenth() {
        let mut m: HashMap<u32, u32> = (0..64).map(|i| (i, 1000 - i)).collect();
        assert!(evict_oldest(&mut m, 65, |v| *v).is_empty(), "room left");
        let out = evict_oldest(&mut m, 64, |v| *v);
        // ages 937..=940 are the four smallest: keys 60..=63
        let mut keys: Vec<u32> = out.iter().map(|(k, _)| *k).collect();
        keys.sort_unstable();
        assert_eq!(keys, vec![60, 61, 62, 63]);
        assert_eq!(m.len(), 60);
    }

    #[test]
    fn dropped_tallies_and_exports() {
        let m = Metrics::new();
        let mut d = Dropped::default();
        d.add("wire_ended", 2);
        d.add("wire_ended", 1);
        d.add("wire_captures", 0);
        assert_eq!((d.get("wire_ended"), d.get("wire_captures")), (3, 0));
        d.export(&m);
        d.export(&m);
        let n = m
            .table_full
            .get_or_create(&TableLabels {
                table: "wire_ended".into(),
            })
            .get();
        assert_eq!((n, d.get("wire_ended")), (3, 0));
    }

    fn project_file(rel: &str) -> String {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(rel);
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    }

    fn sources(dir: &std::path::Path, out: &mut Vec<(std::path::PathBuf, String)>) {
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                sources(&p, out);
            } else if p.extension().is_some_and(|x| x == "rs") && !p.ends_with("bounds.rs") {
                out.push((p.clone(), std::fs::read_to_string(&p).unwrap()));
            }
        }
    }

    /// Every table the code counts is in TABLES, and docs/metrics.md's "Bounds" lists each
    /// of them and each kernel map's kind.
    #[test]
    fn tables_are_declared_and_documented() {
        let mut files = Vec::new();
        sources(
            &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
            &mut files,
        );
        let mut counted = std::collections::BTreeSet::new();
        for (path, text) in &files {
            for line in text
                .lines()
                .filter(|l| l.contains("bounds::count(") || l.contains(".add(\""))
            {
                let Some(name) = line.split('"').nth(1) else { continue };
                assert!(
                    TABLES.contains(&name),
                    "{}: table {name} is not in bounds::TABLES",
                    path.display()
                );
                counted.insert(name);
            }
        }
        let missing: Vec<_> = TABLES.iter().filter(|t| !counted.contains(*t)).collect();
        assert!(missing.is_empty(), "declared, never counted: {missing:?}");

        let doc = project_file("docs/metrics.md");
        let bounds = doc
            .split("\n## Bounds\n")
            .nth(1)
            .expect("docs/metrics.md has a Bounds section");
        let bounds = bounds.split("\n## ").next().unwrap();
        for t in TABLES {
            assert!(
                bounds.contains(&format!("{{table=\"{t}\"}}")),
                "docs/metrics.md, Bounds: no row counting {t}"
            );
        }
        let row = doc
            .lines()
            .find(|l| l.starts_with("| `tlsprof_kernel_errors_total`"))
            .expect("kernel_errors row");
        for (_, kind) in crate::bpf::stats::STATS {
            assert!(
                row.contains(&format!("`{kind}`")),
                "docs/metrics.md: kind {kind} undocumented"
            );
            assert!(
                crate::bpf::stats::NOT_BOUNDS.contains(&kind) || bounds.contains(&format!("{{kind=\"{kind}\"}}")),
                "docs/metrics.md, Bounds: no map counted by kind {kind}"
            );
        }
    }
}
