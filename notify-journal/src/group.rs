//! The atomic-group judgement, written once for every engine
//! ([`JournalBackend::append_all`](crate::JournalBackend::append_all)): the group's
//! records are resolved in order, the first one refused refuses the group
//! ([`AppendError::GroupRefused`], naming it), and a group that expected a head finds
//! its first new frame right after it or is refused ([`AppendError::HeadMoved`]).
//! What "refused" then undoes is each engine's own (redb: inside its write
//! transaction; PostgreSQL: a `ROLLBACK`; the testkit's memory journal: under its lock).

use notify_types::SessionId;

use crate::backend::AppendOutcome;
use crate::error::AppendError;

/// What an atomic group comes to.
#[derive(Debug)]
pub enum GroupVerdict {
    /// Every record was taken (appended, or a duplicate) and the head was the expected
    /// one: commit. Each record's outcome, in order.
    Commit(Vec<AppendOutcome>),
    /// Refused as a whole: nothing of the group may stay, and every record of it is
    /// answered `refusal`.
    Refuse {
        /// The outcomes of the records resolved before the refusal, in order: those
        /// `appended` were written and must be taken back.
        resolved: Vec<AppendOutcome>,
        /// [`AppendError::GroupRefused`] naming the first refused record, or
        /// [`AppendError::HeadMoved`].
        refusal: AppendError,
    },
}

/// Judges an atomic group of `session` from its records' answers, in order. An answer
/// is asked for only while the group stands, so no record after a refused one is
/// resolved (nor written). With `if_head`, the group's first new frame must be at
/// `if_head + 1`; a group of duplicates only writes nothing and is not refused for the
/// head.
///
/// # Errors
///
/// The engine's own failure (`E`, for example a storage error inside the write
/// transaction), as soon as an answer carries one: the group is neither committed nor
/// refused, and the engine fails it as a whole.
pub fn try_judge_group<E>(
    session: SessionId,
    if_head: Option<u64>,
    answers: impl IntoIterator<Item = Result<Result<AppendOutcome, AppendError>, E>>,
) -> Result<GroupVerdict, E> {
    let mut resolved = Vec::new();
    for (index, answer) in answers.into_iter().enumerate() {
        match answer? {
            Ok(outcome) => resolved.push(outcome),
            Err(e) => {
                return Ok(GroupVerdict::Refuse {
                    resolved,
                    refusal: AppendError::GroupRefused {
                        index,
                        source: Box::new(e),
                    },
                });
            }
        }
    }
    if let Some(expected) = if_head
        && let Some(first) = resolved.iter().find(|o| o.appended)
        && first.seq != expected.saturating_add(1)
    {
        let found = first.seq.saturating_sub(1);
        return Ok(GroupVerdict::Refuse {
            resolved,
            refusal: AppendError::HeadMoved {
                session,
                expected,
                found,
            },
        });
    }
    Ok(GroupVerdict::Commit(resolved))
}

/// [`try_judge_group`] for an engine whose answers carry no failure of its own.
pub fn judge_group(
    session: SessionId,
    if_head: Option<u64>,
    answers: impl IntoIterator<Item = Result<AppendOutcome, AppendError>>,
) -> GroupVerdict {
    match try_judge_group(
        session,
        if_head,
        answers.into_iter().map(Ok::<_, std::convert::Infallible>),
    ) {
        Ok(verdict) => verdict,
        Err(never) => match never {},
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn appended(seq: u64) -> Result<AppendOutcome, AppendError> {
        Ok(AppendOutcome {
            seq,
            appended: true,
        })
    }

    fn duplicate(seq: u64) -> Result<AppendOutcome, AppendError> {
        Ok(AppendOutcome {
            seq,
            appended: false,
        })
    }

    #[test]
    fn the_first_refusal_refuses_the_group_and_no_later_record_is_resolved() {
        let s = SessionId::new();
        let mut asked = 0;
        let answers = [appended(4), Err(AppendError::Closed), appended(5)];
        let verdict = judge_group(s, None, answers.into_iter().inspect(|_| asked += 1));
        match verdict {
            GroupVerdict::Refuse {
                resolved,
                refusal: AppendError::GroupRefused { index: 1, source },
            } => {
                assert_eq!(resolved.len(), 1);
                assert!(matches!(*source, AppendError::Closed));
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(asked, 2, "the record after the refused one was resolved");
    }

    #[test]
    fn a_group_whose_first_new_frame_is_not_after_the_expected_head_is_refused() {
        let s = SessionId::new();
        match judge_group(s, Some(2), [duplicate(1), appended(5), appended(6)]) {
            GroupVerdict::Refuse {
                resolved,
                refusal:
                    AppendError::HeadMoved {
                        session,
                        expected: 2,
                        found: 4,
                    },
            } => {
                assert_eq!(session, s);
                assert_eq!(resolved.len(), 3);
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            judge_group(s, Some(4), [duplicate(1), appended(5)]),
            GroupVerdict::Commit(o) if o.len() == 2
        ));
        // Duplicates only: nothing written, nothing to judge the head by.
        assert!(matches!(
            judge_group(s, Some(9), [duplicate(1), duplicate(2)]),
            GroupVerdict::Commit(_)
        ));
    }

    #[test]
    fn an_engine_failure_ends_the_judgement_unjudged() {
        let s = SessionId::new();
        let answers: [Result<Result<AppendOutcome, AppendError>, &str>; 2] =
            [Ok(appended(1)), Err("storage")];
        assert!(matches!(
            try_judge_group(s, Some(0), answers),
            Err("storage")
        ));
    }
}
