//! One measured figure as a page prints it (in human units) and as comparisons use it
//! (a number), read from a run's results; shared by the tables and the charts.

use super::results::{Metric, Results, Src};

/// A ratio as the tables print it: two decimals, or three where two would round it onto
/// its `target` without being it (0.948 printed "0.95×" beside "≥ 0.95×", unmet).
pub(super) fn ratio_text(r: f64, target: Option<f64>) -> String {
    let two = (r * 100.0).round() / 100.0;
    match target {
        Some(t) if (two - t).abs() < 1e-9 && r != t => format!("{r:.3}×"),
        _ => format!("{r:.2}×"),
    }
}

fn human_rate(rate: f64) -> String {
    if rate >= 1e6 {
        format!("{:.2} M/s", rate / 1e6)
    } else if rate >= 1e3 {
        format!("{:.1} k/s", rate / 1e3)
    } else {
        format!("{rate:.0} /s")
    }
}

fn human_time(ns: f64) -> String {
    if ns >= 1e9 {
        format!("{:.2} s", ns / 1e9)
    } else if ns >= 1e6 {
        format!("{:.2} ms", ns / 1e6)
    } else {
        format!("{:.1} µs", ns / 1e3)
    }
}

fn human_metric(m: &Metric) -> String {
    if m.unit == "/s" {
        human_rate(m.value)
    } else if m.value >= 100.0 {
        format!("{:.0} {}", m.value, m.unit)
    } else {
        format!("{:.1} {}", m.value, m.unit)
    }
}

/// A figure as printed, and the number comparisons use: a rate (higher is better) for
/// criterion benchmarks with elements, else a time or metric value (lower is better).
pub(super) fn figure(results: &Results, src: Src) -> Option<(String, f64)> {
    match src {
        Src::Crit(id) => {
            let m = results.criterion.get(id)?;
            Some(match (m.rate(), m.bytes) {
                (Some(rate), _) => (human_rate(rate), rate),
                (None, Some(bytes)) => {
                    let mbs = bytes / (m.mean_ns * 1e-9) / 1e6;
                    (
                        format!("{mbs:.0} MB/s ({})", human_time(m.mean_ns)),
                        m.mean_ns,
                    )
                }
                (None, None) => (human_time(m.mean_ns), m.mean_ns),
            })
        }
        Src::Metric(name) => {
            let m = results.metrics.get(name)?;
            Some((human_metric(m), m.value))
        }
    }
}
