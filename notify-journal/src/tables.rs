//! The on-disk layout (see `docs/design.md`). Changing any definition here is a format
//! change and needs a new [`FORMAT_VERSION`].

use redb::TableDefinition;

/// The journal format this build reads and writes.
pub(crate) const FORMAT_VERSION: u64 = 1;

/// `name -> value`; holds [`FORMAT_KEY`]. Its presence marks a redb file as a journal.
pub(crate) const META: TableDefinition<'_, &str, u64> = TableDefinition::new("notify_journal_meta");
/// The key of the format version in [`META`].
pub(crate) const FORMAT_KEY: &str = "format_version";
/// `(session, seq) -> encoded record`.
pub(crate) const FRAMES: TableDefinition<'_, (u128, u64), &[u8]> =
    TableDefinition::new("notify_journal_frames");
/// `(session, key) -> seq`: the idempotency index.
pub(crate) const INDEX: TableDefinition<'_, (u128, u128), u64> =
    TableDefinition::new("notify_journal_index");
/// `session -> last seq`: one row per session with at least one frame.
pub(crate) const HEADS: TableDefinition<'_, u128, u64> =
    TableDefinition::new("notify_journal_heads");
