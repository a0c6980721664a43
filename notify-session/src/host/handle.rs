//! [`SessionHost`]: the handle an application holds to open, find, release and
//! watch the sessions a host serves, and to shut it down.

use std::fmt;
use std::sync::Arc;

use notify_journal::JournalLeases;
use notify_types::{SessionId, Uuid};

use super::app::StopReason;
use super::error::HostError;
use super::inner::Inner;
use super::open::open_session;
use super::shutdown::shut_down;
use super::status::{HostStatus, snapshot};
use super::stop::stop_session;
use crate::session::Session;

/// A host runtime: places, keeps, moves and retires sessions on this process.
///
/// Built with [`SessionHost::builder`]. It opens sessions in one call
/// ([`open`](Self::open): lease, restore, [`HostApp::started`](crate::HostApp::started)),
/// renews all their leases with one statement per interval, stops a session at once
/// when its lease is lost or past its deadline, adopts orphaned sessions up to its
/// capacity, hands sessions off gracefully ([`release`](Self::release),
/// [`shutdown`](Self::shutdown)) and runs retention in the background. Every
/// [`Session`] it hands out appends through the fence of its placement: only while
/// this host holds the session's lease under that very open (a handle kept from
/// before a release and a new open writes nothing).
///
/// Cloning is cheap; clones share the host. Dropping every handle without
/// [`shutdown`](Self::shutdown) ends its background tasks but releases nothing: the
/// leases then expire, and other hosts adopt the sessions after that.
pub struct SessionHost<J: JournalLeases + 'static> {
    pub(crate) inner: Arc<Inner<J>>,
}

impl<J: JournalLeases + 'static> Clone for SessionHost<J> {
    fn clone(&self) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<J: JournalLeases + 'static> fmt::Debug for SessionHost<J> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SessionHost")
            .field("holder", &self.inner.journal.holder_id())
            .field("sessions", &self.inner.table.len())
            .field("capacity", &self.inner.options.capacity)
            .finish_non_exhaustive()
    }
}

impl<J: JournalLeases + 'static> SessionHost<J> {
    /// Opens `session` on this host: takes its lease, restores it and hands the
    /// [`RestoreReport`](crate::RestoreReport) to the application's
    /// [`HostApp::started`](crate::HostApp::started), which registers and seeds its
    /// loops. A session this host serves already is answered as is.
    ///
    /// # Errors
    ///
    /// [`HostError::Held`] naming the holder and its time left if another host holds
    /// the lease; [`HostError::AtCapacity`], [`HostError::Opening`],
    /// [`HostError::Ended`], [`HostError::Restore`], [`HostError::Start`],
    /// [`HostError::Lost`], [`HostError::Lease`] or [`HostError::ShutDown`]. On every
    /// error after the lease was taken, it is released again.
    ///
    /// # Cancel safety
    ///
    /// If dropped, the session is not served here: a lease taken meanwhile is
    /// released by the next renewal; opening again is safe. (Dropped while the
    /// application's `started` runs, loops it registered are not shut.)
    pub async fn open(&self, session: SessionId) -> Result<Session, HostError> {
        open_session(&self.inner, session, false).await
    }

    /// The session this host serves under `session`, if it serves it (and has
    /// started it).
    #[must_use]
    pub fn session(&self, session: SessionId) -> Option<Session> {
        self.inner
            .table
            .get(session)
            .filter(|held| held.started)
            .map(|held| held.session)
    }

    /// The sessions this host serves (started), in ID order.
    #[must_use]
    pub fn sessions(&self) -> Vec<SessionId> {
        let mut ids: Vec<SessionId> = self
            .inner
            .table
            .all()
            .into_iter()
            .filter(|(_, held)| held.started)
            .map(|(id, _)| id)
            .collect();
        ids.sort();
        ids
    }

    /// Hands `session` off: stops renewing it, refuses its new notifications
    /// ([`NotOwner`](notify_types::NotifyError::NotOwner)), waits out its appends in
    /// flight, shuts its loops, releases its lease so another host adopts it at once,
    /// and calls [`HostApp::stopped`](crate::HostApp::stopped) with
    /// [`StopReason::Released`]. This host does not adopt it again for a while.
    ///
    /// # Errors
    ///
    /// [`HostError::NotServed`] if this host does not serve it;
    /// [`HostError::Lease`] if releasing the lease failed (the session is stopped here
    /// all the same, and its lease expires).
    ///
    /// # Cancel safety
    ///
    /// The session stops being served here before the first await; if dropped, the
    /// lease may not be released (it expires).
    pub async fn release(&self, session: SessionId) -> Result<(), HostError> {
        match stop_session(&self.inner, session, StopReason::Released).await {
            Ok(true) => Ok(()),
            Ok(false) => Err(HostError::NotServed { session }),
            Err(e) => Err(HostError::Lease(e)),
        }
    }

    /// This host's health: every session it serves with its lease's epoch, the time
    /// since its last renewal and the time left, and its pending count.
    #[must_use]
    pub fn status(&self) -> HostStatus {
        snapshot(
            &self.inner.table,
            self.inner.journal.holder_id(),
            self.inner.options.capacity,
        )
    }

    /// This host's identity as a lease holder (the owner other hosts name in
    /// [`NotOwner`](notify_types::NotifyError::NotOwner) and
    /// [`HostError::Held`]).
    #[must_use]
    pub fn holder_id(&self) -> Uuid {
        self.inner.journal.holder_id()
    }

    /// The journal this host runs on.
    #[must_use]
    pub fn journal(&self) -> &Arc<J> {
        &self.inner.journal
    }

    /// Shuts the host down gracefully: stops adopting and opening, releases every
    /// session as [`release`](Self::release) does (with [`StopReason::ShutDown`];
    /// every one fenced at once, then many stopped at a time) so other hosts adopt
    /// them at once, lets the background work finish the step it is
    /// in (an adoption in flight finds its session stopped, shuts the loops the
    /// application registered and gives up; a stop in flight completes), then stops
    /// renewing. The [shutdown grace](crate::HostBuilder::shutdown_grace) (default
    /// the lease duration) bounds the whole: counted from the call, work still running
    /// past it (an application's `started` that does not return, a stop waiting for
    /// an append in flight or a release waiting for a row an application transaction
    /// holds) is aborted; the leases an aborted task may have left are released, a
    /// stop cut short leaves its lease to expire (the application is told of it all
    /// the same). Shutdown returns within the grace
    /// plus one renewal interval. Every clone of this handle sees the host shut down;
    /// later opens answer [`HostError::ShutDown`]; a shutdown called from another
    /// clone meanwhile returns once this one has finished.
    ///
    /// An open the application called itself ([`open`](Self::open)) is not waited
    /// for: one still in its `started` finds its session stopped when it goes on,
    /// shuts the loops it registered then, and its `stopped(ShutDown)` may come after
    /// shutdown returned.
    ///
    /// # Errors
    ///
    /// The first [`HostError::Lease`] a release answered (every session is stopped
    /// and every release tried all the same).
    ///
    /// # Cancel safety
    ///
    /// If dropped, the host is shut down (nothing more is opened) but some leases may
    /// be left to expire instead of released, and background work may go on until it
    /// sees the shutdown.
    pub async fn shutdown(self) -> Result<(), HostError> {
        shut_down(&self.inner).await.map_err(HostError::Lease)
    }
}
