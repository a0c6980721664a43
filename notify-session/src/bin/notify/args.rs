//! The command line's arguments: the commands and their flags and help texts, and how
//! a command's positionals and `--postgres`/`--schema` name the journal.

use std::ops::RangeInclusive;
use std::path::PathBuf;

use clap::{Args, CommandFactory as _, Parser, Subcommand};
use notify_session::notify_types::SessionId;

use crate::credentials;
use crate::error::EXIT_STATUS_HELP;
use crate::journal::{DEFAULT_SCHEMA, Location};
use crate::reader;

/// Inspect, verify, export, import and purge notify journals: redb files or PostgreSQL.
#[derive(Parser)]
#[command(name = "notify", version, after_help = concat_help())]
pub(crate) struct Cli {
    /// Print JSON lines (one object per line) for scripts instead of tables.
    #[arg(long, global = true)]
    pub(crate) json: bool,
    /// Internal (`reader.rs`): this process is the one a read command on a redb file
    /// started to read the file in; it reads in-process.
    #[arg(long = reader::READER_FLAG, hide = true)]
    pub(crate) in_reader_process: bool,
    #[command(subcommand)]
    pub(crate) command: Command,
}

/// Where the journal is, when it is not a file.
#[derive(Args, Clone)]
pub(crate) struct Db {
    /// Use the PostgreSQL journal at CONNINFO (a libpq string such as
    /// "host=db user=notify dbname=notify", or a postgresql:// URL) instead of a file;
    /// PATH is then left out. Without it and without PATH, NOTIFY_DATABASE_URL names
    /// the journal. Keep the password out of it: PGPASSWORD or the password file give
    /// it (see `notify --help`).
    #[arg(long, value_name = "CONNINFO")]
    postgres: Option<String>,
    /// The PostgreSQL schema holding the journal [default: notify_journal].
    #[arg(long, value_name = "S")]
    schema: Option<String>,
}

/// The environment, for `notify --help`.
const ENVIRONMENT_HELP: &str = "\
Environment (PostgreSQL; the password never needs to be on the command line):
  NOTIFY_DATABASE_URL  the connection string when neither --postgres nor PATH is given
                       (`--postgres CONNINFO` wins over it)
  PGPASSWORD           the password, when the connection string has none
  PGPASSFILE           the password file [default: ~/.pgpass; on Windows
                       %APPDATA%\\postgresql\\pgpass.conf], read when neither the connection
                       string nor PGPASSWORD gives a password: libpq's format, one
                       hostname:port:database:username:password a line, `*` matching
                       anything, `\\:` and `\\\\` escaping a colon and a backslash, the first
                       matching line wins. On Unix a file others may read (not u=rw, 0600,
                       or less) is passed over with a warning, as libpq does.
  A password in the connection string wins over both.";

/// `notify --help`'s closing text: the environment, then the exit statuses.
fn concat_help() -> String {
    format!("{ENVIRONMENT_HELP}\n\n{EXIT_STATUS_HELP}")
}

/// The exit statuses, for every command's `--help` (a macro so `concat!` takes it).
macro_rules! exit_help {
    () => {
        "Exit status: 0 ok (verify: clean); 1 verify found problems; 2 usage; 3 not found \
         (path, schema or session); 4 not a notify journal; 5 damaged; 6 in use by another \
         process; 7 needs a writable open first; 8 refused (import); 9 I/O or database failure"
    };
}

