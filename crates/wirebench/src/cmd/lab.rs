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
            let down = testbed::down(name).map_err(fail)?;
            match down.ended {
                0 => println!("testbed {name} is down"),
                n => println!("testbed {name} is down (ended {n} program(s) still running in it)"),
            }
            // What its links did while it was up, as `lab -- run` says of its link.
            eprint!("{}", pair::report_lines(&down.links));
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
        Some((other, _)) => {
            return Err(Failure::Usage(format!(
                "lab -- {other}: after -- comes `run [run options]` or `exec -- COMMAND` (e.g. lab -- exec -- {other} ...)",
                other = wirebench_report::text::printable(other)
            )))
        }
        None => {
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
    let rest = match mode {
        "run" => with_link_drain(rest, &link).map_err(fail)?,
        _ => rest,
    };
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
    if json && done.interrupted.is_some() && done.stdout.trim().is_empty() {
        // Ended at once by a second signal: no document to add to; the link's report as text.
        eprint!("{}", pair::report_lines(&done.reports));
    } else if json {
        let text = pair::with_lab(&done.stdout, &link, &done.reports)
            .context("reading the test's JSON")?;
        writeln!(std::io::stdout().lock(), "{text}").context("writing JSON")?;
    } else {
        eprint!("{}", pair::report_lines(&done.reports));
    }
    if let Some(sig) = done.interrupted {
        // The command stopped on the signal the lab passed on: the lab ends as it would
        // have, 128 + the signal (130 for Ctrl-C), its report and link log written.
        // `run` said so itself ("interrupted by SIGINT: the partial results are above").
        let code = u8::try_from(128 + sig).unwrap_or(u8::MAX);
        return Err(Failure::Code(code, String::new()));
    }
    if !done.status.success() {
        return Err(Failure::Runtime(anyhow!(
            "the command in the client host failed ({})",
            done.status
        )));
    }
    Ok(())
}

/// The receiver's wait for data in flight when `run` does not give one (`--drain`, 1 s).
const DEFAULT_DRAIN_NS: u64 = 1_000_000_000;
/// The longest `--drain` a test may ask.
const MAX_DRAIN_NS: u64 = 60_000_000_000;
/// A TCP socket's largest send buffer where `/proc` does not say (Linux's `tcp_wmem` max).
const TCP_WMEM_MAX: u64 = 4 << 20;

/// `run`'s arguments, with `--drain` sized to the link when they do not give it, for a TCP
/// stream test: the longest its senders' buffers take to cross the link, at its rate (its
/// trace's slowest stretch), delay and jitter included, if that is more than the default
/// 1 s (60 s at most). A TCP sender's buffer (`-w`, or the kernel's largest, `tcp_wmem`)
/// holds every byte not yet acknowledged, and its notice that it is done passes them on
/// the control connection: through a slow link they arrive seconds later, and a drain of
/// 1 s would end the test "incomplete" with its data still arriving. (UDP's datagrams wait
/// in the link's queue with that notice behind them: 1 s is enough.) Arguments `run`
/// cannot read are left as they are, for it to say so.
fn with_link_drain(
    args: Vec<String>,
    link: &wirebench_lab::link_options::LinkProps,
) -> Result<Vec<String>, wirebench_lab::link_options::PropsError> {
    use wirebench_proto::spec::{Direction, Mechanism, Protocol};
    if args
        .iter()
        .any(|a| a == "--drain" || a.starts_with("--drain="))
    {
        return Ok(args);
    }
    let Ok(cmd) = parse_run(&[], &args) else {
        return Ok(args);
    };
    let spec = match cmd.run.mode {
        crate::cli::ModeArg::Rrul => super::rrul::plan(&cmd.run).map(|p| p.load),
        _ => cmd.run.spec(),
    };
    let Ok(spec) = spec else { return Ok(args) };
    if spec.mechanism != Mechanism::Stream || spec.protocol != Protocol::Tcp {
        return Ok(args);
    }
    let (up, down) = link.configs()?;
    // The kernel doubles what SO_SNDBUF asks, for its own bookkeeping.
    let send_buffer = spec
        .socket_buffer_bytes
        .map_or_else(tcp_wmem_max, |b| b.saturating_mul(2));
    // The buffer holds payload; the link carries it in segments of 1448 bytes with 52 of
    // headers each. A quarter to spare on top: the drain is only the most the receiver
    // waits (it ends as soon as the last byte is in), and a loaded host's sender hands the
    // kernel its last bytes late (CI once ran out of an exact 8 s by a few hundred ms).
    let payload = u64::from(spec.streams).saturating_mul(send_buffer);
    let buffers = payload.saturating_mul(1500) / 1448 * 5 / 4;
    let on_its_way = |cfg: &wirebench_lab::link::LinkConfig| cfg.carry_ns(buffers);
    // --both-directions runs the test, then the same reversed: both links carry it.
    let ns = match spec.direction {
        _ if cmd.run.both_directions => on_its_way(&up).max(on_its_way(&down)),
        Direction::Forward => on_its_way(&up),
        Direction::Reverse => on_its_way(&down),
        Direction::Bidir => on_its_way(&up).max(on_its_way(&down)),
    };
    if ns <= DEFAULT_DRAIN_NS {
        return Ok(args);
    }
    let ms = ns.min(MAX_DRAIN_NS).div_ceil(1_000_000);
    Ok(["--drain".to_owned(), format!("{ms}ms")]
        .into_iter()
        .chain(args)
        .collect())
}

