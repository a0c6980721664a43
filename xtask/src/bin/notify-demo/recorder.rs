//! The demo's own small metrics recorder: what the libraries report through the
//! `metrics` facade, kept in memory and printed at the end.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

/// The demo's metrics recorder: every metric of the run, in memory, for the summary.
pub(crate) static RECORDER: DemoRecorder = DemoRecorder {
    metrics: Mutex::new(BTreeMap::new()),
};

/// A minimal [`metrics::Recorder`]: counters and gauges as atomics, histograms as count,
/// sum and maximum. Keyed by name and labels (`name{k=v,...}`).
pub(crate) struct DemoRecorder {
    metrics: Mutex<BTreeMap<String, Metric>>,
}

#[derive(Clone)]
enum Metric {
    Counter(Arc<AtomicU64>),
    /// An `f64`'s bits (how `metrics` implements a gauge on an `AtomicU64`).
    Gauge(Arc<AtomicU64>),
    Histogram(Arc<Summary>),
}

/// A histogram's count, sum and maximum.
#[derive(Default)]
struct Summary(Mutex<(u64, f64, f64)>);

impl metrics::HistogramFn for Summary {
    fn record(&self, value: f64) {
        let mut s = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        s.0 += 1;
        s.1 += value;
        s.2 = s.2.max(value);
    }
}

impl DemoRecorder {
    fn get(&self, key: &metrics::Key, make: impl FnOnce() -> Metric) -> Metric {
        let mut name = key.name().to_owned();
        let labels: Vec<String> = key
            .labels()
            .map(|l| format!("{}={}", l.key(), l.value()))
            .collect();
        if !labels.is_empty() {
            name = format!("{name}{{{}}}", labels.join(","));
        }
        let mut metrics = self.metrics.lock().unwrap_or_else(PoisonError::into_inner);
        metrics.entry(name).or_insert_with(make).clone()
    }

    /// Prints every metric, one line each, in name order.
    pub(crate) fn print(&self) {
        let metrics = self.metrics.lock().unwrap_or_else(PoisonError::into_inner);
        for (name, metric) in metrics.iter() {
            let value = match metric {
                Metric::Counter(n) => n.load(Ordering::Relaxed).to_string(),
                Metric::Gauge(bits) => f64::from_bits(bits.load(Ordering::Relaxed)).to_string(),
                Metric::Histogram(h) => {
                    let (count, sum, max) = *h.0.lock().unwrap_or_else(PoisonError::into_inner);
                    let mean = if count == 0 { 0.0 } else { sum / count as f64 };
                    if name.contains("_seconds") {
                        format!(
                            "{count} samples, mean {:.3} ms, max {:.3} ms",
                            mean * 1e3,
                            max * 1e3
                        )
                    } else {
                        format!("{count} samples, mean {mean:.2}, max {max}")
                    }
                }
            };
            println!("  {name:<68} {value}");
        }
    }
}

impl metrics::Recorder for DemoRecorder {
    fn describe_counter(
        &self,
        _: metrics::KeyName,
        _: Option<metrics::Unit>,
        _: metrics::SharedString,
    ) {
    }
    fn describe_gauge(
        &self,
        _: metrics::KeyName,
        _: Option<metrics::Unit>,
        _: metrics::SharedString,
    ) {
    }
    fn describe_histogram(
        &self,
        _: metrics::KeyName,
        _: Option<metrics::Unit>,
        _: metrics::SharedString,
    ) {
    }

    fn register_counter(&self, key: &metrics::Key, _: &metrics::Metadata<'_>) -> metrics::Counter {
        match self.get(key, || Metric::Counter(Arc::default())) {
            Metric::Counter(n) => metrics::Counter::from_arc(n),
            _ => metrics::Counter::noop(),
        }
    }

    fn register_gauge(&self, key: &metrics::Key, _: &metrics::Metadata<'_>) -> metrics::Gauge {
        match self.get(key, || Metric::Gauge(Arc::default())) {
            Metric::Gauge(bits) => metrics::Gauge::from_arc(bits),
            _ => metrics::Gauge::noop(),
        }
    }

    fn register_histogram(
        &self,
        key: &metrics::Key,
        _: &metrics::Metadata<'_>,
    ) -> metrics::Histogram {
        match self.get(key, || Metric::Histogram(Arc::default())) {
            Metric::Histogram(h) => metrics::Histogram::from_arc(h),
            _ => metrics::Histogram::noop(),
        }
    }
}
