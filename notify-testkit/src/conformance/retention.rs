//! Session end, purge and tombstones: the retention half of the contract.
//!
//! These checks purge "every session ended before" a horizon, so each needs a backend
//! of its own (no other check's sessions in it): run them through
//! [`conformance_retention_tests!`](crate::conformance_retention_tests), whose setup is
//! evaluated afresh per check.

use notify_journal::{
    AppendError, BoxFuture, JournalBackend, JournalError, PurgeReport, SessionState, Tombstone,
    purge,
};
use notify_types::{
    CommandId, JournalRecord, LoopId, NotificationAbandoned, ProcessNotification, SessionEnded,
    SessionEvent, SessionId, Timestamp,
};

use super::support::{Check, CheckResult, altered, command_of, commands, join_all, mixed};
use crate::sample;

/// The names of every retention check, in [`run_retention`] order.
pub const RETENTION_CHECKS: &[&str] = &[
    "append_after_end_is_refused",
    "retries_after_end_get_the_truth",
    "purge_respects_the_horizon",
    "purge_leaves_a_tombstone",
    "append_after_purge_is_refused",
    "purge_runs_in_bounded_steps",
    "purge_interleaved_with_live_appends",
    "tombstones_drop_after_their_horizon",
];

/// Runs every retention check in [`RETENTION_CHECKS`] order on one backend of its own
/// (no other check's sessions in it; each check allows for what the ones before it
/// left).
///
/// # Errors
///
/// The first failing check's [`ConformanceError`](super::ConformanceError).
pub async fn run_retention<B: JournalBackend + ?Sized>(backend: &B) -> CheckResult {
    append_after_end_is_refused(backend).await?;
    retries_after_end_get_the_truth(backend).await?;
    purge_respects_the_horizon(backend).await?;
    purge_leaves_a_tombstone(backend).await?;
    append_after_purge_is_refused(backend).await?;
    purge_runs_in_bounded_steps(backend).await?;
    purge_interleaved_with_live_appends(backend).await?;
    tombstones_drop_after_their_horizon(backend).await
}

/// The end marker of `session`.
fn end_of(session: SessionId) -> JournalRecord {
    JournalRecord::from(notify_types::SessionEvent::from(SessionEnded::new(session)))
}

/// One nanosecond after `t` (the horizons are strict: "ended before").
fn just_after(t: Timestamp) -> Timestamp {
    Timestamp::from_nanosecond(t.as_nanosecond() + 1).unwrap_or(t)
}

impl Check {
    /// `session`'s state, which must be `Ended` with `last_seq`: its end time.
    async fn ended<B: JournalBackend + ?Sized>(
        self,
        backend: &B,
        session: SessionId,
        last_seq: u64,
    ) -> CheckResult<Timestamp> {
        let what = format!("session_state({session}) after its end");
        match self.ok(&what, backend.session_state(session).await)? {
            SessionState::Ended {
                ended_at,
                last_seq: got,
            } if got == last_seq => Ok(ended_at),
            other => Err(self.fail(format!(
                "{what}: got {other:?}, want Ended {{ last_seq: {last_seq}, .. }}"
            ))),
        }
    }

    /// `session`'s state, which must be `Purged` with a tombstone of `last_seq` frames.
    async fn purged<B: JournalBackend + ?Sized>(
        self,
        backend: &B,
        session: SessionId,
        last_seq: u64,
    ) -> CheckResult<Tombstone> {
        let what = format!("session_state({session}) after its purge");
        match self.ok(&what, backend.session_state(session).await)? {
            SessionState::Purged(t) if t.last_seq == last_seq && t.frames == last_seq => Ok(t),
            other => Err(self.fail(format!(
                "{what}: got {other:?}, want Purged with last_seq and frames {last_seq}"
            ))),
        }
    }

