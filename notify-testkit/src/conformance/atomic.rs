//! Atomic groups ([`JournalBackend::append_all`]): a group commits whole, in order, at
//! consecutive seqs, or not at all — a collision, an ended session, an invalid record
//! or a moved head anywhere in it leaves the journal exactly as it was, also when the
//! group shares a group commit with other appenders' appends.

use notify_journal::{AppendError, AppendOutcome, BoxFuture, JournalBackend, SessionState};
use notify_types::{CommandId, JournalRecord, LoopId, SessionEnded, SessionEvent, SessionId};

use super::support::{Check, CheckResult, altered, command_of, commands, join_all};
use crate::sample;

/// The end marker of `session`.
fn end_of(session: SessionId) -> JournalRecord {
    JournalRecord::from(SessionEvent::from(SessionEnded::new(session)))
}

/// `n` outcomes of new frames from `first` on.
fn new_from(first: u64, n: usize) -> Vec<AppendOutcome> {
    (first..)
        .take(n)
        .map(|seq| AppendOutcome {
            seq,
            appended: true,
        })
        .collect()
}

impl Check {
    /// A group that must be refused, nothing written: `GroupRefused` at `index`, whose
    /// refusal `want` accepts; then the session must hold exactly `before`, no key of
    /// the group beyond them.
    async fn group_refused<B: JournalBackend + ?Sized>(
        self,
        backend: &B,
        session: SessionId,
        group: &[JournalRecord],
        index: usize,
        want: impl Fn(&AppendError) -> bool,
        before: &[JournalRecord],
    ) -> CheckResult {
        let what = format!("append_all of {} records to {session}", group.len());
        match backend.append_all(session, group.to_vec(), None).await {
            Err(AppendError::GroupRefused { index: i, source }) if i == index && want(&source) => {}
            other => {
                return Err(self.fail(format!(
                    "{what}: got {other:?}, want GroupRefused {{ index: {index}, .. }}"
                )));
            }
        }
        self.nothing_of(backend, session, group, before).await
    }

    /// `session` holds exactly `before`, and no key of `group` that is not in it.
    async fn nothing_of<B: JournalBackend + ?Sized>(
        self,
        backend: &B,
        session: SessionId,
        group: &[JournalRecord],
        before: &[JournalRecord],
    ) -> CheckResult {
        self.replay_equals(backend, session, before).await?;
        self.last_seq(backend, session, before.len() as u64).await?;
        for record in group {
            if !before.iter().any(|b| b.key() == record.key()) {
                self.lookup(backend, session, record.key(), None).await?;
            }
        }
        Ok(())
    }

    /// A group that must commit with exactly `want`.
    async fn group_commits<B: JournalBackend + ?Sized>(
        self,
        backend: &B,
        session: SessionId,
        group: &[JournalRecord],
        if_head: Option<u64>,
        want: &[AppendOutcome],
    ) -> CheckResult {
        let what = format!("append_all of {} records to {session}", group.len());
        let got = self.ok(
            &what,
            backend.append_all(session, group.to_vec(), if_head).await,
        )?;
        self.eq(&what, &got, &want.to_vec())
    }
}

