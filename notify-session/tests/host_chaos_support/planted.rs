//! The checker earns trust: a consistent history passes, and each planted violation
//! of the kind it exists for (a stale host's write, a redelivery after an ack, a
//! pending notification nobody redelivered, a restore that missed one, a
//! notification journaled twice, two owners, too few frames judged, an application
//! row written twice or without its consumption, a retry answered `Accepted` again)
//! is caught.

use std::collections::BTreeSet;

use notify_types::{CommandId, SessionId};

use super::checker::{Figures, Frame, History, check};
use super::log::{Event, HostLog, Logged};

/// `events` as host `host`'s log, one millisecond apart.
pub(super) fn host_log(host: usize, events: Vec<Event>) -> HostLog {
    HostLog {
        host,
        events: events
            .into_iter()
            .enumerate()
            .map(|(i, event)| Logged {
                at: 1000 + i as u64,
                event,
            })
            .collect(),
    }
}

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
            logs: vec![host_log(0, a), host_log(1, b)],
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
            transactional: [self.s].into(),
            app_rows: [(c0, 1), (c1, 1)].into(),
            ..History::default()
        }
    }
}

fn caught(h: &History, what: &str) {
    let (f, v) = check(h);
    assert!(!v.is_empty(), "the checker missed {what}: {f:?}");
    assert!(
        v.iter().any(|v| v.contains(what)),
        "expected `{what}` among {v:#?}"
    );
}

#[test]
fn a_consistent_history_passes() {
    let st = Story::new();
    assert_eq!(
        check(&st.history()),
        (
            Figures {
                takeovers: 1,
                redelivered: 1,
                frames_with_epoch: 4,
                frames: 4,
                rows_checked: 2,
            },
            Vec::new()
        )
    );
}

#[test]
fn a_stale_hosts_write_is_caught() {
    let st = Story::new();
    let mut h = st.history();
    // A, stopped past its lease, appends 2 after B restored: a fencing failure.
    push(&mut h.logs[0], [st.accepted(1, 2)]);
    push(&mut h.logs[1], [st.deliver(2, 2), st.acked(2, 2)]);
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
fn a_stale_hosts_ack_answered_as_a_duplicate_passes() {
    let st = Story::new();
    let mut h = st.history();
    // A, stopped with its ack of 1 in flight, resumes after B acked 1: its ack is
    // answered as a duplicate, and logged last.
    push(&mut h.logs[0], [st.acked(1, 1)]);
    let (_, v) = check(&h);
    assert_eq!(v, Vec::<String>::new());
    // Logged in the other order (A's file read after B's): the same.
    h.logs.swap(0, 1);
    let (_, v) = check(&h);
    assert_eq!(v, Vec::<String>::new());
}

#[test]
fn a_redelivery_after_an_ack_is_caught() {
    let st = Story::new();
    let mut h = st.history();
    push(&mut h.logs[1], [st.deliver(2, 0)]);
    caught(
        &h,
        "consumed at seq 2 and delivered again under epoch 2, which restored the log at seq 3",
    );
    let mut h = st.history();
    push(&mut h.logs[0], [st.deliver(1, 0)]);
    caught(&h, "delivered again after its ack");
}

#[test]
fn a_pending_notification_not_redelivered_is_caught() {
    let st = Story::new();
    let mut h = st.history();
    h.logs[1]
        .events
        .retain(|e| !matches!(e.event, Event::Deliver { .. }));
    caught(&h, "pending and never delivered it");
    let mut h = st.history();
    h.logs[1].events[0].event = st.open(2, 3, &[]);
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

/// Appends `events` to `log`, after its last.
fn push(log: &mut HostLog, events: impl IntoIterator<Item = Event>) {
    for event in events {
        let at = log.events.last().map_or(1000, |l| l.at + 1);
        log.events.push(Logged { at, event });
    }
}

#[test]
fn too_few_judged_frames_are_caught() {
    let st = Story::new();
    let mut h = st.history();
    // The frames' epochs unknown: nothing to judge them by.
    for log in &mut h.logs {
        log.events
            .retain(|e| !matches!(e.event, Event::Accepted { .. } | Event::Acked { .. }));
    }
    caught(&h, "only 0 of 4 frames could be judged");
}

#[test]
fn an_application_row_twice_or_without_its_consumption_is_caught() {
    let st = Story::new();
    let mut h = st.history();
    h.app_rows.insert(st.c[0], 2);
    caught(&h, "is consumed, with 2 application rows");
    let mut h = st.history();
    h.app_rows.remove(&st.c[1]);
    caught(&h, "is consumed, with 0 application rows");
    let mut h = st.history();
    h.app_rows.insert(st.c[2], 1);
    caught(&h, "has 1 application rows and no consumption journaled");
}

#[test]
fn a_retry_accepted_again_or_an_ended_session_still_served_is_caught() {
    let st = Story::new();
    let mut h = st.history();
    h.reaccepted.push(st.c[0]);
    caught(&h, "a retry was answered Accepted again");
    let mut h = st.history();
    h.live.clear();
    h.ended.insert(st.s);
    caught(&h, "is still served by 1 hosts at the end");
}
