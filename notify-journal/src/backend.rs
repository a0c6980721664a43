//! The traits every journal implements: [`JournalRead`] (what a reader may ask) and
//! [`JournalBackend`] (that, plus appends and retention). redb and PostgreSQL here,
//! in-memory in the testkit. No storage-engine types appear in them.

use std::future::Future;
use std::pin::Pin;

use notify_types::{JournalRecord, SessionId, Timestamp, Uuid};

use crate::error::{AppendError, JournalError};
use crate::retention::{PurgeStep, SessionState};

/// A boxed, `Send` future, so the trait stays object safe.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// The result of an append.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AppendOutcome {
    /// The frame's sequence in its session (from 1, gap-free).
    pub seq: u64,
    /// `true` if this call wrote a new frame; `false` if an identical record was
    /// already journaled under the same key (then `seq` is the original frame's).
    pub appended: bool,
}

/// One journaled record with its sequence in its session's log, as reads answer it.
/// (A *frame* is how a backend stores it: the record's encoded bytes and checksum.)
pub type SeqRecord = (u64, JournalRecord);

/// An append-only, per-session journal with an idempotency index: the reads of
/// [`JournalRead`], appends, and retention.
///
/// Contract (the testkit's conformance suite checks every backend against it):
///
/// * per session, sequences start at 1 and grow by exactly 1 per new frame;
/// * `append` resolves only once the frame is durable;
/// * the same key with byte-identical encoded record returns the original seq with
///   `appended: false` and writes nothing; the same key with different bytes (or
///   another record kind) is [`AppendError::Collision`] carrying the original seq;
/// * a key counts as seen only once its frame is committed;
/// * [`append_all`](Self::append_all) commits a group of records whole or not at all;
/// * `replay` yields frames in sequence order;
/// * appending a session's [`SessionEnded`](notify_types::SessionEnded) marker ends it:
///   from that commit nothing more is written to it — an append of a key its log does
///   not hold is [`AppendError::SessionEnded`], while a key it holds (a retry of a record
///   journaled before the end, the marker included) is still a duplicate or a
///   collision, the index being asked before the end — and
///   [`session_state`](JournalRead::session_state) answers `Ended` with the commit's time;
/// * a purged session answers `Purged` with its tombstone; its log reads are
///   [`JournalError::Purged`], its appends `SessionEnded { purged: true }`, and its
///   `last_seq` is the tombstone's, so it never restarts at seq 1.
///
/// A session takes any backend (`Session::new(id, journal)`); used directly:
///
/// ```
/// use notify_journal::{JournalBackend, RedbOptions, JournalRead, RedbJournal, replay_all};
/// use notify_types::*;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let dir = tempfile::tempdir()?;
/// let journal = RedbJournal::open(dir.path().join("notify.redb"), RedbOptions::default())?;
/// let session = SessionId::new();
/// let record = JournalRecord::from(ProcessNotification::new(ProcessCompletionNotification {
///     command_id: CommandId::new(),
///     session_id: session,
///     loop_id: LoopId::new(),
///     process_handle: "build-42".into(),
///     state: ProcessLifecycleState::Exited,
///     reason: ProcessTerminalReason::Exited,
/// }));
///
/// let first = journal.append(session, record.clone()).await?;
/// assert!(first.appended && first.seq == 1);
/// let again = journal.append(session, record.clone()).await?; // a retry: same key, same bytes
/// assert!(!again.appended && again.seq == 1);
/// assert_eq!(journal.lookup(session, record.key()).await?, Some(1));
/// assert_eq!(replay_all(&journal, session).await?, vec![(1, record)]);
/// # Ok(())
/// # }
/// ```
pub trait JournalBackend: JournalRead {
    /// Appends `record` to `session`'s log under `record.key()`.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future does not cancel the write: the record may or may not be
    /// journaled. Retrying with the identical record is always safe.
    fn append(
        &self,
        session: SessionId,
        record: JournalRecord,
    ) -> BoxFuture<'_, Result<AppendOutcome, AppendError>>;

    /// Appends `records` to `session`'s log as one atomic group: all of them commit in
    /// one transaction, or none does.
    ///
    /// The records are resolved in order exactly as if appended one by one: each new
    /// one takes the next seq, and a record whose key is already journaled with
    /// identical bytes (before the group, or earlier in it) is a duplicate
    /// (`appended: false`, the original seq). The group commits only if no record is
    /// refused. The first refusal (a collision; a session ended or purged, an end marker
    /// earlier in the group included, so an end marker goes last; an invalid, oversized
    /// or mismatched record; damage) refuses the whole group and nothing is written:
    /// [`AppendError::GroupRefused`] names the record by its index and carries the
    /// refusal (see [`AppendError::refusal`]).
    ///
    /// With `if_head: Some(h)` the group is also conditional: it commits only if its
    /// first new frame takes seq `h + 1`, that is, nothing was appended to the session
    /// since the caller read its head `h`; else [`AppendError::HeadMoved`], nothing
    /// written. (A group of duplicates only writes nothing and is answered as such.)
    ///
    /// Answers one outcome per record, in order; an empty group is `Ok(vec![])` and
    /// writes nothing. Failures of the call as a whole come bare, as from
    /// [`append`](Self::append): `Closed`, `Poisoned`, `Storage`, a missing lease
    /// (`Fenced`), and `CommitFailed` (the whole group committed, or none of it).
    ///
    /// A required method, with no default: appending one record at a time would not be
    /// atomic. On redb the group is resolved inside the writer's batch like any append,
    /// and a refused group is undone within it (other appenders' appends are
    /// unaffected); on PostgreSQL it is one explicit transaction of its own.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future does not cancel the write: the group may or may not be
    /// journaled, but only whole, never in part. Retrying the identical group is safe:
    /// if it committed, each record is answered as a retry of it alone would be.
    fn append_all(
        &self,
        session: SessionId,
        records: Vec<JournalRecord>,
        if_head: Option<u64>,
    ) -> BoxFuture<'_, Result<Vec<AppendOutcome>, AppendError>>;

