//! An end raced by others: notifications sent while the session ends are recorded or
//! refused, and notifications another handle of the session appends while it ends are
//! abandoned too, or reported, never dropped silently.

// Tests unwrap freely, helpers included: a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod end_support;

use std::collections::HashSet;
use std::sync::Arc;

use end_support::hooked::{BeforeAppend, Hooked};
use end_support::{assert_ended, end_abandoning, kinds, one_loop};
use notify_journal::{JournalBackend, replay_all};
use notify_session::IfPending;
use notify_testkit::MemoryJournal;
use notify_testkit::sample::notification;
use notify_types::{CommandId, JournalRecord, LoopId, NotifyError, SessionEvent, SessionId};

/// Notifications racing the end: each is either taken before the end (then it is
/// consumed or abandoned on the record) or refused as `SessionEnded` — none is
/// journaled and left unrecorded.
///
/// The race is made to happen, and checked: a stream of notifications, one after
/// another, runs from before `end` is called until one is refused, beside 64 sent at
/// once; every journal call takes a millisecond, so calls are in flight while the end
/// runs. A round counts as a race when some notification was decided while `end` was
/// running (called before `end` returned, answered after it was called); rounds are
/// repeated (at most 20) until one is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notifications_racing_the_end_are_recorded_or_refused() {
    let mut raced = Vec::new();
    for _ in 0..20 {
        let n = race_the_end().await;
        raced.push(n);
        if n > 0 {
            break;
        }
    }
    eprintln!("notifications decided while the end ran, by round: {raced:?}");
    assert!(
        raced.last().is_some_and(|n| *n > 0),
        "no notification was decided while the end ran, in {} rounds: the race never \
         happened",
        raced.len()
    );
}

/// One round of [`notifications_racing_the_end_are_recorded_or_refused`]; returns how
/// many notifications were decided while `end` ran.
async fn race_the_end() -> usize {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
    let journal = MemoryJournal::new();
    let faulty = notify_testkit::FaultyJournal::new(journal.clone());
    faulty
        .control()
        .set_latency(std::time::Duration::from_millis(1));
    let (session, loop_id, _consumer) = one_loop(Arc::new(faulty));
    let end_called = Arc::new(AtomicBool::new(false));
    let end_returned = Arc::new(AtomicBool::new(false));
    let taken = Arc::new(AtomicUsize::new(0));
    // One notification: its ID, its answer, and whether it was decided while the end
    // ran.
    let send = {
        let (session, end_called, end_returned, taken) = (
            session.clone(),
            Arc::clone(&end_called),
            Arc::clone(&end_returned),
            Arc::clone(&taken),
        );
        move || {
            let (session, end_called, end_returned, taken) = (
                session.clone(),
                Arc::clone(&end_called),
                Arc::clone(&end_returned),
                Arc::clone(&taken),
            );
            async move {
                let n = notification(session.id(), loop_id);
                let id = n.command_id;
                let before_return = !end_returned.load(SeqCst);
                let answer = session.notify_process_completion(n).await;
                let during = before_return && end_called.load(SeqCst);
                if !matches!(answer, Err(NotifyError::SessionEnded { .. })) {
                    taken.fetch_add(1, SeqCst);
                }
                (id, answer, during)
            }
        }
    };
    let stream = tokio::spawn({
        let send = send.clone();
        async move {
            let mut answers = Vec::new();
            // Bounded: the end comes within a few journal calls.
            for _ in 0..100_000 {
                let answer = send().await;
                let refused = matches!(answer.1, Err(NotifyError::SessionEnded { .. }));
                answers.push(answer);
                if refused {
                    break;
                }
            }
            answers
        }
    });
    let burst: Vec<_> = (0..64).map(|_| tokio::spawn(send())).collect();
    // The stream is under way (something was taken) before the end is called.
    while taken.load(SeqCst) == 0 {
        tokio::task::yield_now().await;
    }
    end_called.store(true, SeqCst);
    let ended = session.end(IfPending::Abandon).await.unwrap();
    end_returned.store(true, SeqCst);

    let mut answers = stream.await.unwrap();
    assert!(
        matches!(
            answers.last(),
            Some((_, Err(NotifyError::SessionEnded { .. }), _))
        ),
        "the stream ended unrefused"
    );
    for task in burst {
        answers.push(task.await.unwrap());
    }
    let mut accepted: HashSet<CommandId> = HashSet::new();
    let mut refused = 0;
    let mut during = 0;
    for (id, answer, decided_during) in answers {
        during += usize::from(decided_during);
        match answer {
            Ok(_) => {
                accepted.insert(id);
            }
            // Appended before the end, the loop full: journaled, so abandoned.
            Err(NotifyError::DeliveryStopped {
                cause: notify_types::StopCause::Full,
                ..
            }) => {
                accepted.insert(id);
            }
            Err(e) => {
                assert_ended(&e, session.id(), false);
                refused += 1;
            }
        }
    }
    assert!(!accepted.is_empty() && refused > 0);
    let frames = replay_all(&journal, session.id()).await.unwrap();
    let mut commands = HashSet::new();
    let mut abandoned = HashSet::new();
    for (_, record) in &frames {
        match record {
            JournalRecord::Command(c) => {
                commands.insert(c.command_id());
            }
            JournalRecord::Event(SessionEvent::NotificationAbandoned(a)) => {
                abandoned.insert(a.cause());
            }
            _ => {}
        }
    }
    assert_eq!(commands, accepted, "journaled = taken before the end");
    assert_eq!(abandoned, commands, "every journaled one is abandoned");
    assert_eq!(ended.abandoned.len(), commands.len());
    assert!(matches!(
        frames.last(),
        Some((_, JournalRecord::Event(SessionEvent::SessionEnded(_))))
    ));
    during
}

