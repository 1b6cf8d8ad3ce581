//! `wirebench sweep`: plan the grid (the report crate's experiment module), run each trial
//! of this shard (all of them without `--shard`) with the engine, save every result, and
//! (one process) the summary, by the same step as `wirebench merge`.

use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use wirebench_engine::{ClientConfig, EngineError, Psk, Watch};
use wirebench_proto::host_port::HostPort;
use wirebench_proto::results::Results;
use wirebench_proto::spec::TestSpec;
use wirebench_proto::units::{parse_duration, parse_rate, parse_size};
use wirebench_report::experiment::merge::point_label;
use wirebench_report::experiment::shard::{hostname, trial_path};
use wirebench_report::experiment::trial::write_trial;
use wirebench_report::experiment::{
    grid, parse_vary, resume, sweep_manifest, Manifest, Param, Point, Shard, ShardLock,
    ShardRecord, Todo, TrialFile, Vary,
};
use wirebench_report::meta::{timestamp, tool_version, Machine};
use wirebench_report::Json;

use super::merge::save;

use super::serve::server_for;
use crate::cli::{ModeArg, RunArgs, SweepArgs};
use crate::Failure;

/// How often a trial refused as busy is asked again, [`BUSY_RETRY`] apart.
const BUSY_ATTEMPTS: u32 = 20;
/// The pause before asking a busy server again.
const BUSY_RETRY: Duration = Duration::from_millis(100);

/// A watcher that shows nothing: the sweep has its own progress bar.
struct Silent;
impl Watch for Silent {}

/// What a sweep's flags plan: the grid and each point's test.
struct Planned {
    /// The run flags every point starts from.
    base: RunArgs,
    /// What varies, in grid order (servers and clients first).
    varies: Vec<Vary>,
    /// The grid.
    points: Vec<Point>,
    /// Each point's test.
    specs: Vec<TestSpec>,
}

/// Runs the experiment, or this process's shard of it.
pub fn sweep(args: &SweepArgs) -> Result<(), Failure> {
    let Planned {
        base,
        varies,
        points,
        specs,
    } = plan(args)?;
    let shard = match args.shard.as_deref() {
        None => Shard::WHOLE,
        Some(s) => Shard::parse(s).map_err(|e| Failure::Usage(e.to_string()))?,
    };
    let dir = match (&args.out, shard.count) {
        (Some(d), _) => d.clone(),
        (None, 1) => PathBuf::from("wirebench-results").join(timestamp()),
        (None, _) => {
            return Err(Failure::Usage(
                "--shard needs --out DIR, a directory every shard shares".into(),
            ))
        }
    };
    let psk = crate::psk::load_psk(base.psk_file.as_deref()).map_err(Failure::Usage)?;
    // A server per point when the grid names them; else one for all (maybe in-process).
    let varies_server = points
        .iter()
        .all(|p| p.iter().any(|(k, _)| *k == Param::Server));
    let fixed = if varies_server {
        None
    } else {
        Some(server_for(base.host.as_ref(), base.port, psk.as_ref())?)
    };
    for sub in ["trials", "shards"] {
        std::fs::create_dir_all(dir.join(sub))
            .with_context(|| format!("creating {}", dir.join(sub).display()))?;
    }
    // What an earlier run killed mid-write left behind (its files are whole or absent).
    wirebench_report::output::clean_experiment_temps(&dir);
    let tests = specs
        .iter()
        .map(serde_json::to_value)
        .collect::<Result<Vec<_>, _>>()
        .context("describing the tests")?;
    let manifest = sweep_manifest(tool_version(), varies, args.repeat, args.ordered, tests);
    manifest
        .write_once(&dir)
        .map_err(|e| Failure::Runtime(e.into()))?;
    // Held until this shard's trials and record are saved: a second process on the same
    // shard is refused rather than measuring under this one's load.
    let lock = ShardLock::acquire(&dir, shard).map_err(|e| Failure::Runtime(e.into()))?;
    let todo = resume(&dir, &manifest, &points, shard, args.retry_failed)
        .map_err(|e| Failure::Runtime(e.into()))?;
    for not in &todo.foreign {
        eprintln!("warning: {not}: measured again");
    }
    let run = Trials {
        dir: &dir,
        manifest: &manifest,
        points: &points,
        specs: &specs,
        fixed: fixed.as_ref(),
        port: base.port,
        psk: psk.as_ref(),
        pause: args.pause,
    };
    let (servers, failed_now) = run.all(&todo.todo)?;
    let record = ShardRecord {
        shard,
        manifest: manifest.hash.clone(),
        client: hostname(),
        server: servers.join(" "),
        // Lossy: a word that is not UTF-8 is still recorded, not a panic.
        command: std::env::args_os()
            .map(|a| a.to_string_lossy().into_owned())
            .collect(),
        machine: Machine::this(),
        trials: todo.files.clone(),
    };
    save(&dir.join(ShardRecord::path(shard)), &Json, &record)?;
    drop(lock);
    if shard.count == 1 {
        return super::merge::finish(std::slice::from_ref(&dir), &dir);
    }
    println!(
        "shard {}/{}: {} trials run, {} already saved, in {}; once every shard is done: wirebench merge {}",
        shard.index,
        shard.count,
        todo.todo.len(),
        todo.completed + todo.kept_failed.len(),
        dir.display(),
        dir.display()
    );
    let failed = failed_now + todo.kept_failed.len();
    if failed > 0 {
        return Err(super::merge::some_failed(failed, todo.files.len(), &dir));
    }
    Ok(())
}

