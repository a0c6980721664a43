//! Regression tests: shrunk failures, kept as fixed operation lists with a
//! `// postmortem:` comment each. None so far: 10,000 soak cases and ~25,000 local
//! ones found no disagreement between the session and the model, nor did ~2,000 redb
//! and ~6,000 in-memory cases once session end and purge joined the operations. The
//! two tours below are hand-written, so that a broken runner cannot pass by generating
//! only no-ops.

use crate::ops::{Change, Op, Refusal};
use crate::run;

/// A hand-written tour through every operation, so a broken runner cannot pass by
/// generating only no-ops.
#[test]
fn tour_of_every_operation() {
    use Op::*;
    run(&[
        Start { lp: 0 },
        Start { lp: 1 },
        NotifyNew { lp: 0 },
        Retry { pick: 0 },
        Reuse {
            pick: 0,
            change: Change::Loop,
        },
        Fill { lp: 0 },
        Hold { lp: 0 },
        RecvDrop { lp: 0 },
        RecvAck { lp: 0 },
        Complete { pick: 0 },
        Crash,
        DeclareLost { pick: 0 },
        DeclareLost { pick: 0 },
        Release { lp: 0, ack: true },
        Shutdown { lp: 1 },
        NotifyNew { lp: 1 },
        Refused {
            kind: Refusal::Foreign,
        },
        Refused {
            kind: Refusal::OtherSession,
        },
        RetryStart { pick: 1 },
        Crash,
        RecvAck { lp: 1 },
        RecvAck { lp: 1 },
    ])
    .unwrap();
}

/// A hand-written tour through session end and purge: a refused and an abandoning end,
/// every refusal after it (in the ending process, after a restart, after a purge), a
/// purge cut short and finished, one racing the neighbour, a fresh session after the
/// end, and dropped tombstones.
#[test]
fn tour_of_session_end_and_purge() {
    use Op::*;
    run(&[
        Start { lp: 0 },
        NotifyNew { lp: 0 },
        NotifyNew { lp: 1 },
        Hold { lp: 1 },
        Neighbour,
        // Pending notifications refuse the end; nothing is written.
        End {
            abandon: false,
            cancel: None,
        },
        RecvAck { lp: 0 },
        // Abandons the held one (a first attempt cut short); the handle refuses
        // everything from now on.
        End {
            abandon: true,
            cancel: Some(2),
        },
        End {
            abandon: false,
            cancel: None,
        },
        Retry { pick: 0 },
        Reuse {
            pick: 1,
            change: Change::State,
        },
        NotifyNew { lp: 0 },
        Complete { pick: 0 },
        Release { lp: 1, ack: true },
        RecvAck { lp: 0 },
        Refused {
            kind: Refusal::Foreign,
        },
        // A restarted process: restore reports the end; the journal refuses.
        Crash,
        Retry { pick: 1 },
        RetryStart { pick: 0 },
        End {
            abandon: false,
            cancel: None,
        },
        Purge {
            step: 1,
            cancel: Some(1),
            race: true,
        },
        Retry { pick: 0 },
        // After a restart, the purged session's refusals say so.
        Crash,
        Retry { pick: 0 },
        End {
            abandon: true,
            cancel: None,
        },
        DropTombstones,
        // A fresh session in the same journal, which ends cleanly with nothing pending.
        Renew,
        NotifyNew { lp: 0 },
        RecvAck { lp: 0 },
        Neighbour,
        End {
            abandon: false,
            cancel: None,
        },
        Purge {
            step: 2,
            cancel: None,
            race: false,
        },
        Renew,
        // Both earlier sessions' tombstones go; they are unknown to the journal now.
        DropTombstones,
        NotifyNew { lp: 1 },
        Crash,
        RecvAck { lp: 1 },
    ])
    .unwrap();
}

/// A hand-written tour of the transactional acknowledgement: a rollback (handed
/// again), a commit, crashes while one is under way (dropped at once, and after a few
/// polls), a commit after the crash, and one after the session ended.
#[test]
fn tour_of_transactional_acks() {
    use Op::*;
    run(&[
        NotifyNew { lp: 0 },
        NotifyNew { lp: 0 },
        NotifyNew { lp: 0 },
        NotifyNew { lp: 1 },
        TxAck { lp: 0, fail: true },
        TxAck { lp: 0, fail: false },
        TxAckCrash { lp: 0, polls: 0 },
        TxAckCrash { lp: 0, polls: 3 },
        TxAck { lp: 0, fail: false },
        Hold { lp: 1 },
        TxAckCrash { lp: 1, polls: 1 },
        NotifyNew { lp: 1 },
        End {
            abandon: true,
            cancel: None,
        },
        TxAck { lp: 1, fail: false },
        Crash,
    ])
    .unwrap();
}
