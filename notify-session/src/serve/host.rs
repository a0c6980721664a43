//! The server's view of its [`SessionHost`]: an object-safe [`Host`] (so the
//! handlers are not generic over the journal), and [`ServeApp`], the
//! [`HostApp`] that keeps each restored session's report until its loops are
//! registered over HTTP.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use notify_journal::{BoxFuture, JournalLeases, JournalRead, LeaseError, LeaseInfo};
use notify_types::{LoopId, ProcessNotification, SessionId, Uuid};

use super::consume::Consumers;
use crate::{
    AppError, HostApp, HostError, HostStatus, RestoreReport, Session, SessionHost, StopReason,
};

/// What the handlers need of a host, whatever its journal.
pub(crate) trait Host: Send + Sync + 'static {
    /// The session, if this host serves it.
    fn session(&self, id: SessionId) -> Option<Session>;
    /// Opens (or adopts) the session here.
    fn open(&self, id: SessionId) -> BoxFuture<'_, Result<Session, HostError>>;
    /// The session's lease as the engine sees it.
    fn lease_info(&self, id: SessionId) -> BoxFuture<'_, Result<LeaseInfo, LeaseError>>;
    /// This host's lease-holder identity.
    fn holder_id(&self) -> Uuid;
    /// The journal, for reads.
    fn reader(&self) -> Arc<dyn JournalRead>;
    /// The host's health.
    fn status(&self) -> HostStatus;
    /// Shuts the host down (releases its leases).
    fn shutdown(&self) -> BoxFuture<'_, Result<(), HostError>>;
}

impl<J: JournalLeases + 'static> Host for SessionHost<J> {
    fn session(&self, id: SessionId) -> Option<Session> {
        SessionHost::session(self, id)
    }

    fn open(&self, id: SessionId) -> BoxFuture<'_, Result<Session, HostError>> {
        Box::pin(SessionHost::open(self, id))
    }

    fn lease_info(&self, id: SessionId) -> BoxFuture<'_, Result<LeaseInfo, LeaseError>> {
        self.journal().lease_info(id)
    }

    fn holder_id(&self) -> Uuid {
        SessionHost::holder_id(self)
    }

    fn reader(&self) -> Arc<dyn JournalRead> {
        Arc::clone(self.journal()) as Arc<dyn JournalRead>
    }

    fn status(&self) -> HostStatus {
        SessionHost::status(self)
    }

    fn shutdown(&self) -> BoxFuture<'_, Result<(), HostError>> {
        Box::pin(self.clone().shutdown())
    }
}

/// The server's [`HostApp`]: loops are registered by clients over HTTP, so when the
/// host starts a session (opened or adopted) the restore report's pending
/// notifications are kept here, per loop, and seed the loop when it is registered.
/// When the host stops a session, its consumers here are dropped (what they had
/// handed out and nobody acknowledged is redelivered by the next owner).
pub(crate) struct ServeApp {
    pub(crate) consumers: Arc<Consumers>,
    pub(crate) restored: Mutex<HashMap<SessionId, RestoreReport>>,
    /// Held across a registration's look for the loop, its taking of the restored
    /// notifications and its registering (no await in between), so two registrations
    /// of one loop cannot both take and one of them drop what it took.
    pub(crate) registering: Mutex<()>,
}

impl ServeApp {
    pub(crate) fn new(consumers: Arc<Consumers>) -> Self {
        Self {
            consumers,
            restored: Mutex::new(HashMap::new()),
            registering: Mutex::new(()),
        }
    }

    /// The pending notifications restore found for `loop_id` (taken: they seed the
    /// loop once).
    pub(crate) fn take_pending(
        &self,
        session: SessionId,
        loop_id: LoopId,
    ) -> Vec<ProcessNotification> {
        let mut restored = self.restored.lock().unwrap_or_else(|p| p.into_inner());
        let Some(report) = restored.get_mut(&session) else {
            return Vec::new();
        };
        let pending = report.take_pending(loop_id);
        if report.pending.is_empty() {
            restored.remove(&session);
        }
        pending
    }

    /// Puts `pending` back (a registration that failed after taking it).
    pub(crate) fn give_back(
        &self,
        session: SessionId,
        loop_id: LoopId,
        pending: Vec<ProcessNotification>,
    ) {
        if pending.is_empty() {
            return;
        }
        let mut restored = self.restored.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(report) = restored.get_mut(&session) {
            report.pending.insert(loop_id, pending);
        }
    }
}

/// The app as the host holds it (the host takes it by value).
pub(crate) struct SharedApp(pub(crate) Arc<ServeApp>);

impl HostApp for SharedApp {
    fn started<'a>(
        &'a self,
        session: &'a Session,
        report: RestoreReport,
    ) -> BoxFuture<'a, Result<(), AppError>> {
        Box::pin(async move {
            if report.pending_count() > 0 {
                tracing::info!(
                    session = %session.id(),
                    pending = report.pending_count(),
                    "restored: pending notifications wait for their loops to be registered"
                );
            }
            // A fresh start of the session: consumers of an earlier placement are gone.
            self.0.consumers.drop_session(session.id());
            self.0
                .restored
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(session.id(), report);
            Ok(())
        })
    }

    fn stopped(&self, session: SessionId, why: StopReason) {
        tracing::info!(%session, %why, "no longer serving the session");
        self.0.consumers.drop_session(session);
        self.0
            .restored
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&session);
    }
}