    /// An append that must be refused as `SessionEnded { purged }`.
    async fn refused_ended<B: JournalBackend + ?Sized>(
        self,
        backend: &B,
        session: SessionId,
        record: &JournalRecord,
        purged: bool,
    ) -> CheckResult {
        match backend.append(session, record.clone()).await {
            Err(AppendError::SessionEnded {
                session: s,
                purged: p,
            }) if s == session && p == purged => Ok(()),
            other => Err(self.fail(format!(
                "append of {} to {session} (ended, purged: {purged}): got {other:?}, want \
                 SessionEnded {{ purged: {purged} }}",
                record.type_name()
            ))),
        }
    }

    /// Reads of a purged session's log must be `Purged`, never frames.
    async fn reads_purged<B: JournalBackend + ?Sized>(
        self,
        backend: &B,
        session: SessionId,
        key: notify_types::Uuid,
    ) -> CheckResult {
        match backend.replay(session, 1, 16).await {
            Err(JournalError::Purged { session: s }) if s == session => {}
            other => {
                return Err(self.fail(format!(
                    "replay of purged {session}: got {other:?}, want Purged"
                )));
            }
        }
        match backend.lookup(session, key).await {
            Err(JournalError::Purged { session: s }) if s == session => Ok(()),
            other => Err(self.fail(format!(
                "lookup in purged {session}: got {other:?}, want Purged"
            ))),
        }
    }

    async fn purge_all<B: JournalBackend + ?Sized>(
        self,
        backend: &B,
        ended_before: Timestamp,
        step: usize,
    ) -> CheckResult<PurgeReport> {
        self.ok("purge", purge(backend, ended_before, step).await)
    }
}

/// Ends `session` after `records`: appends them, then the end marker at the next seq.
/// Returns the end marker's seq.
async fn fill_and_end<B: JournalBackend + ?Sized>(
    c: Check,
    backend: &B,
    session: SessionId,
    records: &[JournalRecord],
) -> CheckResult<u64> {
    for (seq, record) in (1..).zip(records) {
        c.append_new(backend, session, record, seq).await?;
    }
    let end = records.len() as u64 + 1;
    c.append_new(backend, session, &end_of(session), end)
        .await?;
    Ok(end)
}

/// After its end marker a session refuses every append of a new key — a command, a
/// lifecycle event, a consumption, an abandonment — as `SessionEnded`, writes nothing,
/// and stays readable; the end marker again is a duplicate, and so is a retry of a
/// record journaled before the end (see [`retries_after_end_get_the_truth`]). An
/// unknown session is live; a session may end with no other frame; another session is
/// untouched.
///
/// # Errors
///
/// A [`ConformanceError`](super::ConformanceError) describing the first violation.
pub async fn append_after_end_is_refused<B: JournalBackend + ?Sized>(backend: &B) -> CheckResult {
    let c = Check("append_after_end_is_refused");
    let (s, other) = (SessionId::new(), SessionId::new());
    c.eq(
        "session_state of an unknown session",
        &c.ok("session_state", backend.session_state(s).await)?,
        &SessionState::Live,
    )?;
    let records = mixed(s, 6);
    c.append_new(backend, other, &commands(other, 1)[0], 1)
        .await?;
    let end = fill_and_end(c, backend, s, &records).await?;
    c.ended(backend, s, end).await?;
    c.append_duplicate(backend, s, &end_of(s), end).await?;
    for record in new_keys(s) {
        c.refused_ended(backend, s, &record, false).await?;
    }
    for (seq, record) in (1..).zip(&records) {
        c.append_duplicate(backend, s, record, seq).await?;
    }
    c.last_seq(backend, s, end).await?;
    let mut whole = records.clone();
    whole.push(end_of(s));
    c.replay_equals(backend, s, &whole).await?;
    c.lookup(backend, s, records[0].key(), Some(1)).await?;
    c.lookup(backend, s, end_of(s).key(), Some(end)).await?;
    // A session that ends with no other frame.
    let empty = SessionId::new();
    fill_and_end(c, backend, empty, &[]).await?;
    c.ended(backend, empty, 1).await?;
    // The other session is live and takes appends.
    c.eq(
        "session_state of a live session",
        &c.ok("session_state", backend.session_state(other).await)?,
        &SessionState::Live,
    )?;
    c.append_new(backend, other, &commands(other, 1)[0], 2)
        .await
}

