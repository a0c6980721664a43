//! The single writer: one std thread drains concurrent appends (across sessions) into
//! one redb write transaction and one commit.
//!
//! Adaptive batching: after a commit, the appenders it acknowledged usually come right
//! back. Committing at once would catch only those that queued during the commit, and
//! the population would settle into two halves taking turns. So, like PostgreSQL's
//! `commit_delay`/`commit_siblings`, the writer lingers briefly for the recently active
//! appenders to rejoin, but only when at least `commit_siblings` are active; a lone
//! append commits at once. While it lingers it is already building the transaction:
//! each append is resolved as soon as it is taken from the queue.
//!
//! The writer keeps each written session's head (last seq) and the log's next position
//! in memory, so a new frame costs no read beyond the session-row and index lookups
//! (`resolve.rs`; see `docs/design.md`).
//!
//! Purge steps and tombstone drops (`purge.rs`) are chores queued beside the appends:
//! the writer runs at most one, alone in its own write transaction, between two
//! batches, so an append waits for at most one step. A drop of more tombstones than
//! one step (`JournalOptions::drop_step`) is requeued after each step, behind the
//! other chores.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use redb::Database;
use tokio::sync::oneshot;

use super::census::Census;
use super::format::{KEYS, LOG, POSITIONS, SESSIONS};
use super::options::{Durability, JournalOptions};
use super::purge::{self, Chore, ChoreFailure};
use super::resolve::Tables;
use crate::backend::AppendOutcome;
use crate::error::{AppendError, JournalError, StorageError};
use crate::stats::CommitStats;

/// What an appender is told.
pub(crate) type Reply = Result<AppendOutcome, AppendError>;

/// One queued append.
pub(crate) struct Request {
    pub(crate) session: u128,
    pub(crate) key: u128,
    /// The record's frame body (`body.rs`): what the duplicate check compares.
    pub(crate) body: Vec<u8>,
    /// Whether the record is the session's end marker (its commit ends the session).
    pub(crate) ends: bool,
    pub(crate) reply: oneshot::Sender<Reply>,
}

/// An atomic group of appends to one session ([`JournalBackend::append_all`]):
/// resolved inside a batch like any append, and undone within it if one of its
/// records is refused (`resolve.rs`), so it commits whole or not at all.
///
/// [`JournalBackend::append_all`]: crate::JournalBackend::append_all
pub(crate) struct Group {
    pub(crate) session: u128,
    /// In order; each answered through its own `reply`, all alike when refused.
    pub(crate) requests: Vec<Request>,
    /// The head the group expects to find (its first new frame at `if_head + 1`).
    pub(crate) if_head: Option<u64>,
}

/// One entry of the queue: an append, or an atomic group, never split across batches.
pub(crate) enum Queued {
    One(Request),
    Group(Group),
}

impl Queued {
    /// Its requests, in order (for answering them).
    fn into_requests(self) -> impl Iterator<Item = Request> {
        let (one, group) = match self {
            Self::One(req) => (Some(req), Vec::new()),
            Self::Group(g) => (None, g.requests),
        };
        one.into_iter().chain(group)
    }

    /// Answers every request with `error`.
    fn refuse(self, error: &AppendError) {
        for req in self.into_requests() {
            // A vanished appender (dropped future) is a normal event.
            let _ = req.reply.send(Err(error.clone()));
        }
    }
}

struct QueueState {
    items: VecDeque<Queued>,
    /// Purge steps and tombstone drops, each run alone in its own transaction between
    /// batches (so an append waits for at most one).
    chores: VecDeque<Chore>,
    /// Set by `close`: no new requests; the writer drains what is queued and exits.
    closed: bool,
    /// An appender wakes the writer only when the queue reaches this length: 1 while
    /// the writer is idle, what is missing of the linger target while it lingers,
    /// `usize::MAX` while it works (it looks at the queue again afterwards anyway).
    wake_at: usize,
}

