//! `notify import`: an export's lines appended to an empty journal, at the same seqs,
//! with its sessions' states.

use std::collections::{HashMap, VecDeque};
use std::io::BufRead;
use std::path::PathBuf;

use notify_session::notify_journal::{
    AppendError, AppendOutcome, ImportStateError, JournalError, SessionState,
};
use notify_session::notify_types::SessionId;
use serde_json::json;

use super::export_format::{Parsed, parse_line, refused};
use crate::error::{CliError, Exit, chain};
use crate::journal::{Journal, Location};
use crate::output::{Out, Progress};

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