#[derive(Subcommand)]
pub(crate) enum Command {
    /// Every session: frames, head, pending, orphans, state, first and last activity.
    ///
    /// PENDING is what a restore would redeliver, ORPHANS the processes it would
    /// declare lost. Activity times are the process times of the session's lifecycle
    /// events (records carry no commit time). Opens the journal read-only.
    #[command(
        override_usage = "notify sessions PATH\n       notify sessions --postgres CONNINFO [--schema S]",
        after_help = concat!(
            "Example:\n  notify sessions /var/lib/agent/notify.redb\n  \
             notify sessions --postgres 'host=db user=notify dbname=notify' --json\n\n",
            exit_help!()
        )
    )]
    Sessions {
        /// The journal file (left out with --postgres).
        #[arg(value_name = "PATH", num_args = 0..=1)]
        args: Vec<String>,
        #[command(flatten)]
        db: Db,
    },
    /// A session's frames, decoded, one line each.
    ///
    /// Each line: seq, kind, command or event ID, loop, handle, state and reason, and
    /// the details (exit code, process times, what a consumption consumes). Opens the
    /// journal read-only.
    #[command(
        override_usage = "notify show PATH SESSION [--from SEQ] [--limit N]\n       \
                          notify show --postgres CONNINFO [--schema S] SESSION [--from SEQ] [--limit N]",
        after_help = concat!(
            "Example:\n  notify show notify.redb 0199a5c2-1d3e-7c41-9f7a-3c2e8b6d1a20 --from 100 --limit 20\n\n",
            exit_help!()
        )
    )]
    Show {
        /// The journal file (left out with --postgres), then the session ID.
        #[arg(value_name = "PATH SESSION", num_args = 1..=2)]
        args: Vec<String>,
        /// The first seq to show.
        #[arg(long, value_name = "SEQ", default_value_t = 1)]
        from: u64,
        /// At most N frames.
        #[arg(long, value_name = "N")]
        limit: Option<u64>,
        #[command(flatten)]
        db: Db,
    },
    /// What a restore would redeliver, and the processes it would declare lost.
    ///
    /// Per session and loop, the notifications appended and never consumed (restore
    /// redelivers them), then the processes whose last event is not terminal (restore
    /// declares them lost). Opens the journal read-only.
    #[command(
        override_usage = "notify pending PATH [SESSION]\n       notify pending --postgres CONNINFO [--schema S] [SESSION]",
        after_help = concat!(
            "Example:\n  notify pending notify.redb\n  \
             notify pending notify.redb 0199a5c2-1d3e-7c41-9f7a-3c2e8b6d1a20 --json\n\n",
            exit_help!()
        )
    )]
    Pending {
        /// The journal file (left out with --postgres), then a session ID to cover
        /// only that session.
        #[arg(value_name = "PATH [SESSION]", num_args = 0..=2)]
        args: Vec<String>,
        #[command(flatten)]
        db: Db,
    },
    /// The deep integrity check; exit status 0 only when the journal is clean.
    ///
    /// Every frame's checksum and decoding, every session's log contiguous up to its
    /// head, index entries and frames one to one. Each problem is named by session and
    /// seq.
    ///
    /// Opens a redb file read-only. With --pages, redb's own check of every page's
    /// checksum runs too, and the file is checked as it is, never written: redb opens it
    /// as a writer would (a running writer makes it exit 6), and what it writes while
    /// checking (its recovery of a file not closed cleanly, its allocator state) goes to
    /// a private copy in memory, so the file's bytes never change. A format-1 file is
    /// checked as its upgrade would check it, and not upgraded; a file not closed
    /// cleanly (which a plain `verify` refuses, exit 7) is checked as redb recovers it,
    /// and left unrecovered.
    #[command(
        override_usage = "notify verify PATH [--pages] [--max-problems N]\n       \
                          notify verify --postgres CONNINFO [--schema S] [--max-problems N]",
        after_help = concat!(
            "Example:\n  notify verify notify.redb && echo clean\n\n",
            exit_help!()
        )
    )]
    Verify {
        /// The journal file (left out with --postgres).
        #[arg(value_name = "PATH", num_args = 0..=1)]
        args: Vec<String>,
        /// List at most N problems (all are counted) [default: 100].
        #[arg(long, value_name = "N")]
        max_problems: Option<usize>,
        /// Also run redb's page check (takes the file as a writer would, writes nothing).
        #[arg(long)]
        pages: bool,
        #[command(flatten)]
        db: Db,
    },
    /// Every session (or one) as JSON lines: frames, end times and tombstones.
    ///
    /// To stdout, export format 2: a first line `{"notify_export":2}`; then, session by
    /// session in ID order, one line per frame, `{"session":…,"seq":…,"record":RECORD}`
    /// (RECORD being the record's `JournalRecord::encode` bytes), and after the frames
    /// of an ended session its state line,
    /// `{"session":…,"state":"ended","ended_at":TIME,"last_seq":N}`. A purged session
    /// (only its tombstone left) is one line,
    /// `{"session":…,"state":"purged","ended_at":TIME,"purged_at":TIME,"last_seq":N,"frames":N}`.
    /// TIME is RFC 3339 in UTC. `notify import` reads it back (and format 1, the frame
    /// lines alone, of earlier builds); export, import and export again give the same
    /// bytes. Opens the journal read-only.
    #[command(
        override_usage = "notify export PATH [SESSION]\n       notify export --postgres CONNINFO [--schema S] [SESSION]",
        after_help = concat!(
            "Example:\n  notify export notify.redb 0199a5c2-1d3e-7c41-9f7a-3c2e8b6d1a20 > session.jsonl\n\n",
            exit_help!()
        )
    )]
    Export {
        /// The journal file (left out with --postgres), then a session ID to cover
        /// only that session.
        #[arg(value_name = "PATH [SESSION]", num_args = 0..=2)]
        args: Vec<String>,
        #[command(flatten)]
        db: Db,
    },
    /// Appends an export to an empty journal, at the same seqs, with its sessions' states.
    ///
    /// Reads `notify export`'s lines from --input FILE, or stdin. A redb file is
    /// created if missing; a journal that holds any session is refused. Ended sessions
    /// keep their original end time (so their retention clock does not restart), purged
    /// ones come back as their tombstones (a late append to them is still refused).
    /// Reads export format 2 and format 1 (earlier builds: frames only, whose ended
    /// sessions then end at the time of the import); a later format is refused. On
    /// PostgreSQL, times are kept to the microsecond.
    #[command(
        override_usage = "notify import PATH [--input FILE]\n       notify import --postgres CONNINFO [--schema S] [--input FILE]",
        after_help = concat!(
            "Example:\n  notify export old.redb | notify import new.redb\n  \
             notify import --postgres 'host=db dbname=notify' --input session.jsonl\n\n",
            exit_help!()
        )
    )]
    Import {
        /// The journal file (left out with --postgres).
        #[arg(value_name = "PATH", num_args = 0..=1)]
        args: Vec<String>,
        /// Read the export from FILE instead of stdin.
        #[arg(long, value_name = "FILE")]
        input: Option<PathBuf>,
        #[command(flatten)]
        db: Db,
    },
    /// File size, sessions, frames, index entries, bytes per frame, format version.
    ///
    /// For PostgreSQL: the tables' size and the schema version. Opens the journal
    /// read-only.
    #[command(
        override_usage = "notify stats PATH\n       notify stats --postgres CONNINFO [--schema S]",
        after_help = concat!("Example:\n  notify stats notify.redb --json\n\n", exit_help!())
    )]
    Stats {
        /// The journal file (left out with --postgres).
        #[arg(value_name = "PATH", num_args = 0..=1)]
        args: Vec<String>,
        #[command(flatten)]
        db: Db,
    },
    /// Purges the sessions that ended before WHEN, in bounded steps.
    ///
    /// One transaction per step; each purged session leaves its tombstone, so that a
    /// late append for it still fails closed. Opens the journal for writing (a redb file
    /// in use is refused).
    #[command(
        override_usage = "notify purge PATH --ended-before WHEN [--max-frames-per-step N]\n       \
                          notify purge --postgres CONNINFO [--schema S] --ended-before WHEN [--max-frames-per-step N]",
        after_help = concat!(
            "WHEN is an RFC 3339 time (2026-01-31T00:00:00Z) or an age before now (30d, 12h, 90m, 3600s).\n\n\
             Example:\n  notify purge notify.redb --ended-before 30d\n\n",
            exit_help!()
        )
    )]
    Purge {
        /// The journal file (left out with --postgres).
        #[arg(value_name = "PATH", num_args = 0..=1)]
        args: Vec<String>,
        /// Purge sessions that ended before WHEN.
        #[arg(long, value_name = "WHEN", required = true)]
        ended_before: String,
        /// Remove at most N frames per step [default: 1024].
        #[arg(long, value_name = "N")]
        max_frames_per_step: Option<usize>,
        #[command(flatten)]
        db: Db,
    },
    /// Gives a journal's free space back: a redb file offline, PostgreSQL online.
    ///
    /// A redb file is compacted with redb's compaction (the space purges freed goes
    /// back to the file system); it needs the file to itself (a file in use is
    /// refused). On PostgreSQL this runs `VACUUM (ANALYZE)` on the journal's tables:
    /// online, the space of purged rows is reused, the files keep their size.
    #[command(
        override_usage = "notify compact PATH\n       notify compact --postgres CONNINFO [--schema S]",
        after_help = concat!(
            "Example:\n  notify purge notify.redb --ended-before 30d && notify compact notify.redb\n\n",
            exit_help!()
        )
    )]
    Compact {
        /// The journal file (left out with --postgres).
        #[arg(value_name = "PATH", num_args = 0..=1)]
        args: Vec<String>,
        #[command(flatten)]
        db: Db,
    },
    /// Serve the contract over HTTP (signed requests, JSON): supervisors deliver
    /// completions and loops consume them, in any language.
    ///
    /// Runs a session host on a redb file (the only host) or on PostgreSQL (one host of
    /// a fleet; requests for sessions another host owns are redirected to it). The API
    /// is described at /openapi.json; /healthz, /readyz and /metrics are the operator's.
    /// SIGTERM or SIGINT drains requests and releases the sessions' leases.
    #[cfg(feature = "serve")]
    #[command(
        after_help = "Example:\n  NOTIFY_SERVE_KEYS=whsec_... notify serve --journal notify.redb --listen 127.0.0.1:8080\n  \
                           notify serve --postgres 'host=db dbname=notify' --listen 0.0.0.0:8443 \\\n      \
                           --advertise-url https://notify-2.internal:8443 --tls-cert cert.pem --tls-key key.pem --key-file keys"
    )]
    Serve(Box<crate::serve::ServeArgs>),
}

