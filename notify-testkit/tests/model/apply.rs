//! One operation, applied to the real system and the model alike.

use notify_session::SessionReceived;
use notify_testkit::sample;
use notify_types::{
    LoopId, ProcessLifecycleKind, ProcessLifecycleState, ProcessTerminalReason, SessionId,
    consumed_event_id,
};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

use crate::ops::{Change, Op, Refusal};
use crate::real::{
    Real, ack, crash, declare_lost, fresh, notify, pick_from, poll_then_drop, publish, recv,
};
use crate::reference::{MProcess, Model, Outcome};
use crate::retention::{drop_tombstones, end, neighbour, purge, renew};
use crate::txack::{tx_ack, tx_ack_crash};
use crate::{CAPACITY, LOOPS};

pub(crate) async fn apply(
    op: &Op,
    real: &mut Real,
    model: &mut Model,
) -> Result<(), TestCaseError> {
    match *op {
        Op::NotifyNew { lp } => {
            let n = fresh(model, lp, model.issued.len());
            notify(real, model, n).await?;
        }
        Op::Retry { pick } => {
            if let Some(n) = pick_from(&model.issued, pick).cloned() {
                notify(real, model, n).await?;
            }
        }
        Op::Reuse { pick, change } => {
            if let Some(mut n) = pick_from(&model.issued, pick).cloned() {
                match change {
                    Change::Handle => n.process_handle.push_str("-other"),
                    Change::Loop => {
                        let other = (model.loop_index(n.loop_id) + 1) % LOOPS;
                        n.loop_id = model.loop_ids[other];
                    }
                    Change::State => {
                        (n.state, n.reason) = if n.state == ProcessLifecycleState::Killed {
                            (ProcessLifecycleState::Failed, ProcessTerminalReason::Failed)
                        } else {
                            (ProcessLifecycleState::Killed, ProcessTerminalReason::Killed)
                        };
                    }
                }
                let got = notify(real, model, n).await?;
                prop_assert!(
                    matches!(got, Outcome::Collision { .. } | Outcome::Ended { .. }),
                    "reuse answered {:?}",
                    got
                );
            }
        }
        Op::RecvAck { lp } => {
            if let Some(received) = recv(real, model, lp).await? {
                ack(real, model, lp, received).await?;
            }
        }
        Op::RecvDrop { lp } => drop(recv(real, model, lp).await?),
        Op::Hold { lp } => {
            if real.held[lp].is_none()
                && let Some(received) = recv(real, model, lp).await?
            {
                model.loops[lp].held = Some(received.command_id());
                real.held[lp] = Some(received);
            }
        }
        Op::Release { lp, ack: acking } => {
            if let Some(received) = real.held[lp].take() {
                if acking {
                    ack(real, model, lp, received).await?;
                } else {
                    model.loops[lp].held = None;
                    drop(received);
                }
            }
        }
        Op::Fill { lp } => {
            for _ in 0..=CAPACITY {
                let n = fresh(model, lp, model.issued.len());
                if notify(real, model, n).await? != Outcome::Accepted {
                    break;
                }
            }
        }
        Op::Crash => crash(real, model).await?,
        Op::Shutdown { lp } => {
            prop_assert!(real.fx.session.shutdown_loop(model.loop_ids[lp]).await);
            model.loops[lp].closed = true;
        }
        Op::Start { lp } => {
            let mut m = sample::lifecycle(
                model.session_id,
                model.loop_ids[lp],
                ProcessLifecycleKind::Started,
            );
            m.process_handle = format!("proc-{}", model.processes.len());
            model.processes.push(MProcess {
                started: m.clone(),
                completed: None,
                terminal: false,
                last_seq: 0,
            });
            publish(real, model, m).await?;
        }
        Op::RetryStart { pick } => {
            if let Some(p) = pick_from(&model.processes, pick) {
                let m = p.started.clone();
                publish(real, model, m).await?;
            }
        }
        Op::Complete { pick } => {
            if !model.processes.is_empty() {
                let i = pick % model.processes.len();
                let p = &mut model.processes[i];
                let m = p.completed.get_or_insert_with(|| {
                    let mut m = sample::lifecycle(
                        p.started.session_id,
                        p.started.loop_id,
                        ProcessLifecycleKind::Completed,
                    );
                    m.process_handle = p.started.process_handle.clone();
                    m.origin_execution_id = p.started.origin_execution_id;
                    m
                });
                let m = m.clone();
                publish(real, model, m).await?;
            }
        }
        Op::DeclareLost { pick } => {
            if let Some(orphan) = pick_from(&real.orphans, pick).cloned() {
                declare_lost(real, model, &orphan).await?;
            }
        }
        Op::Refused { kind } => {
            let mut n = fresh(model, 0, model.issued.len());
            let want = match kind {
                Refusal::Foreign => {
                    n.loop_id = real.foreign;
                    Outcome::Unsupported
                }
                Refusal::UnknownLoop => {
                    n.loop_id = LoopId::new();
                    Outcome::LoopNotFound
                }
                Refusal::Invalid => {
                    n.process_handle = String::new();
                    Outcome::Invalid
                }
                Refusal::OtherSession => {
                    n.session_id = SessionId::new();
                    Outcome::OwnerMismatch
                }
            };
            let got = Outcome::of(&real.fx.session.notify_process_completion(n).await);
            prop_assert_eq!(got, want);
        }
        Op::RaceSame { lp } => {
            let n = fresh(model, lp, model.issued.len());
            let mut want = [model.notify(&n), model.notify(&n)];
            let session = &real.fx.session;
            let (a, b) = tokio::join!(
                session.notify_process_completion(n.clone()),
                session.notify_process_completion(n)
            );
            let mut got = [Outcome::of(&a), Outcome::of(&b)];
            got.sort_by_key(|o| format!("{o:?}"));
            want.sort_by_key(|o| format!("{o:?}"));
            prop_assert_eq!(got, want);
        }
        Op::RaceAckRetry { lp } => {
            if let Some(received) = recv(real, model, lp).await? {
                let id = received.command_id();
                let n = received.completion().clone();
                let (acked, retried) =
                    tokio::join!(received.ack(), real.fx.session.notify_process_completion(n));
                prop_assert!(acked.is_ok(), "ack of {id}: {acked:?}");
                prop_assert_eq!(Outcome::of(&retried), Outcome::Duplicate);
                real.acked.insert(id);
                model.ack(lp, id);
            }
        }
        Op::CancelNotify { lp, polls } => {
            let n = fresh(model, lp, model.issued.len());
            // Its answer, if it finished, is checked through the retry's.
            let _ =
                poll_then_drop(real.fx.session.notify_process_completion(n.clone()), polls).await;
            let want = model.notify(&n);
            let got = Outcome::of(&real.fx.session.notify_process_completion(n).await);
            // The cancelled attempt may have been accepted already.
            if !(want == Outcome::Accepted && got == Outcome::Duplicate) {
                prop_assert_eq!(got, want);
            }
        }
        Op::CancelAck { lp, polls } => {
            if let Some(received) = recv(real, model, lp).await? {
                let id = received.command_id();
                if let Some(result) = poll_then_drop(received.ack(), polls).await {
                    prop_assert!(result.is_ok(), "ack of {id}: {result:?}");
                    real.acked.insert(id);
                    model.ack(lp, id);
                    return Ok(());
                }
                // Not acknowledged (the ack never returned): it comes back first.
                let again = recv(real, model, lp).await?;
                prop_assert_eq!(again.as_ref().map(SessionReceived::command_id), Some(id));
                model
                    .maybe_unbroadcast
                    .insert(*consumed_event_id(id).as_uuid());
                ack(real, model, lp, again.unwrap()).await?;
            }
        }
        Op::Neighbour => neighbour(real, model).await?,
        Op::End { abandon, cancel } => end(real, model, abandon, cancel).await?,
        Op::Purge { step, cancel, race } => purge(real, model, step, cancel, race).await?,
        Op::Renew => renew(real, model),
        Op::DropTombstones => drop_tombstones(real, model).await?,
        Op::TxAck { lp, fail } => tx_ack(real, model, lp, fail).await?,
        Op::TxAckCrash { lp, polls } => tx_ack_crash(real, model, lp, polls).await?,
    }
    Ok(())
}
