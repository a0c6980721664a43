//! The key census: a second, independent check of every miss of the idempotency index.
//!
//! A damaged page of `notify_keys` can hide a key (its entry's bytes changed, or a
//! branch leads the search astray), and a miss leaves no frame to check. Believed on the
//! append path, it would journal a retried record a second time under a new seq.
//!
//! So a miss is believed only when the session's own log agrees: the census holds, per
//! session, the fingerprints of the keys of its frames `1..=upto`, read from the frames
//! themselves (each checksummed and naming its session and seq; the positions
//! contiguous), never from the index, and a 16-bit tag of each by seq. A miss whose
//! fingerprint the census does not hold is true; one whose fingerprint it may hold is
//! decided by reading the counted frames whose tag is the key's (about one per 65,536
//! frames of the log, besides the one carrying it): damage,
//! `Corruption::Inconsistent`, named with the frame's seq, when one carries the key;
//! else a clash, and the miss is true. A miss the census does
//! not cover yet first extends it from the log (a session's first miss after open reads
//! its log once; later ones cost a hash lookup). The writer adds each frame it commits,
//! so a session it writes stays covered without reading.
//!
//! Memory, two tiers, besides the tags (2 bytes a key). *Exact*: a set of 8-byte
//! fingerprints per session (about 10 to 20 bytes a key with the hash set's slack), at
//! most `max_keys` keys over all sessions
//! ([`RedbOptions::census_max_keys`](crate::RedbOptions::census_max_keys)). Past that
//! the least recently used sessions are *demoted*, not forgotten: their set becomes a
//! Bloom filter built from it (no read; [`FILTER_BITS_PER_KEY`] bits a key of room,
//! room for twice the keys it holds), which still proves a miss true without reading;
//! a filter's "maybe" (a false positive, about 1 in 2,000 at most) reads the frames its
//! tag names. The filters and their tags together take at most
//! [`FILTER_BITS_PER_BOUND_KEY`] bits per key of the bound (16 bytes: no more than the
//! exact tier), one filter at most a [`FILTER_SHARE`] share of that (a larger session
//! gets a fuller filter, never full, not a larger one); past that the
//! least recently used filters are forgotten, and a filter that fills is forgotten too:
//! those sessions are read again on their next miss (once, then held again, as a filter
//! of twice the room, up to the cap, when the exact tier is full). So sessions written
//! round robin whose keys outgrow the exact tier are read again about once per doubling
//! of their logs, not on every append (the thrash of forgetting them); only when their
//! keys outgrow the filters too does the census cycle (the cliff moved, it is not gone),
//! and `notify_journal_census_frames_read_total` counts every frame read to cover or
//! decide a miss. The session just used is never forgotten for its own size (a session
//! larger than the bound is held over it), nor one read in the last [`RECENT_TICKS`].
//! Each session held also costs about 150 to 300 bytes not counted in the bound.
//!
//! A purge step forgets its session. A tombstone drop forgets no live session (a
//! dropped session's census is already gone: its purge forgot it); both bump a
//! `generation` counter, which keeps a reader whose snapshot predates the change from
//! putting back what was forgotten.

use crate::redb::format::keys::FastMap;
use std::collections::HashSet;
use std::sync::{Mutex, MutexGuard, PoisonError};

use notify_types::{JournalRecord, SessionEvent, SessionId, Uuid, ended_event_id};
use redb::ReadableTable;

use crate::error::Corruption;
use crate::redb::format::body;
use crate::redb::format::frame;
use crate::redb::options::DEFAULT_CENSUS_MAX_KEYS;

/// Bits of a Bloom filter per key of room (eight probes: about 1 false positive in
/// 2,000 when full, far fewer before).
pub(crate) const FILTER_BITS_PER_KEY: usize = 16;
/// The filters' budget: bits per key of the exact tier's bound (16 bytes).
pub(crate) const FILTER_BITS_PER_BOUND_KEY: usize = 128;
/// Bits of a frame's tag, counted in the filters' budget for a filtered session.
const TAG_BITS: usize = 16;
/// Probes of a filter per key.
const PROBES: u64 = 8;
/// One filter takes at most this share of the filters' budget (1/4): a session of more
/// keys gets a fuller filter (more false positives, each costing the reads of its
/// tag-matched frames) rather than one that outgrows the budget and is forgotten.
const FILTER_SHARE: usize = 4;
/// A session read within this many ticks of the census's clock (one a miss looked up,
/// one a batch recorded: about 8 batches of one append) is not forgotten for the
/// filters' budget: forgotten at once, it would be read whole on nearly every batch.
/// At most this many sessions are so kept past the budget.
const RECENT_TICKS: u64 = 16;

