//! Loop configuration.

use notify_types::{LoopId, ProcessNotification, SessionId};

/// The default live capacity: how many accepted, not yet acknowledged notifications a
/// loop holds before it answers `Stopped(Full)`.
pub const DEFAULT_CAPACITY: usize = 64;

/// The default number of consumed command IDs a loop remembers for duplicate detection.
pub const DEFAULT_CONSUMED_MEMORY: usize = 4096;

/// How a loop is set up: its owner, its bounds and the notifications restore hands back.
///
/// ```
/// use notify_loop::LoopConfig;
/// use notify_types::{LoopId, SessionId};
///
/// let config = LoopConfig::new(SessionId::new(), LoopId::new())
///     .capacity(16)
///     .consumed_memory(1024);
/// assert_eq!(config.capacity_limit(), 16);
/// ```
#[derive(Debug, Clone)]
#[must_use]
pub struct LoopConfig {
    pub(crate) session_id: SessionId,
    pub(crate) loop_id: LoopId,
    pub(crate) capacity: usize,
    pub(crate) consumed_memory: usize,
    pub(crate) seed: Vec<ProcessNotification>,
}

impl LoopConfig {
    /// A loop owned by `session_id` with ID `loop_id`, live capacity
    /// [`DEFAULT_CAPACITY`] (64), consumed memory [`DEFAULT_CONSUMED_MEMORY`] (4096) and
    /// nothing seeded.
    pub fn new(session_id: SessionId, loop_id: LoopId) -> Self {
        Self {
            session_id,
            loop_id,
            capacity: DEFAULT_CAPACITY,
            consumed_memory: DEFAULT_CONSUMED_MEMORY,
            seed: Vec::new(),
        }
    }

    /// Sets the live capacity: the most accepted, not yet acknowledged notifications
    /// the loop holds. A delivery that would exceed it answers `Stopped(Full)`. With
    /// `0` every delivery is refused as full (seeded notifications are still held).
    pub fn capacity(mut self, n: usize) -> Self {
        self.capacity = n;
        self
    }

    /// Sets how many consumed (acknowledged) command IDs the loop remembers, so that a
    /// late redelivery of one answers `Duplicate`.
    ///
    /// The memory is first in, first out: acknowledging the `n + 1`th ID forgets the
    /// oldest remembered one. A forgotten ID that is delivered again is **accepted
    /// again** (the loop cannot tell it from a new one); with a journal the session
    /// catches that case first, because the journal remembers every consumption. With
    /// `0` the loop remembers nothing once acknowledged.
    pub fn consumed_memory(mut self, n: usize) -> Self {
        self.consumed_memory = n;
        self
    }

    /// Appends restore-seeded pending notifications, in journal order.
    ///
    /// They join the live set and are received before anything delivered later, in the
    /// given order. Seeding may exceed the capacity (nothing restored is dropped); the
    /// loop then answers `Stopped(Full)` until enough of them are acknowledged. A
    /// seeded notification that is invalid or addressed to another session or loop is
    /// skipped with a warning, and a repeated command ID is held once.
    pub fn seed(mut self, pending: Vec<ProcessNotification>) -> Self {
        self.seed.extend(pending);
        self
    }

    /// The session that owns the loop.
    #[must_use]
    pub fn session_id(&self) -> SessionId {
        self.session_id
    }

    /// The loop's ID.
    #[must_use]
    pub fn loop_id(&self) -> LoopId {
        self.loop_id
    }

    /// The configured live capacity.
    #[must_use]
    pub fn capacity_limit(&self) -> usize {
        self.capacity
    }

    /// The configured number of consumed IDs remembered.
    #[must_use]
    pub fn consumed_memory_limit(&self) -> usize {
        self.consumed_memory
    }

    /// The notifications seeded so far, in order.
    #[must_use]
    pub fn seeded(&self) -> &[ProcessNotification] {
        &self.seed
    }
}
