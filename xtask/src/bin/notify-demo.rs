//! The notify demo: a session over a real redb journal, two native loops, a real
//! supervisor running real processes, every disposition, and a real crash (a child
//! process killed with SIGKILL) followed by restore.
//!
//! Run it with `cargo xtask demo`. `--journal PATH` keeps the journal file; by default
//! it lives in a fresh temp dir. `--journal-at-crash PATH` also keeps a copy of the
//! journal as the crash left it, before restore (for `notify pending`). Every part says what it runs and what it is meant to
//! show before it shows it.
#![allow(clippy::print_stdout, reason = "a command-line demo prints its report")]
#![allow(clippy::print_stderr, reason = "and its error")]

use std::collections::BTreeMap;
use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use notify_session::notify_journal::{JournalRead, replay_all};
use notify_session::prelude::*;

/// Counts every answer the demo received, for the summary.
#[derive(Default)]
struct Tally(BTreeMap<&'static str, usize>);

impl Tally {
    fn record(&mut self, answer: &Result<Notified, NotifyError>) -> String {
        let (key, text) = match answer {
            Ok(Notified::Accepted) => ("Accepted", "Accepted".to_owned()),
            Ok(Notified::Duplicate) => ("Duplicate", "Duplicate".to_owned()),
            Err(e) => match e.disposition() {
                Some(Disposition::Collision) => ("Collision", format!("Collision ({e})")),
                Some(Disposition::Stopped) => ("Stopped", format!("Stopped ({e})")),
                _ => ("Error", format!("error ({e})")),
            },
        };
        *self.0.entry(key).or_default() += 1;
        text
    }
}

struct Clock(Instant);

impl Clock {
    fn stamp(&self) -> String {
        format!("+{:>6.3}s", self.0.elapsed().as_secs_f64())
    }
}

fn heading(text: &str) {
    println!("\n== {text}");
}

/// Prints an introduction, one indented line each.
fn intro(lines: &[&str]) {
    for line in lines {
        println!("   {line}");
    }
}

fn pair(state: ProcessLifecycleState, reason: ProcessTerminalReason) -> String {
    format!("{state}/{reason}")
}

fn short(id: impl std::fmt::Display) -> String {
    let id = id.to_string();
    let start = id.len().saturating_sub(8);
    id.get(start..).unwrap_or(&id).to_owned()
}

const USAGE: &str = "usage: notify-demo [--journal PATH] [--journal-at-crash PATH]";

#[tokio::main]
async fn main() -> std::process::ExitCode {
    match run().await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            // The whole cause chain on one line, once; no backtrace.
            eprintln!("demo failed: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut journal_path: Option<PathBuf> = None;
    let mut at_crash: Option<PathBuf> = None;
    let mut child: Option<(SessionId, LoopId)> = None;
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--journal" => journal_path = Some(it.next().context("--journal needs a path")?.into()),
            "--journal-at-crash" => {
                at_crash = Some(it.next().context("--journal-at-crash needs a path")?.into());
            }
            // Internal: the crashing child of part 4 (this same binary).
            "--child" => {
                let session = it.next().context("--child needs a session id")?.parse()?;
                let loop_id = it.next().context("--child needs a loop id")?.parse()?;
                child = Some((session, loop_id));
            }
            "-h" | "--help" => {
                println!("{USAGE}");
                return Ok(());
            }
            other => bail!("unknown argument {other:?} ({USAGE})"),
        }
    }
    if let Some((session, loop_id)) = child {
        let path = journal_path.context("--child needs --journal")?;
        return crashing_child(&path, session, loop_id).await;
    }
    let tmp = tempfile::tempdir()?;
    let path = journal_path.unwrap_or_else(|| tmp.path().join("notify-demo.redb"));
    parent(&path, at_crash.as_deref()).await
}

