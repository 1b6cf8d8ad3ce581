//! `wirebench run --iperf3 HOST[:PORT]`: a test against an iperf3 server.

use std::io::Write;
use std::net::{SocketAddr, TcpStream, ToSocketAddrs, UdpSocket};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use socket2::SockRef;
use wirebench_proto::host_port::HostPort;
use wirebench_proto::results::{PeerTool, Results};
use wirebench_proto::spec::{Direction, Protocol, TestSpec};

use super::{
    any_for, budget, congestion_of, peer_report, round, set_udp_window, set_window, Streams,
};
use crate::iperf3::client::{ClientAction, ClientSession, Progress};
use crate::iperf3::codec::{
    connect_bytes, cookie_from, is_connect, stream_id, COOKIE_LEN, UDP_CONNECT_MSG,
};
use crate::iperf3::{Params, ResultsDoc, STEP_TIMEOUT};
use crate::net::roles::Watch;
use crate::net::{Pump, TICK};
use crate::packet_log_writer::LogOut;
use crate::role::iperf3::Plan;
use crate::role::DataSocket;
use crate::EngineError;

/// A test against an iperf3 server.
#[derive(Debug, Clone)]
pub struct Iperf3Config {
    /// Server host name or address.
    pub host: String,
    /// Its port (iperf3's default is 5201).
    pub port: u16,
    /// The test, already validated (stream mechanism only).
    pub spec: TestSpec,
    /// Socket buffer size of the data sockets, bytes (`-w`); 0 for the system's.
    pub window: u64,
    /// Where to write the packet log (`--packet-log`): UDP, where wirebench receives
    /// (`-R`, `--bidir`).
    pub packet_log: Option<PathBuf>,
}

/// Splits `HOST[:PORT]` (`[V6]:PORT` for IPv6 with a port, or a bare IPv6 address) as every
/// command reads a server; iperf3's port 5201 when none.
pub fn split_target(target: &str) -> Result<(String, u16), EngineError> {
    target
        .parse::<HostPort>()
        .map(|h| h.or_port(crate::iperf3::DEFAULT_PORT))
        .map_err(|e| EngineError::Setup(format!("--iperf3 {e}")))
}

/// The parameters an iperf3 server gets for `spec` (`-b` is per stream in both tools).
pub(crate) fn params_for(spec: &TestSpec, window: u64) -> Params {
    let streams = spec.streams.max(1);
    Params {
        tcp: spec.protocol == Protocol::Tcp,
        udp: spec.protocol == Protocol::Udp,
        omit: 0,
        time: spec
            .duration_ns
            .map_or(0, |ns| ns.div_ceil(1_000_000_000).max(1)),
        num: spec.bytes.unwrap_or(0),
        blockcount: 0,
        parallel: streams,
        reverse: spec.direction == Direction::Reverse,
        bidirectional: spec.direction == Direction::Bidir,
        window,
        len: spec.size,
        bandwidth: spec.rate_bps.unwrap_or(0),
        pacing_timer: 1000,
        congestion: spec.congestion.clone(),
        udp_counters_64bit: false,
        get_server_output: false,
        client_version: Some(format!("wirebench {}", env!("CARGO_PKG_VERSION"))),
    }
}

/// Which of the streams (in creation order) this side sends on, as iperf3 orders them:
/// with `--bidir`, the client's sending streams come first.
pub(crate) fn client_sends(spec: &TestSpec) -> Vec<bool> {
    let p = spec.streams.max(1) as usize;
    match spec.direction {
        Direction::Forward => vec![true; p],
        Direction::Reverse => vec![false; p],
        Direction::Bidir => [vec![true; p], vec![false; p]].concat(),
    }
}

fn resolve(host: &str, port: u16) -> Result<SocketAddr, EngineError> {
    let err = |source| EngineError::Connect {
        addr: format!("{host}:{port}"),
        source,
    };
    (host, port)
        .to_socket_addrs()
        .map_err(err)?
        .next()
        .ok_or_else(|| err(std::io::Error::other("the name resolved to no address")))
}

