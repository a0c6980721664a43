//! Leases under the traffic production has (issue 30): a lease never competes with the
//! appends of the session it protects.
//!
//! * A hot session (64 concurrent appenders) keeps its lease: every renewal round
//!   renews it, and no append is fenced.
//! * An application's transaction holding an `append_in` open for longer than the
//!   lease holds back no renewal.
//! * A renewal completes while an acquire of the same handle waits behind an open
//!   transaction (acquire and release have a connection of their own), and that
//!   takeover waits for the old holder's in-flight append, which commits under the old
//!   epoch before the takeover returns; the old holder's later appends are fenced.
//! * A takeover of a hot session: nothing of the old epoch lands after the new
//!   holder's restore point.
//! * The lease row's lock modes conflict as designed (checked on the server with
//!   `NOWAIT`): an append's `FOR KEY SHARE` does not conflict with a renewal's
//!   `FOR NO KEY UPDATE`, and does with an acquire's or release's `FOR UPDATE`.
//!
//! Needs `NOTIFY_TEST_DATABASE_URL` (or `CI` set, which implies the local default);
//! without either, each test says it was skipped and returns.
#![cfg(feature = "postgres")]
// Test code: a failed expectation is a test failure.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod postgres_support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use notify_journal::{AppendError, JournalBackend, JournalRead, PgOptions, replay_all};
use notify_types::{CommandId, SessionId, Uuid};
use postgres_support::traffic::{
    Appends, hammer, hammer_in_tx, renew_until, stop_and_join, stop_appenders,
};
use postgres_support::{
    HANG_GUARD, command, conninfo_with, consumed, database_url, drop_schema, fresh_schema, journal,
    not_over_tcp, raw_client,
};

/// The lease of the traffic tests: short, so a lease that is not renewed runs out
/// within the run, several times over.
const LEASE: Duration = Duration::from_secs(3);

/// Concurrent appenders to the one hot session.
const APPENDERS: usize = 64;

/// How long the appenders hammer the session.
const RUN: Duration = Duration::from_secs(15);

/// One hot session, 64 appenders for 15 s, a renewal every third of a 3 s lease:
/// every round renews the session's lease and no append is fenced.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_hot_session_keeps_its_lease_while_64_appenders_hammer_it() {
    let Some(url) = database_url("a_hot_session_keeps_its_lease_while_64_appenders_hammer_it")
    else {
        return;
    };
    let schema = fresh_schema("hot_lease");
    let j = Arc::new(journal(&url, &schema, PgOptions::default().lease_duration(LEASE)).await);
    let s = SessionId::new();
    let lease = j.acquire_lease(s).await.unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let counts = Arc::new(Appends::default());
    let mut appenders = hammer(&j, s, APPENDERS, &stop, &counts);
    let renewer = tokio::spawn(renew_until(Arc::clone(&j), s, LEASE / 3, Arc::clone(&stop)));
    tokio::time::sleep(RUN).await;
    let rounds = stop_and_join(&stop, renewer, &mut [&mut appenders]).await;
    let (ok, fenced, other) = counts.totals();
    eprintln!("hot session: {rounds:?}; appends: {ok} ok, {fenced} fenced, {other} failed");
    // Real traffic ran the whole time (a floor far below any machine's rate).
    assert!(ok >= 1_000, "only {ok} appends in {RUN:?}");
    assert!(rounds.rounds >= 10, "{rounds:?}");
    rounds.assert_all_renewed("of the hot session");
    assert_eq!((fenced, other), (0, 0), "no append fenced or failed");
    let info = j.lease_info(s).await.unwrap();
    assert!(info.live && info.epoch == lease.epoch() && info.holder == Some(j.holder_id()));
    assert_eq!(
        j.last_seq(s).await.unwrap(),
        ok,
        "every answered append is journaled"
    );
    j.close().await;
    drop_schema(&url, &schema).await;
}

