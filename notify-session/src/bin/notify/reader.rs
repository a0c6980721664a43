//! The read commands on a redb file (`sessions`, `show`, `pending`, `verify`, `export`,
//! `stats`) read it in a child process, the reader, so that no damaged file can abort
//! the command without an answer.
//!
//! Why: a damaged page number can claim a page of up to 2^20 pages (4 GiB), and redb
//! 4.6 allocates a buffer that large before it compares the range with the file's
//! length (`notify-journal/docs/design.md`, "What remains"). Where the allocation fails
//! (a memory limit, a small machine) the process aborts, and nothing in the process can
//! catch that; where it succeeds but the memory is not there, the kernel kills it.
//!
//! How: the command re-executes its own binary (with the command's own `argv[0]`)
//! with the hidden flag `--`[`READER_FLAG`] before the same arguments. The reader
//! inherits standard input, output and error, so its output reaches the caller
//! directly, as it is written: nothing is copied, buffered, duplicated or lost on the
//! way, and a terminal is still a terminal (progress lines). When the reader exits, its
//! exit status is the command's, unchanged. When it dies of a signal that no one asks a
//! process to stop with (SIGABRT of a failed allocation, SIGSEGV, SIGBUS, …), the
//! command names the file as damaged or unreadable and exits 5. When it was stopped on
//! request (SIGINT, SIGTERM, SIGHUP, …) or by a resource limit (SIGXCPU of `ulimit -t`,
//! SIGXFSZ of `ulimit -f`), the command ends by the same signal. When it was killed
//! (SIGKILL: the out-of-memory killer, which a damaged page can bring on, or a
//! `kill -9`, which nothing tells apart), the command says so without calling the file
//! damaged and exits 9, the status of a failed read. On Linux the reader dies with the
//! command (a command killed alone does not leave its reader running; a command that
//! died before its reader could bind to it is noticed, and the reader ends unread). On
//! platforms other than Unix the read runs in this process (no signals to tell an abort
//! from an exit status), as it does when the reader cannot be started (then with a note
//! on stderr).

use std::path::Path;
use std::process::ExitCode;

/// The hidden flag (its long name, without the leading `--`) that makes this process
/// the reader: it reads in-process.
pub(crate) const READER_FLAG: &str = "in-reader-process";

/// The environment variable that gives the reader its command's process ID, so that
/// it can tell whether the command is still there once it is bound to it.
#[cfg(unix)]
const COMMAND_PID_VAR: &str = "NOTIFY_READER_COMMAND_PID";

/// Runs the command (this process's own arguments) in a reader process on `path` and
/// returns the exit status to end with; `None` when the read is to run in this process
/// (not Unix, or the reader could not be started).
pub(crate) fn isolated(path: &Path) -> Option<ExitCode> {
    #[cfg(unix)]
    {
        unix::isolated(path)
    }
    #[cfg(not(unix))]
    {
        let _ = path;
        None
    }
}

/// In the reader: on Linux, the reader is killed when the command that started it
/// ends (`PR_SET_PDEATHSIG`), so that a reader whose command was killed does not read
/// on alone. A command that ended before this call is noticed here (the reader's
/// parent is no longer the command it names): the answer is then the exit status to
/// end with at once, without reading. `None`: read.
pub(crate) fn bind_to_command() -> Option<ExitCode> {
    #[cfg(target_os = "linux")]
    {
        let _ = nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL);
        let command = std::env::var(COMMAND_PID_VAR).ok()?;
        let parent = nix::unistd::getppid().as_raw().to_string();
        if parent != command {
            // The command is gone: no one reads the answer.
            return Some(ExitCode::from(crate::error::Exit::Failed as u8));
        }
    }
    None
}

#[cfg(unix)]
mod unix {
    use std::ffi::OsString;
    use std::os::unix::fs::MetadataExt as _;
    use std::os::unix::process::{CommandExt as _, ExitStatusExt as _};
    use std::path::{Path, PathBuf};
    use std::process::{Command, ExitCode, ExitStatus};

    use nix::sys::signal::Signal;

    use super::{COMMAND_PID_VAR, READER_FLAG};
    use crate::error::{CliError, Exit};

