//! The backend conformance suite: the [`JournalBackend`] contract, written once and
//! run against every backend (in-memory, redb, PostgreSQL, and any other).
//!
//! Each check is a `pub async fn` returning `Result<(), ConformanceError>`; the error
//! names the check and what was wrong. Checks never panic on a backend's answer.
//! [`run_all`] runs every check in turn and stops at the first failure.
//!
//! Every check uses fresh random [`SessionId`](notify_types::SessionId)s and never assumes the backend is empty:
//! several checks (or several test processes) may share one backend, so listings are
//! checked with "contains", never with equality.
//!
//! Run it from a backend's integration tests, one test per check (so a failure names
//! its check) or all at once:
//!
//! ```
//! # async fn demo() -> Result<(), notify_testkit::conformance::ConformanceError> {
//! use notify_testkit::{MemoryJournal, conformance};
//!
//! let journal = MemoryJournal::new();
//! conformance::run_all(&journal, journal.max_record_bytes()).await?;
//! # Ok(()) }
//! ```
//!
//! The concurrent checks drive many appends from one task (a small join over boxed
//! futures), so a backend that batches concurrent appends (group commit) sees them in
//! flight together; the backend does not need to be `Clone` or `'static`.
//!
//! The checks, by file: `contract.rs` (sequences, duplicates, collisions, replay and
//! listing), `refusals.rs` (another session's, invalid or oversized records: nothing
//! written), `concurrency.rs` (gap-free sequences, one winner per key), `atomic.rs`
//! (`append_all` groups), `retention.rs` (end, purge, tombstones), `integrity.rs`
//! (damage named on every read) and `leases.rs` (the `JournalLeases` contract, one
//! and two holders); `support.rs` holds what they share.

mod atomic;
mod concurrency;
mod contract;
mod integrity;
mod leases;
mod refusals;
mod retention;
mod support;

use notify_journal::JournalBackend;

pub use atomic::*;
pub use concurrency::*;
pub use contract::*;
pub use integrity::{
    INTEGRITY_CHECKS, Tamper, damaged_frame_is_named, run_integrity, short_log_is_named,
};
pub use leases::*;
pub use refusals::*;
pub use retention::*;

/// A backend broke the contract: which check failed, and how.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("conformance check `{check}` failed: {message}")]
pub struct ConformanceError {
    check: &'static str,
    message: String,
}

impl ConformanceError {
    /// The name of the failing check (its function name).
    #[must_use]
    pub fn check(&self) -> &'static str {
        self.check
    }

    /// What was wrong.
    #[must_use]
    pub fn message(&self) -> &str {
        &self.message
    }
}

/// The names of every check [`run_all`] runs, in order.
pub const CHECKS: &[&str] = &[
    "sequences_start_at_one_and_are_gap_free",
    "interleaved_sessions_are_independent",
    "duplicate_returns_original_seq",
    "collision_same_kind_different_payload",
    "collision_across_record_kinds",
    "keys_are_scoped_per_session",
    "replay_from_seq_and_limit",
    "replay_all_pages_through_everything",
    "lookup_reports_journaled_keys",
    "last_seq_tracks_appends",
    "sessions_lists_sessions_with_frames",
    "sessions_page_through_every_session",
    "session_mismatch_is_refused",
    "invalid_record_is_refused",
    "too_large_is_refused",
    "concurrent_appends_are_gap_free",
    "concurrent_same_key_resolves_once",
    "concurrent_conflicting_payloads_resolve_to_one_winner",
    "group_commits_whole_in_order",
    "group_with_a_collision_writes_nothing",
    "group_to_an_ended_session_writes_nothing",
    "group_with_an_invalid_record_writes_nothing",
    "group_with_a_stale_head_writes_nothing",
    "concurrent_groups_commit_whole_or_not_at_all",
];

