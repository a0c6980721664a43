//! The single writer: one std thread drains concurrent appends (across sessions) into
//! one redb write transaction and one commit.
//!
//! Adaptive batching: after a commit, the appenders it acknowledged usually come right
//! back. Committing at once would catch only those that queued during the commit, and
//! the population would settle into two halves taking turns. So, like PostgreSQL's
//! `commit_delay`/`commit_siblings`, the writer lingers briefly for the recently active
//! appenders to rejoin, but only when at least `commit_siblings` are active; a lone
//! append commits at once.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use redb::{Database, ReadableTable};
use tokio::sync::oneshot;

use crate::backend::AppendOutcome;
use crate::error::{AppendError, StorageError};
use crate::options::{Durability, JournalOptions};
use crate::tables::{FRAMES, HEADS, INDEX};

/// What an appender is told.
pub(crate) type Reply = Result<AppendOutcome, AppendError>;

/// One queued append.
pub(crate) struct Request {
    pub(crate) session: u128,
    pub(crate) key: u128,
    pub(crate) bytes: Vec<u8>,
    pub(crate) reply: oneshot::Sender<Reply>,
}

struct QueueState {
    items: VecDeque<Request>,
    /// Set by `close`: no new requests; the writer drains what is queued and exits.
    closed: bool,
    /// An appender wakes the writer only when the queue reaches this length: 1 while
    /// the writer is idle, the linger target while it lingers, `usize::MAX` while it
    /// commits (it looks at the queue again afterwards anyway).
    wake_at: usize,
}

/// The queue between appenders and the writer.
pub(crate) struct Queue {
    state: Mutex<QueueState>,
    ready: Condvar,
    /// Set after a failed commit; every later append is refused with `Poisoned`.
    poisoned: AtomicBool,
    /// Successful commits, for [`CommitStats`].
    commits: AtomicU64,
    /// Appends answered by successful commits, for [`CommitStats`].
    committed_appends: AtomicU64,
}

/// Group-commit counters of a journal handle since it was opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct CommitStats {
    /// Successful write transactions.
    pub commits: u64,
    /// Appends (new, duplicate or collision) answered by those transactions.
    pub appends: u64,
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
                closed: false,
                wake_at: 1,
            }),
            ready: Condvar::new(),
            poisoned: AtomicBool::new(false),
            commits: AtomicU64::new(0),
            committed_appends: AtomicU64::new(0),
        }
    }

    pub(crate) fn stats(&self) -> CommitStats {
        CommitStats {
            commits: self.commits.load(Ordering::Relaxed),
            appends: self.committed_appends.load(Ordering::Relaxed),
        }
    }

    fn len(&self) -> usize {
        lock(&self.state).items.len()
    }

    pub(crate) fn is_poisoned(&self) -> bool {
        self.poisoned.load(Ordering::Acquire)
    }

    /// Queues a request; refuses it if the journal is closed or poisoned.
    pub(crate) fn submit(&self, request: Request) -> Result<(), AppendError> {
        let mut st = lock(&self.state);
        if st.closed {
            return Err(AppendError::Closed);
        }
        if self.is_poisoned() {
            return Err(AppendError::Poisoned);
        }
        st.items.push_back(request);
        if st.items.len() >= st.wake_at {
            self.ready.notify_one();
        }
        Ok(())
    }

    /// Stops accepting requests and wakes the writer so it can drain and exit.
    pub(crate) fn close(&self) {
        let mut st = lock(&self.state);
        st.closed = true;
        self.ready.notify_all();
    }

    /// Waits for a batch; `None` once closed and drained.
    fn next_batch(&self, tuning: &mut Tuning, out: &mut Vec<Request>) -> bool {
        let mut st = lock(&self.state);
        let idle_since = Instant::now();
        while st.items.is_empty() {
            if st.closed {
                return false;
            }
            st.wake_at = 1;
            st = self.ready.wait(st).unwrap_or_else(PoisonError::into_inner);
        }
        let delay = tuning.linger_budget();
        let gap = (delay / 8).max(Duration::from_micros(20));
        if idle_since.elapsed() > gap {
            // Idle for longer than appenders take to rejoin: the last batch's appenders
            // are gone, so this append is a lone one and commits at once.
            tuning.last_batch = 0;
            tuning.arrived_during_commit = 0;
        }
        // Recently active appenders: those the last commit answered (they tend to come
        // straight back) plus those that queued while it ran (not in it).
        let target = (tuning.last_batch + tuning.arrived_during_commit).min(tuning.max_batch);
        if target >= tuning.commit_siblings && st.items.len() < target && !delay.is_zero() {
            // Stop at the target, at the deadline, or as soon as arrivals pause for a
            // `gap`: the rest are not coming soon, and a slow or starved appender must
            // not hold the batch for the whole budget.
            let deadline = Instant::now() + delay;
            st.wake_at = target;
            while st.items.len() < target && !st.closed {
                let Some(left) = deadline
                    .checked_duration_since(Instant::now())
                    .filter(|d| !d.is_zero())
                else {
                    break;
                };
                let before = st.items.len();
                st = self
                    .ready
                    .wait_timeout(st, left.min(gap))
                    .unwrap_or_else(PoisonError::into_inner)
                    .0;
                if st.items.len() == before {
                    break;
                }
            }
        }
        st.wake_at = usize::MAX;
        let n = st.items.len().min(tuning.max_batch);
        out.extend(st.items.drain(..n));
        true
    }
}

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
}

