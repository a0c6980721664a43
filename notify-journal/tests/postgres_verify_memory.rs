//! `PgJournal::verify`'s memory does not grow with the number of sessions: over
//! 200,000 sessions of one frame each, the heap it holds at its peak stays within a
//! few pages' worth (it used to keep every session's last seq until the heads were
//! compared, about 50 bytes a session).
//!
//! A binary of its own: it counts the process's heap with a global allocator, and its
//! one test runs alone in it.
#![cfg(feature = "postgres")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod postgres_support;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use notify_journal::{JournalBackend, PgOptions};
use notify_types::{SessionId, Uuid};
use postgres_support::{command, database_url, drop_schema, fresh_schema, journal, raw_client};

/// The system allocator, counting the bytes live and their peak.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards every call to the system allocator unchanged; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract, passed on.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            let live = LIVE.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
            PEAK.fetch_max(live, Ordering::Relaxed);
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract, passed on.
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller's contract, passed on.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            if new_size >= layout.size() {
                let live = LIVE.fetch_add(new_size - layout.size(), Ordering::Relaxed) + new_size
                    - layout.size();
                PEAK.fetch_max(live, Ordering::Relaxed);
            } else {
                LIVE.fetch_sub(layout.size() - new_size, Ordering::Relaxed);
            }
        }
        p
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

const SESSIONS: i64 = 200_000;

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
        let j = journal(&url, &schema, PgOptions::default()).await;
        let s = SessionId::new();
        j.append(s, command(s, Uuid::from_u128(1), 0))
            .await
            .unwrap();
        // Copies of that frame under 200,000 more sessions, written by the server: each
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
        let base = LIVE.load(Ordering::Relaxed);
        PEAK.store(base, Ordering::Relaxed);
        let report = j.verify(10).await.unwrap();
        let grew = PEAK.load(Ordering::Relaxed).saturating_sub(base);
        assert_eq!(report.sessions, SESSIONS as u64 + 1);
        assert_eq!(report.problem_count, SESSIONS as u64, "{report}");
        // A page of 1,024 frames of a few hundred bytes, decoded one at a time, and
        // the connection's buffers: well under 4 MiB. Keeping every session's last
        // seq would hold 200,000 B-tree entries, about 8 MiB.
        assert!(
            grew < 4 << 20,
            "verify held {grew} bytes at its peak over {SESSIONS} sessions"
        );
        eprintln!("verify peak heap growth over {SESSIONS} sessions: {grew} bytes");
        j.close().await;
        drop_schema(&url, &schema).await;
    });
}
