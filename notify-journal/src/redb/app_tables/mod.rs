//! The application's own tables in the journal's file: the restricted write handle a
//! transactional append's closure is given ([`AppTables`], [`AppTable`]), the budget
//! it runs under, and the errors of both (see `docs/design.md`, "Application tables").
//!
//! The handle is the only way the closure reaches the write transaction: it opens
//! tables whose names start with [`APP_TABLE_PREFIX`] and nothing else, so the journal's
//! own tables (`notify_*`) cannot be opened, renamed, deleted or written through it.
//!
//! `write.rs` is the write handle and its budget, `read.rs` reading the tables back;
//! here are the name rule and the error both answer with.

mod read;
mod write;

pub(crate) use self::read::read_tables;
pub use self::read::{AppReadTable, AppTablesRead};
pub use self::write::{
    APP_WRITE_MAX_BYTES, APP_WRITE_MAX_TIME, AppTable, AppTables, AppTxnError, AppWriteResult,
};
pub(crate) use self::write::{AppGroupWrite, Budget};
use crate::error::StorageError;

/// The prefix every application table's name carries (`app/conversation`, ...). The
/// journal's own tables never do.
pub const APP_TABLE_PREFIX: &str = "app/";

/// Why an application table could not be opened, read or written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AppTableError {
    /// The name does not start with [`APP_TABLE_PREFIX`] (or is nothing more than it).
    #[error(
        "application table name {name:?} must start with {APP_TABLE_PREFIX:?} and name a table"
    )]
    Name {
        /// The refused name.
        name: String,
    },
    /// The closure used up its budget ([`APP_WRITE_MAX_BYTES`] or
    /// [`APP_WRITE_MAX_TIME`]): nothing it wrote commits.
    #[error("the application's write exceeded its budget: {what}")]
    Budget {
        /// Which bound.
        what: &'static str,
    },
    /// The journal is closed.
    #[error("the journal is closed")]
    Closed,
    /// The storage engine failed (a type mismatch with the table's stored definition
    /// included).
    #[error(transparent)]
    Storage(#[from] StorageError),
}

/// Checks an application table's name.
pub(crate) fn check_name(name: &str) -> Result<(), AppTableError> {
    match name.strip_prefix(APP_TABLE_PREFIX) {
        Some(rest) if !rest.is_empty() => Ok(()),
        _ => Err(AppTableError::Name {
            name: name.to_owned(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_names_under_the_prefix_are_application_tables() {
        assert!(check_name("app/conversation").is_ok());
        for bad in [
            "",
            "app/",
            "app",
            "notify_log",
            "notify_keys",
            "App/x",
            "/app/x",
        ] {
            assert!(
                matches!(check_name(bad), Err(AppTableError::Name { .. })),
                "{bad:?}"
            );
        }
    }
}
