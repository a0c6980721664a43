//! The lines a host process logs, one per event, to its own file: what the checker
//! reads back after the run.
//!
//! A host writes a line only after the event happened (an `ACCEPTED` after the
//! journal answered, an `ACKED` after the ack committed), and flushes each line: a
//! SIGKILL can lose the event it was about to log, never invent one.

use std::fmt;
use std::io::Write as _;
use std::path::Path;

use notify_types::{CommandId, SessionId};

/// One logged event of a host process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Event {
    /// The host opened (or adopted) `session` under `epoch`; restore found the log
    /// at `last_seq` and these notifications pending, seeded into the loop.
    Open {
        session: SessionId,
        epoch: u64,
        last_seq: u64,
        pending: Vec<CommandId>,
    },
    /// `notify` answered `Accepted` (the frame was appended under `epoch`).
    Accepted {
        session: SessionId,
        epoch: u64,
        command: CommandId,
    },
    /// The consumer received `command` from the loop of `session` under `epoch`.
    Deliver {
        session: SessionId,
        epoch: u64,
        command: CommandId,
    },
    /// The ack of `command` committed (its consumption was appended under `epoch`).
    Acked {
        session: SessionId,
        epoch: u64,
        command: CommandId,
    },
}

impl Event {
    /// Parses one line as [`fmt::Display`] writes it.
    pub(crate) fn parse(line: &str) -> Option<Self> {
        let mut w = line.split(' ');
        let tag = w.next()?;
        let session = SessionId::from_uuid(w.next()?.parse().ok()?);
        let epoch = w.next()?.parse().ok()?;
        let command = |w: &mut std::str::Split<'_, char>| -> Option<CommandId> {
            Some(CommandId::from_uuid(w.next()?.parse().ok()?))
        };
        Some(match tag {
            "OPEN" => {
                let last_seq = w.next()?.parse().ok()?;
                let pending = match w.next()? {
                    "-" => Vec::new(),
                    list => list
                        .split(',')
                        .map(|c| c.parse().ok().map(CommandId::from_uuid))
                        .collect::<Option<_>>()?,
                };
                Self::Open {
                    session,
                    epoch,
                    last_seq,
                    pending,
                }
            }
            "ACCEPTED" => Self::Accepted {
                session,
                epoch,
                command: command(&mut w)?,
            },
            "DELIVER" => Self::Deliver {
                session,
                epoch,
                command: command(&mut w)?,
            },
            "ACKED" => Self::Acked {
                session,
                epoch,
                command: command(&mut w)?,
            },
            _ => return None,
        })
    }
}

impl fmt::Display for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Open {
                session,
                epoch,
                last_seq,
                pending,
            } => {
                let list = if pending.is_empty() {
                    "-".to_owned()
                } else {
                    pending
                        .iter()
                        .map(ToString::to_string)
                        .collect::<Vec<_>>()
                        .join(",")
                };
                write!(f, "OPEN {session} {epoch} {last_seq} {list}")
            }
            Self::Accepted {
                session,
                epoch,
                command,
            } => write!(f, "ACCEPTED {session} {epoch} {command}"),
            Self::Deliver {
                session,
                epoch,
                command,
            } => write!(f, "DELIVER {session} {epoch} {command}"),
            Self::Acked {
                session,
                epoch,
                command,
            } => write!(f, "ACKED {session} {epoch} {command}"),
        }
    }
}

/// A host's event log: one file, one flushed line per event.
pub(crate) struct EventLog {
    file: std::sync::Mutex<std::fs::File>,
}

impl EventLog {
    pub(crate) fn create(path: &Path) -> std::io::Result<Self> {
        Ok(Self {
            file: std::sync::Mutex::new(std::fs::File::create(path)?),
        })
    }

    /// Writes `event` as one line (a single `write` call, so a kill leaves a whole
    /// line or a torn last line, which [`read_logs`] drops).
    pub(crate) fn log(&self, event: &Event) {
        let line = format!("{event}\n");
        let mut file = self.file.lock().unwrap();
        file.write_all(line.as_bytes()).unwrap();
    }
}

/// Every event in the `.log` files under `dir`, per file in the order written
/// (a torn last line, from a kill, is dropped).
pub(crate) fn read_logs(dir: &Path) -> std::io::Result<Vec<Vec<Event>>> {
    let mut files = Vec::new();
    let mut paths: Vec<_> = std::fs::read_dir(dir)?
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<_, _>>()?;
    paths.sort();
    for path in paths {
        if path.extension().is_some_and(|e| e == "log") {
            let text = std::fs::read_to_string(&path)?;
            files.push(text.lines().filter_map(Event::parse).collect());
        }
    }
    Ok(files)
}
