//! Acknowledgements per second, plain against transactional
//! (`cargo bench -p notify-session --bench txack`).
//!
//! * `txack/plain/N`: N consumers (one loop each) receive and `ack` notifications
//!   (one durable append each, group-committed by the redb writer).
//! * `txack/tx/N`: the same with `ack_with`, each inserting one row in an application
//!   table in the same transaction.
//!
//! The notifications are notified before the clock starts; every sample starts from
//! an empty file.
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use notify_journal::{RedbJournal, RedbOptions};

mod txack_support;
use txack_support::{ONE_SESSION, Shape, ack_group, prepared, timed};

fn acks(rt: &tokio::runtime::Runtime, shape: Shape, mode: &'static str, iters: u64) -> Duration {
    let dir = tempfile::tempdir().unwrap();
    let consumers = shape.consumers;
    let per = iters.div_ceil(consumers as u64).max(1);
    let elapsed = rt.block_on(async {
        let journal =
            RedbJournal::open(dir.path().join("txack.redb"), RedbOptions::default()).unwrap();
        let (sessions, inboxes) = prepared(journal.clone(), shape, per).await;
        let for_acks = journal.clone();
        let elapsed = timed(
            inboxes,
            per,
            async |_| for_acks.clone(),
            move |received, journal| async move {
                if mode == "tx" {
                    let id = received.command_id().as_uuid().as_u128();
                    received
                        .ack_with(&journal, move |t| {
                            let mut rows = t.open_table::<u128, &str>("app/conversation")?;
                            rows.insert(id, "build exited")?;
                            Ok(())
                        })
                        .await
                        .unwrap();
                } else {
                    received.ack().await.unwrap();
                }
                journal
            },
        )
        .await;
        drop(sessions);
        journal.close();
        elapsed
    });
    elapsed.mul_f64(iters as f64 / (per * consumers as u64) as f64)
}

fn bench(c: &mut Criterion) {
    ack_group(c, "txack", &["plain", "tx"], &ONE_SESSION, acks);
}

criterion_group!(benches, bench);
criterion_main!(benches);
