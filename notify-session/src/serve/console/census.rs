//! The overview's counts, gathered in the background (a page must not walk a
//! journal of a million sessions): every [`EVERY`] the sessions are walked in pages
//! of [`PAGE`] by ID (at most [`MAX_WALK`] of them) and counted by state; the live
//! ones among the first [`MAX_PENDING`] are restored to count what they have pending.
//! The engine's own figures (version, frames) are read in the same round.

use std::sync::Arc;
use std::time::{Duration, Instant};

use notify_journal::{JournalRead, SessionState};
use notify_types::{SessionId, Timestamp};

use super::inspect::{JournalCounts, JournalInspect};

/// How often the census is taken.
/// (A walk reads each session's state: on PostgreSQL one statement per session.)
pub(crate) const EVERY: Duration = Duration::from_secs(5 * 60);
/// Sessions read per page of the walk.
const PAGE: usize = 1000;
/// The most sessions one census walks.
pub(crate) const MAX_WALK: u64 = 200_000;
/// The most live sessions one census restores to count pending notifications.
pub(crate) const MAX_PENDING: u64 = 2_000;

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
                        && let Ok(report) = crate::restore(session, reader).await
                    {
                        census.pending_sessions += 1;
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
