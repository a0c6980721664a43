//! The real `notify` binary on a PostgreSQL journal (`--postgres CONNINFO --schema S`),
//! in schemas of its own: every read command against the library's answers, verify
//! naming a row changed behind the journal's back, export → import → export, and the
//! missing schema. Needs `NOTIFY_TEST_DATABASE_URL` (default: the local test database);
//! fails when there is none.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod cli_support;

use std::path::Path;

use cli_support::password_server::PasswordServer;
use cli_support::{
    EXPORT_HEADER, check_export, check_moved_states, check_pending, check_sessions, check_show,
    end_and_purge, expect_code, notify, notify_env, notify_with_input, populate, state_line, truth,
};
use notify_journal::{
    ImportStateError, JournalBackend, PgJournal, PgOptions, RedbJournal, RedbOptions, SessionState,
};
use notify_testkit::postgres::{DATABASE_URL_VAR, LOCAL_DEFAULT_URL};
use notify_types::{JournalRecord, SessionEnded, SessionEvent};

fn url() -> String {
    std::env::var(DATABASE_URL_VAR)
        .ok()
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| LOCAL_DEFAULT_URL.to_owned())
}

/// A fresh schema name of this test binary's own.
fn schema(tag: &str) -> String {
    format!(
        "cli_{tag}_{}",
        uuid::Uuid::new_v4().simple().to_string().get(..12).unwrap()
    )
}

