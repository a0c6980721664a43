//! The session's metrics, recorded through the `metrics` facade. No exporter here: the
//! application installs a recorder (without one every call is a no-op). The table of
//! every metric is the workspace's `docs/metrics.md`.

use notify_types::{Disposition, Notified, NotifyError};

/// Counter, label `disposition` (`accepted`, `duplicate`, `collision`, `stopped`,
/// `error`): notifications answered by `notify_process_completion`.
pub(crate) const NOTIFICATIONS: &str = "notify_session_notifications_total";
/// Counter: consumptions journaled by `SessionReceived::ack`.
pub(crate) const CONSUMED: &str = "notify_session_consumed_total";
/// Counter: pending notifications handed back to a loop after a restart (seeded into
/// it through `Session::register_loop`), to be delivered again.
pub(crate) const REDELIVERED: &str = "notify_session_redelivered_total";
/// Counter: orphaned processes declared lost (`Session::declare_lost` journaling a new
/// `ProcessLost` event; declaring one again counts nothing).
pub(crate) const DECLARED_LOST: &str = "notify_session_declared_lost_total";

/// Counter: sessions ended by `Session::end` (an end already journaled counts nothing).
pub(crate) const ENDED: &str = "notify_session_ended_total";
/// Counter: pending notifications journaled as abandoned by `Session::end`.
pub(crate) const ABANDONED: &str = "notify_session_abandoned_total";

/// Counts one answer of `notify_process_completion`.
pub(crate) fn notified(answer: &Result<Notified, NotifyError>) {
    let disposition = match answer {
        Ok(n) => Some(n.disposition()),
        Err(e) => e.disposition(),
    };
    // Literal labels: the macro then builds a static key, with no allocation per call.
    let counter = match disposition {
        Some(Disposition::Accepted) => {
            metrics::counter!(NOTIFICATIONS, "disposition" => "accepted")
        }
        Some(Disposition::Duplicate) => {
            metrics::counter!(NOTIFICATIONS, "disposition" => "duplicate")
        }
        Some(Disposition::Collision) => {
            metrics::counter!(NOTIFICATIONS, "disposition" => "collision")
        }
        Some(Disposition::Stopped) => metrics::counter!(NOTIFICATIONS, "disposition" => "stopped"),
        // Bad input, a foreign owner or a journal failure: no disposition.
        _ => metrics::counter!(NOTIFICATIONS, "disposition" => "error"),
    };
    counter.increment(1);
}

/// One consumption journaled.
pub(crate) fn consumed() {
    metrics::counter!(CONSUMED).increment(1);
}

/// `n` pending notifications seeded back into a loop.
pub(crate) fn redelivered(n: usize) {
    if n > 0 {
        metrics::counter!(REDELIVERED).increment(n as u64);
    }
}

/// One orphan newly declared lost.
pub(crate) fn declared_lost() {
    metrics::counter!(DECLARED_LOST).increment(1);
}

/// One session ended here, abandoning `abandoned` notifications.
pub(crate) fn ended(abandoned: usize) {
    metrics::counter!(ENDED).increment(1);
    if abandoned > 0 {
        metrics::counter!(ABANDONED).increment(abandoned as u64);
    }
}
