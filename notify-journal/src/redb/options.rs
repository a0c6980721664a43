//! Options for [`RedbJournal::open`](crate::RedbJournal::open).

use std::time::Duration;

use crate::integrity::DEFAULT_MAX_RECORD_BYTES;

/// How a commit reaches the disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum RedbDurability {
    /// Every commit is durable before any append of its batch is acknowledged
    /// (redb `Durability::Immediate`, one-phase commit with checksums). The default.
    #[default]
    Immediate,
    /// **For tests and benchmark fixtures only.** Commits are not synced: an
    /// acknowledged append can be lost in a crash (a clean [`close`] still makes
    /// everything durable). Never use it where an acknowledgement must mean "on disk".
    ///
    /// [`close`]: crate::RedbJournal::close
    NonDurableForTestsOnly,
}

/// What opening a journal checks before it is used, and what is checked while it runs
/// (see `docs/design.md`, "What is detected").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum RedbVerifyOnOpen {
    /// Nothing beyond the metadata, and no scrub: opening costs the same for any size of
    /// file. Damage is still found by the checks on every read (every frame's checksum,
    /// every index miss confirmed against the session's log), but a damaged page can
    /// make the storage engine fail (or, at worst, abort) where it reads it. For
    /// measurements and for tools that run their own checks.
    Off,
    /// redb checks every page of the committed trees against its checksum (its integrity
    /// check at open): a file whose pages changed is refused with
    /// [`OpenError::Damaged`](crate::OpenError::Damaged) before anything trusts it. Reads
    /// the whole file once per open (about 165 ms at 1M records, 0.9 s at 5M). No scrub.
    Pages,
    /// [`Pages`](Self::Pages), then the journal's own deep check (every frame's
    /// checksum and decoding, logs contiguous, index and frames one-to-one): any problem
    /// refuses the open. No scrub.
    Full,
    /// The default. Opening reads only the metadata (the same for any size of file); a
    /// background scrub then runs the journal's deep check on read snapshots, while
    /// appends go on, at [`RedbOptions::scrub_pace`], one pass at open and one every
    /// [`RedbOptions::scrub_interval`]. Damage it finds poisons the journal: every
    /// later append fails with [`AppendError::Damaged`](crate::AppendError::Damaged), and
    /// [`RedbJournal::scrub_status`](crate::RedbJournal::scrub_status) names it. Until a
    /// pass has checked a page, the append path believes no damage it could act on: an
    /// index miss is confirmed against the session's log, a session's head against the
    /// frame it names, and a live session's state against its last frame (no end
    /// marker), before anything is written.
    #[default]
    Background,
}

/// Tuning and safety options for a [`RedbJournal`](crate::RedbJournal).
///
/// ```
/// use notify_journal::{RedbDurability, RedbOptions};
///
/// let options = RedbOptions::default()
///     .cache_size(64 << 20)
///     .max_batch(512)
///     .quick_repair(true)
///     .durability(RedbDurability::Immediate);
/// assert_eq!(options.max_record_bytes_value(), 1 << 20);
/// ```
#[derive(Debug, Clone)]
pub struct RedbOptions {
    pub(crate) cache_size: usize,
    pub(crate) max_batch: usize,
    pub(crate) quick_repair: bool,
    pub(crate) durability: RedbDurability,
    pub(crate) max_record_bytes: usize,
    pub(crate) commit_siblings: usize,
    pub(crate) max_commit_delay: Duration,
    pub(crate) verify_on_open: RedbVerifyOnOpen,
    pub(crate) drop_step: usize,
    pub(crate) confirm_misses: bool,
    pub(crate) census_max_keys: usize,
    pub(crate) scrub_interval: Duration,
    pub(crate) scrub_pace: u64,
    pub(crate) tail_max: usize,
}

/// The default [`RedbOptions::cache_size`]: 16 MiB.
///
/// redb's page cache keeps every page read until it is full, and nothing evicts a long
/// sequential read's pages early: a restore or replay of a long session fills it with
/// log pages it will not read again, and the process keeps them. 16 MiB holds the
/// writer's working set (the index's and the positions table's upper levels, the
/// leaves a batch touches) while bounding what such a read leaves behind: restoring a
/// 1M-frame session grew the process by 72 MB with a 64 MiB cache and by 4.5 MB with
/// 1 MiB, and by 25.6 MB with this one (`notify-session`'s `restore_memory` bench).
pub const DEFAULT_CACHE_SIZE: usize = 16 << 20;

