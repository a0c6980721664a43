//! The consumer side of a native loop, seen through the session: acknowledging
//! journals the consumption before the loop releases the notification.

use std::fmt;
use std::sync::Arc;

use notify_loop::{LoopConsumer, Received};
use notify_types::{CommandId, LoopId, NotificationConsumed, ProcessNotification, SessionEvent};

use tracing::Instrument as _;

use crate::error::{AckError, PublishError};
use crate::shared::{Published, Shared};

/// Receives a native loop's notifications in acceptance order (restore-seeded ones
/// first). Returned by [`Session::register_loop`](crate::Session::register_loop).
pub struct SessionConsumer {
    pub(crate) session: Arc<Shared>,
    pub(crate) loop_id: LoopId,
    pub(crate) consumer: LoopConsumer,
}

impl fmt::Debug for SessionConsumer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SessionConsumer")
            .field("session", &self.session.id)
            .field("loop_id", &self.loop_id)
            .finish_non_exhaustive()
    }
}

impl SessionConsumer {
    pub(crate) fn new(session: Arc<Shared>, loop_id: LoopId, consumer: LoopConsumer) -> Self {
        Self {
            session,
            loop_id,
            consumer,
        }
    }

    /// The loop this consumer drains.
    #[must_use]
    pub fn loop_id(&self) -> LoopId {
        self.loop_id
    }

    /// The next live notification, or `None` once the loop has exited and nothing is
    /// left, or once the session has [ended](crate::Session::end) (what was still live then
    /// is consumed or abandoned on the record, and never delivered), or once an end
    /// began abandoning, even one that then failed (see
    /// [`Session::end`](crate::Session::end)), or once a host runtime serving the
    /// session stopped serving it here or its lease is past its deadline (another
    /// host may be redelivering it: nothing is handed out here any more).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a notification is either returned or stays queued.
    pub async fn recv(&mut self) -> Option<SessionReceived> {
        if !self.session.delivers() {
            return None;
        }
        let received = self.consumer.recv().await?;
        if !self.session.delivers() {
            return None;
        }
        Some(SessionReceived {
            session: self.session.clone(),
            loop_id: self.loop_id,
            received,
        })
    }
}

/// A notification handed to the consumer. Act on it, then [`ack`](Self::ack) it, or
/// act and acknowledge in one transaction (effectively once): [`ack_with`](Self::ack_with)
/// on redb, `ack_in_pg` / `pg_ack_statement` on PostgreSQL (feature `postgres`).
/// Dropping it without acknowledging hands it to the consumer again (at the front).
#[must_use = "a notification that is not acknowledged is delivered again"]
pub struct SessionReceived {
    pub(crate) session: Arc<Shared>,
    pub(crate) loop_id: LoopId,
    pub(crate) received: Received,
}

impl fmt::Debug for SessionReceived {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SessionReceived")
            .field("loop_id", &self.loop_id)
            .field("notification", self.received.notification())
            .finish()
    }
}

impl SessionReceived {
    /// The notification.
    #[must_use]
    pub fn notification(&self) -> &ProcessNotification {
        self.received.notification()
    }

    /// The notification (the name from before it was renamed).
    #[deprecated(note = "renamed to `notification()`: it returns the notification")]
    #[must_use]
    pub fn command(&self) -> &ProcessNotification {
        self.received.notification()
    }

    /// Its command ID.
    #[must_use]
    pub fn command_id(&self) -> CommandId {
        self.received.command_id()
    }

    /// Acknowledges the notification: journals `NotificationConsumed` (so restore
    /// never redelivers it), broadcasts that event, then releases it in the loop
    /// (freeing capacity). Acknowledging is idempotent in the journal: the event's ID
    /// is derived from the command ID.
    ///
    /// # Errors
    ///
    /// [`AckError::Journal`] if the consumption could not be journaled: the
    /// notification is not released and is handed to the consumer again.
    /// [`AckError::SessionEnded`] once the session has ended, unless its consumption
    /// was journaled before the end: then the acknowledgement is done (`Ok`; the
    /// ended session's loop has nothing left to release).
    ///
    /// # Cancel safety
    ///
    /// If cancelled before the loop releases it, the notification is handed to the
    /// consumer again; acknowledging it again is safe and journals one consumption.
    /// If the cancelled call had already journaled the consumption, the second call
    /// finds it journaled and does not broadcast `NotificationConsumed` again (as for
    /// any duplicate event).
    pub async fn ack(self) -> Result<(), AckError> {
        let span = self.ack_span();
        traced_ack(span, self.ack_plain(), |answer| {
            ack_outcome(answer.as_ref().err())
        })
        .await
    }

