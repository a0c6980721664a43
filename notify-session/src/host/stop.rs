//! Stopping a session on this host: close its fence, refuse new work, wait out the
//! appends in flight, shut its loops, release its lease (unless lost) and tell the
//! application.

use tokio::time::Instant;

use notify_journal::{JournalLeases, LeaseError};
use notify_types::SessionId;

use super::app::StopReason;
use super::inner::Inner;
use super::metrics;

/// Stops serving `session` here for `why`; releases the lease unless it was lost.
/// Answers `Ok(false)` if the session was not served here, and the release's error
/// if it failed (the session is stopped here all the same).
pub(crate) async fn stop_session<J: JournalLeases + 'static>(
    inner: &Inner<J>,
    session: SessionId,
    why: StopReason,
) -> Result<bool, LeaseError> {
    // First the fence: from here no append of this host reaches the journal.
    let Some(held) = inner.table.remove(session, Instant::now()) else {
        return Ok(false);
    };
    metrics::leases_held(inner.table.len());
    let owner = match why {
        StopReason::LeaseLost { owner } => owner,
        _ => None,
    };
    let shared = &held.session.shared;
    shared.stop_by_host(owner);
    // Every notify, publish or ack that checked the stop before it was set holds the
    // end gate for reading through its append: taking it for writing waits them out.
    drop(shared.end_gate.write().await);
    for loop_id in held.session.loops() {
        held.session.shutdown_loop(loop_id).await;
    }
    let released = match why {
        StopReason::LeaseLost { .. } => Ok(()),
        _ => {
            let released = inner.journal.release_lease(session).await;
            if released.is_ok() {
                metrics::released();
            }
            released
        }
    };
    if held.started {
        inner.app.stopped(session, why);
    }
    tracing::info!(%session, %why, "host stopped serving the session");
    released.map(|()| true)
}