impl Command {
    /// How many positional arguments the command takes after PATH (or without one).
    pub(crate) fn rest(&self) -> RangeInclusive<usize> {
        match self {
            Self::Show { .. } => 1..=1,
            Self::Pending { .. } | Self::Export { .. } => 0..=1,
            Self::Sessions { .. }
            | Self::Verify { .. }
            | Self::Stats { .. }
            | Self::Import { .. }
            | Self::Purge { .. }
            | Self::Compact { .. } => 0..=0,
            #[cfg(feature = "serve")]
            Self::Serve(_) => 0..=0,
        }
    }

    /// The redb file a read-only command reads; `None` for a command that writes, for
    /// a PostgreSQL journal, and for arguments that name no journal (a usage error).
    pub(crate) fn file_read(&self) -> Option<PathBuf> {
        let (args, db) = match self {
            Self::Sessions { args, db }
            | Self::Show { args, db, .. }
            | Self::Pending { args, db }
            | Self::Verify { args, db, .. }
            | Self::Export { args, db }
            | Self::Stats { args, db } => (args, db),
            Self::Import { .. } | Self::Purge { .. } | Self::Compact { .. } => return None,
            #[cfg(feature = "serve")]
            Self::Serve(_) => return None,
        };
        match locate(db.clone(), args.clone(), self.rest()) {
            Ok((Location::File(path), _)) => Some(path),
            _ => None,
        }
    }
}

