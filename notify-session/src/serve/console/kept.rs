//! What the console keeps between requests ([`Console`], held in the server's state):
//! the journal's inspector, the login's keys and cookie key, what this server answered,
//! the census and the last verify. Apart from the pages, so that the server's state
//! holds it without importing the console's routes.

use std::sync::{Arc, Mutex};

use notify_journal::VerifyReport;
use notify_types::Timestamp;

use super::super::keys::KeySet;
use super::census::Census;
use super::cookie::CookieKey;
use super::inspect::JournalInspect;
use super::observed::Observed;

/// A verify the console ran, and when.
#[derive(Debug, Clone)]
pub(crate) struct VerifyRun {
    pub(crate) at: Timestamp,
    pub(crate) took: std::time::Duration,
    pub(crate) report: Result<VerifyReport, String>,
}

/// What the console keeps.
#[derive(Debug)]
pub(crate) struct Console {
    pub(crate) inspect: Option<Arc<dyn JournalInspect>>,
    pub(super) keys: Arc<KeySet>,
    /// No login (the server runs unsigned on loopback).
    pub(super) open: bool,
    /// The cookie gets `Secure` (the listener speaks TLS).
    pub(super) secure: bool,
    pub(super) cookie: CookieKey,
    pub(crate) observed: Observed,
    pub(crate) census: Mutex<Census>,
    pub(crate) verify: Mutex<Option<VerifyRun>>,
    pub(crate) started: Timestamp,
}

impl std::fmt::Debug for dyn JournalInspect {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "JournalInspect({})", self.engine())
    }
}

impl Console {
    /// The console of a server with `keys`; open without a login when `unsigned`.
    pub(crate) fn new(
        inspect: Option<Arc<dyn JournalInspect>>,
        keys: Arc<KeySet>,
        unsigned: bool,
        tls: bool,
    ) -> Self {
        Self {
            inspect,
            keys,
            open: unsigned,
            secure: tls,
            cookie: CookieKey::random(),
            observed: Observed::default(),
            census: Mutex::new(Census::default()),
            verify: Mutex::new(None),
            started: Timestamp::now(),
        }
    }
}

/// A server's state for the console's unit tests: no host (pages that need one answer
/// 503), the console given `inspect`, open (unsigned) or behind a login.
#[cfg(test)]
pub(crate) fn test_state(
    inspect: Option<Arc<dyn JournalInspect>>,
    open: bool,
) -> crate::serve::state::AppState {
    let consumers = Arc::new(crate::serve::consume::Consumers::default());
    crate::serve::state::AppState {
        inner: Arc::new(crate::serve::state::Inner {
            host: std::sync::OnceLock::new(),
            app: Arc::new(crate::serve::host::ServeApp::new(Arc::clone(&consumers))),
            consumers,
            directory: Arc::new(crate::serve::NoDirectory),
            metrics: None,
            draining: std::sync::atomic::AtomicBool::new(false),
            drain: tokio::sync::watch::channel(false).0,
            max_visibility: std::time::Duration::from_secs(60),
            base_url: "http://127.0.0.1:1".into(),
            console: Arc::new(Console::new(inspect, Arc::new(KeySet::new()), open, false)),
        }),
    }
}
