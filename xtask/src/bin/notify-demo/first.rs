//! The first session, which parts 1 to 3 run on, and the completions both the parent
//! and the child send.

use std::collections::BTreeMap;
use std::path::Path;

use notify_session::prelude::*;

/// The session and its two loops, as the parent and the child know them.
#[derive(Clone, Copy)]
pub(crate) struct Ids {
    pub(crate) session_id: SessionId,
    pub(crate) loop_a: LoopId,
    pub(crate) loop_b: LoopId,
}

/// The first session over the journal: parts 1 to 3 run on it, part 4 closes it.
pub(crate) struct FirstSession {
    pub(crate) journal: RedbJournal,
    pub(crate) ids: Ids,
    pub(crate) session: Session,
    pub(crate) consumer_a: SessionConsumer,
    pub(crate) consumer_b: SessionConsumer,
    pub(crate) names: BTreeMap<LoopId, &'static str>,
}

impl FirstSession {
    /// Opens the journal and registers loop-a (capacity 64) and loop-b (capacity 2).
    pub(crate) fn open(path: &Path) -> anyhow::Result<Self> {
        let journal = RedbJournal::open(path, RedbOptions::default())?;
        let session_id = SessionId::new();
        let session = Session::new(session_id, journal.clone());
        let loop_a = LoopId::new();
        let loop_b = LoopId::new();
        let consumer_a = session.register_loop(LoopConfig::new(session_id, loop_a))?;
        let consumer_b = session.register_loop(LoopConfig::new(session_id, loop_b).capacity(2))?;
        let names = BTreeMap::from([(loop_a, "loop-a"), (loop_b, "loop-b")]);
        println!("session {session_id}; loop-a (capacity 64), loop-b (capacity 2)");
        Ok(Self {
            journal,
            ids: Ids {
                session_id,
                loop_a,
                loop_b,
            },
            session,
            consumer_a,
            consumer_b,
            names,
        })
    }
}

/// A completion of an exited process, under a fresh command ID.
pub(crate) fn completion(
    session_id: SessionId,
    loop_id: LoopId,
    handle: &str,
) -> ProcessCompletionNotification {
    ProcessCompletionNotification {
        command_id: CommandId::new(),
        session_id,
        loop_id,
        process_handle: handle.into(),
        state: ProcessLifecycleState::Exited,
        reason: ProcessTerminalReason::Exited,
    }
}
