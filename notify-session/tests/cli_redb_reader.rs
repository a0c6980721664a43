//! The real `notify` binary reads a redb file in a child process of its own (the
//! reader): a damaged page order that makes redb ask for a 4 GiB buffer aborts the
//! reader, never the command, which names the file as damaged (exit status 5); and a
//! read that does not die passes through byte for byte (its output and exit status are
//! those of the read run in-process).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod cli_support;

#[cfg(unix)]
use std::path::{Path, PathBuf};
#[cfg(unix)]
use std::process::{Command, Stdio};

use cli_support::redb::journal_file;
use cli_support::{Run, expect_code, notify};
#[cfg(unix)]
use notify_journal::{RedbJournal, RedbOptions};
#[cfg(unix)]
use notify_testkit::sample;
use notify_testkit::tamper;
#[cfg(unix)]
use notify_types::LoopId;
use notify_types::SessionId;

/// The hidden flag that makes `notify` read in-process (what the reader runs).
const IN_PROCESS: &str = "--in-reader-process";

/// A journal file of `sessions` sessions of `frames` notifications each, closed: enough
/// frames that its tables have branch pages.
#[cfg(unix)]
fn big_journal(dir: &Path, sessions: usize, frames: usize) -> PathBuf {
    let path = dir.join("big.redb");
    let journal = RedbJournal::open(&path, RedbOptions::default()).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        for _ in 0..sessions {
            let session = SessionId::new();
            let loop_id = LoopId::new();
            for _ in 0..frames {
                let out = journal
                    .append(session, sample::command(session, loop_id))
                    .await
                    .unwrap();
                assert!(out.appended);
            }
        }
    });
    journal.close();
    path
}

/// Runs `notify ARGS` with its address space limited to `limit` bytes (`RLIMIT_AS`,
/// inherited by the reader), so that an allocation of more fails as on a small machine.
#[cfg(target_os = "linux")]
fn notify_limited(args: &[&str], limit: u64) -> (Run, Option<i32>) {
    use std::os::unix::process::{CommandExt as _, ExitStatusExt as _};

    use nix::sys::resource::{Resource, setrlimit};

    let mut cmd = Command::new(env!("CARGO_BIN_EXE_notify"));
    cmd.args(args).stdin(Stdio::null());
    #[allow(unsafe_code)]
    // SAFETY: the closure runs in the forked child before exec and only makes the
    // setrlimit system call (async-signal-safe; it allocates nothing).
    unsafe {
        cmd.pre_exec(move || {
            setrlimit(Resource::RLIMIT_AS, limit, limit).map_err(std::io::Error::from)
        });
    }
    let out = cmd.output().expect("run notify");
    let signal = out.status.signal();
    let run = Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        raw: out.stdout,
    };
    (run, signal)
}

#[cfg(target_os = "linux")]
#[test]
fn a_damaged_page_order_that_aborts_the_read_is_answered_as_damage() {
    // Far below the 4 GiB a page of order 20 claims, far above what a read needs.
    const LIMIT: u64 = 1 << 30;
    let dir = tempfile::tempdir().unwrap();
    let path = big_journal(dir.path(), 4, 300);
    let p = path.to_str().unwrap();

    // Under the limit, the clean file reads: the limit alone kills nothing.
    let commands: [&[&str]; 5] = [
        &["sessions", p],
        &["export", p],
        &["verify", p],
        &["stats", p],
        &["pending", p],
    ];
    for args in commands {
        let (run, signal) = notify_limited(args, LIMIT);
        assert_eq!(signal, None, "{args:?}: {run:?}");
        expect_code(&run, 0);
    }

    let changed = tamper::damage_branch_page_orders(&path, tamper::MAX_PAGE_ORDER).unwrap();
    assert!(changed > 0);
    let sha = tamper::sha256_file(&path).unwrap();
    let mut aborted = 0;
    for args in commands {
        // In-process (as before the reader process): the read really asks for the
        // 4 GiB and the failed allocation aborts the process, or the read refuses the
        // damage before it gets there.
        let mut direct = vec![IN_PROCESS];
        direct.extend_from_slice(args);
        let (run, died) = notify_limited(&direct, LIMIT);
        if died.is_some() {
            aborted += 1;
            assert!(
                // 4 GiB and the Arc's header.
                run.stderr
                    .contains("memory allocation of 4294967312 bytes failed"),
                "{args:?}: {run:?}"
            );
        }

        // Through the reader: never a signal; exit status 5 and the damage named when
        // the reader aborted, the in-process answer otherwise.
        let (through, signal) = notify_limited(args, LIMIT);
        assert_eq!(signal, None, "{args:?}: {through:?}");
        if let Some(died) = died {
            expect_code(&through, 5);
            let last = through.stderr.lines().last().unwrap_or_default();
            assert!(
                last.starts_with(&format!("notify: {p} is damaged or unreadable"))
                    && last.contains(&format!("killed by signal {died} (SIGABRT)"))
                    && last.contains(&format!("notify verify --pages {p}")),
                "{args:?}: {}",
                through.stderr
            );
        } else {
            assert_eq!((through.code, &through.stdout), (run.code, &run.stdout));
        }
    }
    // Every read meets the damaged order (redb's open already follows one): were one
    // refused before its allocation, redb would have fixed what the reader is for.
    assert_eq!(
        aborted,
        commands.len(),
        "not every read met the damaged order"
    );
    // The page check the message points to refuses the damage before it follows it:
    // even in-process it does not abort.
    let (run, signal) = notify_limited(&[IN_PROCESS, "verify", p, "--pages"], LIMIT);
    assert_eq!(signal, None, "{run:?}");
    assert!(run.code == 1 || run.code == 5, "{run:?}");
    assert_eq!(tamper::sha256_file(&path).unwrap(), sha, "a read wrote");
}

