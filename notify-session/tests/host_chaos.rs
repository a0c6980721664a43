//! Chaos with real OS processes and real traffic: three host processes (this test
//! binary re-executed in the host role) share hot sessions on one PostgreSQL journal
//! through the host runtime. Many concurrent appenders (64 by default) send
//! notifications to whichever host owns each session, retrying refusals at the
//! others; each session's consumer acks what it receives, a third of them in
//! transactions of their own that also write an application row (`ack_in_pg`);
//! sessions end and new ones open throughout, so lease announcements never stop.
//! First a fault-free phase; then, round after round, a random busy host is
//! SIGKILLed, or SIGSTOPped past its lease and resumed, or shut down gracefully, and
//! restarted.
//!
//! Afterwards the journal is replayed and checked against the hosts' timed event
//! logs, the application's rows and the parent's fault windows
//! (`host_chaos_support/checker.rs`, `attribution.rs`): every notification answered
//! `Accepted` or `Duplicate` is journaled and consumed exactly once, with one
//! application row per transactional consumption; a retry of an answered one is
//! `Duplicate`; nothing acked is delivered again; each new owner restored exactly what
//! was pending and redelivered it; no frame was written under an epoch after the next
//! epoch restored the log, and enough frames are judged for that to mean something;
//! every session a fault hit is owned again within lease + one poll + a slack; no
//! lease is lost and no `NotOwner` answered (nor an ack refused) outside the window
//! of a fault injected into that host; at the end every live session is owned by
//! exactly one host, whose pending count is the journal's. The checkers are shown to
//! catch each kind of violation on planted histories (`planted.rs`).
//!
//! Its size comes from environment variables (`host_chaos_support/config.rs`): the
//! defaults fit CI (a 3 s lease, 6 rounds, about two minutes on two cores);
//! `cargo xtask soak --hosts` runs it at full size (the default lease and poll,
//! minutes of traffic). Needs `NOTIFY_TEST_DATABASE_URL` (or `CI` set, which implies
//! the local default). `NS_HOST_CHAOS_SEED` replays a run's choices.
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
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use notify_journal::{PgJournal, PgOptions};
use notify_testkit::kill::{seed, xorshift};
use notify_testkit::postgres::{DATABASE_URL_VAR, database_url};
use notify_types::SessionId;

use host_chaos_support::attribution::{attribute, slow_takeovers, takeovers};
use host_chaos_support::checker::{History, check};
use host_chaos_support::churn::{self, Churned};
use host_chaos_support::config::Config;
use host_chaos_support::consumer::transactional;
use host_chaos_support::driver::{self, Seen, Traffic};
use host_chaos_support::faults::{self, Fault, Launch, Served};
use host_chaos_support::log::{Event, read_logs};
use host_chaos_support::procs::{Host, ROLE_VAR, SCHEMA_VAR};
use host_chaos_support::report::Report;
use host_chaos_support::{child, db};

