//! Ending, purging and starting over: the session-end and retention operations, and
//! the neighbour session they must leave alone, applied to the real system and the
//! model alike.

use std::collections::HashSet;

use notify_journal::{PurgeReport, purge_with};
use notify_session::{EndError, Ended, IfPending, Session};
use notify_testkit::fixture::FixtureBuilder;
use notify_types::{Notified, ProcessCompletionNotification, SessionId, Timestamp, ended_event_id};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

use crate::real::{Real, poll_then_drop};
use crate::reference::{MEnd, MState, Model};

/// `Session::end`, against the model's prediction; with `cancel`, a first call is
/// dropped after that many polls and a second one completes the end.
pub(crate) async fn end(
    real: &Real,
    model: &mut Model,
    abandon: bool,
    cancel: Option<usize>,
) -> Result<(), TestCaseError> {
    let how = if abandon {
        IfPending::Abandon
    } else {
        IfPending::Refuse
    };
    let want = model.end(abandon);
    let session = &real.fx.session;
    let first = match cancel {
        Some(polls) => poll_then_drop(session.end(how), polls).await,
        None => Some(session.end(how).await),
    };
    match first {
        Some(got) => {
            let got = ended(got, model)?;
            prop_assert_eq!(&got, &want, "end");
        }
        None => {
            // The cancelled call journaled its abandonments and the end marker as one
            // group, or none of it (if the group committed, perhaps without
            // broadcasting the marker); the second call finishes the end.
            let got = ended(session.end(how).await, model)?;
            let agree = match (&got, &want) {
                // The end was journaled, or found, by the cancelled call: the answer
                // is the marker's seq, whether the cancelled call had marked the handle
                // ended or not.
                (
                    MEnd::Ended {
                        seq,
                        abandoned,
                        already: true,
                    },
                    MEnd::Ended { seq: want_seq, .. },
                ) => abandoned.is_empty() && seq == want_seq,
                (
                    MEnd::Ended {
                        seq,
                        abandoned,
                        already: false,
                    },
                    MEnd::Ended {
                        seq: want_seq,
                        abandoned: want_abandoned,
                        already: false,
                    },
                ) => seq == want_seq && want_abandoned == abandoned,
                (got, want) => got == want,
            };
            prop_assert!(
                agree,
                "end after a cancelled end: {:?}, model {:?}",
                got,
                want
            );
            model
                .maybe_unbroadcast
                .insert(*ended_event_id(model.session_id).as_uuid());
        }
    }
    prop_assert_eq!(
        session.is_ended().await,
        model.handle_ended,
        "the handle says it ended"
    );
    Ok(())
}

/// `Session::end`'s answer, as the model writes it.
fn ended(got: Result<Ended, EndError>, model: &Model) -> Result<MEnd, TestCaseError> {
    match got {
        Ok(ended) => {
            prop_assert_eq!(ended.session_id, model.session_id);
            Ok(MEnd::Ended {
                seq: ended.seq,
                abandoned: ended.abandoned,
                already: ended.already,
            })
        }
        Err(EndError::Pending { count }) => Ok(MEnd::Pending { count }),
        Err(e) => Err(TestCaseError::fail(format!("end: {e:?}"))),
    }
}

