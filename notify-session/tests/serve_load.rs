//! The real `notify serve` under load: 1,000 concurrent deliveries of one command ID
//! (HTTP/1.1 and HTTP/2 at once) are answered exactly one Accepted and the rest
//! Duplicate; and a SIGKILL in the middle of sustained traffic from many writers
//! loses nothing: every completion answered 2xx is journaled and, after a restart,
//! delivered exactly once to a consumer (those acknowledged before the kill never
//! again); and connections that send nothing, or only HTTP/2's preface, are closed
//! after the header timeout, and an HTTP/2 connection that made a request and went
//! idle is shut down after the idle timeout, so neither can hold every connection
//! slot.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod serve_support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use notify_journal::{JournalRead, RedbJournal, RedbOptions};
use notify_types::{LoopId, SessionId};
use reqwest::StatusCode;
use serve_support::{Client, Server, Start, completion, journal_dir, new_secret, polled};
use tokio::sync::Semaphore;

/// Every slot of `--max-connections 3` taken by clients that send nothing (two) or
/// only HTTP/2's preface (one): each is closed within the header timeout (1 s), and
/// the slots serve requests again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_connections_are_closed_and_give_their_slots_back() {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let (_dir, journal) = journal_dir();
    let secret = new_secret();
    let start = Start::redb(&journal, &[&secret])
        .arg("--max-connections")
        .arg("3")
        .arg("--header-timeout")
        .arg("1");
    let server = Server::start(&start);
    let mut silent = Vec::new();
    for preface in [&b""[..], b"", b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"] {
        let mut stream = tokio::net::TcpStream::connect(&server.addr).await.unwrap();
        stream.write_all(preface).await.unwrap();
        silent.push(stream);
    }
    let opened = std::time::Instant::now();
    for (i, stream) in silent.iter_mut().enumerate() {
        // Read to the end (the HTTP/2 one first gets the server's SETTINGS).
        let closed = tokio::time::timeout(Duration::from_secs(10), async {
            let mut buf = [0u8; 256];
            while matches!(stream.read(&mut buf).await, Ok(n) if n > 0) {}
        })
        .await;
        assert!(
            closed.is_ok(),
            "silent connection {i} still open after 10 s"
        );
    }
    let took = opened.elapsed();
    assert!(
        took >= Duration::from_millis(900),
        "closed before the header timeout: {took:?}"
    );
    let c = Client::new(&server.url, Some(&secret));
    let r = c
        .send(reqwest::Method::GET, "/healthz", "", Vec::new())
        .await;
    assert_eq!(r.status, StatusCode::OK, "{r:?}");
}

