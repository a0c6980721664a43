//! Session end and retention on PostgreSQL: a session's state, purge steps and
//! dropping tombstones (schema version 4 and later; see migrations 4 and 5 and
//! `docs/postgres.md`).
//!
//! Ending is an append (the writer's `append_batch` stamps `ended_at`), so it follows
//! the lease rules of every append. Purging runs the schema's `purge_step` function,
//! one statement (one implicit transaction) per step, on the read connection: reads
//! queued behind a step wait for it, appends (on the writers' connections) do not.

use std::error::Error as StdError;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use notify_types::{SessionId, Timestamp, Uuid};
use tokio_postgres::Row;
use tokio_postgres::types::{FromSql, Type};

use super::error::sanitize;
use super::{PgJournal, seq_u64, timed_out};
use crate::error::{JournalError, StorageError};
use crate::retention::{ImportStateError, PurgeStep, SessionState, Tombstone, check_importable};

/// Microseconds from the Unix epoch to PostgreSQL's (2000-01-01).
const PG_EPOCH_US: i64 = 946_684_800_000_000;

/// PostgreSQL's earliest `timestamptz` (4714-11-24 BC), in Unix microseconds.
const PG_MIN_UNIX_US: i64 = -211_813_488_000_000_000 + PG_EPOCH_US;

/// A `timestamptz` as PostgreSQL sends it: microseconds since 2000-01-01. Read
/// directly, so a stored value out of [`Timestamp`]'s range (`infinity`, say) is a
/// typed error, never a panic.
struct PgMicros(i64);

impl<'a> FromSql<'a> for PgMicros {
    fn from_sql(_: &Type, raw: &'a [u8]) -> Result<Self, Box<dyn StdError + Sync + Send>> {
        let bytes: [u8; 8] = raw
            .try_into()
            .map_err(|_| "a timestamptz is 8 bytes".to_owned())?;
        Ok(Self(i64::from_be_bytes(bytes)))
    }

    fn accepts(ty: &Type) -> bool {
        *ty == Type::TIMESTAMPTZ
    }
}

impl PgMicros {
    fn timestamp(&self) -> Result<Timestamp, StorageError> {
        self.0
            .checked_add(PG_EPOCH_US)
            .and_then(|us| Timestamp::from_microsecond(us).ok())
            .ok_or_else(|| StorageError::msg("postgres: a stored session time is out of range"))
    }
}

/// A time to store, as a bind parameter: whole microseconds (PostgreSQL's precision;
/// what is finer is dropped, toward the past), or `None` outside what it can store.
fn stored_time(t: Timestamp) -> Option<SystemTime> {
    let ns = t.as_nanosecond();
    let us = i64::try_from(ns.div_euclid(1000)).ok()?;
    if us <= PG_MIN_UNIX_US {
        return None;
    }
    let since = Duration::from_micros(us.unsigned_abs());
    if us >= 0 {
        UNIX_EPOCH.checked_add(since)
    } else {
        UNIX_EPOCH.checked_sub(since)
    }
}

/// A horizon as a bind parameter: `t` rounded up to PostgreSQL's microseconds (stored
/// times are whole microseconds, so `stored < t` exactly when `stored < ceil(t)`), or
/// `None` when it is before any time PostgreSQL can store (nothing is before it).
fn horizon(t: Timestamp) -> Option<SystemTime> {
    let mut us = t.as_microsecond();
    if Timestamp::from_microsecond(us).is_ok_and(|floor| floor < t) {
        us = us.saturating_add(1);
    }
    if us <= PG_MIN_UNIX_US {
        return None;
    }
    let since = Duration::from_micros(us.unsigned_abs());
    if us >= 0 {
        UNIX_EPOCH.checked_add(since)
    } else {
        UNIX_EPOCH.checked_sub(since)
    }
}

/// A session's state from the `last_seq, ended_at, purged_at` columns of `row`, from
/// column `at` on.
fn state_of(row: &Row, at: usize) -> Result<SessionState, JournalError> {
    let get = storage("session state");
    let last_seq = seq_u64(row.try_get(at).map_err(get)?).map_err(JournalError::Storage)?;
    let ended: Option<PgMicros> = row.try_get(at + 1).map_err(get)?;
    let purged: Option<PgMicros> = row.try_get(at + 2).map_err(get)?;
    let time = |t: &PgMicros| t.timestamp().map_err(JournalError::Storage);

    Ok(match (ended, purged) {
        (None, None) => SessionState::Live,
        (Some(ended), None) => SessionState::Ended {
            ended_at: time(&ended)?,
            last_seq,
        },
        (Some(ended), Some(purged)) => SessionState::Purged(Tombstone {
            ended_at: time(&ended)?,
            purged_at: time(&purged)?,
            last_seq,
            frames: last_seq,
        }),
        // The schema's check constraint forbids it; never answered as live.
        (None, Some(_)) => {
            return Err(JournalError::Storage(StorageError::msg(
                "postgres: a session is purged but not ended",
            )));
        }
    })
}

