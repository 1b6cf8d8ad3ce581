//! The server: one TCP port for control and data connections, the same port number for UDP.
//!
//! Each connection gets a thread. Its first frame says what it is: a `start` opens a test
//! (the thread then runs that test's control session), an `attach` hands a TCP data
//! connection to the test whose cookie it carries. UDP streams open with a hello datagram
//! carrying the cookie, sent to the server's UDP port; only then does the server open a
//! socket connected to the hello's source, so it never sends UDP to an address that has not
//! proven it holds a live test's cookie and comes from the control connection's host.
//! Whatever a client sends, only that client's session ends.

use std::collections::HashMap;
use std::io::{ErrorKind, Read};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{sync_channel, SyncSender};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use socket2::{Domain, Socket, Type};
use wirebench_proto::control::{
    decode, Message, CRR_STREAM, MAX_FRAME, MAX_HELLO_FRAME, PACKET_LOG_STREAM, PROTOCOL_VERSION,
};
use wirebench_proto::header::UdpHello;
use wirebench_proto::results::{Results, Role};
use wirebench_proto::spec::{Direction, Mechanism, Protocol, TestSpec};
use wirebench_proto::units::{format_bytes, format_duration, format_rate_bps};

use crate::channel::Channel;
use crate::client::tool;
use crate::file::{FileSink, FileSource};
use crate::log::LogOut;
use crate::role::{CrrPart, DataSocket, FilePart, RoleParams};
use crate::session::{drive, Quiet};
use crate::sys::udp::Offloads;
use crate::sys::{host_id, max_rss_kib, rss_kib, same_clock, tcp_datapath, udp_datapath};
use crate::EngineError;

/// How long a new connection may take to send its first frame, and a test its set-up steps.
const SETUP_TIMEOUT: Duration = Duration::from_secs(10);

/// Most connections that have not yet sent their first frame; more are closed at once, so a
/// flood of silent connections cannot exhaust the server's threads.
const MAX_HANDSHAKES: usize = 256;

/// Server limits and address.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Address and port to listen on (port 0: any free port).
    pub bind: SocketAddr,
    /// Most tests running at once.
    pub max_tests: usize,
    /// Longest test accepted; tests asking for more are refused, and any test is ended there.
    pub max_duration: Option<Duration>,
    /// Highest rate accepted, bits/s, over all of a test's streams.
    pub max_rate_bps: Option<u64>,
    /// Most bytes a test may move (all streams).
    pub max_bytes: Option<u64>,
    /// Most streams a test may have (both ways for --bidir).
    pub max_streams: Option<u32>,
    /// Largest message (request, response) a test may use.
    pub max_size: Option<u64>,
    /// Most tests one client address may run at once.
    pub max_tests_per_client: Option<usize>,
    /// Most tests one client address may start in a minute.
    pub max_tests_per_minute: Option<usize>,
    /// Print one line per session on stderr.
    pub log: bool,
    /// Print the server's memory and load on stderr this often (`--stats`).
    pub stats_every: Option<Duration>,
    /// Clients must prove this pre-shared key (`--psk-file`).
    pub psk: Option<crate::auth::Psk>,
    /// Save what file transfers send here (`--save-dir`); none: only hash them.
    pub save_dir: Option<PathBuf>,
    /// Send files from here for reverse file transfers (`--files-dir`); none: refuse them.
    pub files_dir: Option<PathBuf>,
}

struct Pending {
    peer: IpAddr,
    local: IpAddr,
    protocol: Protocol,
    /// Streams of the test: attach and hello indices below this are accepted.
    streams: u32,
    tx: SyncSender<(u32, DataSocket)>,
    /// The packet log connection, for a test whose server side writes one.
    log_tx: Option<SyncSender<TcpStream>>,
}

