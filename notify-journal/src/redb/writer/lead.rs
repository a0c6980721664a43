//! Who writes a batch: the writer thread, or an appender that leads.
//!
//! The writer's state ([`Writer`]) sits behind one lock; whoever holds it writes the
//! next batch. A lone appender finds the writer thread asleep and nothing queued: it
//! takes the lead ([`Queue::submit`]), leaves the thread asleep, and commits the batch
//! holding its own append on its own thread, so its append costs no hand-off to the
//! thread and no wake-up back. An append queued while one leads wakes the thread as
//! before (so no append waits on a leader's future not polled yet); the leader takes
//! what is queued into its batch and, once its own append is answered, wakes the
//! thread for what is left. A leader writes batches only: chores (purge steps,
//! imports, transactional appends and their closures) run on the writer thread. Under load the writer thread batches as before (it spins
//! for returning appenders and lingers for a batch), so no appender leads.
//!
//! The thread sleeps with a timeout while a lead may be taken, so a leader whose future
//! is polled late, never, or leaked delays its record by a few ms at most: the thread
//! takes a lead left pending over (`Queue::wait_for_work`). Woken for work while a
//! lead is taken, it ends that lead too (a leader at work then hands back a lead no
//! longer current, a no-op), so a leaked lead never blocks later ones.
//!
//! Where a caller cannot block (a current-thread runtime, a multi-thread runtime of
//! one worker, no runtime), the lead is handed back to the thread at once. On a multi-thread runtime the leader commits
//! inline, not in [`tokio::task::block_in_place`]: that panics where the thread runs a
//! current-thread runtime or a `LocalSet` (which refuse blocking) while a multi-thread
//! runtime's handle is entered, and tokio offers no way to ask which. A leader only
//! ever blocks for its own batch: it writes only if it gets the writer's lock at once
//! (`try_lock`), else it hands back and awaits its answer.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError, TryLockError};

use redb::Database;
use tokio::runtime::{Handle, RuntimeFlavor};
use tokio::sync::oneshot;

use super::queue::Queue;
use super::requests::Reply;
use super::{Writer, writer};
use crate::redb::census::Census;
use crate::redb::options::RedbOptions;

/// The writer's state and the queue feeding it, shared by the writer thread and the
/// appenders that lead.
pub(crate) struct Lead {
    queue: Arc<Queue>,
    /// `None` once the writer thread has ended (the database handle is released).
    writer: Mutex<Option<Writer>>,
}

impl Lead {
    /// The writer of `db`, fed by `queue`.
    pub(crate) fn new(
        db: Arc<Database>,
        queue: Arc<Queue>,
        options: RedbOptions,
        census: Option<Arc<Census>>,
    ) -> Arc<Self> {
        Arc::new(Self {
            writer: Mutex::new(Some(writer(db, Arc::clone(&queue), options, census))),
            queue,
        })
    }

