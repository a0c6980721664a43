//! A frame as the log stores it: a checksummed header naming the frame, then the
//! record's body.
//!
//! ```text
//! offset  size  field
//!      0     4  CRC-32C (Castagnoli) of every byte after it, big-endian
//!      4    16  session ID, big-endian
//!     20     8  seq, big-endian
//!     28    16  key (command or event ID), big-endian
//!     44     …  body (`body/`)
//! ```
//!
//! The header lets every read confirm that the frame it found is the one it looked for
//! (an index entry or a position pointing elsewhere is caught), and the checksum that
//! no byte of it changed.

use crate::error::Corruption;

/// The header's length.
pub(crate) const HEADER_LEN: usize = 44;

/// A parsed, checksum-verified frame borrowing its body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FrameRef<'a> {
    pub(crate) session: u128,
    pub(crate) seq: u64,
    pub(crate) key: u128,
    pub(crate) body: &'a [u8],
}

impl FrameRef<'_> {
    /// Describes the frame for a [`Corruption::Misplaced`].
    pub(crate) fn describe(&self) -> String {
        format!(
            "session {}, seq {}, key {}",
            notify_types::Uuid::from_u128(self.session),
            self.seq,
            notify_types::Uuid::from_u128(self.key)
        )
    }
}

/// Writes a frame into `out` (cleared first).
pub(crate) fn write(out: &mut Vec<u8>, session: u128, seq: u64, key: u128, body: &[u8]) {
    out.clear();
    out.reserve(HEADER_LEN + body.len());
    out.extend_from_slice(&[0; 4]);
    out.extend_from_slice(&session.to_be_bytes());
    out.extend_from_slice(&seq.to_be_bytes());
    out.extend_from_slice(&key.to_be_bytes());
    out.extend_from_slice(body);
    let crc = crc32c::crc32c(&out[4..]);
    out[..4].copy_from_slice(&crc.to_be_bytes());
}

/// Parses a stored frame, verifying its checksum first.
pub(crate) fn parse(bytes: &[u8]) -> Result<FrameRef<'_>, Corruption> {
    let Some((crc, rest)) = bytes.split_first_chunk::<4>() else {
        return Err(Corruption::Truncated { len: bytes.len() });
    };
    let Some((session, rest)) = rest.split_first_chunk::<16>() else {
        return Err(Corruption::Truncated { len: bytes.len() });
    };
    let Some((seq, rest)) = rest.split_first_chunk::<8>() else {
        return Err(Corruption::Truncated { len: bytes.len() });
    };
    let Some((key, body)) = rest.split_first_chunk::<16>() else {
        return Err(Corruption::Truncated { len: bytes.len() });
    };
    let stored = u32::from_be_bytes(*crc);
    let computed = crc32c::crc32c(bytes.get(4..).unwrap_or_default());
    if stored != computed {
        return Err(Corruption::Checksum { stored, computed });
    }
    Ok(FrameRef {
        session: u128::from_be_bytes(*session),
        seq: u64::from_be_bytes(*seq),
        key: u128::from_be_bytes(*key),
        body,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_detects_every_single_bit_flip() {
        let mut buf = Vec::new();
        write(&mut buf, 7, 42, 9, b"body bytes");
        let f = parse(&buf).map_err(|e| e.to_string());
        assert_eq!(
            f,
            Ok(FrameRef {
                session: 7,
                seq: 42,
                key: 9,
                body: b"body bytes"
            })
        );
        for i in 0..buf.len() * 8 {
            let mut bad = buf.clone();
            bad[i / 8] ^= 1 << (i % 8);
            assert!(
                matches!(parse(&bad), Err(Corruption::Checksum { .. })),
                "flip of bit {i} undetected"
            );
        }
    }

    #[test]
    fn short_frames_are_truncated_not_panics() {
        let mut buf = Vec::new();
        write(&mut buf, 1, 1, 1, b"");
        for len in 0..HEADER_LEN {
            assert_eq!(parse(&buf[..len]), Err(Corruption::Truncated { len }));
        }
        assert!(parse(&buf).is_ok());
    }
}
