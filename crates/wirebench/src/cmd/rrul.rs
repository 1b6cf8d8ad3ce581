//! `wirebench run --mode rrul`: latency under load, as flent's RRUL test measures it. The
//! flags make the engine's `rrul::RrulPlan` (a UDP and a TCP request/response probe from the
//! start to the end, and after `--idle` a TCP load with streams each way for `-t`), the
//! engine's `rrul::run_rrul_live` runs it, and this file prints a line a second while it
//! runs (or an NDJSON event with `--json-stream`) and the one document that comes out: the
//! load's, with `end.rrul`. `sweep --mode rrul` plans its points with [`plan`] too.

use std::io::{self, IsTerminal, Write};

use anyhow::{anyhow, Context};
use serde::Serialize;
use wirebench_engine::rrul::{run_rrul_live, RrulError, RrulPlan, RrulSecond};
use wirebench_engine::ClientConfig;
use wirebench_proto::results::{Results, TestView};
use wirebench_proto::units::format_duration;
use wirebench_report::Format;

use super::interrupt::Interrupt;
use super::live::{emit, EndEvent, StartEvent};
use super::run::target;
use super::serve::server_for;
use crate::cli::{ModeArg, RateUnits, RunArgs, RunCmd};
use crate::Failure;
use wirebench_report::export::lines::format_rate;

/// The rrul run the flags describe (`run --mode rrul`, or a sweep's point): `-t` the load's
/// length (default 10 s), `--idle` each idle phase's, `-P` the streams each way,
/// `--probe-interval` (or `-i`, as before it) the probes' spacing, `--cc` the TCP congestion
/// control of the load and the TCP probe. The engine's [`RrulPlan`] makes the three tests
/// from the load the other flags describe.
pub(super) fn plan(args: &RunArgs) -> Result<RrulPlan, String> {
    if args.both_directions {
        return Err(RrulError::FixedShape.to_string());
    }
    let mut load = args.clone();
    load.mode = ModeArg::Stream;
    // The spacing is the plan's; the load's flags would be refused with it.
    load.probe_interval = None;
    // The amount and the shape are rrul's to refuse, with its own words, before `spec`
    // reads a file for them.
    if args.file.is_some() {
        return Err(RrulError::NotTimed.to_string());
    }
    let base = load.spec()?;
    let spacing = args.probe_interval.or(args.interval);
    RrulPlan::new(&base, args.idle, spacing).map_err(|e| e.to_string())
}

/// Runs an rrul test against the server the flags name (or one in this process) and prints
/// its document.
pub fn run(cmd: &RunCmd) -> Result<(), Failure> {
    let (args, client) = (&cmd.run, &cmd.client);
    super::run::check_iperf3_json(args).map_err(Failure::Usage)?;
    if client.stack.stack != crate::cli::StackArg::Kernel {
        return Err(Failure::Usage(
            "--mode rrul runs several streams and UDP probes; --stack smoltcp carries one TCP connection: drop --stack".into(),
        ));
    }
    let plan = plan(args).map_err(Failure::Usage)?;
    let psk = crate::psk::load_psk(args.psk_file.as_deref()).map_err(Failure::Usage)?;
    let (host, port) = match &args.host {
        Some(h) => target(h, args.port, client).map_err(Failure::Usage)?,
        None => server_for(None, args.port, psk.as_ref())?,
    };
    let server = ClientConfig {
        host,
        port,
        spec: plan.load.clone(),
        packet_log: None,
        file: None,
        save: None,
        psk,
        bind: client.bind,
        stack: None,
        quic: super::run::quic_check(args)?,
    };
    let signals = Interrupt::install();
    if io::stderr().is_terminal() {
        eprintln!(
            "rrul against {}:{}: probes alone for {:?}, with the load for {:?}, alone for {:?}",
            server.host,
            server.port,
            plan.idle(),
            plan.load_time(),
            plan.idle()
        );
    }
    let stream = client.json_stream;
    if stream {
        emit(&StartEvent {
            event: "start",
            wirebench: concat!("wirebench ", env!("CARGO_PKG_VERSION")),
            server: &format!("{}:{}", server.host, server.port),
            test: TestView::from(&plan.load),
        });
    }
    // A line a second for the table, on a terminal or not; none with another document on
    // stdout.
    let mut lines =
        (!stream && args.output_format() == Format::Table).then(|| Lines::new(args.rate_units()));
    let mut show = |second: &RrulSecond| {
        if stream {
            emit(&SecondEvent {
                event: "rrul_interval",
                second,
            });
        } else if let Some(l) = &mut lines {
            l.show(second);
        }
    };
    let doc = run_rrul_live(&server, &plan, signals.flag(), &mut show)
        .map_err(|e| Failure::Runtime(anyhow!("{e}")))?;
    print(&doc, args, stream)?;
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

/// `--json-stream`: one second of the run.
#[derive(Serialize)]
struct SecondEvent<'a> {
    /// `rrul_interval`.
    event: &'static str,
    #[serde(flatten)]
    second: &'a RrulSecond,
}