/// `--max-connections 1`: an HTTP/2 client makes one request and keeps its connection
/// (answering the server's pings, as a client's HTTP/2 stack does). Once it has
/// started no request for the idle timeout (1 s) it is shut down, and another
/// client's connection is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_http2_connection_gives_its_slot_back() {
    let (_dir, journal) = journal_dir();
    let secret = new_secret();
    let start = Start::redb(&journal, &[&secret])
        .arg("--max-connections")
        .arg("1")
        .arg("--idle-timeout")
        .arg("1");
    let server = Server::start(&start);
    let h2 = Client::with_http(
        &server.url,
        None,
        reqwest::Client::builder().http2_prior_knowledge(),
    );
    let r = h2
        .send(reqwest::Method::GET, "/healthz", "", Vec::new())
        .await;
    assert_eq!(
        (r.status, r.version),
        (StatusCode::OK, reqwest::Version::HTTP_2)
    );
    // The only slot is the HTTP/2 connection's; another client waits in the backlog
    // until it is shut down.
    let other = Client::new(&server.url, None);
    let answered = tokio::time::timeout(
        Duration::from_secs(10),
        other.send(reqwest::Method::GET, "/healthz", "", Vec::new()),
    )
    .await;
    let r = answered.expect("the idle HTTP/2 connection still holds the only slot after 10 s");
    assert_eq!(r.status, StatusCode::OK);
    drop(h2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_concurrent_deliveries_of_one_id_accept_exactly_one() {
    let (_dir, journal) = journal_dir();
    let secret = new_secret();
    let server = Server::start(&Start::redb(&journal, &[&secret]));
    let h1 = Client::new(&server.url, Some(&secret));
    let h2 = Client::with_http(
        &server.url,
        Some(&secret),
        reqwest::Client::builder().http2_prior_knowledge(),
    );
    let (s, l) = (SessionId::new(), LoopId::new());
    h1.open(s).await;
    h1.register(s, l, 64).await;
    let n = completion(s, l);
    // Up to 200 HTTP/1.1 connections at once, the rest multiplexed on HTTP/2.
    let connections = Arc::new(Semaphore::new(200));
    let mut tasks = Vec::new();
    for i in 0..1000 {
        let (c, n, connections) = (
            if i % 2 == 0 { h1.clone() } else { h2.clone() },
            n.clone(),
            Arc::clone(&connections),
        );
        tasks.push(tokio::spawn(async move {
            let _permit = if i % 2 == 0 {
                Some(connections.acquire_owned().await.unwrap())
            } else {
                None
            };
            let r = c.deliver(&n).await;
            (r.status, r.body["seq"].as_u64())
        }));
    }
    let mut by_status: BTreeMap<u16, usize> = BTreeMap::new();
    for t in tasks {
        let (status, seq) = t.await.unwrap();
        *by_status.entry(status.as_u16()).or_default() += 1;
        if status == StatusCode::OK {
            assert_eq!(seq, Some(1), "every duplicate names the one frame");
        }
    }
    assert_eq!(by_status, BTreeMap::from([(200, 999), (201, 1)]));
    // One frame, one notification handed out.
    let r = h1.poll(s, l, "wait_ms=1000&max=100").await;
    assert_eq!(polled(&r), vec![(n.command_id.to_string(), 1)]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_under_load_loses_no_answered_completion() {
    let (_dir, journal) = journal_dir();
    let secret = new_secret();
    let start = Start::redb(&journal, &[&secret]);
    let mut server = Server::start(&start);
    let c = Client::new(&server.url, Some(&secret));
    let s = SessionId::new();
    let loops: Vec<LoopId> = (0..4).map(|_| LoopId::new()).collect();
    c.open(s).await;
    for l in &loops {
        assert_eq!(c.register(s, *l, 60_000).await.status, StatusCode::CREATED);
    }
    // 32 writers deliver new IDs as fast as the server answers.
    let answered = Arc::new(std::sync::Mutex::new(Vec::<(LoopId, String)>::new()));
    let transport_errors = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let mut writers = Vec::new();
    for w in 0..32 {
        let (c, answered, errors, stop, l) = (
            c.clone(),
            Arc::clone(&answered),
            Arc::clone(&transport_errors),
            Arc::clone(&stop),
            loops[w % loops.len()],
        );
        writers.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let n = completion(s, l);
                let path = format!("/v1/sessions/{s}/completions");
                match c
                    .try_send(
                        reqwest::Method::POST,
                        &path,
                        &n.command_id.to_string(),
                        n.encode(),
                    )
                    .await
                {
                    Ok(r) if r.status.is_success() => {
                        answered.lock().unwrap().push((l, n.command_id.to_string()));
                    }
                    Ok(r) => panic!("refused under load: {r:?}"),
                    Err(_) => {
                        errors.fetch_add(1, Ordering::Relaxed);
                        break;
                    }
                }
            }
        }));
    }
    // Meanwhile a consumer acknowledges some of the first loop's notifications.
    let mut acked_before = BTreeSet::new();
    while acked_before.len() < 50 {
        let r = c.poll(s, loops[0], "wait_ms=2000&max=10").await;
        for (id, _) in polled(&r) {
            assert_eq!(c.ack(s, loops[0], &id).await.str("outcome"), "acknowledged");
            acked_before.insert(id);
        }
    }
    while answered.lock().unwrap().len() < 500 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The kill lands while the writers have requests in flight.
    server.kill();
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        w.await.unwrap();
    }
    let answered = answered.lock().unwrap().clone();
    let errors = transport_errors.load(Ordering::Relaxed);
    assert!(
        errors > 0,
        "the kill landed mid-traffic: requests in flight failed ({errors})"
    );
    eprintln!(
        "answered 2xx before the kill: {}; in flight at the kill: {errors}",
        answered.len()
    );

    // Every answered completion is journaled.
    {
        let j = RedbJournal::open(&journal, RedbOptions::default()).unwrap();
        for (_, id) in &answered {
            let key: notify_types::Uuid = id.parse().unwrap();
            assert!(
                j.lookup(s, key).await.unwrap().is_some(),
                "{id} answered 2xx but not journaled"
            );
        }
        j.close();
    }

    // After a restart, each loop's consumer gets every answered, unacknowledged one
    // exactly once.
    let server = Server::start(&start);
    let c = Client::new(&server.url, Some(&secret));
    let mut delivered: BTreeMap<String, usize> = BTreeMap::new();
    for l in &loops {
        let r = c.register(s, *l, 60_000).await;
        assert_eq!(r.status, StatusCode::CREATED, "{r:?}");
        loop {
            let r = c.poll(s, *l, "max=1000&wait_ms=200").await;
            let got = polled(&r);
            if got.is_empty() {
                break;
            }
            for (id, _) in got {
                *delivered.entry(id.clone()).or_default() += 1;
                c.ack(s, *l, &id).await;
            }
        }
    }
    for (_, id) in &answered {
        if acked_before.contains(id) {
            assert!(
                !delivered.contains_key(id),
                "{id} was acknowledged before the kill and delivered again"
            );
        } else {
            assert_eq!(
                delivered.get(id),
                Some(&1),
                "{id} answered 2xx: delivered exactly once after the restart"
            );
        }
    }
    assert!(delivered.values().all(|n| *n == 1), "nothing twice");
    // Anything else delivered was in flight at the kill (journaled, answer lost).
    let answered_ids: BTreeSet<&String> = answered.iter().map(|(_, id)| id).collect();
    let extra = delivered
        .keys()
        .filter(|id| !answered_ids.contains(id))
        .count();
    assert!(
        extra <= errors,
        "{extra} unanswered deliveries journaled, {errors} were in flight"
    );
}
