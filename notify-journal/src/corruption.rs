//! What is wrong with damaged data: the cause of every `Corrupt` error, and what the
//! deep verify reports. A module of its own, so that the errors and the verify report
//! both name it without naming each other.

use notify_types::DecodeError;

/// What is wrong with a damaged frame, index entry or log (the cause of
/// [`JournalError::Corrupt`](crate::JournalError::Corrupt) and
/// [`AppendError::Corrupt`](crate::AppendError::Corrupt)).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Corruption {
    /// The frame's stored checksum does not match its bytes.
    #[error("checksum mismatch: stored {stored:#010x}, computed {computed:#010x}")]
    Checksum {
        /// The checksum stored with the frame.
        stored: u32,
        /// The checksum of the bytes read.
        computed: u32,
    },
    /// The frame is shorter than its header or its stated length.
    #[error("frame is truncated ({len} bytes)")]
    Truncated {
        /// The bytes there are.
        len: usize,
    },
    /// The frame's bytes pass their checksum but do not decode to a valid record.
    #[error("frame does not decode")]
    Undecodable(#[source] DecodeError),
    /// The frame's body does not decode to a valid record (the redb journal's compact
    /// body encoding).
    #[error("frame body does not decode: {0}")]
    Body(String),
    /// A frame the log must hold is absent: a gap in the sequence, a log that ends
    /// before the session's head, or an index entry whose frame is gone.
    #[error("frame is missing")]
    Missing,
    /// The frame found where this one must be carries another identity (session, seq
    /// or key): an index entry or position that points at the wrong frame.
    #[error("frame found is another one: {found}")]
    Misplaced {
        /// What the frame found says it is.
        found: String,
    },
    /// A bookkeeping entry (index, position, head) disagrees with the frames.
    #[error("{0}")]
    Inconsistent(String),
}