struct State {
    cfg: ServerConfig,
    port: u16,
    active: AtomicUsize,
    handshakes: AtomicUsize,
    /// Clients refused for a wrong key, since the start.
    auth_failures: AtomicUsize,
    /// Each client address's running tests and the starts of its last minute.
    clients: Mutex<HashMap<IpAddr, ClientUse>>,
    /// Set on SIGTERM: running tests end with a message, new ones are refused.
    shutdown: Arc<std::sync::atomic::AtomicBool>,
    pending: Mutex<HashMap<u64, Pending>>,
    /// Running `--mode crr` tests: where each transaction's connection goes, and the client
    /// address it must come from.
    crr: Mutex<HashMap<u64, (IpAddr, SyncSender<TcpStream>)>>,
}

/// Ends a server gracefully from another thread.
#[derive(Clone)]
pub struct ServerHandle {
    state: Arc<State>,
}

impl ServerHandle {
    /// The flag that, once set, ends every running test with a message to its client and
    /// refuses new ones (for `signal_hook::flag::register`).
    pub fn shutdown_flag(&self) -> Arc<std::sync::atomic::AtomicBool> {
        Arc::clone(&self.state.shutdown)
    }

    /// Tests running now.
    pub fn running_tests(&self) -> usize {
        self.state.active.load(Ordering::SeqCst)
    }
}

/// A bound server, ready to run.
pub struct Server {
    listener: TcpListener,
    udp: UdpSocket,
    state: Arc<State>,
}

fn reuse_port_udp(addr: SocketAddr) -> std::io::Result<Socket> {
    let s = Socket::new(Domain::for_address(addr), Type::DGRAM, None)?;
    s.set_reuse_address(true)?;
    s.set_reuse_port(true)?;
    s.bind(&addr.into())?;
    Ok(s)
}

impl Server {
    /// Binds the TCP port and the UDP port of the same number.
    pub fn bind(cfg: ServerConfig) -> Result<Self, EngineError> {
        crate::sys::limit_allocator_arenas();
        let tcp = Socket::new(Domain::for_address(cfg.bind), Type::STREAM, None)
            .map_err(|e| EngineError::io("creating the listening socket", e))?;
        let _ = tcp.set_reuse_address(true);
        tcp.bind(&cfg.bind.into())
            .map_err(|source| EngineError::Connect {
                addr: format!("{} (bind)", cfg.bind),
                source,
            })?;
        tcp.listen(128)
            .map_err(|e| EngineError::io("listening", e))?;
        let listener: TcpListener = tcp.into();
        let addr = listener
            .local_addr()
            .map_err(|e| EngineError::io("reading the listening address", e))?;
        let udp = reuse_port_udp(addr).map_err(|source| EngineError::Connect {
            addr: format!("{addr} (UDP bind)"),
            source,
        })?;
        Ok(Self {
            listener,
            udp: udp.into(),
            state: Arc::new(State {
                port: addr.port(),
                cfg,
                active: AtomicUsize::new(0),
                handshakes: AtomicUsize::new(0),
                auth_failures: AtomicUsize::new(0),
                clients: Mutex::new(HashMap::new()),
                shutdown: Arc::new(std::sync::atomic::AtomicBool::new(false)),
                pending: Mutex::new(HashMap::new()),
                crr: Mutex::new(HashMap::new()),
            }),
        })
    }

    /// The address the server listens on.
    pub fn local_addr(&self) -> Result<SocketAddr, EngineError> {
        self.listener
            .local_addr()
            .map_err(|e| EngineError::io("reading the listening address", e))
    }

    /// A handle to end the server gracefully (SIGTERM) and watch it drain.
    pub fn handle(&self) -> ServerHandle {
        ServerHandle {
            state: Arc::clone(&self.state),
        }
    }

