//! `wirebench`: measure what a network path delivers over TCP and UDP.
//!
//! Glue only: `cli` holds the flags, `cmd/` one short file per command that validates them,
//! calls a library (the engine to measure, the report crate to summarise and print, the lab
//! crate to emulate) and prints. Exit codes: 0 success (and a broken pipe), 1 runtime
//! failure, 2 usage error.
#![deny(unsafe_code)]

mod cli;
mod cmd;

use std::io;
use std::process::ExitCode;

use clap::Parser;

use cli::{Cli, Command};

/// A failure and the exit code it maps to.
pub(crate) enum Failure {
    /// Bad flags: exit 2.
    Usage(String),
    /// Anything at run time: exit 1.
    Runtime(anyhow::Error),
}

impl From<anyhow::Error> for Failure {
    fn from(e: anyhow::Error) -> Self {
        Self::Runtime(e)
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Serve(args) => cmd::serve::serve(&args),
        Command::Run(args) => cmd::run::run(&args),
        Command::PacketLog(args) => cmd::plot::packet_log(&args),
        Command::Sweep(args) => cmd::sweep::sweep(&args),
        Command::Plot(args) => cmd::plot::plot(&args),
        Command::Report(args) => cmd::report::report(&args),
        Command::Merge(args) => cmd::merge::merge(&args),
        Command::Lab(args) => cmd::lab::lab(&args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::Usage(msg)) => {
            eprintln!("error: {msg}");
            ExitCode::from(2)
        }
        Err(Failure::Runtime(e)) => {
            if is_broken_pipe(&e) {
                return ExitCode::SUCCESS;
            }
            eprintln!("error: {e:#}");
            ExitCode::from(1)
        }
    }
}

/// Whether the failure was writing to a closed pipe (`wirebench ... | head`): not an error.
fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<io::Error>()
            .is_some_and(|io| io.kind() == io::ErrorKind::BrokenPipe)
    })
}
