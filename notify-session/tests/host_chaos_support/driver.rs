//! The supervisors' side: many appender threads, each sending notifications to
//! whichever host owns a hot session and retrying every refusal (not the owner,
//! stopped, fenced, no answer from a stopped or dead host) with the same command ID,
//! at another host or (a full loop) at the same one, until one answers `Accepted` or
//! `Duplicate`. Now and then an appender retries a notification already answered:
//! it must be answered `Duplicate`.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use notify_testkit::kill::xorshift;
use notify_types::{CommandId, SessionId};

use super::procs::Host;

/// How long an appender waits for a host's answer before it tries another host.
const ANSWER_WAIT: Duration = Duration::from_secs(2);
/// How long one notification may go unanswered before the run fails.
const GIVE_UP: Duration = Duration::from_secs(180);
/// One in this many sends is a retry of a notification already answered.
const RETRY_ONE_IN: u64 = 20;
/// How many answered notifications the appenders remember for their retries.
const RECENT: usize = 4096;

/// The sessions appenders send to, and how many sends to each are in flight.
#[derive(Debug, Default)]
pub(crate) struct Hot {
    /// The sessions new notifications go to.
    pub(crate) sessions: Vec<SessionId>,
    /// Sends in flight, per session (an end waits for zero).
    pub(crate) in_flight: BTreeMap<SessionId, usize>,
}

/// What the appenders saw.
#[derive(Debug, Default)]
pub(crate) struct Seen {
    /// Every notification answered `Accepted` or `Duplicate`, and its session.
    pub(crate) answered: BTreeMap<CommandId, SessionId>,
    /// Notifications sent (distinct command IDs).
    pub(crate) sent: usize,
    /// Requests in all, retries included.
    pub(crate) attempts: usize,
    /// The answers, by kind (`accepted`, `duplicate`, `notowner`, `none`...).
    pub(crate) answers: BTreeMap<String, usize>,
    /// Milliseconds from a notification's first send to its answer.
    pub(crate) latencies: Vec<u64>,
    /// Retries of an answered notification, and how many were answered `Duplicate`.
    pub(crate) retries: usize,
    pub(crate) retried_duplicate: usize,
    /// Answered notifications a retry found `Accepted` again.
    pub(crate) reaccepted: Vec<CommandId>,
    /// Answers no retry can fix (a collision, an invalid notification, a
    /// notification never answered): test failures.
    pub(crate) failures: Vec<String>,
    recent: VecDeque<(CommandId, SessionId)>,
}

/// The appenders' shared state.
pub(crate) struct Traffic {
    pub(crate) hosts: Vec<Arc<Host>>,
    pub(crate) hot: Mutex<Hot>,
    pub(crate) seen: Mutex<Seen>,
    /// Each session's last known owner (a guess).
    owner: Mutex<BTreeMap<SessionId, usize>>,
    pub(crate) stop: AtomicBool,
}

impl Traffic {
    pub(crate) fn new(hosts: Vec<Arc<Host>>, sessions: Vec<SessionId>) -> Self {
        Self {
            hosts,
            hot: Mutex::new(Hot {
                sessions,
                in_flight: BTreeMap::new(),
            }),
            seen: Mutex::default(),
            owner: Mutex::default(),
            stop: AtomicBool::new(false),
        }
    }

    /// The host to try first for `s`.
    pub(crate) fn owner_of(&self, s: SessionId) -> usize {
        self.owner.lock().unwrap().get(&s).copied().unwrap_or(0) % self.hosts.len()
    }

    pub(crate) fn set_owner(&self, s: SessionId, h: usize) {
        self.owner.lock().unwrap().insert(s, h);
    }

    /// Host `h` refused `s`: try the next one (unless someone found the owner
    /// meanwhile).
    fn refused(&self, s: SessionId, h: usize) {
        let mut owner = self.owner.lock().unwrap();
        let guess = owner.entry(s).or_insert(h);
        if *guess % self.hosts.len() == h {
            *guess = (h + 1) % self.hosts.len();
        }
    }

    /// Picks a hot session (counted in flight until [`done`](Self::done)).
    fn pick(&self, rng: &mut u64) -> Option<SessionId> {
        let mut hot = self.hot.lock().unwrap();
        if hot.sessions.is_empty() {
            return None;
        }
        let s = hot.sessions[xorshift(rng) as usize % hot.sessions.len()];
        *hot.in_flight.entry(s).or_default() += 1;
        Some(s)
    }

