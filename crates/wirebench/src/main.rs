//! `wirebench`: measure what a network path delivers over TCP and UDP.
//!
//! Glue only: `cli` holds the flags, `cmd/` one short file per command that validates them,
//! calls a library (the engine to measure, the report crate to summarise and print, the lab
//! crate to emulate) and prints. Exit codes: 0 success (and a broken pipe), 1 runtime
//! failure, 2 usage error, 130 a test interrupted by Ctrl-C (see `EXIT_CODES`).
#![deny(unsafe_code)]

mod budget;
mod cli;
mod cmd;
mod habits;
mod iperf3_args;
mod look;
mod psk;

use std::io;
use std::process::ExitCode;

use cli::Command;

/// The exit codes, as `--help` and docs/exit-codes.md list them.
pub const EXIT_CODES: &str = "Exit codes: 0 the test completed (or stdout was closed early); \
1 the test failed or was incomplete (what was measured is still printed); 2 bad flags; \
3 some trials failed (sweep, merge, lab scenario: the summary counts them, without their \
figures; a rerun with the same --out measures them again); 130 interrupted by Ctrl-C \
(SIGINT), 143 by SIGTERM, 129 by SIGHUP (partial results printed first).";

/// `lab`'s exit codes, in its `--help` and `lab scenario --help`.
pub const LAB_EXIT_CODES: &str = "Exit codes: 0 done; 1 a runtime failure (also the command's \
own); 2 bad flags or scenario file; 3 a scenario finished but some trials failed (a trial that \
did not run, or a measured test without results: the line under the table says why).";

/// A failure and the exit code it maps to.
pub(crate) enum Failure {
    /// Bad flags: exit 2.
    Usage(String),
    /// Anything at run time: exit 1.
    Runtime(anyhow::Error),
    /// A run that ended with its own exit code (130: interrupted), and why.
    Code(u8, String),
}

impl From<anyhow::Error> for Failure {
    fn from(e: anyhow::Error) -> Self {
        Self::Runtime(e)
    }
}

fn main() -> ExitCode {
    if let Some(answer) = iperf3_habit(&std::env::args().collect::<Vec<_>>()) {
        eprintln!("error: {answer}");
        return ExitCode::from(2);
    }
    let argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let cli = match cli::parse_from(&argv) {
        Ok(cli) => cli,
        Err(e) => habits::explain(e, &argv).exit(),
    };
    let result = match cli.command {
        Command::Serve(args) => cmd::serve::serve(&args),
        // rrul runs several tests at once (it is no one test's mode): its own command file.
        Command::Run(args)
            if matches!(args.run.mode, cli::ModeArg::Rrul)
                && args.run.iperf3.is_none()
                && args.run.quic_perf.is_none() =>
        {
            cmd::rrul::run(&args)
        }
        Command::Run(args) => cmd::run::run(&args),
        Command::PacketLog(args) => cmd::plot::packet_log(&args),
        Command::Sweep(args) => cmd::sweep::sweep(&args),
        Command::Plot(args) => cmd::plot::plot(&args),
        Command::Report(args) => cmd::report::report(&args),
        Command::Merge(args) => cmd::merge::merge(&args),
        Command::Lab(args) => cmd::lab::lab(&args),
        Command::Mesh(args) => cmd::mesh::mesh(&args),
        Command::Archive(args) => cmd::archive::archive(&args),
        Command::Completions { shell } => cmd::completions::completions(shell),
        Command::Man(args) => cmd::completions::man(&args),
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
            eprintln!("error: {}", message(&e));
            ExitCode::from(1)
        }
        Err(Failure::Code(code, msg)) => {
            // Empty when the words were said already (a lab's command said it).
            if !msg.is_empty() {
                eprintln!("{msg}");
            }
            ExitCode::from(code)
        }
    }
}

/// The error and its causes on one line, each said once: a cause whose text its parent
/// already includes (the OS message inside "cannot connect to ...: ...") is not repeated.
/// (A port in use names its flag in the engine's own error: `-p`, `--iperf3-port`.)
fn message(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if out.contains(&text) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&text);
    }
    out
}

/// iperf3's `-c HOST` and `-s` are no wirebench flags: the command that does it instead.
fn iperf3_habit(args: &[String]) -> Option<String> {
    let first = args.get(1).map(String::as_str)?;
    let host_after = |i: usize| args.get(i + 1).map_or("HOST", String::as_str).to_string();
    match first {
        "-s" | "--server" => {
            return Some(
                "iperf3's -s is `wirebench serve` here (e.g. wirebench serve -p 5201)".into(),
            )
        }
        "-c" | "--client" => {
            return Some(format!(
                "iperf3's -c HOST is `wirebench run HOST` here (e.g. wirebench run {})",
                host_after(1)
            ))
        }
        "run" => {}
        _ => return None,
    }
    let end = args.iter().position(|a| a == "--").unwrap_or(args.len());
    let i = args[..end]
        .iter()
        .position(|a| a == "-c" || a == "--client")?;
    Some(format!(
        "-c is iperf3's: give the server as wirebench run's first argument (wirebench run {})",
        host_after(i)
    ))
}

/// Whether the failure was writing to a closed pipe (`wirebench ... | head`): not an error.
fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<io::Error>()
            .is_some_and(|io| io.kind() == io::ErrorKind::BrokenPipe)
    })
}
