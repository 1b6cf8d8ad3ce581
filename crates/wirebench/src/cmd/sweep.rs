//! `wirebench sweep`: the plan, the directory, what is left to measure and the trial loop are
//! the report crate's (`experiment::sweep`); this file says what `run`'s flags mean at one
//! point, runs one trial with the engine (one test, or an rrul run), shows the progress, and
//! saves the shard record and (one process) the summary, by the same step as `wirebench merge`.

use std::io;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use clap::ValueEnum;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde::Serialize;
use wirebench_engine::rrul::{run_rrul, RrulError, RrulPlan};
use wirebench_engine::{ClientConfig, EngineError, Psk, Watch};
use wirebench_proto::error_kind::ErrorKind;
use wirebench_proto::results::Results;
use wirebench_proto::spec::TestSpec;
use wirebench_proto::units::{parse_duration, parse_rate, parse_size};
use wirebench_report::experiment::merge::{point_label, IPERF3_DIR};
use wirebench_report::experiment::shard::hostname;
use wirebench_report::experiment::sweep::{
    self as experiment, Amount, Experiment, Progress, SweepFlags, BUSY_ATTEMPTS, BUSY_RETRY,
};
use wirebench_report::experiment::{Param, Point, ReplacedTrial, ShardRecord, Todo, Unmeasured};
use wirebench_report::export::{iperf3, Iperf3Client};
use wirebench_report::meta::Machine;
use wirebench_report::Json;

use super::iperf3_record::Iperf3Record;
use super::merge::save;

use super::serve::server_for;
use crate::cli::{ModeArg, RunArgs, SweepArgs};
use crate::Failure;
use wirebench_engine::quic::ServerCheck;

/// A watcher that shows nothing: the sweep has its own progress bar.
struct Silent;
impl Watch for Silent {}

/// What one point runs: one test, or an rrul run (three tests at once). The manifest records
/// it as it is: a test's spec, or the rrul plan with its three.
#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
// One per point, made once per trial: the few hundred bytes of a spec are never copied in bulk.
#[allow(clippy::large_enum_variant)]
enum PointTest {
    /// One test.
    Test(TestSpec),
    /// `--mode rrul`.
    Rrul(Box<RrulPlan>),
}

/// Whether a trial that failed with `e` is worth asking again: the server was busy (another
/// client, or the last trial's session still ending on a remote server this process cannot
/// watch). The one place that decides it.
fn worth_retrying(e: &EngineError) -> bool {
    e.kind().try_again_later()
}

