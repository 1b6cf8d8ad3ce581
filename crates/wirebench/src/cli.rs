//! Command-line flags, and their conversion into validated configurations.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
use wirebench_engine::{ServerConfig, DEFAULT_MAX_TIMING};
use wirebench_proto::units::{parse_duration, parse_rate, parse_size, Rate};
use wirebench_report::experiment::{Preset, VaryError};
use wirebench_report::export::{Format, UnknownFormat};

mod lab;
mod layout;
mod mesh;
mod run_spec;

pub use lab::{LabAction, LabArgs, LinkArgs, ScenarioArgs};
pub use layout::{command, parse_from};
pub use mesh::{ArchiveAction, ArchiveArgs, ArchiveReportArgs, MeshArgs, QueryArgs};

/// The port wirebench listens on unless told otherwise.
pub const DEFAULT_PORT: u16 = 5300;

/// Default UDP rate: iperf3's 1 Mbit/s hides every interesting effect on a modern path, and
/// an unlimited default floods it; 1 Gbit/s is a line rate most paths can be asked for.
pub const DEFAULT_UDP_RATE_BPS: u64 = 1_000_000_000;

/// Default size of a QUIC datagram (`--datagrams`): one fits a packet of QUIC's smallest
/// path MTU (1200 bytes) with the packet's and the frame's headers.
pub const DEFAULT_QUIC_DATAGRAM: u64 = 1100;

/// Measure what a network path delivers over TCP and UDP.
#[derive(Debug, Parser)]
#[command(
    name = "wirebench",
    version,
    about,
    propagate_version = true,
    after_help = crate::EXIT_CODES
)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a server that clients measure against.
    Serve(ServeArgs),
    /// Run one test against a server (with no HOST: against one in this process, on loopback).
    Run(RunCmd),
    /// Print a packet log (from `run --packet-log`) as CSV.
    PacketLog(PacketLogArgs),
    /// Run a grid of tests, each repeated, and save every result with a summary.
    Sweep(SweepArgs),
    /// Draw a plot (SVG or PNG) from saved results: an experiment directory, one result's
    /// JSON, or a packet log.
    Plot(PlotArgs),
    /// Write a self-contained HTML report of an experiment directory.
    Report(ReportArgs),
    /// Put the shards of a sweep (`sweep --shard`) together: check they are one
    /// experiment, name any trial missing, and write the summary a one-machine run writes.
    Merge(MergeArgs),
    /// Emulate a network in namespaces: run a test or any command over an emulated link,
    /// keep a testbed up, or run a scenario file's trials.
    Lab(Box<LabArgs>),
    /// Run a mesh of tests on a schedule (a long-running agent), keeping every run in an
    /// archive.
    Mesh(MeshArgs),
    /// Read a mesh's archive: its runs, and the steps to worse in each path's series.
    Archive(ArchiveArgs),
    /// Print the completions of a shell (bash, zsh, fish, elvish, powershell) on stdout,
    /// e.g. `wirebench completions bash > /etc/bash_completion.d/wirebench`.
    Completions {
        /// The shell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print the manual pages (roff) on stdout, e.g. `wirebench man | man -l -` (or one
    /// command's: `wirebench man run`), or write a page per command into a directory
    /// (`--dir /usr/local/share/man/man1`).
    Man(ManArgs),
}

/// `wirebench man`.
#[derive(Debug, Args)]
pub struct ManArgs {
    /// The page of this command only (e.g. run, serve, lab up); none: every page.
    #[arg(value_name = "COMMAND")]
    pub command: Vec<String>,
    /// Write every page into DIR instead (wirebench.1, wirebench-run.1, ...).
    #[arg(long, value_name = "DIR", conflicts_with = "command")]
    pub dir: Option<PathBuf>,
}

/// `wirebench plot`.
#[derive(Debug, Args)]
pub struct PlotArgs {
    /// An experiment directory (from sweep), a results JSON file, a packet log, or a link
    /// log (.csv, from lab --link-log).
    pub input: PathBuf,
    /// More directories: shards of the same sweep, merged (as `wirebench merge`) first.
    ///
    /// Or more `run --mode rrul` results (.json): all drawn side by side, each under its
    /// file's name, on shared scales (one unit and range per row of panels).
    #[arg(value_name = "MORE")]
    pub more: Vec<PathBuf>,
    /// rate, received, time, box (experiments); throughput, latency (one result or a link
    /// log); rrul (a `run --mode rrul` result); arrival (a packet log).
    ///
    /// Default: rate for an experiment, throughput for a result or a link log (rrul for an
    /// rrul result), arrival for a packet log. `latency` of an rrul result draws its
    /// probes' round-trip CDFs, idle against loaded; `box` of an rrul sweep, its loaded UDP
    /// round trips per point.
    #[arg(long)]
    pub kind: Option<String>,
    /// The image to write: .svg or .png.
    #[arg(short, long)]
    pub output: PathBuf,
    /// Size, resolution and axes.
    #[command(flatten)]
    pub look: crate::look::LookArgs,
}