async fn drop_schema(url: &str, schema: &str) {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .expect("connect to drop the test schema");
    tokio::spawn(conn);
    client
        .batch_execute(&format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_command_works_on_postgres_as_on_a_file() {
    let url = url();
    let (s1, s2) = (schema("src"), schema("copy"));
    let journal = PgJournal::connect(&url, PgOptions::default().schema(&s1))
        .await
        .unwrap_or_else(|e| {
            panic!("PostgreSQL at {DATABASE_URL_VAR} (or the local default) is needed: {e}")
        });
    let fixture = populate(&journal).await;
    let truth = truth(&journal).await;
    assert_eq!(truth.keys().copied().collect::<Vec<_>>(), fixture.sessions);
    let pg = |cmd: &str, schema: &str, extra: &[&str]| {
        let mut args = vec![cmd, "--postgres", &url, "--schema", schema];
        args.extend_from_slice(extra);
        notify(&args.iter().map(|s| &**s).collect::<Vec<_>>())
    };

    check_sessions(&pg("sessions", &s1, &["--json"]), &truth);
    for (session, t) in &truth {
        check_show(
            &pg("show", &s1, &[&session.to_string(), "--json"]),
            &t.frames,
        );
    }
    check_pending(&pg("pending", &s1, &["--json"]), &truth);
    let verify = pg("verify", &s1, &[]);
    expect_code(&verify, 0);
    assert!(verify.stdout.contains("clean"), "{}", verify.stdout);
    let stats = pg("stats", &s1, &["--json"]);
    expect_code(&stats, 0);
    let s = &stats.json()[0];
    let frames: usize = truth.values().map(|t| t.frames.len()).sum();
    assert_eq!(s["frames"], frames as u64);
    assert_eq!(s["sessions"], truth.len() as u64);
    assert_eq!(s["schema_version"], notify_journal::PG_SCHEMA_VERSION);

    // Export → import into another schema → export: the same bytes.
    let first = pg("export", &s1, &[]);
    expect_code(&first, 0);
    check_export(&first.raw, &truth);
    let mut args = vec!["import", "--postgres", &url, "--schema", &s2];
    let import = notify_with_input(&args, &first.raw);
    expect_code(&import, 0);
    let second = pg("export", &s2, &[]);
    expect_code(&second, 0);
    assert!(
        first.raw == second.raw,
        "export → import → export changed the bytes"
    );
    // And never into a journal that is not empty.
    args.push("--json");
    let again = notify_with_input(&args, &first.raw);
    expect_code(&again, 8);
    assert!(again.stderr.contains("is not empty"), "{}", again.stderr);
    assert!(pg("export", &s2, &[]).raw == first.raw);

    // A row changed behind the journal's back: verify names its session and seq.
    let session = fixture.sessions[2];
    let (client, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    let changed = client
        .execute(
            &format!(
                "UPDATE \"{s1}\".frames SET bytes = overlay(bytes placing 'X'::bytea from 10 for 1) \
                 WHERE session = $1 AND seq = 4"
            ),
            &[session.as_uuid()],
        )
        .await
        .unwrap();
    assert_eq!(changed, 1);
    let verify = pg("verify", &s1, &[]);
    expect_code(&verify, 1);
    assert!(
        verify.stdout.contains(&format!("session {session} seq 4")),
        "{}",
        verify.stdout
    );
    let show = pg("show", &s1, &[&session.to_string()]);
    expect_code(&show, 5);
    assert!(show.stderr.contains("damaged"), "{}", show.stderr);

    // The read commands created nothing: a schema that holds no journal stays absent.
    let absent = schema("absent");
    for cmd in ["sessions", "pending", "verify", "export", "stats"] {
        let run = pg(cmd, &absent, &[]);
        expect_code(&run, 3);
        assert!(
            run.stderr.contains("holds no notify journal"),
            "{}",
            run.stderr
        );
    }
    let exists = client
        .query_one(
            "SELECT count(*) FROM information_schema.schemata WHERE schema_name = $1",
            &[&absent],
        )
        .await
        .unwrap();
    assert_eq!(exists.get::<_, i64>(0), 0, "a read created the schema");

    // Purge through the library's purge (no session of the fixture has ended).
    let purge = pg("purge", &s2, &["--ended-before", "1d", "--json"]);
    expect_code(&purge, 0);
    assert_eq!(purge.json()[0]["frames"], 0);

    // End a session of the copy, then purge it: the state column follows, a purged
    // session's frames are gone (show: not found) and export skips it.
    let copy = PgJournal::connect(&url, PgOptions::default().schema(&s2))
        .await
        .unwrap();
    let ended = fixture.sessions[0];
    let end = JournalRecord::Event(SessionEvent::SessionEnded(SessionEnded::new(ended)));
    let marker = copy.append(ended, end).await.unwrap();
    assert!(marker.appended);
    let listed = pg("sessions", &s2, &["--json"]);
    expect_code(&listed, 0);
    let row = listed
        .json()
        .into_iter()
        .find(|l| l["session"] == ended.to_string())
        .unwrap();
    assert_eq!(row["state"], "ended", "{row}");
    assert!(row["ended_at"].is_string(), "{row}");
    assert_eq!(
        row["pending"], 0,
        "an ended session has nothing to redeliver"
    );
    assert_eq!(row["head"], marker.seq);
    let purge = pg(
        "purge",
        &s2,
        &["--ended-before", "2999-01-01T00:00:00Z", "--json"],
    );
    expect_code(&purge, 0);
    assert_eq!(purge.json()[0]["sessions"], 1);
    assert_eq!(purge.json()[0]["frames"], marker.seq);
    let listed = pg("sessions", &s2, &["--json"]);
    let row = listed
        .json()
        .into_iter()
        .find(|l| l["session"] == ended.to_string())
        .unwrap();
    assert_eq!(row["state"], "purged", "{row}");
    assert!(row["purged_at"].is_string(), "{row}");
    assert_eq!(row["frames"], 0);
    assert_eq!(row["head"], marker.seq);
    let show = pg("show", &s2, &[&ended.to_string()]);
    expect_code(&show, 3);
    assert!(show.stderr.contains("was purged"), "{}", show.stderr);
    // Export keeps it as its tombstone: one line, no frame.
    let export = pg("export", &s2, &[]);
    expect_code(&export, 0);
    assert!(export.stderr.is_empty(), "{}", export.stderr);
    let mentions: Vec<&str> = export
        .stdout
        .lines()
        .filter(|l| l.contains(&ended.to_string()))
        .collect();
    assert_eq!(mentions.len(), 1, "{}", export.stdout);
    assert!(
        mentions[0].contains(r#""state":"purged""#),
        "{}",
        mentions[0]
    );
    assert_eq!(
        export.stdout.lines().count() + truth[&ended].frames.len(),
        first.stdout.lines().count() + 1
    );
    copy.close().await;

    // Compact: a VACUUM of the journal's tables, online; the journal reads the same.
    let compact = pg("compact", &s2, &["--json"]);
    expect_code(&compact, 0);
    assert_eq!(compact.json()[0]["vacuumed"], true);
    assert_eq!(pg("export", &s2, &[]).raw, export.raw);
    // A schema with no journal is not created by compact.
    let none = format!("{s2}_none");
    expect_code(&pg("compact", &none, &[]), 3);

    journal.close().await;
    drop_schema(&url, &s1).await;
    drop_schema(&url, &s2).await;
}

/// Export carries end times and tombstones, import restores them, on PostgreSQL: after a
/// move to another schema the ended session keeps its end time, the purged one is its
/// tombstone (a late retry is refused as purged, not appended at seq 1), and export →
/// import → export is byte-identical with live, ended and purged sessions; the same
/// export moved into a redb file exports the same bytes too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ended_and_purged_sessions_survive_a_move_on_postgres() {
    let url = url();
    let (s1, s2) = (schema("msrc"), schema("mcopy"));
    let journal = PgJournal::connect(&url, PgOptions::default().schema(&s1))
        .await
        .unwrap_or_else(|e| {
            panic!("PostgreSQL at {DATABASE_URL_VAR} (or the local default) is needed: {e}")
        });
    let fixture = populate(&journal).await;
    let (ended, purged, live) = (
        fixture.sessions[0],
        fixture.sessions[1],
        fixture.sessions[2],
    );
    let (ended_state, purged_state) = end_and_purge(&journal, ended, purged).await;
    let pg = |cmd: &str, schema: &str, extra: &[&str]| {
        let mut args = vec![cmd, "--postgres", &url, "--schema", schema];
        args.extend_from_slice(extra);
        notify(&args.iter().map(|s| &**s).collect::<Vec<_>>())
    };

    let first = pg("export", &s1, &[]);
    expect_code(&first, 0);
    assert!(first.stderr.is_empty(), "{}", first.stderr);
    assert!(first.stdout.starts_with(EXPORT_HEADER), "{}", first.stdout);
    for (session, state) in [(ended, &ended_state), (purged, &purged_state)] {
        let line = state_line(session, state).unwrap();
        assert!(
            first.stdout.lines().any(|l| l == line),
            "no {line} in\n{}",
            first.stdout
        );
    }
    let import = notify_with_input(
        &["import", "--postgres", &url, "--schema", &s2, "--json"],
        &first.raw,
    );
    expect_code(&import, 0);
    let report = &import.json()[0];
    assert_eq!(
        (&report["ended"], &report["purged"]),
        (&1.into(), &1.into()),
        "{report}"
    );
    let second = pg("export", &s2, &[]);
    expect_code(&second, 0);
    assert!(
        first.raw == second.raw,
        "export → import → export changed the bytes:\n{}\n---\n{}",
        first.stdout,
        second.stdout
    );

    let moved = PgJournal::connect(&url, PgOptions::default().schema(&s2))
        .await
        .unwrap();
    check_moved_states(&moved, (ended, ended_state), (purged, purged_state)).await;
    // Contradicting states are refused, typed, and write nothing.
    let refused = moved.import_states(vec![(live, purged_state)]).await;
    assert!(
        matches!(refused, Err(ImportStateError::Conflict { session, held: SessionState::Live, .. }) if session == live),
        "{refused:?}"
    );
    let refused = moved.import_states(vec![(purged, ended_state)]).await;
    assert!(
        matches!(refused, Err(ImportStateError::Conflict { held, .. }) if held == purged_state),
        "{refused:?}"
    );
    // The same states again change nothing.
    moved
        .import_states(vec![(ended, ended_state), (purged, purged_state)])
        .await
        .unwrap();
    assert!(pg("export", &s2, &[]).raw == first.raw);
    moved.close().await;

    // Into a redb file: the same states, the same bytes.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("moved.redb");
    let f = file.to_str().unwrap();
    expect_code(&notify_with_input(&["import", f], &first.raw), 0);
    assert!(notify(&["export", f]).raw == first.raw);
    let redb = RedbJournal::open(&file, RedbOptions::default()).unwrap();
    check_moved_states(&redb, (ended, ended_state), (purged, purged_state)).await;
    redb.close();

    journal.close().await;
    drop_schema(&url, &s1).await;
    drop_schema(&url, &s2).await;
}

/// The connection string can come from `NOTIFY_DATABASE_URL` alone: no `--postgres`,
/// no password or anything else on the command line. `--postgres` wins over it, and so
/// does a PATH (the file is read, not the database).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notify_database_url_alone_reaches_the_journal() {
    let url = url();
    let s = schema("env");
    let journal = PgJournal::connect(&url, PgOptions::default().schema(&s))
        .await
        .unwrap_or_else(|e| {
            panic!("PostgreSQL at {DATABASE_URL_VAR} (or the local default) is needed: {e}")
        });
    let fixture = populate(&journal).await;
    let truth = truth(&journal).await;
    let home = tempfile::tempdir().unwrap();
    let env = [("NOTIFY_DATABASE_URL", url.as_str())];
    let h = home.path();

    check_sessions(
        &notify_env(&["sessions", "--schema", &s, "--json"], &env, h),
        &truth,
    );
    let (session, t) = truth.iter().next().unwrap();
    let id = session.to_string();
    check_show(
        &notify_env(&["show", "--schema", &s, &id, "--json"], &env, h),
        &t.frames,
    );
    // A lone session ID after a command whose SESSION is optional: the database's.
    let one = notify_env(&["export", "--schema", &s, &id], &env, h);
    expect_code(&one, 0);
    assert_eq!(
        one.stdout.lines().count(),
        1 + t.frames.len(),
        "{}",
        one.stdout
    );
    check_pending(
        &notify_env(&["pending", "--schema", &s, "--json"], &env, h),
        &truth,
    );

    // `--postgres` wins over the variable (which names no server here).
    let nowhere = [(
        "NOTIFY_DATABASE_URL",
        "host=127.0.0.1 port=1 user=nobody connect_timeout=2",
    )];
    check_sessions(
        &notify_env(
            &["sessions", "--postgres", &url, "--schema", &s, "--json"],
            &nowhere,
            h,
        ),
        &truth,
    );
    expect_code(&notify_env(&["sessions", "--schema", &s], &nowhere, h), 9);
    // A PATH wins too: the file is read.
    let file = h.join("journal.redb");
    let redb = RedbJournal::open(&file, RedbOptions::default()).unwrap();
    redb.close();
    let listed = notify_env(&["sessions", file.to_str().unwrap(), "--json"], &env, h);
    expect_code(&listed, 0);
    assert!(listed.stdout.is_empty(), "{}", listed.stdout);
    // Neither: a usage error that names all three.
    let run = notify_env(&["sessions"], &[], h);
    expect_code(&run, 2);
    assert!(run.stderr.contains("NOTIFY_DATABASE_URL"), "{}", run.stderr);

    drop(fixture);
    journal.close().await;
    drop_schema(&url, &s).await;
}

/// A password from `PGPASSWORD` or the password file reaches the server: against a
/// cluster of the test's own that demands one (`scram-sha-256`), the binary gets in
/// (the schema holds no journal: exit 3) with the right password from either source
/// and is refused (exit 9) without one or with a wrong one. The password file is
/// libpq's: `*` wildcards, `\:` and `\\` escapes (the password holds both), the first
/// matching line; one that others may read is passed over with a warning. A password
/// in the connection string wins over both.
#[test]
fn a_password_from_the_environment_or_the_password_file_reaches_the_server() {
    let server = PasswordServer::start();
    let conninfo = server.conninfo();
    let home = server.scratch().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let sessions = |vars: &[(&str, &str)]| {
        notify_env(
            &[
                "sessions",
                "--postgres",
                &conninfo,
                "--schema",
                "nothing_here",
            ],
            vars,
            &home,
        )
    };
    let got_in = |run: &cli_support::Run| {
        expect_code(run, 3);
        assert!(
            run.stderr.contains("holds no notify journal"),
            "{}",
            run.stderr
        );
        assert!(
            !run.stderr.contains(PasswordServer::PASSWORD),
            "{}",
            run.stderr
        );
    };
    // Refused at connect: for a wrong password with the server's "invalid password"
    // (SQLSTATE 28P01); with none, before it is asked for.
    let refused = |run: &cli_support::Run, wrong_password: bool| {
        expect_code(run, 9);
        assert!(run.stderr.contains("connect failed"), "{}", run.stderr);
        assert_eq!(
            run.stderr.contains("SQLSTATE 28P01"),
            wrong_password,
            "{}",
            run.stderr
        );
        assert!(
            !run.stderr.contains(PasswordServer::PASSWORD),
            "{}",
            run.stderr
        );
    };

    // No password anywhere: the server refuses.
    refused(&sessions(&[]), false);
    // PGPASSWORD: in; a wrong one: out.
    got_in(&sessions(&[("PGPASSWORD", PasswordServer::PASSWORD)]));
    refused(&sessions(&[("PGPASSWORD", "wrong")]), true);
    // With the connection string from NOTIFY_DATABASE_URL too: nothing on the command
    // line but the schema.
    got_in(&notify_env(
        &["sessions", "--schema", "nothing_here"],
        &[
            ("NOTIFY_DATABASE_URL", conninfo.as_str()),
            ("PGPASSWORD", PasswordServer::PASSWORD),
        ],
        &home,
    ));

    // ~/.pgpass: the first matching line wins, wildcards match, escapes unescape.
    let escaped = PasswordServer::PASSWORD
        .replace('\\', "\\\\")
        .replace(':', "\\:");
    let port = server.port;
    let pgpass = home.join(".pgpass");
    let write = |path: &Path, text: &str, mode: u32| {
        std::fs::write(path, text).unwrap();
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    };
    write(
        &pgpass,
        &format!(
            "# comment\n\
             127.0.0.1:{port}:postgres:someone_else:wrong\n\
             127.0.0.1:1:*:*:wrong\n\
             127.0.0.1:{port}:*:postgres:{escaped}\n\
             *:*:*:*:wrong\n"
        ),
        0o600,
    );
    got_in(&sessions(&[]));
    // PGPASSWORD comes first.
    refused(&sessions(&[("PGPASSWORD", "wrong")]), true);
    // The password in the connection string wins over both.
    let with_password = format!(
        "{conninfo} password='{}'",
        PasswordServer::PASSWORD.replace('\\', "\\\\")
    );
    got_in(&notify_env(
        &[
            "sessions",
            "--postgres",
            &with_password,
            "--schema",
            "nothing_here",
        ],
        &[("PGPASSWORD", "wrong")],
        &home,
    ));
    // A password file others may read is passed over, with a warning.
    write(&pgpass, &std::fs::read_to_string(&pgpass).unwrap(), 0o644);
    let run = sessions(&[]);
    refused(&run, false);
    assert!(
        run.stderr.contains("warning") && run.stderr.contains("group or world access"),
        "{}",
        run.stderr
    );
    // PGPASSFILE names another file; a line for another host does not match.
    let other = server.scratch().join("other.pgpass");
    let o = other.to_str().unwrap();
    write(&other, &format!("localhost:{port}:*:*:{escaped}\n"), 0o600);
    refused(&sessions(&[("PGPASSFILE", o)]), false);
    write(
        &other,
        &format!("*:{port}:postgres:postgres:{escaped}\n"),
        0o600,
    );
    got_in(&sessions(&[("PGPASSFILE", o)]));
}

/// `notify sessions --postgres` shows each session's lease: holder, epoch and time
/// left (the JSON's `lease` object, the table's last three columns).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_show_each_lease_on_postgres() {
    use notify_journal::JournalLeases;
    let url = url();
    let s = schema("leases");
    let options = PgOptions::default()
        .schema(&s)
        .lease_duration(std::time::Duration::from_secs(600));
    let journal = PgJournal::connect(&url, options).await.unwrap();
    let (leased, free) = (
        notify_types::SessionId::new(),
        notify_types::SessionId::new(),
    );
    for session in [leased, free] {
        let record = notify_testkit::sample::command(session, notify_types::LoopId::new());
        journal.append(session, record).await.unwrap();
    }
    let lease = JournalLeases::acquire_lease(&journal, leased)
        .await
        .unwrap();
    let run = notify(&["sessions", "--postgres", &url, "--schema", &s, "--json"]);
    expect_code(&run, 0);
    let lines = run.json();
    let line = |id: notify_types::SessionId| {
        lines
            .iter()
            .find(|l| l["session"] == id.to_string())
            .unwrap_or_else(|| panic!("{id} not listed: {}", run.stdout))
    };
    let held = &line(leased)["lease"];
    assert_eq!(held["holder"], journal.holder_id().to_string());
    assert_eq!(held["epoch"], lease.epoch());
    assert_eq!(held["live"], true);
    let left = held["expires_in_ms"].as_u64().expect("time left");
    assert!(left > 0 && left <= 600_000, "{left}");
    let none = &line(free)["lease"];
    assert!(none["holder"].is_null() && none["epoch"] == 0 && none["live"] == false);
    assert!(none["expires_in_ms"].is_null());
    // The table names the holder and the epoch too.
    let table = notify(&["sessions", "--postgres", &url, "--schema", &s]);
    expect_code(&table, 0);
    assert!(table.stdout.contains("LEASE HOLDER"), "{}", table.stdout);
    let row = table
        .stdout
        .lines()
        .find(|l| l.contains(&leased.to_string()))
        .unwrap();
    assert!(row.contains(&journal.holder_id().to_string()), "{row}");
    journal.close().await;
    drop_schema(&url, &s).await;
}
