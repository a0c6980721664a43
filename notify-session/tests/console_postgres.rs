//! The console on PostgreSQL, two real `notify serve` hosts on one journal: the
//! overview names the engine, schema and schema version; the hosts page lists both
//! hosts with their URLs and the sessions each holds (from `serve_hosts` and
//! `leases`); the sessions page filtered by owner shows only that host's session, with
//! its lease epoch; integrity says PostgreSQL has no scrub and its verify is clean.
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
    drop(a);
    drop(b);
    drop_schema(&url, &schema).await;
}
