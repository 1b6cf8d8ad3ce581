//! `wirebench lab`: parse the flags, call the lab crate, print.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, Context};
use wirebench_lab::pair::{self, ClientCommand, PairRun};
use wirebench_lab::run::{run_scenario, Progress, ScenarioRun};
use wirebench_lab::scenario::Scenario;
use wirebench_lab::topo::Topology;
use wirebench_lab::{testbed, Usage};
use wirebench_report::export::link_log::LinkLogCsv;
use wirebench_report::Exporter;

use crate::cli::{LabAction, LabArgs, LinkArgs, ScenarioArgs};
use crate::Failure;

/// The exit code of a scenario run that finished with failures: a trial that did not run,
/// or a measured test without results (`sweep` uses it for its failed trials too).
const SOME_TRIALS_FAILED: u8 = 3;

/// A lab error as a failure: exit 2 when the user's input is at fault, else 1.
fn fail(e: impl Usage) -> Failure {
    if e.is_usage() {
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
        None => pair_run(args),
        Some(LabAction::Up {
            name,
            scenario,
            link,
        }) => up(name, scenario.as_deref(), link),
        Some(LabAction::Exec {
            name,
            host,
            command,
        }) => Err(fail(testbed::exec(name, host, command))),
        Some(LabAction::Down { name }) => {
            match testbed::down(name).map_err(fail)? {
                0 => println!("testbed {name} is down"),
                n => println!("testbed {name} is down (ended {n} program(s) still running in it)"),
            }
            Ok(())
        }
        Some(LabAction::List) => {
            for b in testbed::list().map_err(fail)? {
                let hosts: Vec<String> = b
                    .hosts
                    .iter()
                    .map(|(n, a)| format!("{n}={}", a.as_deref().unwrap_or("-")))
                    .collect();
                println!("{}\tpid {}\t{}", b.name, b.pid, hosts.join(" "));
            }
            Ok(())
        }
        Some(LabAction::Hold { name, topology }) => testbed::hold(name, topology).map_err(fail),
        Some(LabAction::Scenario(s)) => scenario(s),
    }
}

fn up(name: &str, scenario: Option<&Path>, link: &LinkArgs) -> Result<(), Failure> {
    let topo = match scenario {
        Some(file) => Scenario::load(file)
            .and_then(|s| s.topology())
            .map_err(fail)?,
        None => {
            let (up, down) = link.props().configs().map_err(fail)?;
            Topology {
                no_offload: link.no_offload,
                ..Topology::pair(up, down)
            }
        }
    };
    let bed = testbed::up(name, &topo, &exe()?).map_err(fail)?;
    println!("testbed {name} is up (holder pid {})", bed.pid);
    for (host, addr) in &bed.hosts {
        println!("  {:<10} {}", host, addr.as_deref().unwrap_or(""));
    }
    println!(
        "run in it: wirebench lab exec {name} HOST -- COMMAND; end it: wirebench lab down {name}"
    );
    Ok(())
}

