//! Counters found once per label set: a series found through its family builds and hashes
//! its labels (Strings) at every increment, which per handshake was a good part of the
//! agent's CPU at 2,000 handshakes a second. The family stays the owner of the series: a
//! Counter here is the family's own (prometheus-client's Counter is shared).
use std::{collections::hash_map::Entry, hash::Hash};

use prometheus_client::metrics::counter::Counter;
use rustc_hash::FxHashMap;

/// Label sets kept, at most; past it they are all forgotten and found again.
const MAX_FOUND: usize = 4096;

pub struct Found<K> {
    map: FxHashMap<K, Counter>,
}

impl<K> Default for Found<K> {
    fn default() -> Self {
        Self { map: FxHashMap::default() }
    }
}

impl<K: Hash + Eq> Found<K> {
    /// Increments the counter of `key`, found with `find(&key)` the first time.
    pub fn inc(&mut self, key: K, find: impl FnOnce(&K) -> Counter) {
        if self.map.len() >= MAX_FOUND && !self.map.contains_key(&key) {
            self.map.clear();
        }
        let counter = match self.map.entry(key) {
            Entry::Occupied(e) => e.into_mut(),
            Entry::Vacant(v) => {
                let c = find(v.key());
                v.insert(c)
            }
        };
        counter.inc();
    }
}

#[cfg(test)]
mod tests {
    use prometheus_client::metrics::family::Family;

    use super::*;

    #[test]
    fn increments_the_familys_own_series() {
        let f: Family<Vec<(String, String)>, Counter> = Family::default();
        let mut found = Found::default();
        let labels = |v: &str| vec![("k".to_string(), v.to_string())];
        for _ in 0..3 {
            found.inc("a", |k| f.get_or_create(&labels(k)).clone());
        }
        found.inc("b", |k| f.get_or_create(&labels(k)).clone());
        assert_eq!(f.get_or_create(&labels("a")).get(), 3);
        assert_eq!(f.get_or_create(&labels("b")).get(), 1);
        // past the bound, forgotten and found again: the counts go on
        for i in 0..MAX_FOUND {
            found.inc(Box::leak(i.to_string().into_boxed_str()), |_| Counter::default());
        }
        found.inc("a", |k| f.get_or_create(&labels(k)).clone());
        assert_eq!(f.get_or_create(&labels("a")).get(), 4);
    }
}