/// Records of every kind under keys `session` never journaled: a command, a lifecycle
/// event, a consumption and an abandonment.
fn new_keys(session: SessionId) -> Vec<JournalRecord> {
    let loop_id = LoopId::new();
    vec![
        sample::command(session, loop_id),
        sample::event(
            session,
            loop_id,
            notify_types::ProcessLifecycleKind::Completed,
        ),
        sample::consumed(session, loop_id, CommandId::new()),
        abandonment(session, loop_id, CommandId::new()),
    ]
}

fn abandonment(session: SessionId, loop_id: LoopId, cause: CommandId) -> JournalRecord {
    JournalRecord::from(SessionEvent::from(NotificationAbandoned::new(
        session, loop_id, cause,
    )))
}

/// A log of every record kind for `session`: a command, every lifecycle event and the
/// command's consumption ([`sample::one_of_each`]), then a second command and its
/// abandonment.
fn every_kind(session: SessionId) -> Vec<JournalRecord> {
    let loop_id = LoopId::new();
    let mut out = sample::one_of_each(session, loop_id);
    let second = ProcessNotification::new(sample::notification(session, loop_id));
    let cause = second.command_id();
    out.push(JournalRecord::Command(second));
    out.push(abandonment(session, loop_id, cause));
    out
}

/// The same key as `record` (journaled), with other bytes: a command with another
/// outcome, a lifecycle event with another handle, a consumption or abandonment by
/// another loop. `None` for the end marker, whose bytes follow from its key.
fn other_bytes(session: SessionId, record: &JournalRecord) -> Option<JournalRecord> {
    match record {
        JournalRecord::Command(c) => Some(command_of(altered(c.notification()))),
        JournalRecord::Event(SessionEvent::Lifecycle(m)) => {
            let mut m = m.clone();
            m.process_handle.push_str("-other");
            Some(JournalRecord::from(SessionEvent::Lifecycle(m)))
        }
        JournalRecord::Event(SessionEvent::NotificationConsumed(e)) => {
            Some(sample::consumed(session, LoopId::new(), e.cause()))
        }
        JournalRecord::Event(SessionEvent::NotificationAbandoned(e)) => {
            Some(abandonment(session, LoopId::new(), e.cause()))
        }
        _ => None,
    }
}

