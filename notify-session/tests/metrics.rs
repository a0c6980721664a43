//! The metrics move as a session runs: a `metrics` recorder installed for the whole
//! process sees the journal's appends by outcome and its commit histograms (recorded on
//! the redb writer thread), the loop's stops and inbox depth, and the session's
//! dispositions, redeliveries and declared-lost processes.
//!
//! One test in this binary: the recorder is global, so nothing else may record
//! meanwhile, and every figure below is an exact delta.

// Tests unwrap freely, helpers included: a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use metrics_util::MetricKind;
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use notify_journal::{CommitStats, JournalBackend, RedbJournal, RedbOptions, RedbVerifyOnOpen};
use notify_loop::LoopConfig;
use notify_session::{Published, Session, restore};
use notify_testkit::MemoryJournal;
use notify_testkit::sample::{command, lifecycle, notification};
use notify_types::{LoopId, Notified, NotifyError, ProcessLifecycleKind, SessionId, StopCause};

/// A metric and its labels, as `name{k=v,...}` with the labels sorted.
type Id = String;

fn id(name: &str, labels: &[(&str, &str)]) -> Id {
    let mut labels: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
    labels.sort();
    format!("{name}{{{}}}", labels.join(","))
}

/// Reads the recorder. Its snapshots drain what they read (counters and gauges are
/// reset to 0, histograms emptied), so the totals are accumulated here; the gauges are
/// only ever moved by increments and decrements, so they add up too.
struct Observer {
    snapshotter: Snapshotter,
    total: Reading,
}

/// Every metric's value at one point.
#[derive(Debug, Clone, Default)]
struct Reading {
    counters: BTreeMap<Id, u64>,
    gauges: BTreeMap<Id, f64>,
    /// Every sample since the recorder was installed.
    histograms: HashMap<Id, Vec<f64>>,
}

impl Observer {
    fn install() -> Self {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        recorder
            .install()
            .expect("the only recorder of this binary");
        Self {
            snapshotter,
            total: Reading::default(),
        }
    }

    fn read(&mut self) -> Reading {
        let reading = &mut self.total;
        for (key, _, _, value) in self.snapshotter.snapshot().into_vec() {
            let (kind, key) = key.into_parts();
            let labels: Vec<(&str, &str)> = key.labels().map(|l| (l.key(), l.value())).collect();
            let id = id(key.name(), &labels);
            match (kind, value) {
                (MetricKind::Counter, DebugValue::Counter(n)) => {
                    *reading.counters.entry(id).or_default() += n;
                }
                (MetricKind::Gauge, DebugValue::Gauge(v)) => {
                    *reading.gauges.entry(id).or_default() += v.into_inner();
                }
                (MetricKind::Histogram, DebugValue::Histogram(samples)) => {
                    reading
                        .histograms
                        .entry(id)
                        .or_default()
                        .extend(samples.into_iter().map(|s| s.into_inner()));
                }
                (kind, value) => panic!("{id}: {kind:?} holding {value:?}"),
            }
        }
        reading.clone()
    }
}

impl Reading {
    fn gauge(&self, name: &str) -> f64 {
        self.gauges.get(&id(name, &[])).copied().unwrap_or(0.0)
    }

    fn samples(&self, name: &str, labels: &[(&str, &str)]) -> &[f64] {
        self.histograms
            .get(&id(name, labels))
            .map_or(&[], Vec::as_slice)
    }
}

const APPENDS: &str = "notify_journal_appends_total";
const BATCH: &str = "notify_journal_commit_batch_size";
const COMMIT_SECONDS: &str = "notify_journal_commit_seconds";
const NOTIFICATIONS: &str = "notify_session_notifications_total";
const STOPS: &str = "notify_loop_stops_total";
const DEPTH: &str = "notify_loop_inbox_depth";
const LOOPS: &str = "notify_loop_tasks";

/// A metric's name and labels.
type Labels<'a> = &'a [(&'a str, &'a str)];

/// A counter (name, labels) and how much it moved.
type Moved<'a> = (&'a str, Labels<'a>, u64);

