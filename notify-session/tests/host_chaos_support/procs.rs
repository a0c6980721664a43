//! The host processes: this test binary re-executed in the host role, driven through
//! its standard input and answering on its standard output, one line per request.
//!
//! Requests are numbered: `<id> <request>` is answered `A <id> <answer>`, so many
//! requests (the appenders', the churn's, the fault loop's) are in flight at once
//! and each waits for its own answer. A writer thread per process feeds its standard
//! input, so a stopped host (whose pipe fills) blocks no one; a reader thread routes
//! the answers. A request whose process dies is answered `None` at once.

use std::collections::HashMap;
use std::io::{BufRead as _, BufReader, Write as _};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use super::log::log_name;

/// The environment variable that makes the test binary a host: its log file.
pub(crate) const ROLE_VAR: &str = "NS_HOST_CHAOS_LOG";
/// The schema the hosts share.
pub(crate) const SCHEMA_VAR: &str = "NS_HOST_CHAOS_SCHEMA";

/// One host slot: the process currently running in it.
pub(crate) struct Host {
    index: usize,
    running: Mutex<Option<Arc<Proc>>>,
    incarnations: AtomicU32,
}

/// One host process.
struct Proc {
    pid: i32,
    child: Mutex<Child>,
    /// Lines for the writer thread (dropped: its standard input closes).
    lines: Mutex<Option<mpsc::Sender<String>>>,
    /// The requests waiting for their answers.
    waiting: Arc<Mutex<HashMap<u64, mpsc::Sender<String>>>>,
    /// Set once its standard output closed (the process is gone).
    gone: Arc<AtomicBool>,
    next: AtomicU64,
}

impl Host {
    pub(crate) fn new(index: usize) -> Self {
        Self {
            index,
            running: Mutex::new(None),
            incarnations: AtomicU32::new(0),
        }
    }

    /// Starts a host process running `test` in the host role, logging to a new file
    /// under `dir`; waits (bounded) until it says `READY`.
    pub(crate) fn start(&self, test: &str, dir: &Path, env: &[(&str, String)]) {
        let n = self.incarnations.fetch_add(1, Ordering::SeqCst) + 1;
        let log = dir.join(log_name(self.index, n));
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", test, "--nocapture", "--test-threads=1"])
            .env(ROLE_VAR, &log)
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel::<String>();
        std::thread::spawn(move || {
            for line in rx {
                if writeln!(stdin, "{line}")
                    .and_then(|()| stdin.flush())
                    .is_err()
                {
                    return;
                }
            }
        });
        let waiting: Arc<Mutex<HashMap<u64, mpsc::Sender<String>>>> = Arc::default();
        let gone = Arc::new(AtomicBool::new(false));
        let (ready_tx, ready) = mpsc::channel();
        {
            let (waiting, gone) = (Arc::clone(&waiting), Arc::clone(&gone));
            std::thread::spawn(move || {
                for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                    // The harness's own `test NAME ... ` ends in no newline: `READY`
                    // completes that line.
                    if line.contains("READY ") {
                        let _ = ready_tx.send(());
                        continue;
                    }
                    let Some(rest) = line.strip_prefix("A ") else {
                        continue;
                    };
                    let (id, answer) = rest.split_once(' ').unwrap_or((rest, ""));
                    let Ok(id) = id.parse::<u64>() else { continue };
                    if let Some(to) = waiting.lock().unwrap().remove(&id) {
                        // A request that gave up waiting is a normal event.
                        let _ = to.send(answer.to_owned());
                    }
                }
                gone.store(true, Ordering::SeqCst);
                waiting.lock().unwrap().clear();
            });
        }
        if ready.recv_timeout(Duration::from_secs(120)).is_err() {
            panic!("host {} did not start", self.index);
        }
        let proc = Proc {
            pid: i32::try_from(child.id()).unwrap(),
            child: Mutex::new(child),
            lines: Mutex::new(Some(tx)),
            waiting,
            gone,
            next: AtomicU64::new(1),
        };
        *self.running.lock().unwrap() = Some(Arc::new(proc));
    }

    /// Sends `request` and waits up to `wait` for its answer; `None` if no process
    /// runs in this slot, or it is gone, stopped or slow.
    pub(crate) fn ask(&self, request: &str, wait: Duration) -> Option<String> {
        let proc = self.running.lock().unwrap().clone()?;
        let id = proc.next.fetch_add(1, Ordering::SeqCst);
        let (tx, rx) = mpsc::channel();
        proc.waiting.lock().unwrap().insert(id, tx);
        let sent = proc
            .lines
            .lock()
            .unwrap()
            .as_ref()
            .is_some_and(|lines| lines.send(format!("{id} {request}")).is_ok());
        if !sent || proc.gone.load(Ordering::SeqCst) {
            proc.waiting.lock().unwrap().remove(&id);
            return None;
        }
        let answer = rx.recv_timeout(wait).ok();
        if answer.is_none() {
            proc.waiting.lock().unwrap().remove(&id);
        }
        answer
    }

    /// Sends `signal` to the running process.
    pub(crate) fn signal(&self, signal: Signal) {
        let pid = self.running.lock().unwrap().as_ref().map(|p| p.pid);
        let pid = pid.unwrap_or_else(|| panic!("host {} is not running", self.index));
        kill(Pid::from_raw(pid), signal).unwrap();
    }

    /// Panics unless the running process is alive (it did not panic or exit on its
    /// own): a fault must land on a live host.
    pub(crate) fn assert_alive(&self) {
        let running = self.running.lock().unwrap();
        let proc = running
            .as_ref()
            .unwrap_or_else(|| panic!("host {} is not running", self.index));
        let status = proc.child.lock().unwrap().try_wait().unwrap();
        assert!(
            status.is_none(),
            "host {} exited on its own: {status:?}",
            self.index
        );
    }

    /// SIGKILLs the running process and reaps it.
    pub(crate) fn kill(&self) {
        let proc = self.running.lock().unwrap().take();
        let proc = proc.unwrap_or_else(|| panic!("host {} is not running", self.index));
        kill(Pid::from_raw(proc.pid), Signal::SIGKILL).unwrap();
        proc.child.lock().unwrap().wait().unwrap();
        proc.lines.lock().unwrap().take();
    }

    /// Asks the host to shut down gracefully (release its leases) and waits for it
    /// to exit; true if it said `BYE` and exited successfully.
    pub(crate) fn shut_down(&self) -> bool {
        let bye = self.ask("QUIT", Duration::from_secs(120));
        let Some(proc) = self.running.lock().unwrap().take() else {
            return false;
        };
        // Its standard input closes once the writer has written what it has.
        proc.lines.lock().unwrap().take();
        let status = proc.child.lock().unwrap().wait().unwrap();
        bye.as_deref() == Some("BYE") && status.success()
    }

    pub(crate) fn incarnations(&self) -> u32 {
        self.incarnations.load(Ordering::SeqCst)
    }

    pub(crate) fn index(&self) -> usize {
        self.index
    }
}
