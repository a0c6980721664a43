//! A Bloom filter of key fingerprints: the census's second tier. No false negatives,
//! so "absent" proves a miss true without reading; its "maybe" (a false positive,
//! about 1 in 2,000 at most) is decided by reading the frames the key's tag names.

/// Bits of a Bloom filter per key of room (eight probes: about 1 false positive in
/// 2,000 when full, far fewer before).
pub(crate) const FILTER_BITS_PER_KEY: usize = 16;
/// Probes of a filter per key.
const PROBES: u64 = 8;

/// splitmix64's finaliser: a fingerprint's bits spread for a filter's probes.
pub(super) fn mix(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// A Bloom filter of fingerprints: no false negatives, so "absent" proves a miss true.
pub(super) struct Filter {
    words: Vec<u64>,
    /// Bits − 1 (bits a power of two).
    mask: u64,
    /// Fingerprints inserted.
    len: usize,
    /// Fingerprints it has room for at [`FILTER_BITS_PER_KEY`].
    room: usize,
    /// Held to `cap` bits, short of its room: it never fills (a larger one would be
    /// held to the same bits), its false positives only grow.
    pub(super) capped: bool,
}

impl Filter {
    /// A filter with room for `room` fingerprints, of at most `cap` bits (a power of
    /// two, at least 64).
    pub(super) fn with_room(room: usize, cap: usize) -> Self {
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

    pub(super) fn bits(&self) -> usize {
        self.words.len() * 64
    }

    fn probes(&self, fp: u64) -> impl Iterator<Item = u64> + use<> {
        let a = mix(fp);
        let b = mix(fp ^ 0x9e37_79b9_7f4a_7c15) | 1;
        let mask = self.mask;
        (0..PROBES).map(move |i| a.wrapping_add(b.wrapping_mul(i)) & mask)
    }

    pub(super) fn insert(&mut self, fp: u64) {
        for bit in self.probes(fp) {
            self.words[(bit >> 6) as usize] |= 1 << (bit & 63);
        }
        self.len += 1;
    }

    pub(super) fn may_hold(&self, fp: u64) -> bool {
        self.probes(fp)
            .all(|bit| self.words[(bit >> 6) as usize] & (1 << (bit & 63)) != 0)
    }

    pub(super) fn full(&self) -> bool {
        !self.capped && self.len > self.room
    }
}
