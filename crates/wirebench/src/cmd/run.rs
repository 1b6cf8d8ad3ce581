//! `wirebench run`: one test (or, with `--both-directions`, two) against a server, with live
//! lines while it runs (by default on a terminal), then the results in the asked format. A
//! failure still prints what was measured; with `--json` as one document with `error`.

use std::io::{self, Write};
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use anyhow::Context;
use wirebench_engine::{ClientConfig, EngineError, ErrorKind, SessionError};
use wirebench_proto::host_port::HostPort;
use wirebench_proto::results::{FailureDocument, Results, ResultsWithExit, TestView};
use wirebench_proto::spec::{Direction, TestSpec};
use wirebench_report::export::{Iperf3Client, Iperf3Json};

use super::iperf3_record::Iperf3Record;
use wirebench_report::{BothDirections, Exporter, Format, Human};

use super::interrupt::{Interrupt, Signal};
use super::live::{connecting, emit, EndEvent, Live, StartEvent};
use super::serve::server_for;
use crate::cli::{self, ClientArgs, RunArgs, RunCmd};
use crate::Failure;

/// The tool and version, as the results document names them.
const TOOL: &str = concat!("wirebench ", env!("CARGO_PKG_VERSION"));

/// How the results leave: a document at the end, or events as the test goes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Output {
    Document(Format),
    Stream,
    /// `--iperf3-json`: the document in iperf3's `-J` schema.
    Iperf3,
}

/// How the flags ask the results to leave.
fn output_of(args: &RunArgs, client: &ClientArgs) -> Output {
    if client.json_stream {
        Output::Stream
    } else if args.iperf3_json {
        Output::Iperf3
    } else {
        Output::Document(args.output_format())
    }
}

/// `--iperf3-json` asks for iperf3's schema, which holds streaming tests only.
pub(super) fn check_iperf3_json(args: &RunArgs) -> Result<(), String> {
    let mode = match args.mode {
        cli::ModeArg::Stream => return Ok(()),
        cli::ModeArg::StopAndWait => "stop-and-wait",
        cli::ModeArg::Rr => "rr",
        cli::ModeArg::Crr => "crr",
        cli::ModeArg::Rrul => "rrul",
    };
    if !args.iperf3_json {
        return Ok(());
    }
    Err(format!(
        "--iperf3-json: iperf3's schema has streaming tests only, not --mode {mode}: use --json"
    ))
}

/// What a run without a host measures, said before its figures: they read like a network's.
const IN_PROCESS: &str = "No host: measuring this machine's loopback against a server in \
this process (CPU and memory, not a network). On a network: `wirebench serve` there, then \
`wirebench run HOST` here.";