impl Tuning {
    fn linger_budget(&self) -> Duration {
        self.max_commit_delay.min(self.commit_ewma / 2)
    }

    fn observe_commit(&mut self, took: Duration) {
        self.commit_ewma = if self.commit_ewma.is_zero() {
            took
        } else {
            (self.commit_ewma * 7 + took) / 8
        };
    }
}

/// Runs the writer until the queue is closed and drained.
pub(crate) fn run(db: Arc<Database>, queue: Arc<Queue>, options: JournalOptions) {
    let _exit = ExitGuard(Arc::clone(&queue));
    let mut tuning = Tuning {
        max_batch: options.max_batch,
        commit_siblings: options.commit_siblings,
        max_commit_delay: options.max_commit_delay,
        last_batch: 0,
        arrived_during_commit: 0,
        commit_ewma: Duration::ZERO,
    };
    let mut batch = Vec::with_capacity(options.max_batch);
    let mut dirty_non_durable = false;
    while queue.next_batch(&mut tuning, &mut batch) {
        tuning.last_batch = batch.len();
        if queue.is_poisoned() {
            for req in batch.drain(..) {
                // A vanished appender (dropped future) is a normal event.
                let _ = req.reply.send(Err(AppendError::Poisoned));
            }
            continue;
        }
        let span = tracing::debug_span!("journal.commit", batch = batch.len());
        let _entered = span.enter();
        let started = Instant::now();
        let result = write_batch(&db, &batch, &options);
        tuning.arrived_during_commit = queue.len();
        match result {
            Ok(replies) => {
                tuning.observe_commit(started.elapsed());
                dirty_non_durable |= options.durability == Durability::NonDurableForTestsOnly;
                queue.commits.fetch_add(1, Ordering::Relaxed);
                queue
                    .committed_appends
                    .fetch_add(batch.len() as u64, Ordering::Relaxed);
                for (req, reply) in batch.drain(..).zip(replies) {
                    let _ = req.reply.send(reply);
                }
            }
            Err(failure) => {
                // The handle may be broken (fsyncgate): never write through it again.
                queue.poisoned.store(true, Ordering::Release);
                tracing::error!(error = %failure.error(), "journal commit failed; journal poisoned");
                for req in batch.drain(..) {
                    let _ = req.reply.send(Err(failure.clone().into_append_error()));
                }
            }
        }
    }
    if dirty_non_durable && !queue.is_poisoned() {
        // A clean close makes the non-durable commits durable.
        if let Err(e) = flush_durable(&db) {
            tracing::error!(error = %e, "final durable commit on close failed");
        }
    }
}

