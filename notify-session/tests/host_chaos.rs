//! Chaos with real OS processes: three host processes (this test binary re-executed
//! in the host role) share 30 sessions on one PostgreSQL journal through the host
//! runtime, with notifications flowing and consumers acking, while for 20 rounds a
//! random host is SIGKILLed, or SIGSTOPped past its lease and resumed, or shut down
//! gracefully, and restarted.
//!
//! Afterwards the journal is replayed and checked against the hosts' event logs
//! (`host_chaos_support/checker.rs`): every notification answered `Accepted` or
//! `Duplicate` is journaled and consumed exactly once; nothing acked is delivered
//! again; each new owner restored exactly what was pending and redelivered it; no
//! frame was written under an epoch after the next epoch restored the log (a stale
//! host wrote nothing); every session is owned by exactly one host at the end. The
//! checker is shown to catch each kind of violation on planted histories.
//!
//! Needs `NOTIFY_TEST_DATABASE_URL` (or `CI` set, which implies the local default).
//! `NS_HOST_CHAOS_SEED` replays a run's choices.
#![cfg(unix)]
// Test code: a failed expectation is a test failure; hosts answer on stdout.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stdout
)]

mod host_chaos_support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use nix::sys::signal::Signal;
use notify_journal::{JournalLeases, PgJournal, PgOptions, replay_all};
use notify_testkit::kill::{seed, xorshift};
use notify_testkit::postgres::{DATABASE_URL_VAR, database_url};
use notify_types::{CommandId, JournalRecord, SessionEvent, SessionId};

use host_chaos_support::checker::{Frame, History, check};
use host_chaos_support::log::{Event, read_logs};
use host_chaos_support::procs::{Host, ROLE_VAR, SCHEMA_VAR};
use host_chaos_support::{child, driver};

