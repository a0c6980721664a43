//! Damage a real 10,000-record, 4-session redb journal the way a disk would — single
//! flipped bytes, bursts of flips, truncations — and check every operation on every
//! damaged copy: it answers exactly the original data or a typed error. Never a panic,
//! never an `Ok` with missing, altered or extra data, never a key with two frames, and
//! `verify` flags every copy on which anything came out different.
//!
//! With the page check at open off (the stand-in for damage that happens while a
//! journal is open), a damaged index page can hide a key: no lookup may then answer
//! "absent" for a journaled key, and no re-append may write a second frame for it.
//!
//! Each test also requires that a good share of its trials opened and were read through,
//! so the reads' own checks are exercised, not only the refusal at open; with the
//! background scrub, also that the scrub named the damage in most trials after reading
//! most of the file. The run prints its counts per outcome.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stdout
)]

use std::collections::BTreeMap;
use std::path::Path;

use notify_journal::{
    JournalRead, OpenError, RedbDurability, RedbJournal, RedbOptions, RedbVerifyOnOpen, ScrubState,
    replay_all,
};
use notify_session::{RestoreReport, restore};
use notify_testkit::sample;
use notify_types::{CommandId, JournalRecord, LoopId, ProcessLifecycleKind, SessionId};

const SESSIONS: usize = 4;
const RECORDS: usize = 10_000;
const SINGLE_FLIPS: usize = 300;
const MULTI_FLIPS: usize = 200;
const TRUNCATIONS: usize = 50;
/// Single flips with the page check at open turned off.
const OFF_FLIPS: usize = 120;
/// Trials of bursts of flips with the page check at open turned off.
const OFF_BURSTS: usize = 150;
/// Trials of bursts of flips with the default open (the background scrub): few, as
/// each trial also runs a scrub thread; the Off trials cover the read path's checks.
const BACKGROUND_BURSTS: usize = 40;
/// The most journaled records re-appended per trial after their lookup missed or failed.
const REAPPENDS: usize = 32;
/// With the page check at open, nearly every damaged copy is refused at open (a flip in
/// any committed page fails it); those that open had their damage land outside the
/// committed trees, and must still read back exactly. At least this many must open.
const OPENED_PAGES: usize = 5;
/// Without the page check, the reads' own checks meet the damage: at least this share
/// of trials (percent) must open and be read through, and at least this many of them
/// must have had their damage named by a typed error.
const READ_THROUGH_OFF: usize = 60;
const NAMED_OFF: usize = 10;
/// With the background scrub, the share of trials (percent) in which the scrub must
/// have named the damage itself (see [`assert_scrub_read_through`]).
const SCRUB_NAMED: usize = 50;

/// A small deterministic generator (xorshift64*), so a failing trial can be replayed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// What the undamaged journal answers.
struct Truth {
    sessions: Vec<SessionId>,
    frames: BTreeMap<SessionId, Vec<(u64, JournalRecord)>>,
    restored: BTreeMap<SessionId, RestoreReport>,
}

/// Writes the journal: per session a stream of commands, lifecycle events and the
/// consumption of most commands, so restore has pending notifications and orphans.
fn build(path: &Path, rt: &tokio::runtime::Runtime) -> Truth {
    let options = RedbOptions::default().durability(RedbDurability::NonDurableForTestsOnly);
    let j = RedbJournal::open(path, options).unwrap();
    let sessions: Vec<SessionId> = (0..SESSIONS).map(|_| SessionId::new()).collect();
    let loop_id = LoopId::new();
    rt.block_on(async {
        let mut written = 0;
        let mut round = 0usize;
        while written < RECORDS {
            for s in &sessions {
                let cmd = sample::command(*s, loop_id);
                let cause = CommandId::from_uuid(cmd.key());
                let mut records = vec![
                    sample::event(*s, loop_id, ProcessLifecycleKind::Started),
                    cmd,
                ];
                if !round.is_multiple_of(3) {
                    records.push(sample::consumed(*s, loop_id, cause));
                }
                for r in records {
                    if written < RECORDS {
                        j.append(*s, r).await.unwrap();
                        written += 1;
                    }
                }
            }
            round += 1;
        }
    });
    let truth = rt.block_on(async {
        let mut sessions = j.sessions().await.unwrap();
        sessions.sort();
        let mut frames = BTreeMap::new();
        let mut restored = BTreeMap::new();
        for s in &sessions {
            frames.insert(*s, replay_all(&j, *s).await.unwrap());
            restored.insert(*s, restore(*s, &j).await.unwrap());
        }
        Truth {
            sessions,
            frames,
            restored,
        }
    });
    j.close();
    truth
}

