//! The system under test: a session over a real redb journal file, and the helpers
//! that drive it while asking the model what it should answer.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::Arc;

use notify_journal::{JournalBackend, RedbJournal, RedbOptions};
use notify_session::{AckError, DeclareLostError, PublishError, SessionReceived, StoppedDelivery};
use notify_testkit::MemoryJournal;
use notify_testkit::fixture::{self, FixtureBuilder, SessionFixture};
use notify_testkit::sample;
use notify_types::{
    CommandId, LoopId, Notified, ProcessCompletionNotification, ProcessLifecycleKind,
    ProcessLifecycleMetadata, ProcessLifecycleState, ProcessTerminalReason, SessionEvent,
    StopCause, lost_command_id, lost_event_id,
};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use tokio::sync::broadcast;

use crate::check::check_report;
use crate::reference::{Model, Outcome};
use crate::{CAPACITY, LOOPS};

/// Where the journal lives, so a crash can reopen it.
pub(crate) enum Store {
    /// A redb file: what the test runs on.
    Redb { path: PathBuf, options: RedbOptions },
    /// The testkit's in-memory journal (`NOTIFY_MODEL_JOURNAL=memory`); a crash drops
    /// every handle but this one.
    Memory(MemoryJournal),
}

impl Store {
    /// The journal, and on redb its concrete handle too (for the transactional ack;
    /// both share one open file).
    pub(crate) fn open(&self) -> (Arc<dyn JournalBackend>, Option<RedbJournal>) {
        match self {
            Self::Redb { path, options } => {
                let journal = RedbJournal::open(path, options.clone()).unwrap();
                (Arc::new(journal.clone()), Some(journal))
            }
            Self::Memory(journal) => (Arc::new(journal.clone()), None),
        }
    }
}

pub(crate) struct Real {
    pub(crate) store: Store,
    /// `None` only in the middle of a crash.
    pub(crate) journal: Option<Arc<dyn JournalBackend>>,
    pub(crate) fx: SessionFixture,
    pub(crate) held: Vec<Option<SessionReceived>>,
    pub(crate) events: broadcast::Receiver<SessionEvent>,
    pub(crate) foreign: LoopId,
    /// The orphans of the last restore (empty before the first crash).
    pub(crate) orphans: Vec<ProcessLifecycleMetadata>,
    /// Every command ID ever acknowledged, for the "never redelivered" check.
    pub(crate) acked: HashSet<CommandId>,
    /// Another session in the same journal file (the model counts its frames).
    pub(crate) neighbour: Option<SessionFixture>,
    /// The redb handle of `journal` (`None` on the in-memory journal or mid-crash).
    pub(crate) redb: Option<RedbJournal>,
    /// Every command ID acknowledged transactionally: the application table's rows.
    pub(crate) tx_rows: HashSet<CommandId>,
}

impl Real {
    /// A fresh session with `LOOPS` native loops (and a foreign one) over `store`.
    pub(crate) fn new(store: Store) -> Self {
        let (journal, redb) = store.open();
        let fx = session(&journal);
        Self {
            store,
            journal: Some(journal),
            events: fx.session.subscribe(),
            foreign: fixture::foreign_loop(&fx.session).unwrap(),
            fx,
            held: (0..LOOPS).map(|_| None).collect(),
            orphans: Vec::new(),
            acked: HashSet::new(),
            neighbour: None,
            redb,
            tx_rows: HashSet::new(),
        }
    }

    pub(crate) fn journal(&self) -> &dyn JournalBackend {
        self.journal.as_deref().unwrap()
    }

    pub(crate) fn shared_journal(&self) -> Arc<dyn JournalBackend> {
        Arc::clone(self.journal.as_ref().unwrap())
    }

    /// Replaces the session with a fresh one over the same journal; the old one's
    /// handle, consumers and held notifications are dropped.
    pub(crate) fn renew(&mut self) {
        self.held.iter_mut().for_each(|h| drop(h.take()));
        let fx = session(self.journal.as_ref().unwrap());
        self.foreign = fixture::foreign_loop(&fx.session).unwrap();
        self.events = fx.session.subscribe();
        self.fx = fx;
        self.orphans.clear();
    }
}