/// A group commits its records in order at consecutive seqs after what the session
/// already holds; a record journaled before (or earlier in the group) is a duplicate
/// with its original seq; the identical group again is all duplicates; an empty group
/// writes nothing.
///
/// # Errors
///
/// A [`ConformanceError`](super::ConformanceError) describing the first violation.
pub async fn group_commits_whole_in_order<B: JournalBackend + ?Sized>(backend: &B) -> CheckResult {
    let c = Check("group_commits_whole_in_order");
    let s = SessionId::new();
    c.group_commits(backend, s, &[], None, &[]).await?;
    c.last_seq(backend, s, 0).await?;
    let first = commands(s, 2);
    for (seq, record) in (1..).zip(&first) {
        c.append_new(backend, s, record, seq).await?;
    }
    let fresh = commands(s, 3);
    let mut group = fresh.clone();
    let journaled = first.first().cloned().ok_or_else(|| c.fail("test bug"))?;
    group.insert(1, journaled);
    // The first record again, inside the group: a duplicate of the group's own frame.
    group.push(fresh.first().cloned().ok_or_else(|| c.fail("test bug"))?);
    let want = [
        new_from(3, 1),
        vec![AppendOutcome {
            seq: 1,
            appended: false,
        }],
        new_from(4, 2),
        vec![AppendOutcome {
            seq: 3,
            appended: false,
        }],
    ]
    .concat();
    c.group_commits(backend, s, &group, None, &want).await?;
    let all = [first.clone(), fresh.clone()].concat();
    c.replay_equals(backend, s, &all).await?;
    for (seq, record) in (1..).zip(&all) {
        c.lookup(backend, s, record.key(), Some(seq)).await?;
    }
    let again: Vec<AppendOutcome> = want
        .iter()
        .map(|o| AppendOutcome {
            appended: false,
            ..*o
        })
        .collect();
    c.group_commits(backend, s, &group, None, &again).await?;
    c.last_seq(backend, s, 5).await
}

/// A group with one record that collides (with a frame journaled before, or with a
/// record earlier in the group) is refused whole, naming that record, and writes
/// nothing: no frame, no index entry, no new session; the same group without it then
/// commits at the seqs the refused one would have taken.
///
/// # Errors
///
/// A [`ConformanceError`](super::ConformanceError) describing the first violation.
pub async fn group_with_a_collision_writes_nothing<B: JournalBackend + ?Sized>(
    backend: &B,
) -> CheckResult {
    let c = Check("group_with_a_collision_writes_nothing");
    let s = SessionId::new();
    let n = sample::notification(s, LoopId::new());
    let journaled = command_of(n.clone());
    c.append_new(backend, s, &journaled, 1).await?;
    let fresh = commands(s, 2);
    let clash = command_of(altered(&n));
    let group = [fresh.clone(), vec![clash]].concat();
    let key = journaled.key();
    c.group_refused(
        backend,
        s,
        &group,
        2,
        |e| matches!(e, AppendError::Collision { key: k, seq: 1 } if *k == key),
        std::slice::from_ref(&journaled),
    )
    .await?;
    c.group_commits(backend, s, &fresh, None, &new_from(2, 2))
        .await?;

    // A collision inside the group, on a session that had nothing: still nothing.
    let t = SessionId::new();
    let m = sample::notification(t, LoopId::new());
    let group = [
        commands(t, 1),
        vec![command_of(m.clone()), command_of(altered(&m))],
    ]
    .concat();
    let key = command_of(m.clone()).key();
    c.group_refused(
        backend,
        t,
        &group,
        2,
        |e| matches!(e, AppendError::Collision { key: k, .. } if *k == key),
        &[],
    )
    .await?;
    let sessions = c.sessions(backend).await?;
    c.ensure(!sessions.contains(&t), || {
        format!("sessions() lists {t}, whose only group was refused")
    })
}

