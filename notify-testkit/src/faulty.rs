//! A fault-injecting wrapper around any [`JournalBackend`].

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use notify_journal::layer::{JournalLayer, JournalReadLayer};
use notify_journal::{
    AppendError, AppendOutcome, BoxFuture, JournalBackend, JournalError, SeqRecord, SessionState,
    StorageError,
};
use notify_types::{JournalRecord, SessionId, Uuid};

/// What an injected append fault does.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum AppendFault {
    /// Fail with this error without reaching the inner backend: nothing is written.
    Error(AppendError),
    /// Forward the append to the inner backend, then report
    /// [`AppendError::CommitFailed`] although it succeeded: the commit whose outcome is
    /// "persisted but reported failed". (If the inner backend itself fails, its error is
    /// returned unchanged.)
    PersistedButFailed,
    /// Forward the append to the inner backend, then answer an atomic group with its
    /// last record's outcome left out: a journal breaking `append_all`'s contract (one
    /// outcome per record). A single `append` is forwarded unchanged.
    ShortAnswer,
}

impl AppendFault {
    /// A commit failure that did *not* persist: [`AppendError::CommitFailed`], nothing
    /// written.
    #[must_use]
    pub fn commit_failed() -> Self {
        Self::Error(AppendError::CommitFailed(StorageError::msg(
            "injected commit failure (not persisted)",
        )))
    }
}

/// Call counters of a [`FaultyJournal`], as a snapshot.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct FaultStats {
    /// `append` and `append_all` calls (each call is numbered from 1 in call order;
    /// an atomic group is one call).
    pub appends: u64,
    /// Appends that reached the inner backend.
    pub appends_forwarded: u64,
    /// New frames written in the inner backend (including those of appends and groups
    /// then reported failed by [`AppendFault::PersistedButFailed`]).
    pub frames_appended: u64,
    /// Appends that met an injected fault (including refusals while poisoned).
    pub faults_injected: u64,
    /// `lookup` calls.
    pub lookups: u64,
    /// `replay` calls.
    pub replays: u64,
    /// `last_seq` calls.
    pub last_seqs: u64,
    /// `sessions` calls.
    pub session_listings: u64,
}

#[derive(Debug, Default)]
struct Faults {
    /// One-shot faults by append call number.
    by_call: BTreeMap<u64, AppendFault>,
    /// One-shot faults by record key.
    by_key: HashMap<Uuid, AppendFault>,
    /// Refuse every append with `Poisoned`.
    poisoned: bool,
    /// Become poisoned after any `CommitFailed` answer, like a real journal that does
    /// not recover by reopening.
    poison_after_commit_failure: bool,
    /// Answer every read with this error.
    read_error: Option<JournalError>,
    /// Added before every operation.
    latency: Duration,
    stats: FaultStats,
}

/// A cloneable handle configuring a [`FaultyJournal`] at runtime.
///
/// Every setting takes effect for calls made after it; a call decides its fault (and
/// gets its number) when it is made, not when its future is first polled.
#[derive(Debug, Clone, Default)]
pub struct FaultControl {
    faults: Arc<Mutex<Faults>>,
}

