//! Part 4: the first session is closed; a child process (this binary again) appends to
//! the same journal and is killed with SIGKILL in the middle of its work.

use std::io::{BufRead as _, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::Context as _;
use notify_session::prelude::*;

use crate::first::FirstSession;
use crate::narrate::{Clock, heading, intro};
use crate::processes::Supervised;

/// Part 4. Closes the first session and returns its last seq before the crash.
pub(crate) async fn crash(
    first: FirstSession,
    supervised: Supervised,
    path: &Path,
    clock: &Clock,
) -> anyhow::Result<u64> {
    heading("4. Crash: a child process appends, then is killed with SIGKILL mid-way");
    intro(&[
        "The parent closes the journal. A child (this binary again) opens the same file for",
        "the same session and loop-a, starts two processes that outlive it (long-build and",
        "long-test, sleep 5), notifies job-0 to job-4, acks job-0 and job-1, says READY, and",
        "keeps notifying job-5, job-6, ... every 20 ms until the parent SIGKILLs it.",
        "Shows: the kill lands in the middle of work, with nothing shut down cleanly.",
    ]);
    let FirstSession {
        journal,
        ids,
        session,
        consumer_a,
        consumer_b,
        names: _,
    } = first;
    let Supervised {
        sup_a,
        sup_b,
        printer,
        completed: _,
    } = supervised;
    let before = journal.last_seq(ids.session_id).await?;
    drop((consumer_a, consumer_b, session, sup_a, sup_b));
    printer.abort();
    drop(journal); // release the file for the child
    tokio::time::sleep(Duration::from_millis(50)).await;

    let exe = std::env::current_exe()?;
    let mut child = Command::new(exe)
        .arg("--journal")
        .arg(path)
        .arg("--child")
        .arg(ids.session_id.to_string())
        .arg(ids.loop_a.to_string())
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
    Ok(before)
}
