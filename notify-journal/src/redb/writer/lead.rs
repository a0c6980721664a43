//! Who writes a batch: the writer thread, or an appender that leads.
//!
//! The writer's state ([`Writer`]) sits behind one lock; whoever holds it writes the
//! next batch. A lone appender finds the writer thread asleep and nothing queued: it
//! takes the lead ([`Queue::submit`]), leaves the thread asleep, and commits the batch
//! holding its own append on its own thread, so its append costs no hand-off to the
//! thread and no wake-up back. An append queued while one leads wakes the thread as
//! before (so no append waits on a leader's future not polled yet); the leader takes
//! what is queued into its batch and, once its own append is answered, wakes the
//! thread for what is left. Under load the writer thread batches as before (it spins
//! for returning appenders and lingers for a batch), so no appender leads.
//!
//! The thread sleeps with a timeout while a lead may be taken, so a leader whose future
//! is polled late, never, or leaked delays its record by a few ms at most: the thread
//! takes a lead left pending over (`Queue::wait_for_work`).
//!
//! Where a caller cannot block (a current-thread runtime, no runtime), the lead is
//! handed back to the thread at once. On a multi-thread runtime the leader commits
//! inline, not in [`tokio::task::block_in_place`]: that panics where the thread runs a
//! current-thread runtime or a `LocalSet` (which refuse blocking) while a multi-thread
//! runtime's handle is entered, and tokio offers no way to ask which. A leader only
//! ever blocks for its own batch: it writes only if it gets the writer's lock at once
//! (`try_lock`), else it hands back and awaits its answer.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError, TryLockError};

use redb::Database;
use tokio::runtime::{Handle, RuntimeFlavor};
use tokio::sync::oneshot;

use super::queue::{Queue, Reply};
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
        if let Some(w) = self.writer().take() {
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
            {
                // Never wait for another's batch (the thread's, a chore's): it has
                // what is queued, this append too.
                let mut held = Held::new(self.try_writer()?);
                let w = held.guard.as_mut()?;
                if self.queue.has_work() {
                    if w.last_end.elapsed() > w.tuning.linger_budget().max(w.tuning.gap()) {
                        // As the thread after an idle spell: this is a lone append.
                        w.tuning.last_batch = 0;
                        w.tuning.arrived_during_commit = 0;
                    }
                    w.leading = true;
                    w.turn();
                    w.leading = false;
                }
                held.done();
            }
            match rx.try_recv() {
                Ok(reply) => return Some(reply),
                Err(oneshot::error::TryRecvError::Closed) => return None,
                Err(oneshot::error::TryRecvError::Empty) if !self.queue.has_work() => return None,
                Err(oneshot::error::TryRecvError::Empty) => {}
            }
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
    /// It blocks only under a multi-thread runtime's handle, and inline (see the
    /// module doc for why not in `block_in_place`), for its own batch's commit.
    pub(crate) fn lead(self, rx: &mut oneshot::Receiver<Reply>) -> Option<Reply> {
        let flavor = Handle::try_current().map(|h| h.runtime_flavor());
        match flavor {
            Ok(RuntimeFlavor::MultiThread) => self.0.lead(rx),
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

/// Test-only faults (this thread only): a leader's turn that panics once it has
/// written its batch, and what `Shut` finds when it runs during that panic.
#[cfg(test)]
pub(super) mod fault {
    use std::cell::Cell;

    use super::Lead;

    thread_local! {
        static PANIC_IN_TURN: Cell<bool> = const { Cell::new(false) };
        static AT_SHUT: Cell<Option<bool>> = const { Cell::new(None) };
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
    use std::panic::{AssertUnwindSafe, catch_unwind};
    use std::time::{Duration, Instant};

    use notify_types::{CommandId, JournalRecord, NotificationConsumed, SessionEvent, SessionId};
    use notify_types::{LoopId, Uuid};

    use super::fault;
    use crate::error::AppendError;
    use crate::redb::RedbJournal;
    use crate::redb::options::RedbOptions;

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

    /// Waits (generously) until the writer thread sleeps in a lead window.
    fn until_a_lead_may_be_taken(j: &RedbJournal) {
        let started = Instant::now();
        while !j.inner.queue.lead_may_be_taken() {
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "the writer thread never opened a lead window"
            );
            std::thread::sleep(Duration::from_micros(200));
        }
    }

    #[test]
    fn a_panic_while_leading_takes_the_writer_out_before_the_lock_is_released() {
        let dir = tempfile::tempdir().unwrap();
        let j = RedbJournal::open(dir.path().join("j.redb"), RedbOptions::default()).unwrap();
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .build()
            .unwrap();
        let s = session();
        let mut i = 0;
        let mut panicked = false;
        // The lead is taken only while the thread sleeps in a lead window, which it
        // may close between the check and the append: try until a leader panics.
        for _ in 0..1000 {
            rt.block_on(j.append(s, record(i))).unwrap();
            i += 1;
            until_a_lead_may_be_taken(&j);
            fault::arm();
            let outcome = catch_unwind(AssertUnwindSafe(|| rt.block_on(j.append(s, record(i)))));
            fault::disarm();
            i += 1;
            if outcome.is_err() {
                panicked = true;
                break;
            }
        }
        assert!(panicked, "no append ever led");
        assert_eq!(
            fault::state_at_shut(),
            Some(false),
            "the writer's half-done state was left under the lock after the panic"
        );
        // The queue is shut like after the thread's death: appends are refused.
        let refused = rt.block_on(j.append(s, record(i)));
        assert!(matches!(refused, Err(AppendError::Closed)), "{refused:?}");
    }
}
