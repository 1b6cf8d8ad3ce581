//! `wirebench run --iperf3 HOST[:PORT]`: a test against an iperf3 server.

use std::io::Write;
use std::net::{IpAddr, SocketAddr, TcpStream, ToSocketAddrs, UdpSocket};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use socket2::{Domain, SockRef, Socket, Type};
use wirebench_proto::host_port::HostPort;
use wirebench_proto::results::{PeerTool, Results};
use wirebench_proto::spec::{Direction, Mechanism, Protocol, TestSpec};

use super::peer::{after_omit_keys, Exchange, Moved, StreamRef};
use super::{any_for, budget, congestion_of, round, set_udp_window, set_window, Streams};
use crate::iperf3::client::{ClientAction, ClientSession, Progress};
use crate::iperf3::codec::{
    connect_bytes, cookie_from, is_connect, stream_id, COOKIE_LEN, UDP_CONNECT_MSG,
};
use crate::iperf3::{Params, ResultsDoc, STEP_TIMEOUT};
use crate::net::roles::Watch;
use crate::net::{Pump, TICK};
use crate::packet_log_writer::LogOut;
use crate::role::iperf3::{Live, Plan};
use crate::role::DataSocket;
use crate::EngineError;
use std::sync::atomic::Ordering::Relaxed;

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
    /// TCP maximum segment size of the data connections (`-M`), bytes, set on both sides.
    pub mss: Option<u32>,
    /// Fair-queue pacing of every data socket (`--fq-rate`, SO_MAX_PACING_RATE), bits/s,
    /// set on both sides.
    pub fq_rate_bps: Option<u64>,
    /// The local address of the control and data sockets (`-B`).
    pub bind: Option<IpAddr>,
}

const NS_PER_S: u64 = 1_000_000_000;

/// iperf3's smallest UDP datagram (`MIN_UDP_BLOCKSIZE` in `iperf.h`: room for its header
/// with 64-bit counters); its clients refuse less.
pub const MIN_UDP_LEN: u64 = 16;

/// The largest MSS iperf3 takes (`MAX_MSS`, 9 KiB).
pub const MAX_MSS: u32 = 9 * 1024;

/// The smallest MSS Linux's TCP_MAXSEG takes (`TCP_MIN_MSS`).
pub const MIN_MSS: u32 = 88;

/// The highest `--fq-rate` iperf3 passes on intact: it gives the kernel bytes/s as a
/// 32-bit unsigned number (`iperf_tcp.c`, `iperf_udp.c`).
pub const MAX_FQ_RATE_BPS: u64 = 8 * u32::MAX as u64;

impl Iperf3Config {
    /// Refuses, before any connection, a test an iperf3 server cannot run or would run
    /// otherwise than asked, in one line that says what to give instead.
    pub fn check(&self) -> Result<(), EngineError> {
        refusal(self).map_or(Ok(()), |e| Err(EngineError::Setup(e)))
    }
}

