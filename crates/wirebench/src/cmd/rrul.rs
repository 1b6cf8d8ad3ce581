//! `wirebench run --mode rrul`: latency under load, as flent's RRUL test measures it. Three
//! ordinary tests run at once against one server: a UDP and a TCP request/response probe, paced
//! at one transaction per interval, from the start to the end; and after `--idle`, a TCP load
//! with streams each way (`--bidir -P N`) for `-t`. One document comes out: the load's, with
//! `end.rrul` put together by `wirebench_proto::results::Rrul::assemble`.
//!
//! Why several tests and not a new mechanism: each part is a test the server already runs and
//! limits (one slot each: three, which the default per-client share of `serve` allows), and
//! every figure of the load (per stream, TCP_INFO, intervals) comes out as it does for `--bidir`.

use std::io::{self, IsTerminal, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context};
use wirebench_engine::{ClientConfig, Watch};
use wirebench_proto::results::{Part, ProbeKind, Results, Rrul};
use wirebench_proto::spec::TestSpec;
use wirebench_proto::units::Rate;
use wirebench_report::Format;

use super::interrupt::Interrupt;
use super::live::{emit, EndEvent};
use super::run::target;
use super::serve::server_for;
use crate::cli::{ModeArg, RunArgs, RunCmd};
use crate::Failure;

/// The probes' spacing unless `-i` says otherwise: 10 probes a second of each kind.
const PROBE_INTERVAL: Duration = Duration::from_millis(100);

/// Load streams each way unless `-P` asks for more than one (flent's RRUL uses 4).
const LOAD_STREAMS: u32 = 4;

/// How long a UDP probe waits for its answer: longer than a bloated queue's delay (a second
/// or more), so that a slow answer is measured rather than counted lost.
const UDP_PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// How long the load's receivers wait for the data still in flight when its senders stop,
/// at least: a bloated queue and the senders' socket buffers hold seconds of data on a slow
/// link, which the 1 s default of `--drain` counts as missing.
const LOAD_DRAIN: Duration = Duration::from_secs(5);

/// The three tests of an rrul run.
struct Plan {
    idle: Duration,
    probe_interval: Duration,
    load: TestSpec,
    udp: TestSpec,
    tcp: TestSpec,
}

impl Plan {
    /// The tests the flags describe: `-t` the load's length (default 10 s), `--idle` each
    /// idle phase's, `-P` the streams each way, `-i` the probes' spacing, `--cc` the TCP
    /// congestion control of the load and the TCP probe.
    fn of(args: &RunArgs) -> Result<Self, String> {
        if args.bytes.is_some() || args.file.is_some() {
            return Err("--mode rrul runs for a time (-t): not with -n or --file".into());
        }
        if args.udp || args.reverse || args.bidir || args.both_directions {
            return Err(
                "--mode rrul sends both ways over TCP with UDP and TCP probes: \
                        leave out -u, -R, --bidir and --both-directions"
                    .into(),
            );
        }
        let load_time = args.time.unwrap_or(Duration::from_secs(10));
        let probe_interval = args
            .interval
            .filter(|d| !d.is_zero())
            .unwrap_or(PROBE_INTERVAL);
        let per_s = (1.0 / probe_interval.as_secs_f64()).round().max(1.0) as u64;
        let mut load = args.clone();
        load.mode = ModeArg::Stream;
        load.bidir = true;
        load.time = Some(load_time);
        load.interval = Some(probe_interval);
        load.drain = args.drain.max(LOAD_DRAIN);
        load.parallel = if args.parallel > 1 {
            args.parallel
        } else {
            LOAD_STREAMS
        };
        let mut tcp = args.clone();
        tcp.mode = ModeArg::Rr;
        tcp.time = Some(load_time + 2 * args.idle);
        tcp.interval = Some(probe_interval);
        tcp.rate = Some(Rate::PacketsPerSecond(per_s));
        tcp.parallel = 1;
        tcp.size = None;
        let mut udp = tcp.clone();
        udp.udp = true;
        udp.cc = None;
        udp.ack_timeout = UDP_PROBE_TIMEOUT;
        Ok(Self {
            idle: args.idle,
            probe_interval,
            load: load.spec()?,
            udp: udp.spec()?,
            tcp: tcp.spec()?,
        })
    }
}

/// A watcher that shows nothing and passes Ctrl-C on to the test.
struct Stop(Arc<AtomicBool>);

