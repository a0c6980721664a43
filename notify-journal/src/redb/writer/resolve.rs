//! Resolving one queued append inside the writer's write transaction: the session's
//! row first (a purged session refuses every key), then the idempotency index (a
//! duplicate or a collision, checked against the frame it names, even in an ended
//! session), else, unless the session ended, a new frame with its tail entry and index
//! entry, and, for an end marker, the session's row.
//! An atomic group is resolved request by request the same way, and undone inside
//! the transaction if one of them is refused.

use crate::redb::format::keys::FastMap;
use notify_types::{Timestamp, Uuid, ended_event_id};
use redb::ReadableTable;

use super::requests::{Group, Queued, Reply, Request};
use crate::backend::AppendOutcome;
use crate::error::{AppendError, Corruption, StorageError};
use crate::group::{GroupVerdict, try_judge_group};
use crate::redb::census::{Census, Miss, confirm_head, confirm_miss};
use crate::redb::format::frame;
use crate::redb::format::keys::sid;
use crate::redb::format::positions::{SessionLog, TailMap, names};
use crate::redb::format::session_row::SessionRow;
use crate::redb::format::{KEYS, LOG, POSITIONS, RETENTION, SESSIONS, TAIL};
use crate::redb::writer::failure::{BatchFailure, before};

/// The most session heads the writer keeps in memory (it forgets them all, to reload
/// lazily from the tail and the positions table, when a new session would exceed this).
pub(super) const HEADS_CACHE_MAX: usize = 1 << 16;

/// The journal's tables inside one write transaction.
pub(super) struct Tables<'txn, 'w> {
    pub(super) log: redb::Table<'txn, u64, &'static [u8]>,
    pub(super) positions: redb::Table<'txn, (u128, u64), u64>,
    pub(super) tail: redb::Table<'txn, u64, (u128, u64)>,
    /// The committed tail by session (the writer's copy of [`TAIL`]'s committed
    /// entries): where a session's frames beyond its positions entries are.
    ///
    /// [`TAIL`]: crate::redb::format::TAIL
    pub(super) tail_map: &'w TailMap,
    pub(super) keys: redb::Table<'txn, (u128, u128), u64>,
    pub(super) sessions: redb::Table<'txn, u128, &'static [u8]>,
    /// Opened (created, in a file of an older build) by the first end marker.
    pub(super) retention: Option<redb::Table<'txn, (u8, i128, u128), ()>>,
    pub(super) txn: &'txn redb::WriteTransaction,
    /// The key census that confirms every index miss before a new frame is written
    /// (`census/`); `None` when [`RedbOptions::confirm_misses`] is off.
    ///
    /// [`RedbOptions::confirm_misses`]: crate::RedbOptions::confirm_misses
    pub(super) census: Option<&'w Census>,
    pub(super) scratch: &'w mut Scratch,
}

/// What a batch writes besides the tables, kept by the writer so that its allocations
/// are reused from batch to batch.
#[derive(Default)]
pub(super) struct Scratch {
    /// The frame being built.
    pub(super) frame: Vec<u8>,
    /// The committed head of each session this batch appended to, as it was before the
    /// batch: the census covers committed frames only.
    pub(super) base: FastMap<u128, u64>,
    /// The frames this batch wrote (`(session, seq, key)`), for the census once it
    /// commits.
    pub(super) fresh: Vec<(u128, u64, u128)>,
    /// The frames this batch wrote (`(session, seq, position)`), for the writer's copy
    /// of the tail once it commits.
    pub(super) appended: Vec<(u128, u64, u64)>,
}

impl Scratch {
    /// Forgets what the last batch wrote.
    pub(super) fn begin(&mut self) {
        self.fresh.clear();
        self.appended.clear();
    }
}

/// What an append may do to a session, by its row.
enum Admission {
    /// Live (no row): appends are taken.
    Live,
    /// Ended: a key the log holds is a duplicate or a collision; any other is refused.
    Ended(SessionRow),
}

