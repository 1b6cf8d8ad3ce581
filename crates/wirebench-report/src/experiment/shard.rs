//! Shards: one experiment's trials split over several processes (a Slurm job array, a
//! Kubernetes Indexed Job, or several shells), each writing into a shared directory, and
//! the checks that put them back together.
//!
//! # The assignment
//!
//! A sweep's trials are numbered point-major: trial `k = p·R + r` for point `p` (grid order,
//! from 0) and repeat `r` (from 0) of `R`. Shard `I` of `N` runs the trials with
//! `k mod N = I`. Every shard so gets ⌊T/N⌋ or ⌈T/N⌉ of the `T` trials, and each point's
//! repeats go round the shards (a point's repeats differ in count by at most one between
//! shards), so that a slow or odd machine spreads over every point instead of biasing one.
//! A lab scenario numbers its trials the same way, its stack profiles as the points:
//! `k = p·T + t` for trial `t` of `T` of profile `p`.
//!
//! # The shared directory
//!
//! Every file is written to a temporary name and renamed into place, so a reader (another
//! shard resuming, `merge`) sees a whole file or none. The manifest (`manifest.json`: what
//! the experiment is, without who ran which part) is written once: a shard that finds one
//! checks that it is byte for byte its own, and stops with an error naming both hashes
//! when it is not (two different experiments pointed at one directory).

use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::plan::{Param, Point, Vary};

/// The environment variable that gives a Kubernetes Indexed Job's shard count (its
/// `completions`), which Kubernetes does not expose to the pod itself.
pub const SHARD_COUNT_ENV: &str = "WIREBENCH_SHARD_COUNT";

/// Why a shard cannot be parsed, found, or written.
#[derive(Debug, thiserror::Error)]
pub enum ShardError {
    /// `--shard` that is neither `I/N` nor `auto`.
    #[error("--shard {0}: expected I/N (0 <= I < N, e.g. 0/4) or auto")]
    Syntax(String),
    /// `--shard auto` outside a job array.
    #[error(
        "--shard auto: no SLURM_ARRAY_TASK_ID (a Slurm job array) or JOB_COMPLETION_INDEX \
         (a Kubernetes Indexed Job) in the environment; give --shard I/N"
    )]
    NoJobArray,
    /// A job array variable that is not a number, or is out of range.
    #[error("--shard auto: {name}={value} is not usable ({why})")]
    BadEnv {
        /// The variable.
        name: &'static str,
        /// Its value.
        value: String,
        /// What is wrong.
        why: &'static str,
    },
    /// The directory already holds the manifest of another experiment.
    #[error(
        "{path}: another experiment's manifest (hash {found}, this one's {ours}): \
         shards of one experiment need the same grid, repeats, test and order; \
         use another --out"
    )]
    ManifestDiffers {
        /// The manifest file.
        path: PathBuf,
        /// Its hash.
        found: String,
        /// This run's hash.
        ours: String,
    },
    /// The directory's manifest was edited after it was written: its content no longer
    /// has the hash it records.
    #[error(
        "{path}: edited since it was written (it records hash {recorded}, its content \
         hashes to {content}): restore it, or use another --out"
    )]
    ManifestEdited {
        /// The manifest file.
        path: PathBuf,
        /// The hash it records (this run's too).
        recorded: String,
        /// The hash of what it holds.
        content: String,
    },
    /// Another process runs this shard in this directory now.
    #[error(
        "shard {shard} of {} is being run by another process ({holder}): wait for it to \
         end, or give this one another --out",
        .dir.display()
    )]
    Locked {
        /// The shard, `I/N`.
        shard: String,
        /// The experiment's directory.
        dir: PathBuf,
        /// Who holds the lock, as it wrote in the lock file.
        holder: String,
    },
    /// Another run holds the directory, and may not share it with this one.
    #[error("{} is in use by {holder}: {hint}", .dir.display())]
    InUse {
        /// The experiment's directory.
        dir: PathBuf,
        /// Who holds it, in words.
        holder: String,
        /// What to do.
        hint: &'static str,
    },
    /// A file that cannot be read or written.
    #[error("{what} {path}: {source}")]
    Io {
        /// Reading or writing.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// A file refused before it is parsed (not a regular file, or too large).
    #[error(transparent)]
    Input(Box<crate::input::InputError>),
    /// An output that could not be written (the file it would replace is intact).
    #[error(transparent)]
    Write(#[from] crate::output::WriteError),
    /// A file that is not what it should be.
    #[error("{path}: {why}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// Why.
        why: String,
    },
}

