//! What the journal benches share: records, sessions, a runtime, sample arithmetic and
//! the side-channel for figures that are not times (latency percentiles, bytes per
//! record, peak memory), which `cargo xtask bench` reads back beside criterion's.
#![allow(dead_code, unreachable_pub)]

use std::path::{Path, PathBuf};
use std::time::Duration;

use notify_types::{
    CommandId, JournalRecord, LoopId, NotificationConsumed, ProcessCompletionNotification,
    ProcessLifecycleState, ProcessNotification, ProcessTerminalReason, SessionEvent, SessionId,
    Uuid,
};

/// The loop every bench record is addressed to.
pub const LOOP: u128 = 7;

/// Session `n` of a bench.
pub fn session(n: u64) -> SessionId {
    SessionId::from_uuid(Uuid::from_u128((0x5e55 << 112) | u128::from(n)))
}

/// The command ID of record `i`: increasing with `i`, like the time-ordered UUIDv7 of
/// `CommandId::new()`.
pub fn command_id(i: u64) -> CommandId {
    CommandId::from_uuid(Uuid::from_u128((1 << 127) | u128::from(i)))
}

/// A completion notification of session `s` with key `command_id(i)` (~310 bytes of
/// JSON).
pub fn record(s: SessionId, i: u64) -> JournalRecord {
    JournalRecord::from(notification(s, i))
}

/// The notification behind [`record`].
pub fn notification(s: SessionId, i: u64) -> ProcessNotification {
    ProcessNotification::new(ProcessCompletionNotification {
        command_id: command_id(i),
        session_id: s,
        loop_id: LoopId::from_uuid(Uuid::from_u128(LOOP)),
        process_handle: format!("build-{i}"),
        state: ProcessLifecycleState::Exited,
        reason: ProcessTerminalReason::Exited,
    })
}

/// The consumption of record `i` of session `s`.
pub fn consumed(s: SessionId, i: u64) -> JournalRecord {
    JournalRecord::from(SessionEvent::NotificationConsumed(
        NotificationConsumed::new(s, LoopId::from_uuid(Uuid::from_u128(LOOP)), command_id(i)),
    ))
}

/// The runtime every bench drives the journal from: 2 workers, like the machine.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// Splits `iters` over `n` workers; returns (per worker, total).
pub fn split(iters: u64, n: u64) -> (u64, u64) {
    let per = iters.div_ceil(n).max(1);
    (per, per * n)
}

/// The time `iters` iterations would have taken, given `done` took `elapsed`.
pub fn scale(elapsed: Duration, iters: u64, done: u64) -> Duration {
    elapsed.mul_f64(iters as f64 / done as f64)
}

/// The cargo target directory: `CARGO_TARGET_DIR` (absolute when `cargo xtask bench`
/// runs us), else three levels above this executable (`target/release/deps/NAME`).
pub fn target_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("CARGO_TARGET_DIR") {
        let dir = PathBuf::from(dir);
        if dir.is_absolute() {
            return dir;
        }
    }
    let exe = std::env::current_exe().unwrap();
    exe.ancestors().nth(3).map(Path::to_path_buf).unwrap()
}

/// Records a figure that is not a time: `target/bench-metrics/NAME.json` holds
/// `{"value": VALUE, "unit": UNIT}`. `name` uses `/` like criterion's IDs.
pub fn metric(name: &str, value: f64, unit: &str) {
    let path = target_dir()
        .join("bench-metrics")
        .join(format!("{}.json", name.replace('/', "__")));
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(
        &path,
        format!("{{\"name\": \"{name}\", \"value\": {value}, \"unit\": \"{unit}\"}}\n"),
    )
    .unwrap();
    eprintln!("metric {name}: {value} {unit}");
}

/// The file's size in bytes.
pub fn file_len(path: &Path) -> u64 {
    std::fs::metadata(path).unwrap().len()
}

/// A paired comparison, robust to a shared machine's drifting load: `rounds` rounds of
/// `a` then `b` (every other round `b` then `a`), each call doing `iters` appends and
/// returning its time. Records `paired/NAME/a` and `paired/NAME/b` (appends per second
/// over all rounds) and returns (rate a, rate b).
///
/// With `NOTIFY_BENCH_PAIRED` set, only the comparisons whose name contains its value
/// run (the others return `(0, 0)` and record nothing): one comparison can be measured
/// again without the rest.
pub fn paired(
    name: &str,
    rounds: u32,
    iters: u64,
    a: &mut dyn FnMut(u64) -> Duration,
    b: &mut dyn FnMut(u64) -> Duration,
) -> (f64, f64) {
    if let Ok(only) = std::env::var("NOTIFY_BENCH_PAIRED")
        && !name.contains(&only)
    {
        return (0.0, 0.0);
    }
    let (mut ta, mut tb) = (Duration::ZERO, Duration::ZERO);
    let mut ratios = Vec::new();
    for round in 0..rounds {
        let (da, db) = if round % 2 == 0 {
            let da = a(iters);
            (da, b(iters))
        } else {
            let db = b(iters);
            (a(iters), db)
        };
        ta += da;
        tb += db;
        ratios.push(db.as_secs_f64() / da.as_secs_f64());
    }
    let shown: Vec<String> = ratios.iter().map(|r| format!("{r:.2}")).collect();
    eprintln!(
        "paired {name}: rate ratio a/b per round {}",
        shown.join(" ")
    );
    let done = (u64::from(rounds) * iters) as f64;
    let (ra, rb) = (done / ta.as_secs_f64(), done / tb.as_secs_f64());
    metric(&format!("paired/{name}/a"), ra, "/s");
    metric(&format!("paired/{name}/b"), rb, "/s");
    (ra, rb)
}
