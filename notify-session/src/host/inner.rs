//! The state every handle of one host and its background tasks share.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use notify_journal::JournalLeases;
use tokio::sync::{Semaphore, watch};
use tokio::task::JoinHandle;

use super::app::HostApp;
use super::options::HostOptions;
use super::table::LeaseTable;

/// One host: its journal, its leases, the application, its settings and its
/// background tasks.
pub(crate) struct Inner<J: JournalLeases + 'static> {
    /// The journal itself: leases, retention; each session appends through a fence
    /// of its own placement over it.
    pub(crate) journal: Arc<J>,
    pub(crate) table: Arc<LeaseTable>,
    pub(crate) app: Arc<dyn HostApp>,
    pub(crate) options: HostOptions,
    /// Set to `true` by shutdown: the background tasks end.
    pub(crate) shutdown: watch::Sender<bool>,
    /// The background tasks (keeper, adopter, retention), joined by shutdown.
    pub(crate) tasks: Mutex<Vec<Task>>,
    /// Held by a shutdown while it runs, `true` once one finished: a second shutdown
    /// (from a clone of the handle) waits for the first.
    pub(crate) shutdown_done: tokio::sync::Mutex<bool>,
    /// The opens the adopter started, each a task of its own: shutdown waits for
    /// them (aborting and awaiting those still running past the grace), whether or
    /// not the adopter itself was aborted.
    pub(crate) opens: Mutex<Vec<JoinHandle<()>>>,
    /// The stops the keeper started, each a task of its own (off the renewal path):
    /// shutdown waits for them as for the opens.
    pub(crate) stops: Mutex<Vec<JoinHandle<()>>>,
    /// Bounds how many of the keeper's stops run at once.
    pub(crate) stop_permits: Semaphore,
}

/// One background task of a host.
pub(crate) struct Task {
    pub(crate) handle: JoinHandle<()>,
    /// Whether shutdown aborts it at once, because every point of its work is a safe
    /// place to stop (retention: each purge step commits whole or not), rather than
    /// letting it finish the step it is in (the keeper's stops, the adopter's opens).
    pub(crate) abort_at_once: bool,
}

/// How many of the keeper's stops run at once (each waits on the journal: appends in
/// flight, a release).
pub(crate) const PARALLEL_STOPS: usize = 64;

impl<J: JournalLeases + 'static> Inner<J> {
    /// Records a stop running as a task of its own (forgetting those finished).
    pub(crate) fn track_stop(&self, task: JoinHandle<()>) {
        let mut stops = self.stops.lock().unwrap_or_else(|p| p.into_inner());
        stops.retain(|stop| !stop.is_finished());
        stops.push(task);
    }

    /// How long after the start of a successful renewal the host keeps serving a
    /// session without another one: the lease duration less the safety margin.
    pub(crate) fn keep_for(&self) -> Duration {
        self.options
            .lease_duration
            .saturating_sub(self.options.margin)
    }
}
