//! `wirebench lab`: parse the flags, call the lab crate, print.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{anyhow, Context};
use wirebench_lab::pair::{self, ClientCommand, PairRun};
use wirebench_lab::run::{run_scenario, Progress, ScenarioRun};
use wirebench_lab::scenario::Scenario;
use wirebench_lab::testbed;
use wirebench_lab::topo::Topology;
use wirebench_report::export::link_log::LinkLogCsv;
use wirebench_report::Exporter;

use crate::cli::{LabAction, LabArgs, LinkArgs, ScenarioArgs};
use crate::Failure;

/// A library error as a failure: usage (exit 2) or runtime (exit 1), as the error says.
fn failure(e: impl std::error::Error + Send + Sync + 'static, usage: bool) -> Failure {
    if usage {
        Failure::Usage(e.to_string())
    } else {
        Failure::Runtime(anyhow!(e))
    }
}

fn exe() -> Result<PathBuf, Failure> {
    Ok(std::env::current_exe().context("finding the wirebench executable")?)
}

/// `wirebench lab ...`.
pub fn lab(args: &LabArgs) -> Result<(), Failure> {
    match &args.action {
        Some(LabAction::Up {
            name,
            scenario,
            link,
        }) => up(name, scenario.as_ref(), link),
        Some(LabAction::Exec {
            name,
            host,
            command,
        }) => {
            let e = testbed::exec(name, host, command);
            let usage = e.is_usage();
            Err(failure(e, usage))
        }
        Some(LabAction::Down { name }) => {
            let ended = testbed::down(name).map_err(|e| {
                let u = e.is_usage();
                failure(e, u)
            })?;
            if ended > 0 {
                println!("testbed {name} is down (ended {ended} program(s) still running in it)");
            } else {
                println!("testbed {name} is down");
            }
            Ok(())
        }
        Some(LabAction::List) => {
            let beds = testbed::list().map_err(|e| failure(e, false))?;
            for b in beds {
                let hosts: Vec<String> = b
                    .hosts
                    .iter()
                    .map(|(n, a)| format!("{n}={}", a.as_deref().unwrap_or("-")))
                    .collect();
                println!("{}\tpid {}\t{}", b.name, b.pid, hosts.join(" "));
            }
            Ok(())
        }
        Some(LabAction::Hold { name, topology }) => testbed::hold(name, topology).map_err(|e| {
            let u = e.is_usage();
            failure(e, u)
        }),
        Some(LabAction::Scenario(s)) => scenario(s),
        None => pair_run(args),
    }
}

fn load(file: &std::path::Path) -> Result<Scenario, Failure> {
    Scenario::load(file).map_err(|e| failure(e, true))
}

fn up(name: &str, scenario: Option<&PathBuf>, link: &LinkArgs) -> Result<(), Failure> {
    let topo = match scenario {
        Some(file) => load(file)?.topology().map_err(|e| failure(e, true))?,
        None => {
            let (up, down) = link.props().configs().map_err(|e| failure(e, true))?;
            Topology::pair(up, down)
        }
    };
    let bed = testbed::up(name, &topo, &exe()?).map_err(|e| {
        let u = e.is_usage();
        failure(e, u)
    })?;
    println!("testbed {name} is up (holder pid {})", bed.pid);
    for (host, addr) in &bed.hosts {
        println!("  {:<10} {}", host, addr.as_deref().unwrap_or(""));
    }
    println!(
        "run in it: wirebench lab exec {name} HOST -- COMMAND; end it: wirebench lab down {name}"
    );
    Ok(())
}

