//! `wirebench serve`, and the in-process server that `run` and `sweep` measure against when
//! given no host.

use std::io::{self, IsTerminal, Read, Write};
use std::os::unix::net::UnixStream;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use wirebench_engine::{Psk, Server, ServerConfig, ServerHandle, ServerInterval, ServerWatch};
use wirebench_proto::host_port::HostPort;

use crate::cli::{LiveWhen, RateUnits, ServeArgs};
use crate::Failure;

/// How long a server asked to stop waits for its running tests to end.
const DRAIN_LIMIT: Duration = Duration::from_secs(10);

/// Serves until SIGTERM or SIGINT, then ends the running tests with a message to their
/// clients, waits for them (at most [`DRAIN_LIMIT`]) and exits 0.
pub fn serve(args: &ServeArgs) -> Result<(), Failure> {
    let mut cfg = args.config().map_err(Failure::Usage)?;
    if !args.no_quic {
        let identity = match &args.quic_key {
            Some(path) => wirebench_engine::quic::Identity::load_or_create(path),
            None => wirebench_engine::quic::Identity::generate(),
        }
        .context("making the server's QUIC key")?;
        cfg.quic = Some(Arc::new(identity));
    }
    let fingerprint = cfg.quic.as_ref().map(|q| q.fingerprint());
    cfg.user_stack = super::stack::listener(args).map_err(Failure::Usage)?;
    let lines = match args.live {
        LiveWhen::Auto => io::stdout().is_terminal(),
        LiveWhen::Always => true,
        LiveWhen::Never => false,
    };
    if lines {
        cfg.watch = Some(ServerWatch(std::sync::Arc::new(live_line)));
    }
    let ipv6_only = cfg.ipv6_only;
    let server = Server::bind(cfg).context("starting the server")?;
    let addr = server.local_addr().context("reading the server address")?;
    // An IPv6 wildcard takes IPv4 clients too unless -6 (a host without IPv6 gets 0.0.0.0).
    let families = match addr.ip() {
        std::net::IpAddr::V6(ip) if ip.is_unspecified() && !ipv6_only => "IPv6 and IPv4; ",
        _ => "",
    };
    let handle = server.handle();
    let flag = handle.shutdown_flag();
    if args.one_off {
        // As iperf3's -1: the first test's end ends the server (tests that came meanwhile
        // are told it is shutting down).
        let (handle, flag) = (handle.clone(), Arc::clone(&flag));
        std::thread::Builder::new()
            .name("wirebench-one-off".into())
            .spawn(move || {
                handle.wait_tests_ended(1);
                flag.store(true, Ordering::SeqCst);
                shut_down(&handle);
            })
            .context("starting the one-off watcher")?;
    }
    // The flag tells the engine at once; the socket pair wakes the watcher below, which
    // blocks on it rather than polling the flag.
    let (mut wake, signalled) = UnixStream::pair().context("making the signal pipe")?;
    for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        signal_hook::flag::register(sig, std::sync::Arc::clone(&flag))
            .context("installing the signal handler")?;
        let end = signalled
            .try_clone()
            .context("installing the signal handler")?;
        signal_hook::low_level::pipe::register(sig, end)
            .context("installing the signal handler")?;
    }
    drop(signalled);
    std::thread::Builder::new()
        .name("wirebench-shutdown".into())
        .spawn(move || {
            let mut byte = [0u8; 1];
            if wake.read_exact(&mut byte).is_err() {
                // The pipe is gone: no signal can be seen, so no shutdown to run.
                return;
            }
            shut_down(&handle);
        })
        .context("starting the shutdown watcher")?;
    // Said only once a signal can be handled: whoever starts the server and stops it as
    // soon as it listens gets a clean exit, not a killed process.
    let mut out = io::stdout().lock();
    // One line, as scripts read it: the QUIC key's fingerprint is what clients pin.
    let perf = server.quic_perf_addr().map_or(String::new(), |a| {
        format!("; QUIC perf on UDP port {}", a.port())
    });
    let quic = fingerprint.map_or(String::new(), |f| format!("{perf}; QUIC, key {f}"));
    writeln!(
        out,
        "wirebench server listening on {addr} ({families}TCP control and data, UDP data{quic})"
    )
    .and_then(|()| out.flush())
    .context("writing to stdout")?;
    if let Some(m) = server.metrics_addr() {
        writeln!(
            out,
            "metrics at http://{m}/metrics (Prometheus text format)"
        )
        .and_then(|()| out.flush())
        .context("writing to stdout")?;
    }
    drop(out);
    server.run().context("serving")?;
    Ok(())
}

