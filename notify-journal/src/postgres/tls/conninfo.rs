//! The connection string's libpq TLS keys (`sslmode`, `sslrootcert`, `sslcert`,
//! `sslkey`): taken out before the driver parses the rest.

use std::path::PathBuf;

use super::settings::PgSslMode;
use crate::postgres::error::PgOpenError;

/// The libpq TLS keys a connection string may carry that the driver does not
/// parse itself; taken out of the string before it is handed over.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct ConninfoTls {
    pub(crate) mode: Option<PgSslMode>,
    /// Whether `sslmode` was given at all (`prefer` and `allow` leave `mode` unset).
    pub(crate) mode_given: bool,
    pub(crate) root_cert: Option<PathBuf>,
    /// `sslrootcert=system` (libpq 16): the system's roots, `verify-full` only.
    pub(crate) system_roots: bool,
    pub(crate) cert: Option<PathBuf>,
    pub(crate) key: Option<PathBuf>,
}

impl ConninfoTls {
    /// Records one libpq TLS key; `Ok(false)` if `key` is not one of them.
    fn take(&mut self, key: &str, value: &str) -> Result<bool, PgOpenError> {
        match key {
            "sslmode" => {
                self.mode_given = true;
                self.mode = Some(match value {
                    "disable" => PgSslMode::Disable,
                    "require" => PgSslMode::Require,
                    "verify-ca" => PgSslMode::VerifyCa,
                    "verify-full" => PgSslMode::VerifyFull,
                    // `prefer` (the driver's default) and `allow` may fall back to
                    // plain text: treated as unset, so the journal's default applies.
                    "prefer" | "allow" => return Ok(true),
                    _ => {
                        return Err(PgOpenError::InvalidOption {
                            option: "sslmode",
                            reason: "must be disable, allow, prefer, require, verify-ca or \
                                     verify-full",
                        });
                    }
                });
            }
            "sslrootcert" if value == "system" => {
                self.system_roots = true;
                self.root_cert = None;
            }
            "sslrootcert" => {
                self.system_roots = false;
                self.root_cert = Some(PathBuf::from(value));
            }
            "sslcert" => self.cert = Some(PathBuf::from(value)),
            "sslkey" => self.key = Some(PathBuf::from(value)),
            _ => return Ok(false),
        }
        Ok(true)
    }
}

/// Splits the libpq TLS keys (`sslmode`, `sslrootcert`, `sslcert`, `sslkey`) out of
/// a connection string (key/value or URL form), returning them and the rest of the
/// string for the driver.
pub(crate) fn split_conninfo(conninfo: &str) -> Result<(ConninfoTls, String), PgOpenError> {
    let mut tls = ConninfoTls::default();
    if conninfo.starts_with("postgres://") || conninfo.starts_with("postgresql://") {
        let Some((base, query)) = conninfo.split_once('?') else {
            return Ok((tls, conninfo.to_owned()));
        };
        let mut kept = Vec::new();
        for pair in query.split('&') {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            let value = percent_decode(v).ok_or(PgOpenError::InvalidConfig)?;
            if !tls.take(k, &value)? {
                kept.push(pair);
            }
        }
        let rest = if kept.is_empty() {
            base.to_owned()
        } else {
            format!("{base}?{}", kept.join("&"))
        };
        return Ok((tls, rest));
    }
    // Key/value form: `key = value` pairs separated by whitespace; a value may be
    // single-quoted with backslash escapes.
    let mut rest = String::with_capacity(conninfo.len());
    let mut chars = conninfo.char_indices().peekable();
    loop {
        while chars.next_if(|(_, c)| c.is_whitespace()).is_some() {}
        let Some(&(start, _)) = chars.peek() else {
            break;
        };
        let mut key = String::new();
        while let Some((_, c)) = chars.next_if(|(_, c)| *c != '=' && !c.is_whitespace()) {
            key.push(c);
        }
        while chars.next_if(|(_, c)| c.is_whitespace()).is_some() {}
        if chars.next_if(|(_, c)| *c == '=').is_none() {
            return Err(PgOpenError::InvalidConfig);
        }
        while chars.next_if(|(_, c)| c.is_whitespace()).is_some() {}
        let mut value = String::new();
        if chars.next_if(|(_, c)| *c == '\'').is_some() {
            loop {
                match chars.next() {
                    None => return Err(PgOpenError::InvalidConfig),
                    Some((_, '\'')) => break,
                    Some((_, '\\')) => match chars.next() {
                        Some((_, c)) => value.push(c),
                        None => return Err(PgOpenError::InvalidConfig),
                    },
                    Some((_, c)) => value.push(c),
                }
            }
        } else {
            while let Some((_, c)) = chars.next_if(|(_, c)| !c.is_whitespace()) {
                if c == '\\' {
                    match chars.next() {
                        Some((_, c)) => value.push(c),
                        None => return Err(PgOpenError::InvalidConfig),
                    }
                } else {
                    value.push(c);
                }
            }
        }
        let end = chars.peek().map_or(conninfo.len(), |(i, _)| *i);
        if !tls.take(&key, &value)? {
            rest.push_str(conninfo.get(start..end).unwrap_or_default());
            rest.push(' ');
        }
    }
    Ok((tls, rest.trim_end().to_owned()))
}

fn percent_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        if b == b'%' {
            let hex = s.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    #[test]
    fn libpq_tls_keys_are_split_out_of_key_value_strings() {
        let (tls, rest) = split_conninfo(
            "host=db.example user=app sslmode=verify-full sslrootcert='/etc/ca dir/ca.pem' \
             password='it\\'s' dbname = x",
        )
        .unwrap();
        assert_eq!(tls.mode, Some(PgSslMode::VerifyFull));
        assert_eq!(tls.root_cert, Some(PathBuf::from("/etc/ca dir/ca.pem")));
        assert_eq!(
            rest,
            "host=db.example user=app password='it\\'s' dbname = x"
        );
        let (tls, rest) = split_conninfo("host=h sslmode=prefer").unwrap();
        assert_eq!((tls.mode, rest.as_str()), (None, "host=h"));
        assert!(matches!(
            split_conninfo("host=h sslmode=sometimes"),
            Err(PgOpenError::InvalidOption {
                option: "sslmode",
                ..
            })
        ));
        assert!(matches!(
            split_conninfo("host=h password='unterminated"),
            Err(PgOpenError::InvalidConfig)
        ));
    }

    #[test]
    fn libpq_tls_keys_are_split_out_of_urls() {
        let (tls, rest) = split_conninfo(
            "postgresql://u:p@db.example/x?sslmode=verify-ca&application_name=a&sslcert=%2Fc.pem&sslkey=k",
        )
        .unwrap();
        assert_eq!(tls.mode, Some(PgSslMode::VerifyCa));
        assert_eq!(tls.cert, Some(PathBuf::from("/c.pem")));
        assert_eq!(tls.key, Some(PathBuf::from("k")));
        assert_eq!(rest, "postgresql://u:p@db.example/x?application_name=a");
    }
}