/// `args` (after `extra`) as `wirebench run HOST` reads them; the first line of what it
/// says of them if it cannot.
fn parse_run(extra: &[&str], args: &[String]) -> Result<crate::cli::RunCmd, String> {
    use clap::Parser;
    let argv = ["wirebench", "run", "host"]
        .into_iter()
        .chain(extra.iter().copied())
        .map(String::from)
        .chain(args.iter().cloned());
    match crate::cli::Cli::try_parse_from(argv) {
        Ok(crate::cli::Cli {
            command: crate::cli::Command::Run(cmd),
            ..
        }) => Ok(cmd),
        Ok(_) => Err("not a run".into()),
        Err(e) => {
            let why = e.to_string();
            let line = why.lines().next().unwrap_or("");
            Err(line.trim_start_matches("error: ").to_owned())
        }
    }
}

/// The kernel's largest TCP send buffer (the last of `net.ipv4.tcp_wmem`), which the lab's
/// hosts start from.
fn tcp_wmem_max() -> u64 {
    std::fs::read_to_string("/proc/sys/net/ipv4/tcp_wmem")
        .ok()
        .and_then(|t| t.split_whitespace().nth(2)?.parse().ok())
        .unwrap_or(TCP_WMEM_MAX)
}

/// A scenario's tests, checked before any trial runs: each one's args are `run`'s (a bad
/// flag is found now, not once per trial), and a file they write (`--packet-log`, `--save`)
/// stays under the directory the lab runs in. The lab runs them as root: a scenario from
/// someone else must not write to `/etc`.
fn check_tests(sc: &Scenario, file: &Path, base: &Path) -> Result<(), Failure> {
    for (i, test) in sc.tests.iter().enumerate() {
        let what = || format!("{}: test {} ({})", file.display(), i + 1, test.label());
        // As a trial runs it: with --json, which the trial reads.
        let cmd = parse_run(&["--json"], &test.args)
            .map_err(|why| Failure::Usage(format!("{}: {why}", what())))?;
        for (flag, path) in [
            ("--packet-log", &cmd.run.packet_log),
            ("--save", &cmd.run.save),
        ] {
            let Some(path) = path else { continue };
            // Nor through a link already there (`logs -> /etc`, `p.bin -> /etc/passwd`).
            let through_link = path
                .ancestors()
                .filter(|a| !a.as_os_str().is_empty())
                .any(|a| {
                    std::fs::symlink_metadata(base.join(a))
                        .is_ok_and(|m| m.file_type().is_symlink())
                });
            let escapes = path.is_absolute()
                || through_link
                || path
                    .components()
                    .any(|c| matches!(c, std::path::Component::ParentDir));
            if escapes {
                return Err(Failure::Usage(format!(
                    "{}: {flag} {}: a scenario's tests write only under the directory the lab runs in (a relative path, without '..' or a symbolic link)",
                    what(),
                    path.display()
                )));
            }
        }
    }
    Ok(())
}

