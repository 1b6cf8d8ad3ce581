//! A sweep from its flags to its saved trials, less the test itself: the grid the flags plan
//! (with `--preset`, `--targets` and `--mesh`) and the rules between them, where it is saved
//! (`--shard`, `--out`), the manifest and its shuffle seed, what this shard still has to
//! measure, and the loop that measures each trial (asking a busy server again) and saves it.
//!
//! What `run`'s flags mean for one point, and how one trial runs, are the binary's: it
//! passes them in as closures, so this crate stays free of the engine and its sockets.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Serialize;
use wirebench_proto::host_port::{HostPort, HostPortError};
use wirebench_proto::results::Results;

use super::lock::{DirLock, RunKind};
use super::plan::{grid, parse_vary, Param, Point, Preset, Vary, VaryError};
use super::resume::{resume, sweep_manifest, Resume, Todo};
use super::shard::{trial_path, Manifest, Shard, ShardError};
use super::trial::{write_trial, TrialFile, Unmeasured};

/// How often a trial refused as busy is asked again, [`BUSY_RETRY`] apart.
pub const BUSY_ATTEMPTS: u32 = 20;
/// The pause before asking a busy server again.
pub const BUSY_RETRY: Duration = Duration::from_millis(100);

/// Why a sweep's flags plan no experiment; each message says what to do.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    /// Flags of `run` that a sweep cannot honour, named.
    #[error(
        "sweep does not take {0}: it saves every trial's results and the summary itself \
         (see --out)"
    )]
    NotForSweep(String),
    /// `--scale` out of range.
    #[error("--scale is above 0 and at most 1")]
    Scale,
    /// `-t` or `-n` with a preset, which sets the amount.
    #[error("--preset {0} sets each trial's amount: no -t/--time or -n/--bytes (use --scale)")]
    PresetAmount(&'static str),
    /// `--scale` without a preset.
    #[error("--scale scales a --preset: give one, or shorten the test with -t/-n")]
    ScaleWithoutPreset,
    /// Nothing to vary.
    #[error("give at least one --vary NAME=VALUES, or a --preset")]
    NothingVaried,
    /// A `--vary` that does not parse.
    #[error(transparent)]
    Vary(#[from] VaryError),
    /// A parameter varied twice.
    #[error("--vary {0}: given twice (a preset may vary it already)")]
    Twice(&'static str),
    /// `--mesh` with another way of naming servers or clients.
    #[error("--mesh sets the clients and servers: no --targets or --vary server/client")]
    MeshWithOthers,
    /// `--mesh` of one host.
    #[error("--mesh needs two hosts or more")]
    MeshTooSmall,
    /// `--mesh` and a HOST.
    #[error("--mesh and a HOST: give one")]
    MeshAndHost,
    /// `--targets` and `--vary server=`.
    #[error("--targets and --vary server=...: give one")]
    TargetsAndServer,
    /// `--targets` and a HOST.
    #[error("--targets and a HOST: give one")]
    TargetsAndHost,
    /// A `--shard` that does not parse.
    #[error(transparent)]
    Shard(ShardError),
    /// Shards without a shared directory.
    #[error("--shard needs --out DIR, a directory every shard shares")]
    OutNeeded,
    /// A point of a grid that names servers, without one.
    #[error("no server for this point")]
    NoServer,
    /// A point's server that does not parse.
    #[error("server {0}")]
    Server(HostPortError),
    /// A point whose flags make no test (the binary's message, naming the point).
    #[error("{0}")]
    Point(String),
}

/// A sweep's own flags, as far as the plan goes (the test's flags are the binary's).
#[derive(Debug, Clone, Copy)]
pub struct SweepFlags<'a> {
    /// `--vary`, as given.
    pub vary: &'a [String],
    /// `--preset`.
    pub preset: Option<Preset>,
    /// `--scale`.
    pub scale: Option<f64>,
    /// `--targets`.
    pub targets: &'a [String],
    /// `--mesh`.
    pub mesh: &'a [String],
    /// Whether a HOST was given.
    pub host: bool,
    /// Whether `-t` or `-n` was given.
    pub amount: bool,
}

/// Each trial's amount: as the flags give it, or as a preset sets it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Amount {
    /// `-t`/`-n` as given.
    AsGiven,
    /// A preset's: no `-t`, and `-n` this many bytes when `Some` (`None`: the preset varies
    /// the amount).
    Preset(Option<u64>),
}

