//! A cap on the series of a metric whose labels other local users control: any process can
//! rename itself (comm), listen on thousands of ports (port) or map a library under any
//! file name (library), and remote clients choose the host name they ask for (sni). Past the cap, a new label set goes to its folded form (those labels
//! `other`, the rest kept), counted in tlsprof_series_folded_total{metric} and said once in
//! the log; the series already there keep counting. It lists its series, for the views to
//! read the values in process (`each`): prometheus-client keeps a family's to its encoder.
use std::{
    collections::HashSet,
    hash::Hash,
    ops::Deref,
    sync::{
        atomic::{AtomicBool, Ordering},
        Mutex,
    },
};

use prometheus_client::metrics::{
    counter::Counter,
    family::{Family, MetricConstructor},
};

use super::labels::MetricLabels;

/// The default of --max-series.
pub const DEFAULT_MAX_SERIES: usize = 500;

/// A label set with labels other users control, which folding sets to `other`.
pub trait Fold {
    fn folded(&self) -> Self;
}

/// The label names whose values other local users control.
pub const FOLDED_LABELS: &[&str] = &["comm", "port", "library", "sni"];

pub fn fold_value(label: &str, value: &str) -> String {
    if FOLDED_LABELS.contains(&label) {
        "other".into()
    } else {
        value.into()
    }
}

pub struct Capped<L, M, C = fn() -> M> {
    family: Family<L, M, C>,
    name: &'static str,
    cap: usize,
    /// The label sets of its series (the family's keys).
    series: Mutex<HashSet<L>>,
    warned: AtomicBool,
    folded: Family<MetricLabels, Counter>,
}

impl<L, M, C> Capped<L, M, C>
where
    L: Fold + Clone + Hash + Eq + std::fmt::Debug,
    C: MetricConstructor<M>,
{
    pub fn new(
        family: Family<L, M, C>,
        name: &'static str,
        cap: usize,
        folded: &Family<MetricLabels, Counter>,
    ) -> Self {
        Self {
            family,
            name,
            cap,
            series: Mutex::new(HashSet::new()),
            warned: AtomicBool::new(false),
            folded: folded.clone(),
        }
    }

    /// The series of `labels`, or of their folded form once the metric is at its cap.
    pub fn get_or_create(&self, labels: &L) -> impl Deref<Target = M> + '_ {
        if let Some(m) = self.family.get(labels) {
            return m;
        }
        let mut series = self.series.lock().unwrap();
        let labels = if series.len() >= self.cap && !series.contains(labels) {
            let folded = labels.folded();
            if folded != *labels {
                self.folded
                    .get_or_create(&MetricLabels {
                        metric: self.name.into(),
                    })
                    .inc();
                if !self.warned.swap(true, Ordering::Relaxed) {
                    log::warn!(
                        "tlsprof_{}: {} series reached (--max-series); new comm, port and library values are counted \
                         as \"other\" from now on (first: {labels:?})",
                        self.name,
                        self.cap
                    );
                }
            }
            folded
        } else {
            labels.clone()
        };
        if !series.contains(&labels) {
            series.insert(labels.clone());
        }
        // Created under the lock, so that the list and the family agree (a `remove`
        // between the two would leave a series out of the list).
        let m = self.family.get_or_create(&labels);
        drop(series);
        m
    }

    /// Whether the series of `labels` exists (as given, not folded).
    pub fn exists(&self, labels: &L) -> bool {
        self.family.get(labels).is_some()
    }

    /// Drops a series (a gauge whose subject is gone).
    pub fn remove(&self, labels: &L) -> bool {
        let mut series = self.series.lock().unwrap();
        series.remove(labels);
        self.family.remove(labels)
    }

    /// Calls `f` with each series: its labels and its metric.
    pub fn each(&self, mut f: impl FnMut(&L, &M)) {
        let series = self.series.lock().unwrap();
        for labels in series.iter() {
            if let Some(m) = self.family.get(labels) {
                f(labels, &m);
            }
        }
    }

    /// Series this metric has (the folded ones included).
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.series.lock().unwrap().len()
    }
}

#[cfg(test)]
mod tests {
    use crate::metrics::{ClosedByLabels, Metrics, PortLabels};

    #[test]
    fn lists_its_series() {
        let m = Metrics::with_max_series(2);
        let port = |p: &str| PortLabels {
            comm: "nginx".into(),
            port: p.into(),
        };
        for p in ["1", "2", "3", "2"] {
            m.time_wait.get_or_create(&port(p)).inc();
        }
        let list = || {
            let mut seen = Vec::new();
            m.time_wait
                .each(|l, c| seen.push((l.comm.clone(), l.port.clone(), c.get())));
            seen.sort();
            seen
        };
        let s = |a: &str, b: &str, n| (a.to_string(), b.to_string(), n);
        assert_eq!(list(), [s("nginx", "1", 1), s("nginx", "2", 2), s("other", "other", 1)]);
        assert!(m.time_wait.remove(&port("1")));
        assert_eq!(list(), [s("nginx", "2", 2), s("other", "other", 1)]);
    }

    #[test]
    fn folds_past_the_cap_and_counts() {
        let m = Metrics::with_max_series(10);
        for port in 0..5000 {
            for closed_by in ["client", "server"] {
                m.connections
                    .get_or_create(&ClosedByLabels {
                        comm: "nginx".into(),
                        port: port.to_string(),
                        closed_by: closed_by.into(),
                    })
                    .inc();
            }
        }
        // 10 series of their own, then one folded series per closed_by value.
        assert_eq!(m.connections.len(), 12);
        let text = m.render_text();
        assert!(
            text.contains("tlsprof_tcp_connections_total{comm=\"other\",port=\"other\",closed_by=\"client\"} 4995\n"),
            "{text}"
        );
        assert!(
            text.contains("tlsprof_series_folded_total{metric=\"tcp_connections\"} 9990\n"),
            "{text}"
        );
        // A series that was there before the cap keeps its own count.
        m.connections
            .get_or_create(&ClosedByLabels {
                comm: "nginx".into(),
                port: "0".into(),
                closed_by: "client".into(),
            })
            .inc();
        let text = m.render_text();
        assert!(
            text.contains("{comm=\"nginx\",port=\"0\",closed_by=\"client\"} 2\n"),
            "{text}"
        );
        assert_eq!(m.connections.len(), 12);
    }
}
