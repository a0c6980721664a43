//! Stored keys: the typed id a stored session key (`u128`) stands for, and a session's
//! head as its last key in the positions table, and the map the writer and the census
//! keep per session.

use notify_types::{SessionId, Uuid};
use redb::ReadableTable;

/// A map keyed by stored session keys (or key fingerprints), as the writer and the
/// census keep them: hashed with foldhash, seeded per process, not SipHash (a lookup per
/// map per append: SipHash of a `u128` was a tenth of the writer's instructions).
pub(crate) type FastMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;

/// The session id a stored session key stands for.
pub(crate) fn sid(v: u128) -> SessionId {
    SessionId::from_uuid(Uuid::from_u128(v))
}

/// The last seq in `session`'s log (0: none): its last key in the positions table (or
/// in any table keyed by `(session, seq)`, as format 1's frames table). Only where the
/// log's tail is empty (a chore's transaction, after its fold; the format-1 upgrade):
/// elsewhere a session's head is `positions::SessionLog::head`.
/// `storage` maps a storage error, given what was being read.
pub(crate) fn log_head<E, M, V: redb::Value + 'static>(
    positions: &impl ReadableTable<(u128, u64), V>,
    session: u128,
    storage: impl Fn(&'static str) -> M,
) -> Result<u64, E>
where
    M: Fn(redb::StorageError) -> E,
{
    Ok(positions
        .range((session, 0)..=(session, u64::MAX))
        .map_err(storage("read positions"))?
        .next_back()
        .transpose()
        .map_err(storage("read position"))?
        .map_or(0, |(k, _)| k.value().1))
}
