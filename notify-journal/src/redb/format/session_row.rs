//! A session's state row in `notify_sessions`: ended, being purged, or purged (its
//! tombstone). Live sessions have no row.
//!
//! ```text
//! offset  size  field
//!      0     4  CRC-32C (Castagnoli) of every byte after it, big-endian
//!      4     1  row version: 1
//!      5     1  state: 1 ended, 2 purging (tombstoned, frames left), 3 purged
//!      6    16  session ID, big-endian
//!     22    16  ended_at: nanoseconds since the Unix epoch, i128 big-endian
//!     38    16  purged_at: likewise; 0 while the session is only ended
//!     54     8  last_seq, big-endian
//!     62     8  frames (always last_seq: logs are gap-free from 1), big-endian
//! ```
//!
//! A row is believed only when its checksum, version, state, session and fields all
//! check out; anything else is [`Corruption`], never a guess. A row of a later version
//! is refused the same way (a newer build wrote it).

use notify_types::Timestamp;

use crate::error::Corruption;
use crate::redb::format::{CLASS_ENDED, CLASS_PURGED, CLASS_PURGING};
use crate::retention::{SessionState, Tombstone};

/// A row's length.
pub(crate) const ROW_LEN: usize = 70;
/// The row version this build writes and reads.
const ROW_VERSION: u8 = 1;

const STATE_ENDED: u8 = 1;
const STATE_PURGING: u8 = 2;
const STATE_PURGED: u8 = 3;

/// Where a session is in its end and purge.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stage {
    /// Ended: the log is whole.
    Ended,
    /// The purge began (the tombstone is written); frames may remain.
    Purging,
    /// The purge finished: no frame, position or index entry of the session remains.
    Purged,
}

/// A parsed, checked session row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SessionRow {
    pub(crate) stage: Stage,
    pub(crate) session: u128,
    pub(crate) ended_at: Timestamp,
    /// `Some` from the purge's first step on.
    pub(crate) purged_at: Option<Timestamp>,
    pub(crate) last_seq: u64,
}

impl SessionRow {
    /// The row of a session whose end marker, at `last_seq`, commits now.
    pub(crate) fn ended(session: u128, ended_at: Timestamp, last_seq: u64) -> Self {
        Self {
            stage: Stage::Ended,
            session,
            ended_at,
            purged_at: None,
            last_seq,
        }
    }

    /// The same session, its purge begun at `purged_at`.
    pub(crate) fn purging(self, purged_at: Timestamp) -> Self {
        Self {
            stage: Stage::Purging,
            purged_at: Some(purged_at),
            ..self
        }
    }

    /// The same session, its purge finished.
    pub(crate) fn purged(self) -> Self {
        Self {
            stage: Stage::Purged,
            ..self
        }
    }

    /// Whether only the tombstone is answered (purging or purged).
    pub(crate) fn is_tombstoned(&self) -> bool {
        self.stage != Stage::Ended
    }

    /// The row's entry in the retention index (`format::RETENTION`).
    pub(crate) fn retention_key(&self) -> (u8, i128, u128) {
        match (self.stage, self.purged_at) {
            (Stage::Ended, _) => (CLASS_ENDED, nanos(self.ended_at), self.session),
            (Stage::Purging, _) => (CLASS_PURGING, nanos(self.ended_at), self.session),
            (Stage::Purged, purged_at) => (
                CLASS_PURGED,
                nanos(purged_at.unwrap_or(self.ended_at)),
                self.session,
            ),
        }
    }

    /// What the journal answers for the session.
    pub(crate) fn state(&self) -> SessionState {
        match (self.stage, self.purged_at) {
            (Stage::Ended, _) | (_, None) => SessionState::Ended {
                ended_at: self.ended_at,
                last_seq: self.last_seq,
            },
            (Stage::Purging | Stage::Purged, Some(purged_at)) => SessionState::Purged(Tombstone {
                ended_at: self.ended_at,
                purged_at,
                last_seq: self.last_seq,
                frames: self.last_seq,
            }),
        }
    }

    /// The stored bytes.
    pub(crate) fn encode(&self) -> [u8; ROW_LEN] {
        let mut out = [0u8; ROW_LEN];
        out[4] = ROW_VERSION;
        out[5] = match self.stage {
            Stage::Ended => STATE_ENDED,
            Stage::Purging => STATE_PURGING,
            Stage::Purged => STATE_PURGED,
        };
        out[6..22].copy_from_slice(&self.session.to_be_bytes());
        out[22..38].copy_from_slice(&nanos(self.ended_at).to_be_bytes());
        out[38..54].copy_from_slice(&self.purged_at.map_or(0, nanos).to_be_bytes());
        out[54..62].copy_from_slice(&self.last_seq.to_be_bytes());
        out[62..70].copy_from_slice(&self.last_seq.to_be_bytes());
        let crc = crc32c::crc32c(&out[4..]);
        out[..4].copy_from_slice(&crc.to_be_bytes());
        out
    }

