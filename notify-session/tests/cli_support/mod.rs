//! Running the real `notify` binary, and a journal made by the library to run it on,
//! with the library's own answers to check the binary's against.
// Shared by cli_redb.rs and cli_postgres.rs; each uses part of it.
#![allow(dead_code)]

pub(crate) mod password_server;
pub(crate) mod redb;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use notify_journal::{JournalBackend, SessionState, replay_all};
use notify_session::{RestoreReport, restore};
use notify_testkit::sample;
use notify_types::{
    JournalRecord, LoopId, ProcessLifecycleKind, SessionEnded, SessionEvent, SessionId, Timestamp,
};

/// What one run of the binary did.
#[derive(Debug)]
pub(crate) struct Run {
    pub(crate) code: i32,
    pub(crate) stdout: String,
    pub(crate) stderr: String,
    pub(crate) raw: Vec<u8>,
}

impl Run {
    /// The stdout's JSON lines.
    pub(crate) fn json(&self) -> Vec<serde_json::Value> {
        self.stdout
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON: {l:?}: {e}")))
            .collect()
    }
}

fn finish(out: Output) -> Run {
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        raw: out.stdout,
    }
}

/// Runs `notify ARGS` (stdin empty).
pub(crate) fn notify(args: &[&str]) -> Run {
    let out = Command::new(env!("CARGO_BIN_EXE_notify"))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run notify");
    finish(out)
}

/// The environment variables `notify` reads credentials from; [`notify_env`] clears them.
const CREDENTIAL_VARS: &[&str] = &["NOTIFY_DATABASE_URL", "PGPASSWORD", "PGPASSFILE"];

/// Runs `notify ARGS` (stdin empty) with only `vars` of the credential variables set,
/// and `HOME` at `home` (where it looks for `.pgpass`).
pub(crate) fn notify_env(args: &[&str], vars: &[(&str, &str)], home: &Path) -> Run {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_notify"));
    cmd.args(args).stdin(Stdio::null()).env("HOME", home);
    for var in CREDENTIAL_VARS {
        cmd.env_remove(var);
    }
    for (k, v) in vars {
        cmd.env(k, v);
    }
    finish(cmd.output().expect("run notify"))
}