/// `wirebench report`.
#[derive(Debug, Args)]
pub struct ReportArgs {
    /// The experiment directory (from sweep).
    pub dir: PathBuf,
    /// More directories: shards of the same sweep, merged (as `wirebench merge`) first.
    #[arg(value_name = "MORE")]
    pub more: Vec<PathBuf>,
    /// The HTML file to write.
    #[arg(short, long, default_value = "report.html")]
    pub output: PathBuf,
}

/// `wirebench merge`.
#[derive(Debug, Args)]
#[command(after_help = crate::EXIT_CODES)]
pub struct MergeArgs {
    /// The shards' directories (or the one directory they share).
    #[arg(required = true, value_name = "DIR")]
    pub dirs: Vec<PathBuf>,
    /// The merged experiment's directory (default: the one DIR, when only one is given).
    #[arg(short, long, value_name = "OUT")]
    pub out: Option<PathBuf>,
}

/// `wirebench sweep`.
#[derive(Debug, Args)]
#[command(after_help = crate::EXIT_CODES)]
pub struct SweepArgs {
    /// What to vary, NAME=V1,V2,... or NAME=FROM..TO:log|lin:N (rate, size, bytes, time,
    /// mode, proto, parallel, direction); repeat for a grid.
    #[arg(long = "vary", value_name = "NAME=VALUES")]
    pub vary: Vec<String>,
    /// Trials per point.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub repeat: u32,
    /// Run the trials in grid order (default: shuffled, so that drift over time does not
    /// masquerade as an effect of a parameter).
    #[arg(long)]
    pub ordered: bool,
    /// Pause between trials (e.g. 200ms).
    #[arg(long, value_parser = parse_duration, default_value = "0s")]
    pub pause: Duration,
    /// On a rerun with the same --out, measure a trial that failed again, until it has been
    /// tried N + 1 times in all (0: keep failed trials as they are).
    ///
    /// A failed trial never counts in the summary's figures.
    #[arg(long, value_name = "N", default_value_t = 3)]
    pub retry_failed: u32,
    /// Where to save the experiment (default: ./wirebench-results/DATE-TIME).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// A ready-made experiment: rate-sweep (receive rate against send rate, 1M to 1G, 2 and
    /// 500-byte messages, UDP and TCP) or transfer-time (1 MB to 1536 MB, TCP and UDP, stream
    /// and stop-and-wait, with the table of times and counts).
    #[arg(long, value_name = "NAME", value_parser = parse_preset)]
    pub preset: Option<Preset>,
    /// Scale a preset's amounts and point counts down (e.g. 0.01) to keep it short (only
    /// with --preset; default 1).
    #[arg(long)]
    pub scale: Option<f64>,
    /// Run only shard I of N of the trials (0 <= I < N; trial k = point·repeat + repeat
    /// index goes to shard k mod N), into an --out every shard shares; `auto` reads a Slurm
    /// job array's SLURM_ARRAY_TASK_ID/COUNT or a Kubernetes Indexed Job's
    /// JOB_COMPLETION_INDEX with WIREBENCH_SHARD_COUNT.
    ///
    /// Trials already saved there are skipped; `wirebench merge DIR` makes the summary once
    /// every shard is done.
    #[arg(long, value_name = "I/N|auto")]
    pub shard: Option<String>,
    /// Servers to measure, HOST[:PORT] separated by commas: a grid parameter `server` (each
    /// point says which).
    ///
    /// With --shard over a multiple of their count, shard I measures server I mod (their
    /// count) only, so that one job array measures a mesh.
    #[arg(long, value_name = "HOSTS", value_delimiter = ',')]
    pub targets: Vec<String>,
    /// All-to-all: every host measures every other, HOST[:PORT] separated by commas (each
    /// runs `wirebench serve`).
    ///
    /// The grid gets `client` and `server` parameters, less the pairs of a host with
    /// itself; with --shard over a multiple of the hosts' count, shard I runs as client I
    /// mod (their count), so it must run on that host (its shard record and trials.csv name
    /// the host it ran on).
    #[arg(long, value_name = "HOSTS", value_delimiter = ',')]
    pub mesh: Vec<String>,
    /// The test each point varies (the flags of `run`).
    #[command(flatten)]
    pub run: RunArgs,
}

/// `wirebench packet-log`.
#[derive(Debug, Args)]
pub struct PacketLogArgs {
    /// The log file written by `run --packet-log`.
    pub file: PathBuf,
}

