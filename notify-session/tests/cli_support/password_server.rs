//! A throwaway PostgreSQL cluster that demands a password (`scram-sha-256` for TCP on
//! 127.0.0.1), so that a test can prove a password reached the server: the shared test
//! server trusts every connection and would accept any password, or none. Built on
//! `notify_testkit::pg_cluster`; stopped (immediate mode) and removed when dropped; every
//! failure panics with what went wrong and the server's log.

use std::path::Path;

use notify_testkit::pg_cluster::Cluster;

/// A running cluster whose superuser `postgres` logs in over TCP with [`Self::PASSWORD`].
pub(crate) struct PasswordServer {
    /// Its TCP port on 127.0.0.1.
    pub(crate) port: u16,
    cluster: Cluster,
}

impl PasswordServer {
    /// The superuser's password: a colon and a backslash in it, so that a password
    /// file's escapes are exercised end to end.
    pub(crate) const PASSWORD: &'static str = r"s3cr:et\pw";

    /// Creates the cluster and starts it.
    pub(crate) fn start() -> Self {
        let fail = |e: std::io::Error| -> ! { panic!("the password test cluster: {e}") };
        let mut cluster = Cluster::new("notify-cli-pw-").unwrap_or_else(|e| fail(e));
        let pwfile = cluster.dir().join("pwfile");
        std::fs::write(&pwfile, format!("{}\n", Self::PASSWORD)).expect("write pwfile");
        cluster.hand_over().unwrap_or_else(|e| fail(e));
        cluster
            .initdb(&[
                "--auth-local=trust",
                "--auth-host=scram-sha-256",
                &format!("--pwfile={}", pwfile.display()),
            ])
            .unwrap_or_else(|e| fail(e));
        let port = cluster
            .start("-c max_connections=20")
            .unwrap_or_else(|e| fail(e));
        Self { port, cluster }
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
        self.cluster.dir()
    }
}
