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
use std::process::{Command, ExitStatus, Stdio};
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
/// It does not tell a kill from a child that had already exited (say, panicked) or
/// hung: [`run_and_kill_mid_work`] does.
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
    Ok(run(child_test, env, prefixes, wanted)?.lines)
}

/// A child run that [`run_and_kill_mid_work`] killed mid-work.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Killed {
    /// Every line the child printed that starts with one of the prefixes, in order
    /// (some may have come after the `wanted`-th, while the kill was on its way).
    pub lines: Vec<String>,
    /// How many of them had been read when the kill was sent: at least `wanted`.
    pub before_kill: usize,
}

/// [`run_and_kill`], proving the kill landed mid-work: the child had printed the
/// `wanted` lines (its progress moved that far; with `wanted` at least 1 it was past
/// its start), was still running when the kill was sent, never panicked nor finished
/// its test, and died of the SIGKILL.
///
/// # Errors
///
/// As [`run_and_kill`]; and an error naming what happened instead when the child
/// printed fewer than `wanted` lines before going quiet for 30 s (hung), had exited
/// before the kill (a panic exits with 101), printed a panic message, finished its
/// test (the harness's summary), or ended other than by the SIGKILL.
pub fn run_and_kill_mid_work<K, V>(
    child_test: &str,
    env: impl IntoIterator<Item = (K, V)>,
    prefixes: &'static [&'static str],
    wanted: u64,
) -> std::io::Result<Killed>
where
    K: AsRef<OsStr>,
    V: AsRef<OsStr>,
{
    let run = run(child_test, env, prefixes, wanted)?;
    let fail = |what: String| {
        Err(std::io::Error::other(format!(
            "child {child_test} was not killed mid-work: {what} ({} of {wanted} lines before \
             the kill, {} in all)",
            run.before_kill,
            run.lines.len()
        )))
    };
    if let Some(status) = run.exited_first {
        return fail(format!("it had exited before the kill: {status}"));
    }
    if run.panicked {
        return fail("it panicked".to_owned());
    }
    if run.finished {
        return fail("its test had ended before the kill".to_owned());
    }
    if (run.before_kill as u64) < wanted {
        return fail(format!(
            "it printed nothing for {} s (hung)",
            LINE_TIMEOUT.as_secs()
        ));
    }
    if !killed_by_sigkill(run.status) {
        return fail(format!("it ended with {} instead", run.status));
    }
    Ok(Killed {
        lines: run.lines,
        before_kill: run.before_kill,
    })
}

/// Whether `status` is a death by SIGKILL (on other platforms: any status, as only
/// the kill ends the child without an exit code there).
fn killed_by_sigkill(status: ExitStatus) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt as _;
        status.signal() == Some(9)
    }
    #[cfg(not(unix))]
    {
        status.code().is_none()
    }
}

/// What one child run did.
struct Run {
    lines: Vec<String>,
    before_kill: usize,
    /// The child's status if it had exited before the kill was sent.
    exited_first: Option<ExitStatus>,
    /// How it ended.
    status: ExitStatus,
    /// The harness printed its summary: the child test had returned or panicked.
    finished: bool,
    /// The child printed a panic message.
    panicked: bool,
}

fn run<K, V>(
    child_test: &str,
    env: impl IntoIterator<Item = (K, V)>,
    prefixes: &'static [&'static str],
    wanted: u64,
) -> std::io::Result<Run>
where
    K: AsRef<OsStr>,
    V: AsRef<OsStr>,
{
    let exe = std::env::current_exe()?;
    let mut child = Command::new(exe)
        .args(["--exact", child_test, "--nocapture", "--test-threads=1"])
        .envs(env)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    let stdout = child
        .stdout
        .take()
        .ok_or_else(|| std::io::Error::other("the child's standard output is not piped"))?;
    let stderr = child
        .stderr
        .take()
        .ok_or_else(|| std::io::Error::other("the child's standard error is not piped"))?;
    // Drained all along (a full pipe would stall the child); a panic message in it
    // means the child panicked, however the kill raced its end.
    let panics = std::thread::spawn(move || {
        let mut panicked = false;
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            panicked |= line.contains("panicked at");
        }
        panicked
    });
    let (tx, rx) = mpsc::channel();
    // The test harness announces the child test as `test NAME ... ` without a line
    // break: the child's first line follows it on the same line.
    let header = format!("test {child_test} ... ");
    let reader = std::thread::spawn(move || {
        let mut finished = false;
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            let line = match line.strip_prefix(&header) {
                Some(rest) => rest.to_owned(),
                None => line,
            };
            // The harness's summary: the child test returned or panicked.
            finished |= line.starts_with("test result:");
            if prefixes.iter().any(|p| line.starts_with(p)) {
                // The receiver lives until the child is dead and this thread joined.
                let _ = tx.send(line);
            }
        }
        finished
    });
    let mut lines = Vec::new();
    while (lines.len() as u64) < wanted {
        match rx.recv_timeout(LINE_TIMEOUT) {
            Ok(l) => lines.push(l),
            Err(_) => break,
        }
    }
    let before_kill = lines.len();
    let exited_first = child.try_wait()?;
    child.kill()?; // SIGKILL
    let status = child.wait()?;
    let finished = reader
        .join()
        .map_err(|_| std::io::Error::other("the child's reader thread panicked"))?;
    let panicked = panics
        .join()
        .map_err(|_| std::io::Error::other("the child's standard error reader panicked"))?;
    lines.extend(rx.try_iter());
    Ok(Run {
        lines,
        before_kill,
        exited_first,
        status,
        finished,
        panicked,
    })
}
