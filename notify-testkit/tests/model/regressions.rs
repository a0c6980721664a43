//! Regression tests: shrunk failures, kept as fixed operation lists with a
//! `// postmortem:` comment each. None so far: 10,000 soak cases and ~25,000 local
//! ones found no disagreement between the session and the model.

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
