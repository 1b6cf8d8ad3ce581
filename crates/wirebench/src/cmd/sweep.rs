//! `wirebench sweep`: plan the grid (the report crate's experiment module), run each trial
//! with the engine, save every result and the summary (the report crate's exporters).

use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use wirebench_engine::{ClientConfig, EngineError, Watch};
use wirebench_proto::results::Results;
use wirebench_proto::units::{parse_duration, parse_rate, parse_size};
use wirebench_report::experiment::{grid, parse_vary, summarize_experiment, Param, Point};
use wirebench_report::meta::{timestamp, tool_version, ExperimentMeta, Machine};
use wirebench_report::{Csv, Exporter, Json, Table};

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

/// Runs the experiment.
pub fn sweep(args: &SweepArgs) -> Result<(), Failure> {
    let mut base = args.run.clone();
    if base.json
        || base.format.is_some()
        || base.packet_log.is_some()
        || base.both_directions
        || base.file.is_some()
    {
        return Err(Failure::Usage(
            "sweep saves every result itself: no --json, --format, --packet-log, --both-directions or --file"
                .into(),
        ));
    }
    let mut vary_specs = args.vary.clone();
    if let Some(preset) = args.preset {
        if !(args.scale > 0.0 && args.scale <= 1.0) {
            return Err(Failure::Usage("--scale is above 0 and at most 1".into()));
        }
        let plan = preset.plan(args.scale);
        if plan.bytes.is_some() {
            base.bytes = plan.bytes;
        }
        base.time = None;
        vary_specs = plan.varies.into_iter().chain(vary_specs).collect();
    }
    if vary_specs.is_empty() {
        return Err(Failure::Usage(
            "give at least one --vary NAME=VALUES, or a --preset".into(),
        ));
    }
    let varies = vary_specs
        .iter()
        .map(|s| parse_vary(s))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| Failure::Usage(e.to_string()))?;
    let points = grid(&varies);
    // Every point must make a valid test before any runs.
    let mut specs = Vec::with_capacity(points.len());
    for p in &points {
        let a = apply(&base, p).map_err(Failure::Usage)?;
        let spec = a.spec().map_err(|e| {
            Failure::Usage(format!(
                "point {}: {e}",
                p.iter()
                    .map(|(k, v)| format!("{}={v}", k.name()))
                    .collect::<Vec<_>>()
                    .join(" ")
            ))
        })?;
        specs.push(spec);
    }
    let psk = crate::cli::load_psk(base.psk_file.as_deref()).map_err(Failure::Usage)?;
    let (host, port) = server_for(base.host.as_ref(), base.port, psk.as_ref())?;
    let dir = args
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from("wirebench-results").join(timestamp()));
    std::fs::create_dir_all(dir.join("trials"))
        .with_context(|| format!("creating {}", dir.display()))?;
    let mut order: Vec<(usize, u32)> = (0..points.len())
        .flat_map(|p| (0..args.repeat).map(move |r| (p, r)))
        .collect();
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(1)
        | 1;
    if !args.ordered {
        shuffle(&mut order, seed);
    }
    let meta = ExperimentMeta {
        wirebench: tool_version(),
        // Lossy: a word that is not UTF-8 is still recorded, not a panic.
        command: std::env::args_os()
            .map(|a| a.to_string_lossy().into_owned())
            .collect(),
        server: format!("{host}:{port}"),
        varies,
        repeat: args.repeat,
        ordered: args.ordered,
        shuffle_seed: (!args.ordered).then_some(seed),
        machine: Machine::this(),
    };
    save(&dir.join("experiment.json"), &Json, &meta)?;
    let bar = ProgressBar::new(order.len() as u64).with_style(
        ProgressStyle::with_template("{bar:30} trial {pos}/{len} {msg} eta {eta}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar.set_draw_target(if io::IsTerminal::is_terminal(&io::stderr()) {
        ProgressDrawTarget::stderr()
    } else {
        ProgressDrawTarget::hidden()
    });
    let mut trials: Vec<Vec<(String, Results)>> = vec![Vec::new(); points.len()];
    for (n, &(p, r)) in order.iter().enumerate() {
        bar.set_message(format!("point {}/{} repeat {}", p + 1, points.len(), r + 1));
        let cfg = ClientConfig {
            host: host.clone(),
            port,
            spec: specs[p].clone(),
            packet_log: None,
            file: None,
            save: None,
            psk: psk.clone(),
        };
        let results = trial(&cfg)
            .with_context(|| format!("trial {} (point {}, repeat {})", n + 1, p + 1, r + 1))?;
        let file = format!("trials/p{:03}-r{:03}.json", p + 1, r + 1);
        save(&dir.join(&file), &Json, &results)?;
        trials[p].push((file, results));
        bar.inc(1);
        if args.pause > Duration::ZERO && n + 1 < order.len() {
            // The pause the user asked for between trials, not a wait for anything.
            std::thread::sleep(args.pause);
        }
    }
    bar.finish_and_clear();
    let summary = summarize_experiment(&points, &trials);
    save(&dir.join("summary.json"), &Json, &summary)?;
    save(&dir.join("summary.csv"), &Csv, &summary)?;
    let mut out = io::stdout().lock();
    Table
        .export(&summary, &mut out)
        .and_then(|()| writeln!(out, "saved in {}", dir.display()))
        .and_then(|()| out.flush())
        .context("writing the summary")?;
    Ok(())
}

/// One trial. A busy server (another client, or the last trial's session still ending on
/// a remote server this process cannot watch) is asked again a few times before the sweep
/// gives up.
fn trial(cfg: &ClientConfig) -> Result<Results, EngineError> {
    let mut attempt = 0;
    loop {
        match wirebench_engine::run(cfg, &mut Silent) {
            Err(EngineError::Refused(why))
                if why.starts_with("server busy") && attempt < BUSY_ATTEMPTS =>
            {
                attempt += 1;
                std::thread::sleep(BUSY_RETRY);
            }
            other => return other,
        }
    }
}

/// Writes `doc` to `path` with `exporter`.
fn save<T: ?Sized>(path: &Path, exporter: &dyn Exporter<T>, doc: &T) -> anyhow::Result<()> {
    let file =
        std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
    let mut w = io::BufWriter::new(file);
    exporter
        .export(doc, &mut w)
        .and_then(|()| w.flush())
        .with_context(|| format!("writing {}", path.display()))
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
        }
    }
    Ok(a)
}

/// A small xorshift for the trial order; seeded from the clock, recorded for a rerun.
fn shuffle<T>(v: &mut [T], mut seed: u64) {
    for i in (1..v.len()).rev() {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        v.swap(i, (seed % (i as u64 + 1)) as usize);
    }
}
