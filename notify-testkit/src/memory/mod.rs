//! An in-memory [`JournalBackend`] with the redb journal's semantics (`purge.rs`:
//! purge steps; `lease.rs`: leases).

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use notify_journal::__private::{
    GroupVerdict, check_replay_page, decode_checked_frame, frame_checksum, judge_group,
    record_append,
};
use notify_journal::{
    AppendError, AppendOutcome, BoxFuture, CommitStats, Corruption, JournalBackend, JournalError,
    JournalRead, PurgeStep, SeqRecord, SessionState, Tombstone, check_append, check_group,
};
use notify_types::{JournalRecord, SessionEvent, SessionId, Timestamp, Uuid};

mod lease;
mod purge;

use lease::{DEFAULT_LEASE_DURATION, Holder, LeaseTable};

/// An in-memory journal: per-session, gap-free logs with an idempotency index, and
/// exactly the contract of the redb journal (the conformance suite proves it).
///
/// * Sequences start at 1 per session and grow by 1 per new frame.
/// * The idempotency index is per session: `(session, record.key())`. The same key
///   with byte-identical encoded record returns the original seq with
///   `appended: false`; different bytes (or another record kind) is
///   [`AppendError::Collision`] with the original seq, and nothing is written.
/// * A record that would not decode is [`AppendError::Invalid`]; a record naming
///   another session is [`AppendError::SessionMismatch`]; a record
///   whose encoding exceeds [`max_record_bytes`](Self::max_record_bytes) is
///   [`AppendError::TooLarge`].
/// * Frames are kept as encoded bytes with their checksum (CRC-32C) and checked and
///   decoded on every read, like a real backend, so a frame whose bytes changed
///   ([`corrupt_frame`](Self::corrupt_frame)) or that went missing
///   ([`remove_frame`](Self::remove_frame)) is [`JournalError::Corrupt`] on replay, and
///   [`AppendError::Corrupt`] for a re-append of its key.
/// * Appending a session's `SessionEnded` marker ends it (stamped with the wall
///   clock): a new key is then [`AppendError::SessionEnded`], while a key journaled
///   before the end is still a duplicate or a collision. Purging removes its frames in
///   bounded steps and leaves a [`Tombstone`]; every append to it is then refused.
/// * [`append_all`](JournalBackend::append_all) resolves a group under one lock and
///   takes back what it wrote if any record is refused: whole or nothing.
///
/// Every append is "durable" the moment it returns: the journal lives as long as any
/// clone of it. Clones share the same state (an `Arc` inside), so a test can keep one
/// handle, drop everything else (a simulated crash) and restore from the handle.
///
/// A std `Mutex` guards the state; it is never held across an `.await` (every
/// operation completes synchronously and returns a ready future).
///
/// Leases ([`JournalLeases`](notify_journal::JournalLeases)) behave like
/// PostgreSQL's: each handle is a holder (clones are the same holder;
/// [`another_holder`](Self::another_holder) opens another one on the same store),
/// epochs grow per session, leases expire by a lease clock the test moves with
/// [`advance_lease_clock`](Self::advance_lease_clock), an append to a session whose
/// lease this handle lost is [`AppendError::Fenced`] (sticky until acquired
/// again) and one while another holder's lease is live is too, releases and lost
/// leases are announced on `lease_changes`.
///
/// Its appends are counted in the `notify_journal_appends_total` metric under
/// `backend="memory"`, and [`commit_stats`](Self::commit_stats) counts them like a
/// backend that commits every append on its own.
#[derive(Debug, Clone)]
pub struct MemoryJournal {
    inner: Arc<Inner>,
    /// This handle's lease holder identity and leases (shared by its clones).
    holder: Arc<Holder>,
    /// How long this handle's leases last without renewal.
    lease_duration: Duration,
}