    /// One bounded step of a purge, in one transaction: picks one ended session whose
    /// end committed before `ended_before` (a purge left unfinished is finished first,
    /// whatever the horizon) and removes up to `max_frames` of its frames with their
    /// positions and index entries. The first step of a session turns it `Purged` (its
    /// tombstone) in the same transaction, so no read ever answers a partly removed log.
    /// Answers [`PurgeStep::IDLE`] when no session is due. Backends with write leases skip
    /// ended sessions whose lease another writer holds live.
    ///
    /// Most callers want [`purge`](crate::purge), which steps until nothing is due.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future does not cancel the step: it commits whole or not at all,
    /// and a later step continues an unfinished purge.
    fn purge_step(
        &self,
        ended_before: Timestamp,
        max_frames: usize,
    ) -> BoxFuture<'_, Result<PurgeStep, JournalError>>;

    /// Drops up to `limit` tombstones of sessions whose purge is finished and began
    /// (the tombstone's `purged_at`) before `purged_before`, oldest first, answering
    /// how many it dropped. A dropped session is unknown
    /// again: a late append to it would start a new log at seq 1, so choose a horizon
    /// longer than any retry can come late (see the crate's retention notes).
    ///
    /// Bounded whatever `limit` is: a backend drops in steps of a bounded number of
    /// tombstones, each its own transaction (so a live append never waits for a whole
    /// large drop), and answers the total. An error in a later step leaves the
    /// earlier steps' drops committed; the next call drops what is still due.
    ///
    /// # Cancel safety
    ///
    /// Each step commits whole or not at all. Dropping the future may stop the drop
    /// after any step (the redb journal's runs on to its end); what committed stays
    /// dropped, and a later call continues.
    fn drop_tombstones(
        &self,
        purged_before: Timestamp,
        limit: usize,
    ) -> BoxFuture<'_, Result<u64, JournalError>>;
}

/// The reads of a journal: everything [`JournalBackend`] offers that writes nothing.
///
/// A journal opened read-only ([`RedbReader`](crate::RedbReader)) implements this
/// alone; every [`JournalBackend`] implements it too. Functions that only read (replay,
/// restore, the command line's read commands) take it, so they accept both.
///
/// ```
/// use notify_journal::{RedbOptions, JournalRead, RedbJournal, RedbReader};
/// use notify_types::SessionId;
///
/// async fn head(journal: &dyn JournalRead, session: SessionId) -> u64 {
///     journal.last_seq(session).await.unwrap_or(0)
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let dir = tempfile::tempdir()?;
/// # let path = dir.path().join("notify.redb");
/// let journal = RedbJournal::open(&path, RedbOptions::default())?;
/// assert_eq!(head(&journal, SessionId::new()).await, 0);
/// journal.close();
/// let reader = RedbReader::open(&path)?; // reads only: no appends to refuse
/// assert_eq!(head(&reader, SessionId::new()).await, 0);
/// # Ok(())
/// # }
/// ```
pub trait JournalRead: Send + Sync {
    /// The sequence at which `key` is journaled in `session`, from the index alone.
    fn lookup(
        &self,
        session: SessionId,
        key: Uuid,
    ) -> BoxFuture<'_, Result<Option<u64>, JournalError>>;

    /// Frames of `session` with sequence `>= from_seq`, in order (at most `limit`).
    fn replay(
        &self,
        session: SessionId,
        from_seq: u64,
        limit: usize,
    ) -> BoxFuture<'_, Result<Vec<SeqRecord>, JournalError>>;

    /// The highest sequence of `session` (0 when it has no frames).
    fn last_seq(&self, session: SessionId) -> BoxFuture<'_, Result<u64, JournalError>>;

    /// Every session with at least one frame or a tombstone, in ID order. The answer
    /// holds every session; a backend reads it in bounded pages (a server-backed one
    /// in statements of bounded size), but callers that must stay bounded in memory
    /// page with [`sessions_after`](Self::sessions_after) instead.
    fn sessions(&self) -> BoxFuture<'_, Result<Vec<SessionId>, JournalError>>;

    /// One page of [`sessions`](Self::sessions): at most `limit` sessions with at
    /// least one frame or a tombstone whose ID is greater than `after` (from the first when `None`),
    /// in ID order. Page through every session by passing the last ID of each page as
    /// the next `after`; memory is bounded by `limit`, whatever the number of sessions.
    ///
    /// Every backend implements it with a seek (there is no default built on
    /// [`sessions`](Self::sessions), which would read every session for each page); a
    /// wrapper forwards it.
    fn sessions_after(
        &self,
        after: Option<SessionId>,
        limit: usize,
    ) -> BoxFuture<'_, Result<Vec<SessionId>, JournalError>>;

    /// Whether `session` is live, ended or purged (a session never written is live).
    fn session_state(
        &self,
        session: SessionId,
    ) -> BoxFuture<'_, Result<SessionState, JournalError>>;
}
