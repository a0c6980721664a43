//! Restore after a crash: what was appended and never consumed, and which processes
//! were left running.

use std::collections::{BTreeMap, HashMap, HashSet};

use notify_journal::{JournalError, JournalRead, SessionState, replay_page};
use notify_types::{
    CommandId, JournalRecord, LoopId, Notified, NotifyError, ProcessCompletionNotification,
    ProcessLifecycleKind, ProcessLifecycleMetadata, ProcessLifecycleState, ProcessNotification,
    ProcessTerminalReason, SessionEvent, SessionId, lost_command_id, lost_event_id,
};
use tracing::Instrument as _;

use crate::error::{DeclareLostError, RestoreError};
use crate::session::Session;
use crate::shared::Published;

/// One process incarnation: what its lifecycle events have in common. A handle may be
/// reused later, or by another loop, for another process.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Incarnation {
    loop_id: LoopId,
    handle: String,
    origin: notify_types::ExecutionId,
    created: notify_types::Timestamp,
}

impl Incarnation {
    fn of(m: &ProcessLifecycleMetadata) -> Self {
        Self {
            loop_id: m.loop_id,
            handle: m.process_handle.clone(),
            origin: m.origin_execution_id,
            created: m.process_created_at,
        }
    }
}

/// What a session's journal says is unfinished.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestoreReport {
    /// Notifications appended and never consumed, per loop, in journal order.
    pub pending: BTreeMap<LoopId, Vec<ProcessNotification>>,
    /// Processes whose last lifecycle event is not terminal and whose completion was
    /// never journaled, in journal order of that last event. A process is one
    /// incarnation: loop, handle, origin execution and creation time.
    pub orphans: Vec<ProcessLifecycleMetadata>,
    /// The session's last journal sequence.
    pub last_seq: u64,
    /// Whether the session is live, ended or purged. An ended or purged session has
    /// nothing to redeliver and no orphans: `pending` and `orphans` are empty.
    pub state: SessionState,
}

impl Default for RestoreReport {
    fn default() -> Self {
        Self {
            pending: BTreeMap::new(),
            orphans: Vec::new(),
            last_seq: 0,
            state: SessionState::Live,
        }
    }
}

impl RestoreReport {
    /// Removes and returns `loop_id`'s pending notifications, to seed the loop with:
    /// `LoopConfig::new(session, loop_id).seed(report.take_pending(loop_id))`.
    pub fn take_pending(&mut self, loop_id: LoopId) -> Vec<ProcessNotification> {
        self.pending.remove(&loop_id).unwrap_or_default()
    }

    /// How many notifications are pending over all loops.
    #[must_use]
    pub fn pending_count(&self) -> usize {
        self.pending.values().map(Vec::len).sum()
    }
}

/// Replays `session_id`'s journal and reports, per loop, the notifications appended
/// but not consumed, and the processes whose last lifecycle event is non-terminal.
///
/// The log is read page by page and reduced as it goes: memory is bounded by what is
/// pending and the processes still alive at that point of the log (plus one page), not
/// by the session's length. Every page is checked to continue the one before it.
///
/// A session that has ended (or was purged) is reported so, in
/// [`RestoreReport::state`], with nothing to redeliver.
///
/// Restore only reads: running it twice gives the same report. To resume, register
/// each loop again seeded with its pending notifications, then declare the orphans
/// lost ([`Session::declare_lost`]):
///
/// ```
/// use notify_session::prelude::*;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let dir = tempfile::tempdir()?;
/// # let path = dir.path().join("notify.redb");
/// let (session_id, loop_id) = (SessionId::new(), LoopId::new());
/// {
///     // Before the crash: accepted, never acknowledged.
///     let session = Session::new(session_id, RedbJournal::open(&path, RedbOptions::default())?);
///     let _inbox = session.register_loop(LoopConfig::new(session_id, loop_id))?;
///     session.notify_process_completion(ProcessCompletionNotification {
///         command_id: CommandId::new(),
///         session_id,
///         loop_id,
///         process_handle: "build-42".into(),
///         state: ProcessLifecycleState::Exited,
///         reason: ProcessTerminalReason::Exited,
///     }).await?;
/// } // crash: everything in memory is gone
///
/// let journal = RedbJournal::open(&path, RedbOptions::default())?;
/// let mut report = restore(session_id, &journal).await?;
/// let session = Session::new(session_id, journal);
/// let seed = report.take_pending(loop_id);
/// let mut inbox = session.register_loop(LoopConfig::new(session_id, loop_id).seed(seed))?;
/// for orphan in &report.orphans {
///     session.declare_lost(orphan).await?;
/// }
/// let received = inbox.recv().await.ok_or("loop exited")?;
/// assert_eq!(received.completion().process_handle, "build-42");
/// received.ack().await?;
/// # Ok(())
/// # }
/// ```
///
/// # Cancel safety
///
/// Dropping the future abandons the report; nothing was written.
///
/// # Errors
///
/// [`RestoreError::Replay`] if the journal cannot be read or a frame is damaged.
pub async fn restore(
    session_id: SessionId,
    journal: &dyn JournalRead,
) -> Result<RestoreReport, RestoreError> {
    let span = tracing::info_span!("restore", session = %session_id);
    async move {
        let mut state = Reduction::default();
        let mut from = 1;
        loop {
            let page = match replay_page(journal, session_id, from, RESTORE_PAGE).await {
                Err(JournalError::Purged { .. }) => {
                    return ended_report(session_id, journal).await;
                }
                page => page.map_err(RestoreError::Replay)?,
            };
            let n = page.len();
            for (seq, record) in page {
                state.apply(seq, record);
                from = seq.saturating_add(1);
            }
            if n < RESTORE_PAGE {
                break;
            }
        }
        if state.ended {
            // The journal's own word on when it ended (or that it was purged since).
            return ended_report(session_id, journal).await;
        }
        let report = state.finish();
        tracing::info!(
            pending = report.pending_count(),
            orphans = report.orphans.len(),
            last_seq = report.last_seq,
            "restored"
        );
        Ok(report)
    }
    .instrument(span)
    .await
}

