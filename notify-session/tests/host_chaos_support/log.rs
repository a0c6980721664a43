//! The lines a host process logs, one per event, to its own file: what the checkers
//! read back after the run. Each line starts with the wall-clock time in milliseconds
//! since the Unix epoch (the hosts and the parent share the machine's clock), so
//! events line up with the parent's fault windows.
//!
//! A host writes a line only after the event happened (an `ACCEPTED` after the
//! journal answered, an `ACKED` after the ack committed), and writes each line with
//! one `write` call: a SIGKILL can lose the event it was about to log, never invent
//! one.

use std::fmt;
use std::io::Write as _;
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use notify_types::{CommandId, SessionId};

/// Milliseconds since the Unix epoch, now.
pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Why a host stopped serving a session (`HostApp::stopped`), as logged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StopKind {
    /// `StopReason::LeaseLost`.
    Lost,
    /// `StopReason::ShutDown`.
    ShutDown,
    /// `StopReason::Ended`.
    Ended,
    /// Any other reason (released, start failed).
    Other,
}

impl StopKind {
    fn word(self) -> &'static str {
        match self {
            Self::Lost => "lost",
            Self::ShutDown => "shutdown",
            Self::Ended => "ended",
            Self::Other => "other",
        }
    }

    fn parse(word: &str) -> Option<Self> {
        Some(match word {
            "lost" => Self::Lost,
            "shutdown" => Self::ShutDown,
            "ended" => Self::Ended,
            "other" => Self::Other,
            _ => return None,
        })
    }
}

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
    /// The host stopped serving `session` (`HostApp::stopped`); `named`: the reason
    /// named the lease's new owner.
    Stopped {
        session: SessionId,
        why: StopKind,
        named: bool,
    },
    /// `notify` answered `NotOwner` (or a fenced journal failure) for `session`;
    /// `named`: the answer named the owner.
    NotOwner { session: SessionId, named: bool },
    /// An ack was refused because this host no longer holds `session`'s lease
    /// (`NotOwner`, or the journal's fence).
    AckRefused { session: SessionId },
    /// `Session::end` ended `session` here.
    Ended { session: SessionId },
}

impl Event {
    /// The session the event is about.
    pub(crate) fn session(&self) -> SessionId {
        match self {
            Self::Open { session, .. }
            | Self::Accepted { session, .. }
            | Self::Deliver { session, .. }
            | Self::Acked { session, .. }
            | Self::Stopped { session, .. }
            | Self::NotOwner { session, .. }
            | Self::AckRefused { session }
            | Self::Ended { session } => *session,
        }
    }

    /// Parses one event as [`fmt::Display`] writes it (without the time).
    fn parse(w: &mut std::str::Split<'_, char>) -> Option<Self> {
        let tag = w.next()?;
        let session = SessionId::from_uuid(w.next()?.parse().ok()?);
        Some(match tag {
            "OPEN" => {
                let epoch = number(w)?;
                let last_seq = number(w)?;
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
            "ACCEPTED" | "DELIVER" | "ACKED" => {
                let epoch = number(w)?;
                let command = CommandId::from_uuid(w.next()?.parse().ok()?);
                match tag {
                    "ACCEPTED" => Self::Accepted {
                        session,
                        epoch,
                        command,
                    },
                    "DELIVER" => Self::Deliver {
                        session,
                        epoch,
                        command,
                    },
                    _ => Self::Acked {
                        session,
                        epoch,
                        command,
                    },
                }
            }
            "STOPPED" => Self::Stopped {
                session,
                why: StopKind::parse(w.next()?)?,
                named: named(w.next()?)?,
            },
            "NOTOWNER" => Self::NotOwner {
                session,
                named: named(w.next()?)?,
            },
            "ACKREFUSED" => Self::AckRefused { session },
            "ENDED" => Self::Ended { session },
            _ => return None,
        })
    }
}

fn number(w: &mut std::str::Split<'_, char>) -> Option<u64> {
    w.next()?.parse().ok()
}

fn named(word: &str) -> Option<bool> {
    match word {
        "named" => Some(true),
        "-" => Some(false),
        _ => None,
    }
}

impl fmt::Display for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let named = |n: bool| if n { "named" } else { "-" };
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
            Self::Stopped {
                session,
                why,
                named: n,
            } => write!(f, "STOPPED {session} {} {}", why.word(), named(*n)),
            Self::NotOwner { session, named: n } => {
                write!(f, "NOTOWNER {session} {}", named(*n))
            }
            Self::AckRefused { session } => write!(f, "ACKREFUSED {session}"),
            Self::Ended { session } => write!(f, "ENDED {session}"),
        }
    }
}

/// An event and when it was logged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Logged {
    /// Milliseconds since the Unix epoch.
    pub(crate) at: u64,
    pub(crate) event: Event,
}

impl Logged {
    /// Parses one line as [`EventLog::log`] writes it.
    pub(crate) fn parse(line: &str) -> Option<Self> {
        let mut words = line.split(' ');
        let at = words.next()?.parse().ok()?;
        let event = Event::parse(&mut words)?;
        Some(Self { at, event })
    }
}

/// One host process's log: the host slot it ran in, and its events in order.
#[derive(Debug, Clone, Default)]
pub(crate) struct HostLog {
    /// The host slot (0, 1, 2).
    pub(crate) host: usize,
    pub(crate) events: Vec<Logged>,
}

/// A host's event log: one file, one line per event.
pub(crate) struct EventLog {
    file: std::sync::Mutex<std::fs::File>,
}

impl EventLog {
    pub(crate) fn create(path: &Path) -> std::io::Result<Self> {
        Ok(Self {
            file: std::sync::Mutex::new(std::fs::File::create(path)?),
        })
    }

    /// Writes `event`, stamped with the time now, as one line (a single `write`
    /// call, so a kill leaves a whole line or a torn last line, which [`read_logs`]
    /// drops).
    pub(crate) fn log(&self, event: &Event) {
        let line = format!("{} {event}\n", now_ms());
        let mut file = self.file.lock().unwrap();
        file.write_all(line.as_bytes()).unwrap();
    }
}

/// The name of host slot `host`'s log file for its `incarnation`-th process.
pub(crate) fn log_name(host: usize, incarnation: u32) -> String {
    format!("host{host}-{incarnation:04}.log")
}

/// Every host process's log under `dir`, in file name order (a torn last line, from
/// a kill, is dropped).
pub(crate) fn read_logs(dir: &Path) -> std::io::Result<Vec<HostLog>> {
    let mut paths: Vec<_> = std::fs::read_dir(dir)?
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<_, _>>()?;
    paths.sort();
    let mut logs = Vec::new();
    for path in paths {
        if path.extension().is_none_or(|e| e != "log") {
            continue;
        }
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let host = name
            .strip_prefix("host")
            .and_then(|rest| rest.split('-').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("a log file named {name}"));
        let text = std::fs::read_to_string(&path)?;
        logs.push(HostLog {
            host,
            events: text.lines().filter_map(Logged::parse).collect(),
        });
    }
    Ok(logs)
}