const TEST: &str = "three_hosts_keep_every_session_through_kills_stops_and_shutdowns";
const HOSTS: usize = 3;
const SESSIONS: usize = 30;
const ROUNDS: usize = 20;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_hosts_keep_every_session_through_kills_stops_and_shutdowns() {
    if std::env::var_os(ROLE_VAR).is_some() {
        return child::host().await;
    }
    let Some(url) = database_url(TEST) else {
        return;
    };
    let mut rng = seed("NS_HOST_CHAOS_SEED");
    // Unique per run, not per seed: a replayed seed must not meet the sessions a
    // failed run left behind.
    let schema = format!(
        "ns_host_chaos_{}_{:x}",
        std::process::id(),
        SessionId::new().as_uuid().as_u128() as u32
    );
    // Creates the schema before the hosts race to.
    let journal = PgJournal::connect(&url, PgOptions::default().schema(&schema))
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let env = [
        (DATABASE_URL_VAR, url.clone()),
        (SCHEMA_VAR, schema.clone()),
    ];
    let hosts: Vec<Arc<Host>> = (0..HOSTS).map(|i| Arc::new(Host::new(i))).collect();
    for h in &hosts {
        h.start(TEST, dir.path(), &env);
    }
    let sessions: Vec<SessionId> = (0..SESSIONS).map(|_| SessionId::new()).collect();
    for (i, s) in sessions.iter().enumerate() {
        let opened = hosts[i % HOSTS].ask(
            &format!("O {s}"),
            &format!("OPENED {s}"),
            Duration::from_secs(30),
        );
        assert!(opened.is_some(), "host {} did not open {s}", i % HOSTS);
    }

    // Notifications flow while the rounds run.
    let stop = Arc::new(AtomicBool::new(false));
    let driving = {
        let (hosts, sessions, stop) = (hosts.clone(), sessions.clone(), Arc::clone(&stop));
        let seed = xorshift(&mut rng);
        std::thread::spawn(move || driver::drive(&hosts, &sessions, seed, &stop))
    };
    let (mut kills, mut stops, mut shutdowns) = (0, 0, 0);
    for _ in 0..ROUNDS {
        pause(&mut rng, 300, 900);
        let h = &hosts[xorshift(&mut rng) as usize % HOSTS];
        match xorshift(&mut rng) % 3 {
            0 => {
                h.kill();
                kills += 1;
                pause(&mut rng, 50, 400);
                h.start(TEST, dir.path(), &env);
            }
            1 => {
                // Long enough for its leases to expire and others to adopt them.
                h.signal(Signal::SIGSTOP);
                std::thread::sleep(child::LEASE * 2);
                pause(&mut rng, 0, 500);
                h.signal(Signal::SIGCONT);
                stops += 1;
            }
            _ => {
                assert!(h.shut_down(), "a graceful shutdown failed");
                shutdowns += 1;
                h.start(TEST, dir.path(), &env);
            }
        }
    }
    stop.store(true, Ordering::SeqCst);
    let mut driven = driving.join().unwrap();
    let unanswered = driver::drain(&mut driven, &hosts);
    if !unanswered.is_empty() {
        let mut report = unanswered.join("\n");
        for s in driver::stuck(&driven) {
            let info = JournalLeases::lease_info(&journal, s).await;
            report.push_str(&format!("\nlease of {s}: {info:?}"));
        }
        for (i, h) in hosts.iter().enumerate() {
            let diag = h
                .ask("DIAG", "D ", Duration::from_secs(10))
                .unwrap_or_default();
            let holder = diag.split(' ').next().unwrap_or_default().to_owned();
            let held: Vec<String> = driver::stuck(&driven)
                .iter()
                .filter_map(|s| {
                    diag.find(&s.to_string())
                        .map(|at| diag[at..].chars().take(160).collect())
                })
                .collect();
            report.push_str(&format!(
                "\nhost {i} {holder}: serves {} of them: {held:?}",
                held.len()
            ));
        }
        panic!("{report}");
    }
    assert!(driven.failures.is_empty(), "{:#?}", driven.failures);

    // Quiesce (bounded): every answered notification consumed, every session owned
    // by one host.
    let mut owners = Vec::new();
    for _ in 0..240 {
        owners = hosts
            .iter()
            .map(|h| owned(h))
            .collect::<Vec<BTreeSet<SessionId>>>();
        let all_owned = sessions
            .iter()
            .all(|s| owners.iter().filter(|o| o.contains(s)).count() == 1);
        let journal_now = replay(&journal, &sessions).await;
        let consumed: BTreeSet<CommandId> = journal_now
            .values()
            .flatten()
            .filter_map(|(_, f)| match f {
                Frame::Consumed(c) => Some(*c),
                _ => None,
            })
            .collect();
        if all_owned && driven.answered.keys().all(|c| consumed.contains(c)) {
            break;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    for h in &hosts {
        assert!(h.shut_down(), "the final graceful shutdown failed");
    }

    let history = History {
        logs: read_logs(dir.path()).unwrap(),
        journal: replay(&journal, &sessions).await,
        answered: driven.answered.clone(),
        owners,
        live: sessions.iter().copied().collect(),
    };
    let events: usize = history.logs.iter().map(Vec::len).sum();
    let delivered = history
        .logs
        .iter()
        .flatten()
        .filter(|e| matches!(e, Event::Deliver { .. }))
        .count();
    let figures = match check(&history) {
        Ok(f) => f,
        Err(violations) => panic!(
            "{} violations:\n{}",
            violations.len(),
            violations.join("\n")
        ),
    };
    println!(
        "host chaos: {ROUNDS} rounds over {HOSTS} hosts and {SESSIONS} sessions: \
         {kills} SIGKILLs, {stops} SIGSTOPs past the lease, {shutdowns} graceful shutdowns; \
         {} host processes; {} takeovers, {} notifications redelivered by new owners; \
         {} notifications sent ({} answered, {} requests, answers {:?}); {} deliveries; \
         {} of {} frames' epochs checked; {events} logged events",
        hosts.iter().map(|h| h.incarnations()).sum::<u32>(),
        figures.takeovers,
        figures.redelivered,
        driven.sent,
        driven.answered.len(),
        driven.attempts,
        driven.answers,
        delivered,
        figures.frames_with_epoch,
        figures.frames,
    );
    assert!(kills + stops + shutdowns == ROUNDS);
    assert!(figures.takeovers > 0, "no session ever moved");
    journal.close().await;
    drop_schema(&url, &schema).await;
}

fn pause(rng: &mut u64, min_ms: u64, max_ms: u64) {
    let ms = min_ms + xorshift(rng) % (max_ms - min_ms + 1);
    std::thread::sleep(Duration::from_millis(ms));
}

/// The sessions host `h` says it owns (none if it does not answer).
fn owned(h: &Host) -> BTreeSet<SessionId> {
    let Some(list) = h.ask("STATUS", "S ", Duration::from_secs(10)) else {
        return BTreeSet::new();
    };
    list.split(',')
        .filter(|s| !s.is_empty() && *s != "-")
        .map(|s| SessionId::from_uuid(s.parse().unwrap()))
        .collect()
}

async fn replay(
    journal: &PgJournal,
    sessions: &[SessionId],
) -> BTreeMap<SessionId, Vec<(u64, Frame)>> {
    let mut out = BTreeMap::new();
    for s in sessions {
        let frames = replay_all(journal, *s)
            .await
            .unwrap()
            .into_iter()
            .map(|(seq, record)| {
                let f = match record {
                    JournalRecord::Command(c) => Frame::Command(c.command_id()),
                    JournalRecord::Event(SessionEvent::NotificationConsumed(c)) => {
                        Frame::Consumed(c.cause())
                    }
                    _ => Frame::Other,
                };
                (seq, f)
            })
            .collect();
        out.insert(*s, frames);
    }
    out
}

async fn drop_schema(url: &str, schema: &str) {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    client
        .batch_execute(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))
        .await
        .unwrap();
}
