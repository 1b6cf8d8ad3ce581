//! The client's driver: connects, runs a [`ClientSession`] over the control connection,
//! opens the data streams and starts the roles when it says so, and turns the outcome into
//! the results document.

use std::io::Write;
use std::net::{IpAddr, SocketAddr, TcpStream, ToSocketAddrs, UdpSocket};
use std::path::PathBuf;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use wirebench_proto::control::{encode, Message, PACKET_LOG_STREAM, PROTOCOL_VERSION};
use wirebench_proto::header::{SeqToken, UdpHello};
use wirebench_proto::results::{Datapath, Results, Role, SideReport};
use wirebench_proto::spec::{Direction, Mechanism, Protocol, TestSpec};
use wirebench_sys::output::Pending;

use super::roles::{RoleEvent, Roles, Watch};
use super::{data_ends, Pump, TICK};
use crate::control::client::{ClientAction, ClientEvent, ClientParams, ClientSession};
use crate::control::exchange::printable;
use crate::control::{Outcome, RunAction, SETUP_TIMEOUT};
use crate::file::{FileSink, FileSource};
use crate::packet_log_writer::LogOut;
use crate::role::user::{user_datapath, UserConnector, UserStream};
use crate::role::{CrrPart, DataSocket, FilePart, RoleParams};
use crate::sys::udp::Offloads;
use crate::sys::{host_id, same_clock, tcp_datapath, udp_datapath};
use crate::{EngineError, ErrorKind, SessionError};

/// What the client needs to run a test.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// Server host name or address.
    pub host: String,
    /// Server port (TCP for control and data, UDP for UDP data).
    pub port: u16,
    /// The test, already validated.
    pub spec: TestSpec,
    /// Where to write the packet log (`spec.packet_log` is set when this is).
    pub packet_log: Option<PathBuf>,
    /// `--file`: the file to send (forward); its name and the amount are in `spec`.
    pub file: Option<PathBuf>,
    /// `-R --file NAME --save PATH`: where to save the server's file.
    pub save: Option<PathBuf>,
    /// The pre-shared key to authenticate with (`--psk-file`).
    pub psk: Option<crate::auth::Psk>,
    /// The local address of the control and data sockets (`-B/--bind`); none: the kernel
    /// picks by the route to the server.
    pub bind: Option<IpAddr>,
    /// `--stack`: a user-space TCP/IP stack for the TCP data connections (the control
    /// connection stays on the kernel's stack); `None` for the kernel's.
    pub stack: Option<std::sync::Arc<dyn UserConnector>>,
    /// QUIC tests: how the server is checked (`--quic-pin`, `--quic-insecure`); a QUIC test
    /// without it is refused before anything is sent.
    pub quic: Option<crate::quic::ServerCheck>,
}

/// How long the client waits for more of the server's packet log before giving it up.
const LOG_IDLE: Duration = Duration::from_secs(60);

/// How often a connection being made looks whether the user stopped the test.
const CONNECT_TICK: Duration = Duration::from_millis(50);

/// A TCP connection to `addr` from `bind` (any port) if given, within [`SETUP_TIMEOUT`];
/// given up as soon as `stopped` says so (a signal must not wait out a connect to a host
/// that does not answer).
fn connect(
    addr: SocketAddr,
    bind: Option<IpAddr>,
    stopped: &mut dyn FnMut() -> bool,
) -> Result<TcpStream, EngineError> {
    use socket2::{Domain, Socket, Type};
    let err = |source| EngineError::Connect {
        addr: addr.to_string(),
        source,
    };
    let sock = Socket::new(Domain::for_address(addr), Type::STREAM, None).map_err(err)?;
    if let Some(ip) = bind {
        sock.bind(&SocketAddr::new(ip, 0).into())
            .map_err(|e| EngineError::io("binding to the local address (-B)", e))?;
    }
    sock.set_nonblocking(true).map_err(err)?;
    match sock.connect(&addr.into()) {
        Ok(()) => {}
        Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => {}
        Err(e) => return Err(err(e)),
    }
    let mut stream = mio::net::TcpStream::from_std(sock.into());
    let mut poll = mio::Poll::new().map_err(err)?;
    poll.registry()
        .register(&mut stream, mio::Token(0), mio::Interest::WRITABLE)
        .map_err(err)?;
    let mut events = mio::Events::with_capacity(1);
    let until = Instant::now() + SETUP_TIMEOUT;
    loop {
        if stopped() {
            return Err(EngineError::Setup(
                "interrupted before the test began".into(),
            ));
        }
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(err(std::io::ErrorKind::TimedOut.into()));
        }
        match poll.poll(&mut events, Some(left.min(CONNECT_TICK))) {
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(err(e)),
            Ok(()) if events.is_empty() => continue,
            Ok(()) => {}
        }
        if let Some(e) = stream.take_error().map_err(err)? {
            return Err(err(e));
        }
        match stream.peer_addr() {
            Ok(_) => break,
            Err(e) if e.kind() == std::io::ErrorKind::NotConnected => {}
            Err(e) => return Err(err(e)),
        }
    }
    let _ = poll.registry().deregister(&mut stream);
    let s: TcpStream = stream.into();
    s.set_nonblocking(false).map_err(err)?;
    Ok(s)
}

