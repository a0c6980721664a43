//! The loop's metrics, recorded through the `metrics` facade. No exporter here: the
//! application installs a recorder (without one every call is a no-op). The table of
//! every metric is the workspace's `docs/metrics.md`.

use notify_types::StopCause;

/// Gauge: accepted, not yet acknowledged notifications (the live sets) over every
/// loop of the process: what the loops' consumers have yet to work through.
pub(crate) const INBOX_DEPTH: &str = "notify_loop_inbox_depth";
/// Gauge: loops alive in the process (the name is kept from when each loop ran a
/// task; a loop now runs none).
pub(crate) const LOOPS: &str = "notify_loop_tasks";
/// Counter, label `cause` (`full`, `exited`, `refused`): deliveries answered
/// `Stopped`.
pub(crate) const STOPS: &str = "notify_loop_stops_total";

/// Counts a delivery answered `Stopped(cause)`.
pub(crate) fn stopped(cause: StopCause) {
    // Literal labels: the macro then builds a static key, with no allocation.
    let counter = match cause {
        StopCause::Full => metrics::counter!(STOPS, "cause" => "full"),
        StopCause::Exited => metrics::counter!(STOPS, "cause" => "exited"),
        StopCause::Refused => metrics::counter!(STOPS, "cause" => "refused"),
        _ => metrics::counter!(STOPS, "cause" => "other"),
    };
    counter.increment(1);
}

/// Moves the inbox depth gauge by what `live` changed since `reported`, which it then
/// becomes. Called once per batch of requests, not per notification.
pub(crate) fn live_changed(reported: &mut usize, live: usize) {
    if live > *reported {
        metrics::gauge!(INBOX_DEPTH).increment((live - *reported) as f64);
    } else if live < *reported {
        metrics::gauge!(INBOX_DEPTH).decrement((*reported - live) as f64);
    }
    *reported = live;
}

/// A loop's state was created (`true`) or dropped (`false`).
pub(crate) fn loop_running(running: bool) {
    if running {
        metrics::gauge!(LOOPS).increment(1.0);
    } else {
        metrics::gauge!(LOOPS).decrement(1.0);
    }
}
