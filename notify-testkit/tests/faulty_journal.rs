//! FaultyJournal: each fault does what it says, and the counters count.

use std::sync::Arc;
use std::time::Duration;

use notify_journal::{
    AppendError, AppendOutcome, JournalBackend, JournalError, JournalRead, StorageError,
};
use notify_testkit::{AppendFault, FaultyJournal, MemoryJournal, sample};
use notify_types::{LoopId, SessionId};

fn setup() -> (
    FaultyJournal<MemoryJournal>,
    MemoryJournal,
    SessionId,
    LoopId,
) {
    let memory = MemoryJournal::new();
    (
        FaultyJournal::new(memory.clone()),
        memory,
        SessionId::new(),
        LoopId::new(),
    )
}

fn new_at(seq: u64) -> AppendOutcome {
    AppendOutcome {
        seq,
        appended: true,
    }
}

#[tokio::test]
async fn without_faults_it_is_transparent() {
    let (journal, _, _, _) = setup();
    notify_testkit::conformance::run_all(&journal, MemoryJournal::DEFAULT_MAX_RECORD_BYTES)
        .await
        .unwrap();
    let stats = journal.control().stats();
    assert_eq!(stats.faults_injected, 0);
    assert_eq!(stats.appends, stats.appends_forwarded);
}

#[tokio::test]
async fn fails_the_nth_append_with_the_chosen_error_and_writes_nothing() {
    let (journal, memory, s, l) = setup();
    journal
        .control()
        .fail_append(2, AppendFault::Error(AppendError::Closed));
    let records: Vec<_> = (0..3).map(|_| sample::command(s, l)).collect();
    assert_eq!(
        journal.append(s, records[0].clone()).await.unwrap(),
        new_at(1)
    );
    let second = journal.append(s, records[1].clone()).await;
    assert!(matches!(second, Err(AppendError::Closed)), "{second:?}");
    assert_eq!(memory.lookup(s, records[1].key()).await.unwrap(), None);
    // One-shot: the retry and the next append go through.
    assert_eq!(
        journal.append(s, records[1].clone()).await.unwrap(),
        new_at(2)
    );
    assert_eq!(
        journal.append(s, records[2].clone()).await.unwrap(),
        new_at(3)
    );
    let stats = journal.control().stats();
    assert_eq!(
        (
            stats.appends,
            stats.appends_forwarded,
            stats.frames_appended,
            stats.faults_injected
        ),
        (4, 3, 3, 1)
    );
}

#[tokio::test]
async fn fail_next_append_counts_from_now() {
    let (journal, _, s, l) = setup();
    journal.append(s, sample::command(s, l)).await.unwrap();
    journal
        .control()
        .fail_next_append(AppendFault::commit_failed());
    let r = journal.append(s, sample::command(s, l)).await;
    assert!(matches!(r, Err(AppendError::CommitFailed(_))), "{r:?}");
    assert_eq!(journal.last_seq(s).await.unwrap(), 1, "not persisted");
}

#[tokio::test]
async fn fails_the_append_of_a_chosen_key() {
    let (journal, _, s, l) = setup();
    let target = sample::command(s, l);
    journal.control().fail_key(
        target.key(),
        AppendFault::Error(AppendError::Storage(StorageError::msg("disk full"))),
    );
    journal.append(s, sample::command(s, l)).await.unwrap();
    let r = journal.append(s, target.clone()).await;
    assert!(matches!(r, Err(AppendError::Storage(_))), "{r:?}");
    assert_eq!(journal.append(s, target).await.unwrap(), new_at(2));
}

#[tokio::test]
async fn persisted_but_reported_failed_then_the_retry_deduplicates() {
    let (journal, memory, s, l) = setup();
    let record = sample::command(s, l);
    journal
        .control()
        .fail_next_append(AppendFault::PersistedButFailed);
    let r = journal.append(s, record.clone()).await;
    assert!(matches!(r, Err(AppendError::CommitFailed(_))), "{r:?}");
    assert_eq!(memory.lookup(s, record.key()).await.unwrap(), Some(1));
    let retry = journal.append(s, record).await.unwrap();
    assert_eq!(
        retry,
        AppendOutcome {
            seq: 1,
            appended: false
        }
    );
    assert_eq!(journal.control().stats().frames_appended, 1);
}

