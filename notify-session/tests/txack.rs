//! The transactional acknowledgement through the session (`SessionReceived::ack_with`
//! on redb): after the commit the loop releases the notification and restore never
//! hands it back; after a rollback nothing is acknowledged, the notification is handed
//! to the consumer again, and after a restart restore hands it back.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use notify_journal::{AppTableError, RedbJournal, RedbOptions};
use notify_loop::LoopConfig;
use notify_session::{Session, TxAckError, restore};
use notify_types::{
    CommandId, LoopId, Notified, ProcessCompletionNotification, ProcessLifecycleState,
    ProcessTerminalReason, SessionEvent, SessionId,
};

fn notification(s: SessionId, l: LoopId) -> ProcessCompletionNotification {
    ProcessCompletionNotification {
        command_id: CommandId::new(),
        session_id: s,
        loop_id: l,
        process_handle: "build-42".into(),
        state: ProcessLifecycleState::Exited,
        reason: ProcessTerminalReason::Exited,
    }
}

fn rows(journal: &RedbJournal) -> u64 {
    journal
        .read_app_tables(|t| match t.open_table::<u128, &str>("app/conversation")? {
            Some(table) => table.len(),
            None => Ok::<_, AppTableError>(0),
        })
        .unwrap()
}

#[tokio::test]
async fn a_rolled_back_ack_keeps_the_notification_and_a_committed_one_releases_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("notify.redb");
    let journal = RedbJournal::open(&path, RedbOptions::default()).unwrap();
    let session = Session::new(SessionId::new(), journal.clone());
    let loop_id = LoopId::new();
    let mut consumer = session
        .register_loop(LoopConfig::new(session.id(), loop_id))
        .unwrap();
    let mut events = session.subscribe();
    let a = notification(session.id(), loop_id);
    let b = notification(session.id(), loop_id);
    for n in [&a, &b] {
        assert_eq!(
            session.notify_process_completion(n.clone()).await.unwrap(),
            Notified::Accepted
        );
    }

    // Rolled back: an error, nothing written, handed again (at the front).
    let received = consumer.recv().await.unwrap();
    assert_eq!(received.command_id(), a.command_id);
    let failed = received
        .ack_with(&journal, |t| {
            let mut rows = t.open_table::<u128, &str>("app/conversation")?;
            rows.insert(1, "build-42 exited")?;
            Err("the conversation store refused".into())
        })
        .await;
    assert!(matches!(failed, Err(TxAckError::Write(_))), "{failed:?}");
    assert_eq!(rows(&journal), 0);
    let received = consumer.recv().await.unwrap();
    assert_eq!(received.command_id(), a.command_id, "handed again");

    // Committed: the row, the consumption, the event, the release.
    let id = a.command_id.as_uuid().as_u128();
    received
        .ack_with(&journal, move |t| {
            let mut rows = t.open_table::<u128, &str>("app/conversation")?;
            rows.insert(id, "build-42 exited")?;
            Ok(())
        })
        .await
        .unwrap();
    assert_eq!(rows(&journal), 1);
    assert!(matches!(
        events.recv().await.unwrap(),
        SessionEvent::NotificationConsumed(c) if c.cause() == a.command_id
    ));
    let next = consumer.recv().await.unwrap();
    assert_eq!(next.command_id(), b.command_id, "a released, b next");

    // b's ack rolls back, then the process "crashes": restore hands back b alone.
    let failed = next.ack_with(&journal, |_| Err("refused".into())).await;
    assert!(failed.is_err());
    let session_id = session.id();
    drop((session, consumer));
    let report = restore(session_id, &journal).await.unwrap();
    let pending: Vec<CommandId> = report.pending[&loop_id]
        .iter()
        .map(|n| n.command_id())
        .collect();
    assert_eq!(pending, vec![b.command_id]);
    drop(journal);
    let reopened = RedbJournal::open(&path, RedbOptions::default()).unwrap();
    assert_eq!(rows(&reopened), 1, "the committed row survives the restart");
}
