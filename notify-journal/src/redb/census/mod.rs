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
//! Bloom filter built from it (no read; [`FILTER_BITS_PER_KEY`](bloom::FILTER_BITS_PER_KEY) bits a key of room,
//! room for twice the keys it holds), which still proves a miss true without reading;
//! a filter's "maybe" (a false positive, about 1 in 2,000 at most) reads the frames its
//! tag names. The filters and their tags together take at most
//! [`FILTER_BITS_PER_BOUND_KEY`](lru::FILTER_BITS_PER_BOUND_KEY) bits per key of the bound (16 bytes: no more than the
//! exact tier), one filter at most a `FILTER_SHARE` share of that (a larger session
//! gets a fuller filter, never full, not a larger one); past that the
//! least recently used filters are forgotten, and a filter that fills is forgotten too:
//! those sessions are read again on their next miss (once, then held again, as a filter
//! of twice the room, up to the cap, when the exact tier is full). So sessions written
//! round robin whose keys outgrow the exact tier are read again about once per doubling
//! of their logs, not on every append (the thrash of forgetting them); only when their
//! keys outgrow the filters too does the census cycle (the cliff moved, it is not gone),
//! and `notify_journal_census_frames_read_total` counts every frame read to cover or
//! decide a miss. The session just used is never forgotten for its own size (a session
//! larger than the bound is held over it), nor one read in the last [`RECENT_TICKS`](lru::RECENT_TICKS).
//! Each session held is charged its own cost besides its keys (its map entry, set or
//! filter, tag vector: [`SESSION_KEYS`](lru::SESSION_KEYS) keys in the exact tier, as
//! many bytes in the filters'), so the bound holds whatever the session count: many
//! short sessions are demoted and forgotten like a few long ones.
//!
//! A purge step forgets its session. A tombstone drop forgets no live session (a
//! dropped session's census is already gone: its purge forgot it); both bump a
//! `generation` counter, which keeps a reader whose snapshot predates the change from
//! putting back what was forgotten.
//!
//! Here: the census itself ([`Census`]: what it knows of a key, what the writer and the
//! readers add, what a purge or drop forgets). `bloom.rs` is the filter, `lru.rs` what
//! is held and let go of, `confirm.rs` the reads of the log that decide a miss.

mod bloom;
mod confirm;
mod lru;

use std::sync::{Mutex, MutexGuard, PoisonError};

pub(crate) use self::confirm::{confirm_head, confirm_miss};
use self::lru::State;
use crate::error::Corruption;
use crate::redb::options::DEFAULT_CENSUS_MAX_KEYS;

/// A key's fingerprint: the census keeps 8 bytes per key, and a fingerprint hit is
/// confirmed against the session's frames before it is called damage.
fn fingerprint(key: u128) -> u64 {
    // Both halves: UUIDv7 keys differ mostly in their random low half, v5 keys anywhere.
    (key as u64) ^ ((key >> 64) as u64).rotate_left(29)
}

/// A fingerprint's 16-bit tag (mixed apart from the filters' probes).
fn tag(fp: u64) -> u16 {
    (bloom::mix(fp ^ 0x6a09_e667_f3bc_c909) >> 48) as u16
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

#[cfg(test)]
mod tests {
    use super::lru::{
        Cover, FILTER_BITS_PER_BOUND_KEY, RECENT_TICKS, SESSION_BITS, SESSION_KEYS, filter_cap,
    };
    use super::*;

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
        // Room for four sessions of two keys each (each session costs SESSION_KEYS).
        let bound = 4 * (SESSION_KEYS + 2);
        let c = Census::new(bound);
        // Four sessions of four keys each, round robin: past the exact bound.
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
        assert!(st.keys <= bound, "{} keys held exactly", st.keys);
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
        // Bound 84 (64 keys besides the session's cost): budget 10,752 bits, one filter
        // at most 2,048.
        let bound = SESSION_KEYS + 64;
        assert_eq!(filter_cap(bound), 2048);
        assert_eq!(filter_cap(1), 64);
        let c = Census::new(bound);
        for seq in 1..=100u64 {
            c.record(&[(1, seq, u128::from(seq))]);
        }
        // Demoted past 64 keys into a filter held to 2,048 bits (its room, 130 keys,
        // would take 4,096), then never full: still covered, no read.
        for seq in 1..=100u64 {
            let k = c.known(1, u128::from(seq), 100);
            assert_eq!(k.upto, 100);
            assert!(k.candidates.contains(&seq), "no false negative at {seq}");
        }
        let st = c.lock();
        match &st.sessions[&1].cover {
            Cover::Filter(f) => assert_eq!((f.bits(), f.capped), (2048, true)),
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

    /// Each session held costs memory besides its keys: with many sessions of one key
    /// each (a file of many short sessions being written), the sessions held stay
    /// within what the bound pays for, whatever the session count.
    #[test]
    fn many_small_sessions_stay_within_the_bound() {
        let bound = 1 << 14;
        let c = Census::new(bound);
        let sessions = 64 * 1024u128;
        for batch in (1..=sessions).collect::<Vec<_>>().chunks(64) {
            let frames: Vec<_> = batch.iter().map(|s| (*s, 1, s * 7)).collect();
            c.record(&frames);
        }
        let st = c.lock();
        // What the two tiers pay for: the exact tier's bound in keys, the filters'
        // budget in bits, each session charged its own cost (and a few sessions kept
        // past the budget while recent).
        let paid = bound / SESSION_KEYS + bound * FILTER_BITS_PER_BOUND_KEY / SESSION_BITS;
        assert!(
            st.sessions.len() <= paid + RECENT_TICKS as usize * 64,
            "{} sessions held, the bound pays for {paid}",
            st.sessions.len()
        );
        assert!(st.keys <= bound, "{} keys", st.keys);
        assert!(
            st.bits
                <= bound * FILTER_BITS_PER_BOUND_KEY + RECENT_TICKS as usize * 64 * SESSION_BITS,
            "{} bits",
            st.bits
        );
    }
}