/// A fresh session over `journal` with `LOOPS` native loops of capacity `CAPACITY`.
fn session(journal: &Arc<dyn JournalBackend>) -> SessionFixture {
    FixtureBuilder::new(LOOPS)
        .capacity(CAPACITY)
        .journal(Arc::clone(journal))
        .build()
        .unwrap()
}

pub(crate) fn fresh(model: &Model, lp: usize, k: usize) -> ProcessCompletionNotification {
    let mut n = sample::notification(model.session_id, model.loop_ids[lp]);
    n.process_handle = format!("cmd-{k}");
    n
}

pub(crate) async fn notify(
    real: &Real,
    model: &mut Model,
    n: ProcessCompletionNotification,
) -> Result<Outcome, TestCaseError> {
    let want = model.notify(&n);
    let got = Outcome::of(&real.fx.session.notify_process_completion(n).await);
    prop_assert_eq!(&got, &want);
    Ok(got)
}

/// Receives from loop `lp`, checking it is the model's next notification and never an
/// acknowledged one. `None` when the model says the receive would wait for ever.
pub(crate) async fn recv(
    real: &mut Real,
    model: &Model,
    lp: usize,
) -> Result<Option<SessionReceived>, TestCaseError> {
    let mloop = &model.loops[lp];
    let want = mloop.next();
    if want.is_none() && !(mloop.closed && mloop.live.is_empty()) {
        return Ok(None);
    }
    let got = real.fx.consumers[lp].recv().await;
    let got_id = got.as_ref().map(SessionReceived::command_id);
    prop_assert_eq!(got_id, want, "receive on loop {}", lp);
    if let Some(id) = got_id {
        prop_assert!(
            !real.acked.contains(&id),
            "acknowledged {id} received again"
        );
        prop_assert_eq!(got.as_ref().unwrap().completion(), &model.commands[&id].0);
    }
    Ok(got)
}

pub(crate) async fn ack(
    real: &mut Real,
    model: &mut Model,
    lp: usize,
    received: SessionReceived,
) -> Result<(), TestCaseError> {
    let id = received.command_id();
    let result = received.ack().await;
    if model.refusal().is_some() {
        // Ended while it was held: abandoned on the record, never consumed.
        prop_assert!(
            matches!(result, Err(AckError::SessionEnded { session_id }) if session_id == model.session_id),
            "ack of {id} after the end: {result:?}"
        );
        if model.loops[lp].held == Some(id) {
            model.loops[lp].held = None;
        }
        return Ok(());
    }
    prop_assert!(result.is_ok(), "ack of {id}: {result:?}");
    real.acked.insert(id);
    model.ack(lp, id);
    Ok(())
}

/// Polls `fut` up to `polls` times (letting other tasks run in between), then drops
/// it; its output if it finished first.
pub(crate) async fn poll_then_drop<F: std::future::Future>(
    fut: F,
    polls: usize,
) -> Option<F::Output> {
    use std::task::Poll;
    let mut fut = std::pin::pin!(fut);
    for _ in 0..polls {
        let polled = std::future::poll_fn(|cx| Poll::Ready(fut.as_mut().poll(cx))).await;
        if let Poll::Ready(out) = polled {
            return Some(out);
        }
        tokio::task::yield_now().await;
    }
    None
}

pub(crate) fn pick_from<T>(items: &[T], pick: usize) -> Option<&T> {
    (!items.is_empty()).then(|| &items[pick % items.len()])
}

pub(crate) async fn publish(
    real: &Real,
    model: &mut Model,
    m: ProcessLifecycleMetadata,
) -> Result<(), TestCaseError> {
    let want = model.publish(&m);
    let got = real.fx.session.publish_lifecycle(m).await;
    let agree = match (&want, &got) {
        (Ok(want), Ok(got)) => want == got,
        (
            Err(purged),
            Err(PublishError::SessionEnded {
                session_id,
                purged: p,
            }),
        ) => *session_id == model.session_id && p == purged,
        _ => false,
    };
    prop_assert!(agree, "publish: got {:?}, want {:?}", got, want);
    Ok(())
}

