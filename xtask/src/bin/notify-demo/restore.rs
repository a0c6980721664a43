//! Part 5: a new session reopens the file and restores: pending notifications
//! redelivered, orphaned processes declared lost, and a second restore finding nothing.

use std::path::Path;

use anyhow::Context as _;
use notify_session::prelude::*;

use crate::first::Ids;
use crate::narrate::{Tally, heading, intro, pair, short};

/// The restored session, kept open until the demo ends, and the second restore's report.
pub(crate) struct Restored {
    pub(crate) journal: RedbJournal,
    pub(crate) ids: Ids,
    /// Held so the loops stay registered through the summary and the metrics.
    _session: Session,
    _consumers: (SessionConsumer, SessionConsumer),
    pub(crate) after: RestoreReport,
}

/// Part 5; `before` is the session's last seq before the crash.
pub(crate) async fn restore_from(
    path: &Path,
    at_crash: Option<&Path>,
    ids: Ids,
    before: u64,
    tally: &mut Tally,
) -> anyhow::Result<Restored> {
    let Ids {
        session_id,
        loop_a,
        loop_b,
    } = ids;
    heading("5. Restore from the same file");
    intro(&[
        "A new session reopens the file and restores: every notification the child appended",
        "and never acknowledged (job-2 onward, including those sent after READY) goes back to",
        "loop-a; the two processes left running are declared lost (LostOnRestore). Doing it",
        "again changes nothing. Shows: nothing acknowledged is lost, nothing is redelivered twice.",
    ]);
    let journal = RedbJournal::open(path, RedbOptions::default())?;
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
        RedbJournal::open(path, RedbOptions::default())?
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
    let consumer_b = session.register_loop(LoopConfig::new(session_id, loop_b).capacity(2))?;
    for _ in 0..redelivered {
        let got = consumer_a.recv().await.context("loop exited")?;
        let n = got.completion().clone();
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
    Ok(Restored {
        journal,
        ids,
        _session: session,
        _consumers: (consumer_a, consumer_b),
        after,
    })
}