/// Runs `notify ARGS` in-process (the reader's own way) and through the reader.
fn both_ways(args: &[&str]) -> (Run, Run) {
    let mut direct = vec![IN_PROCESS];
    direct.extend_from_slice(args);
    (notify(&direct), notify(args))
}

#[test]
fn reads_through_the_reader_are_byte_identical_to_reads_in_process() {
    let dir = tempfile::tempdir().unwrap();
    let (path, fixture) = journal_file(dir.path());
    let p = path.to_str().unwrap();
    let session = fixture.sessions[2].to_string();
    let damaged = dir.path().join("damaged.redb");
    std::fs::copy(&path, &damaged).unwrap();
    tamper::edit_frame(
        &damaged,
        fixture.sessions[1].as_uuid().as_u128(),
        2,
        false,
        |b| {
            let last = b.len() - 1;
            b[last] ^= 0x20;
        },
    )
    .unwrap();
    let d = damaged.to_str().unwrap();
    let damaged_session = fixture.sessions[1].to_string();
    let missing = dir.path().join("missing.redb");
    let m = missing.to_str().unwrap();
    let unknown = SessionId::new().to_string();

    let cases: Vec<(Vec<&str>, i32)> = vec![
        (vec!["sessions", p], 0),
        (vec!["sessions", p, "--json"], 0),
        (vec!["show", p, &session], 0),
        (
            vec!["show", p, &session, "--from", "3", "--limit", "5", "--json"],
            0,
        ),
        (vec!["pending", p], 0),
        (vec!["pending", p, &session, "--json"], 0),
        (vec!["verify", p], 0),
        (vec!["verify", p, "--pages", "--json"], 0),
        (vec!["export", p], 0),
        (vec!["export", p, &session], 0),
        (vec!["stats", p], 0),
        (vec!["stats", p, "--json"], 0),
        // Failures: the exit status and the message pass through unchanged.
        (vec!["verify", d], 1),
        (vec!["show", d, &damaged_session], 5),
        (vec!["sessions", m], 3),
        (vec!["show", p, &unknown], 3),
    ];
    for (args, code) in &cases {
        let (direct, through) = both_ways(args);
        expect_code(&direct, *code);
        assert_eq!(through.code, direct.code, "{args:?}: {through:?}");
        assert!(through.raw == direct.raw, "{args:?}: stdout differs");
        assert_eq!(through.stderr, direct.stderr, "{args:?}");
        assert!(
            !direct.raw.is_empty() || !direct.stderr.is_empty(),
            "{args:?} said nothing"
        );
    }
}

#[cfg(unix)]
#[test]
fn a_reader_whose_output_is_closed_early_ends_quietly() {
    // `notify export | head -1`: the reader writes into the closed pipe; the command
    // ends with status 0 and nothing on stderr, as the in-process read does.
    use std::io::BufRead as _;
    let dir = tempfile::tempdir().unwrap();
    let path = big_journal(dir.path(), 2, 300);
    for args in [
        vec!["export", path.to_str().unwrap()],
        vec![IN_PROCESS, "export", path.to_str().unwrap()],
    ] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_notify"))
            .args(&args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut first = String::new();
        let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
        stdout.read_line(&mut first).unwrap();
        assert_eq!(first, cli_support::EXPORT_HEADER);
        drop(stdout);
        let out = child.wait_with_output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{args:?}: {out:?}");
        assert!(out.stderr.is_empty(), "{args:?}: {out:?}");
    }
}

