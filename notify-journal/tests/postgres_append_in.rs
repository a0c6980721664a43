//! `PgJournal::append_in` / `append_statement`: an append inside a transaction the
//! application runs on its own connection, judged by the journal's own `append_batch`:
//! it commits with the application's writes or rolls back with them, a duplicate is a
//! duplicate, another holder's live lease fences it, an ended session refuses it, and
//! the handed-out statement means the same run by a plain client. `append_with`, which
//! runs the transaction itself and pipelines the application's first statement with
//! the append, commits a new record with the application's writes and rolls those
//! writes back on a duplicate, a refusal (a collision, a fenced or ended session) or a
//! failed write.
//!
//! Needs `NOTIFY_TEST_DATABASE_URL` (or `CI` set, which implies the local default).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod postgres_support;

use notify_journal::{
    AppendError, JournalBackend, JournalRead, PgAppendWithError, PgAppendedWith, PgJournal,
    PgOptions,
};
use notify_types::{CommandId, SessionId, Uuid};
use postgres_support::{
    command, consumed, database_url, drop_schema, ended, fresh_schema, journal, raw_client,
};

fn cause(i: u128) -> CommandId {
    CommandId::from_uuid(Uuid::from_u128(0xca_0000 + i))
}

/// The database's URL, a journal on a fresh schema, and the application's connection
/// with its table `app_rows` in that schema; `None` when the database is skipped.
async fn with_app_table(tag: &str) -> Option<(String, String, PgJournal, tokio_postgres::Client)> {
    let url = database_url("postgres_append_in")?;
    let schema = fresh_schema(tag);
    let j = journal(&url, &schema, PgOptions::default()).await;
    let app = raw_client(&url).await;
    app.batch_execute(&format!(
        "CREATE TABLE \"{schema}\".app_rows (command uuid PRIMARY KEY)"
    ))
    .await
    .unwrap();
    Some((url, schema, j, app))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_append_in_the_applications_transaction_commits_or_rolls_back_with_it() {
    let Some((url, schema, j, mut app)) = with_app_table("append_in").await else {
        return;
    };
    let insert = format!("INSERT INTO \"{schema}\".app_rows VALUES ($1)");
    let count = format!("SELECT count(*) FROM \"{schema}\".app_rows");
    let s = SessionId::new();

    // Rolled back: neither the row nor the record.
    let tx = app.transaction().await.unwrap();
    tx.execute(&insert, &[cause(1).as_uuid()]).await.unwrap();
    let out = j.append_in(&tx, s, &consumed(s, cause(1))).await.unwrap();
    assert!(out.appended);
    assert_eq!(out.seq, 1);
    tx.rollback().await.unwrap();
    assert_eq!(
        j.lookup(s, consumed(s, cause(1)).key()).await.unwrap(),
        None
    );
    assert_eq!(
        app.query_one(&count, &[]).await.unwrap().get::<_, i64>(0),
        0
    );

    // Committed: both, and the writer numbers on after it.
    let tx = app.transaction().await.unwrap();
    tx.execute(&insert, &[cause(1).as_uuid()]).await.unwrap();
    let out = j.append_in(&tx, s, &consumed(s, cause(1))).await.unwrap();
    assert_eq!((out.seq, out.appended), (1, true));
    tx.commit().await.unwrap();
    assert_eq!(
        j.lookup(s, consumed(s, cause(1)).key()).await.unwrap(),
        Some(1)
    );
    assert_eq!(
        app.query_one(&count, &[]).await.unwrap().get::<_, i64>(0),
        1
    );
    let next = j.append(s, consumed(s, cause(2))).await.unwrap();
    assert_eq!(next.seq, 2);

    // A retry is a duplicate at its seq.
    let tx = app.transaction().await.unwrap();
    let again = j.append_in(&tx, s, &consumed(s, cause(1))).await.unwrap();
    assert_eq!((again.seq, again.appended), (1, false));
    tx.rollback().await.unwrap();

    // The handed-out statement, run by a plain client, answers the same.
    let st = j.append_statement(s, &consumed(s, cause(3))).unwrap();
    let tx = app.transaction().await.unwrap();
    let row = tx.query_one(&st.sql, &st.params()).await.unwrap();
    let out = st.answer(row.get(0), row.get(1)).unwrap();
    assert_eq!((out.seq, out.appended), (3, true));
    tx.commit().await.unwrap();
    assert_eq!(j.last_seq(s).await.unwrap(), 3);

    // Another holder's live lease fences it.
    let other = journal(&url, &schema, PgOptions::default()).await;
    let _lease = other.acquire_lease(s).await.unwrap();
    let tx = app.transaction().await.unwrap();
    let fenced = j.append_in(&tx, s, &consumed(s, cause(4))).await;
    assert!(
        matches!(fenced, Err(AppendError::Fenced { session }) if session == s),
        "{fenced:?}"
    );
    tx.rollback().await.unwrap();
    other.release_lease(s).await.ok();

    // An ended session refuses a new record.
    j.append(s, ended(s)).await.unwrap();
    let tx = app.transaction().await.unwrap();
    let refused = j.append_in(&tx, s, &consumed(s, cause(5))).await;
    assert!(
        matches!(
            refused,
            Err(AppendError::SessionEnded { purged: false, .. })
        ),
        "{refused:?}"
    );
    tx.rollback().await.unwrap();

    j.close().await;
    other.close().await;
    drop_schema(&url, &schema).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn append_with_commits_a_new_record_and_rolls_back_everything_else() {
    let Some((url, schema, j, mut app)) = with_app_table("append_with").await else {
        return;
    };
    let insert = app
        .prepare(&format!("INSERT INTO \"{schema}\".app_rows VALUES ($1)"))
        .await
        .unwrap();
    let count = format!("SELECT count(*) FROM \"{schema}\".app_rows");
    let rows = async |app: &tokio_postgres::Client| -> i64 {
        app.query_one(&count, &[]).await.unwrap().get(0)
    };
    let s = SessionId::new();

    // New: committed with the row.
    let out = j
        .append_with(&mut app, s, &consumed(s, cause(1)), async |c| {
            c.execute(&insert, &[cause(1).as_uuid()]).await
        })
        .await
        .unwrap();
    assert!(
        matches!(out, PgAppendedWith::Committed { seq: 1, written: 1 }),
        "{out:?}"
    );
    assert_eq!(rows(&app).await, 1);
    assert_eq!(
        j.lookup(s, consumed(s, cause(1)).key()).await.unwrap(),
        Some(1)
    );

    // A duplicate: the write ran (another row), and was rolled back.
    let out = j
        .append_with(&mut app, s, &consumed(s, cause(1)), async |c| {
            c.execute(&insert, &[cause(2).as_uuid()]).await
        })
        .await
        .unwrap();
    assert!(
        matches!(out, PgAppendedWith::Duplicate { seq: 1 }),
        "{out:?}"
    );
    assert_eq!(rows(&app).await, 1, "a duplicate's write committed");

    // A collision: refused, the write rolled back.
    let key = Uuid::now_v7();
    j.append(s, command(s, key, 0)).await.unwrap();
    let out = j
        .append_with(&mut app, s, &command(s, key, 1), async |c| {
            c.execute(&insert, &[cause(3).as_uuid()]).await
        })
        .await;
    assert!(
        matches!(
            out,
            Err(PgAppendWithError::Append(AppendError::Collision {
                seq: 2,
                ..
            }))
        ),
        "{out:?}"
    );
    assert_eq!(rows(&app).await, 1, "a refused append's write committed");

    // A failing write: nothing of the transaction commits.
    let out = j
        .append_with(&mut app, s, &consumed(s, cause(4)), async |c| {
            c.execute(&insert, &[cause(4).as_uuid()]).await?;
            Err::<u64, Box<dyn std::error::Error + Send + Sync>>("refused".into())
        })
        .await;
    assert!(matches!(out, Err(PgAppendWithError::Write(_))), "{out:?}");
    assert_eq!(rows(&app).await, 1);
    assert_eq!(
        j.lookup(s, consumed(s, cause(4)).key()).await.unwrap(),
        None
    );

    // Another holder's live lease fences it.
    let other = journal(&url, &schema, PgOptions::default()).await;
    let _lease = other.acquire_lease(s).await.unwrap();
    let out = j
        .append_with(&mut app, s, &consumed(s, cause(5)), async |c| {
            c.execute(&insert, &[cause(5).as_uuid()]).await
        })
        .await;
    assert!(
        matches!(
            out,
            Err(PgAppendWithError::Append(AppendError::Fenced { session })) if session == s
        ),
        "{out:?}"
    );
    assert_eq!(rows(&app).await, 1, "a fenced append's write committed");
    other.release_lease(s).await.ok();

    // An ended session refuses a new record.
    j.append(s, ended(s)).await.unwrap();
    let out = j
        .append_with(&mut app, s, &consumed(s, cause(6)), async |c| {
            c.execute(&insert, &[cause(6).as_uuid()]).await
        })
        .await;
    assert!(
        matches!(
            out,
            Err(PgAppendWithError::Append(AppendError::SessionEnded {
                purged: false,
                ..
            }))
        ),
        "{out:?}"
    );
    assert_eq!(rows(&app).await, 1, "an ended session's write committed");

    // The connection is left outside any transaction: a plain statement commits.
    app.execute(&insert, &[cause(7).as_uuid()]).await.unwrap();
    assert_eq!(rows(&raw_client(&url).await).await, 2);

    j.close().await;
    other.close().await;
    drop_schema(&url, &schema).await;
}
