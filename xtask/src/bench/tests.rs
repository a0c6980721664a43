//! The page and its charts from a fixed small results set: every chart keeps every
//! series, the page keeps both tables and its hand-written prose, and the serve row is
//! judged against its target.

use super::chart_list::CHARTS;
use super::charts::{Shape, draw};
use super::page::{BEGIN, END, build, fill};
use super::results::{Measured, Metric, Results, Src};

/// Every figure the charts plot, plus the serve bench's: rates of `1000 × x`/s.
fn sample() -> Results {
    let mut results = Results::default();
    for chart in CHARTS {
        for series in chart.series {
            for &(x, src) in series.points {
                match src {
                    Src::Crit(id) => {
                        results.criterion.insert(
                            id.to_owned(),
                            Measured {
                                mean_ns: 1e9 / (1000.0 * (x + 1.0)),
                                elements: Some(1.0),
                                bytes: None,
                            },
                        );
                    }
                    Src::Metric(name) => {
                        let unit = if name.starts_with("host/") {
                            "ms"
                        } else {
                            "/s"
                        };
                        results.metrics.insert(
                            name.to_owned(),
                            Metric {
                                value: 1000.0 * (x + 1.0),
                                unit: unit.to_owned(),
                            },
                        );
                    }
                }
            }
        }
    }
    // The serve bench at 64 connections: HTTP 0.4× of in-process (target 0.5×).
    for (name, value, unit) in [
        ("serve/http/64/per_s", 4_000.0, "/s"),
        ("serve/in_process/64/per_s", 10_000.0, "/s"),
        ("serve/http/64/p50_ms", 15.0, "ms"),
        ("serve/idle_connection_kib", 12.5, "KiB"),
    ] {
        results.metrics.insert(
            name.to_owned(),
            Metric {
                value,
                unit: unit.to_owned(),
            },
        );
    }
    results
}

/// The charts and the legends each must show, written out here so that a chart or a
/// series dropped from `chart_list.rs` fails.
const EXPECTED: &[(&str, &[&str])] = &[
    (
        "appenders.svg",
        &[
            "redb journal",
            "raw redb",
            "SQLite",
            "persistent-queue",
            "PostgreSQL journal",
            "bare autocommit INSERT",
        ],
    ),
    ("sessions.svg", &["round robin", "shuffled"]),
    ("takeover.svg", &["death", "expiry"]),
    ("serve.svg", &["notify serve", "in process"]),
];

#[test]
fn every_chart_draws_every_series() {
    let results = sample();
    let files: Vec<&str> = CHARTS.iter().map(|c| c.file).collect();
    let expected: Vec<&str> = EXPECTED.iter().map(|(f, _)| *f).collect();
    assert_eq!(files, expected);
    for (chart, (_, labels)) in CHARTS.iter().zip(EXPECTED) {
        let svg = draw(chart, &results).unwrap().unwrap();
        assert!(svg.starts_with("<svg"), "{}", chart.file);
        assert!(svg.contains(chart.title), "{}: no title", chart.file);
        for label in *labels {
            assert!(svg.contains(label), "{}: no series {label}", chart.file);
        }
        assert_eq!(chart.series.len(), labels.len(), "{}", chart.file);
        if let Shape::LogLines = chart.shape {
            // One line per series, the legend's sample lines besides.
            let lines = svg.matches("<polyline").count();
            assert!(
                lines >= labels.len(),
                "{}: {lines} lines for {} series",
                chart.file,
                labels.len()
            );
        }
    }
}

#[test]
fn a_series_the_run_did_not_measure_is_left_out() {
    let mut results = sample();
    results
        .metrics
        .retain(|name, _| !name.starts_with("pg_shapes/"));
    results.metrics.retain(|name, _| !name.starts_with("host/"));
    let appenders = draw(&CHARTS[0], &results).unwrap().unwrap();
    assert!(appenders.contains("redb journal"));
    assert!(!appenders.contains("PostgreSQL"));
    assert!(draw(&CHARTS[2], &results).unwrap().is_none());
}

