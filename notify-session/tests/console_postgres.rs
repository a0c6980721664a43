//! The console on PostgreSQL, two real `notify serve` hosts on one journal: the
//! overview names the engine, schema and schema version; the hosts page lists both
//! hosts with their URLs and the sessions each holds (from `serve_hosts` and
//! `leases`); the sessions page filtered by owner shows only that host's session, with
//! its lease epoch; integrity says PostgreSQL has no scrub and its verify is clean;
//! a command page predicts a delivery to a session another host holds as routed;
//! the overview's frame count never reads the frames table.
//! Needs `NOTIFY_TEST_DATABASE_URL` (default: the local test database).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod serve_support;

use notify_testkit::postgres::database_url;
use notify_types::{LoopId, SessionId, Uuid};
use reqwest::StatusCode;
use serve_support::{Client, Server, Start, completion, drop_schema};

fn start(url: &str, schema: &str) -> Server {
    Server::start(&Start::postgres(url, schema).arg("--insecure-unsigned"))
}

async fn page(url: &str) -> String {
    let r = reqwest::get(url).await.unwrap();
    assert_eq!(r.status(), StatusCode::OK, "{url}");
    r.text().await.unwrap()
}

/// The lease holder a host's overview names.
fn holder_of(overview: &str) -> String {
    let at = overview.find("this host</dt><dd>").unwrap() + "this host</dt><dd>".len();
    overview[at..at + 36].to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hosts_leases_and_verify_on_postgres() {
    let Some(url) = database_url("console_postgres") else {
        return;
    };
    let schema = format!("console_{}", Uuid::new_v4().simple());
    let a = start(&url, &schema);
    let b = start(&url, &schema);
    // A session on each host, each with a frame (the journal lists sessions by their
    // frames: one opened and never written to is not listed yet).
    let (sa, sb) = (SessionId::new(), SessionId::new());
    for (host, s) in [(&a, sa), (&b, sb)] {
        let client = Client::new(&host.url, None);
        let l = LoopId::new();
        assert_eq!(client.open(s).await.status, StatusCode::CREATED);
        assert_eq!(client.register(s, l, 8).await.status, StatusCode::CREATED);
        assert_eq!(
            client.deliver(&completion(s, l)).await.status,
            StatusCode::CREATED
        );
    }

    let overview = page(&format!("{}/console/", a.url)).await;
    for text in ["PostgreSQL", &format!("schema {schema}"), "schema version"] {
        assert!(overview.contains(text), "{text}: {overview}");
    }
    let (ha, hb) = (
        holder_of(&overview),
        holder_of(&page(&format!("{}/console/", b.url)).await),
    );
    assert_ne!(ha, hb);

    // Both hosts, their URLs, one session each.
    let hosts = page(&format!("{}/console/hosts", a.url)).await;
    let table = &hosts[hosts.find("<tbody>").unwrap()..];
    for (holder, host_url) in [(&ha, &a.url), (&hb, &b.url)] {
        let row_at = table
            .find(holder.as_str())
            .unwrap_or_else(|| panic!("{holder}: {hosts}"));
        let row = &table[row_at..table[row_at..].find("</tr>").unwrap() + row_at];
        assert!(row.contains(host_url.as_str()), "{row}");
        assert!(
            row.contains(&format!("/console/sessions?owner={holder}\">1</a>")),
            "{row}"
        );
    }
    assert!(hosts.contains("(this server)"));

    // Filtered by owner: only A's session, its lease epoch 1 and time left.
    let mine = page(&format!("{}/console/sessions?owner={ha}", b.url)).await;
    assert!(
        mine.contains(&sa.to_string()) && !mine.contains(&sb.to_string()),
        "{mine}"
    );
    assert!(mine.contains("<td>1</td>"), "{mine}");

    // No scrub on PostgreSQL; the verify runs and is clean.
    let integrity = page(&format!("{}/console/integrity", a.url)).await;
    assert!(integrity.contains("no background scrub"), "{integrity}");
    let r = reqwest::Client::new()
        .post(format!("{}/console/integrity/verify", a.url))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK, "followed to the page");
    let integrity = r.text().await.unwrap();
    assert!(integrity.contains("Clean: every frame"), "{integrity}");
    // A session opened on B and never written to: A's command page predicts that a
    // delivery at A is routed to B, as the API answers it (not "404 session_not_found").
    let fresh = SessionId::new();
    let at_b = Client::new(&b.url, None);
    assert_eq!(at_b.open(fresh).await.status, StatusCode::CREATED);
    let command = page(&format!(
        "{}/console/sessions/{fresh}/commands/{}",
        a.url,
        notify_types::CommandId::new()
    ))
    .await;
    assert!(
        command.contains("not served here: a delivery here is answered not_owner"),
        "{command}"
    );
    let no_redirects = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none());
    let at_a = serve_support::Client::with_http(&a.url, None, no_redirects);
    let answer = at_a.deliver(&completion(fresh, LoopId::new())).await;
    assert_eq!(answer.str("reason"), "not_owner", "{answer:?}");

    drop(a);
    drop(b);
    drop_schema(&url, &schema).await;
}

/// The console's figures of a PostgreSQL journal come from the catalog: they are read
/// while another transaction holds the frames table locked exclusively, which blocks
/// any statement that reads it. (The census takes them every few minutes on the
/// connection the journal's reads share.)
///
/// On the code before the fix the figures were counted with `count(*)` and a sum over
/// every frame: the read waited on the lock until the operation timeout and failed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_engines_figures_never_read_the_frames_table() {
    use notify_journal::{JournalBackend, PgJournal, PgOptions};
    use notify_session::serve::{JournalInspect, PgInspect};
    use notify_types::JournalRecord;
    use std::sync::Arc;
    use std::time::Duration;

    let Some(url) = database_url("console_postgres") else {
        return;
    };
    let schema = format!("console_{}", Uuid::new_v4().simple());
    let options = PgOptions::default()
        .schema(&schema)
        .operation_timeout(Duration::from_secs(3));
    let journal = Arc::new(PgJournal::connect(&url, options).await.unwrap());
    let n = completion(SessionId::new(), LoopId::new());
    journal
        .append(
            n.session_id,
            JournalRecord::from(notify_types::ProcessNotification::new(n.clone())),
        )
        .await
        .unwrap();
    let inspect = PgInspect::new(Arc::clone(&journal), schema.clone());

    let mut locker = serve_support::pg_client(&url).await;
    let lock = locker.transaction().await.unwrap();
    lock.batch_execute(&format!(
        "LOCK TABLE \"{schema}\".frames IN ACCESS EXCLUSIVE MODE"
    ))
    .await
    .unwrap();
    let counts = tokio::time::timeout(Duration::from_secs(20), inspect.counts())
        .await
        .expect("the figures came back");
    let counts = counts.expect("the figures were read while the frames table was locked");
    assert!(counts.frames_estimated, "{counts:?}");
    assert_eq!(counts.version_name, "schema version");
    assert!(counts.version > 0, "{counts:?}");
    lock.rollback().await.unwrap();
    drop(inspect);
    drop(journal);
    drop_schema(&url, &schema).await;
}
