//! The child of part 4: this same binary, run with `--child`, appending to the
//! parent's journal until the parent kills it.

use std::path::Path;
use std::time::Duration;

use anyhow::Context as _;
use notify_session::prelude::*;

use crate::first::completion;

/// The child: appends work to the same journal, acknowledges some of it, leaves two
/// processes running, says READY and keeps appending until it is killed.
pub(crate) async fn crashing_child(
    path: &Path,
    session_id: SessionId,
    loop_id: LoopId,
) -> anyhow::Result<()> {
    let journal = RedbJournal::open(path, RedbOptions::default())?;
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
        let handle = got.completion().process_handle.clone();
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
