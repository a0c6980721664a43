//! The tables as markdown (issue 34's first, from `issue34.rs`): ratios and verdicts of
//! figures in human units (`human.rs`).

use std::fmt::Write as _;

use super::comparisons::{Goal, rows};
use super::figures::FIGURES;
use super::human::{figure, ratio_text};
use super::results::Results;

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
            Some((bv, b)) => (bv.clone(), ratio_text(m / b, r.goal.ratio_target())),
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
