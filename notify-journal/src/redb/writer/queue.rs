//! The queue between appenders and the writer (what is queued is `requests.rs`), and
//! the wake policy: who wakes the writer thread, when it spins, sleeps or lingers for
//! more of a batch, and when an appender leads instead.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use super::requests::{AppTxn, Chore, Queued};
use super::tuning::{LEAD_IDLE, LEAD_TICK, RETURN_SAMPLE_MAX, SPIN_MAX, SPIN_MIN, Tuning};
use crate::error::{AppendError, JournalError};
use crate::redb::check::scrub::Poison;
use crate::redb::writer::failure::poisoned;
use crate::stats::CommitStats;

struct QueueState {
    items: VecDeque<Queued>,
    /// Purge steps and tombstone drops, each run alone in its own transaction between
    /// batches (so an append waits for at most one).
    chores: VecDeque<Chore>,
    /// Set by `close`: no new requests; the writer drains what is queued and exits.
    closed: bool,
    /// An appender wakes the writer only when the queue reaches this length: 1 while
    /// the writer is idle, what is missing of the linger target while it lingers,
    /// `usize::MAX` while it works (it looks at the queue again afterwards anyway).
    wake_at: usize,
    /// The writer thread is asleep, waiting for work.
    asleep: bool,
    /// The writer thread sleeps with a timeout ([`LEAD_TICK`] at most), so an
    /// appender may take the lead: the thread looks again in bounded time and writes
    /// a batch that a leader has left queued.
    lead_window: bool,
    /// An appender has taken the lead (`lead.rs`): it writes what is queued on its
    /// own thread; no other appender takes it meanwhile.
    led: bool,
    /// When the current lead was taken.
    led_at: Instant,
    /// Leads taken so far; the current lead's number names it ([`Queue::release_lead`]).
    leads: u64,
    /// An appender or a chore has woken the sleeping thread for work (not a leader's).
    kicked: bool,
}

