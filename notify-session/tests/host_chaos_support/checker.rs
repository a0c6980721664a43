//! The chaos test's invariants, checked after the run from the PostgreSQL journal
//! (replayed), the application's rows and the hosts' event logs. Pure: the
//! planted-failure tests (`planted.rs`) feed it histories with one violation each
//! and see it caught.

use std::collections::{BTreeMap, BTreeSet};

use notify_types::{CommandId, SessionId};

use super::log::{Event, HostLog};

/// The least share of the journal's notification and consumption frames whose
/// epoch a host logged (the rest, unjudged, are the few a kill cut off before their
/// log line, and accepts that straddled a takeover): below it, the epoch check
/// proves little.
pub(crate) const MIN_JUDGED_PERCENT: usize = 90;

/// A journal frame, as far as the checker cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Frame {
    /// A notification, under its command ID.
    Command(CommandId),
    /// The consumption of the notification with that command ID.
    Consumed(CommandId),
    /// Anything else.
    Other,
}

/// What the run left, for the checker.
#[derive(Debug, Default)]
pub(crate) struct History {
    /// Each host process's events, in the order it logged them.
    pub(crate) logs: Vec<HostLog>,
    /// Each session's journal, replayed: (seq, frame) in seq order.
    pub(crate) journal: BTreeMap<SessionId, Vec<(u64, Frame)>>,
    /// The notifications some host answered `Accepted` or `Duplicate`.
    pub(crate) answered: BTreeMap<CommandId, SessionId>,
    /// Answered notifications that a later retry found `Accepted` again.
    pub(crate) reaccepted: Vec<CommandId>,
    /// The sessions each running host reports owning at the end.
    pub(crate) owners: Vec<BTreeSet<SessionId>>,
    /// The sessions that must be owned at the end.
    pub(crate) live: BTreeSet<SessionId>,
    /// The sessions ended during the run: owned by no host at the end.
    pub(crate) ended: BTreeSet<SessionId>,
    /// The sessions whose consumers ack in transactions, writing application rows.
    pub(crate) transactional: BTreeSet<SessionId>,
    /// The application's rows: how many per command ID.
    pub(crate) app_rows: BTreeMap<CommandId, usize>,
}

/// Figures of a history.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Figures {
    /// Sessions opened or adopted under a later epoch than their first.
    pub(crate) takeovers: usize,
    /// Notifications a new owner found pending and redelivered.
    pub(crate) redelivered: usize,
    /// Notification and consumption frames whose epoch a host logged (checked for
    /// order).
    pub(crate) frames_with_epoch: usize,
    /// Notification and consumption frames in all.
    pub(crate) frames: usize,
    /// Consumptions checked against the application's rows.
    pub(crate) rows_checked: usize,
}

/// Checks every invariant; the figures, and every violation found.
pub(crate) fn check(h: &History) -> (Figures, Vec<String>) {
    let mut bad = Vec::new();
    let mut figures = Figures::default();
    journaled_once(h, &mut bad);
    acked_never_redelivered(h, &mut bad);
    pending_redelivered(h, &mut bad, &mut figures);
    epochs_in_order(h, &mut bad, &mut figures);
    judged_enough(&figures, &mut bad);
    owned_once(h, &mut bad);
    rows_once(h, &mut bad, &mut figures);
    for c in &h.reaccepted {
        bad.push(format!(
            "{c} was answered, and a retry was answered Accepted again"
        ));
    }
    (figures, bad)
}

fn events(h: &History) -> impl Iterator<Item = &Event> {
    h.logs.iter().flat_map(|l| &l.events).map(|l| &l.event)
}

/// Every notification answered `Accepted`/`Duplicate` is journaled once and consumed
/// once; no command is journaled twice anywhere.
fn journaled_once(h: &History, bad: &mut Vec<String>) {
    let mut commands: BTreeMap<CommandId, usize> = BTreeMap::new();
    let mut consumed: BTreeMap<CommandId, usize> = BTreeMap::new();
    for (s, frames) in &h.journal {
        let mut here: BTreeSet<CommandId> = BTreeSet::new();
        for (_, f) in frames {
            match f {
                Frame::Command(c) => {
                    here.insert(*c);
                    *commands.entry(*c).or_default() += 1;
                }
                Frame::Consumed(c) => *consumed.entry(*c).or_default() += 1,
                Frame::Other => {}
            }
        }
        for (_, f) in frames {
            if let Frame::Consumed(c) = f
                && !here.contains(c)
            {
                bad.push(format!("session {s}: {c} consumed but never journaled"));
            }
        }
    }
    for (c, n) in commands.iter().filter(|(_, n)| **n != 1) {
        bad.push(format!("notification {c} journaled {n} times"));
    }
    for (c, n) in consumed.iter().filter(|(_, n)| **n != 1) {
        bad.push(format!("notification {c} consumed {n} times"));
    }
    for c in h.answered.keys() {
        let journaled = commands.get(c).copied().unwrap_or(0);
        let consumed = consumed.get(c).copied().unwrap_or(0);
        if journaled != 1 {
            bad.push(format!(
                "{c} was answered but is journaled {journaled} times"
            ));
        }
        if consumed != 1 {
            bad.push(format!("{c} was answered but is consumed {consumed} times"));
        }
    }
}

