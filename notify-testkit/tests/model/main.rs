//! The model-based test of the whole system (sled style): a generated `Vec<Op>` runs
//! against a session over a real redb journal file and against a plain reference
//! model; after every step the dispositions must agree and the journal must satisfy
//! the invariants:
//!
//! * the journal holds exactly the model's frames, in order: at most one frame per ID,
//!   a collision never appended, per-session sequences gap-free from 1;
//! * a collision is never dispatched, nothing acknowledged is ever received again
//!   (across crashes too), and every receive returns the model's next notification;
//! * after a crash, restore's pending set is exactly the model's accepted and
//!   unacknowledged notifications (plus journaled, undelivered ones), in journal order,
//!   and its orphans are the model's unfinished processes;
//! * every new event is broadcast once; duplicates are not broadcast again;
//! * ending the session is refused while anything is pending (nothing written) unless
//!   it abandons them, each on the record before the end marker; from then on nothing
//!   is appended or delivered: a retry of a notification or event journaled before
//!   the end is a duplicate, a reuse of its ID a collision, and every new notify,
//!   publish and acknowledgement is refused as `SessionEnded` (every one, once the
//!   session is purged), and restore reports the session ended with nothing pending
//!   and no orphans;
//! * a purge removes exactly the ended sessions, in bounded steps (a purge cut short
//!   is finished by the next), and leaves each a tombstone: its reads answer `Purged`,
//!   its last seq stays, and a restarted process's refusals say "purged"; live
//!   sessions sharing the journal (a neighbour, appending while a purge runs) are
//!   untouched; dropped tombstones leave their sessions unknown;
//! * the journal lists exactly the sessions with a frame or a tombstone.
//!
//! After an end, a case carries on in a fresh session in the same journal (`Renew`);
//! the ended ones stay checked after every step.
//!
//! Case count: `NOTIFY_MODEL_CASES`, else `PROPTEST_CASES`, else 64. Durability: the
//! journal's default (`Immediate`) unless `NOTIFY_MODEL_DURABILITY=nondurable` (see
//! `journal_options`); `cargo xtask soak` does not set it. `NOTIFY_MODEL_JOURNAL=memory`
//! runs the same cases on the testkit's in-memory journal instead (see `store`). A
//! "crash" drops the session, consumers, received notifications and the journal handle
//! without any shutdown, then reopens the same file, so it tests what survives a
//! restart; what survives a torn write is `notify-journal`'s crash tests' job.
//!
//! The files follow the test's concerns: `ops.rs` (the operations and their
//! strategy), `reference.rs` (the reference model), `real.rs` (the system under test
//! and the helpers that drive it), `apply.rs` (one operation, applied to both),
//! `retention.rs` (ending, purging, starting over), `check.rs` (the invariants) and
//! `regressions.rs` (shrunk failures, which become named regression tests there, each
//! with a `// postmortem:` comment).

// Tests unwrap freely, helpers included: a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod apply;
mod check;
mod ops;
mod real;
mod reference;
mod regressions;
mod retention;
mod txack;

use notify_journal::{RedbDurability, RedbOptions};
use notify_testkit::MemoryJournal;
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

use crate::apply::apply;
use crate::check::{check, finish};
use crate::ops::{Op, op};
use crate::real::{Real, Store};
use crate::reference::Model;

/// Native loops per session.
pub(crate) const LOOPS: usize = 2;
/// Each loop's live capacity: small, so `Full` happens.
pub(crate) const CAPACITY: usize = 3;
/// Most operations per case.
const MAX_OPS: usize = 40;

fn cases() -> u32 {
    ["NOTIFY_MODEL_CASES", "PROPTEST_CASES"]
        .iter()
        .find_map(|k| std::env::var(k).ok()?.parse().ok())
        .unwrap_or(64)
}

/// The journal's default durability, unless `NOTIFY_MODEL_DURABILITY=nondurable` (for
/// quick local runs of many cases; the time goes mostly to creating and reopening
/// files, so it saves less than one might think). A crash here is
/// a drop, and dropping the last handle closes the journal cleanly, which makes even
/// non-durable commits durable, so the model's expectations are the same.
fn journal_options() -> RedbOptions {
    let options = RedbOptions::default();
    match std::env::var("NOTIFY_MODEL_DURABILITY").as_deref() {
        Ok("nondurable") => options.durability(RedbDurability::NonDurableForTestsOnly),
        _ => options,
    }
}

/// The journal the case runs on: a redb file in `dir`, unless
/// `NOTIFY_MODEL_JOURNAL=memory` (the testkit's in-memory journal, which claims the
/// redb journal's semantics: the same model checks that claim).
fn store(dir: &std::path::Path) -> Store {
    match std::env::var("NOTIFY_MODEL_JOURNAL").as_deref() {
        Ok("memory") => Store::Memory(MemoryJournal::new()),
        _ => Store::Redb {
            path: dir.join("model.redb"),
            options: journal_options(),
        },
    }
}

fn proptest_config() -> ProptestConfig {
    ProptestConfig {
        cases: cases(),
        // Shrunk failures are kept as named regression tests (regressions.rs), not in
        // a file.
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// Runs `ops` against the real system and the model, comparing after every step.
fn run(ops: &[Op]) -> Result<(), TestCaseError> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    rt.block_on(async {
        let mut real = Real::new(store(dir.path()));
        let mut model = Model::new(real.fx.session_id(), real.fx.loop_ids.clone());
        for (step, op) in ops.iter().enumerate() {
            apply(op, &mut real, &mut model)
                .await
                .map_err(|e| TestCaseError::fail(format!("step {step} {op:?}: {e}")))?;
            check(&mut real, &mut model)
                .await
                .map_err(|e| TestCaseError::fail(format!("after step {step} {op:?}: {e}")))?;
        }
        finish(&mut real, &mut model)
            .await
            .map_err(|e| TestCaseError::fail(format!("final drain: {e}")))
    })
}

proptest! {
    #![proptest_config(proptest_config())]

    #[test]
    fn session_matches_model(ops in proptest::collection::vec(op(), 0..MAX_OPS)) {
        run(&ops)?;
    }
}