    fn writer(&self) -> MutexGuard<'_, Option<Writer>> {
        // A panic while writing takes the state out before the lock is released
        // (`Held`), so a poisoned lock holds `None`: a half-done batch is never
        // written on.
        self.writer.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The writer's lock if it is free now; `None` if another holds it.
    fn try_writer(&self) -> Option<MutexGuard<'_, Option<Writer>>> {
        match self.writer.try_lock() {
            Ok(guard) => Some(guard),
            Err(TryLockError::Poisoned(poisoned)) => Some(poisoned.into_inner()),
            Err(TryLockError::WouldBlock) => None,
        }
    }

    /// The writer thread: runs until the queue is closed and drained.
    pub(crate) fn run(&self) {
        let _exit = Shut {
            lead: self,
            always: true,
        };
        loop {
            // The tuning is read and written back around the wait (the lock is not held
            // while the thread sleeps, so an appender can lead meanwhile).
            let (mut tuning, seen) = match self.writer().as_ref() {
                Some(w) => (w.tuning.clone(), w.last_end),
                None => return,
            };
            if !self.queue.wait_for_work(&mut tuning) {
                break;
            }
            let mut held = Held::new(self.writer());
            let Some(w) = held.guard.as_mut() else { return };
            if w.last_end == seen {
                // No leader wrote a batch while the thread waited.
                w.tuning = tuning;
            }
            w.turn();
            held.done();
        }
        if let Some(mut w) = self.writer().take() {
            w.finish();
        }
    }

    /// Writes batches on the caller's thread until `rx` is answered or nothing is
    /// left queued. `None`: not answered here (the writer thread has it, is writing,
    /// or has ended).
    fn lead(&self, rx: &mut oneshot::Receiver<Reply>) -> Option<Reply> {
        let _shut = Shut {
            lead: self,
            always: false,
        };
        loop {
            // Its answer first: a leader polled late may find its append written by
            // the thread (which took the lead over); it then writes no other batch.
            match rx.try_recv() {
                Ok(reply) => return Some(reply),
                Err(oneshot::error::TryRecvError::Closed) => return None,
                // Its append is in a batch another is writing: await it.
                Err(oneshot::error::TryRecvError::Empty) if self.queue.len() == 0 => {
                    return None;
                }
                Err(oneshot::error::TryRecvError::Empty) => {}
            }
            // Never wait for another's batch (the thread's, a chore's): it has what is
            // queued, this append too.
            let mut held = Held::new(self.try_writer()?);
            let w = held.guard.as_mut()?;
            if w.last_end.elapsed() > w.tuning.linger_budget().max(w.tuning.gap()) {
                // As the thread after an idle spell: this is a lone append.
                w.tuning.last_batch = 0;
                w.tuning.arrived_during_commit = 0;
            }
            // A batch only: chores are the thread's (`Writer::turn`).
            w.leading = true;
            w.turn();
            w.leading = false;
            held.done();
        }
    }
}

/// A lead taken by [`Queue::submit`] (the lead's number): dropped, it is handed back
/// (the writer thread is woken for what is left queued).
pub(crate) struct Claim(pub(crate) Arc<Lead>, pub(crate) u64);

impl Claim {
    /// Leads: writes the batch holding the append answered through `rx` on this
    /// thread if it may block, and answers it. `None`: the caller awaits `rx`.
    ///
    /// It blocks only under the handle of a multi-thread runtime of two workers or
    /// more, and inline (see the module doc for why not in `block_in_place`), for its
    /// own batch's commit. With one worker, blocking it would stall the whole runtime
    /// (its timers too) for the commit: the lead is handed back.
    pub(crate) fn lead(self, rx: &mut oneshot::Receiver<Reply>) -> Option<Reply> {
        match Handle::try_current() {
            Ok(h)
                if h.runtime_flavor() == RuntimeFlavor::MultiThread
                    && h.metrics().num_workers() > 1 =>
            {
                self.0.lead(rx)
            }
            _ => None,
        }
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        self.0.queue.release_lead(self.1);
    }
}

/// The writer's lock held for one turn: unless [`Held::done`] is called (a panic
/// while writing), the state is taken out and dropped while the lock is still held,
/// so no one (the thread, another leader) locks it afterwards and writes on with a
/// half-done batch (`Shut` then answers the queue).
struct Held<'a> {
    guard: MutexGuard<'a, Option<Writer>>,
    done: bool,
}

impl<'a> Held<'a> {
    fn new(guard: MutexGuard<'a, Option<Writer>>) -> Self {
        Self { guard, done: false }
    }

    /// The turn ended normally: the lock is released with the state in place.
    fn done(mut self) {
        self.done = true;
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        if !self.done {
            drop(self.guard.take());
        }
    }
}

/// However the writer thread ends, and when a leading appender panics while writing,
/// the queue is closed, every request still in it is answered, so no appender waits
/// forever, and the database handle is released.
struct Shut<'a> {
    lead: &'a Lead,
    /// Shut on every exit (the thread), not only on a panic (a leader).
    always: bool,
}