/// A group to an ended session is refused (`SessionEnded`); a group that holds its
/// session's end marker with a record after it is refused at that record, and the
/// session stays live, as if the group had never been sent; a group ending with the
/// marker commits and ends the session.
///
/// # Errors
///
/// A [`ConformanceError`](super::ConformanceError) describing the first violation.
pub async fn group_to_an_ended_session_writes_nothing<B: JournalBackend + ?Sized>(
    backend: &B,
) -> CheckResult {
    let c = Check("group_to_an_ended_session_writes_nothing");
    let ended_by = |s: SessionId| move |e: &AppendError| matches!(e, AppendError::SessionEnded { session, purged: false } if *session == s);
    let s = SessionId::new();
    let before = commands(s, 2);
    for (seq, record) in (1..).zip(&before) {
        c.append_new(backend, s, record, seq).await?;
    }
    // The marker, then one more: refused at the record after the marker.
    let group = [commands(s, 1), vec![end_of(s)], commands(s, 1)].concat();
    c.group_refused(backend, s, &group, 2, ended_by(s), &before)
        .await?;
    let state = c.ok("session_state", backend.session_state(s).await)?;
    c.eq(
        "session_state after a refused ending group",
        &state,
        &SessionState::Live,
    )?;
    // Still live: an append goes on at the next seq, and a group ending with the
    // marker commits whole and ends the session.
    let more = commands(s, 1);
    c.append_new(backend, s, &more[0], 3).await?;
    let group = [commands(s, 2), vec![end_of(s)]].concat();
    c.group_commits(backend, s, &group, None, &new_from(4, 3))
        .await?;
    match c.ok("session_state", backend.session_state(s).await)? {
        SessionState::Ended { last_seq: 6, .. } => {}
        other => {
            return Err(c.fail(format!(
                "session_state after a group ending the session: got {other:?}, want Ended \
                 {{ last_seq: 6, .. }}"
            )));
        }
    }
    // Ended: a group of new records is refused at its first.
    let all = [before, more, group].concat();
    let late = commands(s, 2);
    c.group_refused(backend, s, &late, 0, ended_by(s), &all)
        .await
}

/// A group with a record that fails the checks every append runs (invalid, naming
/// another session) is refused at that record before anything is written.
///
/// # Errors
///
/// A [`ConformanceError`](super::ConformanceError) describing the first violation.
pub async fn group_with_an_invalid_record_writes_nothing<B: JournalBackend + ?Sized>(
    backend: &B,
) -> CheckResult {
    let c = Check("group_with_an_invalid_record_writes_nothing");
    let s = SessionId::new();
    let invalid = sample::consumed(s, LoopId::NIL, CommandId::new());
    let group = [commands(s, 2), vec![invalid]].concat();
    c.group_refused(
        backend,
        s,
        &group,
        2,
        |e| matches!(e, AppendError::Invalid(_)),
        &[],
    )
    .await?;
    let other = SessionId::new();
    let group = [commands(s, 1), commands(other, 1)].concat();
    c.group_refused(
        backend,
        s,
        &group,
        1,
        |e| matches!(e, AppendError::SessionMismatch { record, .. } if *record == other),
        &[],
    )
    .await
}

/// A group with an expected head commits only if its first new frame follows that
/// head: after another append moved the log on it is `HeadMoved`, nothing written;
/// with the head read again it commits.
///
/// # Errors
///
/// A [`ConformanceError`](super::ConformanceError) describing the first violation.
pub async fn group_with_a_stale_head_writes_nothing<B: JournalBackend + ?Sized>(
    backend: &B,
) -> CheckResult {
    let c = Check("group_with_a_stale_head_writes_nothing");
    let s = SessionId::new();
    let before = commands(s, 2);
    for (seq, record) in (1..).zip(&before) {
        c.append_new(backend, s, record, seq).await?;
    }
    let group = commands(s, 2);
    match backend.append_all(s, group.clone(), Some(1)).await {
        Err(AppendError::HeadMoved {
            session,
            expected: 1,
            found: 2,
        }) if session == s => {}
        other => {
            return Err(c.fail(format!(
                "append_all expecting head 1 of a session at 2: got {other:?}, want HeadMoved \
                 {{ expected: 1, found: 2 }}"
            )));
        }
    }
    c.nothing_of(backend, s, &group, &before).await?;
    c.group_commits(backend, s, &group, Some(2), &new_from(3, 2))
        .await
}