/// Runs the test the flags describe and prints its results.
pub fn run(cmd: &RunCmd) -> Result<(), Failure> {
    let (args, client) = (&cmd.run, &cmd.client);
    let mut spec = args.spec().map_err(Failure::Usage)?;
    // A line per stream: the server's too (a UDP receiver's) when it receives.
    spec.live_streams = spec.streams > 1 && lines_shown(args, client);
    let stack = super::stack::connector(args, client, &spec).map_err(Failure::Usage)?;
    check_iperf3_json(args).map_err(Failure::Usage)?;
    if let Some(target) = &args.iperf3 {
        return iperf3(args, target, spec, client);
    }
    if let Some(target) = &args.quic_perf {
        return quic_perf(args, target, spec, client);
    }
    if let Some(e) = client.iperf3_only.without_iperf3() {
        return Err(Failure::Usage(e));
    }
    let psk = crate::psk::load_psk(args.psk_file.as_deref()).map_err(Failure::Usage)?;
    if client.bind.is_some() && spec.mechanism == wirebench_proto::spec::Mechanism::Crr {
        // Each transaction's connection is opened by the data path, from any address.
        return Err(Failure::Usage(
            "-B/--bind does not apply to --mode crr (a connection per transaction)".into(),
        ));
    }
    let target = match &args.host {
        Some(h) => Some(target(h, args.port, client).map_err(Failure::Usage)?),
        None => None,
    };
    // Without a host, a server in this process. With `--file` it gets a temporary directory
    // (removed when `run` ends): it saves the file there, so that a UDP copy, whose datagrams
    // may come in any order, is read back and compared; for `--both-directions` the directory
    // also holds the file, to send it back.
    let mut files_dir = None;
    let (host, port) = match target {
        Some((h, p)) => (h, p),
        None => match (&args.file, args.both_directions) {
            (Some(file), both) if !args.reverse => {
                let dir = if both {
                    FilesDir::with(file)?
                } else {
                    FilesDir::new()?
                };
                let hp = super::serve::in_process_server(psk.as_ref(), Some(&dir.path))?;
                files_dir = Some(dir);
                hp
            }
            _ => server_for(None, args.port, psk.as_ref())?,
        },
    };
    let cfg = ClientConfig {
        host,
        port,
        spec,
        packet_log: args.packet_log.clone(),
        file: args.file.clone().filter(|_| !args.reverse),
        save: args.save.clone(),
        psk,
        bind: client.bind,
        stack,
        quic: quic_check(args)?,
    };
    let output = output_of(args, client);
    let interrupt = Interrupt::install();
    if output == Output::Document(Format::Table) {
        if args.host.is_none() {
            println!("{IN_PROCESS}");
        }
        connecting(&cfg.host, cfg.port, &cfg.spec);
    }
    // The one place another kind of peer (e.g. an iperf3 server) would branch off.
    if args.both_directions {
        let done = both_directions(args, client, cfg, output, &interrupt);
        drop(files_dir);
        return done;
    }
    if output == Output::Stream {
        emit(&StartEvent {
            event: "start",
            wirebench: TOOL,
            server: &format!("{}:{}", cfg.host, cfg.port),
            test: TestView::from(&cfg.spec),
        });
    }
    let mut live = live_view(args, &cfg.spec, output, interrupt.flag());
    if output == Output::Iperf3 {
        live.record_iperf3(Iperf3Record::begin(&cfg.host, cfg.port, &cfg.spec));
    }
    let mut results = match wirebench_engine::run(&cfg, &mut live) {
        Ok(r) => r,
        Err(e) => match interrupt.signal() {
            Some(sig) => {
                return Err(interrupted_before_start(
                    &cfg.host, cfg.port, &cfg.spec, output, sig,
                ))
            }
            None => return Err(failed_before_start(&cfg, output, &e)),
        },
    };
    if files_dir.is_some() {
        // The in-process server's copy is gone with its temporary directory.
        if let Some(f) = &mut results.end.file {
            f.saved_as = None;
        }
    }
    let interrupted = interrupt.signal();
    let note = interrupted.map(|sig| {
        format!(
            "interrupted after {:.1} s ({}): the figures above are what was measured until then",
            results.end.duration_s,
            sig.name()
        )
    });
    live.finish();
    let recorded = live.iperf3_client();
    let printed = print_results(&results, output, interrupted, args, client, recorded);
    if let (Some(n), Output::Document(Format::Table)) = (note, output) {
        println!("{n}");
    }
    printed
}

/// A temporary files directory for the in-process server, removed when dropped.
struct FilesDir {
    path: std::path::PathBuf,
}

impl FilesDir {
    /// A new, empty directory.
    fn new() -> Result<Self, Failure> {
        let path = std::env::temp_dir().join(format!("wirebench-files-{}", std::process::id()));
        std::fs::create_dir_all(&path).with_context(|| format!("creating {}", path.display()))?;
        Ok(Self { path })
    }

