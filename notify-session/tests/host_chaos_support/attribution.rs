//! What the faults may explain, checked after the run from the hosts' timed logs
//! and the parent's fault windows. Pure: the planted-failure tests feed it logs with
//! one violation each and see it caught.
//!
//! * Every lease a host lost, every `NotOwner` (or fenced) answer and every ack
//!   refused for want of the lease falls in the window of a fault injected into
//!   that same host (from the fault to its end plus a grace): outside them —
//!   the fault-free phase, or a host nobody faulted — there are none.
//! * Every session a fault hit is owned again, under a later epoch, within the
//!   takeover bound (lease + one poll + slack) of the fault's start.

use std::collections::BTreeMap;

use notify_types::SessionId;

use super::faults::{Fault, FaultKind};
use super::log::{Event, HostLog, StopKind};

/// How the hosts' refusals fell.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Refusals {
    /// Leases lost (`StopReason::LeaseLost`) in a fault's window at that host, and
    /// outside any.
    pub(crate) lost_in_faults: usize,
    pub(crate) lost_outside: usize,
    /// `NotOwner` (or fenced) answers, likewise.
    pub(crate) not_owner_in_faults: usize,
    pub(crate) not_owner_outside: usize,
    /// Acks refused for want of the lease, likewise.
    pub(crate) acks_refused_in_faults: usize,
    pub(crate) acks_refused_outside: usize,
    /// All three, before the first fault (the fault-free phase).
    pub(crate) quiet: usize,
    /// `NotOwner` answers and lost leases that named the new owner.
    pub(crate) not_owner_named: usize,
    pub(crate) lost_named: usize,
}

/// Attributes each refusal in `logs` to a fault window at its host (`grace_ms`
/// past the fault's end); one violation per host and kind outside any, with the
/// count and the first few.
pub(crate) fn attribute(
    logs: &[HostLog],
    faults: &[Fault],
    grace_ms: u64,
) -> (Refusals, Vec<String>) {
    let mut r = Refusals::default();
    let first_fault = faults.iter().map(|f| f.from).min().unwrap_or(u64::MAX);
    let mut outside: BTreeMap<(usize, &str), Vec<String>> = BTreeMap::new();
    for log in logs {
        for e in &log.events {
            let (what, named) = match &e.event {
                Event::Stopped {
                    why: StopKind::Lost,
                    named,
                    ..
                } => ("lost the lease of", *named),
                Event::NotOwner { named, .. } => ("answered NotOwner for", *named),
                Event::AckRefused { .. } => ("refused an ack of", false),
                _ => continue,
            };
            let in_window = faults
                .iter()
                .any(|f| f.host == log.host && f.from <= e.at && e.at <= f.to + grace_ms);
            let (inside, out) = match what {
                "lost the lease of" => {
                    r.lost_named += usize::from(named);
                    (&mut r.lost_in_faults, &mut r.lost_outside)
                }
                "answered NotOwner for" => {
                    r.not_owner_named += usize::from(named);
                    (&mut r.not_owner_in_faults, &mut r.not_owner_outside)
                }
                _ => (&mut r.acks_refused_in_faults, &mut r.acks_refused_outside),
            };
            if in_window {
                *inside += 1;
                continue;
            }
            *out += 1;
            r.quiet += usize::from(e.at < first_fault);
            outside.entry((log.host, what)).or_default().push(format!(
                "{} at {}",
                e.event.session(),
                e.at
            ));
        }
    }
    let violations = outside
        .into_iter()
        .map(|((host, what), list)| {
            format!(
                "host {host} {what} a session {} times outside any fault injected into it \
                 (windows: {:?}); first: {:?}",
                list.len(),
                windows(faults, host, grace_ms),
                &list[..list.len().min(5)]
            )
        })
        .collect();
    (r, violations)
}

fn windows(faults: &[Fault], host: usize, grace_ms: u64) -> Vec<(FaultKind, u64, u64)> {
    faults
        .iter()
        .filter(|f| f.host == host)
        .map(|f| (f.kind, f.from, f.to + grace_ms))
        .collect()
}

/// One session a fault hit, and how long after the fault's start it was owned
/// again (`None`: never).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Takeover {
    pub(crate) fault: usize,
    pub(crate) session: SessionId,
    pub(crate) ms: Option<u64>,
}

/// For every injected fault and every session it hit: when a later epoch opened
/// it, from the logs. A session ended before it was owned again is left out.
pub(crate) fn takeovers(logs: &[HostLog], faults: &[Fault]) -> Vec<Takeover> {
    let mut opens: BTreeMap<SessionId, Vec<(u64, u64)>> = BTreeMap::new();
    let mut ended: BTreeMap<SessionId, u64> = BTreeMap::new();
    for e in logs.iter().flat_map(|l| &l.events) {
        match &e.event {
            Event::Open { session, epoch, .. } => {
                opens.entry(*session).or_default().push((e.at, *epoch));
            }
            Event::Ended { session } => {
                let at = ended.entry(*session).or_insert(e.at);
                *at = (*at).min(e.at);
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    for (i, f) in faults.iter().enumerate() {
        if f.kind == FaultKind::FinalShutdown {
            continue;
        }
        for (s, epoch) in &f.owned {
            let reopened = opens
                .get(s)
                .into_iter()
                .flatten()
                .filter(|(_, e)| e > epoch)
                .map(|(at, _)| *at)
                .min();
            let end = ended.get(s).copied();
            if end.is_some_and(|end| reopened.is_none_or(|at| end < at)) {
                continue;
            }
            out.push(Takeover {
                fault: i,
                session: *s,
                ms: reopened.map(|at| at.saturating_sub(f.from)),
            });
        }
    }
    out
}

/// One violation per takeover slower than `bound_ms` (or that never happened).
pub(crate) fn slow_takeovers(t: &[Takeover], faults: &[Fault], bound_ms: u64) -> Vec<String> {
    t.iter()
        .filter(|t| t.ms.is_none_or(|ms| ms > bound_ms))
        .map(|t| {
            let f = &faults[t.fault];
            match t.ms {
                Some(ms) => format!(
                    "session {} was owned again {ms} ms after the {:?} of host {} at {} \
                     (bound {bound_ms} ms)",
                    t.session, f.kind, f.host, f.from
                ),
                None => format!(
                    "session {} was never owned again after the {:?} of host {} at {}",
                    t.session, f.kind, f.host, f.from
                ),
            }
        })
        .collect()
}

/// The 50th and 99th percentiles and the maximum of `values` (zeros if empty).
pub(crate) fn percentiles(values: &[u64]) -> (u64, u64, u64) {
    if values.is_empty() {
        return (0, 0, 0);
    }
    let mut v = values.to_vec();
    v.sort_unstable();
    let at = |p: usize| v[((v.len() - 1) * p) / 100];
    (at(50), at(99), v[v.len() - 1])
}
