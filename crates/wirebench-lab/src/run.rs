//! Running a scenario file: every stack profile × trial, K copies of the network at once,
//! one JSON file per trial, then the summary (`summary.json`, `.csv`, `.txt`) and
//! `experiment.json`, as a sweep leaves them. With `resume`, trials already saved are read,
//! not run again.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use crate::scenario::{Profile, Scenario, ScenarioError};
use crate::summary::{
    failure_reasons, reasons_line, summarize, trial_file, ExperimentInfo, FailedTrial,
    ScenarioSummary, TrialFile,
};
use crate::topo::Topology;
use crate::trial::{run_trial, TrialSetup};
use serde::Deserialize as _;
use wirebench_report::experiment::shard::{write_atomic, Manifest, ShardError};
use wirebench_report::experiment::{DirLock, RunKind, Shard};

/// A scenario run that cannot start or finish.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The scenario does not make a network.
    #[error(transparent)]
    Scenario(#[from] ScenarioError),
    /// `--time-scale` out of range.
    #[error("--time-scale must be above 0")]
    TimeScale,
    /// `--profile` names none of the file's.
    #[error("the scenario has no profile {0:?}")]
    NoProfile(String),
    /// The lab cannot make namespaces here; the message says what it needs.
    #[error("{0}")]
    Privilege(io::Error),
    /// The shared directory: another scenario's manifest, or a file not written.
    #[error(transparent)]
    Shard(#[from] ShardError),
    /// The directory's trials were measured under another scenario (see [`crate::bind`]).
    #[error(transparent)]
    Changed(#[from] crate::bind::Changed),
    /// A saved trial file that is not a regular file or is too large.
    #[error(transparent)]
    Saved(Box<wirebench_report::input::InputError>),
    /// An I/O step, named.
    #[error("{what}: {source}")]
    Io {
        /// The step.
        what: String,
        /// Why it failed.
        source: io::Error,
    },
}

impl crate::Usage for RunError {
    fn is_usage(&self) -> bool {
        matches!(
            self,
            Self::Scenario(_) | Self::TimeScale | Self::NoProfile(_)
        )
    }
}

fn io_err(what: impl Into<String>) -> impl FnOnce(io::Error) -> RunError {
    let what = what.into();
    move |source| RunError::Io { what, source }
}

/// How to run a scenario.
#[derive(Debug, Clone)]
pub struct ScenarioRun {
    /// The scenario, read and checked.
    pub scenario: Scenario,
    /// Only these profiles (none: all).
    pub profiles: Vec<String>,
    /// Trials per profile (default: the file's).
    pub trials: Option<u32>,
    /// Copies of the network at once (default: the file's).
    pub parallel: Option<u32>,
    /// Scale of the tests' durations.
    pub time_scale: f64,
    /// The run's directory.
    pub out: PathBuf,
    /// Read the trials already saved in `out` instead of running them again.
    pub resume: bool,
    /// With `resume`: the scenario may have `[[profile]]`s the saved run did not (each
    /// other profile, link and test as before); see [`crate::bind`].
    pub add_profiles: bool,
    /// This process's share of the trials: trial `t` of profile `p` (of `T` trials each)
    /// is number `p·T + t`, as a sweep's point-major numbering, and shard `I` of `N` runs the numbers `k` with `k mod N = I` (see
    /// `wirebench_report::experiment::shard`). A sharded run always resumes, and reads
    /// the other shards' trials saved so far into its summary.
    pub shard: Shard,
    /// Log every link of every trial in intervals of this many ns (0: no log).
    pub link_log_ns: u64,
    /// The wirebench executable, for servers and tests.
    pub exe: PathBuf,
    /// The command line, for `experiment.json`.
    pub command: Vec<String>,
    /// Facts of this machine, for `experiment.json`.
    pub machine: wirebench_report::meta::Machine,
}

/// What a run tells as it goes.
#[derive(Debug)]
pub enum Progress<'a> {
    /// The trials are about to run.
    Start {
        /// The scenario's name.
        scenario: &'a str,
        /// Profiles to run.
        profiles: usize,
        /// Trials per profile.
        trials: u32,
        /// Copies at once.
        parallel: u32,
        /// The run's directory.
        out: &'a Path,
        /// Trials read from a run resumed.
        already: usize,
    },
    /// A sharded run's summary lacks trials other shards have not saved yet.
    Incomplete {
        /// Trials saved, of every shard.
        saved: usize,
        /// Trials in all.
        total: usize,
    },
    /// A trial ended.
    TrialDone {
        /// Trials done so far.
        done: usize,
        /// Trials in all.
        total: usize,
        /// Its profile.
        profile: &'a str,
        /// Its number.
        trial: u32,
    },
    /// A trial's file could not be written (the run goes on).
    WriteFailed {
        /// The file.
        path: &'a Path,
        /// Why.
        error: &'a io::Error,
    },
}

/// What a run did.
#[derive(Debug)]
pub struct ScenarioOutcome {
    /// The summary, as saved.
    pub summary: ScenarioSummary,
    /// Failures: trials that did not run, and measured tests without results (the sum of
    /// the summary rows' `failed`).
    pub failed: usize,
    /// Why, each distinct reason with how many times ([`failure_reasons`]).
    pub reasons: Vec<(String, usize)>,
    /// Trials whose file could not be written: missing from the run's directory.
    pub unsaved: usize,
    /// Trials in all.
    pub total: usize,
}

impl ScenarioOutcome {
    /// The table and, when tests failed, the line that says why: what `summary.txt` holds
    /// and the run prints.
    pub fn table(&self) -> String {
        let mut s = self.summary.table();
        s += &reasons_line(&self.reasons).unwrap_or_default();
        s
    }
}

struct Job {
    profile: usize,
    trial: u32,
}

/// A trial done (run, or read from its file), with its profile's index.
type Done = (usize, TrialFile);

pub use crate::bind::manifest;

/// What a scenario run's manifest fixes: the scenario, the profiles asked for (none: all),
/// the time scale and the trials per profile.
pub type Plan = (Scenario, Vec<String>, f64, u32);

/// A scenario run's plan read back from its [`manifest`]: the scenario, the profiles asked
/// for, the time scale and the trials per profile; `None` for a sweep's manifest.
///
/// # Errors
///
/// A scenario in the manifest that its file's checks refuse (a manifest is a file too: a
/// profile named `../x` in one would name trial files outside the run's directory).
pub fn plan_of(m: &Manifest) -> Result<Option<Plan>, ScenarioError> {
    if !m.varies.is_empty() {
        return Ok(None);
    }
    let [sc, profiles, scale] = m.tests.as_slice() else {
        return Ok(None);
    };
    let bad = |message: String| ScenarioError::Syntax {
        line: None,
        message: format!("manifest.json: {message}"),
    };
    // Through TOML's value, as the file was read: its links parse from a TOML table.
    let table: toml::Value = serde_json::from_value(sc.clone()).map_err(|e| bad(e.to_string()))?;
    let scenario = Scenario::deserialize(table).map_err(|e| bad(e.message().to_owned()))?;
    scenario.check()?;
    let profiles: Vec<String> =
        serde_json::from_value(profiles.clone()).map_err(|e| bad(e.to_string()))?;
    for p in &profiles {
        crate::scenario::check_name("--profile", p)?;
    }
    let scale = scale
        .as_f64()
        .ok_or_else(|| bad("the time scale is not a number".into()))?;
    Ok(Some((scenario, profiles, scale, m.repeat)))
}

/// The trial `trial` of profile `p` saved in the run's directory, if it is there, done,
/// and that trial: one whose own record names another scenario, profile, trial, time
/// scale or tests (a copy, or a link to a sibling) is run again and replaced. Bounded and
/// never blocking: a FIFO or a device as a trial file is refused, not run over.
fn read_saved(run: &ScenarioRun, trial: u32, p: &Profile) -> Result<Option<TrialFile>, RunError> {
    let path = run.out.join(trial_file(trial, &p.name));
    let saved = wirebench_report::input::saved::<TrialFile>(&path)
        .map_err(|e| RunError::Saved(Box::new(e)))?;
    Ok(saved.filter(|t| match t {
        TrialFile::Done(doc) => is_this_trial(doc, run, trial, p),
        TrialFile::Failed(_) => false,
    }))
}

/// Whether a saved trial's own record is trial `trial` of profile `p` of this run.
fn is_this_trial(
    doc: &crate::summary::TrialDoc,
    run: &ScenarioRun,
    trial: u32,
    p: &Profile,
) -> bool {
    let sc = &run.scenario;
    let tests_match = doc.tests.len() == sc.tests.len()
        && doc.tests.iter().zip(&sc.tests).all(|(saved, def)| {
            saved.name == def.label() && saved.from == def.from && saved.to == def.to
        });
    doc.scenario == sc.name
        && doc.profile == p.name
        && doc.trial == trial
        && doc.time_scale == run.time_scale
        && tests_match
}

/// Runs a scenario and writes its directory.
///
/// # Errors
///
/// Bad options or scenario, no privilege, or a file of the run that cannot be written;
/// a trial that fails is saved as such and counted in [`ScenarioOutcome::failed`].
pub fn run_scenario(
    run: &ScenarioRun,
    progress: &(dyn Fn(Progress<'_>) + Sync),
) -> Result<ScenarioOutcome, RunError> {
    let sc = &run.scenario;
    if !(run.time_scale.is_finite() && run.time_scale > 0.0) {
        return Err(RunError::TimeScale);
    }
    let profiles = chosen_profiles(sc, &run.profiles)?;
    let topo = sc.topology()?;
    let trials = run.trials.unwrap_or(sc.trials);
    crate::scenario::check_trials_in_all(trials, profiles.len())?;
    let parallel = run.parallel.unwrap_or(sc.parallel).max(1);
    let out = &run.out;
    wirebench_report::rundir::make_dirs(out, &["trials", "shards"]).map_err(ShardError::from)?;
    // Held to the end: another run of this directory (another scenario run, a sweep, a
    // shard of another count, `merge`) is refused before anything is read or written.
    let _lock = DirLock::acquire(out, RunKind::LabScenario, run.shard)?;
    // Shards of one run share the scenario, the profiles, the trial count and the time
    // scale; a resumed run, the scenario's links, tests and profiles. A directory of
    // another run is refused before any trial, naming what changed.
    crate::bind::bind(
        out,
        &manifest(sc, &run.profiles, trials, run.time_scale),
        run.resume,
        run.shard.count > 1,
        run.add_profiles,
    )
    .map_err(|e| match e {
        crate::bind::BindError::Changed(c) => RunError::Changed(c),
        crate::bind::BindError::Shard(s) => RunError::Shard(s),
    })?;
    // What an earlier run killed mid-write left behind (its files are whole or absent).
    wirebench_report::output::clean_experiment_temps(out);
    let (done, jobs) = plan_trials(run, &profiles, trials)?;
    let total = trials as usize * profiles.len();
    if !jobs.is_empty() {
        crate::ensure_privilege().map_err(RunError::Privilege)?;
    }
    write_experiment_info(run, parallel, trials)?;
    progress(Progress::Start {
        scenario: &sc.name,
        profiles: profiles.len(),
        trials,
        parallel,
        out,
        already: done.len(),
    });
    let workers = Workers {
        run,
        profiles: &profiles,
        topology: &topo,
        total,
        progress,
    };
    let (done, unsaved) = workers.run_all(jobs, done, parallel.min(total as u32));
    let summary = summarize(sc, &profiles, &done);
    write_summary(out, &summary)?;
    if done.len() < total {
        progress(Progress::Incomplete {
            saved: done.len(),
            total,
        });
    }
    let failed = summary.profiles.iter().map(|r| r.failed as usize).sum();
    let outcome = ScenarioOutcome {
        summary,
        failed,
        reasons: failure_reasons(&done),
        unsaved,
        total,
    };
    write_atomic(&out.join("summary.txt"), outcome.table().as_bytes())?;
    Ok(outcome)
}

/// The scenario's profiles that `asked` names, in the file's order (none asked: all).
fn chosen_profiles(sc: &Scenario, asked: &[String]) -> Result<Vec<Profile>, RunError> {
    let mut profiles: Vec<Profile> = sc.profiles();
    if !asked.is_empty() {
        for p in asked {
            if !profiles.iter().any(|q| &q.name == p) {
                return Err(RunError::NoProfile(p.clone()));
            }
        }
        profiles.retain(|p| asked.contains(&p.name));
    }
    Ok(profiles)
}

/// The trials already done (read from the run's directory: another shard's, or this
/// run's own when it resumes), each with its profile's index, and the trials to run.
fn plan_trials(
    run: &ScenarioRun,
    profiles: &[Profile],
    trials: u32,
) -> Result<(Vec<Done>, Vec<Job>), RunError> {
    let sharded = run.shard.count > 1;
    let mut done = Vec::<Done>::new();
    let mut jobs: Vec<Job> = Vec::new();
    let read_saved = |trial: u32, p: &Profile| read_saved(run, trial, p);
    // Trials interleave the profiles, so drift over time spreads over all of them.
    for trial in 0..trials {
        for (profile, p) in profiles.iter().enumerate() {
            let k = profile * trials as usize + trial as usize;
            if !run.shard.owns(k) {
                // Another shard's: read when saved, for the summary so far.
                if let Some(t) = read_saved(trial, p)? {
                    done.push((profile, t));
                }
                continue;
            }
            // With resume, trials already on disk (and not failed outright) are read,
            // not run.
            let kept = if run.resume || sharded {
                read_saved(trial, p)?
            } else {
                None
            };
            match kept {
                Some(t) => done.push((profile, t)),
                None => {
                    // A FIFO or a directory where its file goes is refused before any
                    // trial runs, not after this one.
                    let path = run.out.join(trial_file(trial, &p.name));
                    wirebench_report::rundir::refuse_special(&path).map_err(ShardError::from)?;
                    jobs.push(Job { profile, trial });
                }
            }
        }
    }
    Ok((done, jobs))
}

/// Writes what `report` shows of how the run was made, `experiment.json` (a resumed or
/// sharded run keeps the first run's).
fn write_experiment_info(run: &ScenarioRun, parallel: u32, trials: u32) -> Result<(), RunError> {
    let sc = &run.scenario;
    let path = run.out.join("experiment.json");
    if (run.resume || run.shard.count > 1) && path.exists() {
        return Ok(());
    }
    let info = ExperimentInfo {
        command: &run.command,
        machine: &run.machine,
        ordered: true,
        parallel,
        repeat: trials,
        scenario: sc,
        server: format!("lab scenario {}", sc.name),
        time_scale: run.time_scale,
        wirebench: format!("wirebench {}", env!("CARGO_PKG_VERSION")),
    };
    let json = info
        .to_json()
        .map_err(io::Error::from)
        .map_err(io_err("experiment.json"))?;
    write_atomic(&path, &json)?;
    Ok(())
}

/// Writes the summary as `summary.json` and `summary.csv`.
fn write_summary(out: &Path, summary: &ScenarioSummary) -> Result<(), RunError> {
    let json = summary
        .to_json()
        .map_err(io::Error::from)
        .map_err(io_err("summary"))?;
    // Renamed into place whole: shards finishing together each write the summary of what
    // they saw, and a reader never sees half of one.
    write_atomic(&out.join("summary.json"), &json)?;
    write_atomic(&out.join("summary.csv"), summary.to_csv().as_bytes())?;
    Ok(())
}

/// What the threads that run the trials share.
struct Workers<'a> {
    run: &'a ScenarioRun,
    profiles: &'a [Profile],
    topology: &'a Topology,
    /// Trials in all, for progress.
    total: usize,
    progress: &'a (dyn Fn(Progress<'_>) + Sync),
}