    /// A new directory holding a copy of `file` under its own name.
    fn with(file: &std::path::Path) -> Result<Self, Failure> {
        let dir = Self::new()?;
        let name = file
            .file_name()
            .ok_or_else(|| Failure::Usage(format!("--file {}: not a file", file.display())))?;
        let copy = dir.path.join(name);
        // A hard link costs nothing; across file systems, a copy.
        if std::fs::hard_link(file, &copy).is_err() {
            std::fs::copy(file, &copy)
                .with_context(|| format!("copying {} for the in-process server", file.display()))?;
        }
        Ok(dir)
    }
}

impl Drop for FilesDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// `HOST`, `HOST:PORT`, `[V6ADDR]:PORT` or a bare IPv6 address, resolved as `-4`/`-6` ask.
pub(super) fn target(host: &str, port: u16, client: &ClientArgs) -> Result<(String, u16), String> {
    let (name, port) = split_host_port(host, port)?;
    // -B fixes the family as -4/-6 do: a socket bound to an IPv4 address reaches IPv4 only.
    let want_v4 = match (client.ipv4, client.ipv6, client.bind) {
        (true, _, _) => true,
        (_, true, _) => false,
        (_, _, Some(ip)) => ip.is_ipv4(),
        _ => return Ok((name, port)),
    };
    let addrs = (name.as_str(), port)
        .to_socket_addrs()
        .map_err(|e| format!("{name}: {e}"))?;
    let found = addrs
        .map(|a: SocketAddr| a.ip())
        .find(|ip| ip.is_ipv4() == want_v4);
    match found {
        Some(ip) => Ok((ip.to_string(), port)),
        None => Err(format!(
            "{name} has no {}",
            if want_v4 {
                "IPv4 address (-4, or -B of IPv4)"
            } else {
                "IPv6 address (-6, or -B of IPv6)"
            }
        )),
    }
}

/// The port of an iperf3 server: `-p` when given (it is not wirebench's default), as iperf3's
/// own `-p`, else 5201; refused when `HOST:PORT` names another.
fn iperf3_port(target: &str, p: u16) -> Result<u16, String> {
    let default = wirebench_engine::iperf3::DEFAULT_PORT;
    if p == crate::cli::DEFAULT_PORT {
        return Ok(default);
    }
    match target.parse::<HostPort>().ok().and_then(|h| h.port) {
        Some(q) if q != p => Err(format!(
            "--iperf3 {target} names port {q} and -p {p} another: give one of them"
        )),
        _ => Ok(p),
    }
}

/// `HOST`, `HOST:PORT`, `[V6ADDR]:PORT` or a bare IPv6 address; `port` when none is given.
pub fn split_host_port(host: &str, port: u16) -> Result<(String, u16), String> {
    host.parse::<HostPort>()
        .map(|h| h.or_port(port))
        .map_err(|e| e.to_string())
}

/// Live lines with the table, whatever stdout is (as iperf3: `run HOST | tee log` logs
/// them), unless `-i 0`.
fn live_view(args: &RunArgs, spec: &TestSpec, output: Output, interrupt: &Arc<AtomicBool>) -> Live {
    let table = output == Output::Document(Format::Table);
    let lines = table && !args.interval.is_some_and(|d| d.is_zero());
    Live::new(
        spec,
        lines,
        output == Output::Stream,
        args.rate_units(),
        Arc::clone(interrupt),
    )
}