#[test]
fn the_page_keeps_its_prose_and_gets_both_tables_and_the_charts() {
    let template =
        format!("# Benchmarks\n\nHow we measure.\n\n{BEGIN}\nold tables\n{END}\n\nReading them.\n");
    let (page, charts) = build(&template, &sample()).unwrap();
    assert!(page.starts_with("# Benchmarks\n\nHow we measure.\n\n"));
    assert!(page.ends_with(&format!("{END}\n\nReading them.\n")));
    assert!(!page.contains("old tables"));
    assert!(
        page.contains("| comparison (same run) | measured | baseline | ratio | target | met |")
    );
    assert!(page.contains("| figure (same run) | value |"));
    for chart in CHARTS {
        assert!(page.contains(&format!("](benchmarks/{})", chart.file)));
    }
    assert_eq!(charts.len(), CHARTS.len());
    assert!(charts.iter().all(|(_, svg)| svg.is_some()));
    // Filling again gives the same page: the markers stay, nothing accumulates.
    let (again, _) = build(&page, &sample()).unwrap();
    assert_eq!(again, page);
}

#[test]
fn the_serve_row_is_judged_against_half_the_in_process_rate() {
    let (page, _) = build(&format!("{BEGIN}\n{END}\n"), &sample()).unwrap();
    let row = page
        .lines()
        .find(|l| l.starts_with("| notify serve, 64 connections, vs in-process"))
        .unwrap();
    assert!(row.ends_with("| 0.40× | ≥ 0.5× | **no** |"), "{row}");
    assert!(page.contains("| notify serve, signed, 64 connections: latency p50 | 15.0 ms |"));
    assert!(page.contains("resident memory per idle connection (1,000 held open) | 12.5 KiB |"));
}

#[test]
fn a_page_without_its_markers_is_refused() {
    assert!(fill("# Benchmarks\n", "tables").is_err());
    assert!(fill(&format!("{END}\n{BEGIN}\n"), "tables").is_err());
}

#[test]
fn every_row_of_issue_34_prints_with_its_target_and_a_verdict() {
    let mut results = sample();
    results
        .metrics
        .retain(|name, _| !name.starts_with("pg_shapes/"));
    for (name, value, unit) in [
        // redb vs raw redb: 0.96× (met), 0.80× (unmet), 0.796× (unmet, not "0.80×").
        ("paired/journal_1_vs_raw_minimal_1/a", 960.0, "/s"),
        ("paired/journal_1_vs_raw_minimal_1/b", 1_000.0, "/s"),
        ("paired/journal_64_vs_raw_minimal_64/a", 800.0, "/s"),
        ("paired/journal_64_vs_raw_minimal_64/b", 1_000.0, "/s"),
        ("paired/journal_1024_vs_raw_minimal_1000/a", 796.0, "/s"),
        ("paired/journal_1024_vs_raw_minimal_1000/b", 1_000.0, "/s"),
        // Spread: both met.
        ("spread_shuffled/1", 1_000.0, "/s"),
        ("spread_shuffled/1000", 700.0, "/s"),
        ("spread_shuffled/100000", 650.0, "/s"),
        // Drain on redb met; PostgreSQL's not run.
        ("drain/batch_per_s", 25_000.0, "completions/s"),
        ("drain/turn_per_s", 1_500.0, "completions/s"),
    ] {
        results.metrics.insert(
            name.to_owned(),
            Metric {
                value,
                unit: unit.to_owned(),
            },
        );
    }
    let table = super::issue34::render(&results);
    let lines: Vec<&str> = table.lines().skip(2).collect();
    assert_eq!(lines.len(), super::issue34::rows().len(), "{table}");
    assert_eq!(lines.len(), 8, "one line per row of the issue");
    let row = |start: &str| {
        *lines
            .iter()
            .find(|l| l.starts_with(&format!("| {start}")))
            .unwrap_or_else(|| panic!("no row {start}: {table}"))
    };
    assert!(
        row("redb journal vs raw redb")
            .ends_with("| 0.96× / 0.80× / 0.796× | ≥ 0.95× / ≥ 0.9× / ≥ 0.8× | **UNMET** |"),
        "{table}"
    );
    assert!(
        row("140k fresh commands").ends_with("| 0.70× / 0.65× | ≥ 0.7× / ≥ 0.6× | MET |"),
        "{table}"
    );
    assert!(
        row("one loop consumer draining").ends_with(
            "| 25000 completions/s / (1500 completions/s) / not measured | ≥ 20000 | MET |"
        ),
        "{table}"
    );
    // What the run did not measure is never met.
    for shape in [
        "PostgreSQL journal vs bare",
        "appends past the census",
        "transactional ack on PostgreSQL",
        "appends (64 appenders) into a file",
        "writer memory",
    ] {
        assert!(row(shape).ends_with("| **NOT MEASURED** |"), "{table}");
    }
    let (page, _) = build(&format!("{BEGIN}\n{END}\n"), &results).unwrap();
    assert!(page.contains(&table), "the page holds the table");
}
