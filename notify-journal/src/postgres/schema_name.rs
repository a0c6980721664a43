//! The schema's name: the only text spliced into SQL, checked against
//! `[a-z_][a-z0-9_]{0,62}` (and refused if it starts with `pg_`, see
//! `PgOptions::check`) before use, and always double-quoted, so reserved words such
//! as `select` or `user` work. Every value is a bind parameter.

/// Whether `name` is a schema identifier we may splice into SQL (quoted: see
/// [`quoted`]); the pattern leaves nothing to escape.
pub(crate) fn valid_schema_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    let first_ok = matches!(bytes.next(), Some(b'a'..=b'z' | b'_'));
    first_ok && name.len() <= 63 && bytes.all(|b| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'_'))
}

/// The schema name as a quoted identifier. Safe for names that pass
/// [`valid_schema_name`] (no quote can occur in them).
pub(crate) fn quoted(schema: &str) -> String {
    format!("\"{schema}\"")
}