#[cfg(target_os = "linux")]
#[test]
fn a_reader_ends_with_its_command() {
    // `notify export` killed alone (SIGKILL to its process, not its group) while its
    // reader waits on a full pipe: the reader dies with it rather than read on, so
    // less than the whole export ever arrives.
    use std::io::{BufRead as _, Read as _};
    let dir = tempfile::tempdir().unwrap();
    let path = big_journal(dir.path(), 2, 300);
    let p = path.to_str().unwrap();
    let whole = notify(&["export", p]);
    expect_code(&whole, 0);
    // Far more than a pipe holds (64 KiB) plus the reader's output buffer.
    assert!(whole.raw.len() > 3 * 64 * 1024, "{}", whole.raw.len());

    let mut command = Command::new(env!("CARGO_BIN_EXE_notify"))
        .args(["export", p])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdout = std::io::BufReader::new(command.stdout.take().unwrap());
    // The reader is running (it wrote the first line), and then fills the pipe.
    let mut got = Vec::new();
    stdout.read_until(b'\n', &mut got).unwrap();
    assert_eq!(got, cli_support::EXPORT_HEADER.as_bytes());
    command.kill().unwrap();
    command.wait().unwrap();
    // End of file once the reader is gone: only what the pipe already held.
    stdout.read_to_end(&mut got).unwrap();
    assert!(
        got.len() < whole.raw.len(),
        "the reader went on reading after its command was killed"
    );
}

/// The program interpreter (the dynamic loader) an ELF file names, if it names one
/// (`PT_INTERP`; 64-bit little-endian files only).
#[cfg(all(
    target_os = "linux",
    target_pointer_width = "64",
    target_endian = "little"
))]
fn interpreter(file: &Path) -> Option<PathBuf> {
    let elf = std::fs::read(file).unwrap();
    let u16_at = |at: usize| u16::from_le_bytes(elf[at..at + 2].try_into().unwrap());
    let u64_at = |at: usize| {
        usize::try_from(u64::from_le_bytes(elf[at..at + 8].try_into().unwrap())).unwrap()
    };
    let (phoff, phentsize, phnum) = (u64_at(0x20), usize::from(u16_at(0x36)), u16_at(0x38));
    (0..usize::from(phnum)).find_map(|i| {
        let ph = phoff + i * phentsize;
        // PT_INTERP: the loader's path, NUL-terminated.
        (u32::from_le_bytes(elf[ph..ph + 4].try_into().unwrap()) == 3).then(|| {
            let (at, len) = (u64_at(ph + 8), u64_at(ph + 32));
            let name = elf[at..at + len].split(|b| *b == 0).next().unwrap();
            PathBuf::from(std::str::from_utf8(name).unwrap())
        })
    })
}

#[cfg(all(
    target_os = "linux",
    target_pointer_width = "64",
    target_endian = "little"
))]
#[test]
fn a_command_run_by_the_dynamic_loader_starts_its_reader_from_its_own_binary() {
    // `ld.so ./notify ...`: the running image (/proc/self/exe) is the loader, not
    // notify; the reader must still be notify, started with the command's argv[0].
    let dir = tempfile::tempdir().unwrap();
    let (path, _) = journal_file(dir.path());
    let p = path.to_str().unwrap();
    let binary = Path::new(env!("CARGO_BIN_EXE_notify"));
    let loader = interpreter(binary).expect("the notify binary names no dynamic loader");
    let direct = notify(&[IN_PROCESS, "sessions", p]);
    expect_code(&direct, 0);
    let out = Command::new(&loader)
        .arg(binary)
        .args(["sessions", p])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(out.stdout == direct.raw, "{out:?}");
    assert!(out.stderr.is_empty(), "{out:?}");
}

#[cfg(target_os = "linux")]
#[test]
fn a_reader_whose_command_is_already_gone_does_not_read() {
    // The command died before its reader bound itself to it: the reader's parent is
    // no longer the command it was started by, and it ends without reading.
    let dir = tempfile::tempdir().unwrap();
    let (path, _) = journal_file(dir.path());
    let p = path.to_str().unwrap();
    let run = |pid: &str| {
        let out = Command::new(env!("CARGO_BIN_EXE_notify"))
            .args([IN_PROCESS, "sessions", p])
            .env("NOTIFY_READER_COMMAND_PID", pid)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        (out.status.code(), out.stdout)
    };
    // Its parent is this test: the command it names.
    let (code, stdout) = run(&std::process::id().to_string());
    assert_eq!(code, Some(0));
    assert!(!stdout.is_empty());
    // A command that is not its parent (gone, its reader reparented).
    let (code, stdout) = run(&u32::MAX.to_string());
    assert_eq!(code, Some(9));
    assert!(stdout.is_empty(), "{}", String::from_utf8_lossy(&stdout));
}