/// Why an iperf3 server cannot run `cfg`'s test as asked, if it cannot.
fn refusal(cfg: &Iperf3Config) -> Option<String> {
    let spec = &cfg.spec;
    let udp = spec.protocol == Protocol::Udp;
    if spec.mechanism != Mechanism::Stream || spec.file.is_some() || spec.zerocopy {
        return Some(
            "an iperf3 server runs streams only: no --mode, --file or --zerocopy with --iperf3"
                .into(),
        );
    }
    if udp && spec.size < MIN_UDP_LEN {
        return Some(format!(
            "-l {} is too small for iperf3 over UDP: each datagram carries iperf3's header, \
             so iperf3 takes -l {MIN_UDP_LEN} or more",
            spec.size
        ));
    }
    if let Some(pps) = spec.rate_pps {
        return Some(format!(
            "-b {pps}pps: iperf3 paces in bits/s: give -b {} ({pps} messages of {} bytes a second)",
            pps.saturating_mul(spec.size).saturating_mul(8),
            spec.size
        ));
    }
    if spec.gap_ns > 0 {
        return Some(
            "--gap has no iperf3 counterpart: leave it out with --iperf3 (-b paces)".into(),
        );
    }
    if !spec.omit_ns.is_multiple_of(NS_PER_S) {
        return Some(format!(
            "-O {} s: an iperf3 server leaves out whole seconds: give -O 1s, 2s, ...",
            spec.omit_ns as f64 / NS_PER_S as f64
        ));
    }
    if spec.omit_ns > 0 && spec.duration_ns.is_none() {
        return Some(
            "-O with -n or -k: iperf3 counts the amount after the omitted seconds and \
             wirebench over the whole test: give -t with -O against an iperf3 server"
                .into(),
        );
    }
    if let Some(m) = cfg.mss {
        if udp {
            return Some("-M sets TCP's segment size: leave it out with -u".into());
        }
        if !(MIN_MSS..=MAX_MSS).contains(&m) {
            return Some(format!(
                "-M {m}: the MSS must be {MIN_MSS} to {MAX_MSS} bytes (the kernel's least, iperf3's most)"
            ));
        }
    }
    if let Some(r) = cfg.fq_rate_bps.filter(|&r| r > MAX_FQ_RATE_BPS) {
        return Some(format!(
            "--fq-rate {r}: iperf3 hands the kernel at most {MAX_FQ_RATE_BPS} bits/s (32-bit bytes/s): give less"
        ));
    }
    let receives = spec.direction != Direction::Forward;
    if cfg.packet_log.is_some() && (!udp || !receives) {
        return Some(
            "--packet-log with --iperf3 needs -u and -R or --bidir: wirebench logs the datagrams it receives"
                .into(),
        );
    }
    None
}

/// Splits `HOST[:PORT]` (`[V6]:PORT` for IPv6 with a port, or a bare IPv6 address) as every
/// command reads a server; iperf3's port 5201 when none.
pub fn split_target(target: &str) -> Result<(String, u16), EngineError> {
    target
        .parse::<HostPort>()
        .map(|h| h.or_port(crate::iperf3::DEFAULT_PORT))
        .map_err(|e| EngineError::Setup(format!("--iperf3 {e}")))
}

