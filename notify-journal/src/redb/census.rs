//! The key census: a second, independent check of every miss of the idempotency index.
//!
//! A damaged page of `notify_keys` can hide a key (its entry's bytes changed, or a
//! branch leads the search astray), and a miss leaves no frame to check. Believed on the
//! append path, it would journal a retried record a second time under a new seq.
//!
//! So a miss is believed only when the session's own log agrees: the census holds, per
//! session, a fingerprint of every key of its frames `1..=upto`, read from the frames
//! themselves (each checksummed and naming its session and seq; the positions
//! contiguous), never from the index. A miss whose key the census holds is damage
//! (`Corruption::Inconsistent`), named with the frame's seq; a miss the census does not
//! cover yet first extends it from the log (a session's first miss after open reads its
//! log once; later ones cost a hash lookup). The writer adds each frame it commits, so a
//! session it writes stays covered without reading.
//!
//! Memory: about 20 bytes per key of the sessions covered, at most [`MAX_KEYS`]; past
//! that the least recently used sessions are forgotten and read again on their next
//! miss. A purge step forgets its session and a tombstone drop forgets every session
//! (a dropped session starts a new log): a `generation` counter keeps a reader whose
//! snapshot predates the change from putting back what was forgotten.

use crate::redb::keys::FastMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

use notify_types::{JournalRecord, SessionEvent, SessionId, Uuid, ended_event_id};
use redb::ReadableTable;

use super::{body, frame};
use crate::error::Corruption;

/// The most keys the census holds (all sessions together).
pub(crate) const MAX_KEYS: usize = 1 << 21;

/// A key's fingerprint: the census keeps 8 bytes per key, and a fingerprint hit is
/// confirmed against the frame it names before it is called damage.
fn fingerprint(key: u128) -> u64 {
    // Both halves: UUIDv7 keys differ mostly in their random low half, v5 keys anywhere.
    (key as u64) ^ ((key >> 64) as u64).rotate_left(29)
}

/// One session's census.
struct Keys {
    /// The frames `1..=upto` are counted.
    upto: u64,
    /// Fingerprint -> seq of the frame carrying it (the first, on a fingerprint clash).
    seqs: FastMap<u64, u64>,
    /// When it was last used, for eviction.
    used: u64,
}

#[derive(Default)]
struct State {
    generation: u64,
    sessions: FastMap<u128, Keys>,
    keys: usize,
    clock: u64,
}

/// The census of the sessions' keys, shared by the writer and the readers of one file.
#[derive(Default)]
pub(crate) struct Census {
    state: Mutex<State>,
}

/// What the census knows of a key, for a log whose head is `head`.
struct Known {
    /// The frames `1..=upto` (at most the head) are counted.
    upto: u64,
    /// A frame among them whose key has the key's fingerprint.
    hit: Option<u64>,
}

/// What a miss turned out to be.
pub(crate) enum Miss {
    /// The session's log does not hold the key: the miss is true.
    Confirmed,
    /// The log holds it (or could not be read): the index is damaged. The seq of the
    /// frame concerned (0 when unknown) and what is wrong.
    Damaged(u64, Corruption),
}

impl Census {
    fn lock(&self) -> MutexGuard<'_, State> {
        // Every critical section leaves the maps consistent (inserts and removals only).
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The generation to read before a snapshot is begun (see [`confirm_miss`]).
    pub(crate) fn generation(&self) -> u64 {
        self.lock().generation
    }

    fn known(&self, session: u128, key: u128, head: u64) -> Known {
        let mut st = self.lock();
        st.clock += 1;
        let clock = st.clock;
        match st.sessions.get_mut(&session) {
            Some(k) => {
                k.used = clock;
                Known {
                    upto: k.upto.min(head),
                    hit: k
                        .seqs
                        .get(&fingerprint(key))
                        .copied()
                        .filter(|seq| *seq <= head),
                }
            }
            None => Known { upto: 0, hit: None },
        }
    }

