//! What the console keeps between requests ([`Console`], held in the server's state):
//! the journal's inspector, the login's keys and cookie key, what this server answered,
//! the census and the last verify, each run at most one at a time ([`Flight`]). Apart
//! from the pages, so that the server's state holds it without importing the
//! console's routes.

use std::sync::{Arc, Mutex, PoisonError};

use std::time::Duration;

use notify_journal::VerifyReport;
use notify_types::Timestamp;
use tokio::sync::watch;
use tokio::time::Instant;

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
    /// A key typed into the login form cannot be read on the way: the listener speaks
    /// TLS or listens on loopback only. Otherwise the form takes read-only keys only.
    pub(super) private: bool,
    pub(super) cookie: CookieKey,
    pub(crate) observed: Observed,
    /// The census: the background one every few minutes and "Count now" share it.
    pub(crate) census: Flight<Census>,
    /// The deep verify "Run verify now" starts.
    pub(crate) verify: Flight<VerifyRun>,
    pub(crate) started: Timestamp,
}

impl std::fmt::Debug for dyn JournalInspect {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "JournalInspect({})", self.engine())
    }
}

impl Console {
    /// The console of a server with `keys`; open without a login when `unsigned`.
    /// `loopback`: the server listens on a loopback address only.
    pub(crate) fn new(
        inspect: Option<Arc<dyn JournalInspect>>,
        keys: Arc<KeySet>,
        unsigned: bool,
        tls: bool,
        loopback: bool,
    ) -> Self {
        Self {
            inspect,
            keys,
            open: unsigned,
            secure: tls,
            private: tls || loopback,
            cookie: CookieKey::random(),
            observed: Observed::default(),
            census: Flight::default(),
            verify: Flight::default(),
            started: Timestamp::now(),
        }
    }
}

/// A job the console runs in the background at most one at a time (the census, the
/// verify), and its last result, where the pages read it. [`begin`](Self::begin)
/// answers a [`Ticket`] only when none runs; the ticket's
/// [`finish`](Ticket::finish) keeps the result and frees the flight (dropped
/// unfinished, it frees the flight and keeps the previous result). A run of a second
/// or more is followed by a rest of [`REST_FACTOR`] times its length, in which no run
/// begins: a whole-journal job runs at most a fifth of the time, however often it is
/// asked for.
#[derive(Debug)]
pub(crate) struct Flight<T> {
    state: Arc<Mutex<Flying<T>>>,
    /// Counts the runs finished, for those waiting on one.
    done: Arc<watch::Sender<u64>>,
}

#[derive(Debug)]
struct Flying<T> {
    /// Since when one runs.
    running: Option<Timestamp>,
    last: Option<T>,
    /// Until when the flight rests after its last run.
    rest_until: Option<Instant>,
}

/// A run's rest, in multiples of its length.
pub(crate) const REST_FACTOR: u32 = 4;
/// Runs shorter than this rest not at all.
const RESTED_RUN: Duration = Duration::from_secs(1);

/// Why [`Flight::begin`] gave no ticket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Busy {
    /// A run is under way.
    Running,
    /// The last run ended recently: the next may begin after this long.
    Resting(Duration),
}

impl<T> Flying<T> {
    /// Frees the flight after a run that began at `started`.
    fn end(&mut self, started: Instant) {
        self.running = None;
        let took = started.elapsed();
        self.rest_until = (took >= RESTED_RUN).then(|| Instant::now() + took * REST_FACTOR);
    }
}

impl<T> Default for Flight<T> {
    fn default() -> Self {
        Self {
            state: Arc::new(Mutex::new(Flying {
                running: None,
                last: None,
                rest_until: None,
            })),
            done: Arc::new(watch::channel(0).0),
        }
    }
}

