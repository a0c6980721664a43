//! MemoryJournal beyond the conformance suite: clones share state, corrupt frames are
//! typed errors, real threads, and the suite catches a broken backend.

use std::sync::Arc;

use notify_journal::{
    AppendError, AppendOutcome, BoxFuture, JournalBackend, JournalError, JournalRead, SeqRecord,
    replay_all,
};
use notify_testkit::{MemoryJournal, conformance, sample};
use notify_types::{JournalRecord, LoopId, SessionId, Uuid};

#[tokio::test]
async fn clones_share_state_across_a_simulated_crash() {
    let journal = MemoryJournal::new();
    let keep = journal.clone();
    let s = SessionId::new();
    let record = sample::command(s, LoopId::new());
    journal.append(s, record.clone()).await.unwrap();
    drop(journal);
    assert_eq!(
        replay_all(&keep, s).await.unwrap(),
        vec![(1, record.clone())]
    );
    assert_eq!(keep.raw_frame(s, 1), Some(record.encode()));
    assert_eq!(keep.frame_count(), 1);
}

#[tokio::test]
async fn a_corrupt_frame_is_a_typed_error_naming_session_and_seq() {
    let journal = MemoryJournal::new();
    let s = SessionId::new();
    for record in sample::one_of_each(s, LoopId::new()) {
        journal.append(s, record).await.unwrap();
    }
    assert!(journal.corrupt_frame(s, 3, b"{\"type\":\"Nope\",\"v\":1}".to_vec()));
    assert!(!journal.corrupt_frame(s, 99, Vec::new()));
    match journal.replay(s, 1, 100).await {
        Err(JournalError::Corrupt { session, seq, .. }) => assert_eq!((session, seq), (s, 3)),
        other => panic!("want Corrupt at seq 3, got {other:?}"),
    }
    // Frames before the corrupt one still read.
    assert_eq!(journal.replay(s, 1, 2).await.unwrap().len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn appends_from_many_threads_stay_gap_free() {
    let journal = MemoryJournal::new();
    let s = SessionId::new();
    let tasks: Vec<_> = (0..64)
        .map(|_| {
            let journal = journal.clone();
            tokio::spawn(async move {
                let record = sample::command(s, LoopId::new());
                journal.append(s, record).await
            })
        })
        .collect();
    let mut seqs = Vec::new();
    for task in tasks {
        seqs.push(task.await.unwrap().unwrap().seq);
    }
    seqs.sort_unstable();
    assert_eq!(seqs, (1..=64).collect::<Vec<_>>());
}

/// A backend with one deliberate bug, to prove the suite notices it.
struct Broken {
    inner: MemoryJournal,
    bug: Bug,
}

#[derive(Clone, Copy, Debug)]
enum Bug {
    DuplicateReportsNewFrame,
    CollisionWritesAnyway,
    SessionsUnsorted,
    ReplayIgnoresLimit,
    LookupAlwaysNone,
    /// Purge steps ignore their bound.
    PurgeUnbounded,
    /// A purged session's tombstone never goes, and answers `Live`.
    PurgedLooksLive,
    /// `append_all` appends one record at a time, keeping what it wrote before a
    /// refusal (and ignoring the expected head): not atomic.
    GroupOneByOne,
}

impl notify_journal::layer::JournalReadLayer for Broken {
    type Inner = MemoryJournal;
    fn inner(&self) -> &MemoryJournal {
        &self.inner
    }
    fn lookup(
        &self,
        session: SessionId,
        key: Uuid,
    ) -> BoxFuture<'_, Result<Option<u64>, JournalError>> {
        match self.bug {
            Bug::LookupAlwaysNone => Box::pin(async { Ok(None) }),
            _ => self.inner.lookup(session, key),
        }
    }
    fn replay(
        &self,
        session: SessionId,
        from_seq: u64,
        limit: usize,
    ) -> BoxFuture<'_, Result<Vec<SeqRecord>, JournalError>> {
        match self.bug {
            Bug::ReplayIgnoresLimit => self.inner.replay(session, from_seq, usize::MAX),
            _ => self.inner.replay(session, from_seq, limit),
        }
    }
    fn sessions(&self) -> BoxFuture<'_, Result<Vec<SessionId>, JournalError>> {
        Box::pin(async move {
            let mut ids = self.inner.sessions().await?;
            if matches!(self.bug, Bug::SessionsUnsorted) {
                ids.reverse();
            }
            Ok(ids)
        })
    }
    fn session_state(
        &self,
        session: SessionId,
    ) -> BoxFuture<'_, Result<notify_journal::SessionState, JournalError>> {
        Box::pin(async move {
            match (self.bug, self.inner.session_state(session).await?) {
                (Bug::PurgedLooksLive, notify_journal::SessionState::Purged(_)) => {
                    Ok(notify_journal::SessionState::Live)
                }
                (_, state) => Ok(state),
            }
        })
    }
}