    /// Adds frames `from..` (`found`: fingerprints and seqs, in order, through `to`) read
    /// from a snapshot begun at `generation`. Ignored if the census moved on meanwhile
    /// (a purge or drop since, or another reader covered more).
    fn extend(&self, generation: u64, session: u128, from: u64, to: u64, found: &[(u64, u64)]) {
        let mut st = self.lock();
        if st.generation != generation {
            return;
        }
        let clock = st.clock;
        let added = {
            let k = st.sessions.entry(session).or_insert_with(|| Keys {
                upto: 0,
                seqs: FastMap::default(),
                used: clock,
            });
            if k.upto.saturating_add(1) != from {
                return;
            }
            let before = k.seqs.len();
            for (fp, seq) in found {
                k.seqs.entry(*fp).or_insert(*seq);
            }
            k.upto = to;
            k.seqs.len() - before
        };
        st.keys += added;
        st.evict();
    }

    /// Counts frames the writer just committed (`(session, seq, key)`, in commit
    /// order). A session the census does not cover from seq 1 stays uncovered until its
    /// next miss reads it.
    pub(crate) fn record(&self, frames: &[(u128, u64, u128)]) {
        if frames.is_empty() {
            return;
        }
        let mut st = self.lock();
        st.clock += 1;
        let clock = st.clock;
        let mut added = 0;
        for (session, seq, key) in frames {
            let k = match st.sessions.get_mut(session) {
                Some(k) => k,
                // A new session's log starts here: covered from its first frame.
                None if *seq == 1 => st.sessions.entry(*session).or_insert(Keys {
                    upto: 0,
                    seqs: FastMap::default(),
                    used: clock,
                }),
                None => continue,
            };
            if k.upto.saturating_add(1) == *seq {
                k.used = clock;
                k.upto = *seq;
                if k.seqs.insert(fingerprint(*key), *seq).is_none() {
                    added += 1;
                }
            }
        }
        st.keys += added;
        st.evict();
    }

    /// Forgets one session (its purge began: its log is going).
    pub(crate) fn forget(&self, session: u128) {
        let mut st = self.lock();
        st.generation += 1;
        if let Some(k) = st.sessions.remove(&session) {
            st.keys -= k.seqs.len();
        }
    }

    /// Tombstones were dropped: a dropped session's next append starts a new log. Its
    /// census is already gone (its purge forgot it at every step, and a purged log is
    /// never counted again), so only readers of snapshots begun before the drop are
    /// turned away; the live sessions' counts stay, so a long drop in many steps does
    /// not make every session read its log again.
    pub(crate) fn tombstones_dropped(&self) {
        self.lock().generation += 1;
    }
}

impl State {
    /// Forgets the least recently used sessions while the census holds more than
    /// [`MAX_KEYS`], down to three quarters of it.
    fn evict(&mut self) {
        if self.keys <= MAX_KEYS {
            return;
        }
        let mut by_use: Vec<(u64, u128)> =
            self.sessions.iter().map(|(s, k)| (k.used, *s)).collect();
        by_use.sort_unstable();
        for (_, s) in by_use {
            if self.keys <= MAX_KEYS / 4 * 3 {
                break;
            }
            if let Some(k) = self.sessions.remove(&s) {
                self.keys -= k.seqs.len();
            }
        }
    }
}