    /// Serves until the process ends.
    pub fn run(self) -> Result<(), EngineError> {
        let state = Arc::clone(&self.state);
        let udp = self.udp;
        thread::Builder::new()
            .name("wirebench-udp-hello".into())
            .spawn(move || udp_hellos(&udp, &state))
            .map_err(|e| EngineError::io("starting the UDP thread", e))?;
        if let Some(every) = self.state.cfg.stats_every {
            let state = Arc::clone(&self.state);
            thread::Builder::new()
                .name("wirebench-stats".into())
                .spawn(move || loop {
                    eprintln!(
                        "stats: rss {} KiB (peak {} KiB), {} tests running, {} connections not yet identified, {} wrong keys",
                        rss_kib(),
                        max_rss_kib(),
                        state.active.load(Ordering::SeqCst),
                        state.handshakes.load(Ordering::SeqCst),
                        state.auth_failures.load(Ordering::SeqCst)
                    );
                    thread::sleep(every);
                })
                .map_err(|e| EngineError::io("starting the stats thread", e))?;
        }
        for conn in self.listener.incoming() {
            let conn = match conn {
                Ok(c) => c,
                // Out of descriptors or a connection reset before accept: keep serving.
                Err(_) => {
                    thread::sleep(Duration::from_millis(10));
                    continue;
                }
            };
            if self.state.handshakes.fetch_add(1, Ordering::SeqCst) >= MAX_HANDSHAKES {
                self.state.handshakes.fetch_sub(1, Ordering::SeqCst);
                continue;
            }
            let state = Arc::clone(&self.state);
            let spawned = thread::Builder::new()
                .name("wirebench-conn".into())
                .spawn(move || connection(conn, &state));
            if spawned.is_err() {
                // The connection was dropped with the closure; give its place back.
                self.state.handshakes.fetch_sub(1, Ordering::SeqCst);
            }
        }
        Ok(())
    }
}

/// Reads exactly `buf.len()` bytes before `deadline`.
fn read_exact_by(s: &mut TcpStream, buf: &mut [u8], deadline: Instant) -> Result<(), String> {
    let mut off = 0;
    while off < buf.len() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err("timed out waiting for the first message".into());
        }
        let _ = s.set_read_timeout(Some(left));
        match s.read(&mut buf[off..]) {
            Ok(0) => return Err("connection closed before the first message".into()),
            Ok(n) => off += n,
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
                ) => {}
            Err(e) => return Err(e.to_string()),
        }
    }
    Ok(())
}

/// Reads the first frame of a connection byte-exactly, so that no data behind it is consumed.
fn first_frame(s: &mut TcpStream) -> Result<Message, String> {
    let deadline = Instant::now() + SETUP_TIMEOUT;
    let mut prefix = [0u8; 4];
    read_exact_by(s, &mut prefix, deadline)?;
    let len = u32::from_be_bytes(prefix) as usize;
    if len > MAX_HELLO_FRAME {
        return Err(format!(
            "first control frame of {len} bytes exceeds the limit of {MAX_HELLO_FRAME} bytes"
        ));
    }
    let mut frame = vec![0u8; 4 + len];
    frame[..4].copy_from_slice(&prefix);
    read_exact_by(s, &mut frame[4..], deadline)?;
    match decode(&frame, MAX_HELLO_FRAME) {
        Ok(Some((msg, _))) => Ok(msg),
        Ok(None) => Err("incomplete first frame".into()),
        Err(e) => Err(e.to_string()),
    }
}

/// The server log: one line per event, `key=value` pairs with values quoted where they have
/// spaces, starting with the time (Unix seconds) and the client.
fn log(state: &State, line: std::fmt::Arguments<'_>) {
    if state.cfg.log {
        let t = crate::sys::unix_now_ns() as f64 / 1e9;
        eprintln!("time={t:.3} {line}");
    }
}

/// A log value: bare when it is one word, else quoted with `"` escaped.
fn q(v: &str) -> String {
    if !v.is_empty() && v.chars().all(|c| c.is_ascii_graphic() && c != '"') {
        v.to_string()
    } else {
        format!("\"{}\"", v.replace('\\', "\\\\").replace('"', "\\\""))
    }
}

/// A client address's use of the server.
#[derive(Default)]
struct ClientUse {
    running: usize,
    starts: std::collections::VecDeque<Instant>,
}

/// Holds a client address's running-test count; gives it back when the session ends.
struct ClientSlot<'a> {
    state: &'a State,
    ip: IpAddr,
}

impl Drop for ClientSlot<'_> {
    fn drop(&mut self) {
        if let Ok(mut c) = self.state.clients.lock() {
            if let Some(u) = c.get_mut(&self.ip) {
                u.running = u.running.saturating_sub(1);
                if u.running == 0 && u.starts.is_empty() {
                    c.remove(&self.ip);
                }
            }
        }
    }
}