/// A retry, after the end, of a record journaled before it gets the truthful answer,
/// for every record kind: the identical bytes are a duplicate at the original seq,
/// other bytes under its key a collision naming the original seq, and only a key
/// never journaled is refused as `SessionEnded { purged: false }` — one at a time and
/// all in flight at once (a batching backend resolves them in one batch, the end
/// marker among them). Nothing is written and the session stays ended.
///
/// # Errors
///
/// A [`ConformanceError`](super::ConformanceError) describing the first violation.
pub async fn retries_after_end_get_the_truth<B: JournalBackend + ?Sized>(
    backend: &B,
) -> CheckResult {
    let c = Check("retries_after_end_get_the_truth");
    let s = SessionId::new();
    let records = every_kind(s);
    for (seq, record) in (1..).zip(&records) {
        c.append_new(backend, s, record, seq).await?;
    }
    // The end marker in flight with retries of identical and other bytes: whatever
    // their order, each retry is answered from the index.
    let end = records.len() as u64 + 1;
    let marker = end_of(s);
    let mut racing: Vec<BoxFuture<'_, CheckResult>> =
        vec![Box::pin(c.append_new(backend, s, &marker, end))];
    for (seq, record) in (1..).zip(&records) {
        racing.push(Box::pin(c.append_duplicate(backend, s, record, seq)));
        if let Some(other) = other_bytes(s, record) {
            racing.push(Box::pin(async move {
                c.append_collision(backend, s, &other, seq).await
            }));
        }
    }
    for result in join_all(racing).await {
        result?;
    }
    c.ended(backend, s, end).await?;

    // One at a time, then all in flight at once (the end marker's retry among them).
    for (seq, record) in (1..).zip(&records) {
        c.append_duplicate(backend, s, record, seq).await?;
        if let Some(other) = other_bytes(s, record) {
            c.append_collision(backend, s, &other, seq).await?;
        }
    }
    for record in new_keys(s) {
        c.refused_ended(backend, s, &record, false).await?;
    }
    let fresh = new_keys(s);
    let mut together: Vec<BoxFuture<'_, CheckResult>> =
        vec![Box::pin(c.append_duplicate(backend, s, &marker, end))];
    for (seq, record) in (1..).zip(&records) {
        together.push(Box::pin(c.append_duplicate(backend, s, record, seq)));
        if let Some(other) = other_bytes(s, record) {
            together.push(Box::pin(async move {
                c.append_collision(backend, s, &other, seq).await
            }));
        }
    }
    for record in &fresh {
        together.push(Box::pin(c.refused_ended(backend, s, record, false)));
    }
    for result in join_all(together).await {
        result?;
    }

    // Nothing was written: the log, its head and its end are as they were.
    c.ended(backend, s, end).await?;
    c.last_seq(backend, s, end).await?;
    let mut whole = records.clone();
    whole.push(end_of(s));
    c.replay_equals(backend, s, &whole).await?;
    for record in &fresh {
        c.lookup(backend, s, record.key(), None).await?;
    }
    Ok(())
}

/// Purge takes only sessions that ended strictly before the horizon, and never a live
/// session.
///
/// # Errors
///
/// A [`ConformanceError`](super::ConformanceError) describing the first violation.
pub async fn purge_respects_the_horizon<B: JournalBackend + ?Sized>(backend: &B) -> CheckResult {
    let c = Check("purge_respects_the_horizon");
    let (s, live) = (SessionId::new(), SessionId::new());
    let live_records = commands(live, 5);
    for (seq, r) in (1..).zip(&live_records) {
        c.append_new(backend, live, r, seq).await?;
    }
    let end = fill_and_end(c, backend, s, &commands(s, 3)).await?;
    let ended_at = c.ended(backend, s, end).await?;
    // (Sessions an earlier check of `run_retention` ended may go here too.)
    c.purge_all(backend, ended_at, 2).await?;
    c.ended(backend, s, end).await?;
    let report = c.purge_all(backend, just_after(ended_at), 2).await?;
    c.ensure(report.sessions >= 1 && report.frames >= end, || {
        format!("purge after the end took {report:?}, want at least this session's {end} frames")
    })?;
    c.purged(backend, s, end).await?;
    c.eq(
        "session_state of a live session after a purge",
        &c.ok("session_state", backend.session_state(live).await)?,
        &SessionState::Live,
    )?;
    c.replay_equals(backend, live, &live_records).await
}

/// A purged session leaves a tombstone (end time, purge time, last seq, frame count),
/// is still listed by `sessions()`, keeps its `last_seq`, and answers `Purged` to
/// replay and lookup.
///
/// # Errors
///
/// A [`ConformanceError`](super::ConformanceError) describing the first violation.
pub async fn purge_leaves_a_tombstone<B: JournalBackend + ?Sized>(backend: &B) -> CheckResult {
    let c = Check("purge_leaves_a_tombstone");
    let s = SessionId::new();
    let records = mixed(s, 9);
    let end = fill_and_end(c, backend, s, &records).await?;
    let ended_at = c.ended(backend, s, end).await?;
    c.purge_all(backend, Timestamp::MAX, 4).await?;
    let tombstone = c.purged(backend, s, end).await?;
    c.eq("tombstone's end time", &tombstone.ended_at, &ended_at)?;
    c.ensure(tombstone.purged_at >= ended_at, || {
        format!(
            "tombstone purged at {} before its end {ended_at}",
            tombstone.purged_at
        )
    })?;
    c.last_seq(backend, s, end).await?;
    let listed = c.sessions(backend).await?;
    c.ensure(listed.contains(&s), || {
        format!("sessions() does not list purged session {s}")
    })?;
    let paged = c.ok(
        "sessions_after",
        backend.sessions_after(None, usize::MAX).await,
    )?;
    c.ensure(paged.contains(&s), || {
        format!("sessions_after does not list purged session {s}")
    })?;
    c.reads_purged(backend, s, records[0].key()).await
}