/// Decides whether the miss of `key` in `session`'s index is believed, against the
/// session's log `1..=head` as `positions` and `log` show it (a write transaction's
/// tables or a read snapshot's, begun after [`Census::generation`] answered
/// `generation`). Frames the census does not cover yet are read and counted.
///
/// # Errors
///
/// The storage engine's errors reading the tables.
pub(crate) fn confirm_miss<P, L>(
    census: &Census,
    generation: u64,
    positions: &P,
    log: &L,
    session: u128,
    key: u128,
    head: u64,
) -> Result<Miss, redb::StorageError>
where
    P: ReadableTable<(u128, u64), u64>,
    L: ReadableTable<u64, &'static [u8]>,
{
    let known = census.known(session, key, head);
    if let Some(seq) = known.hit {
        return confirm_hit(positions, log, session, key, seq);
    }
    if known.upto >= head {
        return Ok(Miss::Confirmed);
    }
    // Read what the census does not cover yet: positions contiguous, every frame checked.
    let from = known.upto + 1;
    let mut found = Vec::new();
    let mut expected = from;
    let mut hidden = None;
    for entry in positions.range((session, from)..=(session, head))? {
        let (k, v) = entry?;
        let seq = k.value().1;
        if seq != expected {
            return Ok(Miss::Damaged(expected, Corruption::Missing));
        }
        let Some(guard) = log.get(v.value())? else {
            return Ok(Miss::Damaged(seq, Corruption::Missing));
        };
        let f = match frame::parse(guard.value()) {
            Ok(f) => f,
            Err(c) => return Ok(Miss::Damaged(seq, c)),
        };
        if f.session != session || f.seq != seq {
            return Ok(Miss::Damaged(
                seq,
                Corruption::Misplaced {
                    found: f.describe(),
                },
            ));
        }
        if f.key == key && hidden.is_none() {
            hidden = Some(seq);
        }
        found.push((fingerprint(f.key), seq));
        expected = seq.saturating_add(1);
    }
    if expected <= head {
        return Ok(Miss::Damaged(expected, Corruption::Missing));
    }
    census.extend(generation, session, from, head, &found);
    Ok(match hidden {
        Some(seq) => Miss::Damaged(seq, unindexed(key, seq)),
        None => Miss::Confirmed,
    })
}

/// The census holds the key's fingerprint at `seq`: the frame there decides.
fn confirm_hit<P, L>(
    positions: &P,
    log: &L,
    session: u128,
    key: u128,
    seq: u64,
) -> Result<Miss, redb::StorageError>
where
    P: ReadableTable<(u128, u64), u64>,
    L: ReadableTable<u64, &'static [u8]>,
{
    let Some(pos) = positions.get((session, seq))?.map(|g| g.value()) else {
        return Ok(Miss::Damaged(seq, Corruption::Missing));
    };
    let Some(guard) = log.get(pos)? else {
        return Ok(Miss::Damaged(seq, Corruption::Missing));
    };
    Ok(match frame::parse(guard.value()) {
        Err(c) => Miss::Damaged(seq, c),
        Ok(f) if f.session != session || f.seq != seq => Miss::Damaged(
            seq,
            Corruption::Misplaced {
                found: f.describe(),
            },
        ),
        Ok(f) if f.key == key => Miss::Damaged(seq, unindexed(key, seq)),
        // Another key with the same fingerprint: the miss is true.
        Ok(_) => Miss::Confirmed,
    })
}