impl Drop for Shut<'_> {
    fn drop(&mut self) {
        #[cfg(test)]
        fault::shut(self.lead);
        if self.always || std::thread::panicking() {
            self.lead.queue.close();
            self.lead.queue.shut();
            drop(self.lead.writer().take());
        }
    }
}

/// Test-only faults and counts (this thread only): a leader's turn that panics once
/// it has written its batch, what `Shut` finds when it runs during that panic, and the
/// batches leaders wrote on this thread.
#[cfg(test)]
pub(super) mod fault {
    use std::cell::Cell;

    use super::Lead;

    thread_local! {
        static PANIC_IN_TURN: Cell<bool> = const { Cell::new(false) };
        static AT_SHUT: Cell<Option<bool>> = const { Cell::new(None) };
        static LED_BATCHES: Cell<u64> = const { Cell::new(0) };
    }

    /// Batches written by leading turns on this thread since the last call.
    pub(crate) fn take_led_batches() -> u64 {
        LED_BATCHES.with(|n| n.replace(0))
    }

    /// The next leading turn on this thread panics (once).
    pub(crate) fn arm() {
        PANIC_IN_TURN.with(|p| p.set(true));
        AT_SHUT.with(|s| s.set(None));
    }

    /// Disarms a fault that did not fire.
    pub(crate) fn disarm() {
        PANIC_IN_TURN.with(|p| p.set(false));
    }

    /// Whether the writer's state was still in place (`Some(true)`) when `Shut` ran
    /// during the panic; `None` if it did not run during one.
    pub(crate) fn state_at_shut() -> Option<bool> {
        AT_SHUT.with(Cell::get)
    }

    /// Called in a leader's turn, after the batch is written, before it is answered.
    pub(crate) fn turn() {
        LED_BATCHES.with(|n| n.set(n.get() + 1));
        if PANIC_IN_TURN.with(|p| p.replace(false)) {
            panic!("fault injected: a leading turn panics");
        }
    }

    /// Called as `Shut` begins.
    pub(super) fn shut(lead: &Lead) {
        if std::thread::panicking() {
            let present = lead.writer().is_some();
            AT_SHUT.with(|s| s.set(Some(present)));
        }
    }
}

#[cfg(test)]
mod tests {
    use std::future::Future;
    use std::panic::{AssertUnwindSafe, catch_unwind};
    use std::sync::{Arc, Mutex};
    use std::time::{Duration, Instant};

    use notify_types::{CommandId, JournalRecord, NotificationConsumed, SessionEvent, SessionId};
    use notify_types::{LoopId, Uuid};
    use tokio::runtime::Runtime;

    use super::fault;
    use crate::RedbJournal;
    use crate::backend::AppendOutcome;
    use crate::error::AppendError;
    use crate::redb::options::RedbOptions;

    /// Generous: what these tests wait for happens within ms (or 250 ms, `LEAD_IDLE`).
    const PATIENCE: Duration = Duration::from_secs(10);

    fn record(i: u128) -> JournalRecord {
        JournalRecord::from(SessionEvent::NotificationConsumed(
            NotificationConsumed::new(
                session(),
                LoopId::from_uuid(Uuid::from_u128(7)),
                CommandId::from_uuid(Uuid::from_u128(1000 + i)),
            ),
        ))
    }

    fn session() -> SessionId {
        SessionId::from_uuid(Uuid::from_u128(0x5e55))
    }

    fn runtime(workers: usize) -> Runtime {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(workers)
            .build()
            .unwrap()
    }

    fn open() -> (tempfile::TempDir, RedbJournal) {
        let dir = tempfile::tempdir().unwrap();
        let j = RedbJournal::open(dir.path().join("j.redb"), RedbOptions::default()).unwrap();
        (dir, j)
    }

