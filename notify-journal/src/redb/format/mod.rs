//! The on-disk format (see `docs/design.md`): the tables, here, and what their values
//! hold: a frame's checksummed header (`frame.rs`) and its compact binary body
//! (`body/`), the stored keys and a session's head (`keys.rs`), and the checksummed row
//! of an ended or purged session (`session_row.rs`), and where a session's frames are
//! (`positions.rs`: the positions table and the log's tail). Changing any definition
//! here is a format change and needs a new [`FORMAT_VERSION`].

pub(crate) mod body;
pub(crate) mod frame;
pub(crate) mod keys;
pub(crate) mod positions;
pub(crate) mod session_row;

use redb::TableDefinition;

/// The journal format this build writes. It reads this one and upgrades every earlier
/// one (see `file/upgrade.rs`); format 3 is format 2 with the log's [`TAIL`].
pub(crate) const FORMAT_VERSION: u64 = 3;

/// `name -> value`; holds [`FORMAT_KEY`]. Its presence marks a redb file as a journal.
/// Unchanged across versions, so any build can read any file's version.
pub(crate) const META: TableDefinition<'_, &str, u64> = TableDefinition::new("notify_journal_meta");
/// The key of the format version in [`META`].
pub(crate) const FORMAT_KEY: &str = "format_version";
/// Present in [`META`] while an upgrade from format 1 is under way: the frames of the
/// old tables are being moved, a bounded step per transaction.
pub(crate) const UPGRADING_KEY: &str = "upgrading_from";

/// `position -> frame`: every session's frames in one log, in commit order. Positions
/// start at 1 and only grow, so appends land at the right edge of the tree. A frame is
/// the header of `frame.rs` (checksum, session, seq, key) and the record's body.
pub(crate) const LOG: TableDefinition<'_, u64, &[u8]> = TableDefinition::new("notify_log");
/// `(session, seq) -> position`: a session's frames in order, except those still in the
/// [`TAIL`]; a session's last entry here or in the tail is its head (no head is
/// written per batch).
pub(crate) const POSITIONS: TableDefinition<'_, (u128, u64), u64> =
    TableDefinition::new("notify_positions");
/// `position -> (session, seq)`: the log's tail, the frames appended since the writer
/// last folded the tail into [`POSITIONS`]. Keyed by position, so a batch's entries land
/// at the right edge whatever the sessions (where positions entries land one leaf per
/// session); folded in bulk, sorted, when it holds `RedbOptions::tail_max` entries,
/// before every chore, and when the journal closes. Every frame is named by exactly one
/// of the two, and a session's tail entries follow its positions entries (format 3).
pub(crate) const TAIL: TableDefinition<'_, u64, (u128, u64)> = TableDefinition::new("notify_tail");
/// `(key, session) -> position`: the idempotency index. Keyed by the key first, so
/// time-ordered (UUIDv7) keys insert near the right edge whatever the session.
pub(crate) const KEYS: TableDefinition<'_, (u128, u128), u64> = TableDefinition::new("notify_keys");
/// `session -> state row` (`session_row.rs`): ended and purged sessions (tombstones). Written
/// in the transaction that commits a session's end marker; a build that cannot interpret
/// its rows refuses to open a file that has any, so no tombstone is ever ignored.
pub(crate) const SESSIONS: TableDefinition<'_, u128, &[u8]> =
    TableDefinition::new("notify_sessions");
/// `(class, time, session) -> ()`: every [`SESSIONS`] row once more, ordered for the
/// purge: [`CLASS_PURGING`] first (an unfinished purge is finished first), then
/// [`CLASS_ENDED`] by end time (the oldest end is purged first), then [`CLASS_PURGED`] by
/// purge time (the oldest tombstone is dropped first). Written in the same transaction
/// as the row it mirrors. Absent from files no build with session ends wrote to (it is
/// created by the first write transaction); an older build ignores it, and refuses such
/// a file anyway through [`SESSIONS`].
pub(crate) const RETENTION: TableDefinition<'_, (u8, i128, u128), ()> =
    TableDefinition::new("notify_retention");
/// [`RETENTION`] class of a session whose purge began and has frames left; time: its end.
pub(crate) const CLASS_PURGING: u8 = 0;
/// [`RETENTION`] class of an ended session, awaiting its purge; time: its end.
pub(crate) const CLASS_ENDED: u8 = 1;
/// [`RETENTION`] class of a purged session (only its tombstone left); time: the purge's
/// start.
pub(crate) const CLASS_PURGED: u8 = 2;

/// The format-1 tables, read only by the upgrade.
pub(crate) mod v1 {
    use redb::TableDefinition;

    /// `(session, seq) -> encoded record`.
    pub(crate) const FRAMES: TableDefinition<'_, (u128, u64), &[u8]> =
        TableDefinition::new("notify_journal_frames");
    /// `(session, key) -> seq`: the idempotency index.
    pub(crate) const INDEX: TableDefinition<'_, (u128, u128), u64> =
        TableDefinition::new("notify_journal_index");
    /// `session -> last seq`.
    pub(crate) const HEADS: TableDefinition<'_, u128, u64> =
        TableDefinition::new("notify_journal_heads");
}
