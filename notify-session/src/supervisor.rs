//! A real process supervisor: runs OS processes with `tokio::process`, publishes their
//! lifecycle events and delivers their completion through the retry helper.
//!
//! Command lines, output and PIDs stay here: the session only ever sees the opaque
//! handle, IDs, timestamps, the exit code and the closed state/reason pair.

use std::ffi::OsString;
use std::fmt;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use notify_types::{
    CommandId, EventId, ExecutionId, LoopId, Notified, NotifyError, ProcessCompletionNotification,
    ProcessLifecycleKind, ProcessLifecycleMetadata, ProcessLifecycleState as State,
    ProcessTerminalReason as Reason, Timestamp, is_valid_handle,
};
use tokio::sync::{oneshot, watch};

use crate::error::PublishError;
use crate::retry::{RetryPolicy, notify_with_retry};
use crate::session::Session;

/// How to ask a running process to stop, from mildest to strongest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum StopSignal {
    /// SIGINT: the process ends `Interrupted`.
    Interrupt,
    /// SIGTERM: the process ends `Terminated`.
    Terminate,
    /// SIGKILL: the process ends `Killed`.
    Kill,
}

impl StopSignal {
    fn state_reason(self) -> (State, Reason) {
        match self {
            Self::Interrupt => (State::Interrupted, Reason::Interrupted),
            Self::Terminate => (State::Terminated, Reason::Terminated),
            Self::Kill => (State::Killed, Reason::Killed),
        }
    }
}

/// What to run. The program, arguments and output never leave the supervisor.
#[derive(Clone)]
pub struct ProcessSpec {
    handle: String,
    program: OsString,
    args: Vec<OsString>,
    deadline: Option<Duration>,
    origin: ExecutionId,
}

impl fmt::Debug for ProcessSpec {
    /// Shows the handle only: command lines may carry secrets.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProcessSpec")
            .field("handle", &self.handle)
            .finish_non_exhaustive()
    }
}

impl ProcessSpec {
    /// Runs `program` under the opaque `handle` (`[A-Za-z0-9_-]`, 1 to 128 bytes).
    pub fn new(handle: impl Into<String>, program: impl Into<OsString>) -> Self {
        Self {
            handle: handle.into(),
            program: program.into(),
            args: Vec::new(),
            deadline: None,
            origin: ExecutionId::new(),
        }
    }

    /// Adds one argument.
    #[must_use]
    pub fn arg(mut self, arg: impl Into<OsString>) -> Self {
        self.args.push(arg.into());
        self
    }

    /// Kills the process with `TimedOut` once it has run this long.
    #[must_use]
    pub fn deadline(mut self, deadline: Duration) -> Self {
        self.deadline = Some(deadline);
        self
    }

    /// The execution that started the process (a fresh ID by default).
    #[must_use]
    pub fn origin_execution(mut self, origin: ExecutionId) -> Self {
        self.origin = origin;
        self
    }
}

/// Why the supervisor refused to run a process.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum SuperviseError {
    /// The handle is not a valid process handle.
    #[error("invalid process handle")]
    InvalidHandle,
}

/// How a supervised process ended, and what became of its notification.
#[derive(Debug, Clone)]
pub struct ProcessOutcome {
    /// The completion's command ID, allocated before anything was published.
    pub command_id: CommandId,
    /// The terminal state.
    pub state: State,
    /// The terminal reason.
    pub reason: Reason,
    /// The exit code, if the process exited on its own.
    pub exit_code: Option<i32>,
    /// The completion notification, exactly as delivered (same command ID). If
    /// `delivery` ran out of retries, deliver it again with
    /// [`notify_with_retry`](crate::notify_with_retry); it is journaled already (unless
    /// the append itself failed), so a restart's restore redelivers it in any case.
    pub notification: ProcessCompletionNotification,
    /// The completion notification's delivery, after retries.
    pub delivery: Result<Notified, NotifyError>,
    /// Lifecycle events that could not be published (normally empty).
    pub lifecycle_errors: Vec<PublishError>,
}

