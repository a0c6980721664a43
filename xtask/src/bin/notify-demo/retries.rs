//! Part 3: every answer a resend can get (duplicate, collision, inbox full, a foreign
//! loop), and one journal frame per command ID whatever the number of attempts.

use anyhow::Context as _;
use notify_session::notify_journal::replay_all;
use notify_session::prelude::*;

use crate::first::{FirstSession, completion};
use crate::narrate::{Tally, heading, intro};

/// Part 3, on the first session; `completed` is part 1's processes and outcomes.
pub(crate) async fn retries(
    first: &mut FirstSession,
    completed: &[(String, ProcessOutcome)],
    tally: &mut Tally,
) -> anyhow::Result<()> {
    let session = &first.session;
    let session_id = first.ids.session_id;
    let loop_b = first.ids.loop_b;
    heading("3. Retries: duplicate, collision, inbox full, a foreign loop");
    intro(&[
        "A supervisor resends a completion with the same command ID until it is accepted.",
        "Shows the answer to each kind of resend, and that the journal keeps one frame per ID.",
    ]);
    let (_, first_outcome) = completed.first().context("no process completed")?;
    let original = first_outcome.notification.clone();
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
    let got = first.consumer_b.recv().await.context("loop exited")?;
    println!("loop-b consumer acks {}", got.completion().process_handle);
    got.ack().await?;
    let answer = session.notify_process_completion(burst2.clone()).await;
    println!(
        "retry burst-2 with the same ID after the ack  -> {}",
        tally.record(&answer)
    );
    let copies = replay_all(&first.journal, session_id)
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
        first
            .consumer_b
            .recv()
            .await
            .context("loop exited")?
            .ack()
            .await?;
    }
    Ok(())
}
