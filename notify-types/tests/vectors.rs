//! The shared wire vectors round-trip byte for byte.

// clippy.toml's allow-*-in-tests covers `#[test]` fns only; this crate's helpers are
// test code too.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use notify_types::*;

const COMMAND_EXITED: &str = include_str!("vectors/command-exited.json");
const NOTIFICATION_EXITED: &str = include_str!("vectors/notification-exited.json");
const NOTIFICATION_KILLED: &str = include_str!("vectors/notification-killed-output-limit.json");

fn id<T: std::str::FromStr>(s: &str) -> T {
    s.parse().ok().unwrap()
}

fn exited() -> ProcessCompletionNotification {
    ProcessCompletionNotification {
        command_id: id("0191e2a0-7c4b-7d3e-9a10-3b5f6c7d8e01"),
        session_id: id("0191e2a0-7c4b-7d3e-9a10-3b5f6c7d8e02"),
        loop_id: id("0191e2a0-7c4b-7d3e-9a10-3b5f6c7d8e03"),
        process_handle: "proc-handle-01".into(),
        state: ProcessLifecycleState::Exited,
        reason: ProcessTerminalReason::Exited,
    }
}

#[test]
fn notification_exited_round_trips() {
    let n = exited();
    assert_eq!(n.encode(), NOTIFICATION_EXITED.as_bytes());
    assert_eq!(
        ProcessCompletionNotification::decode(NOTIFICATION_EXITED.as_bytes()).unwrap(),
        n
    );
}

#[test]
fn notification_killed_output_limit_round_trips() {
    let n = ProcessCompletionNotification {
        process_handle: "build_7-x".into(),
        state: ProcessLifecycleState::Killed,
        reason: ProcessTerminalReason::OutputLimit,
        ..exited()
    };
    assert_eq!(n.encode(), NOTIFICATION_KILLED.as_bytes());
    assert_eq!(
        ProcessCompletionNotification::decode(NOTIFICATION_KILLED.as_bytes()).unwrap(),
        n
    );
}

#[test]
fn command_exited_round_trips() {
    let cmd = ProcessNotification::new(exited());
    assert_eq!(cmd.encode(), COMMAND_EXITED.as_bytes());
    assert_eq!(
        ProcessNotification::decode(COMMAND_EXITED.as_bytes()).unwrap(),
        cmd
    );
    let record = JournalRecord::decode(COMMAND_EXITED.as_bytes()).unwrap();
    assert_eq!(record, JournalRecord::Command(cmd));
    assert_eq!(record.encode(), COMMAND_EXITED.as_bytes());
}
