//! Putting a sharded sweep back together: the shards' directories (or one shared
//! directory) checked to be one experiment, every trial found, and the experiment
//! directory a one-machine run leaves written from them. A one-machine sweep goes through
//! the same step, so that the two cannot differ.

use std::path::{Path, PathBuf};

use super::lock::DirLock;
use super::plan::{grid, Point};
use super::shard::{copy_saved, is_there, shard_of, trial_path, Manifest, ShardError, ShardRecord};
use super::summary::{
    offered_of_test, summarize_points, ExperimentSummary, FailedTrial, PointTrials, RetriedTrial,
};
use super::trial::{NotThisTrial, TrialFile};
use crate::input::InputError;
use crate::meta::ExperimentMeta;

/// Why the shards cannot be merged.
#[derive(Debug, thiserror::Error)]
pub enum MergeError {
    /// A file of a shard.
    #[error(transparent)]
    Shard(#[from] ShardError),
    /// Directories of different experiments.
    #[error(
        "{dir} is another experiment (manifest {found}, {first} has {ours}): \
         merge only the shards of one sweep"
    )]
    Mismatch {
        /// The odd directory.
        dir: PathBuf,
        /// Its hash.
        found: String,
        /// The first directory.
        first: PathBuf,
        /// The first directory's hash.
        ours: String,
    },
    /// A trial file that cannot be read.
    #[error(transparent)]
    Input(#[from] InputError),
    /// A trial file of another experiment, another trial, or none.
    #[error(
        "{0}; merge only trials a sweep of this experiment saved (remove the file, and rerun \
         its shard with the same --out to measure it)"
    )]
    Foreign(NotThisTrial),
    /// The same trial, completed twice with different results.
    #[error(
        "{} and {} are the same trial measured twice with different results: keep one \
         (remove the other) and merge again",
        .first.display(), .second.display()
    )]
    Differ {
        /// The copy found first.
        first: PathBuf,
        /// The other.
        second: PathBuf,
    },
    /// A directory a run still writes.
    #[error("{} is in use by {holder}: merge once it has ended", .dir.display())]
    Running {
        /// Who holds it, in words.
        holder: String,
        /// The directory.
        dir: PathBuf,
    },
    /// Trials no directory holds.
    #[error(
        "{} of {total} trials missing: {}{}; run their shards again (a rerun skips the \
         trials already saved)",
        .missing.len(),
        .missing.iter().take(20).map(ToString::to_string).collect::<Vec<_>>().join(", "),
        if .missing.len() > 20 { ", ..." } else { "" }
    )]
    Missing {
        /// The trials missing.
        missing: Vec<MissingTrial>,
        /// Trials in all.
        total: usize,
    },
}

/// A trial that no shard saved.
#[derive(Debug, Clone, PartialEq)]
pub struct MissingTrial {
    /// Its file, relative to the experiment's directory.
    pub file: String,
    /// Its point's parameters, `name=value` joined by spaces.
    pub point: String,
    /// The shard that should have run it, when the shards' count is known.
    pub shard: Option<String>,
}

impl std::fmt::Display for MissingTrial {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.file, self.point)?;
        if let Some(s) = &self.shard {
            write!(f, " of shard {s}")?;
        }
        Ok(())
    }
}

/// Where one trial ran: a row of `trials.csv`.
#[derive(Debug, Clone, PartialEq)]
pub struct Placement {
    /// The trial's file.
    pub file: String,
    /// The shard that ran it (`I-of-N`), if recorded.
    pub shard: String,
    /// The host that ran it (the client).
    pub client: String,
    /// The server it measured, as its results name it.
    pub server: String,
}

/// An experiment put together from its shards.
#[derive(Debug, Clone)]
pub struct Merged {
    /// The manifest every shard shares.
    pub manifest: Manifest,
    /// The grid.
    pub points: Vec<Point>,
    /// Each point's trials, completed and failed, in repeat order, with their files.
    pub trials: Vec<PointTrials>,
    /// Each point's offered rate, bits/s, from the manifest's tests (never a trial file).
    pub offered: Vec<Option<f64>>,
    /// The copy of each trial file taken, by file, where several directories hold one.
    pub sources: Vec<(String, PathBuf)>,
    /// What the merge decided that the user should know: which copy of a duplicate it kept.
    pub notes: Vec<String>,
    /// The shards' records, from every directory.
    pub shards: Vec<ShardRecord>,
    /// Where each trial ran, in trial order.
    pub placements: Vec<Placement>,
}

