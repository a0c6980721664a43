//! The background scrub of [`RedbVerifyOnOpen::Background`](crate::redb::options::RedbVerifyOnOpen):
//! the journal's deep check (`verify::logical`) run again and again on read snapshots
//! while appends go on, at a bounded pace, by one thread started at open.
//!
//! Damage it finds (or a pass the storage engine panics in: a damaged page it trusts)
//! poisons the writer's queue, so every later append is refused with
//! `AppendError::Damaged`; the status, a metric and an error log say what it found. A
//! pass that fails on a storage error (possibly transient) is retried
//! [`RETRIES`] times, one [`RETRY_AFTER`] apart; the journal is poisoned only once
//! that many passes in a row have failed. A poison already set (a failed commit) is
//! kept, and the scrub ends once the queue is poisoned, whoever poisoned it. It never
//! dies silently: every way a pass ends lands in the status; a thread that ends
//! without finding damage (a panic outside a pass) says `Failed` and poisons nothing.
//!
//! Stopping: `close` (and the last drop) raises `stop`; the thread looks at it before
//! every [`STEP`] entries and while it sleeps, so it exits within one step's reads.
//! A pass holds one read transaction: pages the writer frees meanwhile are reused only
//! once the pass ends (redb's MVCC); a slower pace makes a pass, and so that read
//! transaction, longer: the file grows by what is freed meanwhile.

use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use redb::Database;

use crate::error::JournalError;
use crate::redb::check::verify;
use crate::redb::contain::contain;

/// Counter, labels `backend`, `outcome` (`clean`, `damaged`): scrub passes finished.
pub(crate) const SCRUB_PASSES: &str = "notify_journal_scrub_passes_total";

/// The scrub looks at its stop flag (and keeps its pace) every this many entries.
const STEP: u64 = 1024;

/// How long `close` waits for the scrub thread to stop before leaving it behind.
const STOP_BOUND: Duration = Duration::from_secs(10);

/// Passes in a row that may fail on a storage error before the scrub poisons.
const RETRIES: u32 = 3;

/// The wait before a pass that failed on a storage error is retried.
const RETRY_AFTER: Duration = Duration::from_secs(1);

/// How many problems a scrub pass that finds damage names.
const SCRUB_PROBLEMS: usize = 8;

/// What the background scrub of a [`RedbJournal`](crate::RedbJournal) is doing and has
/// found ([`RedbJournal::scrub_status`](crate::RedbJournal::scrub_status)).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ScrubStatus {
    /// Where the scrub is.
    pub state: ScrubState,
    /// Passes finished clean since open.
    pub clean_passes: u64,
    /// Table entries read by the pass under way (or the last one).
    pub entries: u64,
}

/// Where the background scrub is.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ScrubState {
    /// No scrub runs: the journal was opened with another
    /// [`RedbVerifyOnOpen`](crate::RedbVerifyOnOpen) than `Background`.
    Off,
    /// A pass is under way.
    Scrubbing,
    /// Between passes: the last one was clean.
    Waiting,
    /// A pass found the file damaged, the storage engine panicked reading it, or
    /// passes kept failing on storage errors: the journal is poisoned
    /// (appends fail with [`AppendError::Damaged`](crate::AppendError::Damaged)) and the
    /// scrub has ended. What it found.
    Damaged(String),
    /// The journal was closed and the scrub stopped.
    Stopped,
    /// The scrub thread ended without finding damage (it failed outside a pass, or
    /// stopped because the journal was poisoned by a failed commit): the journal is
    /// not poisoned by the scrub, but no longer scrubbed. Why.
    Failed(String),
    /// The last pass failed on a storage error (possibly transient); it is retried,
    /// and the journal poisoned only if it keeps failing. The error and how many
    /// passes in a row have failed.
    Retrying {
        /// The storage error of the last pass.
        error: String,
        /// Passes in a row that failed.
        failures: u32,
    },
}

struct Control {
    stop: bool,
    exited: bool,
    status: ScrubStatus,
}

struct Shared {
    control: Mutex<Control>,
    wake: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Control> {
        // Every critical section is a few field stores: the data stays consistent.
        self.control.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Sleeps up to `d` (a `d` past what `Instant` can hold: until stopped); `false`
    /// once asked to stop.
    fn sleep(&self, d: Duration) -> bool {
        let deadline = Instant::now().checked_add(d);
        let mut c = self.lock();
        loop {
            if c.stop {
                return false;
            }
            c = match deadline {
                None => self.wake.wait(c).unwrap_or_else(PoisonError::into_inner),
                Some(deadline) => {
                    let now = Instant::now();
                    if now >= deadline {
                        return true;
                    }
                    self.wake
                        .wait_timeout(c, deadline - now)
                        .unwrap_or_else(PoisonError::into_inner)
                        .0
                }
            };
        }
    }
}

/// The handle of a running scrub.
/// Where the scrub reports damage, and learns that writing has stopped anyway: the
/// writer's queue (`writer/queue.rs`), whose poison refuses every later append.
pub(crate) trait Poison: Send + Sync {
    /// Whether appends are already refused (a failed commit, damage found before).
    fn is_poisoned(&self) -> bool;
    /// Refuses every later append for the damage `detail` describes.
    fn mark_damaged(&self, detail: String);
}

pub(crate) struct Scrub {
    shared: Arc<Shared>,
    handle: Mutex<Option<JoinHandle<()>>>,
}

impl Scrub {
    /// Starts the scrub thread: a first pass at once, then one every `interval`, each
    /// reading at most `pace` entries a second (0: unpaced).
    pub(crate) fn start(
        db: Arc<Database>,
        queue: Arc<dyn Poison>,
        interval: Duration,
        pace: u64,
    ) -> std::io::Result<Self> {
        let shared = Arc::new(Shared {
            control: Mutex::new(Control {
                stop: false,
                exited: false,
                status: ScrubStatus {
                    state: ScrubState::Scrubbing,
                    clean_passes: 0,
                    entries: 0,
                },
            }),
            wake: Condvar::new(),
        });
        let handle = {
            let shared = Arc::clone(&shared);
            std::thread::Builder::new()
                .name("notify-journal-scrub".into())
                .spawn(move || {
                    let _exit = Exit(Arc::clone(&shared));
                    run(&shared, &db, &*queue, interval, pace);
                })?
        };
        Ok(Self {
            shared,
            handle: Mutex::new(Some(handle)),
        })
    }