/// `lab [LINK] -- run ...` or `lab [LINK] -- exec [--] COMMAND...`.
fn pair_run(args: &LabArgs) -> Result<(), Failure> {
    let link = args.link.props();
    link.configs().map_err(fail)?;
    // A missing or malformed trace file is a usage error, found before a namespace is made.
    link.traces().map_err(fail)?;
    let (mode, rest) = match args.command.split_first() {
        Some((m, rest)) if m == "run" || m == "exec" => (m.as_str(), rest),
        _ => {
            return Err(Failure::Usage(
                "lab needs a command after --: `run [run options]` or `exec -- COMMAND`".into(),
            ))
        }
    };
    let rest = match rest.split_first() {
        Some((dd, r)) if dd == "--" => r.to_vec(),
        _ => rest.to_vec(),
    };
    if mode == "exec" && rest.is_empty() {
        return Err(Failure::Usage("lab -- exec needs a COMMAND".into()));
    }
    if mode == "run" && args.serve.is_some() {
        return Err(Failure::Usage(
            "--serve is for `exec`; `run` uses wirebench serve".into(),
        ));
    }
    if let Some(serve) = &args.serve {
        let mut words = serve.split_whitespace();
        let wirebench_serve = words
            .next()
            .is_some_and(|w| std::path::Path::new(w).ends_with("wirebench"))
            && words.next() == Some("serve");
        if args.server_stack != wirebench_lab::user_stack::Stack::Kernel && !wirebench_serve {
            return Err(Failure::Usage(
                "--server-stack gives wirebench serve its stack: --serve must be `wirebench serve [options]`, or drop it"
                    .into(),
            ));
        }
    }
    let json = mode == "run" && pair::wants_json(&rest);
    let link_log_ns = match &args.link_log {
        None => 0,
        Some(_) => pair::log_interval_ns(&args.link_log_interval).map_err(fail)?,
    };
    // Made before the lab, so that a path it cannot write is said before any test runs.
    // Written whole at the end: a run that fails leaves an earlier log of that name intact.
    let log_file = match &args.link_log {
        None => None,
        Some(p) => Some({
            wirebench_report::output::clean_temps(super::report::output_dir(p));
            wirebench_report::output::Pending::create(p).map_err(anyhow::Error::from)?
        }),
    };
    let run = PairRun {
        link: link.clone(),
        client: match mode {
            "run" => ClientCommand::Run(rest),
            _ => ClientCommand::Exec(rest),
        },
        serve: args.serve.clone(),
        link_log_ns,
        exe: exe()?,
        client_stack: args.stack,
        server_stack: args.server_stack,
        no_offload: args.link.no_offload,
    };
    let done = pair::run_pair(&run).map_err(fail)?;
    if let Some(pending) = log_file {
        pending
            .finish(|w| LinkLogCsv.export(&done.log, w))
            .map_err(anyhow::Error::from)?;
    }
    if json {
        let text = pair::with_lab(&done.stdout, &link, &done.reports)
            .context("reading the test's JSON")?;
        writeln!(std::io::stdout().lock(), "{text}").context("writing JSON")?;
    } else {
        eprint!("{}", pair::report_lines(&done.reports));
    }
    if !done.status.success() {
        return Err(Failure::Runtime(anyhow!(
            "the command in the client host failed ({})",
            done.status
        )));
    }
    Ok(())
}

fn scenario(args: &ScenarioArgs) -> Result<(), Failure> {
    let sc = Scenario::load(&args.file).map_err(fail)?;
    if args.resume && args.out.is_none() {
        return Err(Failure::Usage(
            "--resume needs --out DIR: the directory of the run to go on with".into(),
        ));
    }
    let link_log_ns = match &args.link_log_interval {
        None => 0,
        Some(t) => pair::log_interval_ns(t).map_err(fail)?,
    };
    let out = args.out.clone().unwrap_or_else(|| {
        let name = format!("lab-{}-{}", sc.name, wirebench_report::meta::timestamp());
        PathBuf::from("wirebench-results").join(name)
    });
    let run = ScenarioRun {
        scenario: sc,
        profiles: args.profiles.clone(),
        trials: args.trials,
        parallel: args.parallel,
        time_scale: args.time_scale,
        out,
        resume: args.resume,
        shard: match args.shard.as_deref() {
            None => wirebench_report::experiment::Shard::WHOLE,
            Some(s) => wirebench_report::experiment::Shard::parse(s)
                .map_err(|e| Failure::Usage(e.to_string()))?,
        },
        link_log_ns,
        exe: exe()?,
        command: std::env::args().collect(),
        machine: wirebench_report::meta::Machine::this(),
    };
    let outcome = run_scenario(&run, &print_progress).map_err(fail)?;
    print!("{}", outcome.table());
    if outcome.unsaved > 0 {
        return Err(Failure::Runtime(anyhow!(
            "{} of {} trial files could not be written (said above); the summary in {} \
             lacks them",
            outcome.unsaved,
            outcome.total,
            run.out.display()
        )));
    }
    if outcome.failed > 0 {
        // Its own code, as sweep's: the run finished and saved what it measured, but not
        // everything it was asked to measure.
        return Err(Failure::Code(
            SOME_TRIALS_FAILED,
            format!(
                "error: {} failure(s) in {} trials (trials that did not run, measured tests \
                 without results); see {}/trials",
                outcome.failed,
                outcome.total,
                run.out.display()
            ),
        ));
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
        } => {
            let resumed = match already {
                0 => String::new(),
                n => format!(" ({n} already there)"),
            };
            eprintln!(
                "scenario {scenario}: {profiles} profiles × {trials} trials, {parallel} at once, \
                 into {}{resumed}",
                out.display()
            );
        }
        Progress::TrialDone {
            done,
            total,
            profile,
            trial,
        } => eprintln!("trial {done}/{total} done ({profile} #{trial})"),
        Progress::WriteFailed { path, error } => eprintln!("writing {}: {error}", path.display()),
        Progress::Incomplete { saved, total } => eprintln!(
            "{saved} of {total} trials saved so far: the summary is partial until every shard \
             is done (then: lab scenario FILE --out DIR --resume)"
        ),
    }
}