/// Runs the experiment, or this process's shard of it.
pub fn sweep(args: &SweepArgs) -> Result<(), Failure> {
    let base = &args.run;
    let usage = |e: experiment::PlanError| Failure::Usage(e.to_string());
    experiment::refuse(&[
        (base.json, "--json"),
        (base.format.is_some(), "--format"),
        (base.packet_log.is_some(), "--packet-log"),
        (base.both_directions, "--both-directions"),
        (base.file.is_some(), "--file"),
    ])
    .map_err(usage)?;
    not_a_perf_server(base)?;
    let flags = SweepFlags {
        vary: &args.vary,
        preset: args.preset,
        scale: args.scale,
        targets: &args.targets,
        mesh: &args.mesh,
        host: base.host.is_some(),
        amount: base.time.is_some() || base.bytes.is_some(),
    };
    let planned =
        experiment::plan(&flags, |amount, p| point_test(base, amount, p)).map_err(usage)?;
    let (shard, dir) =
        experiment::place(args.shard.as_deref(), args.out.as_deref()).map_err(usage)?;
    let psk = crate::psk::load_psk(base.psk_file.as_deref()).map_err(Failure::Usage)?;
    let quic = super::run::quic_check(base)?;
    // A server per point when the grid names them; else one for all (maybe in-process).
    let fixed = if experiment::names_servers(&planned.points) {
        None
    } else {
        Some(server_for(base.host.as_ref(), base.port, psk.as_ref())?)
    };
    let servers =
        experiment::servers_of(&planned.points, fixed.as_ref(), base.port).map_err(usage)?;
    let exp = Experiment {
        varies: &planned.varies,
        points: &planned.points,
        tests: &planned.tests,
        repeat: args.repeat,
        ordered: args.ordered,
    };
    let runtime = |e: wirebench_report::experiment::ShardError| Failure::Runtime(e.into());
    let opened = experiment::open(&dir, shard, &exp, args.retry_failed).map_err(runtime)?;
    if base.iperf3_json {
        wirebench_report::rundir::make_dirs(&dir, &[IPERF3_DIR])
            .map_err(|e| Failure::Runtime(e.into()))?;
    }
    let todo = &opened.resume;
    for not in &todo.foreign {
        eprintln!("warning: {not}: measured again");
    }
    let mut bar = Bar::new(todo.todo.len(), planned.points.len());
    let trial = |t: Todo| {
        let (host, port) = servers[t.point].clone();
        if !base.iperf3_json {
            return one_trial(
                &planned.tests[t.point],
                host,
                port,
                (psk.as_ref(), quic.as_ref()),
                &mut |_, _| Box::new(Silent),
            )
            .0;
        }
        let (results, record) = one_trial(
            &planned.tests[t.point],
            host,
            port,
            (psk.as_ref(), quic.as_ref()),
            &mut |h, spec| Box::new(Iperf3Record::begin(h, port, spec)),
        );
        save_iperf3(&dir, t, &results, record)?;
        results
    };
    let failed_now = experiment::measure_all(
        &dir,
        &opened.manifest,
        &todo.todo,
        args.pause,
        &mut bar,
        trial,
    )
    .map_err(runtime)?;
    bar.0.finish_and_clear();
    let record = ShardRecord {
        shard,
        manifest: opened.manifest.hash.clone(),
        client: hostname(),
        server: experiment::servers_measured(fixed.as_ref(), &servers, &todo.todo).join(" "),
        // Lossy: a word that is not UTF-8 is still recorded, not a panic.
        command: std::env::args_os()
            .map(|a| a.to_string_lossy().into_owned())
            .collect(),
        machine: Machine::this(),
        trials: todo.files.clone(),
        // Warned of above, and kept for the experiment's warnings and its report.
        replaced: todo.foreign.iter().map(ReplacedTrial::from).collect(),
    };
    save(&dir.join(ShardRecord::path(shard)), &Json, &record)?;
    drop(opened.lock);
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

/// The test of one grid point: `run`'s flags `base` with the preset's amount and the point's
/// values, checked to make a valid test (or rrul run).
fn point_test(base: &RunArgs, amount: Amount, point: &Point) -> Result<PointTest, String> {
    let mut base = base.clone();
    if let Amount::Preset(bytes) = amount {
        if bytes.is_some() {
            base.bytes = bytes;
        }
        base.time = None;
    }
    let a = apply(&base, point)?;
    super::run::check_iperf3_json(&a).map_err(|e| format!("point {}: {e}", point_label(point)))?;
    let test = match a.mode {
        ModeArg::Rrul => super::rrul::plan(&a).map(|p| PointTest::Rrul(Box::new(p))),
        _ => a.spec().map(PointTest::Test),
    };
    test.map_err(|e| format!("point {}: {e}", point_label(point)))
}

/// Writes trial `t` in iperf3's schema (`--iperf3-json`): its document, or iperf3's empty one
/// with the error when it made no results. Written before the trial's own file, so a trial
/// saved has its iperf3 file too.
fn save_iperf3(
    dir: &std::path::Path,
    t: Todo,
    results: &Result<Results, Unmeasured>,
    record: Option<Iperf3Client>,
) -> Result<(), Unmeasured> {
    let doc = match results {
        Ok(r) => iperf3::document(r, &record.unwrap_or_default()),
        Err(e) => iperf3::failure(&e.reason),
    };
    let trial = wirebench_report::experiment::shard::trial_path(t.point, t.repeat);
    let name = std::path::Path::new(&trial).file_name().unwrap_or_default();
    let path = dir.join(IPERF3_DIR).join(name);
    let mut bytes = serde_json::to_vec_pretty(&doc).unwrap_or_default();
    bytes.push(b'\n');
    wirebench_report::rundir::write(&path, &bytes).map_err(|e| Unmeasured {
        reason: format!("writing {}: {e}", path.display()),
        cause: None,
    })
}

/// Makes the watch of one attempt at a trial, for the host and test it runs.
type WatchFor<'a> = dyn FnMut(&str, &TestSpec) -> Box<dyn TrialWatch> + 'a;

/// A sweep measures wirebench servers (a perf server runs one test at a time, and reports
/// nothing to sum).
fn not_a_perf_server(base: &crate::cli::RunArgs) -> Result<(), Failure> {
    match base.quic_perf {
        Some(_) => Err(Failure::Usage(
            "sweep measures wirebench servers: run --quic-perf measures a perf server, one test at a time".into(),
        )),
        None => Ok(()),
    }
}

/// A trial's watch: shows nothing, and may keep what `--iperf3-json` needs.
trait TrialWatch: Watch {
    /// What it kept for iperf3's schema, if it kept anything.
    fn iperf3(self: Box<Self>) -> Option<Iperf3Client> {
        None
    }
}
impl TrialWatch for Silent {}
impl TrialWatch for Iperf3Record {
    fn iperf3(self: Box<Self>) -> Option<Iperf3Client> {
        Some(self.finish())
    }
}

/// One trial of `test` against `host:port` (with the key and the QUIC check given), a busy server asked again a few times, each
/// attempt watched by a new `watch`; with what the last attempt's watch kept. A test that
/// made no results says why, with its kind (a limit that refused it, say), which the
/// experiment's warnings name.
fn one_trial(
    test: &PointTest,
    host: String,
    port: u16,
    (psk, quic): (Option<&Psk>, Option<&ServerCheck>),
    watch: &mut WatchFor<'_>,
) -> (Result<Results, Unmeasured>, Option<Iperf3Client>) {
    let cfg = |spec: &TestSpec| ClientConfig {
        host: host.clone(),
        port,
        spec: spec.clone(),
        packet_log: None,
        file: None,
        save: None,
        psk: psk.cloned(),
        bind: None,
        stack: None,
        quic: quic.cloned(),
    };
    match test {
        PointTest::Test(spec) => {
            let cfg = cfg(spec);
            let mut last = None;
            let results = experiment::retry(
                BUSY_ATTEMPTS,
                BUSY_RETRY,
                || {
                    let mut w = watch(&cfg.host, spec);
                    let r = wirebench_engine::run(&cfg, &mut *w);
                    last = Some(w);
                    r
                },
                worth_retrying,
            )
            .map_err(|e| Unmeasured {
                reason: e.to_string(),
                cause: Some(e.kind()),
            });
            (results, last.and_then(TrialWatch::iperf3))
        }
        PointTest::Rrul(plan) => {
            // A sweep is not stopped part way: a signal ends the process.
            let never = Arc::new(AtomicBool::new(false));
            let cfg = cfg(&plan.load);
            let results = experiment::retry(
                BUSY_ATTEMPTS,
                BUSY_RETRY,
                || run_rrul(&cfg, plan, &never),
                // An rrul takes three of the address's tests at once: the last trial's
                // sessions may still be ending on a remote server when the next asks, so
                // its own per-client limit is waited out too.
                |e: &RrulError| {
                    e.engine().is_some_and(|e| {
                        worth_retrying(e) || e.kind() == ErrorKind::MaxTestsPerClient
                    })
                },
            )
            .map_err(|e| Unmeasured {
                reason: e.to_string(),
                cause: e.engine().map(EngineError::kind),
            });
            (results, None)
        }
    }
}

/// The sweep's progress bar, on stderr when it is a terminal.
struct Bar(ProgressBar, usize);

impl Bar {
    fn new(trials: usize, points: usize) -> Self {
        let bar = ProgressBar::new(trials as u64).with_style(
            ProgressStyle::with_template("{bar:30} trial {pos}/{len} {msg} eta {eta}")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        bar.set_draw_target(if io::IsTerminal::is_terminal(&io::stderr()) {
            ProgressDrawTarget::stderr()
        } else {
            ProgressDrawTarget::hidden()
        });
        Self(bar, points)
    }
}

impl Progress for Bar {
    fn trial(&mut self, _n: usize, t: Todo) {
        self.0.set_message(format!(
            "point {}/{} repeat {}",
            t.point + 1,
            self.1,
            t.repeat + 1
        ));
    }

    fn failed(&mut self, n: usize, t: Todo, why: &str) {
        self.0.suspend(|| {
            eprintln!(
                "warning: trial {} (point {}, repeat {}) failed: {why}",
                n + 1,
                t.point + 1,
                t.repeat + 1
            )
        });
    }

    fn saved(&mut self, _n: usize) {
        self.0.inc(1);
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
            Param::Mode => a.mode = ModeArg::from_str(v, false).map_err(|_| mode_error(v))?,
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
            Param::Server => {
                experiment::point_server(point, a.port).map_err(|e| e.to_string())?;
            }
            // Which host runs the point: the shard assignment's, not the test's.
            Param::Client => {}
        }
    }
    Ok(a)
}

/// A mode `--vary mode=` does not know, with the names `--mode` takes.
fn mode_error(v: &str) -> String {
    let names: Vec<String> = ModeArg::value_variants()
        .iter()
        .filter_map(|m| m.to_possible_value())
        .map(|p| p.get_name().to_string())
        .collect();
    match names.split_last() {
        Some((last, rest)) => format!("mode {v}: {} or {last}", rest.join(", ")),
        None => format!("mode {v}: not a mode"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn sweep_args(flags: &[&str]) -> SweepArgs {
        let mut argv = vec!["wirebench", "sweep"];
        argv.extend_from_slice(flags);
        match crate::cli::Cli::try_parse_from(argv).map(|c| c.command) {
            Ok(crate::cli::Command::Sweep(s)) => s,
            other => panic!("not a sweep: {other:?}"),
        }
    }

    fn point(param: Param, v: &str) -> Point {
        vec![(param, v.to_string())]
    }

    #[test]
    fn modes_are_the_names_mode_takes() {
        let base = sweep_args(&[]).run;
        for (name, want) in [
            ("stream", ModeArg::Stream),
            ("stop-and-wait", ModeArg::StopAndWait),
            ("rr", ModeArg::Rr),
            ("crr", ModeArg::Crr),
            ("rrul", ModeArg::Rrul),
        ] {
            let a = apply(&base, &point(Param::Mode, name)).expect(name);
            assert_eq!(a.mode, want);
        }
        assert_eq!(
            apply(&base, &point(Param::Mode, "fast")).expect_err("no mode"),
            "mode fast: stream, stop-and-wait, rr, crr or rrul"
        );
    }

    #[test]
    fn an_rrul_point_is_an_rrul_plan_and_others_a_test() {
        let base = sweep_args(&["--mode", "rrul", "-t", "2s", "--idle", "1s"]).run;
        let test = point_test(&base, Amount::AsGiven, &point(Param::Parallel, "2"));
        match test.expect("rrul") {
            PointTest::Rrul(p) => {
                assert_eq!(p.load.streams, 2);
                assert_eq!(p.load_time(), std::time::Duration::from_secs(2));
                assert_eq!(p.tcp.duration_ns, Some(4_000_000_000));
            }
            t => panic!("not rrul: {t:?}"),
        }
        let test = point_test(&base, Amount::AsGiven, &point(Param::Mode, "rr"));
        assert!(matches!(test, Ok(PointTest::Test(_))));
        // rrul cannot run over UDP: the point says so.
        let e =
            point_test(&base, Amount::AsGiven, &point(Param::Proto, "udp")).expect_err("udp rrul");
        assert!(
            e.starts_with("point proto=udp: --mode rrul sends both ways"),
            "{e}"
        );
    }

    #[test]
    fn a_tests_manifest_entry_is_its_spec_as_before() {
        let base = sweep_args(&["-u", "-n", "1M"]).run;
        let spec = base.spec().expect("spec");
        let test = point_test(&base, Amount::AsGiven, &point(Param::Size, "1472")).expect("test");
        assert_eq!(
            serde_json::to_value(&test).expect("json"),
            serde_json::to_value(&spec).expect("json")
        );
    }

    #[test]
    fn only_a_busy_server_is_asked_again_whatever_its_words() {
        use wirebench_engine::SessionError;
        let refused = |kind, reason: &str| {
            EngineError::from(SessionError::Refused {
                kind,
                reason: reason.into(),
            })
        };
        assert!(worth_retrying(&refused(ErrorKind::Busy, "quota reached")));
        assert!(!worth_retrying(&refused(
            ErrorKind::Refused,
            "server busy: 6 tests running"
        )));
        assert!(!worth_retrying(&refused(ErrorKind::Auth, "no key")));
        assert!(!worth_retrying(&EngineError::from(
            SessionError::PeerClosed
        )));
    }
}
