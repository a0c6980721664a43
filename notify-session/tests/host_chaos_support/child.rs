//! The host role: one host runtime (`SessionHost`) on the shared PostgreSQL journal,
//! one loop per session with its consumer (`consumer.rs`), driven by numbered lines
//! on standard input (`<id> <request>`) and answering `A <id> <answer>` on standard
//! output, many requests at once:
//!
//! * `O <session>` opens a session here: `ok` or `err:<why>`;
//! * `N <session> <command>` sends that notification to the session if this host
//!   serves it: `accepted`, `duplicate`, or a refusal to retry (`notserved`,
//!   `notowner:…`, `full`, `stopped`, `fenced`, `unavailable:…`), or `ended` /
//!   `error:…` (a test failure);
//! * `E <session>` ends the session if this host serves it (refused while
//!   notifications are pending): `ok`, `pending:<n>`, `notserved` or `err:<why>`;
//! * `STATUS`: `<session>:<epoch>:<pending>,…` (`-` for none), the sessions it serves;
//! * `DIAG`: the host's whole status (for a failure's report);
//! * `QUIT` shuts the host down gracefully (leases released): `BYE`.
//!
//! It logs its events (`log.rs`) to the file the parent named, among them every
//! lease it lost (`HostApp::stopped`) and every `NotOwner` it answered.

use std::sync::Arc;
use std::time::Duration;

use notify_journal::{JournalLeases, LeaseError, PgJournal, PgOptions};
use notify_loop::LoopConfig;
use notify_session::notify_journal::BoxFuture;
use notify_session::{
    AppError, EndError, HostApp, HostError, IfPending, RestoreReport, Session, SessionHost,
    StopReason,
};
use notify_testkit::kill::say;
use notify_testkit::postgres::DATABASE_URL_VAR;
use notify_types::{
    CommandId, JournalFailureKind, LoopId, Notified, NotifyError, ProcessCompletionNotification,
    ProcessLifecycleState, ProcessTerminalReason, SessionId, StopCause,
};

use super::config::{LEASE_VAR, POLL_VAR};
use super::consumer::{self, Ctx};
use super::log::{Event, EventLog, StopKind};
use super::procs::{ROLE_VAR, SCHEMA_VAR};

/// Sessions a host serves at most: any one host can hold them all.
const CAPACITY: usize = 256;

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

/// The application: registers the loop, seeds it, runs its consumer; logs what it
/// is told.
struct App {
    ctx: Ctx,
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
            let journal = &*self.ctx.journal;
            let info = JournalLeases::lease_info(journal, s).await?;
            let epoch = (info.live && info.holder == Some(JournalLeases::holder_id(journal)))
                .then_some(info.epoch);
            if let Some(epoch) = epoch {
                self.ctx.log.log(&Event::Open {
                    session: s,
                    epoch,
                    last_seq: report.last_seq,
                    pending: pending.iter().map(|p| p.command_id()).collect(),
                });
            }
            let consumer = session.register_loop(LoopConfig::new(s, l).seed(pending))?;
            consumer::spawn(self.ctx.clone(), consumer, s, epoch);
            Ok(())
        })
    }

    fn stopped(&self, session: SessionId, why: StopReason) {
        let (why, named) = match why {
            StopReason::LeaseLost { owner } => (StopKind::Lost, owner.is_some()),
            StopReason::ShutDown => (StopKind::ShutDown, false),
            StopReason::Ended => (StopKind::Ended, false),
            _ => (StopKind::Other, false),
        };
        self.ctx.log.log(&Event::Stopped {
            session,
            why,
            named,
        });
    }
}

fn ms_var(name: &str) -> Option<Duration> {
    let v = std::env::var(name).ok()?;
    Some(Duration::from_millis(v.parse().unwrap()))
}

