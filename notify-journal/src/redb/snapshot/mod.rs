//! Reading a journal file, written once for both handles: [`Snapshot`], here, the reads
//! of a format-3 journal (or a format-2 one: no tail) inside one read transaction;
//! `database.rs`, each read of a database in a snapshot of its own (what the handles'
//! `*_blocking` reads call); and `blocking_pool.rs`, the hop of those reads onto
//! tokio's blocking pool.
//!
//! In a snapshot every frame is checked (checksum, identity, decoding) before it is
//! believed, and a log is contiguous up to its head or the read fails. A session with a
//! tombstone (its purge began) answers [`JournalError::Purged`] to every read of its
//! log, never part of it.

pub(crate) mod blocking_pool;
pub(crate) mod database;

use notify_types::{SessionId, Uuid};
use redb::{ReadOnlyTable, ReadTransaction, ReadableDatabase};

use crate::backend::SeqRecord;
use crate::error::{Corruption, JournalError};
use crate::integrity::{check_identity, check_replay_page, corrupt};
use crate::redb::census::{Census, Miss, confirm_miss};
use crate::redb::contain::{contain, storage};
use crate::redb::format::body;
use crate::redb::format::frame;
use crate::redb::format::keys::sid;
use crate::redb::format::positions::{SessionLog, TailMap, names, read_tail};
use crate::redb::format::session_row::SessionRow;
use crate::redb::format::{KEYS, LOG, POSITIONS, SESSIONS, TAIL};
use crate::retention::SessionState;

/// The positions table, as a snapshot reads it.
type PositionsTable = ReadOnlyTable<(u128, u64), u64>;

/// The journal's tables in one read transaction (one consistent snapshot).
pub(crate) struct Snapshot {
    pub(crate) log: ReadOnlyTable<u64, &'static [u8]>,
    pub(crate) positions: PositionsTable,
    pub(crate) keys: ReadOnlyTable<(u128, u128), u64>,
    pub(crate) sessions: ReadOnlyTable<u128, &'static [u8]>,
    /// The log's tail; `None` in a format-2 file (read-only: not upgraded).
    pub(crate) tail: Option<ReadOnlyTable<u64, (u128, u64)>>,
    /// The tail by session, read once per snapshot when first needed.
    tail_map: std::cell::OnceCell<TailMap>,
}

/// Runs `f` on one consistent snapshot of `db` (a writable or a read-only database),
/// on the calling thread. A panic of the storage engine (a damaged page it trusted) is
/// contained and answered as [`JournalError::Storage`] naming `what` was being read.
pub(crate) fn in_snapshot<T>(
    db: &impl ReadableDatabase,
    what: &'static str,
    f: impl FnOnce(&Snapshot) -> Result<T, JournalError>,
) -> Result<T, JournalError> {
    contain(|| {
        let txn = db.begin_read().map_err(storage("begin read"))?;
        f(&Snapshot::open(&txn)?)
    })
    .unwrap_or_else(|panic| {
        Err(JournalError::Storage(
            panic.storage(&format!("reading {what}")),
        ))
    })
}

impl Snapshot {
    pub(crate) fn open(txn: &ReadTransaction) -> Result<Self, JournalError> {
        Ok(Self {
            log: txn.open_table(LOG).map_err(storage("open log"))?,
            positions: txn
                .open_table(POSITIONS)
                .map_err(storage("open positions"))?,
            keys: txn.open_table(KEYS).map_err(storage("open keys"))?,
            sessions: txn.open_table(SESSIONS).map_err(storage("open sessions"))?,
            tail: match txn.open_table(TAIL) {
                Ok(t) => Some(t),
                Err(redb::TableError::TableDoesNotExist(_)) => None,
                Err(e) => return Err(storage("open tail")(e)),
            },
            tail_map: std::cell::OnceCell::new(),
        })
    }

    /// The log's tail by session (read from the snapshot the first time).
    pub(crate) fn tail(&self) -> Result<&TailMap, JournalError> {
        if let Some(map) = self.tail_map.get() {
            return Ok(map);
        }
        let map = match &self.tail {
            Some(t) => read_tail(t).map_err(storage("read tail"))?.0,
            None => TailMap::default(),
        };
        Ok(self.tail_map.get_or_init(|| map))
    }