/// What a sweep's flags plan.
#[derive(Debug, Clone, PartialEq)]
pub struct Planned<T> {
    /// Each trial's amount.
    pub amount: Amount,
    /// What varies, in grid order (servers and clients first).
    pub varies: Vec<Vary>,
    /// The grid.
    pub points: Vec<Point>,
    /// Each point's test, as `test_for` made it.
    pub tests: Vec<T>,
}

/// Refuses `run`'s flags that a sweep cannot honour: those of `given` whose flag is set.
///
/// # Errors
///
/// [`PlanError::NotForSweep`], naming them all.
pub fn refuse(given: &[(bool, &'static str)]) -> Result<(), PlanError> {
    let refused: Vec<&str> = given
        .iter()
        .filter_map(|(set, flag)| set.then_some(*flag))
        .collect();
    if refused.is_empty() {
        return Ok(());
    }
    Err(PlanError::NotForSweep(refused.join(", ")))
}

/// The grid the flags describe and each point's test, every point checked to make a valid
/// test (by `test_for`, given the amount and the point) before any runs.
///
/// # Errors
///
/// The flags contradict each other, a `--vary` does not parse, or a point makes no test.
pub fn plan<T, E: std::fmt::Display>(
    flags: &SweepFlags<'_>,
    mut test_for: impl FnMut(Amount, &Point) -> Result<T, E>,
) -> Result<Planned<T>, PlanError> {
    let mut vary_specs = flags.vary.to_vec();
    let amount = if let Some(preset) = flags.preset {
        let scale = flags.scale.unwrap_or(1.0);
        if !(scale > 0.0 && scale <= 1.0) {
            return Err(PlanError::Scale);
        }
        let plan = preset.plan(scale);
        // The preset sets each trial's amount: a -t or -n would be silently replaced.
        if flags.amount {
            return Err(PlanError::PresetAmount(preset.name()));
        }
        vary_specs = plan.varies.into_iter().chain(vary_specs).collect();
        Amount::Preset(plan.bytes)
    } else if flags.scale.is_some() {
        return Err(PlanError::ScaleWithoutPreset);
    } else {
        Amount::AsGiven
    };
    if vary_specs.is_empty() && flags.targets.is_empty() && flags.mesh.is_empty() {
        return Err(PlanError::NothingVaried);
    }
    let varies = vary_specs
        .iter()
        .map(|s| parse_vary(s))
        .collect::<Result<Vec<_>, _>>()?;
    let varies = with_hosts(flags, varies)?;
    let points = grid(&varies);
    let tests = points
        .iter()
        .map(|p| test_for(amount, p).map_err(|e| PlanError::Point(e.to_string())))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Planned {
        amount,
        varies,
        points,
        tests,
    })
}

/// The varied parameters with `--targets` and `--mesh` put in as `server` and `client`.
fn with_hosts(flags: &SweepFlags<'_>, mut varies: Vec<Vary>) -> Result<Vec<Vary>, PlanError> {
    let mut seen = Vec::new();
    for v in &varies {
        if seen.contains(&v.param) {
            return Err(PlanError::Twice(v.param.name()));
        }
        seen.push(v.param);
    }
    if !flags.mesh.is_empty() {
        if !flags.targets.is_empty()
            || seen.contains(&Param::Server)
            || seen.contains(&Param::Client)
        {
            return Err(PlanError::MeshWithOthers);
        }
        if flags.mesh.len() < 2 {
            return Err(PlanError::MeshTooSmall);
        }
        if flags.host {
            return Err(PlanError::MeshAndHost);
        }
        // Clients, then servers, outermost: shard I is client I (see shard_of).
        for param in [Param::Server, Param::Client] {
            varies.insert(
                0,
                Vary {
                    param,
                    values: flags.mesh.to_vec(),
                },
            );
        }
    }
    if !flags.targets.is_empty() {
        if seen.contains(&Param::Server) {
            return Err(PlanError::TargetsAndServer);
        }
        if flags.host {
            return Err(PlanError::TargetsAndHost);
        }
        // Servers outermost, so each server's points are together in the grid.
        varies.insert(
            0,
            Vary {
                param: Param::Server,
                values: flags.targets.to_vec(),
            },
        );
    }
    Ok(varies)
}

/// This process's shard (`--shard`, the whole experiment without it) and the directory it
/// saves into (`--out`, else `./wirebench-results/DATE-TIME` for a whole experiment).
///
/// # Errors
///
/// A `--shard` that does not parse, or one without `--out`.
pub fn place(shard: Option<&str>, out: Option<&Path>) -> Result<(Shard, PathBuf), PlanError> {
    let shard = match shard {
        None => Shard::WHOLE,
        Some(s) => Shard::parse(s).map_err(PlanError::Shard)?,
    };
    let dir = match (out, shard.count) {
        (Some(d), _) => d.to_path_buf(),
        (None, 1) => PathBuf::from("wirebench-results").join(crate::meta::timestamp()),
        (None, _) => return Err(PlanError::OutNeeded),
    };
    Ok((shard, dir))
}

/// Whether every point names its server (else one server measures them all).
pub fn names_servers(points: &[Point]) -> bool {
    points
        .iter()
        .all(|p| p.iter().any(|(k, _)| *k == Param::Server))
}

/// The server of a point that names one: `HOST`, `HOST:PORT`, `[V6]:PORT` or a bare IPv6
/// address, read as `run` reads its HOST.
///
/// # Errors
///
/// The point names no server, or one that does not parse.
pub fn point_server(point: &Point, default_port: u16) -> Result<(String, u16), PlanError> {
    let Some((_, v)) = point.iter().find(|(k, _)| *k == Param::Server) else {
        return Err(PlanError::NoServer);
    };
    v.parse::<HostPort>()
        .map(|h| h.or_port(default_port))
        .map_err(PlanError::Server)
}

/// Each point's server: `fixed` for every point, else the one it names.
///
/// # Errors
///
/// A point names no server, or one that does not parse.
pub fn servers_of(
    points: &[Point],
    fixed: Option<&(String, u16)>,
    default_port: u16,
) -> Result<Vec<(String, u16)>, PlanError> {
    points
        .iter()
        .map(|p| match fixed {
            Some(hp) => Ok(hp.clone()),
            None => point_server(p, default_port),
        })
        .collect()
}

/// The servers measured, `HOST:PORT`, in the order first measured (`fixed` first): what the
/// shard record names.
pub fn servers_measured(
    fixed: Option<&(String, u16)>,
    servers: &[(String, u16)],
    todo: &[Todo],
) -> Vec<String> {
    let mut out: Vec<String> = fixed.map(|(h, p)| format!("{h}:{p}")).into_iter().collect();
    for t in todo {
        if let Some((h, p)) = servers.get(t.point) {
            let label = format!("{h}:{p}");
            if !out.contains(&label) {
                out.push(label);
            }
        }
    }
    out
}

/// An experiment directory opened for one shard: its manifest, the lock on the shard, and
/// what is left to measure.
#[derive(Debug)]
pub struct Opened {
    /// The manifest, written or found the same.
    pub manifest: Manifest,
    /// Held until this shard's trials and record are saved: a second process on the same
    /// shard is refused rather than measuring under this one's load.
    pub lock: DirLock,
    /// What the directory holds of this shard, and what is left.
    pub resume: Resume,
}

/// What an experiment is, for its manifest: the tests of its points and how it runs them.
#[derive(Debug, Clone, Copy)]
pub struct Experiment<'a, T> {
    /// What varies.
    pub varies: &'a [Vary],
    /// The grid.
    pub points: &'a [Point],
    /// Each point's test, as the manifest records it.
    pub tests: &'a [T],
    /// Trials per point.
    pub repeat: u32,
    /// Grid order rather than shuffled.
    pub ordered: bool,
}