/// The results in the asked format; the exit code says how the test ended.
fn print_results(
    results: &Results,
    output: Output,
    interrupted: Option<Signal>,
    args: &RunArgs,
    client: &ClientArgs,
    recorded: Iperf3Client,
) -> Result<(), Failure> {
    let outcome = Ending::of(results.error.as_deref(), results.error_cause, interrupted);
    let mut out = io::stdout().lock();
    match output {
        Output::Stream => {
            let doc = ResultsWithExit {
                results,
                error_kind: outcome.kind(),
                signal: outcome.signal(),
                exit_code: outcome.code(),
            };
            let event = if outcome.code() == 0 { "end" } else { "error" };
            emit(&EndEvent { event, doc: &doc });
        }
        Output::Document(Format::Json) if outcome.code() != 0 => {
            let doc = ResultsWithExit {
                results,
                error_kind: outcome.kind(),
                signal: outcome.signal(),
                exit_code: outcome.code(),
            };
            serde_json::to_writer_pretty(&mut out, &doc)
                .map_err(io::Error::other)
                .and_then(|()| writeln!(out))
                .context("writing the results")?;
        }
        Output::Iperf3 => {
            Iperf3Json(recorded)
                .export(results, &mut out)
                .and_then(|()| out.flush())
                .context("writing the results")?;
        }
        Output::Document(Format::Table) => {
            human(args, client)
                .export(results, &mut out)
                .and_then(|()| out.flush())
                .context("writing the results")?;
        }
        Output::Document(f) => {
            f.exporter::<Results>()
                .export(results, &mut out)
                .and_then(|()| out.flush())
                .context("writing the results")?;
        }
    }
    outcome.into_result()
}

/// Whether the flags ask for live lines: the table's, unless `-i 0`.
fn lines_shown(args: &RunArgs, client: &ClientArgs) -> bool {
    !client.json_stream
        && !args.iperf3_json
        && args.output_format() == Format::Table
        && !args.interval.is_some_and(|d| d.is_zero())
}

/// The table as `-f` (units) and `-V` ask.
fn human(args: &RunArgs, client: &ClientArgs) -> Human {
    Human {
        units: args.rate_units(),
        verbose: client.verbose,
    }
}

/// How a test that ran ended.
enum Ending<'a> {
    Complete,
    /// The error in words, and its kind if the side that failed said it.
    Incomplete(&'a str, Option<ErrorKind>),
    Interrupted(Signal),
}

impl<'a> Ending<'a> {
    fn of(error: Option<&'a str>, cause: Option<ErrorKind>, interrupted: Option<Signal>) -> Self {
        match (interrupted, error) {
            (Some(sig), _) => Self::Interrupted(sig),
            (None, Some(e)) => Self::Incomplete(e, cause),
            (None, None) => Self::Complete,
        }
    }

    /// The signal that interrupted the test, by name.
    fn signal(&self) -> Option<&'static str> {
        match self {
            Self::Interrupted(sig) => Some(sig.name()),
            _ => None,
        }
    }

    fn kind(&self) -> Option<&'static str> {
        match self {
            Self::Complete => None,
            Self::Incomplete(_, Some(ErrorKind::PeerClosed)) => Some("peer_closed"),
            Self::Incomplete(_, Some(ErrorKind::NoTransaction)) => Some("no_transaction"),
            Self::Incomplete(..) => Some("incomplete"),
            Self::Interrupted(_) => Some("interrupted"),
        }
    }

    fn code(&self) -> u8 {
        match self {
            Self::Complete => 0,
            Self::Incomplete(..) => 1,
            Self::Interrupted(sig) => sig.exit_code(),
        }
    }

    fn into_result(self) -> Result<(), Failure> {
        match self {
            Self::Complete => Ok(()),
            Self::Incomplete(e, _) => {
                Err(Failure::Runtime(anyhow::anyhow!("test incomplete: {e}")))
            }
            Self::Interrupted(sig) => Err(Failure::Code(
                sig.exit_code(),
                format!(
                    "interrupted by {}: the partial results are above",
                    sig.name()
                ),
            )),
        }
    }
}

/// A failure before any data moved: one line that says what to do, and with `--json` or
/// `--json-stream` a document with the error.
fn failed_before_start(cfg: &ClientConfig, output: Output, e: &EngineError) -> Failure {
    failed_to_start(&cfg.host, cfg.port, &cfg.spec, Peer::Wirebench, output, e)
}

/// The kind of server a client measures against, as hints name it.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Peer {
    Wirebench,
    Iperf3,
    QuicPerf,
}