/// `wirebench serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Address to listen on (as iperf3's -B).
    ///
    /// Default: every address, IPv6 and IPv4 (one dual-stack socket, `[::]`).
    #[arg(short = 'B', long, value_name = "ADDRESS")]
    pub bind: Option<IpAddr>,
    /// Listen on IPv4 only (0.0.0.0 unless --bind).
    #[arg(
        short = '4',
        long = "ipv4",
        alias = "version4",
        conflicts_with = "ipv6"
    )]
    pub ipv4: bool,
    /// Listen on IPv6 only (`[::]` unless --bind): IPv4 clients are refused.
    #[arg(short = '6', long = "ipv6", alias = "version6")]
    pub ipv6: bool,
    /// TCP port for control and data; UDP data uses the same number (0: any free port).
    #[arg(short, long, default_value_t = DEFAULT_PORT)]
    pub port: u16,
    /// Most tests running at once; more are refused with a message.
    /// (The default's per-client half, 3, holds one `run --mode rrul`: its load and two probes.)
    #[arg(long, default_value_t = 6, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub max_tests: u32,
    /// Longest test accepted (e.g. 60s); any test is ended there.
    #[arg(long, value_parser = parse_duration)]
    pub max_duration: Option<Duration>,
    /// Highest sending rate accepted, bits/s, over all of a test's streams (e.g. 1G); tests
    /// must then ask for a rate.
    #[arg(long, value_parser = parse_rate)]
    pub max_rate: Option<Rate>,
    /// Most bytes a test may move (e.g. 10G); tests must then be bounded (-n, or -b and -t).
    #[arg(long, value_parser = parse_size)]
    pub max_bytes: Option<u64>,
    #[command(flatten)]
    pub budget: crate::budget::BudgetArgs,
    /// Most parallel streams per test (both ways for --bidir), iperf3 clients' -P too
    /// [default and most: 64].
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_streams: Option<u32>,
    /// Largest message (or request, or response) per test, bytes.
    #[arg(long, value_parser = parse_size)]
    pub max_size: Option<u64>,
    /// Most tests one client address may run at once.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_tests_per_client: Option<u32>,
    /// Most tests one client address may start per minute.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_tests_per_minute: Option<u32>,
    /// Do not log one line per session on stderr.
    #[arg(short, long)]
    pub quiet: bool,
    /// Serve one test, then exit (as iperf3's -1/--one-off).
    #[arg(short = '1', long)]
    pub one_off: bool,
    /// Clients must prove they hold the pre-shared key in FILE (at least 16 bytes; or give it
    /// in the WIREBENCH_PSK variable).
    #[arg(long, value_name = "FILE")]
    pub psk_file: Option<PathBuf>,
    /// Print the server's memory (RSS now and at its peak) and the tests running on stderr
    /// at this interval (e.g. 10s).
    #[arg(long, value_name = "INTERVAL", value_parser = parse_duration)]
    pub stats: Option<Duration>,
    /// Save the files clients send with --file here (one per test, named after the test and
    /// the file); without it they are only checked, never written.
    #[arg(long, value_name = "DIR")]
    pub save_dir: Option<PathBuf>,
    /// Send files from here to clients that ask with -R --file NAME (never from elsewhere).
    #[arg(long, value_name = "DIR")]
    pub files_dir: Option<PathBuf>,
    /// Longest --gap, --ack-timeout and --drain a test may ask (e.g. 10s, the default).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub max_timing: Option<Duration>,
    /// Serve Prometheus metrics over HTTP at this address, path /metrics (e.g. 127.0.0.1:9464):
    /// the text format, or OpenMetrics when the scraper asks for it.
    #[arg(long, value_name = "ADDR")]
    pub metrics: Option<SocketAddr>,
    /// The TCP/IP stack of the tests' data connections.
    #[command(flatten)]
    pub stack: StackArgs,
    /// --stack smoltcp: the TCP port the stack takes data connections on (the server names
    /// it to each client; the host forwards it to the stack's address).
    ///
    /// Default: --port + 1.
    #[arg(long, value_name = "PORT")]
    pub stack_port: Option<u16>,
    /// Also answer iperf3 clients on this port (TCP and UDP), e.g. 5201; they are answered
    /// on --port too, told apart by their first bytes.
    #[arg(long, value_name = "PORT")]
    pub iperf3_port: Option<u16>,
    /// Also serve QUIC perf clients (secnetperf, quicperf, quinn's perf) on this UDP port.
    ///
    /// The QUIC performance protocol (ALPN `perf`), with the server's QUIC key: each
    /// connection is a test, admitted and limited as every other (--max-tests and the
    /// per-client and per-minute limits, --max-memory, --max-duration, --max-bytes,
    /// --max-rate, --max-streams streams at once).
    #[arg(long, value_name = "PORT", conflicts_with = "no_quic")]
    pub quic_perf_port: Option<u16>,
    /// Admit iperf3 clients although --psk-file is set (iperf3 cannot prove a key; without
    /// this flag such a server refuses them and logs why).
    #[arg(long)]
    pub allow_iperf3: bool,
    /// Serve no QUIC tests (QUIC Initials to the UDP port are dropped).
    #[arg(long)]
    pub no_quic: bool,
    /// QUIC: keep the server's key pair in FILE (PEM; made there if missing), so that its
    /// fingerprint survives restarts; default: a new key pair at each start.
    #[arg(long, value_name = "FILE", conflicts_with = "no_quic")]
    pub quic_key: Option<std::path::PathBuf>,
    /// An iperf3 client's --get-server-output gets the server's JSON document, as from
    /// `iperf3 -s -J` (default: its text lines, as from `iperf3 -s`).
    #[arg(long)]
    pub iperf3_json: bool,
    /// A line per interval of each test on stdout, the server's own figures (a receiver's:
    /// what arrived, loss and jitter), at the interval the client asked: auto (when stdout is
    /// a terminal), always or never.
    #[arg(long, value_enum, value_name = "WHEN", default_value = "auto")]
    pub live: LiveWhen,
}