/// The queue between appenders and the writer.
pub(crate) struct Queue {
    state: Mutex<QueueState>,
    ready: Condvar,
    /// `state.items.len()`, readable without the lock (the writer spins on it).
    pending: AtomicUsize,
    /// Set with `state.closed`, readable without the lock.
    closing: AtomicBool,
    /// Set after a failed commit; every later append is refused with `Poisoned`.
    poisoned: AtomicBool,
    /// What the background scrub found damaged (`scrub.rs`); set with `poisoned`.
    damage: std::sync::OnceLock<String>,
    /// Successful commits, for [`CommitStats`].
    commits: AtomicU64,
    /// Appends answered by successful commits, for [`CommitStats`].
    committed_appends: AtomicU64,
    /// Times the writer slept and an appender had to wake it, for [`CommitStats`].
    wakeups: AtomicU64,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding this lock cannot leave the queue half-updated (every
    // critical section is a push, a drain or a flag store), so its data stays usable.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Queue {
    pub(crate) fn new() -> Self {
        Self {
            state: Mutex::new(QueueState {
                items: VecDeque::new(),
                chores: VecDeque::new(),
                closed: false,
                wake_at: 1,
            }),
            ready: Condvar::new(),
            pending: AtomicUsize::new(0),
            closing: AtomicBool::new(false),
            poisoned: AtomicBool::new(false),
            damage: std::sync::OnceLock::new(),
            commits: AtomicU64::new(0),
            committed_appends: AtomicU64::new(0),
            wakeups: AtomicU64::new(0),
        }
    }

    pub(crate) fn stats(&self) -> CommitStats {
        CommitStats {
            commits: self.commits.load(Ordering::Relaxed),
            appends: self.committed_appends.load(Ordering::Relaxed),
            writer_wakeups: self.wakeups.load(Ordering::Relaxed),
        }
    }

    fn len(&self) -> usize {
        self.pending.load(Ordering::Acquire)
    }

    pub(crate) fn is_poisoned(&self) -> bool {
        self.poisoned.load(Ordering::Acquire)
    }

    /// Poisons the handle for damage the scrub found: every later append is refused
    /// with [`AppendError::Damaged`].
    pub(crate) fn mark_damaged(&self, detail: String) {
        let _ = self.damage.set(detail);
        self.poisoned.store(true, Ordering::Release);
        self.ready.notify_all();
    }

    /// What a poisoned handle answers an append.
    fn refusal(&self) -> AppendError {
        match self.damage.get() {
            Some(detail) => AppendError::Damaged {
                detail: detail.clone(),
            },
            None => AppendError::Poisoned,
        }
    }

    /// Queues a request or a group; refuses it if the journal is closed or poisoned.
    pub(crate) fn submit(&self, request: Queued) -> Result<(), AppendError> {
        let mut st = lock(&self.state);
        if st.closed {
            return Err(AppendError::Closed);
        }
        if self.is_poisoned() {
            return Err(self.refusal());
        }
        st.items.push_back(request);
        self.pending.store(st.items.len(), Ordering::Release);
        if st.items.len() >= st.wake_at {
            self.ready.notify_one();
        }
        Ok(())
    }

    /// Queues a chore; refuses it if the journal is closed or poisoned.
    pub(crate) fn submit_chore(&self, chore: Chore) {
        let mut st = lock(&self.state);
        if st.closed {
            drop(st);
            return chore.refuse(JournalError::Closed);
        }
        if self.is_poisoned() {
            drop(st);
            return chore.refuse(poisoned());
        }
        st.chores.push_back(chore);
        // Whatever the writer waits for (appends to linger for, or work at all), a
        // chore ends the wait: a lingering batch commits and the chore runs next.
        self.ready.notify_one();
    }

    /// Queues the rest of a chore the writer ran one step of, behind the chores
    /// queued meanwhile; hands it back once the journal is closing or poisoned.
    fn requeue_chore(&self, chore: Chore) -> Result<(), Chore> {
        let mut st = lock(&self.state);
        if st.closed || self.is_poisoned() {
            return Err(chore);
        }
        st.chores.push_back(chore);
        Ok(())
    }

    /// The next queued chore, if any.
    fn take_chore(&self) -> Option<Chore> {
        lock(&self.state).chores.pop_front()
    }

    /// Stops accepting requests and wakes the writer so it can drain and exit.
    pub(crate) fn close(&self) {
        let mut st = lock(&self.state);
        st.closed = true;
        self.closing.store(true, Ordering::Release);
        self.ready.notify_all();
    }

    /// Waits until at least one request is queued; `false` once closed and drained.
    ///
    /// Right after a commit the appenders it answered are about to come back, so the
    /// writer first spins briefly (yielding the core) before it sleeps: waking a sleeping
    /// thread costs more than the spin, on every single append of a lone appender.
    ///
    /// How long it spins adapts to how long the answered appenders take to come back
    /// (twice the recent mean, within [`SPIN_MIN`]..=[`SPIN_MAX`]), so a lone appender
    /// whose round trip is slower than a fixed spin does not pay a wake-up per append.
    fn wait_for_work(&self, tuning: &mut Tuning) -> bool {
        let idle_since = Instant::now();
        if tuning.last_batch > 0 {
            let budget = (tuning.return_ewma * 2).clamp(SPIN_MIN, SPIN_MAX);
            while self.pending.load(Ordering::Acquire) == 0
                && !self.closing.load(Ordering::Acquire)
                && idle_since.elapsed() < budget
            {
                std::thread::yield_now();
            }
        }
        let mut st = lock(&self.state);
        let mut slept = false;
        while st.items.is_empty() && st.chores.is_empty() {
            if st.closed {
                return false;
            }
            st.wake_at = 1;
            slept = true;
            st = self.ready.wait(st).unwrap_or_else(PoisonError::into_inner);
        }
        st.wake_at = usize::MAX;
        drop(st);
        let idle = idle_since.elapsed();
        if slept {
            self.wakeups.fetch_add(1, Ordering::Relaxed);
        }
        if tuning.last_batch > 0 && idle < RETURN_SAMPLE_MAX {
            tuning.observe_return(idle);
        }
        if idle > tuning.linger_budget().max(tuning.gap()) {
            // Idle for longer than appenders take to rejoin: the last batch's appenders
            // are gone, so this append is a lone one and commits at once.
            tuning.last_batch = 0;
            tuning.arrived_during_commit = 0;
        }
        true
    }

    /// Moves up to `max - out.len()` queued requests into `out`.
    fn take(&self, out: &mut Vec<Queued>, max: usize) {
        let mut st = lock(&self.state);
        self.take_locked(&mut st, out, max);
    }

    fn take_locked(&self, st: &mut QueueState, out: &mut Vec<Queued>, max: usize) {
        st.wake_at = usize::MAX;
        let n = st.items.len().min(max.saturating_sub(out.len()));
        out.extend(st.items.drain(..n));
        self.pending.store(st.items.len(), Ordering::Release);
    }

    /// Lingers for more of the batch: takes whatever is queued at once, else waits up
    /// to `gap` (and never past `deadline`) for arrivals. `false`: stop lingering
    /// (closed, past the deadline, or arrivals paused for a `gap`).
    fn linger(
        &self,
        out: &mut Vec<Queued>,
        target: usize,
        max: usize,
        deadline: Instant,
        gap: Duration,
    ) -> bool {
        let mut st = lock(&self.state);
        if st.items.is_empty() && st.chores.is_empty() && !st.closed {
            let left = deadline
                .checked_duration_since(Instant::now())
                .unwrap_or(Duration::ZERO);
            if !left.is_zero() {
                // Woken only once the rest of the target is queued; else at the timeout.
                st.wake_at = target.saturating_sub(out.len()).max(1);
                st = self
                    .ready
                    .wait_timeout(st, left.min(gap))
                    .unwrap_or_else(PoisonError::into_inner)
                    .0;
            }
        }
        if st.items.is_empty() {
            st.wake_at = usize::MAX;
            return false;
        }
        self.take_locked(&mut st, out, max);
        !st.closed && st.chores.is_empty() && Instant::now() < deadline
    }
}

/// The shortest the writer spins for returning appenders before it sleeps.
const SPIN_MIN: Duration = Duration::from_micros(50);
/// The longest it spins (bounds the CPU a vanished appender costs after a commit).
const SPIN_MAX: Duration = Duration::from_micros(400);
/// A return slower than this is an idle spell, not a round trip: it is not averaged.
const RETURN_SAMPLE_MAX: Duration = Duration::from_millis(2);

/// The most session heads the writer keeps in memory (it forgets them all, to reload
/// lazily from the positions table, when a new session would exceed this).
pub(super) const HEADS_CACHE_MAX: usize = 1 << 16;

/// The writer's batching state.
struct Tuning {
    max_batch: usize,
    commit_siblings: usize,
    max_commit_delay: Duration,
    last_batch: usize,
    /// Requests queued while the last batch was committing (none of them in it).
    arrived_during_commit: usize,
    /// Exponentially weighted mean commit time.
    commit_ewma: Duration,
    /// Exponentially weighted mean time from answering a batch to the next append.
    return_ewma: Duration,
}

impl Tuning {
    fn linger_budget(&self) -> Duration {
        self.max_commit_delay.min(self.commit_ewma / 2)
    }