impl Peer {
    /// Where the user sets the port.
    fn port_flag(self) -> &'static str {
        match self {
            Self::Wirebench => "-p",
            Self::Iperf3 => "the port (--iperf3 HOST:PORT)",
            Self::QuicPerf => "the port (--quic-perf HOST:PORT)",
        }
    }

    /// The command that runs such a server.
    fn server_command(self) -> &'static str {
        match self {
            Self::Wirebench => "wirebench serve",
            Self::Iperf3 => "iperf3 -s",
            Self::QuicPerf => "a QUIC perf server",
        }
    }
}

/// As [`failed_before_start`], for any peer.
fn failed_to_start(
    host: &str,
    port: u16,
    spec: &TestSpec,
    peer: Peer,
    output: Output,
    e: &EngineError,
) -> Failure {
    let message = match hint(e, host, peer) {
        Some(h) => format!("{e}; {h}"),
        None => e.to_string(),
    };
    let doc = FailureDocument {
        schema: wirebench_proto::results::SCHEMA,
        wirebench: TOOL,
        server: format!("{host}:{port}"),
        test: TestView::from(spec),
        error: &message,
        error_kind: kind(e),
        error_cause: Some(e.kind()),
        signal: None,
        exit_code: 1,
    };
    print_error_doc(&doc, output);
    Failure::Runtime(anyhow::anyhow!(message))
}

/// A test interrupted before it began: nothing measured, and with `--json` or
/// `--json-stream` a document saying so, as for any other failure.
fn interrupted_before_start(
    host: &str,
    port: u16,
    spec: &TestSpec,
    output: Output,
    sig: Signal,
) -> Failure {
    let message = format!("interrupted by {} before the test began", sig.name());
    let doc = FailureDocument {
        schema: wirebench_proto::results::SCHEMA,
        wirebench: TOOL,
        server: format!("{host}:{port}"),
        test: TestView::from(spec),
        error: &message,
        error_kind: "interrupted",
        error_cause: None,
        signal: Some(sig.name()),
        exit_code: sig.exit_code(),
    };
    print_error_doc(&doc, output);
    Failure::Code(sig.exit_code(), message)
}

/// The document of a test that never began, if the output is JSON.
fn print_error_doc(doc: &FailureDocument<'_>, output: Output) {
    match output {
        Output::Stream => emit(&EndEvent {
            event: "error",
            doc,
        }),
        Output::Document(Format::Json) => {
            let mut out = io::stdout().lock();
            let _ = serde_json::to_writer_pretty(&mut out, doc);
            let _ = writeln!(out);
        }
        Output::Iperf3 => {
            let mut out = io::stdout().lock();
            let failure = wirebench_report::export::iperf3::failure(doc.error);
            let _ = serde_json::to_writer_pretty(&mut out, &failure);
            let _ = writeln!(out);
        }
        Output::Document(_) => {}
    }
}

/// What to do about an error, where one thing helps.
fn hint(e: &EngineError, host: &str, peer: Peer) -> Option<String> {
    use io::ErrorKind as K;
    let server = peer.server_command();
    match e {
        EngineError::Connect { source, addr } => match source.kind() {
            K::ConnectionRefused => {
                // A server that listens on IPv4 only (`serve -4`) refuses IPv6 this way.
                let v6 = match addr.parse::<std::net::SocketAddr>() {
                    Ok(a) if a.is_ipv6() && peer == Peer::Wirebench => {
                        " (over IPv6: a server started with -4 listens on IPv4 only)"
                    }
                    _ => "",
                };
                Some(format!(
                    "is `{server}` running on {host}{v6}? start it there, or check {}",
                    peer.port_flag()
                ))
            }
            K::TimedOut | K::WouldBlock => Some(format!(
                "no answer from {host}: check the address, and any firewall between"
            )),
            K::HostUnreachable | K::NetworkUnreachable => {
                Some("no route to it: check the address and this host's network".into())
            }
            _ => None,
        },
        _ => match e.kind() {
            ErrorKind::Timeout => Some(format!(
                "check that {host} runs `{server}` and that no firewall drops the traffic"
            )),
            _ => None,
        },
    }
}

