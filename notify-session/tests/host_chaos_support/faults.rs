//! Injecting faults into running hosts: SIGKILL (and a restart), SIGSTOP past the
//! lease (and SIGCONT), a graceful shutdown (and a restart). Each fault records its
//! window and the sessions the host served just before it, for the takeover and
//! attribution checks (`attribution.rs`); after each, the run waits (bounded) until
//! those sessions are owned again before the next.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use notify_testkit::kill::xorshift;
use notify_types::SessionId;

use super::config::Config;
use super::driver::Traffic;
use super::log::now_ms;
use super::procs::Host;

/// A kind of fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum FaultKind {
    /// SIGKILL, then a new process in the slot.
    Kill,
    /// SIGSTOP for twice the lease, then SIGCONT.
    Stop,
    /// A graceful shutdown (leases released), then a new process in the slot.
    Shutdown,
    /// The graceful shutdown of every host at the end of the run (no takeover
    /// expected, and not counted as an injected fault).
    FinalShutdown,
}

/// One injected fault.
#[derive(Debug, Clone)]
pub(crate) struct Fault {
    pub(crate) host: usize,
    pub(crate) kind: FaultKind,
    /// When it began and when the host was back (ms since the Unix epoch).
    pub(crate) from: u64,
    pub(crate) to: u64,
    /// The sessions the host served just before, with their epochs.
    pub(crate) owned: Vec<(SessionId, u64)>,
}

/// A session a host reports serving: its epoch and its pending count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Served {
    pub(crate) session: SessionId,
    pub(crate) epoch: u64,
    pub(crate) pending: u64,
}

/// The sessions host `h` says it serves (`None` if it does not answer).
pub(crate) fn status(h: &Host, wait: Duration) -> Option<Vec<Served>> {
    let list = h.ask("STATUS", wait)?;
    Some(
        list.split(',')
            .filter(|s| !s.is_empty() && *s != "-")
            .map(|s| {
                let mut w = s.split(':');
                let mut next = || w.next().unwrap();
                Served {
                    session: SessionId::from_uuid(next().parse().unwrap()),
                    epoch: next().parse().unwrap(),
                    pending: next().parse().unwrap(),
                }
            })
            .collect(),
    )
}

/// How a host process is started: the test to run in the host role, the log
/// directory, its environment.
pub(crate) struct Launch<'a> {
    pub(crate) test: &'a str,
    pub(crate) dir: &'a Path,
    pub(crate) env: &'a [(&'a str, String)],
}

impl Launch<'_> {
    pub(crate) fn start(&self, host: &Host) {
        host.start(self.test, self.dir, self.env);
    }
}

fn pause(rng: &mut u64, min: Duration, max: Duration) {
    let (min, max) = (min.as_millis() as u64, max.as_millis() as u64);
    let ms = min + xorshift(rng) % (max - min + 1);
    std::thread::sleep(Duration::from_millis(ms));
}

/// Injects `kind` into a host that serves sessions (chosen at random among them).
pub(crate) fn inject(
    kind: FaultKind,
    hosts: &[Arc<Host>],
    config: &Config,
    launch: &Launch<'_>,
    rng: &mut u64,
    failures: &mut Vec<String>,
) -> Fault {
    let serving: Vec<(usize, Vec<Served>)> = hosts
        .iter()
        .enumerate()
        .filter_map(|(i, h)| Some((i, status(h, Duration::from_secs(10))?)))
        .filter(|(_, served)| !served.is_empty())
        .collect();
    assert!(!serving.is_empty(), "no host serves any session");
    let (h, served) = &serving[xorshift(rng) as usize % serving.len()];
    let host = &hosts[*h];
    // The fault must land on a live host, busy with sessions.
    host.assert_alive();
    let owned = served.iter().map(|s| (s.session, s.epoch)).collect();
    let from = now_ms();
    match kind {
        FaultKind::Kill => {
            host.kill();
            pause(rng, Duration::from_millis(50), Duration::from_millis(400));
            launch.start(host);
        }
        FaultKind::Stop => {
            host.signal(Signal::SIGSTOP);
            // Long enough for its leases to expire and others to adopt them.
            std::thread::sleep(config.lease * 2);
            pause(rng, Duration::ZERO, Duration::from_millis(500));
            host.signal(Signal::SIGCONT);
        }
        FaultKind::Shutdown => {
            if !host.shut_down() {
                failures.push(format!("a graceful shutdown of host {h} failed"));
            }
            launch.start(host);
        }
        FaultKind::FinalShutdown => panic!("not a round's fault"),
    }
    Fault {
        host: *h,
        kind,
        from,
        to: now_ms(),
        owned,
    }
}

/// Waits, up to `limit`, until every session `fault` hit that is still hot is
/// served again under a later epoch; the ones that are not.
pub(crate) fn wait_reowned(traffic: &Traffic, fault: &Fault, limit: Duration) -> Vec<SessionId> {
    let started = Instant::now();
    loop {
        let hot: BTreeSet<SessionId> = traffic
            .hot
            .lock()
            .unwrap()
            .sessions
            .iter()
            .copied()
            .collect();
        let served: Vec<Served> = traffic
            .hosts
            .iter()
            .filter_map(|h| status(h, Duration::from_secs(2)))
            .flatten()
            .collect();
        let missing: Vec<SessionId> = fault
            .owned
            .iter()
            .filter(|(s, e)| {
                hot.contains(s) && !served.iter().any(|x| x.session == *s && x.epoch > *e)
            })
            .map(|(s, _)| *s)
            .collect();
        if missing.is_empty() || started.elapsed() > limit {
            return missing;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The fault kind of each round: each kind once in every three rounds, in a random
/// order.
pub(crate) fn schedule(mut seed: u64) -> impl FnMut(usize) -> FaultKind {
    let mut cycle = [FaultKind::Kill, FaultKind::Stop, FaultKind::Shutdown];
    move |round| {
        if round.is_multiple_of(3) {
            for i in (1..3).rev() {
                let j = xorshift(&mut seed) as usize % (i + 1);
                cycle.swap(i, j);
            }
        }
        cycle[round % 3]
    }
}

/// Shuts every host down gracefully at the end of the run; their windows.
pub(crate) fn shut_down_all(hosts: &[Arc<Host>], failures: &mut Vec<String>) -> Vec<Fault> {
    hosts
        .iter()
        .map(|h| {
            let from = now_ms();
            if !h.shut_down() {
                failures.push(format!(
                    "the final graceful shutdown of host {} failed",
                    h.index()
                ));
            }
            Fault {
                host: h.index(),
                kind: FaultKind::FinalShutdown,
                from,
                to: now_ms(),
                owned: Vec::new(),
            }
        })
        .collect()
}
