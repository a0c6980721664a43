//! The deep integrity check of the PostgreSQL journal ([`PgJournal::verify`]): the
//! frames and the sessions' heads, page by page.

use notify_types::{SessionId, Uuid};
use tokio_postgres::Row;

use super::error::sanitize;
use super::frame::decode_row;
use super::{PgJournal, seq_u64};
use crate::error::JournalError;
use crate::verify_report::{EngineCheck, Problem, VerifyReport};

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
    /// session against its row, every session's log contiguous from 1, every
    /// session's `last_seq` equal to its last frame, and every frame belonging to a
    /// session row (else [`Problem::Orphan`]). Purged sessions are skipped: their
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
                let rowless: bool = row.try_get(5).map_err(get)?;
                cursor = (session, seq_raw);
                report.frames += 1;
                report.bytes += bytes.len() as u64;
                if rowless {
                    // No session row: no log, head or read reaches it.
                    report.push(Problem::Orphan {
                        location: format!("frames row (session {session}, seq {seq_raw})"),
                    });
                    continue;
                }
                let seq = seq_u64(seq_raw).map_err(JournalError::Storage)?;
                let sid = SessionId::from_uuid(session);
                report.keys += 1;
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
