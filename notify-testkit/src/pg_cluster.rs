//! A throwaway PostgreSQL cluster of a test's own (feature `postgres`), for what the
//! shared test server cannot show: it trusts every connection, and has no TLS.
//!
//! `initdb` and `pg_ctl` come from the machine's PostgreSQL
//! (`/usr/lib/postgresql/<version>/bin`, the highest version, or the directory in
//! [`PG_BIN_VAR`]) and run as the `postgres` OS user when the tests run as root
//! (PostgreSQL refuses root). The cluster lives in a temporary directory, listens on
//! 127.0.0.1 on a free port, and is stopped (immediate mode) and removed when dropped.
//!
//! The steps: [`Cluster::new`], write any files the server needs into
//! [`Cluster::dir`], [`Cluster::hand_over`] (gives the directory to the `postgres` user
//! when running as root), [`Cluster::initdb`], optionally write into
//! [`Cluster::data`] (`pg_hba.conf`), then [`Cluster::start`].

use std::io::{Error, Result};
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The environment variable naming the directory of `initdb` and `pg_ctl`, overriding
/// the search under `/usr/lib/postgresql`.
pub const PG_BIN_VAR: &str = "NOTIFY_TEST_PG_BIN";

/// How many free ports [`Cluster::start`] tries: another process may take a port
/// between finding it free and the server binding it.
const START_ATTEMPTS: usize = 5;

/// A cluster in a temporary directory; stopped and removed when dropped.
#[derive(Debug)]
pub struct Cluster {
    port: Option<u16>,
    dir: tempfile::TempDir,
    bin: PathBuf,
    as_postgres: bool,
}

/// The directory holding `initdb` and `pg_ctl`.
fn bin_dir() -> Result<PathBuf> {
    if let Some(dir) = std::env::var_os(PG_BIN_VAR) {
        return Ok(PathBuf::from(dir));
    }
    let entries = std::fs::read_dir("/usr/lib/postgresql").map_err(|e| {
        Error::other(format!(
            "these tests need PostgreSQL's server binaries (initdb, pg_ctl) under \
             /usr/lib/postgresql/<version>/bin or in {PG_BIN_VAR}: {e}"
        ))
    })?;
    let mut versions: Vec<(u32, PathBuf)> = entries
        .filter_map(std::result::Result::ok)
        .filter_map(|e| {
            let v = e.file_name().to_str()?.parse().ok()?;
            Some((v, e.path().join("bin")))
        })
        .filter(|(_, bin)| bin.join("initdb").exists())
        .collect();
    versions.sort();
    versions
        .pop()
        .map(|(_, bin)| bin)
        .ok_or_else(|| Error::other("no /usr/lib/postgresql/<version>/bin/initdb found"))
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

/// Runs `program` with `args`; an error names it and carries its standard error.
///
/// # Errors
///
/// Starting the program, or its failure.
pub fn run(program: &str, args: &[&str]) -> Result<()> {
    let out = Command::new(program)
        .args(args)
        .output()
        .map_err(|e| Error::other(format!("run {program}: {e}")))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(Error::other(format!(
            "{program} {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        )))
    }
}

impl Cluster {
    /// An empty temporary directory (its name starting with `prefix`) for a cluster;
    /// nothing runs yet.
    ///
    /// # Errors
    ///
    /// No PostgreSQL server binaries, or no temporary directory.
    pub fn new(prefix: &str) -> Result<Self> {
        Ok(Self {
            port: None,
            bin: bin_dir()?,
            as_postgres: is_root(),
            dir: tempfile::Builder::new().prefix(prefix).tempdir()?,
        })
    }

    /// The cluster's directory, for the files the server or the test needs.
    #[must_use]
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The data directory (`initdb` creates it).
    #[must_use]
    pub fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// The port the server listens on at 127.0.0.1, once started.
    #[must_use]
    pub fn port(&self) -> Option<u16> {
        self.port
    }

    /// Gives the directory and everything in it to the `postgres` OS user when the
    /// tests run as root; does nothing otherwise.
    ///
    /// # Errors
    ///
    /// `chown` failing.
    pub fn hand_over(&self) -> Result<()> {
        if self.as_postgres {
            run(
                "chown",
                &["-R", "postgres:", &self.dir().display().to_string()],
            )?;
        }
        Ok(())
    }

    /// Creates the data directory: superuser `postgres`, UTF-8, no sync, and `auth`
    /// (the authentication arguments, e.g. `["-A", "trust"]`).
    ///
    /// # Errors
    ///
    /// `initdb` failing, with its output.
    pub fn initdb(&self, auth: &[&str]) -> Result<()> {
        let data = self.data().display().to_string();
        let mut args = vec!["-D", &data, "-U", "postgres"];
        args.extend_from_slice(auth);
        args.extend_from_slice(&["--no-sync", "-E", "UTF8"]);
        self.pg("initdb", &args)
    }

    /// Starts the server on a free port of 127.0.0.1, its Unix socket in the cluster's
    /// directory, without fsync, with `options` (more `-c name=value` settings).
    ///
    /// # Errors
    ///
    /// The server not starting on any of a few ports, with `pg_ctl`'s output and the
    /// server's log.
    pub fn start(&mut self, options: &str) -> Result<u16> {
        let data = self.data().display().to_string();
        let mut last = String::new();
        for _ in 0..START_ATTEMPTS {
            let port = std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
                .and_then(|l| l.local_addr())?
                .port();
            let opts = format!(
                "-p {port} -c listen_addresses=127.0.0.1 -c unix_socket_directories={dir} \
                 -c fsync=off {options}",
                dir = self.dir().display()
            );
            let log = self.dir().join("server.log");
            let args = [
                "-D",
                &data,
                "-l",
                &log.display().to_string(),
                "-o",
                &opts,
                "-w",
                "-t",
                "60",
                "start",
            ];
            match self.try_pg("pg_ctl", &args)? {
                (true, _) => {
                    self.port = Some(port);
                    return Ok(port);
                }
                (false, out) => {
                    last = format!(
                        "{out}\n{}",
                        std::fs::read_to_string(&log).unwrap_or_default()
                    );
                }
            }
        }
        Err(Error::other(format!(
            "the test cluster did not start:\n{last}"
        )))
    }

    /// Runs a server tool (as `postgres` when root) in the cluster's directory: whether
    /// it succeeded, and its output.
    fn try_pg(&self, tool: &str, args: &[&str]) -> Result<(bool, String)> {
        let exe = self.bin.join(tool);
        let mut cmd = if self.as_postgres {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(&exe);
            c
        } else {
            Command::new(&exe)
        };
        let out = cmd
            .args(args)
            .current_dir(self.dir())
            .output()
            .map_err(|e| Error::other(format!("run {}: {e}", exe.display())))?;
        Ok((
            out.status.success(),
            format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
        ))
    }

    fn pg(&self, tool: &str, args: &[&str]) -> Result<()> {
        match self.try_pg(tool, args)? {
            (true, _) => Ok(()),
            (false, out) => Err(Error::other(format!("{tool} {args:?} failed:\n{out}"))),
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if self.port.is_some() {
            let data = self.data().display().to_string();
            // Best effort: the directory is removed either way.
            let _ = self.try_pg("pg_ctl", &["-D", &data, "-m", "immediate", "-w", "stop"]);
        }
    }
}
