//! `wirebench run`: one test (or, with `--both-directions`, two) against a server, with live
//! lines or a progress bar while it runs, then the results in the asked format.

use std::io::{self, IsTerminal, Write};
use std::time::Duration;

use anyhow::Context;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use wirebench_engine::{ClientConfig, Watch};
use wirebench_proto::results::{IntervalRecord, Results, Role};
use wirebench_proto::spec::{Direction, Protocol, TestSpec};
use wirebench_report::{interval_header, interval_line, BothDirections, Format};

use super::serve::server_for;
use crate::cli::{self, RunArgs};
use crate::Failure;

/// Runs the test the flags describe and prints its results.
pub fn run(args: &RunArgs) -> Result<(), Failure> {
    let spec = args.spec().map_err(Failure::Usage)?;
    if let Some(target) = &args.iperf3 {
        return iperf3(args, target, spec);
    }
    let psk = cli::load_psk(args.psk_file.as_deref()).map_err(Failure::Usage)?;
    let (host, port) = server_for(args.host.as_ref(), args.port, psk.as_ref())?;
    let cfg = ClientConfig {
        host,
        port,
        spec,
        packet_log: args.packet_log.clone(),
        file: args.file.clone().filter(|_| !args.reverse),
        save: args.save.clone(),
        psk,
    };
    if args.both_directions {
        return both_directions(args, cfg);
    }
    let results = one_test(args, &cfg)?;
    let mut out = io::stdout().lock();
    args.output_format()
        .exporter::<Results>()
        .export(&results, &mut out)
        .and_then(|()| out.flush())
        .context("writing the results")?;
    match results.error {
        Some(e) => Err(Failure::Runtime(anyhow::anyhow!("test incomplete: {e}"))),
        None => Ok(()),
    }
}

/// `--iperf3 HOST[:PORT]`: the test against an iperf3 server, with the same live output
/// and results document (the server's figures marked as reported by it).
fn iperf3(args: &RunArgs, target: &str, spec: TestSpec) -> Result<(), Failure> {
    let (host, port) =
        wirebench_engine::split_target(target).map_err(|e| Failure::Usage(e.to_string()))?;
    let cfg = wirebench_engine::Iperf3Config {
        host,
        port,
        spec,
        window: args.window.unwrap_or(0),
    };
    let mut live = live_for(args, &cfg.spec);
    let results = wirebench_engine::run_iperf3(&cfg, &mut live);
    if let Some(bar) = &live.bar {
        bar.finish_and_clear();
    }
    let results = results.context("running the test against the iperf3 server")?;
    let mut out = io::stdout().lock();
    args.output_format()
        .exporter::<Results>()
        .export(&results, &mut out)
        .and_then(|()| out.flush())
        .context("writing the results")?;
    match results.error {
        Some(e) => Err(Failure::Runtime(anyhow::anyhow!("test incomplete: {e}"))),
        None => Ok(()),
    }
}

/// `--both-directions`: the test as given (this side sends), then reversed (this side
/// receives; a file comes from the server's --files-dir under the same name), and the table
/// of send and receive times and rates.
fn both_directions(args: &RunArgs, cfg: ClientConfig) -> Result<(), Failure> {
    let send = one_test(args, &cfg)?;
    let mut back = cfg;
    back.spec.direction = Direction::Reverse;
    back.file = None;
    back.packet_log = None;
    if back.spec.file.is_some() {
        // The server's file sets the amount.
        back.spec.bytes = None;
    }
    let receive = one_test(args, &back)?;
    let both = BothDirections { send, receive };
    let mut out = io::stdout().lock();
    args.output_format()
        .exporter::<BothDirections>()
        .export(&both, &mut out)
        .and_then(|()| out.flush())
        .context("writing the results")?;
    match both.send.error.or(both.receive.error) {
        Some(e) => Err(Failure::Runtime(anyhow::anyhow!("test incomplete: {e}"))),
        None => Ok(()),
    }
}

/// Runs one test with live output as the flags ask.
fn one_test(args: &RunArgs, cfg: &ClientConfig) -> Result<Results, Failure> {
    let mut live = live_for(args, &cfg.spec);
    let results = wirebench_engine::run(cfg, &mut live);
    if let Some(bar) = &live.bar {
        bar.finish_and_clear();
    }
    Ok(results.context("running the test")?)
}

/// The live output the flags ask for.
fn live_for(args: &RunArgs, spec: &TestSpec) -> Live {
    let table = args.output_format() == Format::Table;
    let lines = args.interval.is_some() && table;
    let show_bar = !lines && table && io::stdout().is_terminal() && io::stderr().is_terminal();
    Live {
        protocol: spec.protocol,
        lines,
        header_done: false,
        bar: show_bar.then(|| progress_bar(spec)),
    }
}

/// Prints live interval lines, or drives a progress bar.
struct Live {
    protocol: Protocol,
    lines: bool,
    header_done: bool,
    bar: Option<ProgressBar>,
}

impl Watch for Live {
    fn progress(&mut self, _elapsed: Duration, bytes: u64, _messages: u64) {
        if let Some(bar) = &self.bar {
            bar.set_position(bytes);
        }
    }

    fn interval(&mut self, role: Role, rec: &IntervalRecord) {
        if let Some(bar) = &self.bar {
            if bar.length().is_none() {
                bar.set_message(format!("{:.0} s", rec.end_ns as f64 / 1e9));
            }
        }
        if !self.lines {
            return;
        }
        let mut out = io::stdout().lock();
        if !self.header_done {
            let _ = writeln!(out, "{}", interval_header(role, self.protocol));
            self.header_done = true;
        }
        let _ = writeln!(out, "{}", interval_line(rec, self.protocol, role));
    }
}

/// A bar of bytes for a test of an amount, a spinner for a test of a duration; on stderr.
fn progress_bar(spec: &TestSpec) -> ProgressBar {
    let bar = match spec.bytes {
        Some(total) => ProgressBar::new(total).with_style(
            ProgressStyle::with_template(
                "{bar:30} {decimal_bytes}/{decimal_total_bytes} {decimal_bytes_per_sec} eta {eta}",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
        ),
        None => ProgressBar::no_length().with_style(
            ProgressStyle::with_template("{spinner} {decimal_bytes} {decimal_bytes_per_sec} {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_spinner()),
        ),
    };
    bar.set_draw_target(ProgressDrawTarget::stderr());
    bar
}
