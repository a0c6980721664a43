//! Real process kills: the test re-runs its own binary as a child that appends from
//! many tasks and prints each acknowledged `(session, record, seq)`; the parent kills it
//! with SIGKILL at a random moment (after a random number of acknowledgements, from
//! zero, so some kills land during open and recovery), then reopens the journal and
//! checks that nothing acknowledged is lost, sequences are gap-free and a retry of an
//! acknowledged record is a duplicate at its seq. Every other child folds the log's
//! tail every few batches (`tail_max` 8), so kills land between and during folds, and
//! reopens read the tail a kill left.
//!
//! Set `NOTIFY_JOURNAL_KILL_SEED` to replay a run.

// clippy.toml's allow-*-in-tests covers `#[test]` fns only; this file's helpers are
// test code too.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::collections::{HashMap, HashSet};

use common::*;
use notify_journal::{AppendOutcome, RedbJournal, RedbOptions, RedbVerifyOnOpen};
use notify_testkit::kill::{self, xorshift as next};

const CHILD_PATH: &str = "NOTIFY_JOURNAL_KILL_CHILD_PATH";
const CHILD_ROUND: &str = "NOTIFY_JOURNAL_KILL_CHILD_ROUND";
const SESSIONS: u64 = 3;
const APPENDERS: u64 = 24;
const KILLS: u64 = 24;
/// Record indices of round `r` start at `r * ROUND_SPAN`.
const ROUND_SPAN: u64 = 1_000_000;

/// A child's options in round `round`: odd rounds fold the log's tail at 8 frames.
fn options(round: u64) -> RedbOptions {
    if round % 2 == 1 {
        RedbOptions::default().tail_max(8)
    } else {
        RedbOptions::default()
    }
}

/// The child's body. In a normal test run (no child variables) it does nothing.
#[test]
fn kill_child_appender() {
    let (Ok(path), Ok(round)) = (std::env::var(CHILD_PATH), std::env::var(CHILD_ROUND)) else {
        return;
    };
    let round: u64 = round.parse().unwrap();
    let j = RedbJournal::open(&path, options(round)).unwrap();
    let rt = runtime();
    rt.block_on(async move {
        let mut tasks = Vec::new();
        for a in 0..APPENDERS {
            let j = j.clone();
            tasks.push(tokio::spawn(async move {
                for n in 0.. {
                    let sn = (a + n) % SESSIONS;
                    let s = session(u128::from(sn));
                    let i = round * ROUND_SPAN + n * APPENDERS + a;
                    let o = j.append(s, command(s, i)).await.unwrap();
                    kill::say(&format!("ACK {sn} {i} {} {}", o.seq, o.appended)).unwrap();
                }
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
    });
}

#[test]
fn acknowledged_appends_survive_sigkill() {
    if std::env::var(CHILD_PATH).is_ok() {
        return;
    }
    let seed = kill::seed("NOTIFY_JOURNAL_KILL_SEED");
    let mut rng = seed;
    let rt = runtime();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("killed.redb");
    // (session, index) -> seq, for every acknowledgement any child printed.
    let mut acked: HashMap<(u64, u64), u64> = HashMap::new();
    // Frames in the file after the last verify closed it (a clean close folds the
    // tail): a reopen finding more outside the tail saw a killed child's fold.
    let mut folded_before = 0;
    let (mut tails_left, mut children_folded) = (0, 0);

    for round in 0..KILLS {
        let wanted = next(&mut rng) % 60; // 0: kill as soon as it starts
        let round_var = round.to_string();
        let lines = kill::run_and_kill(
            "kill_child_appender",
            [
                (CHILD_PATH, path.as_os_str()),
                (CHILD_ROUND, round_var.as_ref()),
            ],
            &["ACK "],
            wanted,
        )
        .unwrap();

        let mut fresh = Vec::new();
        for line in &lines {
            let f: Vec<u64> = line
                .split_whitespace()
                .skip(1)
                .take(3)
                .map(|x| x.parse().unwrap())
                .collect();
            let prev = acked.insert((f[0], f[1]), f[2]);
            assert!(
                prev.is_none(),
                "a child acknowledged one record twice: {line}"
            );
            fresh.push((f[0], f[1], f[2]));
        }

        let found = verify(&rt, &path, &acked, &fresh);
        if found.tail > 0 {
            tails_left += 1;
        }
        if round % 2 == 1 && found.frames - found.tail > folded_before {
            children_folded += 1;
        }
        folded_before = found.closed_frames;
    }
    assert!(
        !acked.is_empty(),
        "no child acknowledged anything (seed {seed})"
    );
    // The kills left tails to read at open, and children were killed after folds.
    assert!(
        tails_left >= 2,
        "only {tails_left} kills left a tail (seed {seed})"
    );
    assert!(
        children_folded >= 2,
        "only {children_folded} killed children had folded (seed {seed})"
    );
}

/// What a verify found at open, and the frames it left when it closed.
struct Found {
    frames: u64,
    tail: u64,
    closed_frames: u64,
}

/// Every acknowledgement so far is indexed at its seq; this round's are retried
/// (concurrently) and must come back as duplicates.
fn verify(
    rt: &tokio::runtime::Runtime,
    path: &std::path::Path,
    acked: &HashMap<(u64, u64), u64>,
    fresh: &[(u64, u64, u64)],
) -> Found {
    let j = RedbJournal::open(
        path,
        RedbOptions::default().verify_on_open(RedbVerifyOnOpen::Full),
    )
    .unwrap();
    let at_open = j.stats_blocking().unwrap();
    for sn in 0..SESSIONS {
        let s = session(u128::from(sn));
        let frames = j.replay_blocking(s, 1, usize::MAX).unwrap();
        let mut keys = HashSet::new();
        for (i, (seq, r)) in frames.iter().enumerate() {
            assert_eq!(*seq, i as u64 + 1, "gap in session {sn}");
            assert!(keys.insert(r.key()), "key doubled in session {sn}");
        }
        assert_eq!(j.last_seq_blocking(s).unwrap(), frames.len() as u64);
    }
    for (&(sn, i), &seq) in acked {
        let s = session(u128::from(sn));
        let r = command(s, i);
        assert_eq!(
            j.lookup_blocking(s, r.key()).unwrap(),
            Some(seq),
            "lost ({sn}, {i})"
        );
    }
    let retries: Vec<_> = fresh
        .iter()
        .map(|&(sn, i, seq)| {
            let s = session(u128::from(sn));
            (seq, rt.spawn(j.append(s, command(s, i))))
        })
        .collect();
    for (seq, t) in retries {
        let again = rt.block_on(t).unwrap().unwrap();
        assert_eq!(
            again,
            AppendOutcome {
                seq,
                appended: false
            }
        );
    }
    let closed_frames = j.stats_blocking().unwrap().frames;
    j.close();
    Found {
        frames: at_open.frames,
        tail: at_open.tail,
        closed_frames,
    }
}