/// The most bits one filter takes, for a bound of `max_keys`: a power of two, at most
/// [`FILTER_SHARE`]'s share of the budget (at least 64).
fn filter_cap(max_keys: usize) -> usize {
    let share = max_keys.saturating_mul(FILTER_BITS_PER_BOUND_KEY) / FILTER_SHARE;
    if share < 64 {
        64
    } else {
        1 << (usize::BITS - 1 - share.leading_zeros())
    }
}

type FastSet<T> = HashSet<T, foldhash::fast::RandomState>;

/// A key's fingerprint: the census keeps 8 bytes per key, and a fingerprint hit is
/// confirmed against the session's frames before it is called damage.
fn fingerprint(key: u128) -> u64 {
    // Both halves: UUIDv7 keys differ mostly in their random low half, v5 keys anywhere.
    (key as u64) ^ ((key >> 64) as u64).rotate_left(29)
}

/// A fingerprint's 16-bit tag (mixed apart from the filters' probes).
fn tag(fp: u64) -> u16 {
    (mix(fp ^ 0x6a09_e667_f3bc_c909) >> 48) as u16
}

/// splitmix64's finaliser: a fingerprint's bits spread for a filter's probes.
fn mix(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// A Bloom filter of fingerprints: no false negatives, so "absent" proves a miss true.
struct Filter {
    words: Vec<u64>,
    /// Bits − 1 (bits a power of two).
    mask: u64,
    /// Fingerprints inserted.
    len: usize,
    /// Fingerprints it has room for at [`FILTER_BITS_PER_KEY`].
    room: usize,
    /// Held to `cap` bits, short of its room: it never fills (a larger one would be
    /// held to the same bits), its false positives only grow.
    capped: bool,
}

impl Filter {
    /// A filter with room for `room` fingerprints, of at most `cap` bits (a power of
    /// two, at least 64).
    fn with_room(room: usize, cap: usize) -> Self {
        let room = room.max(4);
        let want = room
            .saturating_mul(FILTER_BITS_PER_KEY)
            .checked_next_power_of_two()
            .unwrap_or(usize::MAX);
        let bits = want.min(cap).max(64);
        Self {
            words: vec![0; bits / 64],
            mask: bits as u64 - 1,
            len: 0,
            room,
            capped: want > bits,
        }
    }

    fn bits(&self) -> usize {
        self.words.len() * 64
    }

    fn probes(&self, fp: u64) -> impl Iterator<Item = u64> + use<> {
        let a = mix(fp);
        let b = mix(fp ^ 0x9e37_79b9_7f4a_7c15) | 1;
        let mask = self.mask;
        (0..PROBES).map(move |i| a.wrapping_add(b.wrapping_mul(i)) & mask)
    }

    fn insert(&mut self, fp: u64) {
        for bit in self.probes(fp) {
            self.words[(bit >> 6) as usize] |= 1 << (bit & 63);
        }
        self.len += 1;
    }

    fn may_hold(&self, fp: u64) -> bool {
        self.probes(fp)
            .all(|bit| self.words[(bit >> 6) as usize] & (1 << (bit & 63)) != 0)
    }

    fn full(&self) -> bool {
        !self.capped && self.len > self.room
    }
}

/// What the census holds of one session's fingerprints.
enum Cover {
    /// Every fingerprint.
    Exact(FastSet<u64>),
    /// A Bloom filter of them.
    Filter(Filter),
}

impl Cover {
    fn may_hold(&self, fp: u64) -> bool {
        match self {
            Cover::Exact(set) => set.contains(&fp),
            Cover::Filter(f) => f.may_hold(fp),
        }
    }
}

/// One session's census.
struct Keys {
    /// The frames `1..=upto` are counted.
    upto: u64,
    cover: Cover,
    /// Each counted frame's [`tag`], by seq (`tags[seq - 1]`): where a fingerprint the
    /// cover may hold is looked for, so that deciding it reads only the frames whose tag
    /// matches, not the whole log.
    tags: Vec<u16>,
    /// When it was last used, for eviction.
    used: u64,
    /// When its log was last read, if ever.
    read_at: Option<u64>,
}

#[derive(Default)]
struct State {
    generation: u64,
    sessions: FastMap<u128, Keys>,
    /// Fingerprints held exactly, over all sessions.
    keys: usize,
    /// Bits of the filters, over all sessions.
    bits: usize,
    /// Sessions held as filters.
    filters: usize,
    clock: u64,
}

/// The census of the sessions' keys, shared by the writer and the readers of one file.
pub(crate) struct Census {
    state: Mutex<State>,
    /// The most fingerprints held exactly.
    max_keys: usize,
}

impl Default for Census {
    fn default() -> Self {
        Self::new(DEFAULT_CENSUS_MAX_KEYS)
    }
}

/// What the census knows of a key, for a log whose head is `head`.
struct Known {
    /// The frames `1..=upto` (at most the head) are counted.
    upto: u64,
    /// When the cover may hold the key's fingerprint: the counted frames (at most the
    /// head) whose tag is the key's, to be read. Empty: none of them carries the key.
    candidates: Vec<u64>,
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
    /// A census holding at most `max_keys` fingerprints exactly (at least 1).
    pub(crate) fn new(max_keys: usize) -> Self {
        Self {
            state: Mutex::default(),
            max_keys: max_keys.max(1),
        }
    }

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
                let upto = k.upto.min(head);
                let fp = fingerprint(key);
                let candidates = if k.cover.may_hold(fp) {
                    let t = tag(fp);
                    let covered = usize::try_from(upto).unwrap_or(usize::MAX);
                    (1u64..)
                        .zip(k.tags.iter().take(covered))
                        .filter(|(_, x)| **x == t)
                        .map(|(seq, _)| seq)
                        .collect()
                } else {
                    Vec::new()
                };
                Known { upto, candidates }
            }
            None => Known {
                upto: 0,
                candidates: Vec::new(),
            },
        }
    }

    /// Adds frames `from..=to` (`found`: their fingerprints, in order) read from a
    /// snapshot begun at `generation`. Ignored if the census moved on meanwhile (a purge
    /// or drop since, or another reader covered more).
    fn extend(&self, generation: u64, session: u128, from: u64, to: u64, found: &[u64]) {
        let mut st = self.lock();
        if st.generation != generation {
            return;
        }
        let clock = st.clock;
        if !st.sessions.contains_key(&session) {
            if from != 1 {
                return;
            }
            st.cover(session, found.len(), self.max_keys, clock);
        }
        if st.sessions.get(&session).map(|k| k.upto.saturating_add(1)) != Some(from) {
            return;
        }
        for fp in found {
            if !st.add(session, *fp) {
                return;
            }
        }
        if let Some(k) = st.sessions.get_mut(&session) {
            k.upto = to;
            k.read_at = Some(clock);
        }
        st.evict(self.max_keys, session);
    }

    /// Counts frames the writer just committed (`(session, seq, key)`, in commit
    /// order). A session the census does not cover from seq 1 stays uncovered until its
    /// next miss reads it.
    pub(crate) fn record(&self, frames: &[(u128, u64, u128)]) {
        let Some(last) = frames.last() else {
            return;
        };
        let mut st = self.lock();
        st.clock += 1;
        let clock = st.clock;
        for (session, seq, key) in frames {
            match st.sessions.get_mut(session) {
                Some(k) if k.upto.saturating_add(1) == *seq => {
                    k.used = clock;
                    k.upto = *seq;
                }
                Some(_) => continue,
                // A new session's log starts here: covered from its first frame.
                None if *seq == 1 => {
                    st.cover(*session, 1, self.max_keys, clock);
                    if let Some(k) = st.sessions.get_mut(session) {
                        k.upto = 1;
                    }
                }
                None => continue,
            }
            st.add(*session, fingerprint(*key));
        }
        st.evict(self.max_keys, last.0);
    }

    /// Forgets one session (its purge began: its log is going).
    pub(crate) fn forget(&self, session: u128) {
        let mut st = self.lock();
        st.generation += 1;
        st.remove(session);
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
    /// Starts covering `session` (about `n` keys to come): exactly while the exact tier
    /// has room, else in a filter with room for twice them.
    fn cover(&mut self, session: u128, n: usize, max_keys: usize, clock: u64) {
        let cover = if self.keys.saturating_add(n) <= max_keys {
            Cover::Exact(FastSet::default())
        } else {
            let f = Filter::with_room(n.saturating_mul(2), filter_cap(max_keys));
            self.bits += f.bits();
            self.filters += 1;
            Cover::Filter(f)
        };
        self.sessions.insert(
            session,
            Keys {
                upto: 0,
                cover,
                tags: Vec::new(),
                used: clock,
                read_at: None,
            },
        );
    }

    /// Adds a fingerprint to a covered session. `false` when that filled its filter and
    /// the session was forgotten (its next miss reads it again, into a larger one).
    fn add(&mut self, session: u128, fp: u64) -> bool {
        let Some(k) = self.sessions.get_mut(&session) else {
            return false;
        };
        k.tags.push(tag(fp));
        let full = match &mut k.cover {
            Cover::Exact(set) => {
                if set.insert(fp) {
                    self.keys += 1;
                }
                false
            }
            Cover::Filter(f) => {
                f.insert(fp);
                self.bits += TAG_BITS;
                f.full()
            }
        };
        if full {
            self.remove(session);
        }
        !full
    }

    fn remove(&mut self, session: u128) {
        match self.sessions.remove(&session) {
            Some(Keys {
                cover: Cover::Exact(set),
                ..
            }) => self.keys -= set.len(),
            Some(Keys {
                cover: Cover::Filter(f),
                tags,
                ..
            }) => {
                self.bits -= f.bits() + tags.len() * TAG_BITS;
                self.filters -= 1;
            }
            None => {}
        }
    }

    /// The sessions `pick` accepts, least recently used first.
    fn least_recently_used(&self, pick: impl Fn(u128, &Keys) -> bool) -> Vec<u128> {
        let mut by_use: Vec<(u64, u128)> = self
            .sessions
            .iter()
            .filter(|(s, k)| pick(**s, k))
            .map(|(s, k)| (k.used, *s))
            .collect();
        by_use.sort_unstable();
        by_use.into_iter().map(|(_, s)| s).collect()
    }

    /// Past `max_keys` fingerprints held exactly, demotes the least recently used
    /// sessions to filters, down to three quarters of it; past the filters' budget,
    /// forgets the least recently used filters, down to three quarters of it. `current`
    /// (the session just used) and a session read in the last [`RECENT_TICKS`] are
    /// never forgotten (so the budget may be exceeded for a while by the few sessions
    /// just read).
    fn evict(&mut self, max_keys: usize, current: u128) {
        if self.keys > max_keys {
            for s in self.least_recently_used(|_, k| matches!(k.cover, Cover::Exact(_))) {
                if self.keys <= max_keys / 4 * 3 {
                    break;
                }
                let Some(k) = self.sessions.get_mut(&s) else {
                    continue;
                };
                if let Cover::Exact(set) = &k.cover {
                    let mut f =
                        Filter::with_room(set.len().saturating_mul(2), filter_cap(max_keys));
                    for fp in set {
                        f.insert(*fp);
                    }
                    self.keys -= set.len();
                    self.bits += f.bits() + k.tags.len() * TAG_BITS;
                    self.filters += 1;
                    k.cover = Cover::Filter(f);
                }
            }
        }
        let budget = max_keys.saturating_mul(FILTER_BITS_PER_BOUND_KEY);
        // No filter but the current session's: nothing to forget, no walk.
        let current_filtered = self
            .sessions
            .get(&current)
            .is_some_and(|k| matches!(k.cover, Cover::Filter(_)));
        let others = self.filters.saturating_sub(usize::from(current_filtered));
        if self.bits > budget && others > 0 {
            let clock = self.clock;
            let recent = |k: &Keys| {
                k.read_at
                    .is_some_and(|t| clock.saturating_sub(t) < RECENT_TICKS)
            };
            let forgettable = |s: u128, k: &Keys| {
                s != current && matches!(k.cover, Cover::Filter(_)) && !recent(k)
            };
            for s in self.least_recently_used(forgettable) {
                if self.bits <= budget / 4 * 3 {
                    break;
                }
                self.remove(s);
            }
        }
    }
}

