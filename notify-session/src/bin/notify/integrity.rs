//! `verify` (the journal's deep integrity check) and `stats`.

use notify_session::notify_journal::{
    DEFAULT_MAX_PROBLEMS, EngineCheck, Problem, RedbJournal, VerifyReport,
};
use serde_json::{Value, json};

use crate::error::{CliError, Exit};
use crate::journal::{Journal, Location, SessionPages};
use crate::output::{Out, Progress, Table, human_bytes};

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

/// `notify stats`.
pub(crate) async fn stats(at: &Location, out: &mut Out) -> Result<(), CliError> {
    let what = at.describe();
    let journal = Journal::open_read(at).await?;
    let mut rows: Vec<(&str, Value, String)> = Vec::new();
    match (&journal, at) {
        (Journal::Reader(r), Location::File(path)) => {
            let size = std::fs::metadata(path)
                .map_err(|e| CliError::new(Exit::Failed, format!("{what}: {e}")))?
                .len();
            let s = r
                .stats_blocking()
                .map_err(|e| CliError::journal(&what, &e))?;
            let mut sessions = 0u64;
            let mut pages = SessionPages::default();
            while let Some(page) = pages.next(&journal, &what).await? {
                sessions += page.len() as u64;
            }
            rows.push(("file size", json!(size), human_bytes(size)));
            rows.push((
                "format version",
                json!(s.format_version),
                s.format_version.to_string(),
            ));
            rows.push(("sessions", json!(sessions), sessions.to_string()));
            rows.push(("frames", json!(s.frames), s.frames.to_string()));
            rows.push(("keys", json!(s.keys), s.keys.to_string()));
            let per = size.checked_div(s.frames);
            rows.push((
                "bytes per frame",
                json!(per),
                per.map_or_else(|| "-".to_owned(), |p| format!("{p} (file size / frames)")),
            ));
        }
        (Journal::Postgres(p), _) => {
            let s = p.stats().await.map_err(|e| CliError::journal(&what, &e))?;
            rows.push((
                "schema version",
                json!(s.schema_version),
                s.schema_version.to_string(),
            ));
            rows.push(("sessions", json!(s.sessions), s.sessions.to_string()));
            rows.push(("frames", json!(s.frames), s.frames.to_string()));
            rows.push((
                "keys",
                json!(s.frames),
                format!("{} (one per frame)", s.frames),
            ));
            rows.push((
                "table size",
                json!(s.relation_bytes),
                human_bytes(s.relation_bytes),
            ));
            rows.push((
                "record bytes",
                json!(s.record_bytes),
                human_bytes(s.record_bytes),
            ));
            let per = s.relation_bytes.checked_div(s.frames);
            rows.push((
                "bytes per frame",
                json!(per),
                per.map_or_else(|| "-".to_owned(), |p| format!("{p} (table size / frames)")),
            ));
        }
        _ => {
            return Err(CliError::new(
                Exit::Failed,
                "stats: unexpected journal kind",
            ));
        }
    }
    journal.close().await;
    if out.json {
        let mut obj = serde_json::Map::new();
        obj.insert("journal".to_owned(), json!(what));
        for (name, value, _) in &rows {
            obj.insert(name.replace(' ', "_"), value.clone());
        }
        return out.json(&Value::Object(obj));
    }
    out.line(&what)?;
    let table: Vec<Vec<String>> = rows
        .into_iter()
        .map(|(name, _, text)| vec![format!("  {name}"), text])
        .collect();
    Table::new(&[]).print(out, &table)
}