#[derive(Debug)]
struct Inner {
    /// The size cap, checked against the encoded record.
    max_record_bytes: usize,
    /// Every session with at least one frame, in ID order.
    sessions: Mutex<BTreeMap<SessionId, SessionLog>>,
    /// Appends that passed the checks and were resolved against the store (each its
    /// own "commit"), for [`CommitStats`].
    resolved: AtomicU64,
    /// Every session's lease, shared by every holder on the store
    /// (`memory_lease.rs`); locked after `sessions`, never before.
    leases: LeaseTable,
}

#[derive(Debug, Default)]
struct SessionLog {
    /// Stored frames by seq: the checksum taken when it was appended, and its bytes.
    frames: BTreeMap<u64, (u32, Vec<u8>)>,
    /// The last seq appended (kept apart from `frames`, so a lost frame is noticed).
    head: u64,
    /// Idempotency index: key to seq.
    index: HashMap<Uuid, u64>,
    /// When the end marker was appended, if it was.
    ended_at: Option<Timestamp>,
    /// The tombstone, once a purge began (frames may remain until it finishes).
    tombstone: Option<Tombstone>,
}

impl SessionLog {
    /// The refusal of an append to a purged session (every key), or of a key the log
    /// does not hold to an ended one. A key an ended session's log holds (its end
    /// marker, a retry of a record journaled before the end) is answered from the
    /// index: a duplicate or a collision.
    fn refuse(&self, session: SessionId, key: Uuid) -> Result<(), AppendError> {
        if self.tombstone.is_some() {
            return Err(AppendError::SessionEnded {
                session,
                purged: true,
            });
        }
        if self.ended_at.is_some() && !self.index.contains_key(&key) {
            return Err(AppendError::SessionEnded {
                session,
                purged: false,
            });
        }
        Ok(())
    }

    fn state(&self) -> SessionState {
        match (self.tombstone, self.ended_at) {
            (Some(t), _) => SessionState::Purged(t),
            (None, Some(ended_at)) => SessionState::Ended {
                ended_at,
                last_seq: self.head,
            },
            (None, None) => SessionState::Live,
        }
    }
}

impl MemoryJournal {
    /// The default size cap of an encoded record: the redb journal's (1 MiB).
    pub const DEFAULT_MAX_RECORD_BYTES: usize = notify_journal::DEFAULT_MAX_RECORD_BYTES;

    /// An empty journal with the [default size cap](Self::DEFAULT_MAX_RECORD_BYTES).
    #[must_use]
    pub fn new() -> Self {
        Self::with_max_record_bytes(Self::DEFAULT_MAX_RECORD_BYTES)
    }

    /// An empty journal refusing encoded records longer than `max_record_bytes`.
    #[must_use]
    pub fn with_max_record_bytes(max_record_bytes: usize) -> Self {
        Self {
            inner: Arc::new(Inner {
                max_record_bytes,
                sessions: Mutex::new(BTreeMap::new()),
                resolved: AtomicU64::new(0),
                leases: LeaseTable::new(),
            }),
            holder: Holder::new(),
            lease_duration: DEFAULT_LEASE_DURATION,
        }
    }

    /// This handle with leases lasting `duration` (default 30 s) without renewal.
    #[must_use]
    pub fn with_lease_duration(mut self, duration: Duration) -> Self {
        self.lease_duration = duration;
        self
    }

