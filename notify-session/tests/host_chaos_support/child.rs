//! The host role: one host runtime (`SessionHost`) on the shared PostgreSQL journal,
//! one loop per session whose consumer acks what it receives, driven by lines on
//! standard input and answering on standard output:
//!
//! * `O <session>` opens a session here: `OPENED <session> ok|err:<why>`;
//! * `N <session> <command>` sends that notification to the session if this host
//!   serves it: `R <command> accepted|duplicate|notowner|stopped|fenced|unavailable:…`
//!   (retryable) or `error:…` (a test failure);
//! * `STATUS`: `S <session>,<session>,…` (`-` for none), the sessions it serves;
//! * `DIAG`: `D holder=<id> <status>`, the host's whole status (for a failure's report);
//! * `QUIT` shuts the host down gracefully (leases released): `BYE`.
//!
//! It logs its events (`log.rs`) to the file the parent named.

use std::sync::Arc;
use std::time::Duration;

use notify_journal::{JournalLeases, LeaseError, PgJournal, PgOptions};
use notify_loop::LoopConfig;
use notify_session::notify_journal::BoxFuture;
use notify_session::{AppError, HostApp, HostError, RestoreReport, Session, SessionHost};
use notify_testkit::kill::{say, xorshift};
use notify_testkit::postgres::DATABASE_URL_VAR;
use notify_types::{
    CommandId, JournalFailureKind, LoopId, Notified, NotifyError, ProcessCompletionNotification,
    ProcessLifecycleState, ProcessTerminalReason, SessionId,
};

use super::log::{Event, EventLog};
use super::procs::{ROLE_VAR, SCHEMA_VAR};

/// The hosts' lease duration: short, so a stopped host loses its leases quickly.
pub(crate) const LEASE: Duration = Duration::from_millis(1500);
/// How often a host looks for orphans (besides the engine's announcements).
const ADOPT_EVERY: Duration = Duration::from_millis(500);
/// Sessions a host serves at most: two hosts can hold all 30 between them.
const CAPACITY: usize = 20;

/// Each session's one loop.
pub(crate) fn loop_of(s: SessionId) -> LoopId {
    LoopId::from_uuid(*s.as_uuid())
}

/// The notification with ID `c` for session `s`: the same bytes on every retry.
pub(crate) fn notification(s: SessionId, c: CommandId) -> ProcessCompletionNotification {
    ProcessCompletionNotification {
        command_id: c,
        session_id: s,
        loop_id: loop_of(s),
        process_handle: format!("job-{c}"),
        state: ProcessLifecycleState::Exited,
        reason: ProcessTerminalReason::Exited,
    }
}

/// The application: registers the loop, seeds it, logs and acks.
struct App {
    journal: Arc<PgJournal>,
    log: Arc<EventLog>,
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
            // The epoch this host holds: read while it holds the lease. Had it lost
            // the lease already, it logs nothing for this placement (a later epoch
            // takes the session over, and the checker follows that one).
            let info = JournalLeases::lease_info(&*self.journal, s).await?;
            let epoch = (info.live
                && info.holder == Some(JournalLeases::holder_id(&*self.journal)))
            .then_some(info.epoch);
            if let Some(epoch) = epoch {
                self.log.log(&Event::Open {
                    session: s,
                    epoch,
                    last_seq: report.last_seq,
                    pending: pending.iter().map(|p| p.command_id()).collect(),
                });
            }
            let mut consumer = session.register_loop(LoopConfig::new(s, l).seed(pending))?;
            let log = Arc::clone(&self.log);
            tokio::spawn(async move {
                let mut rng = (s.as_uuid().as_u128() as u64) | 1;
                while let Some(got) = consumer.recv().await {
                    let command = got.command_id();
                    if let Some(epoch) = epoch {
                        log.log(&Event::Deliver {
                            session: s,
                            epoch,
                            command,
                        });
                    }
                    // Some notifications stay pending a while, so faults find some.
                    tokio::time::sleep(Duration::from_millis(xorshift(&mut rng) % 150)).await;
                    if got.ack().await.is_err() {
                        break;
                    }
                    if let Some(epoch) = epoch {
                        log.log(&Event::Acked {
                            session: s,
                            epoch,
                            command,
                        });
                    }
                }
            });
            Ok(())
        })
    }
}

