//! Leases: one host's epoch-fenced claim on a session, as every engine offers it.
//!
//! [`JournalLeases`] is what a host runtime (`notify_session::SessionHost`) needs from
//! a journal to place, keep, move and retire sessions: acquire a session's lease,
//! renew all of this handle's leases at once, release one, learn who holds one, find
//! sessions whose owner is gone, and hear when a lease is given up. PostgreSQL keeps
//! leases in a table of their own (one row per session), judged by the database's
//! clock, so several hosts share sessions; redb's file lock already makes one process the only writer, so
//! there the lease is that process's (see each engine's implementation).
//!
//! **Architecture Invariant:** an append for a session whose lease this handle lost is
//! refused (`AppendError::Fenced`) and writes nothing, until the handle acquires a new
//! lease with a higher epoch; the check runs inside the append's own transaction.

use std::time::Duration;

use notify_types::{SessionId, Uuid};
use tokio::sync::broadcast;

use crate::backend::{BoxFuture, JournalBackend};
use crate::error::StorageError;

/// A lease this journal handle holds on a session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Lease {
    session: SessionId,
    epoch: u64,
}

impl Lease {
    /// A lease on `session` under `epoch` (engines and test doubles build these).
    #[must_use]
    pub fn new(session: SessionId, epoch: u64) -> Self {
        Self { session, epoch }
    }

    /// The leased session.
    #[must_use]
    pub fn session(&self) -> SessionId {
        self.session
    }

    /// The lease's epoch: it grows by one each time the lease changes hands or is
    /// acquired again after expiring or being released.
    #[must_use]
    pub fn epoch(&self) -> u64 {
        self.epoch
    }
}

/// A session's lease as the engine sees it now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LeaseInfo {
    /// The latest epoch handed out (0: never leased).
    pub epoch: u64,
    /// The holder's identity ([`JournalLeases::holder_id`]), if the lease has not
    /// been released (it may have expired).
    pub holder: Option<Uuid>,
    /// Whether the lease is held and unexpired by the engine's clock.
    pub live: bool,
    /// How long the live lease has left by the engine's clock (`None` when not live).
    pub expires_in: Option<Duration>,
}

/// What one renewal of all of a handle's leases found.
///
/// Every lease the handle believed live is in one of the lists: the engines judge
/// each one every round (PostgreSQL's renewal waits for no append, nor for an
/// application's transaction). A session in neither list (an engine that could not
/// judge it this round) has its lease unchanged, and a host keeps its deadline
/// (neither extended nor stopped unless the deadline passes).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Renewal {
    /// The leases extended by the lease duration, each under its unchanged epoch.
    pub renewed: Vec<Lease>,
    /// The sessions whose lease this handle had lost (expired, or taken over) by the
    /// time the renewal ran: appends to them stay fenced.
    pub lost: Vec<SessionId>,
}

/// Why a lease operation failed.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum LeaseError {
    /// Another writer holds a live lease on the session.
    #[error("session {session} is leased by another writer (epoch {epoch})")]
    Held {
        /// The session.
        session: SessionId,
        /// The live lease's epoch.
        epoch: u64,
        /// The holder's identity, when the engine could read it.
        holder: Option<Uuid>,
        /// How long the holder's lease has left by the engine's clock, when known.
        expires_in: Option<Duration>,
    },
    /// This journal's lease on the session expired or was taken over (or it never
    /// held one): acquire a new lease, with a new epoch, before writing again.
    #[error("the lease on session {session} was lost")]
    Lost {
        /// The session.
        session: SessionId,
    },
    /// The journal has been closed.
    #[error("journal is closed")]
    Closed,
    /// A storage failure; the lease's state is unchanged unless the statement
    /// committed before the failure was seen (retrying acquire or renew is safe).
    #[error(transparent)]
    Storage(StorageError),
    /// The journal's schema is newer than this build understands (a newer build
    /// migrated it); the statement was not sent.
    #[error("journal schema version {found} is newer than this build's {supported}")]
    SchemaTooNew {
        /// The version the database records.
        found: u32,
        /// The newest version this build knows.
        supported: u32,
    },
}

