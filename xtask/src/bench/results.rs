//! What a run left behind: criterion's results and the benches' own metrics, read
//! back from the target dir, and where each figure of the tables comes from.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::Context as _;
use serde_json::Value;

/// One criterion benchmark's result.
pub(super) struct Measured {
    /// Mean time per iteration, in nanoseconds.
    pub(super) mean_ns: f64,
    /// Elements per iteration, when the benchmark declares an element throughput.
    pub(super) elements: Option<f64>,
    /// Bytes per iteration, when the benchmark declares a byte throughput.
    pub(super) bytes: Option<f64>,
}

impl Measured {
    pub(super) fn rate(&self) -> Option<f64> {
        self.elements.map(|e| e / (self.mean_ns * 1e-9))
    }
}

/// A figure that is not a time (`target/bench-metrics/*.json`).
pub(super) struct Metric {
    pub(super) value: f64,
    pub(super) unit: String,
}

/// Everything one run measured.
#[derive(Default)]
pub(super) struct Results {
    pub(super) criterion: BTreeMap<String, Measured>,
    pub(super) metrics: BTreeMap<String, Metric>,
}

/// Where a figure comes from.
#[derive(Clone, Copy)]
pub(super) enum Src {
    /// A criterion benchmark: its rate if it declares elements, else its time.
    Crit(&'static str),
    /// A recorded metric; compared with a metric of the same unit.
    Metric(&'static str),
}

/// Reads every `new/benchmark.json` + `new/estimates.json` pair under `dir`.
pub(super) fn collect(dir: &Path) -> anyhow::Result<BTreeMap<String, Measured>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for entry in entries {
            let path = entry?.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.file_name().is_some_and(|n| n == "benchmark.json")
                && path
                    .parent()
                    .and_then(Path::file_name)
                    .is_some_and(|n| n == "new")
            {
                let bench: Value = serde_json::from_slice(&std::fs::read(&path)?)?;
                let estimates_path = path.with_file_name("estimates.json");
                let estimates: Value = serde_json::from_slice(&std::fs::read(&estimates_path)?)?;
                let Some(id) = bench["full_id"].as_str() else {
                    continue;
                };
                let Some(mean_ns) = estimates["mean"]["point_estimate"].as_f64() else {
                    continue;
                };
                let elements = bench["throughput"]["Elements"].as_f64();
                let bytes = bench["throughput"]["Bytes"].as_f64();
                out.insert(
                    id.to_owned(),
                    Measured {
                        mean_ns,
                        elements,
                        bytes,
                    },
                );
            }
        }
    }
    Ok(out)
}

/// Reads every `*.json` metric under `dir` (none if it does not exist).
pub(super) fn collect_metrics(dir: &Path) -> anyhow::Result<BTreeMap<String, Metric>> {
    let mut out = BTreeMap::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Ok(out);
    };
    for entry in entries {
        let path = entry?.path();
        if path.extension().is_none_or(|e| e != "json") {
            continue;
        }
        let v: Value = serde_json::from_slice(&std::fs::read(&path)?)
            .with_context(|| format!("reading {}", path.display()))?;
        if let (Some(name), Some(value), Some(unit)) =
            (v["name"].as_str(), v["value"].as_f64(), v["unit"].as_str())
        {
            out.insert(
                name.to_owned(),
                Metric {
                    value,
                    unit: unit.to_owned(),
                },
            );
        }
    }
    Ok(out)
}