/// A process the supervisor is running.
#[derive(Debug)]
pub struct SupervisedProcess {
    handle: String,
    command_id: CommandId,
    /// The strongest stop requested so far; the supervising task acts on changes.
    stop: watch::Sender<Option<StopSignal>>,
    done: oneshot::Receiver<ProcessOutcome>,
}

impl SupervisedProcess {
    /// The process's opaque handle.
    #[must_use]
    pub fn handle(&self) -> &str {
        &self.handle
    }

    /// The completion's command ID.
    #[must_use]
    pub fn command_id(&self) -> CommandId {
        self.command_id
    }

    /// Asks the process to stop: the supervisor publishes `ProcessStopRequested`,
    /// then signals it. A stronger request later escalates (interrupt, then
    /// terminate, then kill); a request no stronger than an earlier one changes
    /// nothing. Never blocks. Returns `false` if the process had already ended.
    pub fn stop(&self, signal: StopSignal) -> bool {
        self.stop.send_if_modified(|current| {
            if current.is_none_or(|c| signal > c) {
                *current = Some(signal);
                true
            } else {
                false
            }
        });
        !self.stop.is_closed()
    }

    /// Waits for the process to end and its completion to be delivered.
    ///
    /// Returns `None` only if the supervising task was aborted (its runtime shut down).
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: the outcome is lost if the future is dropped (the process and
    /// its notification are unaffected).
    pub async fn wait(self) -> Option<ProcessOutcome> {
        self.done.await.ok()
    }
}

/// Runs OS processes for one loop of a session.
///
/// Each process gets a command ID before anything is published; its lifecycle events
/// are journaled and broadcast as they happen, and its completion is delivered with
/// [`notify_with_retry`] (journaled first). The command line, output and PID never
/// leave the supervisor.
///
/// ```
/// use notify_session::prelude::*;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let session = Session::headless(SessionId::new());
/// let loop_id = LoopId::new();
/// let mut inbox = session.register_loop(LoopConfig::new(session.id(), loop_id))?;
///
/// let supervisor = Supervisor::new(session.clone(), loop_id);
/// let process = supervisor.spawn(ProcessSpec::new("build-42", "sh").arg("-c").arg("exit 3"))?;
/// let outcome = process.wait().await.ok_or("runtime shut down")?;
/// assert_eq!(outcome.state, ProcessLifecycleState::Exited);
/// assert_eq!(outcome.exit_code, Some(3)); // the supervisor knows; the completion does not
/// assert_eq!(outcome.delivery?, Notified::Accepted);
///
/// let received = inbox.recv().await.ok_or("loop exited")?;
/// assert_eq!(received.notification().command_id(), outcome.command_id);
/// received.ack().await?;
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct Supervisor {
    session: Session,
    loop_id: LoopId,
    retry: RetryPolicy,
}

impl Supervisor {
    /// A supervisor whose processes belong to `loop_id` of `session`.
    #[must_use]
    pub fn new(session: Session, loop_id: LoopId) -> Self {
        Self {
            session,
            loop_id,
            retry: RetryPolicy::default(),
        }
    }

    /// How completion deliveries are retried.
    #[must_use]
    pub fn retry_policy(mut self, retry: RetryPolicy) -> Self {
        self.retry = retry;
        self
    }

