//! Session fixtures: a session with N native loops in one call, a fake foreign loop,
//! restore-and-re-register after a simulated crash, and consumer helpers.
//!
//! Every builder spawns loop tasks, so call it inside a tokio runtime (as for
//! [`tokio::spawn`]).
//!
//! ```
//! use notify_testkit::fixture::{self, SessionFixture};
//! use notify_types::Notified;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let mut fx = SessionFixture::headless(2)?;
//! let n = fx.notification(1);
//! assert_eq!(fx.session.notify_process_completion(n.clone()).await?, Notified::Accepted);
//!
//! let acked = fixture::ack_next(&mut fx.consumers[1], 1).await?;
//! assert_eq!(acked[0].notification(), &n);
//!
//! let foreign = fixture::foreign_loop(&fx.session)?;
//! assert!(fx.session.loops().contains(&foreign));
//! # Ok(())
//! # }
//! ```

use std::sync::Arc;

use notify_journal::JournalBackend;
use notify_loop::LoopConfig;
use notify_session::{
    AckError, RegisterError, RestoreError, RestoreReport, Session, SessionConsumer,
    SessionReceived, restore,
};
use notify_types::{LoopId, ProcessCompletionNotification, ProcessNotification, SessionId};

use crate::sample;

/// Why a fixture could not be built or a consumer helper stopped early.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum FixtureError {
    /// Registering a loop failed.
    #[error("registering a loop failed")]
    Register(#[source] RegisterError),
    /// Restoring the session from its journal failed.
    #[error("restoring the session failed")]
    Restore(#[source] RestoreError),
    /// Acknowledging a received notification failed.
    #[error("acknowledging a notification failed")]
    Ack(#[source] AckError),
    /// The loop exited before the expected number of notifications arrived.
    #[error("loop {loop_id} exited after {received} of {wanted} notifications")]
    LoopExited {
        /// The loop.
        loop_id: LoopId,
        /// How many arrived before it exited.
        received: usize,
        /// How many were asked for.
        wanted: usize,
    },
}

impl From<RegisterError> for FixtureError {
    fn from(e: RegisterError) -> Self {
        Self::Register(e)
    }
}

impl From<AckError> for FixtureError {
    fn from(e: AckError) -> Self {
        Self::Ack(e)
    }
}

/// A session with native loops registered, and their consumers.
///
/// `loop_ids[i]` is the loop that `consumers[i]` drains.
#[derive(Debug)]
pub struct SessionFixture {
    /// The session.
    pub session: Session,
    /// The native loops, in registration order.
    pub loop_ids: Vec<LoopId>,
    /// One consumer per loop, in the same order as `loop_ids`.
    pub consumers: Vec<SessionConsumer>,
}

impl SessionFixture {
    /// A session over `journal` with `loops` native loops of default configuration.
    ///
    /// # Errors
    ///
    /// [`FixtureError::Register`] if a loop could not be registered (not expected for
    /// fresh IDs).
    pub fn new(journal: Arc<dyn JournalBackend>, loops: usize) -> Result<Self, FixtureError> {
        FixtureBuilder::new(loops).journal(journal).build()
    }

    /// A headless session (no journal) with `loops` native loops of default
    /// configuration.
    ///
    /// # Errors
    ///
    /// As [`new`](Self::new).
    pub fn headless(loops: usize) -> Result<Self, FixtureError> {
        FixtureBuilder::new(loops).build()
    }

    /// This session's ID.
    #[must_use]
    pub fn session_id(&self) -> SessionId {
        self.session.id()
    }

    /// A valid notification (fresh command ID) owned by this session and addressed to
    /// loop `index`, or to a fresh unregistered loop ID if `index` is out of range.
    #[must_use]
    pub fn notification(&self, index: usize) -> ProcessCompletionNotification {
        let loop_id = self
            .loop_ids
            .get(index)
            .copied()
            .unwrap_or_else(LoopId::new);
        sample::notification(self.session.id(), loop_id)
    }

    /// The consumer of `loop_id`, if it is one of this fixture's loops.
    pub fn consumer(&mut self, loop_id: LoopId) -> Option<&mut SessionConsumer> {
        let index = self.loop_ids.iter().position(|&l| l == loop_id)?;
        self.consumers.get_mut(index)
    }
}

/// Builds a [`SessionFixture`]: session ID, journal, loop IDs and loop bounds, and
/// optionally the pending notifications of a [`RestoreReport`] to seed the loops with.
#[derive(Clone)]
#[must_use]
pub struct FixtureBuilder {
    session_id: SessionId,
    journal: Option<Arc<dyn JournalBackend>>,
    loop_ids: Vec<LoopId>,
    capacity: Option<usize>,
    consumed_memory: Option<usize>,
    report: Option<RestoreReport>,
}

impl std::fmt::Debug for FixtureBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FixtureBuilder")
            .field("session_id", &self.session_id)
            .field("headless", &self.journal.is_none())
            .field("loop_ids", &self.loop_ids)
            .field("capacity", &self.capacity)
            .field("consumed_memory", &self.consumed_memory)
            .finish_non_exhaustive()
    }
}