/// No notification whose ack committed is delivered again: not later by the host
/// that acked it, and not by an epoch that restored the log after its consumption
/// was journaled. (Which epoch's ack committed the consumption is the journal's to
/// say: a host resumed past its lease may see its ack in flight answered as a
/// duplicate of the new owner's, and log it after the new owner's delivery.)
fn acked_never_redelivered(h: &History, bad: &mut Vec<String>) {
    for log in &h.logs {
        let mut acked = BTreeSet::new();
        for e in log.events.iter().map(|l| &l.event) {
            match e {
                Event::Acked { command, .. } => {
                    acked.insert(*command);
                }
                Event::Deliver { command, .. } if acked.contains(command) => {
                    bad.push(format!("{command} delivered again after its ack"));
                }
                _ => {}
            }
        }
    }
    let mut consumed_at: BTreeMap<(SessionId, CommandId), u64> = BTreeMap::new();
    for (s, frames) in &h.journal {
        for (seq, f) in frames {
            if let Frame::Consumed(c) = f {
                consumed_at.entry((*s, *c)).or_insert(*seq);
            }
        }
    }
    let mut restored_at: BTreeMap<(SessionId, u64), u64> = BTreeMap::new();
    for e in events(h) {
        if let Event::Open {
            session,
            epoch,
            last_seq,
            ..
        } = e
        {
            restored_at.insert((*session, *epoch), *last_seq);
        }
    }
    for e in events(h) {
        let Event::Deliver {
            session,
            epoch,
            command,
        } = e
        else {
            continue;
        };
        if let (Some(seq), Some(restored)) = (
            consumed_at.get(&(*session, *command)),
            restored_at.get(&(*session, *epoch)),
        ) && seq <= restored
        {
            bad.push(format!(
                "{command} was consumed at seq {seq} and delivered again under epoch \
                 {epoch}, which restored the log at seq {restored}"
            ));
        }
    }
}

/// Restore under each new epoch found exactly the notifications journaled and not
/// consumed by then, and the new owner delivered each of them (unless it lost the
/// session in turn, and a later epoch took them over).
fn pending_redelivered(h: &History, bad: &mut Vec<String>, figures: &mut Figures) {
    let mut first_epoch: BTreeMap<SessionId, u64> = BTreeMap::new();
    let mut last_epoch: BTreeMap<SessionId, u64> = BTreeMap::new();
    let mut opened: BTreeMap<(SessionId, u64), usize> = BTreeMap::new();
    let mut delivered: BTreeSet<(SessionId, u64, CommandId)> = BTreeSet::new();
    for e in events(h) {
        match e {
            Event::Open { session, epoch, .. } => {
                let f = first_epoch.entry(*session).or_insert(*epoch);
                *f = (*f).min(*epoch);
                let l = last_epoch.entry(*session).or_insert(*epoch);
                *l = (*l).max(*epoch);
                *opened.entry((*session, *epoch)).or_default() += 1;
            }
            Event::Deliver {
                session,
                epoch,
                command,
            } => {
                delivered.insert((*session, *epoch, *command));
            }
            _ => {}
        }
    }
    for ((s, e), n) in opened.iter().filter(|(_, n)| **n > 1) {
        bad.push(format!("session {s}: epoch {e} opened {n} times"));
    }
    for e in events(h) {
        let Event::Open {
            session: s,
            epoch,
            last_seq,
            pending,
        } = e
        else {
            continue;
        };
        if first_epoch[s] < *epoch {
            figures.takeovers += 1;
            figures.redelivered += pending.len();
        }
        // What restore should have found at last_seq.
        let frames = h.journal.get(s).map_or(&[][..], Vec::as_slice);
        let mut want: Vec<CommandId> = Vec::new();
        for (_, f) in frames.iter().filter(|(seq, _)| seq <= last_seq) {
            match f {
                Frame::Command(c) => want.push(*c),
                Frame::Consumed(c) => want.retain(|w| w != c),
                Frame::Other => {}
            }
        }
        if &want != pending {
            bad.push(format!(
                "session {s}: epoch {epoch} restored pending {pending:?} at seq {last_seq}, \
                 the journal had {want:?}"
            ));
        }
        let later = last_epoch[s] > *epoch;
        for c in pending {
            if !later && !delivered.contains(&(*s, *epoch, *c)) {
                bad.push(format!(
                    "session {s}: epoch {epoch} found {c} pending and never delivered it"
                ));
            }
        }
    }
}