impl Default for RedbOptions {
    fn default() -> Self {
        Self {
            cache_size: DEFAULT_CACHE_SIZE,
            max_batch: 1024,
            quick_repair: false,
            durability: RedbDurability::Immediate,
            max_record_bytes: DEFAULT_MAX_RECORD_BYTES,
            commit_siblings: 4,
            max_commit_delay: Duration::from_millis(2),
            verify_on_open: RedbVerifyOnOpen::default(),
            drop_step: DEFAULT_DROP_STEP,
            confirm_misses: true,
            census_max_keys: DEFAULT_CENSUS_MAX_KEYS,
            scrub_interval: DEFAULT_SCRUB_INTERVAL,
            scrub_pace: DEFAULT_SCRUB_PACE,
            tail_max: DEFAULT_TAIL_MAX,
        }
    }
}

/// The default [`RedbOptions::census_max_keys`]: 2²⁰ (1,048,576) keys held exactly.
///
/// Sized so that the writer of a file of any number of sessions stays within 64 MB
/// (`restore_memory`'s writer bench: one record to each of 250,000, 1M or 2M sessions
/// grew the process by 58 MB; at 2²¹, 93 MB). Raise it for more keys in the sessions
/// being written (about 35 MB per 2²⁰ more).
pub const DEFAULT_CENSUS_MAX_KEYS: usize = 1 << 20;

/// The default [`RedbOptions::scrub_interval`]: one hour between scrub passes.
pub const DEFAULT_SCRUB_INTERVAL: Duration = Duration::from_secs(3600);

/// The default [`RedbOptions::scrub_pace`]: 1,000,000 table entries a second.
pub const DEFAULT_SCRUB_PACE: u64 = 1_000_000;

/// The default [`RedbOptions::tail_max`]: the writer folds the log's tail into the
/// positions table once it holds 4,096 frames.
pub const DEFAULT_TAIL_MAX: usize = 4096;

/// The largest [`RedbOptions::max_batch`] and [`RedbOptions::drop_step`].
const MAX_BATCH_LIMIT: usize = 1 << 16;

/// The default [`RedbOptions::drop_step`]: 1,024 tombstones per transaction.
pub const DEFAULT_DROP_STEP: usize = 1024;

impl RedbOptions {
    /// redb's page cache size in bytes (default [`DEFAULT_CACHE_SIZE`], 16 MiB).
    #[must_use]
    pub fn cache_size(mut self, bytes: usize) -> Self {
        self.cache_size = bytes;
        self
    }

    /// The most appends one write transaction may carry (default 1024; clamped to
    /// 1..=65,536, since the writer keeps a batch's requests in memory).
    #[must_use]
    pub fn max_batch(mut self, n: usize) -> Self {
        self.max_batch = n.clamp(1, MAX_BATCH_LIMIT);
        self
    }

    /// redb quick-repair: every commit also saves the allocator state, so reopening after
    /// a crash does not rebuild it by walking the whole file. Costs some throughput.
    /// Default `false`.
    #[must_use]
    pub fn quick_repair(mut self, enabled: bool) -> Self {
        self.quick_repair = enabled;
        self
    }

    /// Commit durability (default [`RedbDurability::Immediate`]; the other mode is for tests
    /// only).
    #[must_use]
    pub fn durability(mut self, durability: RedbDurability) -> Self {
        self.durability = durability;
        self
    }

    /// The largest encoded record accepted, in bytes (default
    /// [`DEFAULT_MAX_RECORD_BYTES`], 1 MiB). Larger records are refused with
    /// [`AppendError::TooLarge`](crate::AppendError::TooLarge) and nothing is written.
    #[must_use]
    pub fn max_record_bytes(mut self, n: usize) -> Self {
        self.max_record_bytes = n;
        self
    }

    /// Adaptive batching, like PostgreSQL's `commit_siblings`: the writer lingers
    /// before a commit only while at least this many appenders are active (default 4).
    /// A lone append never waits.
    #[must_use]
    pub fn commit_siblings(mut self, n: usize) -> Self {
        self.commit_siblings = n.max(2);
        self
    }

    /// Adaptive batching, like PostgreSQL's `commit_delay`: the longest the writer
    /// lingers for active appenders to rejoin before it commits (default 2 ms; it also
    /// never lingers longer than half the recent commit time). Zero disables lingering.
    #[must_use]
    pub fn max_commit_delay(mut self, delay: Duration) -> Self {
        self.max_commit_delay = delay;
        self
    }

    /// What opening checks before the journal is used, and whether a background scrub
    /// runs (default [`RedbVerifyOnOpen::Background`]: no scan at open, a scrub while open).
    #[must_use]
    pub fn verify_on_open(mut self, check: RedbVerifyOnOpen) -> Self {
        self.verify_on_open = check;
        self
    }

    /// The most tombstones one write transaction of
    /// [`drop_tombstones`](crate::RedbJournal::drop_tombstones) drops (default
    /// [`DEFAULT_DROP_STEP`], 1,024; clamped to 1..=65,536). A larger drop runs as a
    /// sequence of such steps, each a chore of its own between append batches, so an
    /// append waits for at most one step however many tombstones are due.
    #[must_use]
    pub fn drop_step(mut self, n: usize) -> Self {
        self.drop_step = n.clamp(1, MAX_BATCH_LIMIT);
        self
    }

