//! `lab scenario FILE`: every stack profile × trial, K copies of the network at once; one
//! JSON file per trial and a summary per profile (goodput min/mean/max/SD, retransmits).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Mutex;

use anyhow::{anyhow, Context};
use std::collections::BTreeMap;

use serde_json::{json, Value};
use wirebench_lab::scenario::{trial_topology, Profile, Scenario};
use wirebench_lab::topo::{Lab, Topology};
use wirebench_proto::results::Results;
use wirebench_report::experiment::{self, ExperimentSummary, PointSummary};

use crate::cli::ScenarioArgs;
use crate::Failure;

/// Reads and checks a scenario file.
pub fn load(file: &Path) -> Result<Scenario, Failure> {
    let text = std::fs::read_to_string(file)
        .map_err(|e| Failure::Usage(format!("{}: {e}", file.display())))?;
    Scenario::parse(&text).map_err(|e| Failure::Usage(format!("{}: {e}", file.display())))
}

struct Job {
    profile: usize,
    trial: u32,
}

pub fn run(args: &ScenarioArgs) -> Result<(), Failure> {
    let sc = load(&args.file)?;
    if !(args.time_scale.is_finite() && args.time_scale > 0.0) {
        return Err(Failure::Usage("--time-scale must be above 0".into()));
    }
    let mut profiles = sc.profiles();
    if !args.profiles.is_empty() {
        for p in &args.profiles {
            if !profiles.iter().any(|q| &q.name == p) {
                return Err(Failure::Usage(format!("the scenario has no profile {p:?}")));
            }
        }
        profiles.retain(|p| args.profiles.contains(&p.name));
    }
    let topo = sc.topology().map_err(Failure::Usage)?;
    let trials = args.trials.unwrap_or(sc.trials);
    let parallel = args.parallel.unwrap_or(sc.parallel).max(1);
    let out = args.out.clone().unwrap_or_else(|| {
        PathBuf::from("wirebench-results").join(format!(
            "lab-{}-{}",
            sc.name,
            crate::sweep::timestamp()
        ))
    });
    if args.resume && args.out.is_none() {
        return Err(Failure::Usage(
            "--resume needs --out DIR: the directory of the run to go on with".into(),
        ));
    }
    std::fs::create_dir_all(out.join("trials"))
        .with_context(|| format!("creating {}", out.display()))?;
    let trial_path = |trial: u32, profile: &str| {
        out.join("trials")
            .join(format!("{trial:04}-{profile}.json"))
    };
    // With --resume, trials already on disk (and not failed outright) are read, not run.
    let mut done = Vec::<(usize, Value)>::new();
    let mut jobs: Vec<Job> = Vec::new();
    // Trials interleave the profiles, so drift over time spreads over all of them.
    for trial in 0..trials {
        for (profile, p) in profiles.iter().enumerate() {
            let kept = args
                .resume
                .then(|| std::fs::read(trial_path(trial, &p.name)).ok())
                .flatten()
                .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
                .filter(|v| v.get("error").is_none());
            match kept {
                Some(v) => done.push((profile, v)),
                None => jobs.push(Job { profile, trial }),
            }
        }
    }
    let total = jobs.len() + done.len();
    if !jobs.is_empty() {
        wirebench_lab::ensure_privilege().map_err(|e| anyhow!(e))?;
    }
    // What `report` shows of how the run was made, as a sweep writes it (a resumed run
    // keeps the first run's).
    if !(args.resume && out.join("experiment.json").exists()) {
        std::fs::write(
            out.join("experiment.json"),
            serde_json::to_vec_pretty(&json!({
                "wirebench": format!("wirebench {}", env!("CARGO_PKG_VERSION")),
                "command": std::env::args().collect::<Vec<_>>(),
                "server": format!("lab scenario {}", sc.name),
                "scenario": sc,
                "repeat": trials,
                "parallel": parallel,
                "time_scale": args.time_scale,
                "ordered": true,
                "machine": crate::sweep::machine(),
            }))
            .context("experiment.json")?,
        )
        .context("writing experiment.json")?;
    }
    let exe = std::env::current_exe().context("finding the wirebench executable")?;
    let log_ns = match &args.link_log_interval {
        None => 0,
        Some(t) => crate::lab::log_interval_ns(t)?,
    };

    eprintln!(
        "scenario {}: {} profiles × {trials} trials, {parallel} at once, into {}{}",
        sc.name,
        profiles.len(),
        out.display(),
        if done.is_empty() {
            String::new()
        } else {
            format!(" ({} already there)", done.len())
        }
    );
    let queue = Mutex::new(jobs.into_iter());
    let done = Mutex::new(done);
    std::thread::scope(|s| {
        for _ in 0..parallel.min(total as u32) {
            s.spawn(|| {
                while let Some(job) = queue.lock().ok().and_then(|mut q| q.next()) {
                let p = &profiles[job.profile];
                let log = (log_ns > 0).then(|| {
                    (log_ns, out.join("trials").join(format!("{:04}-{}-links.csv", job.trial, p.name)))
                });
                let v = match trial(&sc, &topo, p, job.trial, args.time_scale, &exe, log) {
                    Ok(v) => v,
                    Err(e) => {
                        json!({"profile": p.name, "trial": job.trial, "error": format!("{e:#}")})
                    }
                };
                let path = trial_path(job.trial, &p.name);
                if let Err(e) =
                    std::fs::write(&path, serde_json::to_vec_pretty(&v).unwrap_or_default())
                {
                    eprintln!("writing {}: {e}", path.display());
                }
                if let Ok(mut d) = done.lock() {
                    d.push((job.profile, v));
                    eprintln!("trial {}/{total} done ({} #{})", d.len(), p.name, job.trial);
                }
                }
            });
        }
    });
    let done = done.into_inner().unwrap_or_default();
    let summary = summarize(&sc, &profiles, &done);
    std::fs::write(
        out.join("summary.json"),
        serde_json::to_vec_pretty(&summary).context("summary")?,
    )
    .context("writing summary.json")?;
    if let Ok(e) = serde_json::from_value::<ExperimentSummary>(summary.clone()) {
        std::fs::write(out.join("summary.csv"), experiment::summary_csv(&e))
            .context("writing summary.csv")?;
    }
    let table = table(&summary);
    std::fs::write(out.join("summary.txt"), &table).context("writing summary.txt")?;
    print!("{table}");
    let failed = done
        .iter()
        .filter(|(_, v)| v.get("error").is_some())
        .count();
    if failed > 0 {
        return Err(Failure::Runtime(anyhow!(
            "{failed} of {total} trials failed; see {}/trials",
            out.display()
        )));
    }
    Ok(())
}

