//! The checker earns trust: a consistent history passes, and each planted violation
//! of the kind it exists for (a stale host's write, a redelivery after an ack, a
//! pending notification nobody redelivered, a restore that missed one, a
//! notification journaled twice, two owners) is caught.

use std::collections::BTreeSet;

use notify_types::{CommandId, SessionId};

use super::checker::{Figures, Frame, History, check};
use super::log::Event;

struct Story {
    s: SessionId,
    c: [CommandId; 3],
}

impl Story {
    fn new() -> Self {
        Self {
            s: SessionId::new(),
            c: [CommandId::new(), CommandId::new(), CommandId::new()],
        }
    }

    fn accepted(&self, epoch: u64, i: usize) -> Event {
        Event::Accepted {
            session: self.s,
            epoch,
            command: self.c[i],
        }
    }

    fn deliver(&self, epoch: u64, i: usize) -> Event {
        Event::Deliver {
            session: self.s,
            epoch,
            command: self.c[i],
        }
    }

    fn acked(&self, epoch: u64, i: usize) -> Event {
        Event::Acked {
            session: self.s,
            epoch,
            command: self.c[i],
        }
    }

    fn open(&self, epoch: u64, last_seq: u64, pending: &[usize]) -> Event {
        Event::Open {
            session: self.s,
            epoch,
            last_seq,
            pending: pending.iter().map(|i| self.c[*i]).collect(),
        }
    }

    /// Host A (epoch 1) accepts 0 and 1, acks 0, dies with 1 pending; host B
    /// (epoch 2) restores at seq 3, redelivers 1 and acks it.
    fn history(&self) -> History {
        let a = vec![
            self.open(1, 0, &[]),
            self.accepted(1, 0),
            self.deliver(1, 0),
            self.acked(1, 0),
            self.accepted(1, 1),
            self.deliver(1, 1),
        ];
        let b = vec![self.open(2, 3, &[1]), self.deliver(2, 1), self.acked(2, 1)];
        let [c0, c1, _] = self.c;
        History {
            logs: vec![a, b],
            journal: [(
                self.s,
                vec![
                    (1, Frame::Command(c0)),
                    (2, Frame::Consumed(c0)),
                    (3, Frame::Command(c1)),
                    (4, Frame::Consumed(c1)),
                ],
            )]
            .into(),
            answered: [(c0, self.s), (c1, self.s)].into(),
            owners: vec![BTreeSet::new(), [self.s].into()],
            live: [self.s].into(),
        }
    }
}

fn caught(h: &History, what: &str) {
    match check(h) {
        Ok(f) => panic!("the checker missed {what}: {f:?}"),
        Err(v) => assert!(
            v.iter().any(|v| v.contains(what)),
            "expected `{what}` among {v:#?}"
        ),
    }
}

#[test]
fn a_consistent_history_passes() {
    let st = Story::new();
    assert_eq!(
        check(&st.history()),
        Ok(Figures {
            takeovers: 1,
            redelivered: 1,
            frames_with_epoch: 4,
            frames: 4,
        })
    );
}

#[test]
fn a_stale_hosts_write_is_caught() {
    let st = Story::new();
    let mut h = st.history();
    // A, stopped past its lease, appends 2 after B restored: a fencing failure.
    h.logs[0].push(st.accepted(1, 2));
    h.logs[1].extend([st.deliver(2, 2), st.acked(2, 2)]);
    let frames = h.journal.get_mut(&st.s).unwrap();
    frames.extend([(5, Frame::Command(st.c[2])), (6, Frame::Consumed(st.c[2]))]);
    h.answered.insert(st.c[2], st.s);
    caught(&h, "written under epoch 1 after epoch 2 restored");
    // The same write landing after B's restore but before B's first frame: epochs
    // still look monotonic, the restore point catches it.
    let [c0, c1, c2] = st.c;
    h.journal.insert(
        st.s,
        vec![
            (1, Frame::Command(c0)),
            (2, Frame::Consumed(c0)),
            (3, Frame::Command(c1)),
            (4, Frame::Command(c2)),
            (5, Frame::Consumed(c1)),
            (6, Frame::Consumed(c2)),
        ],
    );
    caught(
        &h,
        "seq 4 written under epoch 1 after epoch 2 restored the log at seq 3",
    );
}

#[test]
fn a_redelivery_after_an_ack_is_caught() {
    let st = Story::new();
    let mut h = st.history();
    h.logs[1].push(st.deliver(2, 0));
    caught(&h, "acked under epoch 1 and delivered again under epoch 2");
    let mut h = st.history();
    h.logs[0].push(st.deliver(1, 0));
    caught(&h, "delivered again after its ack");
}

#[test]
fn a_pending_notification_not_redelivered_is_caught() {
    let st = Story::new();
    let mut h = st.history();
    h.logs[1].retain(|e| !matches!(e, Event::Deliver { .. }));
    caught(&h, "pending and never delivered it");
    let mut h = st.history();
    h.logs[1][0] = st.open(2, 3, &[]);
    caught(&h, "restored pending []");
}

#[test]
fn a_notification_journaled_twice_or_lost_is_caught() {
    let st = Story::new();
    let mut h = st.history();
    h.journal
        .get_mut(&st.s)
        .unwrap()
        .push((5, Frame::Command(st.c[0])));
    caught(&h, "journaled 2 times");
    let mut h = st.history();
    h.answered.insert(st.c[2], st.s);
    caught(&h, "answered but is journaled 0 times");
}

#[test]
fn two_owners_or_none_at_the_end_are_caught() {
    let st = Story::new();
    let mut h = st.history();
    h.owners[0].insert(st.s);
    caught(&h, "owned by 2 hosts");
    let mut h = st.history();
    h.owners[1].clear();
    caught(&h, "owned by 0 hosts");
}
