//! The shared read connection (reads and lease statements) and the journal's reads.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use notify_types::{SessionId, Uuid};
use tokio::sync::OnceCell;
use tokio_postgres::{Client, Row, Statement};

use super::error::{LeaseError, sanitize};
use super::schema::{PG_SCHEMA_VERSION, Sql, VersionCheck};
use super::{PgJournal, lock, seq_u64, timed_out};
use crate::backend::SeqRecord;
use crate::error::{Corruption, JournalError, StorageError};
use crate::verify::{EngineCheck, Problem, VerifyReport};

/// A reconnect of the read connection, shared by every caller that needs it.
type PendingReader = Arc<OnceCell<Result<Arc<ReaderConn>, ReadFailure>>>;

/// The read connection, and the reconnect in progress if it broke.
#[derive(Default)]
pub(super) struct ReaderSlot {
    pub(super) current: Option<Arc<ReaderConn>>,
    pub(super) pending: Option<PendingReader>,
}

/// The read connection's prepared statements.
pub(super) struct ReaderConn {
    pub(super) client: Client,
    pub(super) lookup: Statement,
    pub(super) replay: Statement,
    pub(super) last_seq: Statement,
    pub(super) acquire: Statement,
    pub(super) renew: Statement,
    pub(super) release: Statement,
    pub(super) lease_info: Statement,
    pub(super) verify_frames: Statement,
    pub(super) verify_heads: Statement,
    pub(super) sessions_after: Statement,
    pub(super) sessions_first: Statement,
    pub(super) session_state: Statement,
    pub(super) purge_step: Statement,
    pub(super) drop_tombstones: Statement,
}

impl ReaderConn {
    pub(super) async fn prepare_within(
        op_timeout: Duration,
        client: Client,
        sql: &Sql,
    ) -> Result<Self, StorageError> {
        tokio::time::timeout(op_timeout, Self::prepare(client, sql))
            .await
            .map_err(|_| timed_out("preparing the read connection", op_timeout))?
    }

    async fn prepare(client: Client, sql: &Sql) -> Result<Self, StorageError> {
        let p = |q: &str| {
            let q = q.to_owned();
            let c = &client;
            async move { c.prepare(&q).await.map_err(|e| sanitize("prepare", &e)) }
        };
        let lookup = p(&sql.lookup).await?;
        let replay = p(&sql.replay).await?;
        let last_seq = p(&sql.last_seq).await?;
        let acquire = p(&sql.acquire).await?;
        let renew = p(&sql.renew).await?;
        let release = p(&sql.release).await?;
        let lease_info = p(&sql.lease_info).await?;
        let verify_frames = p(&sql.verify_frames).await?;
        let verify_heads = p(&sql.verify_heads).await?;
        let sessions_after = p(&sql.sessions_after).await?;
        let sessions_first = p(&sql.sessions_first).await?;
        let session_state = p(&sql.session_state).await?;
        let purge_step = p(&sql.purge_step).await?;
        let drop_tombstones = p(&sql.drop_tombstones).await?;
        Ok(Self {
            client,
            lookup,
            replay,
            last_seq,
            acquire,
            renew,
            release,
            lease_info,
            verify_frames,
            verify_heads,
            sessions_after,
            sessions_first,
            session_state,
            purge_step,
            drop_tombstones,
        })
    }
}

