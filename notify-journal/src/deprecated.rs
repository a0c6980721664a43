//! Names of earlier releases, each kept as a deprecated alias of what replaced it.

use notify_types::{JournalRecord, SessionId};

use crate::backend::{AppendOutcome, SeqRecord};
use crate::error::{AppendError, JournalError};
#[cfg(feature = "postgres")]
use crate::lease::Lease;
use crate::lease::LeaseInfo;

/// The old name of [`Lease`]: every engine's leases are one type now.
#[cfg(feature = "postgres")]
#[deprecated(note = "renamed to `Lease` (the `JournalLeases` trait's)")]
pub type PgLease = Lease;

/// The old name of [`LeaseInfo`]: every engine's leases are one type now.
#[cfg(feature = "postgres")]
#[deprecated(note = "renamed to `LeaseInfo` (the `JournalLeases` trait's)")]
pub type PgLeaseInfo = LeaseInfo;

/// The accessors of the old `PgLeaseInfo`; its fields are public now.
impl LeaseInfo {
    /// The latest epoch handed out (0: never leased).
    #[deprecated(note = "read the `epoch` field")]
    #[must_use]
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The holder's identity, if the lease has not been released.
    #[deprecated(note = "read the `holder` field")]
    #[must_use]
    pub fn holder(&self) -> Option<notify_types::Uuid> {
        self.holder
    }

    /// Whether the lease is held and unexpired by the engine's clock.
    #[deprecated(note = "read the `live` field")]
    #[must_use]
    pub fn is_live(&self) -> bool {
        self.live
    }
}

/// The old name of [`RedbOptions`](crate::RedbOptions): the options are redb's only.
#[deprecated(note = "renamed to `RedbOptions`")]
pub type JournalOptions = crate::RedbOptions;

/// The old name of [`RedbDurability`](crate::RedbDurability).
#[deprecated(note = "renamed to `RedbDurability`")]
pub type Durability = crate::RedbDurability;

/// The old name of [`RedbVerifyOnOpen`](crate::RedbVerifyOnOpen).
#[deprecated(note = "renamed to `RedbVerifyOnOpen`")]
pub type VerifyOnOpen = crate::RedbVerifyOnOpen;

/// The old name of [`SeqRecord`].
#[deprecated(note = "renamed `SeqRecord` (a frame is the stored bytes)")]
pub type Frame = SeqRecord;

/// The old name of [`check_append`](crate::check_append).
#[deprecated(note = "renamed `check_append`")]
#[doc(hidden)]
pub fn encode_for_append(
    session: SessionId,
    record: &JournalRecord,
    max_record_bytes: usize,
) -> Result<Vec<u8>, AppendError> {
    crate::integrity::check_append(session, record, max_record_bytes)
}

/// The old name of [`check_group`](crate::check_group).
#[deprecated(note = "renamed `check_group`")]
#[doc(hidden)]
pub fn encode_group_for_append(
    session: SessionId,
    records: &[JournalRecord],
    max_record_bytes: usize,
) -> Result<Vec<Vec<u8>>, AppendError> {
    crate::integrity::check_group(session, records, max_record_bytes)
}

/// The check [`replay_page`](crate::replay_page) runs on a page.
#[deprecated(note = "use `replay_page`, which replays and checks the page")]
#[doc(hidden)]
pub fn check_replay_page(
    session: SessionId,
    from_seq: u64,
    limit: usize,
    head: Option<u64>,
    page: &[SeqRecord],
) -> Result<(), JournalError> {
    crate::integrity::check_replay_page(session, from_seq, limit, head, page)
}

/// Decodes a stored frame after checking its checksum.
#[deprecated(note = "a backend's own plumbing: no longer part of the API")]
#[doc(hidden)]
pub fn decode_checked_frame(
    session: SessionId,
    seq: u64,
    bytes: &[u8],
    stored_checksum: u32,
) -> Result<SeqRecord, JournalError> {
    crate::integrity::decode_checked_frame(session, seq, bytes, stored_checksum)
}

/// Decodes a stored frame.
#[deprecated(note = "a backend's own plumbing: no longer part of the API")]
#[doc(hidden)]
pub fn decode_frame(session: SessionId, seq: u64, bytes: &[u8]) -> Result<SeqRecord, JournalError> {
    crate::integrity::decode_frame(session, seq, bytes)
}

/// The checksum a backend stores with a frame.
#[deprecated(note = "a backend's own plumbing: no longer part of the API")]
#[doc(hidden)]
#[must_use]
pub fn frame_checksum(bytes: &[u8]) -> u32 {
    crate::integrity::frame_checksum(bytes)
}

/// Counts one append's answer in the journal's metrics.
#[deprecated(note = "a backend's own plumbing: no longer part of the API")]
#[doc(hidden)]
pub fn record_append(backend: &'static str, result: &Result<AppendOutcome, AppendError>) {
    crate::metrics::record_append(backend, result);
}