/// One interval of a test, as `serve` shows it: tagged with the test's id (the first digits
/// of the log's `test=`), the client and what the server does, so that tests at once can be
/// told apart.
fn live_line(i: &ServerInterval<'_>) {
    use wirebench_proto::results::Role;
    use wirebench_proto::spec::Protocol;
    // As the client's lines: a last sliver of an interval is left to the summary.
    if i.record.end_ns.saturating_sub(i.record.start_ns) < i.spec.interval_ns / 20 {
        return;
    }
    let udp_receiver = i.spec.protocol == Protocol::Udp && i.role == Role::Receiver;
    let who = match i.role {
        Role::Sender => "sent",
        Role::Receiver => "received",
    };
    let text = super::live::interval_text(i.record, udp_receiver, RateUnits::Auto);
    let test = format!("{:016x}", i.test);
    let mut out = io::stdout().lock();
    // A closed stdout ends no test.
    let _ = writeln!(
        out,
        "[{} {} {} {who:>8}] {}",
        test.get(..6).unwrap_or(&test),
        i.peer.ip(),
        i.spec.protocol,
        text.trim_end()
    );
    let _ = out.flush();
}

/// Waits for the running tests to end, at most [`DRAIN_LIMIT`], and exits.
fn shut_down(handle: &ServerHandle) -> ! {
    eprintln!(
        "shutting down: ending {} running tests",
        handle.running_tests()
    );
    handle.wait_idle(Instant::now() + DRAIN_LIMIT);
    std::process::exit(0);
}

/// The in-process server's QUIC key, made once per process: its clients pin it.
fn in_process_identity() -> Result<&'static Arc<wirebench_engine::quic::Identity>, Failure> {
    static ID: std::sync::OnceLock<Arc<wirebench_engine::quic::Identity>> =
        std::sync::OnceLock::new();
    if let Some(id) = ID.get() {
        return Ok(id);
    }
    let made = wirebench_engine::quic::Identity::generate()
        .context("making the in-process server's QUIC key")?;
    Ok(ID.get_or_init(|| Arc::new(made)))
}

/// The fingerprint a client of the in-process server pins.
pub fn in_process_pin() -> Option<wirebench_engine::quic::Fingerprint> {
    in_process_identity().ok().map(|i| i.fingerprint())
}

/// The server a `run` or `sweep` measures against: `host` if given, else one started in this
/// process on loopback; its host and port.
pub fn server_for(
    host: Option<&String>,
    port: u16,
    psk: Option<&Psk>,
) -> Result<(String, u16), Failure> {
    if let Some(h) = host {
        // HOST:PORT as `run` takes it: its port wins over -p.
        return h
            .parse::<HostPort>()
            .map(|h| h.or_port(port))
            .map_err(|e| Failure::Usage(e.to_string()));
    }
    in_process_server(psk, None)
}

/// The one server this process starts for its own tests (`run` or `sweep` without a host),
/// on loopback, with one set of limits: room for a sweep's next trial while the last one's
/// session winds down, a year for a test, the client's own bounds on the timing flags, no
/// budget but the host's; with `files`, the directory it saves `--file` copies in and sends
/// `--both-directions` files from.
pub fn in_process_server(
    psk: Option<&Psk>,
    files: Option<&std::path::Path>,
) -> Result<(String, u16), Failure> {
    let server = Server::bind(ServerConfig {
        bind: "127.0.0.1:0".parse().context("loopback address")?,
        ipv6_only: false,
        // A sweep's next trial may start while the last one's session winds down.
        max_tests: 8,
        max_duration: Some(Duration::from_secs(365 * 24 * 3600)),
        max_rate_bps: None,
        // It serves this process's own test: no budget but the host's.
        budget: Default::default(),
        log: false,
        save_dir: files.map(|d| {
            wirebench_engine::SaveDir::new(d.to_path_buf(), wirebench_engine::DEFAULT_SAVE_QUOTA)
        }),
        files_dir: files.map(std::path::Path::to_path_buf),
        stats_every: None,
        max_bytes: None,
        max_streams: None,
        max_size: None,
        max_tests_per_client: None,
        max_tests_per_minute: None,
        // The in-process server serves this process only: the client's own bounds on the
        // timing flags (60 s) and a year for the whole test, not a public server's.
        max_timing: Duration::from_secs(60),
        metrics: None,
        // With a key, the in-process server asks for it: the exchange can be tried.
        psk: psk.cloned(),
        allow_iperf3: false,
        iperf3_json: false,
        iperf3_port: None,
        quic_perf_port: None,
        user_stack: None,
        watch: None,
        quic: Some(Arc::clone(in_process_identity()?)),
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
    Ok(("127.0.0.1".to_string(), port))
}