/// The host process's main: serves until `QUIT` (or until its parent goes away).
pub(crate) async fn host() {
    let log = Arc::new(EventLog::create(std::env::var_os(ROLE_VAR).unwrap().as_ref()).unwrap());
    let url = std::env::var(DATABASE_URL_VAR).unwrap();
    let schema = std::env::var(SCHEMA_VAR).unwrap();
    let lease = ms_var(LEASE_VAR).unwrap();
    let options = PgOptions::default().schema(&schema).lease_duration(lease);
    let journal = Arc::new(PgJournal::connect(&url, options).await.unwrap());
    let mut builder = SessionHost::builder(Arc::clone(&journal))
        .capacity(CAPACITY)
        .app(App {
            ctx: Ctx {
                log: Arc::clone(&log),
                journal: Arc::clone(&journal),
                url,
                schema,
                lease,
            },
        });
    if let Some(poll) = ms_var(POLL_VAR) {
        builder = builder.adopt_every(poll);
    }
    let host = builder.start().await.unwrap();
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
        let (id, request) = line.split_once(' ').unwrap();
        let id = id.to_owned();
        let words: Vec<String> = request.split(' ').map(str::to_owned).collect();
        let answer = move |a: String| say(&format!("A {id} {a}")).unwrap();
        match words
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>()
            .as_slice()
        {
            ["N", s, c] => {
                let (s, c) = (session_id(s), CommandId::from_uuid(c.parse().unwrap()));
                let (host, log) = (host.clone(), Arc::clone(&log));
                tokio::spawn(async move { answer(notify(&host, &log, s, c).await) });
            }
            ["O", s] => {
                let (s, host) = (session_id(s), host.clone());
                tokio::spawn(async move {
                    answer(match host.open(s).await {
                        Ok(_) => "ok".to_owned(),
                        Err(e) => format!("err:{e}"),
                    });
                });
            }
            ["E", s] => {
                let (s, host, log) = (session_id(s), host.clone(), Arc::clone(&log));
                tokio::spawn(async move { answer(end(&host, &log, s).await) });
            }
            ["STATUS"] => {
                let owned: Vec<String> = host
                    .status()
                    .sessions
                    .iter()
                    .filter(|st| st.started)
                    .map(|st| format!("{}:{}:{}", st.session, st.epoch, st.pending))
                    .collect();
                answer(if owned.is_empty() {
                    "-".to_owned()
                } else {
                    owned.join(",")
                });
            }
            ["DIAG"] => answer(format!("{:?}", host.status())),
            ["QUIT"] => {
                // A lease that ran out before its release (a renewal stalled on the
                // loaded machine, another host took it) is answered `Lost`: the
                // session is stopped here all the same, as the checker then sees.
                match host.shutdown().await {
                    Ok(()) | Err(HostError::Lease(LeaseError::Lost { .. })) => {}
                    Err(e) => panic!("shutting down: {e}"),
                }
                answer("BYE".to_owned());
                return;
            }
            other => panic!("unknown request {other:?}"),
        }
    }
}

fn session_id(s: &str) -> SessionId {
    SessionId::from_uuid(s.parse().unwrap())
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
        return "notserved".to_owned();
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
        Err(NotifyError::NotOwner { owner, .. }) => {
            log.log(&Event::NotOwner {
                session: s,
                named: owner.is_some(),
            });
            format!("notowner:{owner:?} (served here, epoch {before:?})")
        }
        Err(NotifyError::DeliveryStopped {
            cause: StopCause::Full,
            ..
        }) => "full".to_owned(),
        Err(NotifyError::DeliveryStopped { .. }) => "stopped".to_owned(),
        Err(NotifyError::Journal(f)) if f.kind() == JournalFailureKind::Fenced => {
            log.log(&Event::NotOwner {
                session: s,
                named: false,
            });
            "fenced".to_owned()
        }
        Err(NotifyError::Journal(f)) => format!("unavailable:{f}"),
        Err(NotifyError::SessionEnded { .. }) => "ended".to_owned(),
        Err(e) => format!("error:{e}"),
    }
}

/// Ends `s` if this host serves it and nothing is pending.
async fn end(host: &SessionHost<PgJournal>, log: &EventLog, s: SessionId) -> String {
    let Some(session) = host.session(s) else {
        return "notserved".to_owned();
    };
    match session.end(IfPending::Refuse).await {
        Ok(_) => {
            log.log(&Event::Ended { session: s });
            "ok".to_owned()
        }
        Err(EndError::Pending { count }) => format!("pending:{count}"),
        Err(e) => format!("err:{e}"),
    }
}
