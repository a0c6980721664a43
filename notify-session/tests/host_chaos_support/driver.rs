//! The supervisors' side: a thread that sends notifications to whichever host owns
//! each session, and retries every refusal (not the owner, stopped, fenced, no answer
//! from a stopped or dead host) with the same command ID at another host until one
//! answers `Accepted` or `Duplicate`.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use notify_testkit::kill::xorshift;
use notify_types::{CommandId, SessionId};

use super::procs::Host;

/// How long the driver waits for a host's answer before it tries another host.
const ANSWER_WAIT: Duration = Duration::from_millis(700);

/// What the driver saw.
#[derive(Debug, Default)]
pub(crate) struct Driven {
    /// Every notification answered `Accepted` or `Duplicate`, and its session.
    pub(crate) answered: BTreeMap<CommandId, SessionId>,
    /// Notifications sent (distinct command IDs).
    pub(crate) sent: usize,
    /// Requests in all, retries included.
    pub(crate) attempts: usize,
    /// The answers, by kind (`accepted`, `duplicate`, `notowner`, `none`...).
    pub(crate) answers: BTreeMap<String, usize>,
    /// Answers no retry can fix (a collision, an invalid notification): test failures.
    pub(crate) failures: Vec<String>,
    /// Notifications still unanswered.
    queue: VecDeque<(SessionId, CommandId)>,
    owner: BTreeMap<SessionId, usize>,
    /// Each unanswered notification's last answer, per host.
    last: BTreeMap<(CommandId, usize), String>,
}

impl Driven {
    /// Sends `c` for `s` to one host: the last one that answered for `s`, or the next
    /// after the last one that refused; true once answered `Accepted` or `Duplicate`.
    fn send(&mut self, hosts: &[Arc<Host>], s: SessionId, c: CommandId) -> bool {
        let h = self.owner.get(&s).copied().unwrap_or(0) % hosts.len();
        self.attempts += 1;
        let answer = hosts[h]
            .ask(&format!("N {s} {c}"), &format!("R {c} "), ANSWER_WAIT)
            .unwrap_or_else(|| "none".to_owned());
        let kind = answer.split(':').next().unwrap_or_default().to_owned();
        self.last.insert((c, h), answer.clone());
        *self.answers.entry(kind.clone()).or_default() += 1;
        match kind.as_str() {
            "accepted" | "duplicate" => {
                self.answered.insert(c, s);
                self.owner.insert(s, h);
                true
            }
            "notowner" | "stopped" | "fenced" | "none" | "unavailable" => {
                self.owner.insert(s, (h + 1) % hosts.len());
                false
            }
            _ => {
                self.failures.push(format!("{c} at host {h}: {answer}"));
                true
            }
        }
    }
}

/// Drives notifications over `sessions` until `stop`, then returns what it saw with
/// the unanswered ones still queued (see [`drain`]).
pub(crate) fn drive(
    hosts: &[Arc<Host>],
    sessions: &[SessionId],
    seed: u64,
    stop: &AtomicBool,
) -> Driven {
    let mut d = Driven::default();
    let mut rng = seed;
    let mut next = 0;
    while !stop.load(Ordering::SeqCst) {
        let r = xorshift(&mut rng);
        if r.is_multiple_of(3)
            && let Some((s, c)) = d.queue.pop_front()
        {
            // A retry, same command ID.
            if !d.send(hosts, s, c) {
                d.queue.push_back((s, c));
            }
        } else if r % 17 == 1
            && let Some((&c, &s)) = d
                .answered
                .iter()
                .nth((r as usize / 17) % d.answered.len().max(1))
        {
            // A supervisor's retry of an answered notification: Duplicate or Accepted.
            d.send(hosts, s, c);
        } else {
            let s = sessions[next % sessions.len()];
            next += 1;
            let c = CommandId::new();
            d.sent += 1;
            if !d.send(hosts, s, c) {
                d.queue.push_back((s, c));
            }
        }
        std::thread::sleep(Duration::from_millis(4));
    }
    d
}

/// Retries every unanswered notification until each is answered; after two
/// minutes of refusals by every host, gives up and answers the ones left, with
/// their last answers.
pub(crate) fn drain(d: &mut Driven, hosts: &[Arc<Host>]) -> Vec<String> {
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    while let Some((s, c)) = d.queue.pop_front() {
        if std::time::Instant::now() >= deadline {
            d.queue.push_front((s, c));
            return d
                .queue
                .iter()
                .map(|(s, c)| {
                    let last: Vec<_> = d.last.range((*c, 0)..=(*c, usize::MAX)).collect();
                    format!("{c} (session {s}) refused by every host for two minutes: {last:?}")
                })
                .collect();
        }
        // Each refusal moves this session's guess on by one host: every host is
        // asked in turn.
        if !d.send(hosts, s, c) {
            d.queue.push_back((s, c));
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    Vec::new()
}

/// The sessions of the notifications still unanswered.
pub(crate) fn stuck(d: &Driven) -> Vec<SessionId> {
    d.queue.iter().map(|(s, _)| *s).collect()
}
