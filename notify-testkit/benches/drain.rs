//! One consumer draining a backlog on redb (`cargo bench -p notify-testkit --bench
//! drain`): acknowledgements awaited in turn against acknowledged in batches.
//!
//! * `drain/turn/1`: `recv`, then `ack` (one durable commit each), in turn.
//! * `drain/batch/1`: `recv_many(1000)`, then `SessionBatch::ack` (one durable commit
//!   per batch, every notification released after it, in order).
//!
//! The backlog is notified (by 64 concurrent supervisors) before the clock starts; every
//! sample starts from an empty file. After criterion's samples, one figure run per way
//! (turn first, then batch, same process) on a backlog of 20,000 records
//! `drain/turn_per_s`, `drain/batch_per_s` (completions a second) and `drain/ratio`
//! (batch over turn) with `notify_testkit::bench::metric`. The batched run drains the
//! whole backlog; the run in turn times its first 2,000 (at one commit each, the whole
//! backlog would take a minute or more, for the same rate). `drain_pg` is the same on
//! PostgreSQL.
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use notify_journal::{RedbJournal, RedbOptions};

mod drain_support;
use drain_support::{drain_group, drain_on, runtime};

/// Drains on a fresh redb file.
fn drain(rt: &tokio::runtime::Runtime, backlog: u64, count: u64, batched: bool) -> Duration {
    let dir = tempfile::tempdir().unwrap();
    let journal = RedbJournal::open(dir.path().join("drain.redb"), RedbOptions::default()).unwrap();
    let elapsed = rt.block_on(drain_on(journal.clone(), backlog, count, batched));
    journal.close();
    elapsed
}

fn bench(c: &mut Criterion) {
    let rt = runtime();
    drain_group(c, "drain", |backlog, count, batched| {
        drain(&rt, backlog, count, batched)
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
