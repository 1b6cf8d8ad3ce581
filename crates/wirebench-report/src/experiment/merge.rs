//! Putting a sharded sweep back together: the shards' directories (or one shared
//! directory) checked to be one experiment, every trial found, and the experiment
//! directory a one-machine run leaves written from them. A one-machine sweep goes through
//! the same step, so that the two cannot differ.

use std::path::{Path, PathBuf};

use wirebench_proto::results::Results;

use super::plan::{grid, Point};
use super::shard::{
    copy_saved, is_there, read_json, shard_of, trial_path, Manifest, ShardError, ShardRecord,
};
use super::summary::{summarize_experiment, ExperimentSummary};
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
    /// Each point's trials, in repeat order, with their files.
    pub trials: Vec<Vec<(String, Results)>>,
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
        let manifest = Manifest::read(&first)?;
        let mut shards = Vec::new();
        for d in dirs {
            let m = Manifest::read(d)?;
            if m.hash != manifest.hash || m.content_hash() != manifest.hash {
                return Err(MergeError::Mismatch {
                    dir: d.clone(),
                    found: m.hash,
                    first: first.clone(),
                    ours: manifest.hash,
                });
            }
            for r in ShardRecord::read_all(d)? {
                if !shards.contains(&r) {
                    shards.push(r);
                }
            }
        }
        shards.sort_by_key(|r| (r.shard.count, r.shard.index));
        let points = grid(&manifest.varies);
        let repeats = manifest.repeat;
        let count = shards.iter().map(|r| r.shard.count).max();
        let mut trials = vec![Vec::new(); points.len()];
        let mut missing = Vec::new();
        let mut placements = Vec::new();
        for (p, point) in points.iter().enumerate() {
            for r in 0..repeats {
                let file = trial_path(p, r);
                let found = dirs
                    .iter()
                    .map(|d| d.join(&file))
                    .find(|f| is_there(f))
                    .map(|f| read_json::<Results>(&f))
                    .transpose()?;
                let Some(results) = found else {
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
                    server: results.server.clone(),
                });
                trials[p].push((file, results));
            }
        }
        if !missing.is_empty() {
            return Err(MergeError::Missing {
                missing,
                total: points.len() * repeats as usize,
            });
        }
        Ok(Self {
            manifest,
            points,
            trials,
            shards,
            placements,
        })
    }

    /// The summary, as a one-machine sweep writes it.
    pub fn summary(&self) -> ExperimentSummary {
        summarize_experiment(&self.points, &self.trials)
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
    /// already there), so that `out` is a whole experiment directory.
    ///
    /// # Errors
    ///
    /// A file that cannot be copied.
    pub fn gather_into(&self, dirs: &[PathBuf], out: &Path) -> Result<(), ShardError> {
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| ShardError::Io {
                what: "writing",
                path,
                source,
            }
        };
        for sub in ["trials", "shards"] {
            std::fs::create_dir_all(out.join(sub)).map_err(io(&out.join(sub)))?;
        }
        self.manifest.write_once(out)?;
        let files = self
            .trials
            .iter()
            .flatten()
            .map(|(f, _)| f.clone())
            .chain(self.shards.iter().map(|s| ShardRecord::path(s.shard)));
        for file in files {
            let to = out.join(&file);
            if is_there(&to) {
                continue;
            }
            if let Some(from) = dirs.iter().map(|d| d.join(&file)).find(|f| is_there(f)) {
                copy_saved(&from, &to)?;
            }
        }
        Ok(())
    }
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
