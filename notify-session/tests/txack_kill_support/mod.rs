//! What the two kill tests of transactional acknowledgements (`txack_kill_redb`,
//! `txack_kill_postgres`) share: the fixed session and loop every child run restores,
//! the child's restore and endless notifier, the rounds of killed children (each kill
//! proven to land mid-work), what the journal records afterwards, the final phase
//! (restore hands back exactly journaled - consumed, drained to one row each), and the
//! checks of the application's rows.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use notify_journal::{JournalBackend, JournalRead, replay_all};
use notify_loop::LoopConfig;
use notify_session::{Session, SessionConsumer, restore};
use notify_testkit::kill::{self, xorshift as next};
use notify_types::{
    CommandId, JournalRecord, LoopId, NotifyError, ProcessCompletionNotification,
    ProcessLifecycleState, ProcessTerminalReason, SessionEvent, SessionId, Uuid,
};

/// The line prefix a child prints once an acknowledgement returned.
const ACK: &str = "ACK ";

/// The session and loop of one kill test: fixed, so that each child run restores what
/// the last one left pending.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Fixed {
    pub(crate) session: SessionId,
    pub(crate) loop_id: LoopId,
}

impl Fixed {
    /// The session `00TT0000-…-000000000001` and the loop `00TT0000-…-000000000002`
    /// (`TT` is `tag` in hex: the UUID's second byte, bits 112–119 of its `u128`; one
    /// tag per test file).
    pub(crate) fn new(tag: u8) -> Self {
        let base = u128::from(tag) << 112;
        Self {
            session: SessionId::from_uuid(Uuid::from_u128(base | 1)),
            loop_id: LoopId::from_uuid(Uuid::from_u128(base | 2)),
        }
    }

    /// A completion notification `id` to the fixed loop.
    pub(crate) fn notification(self, id: CommandId) -> ProcessCompletionNotification {
        ProcessCompletionNotification {
            command_id: id,
            session_id: self.session,
            loop_id: self.loop_id,
            process_handle: format!("job-{id}"),
            state: ProcessLifecycleState::Exited,
            reason: ProcessTerminalReason::Exited,
        }
    }
}

/// The child's runtime: two worker threads.
pub(crate) fn child_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// The child's start: restores the fixed session from `journal`, registers its loop
/// seeded with what was left pending, and spawns a notifier that keeps notifying (a
/// full inbox: the same notification again, its frame is journaled). The session and
/// the loop's consumer.
pub(crate) async fn restored_with_a_notifier<J>(
    fixed: Fixed,
    journal: J,
) -> (Session, SessionConsumer)
where
    J: JournalBackend + Clone + 'static,
{
    let mut report = restore(fixed.session, &journal).await.unwrap();
    let session = Session::new(fixed.session, journal);
    let consumer = session
        .register_loop(
            LoopConfig::new(fixed.session, fixed.loop_id).seed(report.take_pending(fixed.loop_id)),
        )
        .unwrap();
    let notifier = session.clone();
    tokio::spawn(async move {
        loop {
            let n = fixed.notification(CommandId::new());
            while let Err(NotifyError::DeliveryStopped { .. }) =
                notifier.notify_process_completion(n.clone()).await
            {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        }
    });
    (session, consumer)
}

/// The child says it acknowledged `id` (past the harness's capture).
pub(crate) fn say_acked(id: u128) {
    kill::say(&format!("{ACK}{id}")).unwrap();
}

/// Runs `kills` children (the test `child`, with `env`), each killed after a random
/// number (1 to 12) of acknowledgements drawn from `seed`; the IDs they acknowledged.
/// Every kill must land mid-work: the child acknowledged that many, was still running
/// when killed and died of the SIGKILL (a child that panicked or hung fails the test,
/// never counts as a kill).
pub(crate) fn kill_rounds(
    child: &str,
    env: [(&str, &str); 2],
    kills: u64,
    seed: &mut u64,
) -> HashSet<u128> {
    let mut acked = HashSet::new();
    let mut after_wanted = 0;
    for round in 0..kills {
        let wanted = 1 + next(seed) % 12;
        let killed = kill::run_and_kill_mid_work(child, env, &[ACK], wanted)
            .unwrap_or_else(|e| panic!("round {round}: {e}"));
        after_wanted += killed.lines.len() - killed.before_kill;
        for line in killed.lines {
            acked.insert(line[ACK.len()..].parse::<u128>().unwrap());
        }
    }
    eprintln!(
        "{kills} kills, each while running, after 1 to 12 acknowledgements; \
         {after_wanted} acknowledgements came between the wanted one and the kill"
    );
    acked
}

/// The final phase: what restore hands back is exactly what the journal records as
/// notified and not consumed (no notification the kills left pending is lost, none is
/// handed back twice). A session (no notifier) whose loop is seeded with it, its
/// consumer, how many to drain, and the notifications journaled.
pub(crate) async fn restored_for_the_final_drain<J>(
    fixed: Fixed,
    journal: J,
) -> (Session, SessionConsumer, usize, HashSet<u128>)
where
    J: JournalBackend + Clone + 'static,
{
    let (notified, consumed) = journaled(&journal, fixed.session).await;
    assert!(
        consumed.is_subset(&notified),
        "a consumption of nothing notified"
    );
    let mut report = restore(fixed.session, &journal).await.unwrap();
    let pending = report.take_pending(fixed.loop_id);
    assert!(report.pending.is_empty(), "pending on another loop");
    let handed: HashSet<u128> = pending
        .iter()
        .map(|n| n.command_id().as_uuid().as_u128())
        .collect();
    assert_eq!(handed.len(), pending.len(), "restore hands one back twice");
    let left: HashSet<u128> = notified.difference(&consumed).copied().collect();
    assert_eq!(
        handed, left,
        "restore's pending must be exactly journaled - consumed"
    );
    let n = pending.len();
    let session = Session::new(fixed.session, journal);
    let consumer = session
        .register_loop(LoopConfig::new(fixed.session, fixed.loop_id).seed(pending))
        .unwrap();
    eprintln!(
        "final phase: {} journaled, {} consumed, {n} left pending, drained",
        notified.len(),
        consumed.len()
    );
    (session, consumer, n, notified)
}

/// After the final drain: nothing is pending, and the application's rows are exactly
/// the journaled notifications, one each.
pub(crate) async fn assert_drained_to_one_row_each(
    journal: &impl JournalRead,
    fixed: Fixed,
    notified: &HashSet<u128>,
    rows: &[u128],
) {
    let report = restore(fixed.session, journal).await.unwrap();
    assert_eq!(report.pending_count(), 0, "pending after the drain");
    let (_, consumed) = journaled(journal, fixed.session).await;
    assert_eq!(&consumed, notified, "consumed after the drain");
    let counts = counts(rows);
    let twice: Vec<_> = counts.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "rows written twice: {twice:?}");
    let with_rows: HashSet<u128> = counts.keys().copied().collect();
    assert_eq!(
        &with_rows, notified,
        "rows and journaled notifications differ"
    );
}