/// The error's kind in the JSON documents (`error_kind`, whose values docs/results.md
/// lists): a refusal or the peer's report by where it came from, anything else by its kind.
fn kind(e: &EngineError) -> &'static str {
    match e {
        EngineError::Session(SessionError::Refused { .. }) => return "refused",
        EngineError::Session(SessionError::Peer { .. }) => return "peer",
        _ => {}
    }
    match e.kind() {
        ErrorKind::Connect => "connect",
        ErrorKind::Protocol => "protocol",
        ErrorKind::Timeout => "timeout",
        ErrorKind::Setup | ErrorKind::Auth => "setup",
        ErrorKind::NotWirebench => "not_wirebench",
        ErrorKind::Shutdown => "shutdown",
        ErrorKind::PeerClosed => "peer_closed",
        _ => "io",
    }
}

/// `--iperf3 HOST[:PORT]`: the test against an iperf3 server, with the same live output
/// and results document (the server's figures marked as reported by it).
fn iperf3(
    args: &RunArgs,
    target: &str,
    spec: TestSpec,
    client: &ClientArgs,
) -> Result<(), Failure> {
    // -4, -6 and -B pick the address family as for a wirebench server; -p names the port
    // as iperf3's does, when HOST:PORT does not.
    let port = iperf3_port(target, args.port).map_err(Failure::Usage)?;
    let (host, port) =
        self::target(target, port, client).map_err(|e| Failure::Usage(format!("--iperf3 {e}")))?;
    let cfg = wirebench_engine::Iperf3Config {
        host,
        port,
        spec,
        window: args.window.unwrap_or(0),
        packet_log: args.packet_log.clone(),
        mss: client.iperf3_only.set_mss,
        fq_rate_bps: client.iperf3_only.fq_rate.filter(|&r| r > 0),
        bind: client.bind,
    };
    // What an iperf3 server cannot run is a usage error, found before connecting.
    cfg.check().map_err(|e| Failure::Usage(e.to_string()))?;
    let output = output_of(args, client);
    let interrupt = Interrupt::install();
    if output == Output::Document(Format::Table) {
        connecting(&cfg.host, cfg.port, &cfg.spec);
    }
    if output == Output::Stream {
        emit(&StartEvent {
            event: "start",
            wirebench: TOOL,
            server: &format!("{}:{} (iperf3)", cfg.host, cfg.port),
            test: TestView::from(&cfg.spec),
        });
    }
    let mut live = live_view(args, &cfg.spec, output, interrupt.flag());
    if output == Output::Iperf3 {
        live.record_iperf3(Iperf3Record::begin(&cfg.host, cfg.port, &cfg.spec));
    }
    let results = match wirebench_engine::run_iperf3(&cfg, &mut live) {
        Ok(r) => r,
        Err(_) if interrupt.is_set() => {
            return Err(interrupted_before_start(
                &cfg.host,
                cfg.port,
                &cfg.spec,
                output,
                interrupt.signal().unwrap_or(Signal::Int),
            ))
        }
        Err(e) => {
            return Err(failed_to_start(
                &cfg.host,
                cfg.port,
                &cfg.spec,
                Peer::Iperf3,
                output,
                &e,
            ))
        }
    };
    let interrupted = interrupt.signal();
    live.finish();
    let recorded = live.iperf3_client();
    print_results(&results, output, interrupted, args, client, recorded)
}

