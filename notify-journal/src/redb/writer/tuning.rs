//! The writer's batching state: how long it spins for returning appenders, and how
//! many appenders (and how long) a batch lingers for, adapted from recent commits.

use std::time::Duration;

use crate::redb::options::RedbOptions;

/// The shortest the writer spins for returning appenders before it sleeps.
pub(super) const SPIN_MIN: Duration = Duration::from_micros(50);
/// The longest it spins (bounds the CPU a vanished appender costs after a commit).
pub(super) const SPIN_MAX: Duration = Duration::from_micros(400);
/// How often the writer thread, asleep while a lead may be taken (`queue.rs`), looks
/// whether one was taken and left pending: a lead is granted without waking it.
pub(super) const LEAD_TICK: Duration = Duration::from_millis(4);
/// How long the writer thread keeps taking such looks after the last lead was taken;
/// then it sleeps without a timeout (an idle journal costs no wake-ups), and the next
/// append wakes it instead of leading.
pub(super) const LEAD_IDLE: Duration = Duration::from_millis(250);
/// The shortest a lead may stay pending (its request queued, its batch not written)
/// before the writer thread takes it over.
const LEAD_WAIT_MIN: Duration = Duration::from_millis(1);
/// The longest (with [`LEAD_TICK`], a future polled late, never, or leaked delays its
/// record by 8 ms at most).
const LEAD_WAIT_MAX: Duration = Duration::from_millis(4);
/// A return slower than this is an idle spell, not a round trip: it is not averaged.
pub(super) const RETURN_SAMPLE_MAX: Duration = Duration::from_millis(2);

/// The writer's batching state.
#[derive(Clone)]
pub(super) struct Tuning {
    pub(super) max_batch: usize,
    pub(super) commit_siblings: usize,
    pub(super) max_commit_delay: Duration,
    pub(super) last_batch: usize,
    /// Requests queued while the last batch was committing (none of them in it).
    pub(super) arrived_during_commit: usize,
    /// Exponentially weighted mean commit time.
    pub(super) commit_ewma: Duration,
    /// Exponentially weighted mean time from answering a batch to the next append.
    pub(super) return_ewma: Duration,
}

impl Tuning {
    /// The state of a writer that has not committed yet.
    pub(super) fn new(options: &RedbOptions) -> Self {
        Self {
            max_batch: options.max_batch,
            commit_siblings: options.commit_siblings,
            max_commit_delay: options.max_commit_delay,
            last_batch: 0,
            arrived_during_commit: 0,
            commit_ewma: Duration::ZERO,
            return_ewma: Duration::ZERO,
        }
    }

    /// Whether the last batch was a lone one (fewer than `commit_siblings` appends, or
    /// none): the thread then sleeps at once, in a lead window (`queue.rs`), instead of
    /// spinning for the appenders it answered.
    pub(super) fn lone(&self) -> bool {
        self.last_batch == 0 || self.last_batch < self.commit_siblings
    }

    pub(super) fn linger_budget(&self) -> Duration {
        self.max_commit_delay.min(self.commit_ewma / 2)
    }

    /// How long a lead may stay pending before the writer thread takes it over: a few
    /// commits' time, within 1 to 4 ms (a leader polled promptly starts well within
    /// it; a slow start costs the hand-off the lead saves, no more).
    pub(super) fn lead_wait(&self) -> Duration {
        (self.commit_ewma * 4).clamp(LEAD_WAIT_MIN, LEAD_WAIT_MAX)
    }

    /// The pause in arrivals after which lingering stops.
    pub(super) fn gap(&self) -> Duration {
        (self.linger_budget() / 8).max(Duration::from_micros(20))
    }

    /// How many appenders the next batch should wait for: the recently active ones,
    /// those the last commit answered (they tend to come straight back) plus those
    /// that queued while it ran (not in it). Zero: do not linger.
    pub(super) fn linger_target(&self) -> usize {
        let target = (self.last_batch + self.arrived_during_commit).min(self.max_batch);
        if target >= self.commit_siblings && !self.linger_budget().is_zero() {
            target
        } else {
            0
        }
    }

    pub(super) fn observe_return(&mut self, took: Duration) {
        self.return_ewma = if self.return_ewma.is_zero() {
            took
        } else {
            (self.return_ewma * 7 + took) / 8
        };
    }

    pub(super) fn observe_commit(&mut self, took: Duration) {
        self.commit_ewma = if self.commit_ewma.is_zero() {
            took
        } else {
            (self.commit_ewma * 7 + took) / 8
        };
    }
}