/// The report of an ended or purged session: its state and last seq, nothing pending.
async fn ended_report(
    session_id: SessionId,
    journal: &dyn JournalRead,
) -> Result<RestoreReport, RestoreError> {
    let state = journal
        .session_state(session_id)
        .await
        .map_err(RestoreError::Replay)?;
    let last_seq = journal
        .last_seq(session_id)
        .await
        .map_err(RestoreError::Replay)?;
    if state == SessionState::Live {
        // The log holds the end marker but the journal's bookkeeping says live: damage
        // (a lost or altered session row), never a clean live session with nothing
        // pending.
        return Err(RestoreError::Replay(JournalError::Corrupt {
            session: session_id,
            seq: last_seq,
            source: notify_journal::Corruption::Inconsistent(
                "the end marker is journaled but the session is not ended".to_owned(),
            ),
        }));
    }
    tracing::info!(last_seq, ?state, "restored an ended session");
    Ok(RestoreReport {
        last_seq,
        state,
        ..RestoreReport::default()
    })
}

/// Frames read per page by [`restore`].
const RESTORE_PAGE: usize = 1024;

/// What restore keeps while it reads a log: only what can still matter at its end.
#[derive(Default)]
struct Reduction {
    /// Commands not (yet) consumed, by seq, so the report keeps journal order.
    pending: BTreeMap<u64, ProcessNotification>,
    /// The seq of each pending command.
    pending_seq: HashMap<CommandId, u64>,
    /// Consumptions read before their command (never in a log the session wrote; kept
    /// so any order gives the same report).
    consumed_ahead: HashSet<CommandId>,
    /// The last lifecycle event of each process that may still be an orphan: its last
    /// event is non-terminal and no completion was journaled after it.
    alive: HashMap<Incarnation, (u64, ProcessLifecycleMetadata)>,
    /// The process most recently seen under each (loop, handle), while it is in
    /// `alive`: a completion command is charged to it.
    current: HashMap<(LoopId, String), Incarnation>,
    last_seq: u64,
    /// The session's end marker was read.
    ended: bool,
}

