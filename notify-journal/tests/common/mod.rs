//! Shared test helpers: record builders, a runtime, and (re-exported from
//! `notify_testkit::crash`) the fault-injecting in-memory `redb::StorageBackend` that can
//! hold a commit at its sync, fail a sync, and produce crash images.
#![allow(
    dead_code,
    unreachable_pub,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic
)]

use std::path::Path;

use notify_journal::{AppendOutcome, RedbJournal, RedbOptions, RedbVerifyOnOpen};
use notify_types::{
    CommandId, JournalRecord, LoopId, NotificationConsumed, ProcessCompletionNotification,
    ProcessLifecycleState, ProcessNotification, ProcessTerminalReason, SessionEnded, SessionEvent,
    SessionId, Timestamp, Uuid,
};

pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

pub fn session(n: u128) -> SessionId {
    SessionId::from_uuid(Uuid::from_u128(
        0x5e55_0000_0000_0000_0000_0000_0000_0000 | n,
    ))
}

pub fn loop_id() -> LoopId {
    LoopId::from_uuid(Uuid::from_u128(0x100b))
}

/// A completion command with a deterministic key `(session, i)`; `variant` changes the
/// payload (same key, different bytes).
pub fn command_with(session: SessionId, key: Uuid, variant: u32) -> JournalRecord {
    let n = ProcessCompletionNotification {
        command_id: CommandId::from_uuid(key),
        session_id: session,
        loop_id: loop_id(),
        process_handle: format!("proc-{variant}"),
        state: ProcessLifecycleState::Exited,
        reason: ProcessTerminalReason::Exited,
    };
    JournalRecord::from(ProcessNotification::new(n))
}

pub fn key_of(session: SessionId, i: u64) -> Uuid {
    let s = session.as_uuid().as_u128() & 0xffff_ffff;
    Uuid::from_u128((1 << 127) | (s << 64) | u128::from(i))
}

pub fn command(session: SessionId, i: u64) -> JournalRecord {
    command_with(session, key_of(session, i), 0)
}

pub fn consumed(session: SessionId, cause: CommandId) -> JournalRecord {
    JournalRecord::from(SessionEvent::NotificationConsumed(
        NotificationConsumed::new(session, loop_id(), cause),
    ))
}

/// The session's end marker.
pub fn ended(session: SessionId) -> JournalRecord {
    JournalRecord::from(SessionEvent::SessionEnded(SessionEnded::new(session)))
}

/// Opens with redb's page check at open and no background scrub: the tests that plant
/// damage before opening check each read's own answer, which a scrub finding the
/// damage first would turn into `AppendError::Damaged` (`tests/scrub.rs` tests that).
pub fn open(path: &Path) -> RedbJournal {
    RedbJournal::open(
        path,
        RedbOptions::default().verify_on_open(RedbVerifyOnOpen::Pages),
    )
    .unwrap()
}

/// Opens with no check at open and no background scrub: the tests where the damage
/// planted must be found by the append, the read or the fold that meets it.
pub fn open_unchecked(path: &Path) -> RedbJournal {
    RedbJournal::open(
        path,
        RedbOptions::default().verify_on_open(RedbVerifyOnOpen::Off),
    )
    .unwrap()
}

/// The session's UUID as a number, as the tamper helpers take it.
pub fn u(s: SessionId) -> u128 {
    s.as_uuid().as_u128()
}

/// An hour from now: a purge horizon every end so far is before.
pub fn later() -> Timestamp {
    Timestamp::from_second(Timestamp::now().as_second() + 3600).unwrap()
}

/// An hour ago: a purge horizon no end so far is before.
pub fn earlier() -> Timestamp {
    Timestamp::from_second(Timestamp::now().as_second() - 3600).unwrap()
}

/// Session 4 with three commands, in a journal at `path` that is closed again.
pub async fn three_frames(path: &Path) -> SessionId {
    let s = session(4);
    let j = open(path);
    for i in 1..=3 {
        j.append(s, command(s, i)).await.unwrap();
    }
    j.close();
    s
}

