//! The real `notify` binary on real redb journal files made by the library: every read
//! command's answers against the library's own, and export/import round trips. Damaged,
//! held, old and foreign files are in `cli_redb_damage.rs`; ends, purges and compaction
//! in `cli_redb_purge.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod cli_support;

use cli_support::redb::{journal_file, library_truth};
use cli_support::{
    EXPORT_HEADER, check_export, check_moved_states, check_pending, check_sessions, check_show,
    end_and_purge, expect_code, fingerprint, notify, notify_with_input, state_line,
};
use notify_journal::{ImportStateError, RedbJournal, RedbOptions, SessionState};

#[test]
fn every_read_command_answers_what_the_library_answers_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (path, fixture) = journal_file(dir.path());
    let truth = library_truth(&path);
    assert_eq!(truth.keys().copied().collect::<Vec<_>>(), fixture.sessions);
    let p = path.to_str().unwrap();
    let before = fingerprint(&path);

    check_sessions(&notify(&["sessions", p, "--json"]), &truth);
    for (session, t) in &truth {
        check_show(
            &notify(&["show", p, &session.to_string(), "--json"]),
            &t.frames,
        );
    }
    check_pending(&notify(&["pending", p, "--json"]), &truth);
    let (one, t) = truth.iter().next().unwrap();
    let one_only: std::collections::BTreeMap<_, _> = truth
        .iter()
        .filter(|(s, _)| *s == one)
        .map(|(s, t)| {
            (
                *s,
                cli_support::Truth {
                    frames: t.frames.clone(),
                    state: t.state,
                    head: t.head,
                    report: t.report.clone(),
                },
            )
        })
        .collect();
    if t.report.pending_count() > 0 && !t.report.orphans.is_empty() {
        check_pending(
            &notify(&["pending", p, &one.to_string(), "--json"]),
            &one_only,
        );
    }

    // show's window.
    let (session, t) = truth.iter().find(|(_, t)| t.frames.len() >= 5).unwrap();
    let window = notify(&[
        "show",
        p,
        &session.to_string(),
        "--from",
        "2",
        "--limit",
        "3",
        "--json",
    ]);
    check_show(&window, &t.frames[1..4]);

    // The tables for people: a header and one line per session / frame.
    let table = notify(&["sessions", p]);
    expect_code(&table, 0);
    let lines: Vec<&str> = table.stdout.lines().collect();
    assert!(
        lines[0].starts_with("SESSION") && lines[0].contains("PENDING"),
        "{}",
        table.stdout
    );
    assert_eq!(lines.len(), 1 + truth.len());
    for (line, session) in lines[1..].iter().zip(truth.keys()) {
        assert!(line.starts_with(&session.to_string()));
        // Aligned: every column starts where the header's does.
        let col = lines[0].find("PENDING").unwrap();
        assert_eq!(line.as_bytes()[col - 1], b' ', "{line}");
        assert_ne!(line.as_bytes()[col], b' ', "{line}");
    }
    let shown = notify(&["show", p, &session.to_string()]);
    expect_code(&shown, 0);
    assert_eq!(shown.stdout.lines().count(), 1 + t.frames.len());
    let pending = notify(&["pending", p]);
    expect_code(&pending, 0);
    assert!(
        pending
            .stdout
            .contains("processes restore would declare lost"),
        "{}",
        pending.stdout
    );

    // verify, stats, export: clean, counted, canonical.
    let verify = notify(&["verify", p]);
    expect_code(&verify, 0);
    assert!(verify.stdout.contains("clean"), "{}", verify.stdout);
    let frames: usize = truth.values().map(|t| t.frames.len()).sum();
    let stats = notify(&["stats", p, "--json"]);
    expect_code(&stats, 0);
    let s = &stats.json()[0];
    assert_eq!(s["frames"], frames as u64);
    assert_eq!(s["keys"], frames as u64);
    assert_eq!(s["sessions"], truth.len() as u64);
    assert_eq!(s["format_version"], notify_journal::FORMAT_VERSION);
    assert_eq!(s["file_size"], std::fs::metadata(&path).unwrap().len());
    let export = notify(&["export", p]);
    expect_code(&export, 0);
    check_export(&export.raw, &truth);
    // Piped, long work shows no progress: stderr stays empty.
    assert!(
        export.stderr.is_empty() && verify.stderr.is_empty(),
        "{}",
        export.stderr
    );
    let export_one = notify(&["export", p, &one.to_string()]);
    expect_code(&export_one, 0);
    check_export(&export_one.raw, &one_only);

    assert!(
        fingerprint(&path) == before,
        "a read command changed the journal file"
    );
}

