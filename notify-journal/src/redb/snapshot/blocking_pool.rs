//! The hop of a redb handle's blocking reads onto tokio's blocking pool, and
//! [`JournalRead`](crate::JournalRead) implemented by it over a handle's `*_blocking`
//! methods (for both [`RedbJournal`](crate::RedbJournal) and
//! [`RedbReader`](crate::RedbReader)).

use crate::backend::BoxFuture;
use crate::error::{JournalError, StorageError};

/// Runs the blocking read `f` on a clone of `handle` on tokio's blocking pool when
/// called inside a runtime, else inline.
pub(crate) fn on_blocking_pool<H, T, F>(
    handle: &H,
    f: F,
) -> BoxFuture<'static, Result<T, JournalError>>
where
    H: Clone + Send + 'static,
    T: Send + 'static,
    F: FnOnce(&H) -> Result<T, JournalError> + Send + 'static,
{
    let this = handle.clone();
    match tokio::runtime::Handle::try_current() {
        Ok(runtime) => Box::pin(async move {
            runtime
                .spawn_blocking(move || f(&this))
                .await
                .map_err(|e| JournalError::Storage(StorageError::new("read task failed", e)))?
        }),
        Err(_) => {
            let result = f(&this);
            Box::pin(async move { result })
        }
    }
}

/// [`JournalRead`](crate::JournalRead) for a redb handle, each read its `*_blocking`
/// method run by its `read` (on tokio's blocking pool).
macro_rules! journal_read_by_blocking {
    ($handle:ty) => {
        impl $crate::backend::JournalRead for $handle {
            fn lookup(
                &self,
                session: ::notify_types::SessionId,
                key: ::notify_types::Uuid,
            ) -> $crate::backend::BoxFuture<'_, Result<Option<u64>, $crate::error::JournalError>>
            {
                self.read(move |h| h.lookup_blocking(session, key))
            }

            fn replay(
                &self,
                session: ::notify_types::SessionId,
                from_seq: u64,
                limit: usize,
            ) -> $crate::backend::BoxFuture<
                '_,
                Result<Vec<$crate::backend::SeqRecord>, $crate::error::JournalError>,
            > {
                self.read(move |h| h.replay_blocking(session, from_seq, limit))
            }

            fn last_seq(
                &self,
                session: ::notify_types::SessionId,
            ) -> $crate::backend::BoxFuture<'_, Result<u64, $crate::error::JournalError>> {
                self.read(move |h| h.last_seq_blocking(session))
            }

            fn sessions(
                &self,
            ) -> $crate::backend::BoxFuture<
                '_,
                Result<Vec<::notify_types::SessionId>, $crate::error::JournalError>,
            > {
                self.read(|h| h.sessions_blocking())
            }

            fn sessions_after(
                &self,
                after: Option<::notify_types::SessionId>,
                limit: usize,
            ) -> $crate::backend::BoxFuture<
                '_,
                Result<Vec<::notify_types::SessionId>, $crate::error::JournalError>,
            > {
                self.read(move |h| h.sessions_after_blocking(after, limit))
            }

            fn session_state(
                &self,
                session: ::notify_types::SessionId,
            ) -> $crate::backend::BoxFuture<
                '_,
                Result<$crate::retention::SessionState, $crate::error::JournalError>,
            > {
                self.read(move |h| h.session_state_blocking(session))
            }
        }
    };
}
pub(crate) use journal_read_by_blocking;