/// An application's transaction holds an `append_in` to the session open for two
/// leases while appenders queue behind it: every renewal round meanwhile renews the
/// lease, and once it commits, the queued appends land (none fenced).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_open_application_transaction_holds_back_no_renewal() {
    let Some(url) = database_url("an_open_application_transaction_holds_back_no_renewal") else {
        return;
    };
    let schema = fresh_schema("tx_lease");
    let options = PgOptions::default()
        .lease_duration(LEASE)
        .operation_timeout(HANG_GUARD);
    let j = Arc::new(journal(&url, &schema, options).await);
    let s = SessionId::new();
    j.acquire_lease(s).await.unwrap();
    let mut app = raw_client(&url).await;
    let tx = app.transaction().await.unwrap();
    let cause = CommandId::from_uuid(Uuid::now_v7());
    let out = j.append_in(&tx, s, &consumed(s, cause)).await.unwrap();
    assert_eq!((out.seq, out.appended), (1, true));

    let stop = Arc::new(AtomicBool::new(false));
    let counts = Arc::new(Appends::default());
    let renewer = tokio::spawn(renew_until(Arc::clone(&j), s, LEASE / 3, Arc::clone(&stop)));
    let mut appenders = hammer(&j, s, 8, &stop, &counts);
    tokio::time::sleep(LEASE * 2).await;
    let during = counts.ok.load(Ordering::SeqCst);
    tx.commit().await.unwrap();
    tokio::time::sleep(LEASE).await;
    let rounds = stop_and_join(&stop, renewer, &mut [&mut appenders]).await;
    let (ok, fenced, other) = counts.totals();
    eprintln!(
        "open transaction: {rounds:?}; appends: {during} while it was open, {ok} ok, \
         {fenced} fenced, {other} failed"
    );
    assert_eq!(
        during, 0,
        "the appends queued behind the transaction's row lock"
    );
    assert!(rounds.rounds >= 8, "{rounds:?}");
    rounds.assert_all_renewed("with the transaction open or not");
    assert!(ok > 0);
    assert_eq!((fenced, other), (0, 0), "no append fenced or failed");
    assert_eq!(j.last_seq(s).await.unwrap(), ok + 1);
    j.close().await;
    drop_schema(&url, &schema).await;
}

/// Counts `tag`'s connections waiting for a lock.
async fn lock_waits(probe: &tokio_postgres::Client, tag: &str) -> i64 {
    probe
        .query_one(
            "SELECT count(*) FROM pg_stat_activity
             WHERE application_name = $1 AND wait_event_type = 'Lock'",
            &[&tag],
        )
        .await
        .unwrap()
        .get(0)
}