/// The grid and each point's test from the flags, every point checked to make a valid
/// test before any runs.
fn plan(args: &SweepArgs) -> Result<Planned, Failure> {
    let mut base = args.run.clone();
    // `run`'s flags that a sweep cannot honour, named one by one.
    let refused: Vec<&str> = [
        (base.json, "--json"),
        (base.format.is_some(), "--format"),
        (base.packet_log.is_some(), "--packet-log"),
        (base.both_directions, "--both-directions"),
        (base.file.is_some(), "--file"),
    ]
    .into_iter()
    .filter_map(|(given, flag)| given.then_some(flag))
    .collect();
    if !refused.is_empty() {
        return Err(Failure::Usage(format!(
            "sweep does not take {}: it saves every trial's results and the summary itself \
             (see --out)",
            refused.join(", ")
        )));
    }
    let mut vary_specs = args.vary.clone();
    if let Some(preset) = args.preset {
        let scale = args.scale.unwrap_or(1.0);
        if !(scale > 0.0 && scale <= 1.0) {
            return Err(Failure::Usage("--scale is above 0 and at most 1".into()));
        }
        let plan = preset.plan(scale);
        // The preset sets each trial's amount: a -t or -n would be silently replaced.
        if base.time.is_some() || base.bytes.is_some() {
            return Err(Failure::Usage(format!(
                "--preset {} sets each trial's amount: no -t/--time or -n/--bytes (use --scale)",
                preset.name()
            )));
        }
        if plan.bytes.is_some() {
            base.bytes = plan.bytes;
        }
        base.time = None;
        vary_specs = plan.varies.into_iter().chain(vary_specs).collect();
    } else if args.scale.is_some() {
        return Err(Failure::Usage(
            "--scale scales a --preset: give one, or shorten the test with -t/-n".into(),
        ));
    }
    if vary_specs.is_empty() && args.targets.is_empty() && args.mesh.is_empty() {
        return Err(Failure::Usage(
            "give at least one --vary NAME=VALUES, or a --preset".into(),
        ));
    }
    let varies = vary_specs
        .iter()
        .map(|s| parse_vary(s))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| Failure::Usage(e.to_string()))?;
    let varies = with_hosts(args, &base, varies)?;
    let points = grid(&varies);
    let mut specs = Vec::with_capacity(points.len());
    for p in &points {
        let a = apply(&base, p).map_err(Failure::Usage)?;
        let spec = a
            .spec()
            .map_err(|e| Failure::Usage(format!("point {}: {e}", point_label(p))))?;
        specs.push(spec);
    }
    Ok(Planned {
        base,
        varies,
        points,
        specs,
    })
}