fn storage(op: &'static str) -> impl Fn(tokio_postgres::Error) -> JournalError + Copy {
    move |e| JournalError::Storage(sanitize(op, &e))
}

impl PgJournal {
    pub(super) async fn session_state_inner(
        &self,
        session: SessionId,
    ) -> Result<SessionState, JournalError> {
        let s = *session.as_uuid();
        let row: Option<Row> = self
            .read("session state", |c| async move {
                c.client.query_opt(&c.session_state, &[&s]).await
            })
            .await?;
        let Some(row) = row else {
            return Ok(SessionState::Live);
        };
        state_of(&row, 0)
    }

    /// Writes the states of sessions moved here from another journal (`notify
    /// import`), so that they answer as they did there: an ended session keeps its
    /// original end time (and so its place in the purge order), a purged one comes back
    /// as its tombstone (end time, purge time, last seq and frame count), refusing a
    /// late append with [`AppendError::SessionEnded`](crate::AppendError::SessionEnded)
    /// `{ purged: true }`. Times are stored to the microsecond, as every time in
    /// PostgreSQL (what is finer is dropped).
    ///
    /// For [`SessionState::Ended`], the session's frames must be imported first, its
    /// end marker last (which ends it, stamped with the time of that append): its end
    /// time is then set to the given one. For [`SessionState::Purged`], the journal must
    /// hold nothing of the session (no frame, no end; a row holding only a lease is
    /// taken over). A state the journal already holds exactly is left as it is, so an
    /// interrupted import can be run again.
    ///
    /// All the states are written in one transaction, on a connection of its own that
    /// locks the sessions' rows (appends to them wait), or none is. Bounded by the
    /// operation timeout.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future drops the connection: the transaction rolls back unless it
    /// had committed.
    ///
    /// # Errors
    ///
    /// [`ImportStateError::Invalid`] for a state no import can write;
    /// [`ImportStateError::Conflict`] when the journal holds a session otherwise (not
    /// ended at that last seq, or known at all for a tombstone);
    /// [`ImportStateError::Journal`] for a connection or storage failure, a stored time
    /// out of range, or a time PostgreSQL cannot store. Nothing is written on any
    /// error.
    pub async fn import_states(
        &self,
        states: Vec<(SessionId, SessionState)>,
    ) -> Result<(), ImportStateError> {
        for (session, state) in &states {
            check_importable(*session, state)?;
        }
        if states.is_empty() {
            return Ok(());
        }
        let op = "import session states";
        match tokio::time::timeout(self.op_timeout, self.import_states_txn(&states)).await {
            Ok(result) => result,
            Err(_) => Err(JournalError::Storage(timed_out(op, self.op_timeout)).into()),
        }
    }

    async fn import_states_txn(
        &self,
        states: &[(SessionId, SessionState)],
    ) -> Result<(), ImportStateError> {
        let get = storage("import session states");
        let mut client = self
            .connector
            .connect()
            .await
            .map_err(|e| JournalError::Storage(e.into_storage()))?;
        let txn = client.transaction().await.map_err(get)?;
        let ids: Vec<Uuid> = states.iter().map(|(s, _)| *s.as_uuid()).collect();
        let rows = txn
            .query(&self.sql.import_lock, &[&ids])
            .await
            .map_err(get)?;
        let mut held = std::collections::HashMap::new();
        for row in &rows {
            let session: Uuid = row.try_get(0).map_err(get)?;
            let done: bool = row.try_get(4).map_err(get)?;
            held.insert(session, (state_of(row, 1)?, done));
        }
        let time = |t: Timestamp| {
            stored_time(t).ok_or_else(|| {
                JournalError::Storage(StorageError::msg(format!(
                    "postgres: the time {t} cannot be stored"
                )))
            })
        };
        let seq = |n: u64| {
            i64::try_from(n)
                .map_err(|_| JournalError::Storage(StorageError::msg("postgres: seq out of range")))
        };
        for &(session, wanted) in states {
            let s = *session.as_uuid();
            let now = held.get(&s).map_or((SessionState::Live, false), |h| *h);
            let conflict = || ImportStateError::Conflict {
                session,
                held: now.0,
            };
            let written = match (wanted, now) {
                (
                    SessionState::Ended { ended_at, last_seq },
                    (
                        SessionState::Ended {
                            ended_at: was,
                            last_seq: at,
                        },
                        _,
                    ),
                ) if at == last_seq => {
                    if stored_time(was) == stored_time(ended_at) {
                        continue;
                    }
                    txn.execute(
                        &self.sql.import_end,
                        &[&s, &time(ended_at)?, &seq(last_seq)?],
                    )
                    .await
                    .map_err(get)?
                }
                (SessionState::Purged(t), (SessionState::Purged(h), true))
                    if stored_time(t.ended_at) == stored_time(h.ended_at)
                        && stored_time(t.purged_at) == stored_time(h.purged_at)
                        && t.last_seq == h.last_seq =>
                {
                    continue;
                }
                (SessionState::Purged(t), (SessionState::Live, _)) => txn
                    .execute(
                        &self.sql.import_tombstone,
                        &[
                            &s,
                            &seq(t.last_seq)?,
                            &time(t.ended_at)?,
                            &time(t.purged_at)?,
                        ],
                    )
                    .await
                    .map_err(get)?,
                _ => return Err(conflict()),
            };
            // A row this transaction has not locked (inserted meanwhile) or one that
            // holds frames: refused like any other conflict.
            if written != 1 {
                return Err(conflict());
            }
            held.insert(s, (wanted, true));
        }
        txn.commit().await.map_err(get)?;
        Ok(())
    }

