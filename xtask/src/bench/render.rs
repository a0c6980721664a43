//! The two tables as markdown: figures in human units, ratios and verdicts.

use std::fmt::Write as _;

use super::comparisons::{Goal, rows};
use super::figures::FIGURES;
use super::results::{Metric, Results, Src};

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

pub(super) fn render(results: &Results) -> String {
    let mut s = super::issue34::render(results);
    s.push('\n');
    let _ = writeln!(
        s,
        "| comparison (same run) | measured | baseline | ratio | target | met |"
    );
    let _ = writeln!(s, "| --- | --- | --- | --- | --- | --- |");
    for r in rows() {
        let Some((mv, m)) = figure(results, r.measured) else {
            continue;
        };
        let base = match r.baseline {
            Some(src) => match figure(results, src) {
                Some(b) => Some(b),
                None => continue,
            },
            None => None,
        };
        let (bv, ratio) = match &base {
            Some((bv, b)) => (bv.clone(), format!("{:.2}×", m / b)),
            None => ("—".to_owned(), "—".to_owned()),
        };
        let b = base.as_ref().map_or(f64::NAN, |(_, b)| *b);
        let (target, met) = match r.goal {
            Goal::RateAtLeast(t) => (format!("≥ {t}×"), Some(m / b >= t)),
            Goal::TimeAtMost(t) | Goal::ValueAtMost(t) => (format!("≤ {t}×"), Some(m / b <= t)),
            Goal::AbsAtMost(t) => (format!("≤ {t}"), Some(m <= t)),
            Goal::Info => ("—".to_owned(), None),
        };
        let verdict = match met {
            None => "—",
            Some(true) => "yes",
            Some(false) => "**no**",
        };
        let _ = writeln!(
            s,
            "| {} | {mv} | {bv} | {ratio} | {target} | {verdict} |",
            r.what
        );
    }
    let _ = writeln!(s, "\n| figure (same run) | value |\n| --- | --- |");
    for (what, src) in FIGURES {
        if let Some((v, _)) = figure(results, *src) {
            let _ = writeln!(s, "| {what} | {v} |");
        }
    }
    s
}
