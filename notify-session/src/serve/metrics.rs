//! The Prometheus exporter for the `metrics` facade the libraries record through, and
//! the handles of the server's own request metrics ([`RequestMetrics`]).

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use metrics::{Counter, Histogram};
use metrics_exporter_prometheus::{BuildError, Matcher, PrometheusBuilder, PrometheusHandle};

/// The buckets of every histogram in seconds.
const SECONDS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// The buckets of the journal's commit sizes, in appends (up to the largest batch
/// either engine may be set to take, 65,536).
const APPENDS: &[f64] = &[
    1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 4096.0, 16384.0, 65536.0,
];

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
        .set_buckets(SECONDS)?
        .set_buckets_for_metric(
            Matcher::Full("notify_journal_commit_batch_size".to_owned()),
            APPENDS,
        )?
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

/// The request metrics' handles, by route, method, status and refusal reason: each
/// made on its first request and reused, so a request records without looking its
/// metrics up by their label strings in the recorder's registry.
///
/// Every label comes from a bounded set, whatever clients send: the route is a
/// route's pattern or `unmatched`, the method one of HTTP's nine or `other`
/// (`layers::known_method`), the status a status code, the reason one of [`ApiError`]'s.
///
/// [`ApiError`]: super::ApiError
///
/// The handles are the recorder's that was installed when they were made: the
/// server's recorder is installed before it serves (`install_prometheus`).
#[derive(Debug, Default)]
pub(crate) struct RequestMetrics {
    routes: Mutex<HashMap<Box<str>, RouteMetrics>>,
}

#[derive(Debug, Default)]
struct RouteMetrics {
    /// `notify_serve_request_duration_seconds`, by method.
    durations: Vec<(&'static str, Histogram)>,
    /// `notify_serve_requests_total`, by method, status and reason.
    answers: Vec<(&'static str, u16, &'static str, Counter)>,
}

impl RequestMetrics {
    /// Counts one request to `route` by `method` (one of HTTP's nine, or `other`)
    /// answered `status` (refused for `reason`, or `"none"`) after `took`.
    pub(crate) fn record(
        &self,
        route: &str,
        method: &'static str,
        status: u16,
        reason: &'static str,
        took: Duration,
    ) {
        let (answers, duration) = {
            let mut routes = self.routes.lock().unwrap_or_else(PoisonError::into_inner);
            let metrics = match routes.get_mut(route) {
                Some(m) => m,
                None => routes.entry(route.into()).or_default(),
            };
            (
                metrics.answers(route, method, status, reason),
                metrics.duration(route, method),
            )
        };
        answers.increment(1);
        duration.record(took.as_secs_f64());
    }
}

impl RouteMetrics {
    fn answers(
        &mut self,
        route: &str,
        method: &'static str,
        status: u16,
        reason: &'static str,
    ) -> Counter {
        if let Some((.., c)) = self
            .answers
            .iter()
            .find(|(m, s, r, _)| *m == method && *s == status && *r == reason)
        {
            return c.clone();
        }
        let counter = metrics::counter!(
            "notify_serve_requests_total",
            "route" => route.to_owned(),
            "method" => method,
            "status" => status.to_string(),
            "reason" => reason,
        );
        self.answers.push((method, status, reason, counter.clone()));
        counter
    }

    fn duration(&mut self, route: &str, method: &'static str) -> Histogram {
        if let Some((_, h)) = self.durations.iter().find(|(m, _)| *m == method) {
            return h.clone();
        }
        let histogram = metrics::histogram!(
            "notify_serve_request_duration_seconds",
            "route" => route.to_owned(),
            "method" => method,
        );
        self.durations.push((method, histogram.clone()));
        histogram
    }
}
