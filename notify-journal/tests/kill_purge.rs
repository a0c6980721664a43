//! Real process kills during session ends and purges: the test re-runs its own binary
//! as a child that fills sessions, ends most of them and purges them in small steps
//! while it keeps appending to a live one, printing every acknowledgement; the parent
//! kills it with SIGKILL at a random moment (most kills aim at the purge), reopens the
//! journal and checks:
//!
//! * every live session is intact: every acknowledged append at its seq, gap-free;
//! * every ended session is either whole (its log replays from 1 to its end marker,
//!   every acknowledged append in it) or purged, with a tombstone whose last seq and
//!   frame count are its log's, and no read answers any part of its log;
//! * the deep verify is clean (a purge cut short leaves the rest of a log, not damage);
//! * a further purge finishes what the kill interrupted (every other round; in the
//!   others the next child finishes it first, as any purge does).
//!
//! Set `NOTIFY_JOURNAL_KILL_SEED` to replay a run.

// clippy.toml's allow-*-in-tests covers `#[test]` fns only; this file's helpers are
// test code too.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::collections::{BTreeMap, HashMap};

use common::*;
use notify_journal::{
    AppendError, JournalError, PurgeStep, RedbJournal, RedbOptions, RedbVerifyOnOpen, SessionState,
    purge, replay_all,
};
use notify_testkit::kill::{self, xorshift as next};
use notify_types::{JournalRecord, SessionId};

const CHILD_PATH: &str = "NOTIFY_JOURNAL_KILL_PURGE_CHILD_PATH";
const CHILD_ROUND: &str = "NOTIFY_JOURNAL_KILL_PURGE_CHILD_ROUND";
const KILLS: u64 = 40;
/// Sessions a round starts: the first stays live, the others end and are purged.
const PER_ROUND: u64 = 5;
/// Records appended to each session before the ends.
const FILL: u64 = 12;
/// Frames per purge step: small, so a purge takes many steps.
const STEP: usize = 2;

fn session_of(sn: u64) -> SessionId {
    session(u128::from(sn))
}

fn say(line: String) {
    kill::say(&line).unwrap();
}

