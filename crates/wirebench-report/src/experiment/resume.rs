//! What a sweep (or one shard of it) still has to measure in its directory.
//!
//! A rerun with the same `--out` keeps every completed trial that belongs there, measures
//! again a failed one (up to `--retry-failed` more attempts) and one that does not belong
//! (another experiment's, another trial's, untagged or unreadable), and measures the rest.

use std::path::Path;

use super::plan::{Point, Vary};
use super::shard::{shard_of, trial_path, Manifest, Shard};
use super::trial::{NotThisTrial, TrialFile};
use crate::input::InputError;

/// A trial to measure: its point and repeat (from 0), and which attempt this is (from 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Todo {
    /// The point, in grid order.
    pub point: usize,
    /// The repeat.
    pub repeat: u32,
    /// The attempt: 1 for a trial never measured, one more than the saved one's for a
    /// failed trial measured again.
    pub attempt: u32,
}

/// What a shard's directory holds of its trials, and what is left to measure.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Resume {
    /// The trials to measure, in the order to run them.
    pub todo: Vec<Todo>,
    /// Completed trials kept.
    pub completed: usize,
    /// Failed trials measured again.
    pub retried: usize,
    /// Failed trials kept as failed: they had their `--retry-failed` attempts.
    pub kept_failed: Vec<String>,
    /// Files that do not belong to their trial (or cannot be read): measured again.
    pub foreign: Vec<NotThisTrial>,
    /// Every trial of this shard, relative to the directory, in grid order.
    pub files: Vec<String>,
}

/// Looks at shard `shard`'s trials of the experiment `manifest` (grid `points`) in `dir`:
/// each completed one that belongs is kept, a failed one is measured again while it has
/// had at most `retry_failed` attempts beyond the first, and the rest are measured. The
/// order to run is the grid's with `manifest.ordered`, else shuffled by the manifest's seed
/// and the shard's index (so a rerun runs what is left in the same order).
pub fn resume(
    dir: &Path,
    manifest: &Manifest,
    points: &[Point],
    shard: Shard,
    retry_failed: u32,
) -> Result<Resume, InputError> {
    let repeats = manifest.repeat;
    let mut out = Resume::default();
    for p in 0..points.len() {
        for r in 0..repeats {
            if shard_of(points, p, r, repeats, shard.count) != shard.index {
                continue;
            }
            let file = trial_path(p, r);
            out.files.push(file.clone());
            let path = dir.join(&file);
            if !path.exists() {
                out.todo.push(Todo {
                    point: p,
                    repeat: r,
                    attempt: 1,
                });
                continue;
            }
            let read = match TrialFile::read(&path) {
                // What is there is no file wirebench wrote (a FIFO, a device, a file past
                // the cap): the run stops, rather than run a trial over it.
                Err(e @ (InputError::NotRegular { .. } | InputError::TooLarge { .. })) => {
                    return Err(e);
                }
                read => read.map_err(|e| NotThisTrial {
                    file: file.clone(),
                    point: p,
                    why: format!("cannot be read ({e})"),
                }),
            };
            match read.and_then(|t| t.check(manifest, &file, p, r).map(|()| t)) {
                Ok(t) if t.failed().is_none() => out.completed += 1,
                Ok(t) if t.trial.attempt <= retry_failed => {
                    out.retried += 1;
                    out.todo.push(Todo {
                        point: p,
                        repeat: r,
                        attempt: t.trial.attempt + 1,
                    });
                }
                Ok(_) => out.kept_failed.push(file),
                Err(not) => {
                    out.foreign.push(not);
                    out.todo.push(Todo {
                        point: p,
                        repeat: r,
                        attempt: 1,
                    });
                }
            }
        }
    }
    if let Some(seed) = manifest.shuffle_seed.filter(|_| !manifest.ordered) {
        shuffle(&mut out.todo, seed ^ u64::from(shard.index));
    }
    Ok(out)
}

/// The manifest of a sweep: with `ordered` false, its shuffle seed is drawn from the plan
/// itself (the hash of the unseeded manifest), so every shard, and every rerun, has the
/// same manifest and the same order.
pub fn sweep_manifest(
    wirebench: String,
    varies: Vec<Vary>,
    repeat: u32,
    ordered: bool,
    tests: Vec<serde_json::Value>,
) -> Manifest {
    let unseeded = Manifest::new(
        wirebench.clone(),
        varies.clone(),
        repeat,
        ordered,
        None,
        tests.clone(),
    );
    let seed = u64::from_str_radix(&unseeded.hash, 16).unwrap_or(1) | 1;
    Manifest::new(
        wirebench,
        varies,
        repeat,
        ordered,
        (!ordered).then_some(seed),
        tests,
    )
}

/// A small xorshift for the trial order, seeded from the plan.
fn shuffle<T>(v: &mut [T], mut seed: u64) {
    for i in (1..v.len()).rev() {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        v.swap(i, (seed % (i as u64 + 1)) as usize);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::experiment::{grid, parse_vary};
    use std::path::PathBuf;

    fn tempdir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("wb-resume-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(d.join("trials")).expect("dir");
        std::fs::create_dir_all(d.join("shards")).expect("dir");
        d
    }

    #[test]
    fn failed_and_foreign_trials_are_measured_again_and_completed_ones_kept() {
        let dir = tempdir("plan");
        let varies = vec![parse_vary("rate=10M,20M").expect("vary")];
        let points = grid(&varies);
        let m = sweep_manifest("wirebench 0".into(), varies.clone(), 2, true, vec![]);
        let other = sweep_manifest("wirebench 0".into(), varies, 3, true, vec![]);
        let save = |p: usize, r: u32, t: &TrialFile| {
            super::super::trial::write_trial(&dir.join(trial_path(p, r)), t).expect("write");
        };
        // p1 r1 failed once, p1 r2 failed on its 3rd attempt, p2 r1 another experiment's.
        save(
            0,
            0,
            &TrialFile::measured(
                &m,
                0,
                0,
                1,
                Err::<wirebench_proto::results::Results, _>("gone"),
            ),
        );
        save(
            0,
            1,
            &TrialFile::measured(
                &m,
                0,
                1,
                3,
                Err::<wirebench_proto::results::Results, _>("gone"),
            ),
        );
        save(
            1,
            0,
            &TrialFile::measured(
                &other,
                1,
                0,
                1,
                Err::<wirebench_proto::results::Results, _>("gone"),
            ),
        );
        let plan = resume(&dir, &m, &points, Shard::WHOLE, 2).expect("reads");
        let todo: Vec<_> = plan
            .todo
            .iter()
            .map(|t| (t.point, t.repeat, t.attempt))
            .collect();
        assert_eq!(todo, vec![(0, 0, 2), (1, 0, 1), (1, 1, 1)]);
        assert_eq!(plan.kept_failed, vec!["trials/p001-r002.json".to_string()]);
        assert_eq!(plan.foreign.len(), 1);
        assert_eq!(plan.retried, 1);
        // --retry-failed 0 keeps both failures as they are.
        let none = resume(&dir, &m, &points, Shard::WHOLE, 0).expect("reads");
        assert_eq!(none.kept_failed.len(), 2);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