/// The live lines: a head, then a line a second.
struct Lines {
    units: RateUnits,
    header_done: bool,
}

impl Lines {
    fn new(units: RateUnits) -> Self {
        Self {
            units,
            header_done: false,
        }
    }

    fn show(&mut self, s: &RrulSecond) {
        let mut out = io::stdout().lock();
        if !self.header_done {
            self.header_done = true;
            let _ = writeln!(
                out,
                "{:>9}  {:>16}  {:>16}  {:>14}  {:>10}",
                "time", "upload", "download", "UDP rtt p50", "lost/sent"
            );
        }
        let rate =
            |bps: Option<f64>| bps.map_or_else(|| "-".to_owned(), |b| format_rate(b, self.units));
        let rtt = s.udp_rtt_p50_us.map_or_else(
            || "-".to_owned(),
            |us| format_duration(std::time::Duration::from_nanos((us * 1e3) as u64)),
        );
        let _ = writeln!(
            out,
            "{:>9}  {:>16}  {:>16}  {:>14}  {:>10}",
            format!("{:.2} s", s.t_s),
            rate(s.upload_bps),
            rate(s.download_bps),
            rtt,
            format!("{}/{}", s.udp_lost, s.udp_sent)
        );
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

    fn plan_of(flags: &[&str]) -> Result<RrulPlan, String> {
        let mut argv = vec!["wirebench", "run", "--mode", "rrul"];
        argv.extend_from_slice(flags);
        let cli = crate::cli::Cli::try_parse_from(argv).map_err(|e| e.to_string())?;
        match cli.command {
            crate::cli::Command::Run(r) => plan(&r.run),
            _ => Err("not run".into()),
        }
    }

    #[test]
    fn the_flags_make_a_bidir_load_and_two_paced_probes() {
        let p = plan_of(&["-t", "20s", "--idle", "3s", "--cc", "cubic"]).expect("a plan");
        assert_eq!(p.load.streams, 4);
        assert_eq!(p.load.direction, wirebench_proto::spec::Direction::Bidir);
        assert_eq!(p.load.duration_ns, Some(20_000_000_000));
        assert_eq!(p.load.size, 128 * 1024);
        assert_eq!(p.tcp.duration_ns, Some(26_000_000_000));
        assert_eq!(p.tcp.rate_pps, Some(10));
        assert_eq!(p.tcp.size, 64);
        assert_eq!(p.udp.protocol, wirebench_proto::spec::Protocol::Udp);
        assert_eq!(p.udp.congestion, None);
        assert_eq!(p.tcp.congestion.as_deref(), Some("cubic"));
        assert_eq!(p.udp.ack_timeout_ns, 2_000_000_000);
        assert_eq!(p.udp.open_loop_interval_ns, Some(100_000_000));
        // -i sets the probes' spacing, -O comes on top of every part's time.
        let p = plan_of(&["-t", "2s", "--idle", "1s", "-i", "50ms", "-O", "1s"]).expect("plan");
        assert_eq!(p.tcp.rate_pps, Some(20));
        assert_eq!(p.load.duration_ns, Some(3_000_000_000));
        assert_eq!(p.tcp.duration_ns, Some(5_000_000_000));
        // --probe-interval sets it by its own name; with -i as well it is refused.
        let p = plan_of(&["--probe-interval", "20ms"]).expect("plan");
        assert_eq!(p.udp.open_loop_interval_ns, Some(20_000_000));
        assert_eq!(
            (p.probe_interval_ns, p.load.interval_ns),
            (20_000_000, 20_000_000)
        );
        assert!(plan_of(&["--probe-interval", "20ms", "-i", "1s"]).is_err());
    }

    #[test]
    fn the_probe_interval_is_rruls_alone() {
        let cli =
            crate::cli::Cli::try_parse_from(["wirebench", "run", "h", "--probe-interval", "1s"])
                .expect("parses");
        let crate::cli::Command::Run(r) = cli.command else {
            panic!("not run");
        };
        assert_eq!(
            r.run.spec().expect_err("refused"),
            "--probe-interval applies to --mode rrul only"
        );
    }

    #[test]
    fn rrul_refuses_what_it_cannot_mean() {
        for flags in [
            &["-n", "1M"][..],
            &["-u"],
            &["-R"],
            &["--bidir"],
            &["--both-directions"],
        ] {
            let e = plan_of(flags).expect_err("refused");
            assert!(e.starts_with("--mode rrul"), "{flags:?}: {e}");
        }
        assert!(plan_of(&["--file", "/nonexistent"])
            .expect_err("file")
            .starts_with("--mode rrul runs for a time"));
    }
}
