//! The journal's reads of a session and of the session listing: `lookup`, `replay`,
//! `last_seq`, `sessions` and `sessions_after`, each checked as the redb journal's.

use notify_types::{SessionId, Uuid};
use tokio_postgres::Row;

use super::error::sanitize;
use super::frame::decode_row;
use super::{PgJournal, seq_u64};
use crate::backend::SeqRecord;
use crate::error::{Corruption, JournalError};

impl PgJournal {
    pub(super) async fn lookup_inner(
        &self,
        session: SessionId,
        key: Uuid,
    ) -> Result<Option<u64>, JournalError> {
        let s = *session.as_uuid();
        let row = self
            .read("lookup", |c| async move {
                c.client.query_opt(&c.lookup, &[&s, &key]).await
            })
            .await?;
        // No row: the session is unknown.
        let Some(row) = row else {
            return Ok(None);
        };
        let get = |e: tokio_postgres::Error| JournalError::Storage(sanitize("lookup", &e));
        if row.try_get::<_, bool>(3).map_err(get)? {
            return Err(JournalError::Purged { session });
        }
        // NULL frame columns: the key is unknown.
        let Some(seq) = row.try_get::<_, Option<i64>>(0).map_err(get)? else {
            return Ok(None);
        };
        let seq = seq_u64(seq).map_err(JournalError::Storage)?;
        let bytes: &[u8] = row.try_get(1).map_err(get)?;
        let checksum: Option<i32> = row.try_get(2).map_err(get)?;
        // A hit is confirmed against its frame: intact, and carrying the key.
        let (_, record) = decode_row(session, seq, bytes, checksum)?;
        if record.key() != key {
            return Err(JournalError::Corrupt {
                session,
                seq,
                source: Corruption::Misplaced {
                    found: format!("a frame of key {}", record.key()),
                },
            });
        }
        Ok(Some(seq))
    }

    pub(super) async fn replay_inner(
        &self,
        session: SessionId,
        from_seq: u64,
        limit: usize,
    ) -> Result<Vec<SeqRecord>, JournalError> {
        // A start beyond any storable sequence has no frames; a huge limit is "all".
        let Ok(from) = i64::try_from(from_seq) else {
            return Ok(Vec::new());
        };
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        if limit == 0 {
            return Ok(Vec::new());
        }
        let s = *session.as_uuid();
        let rows: Vec<Row> = self
            .read("replay", |c| async move {
                c.client.query(&c.replay, &[&s, &from, &limit]).await
            })
            .await?;
        let get = |e: tokio_postgres::Error| JournalError::Storage(sanitize("replay", &e));
        let mut out = Vec::with_capacity(rows.len());
        let mut head = 0;
        for row in rows {
            if row.try_get::<_, bool>(4).map_err(get)? {
                return Err(JournalError::Purged { session });
            }
            let last: i64 = row.try_get(3).map_err(get)?;
            head = seq_u64(last).map_err(JournalError::Storage)?;
            // The one row of an empty page has no frame.
            let Some(seq) = row.try_get::<_, Option<i64>>(0).map_err(get)? else {
                continue;
            };
            let seq = seq_u64(seq).map_err(JournalError::Storage)?;
            let bytes: &[u8] = row.try_get(1).map_err(get)?;
            let checksum: Option<i32> = row.try_get(2).map_err(get)?;
            out.push(decode_row(session, seq, bytes, checksum)?);
        }
        let limit = usize::try_from(limit).unwrap_or(usize::MAX);
        crate::integrity::check_replay_page(session, from_seq, limit, Some(head), &out)?;
        Ok(out)
    }

    pub(super) async fn last_seq_inner(&self, session: SessionId) -> Result<u64, JournalError> {
        let s = *session.as_uuid();
        let row = self
            .read("last seq", |c| async move {
                c.client.query_opt(&c.last_seq, &[&s]).await
            })
            .await?;
        match row {
            None => Ok(0),
            Some(row) => {
                let seq: i64 = row
                    .try_get(0)
                    .map_err(|e| JournalError::Storage(sanitize("last seq", &e)))?;
                seq_u64(seq).map_err(JournalError::Storage)
            }
        }
    }

    /// Every session, read in pages of [`PgOptions::page_rows`](super::PgOptions::page_rows)
    /// (each its own bounded statement, so the listing is not one snapshot: a session
    /// created meanwhile may or may not be listed).
    pub(super) async fn sessions_inner(&self) -> Result<Vec<SessionId>, JournalError> {
        let page = usize::try_from(self.page_rows).unwrap_or(usize::MAX);
        let mut out: Vec<SessionId> = Vec::new();
        loop {
            let next = self.sessions_after_inner(out.last().copied(), page).await?;
            let n = next.len();
            out.extend(next);
            if n < page {
                return Ok(out);
            }
        }
    }

    pub(super) async fn sessions_after_inner(
        &self,
        after: Option<SessionId>,
        limit: usize,
    ) -> Result<Vec<SessionId>, JournalError> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows: Vec<Row> = self
            .read("list sessions", |c| async move {
                match after {
                    Some(a) => {
                        c.client
                            .query(&c.sessions_after, &[a.as_uuid(), &limit])
                            .await
                    }
                    None => c.client.query(&c.sessions_first, &[&limit]).await,
                }
            })
            .await?;
        session_ids(&rows)
    }
}

/// The session IDs of a listing's rows.
fn session_ids(rows: &[Row]) -> Result<Vec<SessionId>, JournalError> {
    rows.iter()
        .map(|row| {
            row.try_get::<_, Uuid>(0)
                .map(SessionId::from_uuid)
                .map_err(|e| JournalError::Storage(sanitize("list sessions", &e)))
        })
        .collect()
}