    /// How the reader ended, as the command answers it.
    #[derive(Debug, PartialEq, Eq)]
    pub(super) enum Verdict {
        /// It exited with this status: the command's own.
        Exited(u8),
        /// It was stopped on request or by a resource limit (this signal): the command
        /// ends by it too.
        Stopped(Signal),
        /// It was killed (SIGKILL): out of memory or on purpose, nothing tells which.
        Killed,
        /// It died reading the file (this signal number): the file is damaged or
        /// unreadable.
        Died(i32),
    }

    /// Signals a process is sent to be stopped (a terminal, a supervisor, a timer, a
    /// resource limit such as `ulimit -t` or `ulimit -f`): none comes from reading a
    /// damaged file.
    const STOP_REQUESTS: [Signal; 10] = [
        Signal::SIGHUP,
        Signal::SIGINT,
        Signal::SIGQUIT,
        Signal::SIGTERM,
        Signal::SIGPIPE,
        Signal::SIGALRM,
        Signal::SIGUSR1,
        Signal::SIGUSR2,
        Signal::SIGXCPU,
        Signal::SIGXFSZ,
    ];

    /// Judges the reader's end.
    pub(super) fn verdict(status: ExitStatus) -> Verdict {
        if let Some(code) = status.code() {
            // Exit statuses are 0..=255 on Unix.
            return Verdict::Exited(u8::try_from(code).unwrap_or(Exit::Failed as u8));
        }
        let number = status.signal().unwrap_or(0);
        match Signal::try_from(number) {
            Ok(Signal::SIGKILL) => Verdict::Killed,
            Ok(signal) if STOP_REQUESTS.contains(&signal) => Verdict::Stopped(signal),
            _ => Verdict::Died(number),
        }
    }

    /// The error of a reader that died reading `path` of signal `number`.
    pub(super) fn died(path: &Path, number: i32) -> CliError {
        let p = path.display();
        let name = Signal::try_from(number).map_or("unknown signal", Signal::as_str);
        CliError::new(
            Exit::Damaged,
            format!(
                "{p} is damaged or unreadable: the process reading it was killed by signal \
                 {number} ({name}) while reading it (a damaged page can make a read ask for \
                 more memory than there is, and the failed allocation aborts the reader); \
                 check it with `notify verify --pages {p}`, or restore it from a copy"
            ),
        )
    }

    /// The error of a reader killed (SIGKILL) while reading `path`: not called damage,
    /// since an operator's `kill -9` and the out-of-memory killer look the same.
    pub(super) fn killed(path: &Path) -> CliError {
        let p = path.display();
        CliError::new(
            Exit::Failed,
            format!(
                "the process reading {p} was killed (SIGKILL: out of memory?) before it \
                 finished; if nothing else killed it, a damaged page may have made the read \
                 ask for more memory than there is: check it with `notify verify --pages {p}`"
            ),
        )
    }

    /// Whether two paths name the same file.
    fn same_file(a: &Path, b: &Path) -> bool {
        match (std::fs::metadata(a), std::fs::metadata(b)) {
            (Ok(a), Ok(b)) => (a.dev(), a.ino()) == (b.dev(), b.ino()),
            _ => false,
        }
    }

    /// This binary, given the command's `argv[0]`. On Linux the running image itself
    /// (`/proc/self/exe`: still there if the file was replaced since), unless the image
    /// is still on disk and `argv[0]` is a path to another file: then the image is a
    /// program that runs this one (the dynamic loader in `ld.so ./notify`, an
    /// emulator), and `argv[0]` is this binary. Elsewhere its path
    /// ([`std::env::current_exe`]).
    fn this_binary(argv0: Option<&OsString>) -> std::io::Result<PathBuf> {
        let image = Path::new("/proc/self/exe");
        if cfg!(target_os = "linux") && image.exists() {
            // A replaced image reads as "PATH (deleted)": argv[0] may name its successor.
            let replaced = std::fs::read_link(image)
                .is_ok_and(|target| target.to_string_lossy().ends_with(" (deleted)"));
            let named = argv0
                .map(Path::new)
                .filter(|named| !replaced && named.components().count() > 1 && named.is_file());
            return Ok(match named {
                Some(named) if !same_file(named, image) => named.to_path_buf(),
                _ => image.to_path_buf(),
            });
        }
        std::env::current_exe()
    }

