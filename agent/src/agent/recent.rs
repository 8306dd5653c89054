//! What ended lately (a process that exited, a port no longer listened on), kept by key for
//! the events still on their way about it: named by it, not `unknown`, and counted.
//!
//! Kept between one age and two: `age` (once a minute, agent/mod.rs) drops only what was
//! there at the age before. A clear of everything at once lost the one that ended just before
//! it: a PostgreSQL backend's handshake, whose capture ends with its connection after the
//! backend's exit, went uncounted about once a minute (bench/soak_faults.py).

use std::hash::Hash;

use rustc_hash::FxHashMap;

pub struct Recent<K, V> {
    now: FxHashMap<K, V>,
    before: FxHashMap<K, V>,
    max: usize,
}

impl<K: Eq + Hash, V> Recent<K, V> {
    /// At most `max` kept since the last age.
    pub fn new(max: usize) -> Self {
        Self {
            now: FxHashMap::default(),
            before: FxHashMap::default(),
            max,
        }
    }

    pub fn get(&self, k: &K) -> Option<&V> {
        self.now.get(k).or_else(|| self.before.get(k))
    }

    pub fn contains(&self, k: &K) -> bool {
        self.get(k).is_some()
    }

    /// Kept; false (kept not) when `max` were kept since the last age: the caller counts it.
    #[must_use]
    pub fn insert(&mut self, k: K, v: V) -> bool {
        if self.now.len() >= self.max && !self.now.contains_key(&k) {
            return false;
        }
        self.before.remove(&k);
        self.now.insert(k, v);
        true
    }

    /// What was kept before the last age goes; what came since stays until the next.
    pub fn age(&mut self) {
        self.before = std::mem::take(&mut self.now);
    }

    /// Kept since the last age.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.now.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kept_one_age_then_gone() {
        let mut r = Recent::new(2);
        assert!(r.insert(1, "postgres"));
        r.age();
        assert_eq!(r.get(&1), Some(&"postgres"), "what ended just before an age stays");
        assert!(r.insert(2, "nginx"));
        r.age();
        assert_eq!((r.get(&1), r.get(&2)), (None, Some(&"nginx")));
        r.age();
        assert!(!r.contains(&2));
    }

    #[test]
    fn bounded_since_the_last_age() {
        let mut r = Recent::new(2);
        assert!(r.insert(1, ()) && r.insert(2, ()));
        assert!(!r.insert(3, ()), "full");
        assert!(r.insert(2, ()), "one kept already is no more");
        r.age();
        assert!(r.insert(3, ()) && r.insert(4, ()));
        assert_eq!(r.len(), 2);
        assert!(r.contains(&1), "the older age still kept");
    }
}
