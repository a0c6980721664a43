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
//! One crafted damage (separators of the positions table's branch pages raised out of
//! order) checks that listing sessions answers rather than walking the same keys forever,
//! and every random trial runs under a hang guard that names it.
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

mod damage_support;

use damage_support::{Damage, Tally, run};
use notify_journal::RedbVerifyOnOpen;

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

/// A damaged separator in a branch page of the positions table (a session's key bumped
/// above every other) makes a seek land in a leaf before the one it asks for, so the
/// seek answers a session below where it began. Listing the sessions must then answer
/// (an error naming the disorder, or the truth), never walk the same keys forever: the
/// old listing went back to that session after every seek, growing without end.
#[test]
fn a_seek_answering_below_its_start_ends_the_listing() {
    let rt = damage_support::runtime();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal.redb");
    let truth = damage_support::build(&path, &rt);
    let mut bytes = std::fs::read(&path).unwrap();
    let separators = damage_support::positions_separators_before_their_session_ends(&bytes, &truth);
    assert!(
        !separators.is_empty(),
        "no branch page of the positions table with two separators of one session"
    );
    // The session half of each such key: every byte 0xff, above every session.
    for at in separators {
        bytes[at..at + 16].fill(0xff);
    }
    std::fs::write(&path, &bytes).unwrap();

    let options = notify_journal::RedbOptions::default().verify_on_open(RedbVerifyOnOpen::Off);
    let j = notify_journal::RedbJournal::open(&path, options).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let listing = j.clone();
    let handle = rt.handle().clone();
    std::thread::spawn(move || {
        let _ = tx.send(handle.block_on(notify_journal::JournalRead::sessions(&listing)));
    });
    let answer = rx.recv_timeout(std::time::Duration::from_secs(60)).expect(
        "listing the sessions did not answer within a minute: it walks the same keys forever",
    );
    match answer {
        Err(notify_journal::JournalError::Corrupt { source, .. }) => {
            assert!(source.to_string().contains("out of order"), "{source}");
        }
        other => {
            let mut got = other.expect("a typed error or the sessions");
            got.sort();
            assert_eq!(got, damage_support::truth_sessions(&truth));
        }
    }
}