    /// Waits (up to [`PATIENCE`]) until `done` holds; `what` names it if it never does.
    fn until(what: &str, mut done: impl FnMut() -> bool) {
        let started = Instant::now();
        while !done() {
            assert!(started.elapsed() < PATIENCE, "{what}");
            std::thread::sleep(Duration::from_micros(200));
        }
    }

    /// Waits until the writer thread sleeps in a lead window.
    fn until_a_lead_may_be_taken(j: &RedbJournal) {
        until("the writer thread never opened a lead window", || {
            j.queue_for_tests().lead_may_be_taken()
        });
    }

    /// Waits until `n` appends in all are committed, and answered (the writer's lock
    /// is taken once the commit is counted: whoever counted it has answered it then).
    fn until_committed(j: &RedbJournal, n: u64) {
        until("the appends were never committed", || {
            j.commit_stats().appends >= n
        });
        drop(j.lead_for_tests().writer());
    }

    /// An append of record `*i` (then the next) that took the lead (asserted: `submit`
    /// granted it), not polled yet. The thread may close its window between the look
    /// and the append, or sleep with it closed: then that append (it wakes the thread)
    /// is awaited and the next one tried.
    fn take_a_lead(
        j: &RedbJournal,
        rt: &Runtime,
        i: &mut u128,
    ) -> impl Future<Output = Result<AppendOutcome, AppendError>> + Send + 'static {
        for _ in 0..1000 {
            until(
                "the writer thread never fell asleep with no lead taken",
                || {
                    j.queue_for_tests().lead_may_be_taken()
                        || j.queue_for_tests().sleeps_without_window()
                },
            );
            let (before, _) = j.queue_for_tests().leads();
            let append = {
                let _entered = rt.enter();
                j.append(session(), record(*i))
            };
            *i += 1;
            if j.queue_for_tests().leads() == (before + 1, true) {
                return append;
            }
            rt.block_on(append).unwrap();
        }
        panic!("no append ever took the lead");
    }

    #[test]
    fn an_append_future_held_unpolled_is_committed_by_the_writer_thread() {
        let (_dir, j) = open();
        let rt = runtime(2);
        let mut i = 0;
        rt.block_on(j.append(session(), record(i))).unwrap();
        i += 1;
        let held = take_a_lead(&j, &rt, &mut i);
        // Nothing else is appended: the thread takes the pending lead over.
        until_committed(&j, i as u64);
        let seq = i as u64;
        // The journal goes on as before: a lone append leads again; queued, not polled
        // yet, it is the next batch. The first leader, polled at last, finds its answer
        // and writes nothing more.
        let next = take_a_lead(&j, &rt, &mut i);
        fault::take_led_batches();
        let outcome = rt.block_on(held).unwrap();
        assert_eq!(
            fault::take_led_batches(),
            0,
            "the leader polled after the takeover wrote the next batch before finding its answer"
        );
        assert_eq!((outcome.seq, outcome.appended), (seq, true));
        assert_eq!(rt.block_on(next).unwrap().seq, i as u64);
    }

    #[test]
    fn an_append_future_forgotten_is_committed_by_the_writer_thread() {
        let (_dir, j) = open();
        let rt = runtime(2);
        let mut i = 0;
        rt.block_on(j.append(session(), record(i))).unwrap();
        i += 1;
        // Leaked: never polled, never dropped (its lead is never handed back).
        std::mem::forget(take_a_lead(&j, &rt, &mut i));
        until_committed(&j, i as u64);
        // A lead leaked for good does not stop later leads.
        let next = take_a_lead(&j, &rt, &mut i);
        assert_eq!(rt.block_on(next).unwrap().seq, i as u64);
    }

    #[test]
    fn a_leaked_lead_written_for_another_append_ends_and_the_window_closes() {
        let (_dir, j) = open();
        let rt = runtime(2);
        let mut i = 0;
        rt.block_on(j.append(session(), record(i))).unwrap();
        i += 1;
        std::mem::forget(take_a_lead(&j, &rt, &mut i));
        // Queued behind the lead, this append wakes the thread, which writes both.
        rt.block_on(j.append(session(), record(i))).unwrap();
        i += 1;
        // Leads are granted again, and with none taken the window closes.
        until_a_lead_may_be_taken(&j);
        until("the lead window never closed", || {
            j.queue_for_tests().sleeps_without_window()
        });
        let next = take_a_lead(&j, &rt, &mut i);
        assert_eq!(rt.block_on(next).unwrap().seq, i as u64);
    }

    #[test]
    fn after_a_batch_under_load_the_thread_sleeps_with_no_lead_window() {
        let (_dir, j) = open();
        let rt = runtime(2);
        let mut i = 0;
        rt.block_on(j.append(session(), record(i))).unwrap();
        i += 1;
        // Groups (they never lead) queued while the writer's lock is held: the thread
        // writes them as one batch of `commit_siblings` (4), a batch under load.
        let mut groups = Vec::new();
        {
            let _held = j.lead_for_tests().writer();
            for _ in 0..4 {
                groups.push(j.append_all(session(), vec![record(i)], None));
                i += 1;
            }
        }
        for group in groups {
            rt.block_on(group).unwrap();
        }
        until("the writer thread never fell asleep", || {
            j.queue_for_tests().asleep()
        });
        assert!(
            j.queue_for_tests().sleeps_without_window(),
            "the thread opened a lead window after a batch under load"
        );
    }

    #[test]
    fn a_transactional_append_queued_behind_a_lead_runs_on_the_writer_thread() {
        let (_dir, j) = open();
        let rt = runtime(2);
        let ran_on = Arc::new(Mutex::new(Vec::new()));
        let mut i = 0;
        rt.block_on(j.append(session(), record(i))).unwrap();
        i += 1;
        for _ in 0..20 {
            let leader = take_a_lead(&j, &rt, &mut i);
            let names = Arc::clone(&ran_on);
            let txn = j.append_with(session(), record(i), move |_tables| {
                let name = std::thread::current().name().map(str::to_owned);
                names.lock().unwrap().push(name);
                Ok(())
            });
            i += 1;
            // Polled now, with the chore queued: the leader writes its batch only.
            rt.block_on(leader).unwrap();
            rt.block_on(txn).unwrap();
        }
        let ran_on = ran_on.lock().unwrap();
        assert!(!ran_on.is_empty());
        for name in ran_on.iter() {
            assert_eq!(
                name.as_deref(),
                Some("notify-journal-writer"),
                "the closure ran off the writer thread"
            );
        }
    }

    #[test]
    fn a_runtime_of_one_worker_hands_the_lead_back() {
        let (_dir, j) = open();
        let rt = runtime(1);
        let mut i = 0;
        rt.block_on(j.append(session(), record(i))).unwrap();
        i += 1;
        let leader = take_a_lead(&j, &rt, &mut i);
        fault::take_led_batches();
        rt.block_on(leader).unwrap();
        assert_eq!(
            fault::take_led_batches(),
            0,
            "a lead taken under a runtime of one worker wrote its batch inline"
        );
    }

    #[test]
    fn a_panic_while_leading_takes_the_writer_out_before_the_lock_is_released() {
        let (_dir, j) = open();
        let rt = runtime(2);
        let mut i = 0;
        rt.block_on(j.append(session(), record(i))).unwrap();
        i += 1;
        let leader = take_a_lead(&j, &rt, &mut i);
        fault::arm();
        let outcome = catch_unwind(AssertUnwindSafe(|| rt.block_on(leader)));
        fault::disarm();
        assert!(outcome.is_err(), "the leader did not panic");
        assert_eq!(
            fault::state_at_shut(),
            Some(false),
            "the writer's half-done state was left under the lock after the panic"
        );
        // The queue is shut like after the thread's death: appends are refused.
        let refused = rt.block_on(j.append(session(), record(i)));
        assert!(matches!(refused, Err(AppendError::Closed)), "{refused:?}");
    }
}
