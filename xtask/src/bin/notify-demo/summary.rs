//! The closing tables: the answers tallied, the journal's figures, and the metrics the
//! libraries reported.

use notify_session::prelude::*;

use crate::narrate::{Clock, Tally, heading, intro};
use crate::recorder::RECORDER;
use crate::restore::Restored;

/// The answers by kind, the journal's sessions and head, the elapsed time and commits.
pub(crate) async fn summary(
    restored: &Restored,
    tally: &Tally,
    clock: &Clock,
) -> anyhow::Result<()> {
    let journal = &restored.journal;
    let session_id = restored.ids.session_id;
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
    Ok(())
}

/// What this process's recorder holds (the child's metrics died with it).
pub(crate) fn metrics() {
    heading("Metrics (this process; the child's died with it)");
    intro(&[
        "What the journal, the loops and the session reported through the `metrics` facade,",
        "to the demo's own small recorder (an application installs an exporter instead).",
        "docs/metrics.md says what each one means.",
    ]);
    RECORDER.print();
}