/// The host process's main: serves until `QUIT` (or until its parent goes away).
pub(crate) async fn host() {
    let log = Arc::new(EventLog::create(std::env::var_os(ROLE_VAR).unwrap().as_ref()).unwrap());
    let url = std::env::var(DATABASE_URL_VAR).unwrap();
    let schema = std::env::var(SCHEMA_VAR).unwrap();
    let options = PgOptions::default().schema(&schema).lease_duration(LEASE);
    let journal = Arc::new(PgJournal::connect(&url, options).await.unwrap());
    let host = SessionHost::builder(Arc::clone(&journal))
        .capacity(CAPACITY)
        .adopt_every(ADOPT_EVERY)
        .app(App {
            journal: Arc::clone(&journal),
            log: Arc::clone(&log),
        })
        .start()
        .await
        .unwrap();
    let (tx, mut lines) = tokio::sync::mpsc::unbounded_channel();
    std::thread::spawn(move || {
        for line in std::io::stdin().lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    say(&format!("READY {}", host.holder_id())).unwrap();
    while let Some(line) = lines.recv().await {
        let words: Vec<&str> = line.split(' ').collect();
        match words.as_slice() {
            ["O", s] => {
                let s = SessionId::from_uuid(s.parse().unwrap());
                let answer = match host.open(s).await {
                    Ok(_) => "ok".to_owned(),
                    Err(e) => format!("err:{e}"),
                };
                say(&format!("OPENED {s} {answer}")).unwrap();
            }
            ["N", s, c] => {
                let s = SessionId::from_uuid(s.parse().unwrap());
                let c = CommandId::from_uuid(c.parse().unwrap());
                let answer = notify(&host, &log, s, c).await;
                say(&format!("R {c} {answer}")).unwrap();
            }
            ["STATUS"] => {
                let owned: Vec<String> = host.sessions().iter().map(ToString::to_string).collect();
                let list = if owned.is_empty() {
                    "-".to_owned()
                } else {
                    owned.join(",")
                };
                say(&format!("S {list}")).unwrap();
            }
            ["DIAG"] => {
                let st = host.status();
                say(&format!("D holder={} {:?}", st.holder, st.sessions)).unwrap();
            }
            ["QUIT"] => {
                // A lease that ran out before its release (a renewal stalled on the
                // loaded machine, another host took it) is answered `Lost`: the
                // session is stopped here all the same, as the checker then sees.
                match host.shutdown().await {
                    Ok(()) | Err(HostError::Lease(LeaseError::Lost { .. })) => {}
                    Err(e) => panic!("shutting down: {e}"),
                }
                say("BYE").unwrap();
                return;
            }
            other => panic!("unknown request {other:?}"),
        }
    }
}

/// The epoch this host holds on `s`, if it serves it.
fn epoch_of(host: &SessionHost<PgJournal>, s: SessionId) -> Option<u64> {
    host.status()
        .sessions
        .iter()
        .find(|st| st.session == s)
        .map(|st| st.epoch)
}

/// Sends `c` to `s` if this host serves it; the answer's kind.
async fn notify(
    host: &SessionHost<PgJournal>,
    log: &EventLog,
    s: SessionId,
    c: CommandId,
) -> String {
    let Some(session) = host.session(s) else {
        return "notowner:not served here".to_owned();
    };
    let before = epoch_of(host, s);
    let answer = session.notify_process_completion(notification(s, c)).await;
    let after = epoch_of(host, s);
    match answer {
        Ok(Notified::Accepted) => {
            if let Some(epoch) = before.filter(|_| before == after) {
                log.log(&Event::Accepted {
                    session: s,
                    epoch,
                    command: c,
                });
            }
            "accepted".to_owned()
        }
        Ok(Notified::Duplicate) => "duplicate".to_owned(),
        Err(e @ NotifyError::NotOwner { .. }) => {
            format!("notowner:{e:?} (served here, epoch {before:?})")
        }
        Err(NotifyError::DeliveryStopped { .. }) => "stopped".to_owned(),
        Err(NotifyError::Journal(f)) if f.kind() == JournalFailureKind::Fenced => {
            "fenced".to_owned()
        }
        Err(NotifyError::Journal(f)) => format!("unavailable:{f}"),
        Err(e) => format!("error:{e}"),
    }
}
