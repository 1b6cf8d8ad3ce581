//! `wirebench report DIR -o FILE`: the experiment's HTML report (built by the report crate).

use anyhow::Context;

use crate::cli::ReportArgs;
use crate::Failure;

/// Writes the report of `args.dir` to `args.output`.
pub fn report(args: &ReportArgs) -> Result<(), Failure> {
    // Several shard directories are merged first (the temporary copy lives until the end).
    let (dir, _merged) = super::merge::read_dir_of(&args.dir, &args.more)?;
    // The error names the file that could not be read: no context to add.
    let html = wirebench_report::html::report(&dir).map_err(anyhow::Error::from)?;
    std::fs::write(&args.output, html)
        .with_context(|| format!("writing {}", args.output.display()))?;
    Ok(())
}
