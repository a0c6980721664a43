//! [`SessionReceived::completion`]: the completion notification a received
//! notification carries, reached in one call.

use notify_types::ProcessCompletionNotification;

use crate::consumer::SessionReceived;

impl SessionReceived {
    /// The completion notification it carries (the DTO the supervisor reported):
    /// `received.completion()` for `received.completion()`.
    ///
    /// ```
    /// # use notify_session::prelude::*;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let session = Session::headless(SessionId::new());
    /// # let loop_id = LoopId::new();
    /// # let mut inbox = session.register_loop(LoopConfig::new(session.id(), loop_id))?;
    /// # let n = ProcessCompletionNotification {
    /// #     command_id: CommandId::new(),
    /// #     session_id: session.id(),
    /// #     loop_id,
    /// #     process_handle: "build-42".into(),
    /// #     state: ProcessLifecycleState::Exited,
    /// #     reason: ProcessTerminalReason::Exited,
    /// # };
    /// # session.notify_process_completion(n).await?;
    /// let received = inbox.recv().await.ok_or("loop exited")?;
    /// assert_eq!(received.completion().process_handle, "build-42");
    /// received.ack().await?;
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn completion(&self) -> &ProcessCompletionNotification {
        self.received.completion()
    }
}
