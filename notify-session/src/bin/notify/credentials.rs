//! PostgreSQL credentials kept out of the command line, read the way libpq users expect:
//! the connection string from `NOTIFY_DATABASE_URL` when `--postgres` is not given, the
//! password from `PGPASSWORD`, else from the password file (`PGPASSFILE`, else
//! `~/.pgpass`; `%APPDATA%\postgresql\pgpass.conf` on Windows), which is passed over
//! with a warning when others may read it. A password in the connection string itself
//! wins over both.

use std::path::{Path, PathBuf};
use std::sync::Once;

use notify_session::notify_journal::PgOptions;

/// The environment variable holding the connection string when `--postgres` is absent.
pub(crate) const DATABASE_URL_VAR: &str = "NOTIFY_DATABASE_URL";

/// The environment, as this module reads it (a seam for the unit tests).
pub(crate) trait Env {
    /// The variable's value, when set and not empty (libpq takes an empty one as unset).
    fn var(&self, name: &str) -> Option<String>;
    /// The user's home directory.
    fn home(&self) -> Option<PathBuf>;
}

/// The process's own environment.
pub(crate) struct ProcessEnv;

impl Env for ProcessEnv {
    fn var(&self, name: &str) -> Option<String> {
        std::env::var(name).ok().filter(|v| !v.is_empty())
    }

    fn home(&self) -> Option<PathBuf> {
        std::env::var_os("HOME")
            .filter(|h| !h.is_empty())
            .map(PathBuf::from)
            .or_else(std::env::home_dir)
    }
}

/// The connection string from the environment, when `--postgres` is not given.
pub(crate) fn env_conninfo(env: &dyn Env) -> Option<String> {
    env.var(DATABASE_URL_VAR)
}

/// Where a password for a connection string without one comes from.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum PasswordSource {
    /// `PGPASSWORD`.
    Environment(String),
    /// The password file at this path (checked: a plain file only its owner may read).
    File(PathBuf),
    /// None: the connection string's password, or none at all.
    None,
}

/// The password file libpq would read: `PGPASSFILE`, else the default one.
fn passfile_path(env: &dyn Env) -> Option<PathBuf> {
    if let Some(path) = env.var("PGPASSFILE") {
        return Some(PathBuf::from(path));
    }
    if cfg!(windows) {
        env.var("APPDATA")
            .map(|d| Path::new(&d).join("postgresql").join("pgpass.conf"))
    } else {
        env.home().map(|h| h.join(".pgpass"))
    }
}

/// Why a password file is passed over, or `None` when it may be used. A missing file
/// is passed over silently (`Some(None)`), as in libpq.
fn unusable(path: &Path) -> Option<Option<String>> {
    let Ok(meta) = std::fs::metadata(path) else {
        return Some(None);
    };
    if !meta.is_file() {
        return Some(Some(format!(
            "password file {} is not a plain file",
            path.display()
        )));
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        if meta.permissions().mode() & 0o077 != 0 {
            return Some(Some(format!(
                "password file {} has group or world access; permissions should be u=rw \
                 (0600) or less",
                path.display()
            )));
        }
    }
    None
}

/// Where the password comes from, and the warning to print, if any.
pub(crate) fn password_source(env: &dyn Env) -> (PasswordSource, Option<String>) {
    if let Some(password) = env.var("PGPASSWORD") {
        return (PasswordSource::Environment(password), None);
    }
    let Some(path) = passfile_path(env) else {
        return (PasswordSource::None, None);
    };
    match unusable(&path) {
        None => (PasswordSource::File(path), None),
        Some(warning) => (PasswordSource::None, warning),
    }
}