impl Workers<'_> {
    /// Runs `jobs` on `threads` threads, each taking the next job when it is done with one
    /// (each a copy of the network): every trial done, `done` first, and how many trials'
    /// files could not be written.
    fn run_all(&self, jobs: Vec<Job>, done: Vec<Done>, threads: u32) -> (Vec<Done>, usize) {
        let queue = Mutex::new(jobs.into_iter());
        let done = Mutex::new(done);
        let unsaved = AtomicUsize::new(0);
        std::thread::scope(|s| {
            for _ in 0..threads {
                s.spawn(|| {
                    while let Some(job) = queue.lock().ok().and_then(|mut q| q.next()) {
                        let file = self.run_and_save(&job, &unsaved);
                        if let Ok(mut d) = done.lock() {
                            d.push((job.profile, file));
                            (self.progress)(Progress::TrialDone {
                                done: d.len(),
                                total: self.total,
                                profile: &self.profiles[job.profile].name,
                                trial: job.trial,
                            });
                        }
                    }
                });
            }
        });
        let done = done.into_inner().unwrap_or_else(|e| e.into_inner());
        (done, unsaved.into_inner())
    }

    /// Runs one trial and saves its file (a trial that could not run is saved as failed);
    /// a file not written is told and counted in `unsaved`, and the run goes on.
    fn run_and_save(&self, job: &Job, unsaved: &AtomicUsize) -> TrialFile {
        let run = self.run;
        let out = &run.out;
        let p = &self.profiles[job.profile];
        let link_log = (run.link_log_ns > 0).then(|| {
            let name = format!("{:04}-{}-links.csv", job.trial, p.name);
            (run.link_log_ns, out.join("trials").join(name))
        });
        let setup = TrialSetup {
            scenario: &run.scenario,
            topology: self.topology,
            time_scale: run.time_scale,
            exe: &run.exe,
            link_log,
        };
        let file = match run_trial(&setup, p, job.trial) {
            Ok(doc) => TrialFile::Done(doc),
            Err(e) => TrialFile::Failed(FailedTrial {
                profile: p.name.clone(),
                trial: job.trial,
                error: e.to_string(),
            }),
        };
        let path = out.join(trial_file(job.trial, &p.name));
        let written = serde_json::to_value(&file)
            .and_then(|v| serde_json::to_vec_pretty(&v))
            .map_err(io::Error::from)
            .and_then(|b| write_atomic(&path, &b).map_err(|e| io::Error::other(e.to_string())));
        if let Err(error) = written {
            unsaved.fetch_add(1, Ordering::Relaxed);
            (self.progress)(Progress::WriteFailed {
                path: &path,
                error: &error,
            });
        }
        file
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_manifest_is_checked_as_its_scenario_file_is() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scenarios");
        let sc = Scenario::load(&Path::new(dir).join("random-loss.toml")).expect("shipped");
        let mut m = manifest(&sc, &[], 1, 1.0);
        m.tests[0]["profile"][0]["name"] = "../../x".into();
        let e = plan_of(&m)
            .expect_err("a name out of its directory")
            .to_string();
        assert!(e.contains("[[profile]] name \"../../x\""), "{e}");
        let mut m = manifest(&sc, &["../y".into()], 1, 1.0);
        m.tests[1] = serde_json::json!(["../y"]);
        let e = plan_of(&m)
            .expect_err("a --profile out of its directory")
            .to_string();
        assert!(e.contains("--profile \"../y\""), "{e}");
    }

    #[test]
    fn a_scenario_reads_back_from_its_manifest() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scenarios");
        for name in [
            "random-loss.toml",
            "reverse-congestion.toml",
            "lte-trace.toml",
        ] {
            let sc = Scenario::load(&Path::new(dir).join(name)).expect("a shipped scenario");
            let m = manifest(&sc, &["x".into()], 7, 0.5);
            let (back, profiles, scale, trials) = plan_of(&m).expect(name).expect(name);
            assert_eq!((profiles, scale, trials), (vec!["x".to_string()], 0.5, 7));
            // The same scenario: the same manifest.
            assert_eq!(
                manifest(&back, &["x".into()], 7, 0.5).hash,
                m.hash,
                "{name}"
            );
        }
    }
}
