//! Issue 34's table ("Speed where it is still short"): one line per row of the issue,
//! each with what this run measured, the target, and a verdict: MET only when
//! every part of the row was measured and meets its target, UNMET when a measured part
//! misses it, NOT MEASURED when the run has no figure for a part (never MET for what
//! was not measured). A row whose bench measures a smaller shape than the says
//! so in its `shape`.

use std::fmt::Write as _;

use super::human::{figure, ratio_text};
use super::results::{Results, Src};

/// What one part of a row must reach.
#[derive(Clone, Copy)]
pub(super) enum Target {
    /// rate(measured) / rate(baseline) at least this.
    RatioAtLeast(f64),
    /// The measured figure itself at least this (in its own unit).
    AtLeast(f64),
    /// The measured figure itself at most this (in its own unit).
    AtMost(f64),
    /// Shown beside the judged parts, not judged.
    Shown,
}

/// One figure of a row: measured, against a same-run baseline when the target is a
/// ratio.
pub(super) struct Part {
    pub(super) measured: Src,
    pub(super) baseline: Option<Src>,
    pub(super) target: Target,
}

/// One row of the table.
pub(super) struct Row {
    pub(super) shape: &'static str,
    pub(super) parts: Vec<Part>,
}

fn ratio(measured: &'static str, baseline: &'static str, at_least: f64) -> Part {
    Part {
        measured: Src::Metric(measured),
        baseline: Some(Src::Metric(baseline)),
        target: Target::RatioAtLeast(at_least),
    }
}

fn crit_ratio(measured: &'static str, baseline: &'static str, at_least: f64) -> Part {
    Part {
        measured: Src::Crit(measured),
        baseline: Some(Src::Crit(baseline)),
        target: Target::RatioAtLeast(at_least),
    }
}

fn value(measured: &'static str, target: Target) -> Part {
    Part {
        measured: Src::Metric(measured),
        baseline: None,
        target,
    }
}

/// The rows, in its order.
pub(super) fn rows() -> Vec<Row> {
    vec![
        Row {
            shape: "redb journal vs raw redb (1/txn; 64/txn; 1000/txn) at 1 / 64 / 1024 appenders",
            parts: vec![
                ratio(
                    "paired/journal_1_vs_raw_minimal_1/a",
                    "paired/journal_1_vs_raw_minimal_1/b",
                    0.95,
                ),
                ratio(
                    "paired/journal_64_vs_raw_minimal_64/a",
                    "paired/journal_64_vs_raw_minimal_64/b",
                    0.9,
                ),
                ratio(
                    "paired/journal_1024_vs_raw_minimal_1000/a",
                    "paired/journal_1024_vs_raw_minimal_1000/b",
                    0.8,
                ),
            ],
        },
        Row {
            shape: "PostgreSQL journal vs bare autocommit INSERT, 8 hot sessions, 1 / 64 / 1024 appenders",
            parts: vec![
                ratio("pg_shapes/hot8/1/journal", "pg_shapes/hot8/1/bare", 0.8),
                ratio("pg_shapes/hot8/64/journal", "pg_shapes/hot8/64/bare", 2.5),
                ratio(
                    "pg_shapes/hot8/1024/journal",
                    "pg_shapes/hot8/1024/bare",
                    4.0,
                ),
            ],
        },
        Row {
            shape: "140k fresh commands over 1,000 / 100,000 shuffled sessions vs 1 session",
            parts: vec![
                ratio("spread_shuffled/1000", "spread_shuffled/1", 0.7),
                ratio("spread_shuffled/100000", "spread_shuffled/1", 0.6),
            ],
        },
        Row {
            shape: "appends past the census's budget vs a fresh file at 20M keys (not reached in \
                    a run; shown: 1M keys with the budget cut to 2^17 keys, 64 appenders round \
                    robin over 16 sessions)",
            parts: vec![
                ratio(
                    "paired/census_cliff_20m_vs_fresh/a",
                    "paired/census_cliff_20m_vs_fresh/b",
                    0.5,
                ),
                Part {
                    target: Target::Shown,
                    ..ratio(
                        "paired/census_cliff_scaled_1m_vs_fresh_64/a",
                        "paired/census_cliff_scaled_1m_vs_fresh_64/b",
                        0.5,
                    )
                },
            ],
        },
        Row {
            shape: "transactional ack on PostgreSQL (ack_in_pg_with: BEGIN, the consumption \
                    and the INSERT pipelined) vs plain ack, 1 consumer / 64 consumers over 8 \
                    sessions; shown: the step-by-step ack_in_pg at both, and ack_in_pg_with \
                    with 64 consumers of one hot session",
            parts: vec![
                crit_ratio("txack_pg/tx_with/1", "txack_pg/plain/1", 0.7),
                crit_ratio("txack_pg/tx_with/64x8", "txack_pg/plain/64x8", 0.5),
                Part {
                    target: Target::Shown,
                    ..crit_ratio("txack_pg/tx/1", "txack_pg/plain/1", 0.7)
                },
                Part {
                    target: Target::Shown,
                    ..crit_ratio("txack_pg/tx/64x8", "txack_pg/plain/64x8", 0.5)
                },
                Part {
                    target: Target::Shown,
                    ..crit_ratio("txack_pg/tx_with/64", "txack_pg/plain/64", 0.5)
                },
            ],
        },
        Row {
            shape: "appends (64 appenders) into a file already holding 1M records vs a fresh file",
            parts: vec![ratio(
                "paired/aged_1m_vs_fresh_64/a",
                "paired/aged_1m_vs_fresh_64/b",
                0.9,
            )],
        },
        Row {
            shape: "writer memory building a 1M-session file, default options: peak RSS growth (MB)",
            parts: vec![value(
                "writer/peak_rss_growth_mb/sessions_1m",
                Target::AtMost(64.0),
            )],
        },
        Row {
            shape: "one loop consumer draining a backlog, redb, batched (completions/s; in turn \
                    and PostgreSQL shown)",
            parts: vec![
                value("drain/batch_per_s", Target::AtLeast(20_000.0)),
                value("drain/turn_per_s", Target::Shown),
                value("drain_pg/batch_per_s", Target::Shown),
            ],
        },
    ]
}