    /// Another handle on the same store, as another host would have: a holder of
    /// its own (fresh identity, no leases), sharing the logs and the lease table.
    #[must_use]
    pub fn another_holder(&self) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
            holder: Holder::new(),
            lease_duration: self.lease_duration,
        }
    }

    /// The store's lease table.
    fn lease_table(&self) -> &LeaseTable {
        &self.inner.leases
    }

    /// Every session with a log, and whether it is neither ended nor purged.
    fn open_states(&self) -> HashMap<SessionId, bool> {
        self.lock()
            .iter()
            .map(|(s, log)| (*s, log.ended_at.is_none() && log.tombstone.is_none()))
            .collect()
    }

    /// The size cap of an encoded record, in bytes.
    #[must_use]
    pub fn max_record_bytes(&self) -> usize {
        self.inner.max_record_bytes
    }

    /// Commit counters since creation, shared by every clone: every append that passed
    /// the checks counts as one commit of one append (`writer_wakeups` is 0).
    #[must_use]
    pub fn commit_stats(&self) -> CommitStats {
        let n = self.inner.resolved.load(Ordering::Relaxed);
        let mut stats = CommitStats::default();
        stats.commits = n;
        stats.appends = n;
        stats
    }

    /// The number of frames across all sessions.
    #[must_use]
    pub fn frame_count(&self) -> usize {
        self.lock().values().map(|log| log.frames.len()).sum()
    }

    /// The stored bytes of frame `seq` of `session`, if it exists.
    #[must_use]
    pub fn raw_frame(&self, session: SessionId, seq: u64) -> Option<Vec<u8>> {
        let sessions = self.lock();
        let log = sessions.get(&session)?;
        log.frames.get(&seq).map(|(_, bytes)| bytes.clone())
    }

    /// Test hook: replaces the stored bytes of frame `seq` of `session`, keeping the
    /// checksum (and the index) as they were — damage behind the journal's back — so
    /// every read of it reports [`JournalError::Corrupt`]. Returns `false` if there is
    /// no such frame.
    pub fn corrupt_frame(&self, session: SessionId, seq: u64, bytes: Vec<u8>) -> bool {
        let mut sessions = self.lock();
        match sessions
            .get_mut(&session)
            .and_then(|log| log.frames.get_mut(&seq))
        {
            Some((_, slot)) => {
                *slot = bytes;
                true
            }
            None => false,
        }
    }

    /// Test hook: removes frame `seq` of `session` (its index entry and the session's
    /// head stay), as a lost write would, so replay reports the gap as
    /// [`JournalError::Corrupt`]. Returns `false` if there is no such frame.
    pub fn remove_frame(&self, session: SessionId, seq: u64) -> bool {
        self.lock()
            .get_mut(&session)
            .is_some_and(|log| log.frames.remove(&seq).is_some())
    }

    /// Every poisoned-lock recovery goes through here. The state is only mutated after
    /// all checks pass and in a way that cannot panic midway, so it is consistent even
    /// if another thread panicked while holding the lock.
    fn lock(&self) -> MutexGuard<'_, BTreeMap<SessionId, SessionLog>> {
        self.inner
            .sessions
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn append_now(
        &self,
        session: SessionId,
        record: &JournalRecord,
    ) -> Result<AppendOutcome, AppendError> {
        let bytes = check_append(session, record, self.inner.max_record_bytes)?;
        let mut sessions = self.lock();
        self.fence(session)?;
        self.resolve(&mut sessions, session, record, bytes)
    }

    /// [`JournalBackend::append_all`]: the records resolved in order under one lock,
    /// judged by the journal crate's group rule (`judge_group`); if one is refused (or
    /// the head moved), the frames the group wrote are taken back before the lock is
    /// released, so no reader ever sees part of a group.
    fn append_all_now(
        &self,
        session: SessionId,
        records: &[JournalRecord],
        if_head: Option<u64>,
    ) -> Result<Vec<AppendOutcome>, AppendError> {
        let encoded = check_group(session, records, self.inner.max_record_bytes)?;
        let mut sessions = self.lock();
        if !records.is_empty()
            && let Err(e) = self.fence(session)
        {
            return Err(AppendError::GroupRefused {
                index: 0,
                source: Box::new(e),
            });
        }
        let before = sessions.get(&session).map(|log| (log.head, log.ended_at));
        let verdict = judge_group(
            session,
            if_head,
            records
                .iter()
                .zip(encoded)
                .map(|(record, bytes)| self.resolve(&mut sessions, session, record, bytes)),
        );
        let (outcomes, refusal) = match verdict {
            GroupVerdict::Commit(outcomes) => return Ok(outcomes),
            GroupVerdict::Refuse { resolved, refusal } => (resolved, refusal),
        };
        match before {
            // The group created the session's log: none of it stays.
            None => {
                sessions.remove(&session);
            }
            Some((head, ended_at)) => {
                if let Some(log) = sessions.get_mut(&session) {
                    for (record, outcome) in records.iter().zip(&outcomes) {
                        if outcome.appended {
                            log.frames.remove(&outcome.seq);
                            log.index.remove(&record.key());
                        }
                    }
                    log.head = head;
                    log.ended_at = ended_at;
                }
            }
        }
        Err(refusal)
    }

    /// Resolves one checked record (`bytes` its encoding) against the store: refused,
    /// a duplicate, a collision, or a new frame.
    fn resolve(
        &self,
        sessions: &mut BTreeMap<SessionId, SessionLog>,
        session: SessionId,
        record: &JournalRecord,
        bytes: Vec<u8>,
    ) -> Result<AppendOutcome, AppendError> {
        let key = record.key();
        if let Some(log) = sessions.get(&session) {
            log.refuse(session, key)?;
        }
        self.inner.resolved.fetch_add(1, Ordering::Relaxed);
        if let Some(log) = sessions.get(&session)
            && let Some(&seq) = log.index.get(&key)
        {
            let corrupt = |source| AppendError::Corrupt {
                session,
                seq,
                source,
            };
            let Some((stored_sum, stored)) = log.frames.get(&seq) else {
                return Err(corrupt(Corruption::Missing));
            };
            let computed = frame_checksum(stored);
            if computed != *stored_sum {
                return Err(corrupt(Corruption::Checksum {
                    stored: *stored_sum,
                    computed,
                }));
            }
            return if *stored == bytes {
                Ok(AppendOutcome {
                    seq,
                    appended: false,
                })
            } else {
                Err(AppendError::Collision { key, seq })
            };
        }
        let log = sessions.entry(session).or_default();
        let seq = log.head + 1;
        log.frames.insert(seq, (frame_checksum(&bytes), bytes));
        log.head = seq;
        log.index.insert(key, seq);
        if matches!(record, JournalRecord::Event(SessionEvent::SessionEnded(_))) {
            log.ended_at = Some(Timestamp::now());
        }
        Ok(AppendOutcome {
            seq,
            appended: true,
        })
    }

    fn replay_now(
        &self,
        session: SessionId,
        from_seq: u64,
        limit: usize,
    ) -> Result<Vec<SeqRecord>, JournalError> {
        let sessions = self.lock();
        let Some(log) = sessions.get(&session) else {
            return Ok(Vec::new());
        };
        if log.tombstone.is_some() {
            return Err(JournalError::Purged { session });
        }
        let frames = log
            .frames
            .range(from_seq.max(1)..)
            .take(limit)
            .map(|(seq, (sum, bytes))| decode_checked_frame(session, *seq, bytes, *sum))
            .collect::<Result<Vec<SeqRecord>, JournalError>>()?;
        check_replay_page(session, from_seq, limit, Some(log.head), &frames)?;
        Ok(frames)
    }
}