/// The child's body. In a normal test run (no child variables) it does nothing.
#[test]
fn kill_purge_child() {
    let (Ok(path), Ok(round)) = (std::env::var(CHILD_PATH), std::env::var(CHILD_ROUND)) else {
        return;
    };
    let round: u64 = round.parse().unwrap();
    let j = RedbJournal::open(&path, RedbOptions::default()).unwrap();
    let rt = runtime();
    rt.block_on(async move {
        let sns: Vec<u64> = (0..PER_ROUND).map(|k| round * 8 + k).collect();
        // Fill every session of the round, concurrently.
        let mut tasks = Vec::new();
        for &sn in &sns {
            let j = j.clone();
            tasks.push(tokio::spawn(async move {
                let s = session_of(sn);
                for i in 1..=FILL {
                    let o = j.append(s, command(s, i)).await.unwrap();
                    say(format!("ACK {sn} {i} {}", o.seq));
                }
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
        // End all but the first.
        for &sn in &sns[1..] {
            let s = session_of(sn);
            let o = j.append(s, ended(s)).await.unwrap();
            say(format!("END {sn} {}", o.seq));
        }
        // Purge in small steps while the live session keeps taking appends.
        let live = {
            let j = j.clone();
            let sn = sns[0];
            tokio::spawn(async move {
                let s = session_of(sn);
                for i in FILL + 1.. {
                    let o = j.append(s, command(s, i)).await.unwrap();
                    say(format!("ACK {sn} {i} {}", o.seq));
                }
            })
        };
        loop {
            let step = j.purge_step(later(), STEP).await.unwrap();
            let Some(s) = step.session else { break };
            let sn = s.as_uuid().as_u128() as u64 & 0xffff_ffff;
            say(format!(
                "STEP {sn} {} {}",
                step.frames_removed,
                u8::from(step.finished)
            ));
        }
        say("DONE".to_owned());
        live.abort();
    });
    // Exiting closes the reader's pipe: a parent waiting for more lines stops waiting.
}

/// What the children acknowledged, per session.
#[derive(Debug, Default)]
struct Truth {
    /// Session number -> (record index -> seq).
    acked: BTreeMap<u64, BTreeMap<u64, u64>>,
    /// Session number -> its end marker's seq, once acknowledged.
    ends: HashMap<u64, u64>,
    /// Sessions that are never ended.
    live: Vec<u64>,
    /// Sessions that are ended (once their round's child gets that far).
    ending: Vec<u64>,
}

/// What happened in one round.
#[derive(Debug, Default, Clone, Copy)]
struct Round {
    /// The child printed a step of a session but not the step finishing it.
    acked_mid_purge: bool,
    /// After the kill, a purge was under way (a session had a tombstone and frames).
    found_mid_purge: bool,
    /// The child got through its whole purge before the kill.
    done: bool,
    /// Sessions found whole-ended, purged, live.
    ended: u64,
    purged: u64,
}

#[test]
fn ends_and_purges_survive_sigkill() {
    if std::env::var(CHILD_PATH).is_ok() {
        return;
    }
    let seed = kill::seed("NOTIFY_JOURNAL_KILL_SEED");
    let mut rng = seed;
    let rt = runtime();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("killed.redb");
    let mut truth = Truth::default();
    let mut rounds = Vec::new();

    // Lines a child prints before its purge: the fill and the ends.
    let before_purge = PER_ROUND * FILL + PER_ROUND - 1;
    for round in 0..KILLS {
        truth.live.push(round * 8);
        truth.ending.extend((1..PER_ROUND).map(|k| round * 8 + k));
        // One kill in four anywhere up to the purge (0: during open and recovery), the
        // rest in the purge: each ended session takes FILL / STEP + 1 steps.
        let wanted = if next(&mut rng).is_multiple_of(4) {
            next(&mut rng) % before_purge
        } else {
            before_purge + 1 + next(&mut rng) % (2 * (PER_ROUND - 1) * (FILL / STEP as u64 + 1))
        };
        let round_var = round.to_string();
        let lines = kill::run_and_kill(
            "kill_purge_child",
            [
                (CHILD_PATH, path.as_os_str()),
                (CHILD_ROUND, round_var.as_ref()),
            ],
            &["ACK ", "END ", "STEP ", "DONE"],
            wanted,
        )
        .unwrap();

        let mut r = Round::default();
        let mut stepped: HashMap<u64, bool> = HashMap::new();
        for line in &lines {
            let f: Vec<&str> = line.split_whitespace().collect();
            let n = |i: usize| f[i].parse::<u64>().unwrap();
            match f[0] {
                "ACK" => {
                    let prev = truth.acked.entry(n(1)).or_default().insert(n(2), n(3));
                    assert!(prev.is_none(), "acknowledged twice: {line}");
                }
                "END" => {
                    assert!(
                        truth.ends.insert(n(1), n(2)).is_none(),
                        "ended twice: {line}"
                    );
                }
                "STEP" => {
                    let finished = stepped.entry(n(1)).or_default();
                    *finished |= n(3) == 1;
                }
                _ => r.done = true,
            }
        }
        r.acked_mid_purge = stepped.values().any(|finished| !finished);
        check(&rt, &path, &truth, &mut r, round % 2 == 1);
        rounds.push(r);
    }

    // The last word: a purge of everything, then every ended session is a tombstone.
    let j = RedbJournal::open(&path, RedbOptions::default()).unwrap();
    rt.block_on(purge(&j, later(), STEP)).unwrap();
    for &sn in &truth.ending {
        let s = session_of(sn);
        match j.session_state_blocking(s).unwrap() {
            SessionState::Live => assert!(!truth.ends.contains_key(&sn)),
            SessionState::Purged(_) => {}
            other => panic!("session {sn} not purged by a full purge: {other:?}"),
        }
    }
    let report = j.verify_blocking(10).unwrap();
    assert!(report.is_clean(), "{report}");
    j.close();

    let count = |f: fn(&Round) -> bool| rounds.iter().filter(|r| f(r)).count();
    eprintln!(
        "{} kills: {} with a purge under way when reopened, {} after a step the child \
         acknowledged and before its session's last, {} after the whole purge; \
         sessions found ended-whole {} times, purged {} times",
        rounds.len(),
        count(|r| r.found_mid_purge),
        count(|r| r.acked_mid_purge),
        count(|r| r.done),
        rounds.iter().map(|r| r.ended).sum::<u64>(),
        rounds.iter().map(|r| r.purged).sum::<u64>(),
    );
    assert_eq!(rounds.len() as u64, KILLS);
    assert!(
        count(|r| r.found_mid_purge) >= 3,
        "too few kills landed inside a purge to test it (seed {seed})"
    );
}

/// Reopens the journal after a kill and checks every session against what was
/// acknowledged. With `finish`, purges everything due afterwards and checks that too.
fn check(
    rt: &tokio::runtime::Runtime,
    path: &std::path::Path,
    truth: &Truth,
    round: &mut Round,
    finish: bool,
) {
    let j = RedbJournal::open(
        path,
        RedbOptions::default().verify_on_open(RedbVerifyOnOpen::Full),
    )
    .unwrap();
    let report = j.verify_blocking(10).unwrap();
    assert!(report.is_clean(), "{report}");
    let no = BTreeMap::new();
    for &sn in &truth.live {
        let s = session_of(sn);
        assert_eq!(j.session_state_blocking(s).unwrap(), SessionState::Live);
        let log = rt
            .block_on(replay_all(&j, s))
            .unwrap_or_else(|e| panic!("live session {sn}: {e}"));
        check_log(sn, &log, truth.acked.get(&sn).unwrap_or(&no), false);
    }
    for &sn in &truth.ending {
        let s = session_of(sn);
        let acked = truth.acked.get(&sn).unwrap_or(&no);
        let end = truth.ends.get(&sn).copied();
        match j.session_state_blocking(s).unwrap() {
            SessionState::Live => {
                assert_eq!(end, None, "session {sn}: its acknowledged end was lost");
                let log = rt.block_on(replay_all(&j, s)).unwrap();
                check_log(sn, &log, acked, false);
            }
            SessionState::Ended { last_seq, .. } => {
                round.ended += 1;
                let log = rt.block_on(replay_all(&j, s)).unwrap();
                assert_eq!(log.len() as u64, last_seq, "session {sn}: not whole");
                assert!(end.is_none_or(|e| e == last_seq), "session {sn}: end moved");
                check_log(sn, &log, acked, true);
            }
            SessionState::Purged(t) => {
                round.purged += 1;
                assert_eq!(t.frames, t.last_seq);
                assert!(end.is_none_or(|e| e == t.last_seq), "session {sn}: {t:?}");
                // The fill and the end marker: nothing else was ever appended.
                assert_eq!(t.last_seq, FILL + 1, "session {sn}: {t:?}");
                assert!(t.ended_at <= t.purged_at);
                assert!(matches!(
                    j.replay_blocking(s, 1, 1000),
                    Err(JournalError::Purged { .. })
                ));
                for &i in acked.keys() {
                    assert!(matches!(
                        j.lookup_blocking(s, key_of(s, i)),
                        Err(JournalError::Purged { .. })
                    ));
                }
                assert_eq!(j.last_seq_blocking(s).unwrap(), t.last_seq);
                assert!(matches!(
                    rt.block_on(j.append(s, command(s, 1))),
                    Err(AppendError::SessionEnded { purged: true, .. })
                ));
            }
            other => panic!("session {sn}: unexpected state {other:?}"),
        }
    }
    // Only an unfinished purge is taken with a horizon in the past.
    let step = rt.block_on(j.purge_step(earlier(), 1)).unwrap();
    round.found_mid_purge = step != PurgeStep::IDLE;
    if finish {
        rt.block_on(purge(&j, later(), STEP)).unwrap();
        for &sn in &truth.ending {
            let state = j.session_state_blocking(session_of(sn)).unwrap();
            assert!(
                state == SessionState::Live || state.is_purged(),
                "session {sn} after a full purge: {state:?}"
            );
        }
        let report = j.verify_blocking(10).unwrap();
        assert!(report.is_clean(), "{report}");
        assert_eq!(report.ended, 0);
    }
    j.close();
}

/// A log read back: gap-free from 1 (the reader checks it), every acknowledged append at
/// its seq, commands only, and the end marker last exactly when `is_ended`.
fn check_log(sn: u64, log: &[(u64, JournalRecord)], acked: &BTreeMap<u64, u64>, is_ended: bool) {
    let s = session_of(sn);
    for (n, (seq, _)) in log.iter().enumerate() {
        assert_eq!(*seq, n as u64 + 1, "session {sn}: gap");
    }
    for (&i, &seq) in acked {
        assert_eq!(
            log.get(seq as usize - 1),
            Some(&(seq, command(s, i))),
            "session {sn}: acknowledged append {i} lost or moved"
        );
    }
    let commands = if is_ended {
        assert_eq!(log.last().map(|f| &f.1), Some(&ended(s)));
        &log[..log.len() - 1]
    } else {
        log
    };
    for (seq, r) in commands {
        assert!(
            matches!(r, JournalRecord::Command(_)),
            "session {sn}: seq {seq} is {r:?}"
        );
    }
}
