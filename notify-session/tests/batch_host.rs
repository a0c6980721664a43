//! Batch acknowledgements of a session a host runtime serves, over a real redb file:
//! once the host released the session, a batch (plain or transactional) answers
//! `NotOwner` and commits nothing; every notification of it is handed back, and the
//! session's next owner finds them all pending.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod host_support;

use std::sync::Arc;

use host_support::{OneLoop, Seen, next_seen, notification, start_host};
use notify_journal::{AppTableError, RedbJournal, RedbOptions};
use notify_loop::LoopConfig;
use notify_session::{AckError, Session, TxAckError, restore};
use notify_types::{LoopId, SessionId};

#[tokio::test]
async fn a_batch_after_the_host_released_the_session_is_not_owner_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let journal = Arc::new(
        RedbJournal::open(dir.path().join("notify.redb"), RedbOptions::default()).unwrap(),
    );
    let loop_id = LoopId::new();
    let id = {
        let session = Session::new(SessionId::new(), Arc::clone(&journal));
        let _consumer = session
            .register_loop(LoopConfig::new(session.id(), loop_id))
            .unwrap();
        for _ in 0..4 {
            session
                .notify_process_completion(notification(session.id(), loop_id))
                .await
                .unwrap();
        }
        session.id()
    };
    let (app, mut seen) = OneLoop::new(loop_id);
    let host = start_host(Arc::clone(&journal), |h| h.app(app)).await;
    let Seen::Started { mut consumer, .. } = next_seen(&mut seen).await else {
        panic!("expected the adoption's start");
    };
    let mut batch = consumer.recv_many(4).await;
    assert_eq!(batch.len(), 4);
    let second = batch.split_off(2);
    host.release(id).await.unwrap();

    let refused = batch.ack().await.unwrap_err();
    assert!(
        matches!(&refused.error, AckError::NotOwner { session_id, .. } if *session_id == id),
        "{refused:?}"
    );
    assert_eq!(refused.returned.len(), 2);
    assert!(refused.acknowledged.is_empty());

    let refused = second
        .ack_with(&journal, |t, _| {
            t.open_table::<u128, &str>("app/conversation")?
                .insert(1, "build-42 exited")?;
            Ok(())
        })
        .await
        .unwrap_err();
    assert!(
        matches!(&refused.error, TxAckError::Ack(AckError::NotOwner { .. })),
        "{refused:?}"
    );
    assert_eq!(refused.returned.len(), 2);
    let rows = journal
        .read_app_tables(|t| match t.open_table::<u128, &str>("app/conversation")? {
            Some(table) => table.len(),
            None => Ok::<_, AppTableError>(0),
        })
        .unwrap();
    assert_eq!(rows, 0, "the application's write did not run");
    let report = restore(id, journal.as_ref()).await.unwrap();
    assert_eq!(report.pending_count(), 4, "nothing acknowledged");
    host.shutdown().await.unwrap();
}