impl Reduction {
    fn apply(&mut self, seq: u64, record: JournalRecord) {
        self.last_seq = seq;
        match record {
            JournalRecord::Command(c) => {
                let n = c.notification();
                // Restore's own lost-on-restore completion does not end the process:
                // until `ProcessLost` is journaled too, it stays an orphan and
                // declaring it lost again completes the pair. Any other completion
                // ends the process current under its handle (a supervisor journals the
                // completion before `ProcessCompleted`; a crash between the two leaves
                // the completion pending, not an orphan).
                if n.state != ProcessLifecycleState::LostOnRestore
                    && let Some(process) =
                        self.current.remove(&(n.loop_id, n.process_handle.clone()))
                {
                    self.alive.remove(&process);
                }
                let id = c.command_id();
                if !self.consumed_ahead.remove(&id) {
                    self.pending_seq.insert(id, seq);
                    self.pending.insert(seq, c);
                }
            }
            JournalRecord::Event(SessionEvent::SessionEnded(_)) => self.ended = true,
            JournalRecord::Event(SessionEvent::NotificationAbandoned(a)) => {
                self.settle(a.cause());
            }
            JournalRecord::Event(SessionEvent::NotificationConsumed(c)) => self.settle(c.cause()),
            JournalRecord::Event(SessionEvent::Lifecycle(m)) => {
                // An event after a completion is the process's last word again.
                let process = Incarnation::of(&m);
                let key = (m.loop_id, m.process_handle.clone());
                if m.is_terminal() {
                    // It is now the process current under its handle, and ended: a
                    // later completion for the handle ends nothing.
                    self.alive.remove(&process);
                    self.current.remove(&key);
                } else {
                    self.current.insert(key, process.clone());
                    self.alive.insert(process, (seq, m));
                }
            }
        }
    }

    /// A notification consumed or abandoned: no longer pending.
    fn settle(&mut self, cause: CommandId) {
        match self.pending_seq.remove(&cause) {
            Some(seq) => {
                self.pending.remove(&seq);
            }
            None => {
                self.consumed_ahead.insert(cause);
            }
        }
    }

    fn finish(self) -> RestoreReport {
        let mut pending: BTreeMap<LoopId, Vec<ProcessNotification>> = BTreeMap::new();
        for c in self.pending.into_values() {
            pending.entry(c.loop_id()).or_default().push(c);
        }
        let mut orphans: Vec<(u64, ProcessLifecycleMetadata)> = self.alive.into_values().collect();
        orphans.sort_by_key(|(seq, _)| *seq);
        RestoreReport {
            pending,
            orphans: orphans.into_iter().map(|(_, m)| m).collect(),
            last_seq: self.last_seq,
            state: SessionState::Live,
        }
    }
}

/// The `ProcessCompleted` event that goes with a completion notification, read back
/// from the journal: it carries what the completion does not, above all the **exit
/// code** (a completion of `false`, exit 1, is `Exited/Exited` like a success).
///
/// The completion and the event share the session, the loop and the process handle;
/// the [`Supervisor`](crate::Supervisor) journals the completion first and
/// `ProcessCompleted` right after it. So this returns the first `ProcessCompleted` of
/// the same loop and handle journaled after the completion's frame, and `None` if
/// there is none before the next completion of that handle (the process's runner
/// crashed in between, or someone else published the completion), or if the
/// completion is not journaled at all.
///
/// This reads the session's journal page by page until it finds the event: fine for a
/// consumer that looks up one exit code now and then. A consumer that wants every exit code as it happens should
/// [`subscribe`](Session::subscribe) and match `ProcessCompleted` events by loop and
/// handle instead.
///
/// ```
/// # use notify_session::prelude::*;
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let dir = tempfile::tempdir()?;
/// # let journal = RedbJournal::open(dir.path().join("notify.redb"), RedbOptions::default())?;
/// # let session = Session::new(SessionId::new(), journal.clone());
/// # let loop_id = LoopId::new();
/// # let mut inbox = session.register_loop(LoopConfig::new(session.id(), loop_id))?;
/// Supervisor::new(session.clone(), loop_id)
///     .spawn(ProcessSpec::new("false", "sh").arg("-c").arg("exit 1"))?
///     .wait()
///     .await;
/// let received = inbox.recv().await.ok_or("loop exited")?;
/// let n = received.completion();
/// assert_eq!((n.state, n.reason), (ProcessLifecycleState::Exited, ProcessTerminalReason::Exited));
/// let event = completed_event(&journal, n).await?.ok_or("no ProcessCompleted")?;
/// assert_eq!(event.exit_code, Some(1));
/// received.ack().await?;
/// # Ok(())
/// # }
/// ```
///
/// # Errors
///
/// [`RestoreError::Replay`] if the journal cannot be read or a frame does not decode.
pub async fn completed_event(
    journal: &dyn JournalRead,
    notification: &ProcessCompletionNotification,
) -> Result<Option<ProcessLifecycleMetadata>, RestoreError> {
    let session = notification.session_id;
    let same_process = |loop_id: LoopId, handle: &str| {
        loop_id == notification.loop_id && handle == notification.process_handle
    };
    let mut after_completion = false;
    let mut from = 1;
    loop {
        let page = replay_page(journal, session, from, RESTORE_PAGE)
            .await
            .map_err(RestoreError::Replay)?;
        let n = page.len();
        for (seq, record) in page {
            from = seq.saturating_add(1);
            match record {
                JournalRecord::Command(c) if c.command_id() == notification.command_id => {
                    after_completion = true;
                }
                JournalRecord::Command(c)
                    if after_completion
                        && same_process(
                            c.notification().loop_id,
                            &c.notification().process_handle,
                        ) =>
                {
                    return Ok(None);
                }
                JournalRecord::Event(SessionEvent::Lifecycle(m))
                    if after_completion
                        && m.kind == ProcessLifecycleKind::Completed
                        && same_process(m.loop_id, &m.process_handle) =>
                {
                    return Ok(Some(m));
                }
                _ => {}
            }
        }
        if n < RESTORE_PAGE {
            return Ok(None);
        }
    }
}