#[derive(Debug, Default)]
struct Tally {
    trials: usize,
    refused_at_open: BTreeMap<&'static str, usize>,
    opened_all_exact: usize,
    opened_some_errors: usize,
    typed_errors: BTreeMap<&'static str, usize>,
    wrong_answers: Vec<String>,
    /// Lookups of a journaled key that answered `Ok(None)`: a miss believed.
    absent_answers: usize,
    /// Re-appends of a journaled record that answered `appended: true`: two frames for
    /// one key.
    two_frames: usize,
    escaped_panics: Vec<String>,
    /// With the background scrub: trials whose scrub named the damage, and how many
    /// table entries its pass had read by then (one per such trial).
    scrub_found: Vec<u64>,
    /// With the background scrub: trials whose scrub finished a pass clean (the damage
    /// lay outside what it reads), and trials where it had done neither by the close.
    scrub_clean: usize,
    scrub_unfinished: usize,
    /// Table entries a clean scrub pass over the undamaged journal reads.
    scrub_full_pass: u64,
}

impl Tally {
    /// Trials that opened and ran every operation (their answers exact or typed errors).
    fn read_through(&self) -> usize {
        self.opened_all_exact + self.opened_some_errors
    }
}

fn open_error_name(e: &OpenError) -> &'static str {
    match e {
        OpenError::Damaged { .. } => "Damaged",
        OpenError::NotAJournal { .. } => "NotAJournal",
        OpenError::UnsupportedFormatVersion { .. } => "UnsupportedFormatVersion",
        OpenError::UnsupportedContent { .. } => "UnsupportedContent",
        OpenError::AlreadyOpen { .. } => "AlreadyOpen",
        OpenError::Storage { .. } => "Storage",
        _ => "other",
    }
}

