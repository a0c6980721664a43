//! The real `notify` binary on real redb journal files made by the library: every
//! command's answers against the library's own, the exit statuses and messages of
//! the failure cases, and reads that leave the file's bytes and mtime as they were.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod cli_support;

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use cli_support::{
    EXPORT_HEADER, Fixture, check_export, check_moved_states, check_pending, check_sessions,
    check_show, end_and_purge, expect_code, fingerprint, notify, notify_with_input, populate,
    state_line, truth,
};
use notify_journal::{ImportStateError, JournalOptions, RedbJournal, SessionState};
use notify_testkit::tamper;

/// A journal file written through the library, closed.
fn journal_file(dir: &Path) -> (PathBuf, Fixture) {
    let path = dir.join("journal.redb");
    let journal = RedbJournal::open(&path, JournalOptions::default()).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let fixture = rt.block_on(populate(&journal));
    journal.close();
    (path, fixture)
}

fn library_truth(
    path: &Path,
) -> std::collections::BTreeMap<notify_types::SessionId, cli_support::Truth> {
    let journal = RedbJournal::open(path, JournalOptions::default()).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let truth = rt.block_on(truth(&journal));
    journal.close();
    truth
}

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
    let journal = RedbJournal::open(&path, JournalOptions::default()).unwrap();
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
    let moved = RedbJournal::open(&copy, JournalOptions::default()).unwrap();
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

#[test]
fn verify_names_the_session_and_seq_of_a_damaged_frame_and_reads_refuse_it() {
    let dir = tempfile::tempdir().unwrap();
    let (path, fixture) = journal_file(dir.path());
    let p = path.to_str().unwrap();
    let session = fixture.sessions[1];
    tamper::edit_frame(&path, session.as_uuid().as_u128(), 3, false, |bytes| {
        let last = bytes.len() - 1;
        bytes[last] ^= 0x20;
    })
    .unwrap();

    let verify = notify(&["verify", p]);
    expect_code(&verify, 1);
    let named = format!("session {session} seq 3");
    assert!(verify.stdout.contains(&named), "{}", verify.stdout);
    assert!(verify.stdout.contains("checksum"), "{}", verify.stdout);
    let json = notify(&["verify", p, "--json"]);
    expect_code(&json, 1);
    let lines = json.json();
    assert_eq!(lines[0]["session"], session.to_string());
    assert_eq!(lines[0]["seq"], 3);
    assert_eq!(lines.last().unwrap()["clean"], false);

    // With redb's page check too (the frame's own checksum still names it).
    let pages = notify(&["verify", p, "--pages"]);
    expect_code(&pages, 1);
    assert!(pages.stdout.contains(&named), "{}", pages.stdout);

    // Reading the damaged frame: status 5, the damage named.
    let show = notify(&["show", p, &session.to_string()]);
    expect_code(&show, 5);
    assert!(
        show.stderr.contains("damaged") && show.stderr.contains("notify verify"),
        "{}",
        show.stderr
    );
    // The other sessions still read.
    expect_code(&notify(&["show", p, &fixture.sessions[0].to_string()]), 0);
}