/// What a read of a session's frames found.
struct Scan {
    /// The fingerprints of the frames read, in seq order.
    found: Vec<u64>,
    /// The first of them carrying the key.
    hidden: Option<u64>,
}

/// Reads `session`'s frames `from..=head` (positions contiguous, every frame checked),
/// counting them in `read`.
#[allow(clippy::too_many_arguments)]
fn scan<P, L>(
    positions: &P,
    log: &L,
    session: u128,
    from: u64,
    head: u64,
    key: u128,
    read: &mut u64,
) -> Result<Result<Scan, Miss>, redb::StorageError>
where
    P: ReadableTable<(u128, u64), u64>,
    L: ReadableTable<u64, &'static [u8]>,
{
    let mut found = Vec::new();
    let mut expected = from;
    let mut hidden = None;
    for entry in positions.range((session, from)..=(session, head))? {
        let (k, v) = entry?;
        let seq = k.value().1;
        if seq != expected {
            return Ok(Err(Miss::Damaged(expected, Corruption::Missing)));
        }
        *read += 1;
        let Some(guard) = log.get(v.value())? else {
            return Ok(Err(Miss::Damaged(seq, Corruption::Missing)));
        };
        let f = match frame::parse(guard.value()) {
            Ok(f) => f,
            Err(c) => return Ok(Err(Miss::Damaged(seq, c))),
        };
        if f.session != session || f.seq != seq {
            return Ok(Err(Miss::Damaged(
                seq,
                Corruption::Misplaced {
                    found: f.describe(),
                },
            )));
        }
        if f.key == key && hidden.is_none() {
            hidden = Some(seq);
        }
        found.push(fingerprint(f.key));
        expected = seq.saturating_add(1);
    }
    if expected <= head {
        return Ok(Err(Miss::Damaged(expected, Corruption::Missing)));
    }
    Ok(Ok(Scan { found, hidden }))
}

