//! A host's settings: how often it renews and looks for orphans, its capacity, and
//! its retention schedule.

use std::time::Duration;

/// How a host retires ended sessions in the background
/// ([`HostBuilder::retention`](crate::HostBuilder::retention)).
///
/// Every [`every`](Self::every) the host purges, through
/// [`notify_journal::purge_with`], the sessions that ended more than
/// [`purge_after`](Self::purge_after) ago, [`step`](Self::step) frames per
/// transaction, sleeping after each step so that purging takes at most
/// [`max_share`](Self::max_share) of wall time (the rest is the writer's); then it
/// drops the tombstones of purges older than
/// [`drop_tombstones_after`](Self::drop_tombstones_after). On PostgreSQL a purge step
/// skips an ended session whose lease another host holds live.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RetentionSchedule {
    /// Purge sessions that ended longer ago than this.
    pub purge_after: Duration,
    /// Drop tombstones of purges that began longer ago than this (choose it longer
    /// than any retry can come late: a dropped session is unknown again).
    pub drop_tombstones_after: Duration,
    /// The largest share of wall time purging may take, in `(0, 1]` (e.g. 0.1: after a
    /// step that took 5 ms, the host sleeps 45 ms).
    pub max_share: f64,
    /// Frames removed per purge step (one transaction), and tombstones dropped per
    /// call.
    pub step: usize,
    /// How long between two retention passes.
    pub every: Duration,
}

impl Default for RetentionSchedule {
    /// Purge after 7 days, drop tombstones after 30, at most 10% of wall time, 256
    /// frames a step, one pass a minute.
    fn default() -> Self {
        Self {
            purge_after: Duration::from_secs(7 * 24 * 3600),
            drop_tombstones_after: Duration::from_secs(30 * 24 * 3600),
            max_share: 0.1,
            step: 256,
            every: Duration::from_secs(60),
        }
    }
}

/// A host's resolved settings.
#[derive(Debug, Clone)]
pub(crate) struct HostOptions {
    pub(crate) capacity: usize,
    pub(crate) lease_duration: Duration,
    pub(crate) renew_every: Duration,
    /// How long before a lease's end (counted from the start of its last successful
    /// renewal) the host stops serving it when renewals keep failing.
    pub(crate) margin: Duration,
    pub(crate) adopt_every: Duration,
    /// Whether the host adopts orphans at all.
    pub(crate) adopt: bool,
    pub(crate) retention: Option<RetentionSchedule>,
    /// How long the host leaves a session it released or lost to other hosts before
    /// adopting it again itself.
    pub(crate) readopt_after: Duration,
    /// How long shutdown waits for the background tasks to finish their step before
    /// it aborts them.
    pub(crate) shutdown_grace: Duration,
}