/// Runs `notify ARGS` with `input` on stdin.
pub(crate) fn notify_with_input(args: &[&str], input: &[u8]) -> Run {
    use std::io::Write as _;
    let mut child = Command::new(env!("CARGO_BIN_EXE_notify"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run notify");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(input)
        .expect("write stdin");
    finish(child.wait_with_output().expect("wait for notify"))
}

/// Asserts the run ended with `code`, showing its output otherwise.
#[track_caller]
pub(crate) fn expect_code(run: &Run, code: i32) {
    assert_eq!(
        run.code, code,
        "exit status {} (wanted {code})\nstdout:\n{}\nstderr:\n{}",
        run.code, run.stdout, run.stderr
    );
}

/// A journal's content, written through the library: three sessions with pending
/// notifications, consumed ones, and lifecycle events (some processes left running).
pub(crate) struct Fixture {
    pub(crate) sessions: Vec<SessionId>,
}

/// Writes the fixture's sessions into `journal`.
pub(crate) async fn populate(journal: &dyn JournalBackend) -> Fixture {
    let mut sessions = Vec::new();
    for shape in 0..3 {
        let session = SessionId::new();
        let (l1, l2) = (LoopId::new(), LoopId::new());
        let mut records: Vec<JournalRecord> = Vec::new();
        match shape {
            0 => {
                let pending = sample::command(session, l1);
                let consumed = sample::command(session, l1);
                let JournalRecord::Command(c) = &consumed else {
                    unreachable!()
                };
                let cause = c.command_id();
                records.push(sample::event(session, l1, ProcessLifecycleKind::Started));
                records.push(pending);
                records.push(consumed);
                records.push(sample::consumed(session, l1, cause));
                records.push(sample::command(session, l2));
            }
            1 => records.extend(sample::one_of_each(session, l2)),
            _ => {
                for _ in 0..40 {
                    records.push(sample::command(session, l1));
                }
            }
        }
        for record in records {
            let out = journal.append(session, record).await.expect("append");
            assert!(out.appended);
        }
        sessions.push(session);
    }
    sessions.sort();
    Fixture { sessions }
}

/// What the library answers about one session.
pub(crate) struct Truth {
    pub(crate) frames: Vec<(u64, JournalRecord)>,
    /// Live or ended (a purged session has no frames to compare).
    pub(crate) state: SessionState,
    pub(crate) head: u64,
    pub(crate) report: RestoreReport,
}

/// The library's answers for every session of `journal`, in ID order.
pub(crate) async fn truth(journal: &dyn JournalBackend) -> BTreeMap<SessionId, Truth> {
    let mut out = BTreeMap::new();
    for session in journal.sessions().await.expect("sessions") {
        out.insert(
            session,
            Truth {
                frames: replay_all(journal, session).await.expect("replay"),
                state: journal.session_state(session).await.expect("state"),
                head: journal.last_seq(session).await.expect("last seq"),
                report: restore(session, journal).await.expect("restore"),
            },
        );
    }
    out
}

/// Checks `notify sessions --json` against the library.
pub(crate) fn check_sessions(run: &Run, truth: &BTreeMap<SessionId, Truth>) {
    expect_code(run, 0);
    let lines = run.json();
    assert_eq!(lines.len(), truth.len(), "{}", run.stdout);
    for (line, (session, t)) in lines.iter().zip(truth) {
        assert_eq!(line["session"], session.to_string());
        assert_eq!(line["frames"], t.frames.len() as u64);
        assert_eq!(line["head"], t.head);
        assert_eq!(line["pending"], t.report.pending_count() as u64);
        assert_eq!(line["orphans"], t.report.orphans.len() as u64);
        assert_eq!(line["state"], "live");
    }
}

/// Checks `notify show --json` of `session` against the library's frames.
pub(crate) fn check_show(run: &Run, frames: &[(u64, JournalRecord)]) {
    expect_code(run, 0);
    let lines = run.json();
    assert_eq!(lines.len(), frames.len(), "{}", run.stdout);
    for (line, (seq, record)) in lines.iter().zip(frames) {
        assert_eq!(line["seq"], *seq);
        assert_eq!(line["kind"], record.type_name());
        assert_eq!(line["id"], record.key().to_string());
    }
}

/// Checks `notify pending --json` against restore's reports (and the seqs against
/// lookups in `frames`).
pub(crate) fn check_pending(run: &Run, truth: &BTreeMap<SessionId, Truth>) {
    expect_code(run, 0);
    let lines = run.json();
    let mut want_pending = Vec::new();
    let mut want_orphans = Vec::new();
    for (session, t) in truth {
        for (loop_id, commands) in &t.report.pending {
            for c in commands {
                let seq = t
                    .frames
                    .iter()
                    .find(|(_, r)| r.key() == *c.command_id().as_uuid())
                    .map(|(s, _)| *s)
                    .expect("pending command is journaled");
                want_pending.push((
                    session.to_string(),
                    loop_id.to_string(),
                    seq,
                    c.command_id().to_string(),
                ));
            }
        }
        for m in &t.report.orphans {
            want_orphans.push((
                session.to_string(),
                m.loop_id.to_string(),
                m.event_id.to_string(),
            ));
        }
    }
    let got_pending: Vec<_> = lines
        .iter()
        .filter(|l| l["type"] == "pending")
        .map(|l| {
            (
                l["session"].as_str().unwrap_or_default().to_owned(),
                l["loop"].as_str().unwrap_or_default().to_owned(),
                l["seq"].as_u64().unwrap_or_default(),
                l["command"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    let got_orphans: Vec<_> = lines
        .iter()
        .filter(|l| l["type"] == "orphan")
        .map(|l| {
            (
                l["session"].as_str().unwrap_or_default().to_owned(),
                l["loop"].as_str().unwrap_or_default().to_owned(),
                l["event"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    assert!(!want_pending.is_empty() && !want_orphans.is_empty());
    assert_eq!(got_pending, want_pending);
    assert_eq!(got_orphans, want_orphans);
    let summary = lines.last().expect("a summary line");
    assert_eq!(summary["type"], "summary");
    assert_eq!(summary["pending"], want_pending.len() as u64);
    assert_eq!(summary["orphans"], want_orphans.len() as u64);
}

/// The first line of every export of this build.
pub(crate) const EXPORT_HEADER: &str = "{\"notify_export\":2}\n";

/// The state line an export writes for `session` (none for a live one).
pub(crate) fn state_line(session: SessionId, state: &SessionState) -> Option<String> {
    match state {
        SessionState::Ended { ended_at, last_seq } => Some(format!(
            r#"{{"session":"{session}","state":"ended","ended_at":"{ended_at}","last_seq":{last_seq}}}"#
        )),
        SessionState::Purged(t) => Some(format!(
            r#"{{"session":"{session}","state":"purged","ended_at":"{}","purged_at":"{}","last_seq":{},"frames":{}}}"#,
            t.ended_at, t.purged_at, t.last_seq, t.frames
        )),
        _ => None,
    }
}

/// Checks that an export is its first line, then one line per frame of the library's
/// replay, in the canonical form, sessions in ID order, each ended one followed by its
/// state line.
pub(crate) fn check_export(raw: &[u8], truth: &BTreeMap<SessionId, Truth>) {
    let mut want = EXPORT_HEADER.as_bytes().to_vec();
    for (session, t) in truth {
        for (seq, record) in &t.frames {
            want.extend_from_slice(
                format!(r#"{{"session":"{session}","seq":{seq},"record":"#).as_bytes(),
            );
            want.extend_from_slice(&record.encode());
            want.extend_from_slice(b"}\n");
        }
        if let Some(line) = state_line(*session, &t.state) {
            want.extend_from_slice(line.as_bytes());
            want.push(b'\n');
        }
    }
    assert!(
        raw == want.as_slice(),
        "the export is not the canonical frames"
    );
}

/// The file's bytes and modification time.
pub(crate) fn fingerprint(path: &Path) -> (Vec<u8>, std::time::SystemTime) {
    let bytes = std::fs::read(path).expect("read journal");
    let mtime = std::fs::metadata(path)
        .and_then(|m| m.modified())
        .expect("mtime");
    (bytes, mtime)
}

/// The end marker of `session`.
pub(crate) fn end_marker(session: SessionId) -> JournalRecord {
    JournalRecord::from(SessionEvent::from(SessionEnded::new(session)))
}

/// Ends `purged` and purges it (nothing else of the journal has ended), then ends
/// `ended`: the journal then holds a live session or more, an ended one and a tombstone.
/// Returns their states.
pub(crate) async fn end_and_purge(
    journal: &dyn JournalBackend,
    ended: SessionId,
    purged: SessionId,
) -> (SessionState, SessionState) {
    let out = journal
        .append(purged, end_marker(purged))
        .await
        .expect("end marker");
    assert!(out.appended);
    // Any horizon after its end: nothing else has ended yet.
    let horizon = Timestamp::from_second(Timestamp::now().as_second() + 3600).expect("time");
    let report = notify_journal::purge(journal, horizon, 16)
        .await
        .expect("purge");
    assert_eq!((report.sessions, report.frames), (1, out.seq));
    let out = journal
        .append(ended, end_marker(ended))
        .await
        .expect("end marker");
    assert!(out.appended);
    let ended_state = journal.session_state(ended).await.expect("state");
    let purged_state = journal.session_state(purged).await.expect("state");
    assert!(
        matches!(ended_state, SessionState::Ended { .. }),
        "{ended_state:?}"
    );
    assert!(purged_state.is_purged(), "{purged_state:?}");
    (ended_state, purged_state)
}

/// Checks that `journal` holds `ended` and `purged` in exactly these states, and that
/// late appends to them are refused: a new notification to the ended session as ended,
/// any to the purged one as purged (not appended at seq 1).
pub(crate) async fn check_moved_states(
    journal: &dyn JournalBackend,
    (ended, ended_state): (SessionId, SessionState),
    (purged, purged_state): (SessionId, SessionState),
) {
    assert_eq!(
        journal.session_state(ended).await.expect("state"),
        ended_state,
        "the ended session's state (its end time) did not survive the move"
    );
    assert_eq!(
        journal.session_state(purged).await.expect("state"),
        purged_state,
        "the purged session's tombstone did not survive the move"
    );
    let SessionState::Purged(tombstone) = purged_state else {
        panic!("not a tombstone: {purged_state:?}")
    };
    assert_eq!(
        journal.last_seq(purged).await.expect("last seq"),
        tombstone.last_seq
    );
    for (session, purged) in [(ended, false), (purged, true)] {
        let late = sample::command(session, LoopId::new());
        match journal.append(session, late).await {
            Err(notify_journal::AppendError::SessionEnded {
                session: s,
                purged: p,
            }) => {
                assert_eq!((s, p), (session, purged));
            }
            other => panic!("a late append to session {session} answered {other:?}"),
        }
    }
}