/// Groups in flight together with plain appends to the same sessions (so a backend
/// that group-commits resolves them in one batch): every plain append and every
/// clean group commits, a group with a collision writes nothing and the others are
/// untouched; each committed group holds consecutive seqs; each session's log is
/// gap-free and holds exactly what was committed.
///
/// # Errors
///
/// A [`ConformanceError`](super::ConformanceError) describing the first violation.
pub async fn concurrent_groups_commit_whole_or_not_at_all<B: JournalBackend + ?Sized>(
    backend: &B,
) -> CheckResult {
    const SESSIONS: usize = 4;
    const SINGLES: usize = 4;
    const GROUP: usize = 3;
    let c = Check("concurrent_groups_commit_whole_or_not_at_all");
    let sessions: Vec<SessionId> = (0..SESSIONS).map(|_| SessionId::new()).collect();
    let mut journaled = Vec::new();
    for &s in &sessions {
        let n = sample::notification(s, LoopId::new());
        c.append_new(backend, s, &command_of(n.clone()), 1).await?;
        journaled.push(n);
    }
    enum Work {
        One(SessionId, JournalRecord),
        Group(SessionId, Vec<JournalRecord>, bool),
    }
    let mut work = Vec::new();
    for (&s, n) in sessions.iter().zip(&journaled) {
        for record in commands(s, SINGLES) {
            work.push(Work::One(s, record));
        }
        work.push(Work::Group(s, commands(s, GROUP), true));
        let bad = [commands(s, GROUP - 1), vec![command_of(altered(n))]].concat();
        work.push(Work::Group(s, bad, false));
    }
    // Interleave sessions and kinds, so every batch mixes them.
    work.reverse();
    type Answer = Result<Vec<AppendOutcome>, AppendError>;
    let futures: Vec<BoxFuture<'_, Answer>> = work
        .iter()
        .map(|w| match w {
            Work::One(s, record) => {
                let append = backend.append(*s, record.clone());
                Box::pin(async move { append.await.map(|o| vec![o]) }) as BoxFuture<'_, Answer>
            }
            Work::Group(s, group, _) => backend.append_all(*s, group.clone(), None),
        })
        .collect();
    let answers = join_all(futures).await;
    for &s in &sessions {
        let mut committed = vec![1u64];
        let mut keys = Vec::new();
        for (w, answer) in work.iter().zip(&answers) {
            match w {
                Work::One(ws, record) if *ws == s => {
                    let outcomes = c.ok("a plain append beside groups", answer.clone())?;
                    c.ensure(outcomes.iter().all(|o| o.appended), || {
                        format!("plain append of a new key: {outcomes:?}")
                    })?;
                    committed.extend(outcomes.iter().map(|o| o.seq));
                    keys.push(record.key());
                }
                Work::Group(ws, group, true) if *ws == s => {
                    let outcomes = c.ok("a clean group beside other appends", answer.clone())?;
                    let seqs: Vec<u64> = outcomes.iter().map(|o| o.seq).collect();
                    let first = seqs.first().copied().unwrap_or(0);
                    c.eq(
                        "a committed group's seqs",
                        &seqs,
                        &(first..).take(GROUP).collect::<Vec<_>>(),
                    )?;
                    committed.extend(seqs);
                    keys.extend(group.iter().map(JournalRecord::key));
                }
                Work::Group(ws, group, false) if *ws == s => {
                    c.ensure(
                        matches!(
                            answer,
                            Err(AppendError::GroupRefused { index, source })
                                if *index == GROUP - 1
                                    && matches!(**source, AppendError::Collision { seq: 1, .. })
                        ),
                        || format!("a group with a collision: got {answer:?}"),
                    )?;
                    // Its last record is the journaled key's clash: the others are new.
                    for record in group.iter().take(GROUP - 1) {
                        c.lookup(backend, s, record.key(), None).await?;
                    }
                }
                _ => {}
            }
        }
        committed.sort_unstable();
        let total = 1 + SINGLES + GROUP;
        c.eq(
            "the seqs committed",
            &committed,
            &(1..=total as u64).collect::<Vec<_>>(),
        )?;
        c.last_seq(backend, s, total as u64).await?;
        let frames = c.ok("replay_all", notify_journal::replay_all(backend, s).await)?;
        let mut got: Vec<_> = frames.iter().skip(1).map(|(_, r)| r.key()).collect();
        got.sort_unstable();
        keys.sort_unstable();
        c.eq("the keys in the log", &got, &keys)?;
    }
    Ok(())
}