/// Counts a test for `ip`, or says which per-client limit it would break.
fn client_slot(state: &State, ip: IpAddr) -> Result<ClientSlot<'_>, String> {
    let cfg = &state.cfg;
    let mut clients = state.clients.lock().map_err(|_| "server state poisoned")?;
    let now = Instant::now();
    // Forget the starts older than a minute, and the addresses with nothing left.
    clients.retain(|_, u| {
        while u
            .starts
            .front()
            .is_some_and(|t| now.duration_since(*t) > Duration::from_secs(60))
        {
            u.starts.pop_front();
        }
        u.running > 0 || !u.starts.is_empty()
    });
    let u = clients.entry(ip).or_default();
    if let Some(max) = cfg.max_tests_per_client {
        if u.running >= max {
            return Err(format!(
                "{ip} already runs {} tests, the limit per client is {max} (--max-tests-per-client)",
                u.running
            ));
        }
    }
    if let Some(max) = cfg.max_tests_per_minute {
        if u.starts.len() >= max {
            return Err(format!(
                "{ip} started {} tests in the last minute, the limit is {max} (--max-tests-per-minute)",
                u.starts.len()
            ));
        }
    }
    u.running += 1;
    u.starts.push_back(now);
    Ok(ClientSlot { state, ip })
}

fn connection(mut conn: TcpStream, state: &State) {
    let peer = conn
        .peer_addr()
        .map_or_else(|_| "?".to_string(), |a| a.to_string());
    let first = first_frame(&mut conn);
    state.handshakes.fetch_sub(1, Ordering::SeqCst);
    match first {
        Ok(Message::Start {
            version,
            tool,
            spec,
            host_id,
            nonce,
        }) => {
            let Ok(mut ch) = Channel::new(conn, MAX_FRAME) else {
                return;
            };
            let hello = Hello {
                version,
                tool: &tool,
                host_id: &host_id,
                nonce: &nonce,
            };
            let result = test_session(&mut ch, state, &hello, spec);
            // The test's buffers and histograms are freed: give the memory back.
            crate::sys::release_free_memory();
            if let Err(e) = result {
                let event = match &e {
                    EngineError::Refused(r) if r.starts_with("authentication failed") => {
                        "auth_failed"
                    }
                    EngineError::Refused(_) => "refused",
                    _ => "failed",
                };
                log(
                    state,
                    format_args!("client={peer} event={event} reason={}", q(&e.to_string())),
                );
            }
        }
        Ok(Message::Attach { cookie, stream, .. }) => {
            if let Err(e) = attach(conn, state, cookie, stream) {
                log(
                    state,
                    format_args!("client={peer} event=attach_refused reason={}", q(&e)),
                );
            }
        }
        Ok(other) => {
            reject(conn, "the first message must be start or attach");
            log(
                state,
                format_args!(
                    "client={peer} event=rejected reason={}",
                    q(&format!("unexpected first message {other:?}"))
                ),
            );
        }
        Err(e) => {
            reject(conn, &e);
            log(
                state,
                format_args!("client={peer} event=rejected reason={}", q(&e)),
            );
        }
    }
}

/// Tells a misbehaving peer why it is being dropped, if it still listens.
fn reject(conn: TcpStream, reason: &str) {
    if let Ok(mut ch) = Channel::new(conn, MAX_HELLO_FRAME) {
        let _ = ch.send(&Message::Error {
            reason: reason.to_string(),
        });
    }
}