/// A purge of every ended session in steps of at most `step` frames; with `cancel`,
/// a first purge dropped after that many polls, which the second one finishes; with
/// `race`, a neighbour notification journaled concurrently.
pub(crate) async fn purge(
    real: &mut Real,
    model: &mut Model,
    step: usize,
    cancel: Option<usize>,
    race: bool,
) -> Result<(), TestCaseError> {
    let due = model.purgeable();
    let want = PurgeReport {
        sessions: due.len() as u64,
        frames: due.iter().map(|&(_, frames)| frames).sum(),
        steps: 0,
    };
    let due: HashSet<SessionId> = due.into_iter().map(|(s, _)| s).collect();
    let journal = real.shared_journal();
    let mut steps = Vec::new();
    // What the first, cancelled purge did is unknown unless it finished.
    let mut exact = true;
    if let Some(polls) = cancel {
        let first = purge_with(journal.as_ref(), Timestamp::MAX, step, |s, _| {
            steps.push(*s)
        });
        match poll_then_drop(first, polls).await {
            Some(report) => {
                check_purge(&report.unwrap(), &want, true)?;
                model.purge();
            }
            None => exact = false,
        }
    }
    let rest = purge_with(journal.as_ref(), Timestamp::MAX, step, |s, _| {
        steps.push(*s)
    });
    let report = if race {
        let (session, n) = neighbour_session(real, model);
        let (report, notified) = tokio::join!(rest, session.notify_process_completion(n));
        neighbour_notified(real, model, notified).await?;
        report
    } else {
        rest.await
    };
    let report = report.unwrap();
    if model.purgeable().is_empty() {
        // The first purge finished everything: nothing was left to do.
        check_purge(&report, &PurgeReport::default(), true)?;
    } else {
        check_purge(&report, &want, exact)?;
    }
    model.purge();
    for s in steps {
        prop_assert!(
            s.frames_removed as usize <= step,
            "a purge step over its bound of {}: {:?}",
            step,
            s
        );
        prop_assert!(
            s.session.is_some_and(|id| due.contains(&id)),
            "a purge step on a session not due: {:?}",
            s
        );
    }
    Ok(())
}

/// A purge's report: exactly the sessions and frames due, or (after a cancelled purge
/// whose progress is unknown) no more than them.
fn check_purge(got: &PurgeReport, want: &PurgeReport, exact: bool) -> Result<(), TestCaseError> {
    let agree = if exact {
        (got.sessions, got.frames) == (want.sessions, want.frames)
    } else {
        got.sessions <= want.sessions && got.frames <= want.frames
    };
    prop_assert!(
        agree,
        "purge report {:?}, want {:?}{}",
        got,
        want,
        if exact { "" } else { " at most" }
    );
    prop_assert!(
        got.steps >= got.sessions,
        "a purge took fewer steps than sessions: {:?}",
        got
    );
    Ok(())
}

/// Once the session has ended, retires it and starts a fresh one in the same journal.
pub(crate) fn renew(real: &mut Real, model: &mut Model) {
    if model.refusal().is_none() {
        return;
    }
    real.renew();
    model.renew(real.fx.session_id(), real.fx.loop_ids.clone());
}

/// Drops the retired sessions' tombstones, unless the current session is purged.
pub(crate) async fn drop_tombstones(real: &Real, model: &mut Model) -> Result<(), TestCaseError> {
    if model.state == MState::Purged {
        return Ok(());
    }
    let want = model.drop_tombstones();
    let got = real
        .journal()
        .drop_tombstones(Timestamp::MAX, 1024)
        .await
        .unwrap();
    prop_assert_eq!(got, want, "tombstones dropped");
    Ok(())
}

/// The neighbour notifies a fresh notification.
pub(crate) async fn neighbour(real: &mut Real, model: &mut Model) -> Result<(), TestCaseError> {
    let (session, n) = neighbour_session(real, model);
    let notified = session.notify_process_completion(n).await;
    neighbour_notified(real, model, notified).await
}

/// The neighbour session (created on first use, and again after a crash) and a fresh
/// notification for it.
fn neighbour_session(
    real: &mut Real,
    model: &mut Model,
) -> (Session, ProcessCompletionNotification) {
    let fx = match &real.neighbour {
        Some(fx) => fx,
        None => {
            let fx = FixtureBuilder::new(1)
                .journal(real.shared_journal())
                .build()
                .unwrap();
            model.neighbours.push((fx.session_id(), 0));
            real.neighbour.insert(fx)
        }
    };
    (fx.session.clone(), fx.notification(0))
}

/// A neighbour notification is accepted, and journaled as the next frame of its own
/// sequence.
async fn neighbour_notified(
    real: &Real,
    model: &mut Model,
    notified: Result<Notified, notify_types::NotifyError>,
) -> Result<(), TestCaseError> {
    prop_assert!(
        matches!(notified, Ok(Notified::Accepted)),
        "the neighbour's notification: {:?}",
        notified
    );
    let (session, frames) = model.neighbours.last_mut().unwrap();
    *frames += 1;
    let last = real.journal().last_seq(*session).await.unwrap();
    prop_assert_eq!(last, *frames, "the neighbour's own sequence");
    Ok(())
}