/// Scales the first duration after -t/--time in a test's options.
fn scaled_args(args: &[String], scale: f64) -> Vec<String> {
    let mut out = args.to_vec();
    if scale == 1.0 {
        return out;
    }
    for i in 0..out.len().saturating_sub(1) {
        if out[i] == "-t" || out[i] == "--time" {
            if let Ok(d) = wirebench_proto::units::parse_duration(&out[i + 1]) {
                out[i + 1] = format!(
                    "{}ms",
                    ((d.as_secs_f64() * scale * 1000.0).round() as u64).max(100)
                );
            }
        }
    }
    out
}

/// One trial: a fresh copy of the network, the profile applied, every test at once.
fn trial(
    sc: &Scenario,
    topo: &Topology,
    profile: &Profile,
    n: u32,
    scale: f64,
    exe: &Path,
    log: Option<(u64, PathBuf)>,
) -> anyhow::Result<Value> {
    let t = trial_topology(topo, n);
    let lab =
        Lab::build_logged(&t, log.as_ref().map_or(0, |l| l.0)).context("building the network")?;
    let mut applied = serde_json::Map::new();
    let profile_hosts = sc.profile_hosts(profile);
    for host in profile_hosts.iter().cloned() {
        let node = t.node(&host).context("profile host")?;
        let got = profile
            .apply(lab.netns(node))
            .with_context(|| format!("applying profile {} to {host}", profile.name))?;
        applied.insert(host, json!(got));
    }
    // One server per host that tests go to.
    let mut servers = Vec::new();
    let mut server_hosts: Vec<&str> = Vec::new();
    for test in &sc.tests {
        if !server_hosts.contains(&test.to.as_str()) {
            server_hosts.push(&test.to);
            let node = t.node(&test.to).context("server host")?;
            servers.push(
                crate::lab::start_server(&lab, exe, node, "0.0.0.0")
                    .map_err(|e| anyhow!("starting the server in {}: {}", test.to, fail_text(e)))?,
            );
        }
    }
    // Start the tests in the order of their delays.
    let mut order: Vec<usize> = (0..sc.tests.len()).collect();
    let delay = |i: usize| sc.tests[i].delay().unwrap_or_default().mul_f64(scale);
    order.sort_by_key(|&i| delay(i));
    let t0 = std::time::Instant::now();
    let mut children = Vec::new();
    for &i in &order {
        let test = &sc.tests[i];
        let wait = delay(i).saturating_sub(t0.elapsed());
        std::thread::sleep(wait);
        let to = t.node(&test.to).context("test host")?;
        let addr = t.node_address(to).context("address")?;
        let mut c = lab.command(t.node(&test.from).context("test host")?, exe);
        c.arg("run").arg(addr.to_string()).arg("--json");
        // The profile's congestion control, per socket too (see Profile::apply).
        if let Some(cc) = &profile.cc {
            if profile_hosts.contains(&test.from) && !test.args.iter().any(|a| a == "--cc") {
                c.args(["--cc", cc]);
            }
        }
        c.args(scaled_args(&test.args, scale))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        children.push((i, c.spawn().context("starting a test")?));
    }
    let mut results: Vec<Value> = vec![Value::Null; sc.tests.len()];
    std::thread::scope(|s| {
        let handles: Vec<_> = children
            .into_iter()
            .map(|(i, child)| s.spawn(move || (i, child.wait_with_output())))
            .collect();
        for h in handles {
            if let Ok((i, out)) = h.join() {
                let test = &sc.tests[i];
                let ok = out.as_ref().is_ok_and(|o| o.status.success());
                let (stdout, stderr) =
                    out.as_ref()
                        .map_or((Default::default(), Default::default()), |o| {
                            (
                                String::from_utf8_lossy(&o.stdout),
                                String::from_utf8_lossy(&o.stderr),
                            )
                        });
                let result = serde_json::from_str::<Value>(&stdout).ok();
                results[i] = json!({
                    "name": test.label(),
                    "from": test.from,
                    "to": test.to,
                    "measured": test.measured,
                    "result": result,
                    "error": if ok { Value::Null } else { json!(stderr.trim()) },
                });
            }
        }
    });
    for mut s in servers {
        crate::lab::stop_child(&mut s);
    }
    let (links, logs) = lab.stop_logged().context("stopping the emulator")?;
    let names: Vec<String> = t
        .links
        .iter()
        .map(|l| format!("{}-{}", t.nodes[l.a].name, t.nodes[l.b].name))
        .collect();
    if let Some((_, path)) = log {
        let mut w = std::io::BufWriter::new(
            std::fs::File::create(&path).with_context(|| format!("creating {}", path.display()))?,
        );
        crate::lab::write_link_log(&mut w, &names, &logs)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(json!({
        "scenario": sc.name,
        "profile": profile.name,
        "trial": n,
        "time_scale": scale,
        "sysctls": applied,
        "tests": results,
        "links": names.iter().zip(&links).map(|(n, r)| json!({"link": n, "report": r})).collect::<Vec<_>>(),
    }))
}

fn fail_text(f: Failure) -> String {
    match f {
        Failure::Usage(s) => s,
        Failure::Runtime(e) => format!("{e:#}"),
    }
}

/// Goodput as seed 003 defines it: the bytes the receiving application read during the
/// test's duration, over that duration, from the receiver's interval records (bit/s). Data
/// still in flight or in the sender's socket buffer when the time is up (a drain that can
/// take longer than the test on a lossy path) does not count. A test set by size rather
/// than time has no window: its whole transfer counts (`end.received_bps`).
fn goodput_bps(result: &Value) -> Option<f64> {
    let t = result
        .pointer("/test/duration_s")
        .and_then(Value::as_f64)
        .filter(|t| *t > 0.0);
    let Some(t) = t else {
        return result.pointer("/end/received_bps").and_then(Value::as_f64);
    };
    let intervals = result.get("intervals")?.as_array()?;
    let mut bytes = 0.0;
    for i in intervals {
        let (Some(start), Some(end), Some(b)) = (
            i.get("start_s").and_then(Value::as_f64),
            i.get("end_s").and_then(Value::as_f64),
            i.get("received_bytes").and_then(Value::as_f64),
        ) else {
            continue;
        };
        if end <= t + 1e-6 {
            bytes += b;
        } else if start < t && end > start {
            // The interval the window ends in: its share, as if received evenly.
            bytes += b * (t - start) / (end - start);
        }
    }
    Some(bytes * 8.0 / t)
}

/// Per profile: goodput of each measured test ([`goodput_bps`]), the receiver's rate over
/// the whole transfer (`end.received_bps`, the drain included), and the sender's TCP
/// retransmits, over the trials. A measured test that ended incomplete (data still
/// missing after `--drain`) but has results counts for goodput, and in `incomplete`.
///
/// Also, as an experiment's summary (`points`, one per profile, and `knees`), so that `plot`
/// and `report` read a scenario's directory as they read a sweep's: each point's figures are
/// those of a sweep's trials, plus `goodput_bps` and `retransmits`.
fn summarize(sc: &Scenario, profiles: &[Profile], done: &[(usize, Value)]) -> Value {
    let mut rows = Vec::new();
    let mut points = Vec::new();
    for (pi, p) in profiles.iter().enumerate() {
        let mut failed = 0;
        let mut incomplete = 0;
        // Every figure of the profile's measured tests, one value per trial; the profile's
        // row and its point are both drawn from this.
        let mut figures: BTreeMap<String, Vec<f64>> = BTreeMap::new();
        let mut files = Vec::new();
        let mut runs = 0u64;
        let mut done_here: Vec<&Value> = done
            .iter()
            .filter(|(i, _)| *i == pi)
            .map(|(_, v)| v)
            .collect();
        done_here.sort_by_key(|v| v.get("trial").and_then(Value::as_u64));
        for v in done_here {
            runs += 1;
            if let Some(n) = v.get("trial").and_then(Value::as_u64) {
                files.push(format!("trials/{n:04}-{}.json", p.name));
            }
            let tests = v.get("tests").and_then(Value::as_array);
            if v.get("error").is_some() || tests.is_none() {
                failed += 1;
                continue;
            }
            for t in tests.into_iter().flatten() {
                if t.get("measured") != Some(&json!(true)) {
                    continue;
                }
                let result = t.get("result").filter(|r| r.is_object());
                let Some(g) = result.and_then(goodput_bps) else {
                    failed += 1;
                    continue;
                };
                figures.entry("goodput_bps".into()).or_default().push(g);
                if let Some(r) =
                    result.and_then(|r| serde_json::from_value::<Results>(r.clone()).ok())
                {
                    for (k, x) in experiment::figures(&r) {
                        figures.entry(k.into()).or_default().push(x);
                    }
                }
                if t.get("error").is_some_and(|e| !e.is_null()) {
                    incomplete += 1;
                }
                if let Some(r) = result
                    .and_then(|r| r.pointer("/end/tcp/retransmits"))
                    .and_then(Value::as_f64)
                {
                    figures.entry("retransmits".into()).or_default().push(r);
                }
            }
        }
        let values = |k: &str, per: f64| -> Vec<f64> {
            figures
                .get(k)
                .map(|v| v.iter().map(|x| x / per).collect())
                .unwrap_or_default()
        };
        let trials = figures.get("goodput_bps").map_or(0, Vec::len);
        rows.push(json!({
            "profile": p.name,
            "settings": p.sysctls().into_iter().map(|(k, v)| (k.replace('/', "."), v)).collect::<BTreeMap<_, _>>(),
            "trials": trials,
            "failed": failed,
            "incomplete": incomplete,
            "goodput_kbps": wirebench_stats::summarize(&values("goodput_bps", 1e3)),
            "received_kbps": wirebench_stats::summarize(&values("received_bps", 1e3)),
            "retransmits": wirebench_stats::summarize(&values("retransmits", 1.0)),
        }));
        points.push(PointSummary {
            point: BTreeMap::from([("profile".to_string(), p.name.clone())]),
            offered_bps: None,
            trials: runs,
            failed: runs.saturating_sub(trials as u64),
            figures: figures
                .into_iter()
                .filter_map(|(k, vs)| wirebench_stats::summarize(&vs).map(|s| (k, s)))
                .collect(),
            files,
        });
    }
    json!({
        "scenario": sc.name,
        "description": sc.description,
        "profiles": rows,
        "points": points,
        "knees": [],
    })
}

fn table(summary: &Value) -> String {
    let mut s = format!(
        "{:<16} {:>6} {:>10} {:>10} {:>10} {:>9} {:>12}\n",
        "profile", "trials", "min kbit/s", "mean", "max", "SD", "retrans mean"
    );
    for r in summary["profiles"].as_array().into_iter().flatten() {
        let g = &r["goodput_kbps"];
        let f = |k: &str| {
            g.get(k)
                .and_then(Value::as_f64)
                .map_or("-".into(), |v| format!("{v:.1}"))
        };
        let rt = r["retransmits"]
            .get("mean")
            .and_then(Value::as_f64)
            .map_or("-".into(), |v| format!("{v:.1}"));
        s += &format!(
            "{:<16} {:>6} {:>10} {:>10} {:>10} {:>9} {:>12}\n",
            r["profile"].as_str().unwrap_or("?"),
            r["trials"],
            f("min"),
            f("mean"),
            f("max"),
            f("stddev"),
            rt
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(duration: f64, intervals: &[(f64, f64, u64)]) -> Value {
        json!({
            "test": {"duration_s": duration},
            "end": {"received_bps": 1.0},
            "intervals": intervals.iter().map(|(s, e, b)| json!({
                "start_s": s, "end_s": e, "received_bytes": b
            })).collect::<Vec<_>>(),
        })
    }

    #[test]
    fn goodput_counts_what_was_read_within_the_test_only() {
        // 3 s of 1000 bytes each, then a drain the window leaves out.
        let r = result(
            3.0,
            &[
                (0.0, 1.0, 1000),
                (1.0, 2.0, 1000),
                (2.0, 3.0, 1000),
                (3.0, 4.0, 5000),
            ],
        );
        assert_eq!(goodput_bps(&r), Some(8000.0));
        // A window that ends inside an interval takes its share.
        let r = result(2.5, &[(0.0, 1.0, 1000), (1.0, 2.0, 1000), (2.0, 3.0, 1000)]);
        assert_eq!(goodput_bps(&r), Some(2500.0 * 8.0 / 2.5));
        // A test by size has no window: the whole transfer's rate.
        let r = result(0.0, &[(0.0, 1.0, 1000)]);
        assert_eq!(goodput_bps(&r), Some(1.0));
    }
}
