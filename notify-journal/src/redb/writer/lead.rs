//! Who writes a batch: the writer thread, or an appender that leads.
//!
//! The writer's state ([`Writer`]) sits behind one lock; whoever holds it writes the
//! next batch. A lone appender finds the writer thread asleep and nothing queued: it
//! takes the lead ([`Queue::submit`]), leaves the thread asleep, and commits the batch
//! holding its own append on its own thread (for an async caller, in
//! [`tokio::task::block_in_place`]), so its append costs no hand-off to the thread and
//! no wake-up back. An append queued while one leads wakes the thread as before (so no
//! append waits on a leader's future not polled yet); the leader takes what is queued
//! into its batch and, once its own append is answered, wakes the thread for what is
//! left. Under load the writer thread batches as before (it spins
//! for returning appenders and lingers for a batch), so no appender leads.
//!
//! Where a caller cannot block (a current-thread runtime, no runtime), the lead is
//! handed back to the thread at once.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

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
        // A panic while writing shuts the queue (`Shut`), so the state is not used to
        // write again after one.
        self.writer.lock().unwrap_or_else(PoisonError::into_inner)
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
            let mut guard = self.writer();
            let Some(w) = guard.as_mut() else { return };
            if w.last_end == seen {
                // No leader wrote a batch while the thread waited.
                w.tuning = tuning;
            }
            w.turn();
        }
        if let Some(w) = self.writer().take() {
            w.finish();
        }
    }

    /// Writes batches on the caller's thread until `rx` is answered or nothing is
    /// left queued. `None`: not answered here (the writer thread has it, or has ended).
    fn lead(&self, rx: &mut oneshot::Receiver<Reply>) -> Option<Reply> {
        let _shut = Shut {
            lead: self,
            always: false,
        };
        loop {
            {
                let mut guard = self.writer();
                let w = guard.as_mut()?;
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

/// A lead taken by [`Queue::submit`]: dropped, it is handed back (the writer thread
/// is woken for what is left queued).
pub(crate) struct Claim(pub(crate) Arc<Lead>);

impl Claim {
    /// Leads: writes the batch holding the append answered through `rx` on this
    /// thread if it may block, and answers it. `None`: the caller awaits `rx`.
    pub(crate) fn lead(self, rx: &mut oneshot::Receiver<Reply>) -> Option<Reply> {
        let flavor = Handle::try_current().map(|h| h.runtime_flavor());
        match flavor {
            Ok(RuntimeFlavor::MultiThread) => tokio::task::block_in_place(|| self.0.lead(rx)),
            _ => None,
        }
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        self.0.queue.release_lead();
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
        if self.always || std::thread::panicking() {
            self.lead.queue.close();
            self.lead.queue.shut();
            drop(self.lead.writer().take());
        }
    }
}
