//! A throwaway PostgreSQL cluster that demands a password (`scram-sha-256` for TCP on
//! 127.0.0.1), so that a test can prove a password reached the server: the shared test
//! server trusts every connection and would accept any password, or none. `initdb` and
//! `pg_ctl` come from the machine's PostgreSQL (`/usr/lib/postgresql/<version>/bin`, or
//! `NOTIFY_TEST_PG_BIN`), run as the `postgres` OS user when the tests run as root.
//! Stopped (immediate mode) and removed when dropped; every failure panics with what
//! went wrong and the server's log.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A running cluster whose superuser `postgres` logs in over TCP with [`Self::PASSWORD`].
pub(crate) struct PasswordServer {
    /// Its TCP port on 127.0.0.1.
    pub(crate) port: u16,
    dir: tempfile::TempDir,
    bin: PathBuf,
    as_postgres: bool,
}

fn bin_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("NOTIFY_TEST_PG_BIN") {
        return PathBuf::from(dir);
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .unwrap_or_else(|e| {
            panic!(
                "the password tests need PostgreSQL's server binaries (initdb, pg_ctl) under \
                 /usr/lib/postgresql/<version>/bin or in NOTIFY_TEST_PG_BIN: {e}"
            )
        })
        .filter_map(Result::ok)
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
        .unwrap_or_else(|| panic!("no /usr/lib/postgresql/<version>/bin/initdb found"))
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

impl PasswordServer {
    /// The superuser's password: a colon and a backslash in it, so that a password
    /// file's escapes are exercised end to end.
    pub(crate) const PASSWORD: &'static str = r"s3cr:et\pw";

    /// Creates the cluster and starts it.
    pub(crate) fn start() -> Self {
        let bin = bin_dir();
        let as_postgres = is_root();
        let dir = tempfile::Builder::new()
            .prefix("notify-cli-pw-")
            .tempdir()
            .expect("temp dir for the password cluster");
        let mut server = Self {
            port: 0,
            dir,
            bin,
            as_postgres,
        };
        let path = server.dir.path().to_owned();
        let pwfile = path.join("pwfile");
        std::fs::write(&pwfile, format!("{}\n", Self::PASSWORD)).expect("write pwfile");
        if as_postgres {
            server.run_plain("chown", &["-R", "postgres:", &path.display().to_string()]);
        }
        let data = path.join("data");
        server.pg(
            "initdb",
            &[
                "-D",
                &data.display().to_string(),
                "-U",
                "postgres",
                "--auth-local=trust",
                "--auth-host=scram-sha-256",
                &format!("--pwfile={}", pwfile.display()),
                "--no-sync",
                "-E",
                "UTF8",
            ],
        );
        let mut last = String::new();
        for _ in 0..5 {
            let port = std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
                .and_then(|l| l.local_addr())
                .expect("a free port")
                .port();
            let opts = format!(
                "-p {port} -c listen_addresses=127.0.0.1 -c unix_socket_directories={dir} \
                 -c fsync=off -c max_connections=20",
                dir = path.display()
            );
            let log = path.join("server.log");
            let (ok, out) = server.try_pg(
                "pg_ctl",
                &[
                    "-D",
                    &data.display().to_string(),
                    "-l",
                    &log.display().to_string(),
                    "-o",
                    &opts,
                    "-w",
                    "-t",
                    "60",
                    "start",
                ],
            );
            if ok {
                server.port = port;
                break;
            }
            last = format!(
                "{out}\n{}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
        }
        assert!(
            server.port != 0,
            "the password test cluster did not start:\n{last}"
        );
        server
    }

    /// A key/value connection string to this server, without a password.
    pub(crate) fn conninfo(&self) -> String {
        format!(
            "host=127.0.0.1 port={} user=postgres dbname=postgres sslmode=disable",
            self.port
        )
    }

    /// A directory of the cluster's own, for the test's files.
    pub(crate) fn scratch(&self) -> &Path {
        self.dir.path()
    }

    fn run_plain(&self, program: &str, args: &[&str]) {
        let out = Command::new(program)
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("run {program}: {e}"));
        assert!(
            out.status.success(),
            "{program} {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    fn try_pg(&self, tool: &str, args: &[&str]) -> (bool, String) {
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
            .current_dir(self.dir.path())
            .output()
            .unwrap_or_else(|e| panic!("run {}: {e}", exe.display()));
        (
            out.status.success(),
            format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
        )
    }

    fn pg(&self, tool: &str, args: &[&str]) {
        let (ok, out) = self.try_pg(tool, args);
        assert!(ok, "{tool} {args:?} failed:\n{out}");
    }
}

impl Drop for PasswordServer {
    fn drop(&mut self) {
        if self.port != 0 {
            let data = self.dir.path().join("data").display().to_string();
            let _ = self.try_pg("pg_ctl", &["-D", &data, "-m", "immediate", "-w", "stop"]);
        }
    }
}
