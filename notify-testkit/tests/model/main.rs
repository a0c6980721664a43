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
//! * every new event is broadcast once; duplicates are not broadcast again.
//!
//! Case count: `NOTIFY_MODEL_CASES`, else `PROPTEST_CASES`, else 64. Durability: the
//! journal's default (`Immediate`) unless `NOTIFY_MODEL_DURABILITY=nondurable` (see
//! `journal_options`); `cargo xtask soak` does not set it. A "crash" drops the
//! session, consumers, received notifications and the journal handle without any
//! shutdown, then reopens the same file, so it tests what survives a restart; what
//! survives a torn write is `notify-journal`'s crash tests' job.
//!
//! The files follow the test's concerns: `ops.rs` (the operations and their
//! strategy), `reference.rs` (the reference model), `real.rs` (the system under test
//! and the helpers that drive it), `apply.rs` (one operation, applied to both),
//! `check.rs` (the invariants) and `regressions.rs` (shrunk failures, which become
//! named regression tests there, each with a `// postmortem:` comment).

// Tests unwrap freely, helpers included: a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod apply;
mod check;
mod ops;
mod real;
mod reference;
mod regressions;

use std::collections::HashSet;
use std::sync::Arc;

use notify_journal::{Durability, JournalOptions, RedbJournal};
use notify_testkit::fixture::{self, FixtureBuilder};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

use crate::apply::apply;
use crate::check::{check, finish};
use crate::ops::{Op, op};
use crate::real::Real;
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
fn journal_options() -> JournalOptions {
    let options = JournalOptions::default();
    match std::env::var("NOTIFY_MODEL_DURABILITY").as_deref() {
        Ok("nondurable") => options.durability(Durability::NonDurableForTestsOnly),
        _ => options,
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
        let path = dir.path().join("model.redb");
        let options = journal_options();
        let journal = Arc::new(RedbJournal::open(&path, options.clone()).unwrap());
        let fx = FixtureBuilder::new(LOOPS)
            .capacity(CAPACITY)
            .journal(journal.clone())
            .build()
            .unwrap();
        let foreign = fixture::foreign_loop(&fx.session).unwrap();
        let mut model = Model::new(fx.session_id(), fx.loop_ids.clone());
        let mut real = Real {
            path,
            options,
            journal: Some(journal),
            events: fx.session.subscribe(),
            fx,
            held: (0..LOOPS).map(|_| None).collect(),
            foreign,
            orphans: Vec::new(),
            acked: HashSet::new(),
            neighbour: None,
        };
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
