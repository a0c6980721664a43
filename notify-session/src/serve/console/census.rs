//! The overview's counts, gathered in the background (a page must not walk a
//! journal of a million sessions): every [`EVERY`] the sessions are walked in pages
//! of [`PAGE`] by ID (at most [`MAX_WALK`] of them) and counted by state; live ones
//! are restored to count what they have pending, at most [`MAX_PENDING`] sessions of at
//! most [`FRAME_BUDGET`] frames each and [`MAX_PENDING_FRAMES`] in all (restore reads a
//! log whole). The engine's own figures (version, frames) are read in the same round.

use std::sync::Arc;
use std::time::{Duration, Instant};

use notify_journal::{JournalRead, SessionState};
use notify_types::{SessionId, Timestamp};

use super::inspect::{JournalCounts, JournalInspect};
use super::pages::FRAME_BUDGET;

/// How often the census is taken.
/// (A walk reads each session's state: on PostgreSQL one statement per session.)
pub(crate) const EVERY: Duration = Duration::from_secs(5 * 60);
/// Sessions read per page of the walk.
const PAGE: usize = 1000;
/// The most sessions one census walks.
pub(crate) const MAX_WALK: u64 = 200_000;
/// The most live sessions one census restores to count pending notifications.
pub(crate) const MAX_PENDING: u64 = 2_000;
/// The most frames one census reads restoring them.
pub(crate) const MAX_PENDING_FRAMES: u64 = 200_000;

/// One census.
#[derive(Debug, Clone, Default)]
pub(crate) struct Census {
    pub(crate) at: Option<Timestamp>,
    pub(crate) took: Duration,
    pub(crate) walked: u64,
    /// The walk stopped at [`MAX_WALK`].
    pub(crate) truncated: bool,
    pub(crate) live: u64,
    pub(crate) ended: u64,
    pub(crate) purged: u64,
    /// Pending notifications of the live sessions restored, and how many were.
    pub(crate) pending: u64,
    pub(crate) pending_sessions: u64,
    /// Frames read restoring them.
    pub(crate) pending_frames: u64,
    pub(crate) counts: Option<Result<JournalCounts, String>>,
    /// Why the walk stopped early, if it failed.
    pub(crate) error: Option<String>,
}

/// Takes a census of `reader` (and the engine's figures from `inspect`).
pub(crate) async fn take(
    reader: &dyn JournalRead,
    inspect: Option<&Arc<dyn JournalInspect>>,
) -> Census {
    let started = Instant::now();
    let mut census = Census {
        counts: match inspect {
            Some(i) => Some(i.counts().await.map_err(|e| e.to_string())),
            None => None,
        },
        ..Census::default()
    };
    let mut after: Option<SessionId> = None;
    'walk: loop {
        let page = match reader.sessions_after(after, PAGE).await {
            Ok(p) => p,
            Err(e) => {
                census.error = Some(e.to_string());
                break;
            }
        };
        let Some(last) = page.last().copied() else {
            break;
        };
        for session in page {
            if census.walked == MAX_WALK {
                census.truncated = true;
                break 'walk;
            }
            census.walked += 1;
            match reader.session_state(session).await {
                Ok(SessionState::Live) => {
                    census.live += 1;
                    if census.pending_sessions < MAX_PENDING
                        && census.pending_frames < MAX_PENDING_FRAMES
                        && let Ok(head) = reader.last_seq(session).await
                        && head <= FRAME_BUDGET
                        && census.pending_frames + head <= MAX_PENDING_FRAMES
                        && let Ok(report) = crate::restore(session, reader).await
                    {
                        census.pending_sessions += 1;
                        census.pending_frames += head;
                        census.pending += report.pending_count() as u64;
                    }
                }
                Ok(SessionState::Ended { .. }) => census.ended += 1,
                Ok(SessionState::Purged(_)) => census.purged += 1,
                Ok(_) => {}
                Err(e) => census.error = Some(format!("session {session}: {e}")),
            }
        }
        after = Some(last);
        // Let the writer and the requests have the cores between pages.
        tokio::task::yield_now().await;
    }
    census.at = Some(Timestamp::now());
    census.took = started.elapsed();
    census
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use notify_journal::JournalBackend;
    use notify_testkit::MemoryJournal;
    use notify_testkit::sample::notification;
    use notify_types::{JournalRecord, LoopId, ProcessNotification};

    async fn pending(journal: &MemoryJournal, session: SessionId, count: u64) {
        let loop_id = LoopId::new();
        for _ in 0..count {
            let n = ProcessNotification::new(notification(session, loop_id));
            journal
                .append(session, JournalRecord::from(n))
                .await
                .unwrap();
        }
    }

    /// A live session whose log is longer than a request's frame budget is not
    /// restored by the census (restore reads a log whole): it is left out of the
    /// pending count, which says how many sessions it covers.
    #[tokio::test]
    async fn a_log_past_the_frame_budget_is_not_restored() {
        let journal = MemoryJournal::new();
        pending(&journal, SessionId::new(), FRAME_BUDGET + 1).await;
        pending(&journal, SessionId::new(), 3).await;
        let census = take(&journal, None).await;
        assert_eq!(census.live, 2);
        assert_eq!(
            (
                census.pending_sessions,
                census.pending,
                census.pending_frames
            ),
            (1, 3, 3),
            "only the short log is restored"
        );
    }
}