/// Decides whether the miss of `key` in `session`'s index is believed, against the
/// session's log `1..=head` as `positions` and `log` show it (a write transaction's
/// tables or a read snapshot's, begun after [`Census::generation`] answered
/// `generation`). Frames the census does not cover yet are read and counted; a
/// fingerprint the census may hold is decided by reading the counted frames whose tag
/// is the key's. Every frame read counts in `notify_journal_census_frames_read_total`.
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
    let mut read = 0;
    let decided = decide(
        census, generation, positions, log, session, key, &known, head, &mut read,
    );
    crate::metrics::census_frames_read(read);
    if let Some(miss) = decided? {
        return Ok(miss);
    }
    Ok(Miss::Confirmed)
}

/// [`confirm_miss`]'s reads, counted in `read`: `Some` when they found damage.
#[allow(clippy::too_many_arguments)]
fn decide<P, L>(
    census: &Census,
    generation: u64,
    positions: &P,
    log: &L,
    session: u128,
    key: u128,
    known: &Known,
    head: u64,
    read: &mut u64,
) -> Result<Option<Miss>, redb::StorageError>
where
    P: ReadableTable<(u128, u64), u64>,
    L: ReadableTable<u64, &'static [u8]>,
{
    // Counted frames whose tag is the key's: the frame decides (damage or a clash).
    for seq in &known.candidates {
        *read += 1;
        if let Some(miss) = check_frame(positions, log, session, key, *seq)? {
            return Ok(Some(miss));
        }
    }
    if known.upto >= head {
        return Ok(None);
    }
    // Read what the census does not cover yet.
    let from = known.upto + 1;
    let scanned = match scan(positions, log, session, from, head, key, read)? {
        Ok(s) => s,
        Err(miss) => return Ok(Some(miss)),
    };
    census.extend(generation, session, from, head, &scanned.found);
    Ok(scanned
        .hidden
        .map(|seq| Miss::Damaged(seq, unindexed(key, seq))))
}