/// Prepares `dir` for shard `shard` of `exp`: its subdirectories, no temporary file an
/// earlier run left, the manifest (written once, with the shuffle seed drawn from the plan;
/// a directory of another experiment is refused), the shard's lock, and what is left to
/// measure (failed trials again while they have had at most `retry_failed` more attempts).
///
/// # Errors
///
/// A directory or file that cannot be made, read or written, another experiment's
/// manifest, or another process running the shard.
pub fn open<T: Serialize>(
    dir: &Path,
    shard: Shard,
    exp: &Experiment<'_, T>,
    retry_failed: u32,
) -> Result<Opened, ShardError> {
    crate::rundir::make_dirs(dir, &["trials", "shards"])?;
    // Before anything is written: another run of this directory is refused untouched.
    let lock = DirLock::acquire(dir, RunKind::Sweep, shard)?;
    // What an earlier run killed mid-write left behind (its files are whole or absent).
    crate::output::clean_experiment_temps(dir);
    let tests = exp
        .tests
        .iter()
        .map(serde_json::to_value)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| ShardError::Parse {
            path: dir.join("manifest.json"),
            why: format!("describing the tests: {e}"),
        })?;
    let manifest = sweep_manifest(
        crate::meta::tool_version(),
        exp.varies.to_vec(),
        exp.repeat,
        exp.ordered,
        tests,
    );
    manifest.write_once(dir)?;
    let resume = resume(dir, &manifest, exp.points, shard, retry_failed)
        .map_err(|e| ShardError::Input(Box::new(e)))?;
    Ok(Opened {
        manifest,
        lock,
        resume,
    })
}