/// Runs every operation on the damaged copy at `path`, tallying how the damage was met
/// and every wrong answer.
fn trial(
    path: &Path,
    options: &RedbOptions,
    truth: &Truth,
    rt: &tokio::runtime::Runtime,
    label: &str,
    tally: &mut Tally,
) {
    let j = match RedbJournal::open(path, options.clone()) {
        Ok(j) => j,
        Err(e) => {
            *tally
                .refused_at_open
                .entry(open_error_name(&e))
                .or_default() += 1;
            return;
        }
    };
    let mut noticed = false;
    let mut absent = 0;
    let mut two_frames = 0;
    let mut wrong = |what: String| tally.wrong_answers.push(format!("{label}: {what}"));
    let mut errors: Vec<&'static str> = Vec::new();
    rt.block_on(async {
        match j.sessions().await {
            Ok(mut s) => {
                s.sort();
                if s != truth.sessions {
                    wrong(format!("sessions() answered {} sessions", s.len()));
                }
            }
            Err(_) => errors.push("sessions"),
        }
        for (s, frames) in &truth.frames {
            match replay_all(&j, *s).await {
                Ok(got) if got == *frames => {}
                Ok(got) => wrong(format!(
                    "replay of {s} answered {} frames, {} differ",
                    got.len(),
                    got.iter().zip(frames).filter(|(a, b)| a != b).count()
                )),
                Err(_) => errors.push("replay"),
            }
            match restore(*s, &j).await {
                Ok(got) if got == truth.restored[s] => {}
                Ok(got) => wrong(format!(
                    "restore of {s}: {} pending loops, {} orphans, last seq {}",
                    got.pending.len(),
                    got.orphans.len(),
                    got.last_seq
                )),
                Err(_) => errors.push("restore"),
            }
            // The blocking lookup is the async one's body without the hop to the
            // blocking pool (10,000 of them per trial).
            let mut missed = Vec::new();
            for (seq, record) in frames {
                match j.lookup_blocking(*s, record.key()) {
                    Ok(Some(got)) if got == *seq => {}
                    Ok(other) => {
                        if other.is_none() {
                            absent += 1;
                        }
                        wrong(format!("lookup of seq {seq} of {s} answered {other:?}"));
                        missed.push((seq, record));
                    }
                    Err(_) => {
                        errors.push("lookup");
                        missed.push((seq, record));
                    }
                }
            }
            // A record whose lookup missed or failed is the one a supervisor would
            // retry: its re-append must never journal it again.
            for (seq, record) in missed.into_iter().take(REAPPENDS) {
                match j.append(*s, record.clone()).await {
                    Ok(o) if !o.appended && o.seq == *seq => {}
                    Ok(o) => {
                        if o.appended {
                            two_frames += 1;
                        }
                        wrong(format!("re-append of seq {seq} of {s} answered {o:?}"));
                    }
                    Err(_) => errors.push("re-append"),
                }
            }
        }
        // A re-append of an old record is a duplicate at its seq, never a second frame.
        let (s, frames) = truth.frames.iter().next().unwrap();
        let (seq, old) = &frames[frames.len() / 2];
        match j.append(*s, old.clone()).await {
            Ok(o) if !o.appended && o.seq == *seq => {}
            Ok(o) => {
                if o.appended {
                    two_frames += 1;
                }
                wrong(format!("re-append of seq {seq} answered {o:?}: two frames"));
            }
            Err(_) => errors.push("re-append"),
        }
        // A new append continues the log.
        let head = frames.len() as u64;
        match j.append(*s, sample::command(*s, LoopId::new())).await {
            Ok(o) if o.appended && o.seq == head + 1 => {}
            Ok(o) => wrong(format!("new append answered {o:?}, head was {head}")),
            Err(_) => errors.push("append"),
        }
        noticed = !errors.is_empty();
        match j.verify(16).await {
            Ok(report) if report.is_clean() && noticed => wrong(format!(
                "verify found nothing, yet {errors:?} answered errors"
            )),
            Ok(_) => {}
            Err(_) => noticed = true,
        }
    });
    // Every operation has run (the scrub beside them): what the scrub did meanwhile.
    let scrub = j.scrub_status();
    match scrub.state {
        ScrubState::Off => {}
        ScrubState::Damaged(_) => tally.scrub_found.push(scrub.entries),
        _ if scrub.clean_passes > 0 => tally.scrub_clean += 1,
        _ => tally.scrub_unfinished += 1,
    }
    j.close();
    tally.absent_answers += absent;
    tally.two_frames += two_frames;
    if noticed {
        tally.opened_some_errors += 1;
        for e in errors {
            *tally.typed_errors.entry(e).or_default() += 1;
        }
    } else {
        tally.opened_all_exact += 1;
    }
}

/// The damage one test does.
#[derive(Clone, Copy)]
enum Damage {
    /// This many single flipped bytes, one trial each.
    SingleFlips(usize),
    /// This many trials of 1 to 16 flipped bytes.
    BurstFlips(usize),
    /// This many trials of the file cut to a random length.
    Truncations(usize),
}

