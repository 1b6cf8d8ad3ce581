//! `wirebench completions SHELL` and `wirebench man`: made from the clap definitions, so
//! they always list the flags this build has.

use std::io::{self, Write};

use anyhow::Context;
use clap::CommandFactory;

use crate::cli::Cli;
use crate::Failure;

/// Prints the completion script of `shell`.
pub fn completions(shell: clap_complete::Shell) -> Result<(), Failure> {
    let mut cmd = Cli::command();
    let mut out = io::stdout().lock();
    clap_complete::generate(shell, &mut cmd, "wirebench", &mut out);
    out.flush().context("writing the completions")?;
    Ok(())
}

/// Prints the manual page, with a section per subcommand.
pub fn man() -> Result<(), Failure> {
    let cmd = Cli::command();
    let mut out = io::stdout().lock();
    clap_mangen::Man::new(cmd.clone())
        .render(&mut out)
        .context("writing the manual page")?;
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        clap_mangen::Man::new(sub.clone())
            .title(format!("wirebench-{}", sub.get_name()))
            .render(&mut out)
            .context("writing the manual page")?;
    }
    out.flush().context("writing the manual page")?;
    Ok(())
}
