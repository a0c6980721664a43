//! The body's layout: its record tags and lifecycle flags, as the module documentation
//! of `body` draws them.

pub(super) const TAG_COMMAND: u8 = 1;
pub(super) const TAG_LIFECYCLE: u8 = 2;
pub(super) const TAG_CONSUMED: u8 = 3;
pub(super) const TAG_ABANDONED: u8 = 4;
pub(super) const TAG_ENDED: u8 = 5;

pub(super) const HAS_STARTED: u8 = 1 << 0;
pub(super) const HAS_FINISHED: u8 = 1 << 1;
pub(super) const HAS_EXIT_CODE: u8 = 1 << 2;
pub(super) const HAS_REASON: u8 = 1 << 3;
pub(super) const HAS_DIAGNOSTIC: u8 = 1 << 4;
pub(super) const ALL_FLAGS: u8 =
    HAS_STARTED | HAS_FINISHED | HAS_EXIT_CODE | HAS_REASON | HAS_DIAGNOSTIC;

pub(super) const NANOS_PER_SECOND: i128 = 1_000_000_000;