impl FixtureBuilder {
    /// A headless session with a fresh ID and `loops` native loops with fresh IDs and
    /// the default loop configuration.
    pub fn new(loops: usize) -> Self {
        Self {
            session_id: SessionId::new(),
            journal: None,
            loop_ids: (0..loops).map(|_| LoopId::new()).collect(),
            capacity: None,
            consumed_memory: None,
            report: None,
        }
    }

    /// Uses this session ID (for example, the one of a session being restored).
    pub fn session_id(mut self, id: SessionId) -> Self {
        self.session_id = id;
        self
    }

    /// Journals in `journal` instead of running headless.
    pub fn journal(mut self, journal: Arc<dyn JournalBackend>) -> Self {
        self.journal = Some(journal);
        self
    }

    /// Uses these loop IDs (replacing the fresh ones).
    pub fn loop_ids(mut self, ids: Vec<LoopId>) -> Self {
        self.loop_ids = ids;
        self
    }

    /// Sets every loop's live capacity (see [`LoopConfig::capacity`]).
    pub fn capacity(mut self, n: usize) -> Self {
        self.capacity = Some(n);
        self
    }

    /// Sets every loop's consumed-ID memory (see [`LoopConfig::consumed_memory`]).
    pub fn consumed_memory(mut self, n: usize) -> Self {
        self.consumed_memory = Some(n);
        self
    }

    /// Seeds each loop with its pending notifications from `report`, as a restarted
    /// process does after [`restore`]. Pending notifications of loops not in this
    /// fixture are ignored.
    pub fn seed_from(mut self, report: RestoreReport) -> Self {
        self.report = Some(report);
        self
    }

    /// The loop configuration `build` uses for `loop_id` (seeded if a report was given).
    fn config(&mut self, loop_id: LoopId) -> LoopConfig {
        let mut config = LoopConfig::new(self.session_id, loop_id);
        if let Some(n) = self.capacity {
            config = config.capacity(n);
        }
        if let Some(n) = self.consumed_memory {
            config = config.consumed_memory(n);
        }
        if let Some(report) = &mut self.report {
            config = config.seed(report.take_pending(loop_id));
        }
        config
    }

    /// Creates the session and registers every loop.
    ///
    /// # Errors
    ///
    /// [`FixtureError::Register`] if a loop ID repeats.
    ///
    /// # Panics
    ///
    /// Like [`tokio::spawn`], when called outside a tokio runtime.
    pub fn build(mut self) -> Result<SessionFixture, FixtureError> {
        let session = match self.journal.take() {
            Some(journal) => Session::new(self.session_id, journal),
            None => Session::headless(self.session_id),
        };
        let loop_ids = std::mem::take(&mut self.loop_ids);
        let mut consumers = Vec::with_capacity(loop_ids.len());
        for &loop_id in &loop_ids {
            let config = self.config(loop_id);
            consumers.push(session.register_loop(config)?);
        }
        Ok(SessionFixture {
            session,
            loop_ids,
            consumers,
        })
    }
}

