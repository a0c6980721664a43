//! The strategies yield what they promise: valid values validate and round-trip,
//! broken ones fail with exactly the yielded field, sequences are real lifecycles.
//! (That generated notifications and lifecycle metadata validate and round-trip is
//! checked, with more, in `types_proptest.rs`; only the records' round trip is here.)

use std::collections::BTreeSet;

use notify_testkit::strategy;
use notify_types::{
    JournalRecord, LoopId, ProcessLifecycleKind as K, ProcessLifecycleState as S, SessionId,
    ValidationField as F, is_completion_pair,
};
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::TestRunner;

proptest! {
    #[test]
    fn pinned_notifications_keep_their_owner(
        (s, l, n) in (strategy::session_id(), strategy::loop_id())
            .prop_flat_map(|(s, l)| (Just(s), Just(l), strategy::completion_notification_in(s, l)))
    ) {
        prop_assert_eq!((n.session_id, n.loop_id), (s, l));
        prop_assert_eq!(n.validate(), Ok(()));
    }

    #[test]
    fn broken_notifications_name_the_broken_field(
        (n, field) in strategy::broken_completion_notification()
    ) {
        prop_assert_eq!(n.validate().map_err(|e| e.field()), Err(field));
    }

    #[test]
    fn broken_metadata_names_the_broken_field(
        (m, field) in strategy::broken_lifecycle_metadata()
    ) {
        prop_assert_eq!(m.validate().map_err(|e| e.field()), Err(field));
    }

    #[test]
    fn records_round_trip(r in strategy::journal_record()) {
        prop_assert_eq!(JournalRecord::decode(&r.encode()), Ok(r));
    }

    #[test]
    fn pinned_records_belong_to_their_session(
        (s, r) in strategy::session_id().prop_flat_map(|s| (Just(s), strategy::journal_record_in(s)))
    ) {
        prop_assert_eq!(r.session_id(), s);
        prop_assert_eq!(JournalRecord::decode(&r.encode()), Ok(r));
    }

    #[test]
    fn lifecycle_sequences_are_real_lifecycles(seq in strategy::lifecycle_sequence()) {
        check_sequence(&seq, true)?;
    }

    #[test]
    fn unfinished_sequences_have_no_terminal_event(
        seq in strategy::unfinished_lifecycle_sequence_in(SessionId::new(), LoopId::new())
    ) {
        check_sequence(&seq, false)?;
    }
}

fn check_sequence(
    seq: &[notify_types::ProcessLifecycleMetadata],
    finished: bool,
) -> Result<(), TestCaseError> {
    let kinds: Vec<K> = seq.iter().map(|m| m.kind).collect();
    let (body, terminal) = if finished {
        let (last, body) = kinds
            .split_last()
            .ok_or_else(|| TestCaseError::fail("empty"))?;
        prop_assert!(matches!(last, K::Completed | K::Lost), "{kinds:?}");
        (body, true)
    } else {
        (kinds.as_slice(), false)
    };
    prop_assert!(
        matches!(
            body,
            [K::Started]
                | [K::Started, K::Backgrounded]
                | [K::Started, K::StopRequested]
                | [K::Started, K::Backgrounded, K::StopRequested]
        ),
        "{kinds:?}"
    );
    let first = &seq[0];
    let mut ids = BTreeSet::new();
    let mut last_time = first.process_created_at;
    for m in seq {
        prop_assert_eq!(m.validate(), Ok(()), "{:?}", m);
        prop_assert!(ids.insert(m.event_id), "repeated event ID");
        prop_assert_eq!(m.session_id, first.session_id);
        prop_assert_eq!(m.loop_id, first.loop_id);
        prop_assert_eq!(&m.process_handle, &first.process_handle);
        prop_assert_eq!(m.origin_execution_id, first.origin_execution_id);
        prop_assert_eq!(m.process_created_at, first.process_created_at);
        prop_assert_eq!(m.process_started_at, first.process_started_at);
        for t in [m.process_started_at, m.process_finished_at]
            .into_iter()
            .flatten()
        {
            prop_assert!(t >= last_time, "timestamps go backwards");
            last_time = t;
        }
    }
    if terminal {
        let stop = seq.iter().find(|m| m.kind == K::StopRequested);
        let end = &seq[seq.len() - 1];
        if let (Some(stop), K::Completed) = (stop, end.kind) {
            // A stopped process ends as asked, or exited on its own first.
            prop_assert!(
                end.state == S::Exited
                    || Some(end.reason.map(|r| r.code())) == Some(stop.reason.map(|r| r.code())),
                "{stop:?} then {end:?}"
            );
        }
    }
    Ok(())
}

/// Samples `strategy` deterministically and collects `f` of each value.
fn sample_set<T, K: Ord>(
    strategy: impl Strategy<Value = T>,
    n: usize,
    f: impl Fn(&T) -> K,
) -> BTreeSet<K> {
    let mut runner = TestRunner::deterministic();
    (0..n)
        .filter_map(|_| strategy.new_tree(&mut runner).ok())
        .map(|tree| f(&tree.current()))
        .collect()
}

#[test]
fn broken_metadata_reaches_every_field_a_value_can_break() {
    let fields = sample_set(strategy::broken_lifecycle_metadata(), 3000, |(_, f)| {
        f.as_str()
    });
    let want: BTreeSet<&str> = [
        F::EventId,
        F::SessionId,
        F::LoopId,
        F::ProcessHandle,
        F::OriginExecutionId,
        F::ProcessCreatedAt,
        F::ProcessStartedAt,
        F::ProcessFinishedAt,
        F::Diagnostic,
        F::StateReason,
        F::LifecycleFields,
    ]
    .iter()
    .map(|f| f.as_str())
    .collect();
    assert_eq!(fields, want);
}

#[test]
fn broken_notifications_reach_every_field() {
    let fields = sample_set(strategy::broken_completion_notification(), 500, |(_, f)| {
        f.as_str()
    });
    let want: BTreeSet<&str> = [
        F::CommandId,
        F::SessionId,
        F::LoopId,
        F::ProcessHandle,
        F::StateReason,
    ]
    .iter()
    .map(|f| f.as_str())
    .collect();
    assert_eq!(fields, want);
}

#[test]
fn valid_metadata_reaches_every_kind_and_completion_state() {
    let kinds = sample_set(strategy::lifecycle_metadata(), 2000, |m| m.kind);
    assert_eq!(kinds.len(), K::ALL.len());
    // Every completion pair but LostOnRestore's.
    let completed = sample_set(strategy::lifecycle_metadata_of(K::Completed), 2000, |m| {
        (m.state, m.reason)
    });
    assert_eq!(completed.len(), 10, "{completed:?}");
}

#[test]
fn the_spelled_out_completion_pairs_agree_with_notify_types() {
    for &s in S::ALL {
        for &r in notify_types::ProcessTerminalReason::ALL {
            assert_eq!(
                strategy::COMPLETION_PAIRS.contains(&(s, r)),
                is_completion_pair(s, r),
                "{s} / {r}"
            );
        }
    }
}
