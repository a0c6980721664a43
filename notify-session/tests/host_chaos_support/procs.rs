//! The host processes: this test binary re-executed in the host role, driven through
//! its standard input and answering on its standard output, one line per request.
//!
//! The parent signals a host by its process ID, without the lock the driver holds
//! while it waits for an answer, so a stopped host never blocks a kill.

use std::io::{BufRead as _, BufReader, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Mutex, mpsc};
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// The environment variable that makes the test binary a host: its log file.
pub(crate) const ROLE_VAR: &str = "NS_HOST_CHAOS_LOG";
/// The schema the hosts share.
pub(crate) const SCHEMA_VAR: &str = "NS_HOST_CHAOS_SCHEMA";

/// One host slot: the process currently running in it.
pub(crate) struct Host {
    /// The running process's ID (0: none), for signals.
    pid: AtomicI32,
    /// Its pipes, for requests.
    io: Mutex<Option<Io>>,
    /// How many processes this slot has started.
    incarnations: Mutex<u32>,
    index: usize,
}

struct Io {
    child: Child,
    stdin: ChildStdin,
    lines: mpsc::Receiver<String>,
}

impl Host {
    pub(crate) fn new(index: usize) -> Self {
        Self {
            pid: AtomicI32::new(0),
            io: Mutex::new(None),
            incarnations: Mutex::new(0),
            index,
        }
    }

    /// Starts a host process running `test` in the host role, logging to a new file
    /// under `dir`; waits (bounded) until it says `READY`.
    pub(crate) fn start(&self, test: &str, dir: &Path, env: &[(&str, String)]) {
        let mut n = self.incarnations.lock().unwrap();
        *n += 1;
        let log: PathBuf = dir.join(format!("host{}-{:03}.log", self.index, *n));
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", test, "--nocapture", "--test-threads=1"])
            .env(ROLE_VAR, &log)
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        let pid = i32::try_from(child.id()).unwrap();
        let io = Io {
            child,
            stdin,
            lines,
        };
        // The test harness's own lines come first (its `test NAME ... ` ends in no
        // newline: `READY <holder>` completes that line).
        loop {
            let line = io.lines.recv_timeout(Duration::from_secs(120));
            let line = line.unwrap_or_else(|_| panic!("host {} did not start", self.index));
            if line.contains("READY ") {
                break;
            }
        }
        *self.io.lock().unwrap() = Some(io);
        self.pid.store(pid, Ordering::SeqCst);
    }

    /// Sends `request` and waits up to `wait` for the answer line starting with
    /// `answer_prefix`; `None` if the host is gone, stopped or slow. Lines of
    /// earlier, abandoned requests are skipped.
    pub(crate) fn ask(&self, request: &str, answer_prefix: &str, wait: Duration) -> Option<String> {
        let mut io = self.io.lock().unwrap();
        let io = io.as_mut()?;
        writeln!(io.stdin, "{request}").ok()?;
        io.stdin.flush().ok()?;
        let deadline = std::time::Instant::now() + wait;
        loop {
            let left = deadline.checked_duration_since(std::time::Instant::now())?;
            let line = io.lines.recv_timeout(left).ok()?;
            if let Some(rest) = line.strip_prefix(answer_prefix) {
                return Some(rest.trim().to_owned());
            }
        }
    }

    /// Sends `signal` to the running process.
    pub(crate) fn signal(&self, signal: Signal) {
        let pid = self.pid.load(Ordering::SeqCst);
        assert_ne!(pid, 0, "host {} is not running", self.index);
        kill(Pid::from_raw(pid), signal).unwrap();
    }

    /// SIGKILLs the running process and reaps it.
    pub(crate) fn kill(&self) {
        self.signal(Signal::SIGKILL);
        self.pid.store(0, Ordering::SeqCst);
        if let Some(mut io) = self.io.lock().unwrap().take() {
            io.child.wait().unwrap();
        }
    }

    /// Asks the host to shut down gracefully (release its leases) and waits for it
    /// to exit; true if it exited successfully.
    pub(crate) fn shut_down(&self) -> bool {
        let bye = self.ask("QUIT", "BYE", Duration::from_secs(60));
        self.pid.store(0, Ordering::SeqCst);
        let Some(mut io) = self.io.lock().unwrap().take() else {
            return false;
        };
        drop(io.stdin);
        let status = io.child.wait().unwrap();
        bye.is_some() && status.success()
    }

    pub(crate) fn incarnations(&self) -> u32 {
        *self.incarnations.lock().unwrap()
    }
}
