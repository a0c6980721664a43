//! A refused delivery (invalid or misaddressed) logs exactly one warning; the other
//! answers log none. Own test binary: it installs a thread-local subscriber.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use notify_loop::{Delivery, LoopConfig, spawn};
use notify_types::{
    CommandId, LoopId, ProcessCompletionNotification, ProcessLifecycleState, ProcessNotification,
    ProcessTerminalReason, SessionId, StopCause,
};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Metadata, Subscriber};

/// Counts `WARN` events.
struct WarnCounter(Arc<AtomicUsize>);

impl Subscriber for WarnCounter {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &Attributes<'_>) -> Id {
        Id::from_u64(1)
    }
    fn record(&self, _: &Id, _: &Record<'_>) {}
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, event: &Event<'_>) {
        if *event.metadata().level() == Level::WARN {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}

// Current-thread runtime: deliveries are decided on this thread, under the subscriber.
#[tokio::test(start_paused = true)]
async fn refusals_warn_once_each() {
    let warnings = Arc::new(AtomicUsize::new(0));
    let _guard = tracing::subscriber::set_default(WarnCounter(Arc::clone(&warnings)));

    let (session_id, loop_id) = (SessionId::new(), LoopId::new());
    let good = ProcessCompletionNotification {
        command_id: CommandId::new(),
        session_id,
        loop_id,
        process_handle: "build-42".into(),
        state: ProcessLifecycleState::Exited,
        reason: ProcessTerminalReason::Exited,
    };
    let invalid = ProcessCompletionNotification {
        command_id: CommandId::new(),
        state: ProcessLifecycleState::Running,
        ..good.clone()
    };
    let other_session = ProcessCompletionNotification {
        command_id: CommandId::new(),
        session_id: SessionId::new(),
        ..good.clone()
    };
    let other_loop = ProcessCompletionNotification {
        command_id: CommandId::new(),
        loop_id: LoopId::new(),
        ..good.clone()
    };
    let seeded_bad = ProcessCompletionNotification {
        command_id: CommandId::new(),
        process_handle: String::new(),
        ..good.clone()
    };

    let config = LoopConfig::new(session_id, loop_id)
        .capacity(1)
        .seed(vec![seeded_bad.into()]);
    let (handle, _consumer) = spawn(config);
    assert_eq!(warnings.load(Ordering::SeqCst), 1, "skipped seed warns");

    let refused = Delivery::Stopped(StopCause::Refused);
    let cases: [(ProcessNotification, Delivery, usize); 6] = [
        (good.clone().into(), Delivery::Accepted, 1),
        (good.clone().into(), Delivery::Duplicate, 1),
        (
            ProcessCompletionNotification {
                command_id: CommandId::new(),
                ..good.clone()
            }
            .into(),
            Delivery::Stopped(StopCause::Full),
            1,
        ),
        (invalid.into(), refused, 2),
        (other_session.into(), refused, 3),
        (other_loop.into(), refused, 4),
    ];
    for (command, want, warned) in cases {
        assert_eq!(handle.deliver(command).await, want);
        assert_eq!(warnings.load(Ordering::SeqCst), warned, "after {want:?}");
    }
}