/// What the binary shows as the trials run.
pub trait Progress {
    /// Trial `n` (from 0) of the list starts.
    fn trial(&mut self, _n: usize, _todo: Todo) {}
    /// Trial `n` failed, `why` in words (it is saved as failed).
    fn failed(&mut self, _n: usize, _todo: Todo, _why: &str) {}
    /// Trial `n` is saved.
    fn saved(&mut self, _n: usize) {}
}

/// Measures each trial of `todo` with `measure` and saves it in `dir`, failed or not (a
/// failed one with its reason, so no summary counts it and a rerun measures it again),
/// `pause` apart. Returns how many failed. A test that made no results fails with `E`: its
/// words, and its kind when known (see [`Unmeasured`]).
///
/// # Errors
///
/// A trial file that cannot be written.
pub fn measure_all<E: Into<Unmeasured>>(
    dir: &Path,
    manifest: &Manifest,
    todo: &[Todo],
    pause: Duration,
    progress: &mut dyn Progress,
    mut measure: impl FnMut(Todo) -> Result<Results, E>,
) -> Result<usize, ShardError> {
    let mut failed = 0;
    for (n, t) in todo.iter().enumerate() {
        progress.trial(n, *t);
        let file = TrialFile::measured(manifest, t.point, t.repeat, t.attempt, measure(*t));
        if let Some(why) = file.failed() {
            failed += 1;
            progress.failed(n, *t, why);
        }
        write_trial(&dir.join(trial_path(t.point, t.repeat)), &file)?;
        progress.saved(n);
        if pause > Duration::ZERO && n + 1 < todo.len() {
            // The pause the user asked for between trials, not a wait for anything.
            std::thread::sleep(pause);
        }
    }
    Ok(failed)
}

