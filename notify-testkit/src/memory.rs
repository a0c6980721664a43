//! An in-memory [`JournalBackend`] with the redb journal's semantics.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use notify_journal::{AppendError, AppendOutcome, BoxFuture, Frame, JournalBackend, JournalError};
use notify_types::{JournalRecord, SessionId, Uuid};

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
/// * Frames are kept as encoded bytes and decoded on replay, like a real backend, so a
///   frame that does not decode is [`JournalError::Corrupt`].
///
/// Every append is "durable" the moment it returns: the journal lives as long as any
/// clone of it. Clones share the same state (an `Arc` inside), so a test can keep one
/// handle, drop everything else (a simulated crash) and restore from the handle.
///
/// A std `Mutex` guards the state; it is never held across an `.await` (every
/// operation completes synchronously and returns a ready future).
#[derive(Debug, Clone)]
pub struct MemoryJournal {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    /// The size cap, checked against the encoded record.
    max_record_bytes: usize,
    /// Every session with at least one frame, in ID order.
    sessions: Mutex<BTreeMap<SessionId, SessionLog>>,
}

#[derive(Debug, Default)]
struct SessionLog {
    /// Encoded frames; the frame at index `i` has seq `i + 1`.
    frames: Vec<Vec<u8>>,
    /// Idempotency index: key to seq.
    index: HashMap<Uuid, u64>,
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
            }),
        }
    }

    /// The size cap of an encoded record, in bytes.
    #[must_use]
    pub fn max_record_bytes(&self) -> usize {
        self.inner.max_record_bytes
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
        frame_index(seq).and_then(|i| log.frames.get(i)).cloned()
    }

    /// Test hook: replaces the stored bytes of frame `seq` of `session` (the index is
    /// untouched), so replay reports [`JournalError::Corrupt`] for it if `bytes` do not
    /// decode. Returns `false` if there is no such frame.
    pub fn corrupt_frame(&self, session: SessionId, seq: u64, bytes: Vec<u8>) -> bool {
        let mut sessions = self.lock();
        let slot = sessions
            .get_mut(&session)
            .and_then(|log| frame_index(seq).and_then(|i| log.frames.get_mut(i)));
        match slot {
            Some(slot) => {
                *slot = bytes;
                true
            }
            None => false,
        }
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
        let bytes =
            notify_journal::encode_for_append(session, record, self.inner.max_record_bytes)?;
        let key = record.key();
        let mut sessions = self.lock();
        if let Some(log) = sessions.get(&session)
            && let Some(&seq) = log.index.get(&key)
        {
            let same = frame_index(seq)
                .and_then(|i| log.frames.get(i))
                .is_some_and(|stored| *stored == bytes);
            return if same {
                Ok(AppendOutcome {
                    seq,
                    appended: false,
                })
            } else {
                Err(AppendError::Collision { key, seq })
            };
        }
        let log = sessions.entry(session).or_default();
        log.frames.push(bytes);
        let seq = log.frames.len() as u64;
        log.index.insert(key, seq);
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
    ) -> Result<Vec<Frame>, JournalError> {
        let sessions = self.lock();
        let Some(log) = sessions.get(&session) else {
            return Ok(Vec::new());
        };
        let skip = usize::try_from(from_seq.saturating_sub(1)).unwrap_or(usize::MAX);
        log.frames
            .iter()
            .enumerate()
            .skip(skip)
            .take(limit)
            .map(|(i, bytes)| notify_journal::decode_frame(session, i as u64 + 1, bytes))
            .collect()
    }
}

impl Default for MemoryJournal {
    fn default() -> Self {
        Self::new()
    }
}

/// The `frames` index of `seq` (`None` for seq 0 or one past `usize`).
fn frame_index(seq: u64) -> Option<usize> {
    seq.checked_sub(1).and_then(|i| usize::try_from(i).ok())
}

impl JournalBackend for MemoryJournal {
    fn append(
        &self,
        session: SessionId,
        record: JournalRecord,
    ) -> BoxFuture<'_, Result<AppendOutcome, AppendError>> {
        Box::pin(std::future::ready(self.append_now(session, &record)))
    }

    fn lookup(
        &self,
        session: SessionId,
        key: Uuid,
    ) -> BoxFuture<'_, Result<Option<u64>, JournalError>> {
        let seq = self
            .lock()
            .get(&session)
            .and_then(|log| log.index.get(&key).copied());
        Box::pin(std::future::ready(Ok(seq)))
    }

    fn replay(
        &self,
        session: SessionId,
        from_seq: u64,
        limit: usize,
    ) -> BoxFuture<'_, Result<Vec<Frame>, JournalError>> {
        Box::pin(std::future::ready(
            self.replay_now(session, from_seq, limit),
        ))
    }

    fn last_seq(&self, session: SessionId) -> BoxFuture<'_, Result<u64, JournalError>> {
        let last = self
            .lock()
            .get(&session)
            .map_or(0, |log| log.frames.len() as u64);
        Box::pin(std::future::ready(Ok(last)))
    }

    fn sessions(&self) -> BoxFuture<'_, Result<Vec<SessionId>, JournalError>> {
        let ids = self.lock().keys().copied().collect();
        Box::pin(std::future::ready(Ok(ids)))
    }
}