fn attach(conn: TcpStream, state: &State, cookie: u64, stream: u32) -> Result<(), String> {
    let peer = conn.peer_addr().map_err(|e| e.to_string())?.ip();
    if stream == CRR_STREAM {
        let crr = state.crr.lock().map_err(|_| "server state poisoned")?;
        return match crr.get(&cookie) {
            // A full queue (a client opening connections faster than it waits for answers)
            // drops the connection: the client sees it closed.
            Some((ip, tx)) if *ip == peer => tx
                .try_send(conn)
                .map_err(|_| "too many transactions at once".to_string()),
            _ => Err("unknown test or wrong address".into()),
        };
    }
    let pending = state.pending.lock().map_err(|_| "server state poisoned")?;
    match pending.get(&cookie) {
        Some(p) if p.peer == peer && p.protocol == Protocol::Tcp && stream < p.streams => {
            p.tx.try_send((stream, DataSocket::Tcp(conn)))
                .map_err(|_| "more data connections than streams".to_string())
        }
        Some(Pending {
            peer: p,
            log_tx: Some(tx),
            ..
        }) if *p == peer && stream == PACKET_LOG_STREAM => tx
            .try_send(conn)
            .map_err(|_| "packet log already attached".to_string()),
        _ => Err("unknown test, wrong stream or wrong address".into()),
    }
}

/// Answers UDP hellos: opens a socket connected to the hello's source for the test it names.
/// The test's entry stays pending until its session has every connection it waits for;
/// repeated hellos meanwhile find the stream taken and are dropped.
fn udp_hellos(udp: &UdpSocket, state: &State) {
    let mut buf = [0u8; 64];
    loop {
        let Ok((n, src)) = udp.recv_from(&mut buf) else {
            continue;
        };
        // Anything that is not a hello for a pending UDP test from its client is dropped
        // without an answer.
        let Ok(hello) = UdpHello::decode(&buf[..n]) else {
            continue;
        };
        let Ok(pending) = state.pending.lock() else {
            return;
        };
        let Some(p) = pending.get(&hello.cookie) else {
            continue;
        };
        if p.peer != src.ip() || p.protocol != Protocol::Udp || hello.stream >= p.streams {
            continue;
        }
        let sock = reuse_port_udp(SocketAddr::new(p.local, state.port))
            .and_then(|s| s.connect(&src.into()).map(|()| s));
        if let Ok(sock) = sock {
            let _ = p.tx.try_send((hello.stream, DataSocket::Udp(sock.into())));
        }
    }
}

/// Holds a test slot; frees it and the pending entry when the session ends, however it ends.
struct Slot<'a> {
    state: &'a State,
    cookie: u64,
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        if let Ok(mut p) = self.state.pending.lock() {
            p.remove(&self.cookie);
        }
        if let Ok(mut c) = self.state.crr.lock() {
            c.remove(&self.cookie);
        }
        self.state.active.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Why the server will not run `spec`, if it will not.
fn check_limits(cfg: &ServerConfig, spec: &TestSpec) -> Result<(), String> {
    spec.validate().map_err(|e| e.to_string())?;
    if let (Some(max), Some(d)) = (cfg.max_duration, spec.duration_ns) {
        if Duration::from_nanos(d) > max {
            return Err(format!(
                "--time {} exceeds the server's --max-duration {}",
                format_duration(Duration::from_nanos(d)),
                format_duration(max)
            ));
        }
    }
    let streams = u64::from(spec.total_streams());
    if let Some(max) = cfg.max_streams {
        if spec.total_streams() > max {
            return Err(format!(
                "{} streams exceed the server's --max-streams {max}",
                spec.total_streams()
            ));
        }
    }
    if let Some(max) = cfg.max_size {
        let biggest = spec.size.max(spec.response_len());
        if biggest > max {
            return Err(format!(
                "messages of {biggest} bytes exceed the server's --max-size {max}"
            ));
        }
    }
    if let Some(max) = cfg.max_bytes {
        // The most a test can move: its amount, or its rate for its duration, every stream.
        let most = match (spec.bytes, spec.offered_bps(), spec.duration_ns) {
            (Some(b), _, _) => Some(u128::from(b)),
            (None, Some(bps), Some(d)) => Some(u128::from(bps) * u128::from(d) / 8_000_000_000),
            _ => None,
        }
        .map(|b| b * u128::from(streams));
        match most {
            Some(b) if b <= u128::from(max) => {}
            Some(b) => {
                return Err(format!(
                    "{} would exceed the server's --max-bytes {}",
                    format_bytes(u64::try_from(b).unwrap_or(u64::MAX)),
                    format_bytes(max)
                ))
            }
            None => {
                return Err(format!(
                    "an unbounded test was asked but the server moves at most {}: use -n, or -b with -t",
                    format_bytes(max)
                ))
            }
        }
    }
    if let Some(max) = cfg.max_rate_bps {
        // -b applies to each stream: the server's limit is on their sum.
        match spec.offered_bps().map(|r| r.saturating_mul(streams)) {
            Some(r) if r <= max => {}
            Some(r) => {
                return Err(format!(
                    "rate {} exceeds the server's --max-rate {}",
                    format_rate_bps(r as f64),
                    format_rate_bps(max as f64)
                ))
            }
            None => {
                return Err(format!(
                    "an unlimited rate was asked but the server allows at most {}: use -b/--rate",
                    format_rate_bps(max as f64)
                ))
            }
        }
    }
    Ok(())
}