/// Restarts a session after a (simulated) crash: restores `session_id` from
/// `journal`, then builds a session over it with `builder`'s loops, each seeded with
/// its pending notifications. Returns the fixture and the full report (pending
/// included), for the test to compare with what it expects.
///
/// ```
/// use std::sync::Arc;
/// use notify_testkit::{MemoryJournal, fixture::{self, FixtureBuilder, SessionFixture}};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let journal = MemoryJournal::new();
/// let fx = SessionFixture::new(Arc::new(journal.clone()), 1)?;
/// let n = fx.notification(0);
/// fx.session.notify_process_completion(n.clone()).await?;
/// let (session_id, loop_ids) = (fx.session_id(), fx.loop_ids.clone());
/// drop(fx); // crash: nothing acknowledged
///
/// let builder = FixtureBuilder::new(0).loop_ids(loop_ids);
/// let (mut fx, report) = fixture::restart(session_id, Arc::new(journal), builder).await?;
/// assert_eq!(report.pending_count(), 1);
/// let again = fixture::ack_next(&mut fx.consumers[0], 1).await?;
/// assert_eq!(again[0].notification(), &n);
/// # Ok(())
/// # }
/// ```
///
/// # Errors
///
/// [`FixtureError::Restore`] if the journal cannot be replayed;
/// [`FixtureError::Register`] as for [`FixtureBuilder::build`].
pub async fn restart(
    session_id: SessionId,
    journal: Arc<dyn JournalBackend>,
    builder: FixtureBuilder,
) -> Result<(SessionFixture, RestoreReport), FixtureError> {
    let report = restore(session_id, journal.as_ref())
        .await
        .map_err(FixtureError::Restore)?;
    let fixture = builder
        .session_id(session_id)
        .journal(journal)
        .seed_from(report.clone())
        .build()?;
    Ok((fixture, report))
}

/// Registers a fake loop of a foreign engine in `session` and returns its fresh ID.
/// Notifications for it answer `Unsupported`.
///
/// # Errors
///
/// [`RegisterError`] (not expected: the ID is fresh).
pub fn foreign_loop(session: &Session) -> Result<LoopId, RegisterError> {
    let loop_id = LoopId::new();
    session.register_foreign_loop(loop_id)?;
    Ok(loop_id)
}

/// Receives the next `n` notifications without acknowledging them. Dropping a
/// returned value hands it back to the loop.
///
/// Waits until `n` have arrived: ask only for what the loop holds.
///
/// # Errors
///
/// [`FixtureError::LoopExited`] if the loop exits first.
///
/// # Cancel safety
///
/// Cancel safe: notifications already received are dropped and go back to the loop.
pub async fn recv_n(
    consumer: &mut SessionConsumer,
    n: usize,
) -> Result<Vec<SessionReceived>, FixtureError> {
    let mut out = Vec::with_capacity(n);
    while out.len() < n {
        match consumer.recv().await {
            Some(received) => out.push(received),
            None => {
                return Err(FixtureError::LoopExited {
                    loop_id: consumer.loop_id(),
                    received: out.len(),
                    wanted: n,
                });
            }
        }
    }
    Ok(out)
}

/// Receives the next `n` notifications, acknowledging each, and returns them in the
/// order received.
///
/// Waits until `n` have arrived: ask only for what the loop holds.
///
/// # Errors
///
/// [`FixtureError::LoopExited`] if the loop exits first; [`FixtureError::Ack`] if an
/// acknowledgement fails (that notification is handed back to the loop).
///
/// # Cancel safety
///
/// Not cancel safe: notifications acknowledged before the cancellation are not
/// returned.
pub async fn ack_next(
    consumer: &mut SessionConsumer,
    n: usize,
) -> Result<Vec<ProcessNotification>, FixtureError> {
    let mut out = Vec::with_capacity(n);
    while out.len() < n {
        let Some(received) = consumer.recv().await else {
            return Err(FixtureError::LoopExited {
                loop_id: consumer.loop_id(),
                received: out.len(),
                wanted: n,
            });
        };
        let command = received.notification().clone();
        received.ack().await?;
        out.push(command);
    }
    Ok(out)
}

/// Receives and acknowledges everything until the loop has exited, and returns what
/// it acknowledged, in order.
///
/// A loop exits only once it stops accepting (after [`Session::shutdown_loop`] or
/// [`Session::remove_loop`]) and every live notification is acknowledged, so shut the
/// loop down first: on a loop that still accepts, this waits for ever.
///
/// # Errors
///
/// [`FixtureError::Ack`] if an acknowledgement fails.
///
/// # Cancel safety
///
/// Not cancel safe: notifications acknowledged before the cancellation are not
/// returned.
pub async fn drain_acking(
    consumer: &mut SessionConsumer,
) -> Result<Vec<ProcessNotification>, FixtureError> {
    let mut out = Vec::new();
    while let Some(received) = consumer.recv().await {
        let command = received.notification().clone();
        received.ack().await?;
        out.push(command);
    }
    Ok(out)
}