/// Runs every check in [`CHECKS`] order and returns the first failure.
///
/// `max_record_bytes` is the backend's documented cap on an encoded record (see
/// [`too_large_is_refused`]).
///
/// # Errors
///
/// The first failing check's [`ConformanceError`].
pub async fn run_all<B: JournalBackend + ?Sized>(
    backend: &B,
    max_record_bytes: usize,
) -> Result<(), ConformanceError> {
    sequences_start_at_one_and_are_gap_free(backend).await?;
    interleaved_sessions_are_independent(backend).await?;
    duplicate_returns_original_seq(backend).await?;
    collision_same_kind_different_payload(backend).await?;
    collision_across_record_kinds(backend).await?;
    keys_are_scoped_per_session(backend).await?;
    replay_from_seq_and_limit(backend).await?;
    replay_all_pages_through_everything(backend).await?;
    lookup_reports_journaled_keys(backend).await?;
    last_seq_tracks_appends(backend).await?;
    sessions_lists_sessions_with_frames(backend).await?;
    sessions_page_through_every_session(backend).await?;
    session_mismatch_is_refused(backend).await?;
    invalid_record_is_refused(backend).await?;
    too_large_is_refused(backend, max_record_bytes).await?;
    concurrent_appends_are_gap_free(backend).await?;
    concurrent_same_key_resolves_once(backend).await?;
    concurrent_conflicting_payloads_resolve_to_one_winner(backend).await?;
    group_commits_whole_in_order(backend).await?;
    group_with_a_collision_writes_nothing(backend).await?;
    group_to_an_ended_session_writes_nothing(backend).await?;
    group_with_an_invalid_record_writes_nothing(backend).await?;
    group_with_a_stale_head_writes_nothing(backend).await?;
    concurrent_groups_commit_whole_or_not_at_all(backend).await
}

/// Generates one `#[tokio::test]` per conformance check for a backend, so a failure
/// names its check.
///
/// `setup` is evaluated afresh in each test (inside an `async fn`, so it may
/// `.await`) and bound to the identifier in `backend = |ident| …`, whose expression
/// must give a `&impl JournalBackend`; `max_record_bytes` is the backend's cap. The
/// calling crate needs `tokio` with the `macros` and `rt-multi-thread` features.
///
/// ```
/// notify_testkit::conformance_tests! {
///     setup = notify_testkit::MemoryJournal::new(),
///     backend = |journal| &journal,
///     max_record_bytes = notify_testkit::MemoryJournal::DEFAULT_MAX_RECORD_BYTES,
/// }
/// # fn main() {}
/// ```
#[macro_export]
macro_rules! conformance_tests {
    (setup = $setup:expr, backend = |$f:ident| $backend:expr, max_record_bytes = $cap:expr $(,)?) => {
        $crate::conformance_tests!(@each ($setup) $f ($backend) [
            sequences_start_at_one_and_are_gap_free,
            interleaved_sessions_are_independent,
            duplicate_returns_original_seq,
            collision_same_kind_different_payload,
            collision_across_record_kinds,
            keys_are_scoped_per_session,
            replay_from_seq_and_limit,
            replay_all_pages_through_everything,
            lookup_reports_journaled_keys,
            last_seq_tracks_appends,
            sessions_lists_sessions_with_frames,
            sessions_page_through_every_session,
            session_mismatch_is_refused,
            invalid_record_is_refused,
            concurrent_appends_are_gap_free,
            concurrent_same_key_resolves_once,
            concurrent_conflicting_payloads_resolve_to_one_winner,
            group_commits_whole_in_order,
            group_with_a_collision_writes_nothing,
            group_to_an_ended_session_writes_nothing,
            group_with_an_invalid_record_writes_nothing,
            group_with_a_stale_head_writes_nothing,
            concurrent_groups_commit_whole_or_not_at_all,
        ]);

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn too_large_is_refused() -> Result<(), $crate::conformance::ConformanceError> {
            let $f = $setup;
            $crate::conformance::too_large_is_refused($backend, $cap).await
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn run_all_on_one_backend() -> Result<(), $crate::conformance::ConformanceError> {
            let $f = $setup;
            $crate::conformance::run_all($backend, $cap).await
        }
    };
    (@each ($setup:expr) $f:ident ($backend:expr) [$($check:ident),* $(,)?]) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $check() -> Result<(), $crate::conformance::ConformanceError> {
                let $f = $setup;
                $crate::conformance::$check($backend).await
            }
        )*
    };
}

