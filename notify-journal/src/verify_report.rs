//! The report of a journal's deep integrity check, the same for every backend.

use std::fmt;

use notify_types::{SessionId, Uuid};

use crate::corruption::Corruption;

/// How many problems a [`VerifyReport`] keeps by default (it counts them all).
pub const DEFAULT_MAX_PROBLEMS: usize = 100;

/// The storage engine's own check of its pages (redb's page checksums), where the
/// backend has one.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum EngineCheck {
    /// Every page of the committed trees matched its checksum.
    Clean,
    /// The engine found damage (the reason is its own words).
    Damaged(String),
    /// Not run: the backend has no such check, or it needs the file to itself (a redb
    /// journal opened by this process; use `RedbJournal::verify_file` on a closed one).
    NotRun,
}

/// One problem a verify found.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Problem {
    /// The storage engine's page check failed, or the engine failed while reading.
    Engine {
        /// What the engine said.
        detail: String,
    },
    /// A frame is damaged (checksum, decoding, truncation) or is not the frame its
    /// position says.
    Frame {
        /// The session.
        session: SessionId,
        /// The frame's sequence.
        seq: u64,
        /// What is wrong.
        cause: Corruption,
    },
    /// A session's log has a gap: `seq` is missing below the session's head.
    Gap {
        /// The session.
        session: SessionId,
        /// The first missing sequence.
        seq: u64,
    },
    /// A session's recorded head is not its last frame.
    Head {
        /// The session.
        session: SessionId,
        /// The recorded head.
        head: u64,
        /// The last frame's sequence.
        last: u64,
    },
    /// An index entry names no frame, or a frame that carries another key.
    IndexEntry {
        /// The session.
        session: SessionId,
        /// The indexed key.
        key: Uuid,
        /// What is wrong.
        detail: String,
    },
    /// A frame has no index entry pointing at it (its key would be missed by a lookup
    /// and could be journaled twice).
    Unindexed {
        /// The session.
        session: SessionId,
        /// The frame's sequence.
        seq: u64,
        /// The frame's key.
        key: Uuid,
    },
    /// Two frames of one session carry the same key.
    KeyTwice {
        /// The session.
        session: SessionId,
        /// The key.
        key: Uuid,
        /// The two frames' sequences.
        seqs: (u64, u64),
    },
    /// A stored frame no session's log reaches.
    Orphan {
        /// Where it is stored (backend-specific: a log position or a row).
        location: String,
    },
    /// A session's end or purge record (its state row, or what the backend keeps of an
    /// ended or purged session) is damaged or disagrees with the session's log.
    SessionRow {
        /// The session.
        session: SessionId,
        /// What is wrong.
        detail: String,
    },
    /// A stored frame so damaged that it does not say whose it is.
    Unreadable {
        /// Where it is stored (backend-specific: a log position or a row).
        location: String,
        /// What is wrong.
        cause: Corruption,
    },
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Engine { detail } => write!(f, "storage engine: {detail}"),
            Self::Frame {
                session,
                seq,
                cause,
            } => write!(f, "session {session} seq {seq}: {cause}"),
            Self::Gap { session, seq } => {
                write!(f, "session {session} seq {seq}: missing (gap in the log)")
            }
            Self::Head {
                session,
                head,
                last,
            } => write!(
                f,
                "session {session}: head is seq {head} but the last frame is seq {last}"
            ),
            Self::IndexEntry {
                session,
                key,
                detail,
            } => write!(f, "session {session} key {key}: index entry {detail}"),
            Self::Unindexed { session, seq, key } => write!(
                f,
                "session {session} seq {seq}: key {key} has no index entry for this frame"
            ),
            Self::KeyTwice { session, key, seqs } => write!(
                f,
                "session {session} key {key}: two frames (seq {} and seq {})",
                seqs.0, seqs.1
            ),
            Self::Orphan { location } => write!(f, "{location}: a frame no session's log reaches"),
            Self::SessionRow { session, detail } => {
                write!(f, "session {session}: end/purge record {detail}")
            }
            Self::Unreadable { location, cause } => write!(f, "{location}: {cause}"),
        }
    }
}