/// Every frame whose epoch a host logged lies after the restore of its epoch and
/// before the restore of the next one: epochs never interleave, so a host that lost
/// a session wrote nothing after the new owner restored it.
///
/// A consumption can be claimed by two epochs: a host resumed past its lease sees
/// its ack in flight answered as a duplicate of the new owner's and logs `ACKED`
/// too. The journal does not record which epoch wrote a frame, so such a frame
/// passes if one of its claims is consistent (a stale write of a notification
/// only the stale host claims is still caught).
fn epochs_in_order(h: &History, bad: &mut Vec<String>, figures: &mut Figures) {
    let mut claims: BTreeMap<(SessionId, Frame), BTreeSet<u64>> = BTreeMap::new();
    let mut opens: BTreeMap<SessionId, Vec<(u64, u64)>> = BTreeMap::new();
    for e in events(h) {
        match e {
            Event::Accepted {
                session,
                epoch,
                command,
            } => {
                claims
                    .entry((*session, Frame::Command(*command)))
                    .or_default()
                    .insert(*epoch);
            }
            Event::Acked {
                session,
                epoch,
                command,
            } => {
                claims
                    .entry((*session, Frame::Consumed(*command)))
                    .or_default()
                    .insert(*epoch);
            }
            Event::Open {
                session,
                epoch,
                last_seq,
                ..
            } => opens.entry(*session).or_default().push((*epoch, *last_seq)),
            _ => {}
        }
    }
    for (s, frames) in &h.journal {
        figures.frames += frames.iter().filter(|(_, f)| *f != Frame::Other).count();
        let opens = opens.get(s).map_or(&[][..], Vec::as_slice);
        let mut highest: Option<(u64, u64)> = None;
        for (seq, f) in frames {
            let Some(epochs) = claims.get(&(*s, *f)) else {
                continue;
            };
            figures.frames_with_epoch += 1;
            let problems = |epoch: u64| out_of_order(*s, *seq, epoch, highest, opens);
            let epoch = epochs
                .iter()
                .rev()
                .copied()
                .find(|e| problems(*e).is_empty())
                .unwrap_or_else(|| {
                    let last = *epochs.last().unwrap();
                    bad.extend(problems(last));
                    last
                });
            if highest.is_none_or(|(e, _)| epoch >= e) {
                highest = Some((epoch, *seq));
            }
        }
    }
}

/// What is wrong with frame `seq` of session `s` having been written under `epoch`,
/// after the `highest` (epoch, seq) so far, given each epoch's restore point.
fn out_of_order(
    s: SessionId,
    seq: u64,
    epoch: u64,
    highest: Option<(u64, u64)>,
    opens: &[(u64, u64)],
) -> Vec<String> {
    let mut bad = Vec::new();
    if let Some((e, at)) = highest
        && epoch < e
    {
        bad.push(format!(
            "session {s}: seq {seq} written under epoch {epoch} after seq {at} under epoch {e}"
        ));
    }
    for (open_epoch, last_seq) in opens {
        if epoch < *open_epoch && seq > *last_seq {
            bad.push(format!(
                "session {s}: seq {seq} written under epoch {epoch} after epoch \
                 {open_epoch} restored the log at seq {last_seq}"
            ));
        }
        if epoch == *open_epoch && seq <= *last_seq {
            bad.push(format!(
                "session {s}: seq {seq} written under epoch {epoch} before that epoch \
                 restored the log at seq {last_seq}"
            ));
        }
    }
    bad
}

/// Enough frames were judged for the epoch check to mean something.
fn judged_enough(figures: &Figures, bad: &mut Vec<String>) {
    if figures.frames_with_epoch * 100 < figures.frames * MIN_JUDGED_PERCENT {
        bad.push(format!(
            "only {} of {} frames could be judged (their epoch logged): the floor is {}%",
            figures.frames_with_epoch, figures.frames, MIN_JUDGED_PERCENT
        ));
    }
}

/// Every live session is owned by exactly one host at the end, and every ended one
/// by none.
fn owned_once(h: &History, bad: &mut Vec<String>) {
    for s in &h.live {
        let n = h.owners.iter().filter(|o| o.contains(s)).count();
        if n != 1 {
            bad.push(format!("session {s} is owned by {n} hosts at the end"));
        }
    }
    for s in &h.ended {
        let n = h.owners.iter().filter(|o| o.contains(s)).count();
        if n != 0 {
            bad.push(format!(
                "ended session {s} is still served by {n} hosts at the end"
            ));
        }
    }
}

/// Every consumption of a transactional session has exactly one application row,
/// and every row its consumption: the row and the ack committed together, once.
fn rows_once(h: &History, bad: &mut Vec<String>, figures: &mut Figures) {
    let mut consumed: BTreeSet<CommandId> = BTreeSet::new();
    for s in &h.transactional {
        for (_, f) in h.journal.get(s).into_iter().flatten() {
            if let Frame::Consumed(c) = f {
                consumed.insert(*c);
                figures.rows_checked += 1;
                let rows = h.app_rows.get(c).copied().unwrap_or(0);
                if rows != 1 {
                    bad.push(format!(
                        "session {s}: {c} is consumed, with {rows} application rows"
                    ));
                }
            }
        }
    }
    for (c, rows) in &h.app_rows {
        if !consumed.contains(c) {
            bad.push(format!(
                "{c} has {rows} application rows and no consumption journaled"
            ));
        }
    }
}
