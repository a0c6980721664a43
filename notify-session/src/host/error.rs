//! Why a host could not open, release or shut down a session.

use std::sync::Arc;
use std::time::Duration;

use notify_journal::LeaseError;
use notify_types::{SessionId, Uuid};

use crate::error::RestoreError;

/// Why a [`SessionHost`](crate::SessionHost) operation failed.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum HostError {
    /// Another host holds a live lease on the session: open it there, or again once
    /// `expires_in` has passed (if that host is gone, some host adopts it by then).
    #[error("session {session} is held by another host{}", match expires_in { Some(d) => format!(" for {d:?} more"), None => String::new() })]
    Held {
        /// The session.
        session: SessionId,
        /// The holder's identity, when the engine could read it.
        holder: Option<Uuid>,
        /// How long the holder's lease has left, when known.
        expires_in: Option<Duration>,
    },
    /// The host already serves as many sessions as its capacity allows.
    #[error("the host is at its capacity of {capacity} sessions")]
    AtCapacity {
        /// The configured capacity.
        capacity: usize,
    },
    /// The host is opening this session already (an adoption, or another call), or
    /// is still stopping its last placement here: retry, and
    /// [`SessionHost::session`](crate::SessionHost::session) has it once it is open.
    #[error("session {session} is being opened on this host")]
    Opening {
        /// The session.
        session: SessionId,
    },
    /// The session has ended (or was purged): there is nothing to serve. Its lease
    /// was released again.
    #[error("session {session} has ended{}", if *purged { " and was purged" } else { "" })]
    Ended {
        /// The session.
        session: SessionId,
        /// Whether its log was purged.
        purged: bool,
    },
    /// The lease was lost while the session was being opened (a renewal found it
    /// taken over or expired): it is not served here.
    #[error("the lease on session {session} was lost while opening it")]
    Lost {
        /// The session.
        session: SessionId,
    },
    /// The session is not served by this host.
    #[error("session {session} is not served by this host")]
    NotServed {
        /// The session.
        session: SessionId,
    },
    /// A lease operation failed (storage, a closed journal, a newer schema).
    #[error("lease operation failed")]
    Lease(#[source] LeaseError),
    /// Restoring the session failed; its lease was released again.
    #[error("restoring session {session} failed")]
    Restore {
        /// The session.
        session: SessionId,
        /// Why.
        #[source]
        source: RestoreError,
    },
    /// The application's [`HostApp::started`](crate::HostApp::started) failed; the
    /// session's loops were shut and its lease released again.
    #[error("the application failed to start session {session}")]
    Start {
        /// The session.
        session: SessionId,
        /// The application's error.
        #[source]
        source: Arc<dyn std::error::Error + Send + Sync + 'static>,
    },
    /// The host has been shut down.
    #[error("the host has been shut down")]
    ShutDown,
    /// The host's settings are inconsistent ([`HostBuilder::start`](crate::HostBuilder::start)).
    #[error("invalid host settings: {reason}")]
    Options {
        /// What is wrong.
        reason: &'static str,
    },
}

impl HostError {
    /// The typed error for a lease refusal of `session`.
    pub(crate) fn from_lease(session: SessionId, e: LeaseError) -> Self {
        match e {
            LeaseError::Held {
                holder, expires_in, ..
            } => Self::Held {
                session,
                holder,
                expires_in,
            },
            LeaseError::Lost { session } => Self::Lost { session },
            other => Self::Lease(other),
        }
    }
}