/// Shard `index` of `count` (0-based): the share of an experiment one process runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shard {
    /// This shard, `0..count`.
    pub index: u32,
    /// Shards in all.
    pub count: u32,
}

impl Shard {
    /// The whole experiment, one process.
    pub const WHOLE: Shard = Shard { index: 0, count: 1 };

    /// Parses `--shard`: `I/N`, or `auto` (see [`Shard::from_env`]).
    ///
    /// # Errors
    ///
    /// A malformed value, or `auto` outside a job array.
    pub fn parse(s: &str) -> Result<Self, ShardError> {
        if s == "auto" {
            return Self::from_env(|k| std::env::var(k).ok());
        }
        let bad = || ShardError::Syntax(s.to_string());
        let (i, n) = s.split_once('/').ok_or_else(bad)?;
        let index: u32 = i.trim().parse().map_err(|_| bad())?;
        let count: u32 = n.trim().parse().map_err(|_| bad())?;
        if count == 0 || index >= count {
            return Err(bad());
        }
        Ok(Self { index, count })
    }

    /// The shard of a job array task, from its environment: Slurm's `SLURM_ARRAY_TASK_ID`
    /// less `SLURM_ARRAY_TASK_MIN`, divided by `SLURM_ARRAY_TASK_STEP`, of
    /// `SLURM_ARRAY_TASK_COUNT` (so `--array=1-4` and `--array=0-6:2` both give shards 0 to
    /// 3 of 4); else Kubernetes' `JOB_COMPLETION_INDEX` of [`SHARD_COUNT_ENV`].
    ///
    /// # Errors
    ///
    /// Neither set, or a value out of range.
    pub fn from_env(env: impl Fn(&str) -> Option<String>) -> Result<Self, ShardError> {
        let num = |name: &'static str, default: Option<u32>| -> Result<u32, ShardError> {
            match env(name) {
                Some(v) => v.trim().parse().map_err(|_| ShardError::BadEnv {
                    name,
                    value: v,
                    why: "not a number",
                }),
                None => default.ok_or(ShardError::BadEnv {
                    name,
                    value: String::new(),
                    why: "not set",
                }),
            }
        };
        let (index, count, name) = if env("SLURM_ARRAY_TASK_ID").is_some() {
            let id = num("SLURM_ARRAY_TASK_ID", None)?;
            let min = num("SLURM_ARRAY_TASK_MIN", Some(0))?;
            let step = num("SLURM_ARRAY_TASK_STEP", Some(1))?.max(1);
            let count = num("SLURM_ARRAY_TASK_COUNT", None)?;
            let index = id.checked_sub(min).ok_or(ShardError::BadEnv {
                name: "SLURM_ARRAY_TASK_ID",
                value: id.to_string(),
                why: "below SLURM_ARRAY_TASK_MIN",
            })? / step;
            (index, count, "SLURM_ARRAY_TASK_ID")
        } else if env("JOB_COMPLETION_INDEX").is_some() {
            let index = num("JOB_COMPLETION_INDEX", None)?;
            let count = num(SHARD_COUNT_ENV, None)?;
            (index, count, "JOB_COMPLETION_INDEX")
        } else {
            return Err(ShardError::NoJobArray);
        };
        if count == 0 || index >= count {
            return Err(ShardError::BadEnv {
                name,
                value: index.to_string(),
                why: "not below the task count",
            });
        }
        Ok(Self { index, count })
    }

    /// Whether trial `k` (numbered as the module says) is this shard's.
    pub fn owns(self, k: usize) -> bool {
        k % self.count.max(1) as usize == self.index as usize
    }

    /// `I-of-N`, as the shard's record is named.
    pub fn label(self) -> String {
        format!("{}-of-{}", self.index, self.count)
    }
}

