//! The append bench's scrub rows (`paired/scrub_vs_off_{1,64}`): the background scrub's
//! cost on appends (issue 20, item 11: at most 10% of the append rate).
//!
//! The default journal (`RedbVerifyOnOpen::Background`) scrubbing without a pause
//! between passes (`scrub_interval(0)`), at its default pace, against no scrub
//! (`RedbVerifyOnOpen::Off`), in alternating rounds. Both sides append to a fresh copy
//! of one journal of [`BASE`] records: several thousand table entries, so that every
//! scrub pass reads many steps of 1,024 entries and the scrub keeps its full pace from
//! the window's first append to its last (over an empty file, as the other rows start,
//! its passes would read a few entries each, far below the pace, and the figure would
//! say little). Every scrubbing sample checks that the scrub read entries during its
//! window (a finished pass, or one under way) and was still running at its end.

use std::path::Path;
use std::time::Duration;

use notify_journal::{RedbJournal, RedbOptions, RedbVerifyOnOpen, ScrubState, ScrubStatus};

use crate::common::{paired, record, scale, session, split};

/// Records already in the journal the scrub rows append to.
const BASE: u64 = 10_000;

/// The sessions [`BASE`]'s records are spread over: far from the appenders' sessions,
/// whose first appends then read no long log (the key census).
const BASE_SESSIONS: u64 = 100;

/// The first of the base's sessions.
const BASE_FIRST_SESSION: u64 = 1 << 32;

/// Runs the scrub rows; `drive(journal, appenders, per)` makes `per` appends from each
/// of `appenders` appenders to the open journal and returns their time.
pub(crate) fn bench_scrub(
    rt: &tokio::runtime::Runtime,
    drive: &dyn Fn(&RedbJournal, u64, u64) -> Duration,
) {
    // 64 appenders append ~60k/s: 32,000 appends keep a window long enough for passes.
    let rows = [("scrub_vs_off_1", 1, 400), ("scrub_vs_off_64", 64, 32_000)];
    if let Ok(only) = std::env::var("NOTIFY_BENCH_PAIRED")
        && !rows.iter().any(|(name, _, _)| name.contains(&only))
    {
        return;
    }
    let base = tempfile::tempdir().unwrap();
    let base_file = base.path().join("base.redb");
    fill_base(rt, &base_file);
    let scrubbing = RedbOptions::default().scrub_interval(Duration::ZERO);
    let off = RedbOptions::default().verify_on_open(RedbVerifyOnOpen::Off);
    for (name, appenders, iters) in rows {
        let mut passes = Vec::new();
        let mut with_scrub = |i| {
            let (elapsed, status) = append_to_copy(&base_file, &scrubbing, appenders, i, drive);
            assert!(
                (status.clean_passes > 0 || status.entries > 0)
                    && matches!(status.state, ScrubState::Scrubbing | ScrubState::Waiting),
                "{name}: the scrub did not run through the window: {status:?}"
            );
            passes.push(status.clean_passes);
            elapsed
        };
        let mut without_scrub = |i| append_to_copy(&base_file, &off, appenders, i, drive).0;
        paired(name, 10, iters, &mut with_scrub, &mut without_scrub);
        if !passes.is_empty() {
            eprintln!("{name}: scrub passes finished in each scrubbing window: {passes:?}");
        }
    }
}

/// Writes [`BASE`] records to a new journal at `path` (no scrub), over sessions the
/// appenders do not use and with keys they never draw.
fn fill_base(rt: &tokio::runtime::Runtime, path: &Path) {
    let options = RedbOptions::default().verify_on_open(RedbVerifyOnOpen::Off);
    let j = RedbJournal::open(path, options).unwrap();
    rt.block_on(async {
        let tasks: Vec<_> = (0..BASE_SESSIONS)
            .map(|n| {
                let j = j.clone();
                let s = session(BASE_FIRST_SESSION + n);
                tokio::spawn(async move {
                    let per = BASE / BASE_SESSIONS;
                    let records: Vec<_> = (0..per)
                        .map(|i| record(s, (1 << 48) + n * per + i))
                        .collect();
                    j.append_all(s, records, None).await.unwrap();
                })
            })
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
    });
    j.close();
}

/// `iters` appends from `appenders` appenders to a fresh copy of the journal at `base`
/// opened with `options`: their time, and the scrub's status at the window's end.
fn append_to_copy(
    base: &Path,
    options: &RedbOptions,
    appenders: u64,
    iters: u64,
    drive: &dyn Fn(&RedbJournal, u64, u64) -> Duration,
) -> (Duration, ScrubStatus) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("j.redb");
    std::fs::copy(base, &path).unwrap();
    let j = RedbJournal::open(&path, options.clone()).unwrap();
    let (per, total) = split(iters, appenders);
    let elapsed = drive(&j, appenders, per);
    let status = j.scrub_status();
    j.close();
    (scale(elapsed, iters, total), status)
}
