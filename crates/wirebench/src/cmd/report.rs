//! `wirebench report DIR -o FILE`: the experiment's HTML report (built by the report crate).

use crate::cli::ReportArgs;
use crate::Failure;

/// Writes the report of `args.dir` to `args.output`.
pub fn report(args: &ReportArgs) -> Result<(), Failure> {
    // Several shard directories are merged first (the temporary copy lives until the end).
    let (dir, _merged) = super::merge::read_dir_of(&args.dir, &args.more)?;
    // The error names the file that could not be read: no context to add.
    wirebench_report::output::clean_experiment_temps(&dir);
    let html = wirebench_report::html::report(&dir).map_err(anyhow::Error::from)?;
    // Whole or not at all: an interrupted or failed write leaves an earlier report intact;
    // a link there is replaced, never written through, and a FIFO is refused (the report
    // is often written into the experiment's directory, which runs fill).
    // The error names the file and what to do: no context to add.
    wirebench_report::output::clean_temps(output_dir(&args.output));
    wirebench_report::rundir::write(&args.output, html.as_bytes()).map_err(anyhow::Error::from)?;
    // Said, since the default name (report.html, here) is not the experiment's directory.
    eprintln!(
        "report: {}",
        wirebench_report::text::printable(&args.output.display().to_string())
    );
    Ok(())
}

/// The directory `path` is written in.
pub(crate) fn output_dir(path: &std::path::Path) -> &std::path::Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => std::path::Path::new("."),
    }
}
