//! `notify verify`: the journal's deep integrity check, and its report.

use notify_session::notify_journal::{
    DEFAULT_MAX_PROBLEMS, EngineCheck, Problem, RedbJournal, VerifyReport,
};
use serde_json::json;

use crate::error::{CliError, Exit};
use crate::journal::{Journal, Location};
use crate::output::{Out, Progress, human_bytes};

/// The options of `verify`.
pub(crate) struct VerifyArgs {
    pub(crate) max_problems: Option<usize>,
    pub(crate) pages: bool,
}

/// `notify verify`: exit status 0 only when the journal is clean.
pub(crate) async fn verify(
    at: &Location,
    args: &VerifyArgs,
    out: &mut Out,
) -> Result<Exit, CliError> {
    let what = at.describe();
    let max = args.max_problems.unwrap_or(DEFAULT_MAX_PROBLEMS);
    let mut progress = Progress::new();
    let report = match (at, args.pages) {
        (Location::File(path), true) => {
            let path = path.clone();
            let work = tokio::task::spawn_blocking(move || {
                let report = RedbJournal::verify_file(&path, max);
                (path, report)
            });
            let (path, report) = progress
                .during(&format!("verifying {what} (pages and frames)"), work)
                .await
                .map_err(|e| CliError::new(Exit::Failed, format!("the verify task failed: {e}")))?;
            report.map_err(|e| CliError::open(&path, &e))?
        }
        (Location::Postgres { .. }, true) => {
            return Err(CliError::new(
                Exit::Usage,
                "--pages is redb's page check; PostgreSQL's own checks (data checksums, amcheck) are the server's",
            ));
        }
        (_, false) => {
            let journal = Journal::open_read(at).await?;
            let work = async {
                match &journal {
                    Journal::Reader(r) => r.verify(max).await,
                    Journal::Writer(w) => w.verify(max).await,
                    Journal::Postgres(p) => p.verify(max).await,
                }
            };
            let report = progress
                .during(&format!("verifying {what}"), work)
                .await
                .map_err(|e| CliError::journal(&what, &e))?;
            journal.close().await;
            report
        }
    };
    print_report(&what, &report, out)?;
    Ok(if report.is_clean() {
        Exit::Ok
    } else {
        Exit::Problems
    })
}

/// The session and seq a problem names, where it names them.
fn located(p: &Problem) -> (Option<String>, Option<u64>) {
    match p {
        Problem::Frame { session, seq, .. }
        | Problem::Gap { session, seq }
        | Problem::Unindexed { session, seq, .. } => (Some(session.to_string()), Some(*seq)),
        Problem::Head { session, head, .. } => (Some(session.to_string()), Some(*head)),
        Problem::KeyTwice { session, seqs, .. } => (Some(session.to_string()), Some(seqs.1)),
        Problem::IndexEntry { session, .. } => (Some(session.to_string()), None),
        _ => (None, None),
    }
}

fn engine(report: &VerifyReport) -> (&'static str, Option<&str>) {
    match &report.engine {
        EngineCheck::Clean => ("clean", None),
        EngineCheck::Damaged(why) => ("damaged", Some(why.as_str())),
        _ => ("not run", None),
    }
}

fn print_report(what: &str, report: &VerifyReport, out: &mut Out) -> Result<(), CliError> {
    let (engine, why) = engine(report);
    if out.json {
        for p in &report.problems {
            let (session, seq) = located(p);
            out.json(&json!({
                "type": "problem", "session": session, "seq": seq, "problem": p.to_string(),
            }))?;
        }
        return out.json(&json!({
            "type": "summary", "clean": report.is_clean(), "sessions": report.sessions,
            "frames": report.frames, "keys": report.keys, "bytes": report.bytes,
            "page_check": engine, "page_check_detail": why,
            "problems": report.problem_count, "problems_listed": report.problems.len(),
        }));
    }
    out.line(&format!(
        "{what}: {} sessions, {} frames, {} index entries, {} of frames; page check: {engine}{}",
        report.sessions,
        report.frames,
        report.keys,
        human_bytes(report.bytes),
        why.map(|w| format!(" ({w})")).unwrap_or_default()
    ))?;
    if report.is_clean() {
        return out.line("clean: no problems found");
    }
    out.line(&format!("{} problem(s):", report.problem_count))?;
    for p in &report.problems {
        out.line(&format!("  {p}"))?;
    }
    let unlisted = report
        .problem_count
        .saturating_sub(report.problems.len() as u64);
    if unlisted > 0 {
        out.line(&format!(
            "  … and {unlisted} more (raise --max-problems to list them)"
        ))?;
    }
    Ok(())
}
