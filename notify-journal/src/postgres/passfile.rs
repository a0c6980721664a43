//! Passwords for connection strings that carry none: one given
//! ([`PgOptions::password`](super::PgOptions::password)), else the first matching line
//! of a libpq password file ([`PgOptions::passfile`](super::PgOptions::passfile)).
//!
//! The password file is libpq's format: one `hostname:port:database:username:password`
//! a line; a bare `*` in any of the first four fields matches anything; `\:` and `\\`
//! stand for a colon and a backslash (the password ends at the next unescaped colon);
//! lines starting with `#` and lines with fewer than five fields are skipped; the first
//! matching line wins. A host that is a Unix socket (or
//! no host at all) matches `localhost`, as in libpq; the port defaults to 5432, the
//! database to the user name, the user to the operating system's user.

use std::path::Path;

use tokio_postgres::Config;
use tokio_postgres::config::Host;

/// One field of a password file line: its text unescaped, and whether it was a bare
/// `*` (a wildcard; an escaped `\*` is a literal star).
#[derive(Default)]
struct Field {
    text: String,
    wildcard: bool,
}

/// The fields of one password file line (host, port, database, user) and its
/// password, unescaped. `None` for a comment or a line with fewer than five fields.
/// The password ends at the next unescaped colon, as in libpq; a backslash at the end
/// of the line stands for itself.
fn fields(line: &str) -> Option<([Field; 4], String)> {
    if line.starts_with('#') {
        return None;
    }
    let mut out: [Field; 4] = Default::default();
    let mut raw = [0usize; 4];
    let mut password = String::new();
    let mut at = 0;
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        let (c, escaped) = match c {
            '\\' => match chars.next() {
                Some(next) => (next, true),
                None => ('\\', true),
            },
            c => (c, false),
        };
        if c == ':' && !escaped {
            if at == 4 {
                break;
            }
            out[at].wildcard = raw[at] == 1 && out[at].text == "*";
            at += 1;
            continue;
        }
        if at == 4 {
            password.push(c);
        } else {
            // A bare `*` is one raw character; `\*` is two.
            raw[at] += if escaped { 2 } else { 1 };
            out[at].text.push(c);
        }
    }
    (at == 4).then_some((out, password))
}

/// Whether the field of a line matches `value`.
fn matches(field: &Field, value: &str) -> bool {
    field.wildcard || field.text == value
}

/// The password of the first line of `text` that matches the connection.
pub(crate) fn lookup(
    text: &str,
    host: &str,
    port: &str,
    database: &str,
    user: &str,
) -> Option<String> {
    text.lines()
        .map(|l| l.strip_suffix('\r').unwrap_or(l))
        .filter_map(fields)
        .find(|([h, p, d, u], _)| {
            matches(h, host) && matches(p, port) && matches(d, database) && matches(u, user)
        })
        .map(|(_, password)| password)
}

/// The host names, ports, database and user `config` connects with, as a password
/// file matches them: one `(host, port)` per host, in order.
fn targets(config: &Config) -> (Vec<(String, String)>, String, String) {
    let user = config
        .get_user()
        .map(str::to_owned)
        .or_else(|| whoami::username().ok())
        .unwrap_or_default();
    let database = config
        .get_dbname()
        .map_or_else(|| user.clone(), str::to_owned);
    let ports = config.get_ports();
    let port = |i: usize| {
        ports
            .get(i)
            .or_else(|| ports.first())
            .copied()
            .unwrap_or(5432)
            .to_string()
    };
    let hosts: Vec<String> = if config.get_hosts().is_empty() {
        config
            .get_hostaddrs()
            .iter()
            .map(ToString::to_string)
            .collect()
    } else {
        config
            .get_hosts()
            .iter()
            .map(|h| match h {
                Host::Tcp(name) => name.clone(),
                #[cfg(unix)]
                Host::Unix(_) => "localhost".to_owned(),
            })
            .collect()
    };
    let hosts = if hosts.is_empty() {
        vec![("localhost".to_owned(), port(0))]
    } else {
        hosts
            .into_iter()
            .enumerate()
            .map(|(i, h)| (h, port(i)))
            .collect()
    };
    (hosts, database, user)
}