/// Sends an `attach` for `stream` of the test with `cookie` on a new connection.
fn attach(
    addr: SocketAddr,
    bind: Option<IpAddr>,
    cookie: u64,
    stream: u32,
) -> Result<TcpStream, EngineError> {
    let mut s = connect(addr, bind, &mut || false)?;
    let frame = encode(&Message::Attach {
        version: PROTOCOL_VERSION,
        cookie,
        stream,
    })
    .map_err(|e| EngineError::Protocol(e.to_string()))?;
    s.write_all(&frame)
        .map_err(|e| EngineError::io("attaching a connection to the test", e))?;
    Ok(s)
}

/// As [`attach`], over a user-space stack.
fn attach_user(
    stack: &dyn UserConnector,
    addr: SocketAddr,
    cookie: u64,
    stream: u32,
) -> Result<Box<dyn UserStream>, EngineError> {
    let mut s = stack
        .connect(addr, SETUP_TIMEOUT)
        .map_err(|source| EngineError::Connect {
            addr: addr.to_string(),
            source,
        })?;
    let frame = encode(&Message::Attach {
        version: PROTOCOL_VERSION,
        cookie,
        stream,
    })
    .map_err(|e| EngineError::Protocol(e.to_string()))?;
    s.set_timeout(SETUP_TIMEOUT);
    s.write_all(&frame)
        .map_err(|e| EngineError::io("attaching a connection to the test", e))?;
    Ok(s)
}

/// Copies the server's packet log from its connection into the file until the server closes
/// it, or until it is longer than this test can make (`limit` bytes: a hostile server must
/// not fill the client's disk); returns the bytes copied. The file takes its name when the
/// log has arrived (a log cut at the limit too, as the error says); a log whose copy failed
/// leaves any earlier file of that name as it was.
fn copy_log(from: TcpStream, mut to: Pending, limit: u64) -> std::io::Result<u64> {
    use std::io::Read;
    let commit = |to: Pending| {
        to.commit()
            .map_err(|e| std::io::Error::new(e.source.kind(), e.to_string()))
    };
    from.set_read_timeout(Some(LOG_IDLE))?;
    // One byte past the limit tells a log that is too long from one that fits exactly.
    let mut bounded = from.take(limit.saturating_add(1));
    let n = std::io::copy(&mut bounded, &mut to)?;
    if n > limit {
        to.file().set_len(limit)?;
        commit(to)?;
        return Err(std::io::Error::other(format!(
            "the server's packet log is longer than this test can make ({limit} bytes): cut there"
        )));
    }
    commit(to)?;
    Ok(n)
}

/// Begins the packet log file: written beside `path` and renamed over it when the log is
/// whole. Only a regular file (or a link to one) is replaced: a FIFO or a device is
/// refused before the test.
fn create_log_file(path: &std::path::Path) -> std::io::Result<Pending> {
    Pending::create(path).map_err(|e| std::io::Error::new(e.source.kind(), e.to_string()))
}

/// The longest packet log a test can make: a record per datagram it can send and one per
/// loss run (at most one per datagram, plus one), twice over for duplicates the network may
/// add, plus the header. Without a bound on the amount, the datagrams are counted at the
/// test's rate, or at 100 Gbit/s for an unlimited one, over its time plus drain.
pub(crate) fn packet_log_limit(spec: &TestSpec) -> u64 {
    use wirebench_proto::packet_log::{FILE_HEADER_LEN, RECORD_LEN};
    const FASTEST_BPS: u64 = 100_000_000_000;
    let size = spec.size.max(1);
    let datagrams = match spec.bytes {
        Some(b) => b.div_ceil(size),
        None => {
            let secs = (spec.duration_ns.unwrap_or(0) + spec.drain_ns) as f64 / 1e9 + 1.0;
            let per_sec = match (spec.rate_pps, spec.rate_bps) {
                (Some(pps), _) if pps > 0 => pps as f64,
                (_, bps) => {
                    bps.filter(|&b| b > 0).unwrap_or(FASTEST_BPS) as f64 / (8.0 * size as f64)
                }
            };
            (per_sec * secs).ceil() as u64
        }
    };
    let datagrams = datagrams.saturating_mul(u64::from(spec.streams.max(1)));
    datagrams
        .saturating_add(1)
        .saturating_mul(2 * 2 * RECORD_LEN as u64)
        .saturating_add(FILE_HEADER_LEN as u64)
}