const TEST: &str = "three_hosts_keep_every_session_through_kills_stops_and_shutdowns";
const HOSTS: usize = 3;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_hosts_keep_every_session_through_kills_stops_and_shutdowns() {
    if std::env::var_os(ROLE_VAR).is_some() {
        return child::host().await;
    }
    let Some(url) = database_url(TEST) else {
        return;
    };
    let config = Config::from_env();
    println!("host chaos: {config:?}");
    let mut rng = seed("NS_HOST_CHAOS_SEED");
    // Unique per run, not per seed: a replayed seed must not meet the sessions a
    // failed run left behind.
    let schema = format!(
        "ns_host_chaos_{}_{:x}",
        std::process::id(),
        SessionId::new().as_uuid().as_u128() as u32
    );
    // Creates the schema before the hosts race to.
    let journal = Arc::new(
        PgJournal::connect(&url, PgOptions::default().schema(&schema))
            .await
            .unwrap(),
    );
    db::create_app_table(&url, &schema).await;
    let dir = tempfile::tempdir().unwrap();
    let run = {
        let (config, url, schema) = (config.clone(), url.clone(), schema.clone());
        let (dir, journal) = (dir.path().to_owned(), Arc::clone(&journal));
        let runtime = tokio::runtime::Handle::current();
        tokio::task::spawn_blocking(move || {
            run(&config, &url, &schema, &dir, &journal, &runtime, &mut rng)
        })
        .await
        .unwrap()
    };

    let sessions: BTreeSet<SessionId> = run.churned.all.iter().copied().collect();
    let journal_now = db::replay(&journal, sessions.iter().copied()).await;
    let pending = db::pending(&journal_now);
    let logs = read_logs(dir.path()).unwrap();
    let history = History {
        logs,
        journal: journal_now,
        answered: run.seen.answered.clone(),
        reaccepted: run.seen.reaccepted.clone(),
        owners: run
            .served
            .iter()
            .map(|s| s.iter().map(|x| x.session).collect())
            .collect(),
        live: run.live.iter().copied().collect(),
        ended: run.churned.ended.keys().copied().collect(),
        transactional: sessions
            .iter()
            .copied()
            .filter(|s| transactional(*s))
            .collect(),
        app_rows: db::app_rows(&url, &schema).await,
    };
    let (figures, mut violations) = check(&history);
    let (refusals, outside) = attribute(&history.logs, &run.faults, ms(config.grace()));
    let taken = takeovers(&history.logs, &run.faults);
    let report = Report {
        config: &config,
        faults: &run.faults,
        incarnations: run.incarnations,
        seen: &run.seen,
        opened: run.churned.all.len(),
        ended: run.churned.ended.len(),
        traffic_secs: run.traffic_secs,
        figures: &figures,
        refusals: &refusals,
        takeovers: &taken,
        deliveries: history
            .logs
            .iter()
            .flat_map(|l| &l.events)
            .filter(|e| matches!(e.event, Event::Deliver { .. }))
            .count(),
    };
    report.print();
    violations.extend(outside);
    violations.extend(slow_takeovers(
        &taken,
        &run.faults,
        ms(config.takeover_bound()),
    ));
    violations.extend(report.proofs());
    violations.extend(pending_counts(&run.served, &pending));
    violations.extend(run.seen.failures.iter().cloned());
    violations.extend(run.churned.failures.iter().cloned());
    violations.extend(run.failures.iter().cloned());
    journal.close().await;
    if violations.is_empty() {
        db::drop_schema(&url, &schema).await;
        return;
    }
    let shown = violations.len().min(60);
    let logs = dir.keep();
    panic!(
        "{} violations (first {shown}; schema {schema} and the hosts' logs in {} kept):\n{}",
        violations.len(),
        logs.display(),
        violations[..shown].join("\n")
    );
}

fn ms(d: Duration) -> u64 {
    d.as_millis() as u64
}

/// What the blocking part of the run leaves for the checks.
struct Run {
    faults: Vec<Fault>,
    seen: Seen,
    churned: Churned,
    /// The sessions live at the end.
    live: Vec<SessionId>,
    /// What each host served at the end (after the run quiesced).
    served: Vec<Vec<Served>>,
    traffic_secs: f64,
    incarnations: u32,
    /// The run's own failures (a graceful shutdown that failed, a quiesce that
    /// never came).
    failures: Vec<String>,
}

