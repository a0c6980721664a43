//! One pass over a session's log: restore's reduction of it (what a restart would
//! redeliver and declare lost), its head, and when it was active; and how the tables
//! print times.

use std::sync::{Mutex, PoisonError};

use notify_session::notify_journal::layer::JournalReadLayer;
use notify_session::notify_journal::{BoxFuture, JournalError, JournalRead, SeqRecord};
use notify_session::notify_types::{JournalRecord, SessionEvent, SessionId, Timestamp};
use notify_session::{RestoreReport, restore};
use serde_json::Value;

use crate::error::CliError;
use crate::journal::Journal;

/// What the frames of a session say about when it was active. Records carry no commit
/// time; these are the process times of its lifecycle events.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Activity {
    pub(super) frames: u64,
    pub(super) first: Option<Timestamp>,
    pub(super) last: Option<Timestamp>,
}

impl Activity {
    fn observe(&mut self, record: &JournalRecord) {
        self.frames += 1;
        if let JournalRecord::Event(SessionEvent::Lifecycle(m)) = record {
            for t in [
                Some(m.process_created_at),
                m.process_started_at,
                m.process_finished_at,
            ]
            .into_iter()
            .flatten()
            {
                self.first = Some(self.first.map_or(t, |f| f.min(t)));
                self.last = Some(self.last.map_or(t, |l| l.max(t)));
            }
        }
    }
}

/// A reader that notes every frame restore replays through it, so one pass over a
/// session gives both restore's report and the session's activity.
struct Tap<'a> {
    inner: &'a dyn JournalRead,
    seen: Mutex<Activity>,
}

impl<'a> Tap<'a> {
    fn new(inner: &'a dyn JournalRead) -> Self {
        Self {
            inner,
            seen: Mutex::new(Activity::default()),
        }
    }

    fn activity(&self) -> Activity {
        *self.seen.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl<'a> JournalReadLayer for Tap<'a> {
    type Inner = dyn JournalRead + 'a;

    fn inner(&self) -> &(dyn JournalRead + 'a) {
        self.inner
    }

    fn replay(
        &self,
        session: SessionId,
        from_seq: u64,
        limit: usize,
    ) -> BoxFuture<'_, Result<Vec<SeqRecord>, JournalError>> {
        Box::pin(async move {
            let page = self.inner.replay(session, from_seq, limit).await?;
            let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
            for (_, record) in &page {
                seen.observe(record);
            }
            Ok(page)
        })
    }
}

/// A session's summary: its head, and restore's reduction of its log.
pub(super) struct Summary {
    pub(super) head: u64,
    pub(super) report: RestoreReport,
    pub(super) activity: Activity,
}

pub(super) async fn summarize(
    journal: &Journal,
    what: &str,
    session: SessionId,
) -> Result<Summary, CliError> {
    let reader = journal.reader();
    let tap = Tap::new(reader);
    let report = restore(session, &tap)
        .await
        .map_err(|e| CliError::restore(&format!("session {session} of {what}"), &e))?;
    let head = reader
        .last_seq(session)
        .await
        .map_err(|e| CliError::journal(what, &e))?;
    Ok(Summary {
        head,
        report,
        activity: tap.activity(),
    })
}

/// A time for the tables, to the millisecond (JSON keeps every digit).
pub(super) fn time(t: Option<Timestamp>) -> String {
    t.map_or_else(|| "-".to_owned(), |t| format!("{t:.3}"))
}

pub(super) fn json_time(t: Option<Timestamp>) -> Value {
    t.map_or(Value::Null, |t| Value::String(t.to_string()))
}