/// What the journal records of `session`: the notifications journaled, and those
/// consumed (none twice).
pub(crate) async fn journaled(
    journal: &(impl JournalRead + ?Sized),
    session: SessionId,
) -> (HashSet<u128>, HashSet<u128>) {
    let mut notified = HashSet::new();
    let mut consumed = HashSet::new();
    for (_, record) in replay_all(journal, session).await.unwrap() {
        match record {
            JournalRecord::Command(n) => {
                notified.insert(n.command_id().as_uuid().as_u128());
            }
            JournalRecord::Event(SessionEvent::NotificationConsumed(c)) => {
                assert!(
                    consumed.insert(c.cause().as_uuid().as_u128()),
                    "consumed twice in the journal"
                );
            }
            _ => {}
        }
    }
    (notified, consumed)
}

/// Counts each command ID's rows.
pub(crate) fn counts(rows: &[u128]) -> HashMap<u128, usize> {
    let mut counts = HashMap::new();
    for id in rows {
        *counts.entry(*id).or_insert(0) += 1;
    }
    counts
}

/// Effectively once: no command has two rows, the commands with rows are exactly
/// those consumed, every acknowledged one is consumed, and some were.
pub(crate) fn assert_exactly_once(acked: &HashSet<u128>, consumed: &HashSet<u128>, rows: &[u128]) {
    let counts = counts(rows);
    let twice: Vec<_> = counts.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "rows written twice: {twice:?}");
    let with_rows: HashSet<u128> = counts.keys().copied().collect();
    assert_eq!(&with_rows, consumed, "rows and consumptions differ");
    assert!(
        acked.is_subset(consumed),
        "an acknowledged notification is not consumed"
    );
    assert!(!consumed.is_empty());
}

/// At least once: every consumption has its row and every acknowledged one is
/// consumed. The number of duplicate rows (what at-least-once allows).
pub(crate) fn at_least_once(
    acked: &HashSet<u128>,
    consumed: &HashSet<u128>,
    rows: &[u128],
) -> usize {
    let counts = counts(rows);
    assert!(consumed.iter().all(|id| counts.contains_key(id)));
    assert!(acked.is_subset(consumed));
    counts.values().map(|n| n - 1).sum()
}
