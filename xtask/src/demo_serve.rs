//! `cargo xtask demo --serve`: `notify serve` with a Python supervisor and a Python
//! loop (`examples/clients/demo.py`, standard library only), narrated: a duplicate, a
//! collision (409), the server killed (SIGKILL) and restarted on the same journal, and
//! the unacknowledged notifications handed out again. Builds the `notify` binary with
//! the `serve` feature through cargo (xtask itself does not depend on it); needs
//! python3.

use std::io::{BufRead as _, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use anyhow::{Context as _, bail};

use crate::{Failure, TaskResult, build_notify, cargo, root, run, target_dir};

/// A running server and its URL.
struct Server {
    child: Child,
    url: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start(notify: &Path, journal: &Path, secret: &str) -> anyhow::Result<Server> {
    let mut child = Command::new(notify)
        .args(["serve", "--journal"])
        .arg(journal)
        .args(["--listen", "127.0.0.1:0"])
        .env("NOTIFY_SERVE_KEYS", secret)
        .env("NOTIFY_LOG", "warn")
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("could not start {}", notify.display()))?;
    let stderr = child.stderr.take().context("no stderr")?;
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if let Some(rest) = line.strip_prefix("notify serve: listening on ") {
                let url = rest
                    .split_once('(')
                    .map(|(_, u)| u.trim_end_matches(')').to_owned());
                let _ = tx.send(url);
            } else {
                eprintln!("  [server] {line}");
            }
        }
    });
    match rx.recv_timeout(Duration::from_secs(60)) {
        Ok(Some(url)) => Ok(Server { child, url }),
        _ => {
            let _ = child.kill();
            bail!("the server did not start")
        }
    }
}

fn python(phase: &str, server: &Server, secret: &str, state: &Path) -> TaskResult {
    run(Command::new("python3")
        .arg(root()?.join("examples/clients/demo.py"))
        .arg(phase)
        .env("NOTIFY_URL", &server.url)
        .env("NOTIFY_SECRET", secret)
        .env("DEMO_STATE", state))
}

/// Builds the binary and runs the story.
pub(crate) fn run_demo() -> TaskResult {
    // No `--quiet`: the first build takes a while and cargo's progress shows it.
    run(cargo()?.args(build_notify("dev")))?;
    let notify = target_dir()?.join("debug").join("notify");
    let dir = tempfile::tempdir().context("no temporary directory")?;
    let journal = dir.path().join("notify.redb");
    let state = dir.path().join("demo-state.json");
    // A fresh HMAC secret from the operating system's randomness.
    let out = Command::new("python3")
        .args(["-c", "import base64,secrets;print('whsec_'+base64.b64encode(secrets.token_bytes(32)).decode())"])
        .output()
        .context("python3 is needed for this demo")?;
    if !out.status.success() {
        return Err(Failure::Error(anyhow::anyhow!(
            "python3 could not make a key"
        )));
    }
    let secret = String::from_utf8_lossy(&out.stdout).trim().to_owned();

    println!("notify serve demo: a Python supervisor and a Python loop over signed HTTP\n");
    let server = start(&notify, &journal, &secret)?;
    println!(
        "1. notify serve listens on {} (journal: one redb file); every request is signed (HMAC-SHA256, Standard Webhooks)",
        server.url
    );
    python("before", &server, &secret, &state)?;
    println!(
        "\n2. the server is killed (SIGKILL) with two notifications handed out and not acknowledged"
    );
    drop(server);
    let server = start(&notify, &journal, &secret)?;
    println!("   and restarted on the same journal: {}", server.url);
    python("after", &server, &secret, &state)?;
    println!(
        "\nnotify serve demo: every answer as the contract says; nothing acknowledged was lost or delivered twice"
    );
    Ok(())
}