impl Watch for Stop {
    fn interrupted(&mut self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

/// Runs an rrul test against the server the flags name (or one in this process) and prints
/// its document.
pub fn run(cmd: &RunCmd) -> Result<(), Failure> {
    let (args, client) = (&cmd.run, &cmd.client);
    if client.stack.stack != crate::cli::StackArg::Kernel {
        return Err(Failure::Usage(
            "--mode rrul runs several streams and UDP probes; --stack smoltcp carries one TCP connection: drop --stack".into(),
        ));
    }
    let plan = Plan::of(args).map_err(Failure::Usage)?;
    let psk = crate::psk::load_psk(args.psk_file.as_deref()).map_err(Failure::Usage)?;
    let (host, port) = match &args.host {
        Some(h) => target(h, args.port, client).map_err(Failure::Usage)?,
        None => server_for(None, args.port, psk.as_ref())?,
    };
    let config = |spec: &TestSpec| ClientConfig {
        host: host.clone(),
        port,
        spec: spec.clone(),
        packet_log: None,
        file: None,
        save: None,
        psk: psk.clone(),
        bind: client.bind,
        stack: None,
    };
    let signals = Interrupt::install();
    let interrupt = signals.flag();
    if io::stderr().is_terminal() {
        // No live lines (three tests at once): say what the wait is for.
        eprintln!(
            "rrul against {host}:{port}: probes alone for {:?}, with the load for {:?}, alone for {:?}",
            plan.idle,
            Duration::from_nanos(plan.load.duration_ns.unwrap_or(0)),
            plan.idle
        );
    }
    let t0 = Instant::now();
    let probe = |kind: ProbeKind, spec: &TestSpec| {
        let cfg = config(spec);
        let stop = Arc::clone(interrupt);
        thread::Builder::new()
            .name(format!("wirebench-rrul-{}", kind.name()))
            .spawn(move || {
                let offset = t0.elapsed();
                (offset, wirebench_engine::run(&cfg, &mut Stop(stop)))
            })
            .context("starting a probe")
    };
    let udp = probe(ProbeKind::Udp, &plan.udp)?;
    let tcp = probe(ProbeKind::Tcp, &plan.tcp)?;
    // The idle phase: the probes alone. Waiting is the measurement's schedule here.
    while t0.elapsed() < plan.idle && !interrupt.load(Ordering::Relaxed) {
        thread::sleep(Duration::from_millis(20));
    }
    let load_offset = t0.elapsed();
    let load = wirebench_engine::run(&config(&plan.load), &mut Stop(Arc::clone(interrupt)));
    let join = |h: thread::JoinHandle<_>, what: &str| {
        h.join()
            .map_err(|_| anyhow!("the {what} probe's thread failed"))
    };
    let (udp_offset, udp) = join(udp, "UDP")?;
    let (tcp_offset, tcp) = join(tcp, "TCP")?;
    let failed =
        |what: &str, e: wirebench_engine::EngineError| Failure::Runtime(anyhow!("{what}: {e}"));
    let mut doc = load.map_err(|e| failed("the rrul load (TCP both ways)", e))?;
    let udp = udp.map_err(|e| failed("the rrul UDP probe", e))?;
    let tcp = tcp.map_err(|e| failed("the rrul TCP probe", e))?;
    let rrul = Rrul::assemble(
        plan.idle.as_secs_f64(),
        plan.probe_interval.as_secs_f64(),
        Part {
            results: &doc,
            offset_s: load_offset.as_secs_f64(),
        },
        &[
            (
                ProbeKind::Udp,
                Part {
                    results: &udp,
                    offset_s: udp_offset.as_secs_f64(),
                },
            ),
            (
                ProbeKind::Tcp,
                Part {
                    results: &tcp,
                    offset_s: tcp_offset.as_secs_f64(),
                },
            ),
        ],
    );
    doc.end.rrul = Some(rrul);
    let failed_probe = [&udp, &tcp].into_iter().find(|r| r.error.is_some());
    if let (None, Some(probe)) = (&doc.error, failed_probe) {
        doc.error = probe.error.as_ref().map(|e| format!("a probe: {e}"));
        doc.error_cause = probe.error_cause;
    }
    print(&doc, args, client.json_stream)?;
    if let Some(sig) = signals.signal() {
        return Err(Failure::Code(
            sig.exit_code(),
            format!(
                "interrupted by {}: the partial results are above",
                sig.name()
            ),
        ));
    }
    match &doc.error {
        Some(e) => Err(Failure::Runtime(anyhow!("test incomplete: {e}"))),
        None => Ok(()),
    }
}

/// The document in the asked format (`--json-stream`: one `end` event).
fn print(doc: &Results, args: &RunArgs, stream: bool) -> Result<(), Failure> {
    if stream {
        emit(&EndEvent { event: "end", doc });
        return Ok(());
    }
    let format: Format = args.output_format();
    let mut out = io::stdout().lock();
    format
        .exporter::<Results>()
        .export(doc, &mut out)
        .and_then(|()| out.flush())
        .context("writing the results")?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn plan(flags: &[&str]) -> Result<Plan, String> {
        let mut argv = vec!["wirebench", "run", "--mode", "rrul"];
        argv.extend_from_slice(flags);
        let cli = crate::cli::Cli::try_parse_from(argv).map_err(|e| e.to_string())?;
        match cli.command {
            crate::cli::Command::Run(r) => Plan::of(&r.run),
            _ => Err("not run".into()),
        }
    }

    #[test]
    fn the_plan_is_a_bidir_load_and_two_paced_probes() {
        let p = plan(&["-t", "20s", "--idle", "3s", "--cc", "cubic"]).expect("a plan");
        assert_eq!(p.load.streams, 4);
        assert_eq!(p.load.direction, wirebench_proto::spec::Direction::Bidir);
        assert_eq!(p.load.duration_ns, Some(20_000_000_000));
        assert_eq!(p.tcp.duration_ns, Some(26_000_000_000));
        assert_eq!(p.tcp.rate_pps, 10);
        assert_eq!(p.udp.protocol, wirebench_proto::spec::Protocol::Udp);
        assert_eq!(p.udp.congestion, None);
        assert_eq!(p.tcp.congestion.as_deref(), Some("cubic"));
        assert_eq!(p.udp.ack_timeout_ns, 2_000_000_000);
    }

    #[test]
    fn rrul_refuses_what_it_cannot_mean() {
        assert!(plan(&["-n", "1M"]).is_err());
        assert!(plan(&["-u"]).is_err());
        assert!(plan(&["-R"]).is_err());
    }
}
