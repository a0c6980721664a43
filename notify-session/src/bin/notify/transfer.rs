//! `export` and `import`: a journal as JSON lines, in the canonical wire form.
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

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::io::BufRead;
use std::path::PathBuf;

use notify_session::notify_journal::{
    AppendError, AppendOutcome, ImportStateError, JournalError, SessionState, Tombstone,
};
use notify_session::notify_types::{JournalRecord, SessionId, Timestamp};
use serde_json::json;
use serde_json::value::RawValue;

use crate::error::{CliError, Exit, chain};
use crate::journal::{Journal, Location, selected};
use crate::output::{Out, Progress};

/// The export format this build writes; it reads this one and every earlier one.
pub(crate) const EXPORT_FORMAT: u64 = 2;

/// The state line of a session that ended or was purged; `None` for a live one.
fn state_line(session: SessionId, state: &SessionState) -> Option<String> {
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

/// One parsed line of an export.
enum Parsed {
    /// `{"notify_export":N}`: the format of the lines that follow.
    Header,
    /// A frame.
    Frame(Line),
    /// A session's state: ended (after its frames) or purged (its tombstone).
    State(SessionId, SessionState),
}

/// A frame line.
struct Line {
    session: SessionId,
    seq: u64,
    record: JournalRecord,
}

fn refused(line: u64, why: impl std::fmt::Display) -> CliError {
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

fn parse_line(n: u64, text: &str) -> Result<Parsed, CliError> {
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

/// Appends kept in flight at once while importing into a redb file (its writer
/// group-commits them; each is queued when made, so their order is kept).
const IN_FLIGHT: usize = 256;

/// An append made and not yet answered: its line, session and expected seq.
type Pending = (
    u64,
    SessionId,
    u64,
    tokio::task::JoinHandle<Result<AppendOutcome, AppendError>>,
);

/// Checks that an append landed exactly where the export had it.
fn landed(
    line: u64,
    session: SessionId,
    seq: u64,
    outcome: Result<AppendOutcome, AppendError>,
) -> Result<(), CliError> {
    let outcome = outcome.map_err(|e| CliError::append(line, &e))?;
    if !outcome.appended {
        return Err(CliError::new(
            Exit::Refused,
            format!(
                "line {line}: the record repeats the key of seq {} of session {session}",
                outcome.seq
            ),
        ));
    }
    if outcome.seq != seq {
        return Err(CliError::new(
            Exit::Refused,
            format!(
                "line {line}: imported as seq {} of session {session}, not {seq}",
                outcome.seq
            ),
        ));
    }
    Ok(())
}

async fn settle(pending: Pending) -> Result<(), CliError> {
    let (line, session, seq, task) = pending;
    let outcome = task.await.map_err(|e| {
        CliError::new(
            Exit::Failed,
            format!("line {line}: the append task failed: {e}"),
        )
    })?;
    landed(line, session, seq, outcome)
}

/// `notify import`: into an empty journal only.
pub(crate) async fn import(
    at: &Location,
    input: Option<&PathBuf>,
    out: &mut Out,
) -> Result<(), CliError> {
    let what = at.describe();
    let reader: Box<dyn BufRead> = match input {
        None => Box::new(std::io::stdin().lock()),
        Some(p) => Box::new(std::io::BufReader::new(std::fs::File::open(p).map_err(
            |e| {
                let exit = if e.kind() == std::io::ErrorKind::NotFound {
                    Exit::NotFound
                } else {
                    Exit::Failed
                };
                CliError::new(exit, format!("{}: {e}", p.display()))
            },
        )?)),
    };
    let journal = Journal::open_write(at).await?;
    let result = import_into(&journal, &what, reader).await;
    journal.close().await;
    let done = result?;
    if out.json {
        out.json(&json!({
            "imported_frames": done.frames,
            "sessions": done.sessions,
            "ended": done.ended,
            "purged": done.purged,
            "journal": what,
        }))
    } else {
        out.line(&format!(
            "imported {} frames of {} session(s) ({} ended, {} purged) into {what}",
            done.frames, done.sessions, done.ended, done.purged
        ))
    }
}

/// What an import did.
#[derive(Default)]
struct Imported {
    frames: u64,
    sessions: usize,
    ended: u64,
    purged: u64,
}

/// State lines written to the journal together (one transaction).
const STATES_PER_WRITE: usize = 256;

/// Writes the state lines gathered: first every append still in flight is awaited
/// (an ended state rewrites the row its end marker's append wrote).
async fn write_states(
    journal: &Journal,
    what: &str,
    in_flight: &mut VecDeque<Pending>,
    states: &mut Vec<(u64, SessionId, SessionState)>,
) -> Result<(), CliError> {
    while let Some(p) = in_flight.pop_front() {
        settle(p).await?;
    }
    if states.is_empty() {
        return Ok(());
    }
    let batch: Vec<(SessionId, SessionState)> = states.iter().map(|(_, s, st)| (*s, *st)).collect();
    let result = match journal {
        Journal::Writer(w) => w.import_states(batch).await,
        Journal::Postgres(p) => p.import_states(batch).await,
        Journal::Reader(_) => Err(ImportStateError::Journal(JournalError::Closed)),
    };
    let line_of = |session: &SessionId| {
        states
            .iter()
            .find(|(_, s, _)| s == session)
            .map_or(0, |(n, _, _)| *n)
    };
    let outcome = match result {
        Ok(()) => Ok(()),
        Err(ImportStateError::Conflict { session, held, .. }) => Err(CliError::new(
            Exit::Refused,
            format!(
                "line {}: the state of session {session} contradicts what the journal holds \
                 of it ({})",
                line_of(&session),
                describe(&held)
            ),
        )),
        Err(ImportStateError::Invalid { session, reason }) => Err(refused(
            line_of(&session),
            format!("session {session}: cannot import {reason}"),
        )),
        Err(ImportStateError::Journal(e)) => Err(CliError::journal(what, &e)),
        Err(other) => Err(CliError::new(Exit::Failed, chain(&other))),
    };
    states.clear();
    outcome
}

/// A session state, for a message.
fn describe(state: &SessionState) -> String {
    match state {
        SessionState::Ended { last_seq, .. } => format!("ended at seq {last_seq}"),
        SessionState::Purged(t) => format!("purged at seq {}", t.last_seq),
        _ => "not ended".to_owned(),
    }
}

/// What the import knows of one session of the input.
#[derive(Default)]
struct Seen {
    /// The last seq of its frames so far.
    head: u64,
    /// Its state line came: nothing more of it may follow.
    closed: bool,
}

async fn import_into(
    journal: &Journal,
    what: &str,
    reader: Box<dyn BufRead>,
) -> Result<Imported, CliError> {
    let existing = journal
        .reader()
        .sessions_after(None, 1)
        .await
        .map_err(|e| CliError::journal(what, &e))?;
    if let Some(s) = existing.first() {
        return Err(CliError::new(
            Exit::Refused,
            format!(
                "{what} is not empty (it holds session {s}): import only into an empty journal"
            ),
        ));
    }
    let mut seen: HashMap<SessionId, Seen> = HashMap::new();
    let mut in_flight: VecDeque<Pending> = VecDeque::new();
    let mut states: Vec<(u64, SessionId, SessionState)> = Vec::new();
    let mut progress = Progress::new();
    let mut done = Imported::default();
    let mut n = 0u64;
    let outcome: Result<(), CliError> = async {
        for text in reader.lines() {
            n += 1;
            let text =
                text.map_err(|e| CliError::new(Exit::Failed, format!("reading line {n}: {e}")))?;
            if text.trim().is_empty() {
                continue;
            }
            let line = match parse_line(n, &text)? {
                Parsed::Header => continue,
                Parsed::State(session, state) => {
                    let entry = seen.entry(session).or_default();
                    let (head, closed) = (entry.head, entry.closed);
                    let expected = match &state {
                        SessionState::Ended { last_seq, .. } => *last_seq,
                        // A tombstone stands alone: no frame of its session is in the
                        // export.
                        _ => 0,
                    };
                    if closed || head != expected {
                        let why = if closed {
                            format!("a second state line for session {session}")
                        } else {
                            match &state {
                                SessionState::Ended { last_seq, .. } => format!(
                                    "session {session} ended at seq {last_seq}, but its frames \
                                     before this line end at seq {head}"
                                ),
                                _ => format!(
                                    "session {session} is purged, but frames of it come before \
                                     this line"
                                ),
                            }
                        };
                        return Err(refused(n, why));
                    }
                    entry.closed = true;
                    match state {
                        SessionState::Purged(_) => done.purged += 1,
                        _ => done.ended += 1,
                    }
                    states.push((n, session, state));
                    if states.len() >= STATES_PER_WRITE {
                        write_states(journal, what, &mut in_flight, &mut states).await?;
                    }
                    continue;
                }
                Parsed::Frame(line) => line,
            };
            let entry = seen.entry(line.session).or_default();
            if entry.closed {
                return Err(refused(
                    n,
                    format!("a frame of session {} after its state line", line.session),
                ));
            }
            if line.seq != entry.head + 1 {
                return Err(refused(
                    n,
                    format!(
                        "seq {} of session {} does not follow seq {}",
                        line.seq, line.session, entry.head
                    ),
                ));
            }
            entry.head = line.seq;
            match journal {
                Journal::Writer(w) => {
                    let task = tokio::spawn(w.append(line.session, line.record));
                    in_flight.push_back((n, line.session, line.seq, task));
                    if in_flight.len() >= IN_FLIGHT
                        && let Some(p) = in_flight.pop_front()
                    {
                        settle(p).await?;
                    }
                }
                _ => {
                    let outcome = match journal.writer() {
                        Some(w) => w.append(line.session, line.record).await,
                        None => Err(AppendError::Closed),
                    };
                    landed(n, line.session, line.seq, outcome)?;
                }
            }
            done.frames += 1;
            progress.update(|| format!("imported {} frames", done.frames));
        }
        write_states(journal, what, &mut in_flight, &mut states).await
    }
    .await;
    progress.clear();
    done.sessions = seen.len();
    match outcome {
        Ok(()) => Ok(done),
        Err(mut e) if done.frames > 0 || done.ended + done.purged > 0 => {
            e.message.push_str(&format!(
                "; the import stopped there, after appending up to {} frames: {what} is no \
                 longer empty",
                done.frames
            ));
            Err(e)
        }
        Err(e) => Err(e),
    }
}
