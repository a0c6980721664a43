//! What the session-end test binaries (`end.rs`, `end_retry.rs`, `end_races.rs`,
//! `end_atomic.rs`) share: one session with one loop, the `SessionEnded` refusal, the
//! kinds of a session's frames, a session ended with one notification abandoned,
//! dropping a PostgreSQL story's schema, and a journal that runs a hook before each
//! append.
// Each binary uses part of it: an item one of them leaves unused says which.

#[allow(dead_code)] // end.rs, end_retry.rs
pub(crate) mod hooked;

use std::sync::Arc;

use notify_journal::{JournalBackend, replay_all};
use notify_loop::LoopConfig;
use notify_session::{Ended, IfPending, Session, SessionConsumer};
use notify_types::{Disposition, LoopId, NotifyError, ProcessCompletionNotification, SessionId};

/// A new session on `journal` with one loop registered: the session, the loop and
/// its consumer.
pub(crate) fn one_loop(journal: Arc<dyn JournalBackend>) -> (Session, LoopId, SessionConsumer) {
    let session = Session::new(SessionId::new(), journal);
    let loop_id = LoopId::new();
    let consumer = session
        .register_loop(LoopConfig::new(session.id(), loop_id))
        .unwrap();
    (session, loop_id, consumer)
}

/// Takes `n` on a new handle of its session, with its loop registered, then ends the
/// session abandoning what is pending: the end's answer. The handle is gone on return.
#[allow(dead_code)] // end_atomic.rs
pub(crate) async fn end_abandoning(
    journal: impl JournalBackend + 'static,
    n: ProcessCompletionNotification,
) -> Ended {
    let (session_id, loop_id) = (n.session_id, n.loop_id);
    let session = Session::new(session_id, journal);
    let _inbox = session
        .register_loop(LoopConfig::new(session_id, loop_id))
        .unwrap();
    session.notify_process_completion(n).await.unwrap();
    session.end(IfPending::Abandon).await.unwrap()
}

/// `e` is the refusal of an ended (`purged`: and purged) `session`: never retryable,
/// delivery stopped.
#[allow(dead_code)] // end_atomic.rs
pub(crate) fn assert_ended(e: &NotifyError, session: SessionId, purged: bool) {
    match e {
        NotifyError::SessionEnded {
            session_id,
            purged: p,
        } => {
            assert_eq!((*session_id, *p), (session, purged));
            assert!(!e.is_retryable());
            assert_eq!(e.disposition(), Some(Disposition::Stopped));
        }
        other => panic!("want SessionEnded, got {other:?}"),
    }
}

/// The kinds of a session's frames, in order.
#[allow(dead_code)] // end_retry.rs
pub(crate) async fn kinds(journal: &dyn JournalBackend, session: SessionId) -> Vec<&'static str> {
    replay_all(journal, session)
        .await
        .unwrap()
        .iter()
        .map(|(_, r)| r.type_name())
        .collect()
}

/// Drops the schema a PostgreSQL story made for itself at `url`.
#[allow(dead_code)] // end.rs, end_races.rs
pub(crate) async fn drop_schema(url: &str, schema: &str) {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    client
        .batch_execute(&format!("DROP SCHEMA \"{schema}\" CASCADE"))
        .await
        .unwrap();
}