    /// The `notify.ack` span (info) of an acknowledgement, in the caller's task under
    /// its span: `session`, `loop_id`, `command_id`, and `outcome` once answered.
    pub(crate) fn ack_span(&self) -> tracing::Span {
        tracing::info_span!(
            "notify.ack",
            session = %self.session.id,
            loop_id = %self.loop_id,
            command_id = %self.command_id(),
            outcome = tracing::field::Empty,
        )
    }

    async fn ack_plain(self) -> Result<(), AckError> {
        let consumed = NotificationConsumed::new(self.session.id, self.loop_id, self.command_id());
        let duplicate = match self
            .session
            .journal_and_broadcast(SessionEvent::NotificationConsumed(consumed))
            .await
        {
            Ok(Published::New { .. }) => {
                crate::metrics::consumed();
                false
            }
            Ok(Published::Duplicate { .. }) => true,
            Err(PublishError::Journal(e)) => return Err(AckError::Journal(e)),
            Err(PublishError::SessionEnded { session_id, .. }) => {
                return Err(AckError::SessionEnded { session_id });
            }
            Err(PublishError::NotOwner { session_id, owner }) => {
                return Err(AckError::NotOwner { session_id, owner });
            }
            Err(PublishError::Collision { event_id, seq }) => {
                return Err(AckError::Journal(notify_journal::AppendError::Collision {
                    key: *event_id.as_uuid(),
                    seq,
                }));
            }
            // Consumption events are built here and always valid and owned.
            Err(other) => {
                return Err(AckError::Journal(notify_journal::AppendError::Storage(
                    notify_journal::StorageError::new("consumption event refused", other),
                )));
            }
        };
        self.release(duplicate).await
    }

    /// `Err(`[`AckError::NotOwner`]`)` once the session's host runtime stopped serving
    /// it here (lease lost, released, host shut down): nothing may be journaled for
    /// it any more, unless the session has ended (then the ended path answers). The
    /// check every acknowledgement makes before it writes (the plain
    /// [`ack`](Self::ack) through the session's publish path, the transactional ones
    /// directly); under the end gate's read guard it also orders after the host's stop.
    pub(crate) fn check_served(&self) -> Result<(), AckError> {
        match self.session.refused_by_host() {
            Some(owner) => Err(AckError::NotOwner {
                session_id: self.session.id,
                owner,
            }),
            None => Ok(()),
        }
    }

    /// Releases the notification in the loop once its consumption is journaled
    /// (`duplicate`: journaled earlier).
    pub(crate) async fn release(self, duplicate: bool) -> Result<(), AckError> {
        self.release_now(duplicate)
    }

    /// [`release`](Self::release) at once, with no point where it could be cancelled
    /// (a batch releases all of its notifications in one go).
    pub(crate) fn release_now(self, duplicate: bool) -> Result<(), AckError> {
        let released = self.received.release();
        if duplicate && self.session.is_ended() {
            // Journaled before the end; the end shut the loop down.
            return Ok(());
        }
        released.map_err(AckError::LoopExited)
    }
}

/// Runs an acknowledgement inside its `notify.ack` span and records its `outcome`.
pub(crate) async fn traced_ack<T, E>(
    span: tracing::Span,
    work: impl Future<Output = Result<T, E>>,
    outcome: impl FnOnce(&Result<T, E>) -> &'static str,
) -> Result<T, E> {
    let answer = work.instrument(span.clone()).await;
    span.record("outcome", outcome(&answer));
    answer
}

/// The `outcome` of an acknowledgement's `notify.ack` span, from its error (`None`:
/// acknowledged).
pub(crate) fn ack_outcome(error: Option<&AckError>) -> &'static str {
    match error {
        None => "acknowledged",
        Some(AckError::SessionEnded { .. }) => "ended",
        Some(AckError::NotOwner { .. }) => "not_owner",
        Some(AckError::LoopExited(_)) => "loop_exited",
        Some(_) => "failed",
    }
}

/// What a refused consumption means to the consumer, as [`SessionReceived::ack`]
/// answers it: the one mapping of every acknowledgement path (plain, transactional,
/// batch, both engines). The refusal of a group is that of its refusing record
/// ([`AppendError::refusal`](notify_journal::AppendError::refusal)): the session's end
/// is [`AckError::SessionEnded`], a fenced append of a hosted session
/// [`AckError::NotOwner`], anything else [`AckError::Journal`] with the error whole.
pub(crate) fn ack_error(session: &Shared, e: notify_journal::AppendError) -> AckError {
    use notify_journal::AppendError;
    match (e.refusal(), session.not_owner()) {
        (AppendError::SessionEnded { .. }, _) => AckError::SessionEnded {
            session_id: session.id,
        },
        (AppendError::Fenced { .. }, Some(owner)) => AckError::NotOwner {
            session_id: session.id,
            owner,
        },
        _ => AckError::Journal(e),
    }
}
