//! `notify stats`: a journal's counts and sizes, from the engine's own figures (no scan
//! of the log).

use serde_json::{Value, json};

use crate::error::{CliError, Exit};
use crate::journal::{Journal, Location, SessionPages};
use crate::output::{Out, Table, human_bytes};

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