    pub(super) fn isolated(path: &Path) -> Option<ExitCode> {
        let mut args = std::env::args_os();
        let argv0 = args.next();
        let status = this_binary(argv0.as_ref()).and_then(|exe| {
            let mut reader = Command::new(exe);
            if let Some(argv0) = &argv0 {
                reader.arg0(argv0);
            }
            reader
                .arg(format!("--{READER_FLAG}"))
                .args(args)
                .env(COMMAND_PID_VAR, std::process::id().to_string())
                .status()
        });
        let status = match status {
            Ok(status) => status,
            Err(e) => {
                eprintln!(
                    "notify: cannot start the process to read {} in ({e}); reading it in this one",
                    path.display()
                );
                return None;
            }
        };
        Some(match verdict(status) {
            Verdict::Exited(code) => ExitCode::from(code),
            Verdict::Stopped(signal) => {
                // Ends this process the same way, unless the signal is ignored here.
                let _ = nix::sys::signal::raise(signal);
                eprintln!(
                    "notify: the process reading {} was stopped by {signal}",
                    path.display()
                );
                ExitCode::from(128 + signal as u8)
            }
            Verdict::Killed => fail(&killed(path)),
            Verdict::Died(number) => fail(&died(path, number)),
        })
    }

    /// Prints `e` and answers its exit status.
    fn fail(e: &CliError) -> ExitCode {
        eprintln!("notify: {e}");
        ExitCode::from(e.exit as u8)
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        /// A wait status: an exit code in the second byte, a signal in the first.
        fn exited(code: i32) -> ExitStatus {
            ExitStatus::from_raw(code << 8)
        }

        #[test]
        fn exit_statuses_pass_through_unchanged() {
            for code in [0, 1, 2, 3, 5, 7, 9, 255] {
                let want = u8::try_from(code).unwrap_or_default();
                assert_eq!(verdict(exited(code)), Verdict::Exited(want));
            }
        }

        #[test]
        fn a_crash_is_damage_and_a_stop_request_is_passed_on() {
            for signal in [
                Signal::SIGABRT,
                Signal::SIGSEGV,
                Signal::SIGBUS,
                Signal::SIGILL,
            ] {
                let status = ExitStatus::from_raw(signal as i32);
                assert_eq!(verdict(status), Verdict::Died(signal as i32), "{signal}");
            }
            for signal in STOP_REQUESTS {
                let status = ExitStatus::from_raw(signal as i32);
                assert_eq!(verdict(status), Verdict::Stopped(signal), "{signal}");
            }
            let e = died(Path::new("j.redb"), Signal::SIGABRT as i32);
            assert_eq!(e.exit, Exit::Damaged);
            assert!(
                e.message.starts_with("j.redb is damaged or unreadable")
                    && e.message.contains("signal 6 (SIGABRT)")
                    && e.message.contains("notify verify --pages j.redb"),
                "{}",
                e.message
            );
        }

        #[test]
        fn resource_limits_are_stop_requests_not_damage() {
            // `ulimit -t` and `ulimit -f` end the reader by these; the file is fine.
            for signal in [Signal::SIGXCPU, Signal::SIGXFSZ] {
                let status = ExitStatus::from_raw(signal as i32);
                assert_eq!(verdict(status), Verdict::Stopped(signal), "{signal}");
            }
        }

        #[test]
        fn a_killed_reader_is_a_failed_read_not_damage() {
            // `kill -9` and the out-of-memory killer look the same: not called damage.
            let status = ExitStatus::from_raw(Signal::SIGKILL as i32);
            assert_eq!(verdict(status), Verdict::Killed);
            let e = killed(Path::new("j.redb"));
            assert_eq!(e.exit, Exit::Failed);
            assert!(
                e.message
                    .contains("j.redb was killed (SIGKILL: out of memory?)")
                    && !e.message.contains("is damaged")
                    && e.message.contains("notify verify --pages j.redb"),
                "{}",
                e.message
            );
        }
    }
}
