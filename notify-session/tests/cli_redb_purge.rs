//! The real `notify` binary ending, purging and compacting sessions of a redb file, each
//! answering what the library answers.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod cli_support;

use std::path::Path;

use cli_support::redb::journal_file;
use cli_support::{expect_code, notify};
use notify_journal::{RedbJournal, RedbOptions};

/// Ends `session` through the library; returns its end marker's seq.
fn end_session(path: &Path, session: notify_types::SessionId) -> u64 {
    let journal = RedbJournal::open(path, RedbOptions::default()).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let marker = notify_types::JournalRecord::from(notify_types::SessionEvent::from(
        notify_types::SessionEnded::new(session),
    ));
    let seq = rt
        .block_on(notify_journal::JournalBackend::append(
            &journal, session, marker,
        ))
        .unwrap()
        .seq;
    journal.close();
    seq
}

/// `purge` runs the library's purge and reports what it did: on a file with an ended
/// session, its report (sessions, frames, steps) is the one the library's `purge` gives
/// on a copy of the file, the ended session is left a tombstone of all its frames, and
/// the other sessions are untouched. A horizon before the end purges nothing.
#[test]
fn purge_runs_the_library_purge_and_reports_it() {
    let dir = tempfile::tempdir().unwrap();
    let (path, fixture) = journal_file(dir.path());
    let p = path.to_str().unwrap();
    let ended = fixture.sessions[0];
    let frames = end_session(&path, ended);
    assert!(frames > 2, "the ended session spans several purge steps");
    let others = |path: &Path| {
        let journal = RedbJournal::open(path, RedbOptions::default()).unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let logs = fixture.sessions[1..]
            .iter()
            .map(|s| {
                rt.block_on(notify_journal::replay_all(&journal, *s))
                    .unwrap()
            })
            .collect::<Vec<_>>();
        journal.close();
        logs
    };
    let others_before = others(&path);

    // Nothing ended before the horizon: nothing is due, nothing removed.
    let before = notify(&["export", p]);
    let run = notify(&[
        "purge",
        p,
        "--ended-before",
        "2000-01-01T00:00:00Z",
        "--json",
    ]);
    expect_code(&run, 0);
    let report = &run.json()[0];
    assert_eq!(report["ended_before"], "2000-01-01T00:00:00Z");
    assert_eq!(
        (&report["sessions"], &report["frames"], &report["steps"]),
        (&0.into(), &0.into(), &0.into())
    );
    assert!(notify(&["export", p]).raw == before.raw);

    // The ended session is due: the command line and the library, each on its own
    // copy, purge it alike.
    let copy = dir.path().join("copy.redb");
    std::fs::copy(&path, &copy).unwrap();
    let horizon = "2999-01-01T00:00:00Z";
    let run = notify(&[
        "purge",
        p,
        "--ended-before",
        horizon,
        "--max-frames-per-step",
        "2",
        "--json",
    ]);
    expect_code(&run, 0);
    let library = {
        let journal = RedbJournal::open(&copy, RedbOptions::default()).unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let report = rt
            .block_on(notify_journal::purge(&journal, horizon.parse().unwrap(), 2))
            .unwrap();
        journal.close();
        report
    };
    let report = &run.json()[0];
    assert_eq!(
        (
            report["sessions"].as_u64(),
            report["frames"].as_u64(),
            report["steps"].as_u64()
        ),
        (
            Some(library.sessions),
            Some(library.frames),
            Some(library.steps)
        )
    );
    assert_eq!((library.sessions, library.frames), (1, frames));
    assert_eq!(library.steps, frames.div_ceil(2));
    for file in [&path, &copy] {
        let journal = RedbJournal::open(file, RedbOptions::default()).unwrap();
        match journal.session_state_blocking(ended).unwrap() {
            notify_journal::SessionState::Purged(t) => {
                assert_eq!((t.last_seq, t.frames), (frames, frames));
            }
            other => panic!("{}: not purged: {other:?}", file.display()),
        }
        journal.close();
        assert_eq!(others(file), others_before, "{}", file.display());
    }
}