/// When `serve` prints live lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LiveWhen {
    /// When stdout is a terminal.
    Auto,
    /// Always (on a pipe too, without escape codes).
    Always,
    /// Never.
    Never,
}

impl ServeArgs {
    /// The address to listen on: --bind, else the wildcard of -4, -6, or both (dual stack).
    fn listen_ip(&self) -> Result<IpAddr, String> {
        use std::net::{Ipv4Addr, Ipv6Addr};
        match (self.bind, self.ipv4, self.ipv6) {
            (Some(ip @ IpAddr::V6(_)), true, _) => Err(format!(
                "-4 listens on IPv4, and --bind {ip} is IPv6: leave one out"
            )),
            (Some(ip @ IpAddr::V4(_)), _, true) => Err(format!(
                "-6 listens on IPv6, and --bind {ip} is IPv4: leave one out"
            )),
            (Some(ip), _, _) => Ok(ip),
            (None, true, _) => Ok(Ipv4Addr::UNSPECIFIED.into()),
            (None, _, _) => Ok(Ipv6Addr::UNSPECIFIED.into()),
        }
    }

    /// The server configuration these flags describe.
    pub fn config(&self) -> Result<ServerConfig, String> {
        let max_rate_bps = match self.max_rate {
            None => None,
            Some(Rate::BitsPerSecond(0)) => None,
            Some(Rate::BitsPerSecond(b)) => Some(b),
            Some(Rate::PacketsPerSecond(_)) => {
                return Err("--max-rate takes bits/s (e.g. 1G), not packets/s".into())
            }
        };
        for (flag, dir) in [
            ("--save-dir", &self.save_dir),
            ("--files-dir", &self.files_dir),
        ] {
            if let Some(d) = dir {
                if !d.is_dir() {
                    return Err(format!("{flag} {}: not a directory", d.display()));
                }
            }
        }
        Ok(ServerConfig {
            stats_every: self.stats,
            max_bytes: self.max_bytes,
            max_streams: self.max_streams,
            max_size: self.max_size,
            // By default one address may hold at most half the slots: others still get in
            // while it does its worst (a one-slot server has nothing to share).
            max_tests_per_client: match self.max_tests_per_client {
                Some(n) => Some(n as usize),
                None if self.max_tests >= 2 => Some(self.max_tests as usize / 2),
                None => None,
            },
            max_timing: self.max_timing.unwrap_or(DEFAULT_MAX_TIMING),
            metrics: self.metrics,
            max_tests_per_minute: self.max_tests_per_minute.map(|n| n as usize),
            psk: crate::psk::load_psk(self.psk_file.as_deref())?,
            save_dir: self.save_dir.clone().map(|d| self.budget.save_dir(d)),
            files_dir: self.files_dir.clone(),
            bind: SocketAddr::new(self.listen_ip()?, self.port),
            ipv6_only: self.ipv6,
            max_tests: self.max_tests as usize,
            max_duration: self.max_duration,
            budget: self.budget.budget(max_rate_bps, self.max_tests)?,
            max_rate_bps,
            log: !self.quiet,
            allow_iperf3: self.allow_iperf3,
            iperf3_json: self.iperf3_json,
            iperf3_port: self.iperf3_port,
            quic_perf_port: self.quic_perf_port,
            // `serve` sets these: its live lines, and its --stack (a crate of its own).
            watch: None,
            user_stack: None,
            quic: None,
        })
    }
}

/// Transport mechanism, spelled as in the results document: the one list of the names
/// `--mode` and a sweep's `--vary mode=` take.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ModeArg {
    /// Send without waiting.
    Stream,
    /// Wait for the receiver to acknowledge each message before sending the next.
    StopAndWait,
    /// Request/response: time each round trip, one transaction in flight.
    Rr,
    /// Connect/request/response: as rr, on a new TCP connection each time (netperf's
    /// TCP_CRR).
    Crr,
    /// Latency under load (flent's RRUL): UDP and TCP rr probes alone for --idle, then with
    /// TCP streams each way (4, or -P) for -t, then alone again; results in `end.rrul`.
    Rrul,
}

