//! The fault checks earn trust: a lease lost, a `NotOwner` answered or an ack
//! refused inside the window of a fault injected into that host passes; the same at
//! a host nobody faulted, or after the window, is caught; a takeover slower than the
//! bound, or one that never came, is caught.

use notify_types::SessionId;

use super::attribution::{Takeover, attribute, percentiles, slow_takeovers, takeovers};
use super::faults::{Fault, FaultKind};
use super::log::{Event, HostLog, Logged, StopKind};

const GRACE: u64 = 500;

fn fault(host: usize, from: u64, to: u64, owned: &[(SessionId, u64)]) -> Fault {
    Fault {
        host,
        kind: FaultKind::Stop,
        from,
        to,
        owned: owned.to_vec(),
    }
}

fn log(host: usize, events: &[(u64, Event)]) -> HostLog {
    HostLog {
        host,
        events: events
            .iter()
            .map(|(at, event)| Logged {
                at: *at,
                event: event.clone(),
            })
            .collect(),
    }
}

fn lost(session: SessionId, named: bool) -> Event {
    Event::Stopped {
        session,
        why: StopKind::Lost,
        named,
    }
}

#[test]
fn refusals_in_the_faulted_hosts_window_pass_and_others_are_caught() {
    let s = SessionId::new();
    let faults = [fault(0, 10_000, 16_000, &[(s, 1)])];
    // Host 0, stopped 10 s to 16 s, finds its lease lost and refuses after it resumes.
    let inside = log(
        0,
        &[
            (16_100, lost(s, true)),
            (
                16_200,
                Event::NotOwner {
                    session: s,
                    named: true,
                },
            ),
            (16_300, Event::AckRefused { session: s }),
        ],
    );
    let (r, bad) = attribute(std::slice::from_ref(&inside), &faults, GRACE);
    assert_eq!(bad, Vec::<String>::new());
    assert_eq!(
        (
            r.lost_in_faults,
            r.not_owner_in_faults,
            r.acks_refused_in_faults
        ),
        (1, 1, 1)
    );
    assert_eq!((r.lost_named, r.not_owner_named), (1, 1));

    // The same at host 1, which nobody faulted: a busy host losing its own lease.
    let elsewhere = HostLog {
        host: 1,
        ..inside.clone()
    };
    let (r, bad) = attribute(&[elsewhere], &faults, GRACE);
    assert_eq!(
        (r.lost_outside, r.not_owner_outside, r.acks_refused_outside),
        (1, 1, 1)
    );
    assert!(
        bad.iter()
            .any(|v| v.contains("host 1 lost the lease of a session 1 times"))
    );
    assert!(bad.iter().any(|v| v.contains("host 1 answered NotOwner")));

    // At host 0 past the window's grace, and in the fault-free phase before it.
    let late = log(0, &[(5_000, lost(s, false)), (16_600, lost(s, false))]);
    let (r, bad) = attribute(&[late], &faults, GRACE);
    assert_eq!((r.lost_outside, r.quiet), (2, 1));
    assert!(
        bad.iter()
            .any(|v| v.contains("host 0 lost the lease of a session 2 times"))
    );
}

#[test]
fn slow_or_missing_takeovers_are_caught() {
    let (a, b, c) = (SessionId::new(), SessionId::new(), SessionId::new());
    let faults = [fault(0, 10_000, 11_000, &[(a, 1), (b, 4), (c, 2)])];
    let open = |session, epoch| Event::Open {
        session,
        epoch,
        last_seq: 0,
        pending: Vec::new(),
    };
    let logs = [
        // a's own earlier epoch does not count; epoch 2 opened 4 s after the fault.
        log(0, &[(9_000, open(a, 1)), (9_500, open(b, 4))]),
        log(1, &[(14_000, open(a, 2))]),
        // b is never owned again; c ended before anyone took it over.
        log(2, &[(10_500, Event::Ended { session: c })]),
    ];
    let t = takeovers(&logs, &faults);
    assert_eq!(
        t,
        vec![
            Takeover {
                fault: 0,
                session: a,
                ms: Some(4000)
            },
            Takeover {
                fault: 0,
                session: b,
                ms: None
            },
        ]
    );
    let bad = slow_takeovers(&t, &faults, 5000);
    assert_eq!(bad.len(), 1);
    assert!(bad[0].contains(&format!("session {b} was never owned again")));
    let bad = slow_takeovers(&t, &faults, 3000);
    assert!(
        bad.iter()
            .any(|v| v.contains("owned again 4000 ms after the Stop of host 0"))
    );
}

#[test]
fn percentiles_of_a_few_values() {
    assert_eq!(percentiles(&[]), (0, 0, 0));
    assert_eq!(percentiles(&[7]), (7, 7, 7));
    let v: Vec<u64> = (1..=100).collect();
    assert_eq!(percentiles(&v), (50, 99, 100));
}
