//! Retention that runs itself: purge sessions ended before a horizon, in small steps
//! paced to a share of wall time, then drop old tombstones.

use std::sync::Weak;
use std::time::Duration;

use tokio::time::Instant;

use notify_journal::layer::{JournalLayer, JournalReadLayer};
use notify_journal::{
    BoxFuture, JournalBackend, JournalError, JournalLeases, PurgeStep, purge_with,
};
use notify_types::Timestamp;
use tokio::sync::watch;

use super::inner::Inner;
use super::metrics;
use super::options::RetentionSchedule;

/// The retention task: one pass every `schedule.every` until the host shuts down or
/// is dropped (shutdown aborts a pass in flight: each step commits whole or not).
pub(crate) async fn run<J: JournalLeases + 'static>(
    host: Weak<Inner<J>>,
    schedule: RetentionSchedule,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        let Some(inner) = host.upgrade() else {
            return;
        };
        if let Err(e) = pass(inner.journal.as_ref(), &schedule).await {
            metrics::retention_error();
            tracing::warn!(error = %e, "retention pass failed");
        }
        drop(inner);
        tokio::select! {
            () = tokio::time::sleep(schedule.every) => {}
            _ = shutdown.wait_for(|down| *down) => return,
        }
    }
}

/// How long to sleep after work that took `took`, so that work is at most `share` of
/// wall time.
pub(crate) fn pause(took: Duration, share: f64) -> Duration {
    let share = if share.is_finite() {
        share.clamp(0.001, 1.0)
    } else {
        1.0
    };
    took.mul_f64((1.0 - share) / share)
}

/// `now` less `age`, or `None` if that is before the first representable instant.
fn before(now: Timestamp, age: Duration) -> Option<Timestamp> {
    now.checked_sub(age).ok()
}

/// One retention pass over `journal`: purge what ended before the horizon, then drop
/// old tombstones, each step followed by its pause.
pub(crate) async fn pass<J: JournalBackend + ?Sized>(
    journal: &J,
    schedule: &RetentionSchedule,
) -> Result<(), JournalError> {
    let now = Timestamp::now();
    let step = schedule.step.max(1);
    if let Some(ended_before) = before(now, schedule.purge_after) {
        let paced = Paced {
            journal,
            share: schedule.max_share,
        };
        purge_with(&paced, ended_before, step, |s, _| {
            metrics::purge_step(s.frames_removed, s.finished);
        })
        .await?;
    }
    if let Some(purged_before) = before(now, schedule.drop_tombstones_after) {
        loop {
            let t = Instant::now();
            let dropped = journal.drop_tombstones(purged_before, step).await?;
            metrics::tombstones_dropped(dropped);
            tokio::time::sleep(pause(t.elapsed(), schedule.max_share)).await;
            if dropped < step as u64 {
                break;
            }
        }
    }
    Ok(())
}

/// The journal with each purge step followed by its pause (the writer's share of the
/// time), so that [`purge_with`] paces itself.
struct Paced<'a, J: ?Sized> {
    journal: &'a J,
    share: f64,
}

impl<J: JournalBackend + ?Sized> JournalReadLayer for Paced<'_, J> {
    type Inner = J;
    fn inner(&self) -> &J {
        self.journal
    }
}

impl<J: JournalBackend + ?Sized> JournalLayer for Paced<'_, J> {
    fn purge_step(
        &self,
        ended_before: Timestamp,
        max_frames: usize,
    ) -> BoxFuture<'_, Result<PurgeStep, JournalError>> {
        Box::pin(async move {
            let t = Instant::now();
            let step = self.journal.purge_step(ended_before, max_frames).await;
            if matches!(&step, Ok(s) if s.session.is_some()) {
                tokio::time::sleep(pause(t.elapsed(), self.share)).await;
            }
            step
        })
    }
}
