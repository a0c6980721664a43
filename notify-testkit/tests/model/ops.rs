//! The operations a case is made of, and their strategy.

use proptest::prelude::*;

use crate::LOOPS;

/// What a reuse of an ID changes in the payload.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Change {
    Handle,
    Loop,
    State,
}

/// A notification the session must refuse before journaling anything.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Refusal {
    Foreign,
    UnknownLoop,
    Invalid,
    OtherSession,
}

/// One step. `lp` picks a native loop and `pick` an earlier item, both modulo the
/// number available (a pick with nothing to pick from is a no-op).
#[derive(Debug, Clone)]
pub(crate) enum Op {
    /// Notify a fresh command ID.
    NotifyNew { lp: usize },
    /// Retry an earlier notification identically.
    Retry { pick: usize },
    /// Reuse an earlier notification's ID with another payload.
    Reuse { pick: usize, change: Change },
    /// Receive the next notification and acknowledge it.
    RecvAck { lp: usize },
    /// Receive the next notification and drop it unacknowledged.
    RecvDrop { lp: usize },
    /// Receive the next notification and keep it across later steps.
    Hold { lp: usize },
    /// Acknowledge (or drop) the held notification.
    Release { lp: usize, ack: bool },
    /// Notify fresh IDs until the loop answers anything but `Accepted`.
    Fill { lp: usize },
    /// Drop everything without shutdown, reopen the file, restore, re-register.
    Crash,
    /// Shut a loop down (it stays registered).
    Shutdown { lp: usize },
    /// Publish `ProcessStarted` for a new process.
    Start { lp: usize },
    /// Publish an earlier process's `ProcessStarted` again, identically.
    RetryStart { pick: usize },
    /// Publish `ProcessCompleted` for an earlier process (again, identically, if done).
    Complete { pick: usize },
    /// Declare an orphan of the last restore lost.
    DeclareLost { pick: usize },
    /// Notify something the session must refuse.
    Refused { kind: Refusal },
    /// Notify one fresh notification twice, concurrently.
    RaceSame { lp: usize },
    /// Receive the next notification, then acknowledge it while retrying it.
    RaceAckRetry { lp: usize },
    /// Notify a fresh notification in another session journaled in the same file.
    Neighbour,
    /// Start notifying a fresh notification, cancel after `polls` polls, then retry it.
    CancelNotify { lp: usize, polls: usize },
    /// Receive, start acknowledging, cancel after `polls` polls, then receive the same
    /// notification again and acknowledge it.
    CancelAck { lp: usize, polls: usize },
    /// End the session, abandoning what is pending or refusing to end if anything is;
    /// with `cancel`, a first attempt is dropped after that many polls.
    End {
        abandon: bool,
        cancel: Option<usize>,
    },
    /// Purge every ended session, `step` frames per transaction; with `cancel`, a first
    /// purge is dropped after that many polls; with `race`, the neighbour notifies
    /// meanwhile.
    Purge {
        step: usize,
        cancel: Option<usize>,
        race: bool,
    },
    /// Once the session has ended: retire it and start a fresh one in the same journal
    /// (a no-op while it is live).
    Renew,
    /// Receive the next notification and acknowledge it transactionally with a row of
    /// the application's; with `fail`, the application refuses and it rolls back.
    TxAck { lp: usize, fail: bool },
    /// Receive, start a transactional acknowledgement, drop it after `polls` polls,
    /// then crash.
    TxAckCrash { lp: usize, polls: usize },
    /// Drop the tombstones of retired sessions (a no-op while the current session is
    /// purged: dropping its tombstone would let it start again at seq 1, the documented
    /// trade-off the conformance suite checks).
    DropTombstones,
}

pub(crate) fn op() -> impl Strategy<Value = Op> {
    let lp = 0..LOOPS;
    let pick = 0..64usize;
    prop_oneof![
        4 => lp.clone().prop_map(|lp| Op::NotifyNew { lp }),
        3 => pick.clone().prop_map(|pick| Op::Retry { pick }),
        1 => (pick.clone(), prop_oneof![Just(Change::Handle), Just(Change::Loop), Just(Change::State)])
            .prop_map(|(pick, change)| Op::Reuse { pick, change }),
        4 => lp.clone().prop_map(|lp| Op::RecvAck { lp }),
        1 => lp.clone().prop_map(|lp| Op::RecvDrop { lp }),
        1 => lp.clone().prop_map(|lp| Op::Hold { lp }),
        1 => (lp.clone(), any::<bool>()).prop_map(|(lp, ack)| Op::Release { lp, ack }),
        1 => lp.clone().prop_map(|lp| Op::Fill { lp }),
        1 => Just(Op::Crash),
        1 => lp.clone().prop_map(|lp| Op::Shutdown { lp }),
        2 => lp.clone().prop_map(|lp| Op::Start { lp }),
        1 => pick.clone().prop_map(|pick| Op::RetryStart { pick }),
        1 => pick.clone().prop_map(|pick| Op::Complete { pick }),
        1 => pick.prop_map(|pick| Op::DeclareLost { pick }),
        1 => prop_oneof![
            Just(Refusal::Foreign),
            Just(Refusal::UnknownLoop),
            Just(Refusal::Invalid),
            Just(Refusal::OtherSession)
        ]
        .prop_map(|kind| Op::Refused { kind }),
        1 => lp.clone().prop_map(|lp| Op::RaceSame { lp }),
        1 => lp.clone().prop_map(|lp| Op::RaceAckRetry { lp }),
        1 => Just(Op::Neighbour),
        1 => (lp.clone(), 0..4usize).prop_map(|(lp, polls)| Op::CancelNotify { lp, polls }),
        1 => (lp.clone(), 0..4usize).prop_map(|(lp, polls)| Op::CancelAck { lp, polls }),
        2 => (any::<bool>(), proptest::option::weighted(0.25, 0..4usize))
            .prop_map(|(abandon, cancel)| Op::End { abandon, cancel }),
        1 => (1..5usize, proptest::option::of(0..4usize), any::<bool>())
            .prop_map(|(step, cancel, race)| Op::Purge { step, cancel, race }),
        3 => Just(Op::Renew),
        1 => Just(Op::DropTombstones),
        3 => (lp.clone(), proptest::bool::weighted(0.3)).prop_map(|(lp, fail)| Op::TxAck { lp, fail }),
        1 => (lp, 0..6usize).prop_map(|(lp, polls)| Op::TxAckCrash { lp, polls }),
    ]
}