impl<'txn, 'w> Tables<'txn, 'w> {
    /// Opens the journal's tables in `txn` for a batch, with the log's next free
    /// position: `known` (the writer's, once it has read it), else read from the log.
    pub(super) fn open(
        txn: &'txn redb::WriteTransaction,
        known: Option<u64>,
        tail_map: &'w TailMap,
        census: Option<&'w Census>,
        scratch: &'w mut Scratch,
    ) -> Result<(Self, u64), BatchFailure> {
        let table_err = before("open journal table");
        let tables = Tables {
            log: txn.open_table(LOG).map_err(&table_err)?,
            positions: txn.open_table(POSITIONS).map_err(&table_err)?,
            tail: txn.open_table(TAIL).map_err(&table_err)?,
            tail_map,
            keys: txn.open_table(KEYS).map_err(&table_err)?,
            sessions: txn.open_table(SESSIONS).map_err(&table_err)?,
            retention: None,
            txn,
            census,
            scratch,
        };
        let next_pos = match known {
            Some(p) => p,
            None => tables.next_position()?,
        };
        Ok((tables, next_pos))
    }

    /// Whether `req` may be resolved against its session: refused (the reply) if the
    /// session was purged; an ended session's answer depends on the key (see
    /// [`resolve`](Self::resolve)).
    fn admit(&self, req: &Request) -> Result<Result<Admission, Reply>, BatchFailure> {
        let session = sid(req.session);
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
        if row.is_tombstoned() {
            return Ok(Err(Err(AppendError::SessionEnded {
                session,
                purged: true,
            })));
        }
        Ok(Ok(Admission::Ended(row)))
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

    /// `session`'s committed frames: its positions entries and its committed tail
    /// entries.
    fn frames(&self, session: u128) -> SessionLog<'_, redb::Table<'txn, (u128, u64), u64>> {
        let tail = self.tail_map.get(&session).map_or(&[][..], Vec::as_slice);
        SessionLog::new(&self.positions, session, tail)
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

    /// Confirms a miss of `req`'s key in the index against its session's log, through
    /// `committed_head` (the census covers committed frames only): the damage when the
    /// log holds the key, `None` when the miss is true or the census is off.
    fn confirm_miss(
        &self,
        req: &Request,
        committed_head: u64,
    ) -> Result<Option<AppendError>, BatchFailure> {
        let Some(census) = self.census else {
            return Ok(None);
        };
        let miss = confirm_miss(
            census,
            census.generation(),
            &self.frames(req.session),
            &self.log,
            req.key,
            committed_head,
        )
        .map_err(before("read the session's log"))?;
        Ok(match miss {
            Miss::Confirmed => None,
            Miss::Damaged(seq, source) => Some(AppendError::Corrupt {
                session: sid(req.session),
                seq,
                source,
            }),
        })
    }

    /// Resolves one request against the transaction's current view: a duplicate, a
    /// collision, or a new frame (written with its position and index entry; its head
    /// staged). The index is asked before the end: a retry, after the end, of a record
    /// journaled before it is a duplicate or a collision, and only a key the ended log
    /// does not hold is refused as [`AppendError::SessionEnded`].
    pub(super) fn resolve(
        &mut self,
        req: &Request,
        next_pos: &mut u64,
        staged: &mut FastMap<u128, u64>,
        committed: &mut FastMap<u128, u64>,
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
        let session = sid(req.session);
        match (existing, admission) {
            (Some(pos), Admission::Ended(_)) => return self.compare(req, pos),
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
            (None, Admission::Ended(row)) => {
                // The index missed in an ended log: believed only if the log agrees, as
                // for a live one (a hidden key must not be answered as a new ID). The
                // census covers committed frames only; this batch's are indexed here.
                let committed_head = if staged.contains_key(&req.session) {
                    self.scratch.base.get(&req.session).copied().unwrap_or(0)
                } else {
                    row.last_seq
                };
                if let Some(damaged) = self.confirm_miss(req, committed_head)? {
                    return Ok(Err(damaged));
                }
                return Ok(Err(
                    if req.key == ended_event_id(session).as_uuid().as_u128() {
                        AppendError::Corrupt {
                            session,
                            seq: row.last_seq,
                            source: Corruption::Inconsistent(
                                "the session ended but its end marker is not indexed".to_owned(),
                            ),
                        }
                    } else {
                        AppendError::SessionEnded {
                            session,
                            purged: false,
                        }
                    },
                ));
            }
            (None, Admission::Live) => {}
        }
        let (head, committed_head) = match staged.get(&req.session) {
            Some(h) => (
                *h,
                self.scratch.base.get(&req.session).copied().unwrap_or(0),
            ),
            None => {
                let h = match committed.get(&req.session) {
                    Some(h) => *h,
                    None => {
                        let frames = self.frames(req.session);
                        let h = frames.head().map_err(before("read positions"))?;
                        // Believed only if the frame it names agrees (`census/`).
                        if let Some((seq, source)) = confirm_head(&frames, &self.log, h)
                            .map_err(before("read the session's head"))?
                        {
                            return Ok(Err(AppendError::Corrupt {
                                session,
                                seq,
                                source,
                            }));
                        }
                        // And nothing follows it: a damaged positions page that hid the
                        // session's later entries must not make a second frame of a seq.
                        if let Some(next) = h.checked_add(1)
                            && self
                                .positions
                                .get((req.session, next))
                                .map_err(before("read positions"))?
                                .is_some()
                        {
                            return Err(BatchFailure::Damaged {
                                session: req.session,
                                seq: next,
                                detail: format!(
                                    "the session's head read as seq {h}, yet its log holds seq {next} (a damaged page hid it); nothing written"
                                ),
                            });
                        }
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
        if let Some(damaged) = self.confirm_miss(req, committed_head)? {
            return Ok(Err(damaged));
        }
        let (Some(seq), Some(after)) = (head.checked_add(1), next_pos.checked_add(1)) else {
            return Err(BatchFailure::BeforeCommit(StorageError::msg(
                "sequence space exhausted",
            )));
        };
        let pos = *next_pos;
        frame::write(
            &mut self.scratch.frame,
            req.session,
            seq,
            req.key,
            &req.body,
        );
        // An entry replaced here means a damaged page hid it (the log's end or the
        // session's head): the whole batch is abandoned, nothing of it written.
        let replaced = |what: &str| BatchFailure::Damaged {
            session: req.session,
            seq,
            detail: format!(
                "writing {what} found one already there (a damaged page hid it); nothing written"
            ),
        };
        if self
            .log
            .insert(pos, self.scratch.frame.as_slice())
            .map_err(before("write frame"))?
            .is_some()
        {
            return Err(replaced(&format!("log position {pos}")));
        }
        if self
            .tail
            .insert(pos, (req.session, seq))
            .map_err(before("write tail"))?
            .is_some()
        {
            return Err(replaced(&format!("the tail's log position {pos}")));
        }
        self.keys
            .insert((req.key, req.session), pos)
            .map_err(before("write index"))?;
        if req.ends {
            self.end(req.session, seq)?;
        }
        *next_pos = after;
        if staged.insert(req.session, seq).is_none() {
            self.scratch.base.insert(req.session, committed_head);
        }
        if self.census.is_some() {
            self.scratch.fresh.push((req.session, seq, req.key));
        }
        self.scratch.appended.push((req.session, seq, pos));
        Ok(Ok(AppendOutcome {
            seq,
            appended: true,
        }))
    }

    /// Resolves one queue entry, pushing one reply per request onto `replies`.
    pub(super) fn resolve_queued(
        &mut self,
        queued: &Queued,
        next_pos: &mut u64,
        staged: &mut FastMap<u128, u64>,
        committed: &mut FastMap<u128, u64>,
        replies: &mut Vec<Reply>,
    ) -> Result<(), BatchFailure> {
        match queued {
            Queued::One(req) => {
                let reply = self.resolve(req, next_pos, staged, committed)?;
                replies.push(reply);
            }
            Queued::Group(group) => {
                self.resolve_group(group, next_pos, staged, committed, replies)?
            }
        }
        Ok(())
    }

    /// Resolves an atomic group: its requests in order, exactly as [`resolve`] would one
    /// by one, judged by the rule every engine shares (`group.rs`). If one is refused
    /// (or, with `if_head`, the first new frame is not at `if_head + 1`), the frames,
    /// positions, index entries and end row it wrote are removed again inside the
    /// transaction, `next_pos` and the session's staged head go back to where they
    /// were, and every request of the group gets the group's refusal. The batch's other
    /// requests are untouched: they commit with it.
    ///
    /// [`resolve`]: Self::resolve
    fn resolve_group(
        &mut self,
        group: &Group,
        next_pos: &mut u64,
        staged: &mut FastMap<u128, u64>,
        committed: &mut FastMap<u128, u64>,
        replies: &mut Vec<Reply>,
    ) -> Result<(), BatchFailure> {
        let start_pos = *next_pos;
        let fresh_before = self.scratch.fresh.len();
        let appended_before = self.scratch.appended.len();
        let staged_before = staged.get(&group.session).copied();
        let verdict = try_judge_group(
            sid(group.session),
            group.if_head,
            group
                .requests
                .iter()
                .map(|req| self.resolve(req, next_pos, staged, committed)),
        )?;
        let (outcomes, refusal) = match verdict {
            GroupVerdict::Commit(outcomes) => {
                replies.extend(outcomes.into_iter().map(Ok));
                return Ok(());
            }
            GroupVerdict::Refuse { resolved, refusal } => (resolved, refusal),
        };
        // New frames took consecutive positions from `start_pos`, in order.
        let mut pos = start_pos;
        for (req, outcome) in group.requests.iter().zip(&outcomes) {
            if outcome.appended {
                self.unwrite(req, pos)?;
                pos += 1;
            }
        }
        *next_pos = start_pos;
        // Nor may the census count a frame that was taken back, nor the tail hold one.
        self.scratch.fresh.truncate(fresh_before);
        self.scratch.appended.truncate(appended_before);
        match staged_before {
            Some(head) => staged.insert(group.session, head),
            None => staged.remove(&group.session),
        };
        replies.extend(group.requests.iter().map(|_| Err(refusal.clone())));
        Ok(())
    }

    /// Removes what [`resolve`](Self::resolve) wrote for a new frame of `req` at
    /// log position `pos` (for an end marker, the session's row and retention entry
    /// too: the session had none before, or the marker would have been refused).
    fn unwrite(&mut self, req: &Request, pos: u64) -> Result<(), BatchFailure> {
        self.log.remove(pos).map_err(before("undo frame"))?;
        self.tail.remove(pos).map_err(before("undo tail"))?;
        self.keys
            .remove((req.key, req.session))
            .map_err(before("undo index"))?;
        if req.ends {
            let row = self
                .sessions
                .remove(req.session)
                .map_err(before("undo session row"))?
                .map(|guard| SessionRow::parse(req.session, guard.value()));
            if let Some(row) = row {
                let row = row.map_err(|c| {
                    BatchFailure::BeforeCommit(StorageError::msg(format!(
                        "the session row this batch wrote does not parse: {c}"
                    )))
                })?;
                if let Some(retention) = &mut self.retention {
                    retention
                        .remove(row.retention_key())
                        .map_err(before("undo retention"))?;
                }
            }
        }
        Ok(())
    }

    /// The key is journaled at `pos`: a duplicate if the frame there is this session's
    /// frame of this key with the identical body, a collision if its body differs, and
    /// damage (nothing written, the appender told) if it is not that frame at all.
    fn compare(&self, req: &Request, pos: u64) -> Result<Reply, BatchFailure> {
        let session = sid(req.session);
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
        if !names(&self.positions, Some(&self.tail), req.session, f.seq, pos)
            .map_err(before("read positions"))?
        {
            return damaged(
                f.seq,
                Corruption::Inconsistent(format!(
                    "the index names log position {pos}, which neither the session's positions nor the tail give seq {}",
                    f.seq
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