/// The session life from the command line on a redb file: an ended session shows as
/// ended, `purge` leaves it purged (its tombstone listed, its log no longer shown),
/// `compact` gives the space back, and each answers what the library answers.
#[test]
fn ended_sessions_purge_and_compact_from_the_command_line() {
    let dir = tempfile::tempdir().unwrap();
    let (path, fixture) = journal_file(dir.path());
    let p = path.to_str().unwrap();
    let ended = fixture.sessions[0];
    let live = fixture.sessions[1];
    {
        let journal = RedbJournal::open(&path, RedbOptions::default()).unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            // Enough frames that purging them frees many pages for compact to give
            // back (appended at once, so they share commits).
            let loop_id = notify_types::LoopId::new();
            let appends: Vec<_> = (0..2000)
                .map(|_| journal.append(ended, notify_testkit::sample::command(ended, loop_id)))
                .map(tokio::spawn)
                .collect();
            for append in appends {
                append.await.unwrap().unwrap();
            }
            let marker = notify_types::JournalRecord::from(notify_types::SessionEvent::from(
                notify_types::SessionEnded::new(ended),
            ));
            notify_journal::JournalBackend::append(&journal, ended, marker)
                .await
                .unwrap();
        });
        journal.close();
    }
    let state = |run: &cli_support::Run, session: notify_types::SessionId| {
        run.json()
            .into_iter()
            .find(|row| row["session"] == session.to_string())
            .map(|row| row["state"].as_str().unwrap_or_default().to_owned())
    };
    let listed = notify(&["sessions", p, "--json"]);
    expect_code(&listed, 0);
    assert_eq!(state(&listed, ended).as_deref(), Some("ended"));
    assert_eq!(state(&listed, live).as_deref(), Some("live"));

    let run = notify(&["purge", p, "--ended-before", "0s", "--json"]);
    expect_code(&run, 0);
    let report = &run.json()[0];
    assert_eq!(report["sessions"], 1);
    let listed = notify(&["sessions", p, "--json"]);
    assert_eq!(state(&listed, ended).as_deref(), Some("purged"));
    assert_eq!(state(&listed, live).as_deref(), Some("live"));
    expect_code(&notify(&["show", p, &ended.to_string()]), 3);
    expect_code(&notify(&["show", p, &live.to_string()]), 0);
    let live_log = || {
        let journal = RedbJournal::open(&path, RedbOptions::default()).unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let frames = rt
            .block_on(notify_journal::replay_all(&journal, live))
            .unwrap();
        journal.close();
        frames
    };
    let before_compact = live_log();
    assert!(!before_compact.is_empty());

    // The purge freed the pages of 2,001 frames; compaction gives them back: the
    // file shrinks, and the report says by how much.
    let size = std::fs::metadata(&path).unwrap().len();
    let run = notify(&["compact", p, "--json"]);
    expect_code(&run, 0);
    let report = &run.json()[0];
    let (before, after) = (
        report["bytes_before"].as_u64().unwrap(),
        report["bytes_after"].as_u64().unwrap(),
    );
    assert_eq!(before, size);
    assert!(
        after < before,
        "compaction gave nothing back: {before} -> {after}"
    );
    assert_eq!(after, std::fs::metadata(&path).unwrap().len());
    // Still the same journal: the live session reads as before, the tombstone stays.
    assert_eq!(live_log(), before_compact);
    let listed = notify(&["sessions", p, "--json"]);
    assert_eq!(state(&listed, ended).as_deref(), Some("purged"));

    // A missing file is not created by compact or purge.
    let missing = dir.path().join("missing.redb");
    let m = missing.to_str().unwrap();
    expect_code(&notify(&["compact", m]), 3);
    expect_code(&notify(&["purge", m, "--ended-before", "0s"]), 3);
    assert!(!missing.exists());
}
