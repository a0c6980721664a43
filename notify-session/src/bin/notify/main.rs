//! `notify`: the operator command line for notify journals, on a redb file or on
//! PostgreSQL (`--postgres CONNINFO [--schema S]`).
//!
//! The read commands (`sessions`, `show`, `pending`, `verify`, `export`, `stats`) open
//! a redb file read-only and never change it; a PostgreSQL schema is neither created
//! nor migrated by them. Every figure comes from the library's own answers (the
//! listing, replay, restore's reduction, the deep verify): the command line holds no
//! journal logic of its own. PostgreSQL credentials can come from the environment
//! instead of argv (`credentials.rs`). Built with the `cli` feature:
//! `cargo install --path notify-session --features cli --bin notify` from a clone.

//!
//! Here: the commands' dispatch. `args.rs` defines the arguments; each command's work
//! is in `commands/`, in the file named for it (`commands/verify.rs` for `notify
//! verify`). A read command on a redb file runs in a child process of this binary
//! (`reader.rs`), so that a damaged file that makes the read abort is answered as
//! damage (exit status 5), never with an abort.

mod args;
mod commands;
mod credentials;
mod error;
mod journal;
mod output;
mod reader;
#[cfg(feature = "serve")]
mod serve;

use std::process::ExitCode;

use clap::Parser as _;

use crate::args::{Cli, Command, locate, session_arg};
use crate::commands::VerifyArgs;
use crate::error::{CliError, Exit};
use crate::journal::Journal;
use crate::output::Out;

/// The binary's allocator: mimalloc (the library leaves the choice to its users).
/// Under `notify serve`'s load glibc's malloc took a seventh of the server's time;
/// mimalloc runs the same allocations in about a third of the instructions.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

async fn run(command: Command, out: &mut Out) -> Result<Exit, CliError> {
    let usage = |e: clap::Error| -> CliError {
        let _ = e.print();
        CliError::new(Exit::Usage, "")
    };
    let positionals = command.rest();
    match command {
        Command::Sessions { args, db } => {
            let (at, _) = locate(db, args, positionals).map_err(usage)?;
            let journal = Journal::open_read(&at).await?;
            commands::sessions(&journal, &at.describe(), out).await?;
            journal.close().await;
        }
        Command::Show {
            args,
            from,
            limit,
            db,
        } => {
            let (at, rest) = locate(db, args, positionals).map_err(usage)?;
            let session = session_arg(rest.first()).map_err(usage)?;
            let journal = Journal::open_read(&at).await?;
            if let Some(session) = session {
                commands::show(&journal, &at.describe(), session, from, limit, out).await?;
            }
            journal.close().await;
        }
        Command::Pending { args, db } => {
            let (at, rest) = locate(db, args, positionals).map_err(usage)?;
            let session = session_arg(rest.first()).map_err(usage)?;
            let journal = Journal::open_read(&at).await?;
            commands::pending(&journal, &at.describe(), session, out).await?;
            journal.close().await;
        }
        Command::Verify {
            args,
            max_problems,
            pages,
            db,
        } => {
            let (at, _) = locate(db, args, positionals).map_err(usage)?;
            return commands::verify(
                &at,
                &VerifyArgs {
                    max_problems,
                    pages,
                },
                out,
            )
            .await;
        }
        Command::Export { args, db } => {
            let (at, rest) = locate(db, args, positionals).map_err(usage)?;
            let session = session_arg(rest.first()).map_err(usage)?;
            let journal = Journal::open_read(&at).await?;
            commands::export(&journal, &at.describe(), session, out).await?;
            journal.close().await;
        }
        Command::Import { args, input, db } => {
            let (at, _) = locate(db, args, positionals).map_err(usage)?;
            commands::import(&at, input.as_ref(), out).await?;
        }
        Command::Stats { args, db } => {
            let (at, _) = locate(db, args, positionals).map_err(usage)?;
            commands::stats(&at, out).await?;
        }
        Command::Purge {
            args,
            ended_before,
            max_frames_per_step,
            db,
        } => {
            let (at, _) = locate(db, args, positionals).map_err(usage)?;
            let horizon = commands::parse_horizon(&ended_before).map_err(commands::bad_horizon)?;
            commands::purge(&at, horizon, max_frames_per_step, out).await?;
        }
        Command::Compact { args, db } => {
            let (at, _) = locate(db, args, positionals).map_err(usage)?;
            commands::compact(&at, out).await?;
        }
        // Dispatched in `main`, on a runtime of its own.
        #[cfg(feature = "serve")]
        Command::Serve(_) => {}
    }
    Ok(Exit::Ok)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    #[cfg(feature = "serve")]
    if let Command::Serve(args) = cli.command {
        return serve::main(*args);
    }
    // A read of a redb file runs in a reader process (`reader.rs`), unless this is it.
    if cli.in_reader_process {
        if let Some(code) = reader::bind_to_command() {
            return code;
        }
    } else if let Some(code) = cli.command.file_read().and_then(|p| reader::isolated(&p)) {
        return code;
    }
    let mut out = Out::new(cli.json);
    let result = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt.block_on(run(cli.command, &mut out)),
        Err(e) => Err(CliError::new(
            Exit::Failed,
            format!("cannot start the runtime: {e}"),
        )),
    };
    let result = result.and_then(|exit| out.flush().map(|()| exit));
    match result {
        Ok(exit) => ExitCode::from(exit as u8),
        Err(e) => {
            let _ = out.flush();
            if !e.message.is_empty() {
                eprintln!("notify: {}", e.message);
            }
            ExitCode::from(e.exit as u8)
        }
    }
}