/// Opens one data stream: TCP with the cookie, or UDP with the connect datagram, answered.
fn open_stream(
    addr: SocketAddr,
    cookie: &[u8; COOKIE_LEN],
    spec: &TestSpec,
    window: u64,
) -> Result<DataSocket, EngineError> {
    let connect_err = |source| EngineError::Connect {
        addr: addr.to_string(),
        source,
    };
    match spec.protocol {
        Protocol::Tcp => {
            let mut s = TcpStream::connect_timeout(&addr, STEP_TIMEOUT).map_err(connect_err)?;
            set_window(SockRef::from(&s), window);
            if let Some(cc) = &spec.congestion {
                SockRef::from(&s)
                    .set_tcp_congestion(cc.as_bytes())
                    .map_err(|e| EngineError::Setup(format!("--cc {cc}: {e}")))?;
            }
            s.write_all(cookie)
                .map_err(|e| EngineError::io("sending the cookie on a data stream", e))?;
            Ok(DataSocket::Tcp(s))
        }
        Protocol::Udp => {
            let s = UdpSocket::bind(any_for(addr)).map_err(connect_err)?;
            s.connect(addr).map_err(connect_err)?;
            set_udp_window(SockRef::from(&s), window);
            // iperf3 servers answer the connect datagram once; send it again now and then in
            // case it was lost, until the answer or the step's time.
            let until = Instant::now() + STEP_TIMEOUT;
            let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
            let mut reply = [0u8; 16];
            loop {
                s.send(&connect_bytes(UDP_CONNECT_MSG))
                    .map_err(|e| EngineError::io("sending the UDP connect datagram", e))?;
                match s.recv(&mut reply) {
                    Ok(4) if is_connect(&reply[..4]) => return Ok(DataSocket::Udp(s)),
                    _ if Instant::now() >= until => {
                        return Err(EngineError::Timeout(
                            "the iperf3 server's UDP connect reply",
                        ))
                    }
                    _ => {}
                }
            }
        }
    }
}

/// Runs a test against an iperf3 server and returns wirebench's results document: figures
/// this side measured from what it saw, the server's from its results exchange, marked.
pub fn run_iperf3(cfg: &Iperf3Config, watch: &mut dyn Watch) -> Result<Results, EngineError> {
    let spec = &cfg.spec;
    let senders = client_sends(spec);
    // Fail on a test iperf3 cannot run, or a log that cannot be written, before any traffic.
    let mut log = checked_log(cfg, &senders)?;
    let addr = resolve(&cfg.host, cfg.port)?;
    let control =
        TcpStream::connect_timeout(&addr, STEP_TIMEOUT).map_err(|source| EngineError::Connect {
            addr: addr.to_string(),
            source,
        })?;
    let mut random = [0u8; COOKIE_LEN - 1];
    getrandom::getrandom(&mut random)
        .map_err(|e| EngineError::Setup(format!("no randomness: {e}")))?;
    let cookie = cookie_from(&random);
    let length = spec.duration_ns.map(Duration::from_nanos);
    let params = params_for(spec, cfg.window);
    let mut session = ClientSession::new(Instant::now(), cookie, params, length);
    let mut pump = Pump::new(control).map_err(|e| EngineError::io("control connection", e))?;
    let mut socks = Vec::new();
    let mut streams: Option<Streams> = None;
    let mut peer: Option<ResultsDoc> = None;
    let mut congestion = None;
    let interval = Duration::from_nanos(spec.interval_ns.max(100_000_000));
    loop {
        while let Some(action) = session.poll_action() {
            match action {
                ClientAction::CreateStreams => {
                    for _ in 0..senders.len() {
                        socks.push(open_stream(addr, &cookie, spec, cfg.window)?);
                    }
                    if let Some(DataSocket::Tcp(s)) = socks.first() {
                        congestion = congestion_of(s);
                    }
                }
                ClientAction::Run => {
                    let socks = std::mem::take(&mut socks);
                    let plan = client_plan(spec);
                    let started =
                        Streams::start(socks, senders.clone(), &plan, interval, log.take());
                    streams = Some(started?);
                }
                ClientAction::StopSending => {
                    if let Some(s) = streams.as_mut() {
                        s.stop_senders();
                        s.watch(watch, true);
                    }
                }
                ClientAction::SendResults => {
                    let doc = streams
                        .as_ref()
                        .map(|s| s.results_doc(None, congestion.clone()))
                        .unwrap_or_default();
                    session.send_results(Instant::now(), &doc);
                }
                ClientAction::PeerResults(doc) => {
                    if let Some(s) = streams.as_mut() {
                        s.finish_receivers(Some(&doc));
                    }
                    peer = Some(doc);
                }
                ClientAction::Done => {
                    // IPERF_DONE is queued: write it before closing.
                    pump.flush(&mut session);
                    let streams = streams.ok_or(EngineError::Protocol(
                        "the iperf3 server ended the test before it ran".into(),
                    ))?;
                    return Ok(results(cfg, &streams, peer.as_ref()));
                }
                ClientAction::Failed(e) => return Err(e.into()),
            }
        }
        round(&mut pump, &mut session, TICK.min(Duration::from_millis(10)));
        if let Some(s) = streams.as_mut() {
            // The session ends a test of an amount once it moved (its time, by a deadline).
            s.watch(watch, false);
            let moved = Progress {
                senders_finished: s.senders_finished(),
                received: s.total(false),
            };
            session.handle_progress(Instant::now(), moved);
        }
    }
}