impl Default for MemoryJournal {
    fn default() -> Self {
        Self::new()
    }
}

impl JournalRead for MemoryJournal {
    fn lookup(
        &self,
        session: SessionId,
        key: Uuid,
    ) -> BoxFuture<'_, Result<Option<u64>, JournalError>> {
        let sessions = self.lock();
        if sessions
            .get(&session)
            .is_some_and(|log| log.tombstone.is_some())
        {
            return Box::pin(std::future::ready(Err(JournalError::Purged { session })));
        }
        let seq = sessions
            .get(&session)
            .and_then(|log| log.index.get(&key).map(|seq| (log, *seq)));
        // A hit is confirmed against its frame, like the redb journal's.
        let answer = match seq {
            None => Ok(None),
            Some((log, seq)) => match log.frames.get(&seq) {
                None => Err(Corruption::Missing),
                Some((sum, bytes)) => {
                    let computed = frame_checksum(bytes);
                    if computed == *sum {
                        Ok(Some(seq))
                    } else {
                        Err(Corruption::Checksum {
                            stored: *sum,
                            computed,
                        })
                    }
                }
            }
            .map_err(|source| JournalError::Corrupt {
                session,
                seq,
                source,
            }),
        };
        Box::pin(std::future::ready(answer))
    }

    fn replay(
        &self,
        session: SessionId,
        from_seq: u64,
        limit: usize,
    ) -> BoxFuture<'_, Result<Vec<SeqRecord>, JournalError>> {
        Box::pin(std::future::ready(
            self.replay_now(session, from_seq, limit),
        ))
    }

    fn last_seq(&self, session: SessionId) -> BoxFuture<'_, Result<u64, JournalError>> {
        let last = self
            .lock()
            .get(&session)
            .map_or(0, |log| log.tombstone.map_or(log.head, |t| t.last_seq));
        Box::pin(std::future::ready(Ok(last)))
    }

    fn sessions(&self) -> BoxFuture<'_, Result<Vec<SessionId>, JournalError>> {
        let ids = self.lock().keys().copied().collect();
        Box::pin(std::future::ready(Ok(ids)))
    }

    fn sessions_after(
        &self,
        after: Option<SessionId>,
        limit: usize,
    ) -> BoxFuture<'_, Result<Vec<SessionId>, JournalError>> {
        use std::ops::Bound;
        let lower = after.map_or(Bound::Unbounded, Bound::Excluded);
        let ids = self
            .lock()
            .range((lower, Bound::Unbounded))
            .map(|(s, _)| *s)
            .take(limit)
            .collect();
        Box::pin(std::future::ready(Ok(ids)))
    }

    fn session_state(
        &self,
        session: SessionId,
    ) -> BoxFuture<'_, Result<SessionState, JournalError>> {
        let state = self
            .lock()
            .get(&session)
            .map_or(SessionState::Live, SessionLog::state);
        Box::pin(std::future::ready(Ok(state)))
    }
}