/// What a deep integrity check found: counts of what it read, and every problem (the
/// first [`max_problems`](Self::max_problems) kept, all of them counted).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct VerifyReport {
    /// The storage engine's own page check.
    pub engine: EngineCheck,
    /// Sessions with at least one frame.
    pub sessions: u64,
    /// Sessions ended and not purged (their logs are whole); counted by the redb
    /// journal's verify, 0 where a backend does not count them.
    pub ended: u64,
    /// Tombstones: sessions whose purge began (some may still have frames to remove);
    /// counted by the redb journal's verify, 0 where a backend does not count them.
    pub tombstones: u64,
    /// Frames read.
    pub frames: u64,
    /// Index entries read.
    pub keys: u64,
    /// Bytes of frames read.
    pub bytes: u64,
    /// Problems found, in the order found (at most `max_problems`).
    pub problems: Vec<Problem>,
    /// Every problem found, kept or not.
    pub problem_count: u64,
    /// How many problems are kept.
    pub max_problems: usize,
}

impl VerifyReport {
    pub(crate) fn new(max_problems: usize) -> Self {
        Self {
            engine: EngineCheck::NotRun,
            sessions: 0,
            ended: 0,
            tombstones: 0,
            frames: 0,
            keys: 0,
            bytes: 0,
            problems: Vec::new(),
            problem_count: 0,
            max_problems,
        }
    }

    /// `true` when nothing is wrong: no problem, and the engine check (if run) clean.
    #[must_use]
    pub fn is_clean(&self) -> bool {
        self.problem_count == 0 && !matches!(self.engine, EngineCheck::Damaged(_))
    }

    /// Records a problem.
    pub(crate) fn push(&mut self, problem: Problem) {
        self.problem_count += 1;
        if self.problems.len() < self.max_problems {
            self.problems.push(problem);
        }
    }

    /// Checks that `seq` is the next seq of `session`'s log, `expected`: a gap is
    /// recorded; `expected` moves past `seq` either way.
    pub(crate) fn check_next(&mut self, session: SessionId, seq: u64, expected: &mut u64) {
        if seq != *expected {
            self.push(Problem::Gap {
                session,
                seq: *expected,
            });
        }
        *expected = seq.saturating_add(1);
    }

    /// Records `n` more problems already known not to be kept (the report keeps
    /// `max_problems` already), counting them only.
    pub(crate) fn count_unkept(&mut self, n: u64) {
        debug_assert!(n == 0 || self.problems.len() >= self.max_problems);
        self.problem_count += n;
    }

    /// Records the problems `later` found, after this report's own: those it kept,
    /// then its count of those it did not. Since `later` kept the first
    /// `max_problems` of its own, the result is the report of one check that found
    /// this report's problems and then `later`'s.
    #[cfg(feature = "postgres")]
    pub(crate) fn append(&mut self, later: Self) {
        let unkept = later.problem_count - later.problems.len() as u64;
        for problem in later.problems {
            self.push(problem);
        }
        self.problem_count += unkept;
    }
}

impl fmt::Display for VerifyReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let engine = match &self.engine {
            EngineCheck::Clean => "clean".to_owned(),
            EngineCheck::Damaged(why) => format!("DAMAGED ({why})"),
            EngineCheck::NotRun => "not run".to_owned(),
        };
        writeln!(
            f,
            "{} sessions ({} ended, {} tombstones), {} frames, {} index entries, {} bytes; page check: {engine}; {} problem(s)",
            self.sessions,
            self.ended,
            self.tombstones,
            self.frames,
            self.keys,
            self.bytes,
            self.problem_count
        )?;
        for p in &self.problems {
            writeln!(f, "  {p}")?;
        }
        if self.problem_count > self.problems.len() as u64 {
            writeln!(
                f,
                "  … and {} more",
                self.problem_count - self.problems.len() as u64
            )?;
        }
        Ok(())
    }
}
