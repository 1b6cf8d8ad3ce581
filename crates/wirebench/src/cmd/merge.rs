//! `wirebench merge`: the shards of a sweep (or of a lab scenario) into one experiment
//! directory. A one-machine
//! sweep ends with the same step ([`finish`]), so a merged directory and a one-machine one
//! are made by the same code.

use std::io::{self, Write};
use std::path::{Path, PathBuf};

use anyhow::Context;
use wirebench_lab::run::{run_scenario, ScenarioRun};
use wirebench_lab::scenario::Scenario;
use wirebench_lab::summary::trial_file;
use wirebench_report::experiment::shard::{copy_saved, is_there, write_atomic};
use wirebench_report::experiment::{
    DirLock, ExperimentSummary, Manifest, Merged, RunKind, Shard, ShardError, Warning,
};
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
    let _locks = lock_dirs(&args.dirs, &out)?;
    let manifest = Manifest::read(&args.dirs[0]).map_err(|e| Failure::Runtime(e.into()))?;
    // A scenario that fails its file's checks (a name out of the directory) is refused.
    let plan = wirebench_lab::run::plan_of(&manifest).map_err(|e| Failure::Usage(e.to_string()))?;
    match plan {
        Some(plan) => merge_lab(&args.dirs, &out, plan),
        None => finish(&args.dirs, &out),
    }
}

/// Locks the directory written (`out`) and each directory read, for as long as `merge`
/// runs: a shard or a scenario run still writing one is refused, and so is one that starts
/// while `merge` reads. A directory read that cannot be written (a read-only copy) is
/// only looked at: no run can write it either.
fn lock_dirs(dirs: &[PathBuf], out: &Path) -> Result<Vec<DirLock>, Failure> {
    let whole = wirebench_report::experiment::Shard::WHOLE;
    let mut locks = vec![DirLock::acquire(out, RunKind::Merge, whole).map_err(runtime)?];
    let mut seen = vec![out.canonicalize().unwrap_or_else(|_| out.to_path_buf())];
    for d in dirs {
        let canonical = d.canonicalize().unwrap_or_else(|_| d.clone());
        if seen.contains(&canonical) {
            continue;
        }
        seen.push(canonical);
        match DirLock::acquire(d, RunKind::Merge, whole) {
            Ok(l) => locks.push(l),
            Err(e @ (ShardError::InUse { .. } | ShardError::Locked { .. })) => {
                return Err(runtime(e))
            }
            Err(_) => {
                if let Some(holder) = DirLock::holder(d) {
                    return Err(Failure::Runtime(anyhow::anyhow!(
                        "{} is in use by {holder}: merge once it has ended",
                        d.display()
                    )));
                }
            }
        }
    }
    Ok(locks)
}

fn runtime(e: ShardError) -> Failure {
    Failure::Runtime(e.into())
}

/// A lab scenario's shards: every trial file gathered into `out`, then the scenario's own
/// summary (a resumed run with nothing left to run). A missing trial is named, not run.
fn merge_lab(
    dirs: &[PathBuf],
    out: &Path,
    (scenario, profiles, time_scale, trials): (Scenario, Vec<String>, f64, u32),
) -> Result<(), Failure> {
    let names: Vec<String> = scenario
        .profiles()
        .into_iter()
        .map(|p| p.name)
        .filter(|n| profiles.is_empty() || profiles.contains(n))
        .collect();
    wirebench_report::rundir::make_dirs(out, &["trials", "shards"]).map_err(anyhow::Error::from)?;
    wirebench_report::output::clean_experiment_temps(out);
    let mut missing = Vec::new();
    let copy = |file: &str| -> anyhow::Result<bool> {
        let to = out.join(file);
        if is_there(&to) {
            return Ok(true);
        }
        let Some(from) = dirs.iter().map(|d| d.join(file)).find(|f| is_there(f)) else {
            return Ok(false);
        };
        // Streamed, capped, a regular file only: a FIFO or a link to a device is refused.
        copy_saved(&from, &to)?;
        Ok(true)
    };
    for name in &names {
        for t in 0..trials {
            let file = trial_file(t, name);
            if !copy(&file)? {
                missing.push(file);
            }
        }
    }
    if !missing.is_empty() {
        return Err(Failure::Runtime(anyhow::anyhow!(
            "{} of {} trials missing: {}; run their shards again (a rerun skips the trials \
             already saved)",
            missing.len(),
            names.len() * trials as usize,
            missing.join(", ")
        )));
    }
    for file in ["manifest.json", "experiment.json"] {
        copy(file)?;
    }
    let run = ScenarioRun {
        scenario,
        profiles,
        trials: Some(trials),
        parallel: Some(1),
        time_scale,
        out: out.to_path_buf(),
        resume: true,
        add_profiles: false,
        shard: Shard::WHOLE,
        link_log_ns: 0,
        exe: std::env::current_exe().context("finding the wirebench executable")?,
        command: std::env::args().collect(),
        machine: wirebench_report::meta::Machine::this(),
    };
    let outcome = run_scenario(&run, &|_| {}).map_err(|e| Failure::Runtime(e.into()))?;
    print!("{}", outcome.table());
    println!("saved in {}", out.display());
    Ok(())
}

