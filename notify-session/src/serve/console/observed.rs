//! What this server saw, kept in memory for the console (never for the contract: a
//! restart forgets it, and the pages say "since this server started"): the answers
//! it gave deliveries and acknowledgements (a duplicate writes no frame, so only the
//! server that answered it knows it happened), appends and acks per second over the
//! last minutes, and the scrub's passes.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use notify_types::{CommandId, SessionId, Timestamp, Uuid, consumed_event_id};

/// How many answers are kept (the oldest are forgotten first).
pub(crate) const ANSWERS_KEPT: usize = 4096;
/// How many one-second samples the rate chart keeps: five minutes.
pub(crate) const SAMPLES_KEPT: usize = 300;
/// How many scrub observations are kept.
pub(crate) const SCRUB_KEPT: usize = 64;

/// What the server answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AnswerKind {
    /// A completion appended (201).
    Accepted,
    /// A completion already journaled with the same bytes (200): nothing written.
    Duplicate,
    /// A completion whose ID was journaled with other bytes (409): nothing written.
    Collision,
    /// An acknowledgement journaled.
    Acknowledged,
}

impl AnswerKind {
    /// The word the pages use.
    pub(crate) fn word(self) -> &'static str {
        match self {
            Self::Accepted => "accepted",
            Self::Duplicate => "duplicate",
            Self::Collision => "collision",
            Self::Acknowledged => "acknowledged",
        }
    }
}

/// One answer.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Answer {
    pub(crate) at: Timestamp,
    pub(crate) session: SessionId,
    /// The command ID.
    pub(crate) key: Uuid,
    pub(crate) kind: AnswerKind,
    /// The frame the answer names (the original's, for a duplicate or collision).
    pub(crate) seq: Option<u64>,
    /// For a duplicate or a collision (which write no frame): the key of the last
    /// frame this server wrote in the session before answering (the completion it
    /// accepted, or the consumption an acknowledgement wrote), set when the answer is
    /// noted. The timeline places the answer after the later of that frame and the
    /// original (`seq`), reading that frame's seq when a page is rendered.
    pub(crate) wrote_before: Option<Uuid>,
}

impl Answer {
    /// The key of the frame this answer wrote, if it wrote one: an accepted
    /// completion's command ID, an acknowledgement's consumption event (derived from
    /// the command ID).
    pub(crate) fn frame_written(&self) -> Option<Uuid> {
        match self.kind {
            AnswerKind::Accepted => Some(self.key),
            AnswerKind::Acknowledged => {
                Some(*consumed_event_id(CommandId::from_uuid(self.key)).as_uuid())
            }
            AnswerKind::Duplicate | AnswerKind::Collision => None,
        }
    }
}

/// One second of the rate chart.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Sample {
    pub(crate) appends: u64,
    pub(crate) acks: u64,
}

/// One observation of the scrub: when its state or its count of clean passes changed.
#[derive(Debug, Clone)]
pub(crate) struct ScrubSeen {
    pub(crate) at: Timestamp,
    pub(crate) state: String,
    pub(crate) clean_passes: u64,
    pub(crate) damaged: bool,
}

