//! The loop's answer to one delivery, shared by the handle and the inbox's decision.

use notify_types::{Disposition, StopCause};

/// The loop's answer to one delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub enum Delivery {
    /// The notification joined the live set and the consumer queue.
    Accepted,
    /// The command ID is already live, or remembered as consumed; nothing changed.
    Duplicate,
    /// The loop did not take the notification: it is full ([`StopCause::Full`], retry
    /// later with the same ID), gone ([`StopCause::Exited`]) or refused it as invalid
    /// or misaddressed ([`StopCause::Refused`], never retry).
    Stopped(StopCause),
}

impl Delivery {
    /// The wire disposition: `Accepted`, `Duplicate` or `Stopped`.
    #[must_use]
    pub fn disposition(self) -> Disposition {
        match self {
            Self::Accepted => Disposition::Accepted,
            Self::Duplicate => Disposition::Duplicate,
            Self::Stopped(_) => Disposition::Stopped,
        }
    }
}
