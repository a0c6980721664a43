//! How a check yields: every table entry it reads is one step, and the caller's pace
//! may stop it there (the scrub stops at the journal's close).

use crate::error::JournalError;

/// Called before each table entry a check reads; `false` stops the check.
pub(crate) type Pace<'a> = &'a mut dyn FnMut() -> bool;

/// One more entry read: stops the check when `pace` says so.
pub(super) fn step(pace: &mut dyn FnMut() -> bool) -> Result<(), JournalError> {
    if pace() {
        Ok(())
    } else {
        Err(JournalError::Closed)
    }
}
