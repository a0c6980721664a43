//! How a consumer gets a process's exit code for a completion: the completion carries
//! only the state/reason pair, `completed_event` finds the `ProcessCompleted` event that
//! goes with it.

// clippy.toml's allow-*-in-tests covers `#[test]` fns only; the helpers here are test
// code too.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use notify_session::prelude::*;
use notify_testkit::MemoryJournal;

struct Setup {
    journal: MemoryJournal,
    session: Session,
    loop_id: LoopId,
    inbox: SessionConsumer,
}

fn setup() -> Setup {
    let journal = MemoryJournal::new();
    let session = Session::new(SessionId::new(), journal.clone());
    let loop_id = LoopId::new();
    let inbox = session
        .register_loop(LoopConfig::new(session.id(), loop_id))
        .unwrap();
    Setup {
        journal,
        session,
        loop_id,
        inbox,
    }
}

/// Runs `sh -c script` under `handle`, receives its completion, and returns the
/// completion and the exit code `completed_event` finds for it.
async fn run(s: &mut Setup, handle: &str, script: &str) -> (ProcessNotification, Option<i32>) {
    let outcome = Supervisor::new(s.session.clone(), s.loop_id)
        .spawn(ProcessSpec::new(handle, "sh").arg("-c").arg(script))
        .unwrap()
        .wait()
        .await
        .unwrap();
    assert_eq!(outcome.delivery.unwrap(), Notified::Accepted);
    let received = s.inbox.recv().await.unwrap();
    let command = received.notification().clone();
    let event = completed_event(&s.journal, command.notification())
        .await
        .unwrap()
        .expect("a supervised completion has its ProcessCompleted");
    assert_eq!(event.kind, ProcessLifecycleKind::Completed);
    assert_eq!(event.process_handle, handle);
    assert_eq!(event.state, command.notification().state);
    // The supervisor's own outcome agrees with what the consumer finds.
    assert_eq!(event.exit_code, outcome.exit_code);
    received.ack().await.unwrap();
    (command, event.exit_code)
}

#[tokio::test]
async fn success_and_failure_complete_alike_and_differ_in_the_exit_code() {
    let mut s = setup();
    for (handle, script, code) in [
        ("true", "exit 0", 0),
        ("false", "exit 1", 1),
        ("three", "exit 3", 3),
    ] {
        let (command, exit_code) = run(&mut s, handle, script).await;
        let n = command.notification();
        assert_eq!(
            (n.state, n.reason),
            (ProcessLifecycleState::Exited, ProcessTerminalReason::Exited),
            "{handle}"
        );
        assert_eq!(exit_code, Some(code), "{handle}");
    }
}

#[tokio::test]
async fn a_reused_handle_finds_each_incarnations_own_exit_code() {
    let mut s = setup();
    let (first, first_code) = run(&mut s, "build", "exit 2").await;
    let (second, second_code) = run(&mut s, "build", "exit 5").await;
    assert_eq!((first_code, second_code), (Some(2), Some(5)));
    // Asked again later, each still finds its own.
    let again = completed_event(&s.journal, first.notification())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(again.exit_code, Some(2));
    let again = completed_event(&s.journal, second.notification())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(again.exit_code, Some(5));
}

#[tokio::test]
async fn no_event_is_none_not_a_neighbours_event() {
    let mut s = setup();
    // A completion published without a supervisor: no ProcessCompleted follows it.
    let bare = ProcessCompletionNotification {
        command_id: CommandId::new(),
        session_id: s.session.id(),
        loop_id: s.loop_id,
        process_handle: "build".into(),
        state: ProcessLifecycleState::Exited,
        reason: ProcessTerminalReason::Exited,
    };
    s.session
        .notify_process_completion(bare.clone())
        .await
        .unwrap();
    s.inbox.recv().await.unwrap().ack().await.unwrap();
    // A later process under the same handle completes with its own event.
    let (_, code) = run(&mut s, "build", "exit 4").await;
    assert_eq!(code, Some(4));
    assert_eq!(completed_event(&s.journal, &bare).await.unwrap(), None);

    // A completion that was never journaled has no event either.
    let unknown = ProcessCompletionNotification {
        command_id: CommandId::new(),
        ..bare
    };
    assert_eq!(completed_event(&s.journal, &unknown).await.unwrap(), None);
}