impl JournalBackend for MemoryJournal {
    fn append(
        &self,
        session: SessionId,
        record: JournalRecord,
    ) -> BoxFuture<'_, Result<AppendOutcome, AppendError>> {
        let result = self.append_now(session, &record);
        record_append("memory", &result);
        Box::pin(std::future::ready(result))
    }

    fn append_all(
        &self,
        session: SessionId,
        records: Vec<JournalRecord>,
        if_head: Option<u64>,
    ) -> BoxFuture<'_, Result<Vec<AppendOutcome>, AppendError>> {
        let result = self.append_all_now(session, &records, if_head);
        match &result {
            Ok(outcomes) => {
                for outcome in outcomes {
                    record_append("memory", &Ok(*outcome));
                }
            }
            Err(e) => record_append("memory", &Err(e.clone())),
        }
        Box::pin(std::future::ready(result))
    }

    fn purge_step(
        &self,
        ended_before: Timestamp,
        max_frames: usize,
    ) -> BoxFuture<'_, Result<PurgeStep, JournalError>> {
        Box::pin(std::future::ready(Ok(
            self.purge_now(ended_before, max_frames)
        )))
    }

    fn drop_tombstones(
        &self,
        purged_before: Timestamp,
        limit: usize,
    ) -> BoxFuture<'_, Result<u64, JournalError>> {
        let mut sessions = self.lock();
        let due: Vec<SessionId> = sessions
            .iter()
            .filter(|(_, log)| {
                log.frames.is_empty() && log.tombstone.is_some_and(|t| t.purged_at < purged_before)
            })
            .map(|(s, _)| *s)
            .take(limit)
            .collect();
        for s in &due {
            sessions.remove(s);
        }
        Box::pin(std::future::ready(Ok(due.len() as u64)))
    }
}
