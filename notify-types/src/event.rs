//! Journaled session events and the deterministic IDs derived for them.

use uuid::Uuid;

use crate::id::{CommandId, EventId, LoopId, SessionId};
use crate::lifecycle::ProcessLifecycleMetadata;
use crate::state::ProcessLifecycleKind;

/// The namespace of every UUIDv5 this crate derives. Changing it changes the journal
/// format: derived IDs must stay stable across releases.
const DERIVED_NAMESPACE: Uuid = Uuid::from_u128(0x6e6f_7469_6679_4a00_8000_0000_0000_0001);

fn derive(tag: &str, parts: &[&[u8]]) -> Uuid {
    let mut name = Vec::with_capacity(64);
    name.extend_from_slice(tag.as_bytes());
    for part in parts {
        name.push(0);
        name.extend_from_slice(part);
    }
    Uuid::new_v5(&DERIVED_NAMESPACE, &name)
}

/// The event ID of the [`NotificationConsumed`] event for `cause`.
///
/// Derived (UUIDv5), so acknowledging twice writes the same key and deduplicates, and
/// "was this command consumed?" is a single index lookup.
#[must_use]
pub fn consumed_event_id(cause: CommandId) -> EventId {
    EventId::from_uuid(derive("consumed", &[cause.as_uuid().as_bytes()]))
}

/// The event ID of the [`NotificationAbandoned`] event for `cause`: derived (UUIDv5),
/// like [`consumed_event_id`] but distinct from it.
#[must_use]
pub fn abandoned_event_id(cause: CommandId) -> EventId {
    EventId::from_uuid(derive("abandoned", &[cause.as_uuid().as_bytes()]))
}

/// The event ID of a session's [`SessionEnded`] marker: derived (UUIDv5) from the
/// session, so a session has exactly one end marker and ending twice deduplicates.
#[must_use]
pub fn ended_event_id(session: SessionId) -> EventId {
    EventId::from_uuid(derive("session-ended", &[session.as_uuid().as_bytes()]))
}

/// Derives a lost-on-restore ID from the orphaned process's incarnation, as its last
/// lifecycle event identifies it: session, loop, handle, origin execution and creation
/// time. A handle reused later, or by another loop, names another incarnation and gets
/// other IDs; declaring the same orphan twice gets the same ones.
fn derive_lost(tag: &str, orphan: &ProcessLifecycleMetadata) -> Uuid {
    let created = orphan.process_created_at.as_nanosecond().to_be_bytes();
    derive(
        tag,
        &[
            orphan.session_id.as_uuid().as_bytes(),
            orphan.loop_id.as_uuid().as_bytes(),
            orphan.process_handle.as_bytes(),
            orphan.origin_execution_id.as_uuid().as_bytes(),
            &created,
        ],
    )
}

/// The command ID of the `LostOnRestore` completion restore publishes for an orphaned
/// process, given the process's last lifecycle event. Derived (UUIDv5) from the
/// session, the handle and the rest of the process's identity, so a repeated restore
/// deduplicates.
#[must_use]
pub fn lost_command_id(orphan: &ProcessLifecycleMetadata) -> CommandId {
    CommandId::from_uuid(derive_lost("lost-command", orphan))
}

/// The event ID of the `ProcessLost` event restore publishes for an orphaned process,
/// given the process's last lifecycle event (see [`lost_command_id`]).
#[must_use]
pub fn lost_event_id(orphan: &ProcessLifecycleMetadata) -> EventId {
    EventId::from_uuid(derive_lost("lost-event", orphan))
}

/// Defines an event about one notification (`cause`) of a loop, whose event ID is
/// derived from the cause: a consumption or an abandonment.
macro_rules! cause_event {
    ($(#[$doc:meta])* $name:ident, $ty:literal, $derive_id:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub struct $name {
            event_id: EventId,
            session_id: SessionId,
            loop_id: LoopId,
            cause: CommandId,
        }

        impl $name {
            /// The wire `type` of this event.
            pub const TYPE: &'static str = $ty;

            /// The event for `cause`, a notification of `loop_id` in `session_id`.
            #[must_use]
            pub fn new(session_id: SessionId, loop_id: LoopId, cause: CommandId) -> Self {
                Self {
                    event_id: $derive_id(cause),
                    session_id,
                    loop_id,
                    cause,
                }
            }

            /// The derived event ID.
            #[must_use]
            pub fn event_id(&self) -> EventId {
                self.event_id
            }

            /// The session.
            #[must_use]
            pub fn session_id(&self) -> SessionId {
                self.session_id
            }

            /// The loop the notification was addressed to.
            #[must_use]
            pub fn loop_id(&self) -> LoopId {
                self.loop_id
            }

            /// The notification's command ID.
            #[must_use]
            pub fn cause(&self) -> CommandId {
                self.cause
            }
        }
    };
}