/// The varied parameters with `--targets` and `--mesh` put in as `server` and `client`.
fn with_hosts(
    args: &SweepArgs,
    base: &RunArgs,
    mut varies: Vec<Vary>,
) -> Result<Vec<Vary>, Failure> {
    let mut seen = Vec::new();
    for v in &varies {
        if seen.contains(&v.param) {
            return Err(Failure::Usage(format!(
                "--vary {}: given twice (a preset may vary it already)",
                v.param.name()
            )));
        }
        seen.push(v.param);
    }
    if !args.mesh.is_empty() {
        if !args.targets.is_empty()
            || seen.contains(&Param::Server)
            || seen.contains(&Param::Client)
        {
            return Err(Failure::Usage(
                "--mesh sets the clients and servers: no --targets or --vary server/client".into(),
            ));
        }
        if args.mesh.len() < 2 {
            return Err(Failure::Usage("--mesh needs two hosts or more".into()));
        }
        if base.host.is_some() {
            return Err(Failure::Usage("--mesh and a HOST: give one".into()));
        }
        // Clients, then servers, outermost: shard I is client I (see shard_of).
        for param in [Param::Server, Param::Client] {
            varies.insert(
                0,
                Vary {
                    param,
                    values: args.mesh.clone(),
                },
            );
        }
    }
    if !args.targets.is_empty() {
        if seen.contains(&Param::Server) {
            return Err(Failure::Usage(
                "--targets and --vary server=...: give one".into(),
            ));
        }
        if base.host.is_some() {
            return Err(Failure::Usage("--targets and a HOST: give one".into()));
        }
        // Servers outermost, so each server's points are together in the grid.
        varies.insert(
            0,
            Vary {
                param: Param::Server,
                values: args.targets.clone(),
            },
        );
    }
    Ok(varies)
}

/// What running a shard's trials needs.
struct Trials<'a> {
    dir: &'a Path,
    manifest: &'a Manifest,
    points: &'a [Point],
    specs: &'a [TestSpec],
    /// The one server of every point, unless the grid names them.
    fixed: Option<&'a (String, u16)>,
    port: u16,
    psk: Option<&'a Psk>,
    pause: Duration,
}

impl Trials<'_> {
    /// Measures each trial of `todo` and saves it, failed or not (a failed one with its
    /// reason, so no summary counts it and a rerun measures it again). Returns the servers
    /// measured and how many trials failed.
    fn all(&self, todo: &[Todo]) -> Result<(Vec<String>, usize), Failure> {
        let mut servers: Vec<String> = Vec::new();
        if let Some((h, p)) = self.fixed {
            servers.push(format!("{h}:{p}"));
        }
        let bar = ProgressBar::new(todo.len() as u64).with_style(
            ProgressStyle::with_template("{bar:30} trial {pos}/{len} {msg} eta {eta}")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        bar.set_draw_target(if io::IsTerminal::is_terminal(&io::stderr()) {
            ProgressDrawTarget::stderr()
        } else {
            ProgressDrawTarget::hidden()
        });
        let mut failed = 0;
        for (n, t) in todo.iter().enumerate() {
            let (p, r) = (t.point, t.repeat);
            bar.set_message(format!(
                "point {}/{} repeat {}",
                p + 1,
                self.points.len(),
                r + 1
            ));
            let (host, port) = match self.fixed {
                Some(hp) => hp.clone(),
                None => point_server(&self.points[p], self.port).map_err(Failure::Usage)?,
            };
            let label = format!("{host}:{port}");
            if !servers.contains(&label) {
                servers.push(label);
            }
            let cfg = ClientConfig {
                host,
                port,
                spec: self.specs[p].clone(),
                packet_log: None,
                file: None,
                save: None,
                psk: self.psk.cloned(),
                bind: None,
                stack: None,
            };
            let file = TrialFile::measured(self.manifest, p, r, t.attempt, trial(&cfg));
            if let Some(why) = file.failed() {
                failed += 1;
                bar.suspend(|| {
                    eprintln!(
                        "warning: trial {} (point {}, repeat {}) failed: {why}",
                        n + 1,
                        p + 1,
                        r + 1
                    )
                });
            }
            let path = self.dir.join(trial_path(p, r));
            write_trial(&path, &file).map_err(|e| Failure::Runtime(e.into()))?;
            bar.inc(1);
            if self.pause > Duration::ZERO && n + 1 < todo.len() {
                // The pause the user asked for between trials, not a wait for anything.
                std::thread::sleep(self.pause);
            }
        }
        bar.finish_and_clear();
        Ok((servers, failed))
    }
}