/// Sets `config`'s password when the connection string set none: `password`, else the
/// first line of the password file at `passfile` that matches one of its hosts (tried
/// in order; the driver sends one password to whichever host it reaches). A password
/// file that cannot be read is passed over, as libpq does.
pub(crate) fn fill(config: &mut Config, password: Option<&str>, passfile: Option<&Path>) {
    if config.get_password().is_some() {
        return;
    }
    if let Some(password) = password {
        config.password(password);
        return;
    }
    let Some(text) = passfile.and_then(|p| std::fs::read_to_string(p).ok()) else {
        return;
    };
    let (hosts, database, user) = targets(config);
    if let Some(found) = hosts
        .iter()
        .find_map(|(host, port)| lookup(&text, host, port, &database, &user))
    {
        config.password(found);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(text: &str, target: (&str, &str, &str, &str), want: Option<&str>) {
        let (host, port, db, user) = target;
        assert_eq!(
            lookup(text, host, port, db, user).as_deref(),
            want,
            "{text:?} for {target:?}"
        );
    }

    #[test]
    fn lines_match_field_by_field_and_the_first_match_wins() {
        let text = "db1:5432:app:alice:one\n\
                    db1:5433:app:alice:two\n\
                    *:*:app:alice:three\n\
                    *:*:*:*:four\n\
                    db1:5432:app:alice:never\n";
        check(text, ("db1", "5432", "app", "alice"), Some("one"));
        check(text, ("db1", "5433", "app", "alice"), Some("two"));
        check(text, ("db2", "5432", "app", "alice"), Some("three"));
        check(text, ("db1", "5432", "other", "alice"), Some("four"));
        check(text, ("db1", "5432", "app", "bob"), Some("four"));
        check(
            "db1:5432:app:alice:one\n",
            ("db1", "5432", "app", "bob"),
            None,
        );
        check(
            "db1:5432:app:alice:one\n",
            ("DB1", "5432", "app", "alice"),
            None,
        );
        check("", ("db1", "5432", "app", "alice"), None);
    }

    #[test]
    fn escapes_comments_short_lines_and_line_ends() {
        // `\:` and `\\` in every field; the password ends at an unescaped colon.
        check(
            r"h\:1:5432:d\\b:u\:x:p\:a\\ss:word",
            ("h:1", "5432", r"d\b", "u:x"),
            Some(r"p:a\ss"),
        );
        // An escaped star is a literal star, not a wildcard.
        check(r"\*:5432:d:u:pw", ("*", "5432", "d", "u"), Some("pw"));
        check(r"\*:5432:d:u:pw", ("db", "5432", "d", "u"), None);
        check(r"**:5432:d:u:pw", ("db", "5432", "d", "u"), None);
        check(r"*x:5432:d:u:pw", ("*x", "5432", "d", "u"), Some("pw"));
        check(
            "# db:5432:d:u:commented\nshort:5432:d:u\n\ndb:5432:d:u:pw\r\n",
            ("db", "5432", "d", "u"),
            Some("pw"),
        );
        check("db:5432:d:u:pw", ("# db", "5432", "d", "u"), None);
        // An empty password field is a password, empty.
        check("db:5432:d:u:", ("db", "5432", "d", "u"), Some(""));
        // A backslash at the end of the line stands for itself.
        check("db:5432:d:u:pw\\", ("db", "5432", "d", "u"), Some("pw\\"));
        // Four fields are not a line.
        check("db:5432:d:u", ("db", "5432", "d", "u"), None);
    }

    fn config(conninfo: &str) -> Config {
        conninfo.parse().unwrap()
    }

    #[test]
    fn the_connections_targets_fill_the_password() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("pgpass");
        std::fs::write(
            &file,
            "db1:6000:app:alice:first\n\
             db2:5432:app:alice:second\n\
             localhost:5432:alice:alice:local\n",
        )
        .unwrap();
        let filled = |conninfo: &str, password: Option<&str>| {
            let mut c = config(conninfo);
            fill(&mut c, password, Some(&file));
            c.get_password()
                .map(|p| String::from_utf8_lossy(p).into_owned())
        };
        assert_eq!(
            filled("host=db1 port=6000 dbname=app user=alice", None).as_deref(),
            Some("first")
        );
        // Several hosts: the first with a line; a port per host.
        assert_eq!(
            filled("host=dbx,db2 port=6000,5432 dbname=app user=alice", None).as_deref(),
            Some("second")
        );
        // The database defaults to the user; a Unix socket matches `localhost`.
        assert_eq!(
            filled("host=/run/postgresql user=alice", None).as_deref(),
            Some("local")
        );
        assert_eq!(filled("host=db3 dbname=app user=alice", None), None);
        // The connection string's password wins, then the one given.
        assert_eq!(
            filled(
                "host=db1 port=6000 dbname=app user=alice password=own",
                Some("given")
            )
            .as_deref(),
            Some("own")
        );
        assert_eq!(
            filled("host=db1 port=6000 dbname=app user=alice", Some("given")).as_deref(),
            Some("given")
        );
        // A password file that cannot be read is passed over.
        let mut c = config("host=db1 port=6000 dbname=app user=alice");
        fill(&mut c, None, Some(&dir.path().join("missing")));
        assert_eq!(c.get_password(), None);
    }
}