cause_event!(
    /// A loop's consumer acknowledged the notification `cause`: it will not be redelivered.
    ///
    /// Its event ID is always [`consumed_event_id`]`(cause)`; the constructor derives it
    /// and the decoder refuses any other.
    NotificationConsumed,
    "NotificationConsumed",
    consumed_event_id
);

cause_event!(
    /// The notification `cause` was appended and never consumed when its session ended,
    /// and the caller chose to abandon it: it will never be delivered. Journaled before
    /// the session's [`SessionEnded`] marker, so nothing pending disappears unrecorded.
    ///
    /// Its event ID is always [`abandoned_event_id`]`(cause)`.
    NotificationAbandoned,
    "NotificationAbandoned",
    abandoned_event_id
);

/// A session's end marker. After it, the journal refuses every append to the session
/// (except this marker again, a duplicate), and restore reports the session ended.
///
/// It carries no time (the journal records when the end committed, for retention), so
/// ending again writes the same bytes and deduplicates. Its event ID is always
/// [`ended_event_id`]`(session)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SessionEnded {
    event_id: EventId,
    session_id: SessionId,
}

impl SessionEnded {
    /// The wire `type` of this event.
    pub const TYPE: &'static str = "SessionEnded";

    /// The end marker of `session_id`.
    #[must_use]
    pub fn new(session_id: SessionId) -> Self {
        Self {
            event_id: ended_event_id(session_id),
            session_id,
        }
    }

    /// The derived event ID.
    #[must_use]
    pub fn event_id(&self) -> EventId {
        self.event_id
    }

    /// The ended session.
    #[must_use]
    pub fn session_id(&self) -> SessionId {
        self.session_id
    }
}

/// The sealed set of journaled session events.
///
/// A lifecycle event's wire `type` follows its metadata's kind (`ProcessStarted`,
/// `ProcessBackgrounded`, `ProcessCompleted`, `ProcessStopRequested`, `ProcessLost`), so
/// the two can never disagree.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum SessionEvent {
    /// One of the five process lifecycle events, carrying its metadata verbatim.
    Lifecycle(ProcessLifecycleMetadata),
    /// A notification was acknowledged by its loop's consumer.
    NotificationConsumed(NotificationConsumed),
    /// A pending notification was abandoned when its session ended.
    NotificationAbandoned(NotificationAbandoned),
    /// The session ended: its last frame.
    SessionEnded(SessionEnded),
}

impl SessionEvent {
    /// The event's ID: its idempotency key in the journal.
    #[must_use]
    pub fn event_id(&self) -> EventId {
        match self {
            Self::Lifecycle(m) => m.event_id,
            Self::NotificationConsumed(c) => c.event_id,
            Self::NotificationAbandoned(a) => a.event_id,
            Self::SessionEnded(e) => e.event_id,
        }
    }

    /// The owning session.
    #[must_use]
    pub fn session_id(&self) -> SessionId {
        match self {
            Self::Lifecycle(m) => m.session_id,
            Self::NotificationConsumed(c) => c.session_id,
            Self::NotificationAbandoned(a) => a.session_id,
            Self::SessionEnded(e) => e.session_id,
        }
    }

    /// The owning loop ([`LoopId::NIL`] for [`SessionEnded`], which belongs to no loop).
    #[must_use]
    pub fn loop_id(&self) -> LoopId {
        match self {
            Self::Lifecycle(m) => m.loop_id,
            Self::NotificationConsumed(c) => c.loop_id,
            Self::NotificationAbandoned(a) => a.loop_id,
            Self::SessionEnded(_) => LoopId::NIL,
        }
    }

    /// The wire `type`.
    #[must_use]
    pub fn type_name(&self) -> &'static str {
        match self {
            Self::Lifecycle(m) => m.kind.event_type(),
            Self::NotificationConsumed(_) => NotificationConsumed::TYPE,
            Self::NotificationAbandoned(_) => NotificationAbandoned::TYPE,
            Self::SessionEnded(_) => SessionEnded::TYPE,
        }
    }

    /// The lifecycle kind, for a lifecycle event.
    #[must_use]
    pub fn lifecycle_kind(&self) -> Option<ProcessLifecycleKind> {
        match self {
            Self::Lifecycle(m) => Some(m.kind),
            Self::NotificationConsumed(_)
            | Self::NotificationAbandoned(_)
            | Self::SessionEnded(_) => None,
        }
    }
}

impl From<ProcessLifecycleMetadata> for SessionEvent {
    fn from(m: ProcessLifecycleMetadata) -> Self {
        Self::Lifecycle(m)
    }
}

impl From<NotificationConsumed> for SessionEvent {
    fn from(c: NotificationConsumed) -> Self {
        Self::NotificationConsumed(c)
    }
}

impl From<NotificationAbandoned> for SessionEvent {
    fn from(a: NotificationAbandoned) -> Self {
        Self::NotificationAbandoned(a)
    }
}

impl From<SessionEnded> for SessionEvent {
    fn from(e: SessionEnded) -> Self {
        Self::SessionEnded(e)
    }
}
