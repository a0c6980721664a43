//! One host process of the demo: a `SessionHost` on the shared PostgreSQL journal,
//! driven by lines on standard input, narrating on standard output.
//!
//! Requests: `OPEN <session>` → `OPENED <session> <epoch>`; `NOTIFY <session>
//! <command> <job>` → `ANSWER <command> <answer>`; `QUIT` → `BYE` after a graceful
//! shutdown. Events: `STARTED <session> <epoch> <jobs pending, comma-separated or ->`
//! when the host starts serving a session (opened or adopted), `DELIVERED <session>
//! <job>` for each delivery. The consumer acknowledges what it receives except new
//! `hold-` jobs, which it keeps unacknowledged (pending); a job a restore handed it
//! is acknowledged.

use std::sync::Arc;

use anyhow::Context as _;
use notify_journal::{JournalLeases, LeaseError, PgJournal};
use notify_loop::LoopConfig;
use notify_session::notify_journal::BoxFuture;
use notify_session::{AppError, HostApp, HostError, RestoreReport, Session, SessionHost};
use notify_types::{CommandId, NotifyError, SessionId};

use crate::{ADOPT_EVERY, loop_of, notification, options, say, url};

struct App {
    journal: Arc<PgJournal>,
}

impl HostApp for App {
    fn started<'a>(
        &'a self,
        session: &'a Session,
        report: RestoreReport,
    ) -> BoxFuture<'a, Result<(), AppError>> {
        Box::pin(async move {
            let s = session.id();
            let l = loop_of(s);
            let pending = report.pending.get(&l).cloned().unwrap_or_default();
            let epoch = JournalLeases::lease_info(&*self.journal, s).await?.epoch;
            let jobs: Vec<String> = pending
                .iter()
                .map(|p| p.notification().process_handle.clone())
                .collect();
            let jobs = if jobs.is_empty() {
                "-".to_owned()
            } else {
                jobs.join(",")
            };
            say(&format!("STARTED {s} {epoch} {jobs}"));
            let seeded: Vec<CommandId> = pending.iter().map(|p| p.command_id()).collect();
            let mut consumer = session.register_loop(LoopConfig::new(s, l).seed(pending))?;
            tokio::spawn(async move {
                let mut held = Vec::new();
                while let Some(got) = consumer.recv().await {
                    let job = got.completion().process_handle.clone();
                    say(&format!("DELIVERED {s} {job}"));
                    if job.starts_with("hold-") && !seeded.contains(&got.command_id()) {
                        held.push(got);
                    } else if got.ack().await.is_err() {
                        break;
                    }
                }
            });
            Ok(())
        })
    }
}

/// The host process's main.
pub(crate) async fn host() -> anyhow::Result<()> {
    let journal = Arc::new(PgJournal::connect(&url(), options()).await?);
    let host = SessionHost::builder(Arc::clone(&journal))
        .adopt_every(ADOPT_EVERY)
        .app(App {
            journal: Arc::clone(&journal),
        })
        .start()
        .await?;
    let (tx, mut lines) = tokio::sync::mpsc::unbounded_channel();
    std::thread::spawn(move || {
        for line in std::io::stdin().lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    say(&format!("READY {}", host.holder_id()));
    while let Some(line) = lines.recv().await {
        let words: Vec<&str> = line.split(' ').collect();
        match words.as_slice() {
            ["OPEN", s] => {
                let s = SessionId::from_uuid(s.parse()?);
                host.open(s).await.with_context(|| format!("opening {s}"))?;
                let epoch = host
                    .status()
                    .sessions
                    .iter()
                    .find(|st| st.session == s)
                    .map_or(0, |st| st.epoch);
                say(&format!("OPENED {s} {epoch}"));
            }
            ["NOTIFY", s, c, job] => {
                let s = SessionId::from_uuid(s.parse()?);
                let c = CommandId::from_uuid(c.parse()?);
                let answer = match host.session(s) {
                    None => "not-the-owner".to_owned(),
                    Some(session) => match session
                        .notify_process_completion(notification(s, c, job))
                        .await
                    {
                        Ok(n) => format!("{n:?}"),
                        Err(NotifyError::NotOwner { .. }) => "not-the-owner".to_owned(),
                        Err(e) => format!("error:{e}"),
                    },
                };
                say(&format!("ANSWER {c} {answer}"));
            }
            ["QUIT"] => {
                // A lease that ran out before its release (a renewal stalled on a
                // loaded machine) answers Lost; the host is shut down all the same.
                match host.shutdown().await {
                    Ok(()) | Err(HostError::Lease(LeaseError::Lost { .. })) => {}
                    Err(e) => return Err(e.into()),
                }
                say("BYE");
                return Ok(());
            }
            other => anyhow::bail!("unknown request {other:?}"),
        }
    }
    Ok(())
}
