//! `export` and `import`: a journal as JSON lines, one frame a line, in the canonical
//! wire form.
//!
//! A line is `{"session":"<id>","seq":<n>,"record":<record>}`, where `<record>` is
//! exactly the bytes of `JournalRecord::encode` (the journal's own deterministic
//! JSON). Sessions come in ID order and each session's frames in seq order, so an
//! export of an import of an export is the same bytes.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::io::BufRead;
use std::path::PathBuf;

use notify_session::notify_journal::{AppendError, AppendOutcome, JournalError};
use notify_session::notify_types::{JournalRecord, SessionId};
use serde_json::json;
use serde_json::value::RawValue;

use crate::error::{CliError, Exit, chain};
use crate::journal::{Journal, Location, selected};
use crate::output::{Out, Progress};

/// `notify export`.
pub(crate) async fn export(
    journal: &Journal,
    what: &str,
    session: Option<SessionId>,
    out: &mut Out,
) -> Result<(), CliError> {
    const PAGE: usize = 1024;
    let named = session;
    let mut sessions = selected(journal, what, session).await?;
    let mut progress = Progress::new();
    let (mut frames, mut done) = (0u64, 0u64);
    while let Some(page) = sessions.next(journal, what).await? {
        for session in page {
            let mut from = 1;
            loop {
                let frames_page = match journal.backend().replay(session, from, PAGE).await {
                    // Only a tombstone is left, which no import could recreate.
                    Err(JournalError::Purged { .. }) if named.is_none() && from == 1 => {
                        progress.clear();
                        eprintln!("notify: skipping session {session}: it was purged");
                        break;
                    }
                    // Purged while it was being exported: what was written of it is
                    // only part of its log, which an import would take for the whole.
                    Err(JournalError::Purged { .. }) if from > 1 => {
                        progress.clear();
                        return Err(CliError::new(
                            Exit::Failed,
                            format!(
                                "{what}: session {session} was purged while it was being                                  exported: the export is incomplete (its first {} frames                                  were written); export again",
                                from - 1
                            ),
                        ));
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
                if n < PAGE {
                    break;
                }
            }
            done += 1;
        }
    }
    progress.clear();
    out.flush()
}

/// One parsed line of an export.
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

fn parse_line(n: u64, text: &str) -> Result<Line, CliError> {
    let fields: BTreeMap<String, &RawValue> =
        serde_json::from_str(text).map_err(|e| refused(n, e))?;
    if let Some(other) = fields
        .keys()
        .find(|k| !["session", "seq", "record"].contains(&k.as_str()))
    {
        return Err(refused(n, format!("unknown field `{other}`")));
    }
    let field = |name: &str| {
        fields
            .get(name)
            .copied()
            .ok_or_else(|| refused(n, format!("no `{name}`")))
    };
    let session: String = serde_json::from_str(field("session")?.get())
        .map_err(|e| refused(n, format!("`session`: {e}")))?;
    let session: SessionId = session
        .parse()
        .map_err(|_| refused(n, format!("`session` {session:?} is not a session ID")))?;
    let seq: u64 =
        serde_json::from_str(field("seq")?.get()).map_err(|e| refused(n, format!("`seq`: {e}")))?;
    let record = JournalRecord::decode(field("record")?.get().as_bytes())
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
    Ok(Line {
        session,
        seq,
        record,
    })
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
    let (frames, sessions) = result?;
    if out.json {
        out.json(&json!({"imported_frames": frames, "sessions": sessions, "journal": what}))
    } else {
        out.line(&format!(
            "imported {frames} frames of {sessions} session(s) into {what}"
        ))
    }
}

async fn import_into(
    journal: &Journal,
    what: &str,
    reader: Box<dyn BufRead>,
) -> Result<(u64, usize), CliError> {
    let existing = journal
        .backend()
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
    let mut heads: HashMap<SessionId, u64> = HashMap::new();
    let mut in_flight: VecDeque<Pending> = VecDeque::new();
    let mut progress = Progress::new();
    let mut frames = 0u64;
    let mut n = 0u64;
    let outcome: Result<(), CliError> = async {
        for text in reader.lines() {
            n += 1;
            let text =
                text.map_err(|e| CliError::new(Exit::Failed, format!("reading line {n}: {e}")))?;
            if text.trim().is_empty() {
                continue;
            }
            let line = parse_line(n, &text)?;
            let head = heads.entry(line.session).or_insert(0);
            if line.seq != *head + 1 {
                return Err(refused(
                    n,
                    format!(
                        "seq {} of session {} does not follow seq {head}",
                        line.seq, line.session
                    ),
                ));
            }
            *head = line.seq;
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
                    let outcome = journal.backend().append(line.session, line.record).await;
                    landed(n, line.session, line.seq, outcome)?;
                }
            }
            frames += 1;
            progress.update(|| format!("imported {frames} frames"));
        }
        while let Some(p) = in_flight.pop_front() {
            settle(p).await?;
        }
        Ok(())
    }
    .await;
    progress.clear();
    match outcome {
        Ok(()) => Ok((frames, heads.len())),
        Err(mut e) if frames > 0 => {
            e.message.push_str(&format!(
                "; the import stopped there, after appending up to {frames} frames: {what} is \
                 no longer empty"
            ));
            Err(e)
        }
        Err(e) => Err(e),
    }
}