/// The server of a point that names one: `HOST`, `HOST:PORT`, `[V6]:PORT` or a bare IPv6
/// address, read as `run` reads its HOST.
fn point_server(point: &Point, default_port: u16) -> Result<(String, u16), String> {
    let Some((_, v)) = point.iter().find(|(k, _)| *k == Param::Server) else {
        return Err("no server for this point".into());
    };
    v.parse::<HostPort>()
        .map(|h| h.or_port(default_port))
        .map_err(|e| format!("server {e}"))
}

/// One trial. A busy server (another client, or the last trial's session still ending on
/// a remote server this process cannot watch) is asked again a few times before the sweep
/// gives up.
fn trial(cfg: &ClientConfig) -> Result<Results, EngineError> {
    let mut attempt = 0;
    loop {
        match wirebench_engine::run(cfg, &mut Silent) {
            Err(e) if e.kind().try_again_later() && attempt < BUSY_ATTEMPTS => {
                attempt += 1;
                std::thread::sleep(BUSY_RETRY);
            }
            other => return other,
        }
    }
}

/// `run`'s flags for one grid point.
fn apply(base: &RunArgs, point: &Point) -> Result<RunArgs, String> {
    let mut a = base.clone();
    for (param, v) in point {
        match param {
            Param::Rate => a.rate = Some(parse_rate(v).map_err(|e| e.to_string())?),
            Param::Size => a.size = Some(parse_size(v).map_err(|e| e.to_string())?),
            Param::Bytes => {
                a.bytes = Some(parse_size(v).map_err(|e| e.to_string())?);
                a.time = None;
            }
            Param::Time => {
                a.time = Some(parse_duration(v).map_err(|e| e.to_string())?);
                a.bytes = None;
            }
            Param::Mode => {
                a.mode = match v.as_str() {
                    "stream" => ModeArg::Stream,
                    "stop-and-wait" => ModeArg::StopAndWait,
                    "rr" => ModeArg::Rr,
                    "crr" => ModeArg::Crr,
                    other => return Err(format!("mode {other}: stream, stop-and-wait, rr or crr")),
                }
            }
            Param::Proto => match v.as_str() {
                "tcp" => (a.tcp, a.udp) = (true, false),
                "udp" => (a.tcp, a.udp) = (false, true),
                other => return Err(format!("proto {other}: tcp or udp")),
            },
            Param::Parallel => {
                a.parallel = v.parse().map_err(|_| format!("parallel {v}: a number"))?
            }
            Param::Direction => {
                a.reverse = match v.as_str() {
                    "forward" => false,
                    "reverse" => true,
                    other => return Err(format!("direction {other}: forward or reverse")),
                }
            }
            // The server is not a flag of the test: the sweep connects to it per point.
            Param::Server => point_server(point, a.port).map(|_| ())?,
            // Which host runs the point: the shard assignment's, not the test's.
            Param::Client => {}
        }
    }
    Ok(a)
}
