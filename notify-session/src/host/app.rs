//! The application's side of a host: what it does when the host starts serving a
//! session, and hears when the host stops.

use std::error::Error as StdError;
use std::fmt;

use notify_journal::BoxFuture;
use notify_types::{SessionId, Uuid};

use crate::restore::RestoreReport;
use crate::session::Session;

/// An application's failure to start serving a session, as [`HostApp::started`]
/// answers it.
pub type AppError = Box<dyn StdError + Send + Sync + 'static>;

/// Why a host stopped serving a session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum StopReason {
    /// [`SessionHost::release`](crate::SessionHost::release) gave the session up; its
    /// lease is released, so another host may adopt it at once.
    Released,
    /// The host was shut down ([`SessionHost::shutdown`](crate::SessionHost::shutdown));
    /// the lease is released.
    ShutDown,
    /// The host lost the session's lease: a renewal found it taken over or expired, or
    /// renewals kept failing past the lease's deadline (a host resumed past its
    /// lease, a database it cannot reach). `owner` is the new holder, when known: the
    /// host asks the engine as it stops the session.
    LeaseLost {
        /// The holder that took the lease, when the host could learn it.
        owner: Option<Uuid>,
    },
    /// [`HostApp::started`] failed (or the restore before it did); the lease is
    /// released.
    StartFailed,
    /// The session was ended ([`Session::end`]); the host released its lease at its
    /// next renewal.
    Ended,
}

impl fmt::Display for StopReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Released => f.write_str("released"),
            Self::ShutDown => f.write_str("host shut down"),
            Self::LeaseLost { owner: Some(o) } => write!(f, "lease lost to {o}"),
            Self::LeaseLost { owner: None } => f.write_str("lease lost"),
            Self::StartFailed => f.write_str("start failed"),
            Self::Ended => f.write_str("session ended"),
        }
    }
}

/// What an application does with the sessions a [`SessionHost`](crate::SessionHost)
/// places on it: the one place where it registers and seeds its loops.
///
/// The host calls [`started`](Self::started) once it holds a session's lease and has
/// restored it (whether the session was opened by
/// [`SessionHost::open`](crate::SessionHost::open) or adopted from a host that is
/// gone), and [`stopped`](Self::stopped) once it no longer serves it. Between the two,
/// the [`Session`] appends through the host's fence: only while this host holds the
/// lease.
///
/// ```
/// use notify_session::prelude::*;
/// use notify_session::{AppError, HostApp, StopReason};
/// use notify_session::notify_journal::BoxFuture;
///
/// /// One loop per session, seeded with what its previous owner left pending.
/// struct OneLoop {
///     loop_id: LoopId,
/// }
///
/// impl HostApp for OneLoop {
///     fn started<'a>(
///         &'a self,
///         session: &'a Session,
///         report: RestoreReport,
///     ) -> BoxFuture<'a, Result<(), AppError>> {
///         Box::pin(async move {
///             let pending = report.pending.get(&self.loop_id).cloned().unwrap_or_default();
///             let mut consumer = session
///                 .register_loop(LoopConfig::new(session.id(), self.loop_id).seed(pending))?;
///             tokio::spawn(async move {
///                 while let Some(received) = consumer.recv().await {
///                     // act on received.notification(), then:
///                     if received.ack().await.is_err() {
///                         break;
///                     }
///                 }
///             });
///             Ok(())
///         })
///     }
///
///     fn stopped(&self, session: SessionId, why: StopReason) {
///         eprintln!("no longer serving {session}: {why}");
///     }
/// }
/// # let _ = OneLoop { loop_id: LoopId::new() };
/// ```
pub trait HostApp: Send + Sync + 'static {
    /// The host owns `session` now: register its loops and seed them from `report`
    /// (what was appended and never consumed, the processes left running). Called
    /// once per placement, before the session is handed to anyone else.
    ///
    /// # Errors
    ///
    /// Any [`AppError`]: the host then stops the session again (its loops shut, its
    /// lease released) and answers the open with
    /// [`HostError::Start`](crate::HostError::Start); it does not adopt the session
    /// again for a backoff (the lease duration, doubled with each failure in a row,
    /// up to 32 times).
    ///
    /// # Cancel safety
    ///
    /// The host never cancels it, except by shutting down.
    fn started<'a>(
        &'a self,
        session: &'a Session,
        report: RestoreReport,
    ) -> BoxFuture<'a, Result<(), AppError>>;

    /// The host stopped serving `session` (its loops are shut and nothing more is
    /// appended through it here), and why: once per placement that
    /// [`started`](Self::started). A stop that a shutdown's grace cut short is told
    /// too (nothing more is appended; its loops may still be shutting). The default
    /// does nothing.
    fn stopped(&self, session: SessionId, why: StopReason) {
        let _ = (session, why);
    }
}

/// An application with no loops of its own, for hosts that only keep and retire
/// sessions (a retention-only host, a test).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct NoApp;

impl HostApp for NoApp {
    fn started<'a>(
        &'a self,
        _session: &'a Session,
        _report: RestoreReport,
    ) -> BoxFuture<'a, Result<(), AppError>> {
        Box::pin(async { Ok(()) })
    }
}