/// The frame at `seq`, whose tag is the key's: `Some` when it is damaged or carries
/// the key (the index hides it).
fn check_frame<P, L>(
    positions: &P,
    log: &L,
    session: u128,
    key: u128,
    seq: u64,
) -> Result<Option<Miss>, redb::StorageError>
where
    P: ReadableTable<(u128, u64), u64>,
    L: ReadableTable<u64, &'static [u8]>,
{
    let Some(pos) = positions.get((session, seq))?.map(|g| g.value()) else {
        return Ok(Some(Miss::Damaged(seq, Corruption::Missing)));
    };
    let Some(guard) = log.get(pos)? else {
        return Ok(Some(Miss::Damaged(seq, Corruption::Missing)));
    };
    Ok(match frame::parse(guard.value()) {
        Err(c) => Some(Miss::Damaged(seq, c)),
        Ok(f) if f.session != session || f.seq != seq => Some(Miss::Damaged(
            seq,
            Corruption::Misplaced {
                found: f.describe(),
            },
        )),
        Ok(f) if f.key == key => Some(Miss::Damaged(seq, unindexed(key, seq))),
        // Another key with the same tag: not this one.
        Ok(_) => None,
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
        assert_eq!((k.upto, k.candidates), (2, vec![2]));
        // Session 2 was not covered from seq 1.
        let k = c.known(2, 12, 5);
        assert_eq!((k.upto, k.candidates), (0, vec![]));
        // A snapshot whose head is older sees only what it holds.
        let k = c.known(1, 11, 1);
        assert_eq!((k.upto, k.candidates), (1, vec![]));
    }

    #[test]
    fn a_reader_of_an_older_generation_puts_nothing_back() {
        let c = Census::default();
        let g = c.generation();
        c.tombstones_dropped();
        c.extend(g, 1, 1, 1, &[fingerprint(7)]);
        assert_eq!(c.known(1, 7, 1).upto, 0);
        c.extend(c.generation(), 1, 1, 1, &[fingerprint(7)]);
        assert_eq!(c.known(1, 7, 1).candidates, vec![1]);
        // A drop of tombstones keeps the live sessions' counts.
        c.tombstones_dropped();
        assert_eq!(c.known(1, 7, 1).candidates, vec![1]);
        c.forget(1);
        assert_eq!(c.known(1, 7, 1).upto, 0);
    }

    #[test]
    fn past_the_bound_sessions_are_demoted_to_filters_not_forgotten() {
        let c = Census::new(8);
        // Four sessions of four keys each, round robin: twice the exact bound.
        for seq in 1..=4u64 {
            let frames: Vec<_> = (1..=4u128)
                .map(|s| (s, seq, s * 1000 + u128::from(seq)))
                .collect();
            c.record(&frames);
        }
        for s in 1..=4u128 {
            for seq in 1..=4u64 {
                let k = c.known(s, s * 1000 + u128::from(seq), 4);
                // Still covered: no read needed, and no false negative.
                assert_eq!(
                    (k.upto, k.candidates),
                    (4, vec![seq]),
                    "session {s} seq {seq}"
                );
            }
        }
        let st = c.lock();
        assert!(st.keys <= 8, "{} keys held exactly", st.keys);
        assert!(
            st.sessions
                .values()
                .any(|k| matches!(k.cover, Cover::Filter(_)))
        );
    }

    #[test]
    fn a_filter_that_fills_is_forgotten_and_its_bits_returned() {
        let c = Census::new(1);
        // Exact room for one key: the second session starts in a filter (room 4).
        c.record(&[(1, 1, 10)]);
        c.record(&[(2, 1, 20)]);
        for seq in 2..=5u64 {
            c.record(&[(2, seq, 20 + u128::from(seq))]);
        }
        // The fifth key overfilled it: forgotten, to be read again.
        assert_eq!(c.known(2, 21, 5).upto, 0);
        let st = c.lock();
        assert_eq!((st.bits, st.filters), (0, 0));
    }

    #[test]
    fn a_filter_is_held_to_a_share_of_the_budget_and_a_held_one_never_fills() {
        // Bound 8: budget 1,024 bits, one filter at most 256.
        assert_eq!(filter_cap(8), 256);
        assert_eq!(filter_cap(1), 64);
        let c = Census::new(8);
        for seq in 1..=100u64 {
            c.record(&[(1, seq, u128::from(seq))]);
        }
        // Demoted past 8 keys into a filter held to 256 bits (its room, 18 keys, would
        // take 512), then never full: still covered, no read.
        for seq in 1..=100u64 {
            let k = c.known(1, u128::from(seq), 100);
            assert_eq!(k.upto, 100);
            assert!(k.candidates.contains(&seq), "no false negative at {seq}");
        }
        let st = c.lock();
        match &st.sessions[&1].cover {
            Cover::Filter(f) => assert_eq!((f.bits(), f.capped), (256, true)),
            Cover::Exact(_) => panic!("not demoted"),
        }
    }

    #[test]
    fn a_session_just_read_is_not_forgotten_for_the_budget_until_it_is_not_recent() {
        let c = Census::new(8);
        // Session 1 read whole: 100 keys, past the budget on its tags alone.
        let fps: Vec<u64> = (1..=100u128).map(fingerprint).collect();
        c.extend(c.generation(), 1, 1, 100, &fps);
        // Another session written: session 1, just read, is kept.
        c.record(&[(2, 1, 1000)]);
        assert_eq!(c.known(1, 5, 100).upto, 100);
        // Once it is no longer recent (nor used), the budget forgets it.
        for seq in 2..=RECENT_TICKS + 1 {
            c.record(&[(2, seq, 1000 + u128::from(seq))]);
        }
        assert_eq!(c.known(1, 5, 100).upto, 0);
        assert!(c.lock().bits <= 8 * FILTER_BITS_PER_BOUND_KEY);
    }
}