/// Runs `run` until it succeeds, fails with an error `worth_retrying` does not take, or
/// has been tried `attempts` more times, `pause` apart: a busy server (another client, or
/// the last trial's session still ending on a remote server this process cannot watch) is
/// asked again a few times before the sweep gives up on the trial.
pub fn retry<T, E>(
    attempts: u32,
    pause: Duration,
    mut run: impl FnMut() -> Result<T, E>,
    worth_retrying: impl Fn(&E) -> bool,
) -> Result<T, E> {
    let mut attempt = 0;
    loop {
        match run() {
            Err(e) if attempt < attempts && worth_retrying(&e) => {
                attempt += 1;
                if pause > Duration::ZERO {
                    std::thread::sleep(pause);
                }
            }
            other => return other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flags<'a>(vary: &'a [String]) -> SweepFlags<'a> {
        SweepFlags {
            vary,
            preset: None,
            scale: None,
            targets: &[],
            mesh: &[],
            host: false,
            amount: false,
        }
    }

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    /// The plan's points, each as its label, or the error's message.
    fn labels(f: &SweepFlags<'_>) -> Result<Vec<String>, String> {
        plan(f, |_, p| {
            Ok::<_, String>(super::super::merge::point_label(p))
        })
        .map(|p| p.tests)
        .map_err(|e| e.to_string())
    }

    #[test]
    fn refused_flags_are_named_together() {
        assert!(refuse(&[(false, "--json")]).is_ok());
        let e = refuse(&[(true, "--json"), (false, "--format"), (true, "--file")])
            .expect_err("refused");
        assert_eq!(
            e.to_string(),
            "sweep does not take --json, --file: it saves every trial's results and the \
             summary itself (see --out)"
        );
    }

    #[test]
    fn a_plan_is_the_grid_with_each_points_test() {
        let vary = strings(&["proto=tcp,udp", "size=1,2"]);
        let p = plan(&flags(&vary), |a, p| Ok::<_, String>((a, p.len()))).expect("a plan");
        assert_eq!(p.points.len(), 4);
        assert_eq!(p.tests, vec![(Amount::AsGiven, 2); 4]);
        assert_eq!(p.varies.len(), 2);
        // A point that makes no test: the binary's message as it is.
        let e = plan(&flags(&vary), |_, _| Err::<(), _>("point x: no")).expect_err("no");
        assert_eq!(e.to_string(), "point x: no");
    }

    #[test]
    fn presets_set_the_amount_and_scale_only_a_preset() {
        let mut f = flags(&[]);
        f.preset = Some(Preset::RateSweep);
        f.scale = Some(0.01);
        let p = plan(&f, |a, _| Ok::<_, String>(a)).expect("a plan");
        assert_eq!(p.amount, Amount::Preset(Some(10_000)));
        assert_eq!(p.varies[0].param, Param::Proto);
        f.scale = Some(2.0);
        assert_eq!(
            labels(&f).expect_err("scale"),
            "--scale is above 0 and at most 1"
        );
        f.scale = None;
        f.amount = true;
        assert_eq!(
            labels(&f).expect_err("amount"),
            "--preset rate-sweep sets each trial's amount: no -t/--time or -n/--bytes (use --scale)"
        );
        let mut f = flags(&[]);
        f.scale = Some(0.5);
        assert!(labels(&f)
            .expect_err("no preset")
            .starts_with("--scale scales"));
        assert_eq!(
            labels(&flags(&[])).expect_err("nothing"),
            "give at least one --vary NAME=VALUES, or a --preset"
        );
        // A preset varies proto already.
        let vary = strings(&["proto=tcp"]);
        let mut f = flags(&vary);
        f.preset = Some(Preset::RateSweep);
        assert_eq!(
            labels(&f).expect_err("twice"),
            "--vary proto: given twice (a preset may vary it already)"
        );
    }

    #[test]
    fn targets_and_mesh_become_the_outermost_parameters() {
        let vary = strings(&["size=1,2"]);
        let targets = strings(&["a", "b:7"]);
        let mut f = flags(&vary);
        f.targets = &targets;
        assert_eq!(
            labels(&f).expect("targets"),
            [
                "server=a size=1",
                "server=a size=2",
                "server=b:7 size=1",
                "server=b:7 size=2"
            ]
        );
        f.host = true;
        assert_eq!(
            labels(&f).expect_err("host"),
            "--targets and a HOST: give one"
        );
        let mesh = strings(&["x", "y"]);
        let mut f = flags(&[]);
        f.mesh = &mesh;
        assert_eq!(
            labels(&f).expect("mesh"),
            ["client=x server=y", "client=y server=x"]
        );
        f.targets = &targets;
        assert!(labels(&f).expect_err("both").starts_with("--mesh sets"));
        let one = strings(&["x"]);
        let mut f = flags(&[]);
        f.mesh = &one;
        assert_eq!(
            labels(&f).expect_err("one"),
            "--mesh needs two hosts or more"
        );
        let server = strings(&["server=a"]);
        let mut f = flags(&server);
        f.targets = &targets;
        assert_eq!(
            labels(&f).expect_err("server"),
            "--targets and --vary server=...: give one"
        );
    }

    #[test]
    fn shards_need_a_shared_directory() {
        let (s, d) = place(None, Some(Path::new("x"))).expect("whole");
        assert_eq!((s, d), (Shard::WHOLE, PathBuf::from("x")));
        let (s, d) = place(None, None).expect("default");
        assert_eq!(s, Shard::WHOLE);
        assert!(d.starts_with("wirebench-results"));
        assert_eq!(
            place(Some("1/4"), None).expect_err("no out").to_string(),
            "--shard needs --out DIR, a directory every shard shares"
        );
        assert!(place(Some("4/4"), Some(Path::new("x"))).is_err());
        let (s, _) = place(Some("1/4"), Some(Path::new("x"))).expect("shard");
        assert_eq!((s.index, s.count), (1, 4));
    }

    #[test]
    fn servers_are_each_points_or_the_fixed_one_in_the_order_measured() {
        let vary = strings(&["server=a:1,[::1]:2,b"]);
        let p = plan(&flags(&vary), |_, _| Ok::<_, String>(())).expect("plan");
        assert!(names_servers(&p.points));
        let servers = servers_of(&p.points, None, 9).expect("servers");
        assert_eq!(
            servers,
            [("a".into(), 1), ("::1".into(), 2), ("b".into(), 9)]
        );
        let todo = |point| Todo {
            point,
            repeat: 0,
            attempt: 1,
        };
        assert_eq!(
            servers_measured(None, &servers, &[todo(2), todo(0), todo(2)]),
            ["b:9", "a:1"]
        );
        let fixed = ("h".to_string(), 5);
        let all = servers_of(&p.points, Some(&fixed), 9).expect("fixed");
        assert!(all.iter().all(|s| *s == fixed));
        assert_eq!(servers_measured(Some(&fixed), &all, &[todo(1)]), ["h:5"]);
        assert!(!names_servers(&[vec![(Param::Size, "1".into())]]));
        let bad = vec![(Param::Server, "a:port".to_string())];
        assert!(point_server(&bad, 1)
            .expect_err("bad")
            .to_string()
            .starts_with("server a:port"));
        assert_eq!(
            point_server(&Vec::new(), 1).expect_err("none").to_string(),
            "no server for this point"
        );
    }

    /// Records which trials started and which failed.
    #[derive(Default)]
    struct Seen {
        started: Vec<(usize, u32, u32)>,
        failed: Vec<String>,
        saved: usize,
    }

    impl Progress for Seen {
        fn trial(&mut self, _n: usize, t: Todo) {
            self.started.push((t.point, t.repeat, t.attempt));
        }
        fn failed(&mut self, _n: usize, _t: Todo, why: &str) {
            self.failed.push(why.to_string());
        }
        fn saved(&mut self, _n: usize) {
            self.saved += 1;
        }
    }

    #[test]
    fn a_run_saves_every_trial_and_a_rerun_measures_only_the_failed_one() {
        let dir = std::env::temp_dir().join(format!("wb-sweep-{}-rerun", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let vary = strings(&["rate=10M,20M"]);
        let p = plan(&flags(&vary), |_, p| Ok::<_, String>(p.len())).expect("plan");
        let exp = Experiment {
            varies: &p.varies,
            points: &p.points,
            tests: &p.tests,
            repeat: 2,
            ordered: false,
        };
        let measure = |t: Todo| {
            if (t.point, t.repeat) == (1, 0) {
                Err("refused")
            } else {
                Ok(super::super::trial::tests::udp(1000, 1000, 1000, None))
            }
        };
        let first = open(&dir, Shard::WHOLE, &exp, 3).expect("open");
        assert_eq!(first.resume.todo.len(), 4);
        // Shuffled by the plan's seed, the same in every run of this plan.
        assert!(first.manifest.shuffle_seed.is_some());
        let mut seen = Seen::default();
        let failed = measure_all(
            &dir,
            &first.manifest,
            &first.resume.todo,
            Duration::ZERO,
            &mut seen,
            measure,
        )
        .expect("saved");
        assert_eq!((failed, seen.saved), (1, 4));
        assert_eq!(seen.failed, ["refused"]);
        // The lock is held until dropped: a second process on the shard is refused.
        assert!(matches!(
            open(&dir, Shard::WHOLE, &exp, 3),
            Err(ShardError::Locked { .. })
        ));
        drop(first);
        let again = open(&dir, Shard::WHOLE, &exp, 3).expect("reopen");
        let todo: Vec<_> = again
            .resume
            .todo
            .iter()
            .map(|t| (t.point, t.repeat, t.attempt))
            .collect();
        assert_eq!(todo, [(1, 0, 2)]);
        assert_eq!(again.resume.completed, 3);
        // Another plan in the same directory is refused.
        drop(again);
        let other = Experiment { repeat: 3, ..exp };
        assert!(matches!(
            open(&dir, Shard::WHOLE, &other, 3),
            Err(ShardError::ManifestDiffers { .. })
        ));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_busy_answer_is_asked_again_a_bounded_number_of_times() {
        let mut calls = 0;
        let busy = |e: &&str| e.starts_with("busy");
        let r: Result<(), &str> = retry(
            3,
            Duration::ZERO,
            || {
                calls += 1;
                Err("busy")
            },
            busy,
        );
        assert_eq!((r, calls), (Err("busy"), 4));
        let mut calls = 0;
        let r: Result<u32, &str> = retry(
            3,
            Duration::ZERO,
            || {
                calls += 1;
                if calls < 3 {
                    Err("busy")
                } else {
                    Ok(calls)
                }
            },
            busy,
        );
        assert_eq!(r, Ok(3));
        let mut calls = 0;
        let r: Result<(), &str> = retry(
            3,
            Duration::ZERO,
            || {
                calls += 1;
                Err("refused")
            },
            busy,
        );
        assert_eq!((r, calls), (Err("refused"), 1));
    }
}