/// Builds a journal, damages copies of it as `damage` says, runs every operation on
/// each copy, and prints the counts.
fn run(damage: Damage, seed: u64, verify_on_open: RedbVerifyOnOpen) -> Tally {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let original = dir.path().join("original.redb");
    let truth = build(&original, &rt);
    assert_eq!(truth.frames.values().map(Vec::len).sum::<usize>(), RECORDS);
    let bytes = std::fs::read(&original).unwrap();
    let mut rng = Rng(seed);
    let mut tally = Tally::default();
    if verify_on_open == RedbVerifyOnOpen::Background {
        tally.scrub_full_pass = full_scrub_pass(&original);
    }
    let copy = dir.path().join("damaged.redb");
    let trials: Vec<Option<usize>> = match damage {
        Damage::SingleFlips(n) => vec![Some(1); n],
        Damage::BurstFlips(n) => (0..n).map(|i| Some(1 + i % 16)).collect(),
        Damage::Truncations(n) => vec![None; n],
    };
    let options = RedbOptions::default().verify_on_open(verify_on_open);
    for (n, flips) in trials.into_iter().enumerate() {
        let mut damaged = bytes.clone();
        let label = match flips {
            Some(k) => {
                let mut at = Vec::new();
                for _ in 0..k {
                    let offset = rng.below(damaged.len());
                    // Never a no-op: xor with a nonzero byte.
                    damaged[offset] ^= (rng.below(255) + 1) as u8;
                    at.push(offset);
                }
                format!("trial {n} (seed {seed:#x}): {k} flip(s) at {at:?}")
            }
            None => {
                let len = rng.below(damaged.len());
                damaged.truncate(len);
                format!("trial {n} (seed {seed:#x}): cut to {len} bytes")
            }
        };
        std::fs::write(&copy, &damaged).unwrap();
        tally.trials += 1;
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            trial(&copy, &options, &truth, &rt, &label, &mut tally);
        }));
        if outcome.is_err() {
            tally.escaped_panics.push(label);
        }
        let _ = std::fs::remove_file(&copy);
    }
    println!(
        "{} trials of {} bytes, verify at open {verify_on_open:?}",
        tally.trials,
        bytes.len()
    );
    println!("  refused at open: {:?}", tally.refused_at_open);
    println!("  opened, every answer exact: {}", tally.opened_all_exact);
    println!(
        "  opened, damage named by typed errors: {} ({:?})",
        tally.opened_some_errors, tally.typed_errors
    );
    println!(
        "  read through (opened, every operation run): {}",
        tally.read_through()
    );
    println!("  wrong answers: {}", tally.wrong_answers.len());
    println!(
        "    of which lookups answering absent for a journaled key: {}, keys given two frames: {}",
        tally.absent_answers, tally.two_frames
    );
    for w in tally.wrong_answers.iter().take(5) {
        println!("    {w}");
    }
    println!(
        "  panics escaping the journal: {}",
        tally.escaped_panics.len()
    );
    if verify_on_open == RedbVerifyOnOpen::Background {
        let mut read = tally.scrub_found.clone();
        read.sort_unstable();
        println!(
            "  background scrub: named the damage in {} trials (entries read by then: min {:?}, \
             median {:?}, max {:?}; a clean pass reads {}), finished clean in {}, neither by \
             the close in {}",
            read.len(),
            read.first(),
            read.get(read.len() / 2),
            read.last(),
            tally.scrub_full_pass,
            tally.scrub_clean,
            tally.scrub_unfinished
        );
    }
    tally
}

fn assert_exact_or_typed(tally: &Tally) {
    assert!(
        tally.escaped_panics.is_empty() && tally.wrong_answers.is_empty(),
        "escaped panics: {:#?}\nwrong answers: {:#?}",
        tally.escaped_panics,
        tally.wrong_answers
    );
}

