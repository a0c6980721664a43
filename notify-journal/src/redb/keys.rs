//! Stored keys: the typed id a stored session key (`u128`) stands for.

use notify_types::{SessionId, Uuid};

/// The session id a stored session key stands for.
pub(crate) fn sid(v: u128) -> SessionId {
    SessionId::from_uuid(Uuid::from_u128(v))
}