/// The queue between appenders and the writer.
pub(crate) struct Queue {
    state: Mutex<QueueState>,
    ready: Condvar,
    /// `state.items.len()`, readable without the lock (the writer spins on it).
    pending: AtomicUsize,
    /// Set with `state.closed`, readable without the lock.
    closing: AtomicBool,
    /// Set after a failed commit; every later append is refused with `Poisoned`.
    poisoned: AtomicBool,
    /// The damage found after open (by the scrub, `check/scrub.rs`, or the writer); set with
    /// `poisoned`.
    damage: std::sync::OnceLock<String>,
    /// Successful commits, for [`CommitStats`].
    commits: AtomicU64,
    /// Appends answered by successful commits, for [`CommitStats`].
    committed_appends: AtomicU64,
    /// Times the writer slept and an appender had to wake it, for [`CommitStats`].
    wakeups: AtomicU64,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding this lock cannot leave the queue half-updated (every
    // critical section is a push, a drain or a flag store), so its data stays usable.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Queue {
    pub(crate) fn new() -> Self {
        Self {
            state: Mutex::new(QueueState {
                items: VecDeque::new(),
                chores: VecDeque::new(),
                closed: false,
                wake_at: 1,
                asleep: false,
                lead_window: false,
                led: false,
                led_at: Instant::now(),
                leads: 0,
                kicked: false,
            }),
            ready: Condvar::new(),
            pending: AtomicUsize::new(0),
            closing: AtomicBool::new(false),
            poisoned: AtomicBool::new(false),
            damage: std::sync::OnceLock::new(),
            commits: AtomicU64::new(0),
            committed_appends: AtomicU64::new(0),
            wakeups: AtomicU64::new(0),
        }
    }

    pub(crate) fn stats(&self) -> CommitStats {
        CommitStats {
            commits: self.commits.load(Ordering::Relaxed),
            appends: self.committed_appends.load(Ordering::Relaxed),
            writer_wakeups: self.wakeups.load(Ordering::Relaxed),
        }
    }

    pub(super) fn len(&self) -> usize {
        self.pending.load(Ordering::Acquire)
    }

    pub(crate) fn is_poisoned(&self) -> bool {
        self.poisoned.load(Ordering::Acquire)
    }

    /// Poisons the handle for damage found (by the scrub or the writer): every later
    /// append is refused with [`AppendError::Damaged`]. A poison already set (a failed
    /// commit, earlier damage) is kept as it is: the first cause is the one reported.
    pub(crate) fn mark_damaged(&self, detail: String) {
        let _state = lock(&self.state);
        if !self.poisoned.load(Ordering::Acquire) {
            let _ = self.damage.set(detail);
            self.poisoned.store(true, Ordering::Release);
        }
        self.ready.notify_all();
    }

    /// What a poisoned handle answers an append.
    pub(crate) fn refusal(&self) -> AppendError {
        match self.damage.get() {
            Some(detail) => AppendError::Damaged {
                detail: detail.clone(),
            },
            None => AppendError::Poisoned,
        }
    }

    /// What a poisoned handle answers a chore.
    pub(crate) fn chore_refusal(&self) -> JournalError {
        poisoned(self.damage.get().map(String::as_str))
    }

    /// Queues a request or a group; refuses it if the journal is closed or poisoned.
    ///
    /// With `may_lead`, the caller takes the lead when nothing else is waiting and the
    /// writer thread is asleep in a lead window: then `Some(lead)`, the thread is not
    /// woken, and the caller should write the batch itself, then hand the lead back
    /// ([`Queue::release_lead`] with `lead`). A caller that does neither (its future
    /// polled late or never) delays its request by a few ms at most: the thread takes
    /// a lead left pending for [`Tuning::lead_wait`] over and writes the batch.
    pub(crate) fn submit(
        &self,
        request: Queued,
        may_lead: bool,
    ) -> Result<Option<u64>, AppendError> {
        let mut st = lock(&self.state);
        if st.closed {
            return Err(AppendError::Closed);
        }
        if self.is_poisoned() {
            return Err(self.refusal());
        }
        let lead = may_lead
            && st.asleep
            && st.lead_window
            && !st.led
            && st.items.is_empty()
            && st.chores.is_empty();
        st.items.push_back(request);
        self.pending.store(st.items.len(), Ordering::Release);
        if lead {
            st.led = true;
            st.led_at = Instant::now();
            st.leads += 1;
            return Ok(Some(st.leads));
        }
        // Only the leader leaves the thread asleep: an append queued behind a lead
        // wakes it, so it never waits on a leader's future that is not polled yet.
        if st.items.len() >= st.wake_at {
            st.kicked = true;
            self.ready.notify_one();
        }
        Ok(None)
    }

    /// Ends lead number `lead` taken by [`Queue::submit`] (unless the writer thread
    /// has taken it over meanwhile): wakes the writer thread if work is left for it.
    pub(super) fn release_lead(&self, lead: u64) {
        let mut st = lock(&self.state);
        if st.leads == lead {
            st.led = false;
        }
        if !st.items.is_empty() || !st.chores.is_empty() || st.closed {
            st.kicked = true;
            self.ready.notify_one();
        }
    }

    /// Whether an append submitted now would take the lead.
    #[cfg(test)]
    pub(crate) fn lead_may_be_taken(&self) -> bool {
        let st = lock(&self.state);
        st.asleep && st.lead_window && !st.led && st.items.is_empty() && st.chores.is_empty()
    }

    /// Leads granted so far (the last one's number), and whether one is taken now.
    #[cfg(test)]
    pub(crate) fn leads(&self) -> (u64, bool) {
        let st = lock(&self.state);
        (st.leads, st.led)
    }

    /// Whether the writer thread sleeps, waiting for work.
    #[cfg(test)]
    pub(crate) fn asleep(&self) -> bool {
        lock(&self.state).asleep
    }

    /// Whether the writer thread sleeps with its lead window closed (no timeout).
    #[cfg(test)]
    pub(crate) fn sleeps_without_window(&self) -> bool {
        let st = lock(&self.state);
        st.asleep && !st.lead_window && !st.led
    }

    /// Queues a chore; refuses it if the journal is closed or poisoned.
    pub(crate) fn submit_chore(&self, chore: Chore) {
        let mut st = lock(&self.state);
        if st.closed {
            drop(st);
            return chore.refuse(JournalError::Closed);
        }
        if self.is_poisoned() {
            drop(st);
            return chore.refuse(self.chore_refusal());
        }
        st.chores.push_back(chore);
        // Whatever the writer waits for (appends to linger for, or work at all), a
        // chore ends the wait: a lingering batch commits and the chore runs next.
        st.kicked = true;
        self.ready.notify_one();
    }

    /// Queues the rest of a chore the writer ran one step of, behind the chores
    /// queued meanwhile; hands it back once the journal is closing or poisoned.
    pub(super) fn requeue_chore(&self, chore: Chore) -> Result<(), Chore> {
        let mut st = lock(&self.state);
        if st.closed || self.is_poisoned() {
            return Err(chore);
        }
        st.chores.push_back(chore);
        Ok(())
    }

    /// The next queued chore, if any.
    pub(super) fn take_chore(&self) -> Option<Chore> {
        lock(&self.state).chores.pop_front()
    }

    /// The next queued chore if it is an [`AppTxn`] (the writer groups those).
    pub(super) fn take_app_txn(&self) -> Option<AppTxn> {
        let mut st = lock(&self.state);
        match st.chores.pop_front() {
            Some(Chore::AppTxn(txn)) => Some(txn),
            Some(other) => {
                st.chores.push_front(other);
                None
            }
            None => None,
        }
    }

    /// Puts back, at the front and in order, [`AppTxn`]s the writer took and did not
    /// run; hands them back once the journal is closing or poisoned.
    pub(super) fn requeue_app_txns(&self, txns: Vec<AppTxn>) -> Result<(), Vec<AppTxn>> {
        let mut st = lock(&self.state);
        if st.closed || self.is_poisoned() {
            return Err(txns);
        }
        for txn in txns.into_iter().rev() {
            st.chores.push_front(Chore::AppTxn(txn));
        }
        Ok(())
    }

    /// Marks the handle broken (after a failed commit): every later request is refused.
    pub(super) fn poison(&self) {
        // Under the lock, so `mark_damaged` sees it and keeps this first cause.
        let _state = lock(&self.state);
        self.poisoned.store(true, Ordering::Release);
    }

    /// Counts a successful batch commit that answered `appends` appends.
    pub(super) fn count_commit(&self, appends: usize) {
        self.commits.fetch_add(1, Ordering::Relaxed);
        self.committed_appends
            .fetch_add(appends as u64, Ordering::Relaxed);
    }

    /// Closes the queue and answers everything still in it with `Closed` (the writer
    /// is gone, however it ended).
    pub(super) fn shut(&self) {
        let mut st = lock(&self.state);
        st.closed = true;
        for queued in st.items.drain(..) {
            queued.refuse(&AppendError::Closed);
        }
        for chore in st.chores.drain(..) {
            chore.refuse(JournalError::Closed);
        }
    }

    /// Stops accepting requests and wakes the writer so it can drain and exit.
    pub(crate) fn close(&self) {
        let mut st = lock(&self.state);
        st.closed = true;
        self.closing.store(true, Ordering::Release);
        self.ready.notify_all();
    }

    /// Waits until at least one request is queued; `false` once closed and drained.
    ///
    /// Right after a commit the appenders it answered are about to come back, so the
    /// writer first spins briefly (yielding the core) before it sleeps: waking a sleeping
    /// thread costs more than the spin, on every single append of a lone appender.
    ///
    /// How long it spins adapts to how long the answered appenders take to come back
    /// (twice the recent mean, within [`SPIN_MIN`]..=[`SPIN_MAX`]), so a lone appender
    /// whose round trip is slower than a fixed spin does not pay a wake-up per append.
    pub(super) fn wait_for_work(&self, tuning: &mut Tuning) -> bool {
        let idle_since = Instant::now();
        // After a lone append the writer sleeps at once: the appender's next append
        // then takes the lead (`lead.rs`) and commits on its own thread, which costs
        // less than the spin or the wake-up.
        if !tuning.lone() {
            let budget = (tuning.return_ewma * 2).clamp(SPIN_MIN, SPIN_MAX);
            while self.pending.load(Ordering::Acquire) == 0
                && !self.closing.load(Ordering::Acquire)
                && idle_since.elapsed() < budget
            {
                std::thread::yield_now();
            }
        }
        let mut st = lock(&self.state);
        let mut slept = false;
        let mut taken_over = false;
        // A sleep after a lone batch (or a lone appender's lead) opens with a lead
        // window: the thread sleeps with a timeout, so a lone appender may lead
        // (`lead.rs`) and the thread still writes a batch its leader leaves queued (a
        // future polled late, never, or leaked). The window stays open while leads are
        // taken; [`LEAD_IDLE`] without any closes it, and the thread sleeps without a
        // timeout (an idle journal costs no wake-ups), so the next append wakes it.
        // After a batch of `commit_siblings` or more (load) the sleep opens none: the
        // next append wakes the thread, and if it is a lone one, its batch opens it.
        let mut window = tuning.lone();
        let mut leads_seen = st.leads;
        let mut last_lead = Instant::now();
        st.kicked = false;
        loop {
            let work = !st.items.is_empty() || !st.chores.is_empty();
            // Work found awake, queued behind a lead, or left by a leader: the thread's.
            if work && (!slept || !st.led || st.kicked || st.closed) {
                break;
            }
            if work && st.led_at.elapsed() >= tuning.lead_wait() {
                // The leader has not written its batch in time: take it over (the
                // leader, polled at last, finds its answer or awaits it).
                st.led = false;
                taken_over = true;
                break;
            }
            if st.closed {
                return false;
            }
            st.wake_at = 1;
            slept = true;
            st.asleep = true;
            if st.led || window {
                st.lead_window = true;
                let timeout = if st.led && work {
                    tuning.lead_wait().saturating_sub(st.led_at.elapsed())
                } else {
                    LEAD_TICK
                };
                let (guard, waited) = self
                    .ready
                    .wait_timeout(st, timeout)
                    .unwrap_or_else(PoisonError::into_inner);
                st = guard;
                if waited.timed_out() && !st.led {
                    if st.leads != leads_seen {
                        leads_seen = st.leads;
                        last_lead = Instant::now();
                    }
                    window = last_lead.elapsed() < LEAD_IDLE;
                }
            } else {
                st.lead_window = false;
                st = self.ready.wait(st).unwrap_or_else(PoisonError::into_inner);
            }
        }
        // Whatever the thread leaves the wait for, a lead still taken ends here: the
        // thread writes what is queued, the leader's append too if it is still queued.
        // A leader at work hands back a lead no longer current (`release_lead` by
        // number: a no-op); one never polled or leaked would otherwise hold it for
        // good (no later lead granted, the window never closed).
        st.led = false;
        st.asleep = false;
        st.lead_window = false;
        st.kicked = false;
        st.wake_at = usize::MAX;
        drop(st);
        let idle = idle_since.elapsed();
        if slept && !taken_over {
            self.wakeups.fetch_add(1, Ordering::Relaxed);
        }
        if tuning.last_batch > 0 && idle < RETURN_SAMPLE_MAX {
            tuning.observe_return(idle);
        }
        if idle > tuning.linger_budget().max(tuning.gap()) {
            // Idle for longer than appenders take to rejoin: the last batch's appenders
            // are gone, so this append is a lone one and commits at once.
            tuning.last_batch = 0;
            tuning.arrived_during_commit = 0;
        }
        true
    }

    /// Moves up to `max - out.len()` queued requests into `out`.
    pub(super) fn take(&self, out: &mut Vec<Queued>, max: usize) {
        let mut st = lock(&self.state);
        self.take_locked(&mut st, out, max);
    }

    fn take_locked(&self, st: &mut QueueState, out: &mut Vec<Queued>, max: usize) {
        // A leader taking work leaves a sleeping thread's wake-up as it is (1).
        if !st.asleep {
            st.wake_at = usize::MAX;
        }
        let n = st.items.len().min(max.saturating_sub(out.len()));
        out.extend(st.items.drain(..n));
        self.pending.store(st.items.len(), Ordering::Release);
    }

    /// Lingers for more of the batch: takes whatever is queued at once, else waits up
    /// to `gap` (and never past `deadline`) for arrivals. `false`: stop lingering
    /// (closed, past the deadline, or arrivals paused for a `gap`).
    pub(super) fn linger(
        &self,
        out: &mut Vec<Queued>,
        target: usize,
        max: usize,
        deadline: Instant,
        gap: Duration,
    ) -> bool {
        let mut st = lock(&self.state);
        if st.items.is_empty() && st.chores.is_empty() && !st.closed {
            let left = deadline
                .checked_duration_since(Instant::now())
                .unwrap_or(Duration::ZERO);
            if !left.is_zero() {
                // Woken only once the rest of the target is queued; else at the timeout.
                st.wake_at = target.saturating_sub(out.len()).max(1);
                st = self
                    .ready
                    .wait_timeout(st, left.min(gap))
                    .unwrap_or_else(PoisonError::into_inner)
                    .0;
            }
        }
        if st.items.is_empty() {
            st.wake_at = usize::MAX;
            return false;
        }
        self.take_locked(&mut st, out, max);
        !st.closed && st.chores.is_empty() && Instant::now() < deadline
    }
}

impl Poison for Queue {
    fn is_poisoned(&self) -> bool {
        Queue::is_poisoned(self)
    }

    fn mark_damaged(&self, detail: String) {
        Queue::mark_damaged(self, detail);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn damage_found_after_a_commit_failure_keeps_the_first_poison() {
        let q = Queue::new();
        q.poison();
        q.mark_damaged("found later".to_owned());
        assert!(matches!(q.refusal(), AppendError::Poisoned));
        let q = Queue::new();
        q.mark_damaged("first".to_owned());
        q.mark_damaged("second".to_owned());
        assert!(matches!(q.refusal(), AppendError::Damaged { detail } if detail == "first"));
    }
}