    pub(super) async fn purge_step_inner(
        &self,
        ended_before: Timestamp,
        max_frames: usize,
    ) -> Result<PurgeStep, JournalError> {
        // Before any storable time, nothing new is due; but an unfinished purge is
        // finished whatever the horizon, so ask with the earliest one.
        let before = horizon(ended_before).unwrap_or_else(|| {
            let since = Duration::from_micros(PG_MIN_UNIX_US.unsigned_abs());
            UNIX_EPOCH.checked_sub(since).unwrap_or(UNIX_EPOCH)
        });
        let max = i64::try_from(max_frames.max(1)).unwrap_or(i64::MAX);
        let holder = self.holder;
        let started = Instant::now();
        let row: Option<Row> = self
            .read("purge step", |c| async move {
                c.client
                    .query_opt(&c.purge_step, &[&holder, &before, &max])
                    .await
            })
            .await?;
        let Some(row) = row else {
            return Ok(PurgeStep::IDLE);
        };
        let get = storage("purge step");
        let session: Uuid = row.try_get(0).map_err(get)?;
        let removed: i64 = row.try_get(1).map_err(get)?;
        let finished: bool = row.try_get(2).map_err(get)?;
        let frames_removed = seq_u64(removed).map_err(JournalError::Storage)?;
        crate::metrics::purge_step(
            crate::metrics::POSTGRES,
            u64::from(finished),
            frames_removed,
            started.elapsed(),
        );
        Ok(PurgeStep {
            session: Some(SessionId::from_uuid(session)),
            frames_removed,
            finished,
        })
    }

    pub(super) async fn drop_tombstones_inner(
        &self,
        purged_before: Timestamp,
        limit: usize,
    ) -> Result<u64, JournalError> {
        let Some(before) = horizon(purged_before) else {
            return Ok(0);
        };
        // In statements of at most `page_rows` deletions each, so no statement's work
        // grows with `limit`; a statement that finds fewer than it may delete ends it.
        let mut left = i64::try_from(limit).unwrap_or(i64::MAX);
        let mut dropped = 0;
        while left > 0 {
            let step = left.min(self.page_rows);
            let started = std::time::Instant::now();
            let n = self
                .read("drop tombstones", |c| async move {
                    c.client
                        .execute(&c.drop_tombstones, &[&before, &step])
                        .await
                })
                .await?;
            if n > 0 {
                crate::metrics::drop_step(crate::metrics::POSTGRES, n, started.elapsed());
            }
            dropped += n;
            left -= step;
            if i64::try_from(n).unwrap_or(i64::MAX) < step {
                break;
            }
        }
        Ok(dropped)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unix_us(t: SystemTime) -> i128 {
        match t.duration_since(UNIX_EPOCH) {
            Ok(d) => i128::try_from(d.as_micros()).unwrap_or(i128::MAX),
            Err(e) => -i128::try_from(e.duration().as_micros()).unwrap_or(i128::MAX),
        }
    }

    #[test]
    fn horizons_round_up_to_whole_microseconds() {
        let whole = Timestamp::from_microsecond(1_700_000_000_123_456).unwrap();
        assert_eq!(unix_us(horizon(whole).unwrap()), 1_700_000_000_123_456);
        let past = Timestamp::new(1_700_000_000, 123_456_001).unwrap();
        assert_eq!(unix_us(horizon(past).unwrap()), 1_700_000_000_123_457);
        let before_epoch = Timestamp::new(-10, -1).unwrap();
        assert_eq!(unix_us(horizon(before_epoch).unwrap()), -10_000_000);
    }

    #[test]
    fn horizons_before_postgres_time_are_none() {
        assert_eq!(horizon(Timestamp::MIN), None);
        assert!(horizon(Timestamp::MAX).is_some());
    }

    #[test]
    fn stored_times_convert_or_fail_typed() {
        assert_eq!(
            PgMicros(0).timestamp().unwrap(),
            Timestamp::from_second(946_684_800).unwrap()
        );
        assert!(PgMicros(i64::MAX).timestamp().is_err());
        assert!(PgMicros(i64::MIN).timestamp().is_err());
    }
}