/// The number of trial `repeat` of point `point` in a sweep of `repeats` per point.
pub fn trial_number(point: usize, repeat: u32, repeats: u32) -> usize {
    point * repeats as usize + repeat as usize
}

/// The shard (`0..count`) that runs trial `repeat` of point `point`: `k mod count` for trial
/// number `k`, except when the grid places its trials, by a `client` parameter (`--mesh`)
/// or else a `server` one (`--targets`), over `H` values and `count` is a multiple of `H`:
/// then shard `I` takes the points of value `I mod H` only (one client, or one server, per
/// index, so a job array measures a mesh), and goes round that value's trials with the
/// other shards `I div H` of it by the same rule.
pub fn shard_of(points: &[Point], point: usize, repeat: u32, repeats: u32, count: u32) -> u32 {
    let count = count.max(1) as usize;
    let by = if points
        .iter()
        .any(|p| p.iter().any(|(k, _)| *k == Param::Client))
    {
        Param::Client
    } else {
        Param::Server
    };
    let value_of = |p: &Point| p.iter().find(|(k, _)| *k == by).map(|(_, v)| v.clone());
    let mut values: Vec<String> = Vec::new();
    for s in points.iter().filter_map(value_of) {
        if !values.contains(&s) {
            values.push(s);
        }
    }
    let h = values.len();
    let mine = points.get(point).and_then(value_of);
    if let (true, Some(mine)) = (h > 1 && count.is_multiple_of(h), mine) {
        let s = values.iter().position(|x| *x == mine).unwrap_or(0);
        let before = points[..point]
            .iter()
            .filter(|p| value_of(p).as_deref() == Some(mine.as_str()))
            .count();
        let local = before * repeats as usize + repeat as usize;
        return (s + h * (local % (count / h))) as u32;
    }
    (trial_number(point, repeat, repeats) % count) as u32
}

/// The file of a sweep's trial, relative to the experiment's directory (1-based in the
/// name, as sweeps have always named them).
pub fn trial_path(point: usize, repeat: u32) -> String {
    format!("trials/p{:03}-r{:03}.json", point + 1, repeat + 1)
}

/// `manifest.json`: what makes two shards parts of one experiment. Who ran a part, where,
/// and against which server is in the shard's record instead, so every shard writes the
/// same manifest.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    /// `wirebench VERSION`: shards of different versions may measure differently.
    pub wirebench: String,
    /// What the sweep varies.
    pub varies: Vec<Vary>,
    /// Trials per point.
    pub repeat: u32,
    /// Whether each shard runs its trials in grid order.
    pub ordered: bool,
    /// The seed of the shuffled order (each shard shuffles its own trials with it).
    pub shuffle_seed: Option<u64>,
    /// Each point's test, as the engine's spec in JSON: the same grid with another
    /// `-t` or `-l` is another experiment.
    pub tests: Vec<serde_json::Value>,
    /// The hash of the above (FNV-1a 64 of their JSON), in hex: what `merge` compares.
    pub hash: String,
}

impl Manifest {
    /// A manifest with its hash filled in.
    pub fn new(
        wirebench: String,
        varies: Vec<Vary>,
        repeat: u32,
        ordered: bool,
        shuffle_seed: Option<u64>,
        tests: Vec<serde_json::Value>,
    ) -> Self {
        let mut m = Self {
            wirebench,
            varies,
            repeat,
            ordered,
            shuffle_seed,
            tests,
            hash: String::new(),
        };
        m.hash = m.content_hash();
        m
    }

    /// The hash of everything but the hash.
    pub fn content_hash(&self) -> String {
        let unhashed = Self {
            hash: String::new(),
            ..self.clone()
        };
        let bytes = serde_json::to_vec(&unhashed).unwrap_or_default();
        format!("{:016x}", fnv1a(&bytes))
    }

