//! `wirebench`: measure what a network path delivers over TCP and UDP.
//!
//! Glue only: parse flags into a validated spec, call the engine, print with the report
//! crate. Exit codes: 0 success (and a broken pipe), 1 runtime failure, 2 usage error.
#![deny(unsafe_code)]

mod cli;
mod cmd;
mod sweep;

use std::io::{self, IsTerminal, Write};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use wirebench_engine::{ClientConfig, Server, ServerConfig, Watch};
use wirebench_proto::results::{IntervalRecord, Results, Role};
use wirebench_proto::spec::{Direction, Protocol, TestSpec};
use wirebench_report::{interval_header, interval_line, Exporter, Json, Table};

use cli::{Cli, Command, PacketLogArgs, RunArgs, ServeArgs};

/// A failure and the exit code it maps to.
pub(crate) enum Failure {
    /// Bad flags: exit 2.
    Usage(String),
    /// Anything at run time: exit 1.
    Runtime(anyhow::Error),
}

impl From<anyhow::Error> for Failure {
    fn from(e: anyhow::Error) -> Self {
        Self::Runtime(e)
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Serve(args) => serve(&args),
        Command::Run(args) => run(&args),
        Command::PacketLog(args) => packet_log(&args),
        Command::Sweep(args) => sweep::sweep(&args),
        Command::Plot(args) => plot(&args),
        Command::Report(args) => report(&args),
        Command::Lab(args) => cmd::lab::lab(&args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::Usage(msg)) => {
            eprintln!("error: {msg}");
            ExitCode::from(2)
        }
        Err(Failure::Runtime(e)) => {
            if is_broken_pipe(&e) {
                return ExitCode::SUCCESS;
            }
            eprintln!("error: {e:#}");
            ExitCode::from(1)
        }
    }
}

fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<io::Error>()
            .is_some_and(|io| io.kind() == io::ErrorKind::BrokenPipe)
    })
}

fn plot(args: &cli::PlotArgs) -> Result<(), Failure> {
    use wirebench_report::plot::{
        arrival_chart, experiment_chart, link_log_chart, load_results, result_chart, write, Kind,
    };
    let input = &args.input;
    let kind = args
        .kind
        .as_deref()
        .map(Kind::parse)
        .transpose()
        .map_err(Failure::Usage)?;
    let chart = if input.is_dir() {
        let text = std::fs::read(input.join("summary.json"))
            .with_context(|| format!("{}: not an experiment directory", input.display()))?;
        let summary = serde_json::from_slice(&text).context("reading summary.json")?;
        let summary: wirebench_report::experiment::ExperimentSummary = summary;
        // A lab scenario's profiles are best seen as boxes; a sweep's points as a rate curve.
        let scenario = summary.is_scenario();
        experiment_chart(
            kind.unwrap_or(if scenario { Kind::Box } else { Kind::Rate }),
            &summary,
        )
    } else if input.extension().is_some_and(|e| e == "csv") {
        link_log_chart(input, kind.unwrap_or(Kind::Throughput))
    } else if input.extension().is_some_and(|e| e == "json") {
        let r = load_results(input).map_err(|e| Failure::Runtime(anyhow::anyhow!(e)))?;
        result_chart(kind.unwrap_or(Kind::Throughput), &r)
    } else {
        match kind {
            None | Some(Kind::Arrival) => arrival_chart(input),
            Some(k) => Err(format!(
                "--kind {}: a packet log draws --kind arrival",
                k.name()
            )),
        }
    }
    .map_err(|e| Failure::Runtime(anyhow::anyhow!(e)))?;
    write(&chart, &args.output).map_err(|e| Failure::Runtime(anyhow::anyhow!(e)))?;
    Ok(())
}

fn report(args: &cli::ReportArgs) -> Result<(), Failure> {
    let html = wirebench_report::html::report(&args.dir)
        .map_err(|e| Failure::Runtime(anyhow::anyhow!(e)))?;
    std::fs::write(&args.output, html)
        .with_context(|| format!("writing {}", args.output.display()))?;
    Ok(())
}

fn packet_log(args: &PacketLogArgs) -> Result<(), Failure> {
    let file = std::fs::File::open(&args.file)
        .with_context(|| format!("opening {}", args.file.display()))?;
    let mut out = io::BufWriter::new(io::stdout().lock());
    wirebench_report::packet_log_csv(io::BufReader::new(file), &mut out)
        .and_then(|()| out.flush().map_err(Into::into))
        .with_context(|| format!("reading {}", args.file.display()))?;
    Ok(())
}