/// `wirebench run`.
#[derive(Debug, Clone, Args)]
pub struct RunArgs {
    /// Server to measure against; without it, a server in this process on loopback.
    pub host: Option<String>,
    /// Server port.
    #[arg(short, long, default_value_t = DEFAULT_PORT)]
    pub port: u16,
    /// Use TCP (the default).
    #[arg(long, conflicts_with = "udp")]
    pub tcp: bool,
    /// Use UDP.
    #[arg(short = 'u', long)]
    pub udp: bool,
    /// Use QUIC (check the server's key: --quic-pin, or its --psk-file)
    ///
    /// To the server's UDP port of the same number. The server is checked by its key's
    /// fingerprint (--quic-pin), or by proving the pre-shared key over the connection's
    /// own TLS session (--psk-file without --quic-pin); --quic-insecure checks nothing.
    /// The test and its control dialogue run over QUIC connections: only UDP needs to pass
    /// a firewall.
    #[arg(long, conflicts_with_all = ["udp", "tcp"])]
    pub quic: bool,
    /// QUIC: streams per connection; the test has -P connections of this many.
    #[arg(long, value_name = "N", requires = "quic")]
    pub quic_streams: Option<u32>,
    /// QUIC: the server key's fingerprint, as `serve` prints it (sha256:...).
    #[arg(long, value_name = "FINGERPRINT")]
    pub quic_pin: Option<String>,
    /// QUIC: check no key (a lab; anyone on the path could answer instead of the server).
    #[arg(long, conflicts_with = "quic_pin")]
    pub quic_insecure: bool,
    /// QUIC: the data as datagrams, counted as UDP's are
    ///
    /// Unreliable datagrams (RFC 9221), one per message with the data header: loss,
    /// duplicates, reordering, jitter, --packet-log. -l is 16 to 1400 (default 1100).
    #[arg(long, requires = "quic")]
    pub datagrams: bool,
    /// QUIC --mode crr: requests in 0-RTT on resumed sessions
    ///
    /// Each transaction's connection resumes the session of the one before and sends its
    /// request with the handshake's first flight; end.quic.zero_rtt_accepted counts those
    /// the server took.
    #[arg(long = "quic-0rtt", requires = "quic")]
    pub quic_zero_rtt: bool,
    /// QUIC: the largest packet to probe the path for, bytes of UDP payload
    ///
    /// The server is told to send no larger (each side stops at what the other takes: a
    /// wirebench server at most 6500). 1200 to 65527; default the MTU the kernel knows for
    /// the path less the IP and UDP headers, at most 6500 (ten fill one 64 KiB GSO send). end.quic.mtu_bytes says what the probing found; e.g.
    /// 1252 measures with the packets most Internet paths carry.
    #[arg(long = "quic-mtu", value_name = "BYTES", value_parser = clap::value_parser!(u16).range(1200..=65527))]
    pub quic_mtu: Option<u16>,
    /// How messages are sent (rr and crr: --size is the request, --response-size the answer).
    #[arg(long, value_enum, default_value = "stream")]
    pub mode: ModeArg,
    /// Message size in bytes (128K is 128,000; 128Ki is iperf3's 128K).
    ///
    /// TCP: 1 to 16Mi, default 128Ki; UDP: 1 to 65507, default 1472; --mode rr: the
    /// request, default 64.
    #[arg(short = 'l', long, alias = "length", value_parser = parse_size)]
    pub size: Option<u64>,
    /// Amount of data to send, bytes: 5M is 5,000,000 (5Mi is iperf3's 5M).
    ///
    /// Sizes are SI, as rates: K, M, G are powers of 1000, Ki, Mi, Gi of 1024 (e.g. 100M,
    /// 1GiB). The last message may be shorter.
    #[arg(short = 'n', long, value_parser = parse_size, conflicts_with = "time")]
    pub bytes: Option<u64>,
    /// Send N messages of --size (as iperf3's -k/--blockcount; e.g. 1000, 1K): -n N × size.
    #[arg(short = 'k', long, value_name = "N", value_parser = parse_size,
          conflicts_with_all = ["bytes", "time"])]
    pub blockcount: Option<u64>,
    /// How long to send (e.g. 10s, 250ms); default 10s when --bytes is not given.
    #[arg(short = 't', long, value_parser = parse_duration)]
    pub time: Option<Duration>,
    /// Sending rate: bits/s (10M, 2.5G) or packets/s (100kpps); 0 is unlimited.
    ///
    /// Default: unlimited for TCP, 1G for UDP.
    #[arg(short = 'b', long, aliases = ["bitrate", "bandwidth"], value_parser = parse_rate)]
    pub rate: Option<Rate>,
    /// Pause after each message (e.g. 1ms), to send more gently than the rate alone would.
    #[arg(long, value_parser = parse_duration)]
    pub gap: Option<Duration>,
    /// Parallel streams (as iperf3's -P).
    ///
    /// Connections (TCP) or socket pairs (UDP), each on a thread of its own on both sides;
    /// the results add them up and list each.
    #[arg(short = 'P', long, default_value_t = 1)]
    pub parallel: u32,
    /// Reverse: the server sends, the client receives.
    #[arg(short = 'R', long, conflicts_with = "bidir")]
    pub reverse: bool,
    /// Both directions at once: -P streams each way; the results give each direction.
    #[arg(long)]
    pub bidir: bool,
    /// Interval of the live lines and of the recorded intervals (e.g. 1s, 500ms; default
    /// 1s).
    ///
    /// Live lines are printed with the table whatever stdout is (a pipe too); `-i 0` turns
    /// them off. Intervals are always in --json.
    #[arg(short = 'i', long, value_parser = parse_duration)]
    pub interval: Option<Duration>,
    /// Print the results document as JSON on stdout (as --format json).
    ///
    /// A test that fails still prints one document, with `error`, `error_kind` and
    /// `exit_code`.
    #[arg(short = 'J', long, conflicts_with = "format")]
    pub json: bool,
    /// Print the results in iperf3's -J schema, for tools written for iperf3's JSON.
    ///
    /// Its start, intervals and end; what wirebench does not measure is null. In `sweep`,
    /// each trial is also written so, to iperf3/ beside trials/ in --out.
    #[arg(long, conflicts_with_all = ["json", "format", "both_directions"])]
    pub iperf3_json: bool,
    /// Rate units (as iperf3's -f), or the results document's format.
    ///
    /// Units of the live lines and summary: k, m, g (bits/s), K, M, G (bytes/s) or a
    /// (automatic, the default); or how to print the results document: table (the
    /// default), json, csv (a row per direction) or ndjson (one line).
    #[arg(short = 'f', long, value_name = "UNITS|FORMAT", value_parser = parse_format)]
    pub format: Option<FormatArg>,
    /// How long the receiver waits for data in flight after the sender is done (under `lab`,
    /// a TCP stream test without it waits as long as its send buffers take to cross the link).
    #[arg(long, value_parser = parse_duration, default_value = "1s")]
    pub drain: Duration,
    /// Stop-and-wait over UDP: resend a message not acknowledged within this time.
    #[arg(long, value_parser = parse_duration, default_value = "200ms")]
    pub ack_timeout: Duration,
    /// UDP streaming: write a record per datagram received to FILE.
    ///
    /// Binary, a record per datagram and per loss run (`wirebench packet-log FILE` prints
    /// it as CSV). Either side may be the receiver. QUIC's --datagrams too.
    #[arg(long, value_name = "FILE")]
    pub packet_log: Option<PathBuf>,
    /// UDP: one datagram per system call on both sides (plain send/recv: no sendmmsg or
    /// recvmmsg batches, no GSO or GRO), as most applications send.
    ///
    /// QUIC: the test's connections send one packet per system call, no GSO batches (from
    /// the test's start on both sides; a handshake may still use them).
    #[arg(long)]
    pub no_offload: bool,
    /// --mode rrul: each idle phase's length, before and after the load.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, default_value = "5s")]
    pub idle: Duration,
    /// --mode rrul: a UDP probe every DURATION, answered or not, like irtt -i (default 100ms or -i)
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, conflicts_with = "interval")]
    pub probe_interval: Option<Duration>,
    /// --mode rr: the response's size (default: the same as --size).
    #[arg(long, value_parser = parse_size)]
    pub response_size: Option<u64>,
    /// TCP congestion control for the data connection, on both sides (e.g. cubic, reno,
    /// bbr); default: each host's own.
    ///
    /// What was used is in the results' datapath. With --quic: QUIC's controller, one of
    /// cubic (the default), newreno, bbr.
    #[arg(short = 'C', long, alias = "congestion", value_name = "ALGO")]
    pub cc: Option<String>,
    /// TCP: send with MSG_ZEROCOPY; the results say whether the kernel really skipped the
    /// copy (it does not on loopback).
    #[arg(short = 'Z', long)]
    pub zerocopy: bool,
    /// Ask the server to run this test alone among tests that ask so: refused (error kind
    /// `busy`, exit 1) while another runs; tests that do not ask run beside it.
    #[arg(long)]
    pub exclusive: bool,
    /// --mode rr and crr: both sides spin on the non-blocking socket for up to DURATION
    /// (default 50us, the kernel's suggested busy_read) before each blocking wait, and ask
    /// for SO_BUSY_POLL: lower round trips for a core kept busy.
    ///
    /// The results' datapath says what was used.
    #[arg(long, value_name = "DURATION", num_args = 0..=1, require_equals = true,
          default_missing_value = "50us", value_parser = parse_duration)]
    pub busy_poll: Option<Duration>,
    /// Send this file's contents (the amount is its size; a server with --save-dir saves
    /// it).
    ///
    /// With -R: the NAME of a file in the server's --files-dir, which the server sends.
    #[arg(short = 'F', long, value_name = "PATH", conflicts_with_all = ["bytes", "time", "blockcount"])]
    pub file: Option<PathBuf>,
    /// Authenticate with the pre-shared key in FILE.
    ///
    /// Or in the WIREBENCH_PSK variable; for a server started with one. Both sides prove
    /// it: with --quic and no --quic-pin, it is how the client knows the server.
    #[arg(long, value_name = "FILE")]
    pub psk_file: Option<PathBuf>,
    /// Run the test, then the same reversed (with --file: the server sends the file of that
    /// name from its --files-dir), and print a table of send and receive times and rates.
    #[arg(long, conflicts_with_all = ["reverse", "bidir"])]
    pub both_directions: bool,
    /// With -R --file: save the server's file here (without it, it is only checked).
    #[arg(long, value_name = "PATH", requires = "file")]
    pub save: Option<PathBuf>,
    /// Measure against an iperf3 server (port 5201 unless HOST:PORT or -p says).
    ///
    /// Instead of a wirebench one: TCP or UDP streams, with -O, -k, -B, and -M and
    /// --fq-rate for it alone.
    #[arg(long, value_name = "HOST[:PORT]", conflicts_with_all = ["host", "file", "both_directions", "psk_file"])]
    pub iperf3: Option<String>,
    /// Measure against a QUIC perf server (msquic's secnetperf, picoquic's quicperf, ...)
    ///
    /// The QUIC performance protocol (ALPN `perf`), port 4433 unless HOST:PORT or -p says:
    /// upload (the default), download (-R) or both (--bidir), -P streams of one connection;
    /// --mode rr: a stream per transaction. Check its key with --quic-pin or
    /// --quic-insecure. The server reports nothing: its
    /// side of each figure is unknown.
    #[arg(long, value_name = "HOST[:PORT]", conflicts_with_all = ["host", "file", "both_directions", "psk_file", "iperf3", "udp", "quic"])]
    pub quic_perf: Option<String>,
    /// Socket buffer of the data sockets on both sides (as iperf3's -w, e.g. 4M).
    ///
    /// SO_SNDBUF and SO_RCVBUF, 1K to 1G. TCP's autotuning is then off; the kernel caps the size (net.core.wmem_max,
    /// rmem_max), and the results' datapath says what it granted.
    #[arg(short = 'w', long, value_name = "SIZE", value_parser = parse_size)]
    pub window: Option<u64>,
    /// Leave the first DURATION out of the summary (as iperf3's -O, e.g. 2s).
    ///
    /// TCP's slow start, queues filling: the test runs that much longer than -t. Live lines mark those intervals (omitted); the summary and the document's
    /// `end.after_omit` start after them, while `end` keeps the whole test.
    #[arg(short = 'O', long, value_name = "DURATION", value_parser = parse_duration)]
    pub omit: Option<Duration>,
}

