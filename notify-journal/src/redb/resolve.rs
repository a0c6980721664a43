//! Resolving one queued append inside the writer's write transaction: the session's
//! row first (an ended or purged session refuses), then the idempotency index (a
//! duplicate or a collision, checked against the frame it names), else a new frame with
//! its position and index entry, and, for an end marker, the session's row.

use std::collections::HashMap;

use notify_types::{SessionId, Timestamp, Uuid, ended_event_id};
use redb::ReadableTable;

use super::census::{Census, Miss, confirm_miss};
use super::format::RETENTION;
use super::frame;
use super::state::SessionRow;
use super::writer::{BatchFailure, HEADS_CACHE_MAX, Reply, Request, before};
use crate::backend::AppendOutcome;
use crate::error::{AppendError, Corruption, StorageError};

/// The journal's tables inside one write transaction.
pub(super) struct Tables<'txn, 'w> {
    pub(super) log: redb::Table<'txn, u64, &'static [u8]>,
    pub(super) positions: redb::Table<'txn, (u128, u64), u64>,
    pub(super) keys: redb::Table<'txn, (u128, u128), u64>,
    pub(super) sessions: redb::Table<'txn, u128, &'static [u8]>,
    /// Opened (created, in a file of an older build) by the first end marker.
    pub(super) retention: Option<redb::Table<'txn, (u8, i128, u128), ()>>,
    pub(super) txn: &'txn redb::WriteTransaction,
    pub(super) frame: &'w mut Vec<u8>,
    /// The key census that confirms every index miss before a new frame is written
    /// (`census.rs`); `None` when [`JournalOptions::confirm_misses`] is off.
    ///
    /// [`JournalOptions::confirm_misses`]: crate::JournalOptions::confirm_misses
    pub(super) census: Option<&'w Census>,
    /// The committed head of each session this batch appended to, as it was before the
    /// batch: the census covers committed frames only.
    pub(super) base: &'w mut HashMap<u128, u64>,
    /// The frames this batch wrote (`(session, seq, key)`), for the census once it
    /// commits.
    pub(super) fresh: &'w mut Vec<(u128, u64, u128)>,
}

/// What an append may do to a session, by its row.
enum Admission {
    /// Live (no row): appends are taken.
    Live,
    /// Ended: only the end marker's key, which must be a duplicate.
    EndMarkerOnly(SessionRow),
}

