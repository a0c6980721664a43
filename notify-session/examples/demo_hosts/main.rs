//! The host runtime demo on PostgreSQL: N host processes (`SessionHost`) share
//! sessions through one database; one is killed (SIGKILL) with notifications
//! pending; the others adopt its sessions, redeliver exactly what it left pending,
//! and accept new notifications. The narration shows each session moving, what its
//! new owner redelivered, and the takeover time (from the kill to the first
//! notification the new owner accepted).
//!
//! Run it with `cargo xtask demo --hosts 3` (or `cargo run -p notify-session
//! --example demo_hosts -- --hosts 3`). The database is `NOTIFY_TEST_DATABASE_URL`,
//! by default `host=127.0.0.1 port=5432 user=postgres dbname=test`; the demo uses a
//! schema of its own and drops it at the end. The hosts are this program
//! re-executed as child processes (`NOTIFY_DEMO_HOST` set): `host.rs`; the story is
//! `story.rs`.
#![allow(clippy::print_stdout, reason = "a command-line demo prints its report")]

mod host;
mod story;

use std::io::Write as _;
use std::time::Duration;

use anyhow::{Context as _, bail};
use notify_journal::PgOptions;
use notify_types::{
    CommandId, LoopId, ProcessCompletionNotification, ProcessLifecycleState, ProcessTerminalReason,
    SessionId,
};

const URL_VAR: &str = "NOTIFY_TEST_DATABASE_URL";
const DEFAULT_URL: &str = "host=127.0.0.1 port=5432 user=postgres dbname=test";
/// Set in a host process: its schema.
const HOST_VAR: &str = "NOTIFY_DEMO_HOST";
/// Short, so the takeover is quick to watch.
const LEASE: Duration = Duration::from_secs(2);
/// How often a host looks for sessions whose owner is gone.
const ADOPT_EVERY: Duration = Duration::from_millis(500);

fn url() -> String {
    std::env::var(URL_VAR)
        .ok()
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| DEFAULT_URL.to_owned())
}

fn options() -> PgOptions {
    let schema = std::env::var(HOST_VAR).unwrap_or_else(|_| "notify_demo_hosts".to_owned());
    PgOptions::default().schema(&schema).lease_duration(LEASE)
}

/// Each session's one loop.
fn loop_of(s: SessionId) -> LoopId {
    LoopId::from_uuid(*s.as_uuid())
}

fn notification(s: SessionId, c: CommandId, job: &str) -> ProcessCompletionNotification {
    ProcessCompletionNotification {
        command_id: c,
        session_id: s,
        loop_id: loop_of(s),
        process_handle: job.to_owned(),
        state: ProcessLifecycleState::Exited,
        reason: ProcessTerminalReason::Exited,
    }
}

/// One line on standard output, flushed (a host's parent reads it at once).
fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

fn main() -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    if std::env::var_os(HOST_VAR).is_some() {
        return rt.block_on(host::host());
    }
    let args: Vec<String> = std::env::args().skip(1).collect();
    let hosts = match args.as_slice() {
        [] => 3,
        [flag, n] if flag == "--hosts" => n.parse().context("--hosts takes a number")?,
        _ => bail!("usage: demo_hosts [--hosts N]"),
    };
    if !(2..=9).contains(&hosts) {
        bail!("--hosts takes 2 to 9");
    }
    story::run(&rt, hosts)
}