    /// Writes the manifest into `dir` once: when one is there, checks that it is this one.
    ///
    /// # Errors
    ///
    /// Another experiment's manifest, or a file that cannot be written or read.
    pub fn write_once(&self, dir: &Path) -> Result<(), ShardError> {
        let path = dir.join("manifest.json");
        let mut bytes = serde_json::to_vec_pretty(self).map_err(|e| ShardError::Parse {
            path: path.clone(),
            why: e.to_string(),
        })?;
        bytes.push(b'\n');
        if !wirebench_sys::rundir::write_new(&path, &bytes)? {
            let found = Self::read(dir)?;
            let content = found.content_hash();
            if found.hash == self.hash && content != self.hash {
                return Err(ShardError::ManifestEdited {
                    path,
                    recorded: found.hash,
                    content,
                });
            }
            if found.hash != self.hash || content != self.hash {
                return Err(ShardError::ManifestDiffers {
                    path,
                    found: found.hash,
                    ours: self.hash.clone(),
                });
            }
        }
        Ok(())
    }

    /// Reads `dir/manifest.json`.
    ///
    /// # Errors
    ///
    /// No manifest, or one that does not parse.
    pub fn read(dir: &Path) -> Result<Self, ShardError> {
        read_json(&dir.join("manifest.json"))
    }
}

/// What one shard records of its run (`shards/I-of-N.json`): where it ran, against what.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ShardRecord {
    /// Which shard.
    pub shard: Shard,
    /// The manifest's hash this shard ran under.
    pub manifest: String,
    /// The host the trials ran on (the client).
    pub client: String,
    /// The server measured (`HOST:PORT`).
    pub server: String,
    /// The command line, word by word.
    pub command: Vec<String>,
    /// The machine that ran it.
    pub machine: crate::meta::Machine,
    /// The trials this shard saved (files relative to the directory), in run order.
    pub trials: Vec<String>,
    /// The files this run found that were not this experiment's trials, measured again in
    /// their place (as it warned).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub replaced: Vec<ReplacedTrial>,
}

/// A file in a trial's place that was not that trial (another experiment's, another
/// point's, unreadable): the sweep measured the trial again and saved it there.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplacedTrial {
    /// The file, relative to the experiment's directory.
    pub file: String,
    /// Its point in the grid, from 1.
    pub point: usize,
    /// What was wrong with the file, in words.
    pub why: String,
}

impl ShardRecord {
    /// The record's file, relative to the experiment's directory.
    pub fn path(shard: Shard) -> String {
        format!("shards/{}.json", shard.label())
    }

    /// Every shard record in `dir`, by shard.
    ///
    /// # Errors
    ///
    /// A record that cannot be read.
    pub fn read_all(dir: &Path) -> Result<Vec<Self>, ShardError> {
        let shards = dir.join("shards");
        let entries = match std::fs::read_dir(&shards) {
            Ok(e) => e,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(source) => {
                return Err(ShardError::Io {
                    what: "reading",
                    path: shards,
                    source,
                })
            }
        };
        let mut out = Vec::new();
        for e in entries.flatten() {
            let p = e.path();
            if p.extension().is_some_and(|x| x == "json") {
                out.push(read_json::<Self>(&p)?);
            }
        }
        out.sort_by_key(|r| (r.shard.count, r.shard.index));
        Ok(out)
    }
}

pub use crate::output::hostname;

/// Reads a JSON file wirebench wrote: a regular file of at most
/// [`crate::input::MAX_JSON_BYTES`], streamed (see [`crate::input::json_streamed`]).
///
/// # Errors
///
/// A file that cannot be read, is not a regular file, is too large, or does not parse as
/// `T`.
pub fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T, ShardError> {
    use crate::input::InputError;
    // Named for what a user finds in an experiment directory: trials, mostly.
    let what = if path.parent().is_some_and(|d| d.ends_with("trials")) {
        "trial file"
    } else {
        "experiment file"
    };
    crate::input::json_streamed(path, what).map_err(|e| match e {
        InputError::Read { path, source } => ShardError::Io {
            what: "reading",
            path,
            source,
        },
        InputError::Json { path, source } => ShardError::Parse {
            path,
            why: source.to_string(),
        },
        e => ShardError::Input(Box::new(e)),
    })
}

