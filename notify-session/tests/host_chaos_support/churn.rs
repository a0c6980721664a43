//! Sessions ending and new ones opening throughout the run, as production has them:
//! every interval the oldest hot session stops getting new notifications, is ended
//! at its owner once its sends are answered and its notifications consumed, and a
//! new session opens at a random host. Each end releases a lease, so the engine's
//! announcements never stop.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use notify_testkit::kill::xorshift;
use notify_types::SessionId;

use super::consumer::transactional;
use super::driver::Traffic;

/// How long an end or an open may take before the run fails.
const GIVE_UP: Duration = Duration::from_secs(180);

/// What the churn did.
#[derive(Debug, Default)]
pub(crate) struct Churned {
    /// Every session the run opened, in order.
    pub(crate) all: Vec<SessionId>,
    /// The sessions ended, and when (ms since the Unix epoch).
    pub(crate) ended: BTreeMap<SessionId, u64>,
    /// Ends and opens that did not complete: test failures.
    pub(crate) failures: Vec<String>,
}

/// A new session ID; transactional (its consumer acks in transactions) if asked.
pub(crate) fn new_session(transactional_consumer: bool) -> SessionId {
    loop {
        let s = SessionId::new();
        if transactional(s) == transactional_consumer {
            return s;
        }
    }
}

/// Opens `s` at some host, starting with `first`; the host that opened it.
pub(crate) fn open(traffic: &Traffic, s: SessionId, first: usize) -> Result<usize, String> {
    let n = traffic.hosts.len();
    let started = Instant::now();
    let mut answers = Vec::new();
    for attempt in 0.. {
        let h = (first + attempt) % n;
        let answer = traffic.hosts[h].ask(&format!("O {s}"), Duration::from_secs(30));
        if answer.as_deref() == Some("ok") {
            traffic.set_owner(s, h);
            return Ok(h);
        }
        answers.push((h, answer));
        if started.elapsed() > GIVE_UP {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Err(format!("session {s} could not be opened: {answers:?}"))
}

/// Ends `s` at its owner, once nothing is in flight for it and nothing pending.
fn end(traffic: &Traffic, s: SessionId) -> Result<(), String> {
    let started = Instant::now();
    while traffic
        .hot
        .lock()
        .unwrap()
        .in_flight
        .get(&s)
        .copied()
        .unwrap_or(0)
        > 0
    {
        if started.elapsed() > GIVE_UP {
            return Err(format!("sends to session {s} still in flight"));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut last = Vec::new();
    while started.elapsed() < GIVE_UP {
        let h = traffic.owner_of(s);
        let answer = traffic.hosts[h].ask(&format!("E {s}"), Duration::from_secs(10));
        match answer.as_deref() {
            Some("ok") => return Ok(()),
            // Its consumer is catching up.
            Some(a) if a.starts_with("pending:") => {}
            _ => traffic.set_owner(s, (h + 1) % traffic.hosts.len()),
        }
        last.push((h, answer));
        if last.len() > 8 {
            last.remove(0);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Err(format!("session {s} could not be ended: {last:?}"))
}

/// Ends and opens sessions every `every` until `traffic.stop`.
pub(crate) fn churn(traffic: &Arc<Traffic>, every: Duration, seed: u64) -> Churned {
    let mut rng = seed | 1;
    let mut churned = Churned::default();
    let mut next_transactional = 0usize;
    while !traffic.stop.load(Ordering::SeqCst) {
        std::thread::sleep(every);
        if traffic.stop.load(Ordering::SeqCst) {
            break;
        }
        let oldest = {
            let mut hot = traffic.hot.lock().unwrap();
            if hot.sessions.is_empty() {
                continue;
            }
            hot.sessions.remove(0)
        };
        match end(traffic, oldest) {
            Ok(()) => {
                churned.ended.insert(oldest, super::log::now_ms());
            }
            Err(e) => {
                churned.failures.push(e);
                // Still live: it stays hot, and must be owned at the end.
                traffic.hot.lock().unwrap().sessions.push(oldest);
                continue;
            }
        }
        next_transactional += 1;
        let s = new_session(next_transactional.is_multiple_of(3));
        let first = xorshift(&mut rng) as usize % traffic.hosts.len();
        churned.all.push(s);
        match open(traffic, s, first) {
            Ok(_) => traffic.hot.lock().unwrap().sessions.push(s),
            Err(e) => churned.failures.push(e),
        }
    }
    churned
}
