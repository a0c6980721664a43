//! The host runtime's single-host path: over a real redb file, whose lock makes this
//! process the only writer, a host adopts every live session in the file as it
//! starts (up to its capacity), seeds each from its restore report, and serves it;
//! a transactional acknowledgement after the host released its session answers
//! `NotOwner` and commits nothing (neither the consumption nor the application's rows);
//! the host's polls read no session's state (an ended session's damaged row stops
//! none of them).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod host_support;

use std::sync::Arc;

use host_support::{OneLoop, Seen, adopting_host, next_seen, notification, start_host};
use notify_journal::AppTableError;
use notify_journal::{JournalRead, RedbJournal, RedbOptions, RedbVerifyOnOpen};
use notify_loop::LoopConfig;
use notify_session::{AckError, IfPending, Session, StopReason, TxAckError, restore};
use notify_testkit::tamper;
use notify_types::{LoopId, Notified, SessionId};

/// Writes `n` unacknowledged notifications to a new session through a plain session.
async fn live_session(journal: &Arc<RedbJournal>, loop_id: LoopId, n: usize) -> SessionId {
    let session = Session::new(SessionId::new(), Arc::clone(journal));
    let _consumer = session
        .register_loop(LoopConfig::new(session.id(), loop_id))
        .unwrap();
    for _ in 0..n {
        let answer = session
            .notify_process_completion(notification(session.id(), loop_id))
            .await;
        assert_eq!(answer.unwrap(), Notified::Accepted);
    }
    session.id()
}

#[tokio::test]
async fn a_host_on_a_redb_file_adopts_every_live_session_up_to_its_capacity() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("notify.redb");
    let loop_id = LoopId::new();
    let mut live = Vec::new();
    {
        let journal = Arc::new(RedbJournal::open(&path, RedbOptions::default()).unwrap());
        for n in 1..=3 {
            live.push((live_session(&journal, loop_id, n).await, n));
        }
        let ended = live_session(&journal, loop_id, 1).await;
        let session = Session::new(ended, Arc::clone(&journal));
        session.end(IfPending::Abandon).await.unwrap();
        journal.close();
    }

    // The process restarts: a host on the file adopts the three live sessions as it
    // starts, each seeded with what it left pending; the ended one stays ended.
    let journal = Arc::new(RedbJournal::open(&path, RedbOptions::default()).unwrap());
    let (app, mut seen) = OneLoop::new(loop_id);
    let host = start_host(Arc::clone(&journal), |h| h.app(app)).await;
    let mut started = Vec::new();
    let mut consumers = Vec::new();
    for _ in 0..3 {
        match next_seen(&mut seen).await {
            Seen::Started {
                session,
                seeded,
                consumer,
            } => {
                started.push((session, seeded));
                consumers.push(consumer);
            }
            Seen::Stopped { session, why } => panic!("{session} stopped: {why}"),
        }
    }
    started.sort();
    live.sort();
    assert_eq!(started, live);
    let mut served: Vec<SessionId> = live.iter().map(|(id, _)| *id).collect();
    served.sort();
    assert_eq!(host.sessions(), served);

    // Each is served: the pending ones come back, a new one is accepted.
    for consumer in &mut consumers {
        let received = consumer.recv().await.unwrap();
        received.ack().await.unwrap();
    }
    let (id, _) = live[0];
    let session = host.session(id).unwrap();
    assert_eq!(
        session
            .notify_process_completion(notification(id, loop_id))
            .await
            .unwrap(),
        Notified::Accepted
    );
    host.shutdown().await.unwrap();
    let mut stops = 0;
    while stops < 3 {
        if let Seen::Stopped { why, .. } = next_seen(&mut seen).await {
            assert_eq!(why, StopReason::ShutDown);
            stops += 1;
        }
    }
}

