//! Two real `notify serve` hosts on one PostgreSQL journal: each advertises its URL;
//! a request to the host that does not own the session is answered 307 with the
//! owner's URL (and a client that follows it is served by the owner); after the
//! owner's SIGTERM (leases released), the other host adopts the session and hands
//! out what was left unacknowledged. The directory of hosts survives its connection
//! being cut (the backend terminated) and connects as the journal does (over TLS
//! when the connection string asks for it). Needs `NOTIFY_TEST_DATABASE_URL`
//! (default: the local test database).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod serve_support;

use std::collections::HashSet;
use std::time::{Duration, Instant};

use notify_testkit::postgres::database_url;
use notify_types::{LoopId, SessionId, Uuid};
use reqwest::StatusCode;
use serve_support::{
    Client, Server, Start, completion, drop_schema, new_secret, pg_client, polled,
};

/// The directory's `application_name` (notify_session::serve::DIRECTORY_APPLICATION_NAME).
const DIRECTORY_APP: &str = "notify-serve-directory";

/// A fresh schema for a fleet's journal, and a new secret in a key file (its folder
/// held by the caller).
fn fleet() -> (String, String, tempfile::TempDir, std::path::PathBuf) {
    let schema = format!("serve_{}", Uuid::new_v4().simple());
    let dir = tempfile::tempdir().unwrap();
    let key_file = dir.path().join("keys");
    let secret = new_secret();
    std::fs::write(&key_file, &secret).unwrap();
    (schema, secret, dir, key_file)
}

