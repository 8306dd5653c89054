//! Readings of cumulative counters, and the one way the views take what moved between two
//! of them (`Reading::since`): snapshot.rs's windows, for `top`, `report` and `compare`.
use std::collections::BTreeMap;

use crate::metrics::histogram::HistogramValue;

/// A reading of counters at one moment whose difference from an earlier one is a reading of
/// the same shape: what happened between them.
pub trait Reading: Default {
    /// What moved since `earlier`. A series new since then counts from zero, and one that
    /// went down (the agent restarted, its counters reset) counts from zero again.
    fn since(&self, earlier: &Self) -> Self;

    /// What moved since `earlier`, or since the start when there was no earlier reading.
    fn since_opt(&self, earlier: Option<&Self>) -> Self {
        match earlier {
            Some(e) => self.since(e),
            None => self.since(&Self::default()),
        }
    }
}

impl Reading for f64 {
    fn since(&self, earlier: &f64) -> f64 {
        if *self >= *earlier {
            self - earlier
        } else {
            *self
        }
    }
}

/// Counters kept by a label's value (or values): each one's increase.
impl<K: Ord + Clone, V: Reading> Reading for BTreeMap<K, V> {
    fn since(&self, earlier: &Self) -> Self {
        self.iter()
            .map(|(k, v)| (k.clone(), v.since_opt(earlier.get(k))))
            .collect()
    }
}

/// A histogram's increase: its sum, count and each bucket's.
impl Reading for HistogramValue {
    fn since(&self, earlier: &Self) -> Self {
        let buckets = self
            .buckets
            .iter()
            .map(|&(le, n)| {
                let old = earlier.buckets.iter().find(|(l, _)| *l == le).map_or(0.0, |(_, o)| *o);
                (le, n.since(&old))
            })
            .collect();
        HistogramValue {
            sum: self.sum.since(&earlier.sum),
            count: self.count.since(&earlier.count),
            buckets,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn increases_count_new_series_and_resets_from_zero() {
        assert_eq!(5.0.since(&3.0), 2.0);
        assert_eq!(2.0.since(&3.0), 2.0, "a reset counts from zero");
        let now = BTreeMap::from([("a", 4.0), ("b", 1.0)]);
        let before = BTreeMap::from([("a", 1.0)]);
        assert_eq!(now.since(&before), BTreeMap::from([("a", 3.0), ("b", 1.0)]));
        let h = HistogramValue {
            sum: 3.0,
            count: 2.0,
            buckets: vec![(1.0, 1.0), (f64::INFINITY, 2.0)],
        };
        assert_eq!(h.since_opt(None), h);
    }
}