pub(crate) async fn declare_lost(
    real: &Real,
    model: &mut Model,
    orphan: &ProcessLifecycleMetadata,
) -> Result<(), TestCaseError> {
    let session = model.session_id;
    let handle = &orphan.process_handle;
    let n = ProcessCompletionNotification {
        command_id: lost_command_id(orphan),
        session_id: session,
        loop_id: orphan.loop_id,
        process_handle: handle.clone(),
        state: ProcessLifecycleState::LostOnRestore,
        reason: ProcessTerminalReason::LostOnRestore,
    };
    let completion = model.notify(&n);
    let mut lost = orphan.clone();
    lost.event_id = lost_event_id(orphan);
    lost.kind = ProcessLifecycleKind::Lost;
    // A refused completion ends the declaration before the event.
    let published = match completion {
        Outcome::Accepted | Outcome::Duplicate | Outcome::Full | Outcome::Exited => {
            Some(model.publish(&lost))
        }
        _ => None,
    };
    let want_event = published.and_then(Result::ok);
    let got = real.fx.session.declare_lost(orphan).await;
    match (&completion, &got) {
        (Outcome::Accepted | Outcome::Duplicate, Ok(outcome)) => {
            let d = if completion == Outcome::Accepted {
                Notified::Accepted
            } else {
                Notified::Duplicate
            };
            prop_assert_eq!(&outcome.completion, &Ok(d));
            prop_assert_eq!(Some(outcome.event), want_event);
        }
        (Outcome::Full | Outcome::Exited, Ok(outcome)) => {
            let cause = if completion == Outcome::Full {
                StopCause::Full
            } else {
                StopCause::Exited
            };
            let want = Err(StoppedDelivery {
                loop_id: orphan.loop_id,
                cause,
            });
            prop_assert_eq!(&outcome.completion, &want);
            prop_assert_eq!(Some(outcome.event), want_event);
        }
        // After the end, a completion journaled before it is a duplicate, while its
        // event, never journaled, is refused.
        (
            Outcome::Duplicate,
            Err(DeclareLostError::Publish(PublishError::SessionEnded { session_id, purged })),
        ) => {
            prop_assert_eq!(*session_id, model.session_id);
            prop_assert_eq!(published, Some(Err(*purged)));
        }
        (Outcome::Collision { .. } | Outcome::Ended { .. }, Err(DeclareLostError::Notify(e))) => {
            prop_assert_eq!(Outcome::of(&Err(e.clone())), completion);
        }
        _ => prop_assert!(false, "declare_lost: got {got:?}, model {completion:?}"),
    }
    Ok(())
}

/// Drops everything without shutdown, reopens the file, restores and re-registers.
pub(crate) async fn crash(real: &mut Real, model: &mut Model) -> Result<(), TestCaseError> {
    crash_then(real, model, None).await
}

/// A crash; with `tx`, a transactional ack of `(loop, command)` whose outcome its
/// caller did not see: once the file is reopened, the journal says whether it
/// committed, and the model follows.
pub(crate) async fn crash_then(
    real: &mut Real,
    model: &mut Model,
    tx: Option<(usize, CommandId)>,
) -> Result<(), TestCaseError> {
    let loop_ids = real.fx.loop_ids.clone();
    let session_id = real.fx.session_id();
    // The fixture, the held notifications and the journal handle all go; the last
    // handle's drop releases the file.
    let placeholder = FixtureBuilder::new(0).build().unwrap();
    drop(std::mem::replace(&mut real.fx, placeholder));
    real.held.iter_mut().for_each(|h| drop(h.take()));
    drop(real.neighbour.take());
    drop(real.journal.take());
    drop(real.redb.take());
    let (journal, redb) = real.store.open();
    real.journal = Some(journal.clone());
    real.redb = redb;
    if let Some((lp, id)) = tx {
        let key = *notify_types::consumed_event_id(id).as_uuid();
        if journal.lookup(session_id, key).await.unwrap().is_some() {
            real.acked.insert(id);
            real.tx_rows.insert(id);
            model.ack(lp, id);
        }
    }

    let builder = FixtureBuilder::new(0).loop_ids(loop_ids).capacity(CAPACITY);
    let (fx, report) = fixture::restart(session_id, journal.clone(), builder)
        .await
        .unwrap();
    fx.session.register_foreign_loop(real.foreign).unwrap();
    real.events = fx.session.subscribe();
    real.fx = fx;
    // The new subscriber sees only what is journaled from now on.
    model.checked = model.frames.len();

    check_report(&report, real, model)?;
    let again = notify_session::restore(session_id, journal.as_ref())
        .await
        .unwrap();
    prop_assert_eq!(&again, &report, "restore only reads");
    real.orphans = report.orphans;
    model.restart();
    Ok(())
}
