//! The boundary with the storage engine: every call into it that may panic (on a
//! damaged page it trusted) runs under [`contain`], which turns the panic into a typed
//! error, and [`storage`] names its errors as the journal's.

use std::panic::{AssertUnwindSafe, catch_unwind};

use crate::error::{JournalError, StorageError};

/// The storage engine's error while doing `context`, as [`JournalError::Storage`].
pub(crate) fn storage<E>(context: &'static str) -> impl Fn(E) -> JournalError
where
    E: std::error::Error + Send + Sync + 'static,
{
    move |e| JournalError::Storage(StorageError::new(context, e))
}

/// A panic caught by [`contain`]; displays as its message.
pub(crate) struct Panic(String);

impl std::fmt::Display for Panic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl Panic {
    /// The storage error for a panic of the engine while `doing` something: the file
    /// may be damaged.
    pub(crate) fn storage(&self, doing: &str) -> StorageError {
        StorageError::msg(format!(
            "the storage engine panicked while {doing} ({}); the file may be damaged: verify it",
            self.0
        ))
    }
}

/// Runs `f`; a panic inside it comes back as `Err`, with its message.
///
/// Unwind safety is asserted: every caller either discards what `f` touched or marks
/// it unusable (a poisoned handle, a failed open).
pub(crate) fn contain<T>(f: impl FnOnce() -> T) -> Result<T, Panic> {
    catch_unwind(AssertUnwindSafe(f)).map_err(|panic| Panic(panic_message(panic.as_ref())))
}

/// The message of a caught panic.
fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "no message".to_owned()
    }
}
