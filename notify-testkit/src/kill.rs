//! Real process kills: a test re-runs its own binary as a child running one named test,
//! which does the work and prints a line per acknowledgement; the parent kills it with
//! SIGKILL after a chosen number of lines, then verifies what the child left behind
//! against what it printed.
//!
//! The child test reads its parameters from environment variables the parent sets, and
//! returns at once in a normal test run (without them); the parent test returns at once
//! inside a child. [`seed`] takes a replayable seed from the environment.

use std::ffi::OsStr;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

pub use crate::crash::xorshift;

/// How long the parent waits for the child's next line before killing it anyway. A hang
/// guard, not a timing assertion: everything is still verified after the kill.
const LINE_TIMEOUT: Duration = Duration::from_secs(30);

/// The seed in the environment variable `var`, or one from the clock; printed to
/// standard error as `var=seed` so that a failing run can be replayed. Never 0.
#[must_use]
pub fn seed(var: &str) -> u64 {
    let seed = std::env::var(var)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
                | 1
        });
    eprintln!("{var}={seed}");
    seed
}

/// Prints one line to standard output and flushes it, for the parent to read at once.
///
/// # Errors
///
/// Writing standard output.
pub fn say(line: &str) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}")?;
    out.flush()
}

/// Runs the test `child_test` of the current test binary as a child process with `env`
/// set, reads the lines of its standard output that start with one of `prefixes`, and
/// kills it (SIGKILL) once `wanted` such lines were read (0: as soon as it starts), or
/// when it has printed none for a while. Returns every such line the child printed
/// before it died, in order.
///
/// # Errors
///
/// Finding the current executable, starting, killing or waiting for the child.
pub fn run_and_kill<K, V>(
    child_test: &str,
    env: impl IntoIterator<Item = (K, V)>,
    prefixes: &'static [&'static str],
    wanted: u64,
) -> std::io::Result<Vec<String>>
where
    K: AsRef<OsStr>,
    V: AsRef<OsStr>,
{
    let exe = std::env::current_exe()?;
    let mut child = Command::new(exe)
        .args(["--exact", child_test, "--nocapture", "--test-threads=1"])
        .envs(env)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()?;
    let stdout = child
        .stdout
        .take()
        .ok_or_else(|| std::io::Error::other("the child's standard output is not piped"))?;
    let (tx, rx) = mpsc::channel();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if prefixes.iter().any(|p| line.starts_with(p)) && tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut lines = Vec::new();
    while (lines.len() as u64) < wanted {
        match rx.recv_timeout(LINE_TIMEOUT) {
            Ok(l) => lines.push(l),
            Err(_) => break,
        }
    }
    child.kill()?; // SIGKILL
    child.wait()?;
    reader
        .join()
        .map_err(|_| std::io::Error::other("the child's reader thread panicked"))?;
    lines.extend(rx.try_iter());
    Ok(lines)
}
