//! The operations built on the traits: whole replays, checked page by page, and whole
//! purges, one bounded step at a time. Every backend gets them; none implements them.

use notify_types::{SessionId, Timestamp};

use crate::backend::{JournalBackend, JournalRead, SeqRecord};
use crate::error::{JournalError, StorageError};
use crate::integrity::check_replay_page;
use crate::retention::{PurgeReport, PurgeStep};

/// One page of [`JournalRead::replay`], checked to hold contiguous sequences from
/// `from_seq`: a backend whose page skips a seq is reported, never answered.
///
/// # Errors
///
/// The [`JournalError`] the replay returns, or [`JournalError::Corrupt`] naming the
/// first missing seq.
pub async fn replay_page<B: JournalRead + ?Sized>(
    backend: &B,
    session: SessionId,
    from_seq: u64,
    limit: usize,
) -> Result<Vec<SeqRecord>, JournalError> {
    let page = backend.replay(session, from_seq, limit).await?;
    check_replay_page(session, from_seq, limit, None, &page)?;
    Ok(page)
}

/// Replays a whole session through any backend, page by page.
///
/// Every page is checked to continue the one before it, so a backend whose pages do
/// not join up is reported [`JournalError::Corrupt`] naming the first missing seq.
///
/// # Errors
///
/// The first [`JournalError`] any page returns.
pub async fn replay_all<B: JournalRead + ?Sized>(
    backend: &B,
    session: SessionId,
) -> Result<Vec<SeqRecord>, JournalError> {
    const PAGE: usize = 4096;
    let mut out = Vec::new();
    let mut from = 1;
    loop {
        let page = replay_page(backend, session, from, PAGE).await?;
        let n = page.len();
        if let Some((seq, _)) = page.last() {
            from = seq.saturating_add(1);
        }
        out.extend(page);
        if n < PAGE {
            return Ok(out);
        }
    }
}

/// Purges every session that ended before `ended_before`, one bounded step at a time
/// (at most `max_frames_per_step` frames per transaction), until none is due; see
/// [`purge_with`] to watch progress.
///
/// Appends to live sessions wait for at most one step. A purge cut short (an error, a
/// crash, a dropped future) leaves each session either whole or tombstoned with part of
/// its log still to remove, which the next purge finishes first; reads never present a
/// partly removed log.
///
/// # Errors
///
/// The first error a step answers; the steps before it are committed.
///
/// # Cancel safety
///
/// Dropping the future stops between or inside a step; every committed step stays
/// committed, and a step in flight either commits or not. Calling again continues.
pub async fn purge<B: JournalBackend + ?Sized>(
    backend: &B,
    ended_before: Timestamp,
    max_frames_per_step: usize,
) -> Result<PurgeReport, JournalError> {
    purge_with(backend, ended_before, max_frames_per_step, |_, _| {}).await
}

/// [`purge`], calling `progress` after every step with the step and the running totals.
///
/// # Errors
///
/// As [`purge`].
///
/// # Cancel safety
///
/// As [`purge`].
pub async fn purge_with<B, F>(
    backend: &B,
    ended_before: Timestamp,
    max_frames_per_step: usize,
    mut progress: F,
) -> Result<PurgeReport, JournalError>
where
    B: JournalBackend + ?Sized,
    F: FnMut(&PurgeStep, &PurgeReport),
{
    let max = max_frames_per_step.max(1);
    let mut report = PurgeReport::default();
    let mut last_finished = None;
    loop {
        let step = backend.purge_step(ended_before, max).await?;
        let Some(session) = step.session else {
            return Ok(report);
        };
        if (step.frames_removed == 0 && !step.finished) || last_finished == Some(session) {
            // A backend that names a session but makes no progress would loop forever.
            return Err(JournalError::Storage(StorageError::msg(format!(
                "purge step on session {session} made no progress"
            ))));
        }
        if step.finished {
            last_finished = Some(session);
        }
        report.steps += 1;
        report.frames += step.frames_removed;
        report.sessions += u64::from(step.finished);
        progress(&step, &report);
    }
}