/// However the writer ends (even by a panic inside the storage engine), the queue is
/// closed and every request still in it is answered, so no appender waits forever.
struct ExitGuard(Arc<Queue>);

impl Drop for ExitGuard {
    fn drop(&mut self) {
        let mut st = lock(&self.0.state);
        st.closed = true;
        for req in st.items.drain(..) {
            let _ = req.reply.send(Err(AppendError::Closed));
        }
    }
}

/// Why a whole batch failed.
#[derive(Clone)]
enum BatchFailure {
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

fn before(context: &'static str) -> impl Fn(redb::StorageError) -> BatchFailure {
    move |e| BatchFailure::BeforeCommit(StorageError::new(context, e))
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

/// Writes one batch in one transaction. Requests are resolved in queue order against
/// the transaction's own view, so two appends of the same new key in one batch resolve
/// exactly as if sequential.
fn write_batch(
    db: &Database,
    batch: &[Request],
    options: &JournalOptions,
) -> Result<Vec<Reply>, BatchFailure> {
    let mut txn = db
        .begin_write()
        .map_err(|e| BatchFailure::BeforeCommit(StorageError::new("begin write transaction", e)))?;
    let durability = match options.durability {
        Durability::Immediate => redb::Durability::Immediate,
        Durability::NonDurableForTestsOnly => redb::Durability::None,
    };
    txn.set_durability(durability)
        .map_err(|e| BatchFailure::BeforeCommit(StorageError::new("set durability", e)))?;
    txn.set_quick_repair(options.quick_repair);
    let mut replies = Vec::with_capacity(batch.len());
    {
        let table_err = |e: redb::TableError| {
            BatchFailure::BeforeCommit(StorageError::new("open journal table", e))
        };
        let mut frames = txn.open_table(FRAMES).map_err(table_err)?;
        let mut index = txn.open_table(INDEX).map_err(table_err)?;
        let mut heads = txn.open_table(HEADS).map_err(table_err)?;
        let mut new_heads: HashMap<u128, u64> = HashMap::new();
        for req in batch {
            let existing = index
                .get((req.session, req.key))
                .map_err(before("read index"))?
                .map(|g| g.value());
            let reply = if let Some(seq) = existing {
                let same = frames
                    .get((req.session, seq))
                    .map_err(before("read frame"))?
                    .map(|g| g.value() == req.bytes.as_slice());
                match same {
                    Some(true) => Ok(AppendOutcome {
                        seq,
                        appended: false,
                    }),
                    Some(false) => Err(AppendError::Collision {
                        key: uuid_of(req.key),
                        seq,
                    }),
                    None => Err(AppendError::Storage(StorageError::msg(format!(
                        "index names seq {seq} of session {} but the frame is missing",
                        uuid_of(req.session)
                    )))),
                }
            } else {
                let head = match new_heads.get(&req.session) {
                    Some(h) => *h,
                    None => heads
                        .get(req.session)
                        .map_err(before("read head"))?
                        .map_or(0, |g| g.value()),
                };
                let Some(seq) = head.checked_add(1) else {
                    return Err(BatchFailure::BeforeCommit(StorageError::msg(
                        "sequence space exhausted",
                    )));
                };
                frames
                    .insert((req.session, seq), req.bytes.as_slice())
                    .map_err(before("write frame"))?;
                index
                    .insert((req.session, req.key), seq)
                    .map_err(before("write index"))?;
                new_heads.insert(req.session, seq);
                Ok(AppendOutcome {
                    seq,
                    appended: true,
                })
            };
            replies.push(reply);
        }
        for (session, seq) in new_heads {
            heads.insert(session, seq).map_err(before("write head"))?;
        }
    }
    txn.commit()
        .map_err(|e| BatchFailure::Commit(StorageError::new("commit", e)))?;
    Ok(replies)
}

fn uuid_of(v: u128) -> notify_types::Uuid {
    notify_types::Uuid::from_u128(v)
}