    /// The pause in arrivals after which lingering stops.
    fn gap(&self) -> Duration {
        (self.linger_budget() / 8).max(Duration::from_micros(20))
    }

    /// How many appenders the next batch should wait for: the recently active ones,
    /// those the last commit answered (they tend to come straight back) plus those
    /// that queued while it ran (not in it). Zero: do not linger.
    fn linger_target(&self) -> usize {
        let target = (self.last_batch + self.arrived_during_commit).min(self.max_batch);
        if target >= self.commit_siblings && !self.linger_budget().is_zero() {
            target
        } else {
            0
        }
    }

    fn observe_return(&mut self, took: Duration) {
        self.return_ewma = if self.return_ewma.is_zero() {
            took
        } else {
            (self.return_ewma * 7 + took) / 8
        };
    }

    fn observe_commit(&mut self, took: Duration) {
        self.commit_ewma = if self.commit_ewma.is_zero() {
            took
        } else {
            (self.commit_ewma * 7 + took) / 8
        };
    }
}

/// The writer thread's state.
struct Writer {
    db: Arc<Database>,
    queue: Arc<Queue>,
    options: JournalOptions,
    tuning: Tuning,
    /// The batch being written, in queue order.
    batch: Vec<Queued>,
    /// One per request of `batch`, in order (a group's requests one by one).
    replies: Vec<Reply>,
    /// Committed last seq of recently written sessions: the single writer is the only
    /// one that moves a head, so after the first read of a session its head is known.
    heads: HashMap<u128, u64>,
    /// Heads moved by the batch being written; merged into `heads` once it commits.
    staged: HashMap<u128, u64>,
    /// The log's next free position once known (read from the log's last entry on the
    /// first batch); moves only when a batch commits.
    next_pos: Option<u64>,
    /// The frame being built (reused).
    frame: Vec<u8>,
    /// The key census confirming index misses (`None`: `confirm_misses` off).
    census: Option<Arc<Census>>,
    /// Committed heads, before the batch, of the sessions it appended to.
    base: HashMap<u128, u64>,
    /// The frames the batch wrote, counted by the census once it commits.
    fresh: Vec<(u128, u64, u128)>,
    /// Set once the batch's commit has started: a panic from then on leaves the
    /// batch's outcome unknown (`CommitFailed`), not "nothing written".
    committing: bool,
}

/// Runs the writer until the queue is closed and drained.
pub(crate) fn run(
    db: Arc<Database>,
    queue: Arc<Queue>,
    options: JournalOptions,
    census: Option<Arc<Census>>,
) {
    let _exit = ExitGuard(Arc::clone(&queue));
    let tuning = Tuning {
        max_batch: options.max_batch,
        commit_siblings: options.commit_siblings,
        max_commit_delay: options.max_commit_delay,
        last_batch: 0,
        arrived_during_commit: 0,
        commit_ewma: Duration::ZERO,
        return_ewma: Duration::ZERO,
    };
    let mut w = Writer {
        db,
        queue,
        batch: Vec::with_capacity(options.max_batch),
        replies: Vec::with_capacity(options.max_batch),
        options,
        tuning,
        heads: HashMap::new(),
        staged: HashMap::new(),
        next_pos: None,
        frame: Vec::new(),
        census,
        base: HashMap::new(),
        fresh: Vec::new(),
        committing: false,
    };
    let mut dirty_non_durable = false;
    // Writer time owed to appends since the last chore: while appends wait, a chore runs
    // only once the batches after the previous one have taken as long as it did, so a
    // purge under a full append load gets about half the writer, not all of it.
    let mut owed = std::time::Duration::ZERO;
    while w.queue.wait_for_work(&mut w.tuning) {
        if w.queue.is_poisoned() {
            w.queue.take(&mut w.batch, w.tuning.max_batch);
            let refusal = w.queue.refusal();
            for queued in w.batch.drain(..) {
                queued.refuse(&refusal);
            }
            while let Some(chore) = w.queue.take_chore() {
                chore.refuse(poisoned());
            }
            continue;
        }
        // At most one chore between two batches: an append waits for one step at most.
        if (owed.is_zero() || w.queue.len() == 0)
            && let Some(chore) = w.queue.take_chore()
        {
            let started = std::time::Instant::now();
            dirty_non_durable |= w.run_chore(chore);
            owed = started.elapsed();
            if w.queue.len() == 0 || w.queue.is_poisoned() {
                continue;
            }
        }
        let batch_started = std::time::Instant::now();
        let span = tracing::debug_span!("journal.commit", batch = tracing::field::Empty);
        let _entered = span.enter();
        // A panic inside the storage engine (a damaged page it trusts) must not escape:
        // the batch fails, the handle is poisoned like after a failed commit, and every
        // appender gets a typed error.
        w.committing = false;
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| w.write_batch()))
            .unwrap_or_else(|panic| {
                let e = StorageError::msg(format!(
                    "the storage engine panicked while writing ({}); the file may be damaged: verify it",
                    panic_message(panic.as_ref())
                ));
                // A panic inside the commit leaves its outcome unknown.
                Err(if w.committing {
                    BatchFailure::Commit(e)
                } else {
                    BatchFailure::BeforeCommit(e)
                })
            });
        owed = owed.saturating_sub(batch_started.elapsed());
        span.record("batch", w.batch.len());
        w.tuning.last_batch = w.batch.len();
        w.tuning.arrived_during_commit = w.queue.len();
        w.staged.clear();
        w.base.clear();
        match result {
            Ok(()) => {
                dirty_non_durable |= w.options.durability == Durability::NonDurableForTestsOnly;
                w.queue.commits.fetch_add(1, Ordering::Relaxed);
                w.queue
                    .committed_appends
                    .fetch_add(w.replies.len() as u64, Ordering::Relaxed);
                let requests = w.batch.drain(..).flat_map(Queued::into_requests);
                for (req, reply) in requests.zip(w.replies.drain(..)) {
                    let _ = req.reply.send(reply);
                }
            }
            Err(failure) => {
                // The handle may be broken (fsyncgate): never write through it again.
                w.queue.poisoned.store(true, Ordering::Release);
                crate::metrics::commit_failed(crate::metrics::REDB);
                tracing::error!(error = %failure.error(), "journal commit failed; journal poisoned");
                w.replies.clear();
                let error = failure.into_append_error();
                for queued in w.batch.drain(..) {
                    queued.refuse(&error);
                }
            }
        }
    }
    if dirty_non_durable && !w.queue.is_poisoned() {
        // A clean close makes the non-durable commits durable.
        if let Err(e) = flush_durable(&w.db) {
            tracing::error!(error = %e, "final durable commit on close failed");
        }
    }
}

