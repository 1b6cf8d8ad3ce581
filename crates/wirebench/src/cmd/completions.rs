//! `wirebench completions SHELL` and `wirebench man`: made from the clap definitions, so
//! they always list the flags this build has.

use std::io::{self, Write};
use std::path::Path;

use anyhow::Context;

use crate::cli::ManArgs;
use crate::Failure;

/// Prints the completion script of `shell`.
pub fn completions(shell: clap_complete::Shell) -> Result<(), Failure> {
    let mut cmd = crate::cli::command();
    let mut out = io::stdout().lock();
    clap_complete::generate(shell, &mut cmd, "wirebench", &mut out);
    out.flush().context("writing the completions")?;
    Ok(())
}

/// Writes every page into `--dir`, one per command, as the SUBCOMMANDS sections name them
/// (`wirebench-run(1)`); or prints the page of the command named; or, with neither, every
/// page one after the other (`wirebench man | man -l -` reads them all).
pub fn man(args: &ManArgs) -> Result<(), Failure> {
    let mut root = crate::cli::command().disable_help_subcommand(true);
    // Names each subcommand as its page does (wirebench-run, wirebench-lab-up).
    root.build();
    if let Some(dir) = &args.dir {
        return write_all(&root, dir);
    }
    if args.command.is_empty() {
        let mut out = io::stdout().lock();
        every_page(&root, &mut out)
            .and_then(|()| out.flush())
            .context("writing the manual pages")?;
        return Ok(());
    }
    let mut cmd = &root;
    for name in &args.command {
        cmd = cmd
            .get_subcommands()
            .find(|s| s.get_name() == name && !s.is_hide_set())
            .ok_or_else(|| {
                Failure::Usage(format!(
                    "no command {name:?} to show the page of: `wirebench --help` lists them"
                ))
            })?;
    }
    let mut out = io::stdout().lock();
    page(cmd, &mut out)
        .and_then(|()| out.flush())
        .context("writing the manual page")?;
    Ok(())
}

/// Writes the page of `cmd` and of each of its visible subcommands into `dir`.
fn write_all(cmd: &clap::Command, dir: &Path) -> Result<(), Failure> {
    let name = cmd.get_display_name().unwrap_or_else(|| cmd.get_name());
    let path = dir.join(format!("{name}.1"));
    let mut text = Vec::new();
    page(cmd, &mut text).context("rendering the manual page")?;
    std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        write_all(sub, dir)?;
    }
    Ok(())
}

/// The page of `cmd`, then those of its visible subcommands, depth first.
fn every_page(cmd: &clap::Command, out: &mut dyn Write) -> io::Result<()> {
    page(cmd, out)?;
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        every_page(sub, out)?;
    }
    Ok(())
}

/// One page: clap_mangen's sections, with EXAMPLES before the exit codes.
fn page(cmd: &clap::Command, out: &mut dyn Write) -> io::Result<()> {
    let man = clap_mangen::Man::new(cmd.clone());
    man.render_title(out)?;
    man.render_name_section(out)?;
    man.render_synopsis_section(out)?;
    man.render_description_section(out)?;
    if cmd.get_arguments().any(|a| !a.is_hide_set()) {
        man.render_options_section(out)?;
    }
    if cmd.get_subcommands().any(|s| !s.is_hide_set()) {
        man.render_subcommands_section(out)?;
    }
    let name = cmd.get_display_name().unwrap_or_else(|| cmd.get_name());
    if let Some((_, examples)) = EXAMPLES.iter().find(|(page, _)| *page == name) {
        writeln!(out, ".SH EXAMPLES")?;
        for (command, what) in *examples {
            writeln!(out, ".TP\n\\fB{}\\fR\n{}", roff(command), roff(what))?;
        }
    }
    if cmd.get_after_help().is_some() || cmd.get_after_long_help().is_some() {
        man.render_extra_section(out)?;
    }
    man.render_version_section(out)
}

/// `text` as roff reads it literally: backslashes and hyphens escaped, and no line that
/// starts as a request.
fn roff(text: &str) -> String {
    let escaped = text.replace('\\', "\\e").replace('-', "\\-");
    match escaped.chars().next() {
        Some('.' | '\'') => format!("\\&{escaped}"),
        _ => escaped,
    }
}

