//! Upgrading a schema whose leases live in the sessions' rows (versions 1 to 8) to
//! leases in a table of their own (version 9): every lease's state is carried over
//! (epochs only grow), the orphan listing stays an index range scan, and the
//! sessions go on where they were.
//!
//! The old schema is built from the version-1 layout, frozen in
//! `postgres_support/version_1.rs` as migration 1 created it, holding lease state in
//! its columns; the connect then applies every migration, so migration 9 runs on the
//! layout versions 1 to 8 really leave.
//!
//! Needs `NOTIFY_TEST_DATABASE_URL` (or `CI` set, which implies the local default);
//! without either, each test says it was skipped and returns.
#![cfg(feature = "postgres")]
// Test code: a failed expectation is a test failure.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod postgres_support;

use std::time::Duration;

use notify_journal::{AppendError, JournalBackend, JournalRead, LeaseError, replay_all};
use notify_types::{JournalRecord, SessionId, Uuid};
use postgres_support::{
    command, database_url, drop_schema, ended, fresh_schema, migrated, raw_client, version_1,
};

/// Writes `records` as `session`'s frames 1.. and its row with `lease` (epoch,
/// holder, expiry `interval` from now), in the version-1 layout.
async fn old_session(
    raw: &tokio_postgres::Client,
    q: &str,
    session: SessionId,
    records: &[JournalRecord],
    lease: (i64, Option<Uuid>, Option<&str>),
) {
    let (epoch, holder, expires_in) = lease;
    raw.execute(
        &format!(
            "INSERT INTO {q}.sessions (session, last_seq, lease_epoch, lease_holder,
                                       lease_expires_at)
             VALUES ($1, $2, $3, $4, clock_timestamp() + $5::text::interval)"
        ),
        &[
            session.as_uuid(),
            &i64::try_from(records.len()).unwrap(),
            &epoch,
            &holder,
            &expires_in,
        ],
    )
    .await
    .unwrap();
    version_1::write_frames(raw, q, session, records).await;
}

/// Sessions with every kind of lease state in the old columns (live, expired,
/// released, never leased, and an ended session whose lease was released) are
/// migrated: each lease reads back as it was, the next epochs follow the old ones,
/// another holder's live lease still fences and is `Held` naming it, the orphans are
/// the expired, released and never leased open sessions (listed from the
/// `leases_orphans` index), and the logs continue after their heads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_kept_in_the_sessions_rows_move_to_their_own_table() {
    let Some(url) = database_url("leases_kept_in_the_sessions_rows_move_to_their_own_table") else {
        return;
    };
    let schema = fresh_schema("lease_mig");
    let q = format!("\"{schema}\"");
    let raw = raw_client(&url).await;
    raw.batch_execute(&format!(
        "{}\n{}",
        version_1::tables(&q),
        version_1::frame_keys(&q)
    ))
    .await
    .unwrap();
    let other = Uuid::now_v7();
    let [live, expired, released, never, done] = std::array::from_fn(|_| SessionId::new());
    let two = |s: SessionId| vec![command(s, Uuid::now_v7(), 0), command(s, Uuid::now_v7(), 1)];
    old_session(&raw, &q, live, &two(live), (5, Some(other), Some("1 hour"))).await;
    old_session(
        &raw,
        &q,
        expired,
        &two(expired),
        (3, Some(other), Some("-1 hour")),
    )
    .await;
    old_session(&raw, &q, released, &two(released), (7, None, None)).await;
    old_session(&raw, &q, never, &two(never), (0, None, None)).await;
    let mut finished = two(done);
    finished.push(ended(done));
    old_session(&raw, &q, done, &finished, (2, None, None)).await;

    let j = migrated(&url, &schema, &raw).await;
    // The old columns and their index are gone; the leases have their own table.
    let columns: i64 = raw
        .query_one(
            "SELECT count(*) FROM information_schema.columns
             WHERE table_schema = $1 AND table_name = 'sessions' AND column_name LIKE 'lease%'",
            &[&schema],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(columns, 0, "no lease column left in sessions");
    let leases: i64 = raw
        .query_one(&format!("SELECT count(*) FROM {q}.leases"), &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(leases, 5, "one lease row per session");

    // Each lease reads back as it was.
    let info = j.lease_info(live).await.unwrap();
    assert_eq!((info.epoch, info.holder, info.live), (5, Some(other), true));
    assert!(
        info.expires_in
            .is_some_and(|d| d > Duration::from_secs(3000))
    );
    let info = j.lease_info(expired).await.unwrap();
    assert_eq!(
        (info.epoch, info.holder, info.live),
        (3, Some(other), false)
    );
    let info = j.lease_info(released).await.unwrap();
    assert_eq!((info.epoch, info.holder, info.live), (7, None, false));
    let info = j.lease_info(never).await.unwrap();
    assert_eq!((info.epoch, info.holder, info.live), (0, None, false));

    // Orphans: the open sessions without a live lease, never the ended one.
    let mut orphans = j.orphaned_sessions(100).await.unwrap();
    orphans.sort();
    let mut want = vec![expired, released, never];
    want.sort();
    assert_eq!(orphans, want);
    postgres_support::assert_orphans_scan_their_index(&raw, &schema).await;

    // Another holder's live lease still fences and is held, naming it.
    assert!(matches!(
        j.append(live, command(live, Uuid::now_v7(), 2)).await,
        Err(AppendError::Fenced { session }) if session == live
    ));
    assert!(matches!(
        j.acquire_lease(live).await,
        Err(LeaseError::Held { epoch: 5, holder: Some(h), .. }) if h == other
    ));
    // Epochs go on from the old ones.
    for (s, next) in [(expired, 4), (released, 8), (never, 1)] {
        let lease = j.acquire_lease(s).await.unwrap();
        assert_eq!(lease.epoch(), next, "next epoch of {s}");
        let out = j.append(s, command(s, Uuid::now_v7(), 3)).await.unwrap();
        assert_eq!(
            (out.seq, out.appended),
            (3, true),
            "{s} continues after its head"
        );
        assert_eq!(replay_all(&j, s).await.unwrap().len(), 3);
    }
    assert!(j.orphaned_sessions(100).await.unwrap().is_empty());
    let renewal = j.renew_leases().await.unwrap();
    assert_eq!(renewal.renewed.len(), 3, "{renewal:?}");
    assert!(renewal.lost.is_empty(), "{renewal:?}");
    // The ended session stays ended.
    assert!(matches!(
        j.append(done, command(done, Uuid::now_v7(), 4)).await,
        Err(AppendError::SessionEnded { purged: false, .. })
    ));
    assert_eq!(j.last_seq(done).await.unwrap(), 3);
    j.close().await;
    drop_schema(&url, &schema).await;
}
