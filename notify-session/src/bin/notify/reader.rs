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
//! How: the command re-executes its own binary with the hidden flag
//! [`READER_FLAG`] before the same arguments. The reader inherits standard input,
//! output and error, so its output reaches the caller directly, as it is written:
//! nothing is copied, buffered, duplicated or lost on the way, and a terminal is still
//! a terminal (progress lines). When the reader exits, its exit status is the
//! command's, unchanged. When it dies of a signal that no one asks a process to stop
//! with (SIGABRT of a failed allocation, SIGKILL of the out-of-memory killer, SIGSEGV,
//! SIGBUS, …), the command names the file as damaged or unreadable and exits 5; when
//! it was stopped on request (SIGINT, SIGTERM, SIGHUP, …), the command ends by the same
//! signal. On Linux the reader dies with the command (a command killed alone does not
//! leave its reader running). On platforms other than Unix the read runs in this
//! process (no signals to tell an abort from an exit status), as it does when the
//! reader cannot be started (then with a note on stderr).

use std::path::Path;
use std::process::ExitCode;

/// The hidden flag that makes this process the reader: it reads in-process.
pub(crate) const READER_FLAG: &str = "--in-reader-process";

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
/// on alone. (A command killed before this call leaves its reader to finish.)
pub(crate) fn bind_to_command() {
    #[cfg(target_os = "linux")]
    {
        let _ = nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL);
    }
}

#[cfg(unix)]
mod unix {
    use std::os::unix::process::ExitStatusExt as _;
    use std::path::{Path, PathBuf};
    use std::process::{Command, ExitCode, ExitStatus};

    use nix::sys::signal::Signal;

    use super::READER_FLAG;
    use crate::error::{CliError, Exit};

    /// How the reader ended, as the command answers it.
    #[derive(Debug, PartialEq, Eq)]
    pub(super) enum Verdict {
        /// It exited with this status: the command's own.
        Exited(u8),
        /// It was stopped on request by this signal: the command ends by it too.
        Stopped(Signal),
        /// It died reading the file (this signal number): the file is damaged or
        /// unreadable.
        Died(i32),
    }

    /// Signals a process is sent to be stopped (a terminal, a supervisor, a timer):
    /// none comes from reading a file.
    const STOP_REQUESTS: [Signal; 8] = [
        Signal::SIGHUP,
        Signal::SIGINT,
        Signal::SIGQUIT,
        Signal::SIGTERM,
        Signal::SIGPIPE,
        Signal::SIGALRM,
        Signal::SIGUSR1,
        Signal::SIGUSR2,
    ];

    /// Judges the reader's end.
    pub(super) fn verdict(status: ExitStatus) -> Verdict {
        if let Some(code) = status.code() {
            // Exit statuses are 0..=255 on Unix.
            return Verdict::Exited(u8::try_from(code).unwrap_or(Exit::Failed as u8));
        }
        let number = status.signal().unwrap_or(0);
        match Signal::try_from(number) {
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
                 more memory than there is: the failed allocation aborts the reader, or the \
                 out-of-memory killer ends it); check it with `notify verify --pages {p}`, \
                 or restore it from a copy"
            ),
        )
    }

    /// This binary: on Linux the running image itself (still there if the file was
    /// replaced since), elsewhere its path.
    fn this_binary() -> std::io::Result<PathBuf> {
        let image = Path::new("/proc/self/exe");
        if cfg!(target_os = "linux") && image.exists() {
            return Ok(image.to_path_buf());
        }
        std::env::current_exe()
    }

    pub(super) fn isolated(path: &Path) -> Option<ExitCode> {
        let status = this_binary().and_then(|exe| {
            Command::new(exe)
                .arg(READER_FLAG)
                .args(std::env::args_os().skip(1))
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
            Verdict::Died(number) => {
                let e = died(path, number);
                eprintln!("notify: {e}");
                ExitCode::from(e.exit as u8)
            }
        })
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
                Signal::SIGKILL,
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
    }
}