fn random_cookie() -> Result<u64, EngineError> {
    let mut b = [0u8; 8];
    getrandom::getrandom(&mut b).map_err(|e| {
        EngineError::io(
            "drawing a test cookie",
            std::io::Error::other(e.to_string()),
        )
    })?;
    Ok(u64::from_ne_bytes(b))
}

fn refuse(ch: &mut Channel, reason: String) -> Result<(), EngineError> {
    let _ = ch.send(&Message::Refuse {
        reason: reason.clone(),
    });
    Err(EngineError::Refused(reason))
}

/// What a client said of itself in its `start`.
struct Hello<'a> {
    version: u32,
    tool: &'a str,
    host_id: &'a str,
    nonce: &'a str,
}

/// With a key: challenges the client and checks its answer; returns the server's proof
/// for the `accept`, or why the client is refused.
fn authenticate(
    ch: &mut Channel,
    psk: &crate::auth::Psk,
    client: &Hello<'_>,
    spec: &TestSpec,
) -> Result<String, String> {
    let server_nonce = crate::auth::nonce()?;
    ch.send(&Message::Challenge {
        nonce: server_nonce.clone(),
    })
    .map_err(|e| e.to_string())?;
    let mac = match ch.expect(SETUP_TIMEOUT, "the client's answer to the challenge") {
        Ok(Message::Auth { mac }) => mac,
        Ok(other) => return Err(format!("expected auth, got {other:?}")),
        Err(e) => return Err(e.to_string()),
    };
    let spec_json = serde_json::to_string(spec).unwrap_or_default();
    if client.nonce.is_empty() || !psk.verify_client(client.nonce, &server_nonce, &spec_json, &mac)
    {
        return Err("authentication failed: wrong pre-shared key".into());
    }
    Ok(psk.server_mac(&server_nonce, client.nonce))
}

/// The server's side of a file transfer: a copy to save (in `--save-dir`, named after the
/// test's cookie and the file) or a file to send (from `--files-dir`, never outside it).
fn file_part(
    cfg: &ServerConfig,
    spec: &mut TestSpec,
    cookie: u64,
) -> Result<Option<FilePart>, String> {
    let Some(name) = spec.file.clone() else {
        return Ok(None);
    };
    if spec.direction == Direction::Forward {
        let path = cfg
            .save_dir
            .as_ref()
            .map(|d| d.join(format!("{cookie:016x}-{name}")));
        let sink = FileSink::create(path).map_err(|e| format!("cannot save the file here: {e}"))?;
        return Ok(Some(FilePart::Sink(sink)));
    }
    let dir = cfg
        .files_dir
        .as_ref()
        .ok_or("this server sends no files (it was started without --files-dir)")?;
    // The name is a plain name (validated); resolving links must not lead out of the dir.
    let unknown = || format!("no file {name:?} in this server's --files-dir");
    let base = dir.canonicalize().map_err(|_| unknown())?;
    let path = base.join(&name).canonicalize().map_err(|_| unknown())?;
    if !path.starts_with(&base) {
        return Err(unknown());
    }
    let (source, size) = FileSource::open(&path).map_err(|_| unknown())?;
    spec.bytes = Some(spec.bytes_for_file(size));
    spec.validate().map_err(|e| e.to_string())?;
    Ok(Some(FilePart::Source(source)))
}

