//! The Prometheus exporter for the `metrics` facade the libraries record through.

use std::time::Duration;

use metrics_exporter_prometheus::{BuildError, PrometheusBuilder, PrometheusHandle};

/// Installs a Prometheus recorder as the process's global `metrics` recorder and
/// spawns its upkeep (every 5 s); `/metrics` renders it when given to
/// [`ServerBuilder::metrics`](super::ServerBuilder::metrics). An application that
/// installs its own recorder does not call this.
///
/// # Errors
///
/// [`BuildError`] if a global recorder is installed already.
///
/// # Panics
///
/// Outside a tokio runtime (it spawns the upkeep task).
pub fn install_prometheus() -> Result<PrometheusHandle, BuildError> {
    let handle = PrometheusBuilder::new()
        .set_buckets(&[
            0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
        ])?
        .install_recorder()?;
    let upkeep = handle.clone();
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_secs(5)).await;
            upkeep.run_upkeep();
        }
    });
    Ok(handle)
}
