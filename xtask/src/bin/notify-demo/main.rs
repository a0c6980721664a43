//! The notify demo: a session over a real redb journal, two native loops, a real
//! supervisor running real processes, every disposition, and a real crash (a child
//! process killed with SIGKILL) followed by restore.
//!
//! Run it with `cargo xtask demo`. `--journal PATH` keeps the journal file; by default
//! it lives in a fresh temp dir. `--journal-at-crash PATH` also keeps a copy of the
//! journal as the crash left it, before restore (for `notify pending`). Every part says what it runs and what it is meant to
//! show before it shows it.
//!
//! Here: the arguments and the parts in order. Each part is a module of its own
//! (`first.rs` the session parts 1 to 3 share, `processes.rs` parts 1 and 2, `retries.rs` 3, `crash.rs` 4, `restore.rs` 5,
//! `conversation.rs` 6 (effectively once),
//! `summary.rs` the closing tables); `child.rs` is the process part 4 kills.
#![allow(clippy::print_stdout, reason = "a command-line demo prints its report")]
#![allow(clippy::print_stderr, reason = "and its error")]

mod child;
mod conversation;
mod crash;
mod first;
mod narrate;
mod processes;
mod recorder;
mod restore;
mod retries;
mod summary;

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context as _, bail};
use notify_session::prelude::*;

use crate::first::FirstSession;
use crate::narrate::{Clock, Tally, intro};
use crate::recorder::RECORDER;

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
    let mut conversation_child: Option<(SessionId, LoopId)> = None;
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
            // Internal: the crashing consumer of part 6 (this same binary).
            "--conversation-child" => {
                let session = it
                    .next()
                    .context("--conversation-child needs a session id")?
                    .parse()?;
                let loop_id = it
                    .next()
                    .context("--conversation-child needs a loop id")?
                    .parse()?;
                conversation_child = Some((session, loop_id));
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
        return child::crashing_child(&path, session, loop_id).await;
    }
    if let Some((session, loop_id)) = conversation_child {
        let path = journal_path.context("--conversation-child needs --journal")?;
        return conversation::conversation_child(&path, session, loop_id).await;
    }
    let tmp = tempfile::tempdir()?;
    let path = journal_path.unwrap_or_else(|| tmp.path().join("notify-demo.redb"));
    parent(&path, at_crash.as_deref()).await
}

/// The demo itself: its parts in order.
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
        "real crash (a child process killed with SIGKILL) and restore from the file, and a",
        "consumer whose own table gets each completion exactly once across a crash.",
    ]);
    println!("journal file: {}", path.display());

    let mut first = FirstSession::open(path)?;
    let supervised = processes::supervise(&first, &clock, &mut tally).await?;
    processes::consume(&mut first, &clock).await?;
    retries::retries(&mut first, &supervised.completed, &mut tally).await?;
    let ids = first.ids;
    let before = crash::crash(first, supervised, path, &clock).await?;
    let restored = restore::restore_from(path, at_crash, ids, before, &mut tally).await?;
    let parts = tempfile::tempdir()?;
    conversation::conversation(parts.path(), &clock).await?;
    summary::summary(&restored, &tally, &clock).await?;
    summary::metrics();
    if restored.after.pending_count() != 0 || !restored.after.orphans.is_empty() {
        bail!("restore left work behind");
    }
    Ok(())
}