#[tokio::test]
async fn persisted_but_failed_passes_a_real_inner_error_through() {
    let (journal, _, s, l) = setup();
    let n = sample::notification(s, l);
    let original =
        notify_types::JournalRecord::Command(notify_types::ProcessNotification::new(n.clone()));
    let forged = notify_types::JournalRecord::Command(notify_types::ProcessNotification::new(
        notify_types::ProcessCompletionNotification {
            process_handle: "other".into(),
            ..n
        },
    ));
    journal.append(s, original).await.unwrap();
    journal
        .control()
        .fail_next_append(AppendFault::PersistedButFailed);
    let r = journal.append(s, forged).await;
    assert!(
        matches!(r, Err(AppendError::Collision { seq: 1, .. })),
        "{r:?}"
    );
}

#[tokio::test]
async fn poisoned_refuses_every_append_until_cleared() {
    let (journal, memory, s, l) = setup();
    let control = journal.control();
    control.set_poisoned(true);
    assert!(control.is_poisoned());
    for _ in 0..3 {
        let r = journal.append(s, sample::command(s, l)).await;
        assert!(matches!(r, Err(AppendError::Poisoned)), "{r:?}");
    }
    assert_eq!(memory.frame_count(), 0);
    assert_eq!(journal.last_seq(s).await.unwrap(), 0, "reads still work");
    control.set_poisoned(false);
    assert_eq!(
        journal.append(s, sample::command(s, l)).await.unwrap(),
        new_at(1)
    );
    let stats = control.stats();
    assert_eq!((stats.appends, stats.faults_injected), (4, 3));
}

#[tokio::test]
async fn a_commit_failure_can_poison_like_a_real_journal() {
    let (journal, _, s, l) = setup();
    let control = journal.control();
    control.set_poison_after_commit_failure(true);
    let record = sample::command(s, l);
    control.fail_next_append(AppendFault::PersistedButFailed);
    assert!(matches!(
        journal.append(s, record.clone()).await,
        Err(AppendError::CommitFailed(_))
    ));
    assert!(control.is_poisoned());
    assert!(matches!(
        journal.append(s, record).await,
        Err(AppendError::Poisoned)
    ));
}

#[tokio::test]
async fn failing_reads_and_counting_them() {
    let (journal, _, s, l) = setup();
    let control = journal.control();
    journal.append(s, sample::command(s, l)).await.unwrap();
    control.fail_reads(Some(JournalError::Closed));
    assert!(matches!(
        journal.lookup(s, uuid()).await,
        Err(JournalError::Closed)
    ));
    assert!(matches!(
        journal.replay(s, 1, 10).await,
        Err(JournalError::Closed)
    ));
    assert!(matches!(
        journal.last_seq(s).await,
        Err(JournalError::Closed)
    ));
    assert!(matches!(
        journal.sessions().await,
        Err(JournalError::Closed)
    ));
    control.fail_reads(None);
    assert_eq!(journal.replay(s, 1, 10).await.unwrap().len(), 1);
    let stats = control.stats();
    assert_eq!(
        (
            stats.lookups,
            stats.replays,
            stats.last_seqs,
            stats.session_listings
        ),
        (1, 2, 1, 1)
    );
}

fn uuid() -> notify_types::Uuid {
    notify_types::Uuid::now_v7()
}

#[tokio::test(start_paused = true)]
async fn latency_delays_completion_in_virtual_time() {
    let (journal, _, s, l) = setup();
    let journal = Arc::new(journal);
    journal.control().set_latency(Duration::from_secs(1));
    let task = {
        let journal = Arc::clone(&journal);
        tokio::spawn(async move { journal.append(s, sample::command(s, l)).await })
    };
    tokio::task::yield_now().await;
    assert!(!task.is_finished());
    tokio::time::advance(Duration::from_millis(999)).await;
    assert!(!task.is_finished());
    tokio::time::advance(Duration::from_millis(1)).await;
    assert_eq!(task.await.unwrap().unwrap(), new_at(1));
    // Removing the latency makes calls complete without any time passing.
    journal.control().set_latency(Duration::ZERO);
    let before = tokio::time::Instant::now();
    journal.last_seq(s).await.unwrap();
    assert_eq!(tokio::time::Instant::now(), before);
}

#[tokio::test]
async fn the_control_handle_is_shared_by_clones() {
    let (journal, _, s, l) = setup();
    let a = journal.control();
    let b = a.clone();
    b.set_poisoned(true);
    assert!(matches!(
        journal.append(s, sample::command(s, l)).await,
        Err(AppendError::Poisoned)
    ));
    assert_eq!(a.stats().appends, 1);
    a.clear_faults();
    a.set_poisoned(false);
    assert!(journal.append(s, sample::command(s, l)).await.is_ok());
}