/// The parameters an iperf3 server gets for `cfg`'s test (`-b` is per stream in both
/// tools). As iperf3's client does, the time excludes the omitted seconds (the server adds
/// them), and the server is told the omit, so that it leaves them out of its counts too.
pub(crate) fn params_for(cfg: &Iperf3Config) -> Params {
    let spec = &cfg.spec;
    let window = cfg.window;
    let streams = spec.streams.max(1);
    Params {
        tcp: spec.protocol == Protocol::Tcp,
        udp: spec.protocol == Protocol::Udp,
        omit: spec.omit_ns / NS_PER_S,
        time: spec.duration_ns.map_or(0, |ns| {
            ns.saturating_sub(spec.omit_ns).div_ceil(NS_PER_S).max(1)
        }),
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
        mss: cfg.mss.map_or(0, u64::from),
        fqrate: cfg.fq_rate_bps.unwrap_or(0),
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

/// A TCP connection to `addr` from `cfg`'s `-B` address, with its `-M` set before the
/// handshake (the segment size is agreed in it).
fn connect_tcp(cfg: &Iperf3Config, addr: SocketAddr, data: bool) -> Result<TcpStream, EngineError> {
    let connect_err = |source| EngineError::Connect {
        addr: addr.to_string(),
        source,
    };
    let s = Socket::new(Domain::for_address(addr), Type::STREAM, None).map_err(connect_err)?;
    if let Some(ip) = cfg.bind {
        s.bind(&SocketAddr::new(ip, 0).into())
            .map_err(|e| EngineError::Setup(format!("-B {ip}: {e}")))?;
    }
    if let Some(mss) = cfg.mss.filter(|_| data) {
        s.set_mss(mss)
            .map_err(|e| EngineError::Setup(format!("-M {mss}: {e}")))?;
    }
    s.connect_timeout(&addr.into(), STEP_TIMEOUT)
        .map_err(connect_err)?;
    Ok(s.into())
}

/// Paces a data socket with the kernel's fair queue (`--fq-rate`), as iperf3 paces its own.
fn set_fq_rate(sock: &impl std::os::fd::AsRawFd, cfg: &Iperf3Config) -> Result<(), EngineError> {
    match cfg.fq_rate_bps {
        Some(bps) if bps > 0 => crate::sys::set_max_pacing_rate(sock, bps / 8)
            .map_err(|e| EngineError::Setup(format!("--fq-rate: {e}"))),
        _ => Ok(()),
    }
}

/// Opens one data stream: TCP with the cookie, or UDP with the connect datagram, answered.
fn open_stream(
    addr: SocketAddr,
    cookie: &[u8; COOKIE_LEN],
    cfg: &Iperf3Config,
) -> Result<DataSocket, EngineError> {
    let (spec, window) = (&cfg.spec, cfg.window);
    let connect_err = |source| EngineError::Connect {
        addr: addr.to_string(),
        source,
    };
    match spec.protocol {
        Protocol::Quic => Err(EngineError::Setup(
            "iperf3 servers do not speak QUIC: drop --quic, or run `wirebench serve` there".into(),
        )),
        Protocol::Tcp => {
            let mut s = connect_tcp(cfg, addr, true)?;
            set_window(SockRef::from(&s), window);
            set_fq_rate(&s, cfg)?;
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
            let local = cfg
                .bind
                .map_or_else(|| any_for(addr), |ip| SocketAddr::new(ip, 0));
            let s = UdpSocket::bind(local).map_err(connect_err)?;
            s.connect(addr).map_err(connect_err)?;
            set_udp_window(SockRef::from(&s), window);
            set_fq_rate(&s, cfg)?;
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
    let mut log = checked_log(cfg)?;
    let addr = resolve(&cfg.host, cfg.port)?;
    let control = connect_tcp(cfg, addr, false)?;
    let mut random = [0u8; COOKIE_LEN - 1];
    getrandom::getrandom(&mut random)
        .map_err(|e| EngineError::Setup(format!("no randomness: {e}")))?;
    let cookie = cookie_from(&random);
    let length = spec.duration_ns.map(Duration::from_nanos);
    let mut session = ClientSession::new(Instant::now(), cookie, params_for(cfg), length);
    let mut pump = Pump::new(control).map_err(|e| EngineError::io("control connection", e))?;
    let mut socks = Vec::new();
    let mut streams: Option<Streams> = None;
    let mut peer: Option<ResultsDoc> = None;
    let mut congestion = None;
    // Each stream's count when the omitted seconds ended (`-O`), bytes and datagrams.
    let mut omitted: Option<Vec<(u64, u64)>> = None;
    let omit = Duration::from_nanos(spec.omit_ns);
    let interval = Duration::from_nanos(spec.interval_ns.max(100_000_000));
    loop {
        while let Some(action) = session.poll_action() {
            match action {
                ClientAction::CreateStreams => {
                    for k in 0..senders.len() as u32 {
                        let s = open_stream(addr, &cookie, cfg)?;
                        if let Some((local, remote)) = crate::net::data_ends(&s) {
                            watch.connected(k, local, remote);
                        }
                        socks.push(s);
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
                        s.mark_ended();
                        s.stop_senders();
                        s.watch(watch, true);
                    }
                }
                ClientAction::SendResults => {
                    let doc = streams
                        .as_ref()
                        .map(|s| s.results_doc(None, congestion.clone()))
                        .map(|d| after_omit_doc(d, omitted.as_deref()))
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
                    let seen = Seen {
                        peer: peer.as_ref(),
                        counts_omitted: session.peer_counts_omitted(),
                        ours_omitted: omitted.as_deref().unwrap_or_default(),
                    };
                    return Ok(results(cfg, &streams, &seen));
                }
                ClientAction::Failed(e) => return Err(e.into()),
            }
        }
        round(&mut pump, &mut session, TICK.min(Duration::from_millis(10)));
        if let Some(s) = streams.as_mut() {
            if omitted.is_none() && !omit.is_zero() && s.start.elapsed() >= omit {
                let at = |l: &Live| (l.bytes.load(Relaxed), l.packets.load(Relaxed));
                omitted = Some(s.live.iter().map(|l| at(l)).collect());
            }
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

/// This side's results for the exchange after `-O`: as iperf3's client reports them, the
/// bytes after the omit, and each stream's datagrams when it ended (`omitted_packets`).
fn after_omit_doc(mut doc: ResultsDoc, omitted: Option<&[(u64, u64)]>) -> ResultsDoc {
    if let Some(marks) = omitted {
        for (r, (bytes, packets)) in doc.streams.iter_mut().zip(marks) {
            r.bytes = r.bytes.saturating_sub(*bytes);
            r.omitted_packets = *packets;
        }
    }
    doc
}

/// The packet log a test against an iperf3 server writes, opened; an error for a test such
/// a server cannot run, or a log this side cannot write.
fn checked_log(cfg: &Iperf3Config) -> Result<Option<LogOut>, EngineError> {
    cfg.check()?;
    match &cfg.packet_log {
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

/// What the exchange gave, for the results document.
struct Seen<'a> {
    /// The server's results, if they came.
    peer: Option<&'a ResultsDoc>,
    /// They carried each stream's counts at the omit's end.
    counts_omitted: bool,
    /// This side's count of each stream when the omitted seconds ended.
    ours_omitted: &'a [Moved],
}

/// The results document: this side's counts as measured, the server's from its exchange
/// read as iperf3 means them ([`Exchange`]).
fn results(cfg: &Iperf3Config, s: &Streams, seen: &Seen<'_>) -> Results {
    let spec = &cfg.spec;
    let udp = spec.protocol == Protocol::Udp;
    let senders = client_sends(spec);
    let ids = |sending: bool| -> Vec<StreamRef> {
        senders
            .iter()
            .enumerate()
            .filter(|(_, s)| **s == sending)
            .map(|(i, _)| (i, stream_id(i)))
            .collect()
    };
    let empty = ResultsDoc::default();
    let ours: Vec<Moved> = (0..senders.len())
        .map(|i| s.snapshot(i))
        .map(|e| (e.bytes, e.packets))
        .collect();
    let ex = Exchange {
        doc: seen.peer.unwrap_or(&empty),
        counts_omitted: seen.counts_omitted,
        omit_s: spec.omit_ns / NS_PER_S,
        len: spec.size,
        udp,
        ours_omitted: seen.ours_omitted,
        ours: &ours,
    };
    let peer = seen.peer;
    // The first direction (the client sends, except with -R); with --bidir the reverse
    // direction inside, as wirebench's own reports carry it.
    let first = senders.first().copied().unwrap_or(true);
    let mut client = s.side_report(first, peer);
    let mut server = ex.side(&ids(first), !first);
    if spec.direction == Direction::Bidir {
        client.reverse = Some(Box::new(s.side_report(false, peer)));
        server.reverse = Some(Box::new(ex.side(&ids(false), true)));
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
    if peer.is_some() {
        // The server received on the streams this side sends on, and sent on the others.
        ex.settle(&mut r, spec.direction, &ids(true), &ids(false));
    }
    let mut tool = PeerTool::iperf3(spec.direction, udp);
    if spec.omit_ns > 0 {
        tool.reported_by_peer
            .extend(after_omit_keys(spec.direction, udp));
    }
    r.peer = Some(tool);
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(spec: TestSpec) -> Iperf3Config {
        Iperf3Config {
            host: "127.0.0.1".into(),
            port: 5201,
            spec,
            window: 0,
            packet_log: None,
            mss: None,
            fq_rate_bps: None,
            bind: None,
        }
    }

    fn udp() -> TestSpec {
        TestSpec::example()
            .protocol(Protocol::Udp)
            .direction(Direction::Forward)
            .duration_ns(3 * NS_PER_S)
    }

    /// What an iperf3 server cannot run as asked is refused before any connection, in a
    /// line that names the flag; what it can run is not.
    #[test]
    fn impossible_parameters_are_refused_up_front() {
        let refused = |c: Iperf3Config, flag: &str| {
            let e = refusal(&c).unwrap_or_default();
            assert!(e.contains(flag) && !e.contains('\n'), "{flag}: {e:?}");
        };
        refused(cfg(udp().size(8)), "-l 8");
        refused(cfg(udp().size(15)), "-l 16");
        assert_eq!(refusal(&cfg(udp().size(16))), None);
        let pps = refusal(&cfg(udp().size(1000).rate_pps(1000))).unwrap_or_default();
        assert!(pps.contains("-b 8000000 "), "{pps}");
        refused(cfg(udp().gap_ns(1_000_000)), "--gap");
        refused(cfg(udp().omit_ns(NS_PER_S / 2)), "-O 0.5");
        let by_amount = TestSpec {
            duration_ns: None,
            ..udp().bytes(1_000_000).omit_ns(NS_PER_S)
        };
        refused(cfg(by_amount), "-O with -n");
        let tcp = udp().protocol(Protocol::Tcp);
        refused(
            Iperf3Config {
                mss: Some(1400),
                ..cfg(udp())
            },
            "-M",
        );
        for bad in [87, 9217] {
            refused(
                Iperf3Config {
                    mss: Some(bad),
                    ..cfg(tcp.clone())
                },
                "-M",
            );
        }
        let mss = Iperf3Config {
            mss: Some(1400),
            ..cfg(tcp.clone())
        };
        assert_eq!(refusal(&mss), None);
        let fast = Iperf3Config {
            fq_rate_bps: Some(MAX_FQ_RATE_BPS + 8),
            ..cfg(tcp.clone())
        };
        refused(fast, "--fq-rate");
        let log = Iperf3Config {
            packet_log: Some("x".into()),
            ..cfg(udp())
        };
        refused(log, "--packet-log");
        refused(cfg(tcp.mechanism(Mechanism::Rr)), "--mode");
    }

    /// The parameters iperf3 gets: the time without the omitted seconds, the omit, and
    /// the MSS and pacing asked for (under iperf3's keys).
    #[test]
    fn parameters_carry_omit_mss_and_fq_rate_as_iperf3_does() {
        let spec = udp()
            .protocol(Protocol::Tcp)
            .duration_ns(12 * NS_PER_S)
            .omit_ns(2 * NS_PER_S);
        let c = Iperf3Config {
            mss: Some(1200),
            fq_rate_bps: Some(100_000_000),
            ..cfg(spec)
        };
        let p = params_for(&c);
        assert_eq!(
            (p.time, p.omit, p.mss, p.fqrate),
            (10, 2, 1200, 100_000_000)
        );
        let json = serde_json::to_value(&p).expect("json");
        assert_eq!(json["MSS"], 1200);
        assert_eq!(json["fqrate"], 100_000_000);
        // Without them, the keys are left out (iperf3 reads a key's presence).
        let plain = serde_json::to_value(params_for(&cfg(udp()))).expect("json");
        assert!(
            plain.get("MSS").is_none() && plain.get("fqrate").is_none(),
            "{plain}"
        );
        assert_eq!(
            (plain["time"].as_u64(), plain["omit"].as_u64()),
            (Some(3), Some(0))
        );
    }

    /// Sent to the server after `-O`: each stream's bytes after the omit, and its
    /// datagrams when it ended.
    #[test]
    fn our_results_after_omit_leave_the_omitted_bytes_out() {
        let doc = ResultsDoc {
            streams: vec![crate::iperf3::StreamResult {
                id: 1,
                bytes: 10_000,
                packets: 10,
                ..Default::default()
            }],
            ..ResultsDoc::default()
        };
        let d = after_omit_doc(doc.clone(), Some(&[(4_000, 4)]));
        assert_eq!(
            (d.streams[0].bytes, d.streams[0].omitted_packets),
            (6_000, 4)
        );
        assert_eq!(after_omit_doc(doc.clone(), None), doc);
    }
}
