//! `PgJournal::verify`'s memory does not grow with the number of sessions: over
//! 20,000 sessions of one frame each, read in pages of 64 rows, the heap it holds at
//! its peak stays within a few pages' worth (it used to keep every session's last seq
//! until the heads were compared, about 50 bytes a session: about 1 MB here).
//!
//! A binary of its own: it counts the process's heap with a global allocator
//! (`notify_testkit::bench`'s), and its one test runs alone in it.
#![cfg(feature = "postgres")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod postgres_support;

use notify_journal::{JournalBackend, PgOptions};
use notify_testkit::bench::alloc::{CountingAlloc, Peak};
use notify_types::{SessionId, Uuid};
use postgres_support::{command, database_url, drop_schema, fresh_schema, journal, raw_client};

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

const SESSIONS: i64 = 20_000;

#[test]
fn verify_memory_does_not_grow_with_the_sessions() {
    let Some(url) = database_url("verify_memory_does_not_grow_with_the_sessions") else {
        return;
    };
    // One thread: nothing else allocates while the verify runs.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let schema = fresh_schema("verify_memory");
        let j = journal(&url, &schema, PgOptions::default().page_rows(64)).await;
        let s = SessionId::new();
        j.append(s, command(s, Uuid::from_u128(1), 0))
            .await
            .unwrap();
        // Copies of that frame under 20,000 more sessions, written by the server: each
        // is reported (its record names another session), which the report only counts.
        let raw = raw_client(&url).await;
        raw.batch_execute(&format!(
            "INSERT INTO \"{schema}\".sessions (session, last_seq)
                 SELECT md5(g::text)::uuid, 1 FROM generate_series(1, {SESSIONS}) g;
             INSERT INTO \"{schema}\".frames (session, seq, key, kind, bytes, checksum)
                 SELECT md5(g::text)::uuid, 1, f.key, f.kind, f.bytes, f.checksum
                 FROM generate_series(1, {SESSIONS}) g, \"{schema}\".frames f;
             ANALYZE \"{schema}\".sessions, \"{schema}\".frames;"
        ))
        .await
        .unwrap();
        let peak = Peak::start();
        let report = j.verify(10).await.unwrap();
        let grew = peak.grown();
        assert_eq!(report.sessions, SESSIONS as u64 + 1);
        assert_eq!(report.problem_count, SESSIONS as u64, "{report}");
        // A page of 64 frames of a few hundred bytes, decoded one at a time, and the
        // connection's buffers: well under 400 KiB. Keeping every session's last seq
        // would hold 20,000 B-tree entries, about 1 MB.
        assert!(
            grew < 400 << 10,
            "verify held {grew} bytes at its peak over {SESSIONS} sessions"
        );
        eprintln!("verify peak heap growth over {SESSIONS} sessions: {grew} bytes");
        j.close().await;
        drop_schema(&url, &schema).await;
    });
}
