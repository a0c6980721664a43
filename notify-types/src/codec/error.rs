//! The decoder's error.

use crate::validation::ValidationError;

/// Why a document could not be decoded. Decoding fails closed: nothing partial is
/// returned.
///
/// The decoder reads a document once and keeps only what the wire format names, so its
/// heap use stays within a small multiple of the input (at most 4×, tested), whatever
/// the input holds. An unknown key, a repeated key, a container (array or object) where
/// a scalar belongs and a non-object where an object belongs are reported where they
/// are met: nothing after them is read, not even to see whether it is well-formed. Every
/// other error is reported once the whole document has been read, in this order: the
/// envelope's `type`, then `v`, then keys that belong to another record type, then the
/// fields in wire order, then validation.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// The input is larger than [`MAX_DECODE_BYTES`](super::MAX_DECODE_BYTES).
    #[error("document is {len} bytes, over the {max}-byte limit")]
    TooLarge {
        /// The input's length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// The input is not well-formed JSON, or an object repeats a key.
    #[error("malformed JSON: {message}")]
    Syntax {
        /// The parser's description, with line and column.
        message: String,
    },
    /// The document, or the object at `field`, is not a JSON object.
    #[error("`{field}` is not a JSON object")]
    NotAnObject {
        /// The field (`""` for the document itself).
        field: &'static str,
    },
    /// The document has no `type`.
    #[error("missing `type`")]
    MissingType,
    /// The document's `type` is not one this codec knows (or not the expected one).
    #[error("unknown `type` {found}")]
    UnknownType {
        /// The `type` found, as compact JSON (cut after 128 bytes, see
        /// [`MAX_FOUND_BYTES`](super::MAX_FOUND_BYTES)).
        found: String,
    },
    /// The document's `v` is missing or not [`WIRE_VERSION`](super::WIRE_VERSION).
    #[error("unsupported version `v`: {found}")]
    UnsupportedVersion {
        /// The `v` found, as compact JSON (or `missing`; cut like `UnknownType`'s).
        found: String,
    },
    /// A key the wire format does not define (dotted path, e.g. `notification.pid`).
    #[error("unknown field `{field}`")]
    UnknownField {
        /// The offending key's path.
        field: String,
    },
    /// A required field is absent.
    #[error("missing field `{field}`")]
    MissingField {
        /// The field.
        field: &'static str,
    },
    /// A field holds a value of the wrong JSON type or shape (e.g. a non-canonical UUID).
    #[error("invalid value for `{field}`: expected {expected}")]
    InvalidValue {
        /// The field.
        field: &'static str,
        /// What the field must hold.
        expected: &'static str,
    },
    /// A timestamp field holds a well-formed RFC 3339 instant that is later than
    /// [`MAX_TIMESTAMP`](super::MAX_TIMESTAMP) (`9999-12-30T22:00:00.999999999Z`), the
    /// last instant a [`Timestamp`](jiff::Timestamp) can hold. RFC 3339 itself runs to
    /// `9999-12-31T23:59:59.999999999Z`; the last 26 hours of year 9999 are refused by
    /// name rather than misread.
    #[error(
        "`{field}` is later than 9999-12-30T22:00:00.999999999Z, the last representable instant"
    )]
    TimestampOutOfRange {
        /// The field.
        field: &'static str,
    },
    /// A closed enum field holds an unknown code.
    #[error("unknown code {found} for `{field}`")]
    UnknownCode {
        /// The field.
        field: &'static str,
        /// The value found, as compact JSON (cut like `UnknownType`'s).
        found: String,
    },
    /// The envelope's `command_id` differs from the notification's.
    #[error("`command_id` differs from `notification.command_id`")]
    CommandIdMismatch,
    /// A derived event ID does not match: a `NotificationConsumed` or
    /// `NotificationAbandoned` event's `event_id` is not the one derived from `cause`,
    /// or a `SessionEnded` marker's is not the one derived from `session_id`.
    #[error("`event_id` is not the ID derived from the event's `cause` or session")]
    EventIdMismatch,
    /// The decoded value failed validation.
    #[error(transparent)]
    Invalid(#[from] ValidationError),
}

impl DecodeError {
    /// The wire field the error names, if it names one.
    #[must_use]
    pub fn field(&self) -> Option<&str> {
        match self {
            Self::NotAnObject { field } if !field.is_empty() => Some(field),
            Self::MissingType | Self::UnknownType { .. } => Some("type"),
            Self::UnsupportedVersion { .. } => Some("v"),
            Self::UnknownField { field } => Some(field),
            Self::MissingField { field }
            | Self::InvalidValue { field, .. }
            | Self::UnknownCode { field, .. }
            | Self::TimestampOutOfRange { field } => Some(field),
            Self::CommandIdMismatch => Some("command_id"),
            Self::EventIdMismatch => Some("event_id"),
            Self::Invalid(e) => Some(e.field().as_str()),
            Self::TooLarge { .. } | Self::Syntax { .. } | Self::NotAnObject { .. } => None,
        }
    }
}