fn scenario(args: &ScenarioArgs) -> Result<(), Failure> {
    let sc = Scenario::load(&args.file).map_err(fail)?;
    // Relative paths are the lab's working directory's.
    check_tests(&sc, &args.file, Path::new(""))?;
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
        add_profiles: args.add_profiles,
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

use wirebench_report::text::printable;

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
            // Names from the file reach the terminal escaped (control characters, bidi
            // overrides): a name cannot rewrite the line it is shown in.
            eprintln!(
                "scenario {}: {profiles} profiles × {trials} trials, {parallel} at once, \
                 into {}{resumed}",
                printable(scenario),
                printable(&out.display().to_string())
            );
        }
        Progress::TrialDone {
            done,
            total,
            profile,
            trial,
        } => eprintln!(
            "trial {done}/{total} done ({} #{trial})",
            printable(profile)
        ),
        Progress::WriteFailed { path, error } => eprintln!(
            "writing {}: {error}",
            printable(&path.display().to_string())
        ),
        Progress::Incomplete { saved, total } => eprintln!(
            "{saved} of {total} trials saved so far: the summary is partial until every shard \
             is done (then: lab scenario FILE --out DIR --resume)"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wirebench_lab::link_options::LinkProps;

    fn drain_of(link: &LinkProps, args: &[&str]) -> Vec<String> {
        let args = args.iter().map(|a| (*a).to_owned()).collect();
        with_link_drain(args, link).expect("a valid link")
    }

    fn rate(r: &str) -> LinkProps {
        LinkProps {
            rate: Some(r.into()),
            ..LinkProps::default()
        }
    }

    #[test]
    fn a_tcp_stream_through_a_slow_link_waits_for_its_send_buffer() {
        // `-w 1M`: the kernel grants 2 MB, 8.29 s of segments at 2 Mbit/s, a quarter to
        // spare, and 20 ms of delay.
        let slow = LinkProps {
            delay: Some("20ms".into()),
            ..rate("2M")
        };
        assert_eq!(
            drain_of(&slow, &["-t", "5", "-w", "1M"]),
            ["--drain", "10380ms", "-t", "5", "-w", "1M"]
        );
        // Two streams, two buffers.
        assert_eq!(drain_of(&slow, &["-w", "1M", "-P", "2"])[1], "20739ms");
        // At most the 60 s a test may ask.
        assert_eq!(drain_of(&rate("100k"), &["-w", "1M"])[1], "60000ms");
    }

    #[test]
    fn the_drain_follows_the_direction_the_data_takes() {
        let asymmetric = LinkProps {
            rate_down: Some("2M".into()),
            ..rate("1G")
        };
        let fast = ["-w", "1M"];
        assert_eq!(
            drain_of(&asymmetric, &fast),
            fast,
            "up at 1 Gbit/s: 1 s is enough"
        );
        assert_eq!(drain_of(&asymmetric, &["-R", "-w", "1M"])[1], "10360ms");
        assert_eq!(
            drain_of(&asymmetric, &["--bidir", "-w", "1M"])[1],
            "10360ms"
        );
        let both = ["--both-directions", "-w", "1M"];
        assert_eq!(
            drain_of(&asymmetric, &both)[1],
            "10360ms",
            "its second pass comes down"
        );
        // rrul's load: 4 streams each way.
        assert_eq!(
            drain_of(&asymmetric, &["--mode", "rrul", "-w", "1M"])[1],
            "41437ms"
        );
    }

    fn scenario_with_args(args: &str) -> Scenario {
        let text = format!(
            "name = \"s\"\n[[link]]\na = \"h1\"\nb = \"h2\"\n\n[[profile]]\nname = \"p\"\n\n[[test]]\nfrom = \"h1\"\nto = \"h2\"\nargs = {args}\n"
        );
        Scenario::parse(&text).expect("a scenario")
    }

    #[test]
    fn a_scenarios_tests_are_checked_before_any_trial_runs() {
        let file = Path::new("s.toml");
        let check = |args: &str| check_tests(&scenario_with_args(args), file, Path::new(""));
        assert!(check(r#"["-t", "2", "-u", "-b", "10M"]"#).is_ok());
        assert!(check(r#"["-u", "--packet-log", "logs/p.bin"]"#).is_ok());
        for (args, says) in [
            (r#"["--bogus"]"#, "unexpected argument '--bogus'"),
            (r#"["--json"]"#, "--json"),
            (
                r#"["-u", "--packet-log", "/etc/passwd"]"#,
                "--packet-log /etc/passwd",
            ),
            (r#"["-u", "--packet-log", "../up.bin"]"#, "without '..'"),
        ] {
            let Err(Failure::Usage(e)) = check(args) else {
                panic!("{args}: taken");
            };
            assert!(e.starts_with("s.toml: test 1 (h1-h2): "), "{e}");
            assert!(e.contains(says) && !e.contains('\n'), "{args}: {e}");
        }
        // Nor through a symbolic link already there.
        let dir = std::env::temp_dir().join(format!("wb-check-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a directory");
        let _ = std::fs::remove_file(dir.join("logs"));
        std::os::unix::fs::symlink("/etc", dir.join("logs")).expect("a link");
        let sc = scenario_with_args(r#"["-u", "--packet-log", "logs/p.bin"]"#);
        let got = check_tests(&sc, file, &dir);
        let _ = std::fs::remove_dir_all(&dir);
        let Err(Failure::Usage(e)) = got else {
            panic!("a link: taken");
        };
        assert!(e.contains("symbolic link"), "{e}");
    }

    #[test]
    fn the_rate_of_each_direction_is_a_flag() {
        use clap::Parser;
        let argv = [
            "wirebench",
            "lab",
            "--rate-up",
            "1M",
            "--rate-down",
            "5M",
            "--",
            "run",
        ];
        let crate::cli::Command::Lab(args) = crate::cli::Cli::try_parse_from(argv)
            .expect("flags")
            .command
        else {
            panic!("not lab");
        };
        let (up, down) = args.link.props().configs().expect("a link");
        assert_eq!((up.rate_bps, down.rate_bps), (1_000_000, 5_000_000));
    }

    #[test]
    fn a_drain_asked_udp_other_mechanisms_and_bad_arguments_are_left_alone() {
        let slow = rate("2M");
        for args in [
            &["--drain", "2s"][..],
            &["--drain=2s"],
            &["-u", "-b", "3M"],
            &["--mode", "rr"],
            &["--mode", "stop-and-wait", "-n", "1M"],
            &["--no-such-flag"],
        ] {
            assert_eq!(drain_of(&slow, args), args, "{args:?}");
        }
    }
}