/// `--quic-perf HOST[:PORT]`: the test against a QUIC perf server, with the same live
/// output and results document (the server's side unknown: the protocol has no report).
fn quic_perf(
    args: &RunArgs,
    target: &str,
    spec: TestSpec,
    client: &ClientArgs,
) -> Result<(), Failure> {
    let check = quic_check(args)?.ok_or_else(|| {
        Failure::Usage(
            "--quic-perf checks the server's key: give --quic-pin with its fingerprint, or --quic-insecure in a lab".into(),
        )
    })?;
    let port = if args.port == crate::cli::DEFAULT_PORT {
        wirebench_engine::DEFAULT_PERF_PORT
    } else {
        args.port
    };
    let (host, port) = self::target(target, port, client)
        .map_err(|e| Failure::Usage(format!("--quic-perf {e}")))?;
    let cfg = wirebench_engine::QuicPerfConfig {
        host,
        port,
        spec,
        check,
        bind: client.bind,
    };
    cfg.check().map_err(|e| Failure::Usage(e.to_string()))?;
    let output = output_of(args, client);
    let interrupt = Interrupt::install();
    if output == Output::Document(Format::Table) {
        connecting(&cfg.host, cfg.port, &cfg.spec);
    }
    let server = format!("{}:{} (QUIC perf)", cfg.host, cfg.port);
    if output == Output::Stream {
        emit(&StartEvent {
            event: "start",
            wirebench: TOOL,
            server: &server,
            test: TestView::from(&cfg.spec),
        });
    }
    let mut live = live_view(args, &cfg.spec, output, interrupt.flag());
    let results = wirebench_engine::run_quic_perf(&cfg, &mut live)
        .map_err(|e| failed_to_start(&cfg.host, cfg.port, &cfg.spec, Peer::QuicPerf, output, &e))?;
    let interrupted = interrupt.signal();
    live.finish();
    let recorded = live.iperf3_client();
    print_results(&results, output, interrupted, args, client, recorded)
}

/// `--both-directions`: the test as given (this side sends), then reversed (this side
/// receives; a file comes from the server's --files-dir under the same name), and the table
/// of send and receive times and rates.
fn both_directions(
    args: &RunArgs,
    client: &ClientArgs,
    cfg: ClientConfig,
    output: Output,
    interrupt: &Interrupt,
) -> Result<(), Failure> {
    let send = one_test(args, client, &cfg, output, interrupt)?;
    if let Some(sig) = interrupt.signal() {
        // A signal during the first test: its document, marked interrupted, and no second
        // test.
        eprintln!("interrupted by {}: the way back was not run", sig.name());
        return print_results(
            &send,
            output,
            Some(sig),
            args,
            client,
            Iperf3Client::default(),
        );
    }
    let mut back = cfg;
    back.spec.direction = Direction::Reverse;
    back.spec.file_back = false;
    back.file = None;
    back.packet_log = None;
    if back.spec.file.is_some() {
        // The server's file sets the amount.
        back.spec.bytes = None;
    }
    let receive = one_test(args, client, &back, output, interrupt)?;
    let both = BothDirections { send, receive };
    let format = match output {
        Output::Document(f) => f,
        // --iperf3-json conflicts with --both-directions.
        Output::Stream | Output::Iperf3 => Format::Json,
    };
    let mut out = io::stdout().lock();
    let exporter: &dyn Exporter<BothDirections> = match format {
        Format::Table => &human(args, client),
        f => f.exporter::<BothDirections>(),
    };
    exporter
        .export(&both, &mut out)
        .and_then(|()| out.flush())
        .context("writing the results")?;
    if let Some(sig) = interrupt.signal() {
        return Err(Failure::Code(
            sig.exit_code(),
            format!(
                "interrupted by {} on the way back: its figures are what was measured until then",
                sig.name()
            ),
        ));
    }
    match both.send.error.or(both.receive.error) {
        Some(e) => Err(Failure::Runtime(anyhow::anyhow!("test incomplete: {e}"))),
        None => Ok(()),
    }
}