/// The journal's location and the positional arguments after it. In file mode the
/// first positional is PATH; with `--postgres` there is none.
pub(crate) fn locate(
    db: Db,
    mut args: Vec<String>,
    rest: RangeInclusive<usize>,
) -> Result<(Location, Vec<String>), clap::Error> {
    let usage =
        |msg: String| Cli::command().error(clap::error::ErrorKind::WrongNumberOfValues, msg);
    // NOTIFY_DATABASE_URL stands for `--postgres` when no PATH is given: no more
    // arguments than the command takes after PATH, and for a command whose SESSION is
    // optional, a lone argument that is a session ID rather than a path.
    let no_path = args.len() <= *rest.end()
        && (args.len() <= *rest.start()
            || args.first().is_some_and(|a| a.parse::<SessionId>().is_ok()));
    let conninfo = db.postgres.or_else(|| {
        no_path
            .then(|| credentials::env_conninfo(&credentials::ProcessEnv))
            .flatten()
    });
    let at = match conninfo {
        Some(conninfo) => Location::Postgres {
            conninfo,
            schema: db.schema.unwrap_or_else(|| DEFAULT_SCHEMA.to_owned()),
        },
        None if db.schema.is_some() => {
            return Err(usage(
                "--schema needs a PostgreSQL journal (--postgres CONNINFO, or NOTIFY_DATABASE_URL)"
                    .to_owned(),
            ));
        }
        None => {
            if args.is_empty() {
                return Err(usage(
                    "a journal PATH (or --postgres CONNINFO, or NOTIFY_DATABASE_URL) is required"
                        .to_owned(),
                ));
            }
            Location::File(PathBuf::from(args.remove(0)))
        }
    };
    if !rest.contains(&args.len()) {
        let what = if args.len() > *rest.end() {
            "too many arguments"
        } else {
            "a SESSION is required"
        };
        return Err(usage(format!("{what}: {}", args.join(" "))));
    }
    Ok((at, args))
}

/// The optional SESSION argument, parsed.
pub(crate) fn session_arg(arg: Option<&String>) -> Result<Option<SessionId>, clap::Error> {
    arg.map(|s| {
        s.parse::<SessionId>().map_err(|_| {
            Cli::command().error(
                clap::error::ErrorKind::ValueValidation,
                format!("{s:?} is not a session ID (a UUID)"),
            )
        })
    })
    .transpose()
}
