//! The damage test's machinery (`tests/damage.rs`): the undamaged journal and what it
//! answers, one trial of every operation on a damaged copy, and the runs of trials with
//! their tally.
#![allow(
    dead_code,
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

/// Sessions in the undamaged journal.
pub(crate) const SESSIONS: usize = 4;
/// Records in the undamaged journal.
pub(crate) const RECORDS: usize = 10_000;
/// The most journaled records re-appended per trial after their lookup missed or failed.
pub(crate) const REAPPENDS: usize = 32;

/// A small deterministic generator (xorshift64*), so a failing trial can be replayed.
pub(crate) struct Rng(u64);

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
pub(crate) struct Truth {
    sessions: Vec<SessionId>,
    frames: BTreeMap<SessionId, Vec<(u64, JournalRecord)>>,
    restored: BTreeMap<SessionId, RestoreReport>,
}

/// Writes the journal: per session a stream of commands, lifecycle events and the
/// consumption of most commands, so restore has pending notifications and orphans.
pub(crate) fn build(path: &Path, rt: &tokio::runtime::Runtime) -> Truth {
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
pub(crate) struct Tally {
    pub(crate) trials: usize,
    pub(crate) refused_at_open: BTreeMap<&'static str, usize>,
    pub(crate) opened_all_exact: usize,
    pub(crate) opened_some_errors: usize,
    pub(crate) typed_errors: BTreeMap<&'static str, usize>,
    pub(crate) wrong_answers: Vec<String>,
    /// Lookups of a journaled key that answered `Ok(None)`: a miss believed.
    pub(crate) absent_answers: usize,
    /// Re-appends of a journaled record that answered `appended: true`: two frames for
    /// one key.
    pub(crate) two_frames: usize,
    pub(crate) escaped_panics: Vec<String>,
    /// With the background scrub: trials whose scrub named the damage, and how many
    /// table entries its pass had read by then (one per such trial).
    pub(crate) scrub_found: Vec<u64>,
    /// With the background scrub: trials whose scrub finished a pass clean (the damage
    /// lay outside what it reads), and trials where it had done neither by the close.
    pub(crate) scrub_clean: usize,
    pub(crate) scrub_unfinished: usize,
    /// Table entries a clean scrub pass over the undamaged journal reads.
    pub(crate) scrub_full_pass: u64,
}

impl Tally {
    /// Trials that opened and ran every operation (their answers exact or typed errors).
    pub(crate) fn read_through(&self) -> usize {
        self.opened_all_exact + self.opened_some_errors
    }
}

pub(crate) fn open_error_name(e: &OpenError) -> &'static str {
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
pub(crate) fn trial(
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
pub(crate) enum Damage {
    /// This many single flipped bytes, one trial each.
    SingleFlips(usize),
    /// This many trials of 1 to 16 flipped bytes.
    BurstFlips(usize),
    /// This many trials of the file cut to a random length.
    Truncations(usize),
}

/// The runtime the trials' async operations run on.
pub(crate) fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// Builds a journal, damages copies of it as `damage` says, runs every operation on
/// each copy, and prints the counts.
pub(crate) fn run(damage: Damage, seed: u64, verify_on_open: RedbVerifyOnOpen) -> Tally {
    let rt = runtime();
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
        let guard = HangGuard::arm(&label);
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            trial(&copy, &options, &truth, &rt, &label, &mut tally);
        }));
        drop(guard);
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

/// How many table entries a clean background scrub pass over the journal at `path`
/// reads (opened once more, after its bytes were copied for the trials).
pub(crate) fn full_scrub_pass(path: &Path) -> u64 {
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

/// The sessions of the undamaged journal, in ID order.
pub(crate) fn truth_sessions(truth: &Truth) -> Vec<SessionId> {
    truth.sessions.clone()
}

/// The file offsets of separator keys in branch pages of the positions table
/// (`(u128 session, u64 seq)`, 24 bytes) whose next separator names the same session:
/// the child after each holds only that session's positions. Every such key of every
/// such page (the live page among copies a commit left behind), so that a binary
/// search over a page's separators meets them.
///
/// redb's branch page: type byte 2, a padding byte, the key count (u16, little
/// endian), 4 bytes of padding, then per child a 16-byte checksum and an 8-byte page
/// number, then the keys at their fixed width.
pub(crate) fn positions_separators_before_their_session_ends(
    bytes: &[u8],
    truth: &Truth,
) -> Vec<usize> {
    let mut found = Vec::new();
    const PAGE: usize = 4096;
    const KEY: usize = 24;
    let known: std::collections::BTreeSet<u128> = truth
        .sessions
        .iter()
        .map(|s| s.as_uuid().as_u128())
        .collect();
    let key_at = |page: &[u8], at: usize| {
        let session = u128::from_le_bytes(page[at..at + 16].try_into().unwrap());
        let seq = u64::from_le_bytes(page[at + 16..at + 24].try_into().unwrap());
        (session, seq)
    };
    for (n, page) in bytes.chunks_exact(PAGE).enumerate() {
        if page[0] != 2 {
            continue;
        }
        let keys = usize::from(u16::from_le_bytes([page[2], page[3]]));
        let first = 8 + (keys + 1) * (16 + 8);
        if keys < 2 || first + keys * KEY > PAGE {
            continue;
        }
        let parsed: Vec<(u128, u64)> = (0..keys).map(|i| key_at(page, first + i * KEY)).collect();
        let positions = parsed
            .iter()
            .all(|(s, seq)| known.contains(s) && (1..=RECORDS as u64).contains(seq));
        if !positions {
            continue;
        }
        for (i, w) in parsed.windows(2).enumerate() {
            if w[0].0 == w[1].0 {
                found.push(n * PAGE + first + i * KEY);
            }
        }
    }
    found
}

/// How long one trial may run before the run is ended as hung: a trial takes well under
/// a second to a few seconds; an operation that never answers on a damaged copy is a
/// defect the test exists to find, and should name its trial rather than stall the suite.
const TRIAL_HANG_GUARD: std::time::Duration = std::time::Duration::from_secs(300);

/// Ends the test process, naming the trial, if the trial is still running after
/// [`TRIAL_HANG_GUARD`]; disarmed when dropped.
struct HangGuard(std::sync::mpsc::Sender<()>);

impl HangGuard {
    fn arm(label: &str) -> Self {
        let (done, wait) = std::sync::mpsc::channel::<()>();
        let label = label.to_owned();
        std::thread::spawn(move || {
            if let Err(std::sync::mpsc::RecvTimeoutError::Timeout) =
                wait.recv_timeout(TRIAL_HANG_GUARD)
            {
                eprintln!("{label}: no answer after {TRIAL_HANG_GUARD:?}: an operation hangs");
                std::process::exit(101);
            }
        });
        Self(done)
    }
}