/// Runs one test of `--both-directions` with live lines and their summary as the flags ask.
fn one_test(
    args: &RunArgs,
    client: &ClientArgs,
    cfg: &ClientConfig,
    output: Output,
    interrupt: &Interrupt,
) -> Result<Results, Failure> {
    let mut live = live_view(args, &cfg.spec, output, interrupt.flag());
    let results = match wirebench_engine::run(cfg, &mut live) {
        Ok(r) => r,
        Err(e) => {
            return Err(match interrupt.signal() {
                Some(sig) => interrupted_before_start(&cfg.host, cfg.port, &cfg.spec, output, sig),
                None => failed_before_start(cfg, output, &e),
            })
        }
    };
    live.finish();
    if live.shows_lines() {
        let mut out = io::stdout().lock();
        human(args, client)
            .export(&results, &mut out)
            .and_then(|()| out.flush())
            .context("writing the results")?;
    }
    Ok(results)
}

/// How a QUIC test checks the server: the pin or `--quic-insecure` given, else the
/// in-process server's own key, else the pre-shared key the server must prove; none for
/// other tests. A QUIC test against a host with
/// neither is a usage error.
pub(crate) fn quic_check(
    args: &RunArgs,
) -> Result<Option<wirebench_engine::quic::ServerCheck>, Failure> {
    use wirebench_engine::quic::{Fingerprint, ServerCheck};
    if !args.quic && args.quic_perf.is_none() {
        if args.quic_pin.is_some() || args.quic_insecure {
            return Err(Failure::Usage(
                "--quic-pin and --quic-insecure check a QUIC server: add --quic (or --quic-perf HOST)".into(),
            ));
        }
        return Ok(None);
    }
    // No host: the server in this process, whose key is known (not a perf server's).
    let own = (args.host.is_none() && args.quic_perf.is_none())
        .then(super::serve::in_process_pin)
        .flatten();
    // A pre-shared key proves the server too (not a perf server's: it has none).
    let psk = args.quic_perf.is_none()
        && (args.psk_file.is_some() || std::env::var_os("WIREBENCH_PSK").is_some());
    match (&args.quic_pin, args.quic_insecure, own) {
        (Some(text), _, _) => Fingerprint::parse(text)
            .map(|f| Some(ServerCheck::Pin(f)))
            .map_err(|e| Failure::Usage(e.to_string())),
        (None, true, _) => Ok(Some(ServerCheck::Insecure)),
        (None, false, Some(pin)) => Ok(Some(ServerCheck::Pin(pin))),
        (None, false, None) if psk => Ok(Some(ServerCheck::Psk)),
        (None, false, None) => Err(Failure::Usage(
            "--quic checks the server's key: give --quic-pin with the fingerprint `serve` printed, --psk-file with the server's pre-shared key, or --quic-insecure in a lab".into(),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_and_port_forms() {
        let ok = |h: &str| split_host_port(h, 5300).ok();
        assert_eq!(ok("example.net"), Some(("example.net".into(), 5300)));
        assert_eq!(ok("example.net:5201"), Some(("example.net".into(), 5201)));
        assert_eq!(ok("::1"), Some(("::1".into(), 5300)));
        assert_eq!(ok("[::1]:5201"), Some(("::1".into(), 5201)));
        assert!(split_host_port("host:port", 1).is_err());
    }

    #[test]
    fn an_iperf3_server_takes_its_port_from_p_as_iperf3_does() {
        let wb = crate::cli::DEFAULT_PORT;
        assert_eq!(iperf3_port("h", wb), Ok(5201));
        assert_eq!(iperf3_port("h", 25302), Ok(25302));
        assert_eq!(iperf3_port("h:25302", 25302), Ok(25302));
        assert_eq!(iperf3_port("h:25302", wb), Ok(5201), "HOST:PORT wins later");
        assert!(iperf3_port("h:1", 2)
            .unwrap_err()
            .contains("give one of them"));
    }
}