fn test_session(
    ch: &mut Channel,
    state: &State,
    client: &Hello<'_>,
    mut spec: TestSpec,
) -> Result<(), EngineError> {
    let cfg = &state.cfg;
    let (version, tool_name) = (client.version, client.tool);
    if version != PROTOCOL_VERSION {
        return refuse(
            ch,
            format!(
                "the client ({tool_name}) speaks control protocol {version}, this server ({}) speaks {PROTOCOL_VERSION}",
                tool()
            ),
        );
    }
    // Authenticate first: an unauthenticated client learns nothing of the limits.
    let server_mac = match &cfg.psk {
        None => None,
        Some(psk) => match authenticate(ch, psk, client, &spec) {
            Ok(mac) => Some(mac),
            Err(reason) => {
                state.auth_failures.fetch_add(1, Ordering::SeqCst);
                return refuse(ch, reason);
            }
        },
    };
    if let Err(reason) = check_limits(cfg, &spec) {
        return refuse(ch, reason);
    }
    if state.shutdown.load(Ordering::SeqCst) {
        return refuse(ch, "the server is shutting down".into());
    }
    let client_ip = ch
        .stream()
        .peer_addr()
        .map_err(|e| EngineError::io("reading the peer address", e))?
        .ip();
    let _client = match client_slot(state, client_ip) {
        Ok(slot) => slot,
        Err(reason) => return refuse(ch, reason),
    };
    let running = state.active.fetch_add(1, Ordering::SeqCst);
    let cookie = random_cookie()?;
    let _slot = Slot { state, cookie };
    if running >= cfg.max_tests {
        return refuse(
            ch,
            format!(
                "server busy: {running} tests running, the limit is {} (--max-tests)",
                cfg.max_tests
            ),
        );
    }
    let mut file = match file_part(cfg, &mut spec, cookie) {
        Ok(f) => f,
        Err(reason) => return refuse(ch, reason),
    };
    let peer = ch
        .stream()
        .peer_addr()
        .map_err(|e| EngineError::io("reading the peer address", e))?;
    let local = ch
        .stream()
        .local_addr()
        .map_err(|e| EngineError::io("reading the local address", e))?;
    let role_of = |stream: u32| match spec.stream_direction(stream) {
        Direction::Reverse => Role::Sender,
        Direction::Forward | Direction::Bidir => Role::Receiver,
    };
    let role = role_of(0);
    // Room for every stream and as many repeats (a resent hello): the session takes the
    // first socket of each stream and drops the rest.
    let (tx, rx) = sync_channel(2 * spec.total_streams() as usize);
    let (log_tx, log_rx) = sync_channel(1);
    let writes_log = spec.packet_log && role == Role::Receiver;
    state
        .pending
        .lock()
        .map_err(|_| EngineError::Protocol("server state poisoned".into()))?
        .insert(
            cookie,
            Pending {
                peer: peer.ip(),
                local: local.ip(),
                protocol: spec.protocol,
                streams: spec.total_streams(),
                tx,
                log_tx: writes_log.then_some(log_tx),
            },
        );
    ch.send(&Message::Accept {
        cookie,
        udp_port: state.port,
        tool: tool(),
        host_id: host_id(),
        bytes: file.is_some().then_some(spec.bytes).flatten(),
        server_mac,
    })?;
    let packet_log = if writes_log {
        let conn = log_rx
            .recv_timeout(SETUP_TIMEOUT)
            .map_err(|_| EngineError::Timeout("the client's packet log connection"))?;
        // A client that stops reading its log, or crawls, fails the log, not the server:
        // each write times out, and the log's writer is cut off by shutting it down.
        let _ = conn.set_write_timeout(Some(SETUP_TIMEOUT));
        let handle = conn
            .try_clone()
            .map_err(|e| EngineError::io("keeping a handle on the packet log connection", e))?;
        Some(LogOut {
            out: Box::new(conn),
            abort: Some(Box::new(move || {
                let _ = handle.shutdown(std::net::Shutdown::Both);
            })),
        })
    } else {
        None
    };
    // Every stream's socket, each set up as it comes (a UDP stream is confirmed at once, as
    // the client waits for that before its next hello).
    let same = same_clock(&host_id(), client.host_id);
    let deadline_ns = cfg.max_duration.map_or(u64::MAX, |d| {
        (d.as_nanos() as u64).saturating_add(spec.drain_ns)
    });
    let mut slots: Vec<Option<(Role, DataSocket, RoleParams)>> =
        (0..spec.total_streams()).map(|_| None).collect();
    let mut packet_log = packet_log;
    // --mode crr: each transaction's connection comes through `attach` to this queue.
    let mut crr_conns = None;
    if spec.mechanism == Mechanism::Crr {
        let (crr_tx, crr_rx) = sync_channel(64);
        state
            .crr
            .lock()
            .map_err(|_| EngineError::Protocol("server state poisoned".into()))?
            .insert(cookie, (peer.ip(), crr_tx));
        crr_conns = Some(crr_rx);
    }
    let setup_end = Instant::now() + SETUP_TIMEOUT;
    while slots.iter().any(Option::is_none) {
        let left = setup_end.saturating_duration_since(Instant::now());
        let (stream, sock) = rx
            .recv_timeout(left)
            .map_err(|_| EngineError::Timeout("the client's data streams"))?;
        let Some(slot) = slots.get_mut(stream as usize).filter(|s| s.is_none()) else {
            continue;
        };
        let (datapath, offloads, hello) = match &sock {
            DataSocket::Tcp(s) => match tcp_datapath(s, &spec) {
                Ok(d) => (d, Offloads::default(), None),
                Err(reason) => {
                    let _ = ch.send(&Message::Error {
                        reason: format!("server: {reason}"),
                    });
                    return Err(EngineError::from(reason));
                }
            },
            DataSocket::Udp(s) => {
                let (dp, off) = udp_datapath(s, &spec, vec!["udp_reuseport".into()]);
                ch.send(&Message::UdpReady { stream })?;
                (dp, off, Some(UdpHello { cookie, stream }.encode()))
            }
        };
        let params = RoleParams {
            spec: spec.clone(),
            deadline_ns,
            hello,
            stream,
            intervals: None,
            datapath,
            same_clock: same,
            packet_log: if stream == 0 { packet_log.take() } else { None },
            offloads,
            crr: crr_conns.take().map(CrrPart::Server),
            file: if stream == 0 { file.take() } else { None },
        };
        *slot = Some((role_of(stream), sock, params));
    }
    if let Ok(mut p) = state.pending.lock() {
        p.remove(&cookie);
    }
    let streams: Vec<(Role, DataSocket, RoleParams)> = slots.into_iter().flatten().collect();
    match ch.expect(SETUP_TIMEOUT, "the client's begin")? {
        Message::Begin => {}
        other => {
            let _ = ch.send(&Message::Error {
                reason: "expected begin".into(),
            });
            return Err(EngineError::Protocol(format!(
                "expected begin, got {other:?}"
            )));
        }
    }
    let out = drive(ch, streams, &mut Quiet, Some(&state.shutdown));
    let r = Results::assemble(
        &spec,
        peer.to_string(),
        out.peer.as_ref(),
        Some(&out.local),
        out.error,
    );
    log(
        state,
        format_args!(
            "client={peer} event=test test={cookie:016x} protocol={} mechanism={} direction={} size={} streams={} sent_bytes={} sent_messages={} received_bytes={} received_messages={} lost={} result={}",
            spec.protocol,
            spec.mechanism,
            spec.direction,
            spec.size,
            spec.total_streams(),
            r.end.sent.bytes,
            r.end.sent.messages,
            r.end.received.bytes,
            r.end.received.messages,
            r.end.udp.as_ref().map_or(0, |u| u.lost),
            r.error.map_or_else(|| "ok".to_string(), |e| q(&format!("error: {e}")))
        ),
    );
    Ok(())
}