/// Starts the hosts and the traffic, runs the fault-free phase and the fault
/// rounds, stops the traffic, waits for the hosts to quiesce and shuts them down.
fn run(
    config: &Config,
    url: &str,
    schema: &str,
    dir: &Path,
    journal: &Arc<PgJournal>,
    runtime: &tokio::runtime::Handle,
    rng: &mut u64,
) -> Run {
    let mut env = vec![
        (DATABASE_URL_VAR, url.to_owned()),
        (SCHEMA_VAR, schema.to_owned()),
    ];
    env.extend(config.host_env());
    let launch = Launch {
        test: TEST,
        dir,
        env: &env,
    };
    let hosts: Vec<Arc<Host>> = (0..HOSTS).map(|i| Arc::new(Host::new(i))).collect();
    for h in &hosts {
        launch.start(h);
    }
    let traffic = Arc::new(Traffic::new(hosts.clone(), Vec::new()));
    let mut churned = Churned::default();
    for i in 0..config.sessions {
        let s = churn::new_session(i % 3 == 0);
        churn::open(&traffic, s, i % HOSTS).unwrap();
        churned.all.push(s);
        traffic.hot.lock().unwrap().sessions.push(s);
    }
    let started = Instant::now();
    let appenders = driver::appenders(&traffic, config.appenders, xorshift(rng));
    let churning = {
        let (traffic, every, seed) = (Arc::clone(&traffic), config.churn, xorshift(rng));
        std::thread::spawn(move || churn::churn(&traffic, every, seed))
    };
    std::thread::sleep(config.quiet);
    println!(
        "host chaos: fault-free phase over, {} notifications answered",
        traffic.seen.lock().unwrap().answered.len()
    );

    let mut faults = Vec::new();
    let mut failures = Vec::new();
    let mut kind_of = faults::schedule(xorshift(rng));
    let fault_phase = Instant::now();
    let mut round = 0;
    while round < config.rounds || (config.rounds > 0 && fault_phase.elapsed() < config.fault_time)
    {
        let wait = config.lease / 2 + config.lease * (xorshift(rng) % 100) as u32 / 200;
        std::thread::sleep(wait);
        let fault = faults::inject(kind_of(round), &hosts, config, &launch, rng, &mut failures);
        let missing = faults::wait_reowned(
            &traffic,
            &fault,
            config.takeover_bound() + Duration::from_secs(30),
        );
        println!(
            "host chaos: round {round}: {:?} of host {} serving {} sessions, {} ms; {} not owned \
             again; {} answered so far",
            fault.kind,
            fault.host,
            fault.owned.len(),
            fault.to - fault.from,
            missing.len(),
            traffic.seen.lock().unwrap().answered.len()
        );
        faults.push(fault);
        round += 1;
    }

    traffic.stop.store(true, Ordering::SeqCst);
    for a in appenders {
        a.join().unwrap();
    }
    let traffic_secs = started.elapsed().as_secs_f64();
    let mut more = churning.join().unwrap();
    churned.all.append(&mut more.all);
    churned.ended = more.ended;
    churned.failures = more.failures;
    let live = traffic.hot.lock().unwrap().sessions.clone();
    let ended: Vec<SessionId> = churned.ended.keys().copied().collect();
    let served = quiesce(&hosts, &live, &ended, journal, runtime, &mut failures);
    faults.extend(faults::shut_down_all(&hosts, &mut failures));
    let seen = std::mem::take(&mut *traffic.seen.lock().unwrap());
    Run {
        faults,
        seen,
        churned,
        live,
        served,
        traffic_secs,
        incarnations: hosts.iter().map(|h| h.incarnations()).sum(),
        failures,
    }
}

/// Waits (bounded) until every live session is owned by exactly one host and has
/// nothing pending in the journal, and no ended one is served (a host releases it at
/// its next renewal); what each host serves a moment later (once acks journaled
/// before have been released in their loops: the traffic has stopped, so pending
/// counts only fall).
fn quiesce(
    hosts: &[Arc<Host>],
    live: &[SessionId],
    ended: &[SessionId],
    journal: &PgJournal,
    runtime: &tokio::runtime::Handle,
    failures: &mut Vec<String>,
) -> Vec<Vec<Served>> {
    let statuses = || -> Vec<Vec<Served>> {
        hosts
            .iter()
            .map(|h| faults::status(h, Duration::from_secs(10)).unwrap_or_default())
            .collect()
    };
    let started = Instant::now();
    loop {
        let served = statuses();
        let owners = |s: &SessionId| {
            served
                .iter()
                .filter(|x| x.iter().any(|x| x.session == *s))
                .count()
        };
        let unowned: Vec<_> = live.iter().filter(|s| owners(s) != 1).collect();
        let still: Vec<_> = ended.iter().filter(|s| owners(s) != 0).collect();
        let pending: BTreeMap<SessionId, u64> =
            db::pending(&runtime.block_on(db::replay(journal, live.iter().copied())))
                .into_iter()
                .filter(|(_, n)| *n > 0)
                .collect();
        if unowned.is_empty() && still.is_empty() && pending.is_empty() {
            std::thread::sleep(Duration::from_secs(1));
            return statuses();
        }
        if started.elapsed() > Duration::from_secs(120) {
            failures.push(format!(
                "the hosts did not quiesce in 120 s: sessions not owned once: {unowned:?}; \
                 ended sessions still served: {still:?}; pending in the journal: {pending:?}"
            ));
            return served;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// Each host's pending count of each session it serves is the journal's.
fn pending_counts(served: &[Vec<Served>], journal: &BTreeMap<SessionId, u64>) -> Vec<String> {
    let mut bad = Vec::new();
    for (h, list) in served.iter().enumerate() {
        for x in list {
            let want = journal.get(&x.session).copied().unwrap_or(0);
            if x.pending != want {
                bad.push(format!(
                    "host {h} reports {} pending for session {}; the journal has {want}",
                    x.pending, x.session
                ));
            }
        }
    }
    bad
}
