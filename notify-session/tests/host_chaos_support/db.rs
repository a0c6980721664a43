//! The parent's reads of the shared database: the journal replayed, the
//! application's rows, and the run's schema made and dropped.

use std::collections::BTreeMap;

use notify_journal::{PgJournal, replay_all};
use notify_types::{CommandId, JournalRecord, SessionEvent, SessionId};

use super::checker::Frame;
use super::consumer::app_table;

async fn client(url: &str) -> tokio_postgres::Client {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    client
}

/// Creates the application's table (after the journal's connect made the schema).
pub(crate) async fn create_app_table(url: &str, schema: &str) {
    client(url)
        .await
        .batch_execute(&format!(
            "CREATE TABLE {} (command uuid NOT NULL, session uuid NOT NULL)",
            app_table(schema)
        ))
        .await
        .unwrap();
}

/// The application's rows: how many per command ID.
pub(crate) async fn app_rows(url: &str, schema: &str) -> BTreeMap<CommandId, usize> {
    client(url)
        .await
        .query(
            &format!(
                "SELECT command, count(*) FROM {} GROUP BY command",
                app_table(schema)
            ),
            &[],
        )
        .await
        .unwrap()
        .into_iter()
        .map(|row| {
            let n: i64 = row.get(1);
            (CommandId::from_uuid(row.get(0)), n as usize)
        })
        .collect()
}

/// Each of `sessions`' journal, replayed.
pub(crate) async fn replay(
    journal: &PgJournal,
    sessions: impl IntoIterator<Item = SessionId>,
) -> BTreeMap<SessionId, Vec<(u64, Frame)>> {
    let mut out = BTreeMap::new();
    for s in sessions {
        let frames = replay_all(journal, s)
            .await
            .unwrap()
            .into_iter()
            .map(|(seq, record)| {
                let f = match record {
                    JournalRecord::Command(c) => Frame::Command(c.command_id()),
                    JournalRecord::Event(SessionEvent::NotificationConsumed(c)) => {
                        Frame::Consumed(c.cause())
                    }
                    _ => Frame::Other,
                };
                (seq, f)
            })
            .collect();
        out.insert(s, frames);
    }
    out
}

/// Notifications journaled and not consumed, per session.
pub(crate) fn pending(
    journal: &BTreeMap<SessionId, Vec<(u64, Frame)>>,
) -> BTreeMap<SessionId, u64> {
    journal
        .iter()
        .map(|(s, frames)| {
            let commands = frames
                .iter()
                .filter(|(_, f)| matches!(f, Frame::Command(_)))
                .count();
            let consumed = frames
                .iter()
                .filter(|(_, f)| matches!(f, Frame::Consumed(_)))
                .count();
            (*s, commands.saturating_sub(consumed) as u64)
        })
        .collect()
}

pub(crate) async fn drop_schema(url: &str, schema: &str) {
    client(url)
        .await
        .batch_execute(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))
        .await
        .unwrap();
}