/// Reads the shards in `dirs`, writes the experiment directory `out` (trials, manifest,
/// `experiment.json`, `summary.json`, `summary.csv`, `warnings.json`, `trials.csv`) and
/// prints the summary table, then the experiment's warnings (the list the HTML report
/// shows: failed trials, limits hit, too few good trials, a sender short of the asked rate,
/// trials measured again). Exit status 3 when a trial failed: the summary is written, but
/// not the one asked for.
pub fn finish(dirs: &[PathBuf], out: &Path) -> Result<(), Failure> {
    let (summary, warnings) = write(dirs, out)?;
    let mut o = io::stdout().lock();
    Table
        .export(&summary, &mut o)
        .and_then(|()| writeln!(o, "saved in {}", out.display()))
        .and_then(|()| o.flush())
        .context("writing the summary")?;
    for w in &warnings {
        eprintln!("warning: {}", w.line(&summary));
    }
    let failed: u64 = summary.points.iter().map(|p| p.failed).sum();
    if failed > 0 {
        let trials: u64 = summary.points.iter().map(|p| p.trials).sum();
        return Err(some_failed(failed as usize, trials as usize, out));
    }
    Ok(())
}

/// Exit status 3, "some trials failed", and what to do about it.
pub(crate) fn some_failed(failed: usize, trials: usize, dir: &Path) -> Failure {
    Failure::Code(
        3,
        format!(
            "error: {failed} of {trials} trials failed (left out of the summary's figures; \
             their reasons are in summary.json): rerun the same sweep with --out {} to \
             measure them again",
            dir.display()
        ),
    )
}

/// A sweep's shards merged into a temporary directory, removed when dropped: what `report`
/// and `plot` read when given several directories.
pub struct MergedTemp {
    dir: PathBuf,
}

impl MergedTemp {
    /// Merges `dirs` (a sweep's shards) into a new temporary directory.
    pub fn new(dirs: &[PathBuf]) -> Result<Self, Failure> {
        let dir = std::env::temp_dir().join(format!(
            "wirebench-merged-{}-{}",
            std::process::id(),
            wirebench_report::meta::timestamp()
        ));
        let t = Self { dir };
        write(dirs, &t.dir)?;
        Ok(t)
    }

    /// The merged directory.
    pub fn path(&self) -> &Path {
        &self.dir
    }
}

impl Drop for MergedTemp {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The directory to read for `first` and `more`: `first` itself, or with more, all of them
/// merged into a temporary directory (kept alive by the second value).
pub fn read_dir_of(
    first: &Path,
    more: &[PathBuf],
) -> Result<(PathBuf, Option<MergedTemp>), Failure> {
    if more.is_empty() {
        return Ok((first.to_path_buf(), None));
    }
    let dirs: Vec<PathBuf> = std::iter::once(first.to_path_buf())
        .chain(more.iter().cloned())
        .collect();
    let t = MergedTemp::new(&dirs)?;
    Ok((t.path().to_path_buf(), Some(t)))
}

/// Writes the merged experiment directory `out` and returns its summary and warnings.
fn write(dirs: &[PathBuf], out: &Path) -> Result<(ExperimentSummary, Vec<Warning>), Failure> {
    let merged = Merged::read(dirs).map_err(|e| Failure::Runtime(e.into()))?;
    wirebench_report::output::clean_experiment_temps(out);
    for note in &merged.notes {
        eprintln!("note: {note}");
    }
    merged
        .gather_into(dirs, out)
        .map_err(|e| Failure::Runtime(e.into()))?;
    let summary = merged.summary();
    let warnings = merged.warnings(&summary);
    save(&out.join("experiment.json"), &Json, &merged.meta())?;
    save(&out.join("summary.json"), &Json, &summary)?;
    save(&out.join("summary.csv"), &Csv, &summary)?;
    save(&out.join("warnings.json"), &Json, &warnings[..])?;
    write_atomic(&out.join("trials.csv"), merged.placements_csv().as_bytes())
        .map_err(|e| Failure::Runtime(e.into()))?;
    Ok((summary, warnings))
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
    write_atomic(path, &bytes)?;
    Ok(())
}