impl PgJournal {
    /// The read connection, reopened if it broke. Concurrent callers that find it
    /// broken share one reconnect (bounded by the connect and operation timeouts)
    /// and its outcome.
    pub(super) async fn reader(&self) -> Result<Arc<ReaderConn>, ReadFailure> {
        if self.closed.load(Ordering::SeqCst) {
            return Err(ReadFailure::Closed);
        }
        // A schema found newer stays newer: nothing more is read.
        if let Some(found) = self.sql.guard.newer() {
            return Err(ReadFailure::SchemaTooNew(found));
        }
        let pending = {
            let mut slot = lock(&self.reader);
            if let Some(conn) = slot.current.as_ref().filter(|c| !c.client.is_closed()) {
                return Ok(Arc::clone(conn));
            }
            slot.current = None;
            Arc::clone(slot.pending.get_or_insert_with(Default::default))
        };
        let result = pending
            .get_or_init(|| async {
                let client = self
                    .connector
                    .connect()
                    .await
                    .map_err(|e| ReadFailure::Storage(e.into_storage()))?;
                // Every reconnect checks the schema version first: a newer build
                // may have migrated it since this journal connected.
                match tokio::time::timeout(self.op_timeout, self.sql.guard.check(&client)).await {
                    Err(_) => {
                        return Err(ReadFailure::Storage(timed_out(
                            "schema check",
                            self.op_timeout,
                        )));
                    }
                    Ok(Err(VersionCheck::TooNew(found))) => {
                        return Err(ReadFailure::SchemaTooNew(found));
                    }
                    Ok(Err(VersionCheck::Failed(e))) => return Err(ReadFailure::Storage(e)),
                    Ok(Ok(())) => {}
                }
                ReaderConn::prepare_within(self.op_timeout, client, &self.sql)
                    .await
                    .map(Arc::new)
                    .map_err(ReadFailure::Storage)
            })
            .await
            .clone();
        let mut slot = lock(&self.reader);
        if slot
            .pending
            .as_ref()
            .is_some_and(|p| Arc::ptr_eq(p, &pending))
        {
            // The first to get here publishes the outcome; a failure is not kept,
            // so the next call tries again.
            slot.pending = None;
            if let Ok(conn) = &result
                && !self.closed.load(Ordering::SeqCst)
            {
                slot.current = Some(Arc::clone(conn));
            }
        }
        result
    }

    /// Runs one statement on the read connection within the operation timeout. On
    /// expiry the connection is dropped (the next call reconnects).
    pub(super) async fn read<T, F, Fut>(&self, op: &'static str, f: F) -> Result<T, ReadFailure>
    where
        F: FnOnce(Arc<ReaderConn>) -> Fut,
        Fut: Future<Output = Result<T, tokio_postgres::Error>>,
    {
        let conn = self.reader().await?;
        self.read_statements.fetch_add(1, Ordering::Relaxed);
        match tokio::time::timeout(self.op_timeout, f(Arc::clone(&conn))).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(ReadFailure::Storage(sanitize(op, &e))),
            Err(_) => {
                let mut slot = lock(&self.reader);
                if slot.current.as_ref().is_some_and(|c| Arc::ptr_eq(c, &conn)) {
                    slot.current = None;
                }
                Err(ReadFailure::Storage(timed_out(op, self.op_timeout)))
            }
        }
    }

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

/// Why the read connection is not available.
#[derive(Clone)]
pub(super) enum ReadFailure {
    Closed,
    Storage(StorageError),
    /// The schema is at this newer version (a newer build migrated it).
    SchemaTooNew(u32),
}

impl From<ReadFailure> for JournalError {
    fn from(f: ReadFailure) -> Self {
        match f {
            ReadFailure::Closed => Self::Closed,
            ReadFailure::Storage(e) => Self::Storage(e),
            ReadFailure::SchemaTooNew(found) => Self::SchemaTooNew {
                found,
                supported: PG_SCHEMA_VERSION,
            },
        }
    }
}

impl From<ReadFailure> for LeaseError {
    fn from(f: ReadFailure) -> Self {
        match f {
            ReadFailure::Closed => Self::Closed,
            ReadFailure::Storage(e) => Self::Storage(e),
            ReadFailure::SchemaTooNew(found) => Self::SchemaTooNew {
                found,
                supported: PG_SCHEMA_VERSION,
            },
        }
    }
}

impl PgJournal {
    /// Whether frame `last + 1` of `session` exists now: a head found ahead of the
    /// frames verify read is then an append made during the check.
    async fn appended_meanwhile(&self, session: Uuid, last: u64) -> Result<bool, JournalError> {
        let from = i64::try_from(last.saturating_add(1)).unwrap_or(i64::MAX);
        let rows: Vec<Row> = self
            .read("verify", |c| async move {
                c.client.query(&c.replay, &[&session, &from, &1_i64]).await
            })
            .await?;
        let next = rows
            .first()
            .map(|row| row.try_get::<_, Option<i64>>(0))
            .transpose()
            .map_err(|e| JournalError::Storage(sanitize("verify", &e)))?
            .flatten();
        Ok(next == Some(from))
    }
}

/// The sessions' heads in ID order, read page by page as [`PgJournal::verify`]'s
/// frames reach them.
struct Heads {
    /// The last session read (the next page starts after it).
    after: Uuid,
    /// Read and not yet compared, in ID order.
    page: std::collections::VecDeque<(Uuid, u64)>,
    /// The last page was short: nothing is left to read.
    done: bool,
}

impl PgJournal {
    /// The next head with a session ID at most `upto` (any, when `None`), reading the
    /// next page when the one in hand is used up.
    async fn next_head(
        &self,
        heads: &mut Heads,
        upto: Option<Uuid>,
    ) -> Result<Option<(Uuid, u64)>, JournalError> {
        if heads.page.is_empty() && !heads.done {
            let (a, page) = (heads.after, self.page_rows);
            let rows: Vec<Row> = self
                .read("verify", |c| async move {
                    c.client.query(&c.verify_heads, &[&a, &page]).await
                })
                .await?;
            heads.done = i64::try_from(rows.len()).unwrap_or(i64::MAX) < page;
            for row in rows {
                let get = |e: tokio_postgres::Error| JournalError::Storage(sanitize("verify", &e));
                let session: Uuid = row.try_get(0).map_err(get)?;
                let head: i64 = row.try_get(1).map_err(get)?;
                heads.after = session;
                heads
                    .page
                    .push_back((session, seq_u64(head).map_err(JournalError::Storage)?));
            }
        }
        match heads.page.front() {
            Some(&(s, _)) if upto.is_none_or(|u| s <= u) => Ok(heads.page.pop_front()),
            _ => Ok(None),
        }
    }