/// `wirebench run`: the test's flags, and those of the client alone. `-V` is iperf3's
/// verbose here, so the version is `--version` alone.
#[derive(Debug, Clone, Args)]
#[command(version, after_help = crate::EXIT_CODES, disable_version_flag = true)]
pub struct RunCmd {
    /// The test.
    #[command(flatten)]
    pub run: RunArgs,
    /// The client's own flags.
    #[command(flatten)]
    pub client: ClientArgs,
}

/// Flags of `run` that only the client's own output and connection use (not sweeps).
#[derive(Debug, Clone, Args)]
pub struct ClientArgs {
    /// Write the test as it goes as NDJSON on stdout.
    ///
    /// A `start` event, an `interval` event per interval of either side, then `end` (the
    /// results document, as --json prints it) or `error`.
    #[arg(long, conflicts_with_all = ["json", "format", "iperf3_json"])]
    pub json_stream: bool,
    /// Print every figure after the summary (as iperf3's -V).
    ///
    /// The totals table, delay and interarrival percentiles, pacing, CPU and memory cost,
    /// the data path.
    #[arg(short = 'V', long)]
    pub verbose: bool,
    /// Print the version.
    #[arg(long, action = clap::ArgAction::Version)]
    pub version: Option<bool>,
    /// Connect over IPv4 only.
    #[arg(
        short = '4',
        long = "ipv4",
        alias = "version4",
        conflicts_with = "ipv6"
    )]
    pub ipv4: bool,
    /// Connect over IPv6 only.
    #[arg(short = '6', long = "ipv6", alias = "version6")]
    pub ipv6: bool,
    /// The local address of the control and data sockets (as iperf3's -B).
    ///
    /// E.g. to pick the interface of a multi-homed host (not with --mode crr).
    #[arg(short = 'B', long = "bind", value_name = "ADDRESS")]
    pub bind: Option<IpAddr>,
    /// iperf3's options only an iperf3 server takes.
    #[command(flatten)]
    pub iperf3_only: crate::iperf3_args::Iperf3Args,
    /// iperf3's flags that wirebench does without.
    #[command(flatten)]
    pub iperf3_habits: Iperf3Habits,
    /// The TCP/IP stack of the data connection.
    #[command(flatten)]
    pub stack: StackArgs,
}

