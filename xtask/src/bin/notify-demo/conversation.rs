//! Part 6: effectively once. A consumer keeps a "conversation" table in the journal's
//! own file and acknowledges each completion in the same transaction as the line it
//! appends (`SessionReceived::ack_with`); a child doing that is killed with SIGKILL,
//! and after restore every completion is in the conversation exactly once.

use std::collections::{BTreeMap, HashSet};
use std::io::{BufRead as _, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{Context as _, bail};
use notify_session::notify_journal::{AppTableError, replay_all};
use notify_session::notify_types::JournalRecord;
use notify_session::prelude::*;

use crate::first::completion;
use crate::narrate::{Clock, heading, intro, short};

/// The consumer's own table: command ID -> the line it appended to the conversation.
const CONVERSATION: &str = "app/conversation";
/// How many completions the child notifies.
const JOBS: usize = 12;

/// Appends `received`'s line to the conversation and acknowledges it, in one
/// transaction.
async fn append_and_ack(
    journal: &RedbJournal,
    received: SessionReceived,
) -> anyhow::Result<String> {
    let n = received.completion().clone();
    let line = format!("{} {}", n.process_handle, "exited");
    let key = n.command_id.as_uuid().as_u128();
    let row = line.clone();
    received
        .ack_with(journal, move |tables| {
            let mut conversation = tables.open_table::<u128, &str>(CONVERSATION)?;
            if conversation.insert(key, row.as_str())? {
                // Never happens: a committed line's ack committed with it.
                return Err("the conversation already holds this completion".into());
            }
            Ok(())
        })
        .await?;
    Ok(line)
}

/// The child of part 6 (`--conversation-child`): notifies `JOBS` completions, then
/// appends and acknowledges them one by one, slowly, until it is killed.
pub(crate) async fn conversation_child(
    path: &Path,
    session_id: SessionId,
    loop_id: LoopId,
) -> anyhow::Result<()> {
    let journal = RedbJournal::open(path, RedbOptions::default())?;
    let session = Session::new(session_id, journal.clone());
    let mut consumer = session.register_loop(LoopConfig::new(session_id, loop_id))?;
    for i in 0..JOBS {
        let n = completion(session_id, loop_id, &format!("build-{i}"));
        session.notify_process_completion(n).await?;
    }
    println!("READY");
    while let Some(received) = consumer.recv().await {
        let line = append_and_ack(&journal, received).await?;
        println!("appended and acked: {line}");
        tokio::time::sleep(Duration::from_millis(15)).await;
    }
    Ok(())
}

/// Part 6.
pub(crate) async fn conversation(dir: &Path, clock: &Clock) -> anyhow::Result<()> {
    heading("6. Effectively once: the ack and the consumer's own write in one transaction");
    intro(&[
        "A consumer keeps its conversation (one line per completion) in a table of the",
        "journal's own file, and acknowledges each completion in the same write transaction",
        "as the line it appends (ack_with). A child does this for build-0 to build-11 and is",
        "SIGKILLed part way; a new session restores, appends and acks what was left.",
        "Shows: every completion is in the conversation exactly once, none twice, none lost,",
        "wherever the kill landed (with a plain ack after a separate write, a kill between",
        "the two would append a line twice).",
    ]);
    let path = dir.join("conversation.redb");
    let session_id = SessionId::new();
    let loop_id = LoopId::new();
    let exe = std::env::current_exe()?;
    let mut child = Command::new(exe)
        .arg("--journal")
        .arg(&path)
        .arg("--conversation-child")
        .arg(session_id.to_string())
        .arg(loop_id.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()?;
    let stdout = child.stdout.take().context("child stdout")?;
    let mut lines = BufReader::new(stdout).lines();
    let mut seen = 0;
    for line in lines.by_ref() {
        let line = line?;
        if line.starts_with("appended") {
            println!("  child: {line}");
            seen += 1;
            if seen == 4 {
                break;
            }
        }
    }
    // Past a few acks, mid-way through another (the child sleeps 15 ms between them).
    tokio::time::sleep(Duration::from_millis(22)).await;
    child.kill()?;
    let status = child.wait()?;
    println!("{} child killed ({status})", clock.stamp());

    let journal = RedbJournal::open(&path, RedbOptions::default())?;
    let mut report = restore(session_id, &journal).await?;
    let pending = report.take_pending(loop_id);
    println!(
        "restore: {} completions pending (not in the conversation yet)",
        pending.len()
    );
    let session = Session::new(session_id, journal.clone());
    let redeliver = pending.len();
    let mut consumer = session.register_loop(LoopConfig::new(session_id, loop_id).seed(pending))?;
    for _ in 0..redeliver {
        let received = consumer.recv().await.context("loop exited")?;
        let line = append_and_ack(&journal, received).await?;
        println!("redelivered, appended and acked: {line}");
    }

    let conversation: BTreeMap<u128, String> = journal.read_app_tables(|tables| {
        let Some(table) = tables.open_table::<u128, &str>(CONVERSATION)? else {
            return Ok::<_, AppTableError>(BTreeMap::new());
        };
        let mut rows = BTreeMap::new();
        for entry in table.iter()? {
            let (k, v) = entry.map_err(|e| {
                AppTableError::Storage(notify_session::notify_journal::StorageError::new(
                    "read the conversation",
                    e,
                ))
            })?;
            rows.insert(k.value(), v.value().to_owned());
        }
        Ok(rows)
    })?;
    let mut consumed = HashSet::new();
    let mut notified = Vec::new();
    for (_, record) in replay_all(&journal, session_id).await? {
        match record {
            JournalRecord::Command(n) => notified.push(n.command_id()),
            JournalRecord::Event(SessionEvent::NotificationConsumed(c)) => {
                consumed.insert(c.cause().as_uuid().as_u128());
            }
            _ => {}
        }
    }
    let mut lines: Vec<&String> = conversation.values().collect();
    lines.sort_by_key(|l| {
        l.trim_start_matches("build-")
            .split(' ')
            .next()
            .and_then(|n| n.parse::<u32>().ok())
    });
    println!(
        "conversation: {} lines for {} completions journaled, {} acknowledged",
        conversation.len(),
        notified.len(),
        consumed.len()
    );
    for line in lines {
        println!("  {line}");
    }
    let keys: HashSet<u128> = conversation.keys().copied().collect();
    let distinct: HashSet<&String> = conversation.values().collect();
    if keys != consumed || distinct.len() != conversation.len() || notified.len() != JOBS {
        bail!("the conversation and the acknowledgements differ");
    }
    for id in &notified {
        if !keys.contains(&id.as_uuid().as_u128()) {
            bail!("completion …{} is missing from the conversation", short(id));
        }
    }
    println!("every completion exactly once: {JOBS} of {JOBS}");
    drop((consumer, session));
    journal.close();
    Ok(())
}
