//! The real `notify` binary on damaged, held, format-1, killed, missing and foreign redb
//! files: the exit statuses and messages of the failure cases, and reads that leave the
//! file's bytes and mtime as they were.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod cli_support;

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use cli_support::redb::journal_file;
use cli_support::{expect_code, fingerprint, notify};
use notify_journal::{RedbJournal, RedbOptions};
use notify_testkit::tamper;

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
    let journal = RedbJournal::open(&path, RedbOptions::default()).unwrap();
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
        let journal = RedbJournal::open(&path, RedbOptions::default()).unwrap();
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
    RedbJournal::open(&killed, RedbOptions::default())
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
    // A kill that lands after the writer took the file's lock but before redb marked
    // it in use leaves a clean file: kill again until the fault happened.
    let killed = dir.path().join("killed.redb");
    let k = killed.to_str().unwrap();
    let mut attempts = 0;
    loop {
        attempts += 1;
        let (mut child, run) = holder(&killed);
        expect_code(&run, 6);
        child.kill().unwrap();
        child.wait().unwrap();
        let run = notify(&["sessions", k]);
        if run.code == 7 {
            assert!(run.stderr.contains("not closed cleanly"), "{}", run.stderr);
            break;
        }
        // Clean (0): killed before the file was marked; anything else is a failure.
        expect_code(&run, 0);
        assert!(attempts < 50, "50 kills never left the file unclean");
        std::fs::remove_file(&killed).unwrap();
    }
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