fn pair_run(args: &LabArgs) -> Result<(), Failure> {
    let link = args.link.props();
    link.configs().map_err(|e| failure(e, true))?;
    let (mode, rest) = match args.command.split_first() {
        Some((m, rest)) if m == "run" || m == "exec" => (m.as_str(), rest),
        _ => {
            return Err(Failure::Usage(
                "lab needs a command after --: `run [run options]` or `exec -- COMMAND`".into(),
            ))
        }
    };
    let rest = match rest.split_first() {
        Some((dd, r)) if dd == "--" => r,
        _ => rest,
    };
    if mode == "exec" && rest.is_empty() {
        return Err(Failure::Usage("lab -- exec needs a COMMAND".into()));
    }
    if mode == "run" && args.serve.is_some() {
        return Err(Failure::Usage(
            "--serve is for `exec`; `run` uses wirebench serve".into(),
        ));
    }
    let link_log_ns = match &args.link_log {
        None => 0,
        Some(_) => pair::log_interval_ns(&args.link_log_interval).map_err(|e| failure(e, true))?,
    };
    // Made before the lab, so that a path it cannot write is said before any test runs.
    let mut log_file = match &args.link_log {
        None => None,
        Some(p) => Some(std::io::BufWriter::new(
            std::fs::File::create(p).with_context(|| format!("creating {}", p.display()))?,
        )),
    };
    let json = mode == "run" && rest.iter().any(|a| a == "--json" || a == "-J");
    let run = PairRun {
        link: link.clone(),
        client: if mode == "run" {
            ClientCommand::Run(rest.to_vec())
        } else {
            ClientCommand::Exec(rest.to_vec())
        },
        serve: args.serve.clone(),
        link_log_ns,
        exe: exe()?,
    };
    let done = pair::run_pair(&run).map_err(|e| {
        let u = e.is_usage();
        failure(e, u)
    })?;
    if let (Some(w), Some(p)) = (&mut log_file, &args.link_log) {
        LinkLogCsv
            .export(&done.log, w)
            .with_context(|| format!("writing {}", p.display()))?;
    }
    if json {
        let text = pair::with_lab(&done.stdout, &link, &done.reports)
            .context("reading the test's JSON")?;
        let mut stdout = std::io::stdout().lock();
        writeln!(stdout, "{text}").context("writing JSON")?;
    } else {
        eprint!("{}", pair::report_lines(&done.reports));
    }
    if done.status.success() {
        Ok(())
    } else {
        Err(Failure::Runtime(anyhow!(
            "the command in the client host failed ({})",
            done.status
        )))
    }
}

fn scenario(args: &ScenarioArgs) -> Result<(), Failure> {
    let sc = load(&args.file)?;
    if args.resume && args.out.is_none() {
        return Err(Failure::Usage(
            "--resume needs --out DIR: the directory of the run to go on with".into(),
        ));
    }
    let link_log_ns = match &args.link_log_interval {
        None => 0,
        Some(t) => pair::log_interval_ns(t).map_err(|e| failure(e, true))?,
    };
    let out = args.out.clone().unwrap_or_else(|| {
        PathBuf::from("wirebench-results").join(format!(
            "lab-{}-{}",
            sc.name,
            crate::sweep::timestamp()
        ))
    });
    let run = ScenarioRun {
        scenario: sc,
        profiles: args.profiles.clone(),
        trials: args.trials,
        parallel: args.parallel,
        time_scale: args.time_scale,
        out: out.clone(),
        resume: args.resume,
        link_log_ns,
        exe: exe()?,
        command: std::env::args().collect(),
        machine: crate::sweep::machine(),
    };
    let outcome = run_scenario(&run, &print_progress).map_err(|e| {
        let u = e.is_usage();
        failure(e, u)
    })?;
    print!("{}", outcome.summary.table());
    if outcome.failed > 0 {
        return Err(Failure::Runtime(anyhow!(
            "{} of {} trials failed; see {}/trials",
            outcome.failed,
            outcome.total,
            out.display()
        )));
    }
    Ok(())
}

fn print_progress(p: Progress<'_>) {
    match p {
        Progress::Start {
            scenario,
            profiles,
            trials,
            parallel,
            out,
            already,
        } => eprintln!(
            "scenario {scenario}: {profiles} profiles × {trials} trials, {parallel} at once, into {}{}",
            out.display(),
            if already == 0 {
                String::new()
            } else {
                format!(" ({already} already there)")
            }
        ),
        Progress::TrialDone {
            done,
            total,
            profile,
            trial,
        } => eprintln!("trial {done}/{total} done ({profile} #{trial})"),
        Progress::WriteFailed { path, error } => eprintln!("writing {}: {error}", path.display()),
    }
}
