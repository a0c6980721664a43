//! The journal record: a command or a session event.

use uuid::Uuid;

use crate::event::SessionEvent;
use crate::id::SessionId;
use crate::notification::ProcessNotification;

use super::DecodeError;

/// One journal record: the completion command or a session event.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum JournalRecord {
    /// A completion notification command, keyed by its command ID.
    Command(ProcessNotification),
    /// A session event, keyed by its event ID.
    Event(SessionEvent),
}

impl JournalRecord {
    /// The idempotency key: the command ID or the event ID.
    #[must_use]
    pub fn key(&self) -> Uuid {
        match self {
            Self::Command(c) => *c.command_id().as_uuid(),
            Self::Event(e) => *e.event_id().as_uuid(),
        }
    }

    /// The owning session.
    #[must_use]
    pub fn session_id(&self) -> SessionId {
        match self {
            Self::Command(c) => c.session_id(),
            Self::Event(e) => e.session_id(),
        }
    }

    /// The wire `type`.
    #[must_use]
    pub fn type_name(&self) -> &'static str {
        match self {
            Self::Command(_) => ProcessNotification::TYPE,
            Self::Event(e) => e.type_name(),
        }
    }

    /// Checks that the record would decode: the command's notification or the event's
    /// metadata validates, and a consumption names non-nil IDs. Journals call this
    /// before writing, so that nothing undecodable is ever made durable.
    ///
    /// # Errors
    ///
    /// A [`DecodeError`] naming the first failing field, as decoding would.
    pub fn validate(&self) -> Result<(), DecodeError> {
        match self {
            Self::Command(c) => c.validate().map_err(DecodeError::from),
            Self::Event(SessionEvent::Lifecycle(m)) => m.validate().map_err(DecodeError::from),
            Self::Event(SessionEvent::NotificationConsumed(c)) => nil_check(&[
                (c.cause().is_nil(), "cause"),
                (c.loop_id().is_nil(), "loop_id"),
                (c.session_id().is_nil(), "session_id"),
            ]),
            Self::Event(SessionEvent::NotificationAbandoned(a)) => nil_check(&[
                (a.cause().is_nil(), "cause"),
                (a.loop_id().is_nil(), "loop_id"),
                (a.session_id().is_nil(), "session_id"),
            ]),
            Self::Event(SessionEvent::SessionEnded(e)) => {
                nil_check(&[(e.session_id().is_nil(), "session_id")])
            }
        }
    }
}

/// The first field whose ID is nil, as decoding would report it.
fn nil_check(fields: &[(bool, &'static str)]) -> Result<(), DecodeError> {
    for &(nil, field) in fields {
        if nil {
            return Err(DecodeError::MissingField { field });
        }
    }
    Ok(())
}

impl From<ProcessNotification> for JournalRecord {
    fn from(c: ProcessNotification) -> Self {
        Self::Command(c)
    }
}

impl From<SessionEvent> for JournalRecord {
    fn from(e: SessionEvent) -> Self {
        Self::Event(e)
    }
}
