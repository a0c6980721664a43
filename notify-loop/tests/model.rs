//! Model-based test: random sequences of deliver / recv / ack / drop-without-ack run
//! against a real loop and a plain reference model, compared after every step.

use std::collections::VecDeque;
use std::time::Duration;

use notify_loop::{Delivery, LoopConfig, Received, spawn};
use notify_types::{
    CommandId, LoopId, ProcessCompletionNotification, ProcessLifecycleState, ProcessNotification,
    ProcessTerminalReason, SessionId, StopCause,
};
use proptest::prelude::*;

const POOL: usize = 6;
const CAPACITY: usize = 3;
const MEMORY: usize = 2;

#[derive(Debug, Clone)]
enum Op {
    Deliver(usize),
    Recv,
    Ack(usize),
    Drop(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0..POOL).prop_map(Op::Deliver),
        2 => Just(Op::Recv),
        2 => any::<usize>().prop_map(Op::Ack),
        1 => any::<usize>().prop_map(Op::Drop),
    ]
}

/// The reference: the spec's rules over plain collections. Entries are
/// `(acceptance seq, pool index)`.
#[derive(Default)]
struct Model {
    queue: Vec<(u64, usize)>,
    out: Vec<(u64, usize)>,
    consumed: VecDeque<usize>,
    next_seq: u64,
}

impl Model {
    fn live(&self, k: usize) -> bool {
        self.queue.iter().chain(&self.out).any(|&(_, x)| x == k)
    }

    fn deliver(&mut self, k: usize) -> Delivery {
        if self.live(k) || self.consumed.contains(&k) {
            Delivery::Duplicate
        } else if self.queue.len() + self.out.len() >= CAPACITY {
            Delivery::Stopped(StopCause::Full)
        } else {
            self.queue.push((self.next_seq, k));
            self.next_seq += 1;
            Delivery::Accepted
        }
    }

    fn recv(&mut self) -> Option<usize> {
        if self.queue.is_empty() {
            return None;
        }
        let first = self.queue.remove(0);
        self.out.push(first);
        Some(first.1)
    }

    fn ack(&mut self, i: usize) {
        let (_, k) = self.out.remove(i);
        self.consumed.push_back(k);
        if self.consumed.len() > MEMORY {
            self.consumed.pop_front();
        }
    }

    fn drop_out(&mut self, i: usize) {
        let entry = self.out.remove(i);
        let at = self.queue.partition_point(|&(s, _)| s < entry.0);
        self.queue.insert(at, entry);
    }
}

fn run(ops: Vec<Op>) -> Result<(), TestCaseError> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .map_err(|e| TestCaseError::fail(e.to_string()))?;
    rt.block_on(async move {
        let (session_id, loop_id) = (SessionId::new(), LoopId::new());
        let pool: Vec<ProcessNotification> = (0..POOL)
            .map(|_| {
                ProcessNotification::new(ProcessCompletionNotification {
                    command_id: CommandId::new(),
                    session_id,
                    loop_id,
                    process_handle: "p-1".into(),
                    state: ProcessLifecycleState::Killed,
                    reason: ProcessTerminalReason::RunnerShutdown,
                })
            })
            .collect();
        let index = |id: CommandId| pool.iter().position(|n| n.command_id() == id);
        let config = LoopConfig::new(session_id, loop_id)
            .capacity(CAPACITY)
            .consumed_memory(MEMORY);
        let (handle, mut consumer) = spawn(config);
        let mut model = Model::default();
        let mut out: Vec<Received> = Vec::new();

        for (step, op) in ops.into_iter().enumerate() {
            match op {
                Op::Deliver(k) => {
                    let got = handle.deliver(pool[k].clone()).await;
                    prop_assert_eq!(got, model.deliver(k), "step {} {:?}", step, op);
                }
                Op::Recv => {
                    let want = model.recv();
                    // Paused time: expiry means recv would wait forever.
                    let got = tokio::time::timeout(Duration::from_secs(60), consumer.recv())
                        .await
                        .ok()
                        .flatten();
                    prop_assert_eq!(
                        got.as_ref().and_then(|r| index(r.command_id())),
                        want,
                        "step {} {:?}",
                        step,
                        op
                    );
                    out.extend(got);
                }
                Op::Ack(i) if !out.is_empty() => {
                    let i = i % out.len();
                    model.ack(i);
                    prop_assert!(out.remove(i).ack().await.is_ok());
                }
                Op::Drop(i) if !out.is_empty() => {
                    let i = i % out.len();
                    model.drop_out(i);
                    drop(out.remove(i));
                }
                Op::Ack(_) | Op::Drop(_) => {}
            }
        }
        // Drain: everything still live comes out in the model's order.
        while let Some(i) = (!out.is_empty()).then_some(0) {
            model.drop_out(i);
            drop(out.remove(i));
        }
        handle.shutdown().await;
        while let Some(received) = consumer.recv().await {
            prop_assert_eq!(index(received.command_id()), model.recv());
            model.ack(0);
            prop_assert!(received.ack().await.is_ok());
        }
        prop_assert!(model.queue.is_empty() && model.out.is_empty());
        Ok(())
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn loop_matches_model(ops in proptest::collection::vec(op(), 0..60)) {
        run(ops)?;
    }
}