fn start(url: &str, schema: &str, key_file: &std::path::Path) -> Server {
    Server::start(
        &Start::postgres(url, schema)
            .arg("--key-file")
            .arg(key_file.display().to_string())
            .arg("--lease-secs")
            .arg("6"),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_wrong_host_names_and_redirects_to_the_owner() {
    let Some(url) = database_url("serve_postgres") else {
        return;
    };
    let (schema, secret, _dir, key_file) = fleet();
    let mut a = start(&url, &schema, &key_file);
    let b = start(&url, &schema, &key_file);
    let no_redirects = || reqwest::Client::builder().redirect(reqwest::redirect::Policy::none());
    let at_a = Client::with_http(&a.url, Some(&secret), no_redirects());
    let at_b = Client::with_http(&b.url, Some(&secret), no_redirects());
    let following_b = Client::new(&b.url, Some(&secret));

    let (s, l) = (SessionId::new(), LoopId::new());
    assert_eq!(at_a.open(s).await.status, StatusCode::CREATED);
    assert_eq!(at_a.register(s, l, 64).await.status, StatusCode::CREATED);

    // B names A: 307, Location = this request at A, the body says who and where.
    let n = completion(s, l);
    let r = at_b.deliver(&n).await;
    assert_eq!(
        (r.status, r.str("disposition"), r.str("reason")),
        (StatusCode::TEMPORARY_REDIRECT, "stopped", "not_owner"),
        "{r:?}"
    );
    assert_eq!(r.str("owner_url"), a.url);
    assert_eq!(
        r.headers["location"],
        format!("{}/v1/sessions/{s}/completions", a.url)
    );
    for r in [
        at_b.open(s).await,
        at_b.register(s, l, 64).await,
        at_b.poll(s, l, "wait_ms=0").await,
    ] {
        assert_eq!(r.status, StatusCode::TEMPORARY_REDIRECT, "{r:?}");
        assert_eq!(r.str("owner_url"), a.url);
    }
    // A client that follows redirects is served by A (the signature travels along).
    let r = following_b.deliver(&n).await;
    assert_eq!(
        (r.status, r.str("disposition")),
        (StatusCode::CREATED, "accepted"),
        "{r:?}"
    );
    let r = following_b.deliver(&n).await;
    assert_eq!(
        (r.status, r.str("disposition")),
        (StatusCode::OK, "duplicate")
    );
    // Handed out at A, not acknowledged.
    let r = at_a.poll(s, l, "wait_ms=1000").await;
    assert_eq!(polled(&r), vec![(n.command_id.to_string(), 1)]);

    // A shuts down (releasing its leases): B adopts the session; the loop, registered
    // at B, gets the unacknowledged notification again.
    assert!(a.terminate().success(), "{}", a.log());
    let mut registered = None;
    for _ in 0..200 {
        let r = at_b.register(s, l, 64).await;
        if r.status == StatusCode::CREATED {
            registered = Some(r);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let r = registered.expect("B adopted the session within 20 s");
    assert_eq!(r.body["seeded"], 1, "{r:?}");
    let r = at_b.poll(s, l, "wait_ms=1000").await;
    assert_eq!(polled(&r), vec![(n.command_id.to_string(), 1)]);
    assert_eq!(
        at_b.ack(s, l, &n.command_id.to_string())
            .await
            .str("outcome"),
        "acknowledged"
    );
    assert_eq!(at_b.deliver(&n).await.status, StatusCode::OK);
    drop(b);
    drop_schema(&url, &schema).await;
}

/// The local ports of the TCP sockets process `pid` holds (Linux `/proc`): how a
/// test tells one server's database connections from another's.
fn tcp_ports_of(pid: u32) -> Vec<i32> {
    let inodes: HashSet<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .filter_map(|entry| std::fs::read_link(entry.ok()?.path()).ok())
        .filter_map(|target| {
            let target = target.to_str()?;
            Some(
                target
                    .strip_prefix("socket:[")?
                    .strip_suffix(']')?
                    .to_owned(),
            )
        })
        .collect();
    let mut ports = Vec::new();
    for table in ["tcp", "tcp6"] {
        let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/net/{table}")) else {
            continue;
        };
        for line in text.lines().skip(1) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            if fields.len() > 9
                && inodes.contains(fields[9])
                && let Some((_, port)) = fields[1].rsplit_once(':')
            {
                ports.push(i32::from_str_radix(port, 16).unwrap());
            }
        }
    }
    ports
}

/// Terminates the backends of `server`'s connections that are not the journal's
/// (`notify-journal`): its host directory's. Waits for them to exit; returns their
/// application names.
async fn terminate_directory(db: &tokio_postgres::Client, server: &Server) -> Vec<String> {
    let ports = tcp_ports_of(server.pid());
    db.query(
        "SELECT application_name, pg_terminate_backend(pid, 5000) FROM pg_stat_activity \
         WHERE datname = current_database() AND client_port = ANY($1) \
         AND application_name <> 'notify-journal' AND pid <> pg_backend_pid()",
        &[&ports],
    )
    .await
    .unwrap()
    .iter()
    .map(|r| {
        assert!(r.get::<_, bool>(1), "the backend was not terminated");
        r.get(0)
    })
    .collect()
}

/// Delivers `n` at `at` until it is answered 307 naming `owner` (within 10 s).
async fn redirected_within_10s(
    at: &Client,
    n: &notify_types::ProcessCompletionNotification,
    owner: &Server,
    host: &Server,
) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let r = at.deliver(n).await;
        if r.status == StatusCode::TEMPORARY_REDIRECT {
            assert_eq!(r.str("owner_url"), owner.url, "{r:?}");
            assert_eq!(
                r.headers["location"],
                format!("{}/v1/sessions/{}/completions", owner.url, n.session_id)
            );
            return;
        }
        assert!(
            Instant::now() < deadline,
            "not redirected to the owner within 10 s: {r:?}\nthe host's log:\n{}",
            host.log()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The advertisements naming `url`.
async fn advertised(db: &tokio_postgres::Client, schema: &str, url: &str) -> i64 {
    db.query_one(
        &format!("SELECT count(*) FROM \"{schema}\".serve_hosts WHERE url = $1"),
        &[&url],
    )
    .await
    .unwrap()
    .get(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_directory_reconnects_after_its_backend_was_terminated() {
    let Some(url) = database_url("serve_postgres") else {
        return;
    };
    let (schema, secret, _dir, key_file) = fleet();
    let a = start(&url, &schema, &key_file);
    let mut b = start(&url, &schema, &key_file);
    let no_redirects = || reqwest::Client::builder().redirect(reqwest::redirect::Policy::none());
    let at_a = Client::with_http(&a.url, Some(&secret), no_redirects());
    let at_b = Client::with_http(&b.url, Some(&secret), no_redirects());
    let db = pg_client(&url).await;

    let (s, l) = (SessionId::new(), LoopId::new());
    assert_eq!(at_a.open(s).await.status, StatusCode::CREATED);
    assert_eq!(at_a.register(s, l, 64).await.status, StatusCode::CREATED);
    let n = completion(s, l);
    redirected_within_10s(&at_b, &n, &a, &b).await;

    // B's directory connection is cut (as by a PostgreSQL restart or a network
    // blip): B still names A, its directory having reconnected.
    let cut = terminate_directory(&db, &b).await;
    assert!(!cut.is_empty(), "no directory connection of B's found");
    redirected_within_10s(&at_b, &n, &a, &b).await;
    let names: Vec<String> = db
        .query(
            "SELECT application_name FROM pg_stat_activity WHERE client_port = ANY($1)",
            &[&tcp_ports_of(b.pid())],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert!(
        names.iter().any(|n| n == DIRECTORY_APP),
        "B's connections after the reconnect: {names:?}"
    );

    // Cut again, then B shuts down: its withdrawal reconnects and removes its row.
    assert_eq!(advertised(&db, &schema, &b.url).await, 1);
    assert!(!terminate_directory(&db, &b).await.is_empty());
    assert!(b.terminate().success(), "{}", b.log());
    assert_eq!(
        advertised(&db, &schema, &b.url).await,
        0,
        "B's advertisement outlived its shutdown:\n{}",
        b.log()
    );
    drop(a);
    drop_schema(&url, &schema).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_directory_connects_over_tls_as_the_journal_does() {
    let Some(url) = database_url("serve_postgres") else {
        return;
    };
    let db = pg_client(&url).await;
    let ssl: String = db.query_one("SHOW ssl", &[]).await.unwrap().get(0);
    if ssl != "on" {
        // In CI the database is set up with TLS: a server without it is a failure.
        assert!(
            std::env::var_os("CI").is_none(),
            "the test database speaks no TLS (ssl = {ssl})"
        );
        eprintln!(
            "SKIPPED the_directory_connects_over_tls_as_the_journal_does: the server has no TLS"
        );
        return;
    }
    // The journal takes libpq's TLS keys (the driver would refuse `sslrootcert`);
    // `require`: encrypted, the certificate not checked.
    let sep = if url.starts_with("postgres") {
        if url.contains('?') { "&" } else { "?" }
    } else {
        " "
    };
    let tls_url = format!("{url}{sep}sslmode=require");
    let (schema, secret, _dir, key_file) = fleet();
    let a = start(&tls_url, &schema, &key_file);
    let b = start(&tls_url, &schema, &key_file);
    let no_redirects = || reqwest::Client::builder().redirect(reqwest::redirect::Policy::none());
    let at_a = Client::with_http(&a.url, Some(&secret), no_redirects());
    let at_b = Client::with_http(&b.url, Some(&secret), no_redirects());

    let (s, l) = (SessionId::new(), LoopId::new());
    assert_eq!(at_a.open(s).await.status, StatusCode::CREATED);
    assert_eq!(at_a.register(s, l, 64).await.status, StatusCode::CREATED);
    redirected_within_10s(&at_b, &completion(s, l), &a, &b).await;

    // Every connection of B's, its directory's too, is encrypted.
    let rows = db
        .query(
            "SELECT a.application_name, s.ssl FROM pg_stat_activity a JOIN pg_stat_ssl s USING (pid) \
             WHERE a.client_port = ANY($1)",
            &[&tcp_ports_of(b.pid())],
        )
        .await
        .unwrap();
    let conns: Vec<(String, bool)> = rows.iter().map(|r| (r.get(0), r.get(1))).collect();
    assert!(
        conns.iter().any(|(name, _)| name == DIRECTORY_APP),
        "{conns:?}"
    );
    assert!(conns.iter().all(|(_, ssl)| *ssl), "{conns:?}");
    drop((a, b));
    drop_schema(&url, &schema).await;
}

/// A host killed while it owns a session and restarted at the same address is a new
/// holder, and the killed run's lease lives on until it runs out: the restarted host
/// must not redirect a client to its own URL (which loops), but answer 421 with
/// `Retry-After`, then serve the session once it has adopted it.
///
/// On the code before the fix the answer was a 307 whose `Location` was the
/// restarted host itself, for as long as the old lease lived.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_restarted_at_its_address_never_redirects_to_itself() {
    let Some(url) = database_url("serve_postgres") else {
        return;
    };
    let (schema, secret, _dir, key_file) = fleet();
    let mut first = start(&url, &schema, &key_file);
    let (s, l) = (SessionId::new(), LoopId::new());
    let at_first = Client::new(&first.url, Some(&secret));
    assert_eq!(at_first.open(s).await.status, StatusCode::CREATED);
    assert_eq!(
        at_first.register(s, l, 64).await.status,
        StatusCode::CREATED
    );
    let before = at_first.deliver(&completion(s, l)).await;
    assert_eq!(before.status, StatusCode::CREATED, "{before:?}");
    let addr = first.addr.clone();
    first.kill();

    let restarted = Server::start(&Start {
        args: [
            "serve",
            "--postgres",
            &url,
            "--schema",
            &schema,
            "--listen",
            &addr,
            "--key-file",
            &key_file.display().to_string(),
            "--lease-secs",
            "6",
        ]
        .map(String::from)
        .to_vec(),
        envs: Vec::new(),
    });
    assert_eq!(restarted.url, first.url, "restarted at the same URL");
    let at_restarted = Client::with_http(
        &restarted.url,
        Some(&secret),
        reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()),
    );
    let n = completion(s, l);
    let (mut refused, mut accepted) = (0, None);
    for _ in 0..300 {
        let r = at_restarted.deliver(&n).await;
        if let Some(location) = r.headers.get("location") {
            panic!("redirected to {location:?} by {}: {r:?}", restarted.url);
        }
        if r.status == StatusCode::MISDIRECTED_REQUEST {
            assert!(r.headers.contains_key("retry-after"), "{r:?}");
            refused += 1;
        } else if r.status == StatusCode::NOT_FOUND && r.str("reason") == "loop_not_found" {
            // Adopted: the loop is registered again here.
            assert_eq!(
                at_restarted.register(s, l, 64).await.status,
                StatusCode::CREATED
            );
        } else if r.status == StatusCode::CREATED {
            accepted = Some(r);
            break;
        } else {
            assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE, "{r:?}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        refused > 0,
        "the killed run's lease was still live at first"
    );
    let r = accepted.expect("the restarted host served the session within 30 s");
    assert_eq!(r.str("disposition"), "accepted");
    drop(restarted);
    drop_schema(&url, &schema).await;
}

/// A fleet host must advertise a URL clients can follow: an unspecified listen
/// address without `--advertise-url`, or an advertised URL without a host, is refused
/// at start (exit 2, before any connection), naming what to give.
///
/// On the code before the fix both started, advertising `http://0.0.0.0:PORT` (a
/// client following it reaches its own machine) and `http:` (a `Location` of
/// `http:/v1/sessions/…`).
#[test]
fn an_address_other_hosts_cannot_follow_is_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let key_file = dir.path().join("keys");
    std::fs::write(&key_file, new_secret()).unwrap();
    let keys = key_file.display().to_string();
    // Never reached: the arguments are refused first.
    let url = "host=127.0.0.1 port=1 dbname=none";
    let serve = ["serve", "--postgres", url, "--key-file", &keys];
    let unspecified = [&serve[..], &["--listen", "0.0.0.0:0"]].concat();
    let (code, stderr) = serve_support::run_to_exit(&unspecified, &[]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("--advertise-url"), "{stderr}");
    let hostless = [
        &serve[..],
        &["--listen", "127.0.0.1:0", "--advertise-url", "http://"],
    ]
    .concat();
    let (code, stderr) = serve_support::run_to_exit(&hostless, &[]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("advertised URL"), "{stderr}");
}