impl notify_journal::layer::JournalLayer for Broken {
    fn append(
        &self,
        session: SessionId,
        record: JournalRecord,
    ) -> BoxFuture<'_, Result<AppendOutcome, AppendError>> {
        Box::pin(async move {
            let result = self.inner.append(session, record.clone()).await;
            match (self.bug, result) {
                (Bug::DuplicateReportsNewFrame, Ok(o)) => Ok(AppendOutcome {
                    appended: true,
                    ..o
                }),
                (Bug::CollisionWritesAnyway, Err(AppendError::Collision { .. })) => {
                    let mut n = sample::notification(session, LoopId::new());
                    n.process_handle = "written-anyway".into();
                    self.inner
                        .append(session, JournalRecord::Command(n.into()))
                        .await
                }
                (_, result) => result,
            }
        })
    }
    fn append_all(
        &self,
        session: SessionId,
        records: Vec<JournalRecord>,
        if_head: Option<u64>,
    ) -> BoxFuture<'_, Result<Vec<AppendOutcome>, AppendError>> {
        if !matches!(self.bug, Bug::GroupOneByOne) {
            return self.inner.append_all(session, records, if_head);
        }
        Box::pin(async move {
            let mut outcomes = Vec::new();
            for (index, record) in records.into_iter().enumerate() {
                match self.inner.append(session, record).await {
                    Ok(o) => outcomes.push(o),
                    Err(e) => {
                        return Err(AppendError::GroupRefused {
                            index,
                            source: Box::new(e),
                        });
                    }
                }
            }
            Ok(outcomes)
        })
    }
    fn purge_step(
        &self,
        ended_before: notify_types::Timestamp,
        max_frames: usize,
    ) -> BoxFuture<'_, Result<notify_journal::PurgeStep, JournalError>> {
        match self.bug {
            Bug::PurgeUnbounded => self.inner.purge_step(ended_before, usize::MAX),
            _ => self.inner.purge_step(ended_before, max_frames),
        }
    }
}

#[tokio::test]
async fn the_suite_catches_broken_backends() {
    let cases = [
        (
            Bug::DuplicateReportsNewFrame,
            "duplicate_returns_original_seq",
        ),
        (
            Bug::CollisionWritesAnyway,
            "collision_same_kind_different_payload",
        ),
        (Bug::SessionsUnsorted, "sessions_lists_sessions_with_frames"),
        (Bug::ReplayIgnoresLimit, "replay_from_seq_and_limit"),
        (
            Bug::LookupAlwaysNone,
            "collision_same_kind_different_payload",
        ),
        (Bug::GroupOneByOne, "group_with_a_collision_writes_nothing"),
    ];
    for (bug, first_failing) in cases {
        let backend = Arc::new(Broken {
            inner: MemoryJournal::new(),
            bug,
        });
        let err = conformance::run_all(&backend, MemoryJournal::DEFAULT_MAX_RECORD_BYTES)
            .await
            .expect_err("the suite must reject a broken backend");
        assert_eq!(err.check(), first_failing, "{bug:?}: {err}");
        assert!(conformance::CHECKS.contains(&err.check()));
    }
}

/// The retention checks notice a backend whose purge ignores its bound or whose purged
/// sessions look live.
#[tokio::test]
async fn the_retention_checks_catch_broken_backends() {
    for (bug, first_failing) in [
        (Bug::PurgeUnbounded, "purge_runs_in_bounded_steps"),
        (Bug::PurgedLooksLive, "purge_respects_the_horizon"),
    ] {
        let backend = Broken {
            inner: MemoryJournal::new(),
            bug,
        };
        let err = conformance::run_retention(&backend)
            .await
            .expect_err("the retention checks must reject a broken backend");
        assert_eq!(err.check(), first_failing, "{bug:?}: {err}");
        assert!(conformance::RETENTION_CHECKS.contains(&err.check()));
    }
}