#[test]
fn export_import_export_round_trips_byte_for_byte() {
    let dir = tempfile::tempdir().unwrap();
    let (path, _) = journal_file(dir.path());
    let first = notify(&["export", path.to_str().unwrap()]);
    expect_code(&first, 0);

    // Through a file, into a journal that does not exist yet.
    let file = dir.path().join("export.jsonl");
    std::fs::write(&file, &first.raw).unwrap();
    let copy = dir.path().join("copy.redb");
    let import = notify(&[
        "import",
        copy.to_str().unwrap(),
        "--input",
        file.to_str().unwrap(),
    ]);
    expect_code(&import, 0);
    let frames = first.stdout.lines().count() - 1;
    assert!(
        import
            .stdout
            .contains(&format!("imported {frames} frames of 3 session(s)")),
        "{}",
        import.stdout
    );
    let second = notify(&["export", copy.to_str().unwrap()]);
    expect_code(&second, 0);
    assert!(
        first.raw == second.raw,
        "export → import → export changed the bytes"
    );
    // The copy answers what the original does.
    let truth = library_truth(&copy);
    check_export(&second.raw, &truth);

    // Through stdin.
    let piped = dir.path().join("piped.redb");
    let run = notify_with_input(&["import", piped.to_str().unwrap()], &first.raw);
    expect_code(&run, 0);
    assert!(notify(&["export", piped.to_str().unwrap()]).raw == first.raw);

    // Never into a journal that holds a session; nothing is appended.
    let before = fingerprint(&copy).0;
    let again = notify(&[
        "import",
        copy.to_str().unwrap(),
        "--input",
        file.to_str().unwrap(),
    ]);
    expect_code(&again, 8);
    assert!(again.stderr.contains("is not empty"), "{}", again.stderr);
    assert!(notify(&["export", copy.to_str().unwrap()]).raw == first.raw);
    drop(before);

    // Input that is not an export is refused, naming the line.
    let bad = dir.path().join("bad.redb");
    let run = notify_with_input(&["import", bad.to_str().unwrap()], b"{\"session\":1}\n");
    expect_code(&run, 8);
    assert!(run.stderr.contains("line 1"), "{}", run.stderr);
    let mut gap = first.stdout.lines().collect::<Vec<_>>();
    gap.remove(2);
    let fresh = dir.path().join("gap.redb");
    let run = notify_with_input(
        &["import", fresh.to_str().unwrap()],
        gap.join("\n").as_bytes(),
    );
    expect_code(&run, 8);
    assert!(
        run.stderr.contains("line 3") && run.stderr.contains("does not follow"),
        "{}",
        run.stderr
    );
}