/// How the counters moved between two readings, for the expectations in `want`
/// (metric, labels, delta); every other counter must not have moved.
fn assert_counters_moved(before: &Reading, after: &Reading, want: &[Moved<'_>]) {
    let mut expected: BTreeMap<Id, u64> = BTreeMap::new();
    for (name, labels, delta) in want {
        *expected.entry(id(name, labels)).or_default() += delta;
    }
    let mut moved: BTreeMap<Id, u64> = BTreeMap::new();
    for (id, n) in &after.counters {
        let delta = n - before.counters.get(id).copied().unwrap_or(0);
        if delta != 0 {
            moved.insert(id.clone(), delta);
        }
    }
    expected.retain(|_, d| *d != 0);
    assert_eq!(
        moved, expected,
        "counters that moved (left) and expected (right)"
    );
}

/// The redb commits between two readings: as many `commit_seconds` samples as
/// commits, one batch-size sample each, summing to the appends they answered; and
/// `CommitStats` agrees. Returns the new batch sizes.
fn assert_commits(
    before: (&Reading, CommitStats),
    after: (&Reading, CommitStats),
    appends: u64,
) -> Vec<f64> {
    let redb = [("backend", "redb")];
    let batches = &after.0.samples(BATCH, &redb)[before.0.samples(BATCH, &redb).len()..];
    let seconds =
        &after.0.samples(COMMIT_SECONDS, &redb)[before.0.samples(COMMIT_SECONDS, &redb).len()..];
    let commits = after.1.commits - before.1.commits;
    assert_eq!(
        after.1.appends - before.1.appends,
        appends,
        "CommitStats::appends"
    );
    assert_eq!(batches.len() as u64, commits, "a batch size per commit");
    assert_eq!(seconds.len() as u64, commits, "a latency per commit");
    assert_eq!(
        batches.iter().sum::<f64>(),
        appends as f64,
        "batch sizes sum"
    );
    assert!(
        seconds.iter().all(|s| *s >= 0.0 && s.is_finite()),
        "{seconds:?}"
    );
    batches.to_vec()
}

/// Lets spawned loop tasks run until the gauges read `depth` and `loops` (a loop task
/// ends, and gives its live set back, on the runtime after its consumer is dropped).
async fn settle(observer: &mut Observer, depth: f64, loops: f64) -> Reading {
    for _ in 0..1000 {
        let reading = observer.read();
        if reading.gauge(DEPTH) == depth && reading.gauge(LOOPS) == loops {
            return reading;
        }
        tokio::task::yield_now().await;
    }
    let reading = observer.read();
    panic!(
        "gauges did not settle at depth {depth}, loops {loops}: {:?}",
        reading.gauges
    );
}

#[tokio::test(flavor = "current_thread")]
async fn counters_and_histograms_move_as_a_session_runs() {
    let mut observer = Observer::install();
    let dir = tempfile::tempdir().unwrap();
    // No background scrub here: its passes would move its counter at random points
    // between readings. It is read deterministically at the end.
    let journal = RedbJournal::open(
        dir.path().join("notify.redb"),
        RedbOptions::default().verify_on_open(RedbVerifyOnOpen::Off),
    )
    .unwrap();
    let shared: Arc<dyn JournalBackend> = Arc::new(journal.clone());
    let (session_id, loop_id) = (SessionId::new(), LoopId::new());
    let redb_appended: &[(&str, &str)] = &[("backend", "redb"), ("outcome", "appended")];
    let redb_duplicate: &[(&str, &str)] = &[("backend", "redb"), ("outcome", "duplicate")];
    let redb_collision: &[(&str, &str)] = &[("backend", "redb"), ("outcome", "collision")];

    // Before the crash: a loop of capacity 1.
    let start = observer.read();
    let stats0 = journal.commit_stats();
    let session = Session::new(session_id, shared.clone());
    let consumer = session
        .register_loop(LoopConfig::new(session_id, loop_id).capacity(1))
        .unwrap();
    // A process that will be left running on paper (its own handle, so the
    // notifications below do not end it).
    let mut orphan = lifecycle(session_id, loop_id, ProcessLifecycleKind::Started);
    orphan.process_handle = "left-running".into();
    session.publish_lifecycle(orphan).await.unwrap();

    let first = notification(session_id, loop_id);
    assert_eq!(
        session
            .notify_process_completion(first.clone())
            .await
            .unwrap(),
        Notified::Accepted
    );
    assert_eq!(observer.read().gauge(DEPTH), 1.0, "one live notification");
    assert_eq!(
        session
            .notify_process_completion(first.clone())
            .await
            .unwrap(),
        Notified::Duplicate
    );
    let mut changed = first.clone();
    changed.process_handle = "another-proc".into();
    assert!(matches!(
        session.notify_process_completion(changed).await,
        Err(NotifyError::Collision { .. })
    ));
    let second = notification(session_id, loop_id);
    assert!(matches!(
        session.notify_process_completion(second).await,
        Err(NotifyError::DeliveryStopped {
            cause: StopCause::Full,
            ..
        })
    ));
    let before_crash = observer.read();
    let stats1 = journal.commit_stats();
    assert_counters_moved(
        &start,
        &before_crash,
        &[
            // The lifecycle event, the first notification and the second (journaled
            // before the loop answered full).
            (APPENDS, redb_appended, 3),
            (APPENDS, redb_duplicate, 1),
            (APPENDS, redb_collision, 1),
            (NOTIFICATIONS, &[("disposition", "accepted")], 1),
            (NOTIFICATIONS, &[("disposition", "duplicate")], 1),
            (NOTIFICATIONS, &[("disposition", "collision")], 1),
            (NOTIFICATIONS, &[("disposition", "stopped")], 1),
            (STOPS, &[("cause", "full")], 1),
        ],
    );
    // One appender at a time: every append commits on its own, collisions and
    // duplicates included.
    let batches = assert_commits((&start, stats0), (&before_crash, stats1), 5);
    assert_eq!(batches, vec![1.0; 5]);
    assert_eq!(before_crash.gauge(DEPTH), 1.0);
    assert_eq!(before_crash.gauge(LOOPS), 1.0);

    // Crash: everything in memory is gone; the loop task ends and gives its live set
    // back to the gauge.
    drop((session, consumer));
    let crashed = settle(&mut observer, 0.0, 0.0).await;

    // Restart: both notifications are pending, the process an orphan.
    let mut report = restore(session_id, shared.as_ref()).await.unwrap();
    assert_eq!(report.pending_count(), 2);
    assert_eq!(report.orphans.len(), 1);
    let session = Session::new(session_id, shared.clone());
    let mut consumer = session
        .register_loop(LoopConfig::new(session_id, loop_id).seed(report.take_pending(loop_id)))
        .unwrap();
    assert_eq!(observer.read().gauge(DEPTH), 2.0, "both redelivered");
    let lost = session.declare_lost(&report.orphans[0]).await.unwrap();
    assert_eq!(lost.completion, Ok(Notified::Accepted));
    assert!(matches!(lost.event, Published::New { .. }));
    // Declaring it again (another crash during restore, say) deduplicates.
    let again = session.declare_lost(&report.orphans[0]).await.unwrap();
    assert_eq!(again.completion, Ok(Notified::Duplicate));
    assert!(matches!(again.event, Published::Duplicate { .. }));
    let received = consumer.recv().await.unwrap();
    assert_eq!(received.command_id(), first.command_id);
    received.ack().await.unwrap();
    // A loop shut down answers exited.
    session.shutdown_loop(loop_id).await;
    assert!(matches!(
        session
            .notify_process_completion(notification(session_id, loop_id))
            .await,
        Err(NotifyError::DeliveryStopped {
            cause: StopCause::Exited,
            ..
        })
    ));
    let restored = observer.read();
    let stats2 = journal.commit_stats();
    assert_counters_moved(
        &crashed,
        &restored,
        &[
            ("notify_session_redelivered_total", &[], 2),
            // The lost-on-restore completion, `ProcessLost`, the consumption, and the
            // notification to the shut-down loop (journaled first).
            (APPENDS, redb_appended, 4),
            // Both records of the second `declare_lost`.
            (APPENDS, redb_duplicate, 2),
            (NOTIFICATIONS, &[("disposition", "accepted")], 1),
            (NOTIFICATIONS, &[("disposition", "duplicate")], 1),
            (NOTIFICATIONS, &[("disposition", "stopped")], 1),
            ("notify_session_declared_lost_total", &[], 1),
            ("notify_session_consumed_total", &[], 1),
            (STOPS, &[("cause", "exited")], 1),
        ],
    );
    let batches = assert_commits((&crashed, stats1), (&restored, stats2), 6);
    assert_eq!(batches, vec![1.0; 6]);

    // Another backend counts under its own label, with the same commit counters.
    let memory = MemoryJournal::new();
    let record = command(session_id, loop_id);
    memory.append(session_id, record.clone()).await.unwrap();
    memory.append(session_id, record).await.unwrap();
    let mut wrong_session = command(SessionId::new(), loop_id);
    assert!(
        memory
            .append(session_id, wrong_session.clone())
            .await
            .is_err()
    );
    wrong_session = command(session_id, loop_id);
    memory.append(session_id, wrong_session).await.unwrap();
    let end = observer.read();
    assert_counters_moved(
        &restored,
        &end,
        &[
            (
                APPENDS,
                &[("backend", "memory"), ("outcome", "appended")],
                2,
            ),
            (
                APPENDS,
                &[("backend", "memory"), ("outcome", "duplicate")],
                1,
            ),
            (APPENDS, &[("backend", "memory"), ("outcome", "error")], 1),
        ],
    );
    let stats = memory.commit_stats();
    // The refused append never reached the store.
    assert_eq!((stats.commits, stats.appends), (3, 3));

    drop((session, consumer));
    journal.close();

    // The scrub (the default open) counts its passes: one finished clean pass is
    // counted before the status shows it.
    let before = observer.read();
    let scrubbed = RedbJournal::open(
        dir.path().join("notify.redb"),
        RedbOptions::default().scrub_interval(std::time::Duration::MAX),
    )
    .unwrap();
    let mut passes = 0;
    for _ in 0..12_000 {
        passes = scrubbed.scrub_status().clean_passes;
        if passes >= 1 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert_eq!(passes, 1, "{:?}", scrubbed.scrub_status());
    let after = observer.read();
    let scrub_clean = id(
        "notify_journal_scrub_passes_total",
        &[("backend", "redb"), ("outcome", "clean")],
    );
    let count = |r: &Reading| r.counters.get(&scrub_clean).copied().unwrap_or(0);
    assert_eq!(count(&after) - count(&before), 1);
    scrubbed.close();
}