#[tokio::test]
async fn a_host_on_a_redb_file_adopts_no_more_than_its_capacity() {
    let dir = tempfile::tempdir().unwrap();
    let journal =
        Arc::new(RedbJournal::open(dir.path().join("n.redb"), RedbOptions::default()).unwrap());
    let loop_id = LoopId::new();
    for _ in 0..5 {
        live_session(&journal, loop_id, 1).await;
    }
    let host = start_host(Arc::clone(&journal), |h| h.capacity(2)).await;
    assert_eq!(host.sessions().len(), 2);
    assert_eq!(host.status().capacity, 2);
    host.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_transactional_ack_after_the_host_released_the_session_is_not_owner_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let journal = Arc::new(
        RedbJournal::open(dir.path().join("notify.redb"), RedbOptions::default()).unwrap(),
    );
    let loop_id = LoopId::new();
    let id = live_session(&journal, loop_id, 1).await;
    let (app, mut seen) = OneLoop::new(loop_id);
    let host = start_host(Arc::clone(&journal), |h| h.app(app)).await;
    let Seen::Started { mut consumer, .. } = next_seen(&mut seen).await else {
        panic!("expected the adoption's start");
    };
    let received = consumer.recv().await.unwrap();
    host.release(id).await.unwrap();

    let refused = received
        .ack_with(&journal, |t| {
            let mut rows = t.open_table::<u128, &str>("app/conversation")?;
            rows.insert(1, "build-42 exited")?;
            Ok(())
        })
        .await;
    assert!(
        matches!(
            &refused,
            Err(TxAckError::Ack(AckError::NotOwner { session_id, .. })) if *session_id == id
        ),
        "{refused:?}"
    );
    let rows = journal
        .read_app_tables(|t| match t.open_table::<u128, &str>("app/conversation")? {
            Some(table) => table.len(),
            None => Ok::<_, AppTableError>(0),
        })
        .unwrap();
    assert_eq!(rows, 0, "the application's write rolled back");
    let report = restore(id, journal.as_ref()).await.unwrap();
    assert_eq!(report.pending_count(), 1, "nothing acknowledged");
    host.shutdown().await.unwrap();
}

/// An ended session whose state row is damaged (the probe: a poll that reads it
/// fails; the background scrub, which would poison the journal, is off), and a live
/// session written (without a lease) after the host started: the host's polls read no
/// session's state row, so the damaged one fails none of them, and the live session
/// is adopted.
///
/// On the code before the fix every poll read the state of every session in the file:
/// the damaged row failed each listing (`Corrupt`), and the live session was never
/// adopted.
#[tokio::test]
async fn the_hosts_polls_read_no_sessions_state() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("notify.redb");
    let loop_id = LoopId::new();
    let damaged = {
        let journal = Arc::new(RedbJournal::open(&path, RedbOptions::default()).unwrap());
        for _ in 0..3 {
            let id = live_session(&journal, loop_id, 1).await;
            Session::new(id, Arc::clone(&journal))
                .end(IfPending::Abandon)
                .await
                .unwrap();
        }
        let damaged = live_session(&journal, loop_id, 1).await;
        Session::new(damaged, Arc::clone(&journal))
            .end(IfPending::Abandon)
            .await
            .unwrap();
        journal.close();
        damaged
    };
    tamper::with_txn(&path, |txn| {
        let mut rows = txn
            .open_table(tamper::SESSIONS)
            .map_err(|e| tamper::TamperError::new(format!("open sessions: {e}")))?;
        rows.insert(damaged.as_uuid().as_u128(), &[0u8; 70][..])
            .map_err(|e| tamper::TamperError::new(format!("damage row: {e}")))?;
        Ok(())
    })
    .unwrap();

    let options = RedbOptions::default().verify_on_open(RedbVerifyOnOpen::Off);
    let journal = Arc::new(RedbJournal::open(&path, options).unwrap());
    assert!(journal.session_state(damaged).await.is_err());
    let (app, mut seen) = OneLoop::new(loop_id);
    let host = adopting_host(
        Arc::clone(&journal),
        std::time::Duration::from_millis(50),
        |h| h.app(app),
    )
    .await;
    let later = live_session(&journal, loop_id, 2).await;
    match next_seen(&mut seen).await {
        Seen::Started {
            session, seeded, ..
        } => assert_eq!((session, seeded), (later, 2)),
        Seen::Stopped { session, why } => panic!("{session} stopped: {why}"),
    }
    host.shutdown().await.unwrap();
}