/// Writes `bytes` to `path` in an experiment directory whole or not at all, replacing a
/// link there rather than writing through it (see [`wirebench_sys::rundir`]).
///
/// # Errors
///
/// The file cannot be written, or a FIFO, a device or a directory is at `path`; `path`
/// is left as it was.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), ShardError> {
    Ok(wirebench_sys::rundir::write(path, bytes)?)
}

/// Copies a saved file (a trial, a shard record) of an experiment to `to`, streamed and
/// whole or not at all: only a regular file of at most [`crate::input::MAX_JSON_BYTES`].
///
/// # Errors
///
/// `from` is not a regular file, is too large, or cannot be read; `to` cannot be written.
pub fn copy_saved(from: &Path, to: &Path) -> Result<(), ShardError> {
    let max = crate::input::MAX_JSON_BYTES;
    let f = crate::input::open_regular(from, "trial file", max).map_err(|e| match e {
        crate::input::InputError::Read { path, source } => ShardError::Io {
            what: "reading",
            path,
            source,
        },
        e => ShardError::Input(Box::new(e)),
    })?;
    wirebench_sys::rundir::write_with(to, |w| {
        // Cut at the cap: a file that grows while copied fails instead of copying on.
        let n = io::copy(&mut io::Read::take(f, max + 1), w)?;
        if n > max {
            return Err(io::Error::other(format!(
                "{} grew past {max} bytes while copied",
                from.display()
            )));
        }
        Ok(())
    })?;
    Ok(())
}

/// Whether `path` names something (a file, a link, a FIFO): something there that is not a
/// regular file is then refused by its reader with one line, instead of being passed over
/// as missing.
pub fn is_there(path: &Path) -> bool {
    path.symlink_metadata().is_ok()
}