/// Handle `a` adopts a session whose old holder `c` let its lease expire while an
/// application transaction of `c` holds an append to it open. `a`'s acquire waits for
/// that transaction; meanwhile `a`'s renewal of its other lease completes (before, it
/// queued behind the acquire on the one lease connection). Once the transaction
/// commits, the takeover returns with the next epoch, and the old holder's append is
/// in the log before it (committed under the old epoch, never after the takeover);
/// the old holder's later appends are fenced.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_renewal_completes_while_a_takeover_waits_for_an_in_flight_append() {
    let name = "a_renewal_completes_while_a_takeover_waits_for_an_in_flight_append";
    let Some(url) = database_url(name) else {
        return;
    };
    let tag = format!("nj_takeover_{}", Uuid::now_v7().simple());
    let Some(tagged) = conninfo_with(&url, None, &format!("application_name={tag}")) else {
        not_over_tcp(name);
        return;
    };
    let schema = fresh_schema("takeover");
    let a = Arc::new(
        journal(
            &tagged,
            &schema,
            PgOptions::default()
                .lease_duration(Duration::from_secs(30))
                .operation_timeout(HANG_GUARD),
        )
        .await,
    );
    let c = journal(
        &url,
        &schema,
        PgOptions::default().lease_duration(Duration::from_millis(1500)),
    )
    .await;
    let probe = raw_client(&url).await;
    let (mine, s) = (SessionId::new(), SessionId::new());
    let kept = a.acquire_lease(mine).await.unwrap();
    let old = c.acquire_lease(s).await.unwrap();

    // The old holder's application transaction: its append is judged under the live
    // lease, and the transaction stays open.
    let mut app = raw_client(&url).await;
    let tx = app.transaction().await.unwrap();
    let record = command(s, Uuid::now_v7(), 0);
    let out = c.append_in(&tx, s, &record).await.unwrap();
    assert_eq!((out.seq, out.appended), (1, true));
    // Its lease runs out by the database's clock, the transaction still open.
    tokio::time::timeout(HANG_GUARD, async {
        while a.lease_info(s).await.unwrap().live {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("hang guard: the old lease never expired");

    let adopter = Arc::clone(&a);
    let takeover = tokio::spawn(async move { adopter.acquire_lease(s).await });
    tokio::time::timeout(HANG_GUARD, async {
        while lock_waits(&probe, &tag).await == 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("hang guard: the takeover never waited for the transaction");

    // The renewal completes while the takeover still waits (the guard is far below
    // the operation timeout, which is what would end the takeover's wait).
    let renewal = tokio::time::timeout(Duration::from_secs(20), a.renew_leases())
        .await
        .expect("the renewal waited for the acquire blocked behind the transaction")
        .unwrap();
    assert_eq!(renewal.renewed, vec![kept], "{renewal:?}");
    assert!(renewal.lost.is_empty(), "{renewal:?}");
    assert!(
        !takeover.is_finished(),
        "the takeover waits for the transaction"
    );
    assert!(lock_waits(&probe, &tag).await > 0, "still waiting");

    tx.commit().await.unwrap();
    let taken = tokio::time::timeout(HANG_GUARD, takeover)
        .await
        .expect("hang guard: the takeover")
        .unwrap()
        .unwrap();
    assert_eq!(taken.epoch(), old.epoch() + 1, "the takeover's epoch");
    // What the new holder restores holds the old holder's append: it committed
    // before the takeover returned.
    let log = replay_all(&*a, s).await.unwrap();
    assert_eq!(
        log,
        vec![(1, record)],
        "the in-flight append, under the old epoch"
    );
    // From now on the old holder is fenced, in its own transactions too.
    assert!(matches!(
        c.append(s, command(s, Uuid::now_v7(), 1)).await,
        Err(AppendError::Fenced { session }) if session == s
    ));
    let tx = app.transaction().await.unwrap();
    assert!(matches!(
        c.append_in(&tx, s, &command(s, Uuid::now_v7(), 2)).await,
        Err(AppendError::Fenced { session }) if session == s
    ));
    tx.rollback().await.unwrap();
    let next = a.append(s, command(s, Uuid::now_v7(), 3)).await.unwrap();
    assert_eq!((next.seq, next.appended), (2, true));
    a.close().await;
    c.close().await;
    drop_schema(&url, &schema).await;
}

/// A takeover of a hot session: the old holder's 16 appenders and 8 transactional
/// appenders (each transaction holding its append 20 ms before it commits, so one
/// is nearly always in flight) hammer it while its short lease runs out unrenewed,
/// and another handle acquires it as soon as it can. Whatever the old holder had in
/// flight commits before the takeover returns: the log's head the new holder reads
/// right after acquiring is where the log stays (every later append of the old
/// epoch is fenced), and it holds exactly the appends the old holder was told were
/// written. (An acquire that did not wait for the appends in flight, locking the
/// lease row `FOR NO KEY UPDATE`, fails this.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn nothing_of_the_old_epoch_lands_after_a_takeover_of_a_hot_session() {
    let name = "nothing_of_the_old_epoch_lands_after_a_takeover_of_a_hot_session";
    let Some(url) = database_url(name) else {
        return;
    };
    let schema = fresh_schema("hot_takeover");
    let old = Arc::new(
        journal(
            &url,
            &schema,
            PgOptions::default().lease_duration(Duration::from_millis(1500)),
        )
        .await,
    );
    let new = journal(&url, &schema, PgOptions::default()).await;
    let s = SessionId::new();
    let first = old.acquire_lease(s).await.unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let counts = Arc::new(Appends::default());
    let mut appenders = hammer(&old, s, 16, &stop, &counts);
    let mut in_tx = hammer_in_tx(&url, &old, s, 8, Duration::from_millis(20), &stop, &counts).await;
    // Acquire as soon as the lease is free: the old holder's appends are in flight.
    let taken = tokio::time::timeout(HANG_GUARD, async {
        loop {
            match new.acquire_lease(s).await {
                Ok(lease) => break lease,
                Err(notify_journal::LeaseError::Held { .. }) => {}
                Err(e) => panic!("{e}"),
            }
        }
    })
    .await
    .expect("hang guard: the lease never came free");
    let head = new.last_seq(s).await.unwrap();
    let restored = replay_all(&new, s).await.unwrap().len();
    // The old holder keeps trying for a while: fenced, all of it.
    tokio::time::sleep(Duration::from_secs(1)).await;
    stop_appenders(&stop, &mut [&mut appenders, &mut in_tx]).await;
    let (ok, fenced, other) = counts.totals();
    eprintln!("takeover at head {head}: {ok} appended, {fenced} fenced, {other} failed");
    assert_eq!(taken.epoch(), first.epoch() + 1);
    assert!(ok >= 20, "the session was hot: {ok} appends");
    assert!(fenced > 0, "the old holder went on and was fenced");
    assert_eq!(other, 0);
    assert_eq!(
        u64::try_from(restored).unwrap(),
        head,
        "gap-free to the head"
    );
    assert_eq!(
        new.last_seq(s).await.unwrap(),
        head,
        "nothing landed after the takeover"
    );
    assert_eq!(
        ok, head,
        "every append the old holder was told of is in the log"
    );
    old.close().await;
    new.close().await;
    drop_schema(&url, &schema).await;
}

/// The lock modes the design rests on, asked of the server with `NOWAIT` while an
/// application transaction holds an append open: the lease row is locked
/// `FOR KEY SHARE` by the append; a renewal's mode (`FOR NO KEY UPDATE`, what an
/// `UPDATE` of a non-key column takes) is granted at once; an acquire's or release's
/// (`FOR UPDATE`) is refused, so it would wait for the transaction.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lease_row_lock_modes_conflict_as_designed() {
    let Some(url) = database_url("the_lease_row_lock_modes_conflict_as_designed") else {
        return;
    };
    let schema = fresh_schema("lock_modes");
    let j = journal(&url, &schema, PgOptions::default()).await;
    let s = SessionId::new();
    j.acquire_lease(s).await.unwrap();
    let mut app = raw_client(&url).await;
    let tx = app.transaction().await.unwrap();
    j.append_in(&tx, s, &command(s, Uuid::now_v7(), 0))
        .await
        .unwrap();

    let mut other = raw_client(&url).await;
    let lock = |mode: &str| {
        format!("SELECT 1 FROM \"{schema}\".leases WHERE session = $1 FOR {mode} NOWAIT")
    };
    let probe = other.transaction().await.unwrap();
    let granted = probe
        .query(&lock("NO KEY UPDATE"), &[s.as_uuid()])
        .await
        .expect("a renewal's lock mode is granted beside the append's");
    assert_eq!(granted.len(), 1, "the session's lease row");
    // What the renewal really runs: an UPDATE of the expiry alone (a wait would end
    // in a lock timeout error, never a hang).
    probe
        .batch_execute("SET LOCAL lock_timeout = '30s'")
        .await
        .unwrap();
    probe
        .execute(
            &format!("UPDATE \"{schema}\".leases SET expires_at = expires_at WHERE session = $1"),
            &[s.as_uuid()],
        )
        .await
        .unwrap();
    probe.rollback().await.unwrap();
    let probe = other.transaction().await.unwrap();
    let refused = probe
        .query(&lock("UPDATE"), &[s.as_uuid()])
        .await
        .expect_err("an acquire's lock mode conflicts with the append's");
    assert_eq!(
        refused.code(),
        Some(&tokio_postgres::error::SqlState::LOCK_NOT_AVAILABLE),
        "{refused}"
    );
    probe.rollback().await.unwrap();
    tx.commit().await.unwrap();
    j.close().await;
    drop_schema(&url, &schema).await;
}