/// Another handle of the session (another process, in effect): a hook that, just
/// before an append of kind `on` is forwarded, appends the next of `foreign` itself
/// (one each time, while any is left).
struct Interloper {
    on: &'static str,
    foreign: std::sync::Mutex<std::collections::VecDeque<JournalRecord>>,
}

impl BeforeAppend for Interloper {
    /// The next foreign record, if the append holds one of kind `on` and any is left.
    type Due = Option<JournalRecord>;

    fn due(&self, records: &[JournalRecord]) -> Option<JournalRecord> {
        if records.iter().any(|r| r.type_name() == self.on) {
            self.foreign.lock().unwrap().pop_front()
        } else {
            None
        }
    }

    async fn run(
        &self,
        journal: &MemoryJournal,
        session: SessionId,
        _: &[JournalRecord],
        foreign: Option<JournalRecord>,
    ) {
        if let Some(foreign) = foreign {
            journal.append(session, foreign).await.unwrap();
        }
    }
}

/// Ends a session with one pending notification while "another handle" appends
/// `foreign` notifications, one just before each append of kind `on`; answers the end,
/// the foreign notifications' command IDs and the journal.
async fn end_with_interloper(
    on: &'static str,
    foreign: usize,
) -> (notify_session::Ended, Vec<CommandId>, MemoryJournal) {
    let memory = MemoryJournal::new();
    let (session_id, loop_id) = (SessionId::new(), LoopId::new());
    let foreign: Vec<_> = (0..foreign)
        .map(|_| notification(session_id, loop_id))
        .collect();
    let journal = Hooked {
        journal: memory.clone(),
        hook: Interloper {
            on,
            foreign: std::sync::Mutex::new(
                foreign
                    .iter()
                    .map(|n| JournalRecord::Command(n.clone().into()))
                    .collect(),
            ),
        },
    };
    let ended = end_abandoning(journal, notification(session_id, loop_id)).await;
    (
        ended,
        foreign.iter().map(|n| n.command_id).collect(),
        memory,
    )
}

/// A notification another handle appends while this end is abandoning is found by the
/// next reading and abandoned too.
#[tokio::test]
async fn a_notification_appended_while_abandoning_is_abandoned_too() {
    let (ended, foreign, _) = end_with_interloper("NotificationAbandoned", 1).await;
    assert!(ended.abandoned.contains(&foreign[0]), "{ended:?}");
    assert_eq!(ended.abandoned.len(), 2);
    assert!(ended.unresolved.is_empty());
}

/// One appended after the reading, just before the group of abandonments and marker,
/// moves the session's head: the group, conditional on the head the end read, writes
/// nothing, and the next reading abandons that one too.
/// (While the abandonments and the marker were appended one by one, this notification
/// was reported unresolved: journaled, neither consumed nor abandoned.)
#[tokio::test]
async fn a_notification_appended_just_before_the_marker_is_abandoned_too() {
    let (ended, foreign, journal) = end_with_interloper("SessionEnded", 1).await;
    assert!(ended.unresolved.is_empty(), "{ended:?}");
    assert!(ended.abandoned.contains(&foreign[0]), "{ended:?}");
    let kinds = kinds(&journal, ended.session_id).await;
    assert_eq!(
        kinds,
        [
            "ProcessNotification",
            "ProcessNotification",
            "NotificationAbandoned",
            "NotificationAbandoned",
            "SessionEnded"
        ]
    );
}

/// Another handle that appends again during every round of abandoning cannot hold the
/// end off: after its last reading the end goes, and what is still pending is
/// reported, never dropped silently.
#[tokio::test]
async fn an_end_raced_by_endless_appends_reports_what_it_could_not_abandon() {
    let (ended, foreign, journal) = end_with_interloper("NotificationAbandoned", 100).await;
    // Every appended notification is either abandoned or reported.
    let frames = replay_all(&journal, ended.session_id).await.unwrap();
    let commands: Vec<CommandId> = frames
        .iter()
        .filter_map(|(_, r)| match r {
            JournalRecord::Command(c) => Some(c.command_id()),
            _ => None,
        })
        .collect();
    assert!(!ended.unresolved.is_empty(), "{ended:?}");
    assert!(ended.abandoned.len() < 100);
    for id in &commands {
        assert!(
            ended.abandoned.contains(id) ^ ended.unresolved.contains(id),
            "{id} is neither abandoned nor reported (or both): {ended:?}"
        );
    }
    assert!(
        foreign
            .iter()
            .take(ended.abandoned.len())
            .all(|id| commands.contains(id))
    );
}