/// The packet log a test against an iperf3 server writes, opened; an error for a test such
/// a server cannot run, or a log this side cannot write.
fn checked_log(cfg: &Iperf3Config, senders: &[bool]) -> Result<Option<LogOut>, EngineError> {
    let spec = &cfg.spec;
    if spec.mechanism != wirebench_proto::spec::Mechanism::Stream
        || spec.file.is_some()
        || spec.zerocopy
    {
        return Err(EngineError::Setup(
            "an iperf3 server runs streams only: no --mode, --file or --zerocopy with --iperf3"
                .into(),
        ));
    }
    match &cfg.packet_log {
        Some(_) if spec.protocol != Protocol::Udp || !senders.contains(&false) => {
            Err(EngineError::Setup(
                "--packet-log with --iperf3 needs -u and -R or --bidir: wirebench logs the datagrams it receives"
                    .into(),
            ))
        }
        Some(path) => Ok(Some(LogOut {
            out: Box::new(
                wirebench_sys::output::Pending::create(path)
                    .map_err(|e| EngineError::io("creating the packet log file", e.source))?,
            ),
            abort: None,
        })),
        None => Ok(None),
    }
}

/// How this side's streams move: as the test asks, from now; the session ends them.
fn client_plan(spec: &TestSpec) -> Plan {
    Plan {
        sender: true,
        len: spec.size as usize,
        rate_bps: spec.rate_bps.unwrap_or(0),
        burst: 0,
        wide: false,
        budget: budget(spec.bytes),
        start: Instant::now(),
        epoch_unix_ns: crate::sys::unix_now_ns(),
        stop_at_ns: u64::MAX,
        past_budget_ns: 0,
        limit: None,
    }
}

/// The results document: this side's counts as measured, the peer's from its exchange.
fn results(cfg: &Iperf3Config, s: &Streams, peer: Option<&ResultsDoc>) -> Results {
    let spec = &cfg.spec;
    let udp = spec.protocol == Protocol::Udp;
    let senders = client_sends(spec);
    let ids = |sending: bool| -> Vec<i64> {
        senders
            .iter()
            .enumerate()
            .filter(|(_, s)| **s == sending)
            .map(|(i, _)| stream_id(i))
            .collect()
    };
    let empty = ResultsDoc::default();
    let doc = peer.unwrap_or(&empty);
    // The first direction (the client sends, except with -R); with --bidir the reverse
    // direction inside, as wirebench's own reports carry it.
    let first = senders.first().copied().unwrap_or(true);
    let mut client = s.side_report(first, peer);
    let mut server = peer_report(doc, &ids(first), !first, udp);
    if spec.direction == Direction::Bidir {
        client.reverse = Some(Box::new(s.side_report(false, peer)));
        server.reverse = Some(Box::new(peer_report(doc, &ids(false), true, udp)));
    }
    let error = peer
        .is_none()
        .then(|| "no results from the iperf3 server".to_string());
    let mut r = Results::assemble(
        spec,
        format!("{}:{} (iperf3)", cfg.host, cfg.port),
        Some(&client),
        Some(&server),
        error,
    );
    r.peer = Some(PeerTool::iperf3(spec.direction, udp));
    r
}