/// `n` commands then the end marker (at seq `n + 1`).
pub async fn ended_session(j: &RedbJournal, s: SessionId, n: u64) -> u64 {
    for i in 1..=n {
        j.append(s, command(s, i)).await.unwrap();
    }
    let end = j.append(s, ended(s)).await.unwrap();
    assert_eq!(
        end,
        AppendOutcome {
            seq: n + 1,
            appended: true
        }
    );
    end.seq
}

// The fault-injecting backend lives in the testkit, shared with other crates' tests.
#[allow(unused_imports)] // not every test binary uses it
pub use notify_testkit::crash::{Control, FaultBackend};

/// Copies the fixture `name`.redb of `tests/fixtures` into `dir` and reads its frames
/// from `name`.expected (`session seq canonical-json`, one line each).
pub fn fixture_file(
    dir: &Path,
    name: &str,
) -> (std::path::PathBuf, Vec<(SessionId, u64, JournalRecord)>) {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let path = dir.join(format!("{name}.redb"));
    std::fs::copy(src.join(format!("{name}.redb")), &path).unwrap();
    let frames = std::fs::read_to_string(src.join(format!("{name}.expected")))
        .unwrap()
        .lines()
        .map(|line| {
            let mut parts = line.splitn(3, ' ');
            let s: SessionId = parts.next().unwrap().parse().unwrap();
            let seq: u64 = parts.next().unwrap().parse().unwrap();
            let record = JournalRecord::decode(parts.next().unwrap().as_bytes()).unwrap();
            (s, seq, record)
        })
        .collect();
    (path, frames)
}

/// `s`'s log lost its frame 2's place: every replay that reaches it answers seq 2
/// `Missing` (a page that ends before it is short, not complete), and verify reports
/// the gap and the frame no log reaches.
pub async fn assert_seq_2_missing(j: &RedbJournal, s: SessionId) {
    use notify_journal::{Corruption, JournalError, JournalRead, Problem};
    for from in [0, 1, 2] {
        match j.replay(s, from, 10).await {
            Err(JournalError::Corrupt {
                seq: 2,
                source: Corruption::Missing,
                ..
            }) => {}
            other => panic!("replay from {from}: expected seq 2 missing, got {other:?}"),
        }
    }
    assert!(matches!(j.replay(s, 1, 1).await.map(|p| p.len()), Ok(1)));
    let report = j.verify(10).await.unwrap();
    assert!(
        report
            .problems
            .iter()
            .any(|p| matches!(p, Problem::Gap { seq: 2, .. })),
        "{report}"
    );
    assert!(
        report
            .problems
            .iter()
            .any(|p| matches!(p, Problem::Orphan { .. })),
        "{report}"
    );
}

/// Opens the journal file `image` (an older format, which the open upgrades) on a
/// device that dies at sync 1, 2, 3, ... until an open finishes without a crash (at
/// most `limit` crash points); after each crash the durable image and a torn one are
/// opened again and handed to `check` (then closed). Returns how many crash points
/// there were.
pub async fn open_crashed_at_every_sync(
    image: &[u8],
    limit: u64,
    mut check: impl AsyncFnMut(&RedbJournal),
) -> u64 {
    let mut crash_points = 0;
    for crash_at in 1.. {
        let control = Control::from_image(image.to_vec());
        control.crash_at_sync(crash_at);
        let outcome = RedbJournal::open_with_backend(control.backend(), RedbOptions::default());
        let finished = outcome.is_ok() && !control.crashed();
        if let Ok(j) = outcome {
            j.close();
        }
        for after_crash in [control.durable_image(), control.torn_image(crash_at)] {
            let again = Control::from_image(after_crash);
            let j = RedbJournal::open_with_backend(again.backend(), RedbOptions::default())
                .unwrap_or_else(|e| panic!("crash at sync {crash_at}: reopen failed: {e}"));
            check(&j).await;
            j.close();
        }
        if finished {
            break;
        }
        crash_points += 1;
        assert!(crash_at < limit, "the open never finished");
    }
    crash_points
}
