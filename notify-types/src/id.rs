//! Typed identifiers over [`uuid::Uuid`].

use std::fmt;
use std::str::FromStr;

use uuid::Uuid;

/// The error returned when a string is not a canonical identifier.
///
/// The canonical form is the lowercase, hyphenated UUID (`8-4-4-4-12` hex digits).
/// Other spellings that `uuid` would accept (braces, URN, uppercase, no hyphens) are
/// refused so that decoding and re-encoding always yields the same bytes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not a canonical lowercase hyphenated UUID")]
pub struct ParseIdError(());

/// Parses the canonical lowercase hyphenated spelling, refusing every other one.
pub(crate) fn parse_canonical(s: &str) -> Result<Uuid, ParseIdError> {
    let ok_shape = s.len() == 36
        && s.bytes().enumerate().all(|(i, b)| match i {
            8 | 13 | 18 | 23 => b == b'-',
            _ => b.is_ascii_digit() || (b'a'..=b'f').contains(&b),
        });
    if !ok_shape {
        return Err(ParseIdError(()));
    }
    Uuid::parse_str(s).map_err(|_| ParseIdError(()))
}

macro_rules! typed_id {
    ($(#[$meta:meta])* $name:ident) => {
        $(#[$meta])*
        #[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
        #[cfg_attr(
            feature = "serde",
            derive(serde::Serialize, serde::Deserialize),
            serde(transparent)
        )]
        pub struct $name(Uuid);

        impl $name {
            /// The nil identifier, which means "absent".
            pub const NIL: Self = Self(Uuid::nil());

            /// A fresh, time-ordered (UUIDv7) identifier.
            #[must_use]
            pub fn new() -> Self {
                Self(Uuid::now_v7())
            }

            /// Wraps an existing UUID. The nil UUID yields [`Self::NIL`].
            #[must_use]
            pub const fn from_uuid(uuid: Uuid) -> Self {
                Self(uuid)
            }

            /// The underlying UUID.
            #[must_use]
            pub const fn as_uuid(&self) -> &Uuid {
                &self.0
            }

            /// Whether this is the nil ("absent") identifier.
            #[must_use]
            pub const fn is_nil(&self) -> bool {
                self.0.is_nil()
            }
        }

        impl From<Uuid> for $name {
            fn from(uuid: Uuid) -> Self {
                Self(uuid)
            }
        }

        impl From<$name> for Uuid {
            fn from(id: $name) -> Uuid {
                id.0
            }
        }

        impl fmt::Display for $name {
            /// The canonical lowercase hyphenated form.
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Display::fmt(&self.0.hyphenated(), f)
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!(stringify!($name), "({})"), self.0.hyphenated())
            }
        }

        impl FromStr for $name {
            type Err = ParseIdError;

            /// Parses the canonical lowercase hyphenated form only.
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                parse_canonical(s).map(Self)
            }
        }
    };
}

typed_id! {
    /// The stable ID of one command (here: one completion notification), allocated by
    /// the publisher before it publishes and reused verbatim on every retry.
    CommandId
}
typed_id! {
    /// The ID of an agent session.
    SessionId
}
typed_id! {
    /// The ID of one agent loop inside a session.
    LoopId
}
typed_id! {
    /// The ID of one journaled event.
    EventId
}
typed_id! {
    /// The ID of the execution (tool call, step) that started a process.
    ExecutionId
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_form_only() {
        let id = "0191e2a0-7c4b-7d3e-9a10-3b5f6c7d8e01";
        let parsed: CommandId = id.parse().unwrap_or(CommandId::NIL);
        assert_eq!(parsed.to_string(), id);
        for bad in [
            "0191E2A0-7C4B-7D3E-9A10-3B5F6C7D8E01",
            "0191e2a07c4b7d3e9a103b5f6c7d8e01",
            "{0191e2a0-7c4b-7d3e-9a10-3b5f6c7d8e01}",
            "urn:uuid:0191e2a0-7c4b-7d3e-9a10-3b5f6c7d8e01",
            "0191e2a0-7c4b-7d3e-9a10-3b5f6c7d8e0",
            "",
        ] {
            assert!(bad.parse::<CommandId>().is_err(), "{bad}");
        }
    }

    #[test]
    fn fresh_ids_are_v7_and_not_nil() {
        let id = SessionId::new();
        assert!(!id.is_nil());
        assert_eq!(id.as_uuid().get_version_num(), 7);
        assert!(SessionId::NIL.is_nil());
        assert_eq!(SessionId::default(), SessionId::NIL);
    }
}