/// A part's figure as shown, and whether it meets its target (`None`: not judged);
/// `None` when the run did not measure it.
fn judge(results: &Results, part: &Part) -> Option<(String, Option<bool>)> {
    let (shown, m) = figure(results, part.measured)?;
    let base = match part.baseline {
        Some(src) => Some(figure(results, src)?.1),
        None => None,
    };
    Some(match (part.target, base) {
        (Target::RatioAtLeast(t), Some(b)) => (ratio_text(m / b, Some(t)), Some(m / b >= t)),
        (Target::AtLeast(t), _) => (shown, Some(m >= t)),
        (Target::AtMost(t), _) => (shown, Some(m <= t)),
        (Target::Shown, Some(b)) => (format!("({})", ratio_text(m / b, None)), None),
        (Target::Shown, None) => (format!("({shown})"), None),
        (Target::RatioAtLeast(_), None) => (shown, Some(false)),
    })
}

fn target(t: Target) -> Option<String> {
    match t {
        Target::RatioAtLeast(t) => Some(format!("≥ {t}×")),
        Target::AtLeast(t) => Some(format!("≥ {t}")),
        Target::AtMost(t) => Some(format!("≤ {t}")),
        Target::Shown => None,
    }
}

/// The table as markdown: shape, measured, target, verdict.
pub(super) fn render(results: &Results) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "| issue 34: shape (same run) | measured | target | verdict |"
    );
    let _ = writeln!(s, "| --- | --- | --- | --- |");
    for row in rows() {
        let mut shown = Vec::new();
        let mut targets = Vec::new();
        let (mut missing, mut unmet) = (false, false);
        for part in &row.parts {
            match judge(results, part) {
                Some((figure, met)) => {
                    shown.push(figure);
                    unmet |= met == Some(false);
                }
                None => {
                    shown.push("not measured".to_owned());
                    missing |= !matches!(part.target, Target::Shown);
                }
            }
            targets.extend(target(part.target));
        }
        let verdict = if unmet {
            "**UNMET**"
        } else if missing {
            "**NOT MEASURED**"
        } else {
            "MET"
        };
        let _ = writeln!(
            s,
            "| {} | {} | {} | {verdict} |",
            row.shape,
            shown.join(" / "),
            targets.join(" / ")
        );
    }
    s
}
