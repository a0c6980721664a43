//! Helpers shared by this crate's integration tests.

use notify_loop::LoopConfig;
use notify_types::{
    CommandId, LoopId, ProcessCompletionNotification, ProcessLifecycleState, ProcessNotification,
    ProcessTerminalReason, SessionId,
};

/// A loop's owner: makes its config and notifications addressed to it.
pub(crate) struct Owner {
    pub(crate) session_id: SessionId,
    pub(crate) loop_id: LoopId,
}

impl Owner {
    /// A fresh session and loop.
    pub(crate) fn new() -> Self {
        Self {
            session_id: SessionId::new(),
            loop_id: LoopId::new(),
        }
    }

    /// The loop's default config.
    pub(crate) fn config(&self) -> LoopConfig {
        LoopConfig::new(self.session_id, self.loop_id)
    }

    /// A valid notification for this loop with a fresh command ID.
    pub(crate) fn note(&self) -> ProcessNotification {
        ProcessNotification::new(ProcessCompletionNotification {
            command_id: CommandId::new(),
            session_id: self.session_id,
            loop_id: self.loop_id,
            process_handle: "build-42".into(),
            state: ProcessLifecycleState::Exited,
            reason: ProcessTerminalReason::Exited,
        })
    }

    /// `n` notifications with fresh command IDs.
    pub(crate) fn notes(&self, n: usize) -> Vec<ProcessNotification> {
        (0..n).map(|_| self.note()).collect()
    }
}