    /// Whether a miss of the idempotency index is confirmed against the session's own
    /// log before it is believed (default `true`): before a new frame is written, and
    /// by lookups. A damaged index page can hide a key; believed, the miss would
    /// journal a retried record a second time. Confirmed, it is
    /// [`Corrupt`](crate::AppendError::Corrupt) instead. The cost: a session's first
    /// miss after open reads its log once (the key census, `docs/design.md`), memory
    /// bounded by [`census_max_keys`](Self::census_max_keys). Off only to measure that
    /// cost.
    #[must_use]
    pub fn confirm_misses(mut self, enabled: bool) -> Self {
        self.confirm_misses = enabled;
        self
    }

    /// The most key fingerprints the key census holds exactly, over all sessions
    /// (default [`DEFAULT_CENSUS_MAX_KEYS`], 2²⁰; at least 1). Only with
    /// [`confirm_misses`](Self::confirm_misses).
    ///
    /// Memory: about 12 to 22 bytes per key held exactly (8-byte fingerprints in hash
    /// sets, a 2-byte tag per frame), plus at most 16 bytes per key of this bound for
    /// the Bloom filters of the sessions past it: at the default, at most about
    /// 22 MiB + 16 MiB, whatever the number of sessions: each session held is charged
    /// its own cost (about 300 bytes: map slot, boxed entry, set or filter, tag vector)
    /// as 20 keys of this bound, or as many bytes of the filters'. Past the bound the least
    /// recently used sessions are demoted to filters (6 to 10 bytes per key,
    /// still proving a miss true without reading the log); past the filters' budget
    /// the least recently used are forgotten and each is read again, whole, on its next
    /// miss. So size it to the keys of the sessions being written: with the default, up
    /// to about 2.5M keys or more in all stay covered; beyond that sessions written round
    /// robin fall back to reading a whole log on nearly every append, which
    /// `notify_journal_census_frames_read_total` shows (`docs/metrics.md`); this bound
    /// is the knob.
    #[must_use]
    pub fn census_max_keys(mut self, keys: usize) -> Self {
        self.census_max_keys = keys.max(1);
        self
    }

    /// The pause between the end of one background scrub pass and the start of the
    /// next (default [`DEFAULT_SCRUB_INTERVAL`], one hour; the first pass starts at
    /// open). Only with [`RedbVerifyOnOpen::Background`].
    #[must_use]
    pub fn scrub_interval(mut self, interval: Duration) -> Self {
        self.scrub_interval = interval;
        self
    }

    /// The most table entries (frames, positions, index entries, session rows) the
    /// background scrub reads a second (default [`DEFAULT_SCRUB_PACE`], 1,000,000: a
    /// pass over 1M records, about 2M entries, takes a few seconds). A slower pace is
    /// not gentler on appends: a pass holds one read transaction, so a longer pass keeps
    /// pages the writer frees from reuse for longer (the append bench's scrub rows: at
    /// 200,000 a lone appender ran at about 0.8× of no scrub, at 1,000,000 at 1.0×). A
    /// pass counts as at least 1,024 entries, so passes over a
    /// small journal with a short interval keep the pace too. 0 reads as fast as it can.
    /// Only with [`RedbVerifyOnOpen::Background`].
    #[must_use]
    pub fn scrub_pace(mut self, entries_per_second: u64) -> Self {
        self.scrub_pace = entries_per_second;
        self
    }

    /// How many frames the log's tail holds before the writer folds it into the
    /// positions table (default [`DEFAULT_TAIL_MAX`], 4,096; the writer also folds it
    /// before every purge step, tombstone drop and import, and when the journal closes).
    ///
    /// A new frame's place in its session's log is written to the tail, keyed by its
    /// log position, so a batch's entries land together whatever the sessions; a fold
    /// moves them, sorted by session, into the positions table, where each of the
    /// table's leaves is written once however many of its entries the tail held. A
    /// larger tail spreads a fold's cost over more appends (appends spread over many
    /// sessions gain most) and costs more per read of a session's log: a read (replay,
    /// head, listing) reads the whole tail once, and the writer keeps it in memory
    /// (about 40 bytes an entry). 0 folds at every batch, as format 2 wrote positions.
    #[must_use]
    pub fn tail_max(mut self, frames: usize) -> Self {
        self.tail_max = frames;
        self
    }

    /// The configured [`tail_max`](Self::tail_max).
    #[must_use]
    pub fn tail_max_value(&self) -> usize {
        self.tail_max
    }

    /// The configured record size cap.
    #[must_use]
    pub fn max_record_bytes_value(&self) -> usize {
        self.max_record_bytes
    }
}
