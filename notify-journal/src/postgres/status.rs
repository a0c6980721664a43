//! The status codes `append_batch` answers with (`o_status`, one row per append),
//! and what each means to the journal: the one home of the codes on the Rust side,
//! read by the writer (`writer/batch.rs`) and by appends in the application's
//! transaction (`ack_in_tx.rs`). The SQL that answers them is the live
//! `append_batch` (`migrations/0009_leases_table.sql` today); each migration that
//! added a code says so in its opening comment.
//!
//! A code never changes meaning in a later schema version. A later version may add
//! codes: [`AppendStatus::from_code`] answers `None` for those, which the callers
//! answer as a schema newer than this build.

use notify_types::{SessionId, Uuid};

use crate::backend::AppendOutcome;
use crate::error::{AppendError, Corruption};

/// One append's answer from `append_batch`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AppendStatus {
    /// 0 (migration 2): written at `o_seq`.
    Appended,
    /// 1 (migration 2): the key was journaled with the same kind and bytes, at
    /// `o_seq`.
    Duplicate,
    /// 2 (migration 2): the key was journaled with other bytes or kind, at `o_seq`.
    Collision,
    /// 3 (migration 2): the caller's lease is not live under its epoch, or another
    /// holder's is; `o_seq` 0.
    Fenced,
    /// 4 (migration 3): the stored frame holds these bytes under another checksum
    /// (changed behind the journal's back), at `o_seq`.
    Damaged,
    /// 5 (migration 4; since migration 5 only for a key the log does not hold):
    /// the session has ended; `o_seq` 0.
    Ended,
    /// 6 (migration 4): the session is purged (a tombstone); `o_seq` 0.
    Purged,
}

impl AppendStatus {
    /// The status of `code`; `None` for a code this build does not know (a newer
    /// schema's).
    pub(crate) fn from_code(code: i16) -> Option<Self> {
        Some(match code {
            0 => Self::Appended,
            1 => Self::Duplicate,
            2 => Self::Collision,
            3 => Self::Fenced,
            4 => Self::Damaged,
            5 => Self::Ended,
            6 => Self::Purged,
            _ => return None,
        })
    }

    /// What the status means for the append of `key` to `session` answered at
    /// `seq`: the outcome, or the refusal. A collision is answered as it stands (the
    /// writer first checks the stored row itself: `writer/batch.rs`).
    pub(crate) fn answer(
        self,
        session: SessionId,
        key: Uuid,
        seq: u64,
    ) -> Result<AppendOutcome, AppendError> {
        match self {
            Self::Appended => Ok(AppendOutcome {
                seq,
                appended: true,
            }),
            Self::Duplicate => Ok(AppendOutcome {
                seq,
                appended: false,
            }),
            Self::Collision => Err(AppendError::Collision { key, seq }),
            Self::Fenced => Err(AppendError::Fenced { session }),
            Self::Ended | Self::Purged => Err(AppendError::SessionEnded {
                session,
                purged: self == Self::Purged,
            }),
            Self::Damaged => Err(AppendError::Corrupt {
                session,
                seq,
                source: Corruption::Inconsistent(
                    "the stored frame's bytes and its checksum disagree".to_owned(),
                ),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::AppendStatus;

    /// Codes 0 to 6 are known, each to one status; any other code is not.
    #[test]
    fn every_known_code_is_one_status_and_no_other_code_is_known() {
        let known: Vec<AppendStatus> = (0..=6).filter_map(AppendStatus::from_code).collect();
        assert_eq!(known.len(), 7);
        for (i, a) in known.iter().enumerate() {
            assert!(known[i + 1..].iter().all(|b| a != b), "{a:?} twice");
        }
        for code in [-1, 7, 8, i16::MAX, i16::MIN] {
            assert_eq!(AppendStatus::from_code(code), None, "{code}");
        }
    }
}