    /// Spawns `spec` and supervises it on a tokio task: publishes `ProcessStarted`,
    /// waits for it to end, delivers the completion through [`notify_with_retry`]
    /// (journaled first), then publishes `ProcessCompleted`. If spawning fails, the
    /// completion is `Failed` and no `ProcessStarted` is published. If the completion
    /// cannot be journaled, `ProcessCompleted` is not published either, so the process
    /// stays an orphan that restore declares lost. Stdin, stdout and stderr are null.
    ///
    /// # Errors
    ///
    /// [`SuperviseError::InvalidHandle`] before anything runs or is published.
    pub fn spawn(&self, spec: ProcessSpec) -> Result<SupervisedProcess, SuperviseError> {
        if !is_valid_handle(&spec.handle) {
            return Err(SuperviseError::InvalidHandle);
        }
        // Allocated before anything is published, and reused on every retry.
        let command_id = CommandId::new();
        let (stop_tx, stop_rx) = watch::channel(None);
        let (done_tx, done_rx) = oneshot::channel();
        let handle = spec.handle.clone();
        let run = Run {
            supervisor: self.clone(),
            spec,
            command_id,
            errors: Vec::new(),
        };
        tokio::spawn(async move {
            let outcome = run.run(stop_rx).await;
            // The owner may have stopped waiting: that is fine.
            let _ = done_tx.send(outcome);
        });
        Ok(SupervisedProcess {
            handle,
            command_id,
            stop: stop_tx,
            done: done_rx,
        })
    }
}

/// One supervised run.
struct Run {
    supervisor: Supervisor,
    spec: ProcessSpec,
    command_id: CommandId,
    errors: Vec<PublishError>,
}

/// How the process ended, before it is turned into events.
struct Ending {
    state: State,
    reason: Reason,
    exit_code: Option<i32>,
    started: Option<Timestamp>,
    diagnostic: Option<String>,
}

impl Run {
    fn metadata(
        &self,
        kind: ProcessLifecycleKind,
        state: State,
        created: Timestamp,
    ) -> ProcessLifecycleMetadata {
        ProcessLifecycleMetadata {
            event_id: EventId::new(),
            kind,
            session_id: self.supervisor.session.id(),
            loop_id: self.supervisor.loop_id,
            process_handle: self.spec.handle.clone(),
            origin_execution_id: self.spec.origin,
            state,
            process_created_at: created,
            process_started_at: None,
            process_finished_at: None,
            exit_code: None,
            reason: None,
            diagnostic: None,
        }
    }

    async fn publish(&mut self, m: ProcessLifecycleMetadata) {
        if let Err(e) = self.supervisor.session.publish_lifecycle(m).await {
            tracing::warn!(handle = %self.spec.handle, error = %e, "lifecycle event not published");
            self.errors.push(e);
        }
    }

    async fn run(mut self, stop_rx: watch::Receiver<Option<StopSignal>>) -> ProcessOutcome {
        let created = Timestamp::now();
        let mut command = tokio::process::Command::new(&self.spec.program);
        command
            .args(&self.spec.args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true);
        let ending = match command.spawn() {
            Err(e) => {
                // Nothing runs: later stop requests answer `false`.
                drop(stop_rx);
                Ending {
                    state: State::Failed,
                    reason: Reason::Failed,
                    exit_code: None,
                    started: None,
                    // The error kind only: the OS message may name the program's path.
                    diagnostic: Some(format!("spawn failed: {:?}", e.kind())),
                }
            }
            Ok(child) => {
                // Wall clocks can step back; a start before the creation would not validate.
                let started = Timestamp::now().max(created);
                let mut m = self.metadata(ProcessLifecycleKind::Started, State::Running, created);
                m.process_started_at = Some(started);
                self.publish(m).await;
                self.supervise(child, created, started, stop_rx).await
            }
        };
        let notification = ProcessCompletionNotification {
            command_id: self.command_id,
            session_id: self.supervisor.session.id(),
            loop_id: self.supervisor.loop_id,
            process_handle: self.spec.handle.clone(),
            state: ending.state,
            reason: ending.reason,
        };
        // The completion is journaled before `ProcessCompleted`: a crash between the
        // two leaves it pending for restore to redeliver (restore does not count the
        // process as orphaned then), whereas the other order could lose it.
        let finished = Timestamp::now().max(ending.started.unwrap_or(created));
        let delivery = notify_with_retry(
            &self.supervisor.session,
            &notification,
            self.supervisor.retry,
        )
        .await;
        // `ProcessCompleted` only follows a journaled completion (accepted, duplicate, or
        // stopped with its frame kept). Otherwise the process must stay an orphan, so
        // that restore declares it lost rather than forgetting its completion.
        if matches!(&delivery, Ok(_) | Err(NotifyError::DeliveryStopped { .. })) {
            let mut m = self.metadata(ProcessLifecycleKind::Completed, ending.state, created);
            m.process_started_at = ending.started;
            m.process_finished_at = Some(finished);
            m.exit_code = ending.exit_code;
            m.reason = Some(ending.reason);
            m.diagnostic = ending.diagnostic;
            self.publish(m).await;
        }

        ProcessOutcome {
            command_id: self.command_id,
            notification,
            state: ending.state,
            reason: ending.reason,
            exit_code: ending.exit_code,
            delivery,
            lifecycle_errors: self.errors,
        }
    }

