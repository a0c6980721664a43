//! What every check is written with: the failing-check context and record builders.

use std::fmt::{Debug, Display};
use std::future::poll_fn;
use std::task::Poll;

use notify_journal::{AppendError, AppendOutcome, BoxFuture, JournalBackend, replay_all};
use notify_types::{
    JournalRecord, LoopId, ProcessCompletionNotification, ProcessLifecycleState,
    ProcessNotification, ProcessTerminalReason, SessionId, Uuid,
};

use super::ConformanceError;
use crate::sample;

/// The context of one check: its name, for error messages.
#[derive(Clone, Copy)]
pub(super) struct Check(pub(super) &'static str);

pub(super) type CheckResult<T = ()> = Result<T, ConformanceError>;

impl Check {
    pub(super) fn fail(self, message: impl Into<String>) -> ConformanceError {
        ConformanceError {
            check: self.0,
            message: message.into(),
        }
    }

    pub(super) fn ensure(self, ok: bool, message: impl FnOnce() -> String) -> CheckResult {
        if ok {
            Ok(())
        } else {
            Err(self.fail(message()))
        }
    }

    pub(super) fn eq<T: PartialEq + Debug>(self, what: &str, got: &T, want: &T) -> CheckResult {
        self.ensure(got == want, || {
            format!("{what}: got {got:?}, want {want:?}")
        })
    }

    pub(super) fn ok<T, E: Display>(self, what: &str, result: Result<T, E>) -> CheckResult<T> {
        result.map_err(|e| self.fail(format!("{what}: unexpected error: {e}")))
    }

    /// Appends `record`, which must be new: `appended: true` at `want_seq`.
    pub(super) async fn append_new<B: JournalBackend + ?Sized>(
        self,
        backend: &B,
        session: SessionId,
        record: &JournalRecord,
        want_seq: u64,
    ) -> CheckResult {
        let what = format!("append of new key {} to {session}", record.key());
        let outcome = self.ok(&what, backend.append(session, record.clone()).await)?;
        self.eq(
            &what,
            &outcome,
            &AppendOutcome {
                seq: want_seq,
                appended: true,
            },
        )
    }

    /// Appends `record` again: `appended: false` at its original `want_seq`.
    pub(super) async fn append_duplicate<B: JournalBackend + ?Sized>(
        self,
        backend: &B,
        session: SessionId,
        record: &JournalRecord,
        want_seq: u64,
    ) -> CheckResult {
        let what = format!("duplicate append of key {} to {session}", record.key());
        let outcome = self.ok(&what, backend.append(session, record.clone()).await)?;
        self.eq(
            &what,
            &outcome,
            &AppendOutcome {
                seq: want_seq,
                appended: false,
            },
        )
    }

    /// Appends `record`, which must collide with the frame at `want_seq`.
    pub(super) async fn append_collision<B: JournalBackend + ?Sized>(
        self,
        backend: &B,
        session: SessionId,
        record: &JournalRecord,
        want_seq: u64,
    ) -> CheckResult {
        let key = record.key();
        match backend.append(session, record.clone()).await {
            Err(AppendError::Collision { key: k, seq }) if k == key && seq == want_seq => Ok(()),
            other => Err(self.fail(format!(
                "append of a different record under key {key} to {session}: got {other:?}, \
                 want Collision {{ key: {key}, seq: {want_seq} }}"
            ))),
        }
    }

    pub(super) async fn last_seq<B: JournalBackend + ?Sized>(
        self,
        backend: &B,
        session: SessionId,
        want: u64,
    ) -> CheckResult {
        let what = format!("last_seq({session})");
        let got = self.ok(&what, backend.last_seq(session).await)?;
        self.eq(&what, &got, &want)
    }

    /// The whole session must be exactly `want`, as frames 1..=n.
    pub(super) async fn replay_equals<B: JournalBackend + ?Sized>(
        self,
        backend: &B,
        session: SessionId,
        want: &[JournalRecord],
    ) -> CheckResult {
        let what = format!("replay_all({session})");
        let frames = self.ok(&what, replay_all(backend, session).await)?;
        let want: Vec<(u64, JournalRecord)> = (1..).zip(want.iter().cloned()).collect();
        self.eq(&what, &frames, &want)
    }

    pub(super) async fn lookup<B: JournalBackend + ?Sized>(
        self,
        backend: &B,
        session: SessionId,
        key: Uuid,
        want: Option<u64>,
    ) -> CheckResult {
        let what = format!("lookup({session}, {key})");
        let got = self.ok(&what, backend.lookup(session, key).await)?;
        self.eq(&what, &got, &want)
    }

    pub(super) async fn sessions<B: JournalBackend + ?Sized>(
        self,
        backend: &B,
    ) -> CheckResult<Vec<SessionId>> {
        let sessions = self.ok("sessions()", backend.sessions().await)?;
        self.ensure(sessions.windows(2).all(|w| w[0] < w[1]), || {
            "sessions() is not in strictly ascending ID order".to_owned()
        })?;
        Ok(sessions)
    }
}

/// `n` fresh command records for `session`.
pub(super) fn commands(session: SessionId, n: usize) -> Vec<JournalRecord> {
    let loop_id = LoopId::new();
    (0..n).map(|_| sample::command(session, loop_id)).collect()
}

/// `n` records for `session`, cycling through every record kind.
pub(super) fn mixed(session: SessionId, n: usize) -> Vec<JournalRecord> {
    let loop_id = LoopId::new();
    let mut out = Vec::with_capacity(n);
    while out.len() < n {
        out.extend(sample::one_of_each(session, loop_id));
    }
    out.truncate(n);
    out
}

/// The same notification with another terminal outcome: same key, different bytes.
pub(super) fn altered(n: &ProcessCompletionNotification) -> ProcessCompletionNotification {
    let (state, reason) = if n.state == ProcessLifecycleState::Killed {
        (ProcessLifecycleState::Exited, ProcessTerminalReason::Exited)
    } else {
        (ProcessLifecycleState::Killed, ProcessTerminalReason::Killed)
    };
    ProcessCompletionNotification {
        state,
        reason,
        ..n.clone()
    }
}

pub(super) fn command_of(n: ProcessCompletionNotification) -> JournalRecord {
    JournalRecord::Command(ProcessNotification::new(n))
}

/// Polls every future to completion from the current task; results in input order.
///
/// All futures are in flight at once, so a backend that batches concurrent appends
/// sees them together. Every pending future is re-polled on any wake-up: fine for the
/// few dozen futures a check uses.
pub(super) async fn join_all<'a, T>(futures: Vec<BoxFuture<'a, T>>) -> Vec<T> {
    let mut slots: Vec<(Option<BoxFuture<'a, T>>, Option<T>)> =
        futures.into_iter().map(|f| (Some(f), None)).collect();
    poll_fn(|cx| {
        let mut pending = false;
        for (future, out) in &mut slots {
            if let Some(f) = future {
                match f.as_mut().poll(cx) {
                    Poll::Ready(value) => {
                        *out = Some(value);
                        *future = None;
                    }
                    Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            Poll::Pending
        } else {
            Poll::Ready(())
        }
    })
    .await;
    slots.into_iter().filter_map(|(_, out)| out).collect()
}