/// Starts `notify import PATH`, which holds the journal open while it waits for its
/// input, and returns it once a read of PATH finds the journal in use (with that
/// read). A read that catches the file before the child has it open can make the
/// child's own open fail; then the child is started again.
fn holder(path: &Path) -> (std::process::Child, cli_support::Run) {
    let p = path.to_str().unwrap();
    let spawn = || {
        Command::new(env!("CARGO_BIN_EXE_notify"))
            .args(["import", p])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let mut child = spawn();
    loop {
        let run = notify(&["sessions", p]);
        if run.code == 6 {
            return (child, run);
        }
        // Not there yet (3), or there and not yet held (0).
        assert!(run.code == 3 || run.code == 0, "{run:?}");
        if child.try_wait().unwrap().is_some() {
            child = spawn();
        }
        std::thread::yield_now();
    }
}

#[test]
fn a_journal_held_by_a_running_process_is_in_use() {
    let dir = tempfile::tempdir().unwrap();
    let (path, _) = journal_file(dir.path());
    let p = path.to_str().unwrap();

    // Another handle: this process has it open for writing.
    let journal = RedbJournal::open(&path, JournalOptions::default()).unwrap();
    for args in [
        vec!["sessions", p],
        vec!["pending", p],
        vec!["verify", p],
        vec!["stats", p, "--json"],
        vec!["export", p],
        vec!["purge", p, "--ended-before", "1d"],
    ] {
        let run = notify(&args);
        expect_code(&run, 6);
        assert!(run.stdout.is_empty(), "partial output: {}", run.stdout);
        assert_eq!(run.stderr.lines().count(), 1, "{}", run.stderr);
        assert!(
            run.stderr.contains("in use by another process"),
            "{}",
            run.stderr
        );
    }
    journal.close();

    // A child process: `notify import` holds the new journal open while it waits for
    // its input.
    let held = dir.path().join("held.redb");
    let (mut child, run) = holder(&held);
    expect_code(&run, 6);
    assert!(run.stdout.is_empty(), "partial output: {}", run.stdout);
    assert!(
        run.stderr.contains("in use by another process"),
        "{}",
        run.stderr
    );
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(b"").unwrap();
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let run = notify(&["sessions", held.to_str().unwrap()]);
    expect_code(&run, 0);
    assert!(run.stdout.contains("has no sessions"), "{}", run.stdout);

    // The file as a crash leaves it: copied while its writer holds it, after a
    // commit. No longer in use, but not closed cleanly; a read says so and leaves it
    // alone, a writable open repairs it.
    let killed = dir.path().join("crashed.redb");
    {
        let journal = RedbJournal::open(&path, JournalOptions::default()).unwrap();
        let session = notify_types::SessionId::new();
        let record = notify_testkit::sample::command(session, notify_types::LoopId::new());
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(journal.append(session, record)).unwrap();
        std::fs::copy(&path, &killed).unwrap();
        journal.close();
    }
    let before = fingerprint(&killed);
    let run = notify(&["sessions", killed.to_str().unwrap()]);
    expect_code(&run, 7);
    assert!(run.stderr.contains("not closed cleanly"), "{}", run.stderr);
    assert!(
        fingerprint(&killed) == before,
        "the refused read changed the file"
    );
    // The page check reads it as it is and leaves it so (still not closed cleanly).
    expect_code(&notify(&["verify", killed.to_str().unwrap(), "--pages"]), 0);
    assert!(
        fingerprint(&killed) == before,
        "verify --pages changed the file"
    );
    expect_code(&notify(&["sessions", killed.to_str().unwrap()]), 7);
    // The application's open recovers it.
    RedbJournal::open(&killed, JournalOptions::default())
        .unwrap()
        .close();
    expect_code(&notify(&["sessions", killed.to_str().unwrap()]), 0);
}

/// The format-1 journal the build before format 2 wrote (notify-journal's fixture).
fn format_1_file(dir: &Path) -> PathBuf {
    let path = dir.join("format1.redb");
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../notify-journal/tests/fixtures/format1.redb"),
        &path,
    )
    .unwrap();
    path
}

#[test]
fn verify_pages_never_writes_a_format_1_file() {
    let dir = tempfile::tempdir().unwrap();
    // Checked as its upgrade would check it, not upgraded.
    let old = format_1_file(dir.path());
    let p = old.to_str().unwrap();
    let (sha, before) = (tamper::sha256_file(&old).unwrap(), fingerprint(&old));
    let run = notify(&["verify", p, "--pages"]);
    expect_code(&run, 0);
    assert!(run.stdout.contains("77 frames"), "{}", run.stdout);
    assert!(run.stdout.contains("page check: clean"), "{}", run.stdout);
    assert_eq!(
        tamper::sha256_file(&old).unwrap(),
        sha,
        "verify --pages upgraded it"
    );
    assert!(
        fingerprint(&old) == before,
        "verify --pages touched the file"
    );
    let run = notify(&["sessions", p]);
    expect_code(&run, 7);
    assert!(run.stderr.contains("format version 1"), "{}", run.stderr);
}

#[test]
fn verify_pages_never_writes_a_file_a_sigkill_left_unclean() {
    let dir = tempfile::tempdir().unwrap();
    // A file whose writer, a real `notify` process holding it open for writing, was
    // killed with SIGKILL.
    let killed = dir.path().join("killed.redb");
    let (mut child, run) = holder(&killed);
    expect_code(&run, 6);
    child.kill().unwrap();
    child.wait().unwrap();
    let k = killed.to_str().unwrap();
    let run = notify(&["sessions", k]);
    expect_code(&run, 7);
    assert!(run.stderr.contains("not closed cleanly"), "{}", run.stderr);
    let (sha, before) = (tamper::sha256_file(&killed).unwrap(), fingerprint(&killed));
    let run = notify(&["verify", k, "--pages"]);
    expect_code(&run, 0);
    assert!(run.stdout.contains("page check: clean"), "{}", run.stdout);
    assert_eq!(
        tamper::sha256_file(&killed).unwrap(),
        sha,
        "verify --pages wrote to a file left unclean"
    );
    assert!(
        fingerprint(&killed) == before,
        "verify --pages touched the file"
    );
    expect_code(&notify(&["sessions", k]), 7);
}

#[test]
fn a_damaged_format_1_file_is_named_and_left_as_it_was() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("damaged1.redb");
    let session = notify_types::SessionId::new();
    let loop_id = notify_types::LoopId::new();
    let frames: Vec<_> = (1..=50)
        .map(|seq| {
            (
                session,
                seq,
                notify_testkit::sample::command(session, loop_id),
            )
        })
        .collect();
    tamper::write_format_1(&path, &frames).unwrap();
    tamper::replace_format_1_frame(&path, session, 45, b"{").unwrap();
    let p = path.to_str().unwrap();
    let sha = tamper::sha256_file(&path).unwrap();
    let named = format!("session {session} seq 45");

    // Its upgrade (a writable open: purge) is refused with the frame named.
    let run = notify(&["purge", p, "--ended-before", "1d"]);
    expect_code(&run, 5);
    assert!(
        run.stderr.contains(&named) && run.stderr.contains("nothing was written"),
        "{}",
        run.stderr
    );
    assert_eq!(
        tamper::sha256_file(&path).unwrap(),
        sha,
        "the refused upgrade wrote"
    );
    // The page check lists it, and writes nothing either.
    let run = notify(&["verify", p, "--pages"]);
    expect_code(&run, 1);
    assert!(run.stdout.contains(&named), "{}", run.stdout);
    assert_eq!(tamper::sha256_file(&path).unwrap(), sha);
    // Still format 1: a read says so.
    expect_code(&notify(&["sessions", p]), 7);
}