/// A refusal at open is an answer, but if (nearly) every trial were refused, the reads'
/// own checks would never run: at least `percent` of the trials must have opened and
/// been read through, and at least `named` of them must have met damage the reads named.
fn assert_read_through(tally: &Tally, percent: usize, named: usize) {
    assert!(
        tally.read_through() * 100 >= tally.trials * percent,
        "only {} of {} trials opened and were read through (at least {percent}% must): {:?}",
        tally.read_through(),
        tally.trials,
        tally.refused_at_open
    );
    assert!(
        tally.opened_some_errors >= named,
        "only {} trials met damage the reads named (at least {named} must): {:?}",
        tally.opened_some_errors,
        tally.typed_errors
    );
}

/// How many table entries a clean background scrub pass over the journal at `path`
/// reads (opened once more, after its bytes were copied for the trials).
fn full_scrub_pass(path: &Path) -> u64 {
    let j = RedbJournal::open(path, RedbOptions::default()).unwrap();
    let started = std::time::Instant::now();
    loop {
        let status = j.scrub_status();
        if status.clean_passes > 0 {
            j.close();
            return status.entries;
        }
        assert!(
            started.elapsed() < std::time::Duration::from_secs(120),
            "no clean scrub pass over the undamaged journal: {status:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// The background scrub did its part: it named the damage in at least `percent` of
/// the trials, and the passes that named it had read, at the median, at least half of
/// what a clean pass over the undamaged journal reads (the damage is spread over the
/// file: a scrub that stops reading early, or never gets going before the trial ends,
/// fails this).
fn assert_scrub_read_through(tally: &Tally, percent: usize) {
    let found = tally.scrub_found.len();
    assert!(
        found * 100 >= tally.trials * percent,
        "the scrub named the damage in only {found} of {} trials (at least {percent}% must); \
         {} finished clean, {} did neither",
        tally.trials,
        tally.scrub_clean,
        tally.scrub_unfinished
    );
    let mut read = tally.scrub_found.clone();
    read.sort_unstable();
    let median = read[read.len() / 2];
    assert!(
        median * 2 >= tally.scrub_full_pass,
        "the passes that named the damage read a median of {median} entries, less than half \
         of a clean pass's {}",
        tally.scrub_full_pass
    );
}

/// With the page check at open, a damaged copy is refused at open or was damaged only
/// outside what the reads touch: at least [`OPENED_PAGES`] trials must have opened and
/// read back exactly (the read path ran on them), the rest refused as damaged.
fn assert_opened_with_pages(tally: &Tally) {
    assert!(
        tally.read_through() >= OPENED_PAGES,
        "only {} of {} trials opened (at least {OPENED_PAGES} must): {:?}",
        tally.read_through(),
        tally.trials,
        tally.refused_at_open
    );
    let refused: usize = tally.refused_at_open.values().sum();
    assert_eq!(
        refused,
        tally.refused_at_open.get("Damaged").copied().unwrap_or(0),
        "a damaged journal refused as something other than damaged: {:?}",
        tally.refused_at_open
    );
}

#[test]
fn single_flipped_bytes_answer_the_truth_or_a_typed_error() {
    let tally = run(
        Damage::SingleFlips(SINGLE_FLIPS),
        0x5EED_0001,
        RedbVerifyOnOpen::Pages,
    );
    assert_exact_or_typed(&tally);
    assert_opened_with_pages(&tally);
}

#[test]
fn bursts_of_flips_answer_the_truth_or_a_typed_error() {
    let tally = run(
        Damage::BurstFlips(MULTI_FLIPS),
        0x5EED_0002,
        RedbVerifyOnOpen::Pages,
    );
    assert_exact_or_typed(&tally);
    assert_opened_with_pages(&tally);
}

/// A journal cut short no longer matches its own layout: redb refuses it at open
/// whatever the check, so every trial must be refused, as damaged (or, cut inside its
/// first bytes, as not a journal at all) — never opened with part of the data missing.
#[test]
fn truncated_journals_answer_the_truth_or_a_typed_error() {
    let tally = run(
        Damage::Truncations(TRUNCATIONS),
        0x5EED_0003,
        RedbVerifyOnOpen::Pages,
    );
    assert_exact_or_typed(&tally);
    let refused: usize = tally.refused_at_open.values().sum();
    let typed = ["Damaged", "NotAJournal"]
        .iter()
        .map(|k| tally.refused_at_open.get(k).copied().unwrap_or(0))
        .sum::<usize>();
    assert_eq!(
        (refused, typed),
        (tally.trials, tally.trials),
        "every cut journal must be refused at open as damaged or not a journal: {:?}",
        tally.refused_at_open
    );
}

/// Without the page check at open, the reads' own checks are all there is: no panic
/// may escape whatever they meet. (Other wrong answers are possible there — a damaged
/// positions page can cut a log's tail — and are counted, not asserted: `docs/design.md`
/// says what the reads cannot see.)
#[test]
fn without_the_page_check_no_panic_escapes() {
    let tally = run(
        Damage::SingleFlips(OFF_FLIPS),
        0x5EED_0004,
        RedbVerifyOnOpen::Off,
    );
    assert!(
        tally.escaped_panics.is_empty(),
        "escaped panics: {:#?}",
        tally.escaped_panics
    );
    assert_read_through(&tally, READ_THROUGH_OFF, NAMED_OFF);
}

/// The stand-in for damage after open: bursts of flips, no page check at open. A damaged
/// index page hides keys; every miss is confirmed against the session's log, so no
/// lookup answers "absent" for a journaled key and no retry journals one twice: the
/// damage is named by a typed error instead.
#[test]
fn without_the_page_check_a_hidden_key_is_never_believed_absent() {
    let tally = run(
        Damage::BurstFlips(OFF_BURSTS),
        0x5EED_0005,
        RedbVerifyOnOpen::Off,
    );
    assert!(
        tally.escaped_panics.is_empty(),
        "escaped panics: {:#?}",
        tally.escaped_panics
    );
    let named = |w: &&String| w.contains("answered None") || w.contains("appended: true");
    assert_eq!(
        (tally.absent_answers, tally.two_frames),
        (0, 0),
        "lookups answering absent for a journaled key, keys given two frames; e.g. {:#?}",
        tally
            .wrong_answers
            .iter()
            .filter(named)
            .take(5)
            .collect::<Vec<_>>()
    );
    assert!(
        tally.typed_errors.contains_key("lookup"),
        "no trial damaged the index where a lookup reads it: {:?}",
        tally.typed_errors
    );
    assert_read_through(&tally, READ_THROUGH_OFF, NAMED_OFF);
}

/// The default open (`Background`: no check at open, the scrub running beside the
/// reads and appends): no panic escapes, no journaled key is believed absent and none
/// is given a second frame; the scrub's `Damaged` refusals count as typed errors. Not
/// vacuously: as without the page check, most trials opened and were read through and
/// the reads named damage (lookups among them), and the scrub named the damage in most
/// trials after reading most of the file.
#[test]
fn with_the_background_scrub_a_hidden_key_is_never_believed_absent() {
    let tally = run(
        Damage::BurstFlips(BACKGROUND_BURSTS),
        0x5EED_0006,
        RedbVerifyOnOpen::Background,
    );
    assert!(
        tally.escaped_panics.is_empty(),
        "escaped panics: {:#?}",
        tally.escaped_panics
    );
    assert_eq!(
        (tally.absent_answers, tally.two_frames),
        (0, 0),
        "lookups answering absent for a journaled key, keys given two frames; e.g. {:#?}",
        tally.wrong_answers.iter().take(5).collect::<Vec<_>>()
    );
    assert!(
        tally.typed_errors.contains_key("lookup"),
        "no trial damaged the index where a lookup reads it: {:?}",
        tally.typed_errors
    );
    assert_read_through(&tally, READ_THROUGH_OFF, NAMED_OFF);
    assert_scrub_read_through(&tally, SCRUB_NAMED);
}