/// iperf3's client flags that ask for what wirebench always does: accepted, so that
/// iperf3's scripts run unchanged.
#[derive(Debug, Clone, Args)]
pub struct Iperf3Habits {
    /// Accepted for iperf3's scripts: wirebench flushes each line as it prints it.
    #[arg(long)]
    pub forceflush: bool,
    /// Accepted for iperf3's scripts: the server's figures are always in the results (its
    /// lines, and the document's server side).
    #[arg(long)]
    pub get_server_output: bool,
}

/// `--stack` and its settings, for `run` and `serve`.
#[derive(Debug, Clone, clap::Args)]
pub struct StackArgs {
    /// The TCP/IP stack that carries the TCP data connection: kernel or smoltcp.
    ///
    /// smoltcp runs in user space, on a TUN device: `wirebench lab --stack smoltcp`
    /// prepares one for the client's host, `--server-stack smoltcp` for the server's. The
    /// control connection stays on the kernel's stack.
    #[arg(long, value_enum, default_value = "kernel")]
    pub stack: StackArg,
    /// --stack smoltcp: the TUN device (made, up and routed beforehand).
    #[arg(long, value_name = "NAME", default_value = "wbsmol0")]
    pub stack_device: String,
    /// --stack smoltcp: the stack's own IPv4 address and prefix, e.g. 10.77.0.101/24 (the
    /// lab's client host's; its server host's is 10.77.0.102/24).
    #[arg(long, value_name = "ADDR/PREFIX")]
    pub stack_addr: Option<String>,
    /// --stack smoltcp: its socket buffer each way (default 256 KiB; fixed, no autotuning).
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub stack_buffer: Option<u64>,
}