#[test]
fn missing_foreign_and_damaged_files_each_get_their_message_and_status() {
    let dir = tempfile::tempdir().unwrap();
    let check = |args: &[&str], code: i32, says: &str| {
        let run = notify(args);
        expect_code(&run, code);
        assert!(run.stdout.is_empty(), "{}", run.stdout);
        assert!(
            run.stderr.starts_with("notify: ") && run.stderr.contains(says),
            "{}",
            run.stderr
        );
        assert_eq!(run.stderr.lines().count(), 1, "{}", run.stderr);
    };

    let missing = dir.path().join("missing.redb");
    let m = missing.to_str().unwrap();
    for cmd in ["sessions", "pending", "verify", "export", "stats"] {
        check(&[cmd, m], 3, "no such file");
    }
    assert!(!missing.exists(), "a read created the file");

    let text = dir.path().join("notes.txt");
    std::fs::write(&text, "not a journal\n").unwrap();
    check(
        &["sessions", text.to_str().unwrap()],
        4,
        "is not a notify journal",
    );
    let empty = dir.path().join("empty.redb");
    std::fs::write(&empty, "").unwrap();
    check(
        &["stats", empty.to_str().unwrap()],
        4,
        "is not a notify journal",
    );

    // A redb file without the journal's tables.
    let plain = dir.path().join("plain.redb");
    drop(redb::Database::create(&plain).unwrap());
    check(
        &["verify", plain.to_str().unwrap()],
        4,
        "without journal metadata",
    );

    // A journal cut short: damaged.
    let (path, _) = journal_file(dir.path());
    let bytes = std::fs::read(&path).unwrap();
    let cut = dir.path().join("cut.redb");
    std::fs::write(&cut, &bytes[..bytes.len() / 3]).unwrap();
    // redb cannot load its allocator state without a repair, which a read never runs.
    check(&["sessions", cut.to_str().unwrap()], 7, "cut short");

    // A damaged header: the redb magic, then garbage.
    let mut garbage = bytes.clone();
    for b in garbage.iter_mut().skip(9).take(4096) {
        *b = 0xA5;
    }
    let bad = dir.path().join("garbage.redb");
    std::fs::write(&bad, &garbage).unwrap();
    check(
        &["sessions", bad.to_str().unwrap()],
        5,
        "is a damaged journal",
    );

    // Usage errors: status 2.
    let run = notify(&["show", path.to_str().unwrap(), "not-a-session"]);
    expect_code(&run, 2);
    assert!(run.stderr.contains("not a session ID"), "{}", run.stderr);
    expect_code(&notify(&["show", path.to_str().unwrap()]), 2);
    expect_code(&notify(&["sessions"]), 2);
    let run = notify(&["purge", path.to_str().unwrap(), "--ended-before", "soon"]);
    expect_code(&run, 2);

    // A session the journal does not have: not found.
    let run = notify(&[
        "show",
        path.to_str().unwrap(),
        &notify_types::SessionId::new().to_string(),
    ]);
    expect_code(&run, 3);
    assert!(run.stderr.contains("has no session"), "{}", run.stderr);
}

#[test]
fn help_documents_the_exit_statuses_and_an_example_for_every_command() {
    let top = notify(&["--help"]);
    expect_code(&top, 0);
    assert!(top.stdout.contains("Exit status:") && top.stdout.contains("6  the journal is in use"));
    for cmd in [
        "sessions", "show", "pending", "verify", "export", "import", "stats", "purge",
    ] {
        let run = notify(&[cmd, "--help"]);
        expect_code(&run, 0);
        assert!(run.stdout.contains("Example:"), "{cmd}: {}", run.stdout);
        assert!(
            run.stdout.contains("6 in use by another process"),
            "{cmd}: {}",
            run.stdout
        );
        assert!(run.stdout.contains("--postgres"), "{cmd}: {}", run.stdout);
    }
}

/// Ends `session` through the library; returns its end marker's seq.
fn end_session(path: &Path, session: notify_types::SessionId) -> u64 {
    let journal = RedbJournal::open(path, JournalOptions::default()).unwrap();
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
        let journal = RedbJournal::open(path, JournalOptions::default()).unwrap();
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
        let journal = RedbJournal::open(&copy, JournalOptions::default()).unwrap();
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
        let journal = RedbJournal::open(file, JournalOptions::default()).unwrap();
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
        let journal = RedbJournal::open(&path, JournalOptions::default()).unwrap();
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
        let journal = RedbJournal::open(&path, JournalOptions::default()).unwrap();
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