fn serve(args: &ServeArgs) -> Result<(), Failure> {
    let cfg = args.config().map_err(Failure::Usage)?;
    let server = Server::bind(cfg).context("starting the server")?;
    let addr = server.local_addr().context("reading the server address")?;
    let mut out = io::stdout().lock();
    writeln!(
        out,
        "wirebench server listening on {addr} (TCP control and data, UDP data)"
    )
    .and_then(|()| out.flush())
    .context("writing to stdout")?;
    drop(out);
    // SIGTERM or SIGINT: end the running tests with a message to their clients, wait for
    // them to finish (at most 10 s), then exit 0.
    let handle = server.handle();
    let flag = handle.shutdown_flag();
    for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        signal_hook::flag::register(sig, std::sync::Arc::clone(&flag))
            .context("installing the signal handler")?;
    }
    std::thread::Builder::new()
        .name("wirebench-shutdown".into())
        .spawn(move || {
            while !flag.load(std::sync::atomic::Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(100));
            }
            eprintln!(
                "shutting down: ending {} running tests",
                handle.running_tests()
            );
            let until = std::time::Instant::now() + Duration::from_secs(10);
            while handle.running_tests() > 0 && std::time::Instant::now() < until {
                std::thread::sleep(Duration::from_millis(50));
            }
            std::process::exit(0);
        })
        .context("starting the shutdown watcher")?;
    server.run().context("serving")?;
    Ok(())
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

/// Runs one test with live output as the flags ask.
fn one_test(args: &RunArgs, cfg: &ClientConfig) -> Result<Results, Failure> {
    let lines = args.interval.is_some() && !args.json;
    let show_bar = !lines && !args.json && io::stdout().is_terminal() && io::stderr().is_terminal();
    let mut live = Live {
        protocol: cfg.spec.protocol,
        lines,
        header_done: false,
        bar: show_bar.then(|| progress_bar(&cfg.spec)),
    };
    let results = wirebench_engine::run(cfg, &mut live);
    if let Some(bar) = &live.bar {
        bar.finish_and_clear();
    }
    Ok(results.context("running the test")?)
}

/// `--both-directions`: the test as given (this side sends), then reversed (this side
/// receives; a file comes from the server's --files-dir under the same name), and seed 002's
/// table: transfer size, send time and rate, receive time and rate.
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
    let mut out = io::stdout().lock();
    if args.json {
        let doc = serde_json::json!({ "send": send, "receive": receive });
        serde_json::to_writer_pretty(&mut out, &doc)
            .map_err(io::Error::from)
            .and_then(|()| writeln!(out))
    } else {
        write!(out, "{}", wirebench_report::seed_002_table(&send, &receive))
    }
    .and_then(|()| out.flush())
    .context("writing the results")?;
    match send.error.or(receive.error) {
        Some(e) => Err(Failure::Runtime(anyhow::anyhow!("test incomplete: {e}"))),
        None => Ok(()),
    }
}

/// The server a `run` or `sweep` without HOST measures against: one in this process on
/// loopback; its host and port.
fn server_for(
    host: Option<&String>,
    port: u16,
    psk: Option<&wirebench_engine::Psk>,
) -> Result<(String, u16), Failure> {
    Ok(match host {
        Some(h) => (h.clone(), port),
        None => {
            // No host: measure loopback against a server in this process.
            let server = Server::bind(ServerConfig {
                bind: "127.0.0.1:0".parse().context("loopback address")?,
                // A sweep's next trial may start while the last one's session winds down.
                max_tests: 8,
                max_duration: None,
                max_rate_bps: None,
                log: false,
                save_dir: None,
                files_dir: None,
                stats_every: None,
                max_bytes: None,
                max_streams: None,
                max_size: None,
                max_tests_per_client: None,
                max_tests_per_minute: None,
                // With a key, the in-process server asks for it: the exchange can be tried.
                psk: psk.cloned(),
            })
            .context("starting the in-process server")?;
            let port = server
                .local_addr()
                .context("reading the server address")?
                .port();
            std::thread::Builder::new()
                .name("wirebench-local-server".into())
                .spawn(move || server.run())
                .context("starting the in-process server")?;
            ("127.0.0.1".to_string(), port)
        }
    })
}

fn run(args: &RunArgs) -> Result<(), Failure> {
    let spec = args.spec().map_err(Failure::Usage)?;
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
    let exporter: &dyn Exporter = if args.json { &Json } else { &Table };
    exporter
        .export(&results, &mut out)
        .and_then(|()| out.flush())
        .context("writing the results")?;
    match results.error {
        Some(e) => Err(Failure::Runtime(anyhow::anyhow!("test incomplete: {e}"))),
        None => Ok(()),
    }
}