/// The server's memory for the console.
#[derive(Debug, Default)]
pub(crate) struct Observed {
    answers: Mutex<VecDeque<Answer>>,
    acks: AtomicU64,
    accepted: AtomicU64,
    samples: Mutex<VecDeque<Sample>>,
    scrub: Mutex<VecDeque<ScrubSeen>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Observed {
    /// Notes an answer (a duplicate's or a collision's
    /// [`wrote_before`](Answer::wrote_before) is found among the answers kept).
    pub(crate) fn answer(&self, mut answer: Answer) {
        match answer.kind {
            AnswerKind::Acknowledged => self.acks.fetch_add(1, Ordering::Relaxed),
            AnswerKind::Accepted => self.accepted.fetch_add(1, Ordering::Relaxed),
            _ => 0,
        };
        let mut answers = lock(&self.answers);
        if matches!(answer.kind, AnswerKind::Duplicate | AnswerKind::Collision) {
            answer.wrote_before = answers
                .iter()
                .rev()
                .filter(|a| a.session == answer.session)
                .find_map(Answer::frame_written);
        }
        if answers.len() == ANSWERS_KEPT {
            answers.pop_front();
        }
        answers.push_back(answer);
    }

    /// The answers kept for `session`, oldest first.
    pub(crate) fn answers_for(&self, session: SessionId) -> Vec<Answer> {
        lock(&self.answers)
            .iter()
            .filter(|a| a.session == session)
            .copied()
            .collect()
    }

    /// Acknowledgements and accepted completions answered since start.
    pub(crate) fn totals(&self) -> (u64, u64) {
        (
            self.acks.load(Ordering::Relaxed),
            self.accepted.load(Ordering::Relaxed),
        )
    }

    /// Adds a second's sample.
    pub(crate) fn sample(&self, sample: Sample) {
        let mut samples = lock(&self.samples);
        if samples.len() == SAMPLES_KEPT {
            samples.pop_front();
        }
        samples.push_back(sample);
    }

    /// The samples, oldest first.
    pub(crate) fn samples(&self) -> Vec<Sample> {
        lock(&self.samples).iter().copied().collect()
    }

    /// Notes the scrub's status, if it changed since the last note.
    pub(crate) fn scrub(&self, seen: ScrubSeen) {
        let mut history = lock(&self.scrub);
        let same = history
            .back()
            .is_some_and(|l| l.state == seen.state && l.clean_passes == seen.clean_passes);
        if same {
            return;
        }
        if history.len() == SCRUB_KEPT {
            history.pop_front();
        }
        history.push_back(seen);
    }

    /// The scrub's history, newest first.
    pub(crate) fn scrub_history(&self) -> Vec<ScrubSeen> {
        lock(&self.scrub).iter().rev().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(session: SessionId, key: Uuid, kind: AnswerKind) -> Answer {
        Answer {
            at: Timestamp::UNIX_EPOCH,
            session,
            key,
            kind,
            seq: None,
            wrote_before: None,
        }
    }

    #[test]
    fn a_duplicate_knows_the_last_frame_written_before_it_without_a_read() {
        let o = Observed::default();
        let (s, other) = (SessionId::new(), SessionId::new());
        let (c1, c2) = (Uuid::new_v4(), Uuid::new_v4());
        o.answer(answer(s, Uuid::new_v4(), AnswerKind::Duplicate));
        o.answer(answer(s, c1, AnswerKind::Accepted));
        o.answer(answer(s, c1, AnswerKind::Duplicate));
        o.answer(answer(s, c1, AnswerKind::Acknowledged));
        o.answer(answer(other, c2, AnswerKind::Accepted));
        o.answer(answer(s, c2, AnswerKind::Collision));
        let kept: Vec<Option<Uuid>> = o.answers_for(s).iter().map(|a| a.wrote_before).collect();
        let consumed = *consumed_event_id(CommandId::from_uuid(c1)).as_uuid();
        assert_eq!(kept, [None, None, Some(c1), None, Some(consumed)]);
    }

    #[test]
    fn rings_are_bounded() {
        let o = Observed::default();
        for i in 0..(SAMPLES_KEPT + 10) {
            o.sample(Sample {
                appends: u64::try_from(i).unwrap_or(0),
                acks: 0,
            });
        }
        assert_eq!(o.samples().len(), SAMPLES_KEPT);
        assert_eq!(o.samples()[0].appends, 10);
        let s = SessionId::new();
        for _ in 0..(ANSWERS_KEPT + 1) {
            o.answer(Answer {
                at: Timestamp::UNIX_EPOCH,
                session: s,
                key: Uuid::nil(),
                kind: AnswerKind::Acknowledged,
                seq: None,
                wrote_before: None,
            });
        }
        assert_eq!(o.answers_for(s).len(), ANSWERS_KEPT);
        assert_eq!(o.totals().0, u64::try_from(ANSWERS_KEPT + 1).unwrap_or(0));
    }
}