impl Merged {
    /// Reads the shards in `dirs` (their `manifest.json`, `shards/` and `trials/`).
    ///
    /// # Errors
    ///
    /// Directories of different experiments, a file that cannot be read, or trials that
    /// no directory holds (all named).
    pub fn read(dirs: &[PathBuf]) -> Result<Self, MergeError> {
        let first = dirs.first().cloned().unwrap_or_else(|| PathBuf::from("."));
        // A directory a run still writes is not read at all (not even its manifest).
        for d in dirs {
            if let Some(holder) = DirLock::holder(d) {
                return Err(MergeError::Running {
                    holder,
                    dir: d.clone(),
                });
            }
        }
        let manifest = Manifest::read(&first)?;
        let mut shards: Vec<ShardRecord> = Vec::new();
        let mut notes = Vec::new();
        for d in dirs {
            let m = Manifest::read(d)?;
            let content = m.content_hash();
            if m.hash != manifest.hash || content != manifest.hash {
                // An edited manifest keeps the hash it records: the content's is told.
                let found = match m.hash == manifest.hash {
                    true => format!(
                        "{} as recorded, but its content hashes to {content}",
                        m.hash
                    ),
                    false => m.hash,
                };
                return Err(MergeError::Mismatch {
                    dir: d.clone(),
                    found,
                    first: first.clone(),
                    ours: manifest.hash,
                });
            }
            for r in ShardRecord::read_all(d)? {
                match shards.iter().find(|s| s.shard == r.shard) {
                    Some(s) if *s != r => notes.push(format!(
                        "shard {} was run more than once (its record is in {} too): its \
                         trials were checked one by one",
                        r.shard.label(),
                        d.display()
                    )),
                    Some(_) => {}
                    None => shards.push(r),
                }
            }
        }
        shards.sort_by_key(|r| (r.shard.count, r.shard.index));
        let points = grid(&manifest.varies);
        let repeats = manifest.repeat;
        let count = shards.iter().map(|r| r.shard.count).max();
        let mut trials = vec![PointTrials::default(); points.len()];
        let mut missing = Vec::new();
        let mut placements = Vec::new();
        let mut sources = Vec::new();
        for (p, point) in points.iter().enumerate() {
            for r in 0..repeats {
                let file = trial_path(p, r);
                let Some((from, trial)) = pick(dirs, &manifest, &file, p, r, &mut notes)? else {
                    missing.push(MissingTrial {
                        file: file.clone(),
                        point: point_label(point),
                        shard: count
                            .map(|n| format!("{}/{n}", shard_of(&points, p, r, repeats, n))),
                    });
                    continue;
                };
                let by = shards.iter().find(|s| s.trials.contains(&file));
                placements.push(Placement {
                    file: file.clone(),
                    shard: by.map(|s| s.shard.label()).unwrap_or_default(),
                    client: by.map(|s| s.client.clone()).unwrap_or_default(),
                    server: trial
                        .results
                        .as_ref()
                        .map(|x| x.server.clone())
                        .unwrap_or_default(),
                });
                sources.push((file.clone(), from));
                let why = trial.failed().map(str::to_string);
                let completed = why.is_none() && trial.results.is_some();
                // A file saved before trial tags had a cause still has its document's.
                let cause = (trial.trial.cause)
                    .or_else(|| trial.results.as_ref().and_then(|r| r.error_cause));
                if trial.trial.attempt > 1 {
                    trials[p].retried.push(RetriedTrial {
                        file: file.clone(),
                        attempts: trial.trial.attempt,
                        completed,
                    });
                }
                match (why, trial.results) {
                    (None, Some(results)) => trials[p].completed.push((file, results)),
                    (why, _) => trials[p].failed.push(FailedTrial {
                        reason: why.unwrap_or_else(|| "failed".into()),
                        file,
                        cause,
                    }),
                }
            }
        }
        if !missing.is_empty() {
            return Err(MergeError::Missing {
                missing,
                total: points.len() * repeats as usize,
            });
        }
        let offered = (0..points.len())
            .map(|p| manifest.tests.get(p).and_then(offered_of_test))
            .collect();
        Ok(Self {
            manifest,
            points,
            trials,
            offered,
            sources,
            notes,
            shards,
            placements,
        })
    }

    /// The summary, as a one-machine sweep writes it.
    pub fn summary(&self) -> ExperimentSummary {
        summarize_points(&self.points, &self.offered, &self.trials)
    }

    /// `experiment.json`: the manifest's plan, with the command and machine of the first
    /// shard, and the servers measured (one, or each distinct one joined by spaces).
    pub fn meta(&self) -> ExperimentMeta {
        let first = self.shards.first();
        let mut servers: Vec<&str> = Vec::new();
        for s in &self.shards {
            if !servers.contains(&s.server.as_str()) {
                servers.push(&s.server);
            }
        }
        ExperimentMeta {
            wirebench: self.manifest.wirebench.clone(),
            command: first.map(|s| s.command.clone()).unwrap_or_default(),
            server: servers.join(" "),
            varies: self.manifest.varies.clone(),
            repeat: self.manifest.repeat,
            ordered: self.manifest.ordered,
            shuffle_seed: self.manifest.shuffle_seed,
            machine: first.map(|s| s.machine.clone()).unwrap_or_default(),
            manifest_hash: Some(self.manifest.hash.clone()),
            shards: first.map(|s| s.shard.count),
        }
    }