/// Each page's examples: the command, then what it does.
const EXAMPLES: &[(&str, &[(&str, &str)])] = &[
    (
        "wirebench",
        &[
            (
                "wirebench serve",
                "On the server: TCP and UDP port 5300, IPv6 and IPv4.",
            ),
            (
                "wirebench run SERVER",
                "TCP streaming for 10 s, a line per second.",
            ),
            (
                "wirebench run",
                "The same against a server in this process, on loopback.",
            ),
            (
                "wirebench man --dir /usr/local/share/man/man1",
                "Install every page, one per command.",
            ),
        ],
    ),
    (
        "wirebench-run",
        &[
            (
                "wirebench run SERVER",
                "TCP streaming for 10 s, a line per second.",
            ),
            (
                "wirebench run SERVER -u -b 500M -t 5s",
                "UDP at 500 Mbit/s: what arrived, lost, reordered, jitter.",
            ),
            ("wirebench run SERVER -R -n 1G", "The server sends 1 GB."),
            (
                "wirebench run SERVER -P 4 --bidir",
                "Four TCP streams each way at once.",
            ),
            (
                "wirebench run SERVER --mode rr -l 64 -t 2s",
                "Request/response round trips, one in flight.",
            ),
            (
                "wirebench run SERVER --mode rrul",
                "Latency under load (flent's RRUL): rr probes alone, under TCP load, alone.",
            ),
            (
                "wirebench run SERVER --file big.iso --both-directions",
                "Send a file, get it back from the server's --files-dir, compare times and rates.",
            ),
            (
                "wirebench run SERVER -u -n 1M --json > result.json",
                "The results document, on failure too.",
            ),
            (
                "wirebench run --iperf3 SERVER:5201 -u -b 1G",
                "Measure against an iperf3 server.",
            ),
        ],
    ),
    (
        "wirebench-serve",
        &[
            ("wirebench serve", "TCP and UDP port 5300, IPv6 and IPv4."),
            ("wirebench serve -4 -p 5201", "IPv4 only, on port 5201."),
            (
                "wirebench serve --max-rate 1G --max-bytes 10G --psk-file key",
                "A public server: limits on what a test moves, clients must hold the key.",
            ),
            (
                "wirebench serve --iperf3-port 5201",
                "Also answer iperf3 clients on their port.",
            ),
            ("wirebench serve -1", "Serve one test, then exit."),
        ],
    ),
    (
        "wirebench-sweep",
        &[
            (
                "wirebench sweep --vary rate=1M..1G:log:7 -u --repeat 3",
                "Receive rate against send rate, each point three times.",
            ),
            (
                "wirebench sweep --preset rate-sweep --scale 0.01",
                "A ready-made experiment, scaled down.",
            ),
        ],
    ),
    (
        "wirebench-plot",
        &[(
            "wirebench plot wirebench-results/DIR -o rate.svg",
            "The rate plot of an experiment.",
        )],
    ),
    (
        "wirebench-report",
        &[(
            "wirebench report wirebench-results/DIR -o report.html",
            "A self-contained HTML report of an experiment.",
        )],
    ),
    (
        "wirebench-lab",
        &[
            (
                "wirebench lab --rate 10M --delay 20ms --loss 1% -- run -t 5s",
                "A test over an emulated link (as root).",
            ),
            (
                "wirebench lab --delay 50ms -- exec iperf3 -c 10.77.0.2",
                "Any program in the client host.",
            ),
        ],
    ),
];

#[cfg(test)]
mod tests {
    use super::*;

    /// Every page a SUBCOMMANDS section names is written, and the examples are roff.
    #[test]
    fn every_page_named_is_written_with_examples() {
        let dir = std::env::temp_dir().join(format!("wb-man-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a directory");
        assert!(man(&ManArgs {
            command: Vec::new(),
            dir: Some(dir.clone()),
        })
        .is_ok());
        let mut named = Vec::new();
        for entry in std::fs::read_dir(&dir).expect("the pages") {
            let text = std::fs::read_to_string(entry.expect("a page").path()).expect("text");
            for word in text.split_whitespace() {
                if let Some(page) = word.strip_suffix("(1)") {
                    named.push(page.replace("\\-", "-"));
                }
            }
        }
        for page in &named {
            assert!(dir.join(format!("{page}.1")).is_file(), "{page}");
        }
        let run = std::fs::read_to_string(dir.join("wirebench-run.1")).expect("run's page");
        assert!(run.contains(".SH EXAMPLES"), "{run}");
        assert!(run.contains("wirebench run SERVER \\-u \\-b 500M"), "{run}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