/// The message of a caught panic.
pub(crate) fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "no message".to_owned()
    }
}

/// However the writer ends (even by a panic inside the storage engine), the queue is
/// closed and every request still in it is answered, so no appender waits forever.
struct ExitGuard(Arc<Queue>);

impl Drop for ExitGuard {
    fn drop(&mut self) {
        let mut st = lock(&self.0.state);
        st.closed = true;
        for queued in st.items.drain(..) {
            queued.refuse(&AppendError::Closed);
        }
        for chore in st.chores.drain(..) {
            chore.refuse(JournalError::Closed);
        }
    }
}

/// Why a whole batch failed.
#[derive(Clone)]
pub(super) enum BatchFailure {
    /// Before the commit: the transaction was dropped, nothing written.
    BeforeCommit(StorageError),
    /// The commit itself failed: outcome unknown.
    Commit(StorageError),
}

impl BatchFailure {
    fn error(&self) -> &StorageError {
        match self {
            Self::BeforeCommit(e) | Self::Commit(e) => e,
        }
    }

    fn into_append_error(self) -> AppendError {
        match self {
            Self::BeforeCommit(e) => AppendError::Storage(e),
            Self::Commit(e) => AppendError::CommitFailed(e),
        }
    }
}

pub(super) fn before<E>(context: &'static str) -> impl Fn(E) -> BatchFailure
where
    E: std::error::Error + Send + Sync + 'static,
{
    move |e| BatchFailure::BeforeCommit(StorageError::new(context, e))
}

/// What a chore is told once the handle is poisoned.
fn poisoned() -> JournalError {
    JournalError::Storage(StorageError::msg(
        "journal is poisoned by an earlier commit failure; reopen it",
    ))
}

fn flush_durable(db: &Database) -> Result<(), StorageError> {
    let mut txn = db
        .begin_write()
        .map_err(|e| StorageError::new("begin final write", e))?;
    txn.set_durability(redb::Durability::Immediate)
        .map_err(|e| StorageError::new("set durability", e))?;
    txn.commit()
        .map_err(|e| StorageError::new("final durable commit", e))
}

impl Writer {
    /// Writes one batch in one write transaction and commits it. Takes what is queued,
    /// then, while lingering, whatever arrives: each request is resolved as soon as it
    /// is taken, so the transaction is built while the rest of the batch gathers.
    /// Requests are resolved in queue order against the transaction's own view, so two
    /// appends of the same new key in one batch resolve exactly as if sequential.
    ///
    /// On success `replies` answers `batch` and the staged heads are committed; on
    /// failure every request in `batch` gets the error.
    fn write_batch(&mut self) -> Result<(), BatchFailure> {
        let max = self.tuning.max_batch;
        self.fresh.clear();
        self.queue.take(&mut self.batch, max);
        let target = self.tuning.linger_target();
        let deadline = Instant::now() + self.tuning.linger_budget();
        let gap = self.tuning.gap();

        let mut txn = self.db.begin_write().map_err(|e| {
            BatchFailure::BeforeCommit(StorageError::new("begin write transaction", e))
        })?;
        let durability = match self.options.durability {
            Durability::Immediate => redb::Durability::Immediate,
            Durability::NonDurableForTestsOnly => redb::Durability::None,
        };
        txn.set_durability(durability)
            .map_err(|e| BatchFailure::BeforeCommit(StorageError::new("set durability", e)))?;
        txn.set_quick_repair(self.options.quick_repair);
        let staged_pos;
        {
            let table_err = |e: redb::TableError| {
                BatchFailure::BeforeCommit(StorageError::new("open journal table", e))
            };
            let mut tables = Tables {
                log: txn.open_table(LOG).map_err(table_err)?,
                positions: txn.open_table(POSITIONS).map_err(table_err)?,
                keys: txn.open_table(KEYS).map_err(table_err)?,
                sessions: txn.open_table(SESSIONS).map_err(table_err)?,
                retention: None,
                txn: &txn,
                frame: &mut self.frame,
                census: self.census.as_deref(),
                base: &mut self.base,
                fresh: &mut self.fresh,
            };
            let mut next_pos = match self.next_pos {
                Some(p) => p,
                None => tables.next_position()?,
            };
            let mut resolved = 0;
            loop {
                for queued in &self.batch[resolved..] {
                    tables.resolve_queued(
                        queued,
                        &mut next_pos,
                        &mut self.staged,
                        &mut self.heads,
                        &mut self.replies,
                    )?;
                }
                resolved = self.batch.len();
                if resolved >= target
                    || resolved >= max
                    || !self
                        .queue
                        .linger(&mut self.batch, target, max, deadline, gap)
                {
                    break;
                }
            }
            // Whatever `linger` took last is resolved too.
            for queued in &self.batch[resolved..] {
                tables.resolve_queued(
                    queued,
                    &mut next_pos,
                    &mut self.staged,
                    &mut self.heads,
                    &mut self.replies,
                )?;
            }
            staged_pos = next_pos;
        }
        let started = Instant::now();
        self.committing = true;
        txn.commit()
            .map_err(|e| BatchFailure::Commit(StorageError::new("commit", e)))?;
        self.tuning.observe_commit(started.elapsed());
        crate::metrics::committed(crate::metrics::REDB, self.replies.len(), started.elapsed());
        self.next_pos = Some(staged_pos);
        if self.heads.len() + self.staged.len() > HEADS_CACHE_MAX {
            self.heads.clear();
        }
        self.heads.extend(self.staged.iter().map(|(s, q)| (*s, *q)));
        if let Some(census) = &self.census {
            census.record(&self.fresh);
        }
        Ok(())
    }
}

impl Writer {
    /// Runs one chore in its own write transaction and answers it. A storage failure
    /// poisons the handle like a failed batch; damage found is answered and writes
    /// nothing. Returns whether it committed without a sync.
    fn run_chore(&mut self, chore: Chore) -> bool {
        match chore {
            Chore::Purge {
                ended_before,
                max_frames,
                reply,
            } => {
                let started = Instant::now();
                let result = self.chore_txn(|txn| {
                    let step = purge::step(txn, ended_before, max_frames)?;
                    Ok((step.session.is_some(), step))
                });
                if let Ok((true, step)) = &result {
                    crate::metrics::purge_step(
                        crate::metrics::REDB,
                        u64::from(step.finished),
                        step.frames_removed,
                        started.elapsed(),
                    );
                }
                if let Ok((_, step)) = &result
                    && let Some(s) = step.session
                {
                    // Its appends are refused from now on; forget its head and keys.
                    self.heads.remove(&s.as_uuid().as_u128());
                    if let Some(census) = &self.census {
                        census.forget(s.as_uuid().as_u128());
                    }
                }
                let committed = matches!(result, Ok((true, _)));
                let _ = reply.send(result.map(|(_, step)| step));
                committed && self.options.durability == Durability::NonDurableForTestsOnly
            }
            Chore::DropTombstones {
                purged_before,
                limit,
                dropped,
                reply,
            } => {
                let step = limit.min(self.options.drop_step);
                let started = Instant::now();
                let result = self.chore_txn(|txn| {
                    let n = purge::drop_tombstones(txn, purged_before, step)?;
                    Ok((n > 0, n))
                });
                if let Ok((true, n)) = &result {
                    crate::metrics::drop_step(crate::metrics::REDB, *n, started.elapsed());
                }
                if matches!(result, Ok((true, _))) {
                    // A dropped session is unknown again: its next append starts a new
                    // log, so no remembered head or key may outlive its tombstone.
                    self.heads.clear();
                    if let Some(census) = &self.census {
                        census.tombstones_dropped();
                    }
                }
                let committed = matches!(result, Ok((true, _)));
                match result {
                    // A full step, and the caller wants more: the rest is a chore of
                    // its own, behind whatever else is queued, so the appends waiting
                    // now commit before it. A journal closing meanwhile stops the drop
                    // there: the answer is what was dropped.
                    Ok((_, n)) if n == step as u64 && limit > step => {
                        let rest = Chore::DropTombstones {
                            purged_before,
                            limit: limit - step,
                            dropped: dropped + n,
                            reply,
                        };
                        match self.queue.requeue_chore(rest) {
                            Ok(()) => {}
                            Err(Chore::DropTombstones { dropped, reply, .. }) => {
                                let _ = reply.send(Ok(dropped));
                            }
                            Err(other) => other.refuse(JournalError::Closed),
                        }
                    }
                    Ok((_, n)) => {
                        let _ = reply.send(Ok(dropped + n));
                    }
                    Err(e) => {
                        let _ = reply.send(Err(e));
                    }
                }
                committed && self.options.durability == Durability::NonDurableForTestsOnly
            }
            Chore::ImportStates { states, reply } => {
                let result = self.chore_txn(|txn| {
                    Ok(match super::import::import_states(txn, &states)? {
                        Ok(wrote) => (wrote, Ok(())),
                        Err(refused) => (false, Err(refused)),
                    })
                });
                let committed = matches!(result, Ok((true, _)));
                let _ = reply.send(match result {
                    Ok((_, answer)) => answer,
                    Err(e) => Err(e.into()),
                });
                committed && self.options.durability == Durability::NonDurableForTestsOnly
            }
        }
    }

    /// Runs `f` in a write transaction with the journal's durability; commits when `f`
    /// says so (`Ok((true, _))`), else drops the transaction. A panic of the storage
    /// engine is contained.
    fn chore_txn<T>(
        &mut self,
        f: impl FnOnce(&redb::WriteTransaction) -> Result<(bool, T), ChoreFailure>,
    ) -> Result<(bool, T), JournalError> {
        self.committing = false;
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let mut txn = self.db.begin_write().map_err(|e| {
                BatchFailure::BeforeCommit(StorageError::new("begin write transaction", e))
            })?;
            txn.set_durability(match self.options.durability {
                Durability::Immediate => redb::Durability::Immediate,
                Durability::NonDurableForTestsOnly => redb::Durability::None,
            })
            .map_err(before("set durability"))?;
            txn.set_quick_repair(self.options.quick_repair);
            let (commit, out) = match f(&txn) {
                Ok(v) => v,
                Err(ChoreFailure::Damaged(e)) => return Ok(Err(e)),
                Err(ChoreFailure::Storage(e)) => return Err(BatchFailure::BeforeCommit(e)),
            };
            if commit {
                self.committing = true;
                txn.commit()
                    .map_err(|e| BatchFailure::Commit(StorageError::new("commit", e)))?;
            }
            Ok(Ok((commit, out)))
        }))
        .unwrap_or_else(|panic| {
            let e = StorageError::msg(format!(
                "the storage engine panicked while purging ({}); the file may be damaged: verify it",
                panic_message(panic.as_ref())
            ));
            Err(if self.committing {
                BatchFailure::Commit(e)
            } else {
                BatchFailure::BeforeCommit(e)
            })
        });
        match result {
            // Not counted in `CommitStats` (batches only): the purge metrics count steps.
            Ok(answer) => answer,
            Err(failure) => {
                self.queue.poisoned.store(true, Ordering::Release);
                tracing::error!(error = %failure.error(), "journal purge commit failed; journal poisoned");
                Err(JournalError::Storage(match failure {
                    BatchFailure::BeforeCommit(e) => e,
                    BatchFailure::Commit(e) => StorageError::msg(format!(
                        "commit failed, outcome unknown (the step may or may not be durable; it is safe to purge again after reopening): {e}"
                    )),
                }))
            }
        }
    }
}
