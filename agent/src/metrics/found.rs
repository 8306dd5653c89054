//! Series found once per label set: a series found through its family builds and hashes
//! its labels (Strings) at every event, which per handshake and per connection was a good
//! part of the agent's CPU at 2,000 handshakes a second (most of its allocations). The
//! family stays the owner of the series: a metric here is the family's own
//! (prometheus-client's counters and histograms are shared handles).
//!
//! Found per process name (`comm`, looked up by `&str`: no String made for a series already
//! found) and per the rest of the label set, a value made of copies (`K`).
use std::hash::Hash;

use prometheus_client::metrics::counter::Counter;
use rustc_hash::FxHashMap;

/// Label sets kept, at most; past it they are all forgotten and found again.
const MAX_FOUND: usize = 4096;

pub struct Found<K, M = Counter> {
    map: FxHashMap<String, FxHashMap<K, M>>,
    len: usize,
}

impl<K, M> Default for Found<K, M> {
    fn default() -> Self {
        Self {
            map: FxHashMap::default(),
            len: 0,
        }
    }
}

impl<K: Hash + Eq + Copy, M> Found<K, M> {
    /// The series of `comm` and `key`, found with `find(comm, key)` the first time.
    pub fn get(&mut self, comm: &str, key: K, find: impl FnOnce(&str, K) -> M) -> &M {
        let known = self.map.get(comm).is_some_and(|m| m.contains_key(&key));
        if !known && self.len >= MAX_FOUND {
            self.map.clear();
            self.len = 0;
        }
        if !self.map.contains_key(comm) {
            self.map.insert(comm.to_string(), FxHashMap::default());
        }
        let series = self.map.get_mut(comm).expect("inserted above");
        if !known {
            self.len += 1;
        }
        series.entry(key).or_insert_with(|| find(comm, key))
    }
}

impl<K: Hash + Eq + Copy> Found<K, Counter> {
    /// Increments the counter of `comm` and `key`.
    pub fn inc(&mut self, comm: &str, key: K, find: impl FnOnce(&str, K) -> Counter) {
        self.get(comm, key, find).inc();
    }
}

#[cfg(test)]
mod tests {
    use prometheus_client::metrics::{family::Family, histogram::Histogram};

    use super::*;

    type Labels = Vec<(String, String)>;

    fn labels(comm: &str, k: u16) -> Labels {
        vec![("comm".into(), comm.into()), ("k".into(), k.to_string())]
    }

    #[test]
    fn increments_the_familys_own_series() {
        let f: Family<Labels, Counter> = Family::default();
        let mut found = Found::default();
        let find = |c: &str, k: u16| f.get_or_create(&labels(c, k)).clone();
        for _ in 0..3 {
            found.inc("a", 1, find);
        }
        found.inc("a", 2, find);
        found.inc("b", 1, find);
        assert_eq!(f.get_or_create(&labels("a", 1)).get(), 3);
        assert_eq!(f.get_or_create(&labels("a", 2)).get(), 1);
        assert_eq!(f.get_or_create(&labels("b", 1)).get(), 1);
        // past the bound, forgotten and found again: the counts go on
        for i in 0..MAX_FOUND {
            found.inc(&i.to_string(), 0, |_, _| Counter::default());
        }
        assert!(found.len <= MAX_FOUND);
        found.inc("a", 1, find);
        assert_eq!(f.get_or_create(&labels("a", 1)).get(), 4);
        // 3 kept, cleared at the bound by the 4094th name, 3 names since and "a" again
        assert_eq!(found.len, 4);
    }

    #[test]
    fn histograms_observed_in_the_family() {
        let f: Family<Labels, Histogram> = Family::new_with_constructor(|| Histogram::new([1.0, 2.0]));
        let mut found: Found<u16, Histogram> = Found::default();
        found
            .get("a", 7, |c, k| f.get_or_create(&labels(c, k)).clone())
            .observe(1.5);
        found.get("a", 7, |_, _| unreachable!("found once")).observe(0.5);
        let mut text = String::new();
        let mut reg = prometheus_client::registry::Registry::default();
        reg.register("h", "h", f.clone());
        prometheus_client::encoding::text::encode(&mut text, &reg).unwrap();
        assert!(text.contains("h_count{comm=\"a\",k=\"7\"} 2"), "{text}");
    }
}