/// Export carries end times and tombstones, import restores them: after the move, the
/// ended session keeps its original end time (its retention clock does not restart),
/// the purged one is its tombstone again (a late retry is refused as purged, not
/// appended at seq 1), and export → import → export is byte-identical with live, ended
/// and purged sessions in the file. Earlier exports (format 1) still import; a later
/// format and contradicting states are refused.
#[test]
fn ended_and_purged_sessions_survive_export_and_import() {
    let dir = tempfile::tempdir().unwrap();
    let (path, fixture) = journal_file(dir.path());
    let (ended, purged) = (fixture.sessions[0], fixture.sessions[1]);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let journal = RedbJournal::open(&path, RedbOptions::default()).unwrap();
    let (ended_state, purged_state) = rt.block_on(end_and_purge(&journal, ended, purged));
    journal.close();

    let first = notify(&["export", path.to_str().unwrap()]);
    expect_code(&first, 0);
    assert!(first.stderr.is_empty(), "{}", first.stderr);
    let lines: Vec<&str> = first.stdout.lines().collect();
    assert_eq!(lines.first().copied(), Some(EXPORT_HEADER.trim_end()));
    for (session, state) in [(ended, &ended_state), (purged, &purged_state)] {
        let line = state_line(session, state).unwrap();
        assert!(
            lines.contains(&line.as_str()),
            "no {line} in\n{}",
            first.stdout
        );
    }
    let copy = dir.path().join("copy.redb");
    let import = notify_with_input(&["import", copy.to_str().unwrap(), "--json"], &first.raw);
    expect_code(&import, 0);
    let report = &import.json()[0];
    assert_eq!(
        (&report["sessions"], &report["ended"], &report["purged"]),
        (&3.into(), &1.into(), &1.into()),
        "{report}"
    );
    let second = notify(&["export", copy.to_str().unwrap()]);
    expect_code(&second, 0);
    assert!(
        first.raw == second.raw,
        "export → import → export changed the bytes:\n{}\n---\n{}",
        first.stdout,
        second.stdout
    );
    // The state column of the listing says the same.
    let listed = notify(&["sessions", copy.to_str().unwrap(), "--json"]);
    expect_code(&listed, 0);
    let states: Vec<String> = listed
        .json()
        .iter()
        .map(|row| row["state"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(
        states.iter().filter(|s| *s == "purged").count(),
        1,
        "{}",
        listed.stdout
    );
    assert_eq!(
        states.iter().filter(|s| *s == "ended").count(),
        1,
        "{}",
        listed.stdout
    );

    // Through the library: the same states, and late appends refused.
    let moved = RedbJournal::open(&copy, RedbOptions::default()).unwrap();
    rt.block_on(check_moved_states(
        &moved,
        (ended, ended_state),
        (purged, purged_state),
    ));
    // A state that contradicts the journal is refused, typed, and writes nothing.
    let live = fixture.sessions[2];
    let refused = rt.block_on(moved.import_states(vec![(live, ended_state)]));
    assert!(
        matches!(
            refused,
            Err(ImportStateError::Conflict { session, held: SessionState::Live, .. }) if session == live
        ),
        "{refused:?}"
    );
    let refused = rt.block_on(moved.import_states(vec![(ended, purged_state)]));
    assert!(
        matches!(refused, Err(ImportStateError::Conflict { held, .. }) if held == ended_state),
        "{refused:?}"
    );
    let refused = rt.block_on(moved.import_states(vec![(live, SessionState::Live)]));
    assert!(
        matches!(refused, Err(ImportStateError::Invalid { .. })),
        "{refused:?}"
    );
    // The same states again change nothing (an interrupted import can run again).
    rt.block_on(moved.import_states(vec![(ended, ended_state), (purged, purged_state)]))
        .unwrap();
    moved.close();
    assert!(notify(&["export", copy.to_str().unwrap()]).raw == first.raw);

    // The retention clock did not restart: a horizon just after the original end
    // (well before the import) purges the moved session.
    let SessionState::Ended { ended_at, .. } = ended_state else {
        unreachable!()
    };
    let horizon = (ended_at + std::time::Duration::from_micros(1)).to_string();
    let run = notify(&[
        "purge",
        copy.to_str().unwrap(),
        "--ended-before",
        &horizon,
        "--json",
    ]);
    expect_code(&run, 0);
    assert_eq!(run.json()[0]["sessions"], 1, "{}", run.stdout);

    // One session alone, purged: its tombstone line.
    let one = notify(&["export", path.to_str().unwrap(), &purged.to_string()]);
    expect_code(&one, 0);
    assert_eq!(
        one.stdout,
        format!(
            "{EXPORT_HEADER}{}\n",
            state_line(purged, &purged_state).unwrap()
        )
    );

    // An export of an earlier build (format 1: the frame lines alone) still imports.
    let old: String = lines
        .iter()
        .filter(|l| l.contains("\"record\":"))
        .map(|l| format!("{l}\n"))
        .collect();
    let from_old = dir.path().join("old.redb");
    let run = notify_with_input(&["import", from_old.to_str().unwrap()], old.as_bytes());
    expect_code(&run, 0);
    assert!(
        run.stdout.contains("of 2 session(s) (0 ended, 0 purged)"),
        "{}",
        run.stdout
    );

    // A later format is refused, and so are state lines that do not fit the frames.
    let later = dir.path().join("later.redb");
    let run = notify_with_input(
        &["import", later.to_str().unwrap()],
        b"{\"notify_export\":3}\n",
    );
    expect_code(&run, 8);
    assert!(run.stderr.contains("format 3"), "{}", run.stderr);
    let ended_line = state_line(ended, &ended_state).unwrap();
    let early: String = lines
        .iter()
        .filter(|l| **l != ended_line)
        .flat_map(|l| {
            // The ended session's state line right after its first frame.
            let first_frame = l.contains(&format!("\"session\":\"{ended}\",\"seq\":1,"));
            let mut out = vec![format!("{l}\n")];
            if first_frame {
                out.push(format!("{ended_line}\n"));
            }
            out
        })
        .collect();
    let run = notify_with_input(
        &["import", dir.path().join("early.redb").to_str().unwrap()],
        early.as_bytes(),
    );
    expect_code(&run, 8);
    assert!(
        run.stderr
            .contains("but its frames before this line end at seq 1"),
        "{}",
        run.stderr
    );
}
