//! The export's lines, written by `notify export` and read by `notify import`: a
//! journal as JSON lines, in the canonical wire form.
//!
//! Export format 2 (this build's):
//!
//! ```text
//! {"notify_export":2}
//! {"session":"<id>","seq":<n>,"record":<record>}
//! {"session":"<id>","state":"ended","ended_at":"<time>","last_seq":<n>}
//! {"session":"<id>","state":"purged","ended_at":"<time>","purged_at":"<time>","last_seq":<n>,"frames":<n>}
//! ```
//!
//! The first line names the format. Then every session in ID order: its frames in seq
//! order, `<record>` being exactly the bytes of `JournalRecord::encode` (the journal's
//! own deterministic JSON); after the frames of an ended session, its state line (its
//! end time, by the original journal's clock); for a purged session, only its state
//! line (the tombstone). Times are RFC 3339 in UTC, to the nanosecond the journal
//! kept. So an export of an import of an export is the same bytes.
//!
//! Format 1 (earlier builds) is the frame lines alone, with no first line and no state
//! lines; it still imports (its ended sessions then end at the time of the import, its
//! purged sessions are not in it). A file naming a later format is refused.
//!
//! Here: the header, frame and state lines, written and parsed; `export.rs` and
//! `import.rs` are the two commands.

use std::collections::BTreeMap;

use notify_session::notify_journal::{SessionState, Tombstone};
use notify_session::notify_types::{JournalRecord, SessionId, Timestamp};
use serde_json::value::RawValue;

use crate::error::{CliError, Exit, chain};

/// The export format this build writes; it reads this one and every earlier one.
pub(crate) const EXPORT_FORMAT: u64 = 2;

/// The state line of a session that ended or was purged; `None` for a live one.
pub(super) fn state_line(session: SessionId, state: &SessionState) -> Option<String> {
    match state {
        SessionState::Ended { ended_at, last_seq } => Some(format!(
            r#"{{"session":"{session}","state":"ended","ended_at":"{ended_at}","last_seq":{last_seq}}}"#
        )),
        SessionState::Purged(t) => Some(format!(
            r#"{{"session":"{session}","state":"purged","ended_at":"{}","purged_at":"{}","last_seq":{},"frames":{}}}"#,
            t.ended_at, t.purged_at, t.last_seq, t.frames
        )),
        _ => None,
    }
}

/// One parsed line of an export.
pub(super) enum Parsed {
    /// `{"notify_export":N}`: the format of the lines that follow.
    Header,
    /// A frame.
    Frame(Line),
    /// A session's state: ended (after its frames) or purged (its tombstone).
    State(SessionId, SessionState),
}

/// A frame line.
pub(super) struct Line {
    pub(super) session: SessionId,
    pub(super) seq: u64,
    pub(super) record: JournalRecord,
}

/// An input line that is not an export line.
pub(super) fn refused(line: u64, why: impl std::fmt::Display) -> CliError {
    CliError::new(
        Exit::Refused,
        format!("line {line}: not an export line: {why}"),
    )
}

/// The fields of a line, each known to its kind and present.
struct Fields<'a> {
    n: u64,
    fields: BTreeMap<String, &'a RawValue>,
}

impl<'a> Fields<'a> {
    /// Refuses any field outside `known`.
    fn only(&self, known: &[&str]) -> Result<(), CliError> {
        match self.fields.keys().find(|k| !known.contains(&k.as_str())) {
            Some(other) => Err(refused(self.n, format!("unknown field `{other}`"))),
            None => Ok(()),
        }
    }

    fn raw(&self, name: &str) -> Result<&'a RawValue, CliError> {
        self.fields
            .get(name)
            .copied()
            .ok_or_else(|| refused(self.n, format!("no `{name}`")))
    }

    fn u64(&self, name: &str) -> Result<u64, CliError> {
        serde_json::from_str(self.raw(name)?.get())
            .map_err(|e| refused(self.n, format!("`{name}`: {e}")))
    }

    fn string(&self, name: &str) -> Result<String, CliError> {
        serde_json::from_str(self.raw(name)?.get())
            .map_err(|e| refused(self.n, format!("`{name}`: {e}")))
    }

    fn session(&self) -> Result<SessionId, CliError> {
        let session = self.string("session")?;
        session
            .parse()
            .map_err(|_| refused(self.n, format!("`session` {session:?} is not a session ID")))
    }

    fn time(&self, name: &str) -> Result<Timestamp, CliError> {
        let text = self.string(name)?;
        text.parse().map_err(|e| {
            refused(
                self.n,
                format!("`{name}` {text:?} is not an RFC 3339 time: {e}"),
            )
        })
    }
}

/// Parses line `n` of an export.
pub(super) fn parse_line(n: u64, text: &str) -> Result<Parsed, CliError> {
    let fields = Fields {
        n,
        fields: serde_json::from_str(text).map_err(|e| refused(n, e))?,
    };
    if fields.fields.contains_key("notify_export") {
        fields.only(&["notify_export"])?;
        let format = fields.u64("notify_export")?;
        if format > EXPORT_FORMAT {
            return Err(CliError::new(
                Exit::Refused,
                format!(
                    "line {n}: the export is of format {format}; this notify reads formats up \
                     to {EXPORT_FORMAT}: use a newer notify"
                ),
            ));
        }
        if format < 2 {
            return Err(refused(n, format!("format {format} has no first line")));
        }
        return Ok(Parsed::Header);
    }
    let session = fields.session()?;
    if fields.fields.contains_key("state") {
        let state = fields.string("state")?;
        let last_seq = fields.u64("last_seq")?;
        let state = match state.as_str() {
            "ended" => {
                fields.only(&["session", "state", "ended_at", "last_seq"])?;
                SessionState::Ended {
                    ended_at: fields.time("ended_at")?,
                    last_seq,
                }
            }
            "purged" => {
                fields.only(&[
                    "session",
                    "state",
                    "ended_at",
                    "purged_at",
                    "last_seq",
                    "frames",
                ])?;
                SessionState::Purged(Tombstone {
                    ended_at: fields.time("ended_at")?,
                    purged_at: fields.time("purged_at")?,
                    last_seq,
                    frames: fields.u64("frames")?,
                })
            }
            other => {
                return Err(refused(
                    n,
                    format!("`state` {other:?} is neither \"ended\" nor \"purged\""),
                ));
            }
        };
        return Ok(Parsed::State(session, state));
    }
    fields.only(&["session", "seq", "record"])?;
    let seq = fields.u64("seq")?;
    let record = JournalRecord::decode(fields.raw("record")?.get().as_bytes())
        .map_err(|e| refused(n, format!("`record`: {}", chain(&e))))?;
    if record.session_id() != session {
        return Err(refused(
            n,
            format!(
                "the record belongs to session {}, not {session}",
                record.session_id()
            ),
        ));
    }
    Ok(Parsed::Frame(Line {
        session,
        seq,
        record,
    }))
}