    /// Compares every head up to `upto` (all that are left, when `None`) with the last
    /// frame verify read of its session: `framed` is the session whose frames were
    /// read last and its last seq; every earlier head's session had none.
    async fn settle_heads(
        &self,
        heads: &mut Heads,
        upto: Option<Uuid>,
        framed: Option<(Uuid, u64)>,
        report: &mut VerifyReport,
    ) -> Result<(), JournalError> {
        while let Some((session, mut head)) = self.next_head(heads, upto).await? {
            let last = match framed {
                Some((s, last)) if s == session => last,
                _ => 0,
            };
            let sid = SessionId::from_uuid(session);
            if head < last {
                // The page of heads may have been read before this session's frames:
                // an append made in between is not damage. Read the head again.
                head = self.last_seq_inner(sid).await?;
            }
            if head < last {
                report.push(Problem::Head {
                    session: sid,
                    head,
                    last,
                });
            } else if head > last && !self.appended_meanwhile(session, last).await? {
                // Not an append made during the check: the log's tail is gone.
                report.push(Problem::Gap {
                    session: sid,
                    seq: last + 1,
                });
            }
        }
        Ok(())
    }

    /// The deep integrity check: every frame's checksum (frames written before schema
    /// version 3 have none and are only decoded) and decoding, each frame's key and
    /// session against its row, every session's log contiguous from 1, and every
    /// session's `last_seq` equal to its last frame. Purged sessions are skipped: their
    /// logs are being removed, and no read answers them.
    ///
    /// Reads page by page ([`PgOptions::page_rows`](super::PgOptions::page_rows) rows per
    /// statement, each bounded by the operation timeout): the frames in (session, seq)
    /// order and, merged with them, the sessions' heads in session order, each head
    /// compared once the frames have passed its session. So memory holds a page of
    /// each and the problems kept, whatever the number of sessions or frames, and
    /// appends go on; the pages are not one snapshot, so a frame appended meanwhile
    /// can show as a head ahead of what was read, never as damage. Keeps the first
    /// `max_problems` problems (the frames' first, then the heads') and counts them
    /// all.
    ///
    /// The frames' unique `(session, key)` index is PostgreSQL's own: one frame per key
    /// holds by construction, and each frame's key column is checked against its
    /// record. PostgreSQL's page checks (data checksums, `amcheck`) are the server's:
    /// [`VerifyReport::engine`] is `NotRun`.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future abandons the report; the check only reads.
    ///
    /// # Errors
    ///
    /// [`JournalError::Storage`] or [`JournalError::Closed`] when the check itself
    /// cannot read; damage is reported in the report, not as an error.
    pub async fn verify(&self, max_problems: usize) -> Result<VerifyReport, JournalError> {
        let mut report = VerifyReport::new(max_problems);
        report.engine = EngineCheck::NotRun;
        // The heads' problems, kept apart so the report lists them after the frames'.
        let mut head_problems = VerifyReport::new(max_problems);
        let mut heads = Heads {
            after: Uuid::nil(),
            page: std::collections::VecDeque::new(),
            done: false,
        };
        let page = self.page_rows;
        let mut cursor = (Uuid::nil(), 0_i64);
        // The session whose frames are being read, and its last seq so far.
        let mut current: Option<(Uuid, u64)> = None;
        loop {
            let (s, q) = cursor;
            let rows: Vec<Row> = self
                .read("verify", |c| async move {
                    c.client.query(&c.verify_frames, &[&s, &q, &page]).await
                })
                .await?;
            let n = rows.len();
            for row in rows {
                let get = |e: tokio_postgres::Error| JournalError::Storage(sanitize("verify", &e));
                let session: Uuid = row.try_get(0).map_err(get)?;
                let seq_raw: i64 = row.try_get(1).map_err(get)?;
                let key: Uuid = row.try_get(2).map_err(get)?;
                let bytes: &[u8] = row.try_get(3).map_err(get)?;
                let checksum: Option<i32> = row.try_get(4).map_err(get)?;
                cursor = (session, seq_raw);
                let seq = seq_u64(seq_raw).map_err(JournalError::Storage)?;
                let sid = SessionId::from_uuid(session);
                report.frames += 1;
                report.keys += 1;
                report.bytes += bytes.len() as u64;
                let expected = match current {
                    Some((s, last)) if s == session => last + 1,
                    done => {
                        // The frames have passed the session before: its head, and
                        // those of the sessions without frames before this one.
                        if let Some((s, _)) = done {
                            self.settle_heads(&mut heads, Some(s), done, &mut head_problems)
                                .await?;
                        }
                        report.sessions += 1;
                        1
                    }
                };
                if seq != expected {
                    report.push(Problem::Gap {
                        session: sid,
                        seq: expected,
                    });
                }
                current = Some((session, seq));
                match decode_row(sid, seq, bytes, checksum) {
                    Err(JournalError::Corrupt { source, .. }) => report.push(Problem::Frame {
                        session: sid,
                        seq,
                        cause: source,
                    }),
                    Err(other) => return Err(other),
                    Ok((_, record)) if record.key() != key => report.push(Problem::IndexEntry {
                        session: sid,
                        key,
                        detail: format!("names frame {seq}, whose record has key {}", record.key()),
                    }),
                    Ok(_) => {}
                }
            }
            if i64::try_from(n).unwrap_or(i64::MAX) < page {
                break;
            }
        }
        if let Some((s, _)) = current {
            self.settle_heads(&mut heads, Some(s), current, &mut head_problems)
                .await?;
        }
        self.settle_heads(&mut heads, None, None, &mut head_problems)
            .await?;
        report.append(head_problems);
        Ok(report)
    }
}

/// A stored frame checked and decoded: against its checksum when it has one (frames
/// written before schema version 3 have none and are only decoded).
pub(super) fn decode_row(
    session: SessionId,
    seq: u64,
    bytes: &[u8],
    checksum: Option<i32>,
) -> Result<SeqRecord, JournalError> {
    match checksum {
        Some(sum) => crate::integrity::decode_checked_frame(session, seq, bytes, from_pg(sum)),
        None => crate::integrity::decode_frame(session, seq, bytes),
    }
}

/// A frame checksum as PostgreSQL's `int4` (the same 32 bits).
pub(super) fn pg_checksum(bytes: &[u8]) -> i32 {
    i32::from_be_bytes(crate::integrity::frame_checksum(bytes).to_be_bytes())
}

/// A stored `int4` checksum back as the `u32` it is.
pub(super) fn from_pg(sum: i32) -> u32 {
    u32::from_be_bytes(sum.to_be_bytes())
}