    /// Picks an answered notification of a hot session, for a retry.
    fn pick_answered(&self, rng: &mut u64) -> Option<(CommandId, SessionId)> {
        let (c, s) = {
            let seen = self.seen.lock().unwrap();
            if seen.recent.is_empty() {
                return None;
            }
            seen.recent[xorshift(rng) as usize % seen.recent.len()]
        };
        let mut hot = self.hot.lock().unwrap();
        if !hot.sessions.contains(&s) {
            return None;
        }
        *hot.in_flight.entry(s).or_default() += 1;
        Some((c, s))
    }

    fn done(&self, s: SessionId) {
        let mut hot = self.hot.lock().unwrap();
        let n = hot.in_flight.get_mut(&s).unwrap();
        *n -= 1;
    }

    /// Sends `c` for `s` until some host answers `Accepted` or `Duplicate`.
    fn deliver(&self, s: SessionId, c: CommandId, rng: &mut u64) {
        let first = Instant::now();
        let mut last: BTreeMap<usize, String> = BTreeMap::new();
        let mut refusals = 0u32;
        loop {
            if first.elapsed() > GIVE_UP {
                self.seen.lock().unwrap().failures.push(format!(
                    "{c} (session {s}) unanswered for {GIVE_UP:?}: last answers {last:?}"
                ));
                return;
            }
            let h = self.owner_of(s);
            let answer = self.ask(h, s, c);
            let kind = kind(&answer);
            match kind {
                "accepted" | "duplicate" => {
                    let mut seen = self.seen.lock().unwrap();
                    seen.answered.insert(c, s);
                    seen.latencies.push(first.elapsed().as_millis() as u64);
                    if seen.recent.len() == RECENT {
                        seen.recent.pop_front();
                    }
                    seen.recent.push_back((c, s));
                    drop(seen);
                    self.set_owner(s, h);
                    return;
                }
                // The loop is full: its consumer catches up; retry here shortly.
                "full" => pause(rng, 20, 80),
                "notserved" | "notowner" | "stopped" | "fenced" | "none" | "unavailable" => {
                    self.refused(s, h);
                    refusals += 1;
                    // Every host refused in turn: the session is between owners.
                    if refusals.is_multiple_of(self.hosts.len() as u32) {
                        pause(rng, 50, 150);
                    }
                }
                _ => {
                    self.seen
                        .lock()
                        .unwrap()
                        .failures
                        .push(format!("{c} (session {s}) at host {h}: {answer}"));
                    return;
                }
            }
            last.insert(h, answer);
        }
    }

    /// Retries answered `c` of `s` once at its owner: must not be `Accepted`.
    fn retry_answered(&self, s: SessionId, c: CommandId) {
        let h = self.owner_of(s);
        let answer = self.ask(h, s, c);
        let mut seen = self.seen.lock().unwrap();
        seen.retries += 1;
        match kind(&answer) {
            "duplicate" => seen.retried_duplicate += 1,
            "accepted" => seen.reaccepted.push(c),
            _ => {}
        }
    }

    fn ask(&self, h: usize, s: SessionId, c: CommandId) -> String {
        let answer = self.hosts[h]
            .ask(&format!("N {s} {c}"), ANSWER_WAIT)
            .unwrap_or_else(|| "none".to_owned());
        let mut seen = self.seen.lock().unwrap();
        seen.attempts += 1;
        *seen.answers.entry(kind(&answer).to_owned()).or_default() += 1;
        answer
    }
}

fn kind(answer: &str) -> &str {
    answer.split(':').next().unwrap_or_default()
}

fn pause(rng: &mut u64, min_ms: u64, max_ms: u64) {
    let ms = min_ms + xorshift(rng) % (max_ms - min_ms + 1);
    std::thread::sleep(Duration::from_millis(ms));
}

/// Runs `n` appender threads until `traffic.stop`; each finishes the notification it
/// is sending before it returns.
pub(crate) fn appenders(
    traffic: &Arc<Traffic>,
    n: usize,
    seed: u64,
) -> Vec<std::thread::JoinHandle<()>> {
    (0..n)
        .map(|i| {
            let traffic = Arc::clone(traffic);
            let mut rng = (seed ^ (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)) | 1;
            std::thread::spawn(move || {
                while !traffic.stop.load(Ordering::SeqCst) {
                    if xorshift(&mut rng).is_multiple_of(RETRY_ONE_IN)
                        && let Some((c, s)) = traffic.pick_answered(&mut rng)
                    {
                        traffic.retry_answered(s, c);
                        traffic.done(s);
                        continue;
                    }
                    let Some(s) = traffic.pick(&mut rng) else {
                        std::thread::sleep(Duration::from_millis(20));
                        continue;
                    };
                    let c = CommandId::new();
                    traffic.seen.lock().unwrap().sent += 1;
                    traffic.deliver(s, c, &mut rng);
                    traffic.done(s);
                }
            })
        })
        .collect()
}
