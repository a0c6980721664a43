//! Why bytes are not the body of a valid record.

use notify_types::DecodeError;

/// Why bytes are not the body of a valid record.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub(crate) enum BodyError {
    /// The body ends inside `field`.
    #[error("body ends inside `{field}`")]
    Truncated {
        /// The field being read.
        field: &'static str,
    },
    /// The first byte is not a known record tag.
    #[error("unknown record tag {tag}")]
    UnknownTag {
        /// The tag found.
        tag: u8,
    },
    /// A closed enum field holds an unknown code.
    #[error("unknown code {code} for `{field}`")]
    UnknownCode {
        /// The field.
        field: &'static str,
        /// The code found.
        code: u8,
    },
    /// The lifecycle flags byte sets a bit that names no field.
    #[error("unknown lifecycle flags {flags:#04x}")]
    UnknownFlags {
        /// The flags byte.
        flags: u8,
    },
    /// A length prefix is not a minimal LEB128 varint, or overflows.
    #[error("malformed length of `{field}`")]
    BadLength {
        /// The field.
        field: &'static str,
    },
    /// A string field is not UTF-8.
    #[error("`{field}` is not UTF-8")]
    InvalidUtf8 {
        /// The field.
        field: &'static str,
    },
    /// A timestamp's nanoseconds are not below one second, or the instant is outside
    /// the representable range.
    #[error("`{field}` is not a representable timestamp")]
    BadTimestamp {
        /// The field.
        field: &'static str,
    },
    /// Bytes follow the record.
    #[error("{count} bytes after the record")]
    TrailingBytes {
        /// How many.
        count: usize,
    },
    /// The body decodes to a record that fails validation (which the journal never
    /// writes).
    #[error("the body holds an invalid record")]
    Invalid(#[source] DecodeError),
}