/// Every string of the server's report made printable before it is shown.
fn clean_report(r: &mut SideReport) {
    let clean = |s: &mut String| *s = printable(s);
    if let Some(e) = &mut r.error {
        clean(e);
    }
    clean(&mut r.datapath.io);
    r.datapath.features.iter_mut().for_each(clean);
    if let Some(c) = &mut r.datapath.tcp_congestion {
        clean(c);
    }
    if let Some(f) = &mut r.file {
        for s in [&mut f.digest, &mut f.saved_as, &mut f.error]
            .into_iter()
            .flatten()
        {
            clean(s);
        }
    }
    r.streams.iter_mut().for_each(clean_report);
    if let Some(rev) = &mut r.reverse {
        clean_report(rev);
    }
}

/// The name and version this build reports to its peer.
pub fn tool() -> String {
    format!("wirebench {}", env!("CARGO_PKG_VERSION"))
}

pub(crate) fn resolve(host: &str, port: u16) -> Result<SocketAddr, EngineError> {
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

/// A stream opened, waiting for the roles to start.
struct Opened {
    sock: DataSocket,
    datapath: Datapath,
    offloads: Offloads,
    hello: Option<[u8; wirebench_proto::header::UDP_HELLO_LEN]>,
}

/// The client's side of one test, as the session's actions build it.
struct Setup {
    addr: SocketAddr,
    bind: Option<IpAddr>,
    cookie: u64,
    udp_port: u16,
    /// Where TCP data connections go when the server names a port of their own.
    tcp_port: Option<u16>,
    same_clock: bool,
    spec: TestSpec,
    streams: Vec<Option<Opened>>,
    log_file: Option<Pending>,
    local_log: Option<LogOut>,
    log_copier: Option<JoinHandle<std::io::Result<u64>>>,
    file: Option<FilePart>,
    stack: Option<std::sync::Arc<dyn UserConnector>>,
    /// The roles, once started.
    roles: Option<Roles>,
    /// Data connections opened since the watch last heard: stream, local and peer address.
    connected: Vec<(u32, SocketAddr, SocketAddr)>,
    /// The control connection's local address (UDP data sockets go from there).
    local_ip: Option<IpAddr>,
    /// QUIC: how the server is checked, and the test's connections (the first carries the
    /// control dialogue).
    quic_check: Option<crate::quic::ServerCheck>,
    quic: Vec<std::sync::Arc<crate::quic::QuicConn>>,
}

impl Setup {
    /// A QUIC crr test: how each transaction's connection is made.
    fn crr_dial(&self) -> Option<crate::role::rr::QuicDial> {
        let check = self
            .quic_check
            .filter(|_| self.spec.protocol == Protocol::Quic)?;
        let dialer = crate::quic::Dialer::new(check, crate::quic::ALPN, self.spec.quic_zero_rtt)
            .ok()?
            .max_packet(self.spec.quic_mtu);
        Some(crate::role::rr::QuicDial {
            dialer,
            cc: quic_congestion(&self.spec),
            bind: self.bind,
        })
    }

    fn open_log(&mut self) -> Result<(), EngineError> {
        let Some(file) = self.log_file.take() else {
            return Ok(());
        };
        let conn = attach(self.addr, self.bind, self.cookie, PACKET_LOG_STREAM)?;
        let limit = packet_log_limit(&self.spec);
        let copier = std::thread::Builder::new()
            .name("wirebench-log-copy".into())
            .spawn(move || copy_log(conn, file, limit))
            .map_err(|e| EngineError::io("starting the packet log thread", e))?;
        self.log_copier = Some(copier);
        Ok(())
    }

    /// Where the test's TCP data connections go: the server's data port if it named one
    /// (its test traffic goes through a user-space stack), else the control port.
    fn data_addr(&self) -> SocketAddr {
        SocketAddr::new(self.addr.ip(), self.tcp_port.unwrap_or(self.addr.port()))
    }

    fn open_stream(&mut self, stream: u32) -> Result<(), EngineError> {
        let opened = match (self.spec.protocol, self.stack.as_deref()) {
            (Protocol::Quic, _) => {
                let s = self.open_quic(stream)?;
                Opened {
                    datapath: crate::quic::stream::datapath(&s),
                    sock: DataSocket::Quic(Box::new(s)),
                    offloads: Offloads::default(),
                    hello: None,
                }
            }
            (Protocol::Tcp, Some(stack)) => {
                let s = attach_user(stack, self.data_addr(), self.cookie, stream)?;
                Opened {
                    datapath: user_datapath(s.as_ref(), &self.spec),
                    sock: DataSocket::User(s),
                    offloads: Offloads::default(),
                    hello: None,
                }
            }
            (Protocol::Tcp, None) => {
                let s = attach(self.data_addr(), self.bind, self.cookie, stream)?;
                let datapath = tcp_datapath(&s, &self.spec).map_err(EngineError::from)?;
                Opened {
                    sock: DataSocket::Tcp(s),
                    datapath,
                    offloads: Offloads::default(),
                    hello: None,
                }
            }
            (Protocol::Udp, _) => {
                let local = self.local_ip.ok_or_else(|| {
                    EngineError::Setup("the control connection has no local address".into())
                })?;
                let s = UdpSocket::bind((local, 0))
                    .map_err(|e| EngineError::io("opening the UDP data socket", e))?;
                s.connect((self.addr.ip(), self.udp_port))
                    .map_err(|e| EngineError::io("connecting the UDP data socket", e))?;
                let (datapath, offloads) = udp_datapath(&s, &self.spec, Vec::new());
                Opened {
                    sock: DataSocket::Udp(s),
                    datapath,
                    offloads,
                    hello: Some(
                        UdpHello {
                            cookie: self.cookie,
                            stream,
                        }
                        .encode(),
                    ),
                }
            }
        };
        if let Some((local, remote)) = data_ends(&opened.sock) {
            self.connected.push((stream, local, remote));
        }
        if let Some(slot) = self.streams.get_mut(stream as usize) {
            *slot = Some(opened);
        }
        Ok(())
    }

    /// QUIC stream `stream`: on connection `stream / --quic-streams` (the first is the
    /// control dialogue's; the others are opened as their first stream is), with its
    /// `attach` written.
    fn open_quic(&mut self, stream: u32) -> Result<crate::quic::QuicStream, EngineError> {
        let per = self.spec.quic_streams.unwrap_or(1).max(1);
        let k = (stream / per) as usize;
        if k >= self.quic.len() {
            let check = self.quic_check.ok_or_else(no_quic_check)?;
            let cc = quic_congestion(&self.spec);
            let conn = crate::quic::connect(
                self.addr,
                self.bind,
                check,
                cc,
                crate::quic::ALPN,
                self.spec.quic_mtu,
            )?;
            conn.set_gso(!self.spec.no_offload);
            self.quic.push(std::sync::Arc::new(conn));
        }
        let conn = self
            .quic
            .get(k.min(self.quic.len() - 1))
            .ok_or_else(no_quic_check)?;
        let mut s = crate::quic::QuicStream::open(conn, SETUP_TIMEOUT)
            .map_err(|e| EngineError::io("opening a QUIC stream", e))?;
        s.data_stream(stream.is_multiple_of(per));
        let frame = encode(&Message::Attach {
            version: PROTOCOL_VERSION,
            cookie: self.cookie,
            stream,
        })
        .map_err(|e| EngineError::Protocol(e.to_string()))?;
        s.set_timeout(SETUP_TIMEOUT);
        s.write_all(&frame)
            .map_err(|e| EngineError::io("attaching a stream to the test", e))?;
        Ok(s)
    }

    fn send_hello(&self, stream: u32) {
        if let Some(Some(Opened {
            sock: DataSocket::Udp(s),
            hello: Some(h),
            ..
        })) = self.streams.get(stream as usize)
        {
            // A refused send (ICMP from an earlier hello) is retried on the next round.
            let _ = s.send(h);
        }
    }

    /// Every stream's role and parameters, in order.
    fn roles(&mut self, session: &ClientSession) -> Vec<(Role, DataSocket, RoleParams)> {
        let spec = &self.spec;
        let (addr, cookie) = (self.addr, self.cookie);
        let mut out = Vec::with_capacity(self.streams.len());
        for (i, opened) in std::mem::take(&mut self.streams).into_iter().enumerate() {
            let Some(o) = opened else { continue };
            let stream = i as u32;
            let params = RoleParams {
                spec: spec.clone(),
                deadline_ns: None,
                limit: None,
                hello: o.hello,
                token: SeqToken::of_stream(cookie, stream),
                stream,
                intervals: None,
                datapath: o.datapath,
                same_clock: self.same_clock,
                packet_log: if stream == 0 {
                    self.local_log.take()
                } else {
                    None
                },
                offloads: o.offloads,
                crr: (spec.mechanism == Mechanism::Crr).then(|| CrrPart::Client {
                    addr,
                    cookie,
                    quic: self.crr_dial(),
                }),
                file: if stream == 0 { self.file.take() } else { None },
            };
            out.push((session.role_of(stream), o.sock, params));
        }
        out
    }
}

/// Runs one test against a server. Returns the results document; when the test started but
/// did not complete, the document carries what was measured and `error` says why.
pub fn run(cfg: &ClientConfig, watch: &mut dyn Watch) -> Result<Results, EngineError> {
    crate::sys::tune_allocator();
    let addr = resolve(&cfg.host, cfg.port)?;
    let mut setup = Setup::new(cfg, addr)?;
    if cfg.spec.protocol == Protocol::Quic {
        let check = cfg.quic.ok_or_else(no_quic_check)?;
        if check == crate::quic::ServerCheck::Psk && cfg.psk.is_none() {
            return Err(EngineError::Setup(
                "the QUIC server is to prove the pre-shared key, and there is none: give --psk-file (or WIREBENCH_PSK), or --quic-pin".into(),
            ));
        }
        let conn = std::sync::Arc::new(crate::quic::connect(
            addr,
            cfg.bind,
            check,
            quic_congestion(&cfg.spec),
            crate::quic::ALPN,
            cfg.spec.quic_mtu,
        )?);
        conn.set_gso(!cfg.spec.no_offload);
        let control = crate::quic::QuicStream::open(&conn, SETUP_TIMEOUT)
            .map_err(|e| EngineError::io("opening the QUIC control stream", e))?;
        setup.local_ip = conn.local().ok().map(|a| a.ip());
        // The key proves the server over this connection's session (the exchange fails
        // otherwise): the test's other connections must reach the same key.
        if check == crate::quic::ServerCheck::Psk {
            setup.quic_check = conn.peer_fingerprint().map(crate::quic::ServerCheck::Pin);
        }
        let binding = conn.tls_export()?;
        setup.quic.push(conn);
        let mut cfg = cfg.clone();
        cfg.psk = cfg.psk.map(|k| k.bound(&binding));
        return drive(&cfg, addr, setup, Pump::quic(control), watch);
    }
    let conn = connect(addr, cfg.bind, &mut || watch.interrupted())?;
    setup.local_ip = conn.local_addr().ok().map(|a| a.ip());
    let pump =
        Pump::new(conn).map_err(|e| EngineError::io("configuring the control connection", e))?;
    drive(cfg, addr, setup, pump, watch)
}

/// A QUIC test's client without a way to check the server.
fn no_quic_check() -> EngineError {
    EngineError::Setup(
        "a QUIC test checks the server's key: give --quic-pin with the fingerprint `serve` printed, or --quic-insecure in a lab".into(),
    )
}

/// The controller a QUIC test asked for (`--cc`; validated: one of QUIC's).
fn quic_congestion(spec: &TestSpec) -> crate::quic::Congestion {
    spec.congestion
        .as_deref()
        .and_then(crate::quic::Congestion::of_name)
        .unwrap_or_default()
}

/// Runs the session over its control dialogue, the roles beside it, to the results.
fn drive<S: super::ControlIo>(
    cfg: &ClientConfig,
    addr: SocketAddr,
    mut setup: Setup,
    mut pump: Pump<S>,
    watch: &mut dyn Watch,
) -> Result<Results, EngineError> {
    let params = ClientParams {
        spec: cfg.spec.clone(),
        psk: cfg.psk.clone(),
        nonce: crate::auth::nonce()?,
        tool: tool(),
        host_id: host_id(),
        server: format!("{}:{}", cfg.host, cfg.port),
        packet_log: cfg.packet_log.is_some(),
    };
    let mut session = ClientSession::new(Instant::now(), params);
    let mut fetcher: Option<Fetcher> = None;
    loop {
        while let Some(action) = session.poll_action() {
            setup.on_action(action, &mut session, &mut pump);
        }
        for (stream, local, remote) in setup.connected.drain(..) {
            watch.connected(stream, local, remote);
        }
        if session.is_closed() {
            break;
        }
        pump.round(&mut session, TICK);
        if watch.interrupted() {
            session.handle_event(Instant::now(), ClientEvent::Interrupt);
        }
        if let Some(r) = &mut setup.roles {
            for event in r.poll(watch) {
                let event = match event {
                    RoleEvent::SendersDone(counts) => ClientEvent::SendersDone { counts },
                    RoleEvent::Done(report) => ClientEvent::RolesDone { report },
                };
                session.handle_event(Instant::now(), event);
            }
        }
        // Over QUIC the control stream is never stuck behind the test's data.
        if setup.quic.is_empty() {
            fetch(&mut fetcher, &setup, &mut session);
        }
        // After this side's own intervals: an interval the server closed was closed here
        // first, so a watch that joins both (the receiver's line with the sender's TCP
        // window) finds this side's part already in.
        while let Some((role, stream, rec)) = session.poll_peer_interval() {
            match stream {
                Some(s) => watch.peer_stream_interval(role, s, &rec),
                None => watch.peer_interval(role, &rec),
            }
        }
    }
    drop(setup.roles.take());
    let outcome = session.outcome().unwrap_or_default();
    setup.results(addr, outcome)
}

/// The server's report is late: fetch it on a new connection too, and take it when it comes
/// (`control::shelf` on the server).
fn fetch(fetcher: &mut Option<Fetcher>, setup: &Setup, session: &mut ClientSession) {
    let now = Instant::now();
    match fetcher {
        None if session.fetch_due().is_some_and(|t| now >= t) => {
            *fetcher = Some(Fetcher::start(setup.addr, setup.bind, setup.cookie));
        }
        Some(f) => match f.rx.try_recv() {
            Ok(Some(frames)) => session.fetched(now, &frames),
            // Nobody listens on the server's port: its report will not come.
            Ok(None) => session.fetch_refused(now),
            Err(_) => {}
        },
        None => {}
    }
}

/// A thread that asks the server for a finished test's last frames (`attach` to
/// `RESULTS_STREAM`) once a second until it has them (sent as `Some`), the server's port
/// refuses the connection (`None`: the server is gone), or it is dropped.
struct Fetcher {
    rx: std::sync::mpsc::Receiver<Option<Vec<u8>>>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

/// How often the fetch is tried again while the server has nothing (its report not yet
/// made) or the connection fails.
const FETCH_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

impl Fetcher {
    fn start(addr: SocketAddr, bind: Option<IpAddr>, cookie: u64) -> Self {
        use std::sync::atomic::{AtomicBool, Ordering};
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let (tx, rx) = std::sync::mpsc::channel();
        let stopped = std::sync::Arc::clone(&stop);
        // No thread, no fetch: the session waits for its report as before.
        let _ = std::thread::Builder::new()
            .name("wirebench-fetch".into())
            .spawn(move || {
                while !stopped.load(Ordering::Relaxed) {
                    let tried = Instant::now();
                    match fetch_once(addr, bind, cookie, &stopped) {
                        Ok(Some(frames)) => {
                            let _ = tx.send(Some(frames));
                            return;
                        }
                        Err(()) => {
                            let _ = tx.send(None);
                            return;
                        }
                        Ok(None) => {}
                    }
                    let left = FETCH_EVERY.saturating_sub(tried.elapsed());
                    std::thread::park_timeout(left);
                }
            });
        Self { rx, stop }
    }
}

impl Drop for Fetcher {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// One fetch: the frames the server kept for the test, or none (it has none, or the
/// connection failed); `Err` when the server's port refused the connection. Read within the
/// control write timeout, at most two frames' worth.
fn fetch_once(
    addr: SocketAddr,
    bind: Option<IpAddr>,
    cookie: u64,
    stopped: &std::sync::atomic::AtomicBool,
) -> Result<Option<Vec<u8>>, ()> {
    let conn = connect(addr, bind, &mut || {
        stopped.load(std::sync::atomic::Ordering::Relaxed)
    });
    let mut conn = match conn {
        Ok(c) => c,
        Err(EngineError::Connect { source, .. })
            if source.kind() == std::io::ErrorKind::ConnectionRefused =>
        {
            return Err(())
        }
        Err(_) => return Ok(None),
    };
    Ok(read_results(&mut conn, cookie))
}

/// Asks for test `cookie`'s results on `conn` and reads them.
fn read_results(conn: &mut TcpStream, cookie: u64) -> Option<Vec<u8>> {
    use std::io::Read;
    let frame = encode(&Message::Attach {
        version: PROTOCOL_VERSION,
        cookie,
        stream: wirebench_proto::control::RESULTS_STREAM,
    })
    .ok()?;
    conn.write_all(&frame).ok()?;
    conn.set_read_timeout(Some(crate::control::WRITE_TIMEOUT))
        .ok()?;
    let mut frames = Vec::new();
    let cap = 2 * wirebench_proto::control::MAX_FRAME as u64 + 8;
    conn.take(cap).read_to_end(&mut frames).ok()?;
    (!frames.is_empty()).then_some(frames)
}

impl Setup {
    /// This side's part of the test, before any traffic: a packet log path that cannot be
    /// written, or a file that cannot be read or saved, fails here.
    fn new(cfg: &ClientConfig, addr: SocketAddr) -> Result<Self, EngineError> {
        let log_file = match &cfg.packet_log {
            Some(path) => Some(
                create_log_file(path)
                    .map_err(|e| EngineError::io("creating the packet log file", e))?,
            ),
            None => None,
        };
        let file = match (&cfg.file, cfg.spec.direction) {
            (Some(path), Direction::Forward) => Some(FilePart::Source(
                FileSource::open(path)
                    .map_err(|e| EngineError::io("opening the file to send", e))?
                    .0,
            )),
            (_, Direction::Reverse) if cfg.spec.file.is_some() => Some(FilePart::Sink(
                FileSink::create_for_user(cfg.save.clone())
                    .map_err(|e| EngineError::io("creating the file to save to", e))?,
            )),
            _ => None,
        };
        Ok(Self {
            addr,
            bind: cfg.bind,
            cookie: 0,
            udp_port: 0,
            tcp_port: None,
            same_clock: false,
            spec: cfg.spec.clone(),
            streams: Vec::new(),
            log_file,
            local_log: None,
            log_copier: None,
            file,
            stack: cfg.stack.clone(),
            roles: None,
            connected: Vec::new(),
            local_ip: None,
            quic_check: cfg.quic,
            quic: Vec::new(),
        })
    }

    /// Carries out one of the session's actions.
    fn on_action<S: super::ControlIo>(
        &mut self,
        action: ClientAction,
        session: &mut ClientSession,
        pump: &mut Pump<S>,
    ) {
        let now = Instant::now();
        match action {
            ClientAction::Accepted {
                cookie,
                udp_port,
                tcp_port,
                host_id: server_host,
            } => {
                self.cookie = cookie;
                self.udp_port = udp_port;
                self.tcp_port = tcp_port;
                self.same_clock = same_clock(&host_id(), &server_host);
                self.spec = session.spec().clone();
                self.streams = (0..self.spec.total_streams()).map(|_| None).collect();
                // The packet log: written here when this side receives, else the server's
                // receiver streams it over a connection of its own.
                if session.logs_locally() {
                    if let Some(file) = self.log_file.take() {
                        self.local_log = Some(LogOut {
                            out: Box::new(file),
                            abort: None,
                        });
                    }
                }
            }
            ClientAction::OpenLog => {
                let event = match self.open_log() {
                    Ok(()) => ClientEvent::Opened {
                        stream: PACKET_LOG_STREAM,
                    },
                    Err(error) => open_failed(error),
                };
                session.handle_event(now, event);
            }
            ClientAction::OpenStream { stream } => {
                let event = match self.open_stream(stream) {
                    Ok(()) => ClientEvent::Opened { stream },
                    Err(error) => open_failed(error),
                };
                session.handle_event(now, event);
            }
            ClientAction::SendHello { stream } => self.send_hello(stream),
            ClientAction::StartRoles => {
                // `begin` leaves before the first datagram.
                pump.flush(session);
                match Roles::start(self.roles(session)) {
                    Ok(r) => self.roles = Some(r),
                    Err(e) => {
                        let (reason, kind) = (e.to_string(), e.kind());
                        session.handle_event(now, ClientEvent::RolesFailed { reason, kind });
                    }
                }
            }
            ClientAction::Run(RunAction::PeerCounts(counts)) => {
                if let Some(r) = &self.roles {
                    r.peer_counts(&counts);
                }
            }
            ClientAction::Run(RunAction::StopRoles) => {
                if let Some(r) = &self.roles {
                    r.stop();
                }
            }
        }
    }

    /// The results document from how the session ended, with the server's packet log
    /// waited for.
    fn results(self, addr: SocketAddr, outcome: Outcome) -> Result<Results, EngineError> {
        let Some(began) = outcome.began else {
            return Err(outcome.error.unwrap_or(SessionError::PeerClosed).into());
        };
        let cause = outcome.error.as_ref().map(SessionError::kind);
        let mut error = outcome.error.map(|e| match e {
            // Say when, so the partial results read right; the receiver's figures the
            // server never sent are missing, not lost.
            SessionError::PeerClosed => format!(
                "the server closed the connection after {:.1} s",
                began.elapsed().as_secs_f64()
            ),
            e => e.to_string(),
        });
        if let Some(copier) = self.log_copier {
            // The server closes the log connection when its receiver is done.
            match copier.join() {
                Ok(Ok(_)) => {}
                Ok(Err(e)) if e.kind() == std::io::ErrorKind::Other => {
                    error.get_or_insert(e.to_string());
                }
                _ => {
                    error.get_or_insert("the server's packet log did not arrive whole".into());
                }
            }
        }
        // Without the session's, an error here is the packet log's copy failing.
        let cause = cause.or(error.as_ref().map(|_| ErrorKind::Io));
        let mut peer = outcome.peer;
        if let Some(p) = &mut peer {
            clean_report(p);
        }
        let mut results = Results::assemble(
            &self.spec,
            addr.to_string(),
            outcome.local.as_ref(),
            peer.as_ref(),
            error,
        );
        // Without the server's report, what it measured is null in `results`
        // (`Results::assemble`), never 0, nor "all lost".
        results.error_cause = cause.or(results.error_cause);
        results.server_report_fetched = outcome.report_fetched;
        Ok(results)
    }
}

/// A data connection the session asked for did not open: the session hears why.
fn open_failed(error: EngineError) -> ClientEvent {
    ClientEvent::OpenFailed {
        error: error.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::exchange::printable;
    use std::net::TcpListener;

    #[test]
    fn the_packet_log_limit_follows_the_test() {
        use wirebench_proto::packet_log::RECORD_LEN;
        let udp = TestSpec::example().protocol(Protocol::Udp).packet_log(true);
        let small = packet_log_limit(&udp);
        // 1,000 datagrams: a record each and a loss record each, twice over, and the header.
        assert!(small >= 1000 * 2 * RECORD_LEN as u64, "{small}");
        assert!(small < 1_000_000, "{small}");
        let timed = udp.duration_ns(10_000_000_000);
        assert!(packet_log_limit(&timed.clone().rate_bps(1_000_000)) < small * 10);
        assert!(packet_log_limit(&timed) > small);
    }

    /// A server that sends an endless packet log fills no disk.
    #[test]
    fn a_packet_log_longer_than_the_test_is_cut() {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        let flood = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().expect("accept");
            let chunk = vec![7u8; 64 * 1024];
            // Until the client stops reading.
            while s.write_all(&chunk).is_ok() {}
        });
        let conn = TcpStream::connect(addr).expect("connect");
        let path = std::env::temp_dir().join(format!("wb-log-cut-{}", std::process::id()));
        let file = create_log_file(&path).expect("create");
        let limit = 1_000_000;
        let result = copy_log(conn, file, limit);
        let len = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
        let _ = std::fs::remove_file(&path);
        assert!(result.is_err());
        assert_eq!(len, limit);
        let _ = flood.join();
    }

    /// A log whose connection fails midway leaves the earlier file as it was, and no
    /// temporary file beside it.
    #[test]
    fn a_packet_log_that_fails_midway_replaces_nothing() {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        let reset = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().expect("accept");
            let _ = s.write_all(&[7u8; 4096]);
            // Closed with unread data and SO_LINGER 0: the client's read fails (a reset).
            let _ = socket2::SockRef::from(&s).set_linger(Some(Duration::ZERO));
        });
        let dir = std::env::temp_dir().join(format!("wb-log-reset-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("log.wbpl");
        std::fs::write(&path, b"earlier log").expect("earlier");
        let conn = TcpStream::connect(addr).expect("connect");
        let file = create_log_file(&path).expect("create");
        let _ = reset.join();
        let result = copy_log(conn, file, 1_000_000);
        let kept = std::fs::read(&path).expect("read");
        let entries = std::fs::read_dir(&dir).expect("ls").count();
        let _ = std::fs::remove_dir_all(&dir);
        assert!(result.is_err(), "{result:?}");
        assert_eq!(kept, b"earlier log");
        assert_eq!(entries, 1);
    }

    #[test]
    fn server_text_is_made_printable() {
        let t = printable("\u{1b}[31mred\nerror: forged\u{7}");
        assert!(!t.chars().any(char::is_control), "{t}");
        assert!(t.contains("red") && t.contains("\\n"));
        assert_eq!(printable(&"x".repeat(5000)).len(), 1000);
    }
}