impl<'txn> Tables<'txn, '_> {
    /// Whether `req` may be appended to its session: refused (the reply) if the session
    /// ended or was purged, unless it is the end marker's key on an ended session.
    fn admit(&self, req: &Request) -> Result<Result<Admission, Reply>, BatchFailure> {
        let session = SessionId::from_uuid(Uuid::from_u128(req.session));
        let Some(guard) = self
            .sessions
            .get(req.session)
            .map_err(before("read session row"))?
        else {
            return Ok(Ok(Admission::Live));
        };
        let row = match SessionRow::parse(req.session, guard.value()) {
            Ok(row) => row,
            Err(source) => {
                return Ok(Err(Err(AppendError::Corrupt {
                    session,
                    seq: 0,
                    source,
                })));
            }
        };
        let refused = |purged| Ok(Err(Err(AppendError::SessionEnded { session, purged })));
        if row.is_tombstoned() {
            return refused(true);
        }
        if req.key != ended_event_id(session).as_uuid().as_u128() {
            return refused(false);
        }
        Ok(Ok(Admission::EndMarkerOnly(row)))
    }

    /// Writes the row (and retention entry) of a session whose end marker is `seq`.
    fn end(&mut self, session: u128, seq: u64) -> Result<(), BatchFailure> {
        let row = SessionRow::ended(session, Timestamp::now(), seq);
        self.sessions
            .insert(session, row.encode().as_slice())
            .map_err(before("write session row"))?;
        let retention = match &mut self.retention {
            Some(t) => t,
            None => self.retention.insert(
                self.txn
                    .open_table(RETENTION)
                    .map_err(before("open retention"))?,
            ),
        };
        retention
            .insert(row.retention_key(), ())
            .map_err(before("write retention"))?;
        Ok(())
    }

    /// The log's next free position: one past its last entry.
    pub(super) fn next_position(&self) -> Result<u64, BatchFailure> {
        let last = self
            .log
            .last()
            .map_err(before("read the log's end"))?
            .map_or(0, |(k, _)| k.value());
        last.checked_add(1)
            .ok_or_else(|| BatchFailure::BeforeCommit(StorageError::msg("log positions exhausted")))
    }

    /// Resolves one request against the transaction's current view: a duplicate, a
    /// collision, or a new frame (written with its position and index entry; its head
    /// staged).
    pub(super) fn resolve(
        &mut self,
        req: &Request,
        next_pos: &mut u64,
        staged: &mut HashMap<u128, u64>,
        committed: &mut HashMap<u128, u64>,
    ) -> Result<Reply, BatchFailure> {
        let admission = match self.admit(req)? {
            Ok(a) => a,
            Err(refused) => return Ok(refused),
        };
        let existing = self
            .keys
            .get((req.key, req.session))
            .map_err(before("read index"))?
            .map(|g| g.value());
        let session = SessionId::from_uuid(Uuid::from_u128(req.session));
        match (existing, admission) {
            (Some(pos), Admission::EndMarkerOnly(_)) => return self.compare(req, pos),
            (Some(pos), Admission::Live) => {
                let reply = self.compare(req, pos)?;
                return Ok(match reply {
                    // The end marker is journaled, yet the session has no row: its end
                    // was lost (a damaged or tampered sessions table).
                    Ok(AppendOutcome { seq, .. }) if req.ends => Err(AppendError::Corrupt {
                        session,
                        seq,
                        source: Corruption::Inconsistent(
                            "the session's end marker is journaled but the session is not ended"
                                .to_owned(),
                        ),
                    }),
                    other => other,
                });
            }
            (None, Admission::EndMarkerOnly(row)) => {
                return Ok(Err(AppendError::Corrupt {
                    session,
                    seq: row.last_seq,
                    source: Corruption::Inconsistent(
                        "the session ended but its end marker is not indexed".to_owned(),
                    ),
                }));
            }
            (None, Admission::Live) => {}
        }
        let (head, committed_head) = match staged.get(&req.session) {
            Some(h) => (*h, self.base.get(&req.session).copied().unwrap_or(0)),
            None => {
                let h = match committed.get(&req.session) {
                    Some(h) => *h,
                    None => {
                        let h = self
                            .positions
                            .range((req.session, 0)..=(req.session, u64::MAX))
                            .map_err(before("read positions"))?
                            .next_back()
                            .transpose()
                            .map_err(before("read position"))?
                            .map_or(0, |(k, _)| k.value().1);
                        // A committed value: safe to remember whatever this batch's fate.
                        if committed.len() < HEADS_CACHE_MAX {
                            committed.insert(req.session, h);
                        }
                        h
                    }
                };
                (h, h)
            }
        };
        // The index missed: believed only if the session's own log agrees (a damaged
        // index page can hide a key; writing would journal it twice).
        if let Some(census) = self.census {
            match confirm_miss(
                census,
                census.generation(),
                &self.positions,
                &self.log,
                req.session,
                req.key,
                committed_head,
            )
            .map_err(before("read the session's log"))?
            {
                Miss::Confirmed => {}
                Miss::Damaged(seq, source) => {
                    return Ok(Err(AppendError::Corrupt {
                        session,
                        seq,
                        source,
                    }));
                }
            }
        }
        let (Some(seq), Some(after)) = (head.checked_add(1), next_pos.checked_add(1)) else {
            return Err(BatchFailure::BeforeCommit(StorageError::msg(
                "sequence space exhausted",
            )));
        };
        let pos = *next_pos;
        frame::write(self.frame, req.session, seq, req.key, &req.body);
        self.log
            .insert(pos, self.frame.as_slice())
            .map_err(before("write frame"))?;
        self.positions
            .insert((req.session, seq), pos)
            .map_err(before("write position"))?;
        self.keys
            .insert((req.key, req.session), pos)
            .map_err(before("write index"))?;
        if req.ends {
            self.end(req.session, seq)?;
        }
        *next_pos = after;
        if staged.insert(req.session, seq).is_none() {
            self.base.insert(req.session, committed_head);
        }
        if self.census.is_some() {
            self.fresh.push((req.session, seq, req.key));
        }
        Ok(Ok(AppendOutcome {
            seq,
            appended: true,
        }))
    }

    /// The key is journaled at `pos`: a duplicate if the frame there is this session's
    /// frame of this key with the identical body, a collision if its body differs, and
    /// damage (nothing written, the appender told) if it is not that frame at all.
    fn compare(&self, req: &Request, pos: u64) -> Result<Reply, BatchFailure> {
        let session = SessionId::from_uuid(Uuid::from_u128(req.session));
        let damaged = |seq, source| {
            Ok(Err(AppendError::Corrupt {
                session,
                seq,
                source,
            }))
        };
        let Some(guard) = self.log.get(pos).map_err(before("read frame"))? else {
            return damaged(
                0,
                Corruption::Inconsistent(format!(
                    "the index entry of key {} names log position {pos}, which holds no frame",
                    Uuid::from_u128(req.key)
                )),
            );
        };
        let f = match frame::parse(guard.value()) {
            Ok(f) => f,
            Err(c) => return damaged(0, c),
        };
        if f.session != req.session || f.key != req.key {
            return damaged(
                f.seq,
                Corruption::Misplaced {
                    found: f.describe(),
                },
            );
        }
        let positioned = self
            .positions
            .get((req.session, f.seq))
            .map_err(before("read positions"))?
            .map(|g| g.value());
        if positioned != Some(pos) {
            return damaged(
                f.seq,
                Corruption::Inconsistent(format!(
                    "the index names log position {pos}, the session's log {positioned:?}"
                )),
            );
        }
        Ok(if f.body == req.body.as_slice() {
            Ok(AppendOutcome {
                seq: f.seq,
                appended: false,
            })
        } else {
            Err(AppendError::Collision {
                key: Uuid::from_u128(req.key),
                seq: f.seq,
            })
        })
    }
}
