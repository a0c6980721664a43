//! Parts 1 and 2: real processes under two supervisors, their lifecycle events as they
//! are journaled, then the loops' consumers receiving and acknowledging.

use std::time::Duration;

use anyhow::Context as _;
use notify_session::prelude::*;
use tokio::task::JoinHandle;

use crate::first::FirstSession;
use crate::narrate::{Clock, Tally, heading, intro, pair};

/// What part 1 leaves behind: the supervisors and the event printer, kept until part 4
/// closes the first session, and each process's handle and outcome.
pub(crate) struct Supervised {
    pub(crate) sup_a: Supervisor,
    pub(crate) sup_b: Supervisor,
    pub(crate) printer: JoinHandle<()>,
    pub(crate) completed: Vec<(String, ProcessOutcome)>,
}

/// Part 1: four processes, one per way a process ends, and their events.
pub(crate) async fn supervise(
    first: &FirstSession,
    clock: &Clock,
    tally: &mut Tally,
) -> anyhow::Result<Supervised> {
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
    let printer = print_events(first, clock);

    let sup_a = Supervisor::new(first.session.clone(), first.ids.loop_a);
    let sup_b = Supervisor::new(first.session.clone(), first.ids.loop_b);
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
    Ok(Supervised {
        sup_a,
        sup_b,
        printer,
        completed,
    })
}

/// Prints the session's lifecycle events as they are published, one line each.
fn print_events(first: &FirstSession, clock: &Clock) -> JoinHandle<()> {
    let mut events = first.session.subscribe();
    let printer_clock = Clock(clock.0);
    let printer_names = first.names.clone();
    tokio::spawn(async move {
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
    })
}

/// Part 2: each loop's consumer takes its two completions and acknowledges them.
pub(crate) async fn consume(first: &mut FirstSession, clock: &Clock) -> anyhow::Result<()> {
    heading("2. The loops' consumers receive in order and acknowledge");
    intro(&[
        "Each loop's consumer takes its two completions in acceptance order and acks them;",
        "each ack journals NotificationConsumed before the loop lets go. A completion has no",
        "exit code: the consumer reads it from the matching ProcessCompleted (completed_event).",
    ]);
    for (name, consumer, count) in [
        ("loop-a", &mut first.consumer_a, 2),
        ("loop-b", &mut first.consumer_b, 2),
    ] {
        for _ in 0..count {
            let got = consumer.recv().await.context("loop exited")?;
            let n = got.completion().clone();
            let exit = match completed_event(&first.journal, &n)
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
    Ok(())
}
