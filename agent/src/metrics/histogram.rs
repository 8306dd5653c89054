//! A histogram the exporter renders as prometheus-client's own (same buckets, same text),
//! whose values the views can also read directly (`get`): prometheus-client keeps its
//! histogram's counts to its encoder.
use std::sync::{Arc, Mutex};

use prometheus_client::{
    encoding::{EncodeMetric, MetricEncoder, NoLabelSet},
    metrics::{MetricType, TypedMetric},
};

#[derive(Debug, Clone)]
pub struct Histogram {
    inner: Arc<Mutex<Inner>>,
}

#[derive(Debug)]
struct Inner {
    sum: f64,
    count: u64,
    /// (upper bound, observations in this bucket alone); the last bound is f64::MAX
    /// (rendered `+Inf`), as prometheus-client has it.
    buckets: Vec<(f64, u64)>,
}

/// A histogram's values at one moment, buckets cumulative as the exposition gives them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HistogramValue {
    pub sum: f64,
    pub count: f64,
    /// (upper bound, observations at or below it); the last bound is +Inf.
    pub buckets: Vec<(f64, f64)>,
}

impl HistogramValue {
    /// Adds another series' values (same buckets) to this one's: a sum over label sets.
    pub fn add(&mut self, o: &HistogramValue) {
        self.sum += o.sum;
        self.count += o.count;
        if self.buckets.is_empty() {
            self.buckets = o.buckets.clone();
        } else {
            for (b, (le, n)) in self.buckets.iter_mut().zip(&o.buckets) {
                debug_assert_eq!(b.0, *le);
                b.1 += n;
            }
        }
    }
}

impl Histogram {
    pub fn new(buckets: impl IntoIterator<Item = f64>) -> Self {
        let buckets = buckets.into_iter().chain([f64::MAX]).map(|b| (b, 0)).collect();
        Self {
            inner: Arc::new(Mutex::new(Inner {
                sum: 0.0,
                count: 0,
                buckets,
            })),
        }
    }

    pub fn observe(&self, v: f64) {
        let mut i = self.inner.lock().unwrap();
        i.sum += v;
        i.count += 1;
        if let Some(b) = i.buckets.iter_mut().find(|(upper, _)| *upper >= v) {
            b.1 += 1;
        }
    }

    pub fn get(&self) -> HistogramValue {
        let i = self.inner.lock().unwrap();
        let mut cumulative = 0;
        HistogramValue {
            sum: i.sum,
            count: i.count as f64,
            buckets: i
                .buckets
                .iter()
                .map(|&(upper, n)| {
                    cumulative += n;
                    let le = if upper == f64::MAX { f64::INFINITY } else { upper };
                    (le, cumulative as f64)
                })
                .collect(),
        }
    }
}

impl TypedMetric for Histogram {
    const TYPE: MetricType = MetricType::Histogram;
}

impl EncodeMetric for Histogram {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        let i = self.inner.lock().unwrap();
        encoder.encode_histogram::<NoLabelSet>(i.sum, i.count, &i.buckets, None)
    }

    fn metric_type(&self) -> MetricType {
        Self::TYPE
    }
}
