//! The host runtime's metrics, recorded through the `metrics` facade (the table is
//! the workspace's `docs/metrics.md`).

use std::time::Duration;

/// Gauge: leases this host holds (sessions it serves).
pub(crate) const LEASES_HELD: &str = "notify_host_leases_held";
/// Counter, label `outcome` (`ok`, `failed`): renewals of all of a host's leases
/// (one statement each, whatever the number of leases).
pub(crate) const RENEWALS: &str = "notify_host_renewals_total";
/// Counter, label `cause` (`lost`: a renewal found the lease taken over or expired;
/// `deadline`: renewals kept failing past the lease's deadline): leases lost.
pub(crate) const LOSSES: &str = "notify_host_lease_losses_total";
/// Counter: orphaned sessions adopted (opened by the host's adopter).
pub(crate) const ADOPTIONS: &str = "notify_host_adoptions_total";
/// Histogram, seconds: from the start of a lease's acquisition to the session
/// started (restored and handed to the application).
pub(crate) const TAKEOVER: &str = "notify_host_takeover_seconds";
/// Counter: sessions released (given up gracefully: release or shutdown).
pub(crate) const RELEASES: &str = "notify_host_releases_total";
/// Counter: purge steps run by the host's retention.
pub(crate) const PURGE_STEPS: &str = "notify_host_purge_steps_total";
/// Counter: frames removed by the host's retention.
pub(crate) const PURGED_FRAMES: &str = "notify_host_purged_frames_total";
/// Counter: sessions whose purge the host's retention finished.
pub(crate) const PURGED_SESSIONS: &str = "notify_host_purged_sessions_total";
/// Counter: tombstones dropped by the host's retention.
pub(crate) const TOMBSTONES_DROPPED: &str = "notify_host_tombstones_dropped_total";
/// Counter: retention passes that failed (the next pass continues).
pub(crate) const RETENTION_ERRORS: &str = "notify_host_retention_errors_total";

/// The number of leases held now.
pub(crate) fn leases_held(n: usize) {
    metrics::gauge!(LEASES_HELD).set(n as f64);
}

/// One renewal of all leases, successful or not.
pub(crate) fn renewal(ok: bool) {
    if ok {
        metrics::counter!(RENEWALS, "outcome" => "ok").increment(1);
    } else {
        metrics::counter!(RENEWALS, "outcome" => "failed").increment(1);
    }
}

/// One lease lost: found lost by a renewal, or past its deadline.
pub(crate) fn lost(deadline: bool) {
    if deadline {
        metrics::counter!(LOSSES, "cause" => "deadline").increment(1);
    } else {
        metrics::counter!(LOSSES, "cause" => "lost").increment(1);
    }
}

/// One session started: adopted or not, after `takeover` from the lease's
/// acquisition start.
pub(crate) fn started(adopted: bool, takeover: Duration) {
    if adopted {
        metrics::counter!(ADOPTIONS).increment(1);
    }
    metrics::histogram!(TAKEOVER).record(takeover.as_secs_f64());
}

/// One session released gracefully.
pub(crate) fn released() {
    metrics::counter!(RELEASES).increment(1);
}

/// One purge step that removed `frames` frames and finished its session or not.
pub(crate) fn purge_step(frames: u64, finished: bool) {
    metrics::counter!(PURGE_STEPS).increment(1);
    metrics::counter!(PURGED_FRAMES).increment(frames);
    if finished {
        metrics::counter!(PURGED_SESSIONS).increment(1);
    }
}

/// `n` tombstones dropped.
pub(crate) fn tombstones_dropped(n: u64) {
    metrics::counter!(TOMBSTONES_DROPPED).increment(n);
}

/// One failed retention pass.
pub(crate) fn retention_error() {
    metrics::counter!(RETENTION_ERRORS).increment(1);
}