    /// Parses and checks the row stored under `session`.
    pub(crate) fn parse(session: u128, bytes: &[u8]) -> Result<Self, Corruption> {
        let Ok(row) = <&[u8; ROW_LEN]>::try_from(bytes) else {
            return Err(if bytes.len() < ROW_LEN {
                Corruption::Truncated { len: bytes.len() }
            } else {
                Corruption::Inconsistent(format!(
                    "the session row is {} bytes, not {ROW_LEN}",
                    bytes.len()
                ))
            });
        };
        let (crc, rest) = row.split_at(4);
        let stored = u32::from_be_bytes([crc[0], crc[1], crc[2], crc[3]]);
        let computed = crc32c::crc32c(rest);
        if stored != computed {
            return Err(Corruption::Checksum { stored, computed });
        }
        let bad = |what: String| Err(Corruption::Inconsistent(what));
        if row[4] != ROW_VERSION {
            return bad(format!(
                "the session row has version {}, which this build does not read (a newer build wrote it)",
                row[4]
            ));
        }
        let stage = match row[5] {
            STATE_ENDED => Stage::Ended,
            STATE_PURGING => Stage::Purging,
            STATE_PURGED => Stage::Purged,
            other => return bad(format!("the session row has unknown state {other}")),
        };
        let stored_session = u128::from_be_bytes(field(row, 6));
        if stored_session != session {
            return Err(Corruption::Misplaced {
                found: format!(
                    "the row of session {}",
                    notify_types::Uuid::from_u128(stored_session)
                ),
            });
        }
        let ended_at = timestamp(i128::from_be_bytes(field(row, 22)))?;
        let purged_ns = i128::from_be_bytes(field(row, 38));
        let purged_at = match stage {
            Stage::Ended if purged_ns == 0 => None,
            Stage::Ended => return bad("an ended session's row has a purge time".to_owned()),
            Stage::Purging | Stage::Purged => Some(timestamp(purged_ns)?),
        };
        let last_seq = u64::from_be_bytes(field(row, 54));
        let frames = u64::from_be_bytes(field(row, 62));
        if last_seq == 0 || frames != last_seq {
            return bad(format!(
                "the session row says last seq {last_seq} and {frames} frames"
            ));
        }
        Ok(Self {
            stage,
            session,
            ended_at,
            purged_at,
            last_seq,
        })
    }
}

/// `N` bytes of `row` from `at` (always within a [`ROW_LEN`] row).
fn field<const N: usize>(row: &[u8; ROW_LEN], at: usize) -> [u8; N] {
    let mut out = [0u8; N];
    if let Some(bytes) = row.get(at..at + N) {
        out.copy_from_slice(bytes);
    }
    out
}

/// A timestamp as stored: nanoseconds since the Unix epoch.
pub(crate) fn nanos(t: Timestamp) -> i128 {
    t.as_nanosecond()
}

fn timestamp(ns: i128) -> Result<Timestamp, Corruption> {
    Timestamp::from_nanosecond(ns)
        .map_err(|e| Corruption::Inconsistent(format!("the session row has a bad time: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> SessionRow {
        let ended = Timestamp::from_second(1_800_000_000).unwrap_or(Timestamp::UNIX_EPOCH);
        SessionRow::ended(0xabc, ended, 42)
    }

    #[test]
    fn rows_round_trip_through_every_stage() {
        let ended = sample();
        let purging = ended.purging(Timestamp::UNIX_EPOCH);
        for row in [ended, purging, purging.purged()] {
            assert_eq!(SessionRow::parse(0xabc, &row.encode()), Ok(row));
        }
        assert_eq!(
            purging.state(),
            SessionState::Purged(Tombstone {
                ended_at: ended.ended_at,
                purged_at: Timestamp::UNIX_EPOCH,
                last_seq: 42,
                frames: 42,
            })
        );
    }

    #[test]
    fn every_single_bit_flip_is_caught() {
        let bytes = sample().purging(Timestamp::UNIX_EPOCH).encode();
        for i in 0..ROW_LEN * 8 {
            let mut bad = bytes;
            bad[i / 8] ^= 1 << (i % 8);
            assert!(
                SessionRow::parse(0xabc, &bad).is_err(),
                "flip of bit {i} undetected"
            );
        }
    }

    #[test]
    fn short_long_moved_and_future_rows_are_refused() {
        let bytes = sample().encode();
        for len in 0..ROW_LEN {
            assert_eq!(
                SessionRow::parse(0xabc, &bytes[..len]),
                Err(Corruption::Truncated { len })
            );
        }
        let mut long = bytes.to_vec();
        long.push(0);
        assert!(matches!(
            SessionRow::parse(0xabc, &long),
            Err(Corruption::Inconsistent(_))
        ));
        assert!(matches!(
            SessionRow::parse(0xabd, &bytes),
            Err(Corruption::Misplaced { .. })
        ));
        // A later row version, correctly sealed, is still refused.
        let mut future = bytes;
        future[4] = 2;
        let crc = crc32c::crc32c(&future[4..]);
        future[..4].copy_from_slice(&crc.to_be_bytes());
        assert!(matches!(
            SessionRow::parse(0xabc, &future),
            Err(Corruption::Inconsistent(m)) if m.contains("newer build")
        ));
    }
}
