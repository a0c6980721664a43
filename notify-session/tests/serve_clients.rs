//! The client examples (`examples/clients/`), run against the real `notify serve`: the
//! curl script (its signature computed by openssl in a shell line) and the Python
//! program (standard library only). Needs bash, curl, openssl and python3 (3.9+).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod serve_support;

use std::path::PathBuf;
use std::process::Command;

use serve_support::{Server, Start, journal_dir, new_secret};

fn example(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../examples/clients")
        .join(name)
}

fn run(program: &str, script: &str, server: &Server, secret: &str) -> String {
    let out = Command::new(program)
        .arg(example(script))
        .env("NOTIFY_URL", &server.url)
        .env("NOTIFY_SECRET", secret)
        .output()
        .unwrap_or_else(|e| panic!("{program} is needed for this test: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{script} failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

#[test]
fn the_curl_example_runs() {
    let (_dir, journal) = journal_dir();
    let secret = new_secret();
    let server = Server::start(&Start::redb(&journal, &[&secret]));
    let out = run("bash", "curl.sh", &server, &secret);
    let codes: Vec<&str> = out.lines().map(|l| l.rsplit(' ').next().unwrap()).collect();
    assert_eq!(
        codes,
        ["201", "201", "201", "200", "409", "200", "200", "200"],
        "{out}"
    );
    assert!(out.contains(r#""disposition":"collision""#), "{out}");
    assert!(
        out.contains(r#""process_handle":"build-42""#),
        "the poll: {out}"
    );
}

#[test]
fn the_python_example_runs() {
    let (_dir, journal) = journal_dir();
    let secret = new_secret();
    let server = Server::start(&Start::redb(&journal, &[&secret]));
    let out = run("python3", "python_client.py", &server, &secret);
    assert!(out.contains("all answers as expected"), "{out}");
    assert!(!out.contains("BAD"), "{out}");
}
