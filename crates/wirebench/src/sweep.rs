//! `wirebench sweep`: plan the grid (the experiment module), run each trial with the engine,
//! save every result and the summary. Glue only.

use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use wirebench_engine::{ClientConfig, Watch};
use wirebench_proto::results::Results;
use wirebench_proto::units::{format_rate_bps, parse_duration, parse_rate, parse_size};
use wirebench_report::experiment::{
    grid, parse_vary, summarize_experiment, summary_csv, ExperimentSummary, Param, Point,
};

use crate::cli::{ModeArg, RunArgs, SweepArgs};
use crate::{server_for, Failure};

/// A watcher that shows nothing: the sweep has its own progress bar.
struct Silent;
impl Watch for Silent {}

/// A preset's varies and base test, scaled by `scale` (amounts and point counts).
fn preset(name: &str, scale: f64, run: &mut RunArgs) -> Result<Vec<String>, String> {
    let scaled = |bytes: f64| ((bytes * scale).round() as u64).max(1000);
    match name {
        // Seed 000: receive speed and percent received against send speed, for 2-byte and
        // 500-byte payloads, UDP and TCP.
        "seed-000" => {
            run.bytes = Some(scaled(1_000_000.0));
            run.time = None;
            let points = ((12.0 * scale.sqrt()).round() as usize).clamp(3, 12);
            Ok(vec![
                "proto=udp,tcp".into(),
                "size=2,500".into(),
                format!("rate=1M..1G:log:{points}"),
            ])
        }
        // Seed 001: transfer time against data size, TCP and UDP, streaming and
        // stop-and-wait, with the seed's table.
        "seed-001" => {
            run.time = None;
            let sizes: Vec<String> = [1e6, 5e6, 10e6, 50e6, 100e6, 500e6, 1536e6]
                .iter()
                .map(|b| scaled(*b).to_string())
                .collect();
            Ok(vec![
                "proto=tcp,udp".into(),
                "mode=stream,stop-and-wait".into(),
                format!("bytes={}", sizes.join(",")),
            ])
        }
        other => Err(format!(
            "--preset {other}: the presets are seed-000 and seed-001"
        )),
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

/// Facts of this machine that a rerun should match.
pub fn machine() -> serde_json::Value {
    let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
    let cpu = read("/proc/cpuinfo")
        .lines()
        .find_map(|l| {
            l.strip_prefix("model name")
                .map(|v| v.trim_start_matches([' ', '\t', ':']).to_string())
        })
        .unwrap_or_default();
    serde_json::json!({
        "kernel": read("/proc/sys/kernel/osrelease").trim(),
        "cpu": cpu,
        "cores": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
    })
}

fn default_dir() -> PathBuf {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    // UTC date and time from the Unix time (no calendar crate for one name).
    let days = secs / 86_400;
    let (y, m, d) = civil_from_days(days as i64);
    let t = secs % 86_400;
    PathBuf::from("wirebench-results").join(format!(
        "{y:04}-{m:02}-{d:02}T{:02}{:02}{:02}",
        t / 3600,
        t / 60 % 60,
        t % 60
    ))
}

/// The UTC date and time now, as in default result directory names (2026-11-22T150258).
pub fn timestamp() -> String {
    default_dir()
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// The proleptic Gregorian date of a day count since 1970-01-01 (H. Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

fn write_json(path: &Path, v: &impl serde::Serialize) -> anyhow::Result<()> {
    let mut f =
        std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
    serde_json::to_writer_pretty(&mut f, v)?;
    writeln!(f)?;
    Ok(())
}

/// Runs the experiment.
pub fn sweep(args: &SweepArgs) -> Result<(), Failure> {
    let mut base = args.run.clone();
    if base.json || base.packet_log.is_some() || base.both_directions || base.file.is_some() {
        return Err(Failure::Usage(
            "sweep saves every result itself: no --json, --packet-log, --both-directions or --file"
                .into(),
        ));
    }
    let mut vary_specs = args.vary.clone();
    if let Some(name) = &args.preset {
        if !(args.scale > 0.0 && args.scale <= 1.0) {
            return Err(Failure::Usage("--scale is above 0 and at most 1".into()));
        }
        let mut p = preset(name, args.scale, &mut base).map_err(Failure::Usage)?;
        p.extend(vary_specs);
        vary_specs = p;
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
        .map_err(Failure::Usage)?;
    let points = grid(&varies);
    // Every point must make a valid test before any runs.
    let mut point_args = Vec::with_capacity(points.len());
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
        point_args.push(spec);
    }
    let psk = crate::cli::load_psk(base.psk_file.as_deref()).map_err(Failure::Usage)?;
    let (host, port) = server_for(base.host.as_ref(), base.port, psk.as_ref())?;
    let dir = args.out.clone().unwrap_or_else(default_dir);
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
    write_json(
        &dir.join("experiment.json"),
        &serde_json::json!({
            "wirebench": format!("wirebench {}", env!("CARGO_PKG_VERSION")),
            "command": std::env::args().collect::<Vec<_>>(),
            "server": format!("{host}:{port}"),
            "varies": varies,
            "repeat": args.repeat,
            "ordered": args.ordered,
            "shuffle_seed": (!args.ordered).then_some(seed),
            "machine": machine(),
        }),
    )?;
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
        let spec = &point_args[p];
        bar.set_message(format!("point {}/{} repeat {}", p + 1, points.len(), r + 1));
        let cfg = ClientConfig {
            host: host.clone(),
            port,
            spec: spec.clone(),
            packet_log: None,
            file: None,
            save: None,
            psk: psk.clone(),
        };
        // A busy server (another client, or the last trial's session still ending) is
        // asked again a few times before the sweep gives up.
        let mut attempt = 0;
        let results = loop {
            match wirebench_engine::run(&cfg, &mut Silent) {
                Err(wirebench_engine::EngineError::Refused(why))
                    if why.starts_with("server busy") && attempt < 20 =>
                {
                    attempt += 1;
                    std::thread::sleep(Duration::from_millis(100));
                }
                other => {
                    break other.with_context(|| {
                        format!("trial {} (point {}, repeat {})", n + 1, p + 1, r + 1)
                    })?
                }
            }
        };
        let file = format!("trials/p{:03}-r{:03}.json", p + 1, r + 1);
        write_json(&dir.join(&file), &results)?;
        trials[p].push((file, results));
        bar.inc(1);
        if args.pause > Duration::ZERO && n + 1 < order.len() {
            std::thread::sleep(args.pause);
        }
    }
    bar.finish_and_clear();
    let summary = summarize_experiment(&points, &trials);
    write_json(&dir.join("summary.json"), &summary)?;
    std::fs::write(dir.join("summary.csv"), summary_csv(&summary))
        .with_context(|| format!("writing {}", dir.join("summary.csv").display()))?;
    let mut out = io::stdout().lock();
    print_summary(&mut out, &summary, &dir)
        .and_then(|()| out.flush())
        .context("writing the summary")?;
    Ok(())
}

fn print_summary(out: &mut impl Write, s: &ExperimentSummary, dir: &Path) -> io::Result<()> {
    for p in &s.points {
        let params: Vec<String> = p.point.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let rate = p.figures.get("received_bps");
        let frac = p.figures.get("delivered_fraction");
        writeln!(
            out,
            "{:<40} {} trials  received {} ± {} (95% CI)  delivered {:.2}%{}",
            params.join(" "),
            p.trials,
            rate.map_or("-".into(), |x| format_rate_bps(x.mean)),
            rate.map_or("-".into(), |x| format_rate_bps(x.ci95)),
            frac.map_or(f64::NAN, |x| x.mean * 100.0),
            if p.failed > 0 {
                format!("  ({} failed)", p.failed)
            } else {
                String::new()
            }
        )?;
    }
    if let Some(t) = wirebench_report::experiment::seed_001_table(s) {
        writeln!(out, "{t}")?;
    }
    for k in &s.knees {
        let series: Vec<String> = k.series.iter().map(|(a, b)| format!("{a}={b}")).collect();
        writeln!(
            out,
            "knee {}: 99% delivered up to {}, 95% up to {}",
            series.join(" "),
            k.knee99_bps.map_or("none".into(), format_rate_bps),
            k.knee95_bps.map_or("none".into(), format_rate_bps),
        )?;
    }
    writeln!(out, "saved in {}", dir.display())
}