    pub(crate) fn status(&self) -> ScrubStatus {
        self.shared.lock().status.clone()
    }

    /// Stops the scrub and waits for it, at most [`STOP_BOUND`] (it stops within one
    /// step's reads, so the bound is only a guard against a storage engine stuck in a
    /// read). Idempotent.
    pub(crate) fn stop(&self) {
        let mut c = self.shared.lock();
        c.stop = true;
        self.shared.wake.notify_all();
        let deadline = Instant::now() + STOP_BOUND;
        while !c.exited {
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            c = self
                .shared
                .wake
                .wait_timeout(c, deadline - now)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        let exited = c.exited;
        drop(c);
        let handle = self
            .handle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        match handle {
            Some(h) if exited => {
                let _ = h.join();
            }
            Some(_) => tracing::error!(
                "the journal's scrub did not stop within {STOP_BOUND:?}; left running until its read ends"
            ),
            None => {}
        }
    }
}

/// Marks the thread's end, however it ends (a panic included).
struct Exit(Arc<Shared>);

impl Drop for Exit {
    fn drop(&mut self) {
        let mut c = self.0.lock();
        c.exited = true;
        if matches!(
            c.status.state,
            ScrubState::Scrubbing | ScrubState::Waiting | ScrubState::Retrying { .. }
        ) {
            c.status.state = if c.stop {
                ScrubState::Stopped
            } else {
                ScrubState::Failed("the scrub thread ended unexpectedly".to_owned())
            };
        }
        self.0.wake.notify_all();
    }
}

fn run(shared: &Shared, db: &Database, queue: &dyn Poison, interval: Duration, pace: u64) {
    let mut failures = 0u32;
    loop {
        if queue.is_poisoned() {
            // Poisoned by the writer (a failed commit, damage it found): nothing to add.
            shared.lock().status.state =
                ScrubState::Failed("stopped: the journal is poisoned".to_owned());
            return;
        }
        {
            let mut c = shared.lock();
            c.status.state = ScrubState::Scrubbing;
            c.status.entries = 0;
        }
        let started = Instant::now();
        let mut entries = 0u64;
        let mut keep_pace = || {
            entries += 1;
            if !entries.is_multiple_of(STEP) {
                return true;
            }
            shared.lock().status.entries = entries;
            shared.sleep(ahead(entries, pace, started))
        };
        let found = contain(|| verify::logical_paced(db, SCRUB_PROBLEMS, &mut keep_pace));
        let detail = match found {
            // A panic of the storage engine: a damaged page it trusts.
            Err(panic) => Some(format!(
                "the scrub could not read the file: {}",
                panic.storage("scrubbing")
            )),
            Ok(Err(JournalError::Closed)) => return,
            Ok(Ok(report)) if report.is_clean() => None,
            Ok(Ok(report)) => Some(format!("the scrub found: {report}")),
            Ok(Err(JournalError::Storage(e))) if failures + 1 < RETRIES => {
                failures += 1;
                tracing::warn!(error = %e, failures, "journal scrub pass failed; retrying");
                {
                    let mut c = shared.lock();
                    c.status.entries = entries;
                    c.status.state = ScrubState::Retrying {
                        error: e.to_string(),
                        failures,
                    };
                }
                if !shared.sleep(RETRY_AFTER.min(interval)) {
                    return;
                }
                continue;
            }
            Ok(Err(e)) => Some(format!("the scrub could not read the file: {e}")),
        };
        failures = 0;
        match detail {
            None => {
                metrics::counter!(SCRUB_PASSES, "backend" => crate::metrics::REDB, "outcome" => "clean")
                    .increment(1);
                let mut c = shared.lock();
                c.status.clean_passes += 1;
                c.status.entries = entries;
                c.status.state = ScrubState::Waiting;
            }
            Some(detail) => {
                metrics::counter!(SCRUB_PASSES, "backend" => crate::metrics::REDB, "outcome" => "damaged")
                    .increment(1);
                tracing::error!(%detail, "journal scrub found damage; appends are refused");
                queue.mark_damaged(detail.clone());
                let mut c = shared.lock();
                c.status.entries = entries;
                c.status.state = ScrubState::Damaged(detail);
                return;
            }
        }
        // The pass's last partial step keeps the pace too, and a pass costs at least one
        // step: passes over a small journal, back to back, stay within the pace.
        let owed = ahead(entries.max(STEP), pace, started);
        if !shared.sleep(owed.saturating_add(interval)) {
            return;
        }
    }
}

/// How far a pass that has read `entries` since `started` is ahead of `pace` entries a
/// second: how long it sleeps to keep it (unpaced, 0: never ahead).
fn ahead(entries: u64, pace: u64, started: Instant) -> Duration {
    entries
        .saturating_mul(1_000_000)
        .checked_div(pace)
        .map_or(Duration::ZERO, |us| {
            Duration::from_micros(us).saturating_sub(started.elapsed())
        })
}
