//! `wirebench merge`: the shards of a sweep into one experiment directory. A one-machine
//! sweep ends with the same step ([`finish`]), so a merged directory and a one-machine one
//! are made by the same code.

use std::io::{self, Write};
use std::path::{Path, PathBuf};

use anyhow::Context;
use wirebench_report::experiment::Merged;
use wirebench_report::{Csv, Exporter, Json, Table};

use crate::cli::MergeArgs;
use crate::Failure;

/// Runs `merge`.
pub fn merge(args: &MergeArgs) -> Result<(), Failure> {
    let out = match (&args.out, args.dirs.as_slice()) {
        (Some(o), _) => o.clone(),
        (None, [one]) => one.clone(),
        (None, _) => {
            return Err(Failure::Usage(
                "several directories: give -o OUT for the merged experiment".into(),
            ))
        }
    };
    finish(&args.dirs, &out)
}

/// Reads the shards in `dirs`, writes the experiment directory `out` (trials, manifest,
/// `experiment.json`, `summary.json`, `summary.csv`, `trials.csv`) and prints the summary
/// table, with a warning for each point whose sender fell short of the asked rate.
pub fn finish(dirs: &[PathBuf], out: &Path) -> Result<(), Failure> {
    let merged = Merged::read(dirs).map_err(|e| Failure::Runtime(e.into()))?;
    merged
        .gather_into(dirs, out)
        .map_err(|e| Failure::Runtime(e.into()))?;
    let summary = merged.summary();
    save(&out.join("experiment.json"), &Json, &merged.meta())?;
    save(&out.join("summary.json"), &Json, &summary)?;
    save(&out.join("summary.csv"), &Csv, &summary)?;
    std::fs::write(out.join("trials.csv"), merged.placements_csv())
        .with_context(|| format!("writing {}", out.join("trials.csv").display()))?;
    let mut o = io::stdout().lock();
    Table
        .export(&summary, &mut o)
        .and_then(|()| writeln!(o, "saved in {}", out.display()))
        .and_then(|()| o.flush())
        .context("writing the summary")?;
    for s in summary.shortfalls() {
        eprintln!("warning: {s}");
    }
    Ok(())
}

/// Writes `doc` to `path` with `exporter`, whole or not at all.
pub(crate) fn save<T: ?Sized>(
    path: &Path,
    exporter: &dyn Exporter<T>,
    doc: &T,
) -> anyhow::Result<()> {
    let mut bytes = Vec::new();
    exporter
        .export(doc, &mut bytes)
        .with_context(|| format!("writing {}", path.display()))?;
    wirebench_report::experiment::shard::write_atomic(path, &bytes)?;
    Ok(())
}