impl FaultControl {
    fn lock(&self) -> MutexGuard<'_, Faults> {
        // Every critical section is a few field updates that cannot panic midway.
        self.faults.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Injects `fault` into the `n`th `append` call (1-based, counting every call ever
    /// made through the wrapper, as in [`FaultStats::appends`]). One-shot.
    pub fn fail_append(&self, n: u64, fault: AppendFault) {
        self.lock().by_call.insert(n, fault);
    }

    /// Injects `fault` into the next `append` call. One-shot.
    pub fn fail_next_append(&self, fault: AppendFault) {
        let mut faults = self.lock();
        let n = faults.stats.appends + 1;
        faults.by_call.insert(n, fault);
    }

    /// Injects `fault` into the next `append` of a record whose key is `key`, or the
    /// next `append_all` of a group holding one (the fault then strikes the whole
    /// group). One-shot; a fault by call number takes precedence when both match.
    pub fn fail_key(&self, key: Uuid, fault: AppendFault) {
        self.lock().by_key.insert(key, fault);
    }

    /// Drops every pending one-shot fault.
    pub fn clear_faults(&self) {
        let mut faults = self.lock();
        faults.by_call.clear();
        faults.by_key.clear();
    }

    /// While `poisoned`, every `append` is refused with [`AppendError::Poisoned`]
    /// without reaching the inner backend. Reads are unaffected (see
    /// [`fail_reads`](Self::fail_reads)).
    pub fn set_poisoned(&self, poisoned: bool) {
        self.lock().poisoned = poisoned;
    }

    /// Whether appends are currently refused as poisoned.
    #[must_use]
    pub fn is_poisoned(&self) -> bool {
        self.lock().poisoned
    }

    /// When `on`, any append answered [`AppendError::CommitFailed`] (injected or from
    /// the inner backend) poisons the wrapper, as a journal that refuses every write
    /// after a failed commit would.
    pub fn set_poison_after_commit_failure(&self, on: bool) {
        self.lock().poison_after_commit_failure = on;
    }

    /// Answers every `lookup`, `replay`, `last_seq` and `sessions` call with `error`
    /// (`None`: forward reads again).
    pub fn fail_reads(&self, error: Option<JournalError>) {
        self.lock().read_error = error;
    }

    /// Delays every operation by `latency` (`tokio::time::sleep`, so tests with paused
    /// time stay instant). `Duration::ZERO` removes the delay.
    pub fn set_latency(&self, latency: Duration) {
        self.lock().latency = latency;
    }

    /// A snapshot of the call counters.
    #[must_use]
    pub fn stats(&self) -> FaultStats {
        self.lock().stats
    }

    /// Decides what the append about to be made does.
    fn on_append(&self, keys: &[Uuid]) -> (Duration, Option<AppendFault>) {
        let mut faults = self.lock();
        faults.stats.appends += 1;
        let n = faults.stats.appends;
        let fault = if faults.poisoned {
            Some(AppendFault::Error(AppendError::Poisoned))
        } else {
            faults
                .by_call
                .remove(&n)
                .or_else(|| keys.iter().find_map(|k| faults.by_key.remove(k)))
        };
        if fault.is_some() {
            faults.stats.faults_injected += 1;
        }
        if !matches!(fault, Some(AppendFault::Error(_))) {
            faults.stats.appends_forwarded += 1;
        }
        (faults.latency, fault)
    }

    fn on_answer<T>(&self, result: &Result<T, AppendError>, frames_written: u64) {
        let mut faults = self.lock();
        faults.stats.frames_appended += frames_written;
        if faults.poison_after_commit_failure && matches!(result, Err(AppendError::CommitFailed(_)))
        {
            faults.poisoned = true;
        }
    }

    /// Counts a read and decides its latency and (injected) error.
    fn on_read(
        &self,
        counter: fn(&mut FaultStats) -> &mut u64,
    ) -> (Duration, Option<JournalError>) {
        let mut faults = self.lock();
        *counter(&mut faults.stats) += 1;
        (faults.latency, faults.read_error.clone())
    }
}

/// Wraps a [`JournalBackend`] and injects faults configured through its
/// [`FaultControl`]: fail the Nth append (or the append of a key) with a chosen error,
/// "persisted but reported failed" commits, latency, refusing every append as
/// poisoned, failing reads; and counts every call.
///
/// ```
/// # async fn demo() {
/// use notify_journal::{AppendError, JournalBackend};
/// use notify_testkit::{AppendFault, FaultyJournal, MemoryJournal, sample};
/// use notify_types::{LoopId, SessionId};
///
/// let journal = FaultyJournal::new(MemoryJournal::new());
/// let control = journal.control();
/// let s = SessionId::new();
/// let record = sample::command(s, LoopId::new());
///
/// control.fail_next_append(AppendFault::PersistedButFailed);
/// let first = journal.append(s, record.clone()).await;
/// assert!(matches!(first, Err(AppendError::CommitFailed(_))));
/// // The retry with the identical record finds the frame that did persist.
/// let retry = journal.append(s, record).await.unwrap();
/// assert_eq!((retry.seq, retry.appended), (1, false));
/// assert_eq!(control.stats().appends, 2);
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct FaultyJournal<B> {
    inner: B,
    control: FaultControl,
}

impl<B: JournalBackend> FaultyJournal<B> {
    /// Wraps `inner` with no faults configured.
    #[must_use]
    pub fn new(inner: B) -> Self {
        Self {
            inner,
            control: FaultControl::default(),
        }
    }

    /// The handle that configures this wrapper (clones share the configuration).
    #[must_use]
    pub fn control(&self) -> FaultControl {
        self.control.clone()
    }

    /// The wrapped backend.
    #[must_use]
    pub fn inner(&self) -> &B {
        &self.inner
    }

    /// Unwraps the backend.
    #[must_use]
    pub fn into_inner(self) -> B {
        self.inner
    }
}

async fn delay(latency: Duration) {
    if !latency.is_zero() {
        tokio::time::sleep(latency).await;
    }
}

// Purges and tombstone drops are forwarded as they are: no fault is injected there.
impl<B: JournalBackend> JournalLayer for FaultyJournal<B> {
    fn append(
        &self,
        session: SessionId,
        record: JournalRecord,
    ) -> BoxFuture<'_, Result<AppendOutcome, AppendError>> {
        let (latency, fault) = self.control.on_append(&[record.key()]);
        Box::pin(async move {
            delay(latency).await;
            let (result, frame_written) = match fault {
                Some(AppendFault::Error(error)) => (Err(error), false),
                Some(AppendFault::PersistedButFailed) => {
                    match self.inner.append(session, record).await {
                        Ok(outcome) => (
                            Err(AppendError::CommitFailed(StorageError::msg(
                                "injected: the commit persisted but is reported failed",
                            ))),
                            outcome.appended,
                        ),
                        Err(error) => (Err(error), false),
                    }
                }
                None | Some(AppendFault::ShortAnswer) => {
                    let result = self.inner.append(session, record).await;
                    let written = matches!(result, Ok(AppendOutcome { appended: true, .. }));
                    (result, written)
                }
            };
            self.control.on_answer(&result, u64::from(frame_written));
            result
        })
    }