/// After a purge every append is refused as `SessionEnded { purged: true }`, for
/// every record kind: a retry of an old ID with its original bytes, the same ID with
/// other bytes, a new ID, and the end marker — one at a time and all in flight at
/// once. Nothing starts a new log at seq 1.
///
/// # Errors
///
/// A [`ConformanceError`](super::ConformanceError) describing the first violation.
pub async fn append_after_purge_is_refused<B: JournalBackend + ?Sized>(backend: &B) -> CheckResult {
    let c = Check("append_after_purge_is_refused");
    let s = SessionId::new();
    let records = every_kind(s);
    let end = fill_and_end(c, backend, s, &records).await?;
    c.purge_all(backend, Timestamp::MAX, 64).await?;
    c.purged(backend, s, end).await?;
    let mut late: Vec<JournalRecord> = records.clone();
    late.extend(records.iter().filter_map(|r| other_bytes(s, r)));
    late.extend(new_keys(s));
    late.push(end_of(s));
    for record in &late {
        c.refused_ended(backend, s, record, true).await?;
    }
    let together: Vec<BoxFuture<'_, CheckResult>> = late
        .iter()
        .map(|record| -> BoxFuture<'_, CheckResult> {
            Box::pin(c.refused_ended(backend, s, record, true))
        })
        .collect();
    for result in join_all(together).await {
        result?;
    }
    c.last_seq(backend, s, end).await?;
    c.purged(backend, s, end).await.map(|_| ())
}

/// Purge steps are bounded: each removes at most `max_frames`; the first turns the
/// session `Purged` at once (no read answers a partly removed log); an unfinished purge
/// is finished first whatever the horizon; the last step says `finished`.
///
/// # Errors
///
/// A [`ConformanceError`](super::ConformanceError) describing the first violation.
pub async fn purge_runs_in_bounded_steps<B: JournalBackend + ?Sized>(backend: &B) -> CheckResult {
    let c = Check("purge_runs_in_bounded_steps");
    let s = SessionId::new();
    let records = commands(s, 24);
    let end = fill_and_end(c, backend, s, &records).await?;
    let first = c.ok("purge_step", backend.purge_step(Timestamp::MAX, 4).await)?;
    c.eq("first step's session", &first.session, &Some(s))?;
    c.ensure(first.frames_removed <= 4 && !first.finished, || {
        format!("first step of a 25-frame purge with max 4: {first:?}")
    })?;
    c.purged(backend, s, end).await?;
    c.reads_purged(backend, s, records[23].key()).await?;
    c.refused_ended(backend, s, &records[23], true).await?;
    let mut removed = first.frames_removed;
    let mut steps = 1;
    loop {
        // A horizon before every end: only the unfinished purge is due.
        let step = c.ok("purge_step", backend.purge_step(Timestamp::MIN, 4).await)?;
        if step.session.is_none() {
            return Err(c.fail(format!(
                "an unfinished purge was not continued ({removed} of {end} frames removed)"
            )));
        }
        c.eq("step's session", &step.session, &Some(s))?;
        c.ensure(step.frames_removed <= 4, || {
            format!(
                "a step removed {} frames, over its bound of 4",
                step.frames_removed
            )
        })?;
        removed += step.frames_removed;
        steps += 1;
        if step.finished {
            break;
        }
        c.ensure(steps < 100, || "purge never finished".to_owned())?;
    }
    c.eq("frames removed in all", &removed, &end)?;
    let idle = c.ok("purge_step", backend.purge_step(Timestamp::MAX, 4).await)?;
    c.eq("step after the purge finished", &idle.session, &None)?;
    c.purged(backend, s, end).await.map(|_| ())
}

