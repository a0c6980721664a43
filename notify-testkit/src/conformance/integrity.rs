//! The integrity checks every backend passes: damage behind its back — a frame whose
//! bytes changed, a frame that went missing — is named on every read, never answered as
//! data. They need a way to do the damage: [`Tamper`].

use notify_journal::{AppendError, BoxFuture, JournalBackend, JournalError, replay_all};
use notify_types::SessionId;

use super::support::{Check, CheckResult, mixed};

/// Damage to what a backend stored, done behind its back as a failing disk or a stray
/// `UPDATE` would: what the integrity checks need beyond [`JournalBackend`].
pub trait Tamper {
    /// Changes the stored bytes of frame `seq` of `session`, leaving its stored
    /// checksum, index entry and the session's head as they were.
    fn damage_frame(&self, session: SessionId, seq: u64) -> BoxFuture<'_, Result<(), String>>;

    /// Removes frame `seq` of `session` from storage, leaving its index entry and the
    /// session's head as they were.
    fn remove_frame(&self, session: SessionId, seq: u64) -> BoxFuture<'_, Result<(), String>>;
}

/// The names of the integrity checks [`run_integrity`] runs, in order.
pub const INTEGRITY_CHECKS: &[&str] = &["damaged_frame_is_named", "short_log_is_named"];

/// Runs every integrity check.
///
/// # Errors
///
/// The first failing check's [`ConformanceError`](super::ConformanceError).
pub async fn run_integrity<B: JournalBackend + Tamper + ?Sized>(backend: &B) -> CheckResult {
    damaged_frame_is_named(backend).await?;
    short_log_is_named(backend).await
}

fn is_corrupt_at(result: &Result<impl Sized, JournalError>, session: SessionId, seq: u64) -> bool {
    matches!(result, Err(JournalError::Corrupt { session: s, seq: q, .. }) if *s == session && *q == seq)
}

/// A frame whose bytes changed is [`JournalError::Corrupt`] naming its session and seq
/// on replay (frames before it still replay), `replay_all` fails, a lookup of its key
/// answers its seq or `Corrupt` (never another answer), and a re-append of its record
/// is refused with [`AppendError::Corrupt`] — never a second frame, never a collision
/// with damaged bytes.
///
/// # Errors
///
/// A [`ConformanceError`](super::ConformanceError) naming what was wrong.
pub async fn damaged_frame_is_named<B: JournalBackend + Tamper + ?Sized>(
    backend: &B,
) -> CheckResult {
    let c = Check("damaged_frame_is_named");
    let s = SessionId::new();
    let records = mixed(s, 3);
    for (seq, r) in (1..).zip(&records) {
        c.append_new(backend, s, r, seq).await?;
    }
    c.ok("damage frame 2", backend.damage_frame(s, 2).await)?;
    let replayed = backend.replay(s, 1, 10).await;
    c.ensure(is_corrupt_at(&replayed, s, 2), || {
        format!("replay after frame 2 was damaged: got {replayed:?}, want Corrupt at seq 2")
    })?;
    let first = c.ok("replay of frame 1 alone", backend.replay(s, 1, 1).await)?;
    c.eq("frames before the damage", &first.len(), &1)?;
    let all = replay_all(backend, s).await;
    c.ensure(is_corrupt_at(&all, s, 2), || {
        format!("replay_all: got {all:?}, want Corrupt at seq 2")
    })?;
    let key = records[1].key();
    match backend.lookup(s, key).await {
        Ok(Some(2)) | Err(JournalError::Corrupt { .. }) => {}
        other => return Err(c.fail(format!("lookup of the damaged frame's key: got {other:?}"))),
    }
    match backend.append(s, records[1].clone()).await {
        Err(AppendError::Corrupt { session, .. }) if session == s => {}
        other => {
            return Err(c.fail(format!(
                "re-append of the damaged frame's record: got {other:?}, want AppendError::Corrupt"
            )));
        }
    }
    c.last_seq(backend, s, 3).await
}

/// A log with a frame missing is never answered short: replay across the gap is
/// [`JournalError::Corrupt`] naming the first missing seq, whether the gap is inside the
/// page or at its end (a page shorter than asked must end at the head).
///
/// # Errors
///
/// A [`ConformanceError`](super::ConformanceError) naming what was wrong.
pub async fn short_log_is_named<B: JournalBackend + Tamper + ?Sized>(backend: &B) -> CheckResult {
    let c = Check("short_log_is_named");
    let s = SessionId::new();
    let records = mixed(s, 4);
    for (seq, r) in (1..).zip(&records) {
        c.append_new(backend, s, r, seq).await?;
    }
    c.ok("remove frame 2", backend.remove_frame(s, 2).await)?;
    for from in [1, 2] {
        let got = backend.replay(s, from, 10).await;
        c.ensure(is_corrupt_at(&got, s, 2), || {
            format!(
                "replay from {from} across a missing frame 2: got {got:?}, want Corrupt at seq 2"
            )
        })?;
    }
    let after = c.ok("replay from 3", backend.replay(s, 3, 10).await)?;
    c.eq("frames after the gap", &after.len(), &2)?;
    c.ok("remove frame 4", backend.remove_frame(s, 4).await)?;
    let tail = backend.replay(s, 3, 10).await;
    c.ensure(is_corrupt_at(&tail, s, 4), || {
        format!("replay of a log whose last frame is gone: got {tail:?}, want Corrupt at seq 4")
    })?;
    let all = replay_all(backend, s).await;
    c.ensure(all.is_err(), || {
        format!("replay_all of a short log: got {all:?}")
    })
}

impl Tamper for crate::MemoryJournal {
    fn damage_frame(&self, session: SessionId, seq: u64) -> BoxFuture<'_, Result<(), String>> {
        let done = self
            .raw_frame(session, seq)
            .map(|mut bytes| {
                if let Some(b) = bytes.last_mut() {
                    *b ^= 0x01;
                }
                self.corrupt_frame(session, seq, bytes)
            })
            .unwrap_or(false);
        Box::pin(std::future::ready(if done {
            Ok(())
        } else {
            Err(format!("no frame {seq} of {session}"))
        }))
    }

    fn remove_frame(&self, session: SessionId, seq: u64) -> BoxFuture<'_, Result<(), String>> {
        let done = crate::MemoryJournal::remove_frame(self, session, seq);
        Box::pin(std::future::ready(if done {
            Ok(())
        } else {
            Err(format!("no frame {seq} of {session}"))
        }))
    }
}