/// FNV-1a, 64 bits: a stable hash with no dependency, for a manifest's identity (not for
/// security: two shards only need to notice an honest mistake).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::experiment::parse_vary;

    #[test]
    fn shards_parse_from_flags_and_job_arrays() {
        assert_eq!(Shard::parse("1/4").ok(), Some(Shard { index: 1, count: 4 }));
        for bad in ["4/4", "1", "a/2", "0/0", "-1/3"] {
            assert!(Shard::parse(bad).is_err(), "{bad}");
        }
        let env = |vars: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                vars.iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| v.to_string())
            }
        };
        // --array=1-4: ids 1..=4, min 1.
        let s = Shard::from_env(env(&[
            ("SLURM_ARRAY_TASK_ID", "3"),
            ("SLURM_ARRAY_TASK_MIN", "1"),
            ("SLURM_ARRAY_TASK_COUNT", "4"),
        ]));
        assert_eq!(s.ok(), Some(Shard { index: 2, count: 4 }));
        // --array=0-6:2: ids 0, 2, 4, 6.
        let s = Shard::from_env(env(&[
            ("SLURM_ARRAY_TASK_ID", "6"),
            ("SLURM_ARRAY_TASK_MIN", "0"),
            ("SLURM_ARRAY_TASK_STEP", "2"),
            ("SLURM_ARRAY_TASK_COUNT", "4"),
        ]));
        assert_eq!(s.ok(), Some(Shard { index: 3, count: 4 }));
        let s = Shard::from_env(env(&[
            ("JOB_COMPLETION_INDEX", "0"),
            ("WIREBENCH_SHARD_COUNT", "3"),
        ]));
        assert_eq!(s.ok(), Some(Shard { index: 0, count: 3 }));
        let e = Shard::from_env(env(&[("JOB_COMPLETION_INDEX", "0")])).expect_err("no count");
        assert!(e.to_string().contains("WIREBENCH_SHARD_COUNT"), "{e}");
        assert!(matches!(
            Shard::from_env(env(&[])),
            Err(ShardError::NoJobArray)
        ));
    }

    #[test]
    fn the_assignment_covers_every_trial_once_and_balances_points() {
        let (points, repeats, n) = (5usize, 3u32, 4u32);
        let mut per_shard = vec![0usize; n as usize];
        for p in 0..points {
            let mut seen = vec![0u32; n as usize];
            for r in 0..repeats {
                let k = trial_number(p, r, repeats);
                let owners: Vec<u32> = (0..n)
                    .filter(|&i| Shard { index: i, count: n }.owns(k))
                    .collect();
                assert_eq!(owners.len(), 1, "trial {k}");
                seen[owners[0] as usize] += 1;
                per_shard[owners[0] as usize] += 1;
            }
            // A point's repeats go round the shards.
            assert!(seen.iter().all(|&c| c <= 1), "{seen:?}");
        }
        let (lo, hi) = (per_shard.iter().min(), per_shard.iter().max());
        assert!(hi.zip(lo).is_some_and(|(h, l)| h - l <= 1), "{per_shard:?}");
    }

    #[test]
    fn a_grid_of_servers_gives_each_shard_one_server() {
        let points = crate::experiment::grid(&[
            parse_vary("server=a,b").expect("v"),
            parse_vary("size=1,2").expect("v"),
        ]);
        // Four shards, two servers: shards 0 and 2 measure a, 1 and 3 measure b.
        for (p, point) in points.iter().enumerate() {
            for r in 0..3 {
                let i = shard_of(&points, p, r, 3, 4);
                let server = &point[0].1;
                assert_eq!(server == "a", i.is_multiple_of(2), "{point:?} {r} -> {i}");
            }
        }
        // A mesh of three hosts over three shards: shard I is client I, against the others.
        let mesh = crate::experiment::grid(&[
            parse_vary("client=a,b,c").expect("v"),
            parse_vary("server=a,b,c").expect("v"),
        ]);
        for (p, point) in mesh.iter().enumerate() {
            let want = ["a", "b", "c"].iter().position(|h| *h == point[0].1);
            assert_eq!(
                Some(shard_of(&mesh, p, 0, 2, 3) as usize),
                want,
                "{point:?}"
            );
        }
        // Without servers, the plain rule.
        let plain = crate::experiment::grid(&[parse_vary("size=1,2").expect("v")]);
        assert_eq!(shard_of(&plain, 1, 0, 3, 4), 3);
    }

    #[test]
    fn the_manifest_is_written_once_and_a_different_one_refused() {
        let dir = std::env::temp_dir().join(format!("wb-manifest-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("dir");
        let m = |repeat| {
            Manifest::new(
                "wirebench 0".into(),
                vec![parse_vary("size=1,2").expect("vary")],
                repeat,
                true,
                None,
                vec![],
            )
        };
        m(2).write_once(&dir).expect("first");
        m(2).write_once(&dir).expect("the same again");
        let e = m(3).write_once(&dir).expect_err("another");
        assert!(matches!(e, ShardError::ManifestDiffers { .. }), "{e}");
        assert_eq!(Manifest::read(&dir).ok(), Some(m(2)));
        // No temporary file is left behind.
        let left: Vec<_> = std::fs::read_dir(&dir)
            .expect("list")
            .flatten()
            .map(|e| e.file_name())
            .collect();
        assert_eq!(left.len(), 1, "{left:?}");
        // Edited by hand, its recorded hash kept: the content's hash is told, not the
        // same hash twice.
        let path = dir.join("manifest.json");
        let text = std::fs::read_to_string(&path).expect("read");
        std::fs::write(&path, text.replace("\"repeat\": 2", "\"repeat\": 5")).expect("edit");
        let e = m(2).write_once(&dir).expect_err("edited").to_string();
        assert!(e.contains("edited since it was written"), "{e}");
        let hash = m(2).hash;
        assert_eq!(e.matches(&hash).count(), 1, "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
