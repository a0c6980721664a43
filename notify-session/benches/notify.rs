//! End-to-end notify throughput (`cargo bench -p notify-session`).
//!
//! * `end_to_end/notify/64`: 64 concurrent supervisors each call
//!   `Session::notify_process_completion` with fresh notifications (validate, owner
//!   and loop checks, durable append to a redb journal, dispatch to one of 8 loops,
//!   disposition), each awaiting its answer.
//! * `end_to_end/journal_only/64`: the same records appended straight to the same kind
//!   of journal by 64 concurrent tasks: the ceiling the session is measured against.
//!
//! Every sample starts from an empty file. Loops are large enough that nothing is
//! refused as full; acknowledgements are not part of the measurement (they are
//! appends of their own).
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use notify_journal::{RedbJournal, RedbOptions};
use notify_loop::LoopConfig;
use notify_session::Session;
use notify_types::{
    CommandId, JournalRecord, LoopId, Notified, ProcessCompletionNotification,
    ProcessLifecycleState, ProcessNotification, ProcessTerminalReason, SessionId,
};

const SUPERVISORS: u64 = 64;
const LOOPS: usize = 8;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

fn completion(session_id: SessionId, loop_id: LoopId, i: u64) -> ProcessCompletionNotification {
    ProcessCompletionNotification {
        command_id: CommandId::new(),
        session_id,
        loop_id,
        process_handle: format!("build-{i}"),
        state: ProcessLifecycleState::Exited,
        reason: ProcessTerminalReason::Exited,
    }
}

fn per_task(iters: u64) -> u64 {
    iters.div_ceil(SUPERVISORS).max(1)
}

fn scale(elapsed: Duration, iters: u64, done: u64) -> Duration {
    elapsed.mul_f64(iters as f64 / done as f64)
}

fn end_to_end(rt: &tokio::runtime::Runtime, iters: u64) -> Duration {
    let dir = tempfile::tempdir().unwrap();
    let journal = RedbJournal::open(dir.path().join("e2e.redb"), RedbOptions::default()).unwrap();
    let per = per_task(iters);
    let elapsed = rt.block_on(async {
        let session = Session::new(SessionId::new(), Arc::new(journal.clone()));
        let mut consumers = Vec::new();
        let loops: Vec<LoopId> = (0..LOOPS)
            .map(|_| {
                let id = LoopId::new();
                let config = LoopConfig::new(session.id(), id).capacity(usize::MAX);
                consumers.push(session.register_loop(config).unwrap());
                id
            })
            .collect();
        let started = Instant::now();
        let tasks: Vec<_> = (0..SUPERVISORS)
            .map(|s| {
                let session = session.clone();
                let loop_id = loops[s as usize % LOOPS];
                tokio::spawn(async move {
                    for i in 0..per {
                        let n = completion(session.id(), loop_id, i);
                        let d = session.notify_process_completion(n).await.unwrap();
                        assert_eq!(d, Notified::Accepted);
                    }
                })
            })
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
        started.elapsed()
    });
    journal.close();
    scale(elapsed, iters, per * SUPERVISORS)
}

fn journal_only(rt: &tokio::runtime::Runtime, iters: u64) -> Duration {
    let dir = tempfile::tempdir().unwrap();
    let journal = RedbJournal::open(dir.path().join("j.redb"), RedbOptions::default()).unwrap();
    let per = per_task(iters);
    let session_id = SessionId::new();
    let loop_id = LoopId::new();
    let elapsed = rt.block_on(async {
        let started = Instant::now();
        let tasks: Vec<_> = (0..SUPERVISORS)
            .map(|_| {
                let journal = journal.clone();
                tokio::spawn(async move {
                    for i in 0..per {
                        let record = JournalRecord::Command(ProcessNotification::new(completion(
                            session_id, loop_id, i,
                        )));
                        let outcome = journal.append(session_id, record).await.unwrap();
                        assert!(outcome.appended);
                    }
                })
            })
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
        started.elapsed()
    });
    journal.close();
    scale(elapsed, iters, per * SUPERVISORS)
}

fn bench(c: &mut Criterion) {
    let rt = runtime();
    let mut g = c.benchmark_group("end_to_end");
    g.sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3))
        .throughput(Throughput::Elements(1));
    g.bench_with_input(
        BenchmarkId::new("journal_only", SUPERVISORS),
        &(),
        |b, ()| {
            b.iter_custom(|iters| journal_only(&rt, iters));
        },
    );
    g.bench_with_input(BenchmarkId::new("notify", SUPERVISORS), &(), |b, ()| {
        b.iter_custom(|iters| end_to_end(&rt, iters));
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
