//! The session fixtures and consumer helpers do what their docs say.

// Tests unwrap freely, helpers included: a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;

use notify_journal::JournalRead;
use notify_testkit::MemoryJournal;
use notify_testkit::fixture::{self, FixtureBuilder, FixtureError, SessionFixture};
use notify_types::{Notified, NotifyError, ProcessNotification, StopCause};

#[tokio::test]
async fn a_journaled_fixture_registers_every_loop_and_journals() {
    let journal = MemoryJournal::new();
    let mut fx = SessionFixture::new(Arc::new(journal.clone()), 3).unwrap();
    assert_eq!(fx.loop_ids.len(), 3);
    assert_eq!(fx.consumers.len(), 3);
    let mut registered = fx.session.loops();
    registered.sort();
    let mut ids = fx.loop_ids.clone();
    ids.sort();
    assert_eq!(registered, ids);
    for (i, consumer) in fx.consumers.iter().enumerate() {
        assert_eq!(consumer.loop_id(), fx.loop_ids[i]);
    }

    let n = fx.notification(2);
    assert_eq!(n.loop_id, fx.loop_ids[2]);
    assert_eq!(
        fx.session
            .notify_process_completion(n.clone())
            .await
            .unwrap(),
        Notified::Accepted
    );
    assert_eq!(journal.last_seq(fx.session_id()).await.unwrap(), 1);
    let loop_id = fx.loop_ids[2];
    let got = fixture::ack_next(fx.consumer(loop_id).unwrap(), 1)
        .await
        .unwrap();
    assert_eq!(got[0].notification(), &n);
    assert_eq!(
        journal.last_seq(fx.session_id()).await.unwrap(),
        2,
        "the ack is journaled"
    );
}

#[tokio::test]
async fn the_builder_sets_capacity_and_a_headless_session_has_no_journal() {
    let fx = FixtureBuilder::new(1).capacity(1).build().unwrap();
    assert!(fx.session.journal().is_none());
    let first = fx.notification(0);
    let second = fx.notification(0);
    assert_eq!(
        fx.session.notify_process_completion(first).await.unwrap(),
        Notified::Accepted
    );
    assert!(matches!(
        fx.session.notify_process_completion(second).await,
        Err(NotifyError::DeliveryStopped {
            cause: StopCause::Full,
            ..
        })
    ));
}

#[tokio::test]
async fn repeated_loop_ids_are_a_register_error() {
    let fx = SessionFixture::headless(1).unwrap();
    let again = FixtureBuilder::new(0)
        .loop_ids(vec![fx.loop_ids[0], fx.loop_ids[0]])
        .build();
    assert!(matches!(again, Err(FixtureError::Register(_))));
}

#[tokio::test]
async fn a_foreign_loop_answers_unsupported() {
    let fx = SessionFixture::headless(1).unwrap();
    let foreign = fixture::foreign_loop(&fx.session).unwrap();
    let mut n = fx.notification(0);
    n.loop_id = foreign;
    assert!(matches!(
        fx.session.notify_process_completion(n).await,
        Err(NotifyError::Unsupported { loop_id }) if loop_id == foreign
    ));
}

#[tokio::test]
async fn recv_n_holds_without_acking_and_drain_acks_until_exit() {
    let mut fx = SessionFixture::headless(1).unwrap();
    let sent: Vec<_> = (0..3).map(|_| fx.notification(0)).collect();
    for n in &sent {
        fx.session
            .notify_process_completion(n.clone())
            .await
            .unwrap();
    }
    let held = fixture::recv_n(&mut fx.consumers[0], 2).await.unwrap();
    let held_ids: Vec<_> = held.iter().map(|r| r.command_id()).collect();
    assert_eq!(held_ids, vec![sent[0].command_id, sent[1].command_id]);
    drop(held); // handed back, in order

    fx.session.shutdown_loop(fx.loop_ids[0]).await;
    let drained = fixture::drain_acking(&mut fx.consumers[0]).await.unwrap();
    let drained: Vec<_> = drained
        .iter()
        .map(ProcessNotification::command_id)
        .collect();
    let sent: Vec<_> = sent.iter().map(|n| n.command_id).collect();
    assert_eq!(drained, sent);
}

#[tokio::test]
async fn asking_for_more_than_an_exiting_loop_holds_is_loop_exited() {
    let mut fx = SessionFixture::headless(1).unwrap();
    fx.session
        .notify_process_completion(fx.notification(0))
        .await
        .unwrap();
    fx.session.shutdown_loop(fx.loop_ids[0]).await;
    let err = fixture::ack_next(&mut fx.consumers[0], 2)
        .await
        .unwrap_err();
    assert!(matches!(
        err,
        FixtureError::LoopExited {
            received: 1,
            wanted: 2,
            ..
        }
    ));
}

#[tokio::test]
async fn restart_seeds_each_loop_with_its_pending_notifications() {
    let journal = MemoryJournal::new();
    let fx = SessionFixture::new(Arc::new(journal.clone()), 2).unwrap();
    let a = fx.notification(0);
    let b = fx.notification(1);
    for n in [&a, &b] {
        fx.session
            .notify_process_completion(n.clone())
            .await
            .unwrap();
    }
    let (session_id, loop_ids) = (fx.session_id(), fx.loop_ids.clone());
    drop(fx);

    let builder = FixtureBuilder::new(0).loop_ids(loop_ids.clone());
    let (mut fx, report) = fixture::restart(session_id, Arc::new(journal), builder)
        .await
        .unwrap();
    assert_eq!(fx.session_id(), session_id);
    assert_eq!(
        report.pending_count(),
        2,
        "the report keeps its pending set"
    );
    for (i, n) in [&a, &b].into_iter().enumerate() {
        let got = fixture::ack_next(&mut fx.consumers[i], 1).await.unwrap();
        assert_eq!(got[0].notification(), n);
    }
}