/// What declaring one orphan lost did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LostOutcome {
    /// The `LostOnRestore` completion's delivery: `Ok` (accepted or duplicate), or the
    /// `DeliveryStopped` error of a loop that is full or gone (the frame is journaled
    /// and a later restore redelivers it).
    pub completion: Result<Notified, StoppedDelivery>,
    /// The `ProcessLost` event.
    pub event: Published,
}

/// A `DeliveryStopped` answer to a journaled lost-on-restore completion.
///
/// The frame is journaled, so a later restore redelivers it; converting it
/// `into` a [`NotifyError`] gives the `DeliveryStopped` error it stands for.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("delivery to loop {loop_id} stopped: {cause}")]
pub struct StoppedDelivery {
    /// The loop.
    pub loop_id: LoopId,
    /// Why delivery stopped.
    pub cause: notify_types::StopCause,
}

impl From<StoppedDelivery> for NotifyError {
    fn from(s: StoppedDelivery) -> Self {
        Self::DeliveryStopped {
            loop_id: s.loop_id,
            cause: s.cause,
        }
    }
}

/// The diagnostic written on every `ProcessLost` event.
const LOST_DIAGNOSTIC: &str = "process runner did not survive a restart";

impl Session {
    /// Declares an orphaned process (from [`RestoreReport::orphans`]) lost: journals
    /// and dispatches a `LostOnRestore` completion to its loop, then publishes
    /// `ProcessLost`.
    ///
    /// Both records have IDs derived from the session, the handle and the rest of the
    /// process's identity ([`lost_command_id`]), and their contents
    /// are derived from `orphan` alone (the finish time is the last time the journal
    /// knew the process alive), so doing it twice — say, after another crash during
    /// restore — deduplicates. The completion goes first: if a crash falls between
    /// the two, the process is still an orphan on the next restore and is declared
    /// again, rather than marked lost with its notification missing.
    ///
    /// Register the restored loops before calling this.
    ///
    /// # Errors
    ///
    /// [`DeclareLostError`] if either record could not be journaled.
    pub async fn declare_lost(
        &self,
        orphan: &ProcessLifecycleMetadata,
    ) -> Result<LostOutcome, DeclareLostError> {
        let session = self.id();
        let notification = ProcessCompletionNotification {
            command_id: lost_command_id(orphan),
            session_id: session,
            loop_id: orphan.loop_id,
            process_handle: orphan.process_handle.clone(),
            state: ProcessLifecycleState::LostOnRestore,
            reason: ProcessTerminalReason::LostOnRestore,
        };
        let completion = match self.notify_process_completion(notification).await {
            Ok(d) => Ok(d),
            Err(NotifyError::DeliveryStopped { loop_id, cause }) => {
                Err(StoppedDelivery { loop_id, cause })
            }
            Err(e) => return Err(DeclareLostError::Notify(e)),
        };
        let last_alive = orphan
            .process_started_at
            .unwrap_or(orphan.process_created_at);
        let lost = ProcessLifecycleMetadata {
            event_id: lost_event_id(orphan),
            kind: ProcessLifecycleKind::Lost,
            state: ProcessLifecycleState::LostOnRestore,
            process_finished_at: Some(last_alive),
            exit_code: None,
            reason: Some(ProcessTerminalReason::LostOnRestore),
            diagnostic: Some(LOST_DIAGNOSTIC.to_owned()),
            ..orphan.clone()
        };
        let event = self
            .publish_lifecycle(lost)
            .await
            .map_err(DeclareLostError::Publish)?;
        if matches!(event, Published::New { .. }) {
            crate::metrics::declared_lost();
        }
        Ok(LostOutcome { completion, event })
    }
}
