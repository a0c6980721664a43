//! What the census holds of each session, and what it lets go of, least recently used
//! first: a session's fingerprints exactly (the first tier, at most `max_keys` over all
//! sessions) or as a Bloom filter (`bloom.rs`, the second tier, within its own budget),
//! with a tag of each counted frame; past the bound the least recently used sessions
//! are demoted to filters, and past the filters' budget the least recently used filters
//! are forgotten (read again on their next miss).

use std::collections::HashSet;

use super::bloom::Filter;
use super::tag;
use crate::redb::format::keys::FastMap;

/// The filters' budget: bits per key of the exact tier's bound (16 bytes).
pub(crate) const FILTER_BITS_PER_BOUND_KEY: usize = 128;
/// What holding a session costs besides its keys (its map slot and boxed entry, its
/// set's or filter's allocation, its tag vector: about 300 bytes, measured), charged
/// against the tier that holds it, so that the bound holds whatever the session count:
/// in the exact tier as this many keys (16 bytes each)...
pub(super) const SESSION_KEYS: usize = 20;
/// ...and in the filters' budget as this many bits (the same 320 bytes).
pub(super) const SESSION_BITS: usize = SESSION_KEYS * FILTER_BITS_PER_BOUND_KEY;
/// Bits of a frame's tag, counted in the filters' budget for a filtered session.
const TAG_BITS: usize = 16;
/// One filter takes at most this share of the filters' budget (1/4): a session of more
/// keys gets a fuller filter (more false positives, each costing the reads of its
/// tag-matched frames) rather than one that outgrows the budget and is forgotten.
const FILTER_SHARE: usize = 4;
/// A session read within this many ticks of the census's clock (one a miss looked up,
/// one a batch recorded: about 8 batches of one append) is not forgotten for the
/// filters' budget: forgotten at once, it would be read whole on nearly every batch.
/// At most this many sessions are so kept past the budget.
pub(super) const RECENT_TICKS: u64 = 16;

/// The most bits one filter takes, for a bound of `max_keys`: a power of two, at most
/// [`FILTER_SHARE`]'s share of the budget (at least 64).
pub(super) fn filter_cap(max_keys: usize) -> usize {
    let share = max_keys.saturating_mul(FILTER_BITS_PER_BOUND_KEY) / FILTER_SHARE;
    if share < 64 {
        64
    } else {
        1 << (usize::BITS - 1 - share.leading_zeros())
    }
}

type FastSet<T> = HashSet<T, foldhash::fast::RandomState>;

/// What the census holds of one session's fingerprints.
pub(super) enum Cover {
    /// Every fingerprint.
    Exact(FastSet<u64>),
    /// A Bloom filter of them.
    Filter(Filter),
}

impl Cover {
    pub(super) fn may_hold(&self, fp: u64) -> bool {
        match self {
            Cover::Exact(set) => set.contains(&fp),
            Cover::Filter(f) => f.may_hold(fp),
        }
    }
}

/// One session's census.
pub(super) struct Keys {
    /// The frames `1..=upto` are counted.
    pub(super) upto: u64,
    pub(super) cover: Cover,
    /// Each counted frame's [`tag`](super::tag), by seq (`tags[seq - 1]`): where a fingerprint the
    /// cover may hold is looked for, so that deciding it reads only the frames whose tag
    /// matches, not the whole log.
    pub(super) tags: Vec<u16>,
    /// When it was last used, for eviction.
    pub(super) used: u64,
    /// When its log was last read, if ever.
    pub(super) read_at: Option<u64>,
}

#[derive(Default)]
pub(super) struct State {
    pub(super) generation: u64,
    /// Each session's census, boxed: the map's table then costs 32 bytes a slot, not
    /// the 128 of an inline entry (with a hash table's slack and a table grown for a
    /// peak, the slots were most of the census's memory: 68 MB of 118 MB for the
    /// 200,000 one-record sessions held at a bound of 2²¹ keys).
    pub(super) sessions: FastMap<u128, Box<Keys>>,
    /// Fingerprints held exactly, over all sessions.
    pub(super) keys: usize,
    /// Bits of the filters, over all sessions.
    pub(super) bits: usize,
    /// Sessions held as filters.
    pub(super) filters: usize,
    pub(super) clock: u64,
}

impl State {
    /// Starts covering `session` (about `n` keys to come): exactly while the exact tier
    /// has room for them and the session's own cost ([`SESSION_KEYS`]), else in a
    /// filter with room for twice them.
    pub(super) fn cover(&mut self, session: u128, n: usize, max_keys: usize, clock: u64) {
        let cover = if self.keys.saturating_add(n).saturating_add(SESSION_KEYS) <= max_keys {
            self.keys += SESSION_KEYS;
            Cover::Exact(FastSet::default())
        } else {
            let f = Filter::with_room(n.saturating_mul(2), filter_cap(max_keys));
            self.bits += f.bits() + SESSION_BITS;
            self.filters += 1;
            Cover::Filter(f)
        };
        self.sessions.insert(
            session,
            Box::new(Keys {
                upto: 0,
                cover,
                tags: Vec::new(),
                used: clock,
                read_at: None,
            }),
        );
    }

    /// Adds a fingerprint to a covered session. `false` when that filled its filter and
    /// the session was forgotten (its next miss reads it again, into a larger one).
    pub(super) fn add(&mut self, session: u128, fp: u64) -> bool {
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

    pub(super) fn remove(&mut self, session: u128) {
        let Some(k) = self.sessions.remove(&session) else {
            return;
        };
        match &k.cover {
            Cover::Exact(set) => self.keys -= set.len() + SESSION_KEYS,
            Cover::Filter(f) => {
                self.bits -= f.bits() + k.tags.len() * TAG_BITS + SESSION_BITS;
                self.filters -= 1;
            }
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
    pub(super) fn evict(&mut self, max_keys: usize, current: u128) {
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
                    self.keys -= set.len() + SESSION_KEYS;
                    self.bits += f.bits() + k.tags.len() * TAG_BITS + SESSION_BITS;
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