    /// `trials.csv`: which shard, client and server ran each trial.
    pub fn placements_csv(&self) -> String {
        let mut out = String::from("file,shard,client,server\n");
        for p in &self.placements {
            out.push_str(&format!(
                "{},{},{},{}\n",
                csv_field(&p.file),
                csv_field(&p.shard),
                csv_field(&p.client),
                csv_field(&p.server)
            ));
        }
        out
    }

    /// Copies the trials, the manifest and the shards' records into `out` (those not
    /// already there), so that `out` is a whole experiment directory; with each trial, its
    /// copy in iperf3's schema where the shard wrote one (`sweep --iperf3-json`:
    /// `iperf3/` beside `trials/`).
    ///
    /// # Errors
    ///
    /// A file that cannot be copied.
    pub fn gather_into(&self, dirs: &[PathBuf], out: &Path) -> Result<(), ShardError> {
        crate::rundir::make_dirs(out, &["trials", "shards"])?;
        self.manifest.write_once(out)?;
        let records = self.shards.iter().filter_map(|s| {
            let file = ShardRecord::path(s.shard);
            let from = dirs.iter().map(|d| d.join(&file)).find(|f| f.is_file())?;
            Some((file, from))
        });
        let iperf3 = self.sources.iter().filter_map(|(file, from)| {
            let name = Path::new(file).file_name()?;
            let from = from.parent()?.parent()?.join(IPERF3_DIR).join(name);
            from.is_file()
                .then(|| (format!("{IPERF3_DIR}/{}", name.to_string_lossy()), from))
        });
        let iperf3: Vec<(String, PathBuf)> = iperf3.collect();
        if !iperf3.is_empty() {
            crate::rundir::make_dirs(out, &[IPERF3_DIR])?;
        }
        let files: Vec<(String, PathBuf)> = self
            .sources
            .iter()
            .cloned()
            .chain(records)
            .chain(iperf3)
            .collect();
        for (file, from) in files {
            let to = out.join(&file);
            // The copy kept may be another directory's than the one `out` already holds.
            let same = match (from.canonicalize(), to.canonicalize()) {
                (Ok(a), Ok(b)) => a == b,
                _ => false,
            };
            if same {
                continue;
            }
            copy_saved(&from, &to)?;
        }
        Ok(())
    }
}

/// Where `sweep --iperf3-json` writes each trial in iperf3's schema, under the trial's own
/// file name, in the experiment's directory.
pub const IPERF3_DIR: &str = "iperf3";

/// The copy of trial `file` (point `p`, repeat `r`) to keep among `dirs`: each copy must be
/// this experiment's trial; a completed copy wins over failed ones; two completed copies
/// must be the same. `None` when no directory holds one.
fn pick(
    dirs: &[PathBuf],
    manifest: &Manifest,
    file: &str,
    p: usize,
    r: u32,
    notes: &mut Vec<String>,
) -> Result<Option<(PathBuf, TrialFile)>, MergeError> {
    let mut kept: Option<(PathBuf, TrialFile)> = None;
    // Whatever is there is read through the bounded reader, which refuses a FIFO, a device
    // or a link out in one line, rather than taking it for a missing trial.
    for path in dirs.iter().map(|d| d.join(file)).filter(|f| is_there(f)) {
        let trial = TrialFile::read(&path)?;
        let shown = path.display().to_string();
        trial
            .check(manifest, &shown, p, r)
            .map_err(MergeError::Foreign)?;
        let Some((at, held)) = kept.take() else {
            kept = Some((path, trial));
            continue;
        };
        let better = held.failed().is_some() && trial.failed().is_none();
        if held.failed().is_none() && trial.failed().is_none() && held != trial {
            return Err(MergeError::Differ {
                first: at,
                second: path,
            });
        }
        let (keep, drop) = if better { (path, at) } else { (at, path) };
        notes.push(format!(
            "{file} is in {} and {}: kept {}{}",
            keep.display(),
            drop.display(),
            keep.display(),
            if better {
                " (completed; the other failed)"
            } else if held == trial {
                " (the copies are the same)"
            } else if held.failed().is_some() {
                " (both failed)"
            } else {
                " (completed; the other failed)"
            }
        ));
        kept = Some((keep, if better { trial } else { held }));
    }
    Ok(kept)
}

/// A point as `name=value` words.
pub fn point_label(point: &Point) -> String {
    point
        .iter()
        .map(|(k, v)| format!("{}={v}", k.name()))
        .collect::<Vec<_>>()
        .join(" ")
}

fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}