impl<T> Flight<T> {
    fn lock(&self) -> std::sync::MutexGuard<'_, Flying<T>> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A ticket to run the job, unless one runs or the flight rests.
    pub(crate) fn begin(&self) -> Result<Ticket<T>, Busy> {
        let mut state = self.lock();
        if state.running.is_some() {
            return Err(Busy::Running);
        }
        let now = Instant::now();
        if let Some(until) = state.rest_until
            && until > now
        {
            return Err(Busy::Resting(until - now));
        }
        state.running = Some(Timestamp::now());
        Ok(Ticket {
            state: Arc::clone(&self.state),
            done: Arc::clone(&self.done),
            started: now,
            finished: false,
        })
    }

    /// How long the flight still rests after its last run, if it does.
    pub(crate) fn resting(&self) -> Option<Duration> {
        let until = self.lock().rest_until?;
        let now = Instant::now();
        (until > now).then(|| until - now)
    }

    /// Since when a run is under way, if one is.
    pub(crate) fn running(&self) -> Option<Timestamp> {
        self.lock().running
    }

    /// The last finished run's result.
    pub(crate) fn last(&self) -> Option<T>
    where
        T: Clone,
    {
        self.lock().last.clone()
    }

    /// A receiver that changes when a run finishes (subscribe before the run starts).
    pub(crate) fn finished(&self) -> watch::Receiver<u64> {
        self.done.subscribe()
    }
}

/// The right to run a [`Flight`]'s job, held by the one run under way.
#[derive(Debug)]
pub(crate) struct Ticket<T> {
    state: Arc<Mutex<Flying<T>>>,
    done: Arc<watch::Sender<u64>>,
    started: Instant,
    finished: bool,
}

impl<T> Ticket<T> {
    /// Keeps `result` as the last run's and frees the flight.
    pub(crate) fn finish(mut self, result: T) {
        {
            let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
            state.last = Some(result);
            state.end(self.started);
        }
        self.finished = true;
        self.done.send_modify(|n| *n += 1);
    }
}

impl<T> Drop for Ticket<T> {
    fn drop(&mut self) {
        if !self.finished {
            self.state
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .end(self.started);
            self.done.send_modify(|n| *n += 1);
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
            console: Arc::new(Console::new(
                inspect,
                Arc::new(KeySet::new()),
                open,
                false,
                true,
            )),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_run_at_a_time_and_its_result_kept() {
        let flight: Flight<u32> = Flight::default();
        let ticket = flight.begin();
        assert!(ticket.is_ok() && flight.running().is_some());
        assert_eq!(
            flight.begin().err(),
            Some(Busy::Running),
            "a second run while one runs"
        );
        let finished = flight.finished();
        if let Ok(t) = ticket {
            t.finish(7);
        }
        assert!(finished.has_changed().unwrap_or(false));
        assert_eq!((flight.running(), flight.last()), (None, Some(7)));
        // A run dropped unfinished frees the flight and keeps the last result.
        drop(flight.begin());
        assert_eq!((flight.running(), flight.last()), (None, Some(7)));
        // Short runs rest not at all.
        assert!(flight.begin().is_ok());
    }

    /// A run of a second or more rests four times its length: asked for again and
    /// again, a whole-journal job runs at most a fifth of the time.
    #[tokio::test(start_paused = true)]
    async fn a_long_run_rests_four_times_its_length() {
        let flight: Flight<u32> = Flight::default();
        let ticket = flight.begin().ok();
        tokio::time::advance(Duration::from_secs(3)).await;
        if let Some(t) = ticket {
            t.finish(1);
        }
        assert_eq!(
            flight.begin().err(),
            Some(Busy::Resting(Duration::from_secs(12)))
        );
        assert_eq!(flight.resting(), Some(Duration::from_secs(12)));
        tokio::time::advance(Duration::from_secs(11)).await;
        assert!(matches!(flight.begin(), Err(Busy::Resting(_))));
        tokio::time::advance(Duration::from_secs(1)).await;
        let again = flight.begin();
        assert!(again.is_ok(), "rested");
        // A run cut short (its ticket dropped) rests the same.
        tokio::time::advance(Duration::from_secs(2)).await;
        drop(again);
        assert_eq!(
            flight.begin().err(),
            Some(Busy::Resting(Duration::from_secs(8)))
        );
    }
}