/// `--stack`: which TCP/IP stack carries the data connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum StackArg {
    /// The kernel's.
    Kernel,
    /// smoltcp, in user space, on a TUN device.
    Smoltcp,
}

/// `--preset NAME`: the names in help, and the first releases' names unlisted.
fn parse_preset(name: &str) -> Result<Preset, VaryError> {
    Preset::parse(name)
}

/// What `-f/--format` names: iperf3's rate units, or the document's format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FormatArg {
    /// The results document's format.
    Document(Format),
    /// Units of the rates in live lines and the summary.
    Units(RateUnits),
}

/// The units of rates in live lines and the summary (iperf3's `-f` letters).
pub use wirebench_report::export::RateUnits;

/// `-f/--format NAME`: a rate unit letter, else a document format.
fn parse_format(name: &str) -> Result<FormatArg, UnknownFormat> {
    Ok(match name {
        "a" | "A" => FormatArg::Units(RateUnits::Auto),
        "k" | "m" | "g" => FormatArg::Units(RateUnits::Bits(name.chars().next().unwrap_or('m'))),
        "K" | "M" | "G" => FormatArg::Units(RateUnits::Bytes(name.chars().next().unwrap_or('M'))),
        _ => FormatArg::Document(Format::parse(name)?),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use wirebench_proto::spec::TestSpec;

    fn spec_of(flags: &[&str]) -> Result<TestSpec, String> {
        let mut argv = vec!["wirebench", "run", "h"];
        argv.extend_from_slice(flags);
        match Cli::try_parse_from(argv)
            .map_err(|e| e.to_string())?
            .command
        {
            Command::Run(r) => r.run.spec(),
            _ => Err("not run".into()),
        }
    }

    /// `TestSpec::default()` is what `run HOST` asks for, so the tests that start from it
    /// start from what people run.
    #[test]
    fn run_without_flags_asks_for_the_default_spec() {
        assert_eq!(spec_of(&[]), Ok(TestSpec::default()));
    }

    /// The flags whose 0 means "none" give none, as a peer reads a 0 off the wire.
    #[test]
    fn zero_rate_response_size_and_busy_poll_are_none() {
        let s =
            spec_of(&["-u", "-b", "0", "--mode", "rr", "--response-size", "0"]).expect("a spec");
        assert_eq!(
            (s.rate_bps, s.rate_pps, s.response_size),
            (None, None, None)
        );
        let s = spec_of(&["--mode", "rr", "--busy-poll=0s"]).expect("a spec");
        assert_eq!(s.busy_poll_ns, None);
        let s = spec_of(&["-b", "100pps"]).expect("a spec");
        assert_eq!((s.rate_bps, s.rate_pps), (None, Some(100)));
    }

    /// iperf3's -k: N messages of -l, as bytes.
    #[test]
    fn blockcount_is_that_many_messages_of_size() {
        let s = spec_of(&["-k", "100", "-l", "1000"]).expect("a spec");
        assert_eq!((s.bytes, s.duration_ns), (Some(100_000), None));
        let err = spec_of(&["-k", "18446744073709551615", "-l", "2"]).expect_err("too many bytes");
        assert!(err.contains("-k"), "{err}");
    }

    fn serve_config(flags: &[&str]) -> Result<ServerConfig, String> {
        let argv = [&["wirebench", "serve"][..], flags].concat();
        match Cli::try_parse_from(argv)
            .map_err(|e| e.to_string())?
            .command
        {
            Command::Serve(s) => s.config(),
            _ => Err("not serve".into()),
        }
    }

    /// No address: `[::]`, both families; -4 and -6 pick one; an address of the other
    /// family is refused in words.
    #[test]
    fn serve_listens_dual_stack_unless_told() {
        let cfg = serve_config(&[]).expect("config");
        assert_eq!(
            (cfg.bind.to_string(), cfg.ipv6_only),
            ("[::]:5300".into(), false)
        );
        let cfg = serve_config(&["-4"]).expect("config");
        assert_eq!(cfg.bind.to_string(), "0.0.0.0:5300");
        let cfg = serve_config(&["-6"]).expect("config");
        assert_eq!(
            (cfg.bind.to_string(), cfg.ipv6_only),
            ("[::]:5300".into(), true)
        );
        let err = serve_config(&["-4", "--bind", "::1"]).expect_err("refused");
        assert!(err.contains("-4") && err.contains("::1"), "{err}");
    }
}
