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

use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use notify_journal::{RedbJournal, RedbOptions};
use notify_loop::LoopConfig;
use notify_session::{Session, SessionConsumer};
use notify_types::{
    CommandId, LoopId, ProcessCompletionNotification, ProcessLifecycleState, ProcessTerminalReason,
    SessionId,
};

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// A session over a fresh journal with `consumers` loops, each holding `per`
/// notifications.
async fn prepared(
    path: &std::path::Path,
    consumers: usize,
    per: u64,
) -> (RedbJournal, Session, Vec<SessionConsumer>) {
    let journal = RedbJournal::open(path, RedbOptions::default()).unwrap();
    let session = Session::new(SessionId::new(), journal.clone());
    let mut inboxes = Vec::new();
    let mut tasks = Vec::new();
    for _ in 0..consumers {
        let loop_id = LoopId::new();
        let config = LoopConfig::new(session.id(), loop_id).capacity(usize::MAX);
        inboxes.push(session.register_loop(config).unwrap());
        let session = session.clone();
        tasks.push(tokio::spawn(async move {
            for i in 0..per {
                let n = ProcessCompletionNotification {
                    command_id: CommandId::new(),
                    session_id: session.id(),
                    loop_id,
                    process_handle: format!("build-{i}"),
                    state: ProcessLifecycleState::Exited,
                    reason: ProcessTerminalReason::Exited,
                };
                session.notify_process_completion(n).await.unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    (journal, session, inboxes)
}

fn acks(rt: &tokio::runtime::Runtime, consumers: usize, tx: bool, iters: u64) -> Duration {
    let dir = tempfile::tempdir().unwrap();
    let per = iters.div_ceil(consumers as u64).max(1);
    let elapsed = rt.block_on(async {
        let (journal, session, inboxes) =
            prepared(&dir.path().join("txack.redb"), consumers, per).await;
        let started = Instant::now();
        let tasks: Vec<_> = inboxes
            .into_iter()
            .map(|mut inbox| {
                let journal = journal.clone();
                tokio::spawn(async move {
                    for _ in 0..per {
                        let received = inbox.recv().await.unwrap();
                        if tx {
                            let id = received.command_id().as_uuid().as_u128();
                            received
                                .ack_with(&journal, move |t| {
                                    let mut rows =
                                        t.open_table::<u128, &str>("app/conversation")?;
                                    rows.insert(id, "build exited")?;
                                    Ok(())
                                })
                                .await
                                .unwrap();
                        } else {
                            received.ack().await.unwrap();
                        }
                    }
                })
            })
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
        let elapsed = started.elapsed();
        drop(session);
        journal.close();
        elapsed
    });
    elapsed.mul_f64(iters as f64 / (per * consumers as u64) as f64)
}

fn bench(c: &mut Criterion) {
    let rt = runtime();
    let mut g = c.benchmark_group("txack");
    g.sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3))
        .throughput(Throughput::Elements(1));
    for consumers in [1usize, 64] {
        for (name, tx) in [("plain", false), ("tx", true)] {
            g.bench_with_input(BenchmarkId::new(name, consumers), &(), |b, ()| {
                b.iter_custom(|iters| acks(&rt, consumers, tx, iters));
            });
        }
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