/// `options` with the password source of the process's environment (a warning about
/// the password file is printed once).
pub(crate) fn with_password(options: PgOptions) -> PgOptions {
    static WARNED: Once = Once::new();
    let (source, warning) = password_source(&ProcessEnv);
    if let Some(warning) = warning {
        WARNED.call_once(|| eprintln!("notify: warning: {warning}: not used"));
    }
    match source {
        PasswordSource::Environment(password) => options.password(password),
        PasswordSource::File(path) => options.passfile(path),
        PasswordSource::None => options,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    struct FakeEnv {
        vars: HashMap<&'static str, String>,
        home: Option<PathBuf>,
    }

    impl Env for FakeEnv {
        fn var(&self, name: &str) -> Option<String> {
            self.vars.get(name).cloned().filter(|v| !v.is_empty())
        }

        fn home(&self) -> Option<PathBuf> {
            self.home.clone()
        }
    }

    fn env(vars: &[(&'static str, &str)], home: Option<&Path>) -> FakeEnv {
        FakeEnv {
            vars: vars.iter().map(|(k, v)| (*k, (*v).to_owned())).collect(),
            home: home.map(Path::to_owned),
        }
    }

    #[cfg(unix)]
    fn chmod(path: &Path, mode: u32) {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    #[test]
    fn the_password_comes_from_pgpassword_then_the_password_file() {
        let dir = tempfile::tempdir().unwrap();
        let home_file = dir.path().join(".pgpass");
        std::fs::write(&home_file, "*:*:*:*:secret\n").unwrap();
        #[cfg(unix)]
        chmod(&home_file, 0o600);
        let other = dir.path().join("other.pgpass");
        std::fs::write(&other, "*:*:*:*:other\n").unwrap();
        #[cfg(unix)]
        chmod(&other, 0o400);
        let home = Some(dir.path());

        // PGPASSWORD first; an empty one counts as unset.
        assert_eq!(
            password_source(&env(&[("PGPASSWORD", "pw"), ("PGPASSFILE", "x")], home)).0,
            PasswordSource::Environment("pw".to_owned())
        );
        if cfg!(unix) {
            assert_eq!(
                password_source(&env(&[("PGPASSWORD", "")], home)),
                (PasswordSource::File(home_file.clone()), None)
            );
            // PGPASSFILE over the default file.
            let p = other.to_str().unwrap();
            assert_eq!(
                password_source(&env(&[("PGPASSFILE", p)], home)),
                (PasswordSource::File(other.clone()), None)
            );
        }
        // A missing file: no password, no warning; no home: nothing.
        let missing = dir.path().join("missing");
        let m = missing.to_str().unwrap();
        assert_eq!(
            password_source(&env(&[("PGPASSFILE", m)], home)),
            (PasswordSource::None, None)
        );
        if cfg!(unix) {
            assert_eq!(
                password_source(&env(&[], None)),
                (PasswordSource::None, None)
            );
        }
        // A directory is not a password file.
        let d = dir.path().to_str().unwrap();
        let (source, warning) = password_source(&env(&[("PGPASSFILE", d)], home));
        assert_eq!(source, PasswordSource::None);
        assert!(warning.unwrap().contains("not a plain file"));
    }

    #[cfg(unix)]
    #[test]
    fn a_password_file_others_may_read_is_passed_over_with_a_warning() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join(".pgpass");
        std::fs::write(&file, "*:*:*:*:secret\n").unwrap();
        for (mode, usable) in [
            (0o600, true),
            (0o400, true),
            (0o700, true),
            (0o640, false),
            (0o604, false),
            (0o620, false),
            (0o602, false),
            (0o644, false),
        ] {
            chmod(&file, mode);
            let (source, warning) = password_source(&env(&[], Some(dir.path())));
            if usable {
                assert_eq!(
                    (source, warning),
                    (PasswordSource::File(file.clone()), None),
                    "{mode:o}"
                );
            } else {
                assert_eq!(source, PasswordSource::None, "{mode:o}");
                let warning = warning.unwrap();
                assert!(
                    warning.contains("group or world access") && !warning.contains("secret"),
                    "{mode:o}: {warning}"
                );
            }
        }
    }

    #[test]
    fn the_connection_string_comes_from_notify_database_url() {
        assert_eq!(
            env_conninfo(&env(&[(DATABASE_URL_VAR, "host=db")], None)).as_deref(),
            Some("host=db")
        );
        assert_eq!(env_conninfo(&env(&[(DATABASE_URL_VAR, "")], None)), None);
        assert_eq!(env_conninfo(&env(&[], None)), None);
    }
}
