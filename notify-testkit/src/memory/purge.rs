//! Purge steps of the [`MemoryJournal`]: an unfinished purge first, else the first
//! ended session due.

use notify_journal::{PurgeStep, Tombstone};
use notify_types::Timestamp;

use super::MemoryJournal;

impl MemoryJournal {
    /// One purge step: an unfinished purge first, else the first ended session due.
    pub(super) fn purge_now(&self, ended_before: Timestamp, max_frames: usize) -> PurgeStep {
        let mut sessions = self.lock();
        let unfinished = sessions
            .iter()
            .find(|(_, log)| log.tombstone.is_some() && !log.frames.is_empty())
            .map(|(s, _)| *s);
        let due = unfinished.or_else(|| {
            sessions
                .iter()
                .find(|(_, log)| {
                    log.tombstone.is_none() && log.ended_at.is_some_and(|t| t < ended_before)
                })
                .map(|(s, _)| *s)
        });
        let Some((session, log)) = due.and_then(|s| sessions.get_mut(&s).map(|log| (s, log)))
        else {
            return PurgeStep::IDLE;
        };
        if log.tombstone.is_none() {
            log.tombstone = Some(Tombstone {
                ended_at: log.ended_at.unwrap_or_else(Timestamp::now),
                purged_at: Timestamp::now(),
                last_seq: log.head,
                frames: log.head,
            });
        }
        let doomed: Vec<u64> = log.frames.keys().copied().take(max_frames.max(1)).collect();
        for seq in &doomed {
            log.frames.remove(seq);
        }
        log.index.retain(|_, seq| log.frames.contains_key(seq));
        PurgeStep {
            session: Some(session),
            frames_removed: doomed.len() as u64,
            finished: log.frames.is_empty(),
        }
    }
}
