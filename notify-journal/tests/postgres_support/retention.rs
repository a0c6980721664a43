//! Helpers of the PostgreSQL retention tests (`postgres_retention*.rs`).

use notify_journal::{
    AppendError, AppendOutcome, JournalBackend, JournalRead, PgJournal, SessionState,
};
use notify_types::{SessionId, Timestamp};

pub fn appended(seq: u64) -> AppendOutcome {
    AppendOutcome {
        seq,
        appended: true,
    }
}

pub fn duplicate(seq: u64) -> AppendOutcome {
    AppendOutcome {
        seq,
        appended: false,
    }
}

/// The next microsecond: stored times are whole microseconds, so this is the
/// earliest horizon that `t` is before.
pub fn just_after(t: Timestamp) -> Timestamp {
    Timestamp::from_microsecond(t.as_microsecond() + 1).unwrap()
}

pub async fn ended_at(j: &PgJournal, s: SessionId) -> Timestamp {
    match j.session_state(s).await.unwrap() {
        SessionState::Ended { ended_at, .. } => ended_at,
        other => panic!("{s} is not ended: {other:?}"),
    }
}

pub fn is_ended(r: &Result<AppendOutcome, AppendError>, s: SessionId, purged: bool) -> bool {
    matches!(r, Err(AppendError::SessionEnded { session, purged: p }) if *session == s && *p == purged)
}