/// Generates one `#[tokio::test]` per integrity check ([`INTEGRITY_CHECKS`]) for a
/// backend that can be damaged on purpose ([`Tamper`]).
///
/// `setup` is evaluated afresh in each test and bound to the identifier in
/// `backend = |ident| …`, whose expression must give a `&impl JournalBackend + Tamper`.
///
/// ```
/// notify_testkit::conformance_integrity_tests! {
///     setup = notify_testkit::MemoryJournal::new(),
///     backend = |journal| &journal,
/// }
/// # fn main() {}
/// ```
#[macro_export]
macro_rules! conformance_integrity_tests {
    (setup = $setup:expr, backend = |$f:ident| $backend:expr $(,)?) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn damaged_frame_is_named() -> Result<(), $crate::conformance::ConformanceError> {
            let $f = $setup;
            $crate::conformance::damaged_frame_is_named($backend).await
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn short_log_is_named() -> Result<(), $crate::conformance::ConformanceError> {
            let $f = $setup;
            $crate::conformance::short_log_is_named($backend).await
        }
    };
}

/// Generates one `#[tokio::test]` per retention check ([`RETENTION_CHECKS`]: session
/// end, purge, tombstones) and one running them all in turn.
///
/// The checks purge every session ended before a horizon, so `setup` must give each
/// test a backend of its own (a fresh journal, file or schema), evaluated afresh in
/// each test and bound to the identifier in `backend = |ident| …`, whose expression
/// must give a `&impl JournalBackend`.
///
/// ```
/// notify_testkit::conformance_retention_tests! {
///     setup = notify_testkit::MemoryJournal::new(),
///     backend = |journal| &journal,
/// }
/// # fn main() {}
/// ```
#[macro_export]
macro_rules! conformance_retention_tests {
    (setup = $setup:expr, backend = |$f:ident| $backend:expr $(,)?) => {
        $crate::conformance_tests!(@each ($setup) $f ($backend) [
            append_after_end_is_refused,
            retries_after_end_get_the_truth,
            purge_respects_the_horizon,
            purge_leaves_a_tombstone,
            append_after_purge_is_refused,
            purge_runs_in_bounded_steps,
            purge_interleaved_with_live_appends,
            tombstones_drop_after_their_horizon,
        ]);

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn run_retention_on_one_backend() -> Result<(), $crate::conformance::ConformanceError> {
            let $f = $setup;
            $crate::conformance::run_retention($backend).await
        }
    };
}

/// Generates one `#[tokio::test]` per lease check for an engine implementing
/// [`JournalLeases`](notify_journal::JournalLeases): the one-holder checks
/// ([`LEASE_CHECKS`]) on `holder`, and, when `holders` is given, the two-holder
/// checks ([`TWO_HOLDER_CHECKS`]) on that pair (two handles on one store, each its
/// own holder, with short leases).
///
/// `setup` is evaluated afresh in each test and bound to the identifier in
/// `holder = |ident| …` (and `holders = |ident| …`), whose expressions give a
/// `&impl JournalLeases` and a pair of them. The orphan check wants a backend of
/// its own per test.
///
/// ```
/// use std::time::Duration;
///
/// notify_testkit::conformance_lease_tests! {
///     setup = notify_testkit::MemoryJournal::new().with_lease_duration(Duration::from_millis(50)),
///     holder = |journal| &journal,
///     holders = |journal| (&journal, &journal.another_holder()),
/// }
/// # fn main() {}
/// ```
#[macro_export]
macro_rules! conformance_lease_tests {
    (setup = $setup:expr, holder = |$f:ident| $holder:expr $(,)?) => {
        $crate::conformance_tests!(@each ($setup) $f ($holder) [
            acquire_is_reentrant_and_names_the_holder,
            release_frees_and_epochs_grow,
            renew_extends_every_lease,
            orphans_are_the_open_sessions_nobody_leases,
        ]);

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn run_leases_on_one_backend() -> Result<(), $crate::conformance::ConformanceError> {
            let $f = $setup;
            $crate::conformance::run_leases($holder).await
        }
    };
    (setup = $setup:expr, holder = |$f:ident| $holder:expr, holders = |$g:ident| $pair:expr $(,)?) => {
        $crate::conformance_lease_tests!(setup = $setup, holder = |$f| $holder);
        $crate::conformance_lease_tests!(@pair ($setup) $g ($pair) [
            another_holders_live_lease_is_held,
            lost_lease_is_reported_and_stays_fenced,
            release_is_announced,
        ]);
    };
    (@pair ($setup:expr) $g:ident ($pair:expr) [$($check:ident),* $(,)?]) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $check() -> Result<(), $crate::conformance::ConformanceError> {
                let $g = $setup;
                let (a, b) = $pair;
                $crate::conformance::$check(a, b).await
            }
        )*
    };
}