/// A journal whose sessions are leased to one holder at a time: what a host runtime
/// needs from an engine.
///
/// Contract (checked for every engine by the testkit's conformance suite):
///
/// * [`acquire_lease`](Self::acquire_lease) takes a free, released or expired lease
///   under a new, higher epoch, extends this handle's own live lease under its epoch,
///   and refuses another holder's live lease with [`LeaseError::Held`];
/// * [`renew_leases`](Self::renew_leases) extends every live lease this handle holds
///   in one round trip, and reports every lease it had lost;
/// * after a lease is lost, appends to that session through this handle are
///   `AppendError::Fenced` until it acquires the lease again;
/// * [`release_lease`](Self::release_lease) frees a live lease so another holder can
///   take it at once, and is announced on [`lease_changes`](Self::lease_changes);
/// * [`orphaned_sessions`](Self::orphaned_sessions) lists sessions that are neither
///   ended nor purged and whose lease is not live.
pub trait JournalLeases: JournalBackend {
    /// This handle's identity as a lease holder: one per open handle (one per host).
    fn holder_id(&self) -> Uuid;

    /// How long a lease lasts without renewal.
    fn lease_duration(&self) -> Duration;

    /// Acquires this handle's lease on `session` for the lease duration.
    ///
    /// # Errors
    ///
    /// [`LeaseError::Held`] (naming the holder and its time left, when known) if
    /// another holder's lease is live; [`LeaseError::Storage`] (retrying is safe),
    /// [`LeaseError::Closed`] or [`LeaseError::SchemaTooNew`].
    ///
    /// # Cancel safety
    ///
    /// If dropped, the lease may have been taken without this handle knowing;
    /// acquiring again returns it.
    fn acquire_lease(&self, session: SessionId) -> BoxFuture<'_, Result<Lease, LeaseError>>;

    /// Renews every lease this handle holds, in one statement (one round trip),
    /// whatever their number.
    ///
    /// # Errors
    ///
    /// [`LeaseError::Storage`] (nothing was renewed unless the statement committed
    /// unseen; retrying is safe), [`LeaseError::Closed`] or
    /// [`LeaseError::SchemaTooNew`]. Lost leases are not an error: they are listed
    /// in [`Renewal::lost`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: each lease is either extended or not.
    fn renew_leases(&self) -> BoxFuture<'_, Result<Renewal, LeaseError>>;

    /// Gives up this handle's live lease on `session`, so another holder may take it
    /// at once; releasing a lease this handle does not hold is not an error.
    ///
    /// # Errors
    ///
    /// [`LeaseError::Lost`] if the lease had already expired or been taken over
    /// (appends stay fenced); [`LeaseError::Storage`], [`LeaseError::Closed`] or
    /// [`LeaseError::SchemaTooNew`].
    ///
    /// # Cancel safety
    ///
    /// If dropped, the lease may or may not be released; it expires anyway.
    fn release_lease(&self, session: SessionId) -> BoxFuture<'_, Result<(), LeaseError>>;

    /// The session's lease as the engine sees it now.
    ///
    /// # Errors
    ///
    /// [`LeaseError::Storage`], [`LeaseError::Closed`] or
    /// [`LeaseError::SchemaTooNew`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe (read only).
    fn lease_info(&self, session: SessionId) -> BoxFuture<'_, Result<LeaseInfo, LeaseError>>;

    /// Up to `limit` sessions whose owner is gone: neither ended nor purged, and
    /// their lease (if they ever had one) is not live. Sessions whose lease ran out
    /// longest ago come first.
    ///
    /// # Errors
    ///
    /// [`LeaseError::Storage`], [`LeaseError::Closed`] or
    /// [`LeaseError::SchemaTooNew`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe (read only).
    fn orphaned_sessions(&self, limit: usize) -> BoxFuture<'_, Result<Vec<SessionId>, LeaseError>>;

    /// Sessions whose lease was released or lost by any holder, as they happen
    /// (PostgreSQL `LISTEN/NOTIFY`), or `None` if the engine cannot announce them
    /// (then adopters find orphans by polling [`orphaned_sessions`](Self::orphaned_sessions)).
    /// A lagging receiver misses announcements, never the orphans themselves.
    fn lease_changes(&self) -> Option<broadcast::Receiver<SessionId>>;
}