    fn append_all(
        &self,
        session: SessionId,
        records: Vec<JournalRecord>,
        if_head: Option<u64>,
    ) -> BoxFuture<'_, Result<Vec<AppendOutcome>, AppendError>> {
        let keys: Vec<Uuid> = records.iter().map(JournalRecord::key).collect();
        let (latency, fault) = self.control.on_append(&keys);
        let written =
            |outcomes: &[AppendOutcome]| outcomes.iter().filter(|o| o.appended).count() as u64;
        Box::pin(async move {
            delay(latency).await;
            let (result, frames_written) = match fault {
                Some(AppendFault::Error(error)) => (Err(error), 0),
                Some(AppendFault::PersistedButFailed) => {
                    match self.inner.append_all(session, records, if_head).await {
                        Ok(outcomes) => (
                            Err(AppendError::CommitFailed(StorageError::msg(
                                "injected: the commit persisted but is reported failed",
                            ))),
                            written(&outcomes),
                        ),
                        Err(error) => (Err(error), 0),
                    }
                }
                Some(AppendFault::ShortAnswer) => {
                    let mut result = self.inner.append_all(session, records, if_head).await;
                    let n = result.as_deref().map_or(0, written);
                    if let Ok(outcomes) = &mut result {
                        outcomes.pop();
                    }
                    (result, n)
                }
                None => {
                    let result = self.inner.append_all(session, records, if_head).await;
                    let n = result.as_deref().map_or(0, written);
                    (result, n)
                }
            };
            self.control.on_answer(&result, frames_written);
            result
        })
    }
}

impl<B: JournalBackend> JournalReadLayer for FaultyJournal<B> {
    type Inner = B;

    fn inner(&self) -> &B {
        &self.inner
    }

    fn lookup(
        &self,
        session: SessionId,
        key: Uuid,
    ) -> BoxFuture<'_, Result<Option<u64>, JournalError>> {
        let (latency, error) = self.control.on_read(|s| &mut s.lookups);
        Box::pin(async move {
            delay(latency).await;
            match error {
                Some(e) => Err(e),
                None => self.inner.lookup(session, key).await,
            }
        })
    }

    fn replay(
        &self,
        session: SessionId,
        from_seq: u64,
        limit: usize,
    ) -> BoxFuture<'_, Result<Vec<SeqRecord>, JournalError>> {
        let (latency, error) = self.control.on_read(|s| &mut s.replays);
        Box::pin(async move {
            delay(latency).await;
            match error {
                Some(e) => Err(e),
                None => self.inner.replay(session, from_seq, limit).await,
            }
        })
    }

    fn last_seq(&self, session: SessionId) -> BoxFuture<'_, Result<u64, JournalError>> {
        let (latency, error) = self.control.on_read(|s| &mut s.last_seqs);
        Box::pin(async move {
            delay(latency).await;
            match error {
                Some(e) => Err(e),
                None => self.inner.last_seq(session).await,
            }
        })
    }

    fn sessions(&self) -> BoxFuture<'_, Result<Vec<SessionId>, JournalError>> {
        let (latency, error) = self.control.on_read(|s| &mut s.session_listings);
        Box::pin(async move {
            delay(latency).await;
            match error {
                Some(e) => Err(e),
                None => self.inner.sessions().await,
            }
        })
    }

    fn sessions_after(
        &self,
        after: Option<SessionId>,
        limit: usize,
    ) -> BoxFuture<'_, Result<Vec<SessionId>, JournalError>> {
        let (latency, error) = self.control.on_read(|s| &mut s.session_listings);
        Box::pin(async move {
            delay(latency).await;
            match error {
                Some(e) => Err(e),
                None => self.inner.sessions_after(after, limit).await,
            }
        })
    }
    fn session_state(
        &self,
        session: SessionId,
    ) -> BoxFuture<'_, Result<SessionState, JournalError>> {
        let (latency, error) = self.control.on_read(|s| &mut s.session_listings);
        Box::pin(async move {
            delay(latency).await;
            match error {
                Some(e) => Err(e),
                None => self.inner.session_state(session).await,
            }
        })
    }
}