/// Confirms a live session's head `head`, as the positions table gave it, before the
/// writer appends at `head + 1`: its position names a frame of that session and seq
/// (a damaged positions page cannot make the writer start a log again or write a
/// second frame at a seq), and that frame is not the session's end marker (a damaged
/// sessions page cannot hide an end). One point read of each table, once per session
/// whose head the writer loads. `None` when the head is believed.
///
/// A head understated by a damaged page (later positions hidden) is caught when the
/// new position is written: redb's insert answers the entry it replaced.
///
/// # Errors
///
/// The storage engine's errors reading the tables.
pub(crate) fn confirm_head<P, L>(
    positions: &P,
    log: &L,
    session: u128,
    head: u64,
) -> Result<Option<(u64, Corruption)>, redb::StorageError>
where
    P: ReadableTable<(u128, u64), u64>,
    L: ReadableTable<u64, &'static [u8]>,
{
    if head == 0 {
        return Ok(None);
    }
    let Some(pos) = positions.get((session, head))?.map(|g| g.value()) else {
        return Ok(Some((head, Corruption::Missing)));
    };
    let Some(guard) = log.get(pos)? else {
        return Ok(Some((head, Corruption::Missing)));
    };
    Ok(match frame::parse(guard.value()) {
        Err(c) => Some((head, c)),
        Ok(f) if f.session != session || f.seq != head => Some((
            head,
            Corruption::Misplaced {
                found: f.describe(),
            },
        )),
        // The end marker's ID alone is not enough (a caller's key may equal it): the
        // frame's body must be the session's end record.
        Ok(f) if f.key == ended_event_id(SessionId::from_uuid(Uuid::from_u128(session))).as_uuid().as_u128()
            && matches!(
                body::decode(f.body),
                Ok(JournalRecord::Event(SessionEvent::SessionEnded(ref e))) if e.session_id().as_uuid().as_u128() == session
            ) =>
        {
            Some((
                head,
                Corruption::Inconsistent(
                    "the session's log ends in its end marker but the session is not ended (a damaged sessions page)"
                        .to_owned(),
                ),
            ))
        }
        Ok(_) => None,
    })
}

fn unindexed(key: u128, seq: u64) -> Corruption {
    Corruption::Inconsistent(format!(
        "key {} is journaled at seq {seq} but the index does not name it (a damaged index page)",
        Uuid::from_u128(key)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_callers_key_equal_to_the_end_id_at_the_head_is_not_an_end_marker() {
        use crate::redb::format::{LOG, POSITIONS};
        let db = redb::Database::builder()
            .create_with_backend(redb::backends::InMemoryBackend::new())
            .unwrap();
        let s = SessionId::new();
        let u = s.as_uuid().as_u128();
        let end_key = ended_event_id(s).as_uuid().as_u128();
        let mut body_bytes = Vec::new();
        body::encode(
            &notify_testkit::sample::command(s, notify_types::LoopId::new()),
            &mut body_bytes,
        );
        let mut frame_bytes = Vec::new();
        frame::write(&mut frame_bytes, u, 1, end_key, &body_bytes);
        let txn = db.begin_write().unwrap();
        {
            let mut log = txn.open_table(LOG).unwrap();
            let mut positions = txn.open_table(POSITIONS).unwrap();
            log.insert(0, frame_bytes.as_slice()).unwrap();
            positions.insert((u, 1), 0).unwrap();
            // Not the session's end record: a live session's head, not damage.
            assert_eq!(confirm_head(&positions, &log, u, 1).unwrap(), None);
        }
    }

    #[test]
    fn record_covers_new_sessions_and_only_contiguous_frames() {
        let c = Census::default();
        c.record(&[(1, 1, 10), (1, 2, 11), (2, 5, 12)]);
        let k = c.known(1, 11, 2);
        assert_eq!((k.upto, k.hit), (2, Some(2)));
        // Session 2 was not covered from seq 1.
        let k = c.known(2, 12, 5);
        assert_eq!((k.upto, k.hit), (0, None));
        // A snapshot whose head is older sees only what it holds.
        let k = c.known(1, 11, 1);
        assert_eq!((k.upto, k.hit), (1, None));
    }

    #[test]
    fn a_reader_of_an_older_generation_puts_nothing_back() {
        let c = Census::default();
        let g = c.generation();
        c.tombstones_dropped();
        c.extend(g, 1, 1, 1, &[(fingerprint(7), 1)]);
        assert_eq!(c.known(1, 7, 1).upto, 0);
        c.extend(c.generation(), 1, 1, 1, &[(fingerprint(7), 1)]);
        assert_eq!(c.known(1, 7, 1).hit, Some(1));
        // A drop of tombstones keeps the live sessions' counts.
        c.tombstones_dropped();
        assert_eq!(c.known(1, 7, 1).hit, Some(1));
        c.forget(1);
        assert_eq!(c.known(1, 7, 1).upto, 0);
    }
}
