//! `notify export`: every session (or one), page by page, as the export's lines.

use notify_session::notify_journal::{JournalError, SessionState};
use notify_session::notify_types::SessionId;

use super::export_format::{EXPORT_FORMAT, state_line};
use crate::error::{CliError, Exit};
use crate::journal::{Journal, selected};
use crate::output::{Out, Progress};

/// `notify export`.
pub(crate) async fn export(
    journal: &Journal,
    what: &str,
    session: Option<SessionId>,
    out: &mut Out,
) -> Result<(), CliError> {
    const PAGE: usize = 1024;
    let mut sessions = selected(journal, what, session).await?;
    let mut progress = Progress::new();
    let (mut frames, mut done) = (0u64, 0u64);
    out.line(&format!(r#"{{"notify_export":{EXPORT_FORMAT}}}"#))?;
    let changed = |session: SessionId, from: u64, how: &str| {
        CliError::new(
            Exit::Failed,
            format!(
                "{what}: session {session} was {how} while it was being exported: the export \
                 is incomplete (its first {} frames were written); export again",
                from - 1
            ),
        )
    };
    while let Some(page) = sessions.next(journal, what).await? {
        for session in page {
            let mut from = 1;
            let mut chased = false;
            // Pages of frames until the session's head, then its state; a session that
            // ends meanwhile gets its last frames read too.
            let state = loop {
                let frames_page = match journal.reader().replay(session, from, PAGE).await {
                    Err(JournalError::Purged { .. }) if from == 1 => {
                        match journal.reader().session_state(session).await {
                            Ok(state @ SessionState::Purged(_)) => break state,
                            Ok(_) => return Err(changed(session, from, "purged")),
                            Err(e) => return Err(CliError::journal(what, &e)),
                        }
                    }
                    // Purged while it was being exported: what was written of it is
                    // only part of its log, which an import would take for the whole.
                    Err(JournalError::Purged { .. }) => {
                        progress.clear();
                        return Err(changed(session, from, "purged"));
                    }
                    page => page.map_err(|e| CliError::journal(what, &e))?,
                };
                let n = frames_page.len();
                for (seq, record) in frames_page {
                    let mut line =
                        format!(r#"{{"session":"{session}","seq":{seq},"record":"#).into_bytes();
                    line.extend_from_slice(&record.encode());
                    line.push(b'}');
                    out.bytes_line(&line)?;
                    from = seq.saturating_add(1);
                    frames += 1;
                }
                progress.update(|| format!("exported {frames} frames of {} sessions", done + 1));
                if n == PAGE {
                    continue;
                }
                let state = journal
                    .reader()
                    .session_state(session)
                    .await
                    .map_err(|e| CliError::journal(what, &e))?;
                match state {
                    // Ended meanwhile: its last frames are read next (once: nothing is
                    // appended after the end).
                    SessionState::Ended { last_seq, .. } if last_seq >= from && !chased => {
                        chased = true;
                    }
                    SessionState::Ended { last_seq, .. } if last_seq.saturating_add(1) != from => {
                        progress.clear();
                        return Err(CliError::new(
                            Exit::Damaged,
                            format!(
                                "{what} is damaged: session {session} ended at seq {last_seq} \
                                 but its log ends at seq {} (run `notify verify`)",
                                from - 1
                            ),
                        ));
                    }
                    SessionState::Purged(_) => {
                        progress.clear();
                        return Err(changed(session, from, "purged"));
                    }
                    state => break state,
                }
            };
            if let Some(line) = state_line(session, &state) {
                out.line(&line)?;
            }
            done += 1;
        }
    }
    progress.clear();
    out.flush()
}