    async fn supervise(
        &mut self,
        mut child: tokio::process::Child,
        created: Timestamp,
        started: Timestamp,
        mut stop_rx: watch::Receiver<Option<StopSignal>>,
    ) -> Ending {
        let deadline = self.spec.deadline.map(|d| tokio::time::Instant::now() + d);
        // The strongest stop acted on so far.
        let mut requested: Option<StopSignal> = None;
        let mut timed_out = false;
        // Whether the owner can still ask for a stop (its handle is alive).
        let mut listening = true;
        let status = loop {
            tokio::select! {
                status = child.wait() => break status,
                () = sleep_until(deadline), if !timed_out => {
                    timed_out = true;
                    // Killing a process that just exited fails harmlessly: wait() reports it.
                    let _ = child.start_kill();
                }
                changed = stop_rx.changed(), if listening && !timed_out => {
                    if changed.is_err() {
                        listening = false;
                        continue;
                    }
                    let Some(signal) = *stop_rx.borrow_and_update() else { continue };
                    if requested.is_some_and(|r| r >= signal) {
                        continue;
                    }
                    requested = Some(signal);
                    let (_, reason) = signal.state_reason();
                    let mut m = self.metadata(ProcessLifecycleKind::StopRequested, State::Running, created);
                    m.process_started_at = Some(started);
                    m.reason = Some(reason);
                    self.publish(m).await;
                    send_signal(&mut child, signal);
                }
            }
        };
        let failed = |diagnostic: String| Ending {
            state: State::Failed,
            reason: Reason::Failed,
            exit_code: None,
            started: Some(started),
            diagnostic: Some(diagnostic),
        };
        let status: ExitStatus = match status {
            Ok(s) => s,
            Err(e) => return failed(format!("wait failed: {:?}", e.kind())),
        };
        let (state, reason) = if let Some(code) = status.code() {
            return Ending {
                state: State::Exited,
                reason: Reason::Exited,
                exit_code: Some(code),
                started: Some(started),
                diagnostic: None,
            };
        } else if timed_out {
            (State::TimedOut, Reason::TimedOut)
        } else {
            // The signal that ended it decides (an interrupt ignored, then a kill, ends
            // Killed); another signal during a requested stop counts as that stop.
            match (signal_of(&status), requested) {
                (Some(signal), _) | (None, Some(signal)) => signal.state_reason(),
                (None, None) => return failed("terminated by an unexpected signal".to_owned()),
            }
        };
        Ending {
            state,
            reason,
            exit_code: None,
            started: Some(started),
            diagnostic: None,
        }
    }
}

async fn sleep_until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

#[cfg(unix)]
fn send_signal(child: &mut tokio::process::Child, signal: StopSignal) {
    use nix::sys::signal::{Signal, kill};
    use nix::unistd::Pid;
    let sig = match signal {
        StopSignal::Interrupt => Signal::SIGINT,
        StopSignal::Terminate => Signal::SIGTERM,
        StopSignal::Kill => Signal::SIGKILL,
    };
    // No PID, or a failed kill, means the process already exited; wait() reports how.
    if let Some(pid) = child.id().and_then(|pid| i32::try_from(pid).ok()) {
        let _ = kill(Pid::from_raw(pid), sig);
    }
}

#[cfg(not(unix))]
fn send_signal(child: &mut tokio::process::Child, _signal: StopSignal) {
    // Without POSIX signals every stop is a kill.
    let _ = child.start_kill();
}

#[cfg(unix)]
fn signal_of(status: &ExitStatus) -> Option<StopSignal> {
    use std::os::unix::process::ExitStatusExt as _;
    match status.signal()? {
        2 => Some(StopSignal::Interrupt),
        15 => Some(StopSignal::Terminate),
        9 => Some(StopSignal::Kill),
        _ => None,
    }
}

#[cfg(not(unix))]
fn signal_of(_status: &ExitStatus) -> Option<StopSignal> {
    Some(StopSignal::Kill)
}