async fn parent(path: &Path, at_crash: Option<&Path>) -> anyhow::Result<()> {
    // Before anything records: the libraries report to whatever recorder is installed.
    metrics::set_global_recorder(&RECORDER)
        .map_err(|_| anyhow::anyhow!("a metrics recorder was already installed"))?;
    let clock = Clock(Instant::now());
    let mut tally = Tally::default();
    println!("notify demo: durable process-completion notifications");
    intro(&[
        "One session journals to a redb file and owns two loops (agent inboxes). A",
        "supervisor runs real OS processes; each completion is journaled, then delivered to",
        "its loop, whose consumer acknowledges it. Then: every answer a retry can get, a",
        "real crash (a child process killed with SIGKILL) and restore from the file.",
    ]);
    println!("journal file: {}", path.display());

    let journal = RedbJournal::open(path, JournalOptions::default())?;
    let session_id = SessionId::new();
    let session = Session::new(session_id, journal.clone());
    let loop_a = LoopId::new();
    let loop_b = LoopId::new();
    let mut consumer_a = session.register_loop(LoopConfig::new(session_id, loop_a))?;
    let mut consumer_b = session.register_loop(LoopConfig::new(session_id, loop_b).capacity(2))?;
    let names = BTreeMap::from([(loop_a, "loop-a"), (loop_b, "loop-b")]);
    println!("session {session_id}; loop-a (capacity 64), loop-b (capacity 2)");

    // ---------------------------------------------------------------------------
    heading("1. Real processes, supervised; lifecycle events as they are journaled");
    intro(&[
        "Four processes, each under an opaque handle (the session never sees the command):",
        "  ok        loop-a  sh -c 'exit 0'      exits 0        -> Exited/Exited",
        "  exit-3    loop-a  sh -c 'exit 3'      exits 3        -> Exited/Exited too: the",
        "                                                          exit code is in ProcessCompleted",
        "  deadline  loop-b  sleep 30, 300 ms deadline          -> killed: TimedOut/TimedOut",
        "  stop-me   loop-b  sleep 30, SIGTERM after 100 ms     -> ProcessStopRequested, then",
        "                                                          Terminated/Terminated",
        "Shows: each process's events (journaled, then streamed), then its completion's answer.",
    ]);
    println!(
        "{:<9} {:<22} {:<10} {:<8} {:<26} detail",
        "time", "event", "handle", "loop", "state/reason"
    );
    let mut events = session.subscribe();
    let printer_clock = Clock(clock.0);
    let printer_names = names.clone();
    let printer = tokio::spawn(async move {
        while let Ok(event) = events.recv().await {
            if let SessionEvent::Lifecycle(m) = event {
                let state = match m.reason {
                    Some(r) => pair(m.state, r),
                    None => m.state.to_string(),
                };
                let detail = match (m.exit_code, &m.diagnostic) {
                    (Some(code), _) => format!("exit code {code}"),
                    (None, Some(d)) => d.clone(),
                    _ => String::new(),
                };
                println!(
                    "{} {:<22} {:<10} {:<8} {:<26} {}",
                    printer_clock.stamp(),
                    m.kind.event_type(),
                    m.process_handle,
                    printer_names.get(&m.loop_id).copied().unwrap_or("?"),
                    state,
                    detail
                );
            }
        }
    });

    let sup_a = Supervisor::new(session.clone(), loop_a);
    let sup_b = Supervisor::new(session.clone(), loop_b);
    let ok = sup_a.spawn(ProcessSpec::new("ok", "sh").arg("-c").arg("exit 0"))?;
    let exit3 = sup_a.spawn(ProcessSpec::new("exit-3", "sh").arg("-c").arg("exit 3"))?;
    let late = sup_b.spawn(
        ProcessSpec::new("deadline", "sleep")
            .arg("30")
            .deadline(Duration::from_millis(300)),
    )?;
    let stop_me = sup_b.spawn(ProcessSpec::new("stop-me", "sleep").arg("30"))?;
    tokio::time::sleep(Duration::from_millis(100)).await;
    stop_me.stop(StopSignal::Terminate);

    let mut completed = Vec::new();
    for p in [ok, exit3, late, stop_me] {
        let handle = p.handle().to_owned();
        let outcome = p.wait().await.context("supervisor task ended")?;
        let answer = tally.record(&outcome.delivery);
        println!(
            "{} {:<22} {:<10} {:<8} {:<26} {}",
            clock.stamp(),
            "completion notified",
            handle,
            "",
            pair(outcome.state, outcome.reason),
            answer
        );
        completed.push((handle, outcome));
    }

    heading("2. The loops' consumers receive in order and acknowledge");
    intro(&[
        "Each loop's consumer takes its two completions in acceptance order and acks them;",
        "each ack journals NotificationConsumed before the loop lets go. A completion has no",
        "exit code: the consumer reads it from the matching ProcessCompleted (completed_event).",
    ]);
    for (name, consumer, count) in [
        ("loop-a", &mut consumer_a, 2),
        ("loop-b", &mut consumer_b, 2),
    ] {
        for _ in 0..count {
            let got = consumer.recv().await.context("loop exited")?;
            let n = got.command().notification().clone();
            let exit = match completed_event(&journal, &n)
                .await?
                .and_then(|m| m.exit_code)
            {
                Some(code) => format!("exit code {code}"),
                None => "no exit code".to_owned(),
            };
            got.ack().await?;
            println!(
                "{} {name} received {:<10} {:<26} {:<13} acked",
                clock.stamp(),
                n.process_handle,
                pair(n.state, n.reason),
                exit
            );
        }
    }

    // ---------------------------------------------------------------------------
    heading("3. Retries: duplicate, collision, inbox full, a foreign loop");
    intro(&[
        "A supervisor resends a completion with the same command ID until it is accepted.",
        "Shows the answer to each kind of resend, and that the journal keeps one frame per ID.",
    ]);
    let (_, first) = completed.first().context("no process completed")?;
    let original = first.notification.clone();
    let answer = session.notify_process_completion(original.clone()).await;
    println!(
        "retry of `ok` with the same ID and payload   -> {}",
        tally.record(&answer)
    );
    let forged = ProcessCompletionNotification {
        state: ProcessLifecycleState::Killed,
        reason: ProcessTerminalReason::Killed,
        ..original.clone()
    };
    let answer = session.notify_process_completion(forged).await;
    println!(
        "same ID, different payload (Killed/Killed)   -> {}",
        tally.record(&answer)
    );

    let fill: Vec<_> = (0..3)
        .map(|i| completion(session_id, loop_b, &format!("burst-{i}")))
        .collect();
    for n in &fill {
        let answer = session.notify_process_completion(n.clone()).await;
        println!(
            "loop-b (capacity 2) <- {:<8}               -> {}",
            n.process_handle,
            tally.record(&answer)
        );
    }
    let burst2 = fill.last().context("no burst")?;
    let answer = session.notify_process_completion(burst2.clone()).await;
    println!(
        "retry burst-2 with the same ID (still full)   -> {}",
        tally.record(&answer)
    );
    let got = consumer_b.recv().await.context("loop exited")?;
    println!(
        "loop-b consumer acks {}",
        got.command().notification().process_handle
    );
    got.ack().await?;
    let answer = session.notify_process_completion(burst2.clone()).await;
    println!(
        "retry burst-2 with the same ID after the ack  -> {}",
        tally.record(&answer)
    );
    let copies = replay_all(&journal, session_id)
        .await?
        .iter()
        .filter(|(_, r)| r.key() == *burst2.command_id.as_uuid())
        .count();
    println!("journal frames for burst-2 after 3 attempts: {copies}");
    let foreign = LoopId::new();
    session.register_foreign_loop(foreign)?;
    let answer = session
        .notify_process_completion(completion(session_id, foreign, "foreign"))
        .await;
    println!(
        "a loop of a foreign engine (never retry)       -> {}",
        tally.record(&answer)
    );
    // Drain loop-b so only the crash leaves work pending.
    for _ in 0..2 {
        consumer_b
            .recv()
            .await
            .context("loop exited")?
            .ack()
            .await?;
    }

    // ---------------------------------------------------------------------------
    heading("4. Crash: a child process appends, then is killed with SIGKILL mid-way");
    intro(&[
        "The parent closes the journal. A child (this binary again) opens the same file for",
        "the same session and loop-a, starts two processes that outlive it (long-build and",
        "long-test, sleep 5), notifies job-0 to job-4, acks job-0 and job-1, says READY, and",
        "keeps notifying job-5, job-6, ... every 20 ms until the parent SIGKILLs it.",
        "Shows: the kill lands in the middle of work, with nothing shut down cleanly.",
    ]);
    let before = journal.last_seq(session_id).await?;
    drop((consumer_a, consumer_b, session, sup_a, sup_b));
    printer.abort();
    drop(journal); // release the file for the child
    tokio::time::sleep(Duration::from_millis(50)).await;

    let exe = std::env::current_exe()?;
    let mut child = Command::new(exe)
        .arg("--journal")
        .arg(path)
        .arg("--child")
        .arg(session_id.to_string())
        .arg(loop_a.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()?;
    let stdout = child.stdout.take().context("child stdout")?;
    let mut lines = BufReader::new(stdout).lines();
    let mut acked_by_child = 0;
    for line in lines.by_ref() {
        let line = line?;
        if line.starts_with("READY") {
            println!("  child: {line}");
            break;
        }
        if line.starts_with("acked") {
            acked_by_child += 1;
        }
        println!("  child: {line}");
    }
    tokio::time::sleep(Duration::from_millis(150)).await;
    child.kill()?; // SIGKILL: no destructor, no shutdown, no flush beyond what was committed
    let status = child.wait()?;
    println!(
        "{} child killed ({status}); it had acknowledged {acked_by_child}",
        clock.stamp()
    );

    heading("5. Restore from the same file");
    intro(&[
        "A new session reopens the file and restores: every notification the child appended",
        "and never acknowledged (job-2 onward, including those sent after READY) goes back to",
        "loop-a; the two processes left running are declared lost (LostOnRestore). Doing it",
        "again changes nothing. Shows: nothing acknowledged is lost, nothing is redelivered twice.",
    ]);
    let journal = RedbJournal::open(path, JournalOptions::default())?;
    if let Some(copy) = at_crash {
        // The journal as the crash left it (recovered by the open, nothing restored
        // yet), closed so that the copy is a clean file: `notify pending` on it shows
        // what this restore is about to do.
        journal.close();
        std::fs::copy(path, copy)
            .with_context(|| format!("copy the journal to {}", copy.display()))?;
        println!("journal as the crash left it copied to {}", copy.display());
    }
    let journal = if at_crash.is_some() {
        RedbJournal::open(path, JournalOptions::default())?
    } else {
        journal
    };
    let mut report = restore(session_id, &journal).await?;
    println!(
        "journal holds {} frames for the session ({} before the crash); {} notifications pending, {} orphaned processes",
        report.last_seq,
        before,
        report.pending_count(),
        report.orphans.len()
    );
    let session = Session::new(session_id, journal.clone());
    let pending = report.take_pending(loop_a);
    let redelivered = pending.len();
    let mut consumer_a =
        session.register_loop(LoopConfig::new(session_id, loop_a).seed(pending))?;
    let _consumer_b = session.register_loop(LoopConfig::new(session_id, loop_b).capacity(2))?;
    for _ in 0..redelivered {
        let got = consumer_a.recv().await.context("loop exited")?;
        let n = got.command().notification().clone();
        got.ack().await?;
        println!(
            "redelivered to loop-a: {:<12} {:<26} (command …{}) acked",
            n.process_handle,
            pair(n.state, n.reason),
            short(n.command_id)
        );
    }
    for orphan in &report.orphans {
        let outcome = session.declare_lost(orphan).await?;
        let answer = tally.record(&outcome.completion.clone().map_err(NotifyError::from));
        println!(
            "orphan {:<12} declared lost: ProcessLost journaled, LostOnRestore completion {answer}",
            orphan.process_handle
        );
        let got = consumer_a.recv().await.context("loop exited")?;
        got.ack().await?;
    }
    for orphan in &report.orphans {
        let again = session.declare_lost(orphan).await?;
        println!(
            "declared {} lost again (a crash during restore): completion {:?}, event {:?}",
            orphan.process_handle, again.completion, again.event
        );
    }
    let after = restore(session_id, &journal).await?;
    println!(
        "restore again: {} pending, {} orphans",
        after.pending_count(),
        after.orphans.len()
    );

    heading("Summary");
    for (k, v) in &tally.0 {
        println!("  {k:<10} {v}");
    }
    println!("  journal sessions: {}", journal.sessions().await?.len());
    println!(
        "  session {session_id}: last seq {}",
        journal.last_seq(session_id).await?
    );
    println!("  elapsed: {:.2}s", clock.0.elapsed().as_secs_f64());
    let stats = journal.commit_stats();
    println!(
        "  commits since the reopen: {} for {} appends",
        stats.commits, stats.appends
    );

    heading("Metrics (this process; the child's died with it)");
    intro(&[
        "What the journal, the loops and the session reported through the `metrics` facade,",
        "to the demo's own small recorder (an application installs an exporter instead).",
        "docs/metrics.md says what each one means.",
    ]);
    RECORDER.print();
    if after.pending_count() != 0 || !after.orphans.is_empty() {
        bail!("restore left work behind");
    }
    Ok(())
}

fn completion(
    session_id: SessionId,
    loop_id: LoopId,
    handle: &str,
) -> ProcessCompletionNotification {
    ProcessCompletionNotification {
        command_id: CommandId::new(),
        session_id,
        loop_id,
        process_handle: handle.into(),
        state: ProcessLifecycleState::Exited,
        reason: ProcessTerminalReason::Exited,
    }
}

/// The child: appends work to the same journal, acknowledges some of it, leaves two
/// processes running, says READY and keeps appending until it is killed.
async fn crashing_child(path: &Path, session_id: SessionId, loop_id: LoopId) -> anyhow::Result<()> {
    let journal = RedbJournal::open(path, JournalOptions::default())?;
    let session = Session::new(session_id, journal);
    let mut consumer = session.register_loop(LoopConfig::new(session_id, loop_id))?;
    let supervisor = Supervisor::new(session.clone(), loop_id);
    // Left running when the crash comes: restore finds them orphaned.
    let _long = [
        supervisor.spawn(ProcessSpec::new("long-build", "sleep").arg("5"))?,
        supervisor.spawn(ProcessSpec::new("long-test", "sleep").arg("5"))?,
    ];
    for i in 0..5 {
        let n = completion(session_id, loop_id, &format!("job-{i}"));
        session.notify_process_completion(n).await?;
        println!("accepted job-{i}");
    }
    for _ in 0..2 {
        let got = consumer.recv().await.context("loop exited")?;
        let handle = got.command().notification().process_handle.clone();
        got.ack().await?;
        println!("acked {handle}");
    }
    // Let the supervisor publish ProcessStarted for both long processes.
    tokio::time::sleep(Duration::from_millis(100)).await;
    println!("READY (now notifying job-5, job-6, ... until killed)");
    let mut i = 5;
    loop {
        let n = completion(session_id, loop_id, &format!("job-{i}"));
        session.notify_process_completion(n).await?;
        i += 1;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The demo's metrics recorder: every metric of the run, in memory, for the summary.
static RECORDER: DemoRecorder = DemoRecorder {
    metrics: Mutex::new(BTreeMap::new()),
};

/// A minimal [`metrics::Recorder`]: counters and gauges as atomics, histograms as count,
/// sum and maximum. Keyed by name and labels (`name{k=v,...}`).
struct DemoRecorder {
    metrics: Mutex<BTreeMap<String, Metric>>,
}

#[derive(Clone)]
enum Metric {
    Counter(Arc<AtomicU64>),
    /// An `f64`'s bits (how `metrics` implements a gauge on an `AtomicU64`).
    Gauge(Arc<AtomicU64>),
    Histogram(Arc<Summary>),
}

/// A histogram's count, sum and maximum.
#[derive(Default)]
struct Summary(Mutex<(u64, f64, f64)>);

impl metrics::HistogramFn for Summary {
    fn record(&self, value: f64) {
        let mut s = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        s.0 += 1;
        s.1 += value;
        s.2 = s.2.max(value);
    }
}

impl DemoRecorder {
    fn get(&self, key: &metrics::Key, make: impl FnOnce() -> Metric) -> Metric {
        let mut name = key.name().to_owned();
        let labels: Vec<String> = key
            .labels()
            .map(|l| format!("{}={}", l.key(), l.value()))
            .collect();
        if !labels.is_empty() {
            name = format!("{name}{{{}}}", labels.join(","));
        }
        let mut metrics = self.metrics.lock().unwrap_or_else(PoisonError::into_inner);
        metrics.entry(name).or_insert_with(make).clone()
    }

    fn print(&self) {
        let metrics = self.metrics.lock().unwrap_or_else(PoisonError::into_inner);
        for (name, metric) in metrics.iter() {
            let value = match metric {
                Metric::Counter(n) => n.load(Ordering::Relaxed).to_string(),
                Metric::Gauge(bits) => f64::from_bits(bits.load(Ordering::Relaxed)).to_string(),
                Metric::Histogram(h) => {
                    let (count, sum, max) = *h.0.lock().unwrap_or_else(PoisonError::into_inner);
                    let mean = if count == 0 { 0.0 } else { sum / count as f64 };
                    if name.contains("_seconds") {
                        format!(
                            "{count} samples, mean {:.3} ms, max {:.3} ms",
                            mean * 1e3,
                            max * 1e3
                        )
                    } else {
                        format!("{count} samples, mean {mean:.2}, max {max}")
                    }
                }
            };
            println!("  {name:<68} {value}");
        }
    }
}

impl metrics::Recorder for DemoRecorder {
    fn describe_counter(
        &self,
        _: metrics::KeyName,
        _: Option<metrics::Unit>,
        _: metrics::SharedString,
    ) {
    }
    fn describe_gauge(
        &self,
        _: metrics::KeyName,
        _: Option<metrics::Unit>,
        _: metrics::SharedString,
    ) {
    }
    fn describe_histogram(
        &self,
        _: metrics::KeyName,
        _: Option<metrics::Unit>,
        _: metrics::SharedString,
    ) {
    }

    fn register_counter(&self, key: &metrics::Key, _: &metrics::Metadata<'_>) -> metrics::Counter {
        match self.get(key, || Metric::Counter(Arc::default())) {
            Metric::Counter(n) => metrics::Counter::from_arc(n),
            _ => metrics::Counter::noop(),
        }
    }

    fn register_gauge(&self, key: &metrics::Key, _: &metrics::Metadata<'_>) -> metrics::Gauge {
        match self.get(key, || Metric::Gauge(Arc::default())) {
            Metric::Gauge(bits) => metrics::Gauge::from_arc(bits),
            _ => metrics::Gauge::noop(),
        }
    }

    fn register_histogram(
        &self,
        key: &metrics::Key,
        _: &metrics::Metadata<'_>,
    ) -> metrics::Histogram {
        match self.get(key, || Metric::Histogram(Arc::default())) {
            Metric::Histogram(h) => metrics::Histogram::from_arc(h),
            _ => metrics::Histogram::noop(),
        }
    }
}