    /// `session`'s frames: its positions entries and its tail entries.
    pub(crate) fn frames(
        &self,
        session: u128,
    ) -> Result<SessionLog<'_, PositionsTable>, JournalError> {
        let tail = self.tail()?.get(&session).map_or(&[][..], Vec::as_slice);
        Ok(SessionLog::new(&self.positions, session, tail))
    }

    /// The log position `session`'s log gives its frame `seq` (its positions entry or
    /// its tail entry), if any.
    pub(crate) fn position_of(&self, session: u128, seq: u64) -> Result<Option<u64>, JournalError> {
        self.frames(session)?
            .position(seq)
            .map_err(storage("read positions"))
    }

    /// The session's state row, checked; `None` for a live session.
    pub(crate) fn row(&self, session: u128) -> Result<Option<SessionRow>, JournalError> {
        let Some(guard) = self
            .sessions
            .get(session)
            .map_err(storage("read session row"))?
        else {
            return Ok(None);
        };
        SessionRow::parse(session, guard.value())
            .map(Some)
            .map_err(|c| corrupt(sid(session), 0, c))
    }

    /// Whether the session is live, ended or purged.
    pub(crate) fn state(&self, session: u128) -> Result<SessionState, JournalError> {
        Ok(self
            .row(session)?
            .map_or(SessionState::Live, |row| row.state()))
    }

    /// Refuses a read of the log of a session whose purge began.
    fn refuse_purged(&self, session: u128) -> Result<(), JournalError> {
        match self.row(session)? {
            Some(row) if row.is_tombstoned() => Err(JournalError::Purged {
                session: sid(session),
            }),
            _ => Ok(()),
        }
    }

    /// The session's last seq: its tombstone's once its purge began, else its head.
    pub(crate) fn last_seq(&self, session: u128) -> Result<u64, JournalError> {
        match self.row(session)? {
            Some(row) if row.is_tombstoned() => Ok(row.last_seq),
            _ => self.head(session),
        }
    }

    /// The session's last seq: its last tail or positions entry (0 when it has none).
    pub(crate) fn head(&self, session: u128) -> Result<u64, JournalError> {
        self.frames(session)?
            .head()
            .map_err(storage("read positions"))
    }

    /// The frame at `pos`, which must be `session`'s frame `seq` (and carry `key`, when
    /// given), checked and decoded.
    pub(crate) fn frame_at(
        &self,
        session: u128,
        seq: u64,
        key: Option<u128>,
        pos: u64,
    ) -> Result<SeqRecord, JournalError> {
        let s = sid(session);
        let guard = self
            .log
            .get(pos)
            .map_err(storage("read log"))?
            .ok_or_else(|| corrupt(s, seq, Corruption::Missing))?;
        let f = frame::parse(guard.value()).map_err(|c| corrupt(s, seq, c))?;
        if f.session != session || f.seq != seq || key.is_some_and(|k| k != f.key) {
            return Err(corrupt(
                s,
                seq,
                Corruption::Misplaced {
                    found: f.describe(),
                },
            ));
        }
        let record = body::decode(f.body).map_err(|c| corrupt(s, seq, c))?;
        check_identity(s, seq, &record)?;
        if record.key().as_u128() != f.key {
            return Err(corrupt(
                s,
                seq,
                Corruption::Inconsistent(format!(
                    "the header names key {} but the record's key is {}",
                    Uuid::from_u128(f.key),
                    record.key()
                )),
            ));
        }
        Ok((seq, record))
    }

    /// The seq at which `key` is journaled in `session`, confirmed against its frame; a
    /// miss is confirmed against the session's log by `census` (with the generation read
    /// before this snapshot began), when given.
    pub(crate) fn lookup(
        &self,
        session: u128,
        key: u128,
        census: Option<(&Census, u64)>,
    ) -> Result<Option<u64>, JournalError> {
        self.refuse_purged(session)?;
        let Some(pos) = self
            .keys
            .get((key, session))
            .map_err(storage("read keys"))?
            .map(|g| g.value())
        else {
            if let Some((census, generation)) = census {
                let head = self.head(session)?;
                match confirm_miss(
                    census,
                    generation,
                    &self.frames(session)?,
                    &self.log,
                    key,
                    head,
                )
                .map_err(storage("read the session's log"))?
                {
                    Miss::Confirmed => {}
                    Miss::Damaged(seq, source) => return Err(corrupt(sid(session), seq, source)),
                }
            }
            return Ok(None);
        };
        let s = sid(session);
        let unknown_seq = |c| corrupt(s, 0, c);
        let guard = self
            .log
            .get(pos)
            .map_err(storage("read log"))?
            .ok_or_else(|| {
                unknown_seq(Corruption::Inconsistent(format!(
                    "the index entry of key {} names log position {pos}, which holds no frame",
                    Uuid::from_u128(key)
                )))
            })?;
        let f = frame::parse(guard.value()).map_err(unknown_seq)?;
        if f.session != session || f.key != key {
            return Err(corrupt(
                s,
                f.seq,
                Corruption::Misplaced {
                    found: f.describe(),
                },
            ));
        }
        if !names(&self.positions, self.tail.as_ref(), session, f.seq, pos)
            .map_err(storage("read positions"))?
        {
            let positioned = self.position_of(session, f.seq)?;
            return Err(corrupt(
                s,
                f.seq,
                Corruption::Inconsistent(format!(
                    "the index names log position {pos}, the session's log {positioned:?}"
                )),
            ));
        }
        // And the body itself: it decodes to this session's record of this key.
        let (seq, _) = self.frame_at(session, f.seq, Some(key), pos)?;
        Ok(Some(seq))
    }

    /// Frames of `session` from `from_seq`, at most `limit`, contiguous and ending at the
    /// head when short.
    pub(crate) fn replay(
        &self,
        session: u128,
        from_seq: u64,
        limit: usize,
    ) -> Result<Vec<SeqRecord>, JournalError> {
        let s = sid(session);
        self.refuse_purged(session)?;
        let head = self.head(session)?;
        let mut out = Vec::new();
        let mut expected = from_seq.max(1);
        if limit > 0 {
            self.frames(session)?.each(
                from_seq,
                u64::MAX,
                storage("read positions"),
                |seq, pos| {
                    if seq != expected {
                        return Err(corrupt(s, expected, Corruption::Missing));
                    }
                    out.push(self.frame_at(session, seq, None, pos)?);
                    expected = expected.saturating_add(1);
                    Ok(out.len() < limit)
                },
            )?;
        }
        check_replay_page(s, from_seq, limit, Some(head), &out)?;
        Ok(out)
    }

    /// Every session with at least one frame or a state row, in ID order: two seeks per
    /// session.
    pub(crate) fn sessions(&self) -> Result<Vec<SessionId>, JournalError> {
        self.sessions_after(None, usize::MAX)
    }

    /// At most `limit` sessions with a frame or a state row (ended, purged) and an ID
    /// above `after`, in ID order: the positions, the rows and the tail merged, two
    /// seeks per session.
    pub(crate) fn sessions_after(
        &self,
        after: Option<SessionId>,
        limit: usize,
    ) -> Result<Vec<SessionId>, JournalError> {
        let mut out = Vec::new();
        let mut from = match after {
            None => 0u128,
            Some(s) => match s.as_uuid().as_u128().checked_add(1) {
                Some(n) => n,
                None => return Ok(out),
            },
        };
        let mut tailed: Vec<u128> = self.tail()?.keys().copied().collect();
        tailed.sort_unstable();
        while out.len() < limit {
            let in_tail = tailed.get(tailed.partition_point(|t| *t < from)).copied();
            let logged = self
                .positions
                .range((from, 0)..)
                .map_err(storage("read positions"))?
                .next()
                .transpose()
                .map_err(storage("read position"))?
                .map(|(k, _)| k.value().0);
            let ended = self
                .sessions
                .range(from..)
                .map_err(storage("read sessions"))?
                .next()
                .transpose()
                .map_err(storage("read session row"))?
                .map(|(k, _)| k.value());
            let Some(session) = [logged, ended, in_tail].into_iter().flatten().min() else {
                break;
            };
            if session < from {
                // A seek answered a key below where it began: a damaged page put the
                // table out of order. Going on from there would walk the same keys
                // again, forever.
                return Err(corrupt(
                    sid(session),
                    0,
                    Corruption::Inconsistent(format!(
                        "a seek from session {} answered session {} below it: the sessions' \
                         tables are out of order",
                        sid(from),
                        sid(session)
                    )),
                ));
            }
            out.push(sid(session));
            match session.checked_add(1) {
                Some(n) => from = n,
                None => break,
            }
        }
        Ok(out)
    }
}