/// A purge in small steps while appends to live sessions are in flight: every live
/// append succeeds, gap-free, and the live logs replay exactly; the purged session
/// ends up tombstoned whole.
///
/// # Errors
///
/// A [`ConformanceError`](super::ConformanceError) describing the first violation.
pub async fn purge_interleaved_with_live_appends<B: JournalBackend + ?Sized>(
    backend: &B,
) -> CheckResult {
    let c = Check("purge_interleaved_with_live_appends");
    let doomed = SessionId::new();
    let end = fill_and_end(c, backend, doomed, &commands(doomed, 120)).await?;
    let live: Vec<SessionId> = (0..4).map(|_| SessionId::new()).collect();
    let per_session = 30;
    let batches: Vec<Vec<JournalRecord>> = live.iter().map(|&s| commands(s, per_session)).collect();
    // Appends go one session at a time in order (so each session's expected log is
    // known), all four sessions concurrently with the purge.
    let mut futures: Vec<BoxFuture<'_, CheckResult>> = Vec::new();
    futures.push(Box::pin(async move {
        let report = c.purge_all(backend, Timestamp::MAX, 8).await?;
        c.ensure(report.sessions >= 1 && report.frames >= end, || {
            format!("interleaved purge: {report:?}")
        })
    }));
    for (&s, records) in live.iter().zip(&batches) {
        futures.push(Box::pin(async move {
            for (seq, record) in (1..).zip(records) {
                c.append_new(backend, s, record, seq).await?;
            }
            Ok(())
        }));
    }
    for result in join_all(futures).await {
        result?;
    }
    for (&s, records) in live.iter().zip(&batches) {
        c.replay_equals(backend, s, records).await?;
        c.eq(
            "live session's state",
            &c.ok("session_state", backend.session_state(s).await)?,
            &SessionState::Live,
        )?;
    }
    c.purged(backend, doomed, end).await.map(|_| ())
}

/// Tombstones are dropped only once their purge finished before the second horizon;
/// a dropped session is unknown again (live, empty, unlisted), so a late append would
/// start a new log — the documented trade-off of dropping tombstones.
///
/// # Errors
///
/// A [`ConformanceError`](super::ConformanceError) describing the first violation.
pub async fn tombstones_drop_after_their_horizon<B: JournalBackend + ?Sized>(
    backend: &B,
) -> CheckResult {
    let c = Check("tombstones_drop_after_their_horizon");
    let s = SessionId::new();
    let end = fill_and_end(c, backend, s, &commands(s, 3)).await?;
    c.purge_all(backend, Timestamp::MAX, 64).await?;
    let tombstone = c.purged(backend, s, end).await?;
    // Strictly before: this tombstone stays (earlier checks' may go).
    c.ok(
        "drop_tombstones",
        backend.drop_tombstones(tombstone.purged_at, 1024).await,
    )?;
    c.purged(backend, s, end).await?;
    let horizon = just_after(tombstone.purged_at);
    let dropped = c.ok(
        "drop_tombstones",
        backend.drop_tombstones(horizon, 1024).await,
    )?;
    c.ensure(dropped >= 1, || {
        format!("drop_tombstones after the horizon dropped {dropped}, want this session's")
    })?;
    c.eq(
        "session_state after its tombstone was dropped",
        &c.ok("session_state", backend.session_state(s).await)?,
        &SessionState::Live,
    )?;
    c.last_seq(backend, s, 0).await?;
    let listed = c.sessions(backend).await?;
    c.ensure(!listed.contains(&s), || {
        format!("sessions() still lists {s} after its tombstone was dropped")
    })?;
    let fresh = sample::command(s, LoopId::new());
    c.append_new(backend, s, &fresh, 1).await
}
