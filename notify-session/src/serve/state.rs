//! The state every handler shares.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use metrics_exporter_prometheus::PrometheusHandle;
use tokio::sync::watch;

use super::consume::Consumers;
use super::directory::OwnerDirectory;
use super::host::{Host, ServeApp};

/// What the handlers share: the host, the consumers, the directory of other hosts.
#[derive(Clone)]
pub(crate) struct AppState {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    /// The host, once started (`/readyz` is 503 until then).
    pub(crate) host: std::sync::OnceLock<Arc<dyn Host>>,
    pub(crate) app: Arc<ServeApp>,
    pub(crate) consumers: Arc<Consumers>,
    pub(crate) directory: Arc<dyn OwnerDirectory>,
    /// The Prometheus text, when the application installed the exporter.
    pub(crate) metrics: Option<PrometheusHandle>,
    /// True once a shutdown began: long polls and streams end, `/readyz` says so.
    pub(crate) draining: AtomicBool,
    /// Flips to true with `draining` (streams and polls wait on it).
    pub(crate) drain: watch::Sender<bool>,
    /// The longest visibility timeout a client may ask for.
    pub(crate) max_visibility: Duration,
    /// This server's base URL.
    pub(crate) base_url: String,
    /// The operator console's state.
    pub(crate) console: Arc<super::console::kept::Console>,
}

impl AppState {
    /// The host, or 503 while it is starting.
    pub(crate) fn host(&self) -> Result<&Arc<dyn Host>, super::error::ApiError> {
        self.inner
            .host
            .get()
            .ok_or_else(|| super::error::ApiError::Unavailable {
                reason: "not_ready",
                detail: "the server is starting: its host has not finished adopting sessions"
                    .into(),
                retry_after: 1,
            })
    }

    /// Whether a shutdown began.
    pub(crate) fn draining(&self) -> bool {
        self.inner.draining.load(Ordering::Acquire)
    }

    /// A receiver that sees the shutdown begin.
    pub(crate) fn drain_signal(&self) -> watch::Receiver<bool> {
        self.inner.drain.subscribe()
    }

    /// Begins the drain.
    pub(crate) fn begin_drain(&self) {
        self.inner.draining.store(true, Ordering::Release);
        let _ = self.inner.drain.send(true);
    }
}

/// Completes once `rx` holds `true` (or its sender is gone).
pub(crate) async fn until_true(rx: &mut watch::Receiver<bool>) {
    let _ = rx.wait_for(|v| *v).await;
}
