//! Opening a session on this host: take its lease, restore it, hand the report to the
//! application.

use std::sync::Arc;
use tokio::time::Instant;

use notify_journal::{JournalLeases, SessionState};
use notify_types::SessionId;

use super::app::StopReason;
use super::error::HostError;
use super::fence::{Fence, HostPlacement};
use super::inner::Inner;
use super::metrics;
use super::stop::stop_session;
use super::table::{BeginRefusal, Held, LeaseTable};
use crate::restore::restore;
use crate::session::Session;

/// Undoes a half-done open if the open's future is dropped: the reservation, or the
/// lease recorded but not started (the fence closes; the keeper releases the lease
/// the engine still holds for this handle).
struct Undo<'a> {
    table: &'a LeaseTable,
    session: SessionId,
    armed: bool,
}

impl Drop for Undo<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.table.abort_open(self.session);
            if let Some(held) = self.table.remove(self.session, Instant::now()) {
                held.session.shared.stop_by_host(None);
            }
        }
    }
}

/// Tells the lease table that an open returned (see [`LeaseTable::open_returned`]).
struct OpenReturned<'a> {
    table: &'a LeaseTable,
    session: SessionId,
    generation: u64,
}

impl Drop for OpenReturned<'_> {
    fn drop(&mut self) {
        self.table.open_returned(self.session, self.generation);
    }
}

/// Opens `session` here: the one path for [`SessionHost::open`](crate::SessionHost::open)
/// and for adoption (`adopted`). A session served here already is answered as is. A
/// failed restore or start holds the session off this host's adoption for a backoff
/// that doubles with each failure in a row.
pub(crate) async fn open_session<J: JournalLeases + 'static>(
    inner: &Arc<Inner<J>>,
    session: SessionId,
    adopted: bool,
) -> Result<Session, HostError> {
    let opened = open_placement(inner, session, adopted).await;
    if let Err(HostError::Restore { .. } | HostError::Start { .. }) = &opened {
        inner
            .table
            .start_failed(session, Instant::now(), inner.options.readopt_after);
    }
    opened
}

async fn open_placement<J: JournalLeases + 'static>(
    inner: &Arc<Inner<J>>,
    session: SessionId,
    adopted: bool,
) -> Result<Session, HostError> {
    match inner.table.begin_open(session, inner.options.capacity) {
        Ok(()) => {}
        Err(BeginRefusal::Held) => {
            return match inner.table.get(session) {
                Some(held) if held.started => Ok(held.session),
                _ => Err(HostError::Opening { session }),
            };
        }
        Err(BeginRefusal::Opening) => return Err(HostError::Opening { session }),
        Err(BeginRefusal::Full) => {
            return Err(HostError::AtCapacity {
                capacity: inner.options.capacity,
            });
        }
        Err(BeginRefusal::Closed) => return Err(HostError::ShutDown),
    }
    let mut undo = Undo {
        table: &inner.table,
        session,
        armed: true,
    };
    // An ended session has nothing to serve: do not take (and then give up, and
    // announce) its lease.
    match inner.journal.session_state(session).await {
        Ok(SessionState::Live) => {}
        Ok(SessionState::Ended { .. }) => {
            return Err(HostError::Ended {
                session,
                purged: false,
            });
        }
        Ok(_) => {
            return Err(HostError::Ended {
                session,
                purged: true,
            });
        }
        Err(e) => {
            return Err(HostError::Restore {
                session,
                source: crate::error::RestoreError::Replay(e),
            });
        }
    }
    let mut t0 = Instant::now();
    let mut lease = inner
        .journal
        .acquire_lease(session)
        .await
        .map_err(|e| HostError::from_lease(session, e))?;
    // An acquire that waited (on PostgreSQL, for a stalled holder's appends in flight
    // holding the lease row) took its lease late in the call, but the local deadline
    // counts from the call's start, so it may be near or past already: the session
    // would be stopped as lost as it opens. Acquiring again extends our own live lease
    // under its epoch, and the deadline counts from that call's start.
    if t0.elapsed() > inner.keep_for() / 4 {
        let again = Instant::now();
        lease = inner
            .journal
            .acquire_lease(session)
            .await
            .map_err(|e| HostError::from_lease(session, e))?;
        t0 = again;
    }
    // The placement: its own fence, refusing appends once it is no longer the one the
    // table holds (a handle kept from it stays refused after a later open).
    let generation = inner.table.next_generation();
    let placement = Arc::new(HostPlacement::new(
        session,
        generation,
        Arc::clone(&inner.table),
    ));
    let fenced: Arc<dyn notify_journal::JournalBackend> = Arc::new(Fence::new(
        Arc::clone(&inner.journal),
        Arc::clone(&placement),
    ));
    let hosted = Session::new(session, Arc::clone(&fenced));
    hosted.shared.mark_hosted(placement);
    let recorded = inner.table.insert(Held {
        session: hosted.clone(),
        generation,
        epoch: lease.epoch(),
        renewed: t0,
        deadline: t0 + inner.keep_for(),
        started: false,
    });
    if !recorded {
        // The host shut down while the lease was being acquired.
        undo.armed = false;
        let _ = inner.journal.release_lease(session).await;
        return Err(HostError::ShutDown);
    }
    // However this open ends (cancelled too), a stop of its placement that began
    // before it started waits for it to return: until then the open may still tell
    // the application of this placement.
    let _returned = OpenReturned {
        table: &inner.table,
        session,
        generation,
    };
    metrics::leases_held(inner.table.len());
    let report = match restore(session, fenced.as_ref()).await {
        Ok(report) => report,
        Err(source) => {
            undo.armed = false;
            let _ = stop_session(inner, session, StopReason::StartFailed).await;
            return Err(HostError::Restore { session, source });
        }
    };
    if report.state != SessionState::Live {
        // Ended between the check and the lease.
        undo.armed = false;
        let _ = stop_session(inner, session, StopReason::StartFailed).await;
        let purged = !matches!(report.state, SessionState::Ended { .. });
        return Err(HostError::Ended { session, purged });
    }
    if let Err(source) = inner.app.started(&hosted, report).await {
        undo.armed = false;
        let _ = stop_session(inner, session, StopReason::StartFailed).await;
        return Err(HostError::Start {
            session,
            source: Arc::from(source),
        });
    }
    undo.armed = false;
    if !inner.table.mark_started(session, generation) {
        // Lost, or the host shut down, while starting: the stop ran before the
        // application registered (all) its loops, so shut them here.
        for loop_id in hosted.loops() {
            hosted.shutdown_loop(loop_id).await;
        }
        if inner.table.is_closed() {
            inner.app.stopped(session, StopReason::ShutDown);
            return Err(HostError::ShutDown);
        }
        inner.app.stopped(
            session,
            StopReason::LeaseLost {
                owner: hosted.shared.stopped_by_host().flatten(),
            },
        );
        return Err(HostError::Lost { session });
    }
    metrics::started(adopted, t0.elapsed());
    tracing::info!(%session, epoch = lease.epoch(), adopted, "host started serving the session");
    Ok(hosted)
}
