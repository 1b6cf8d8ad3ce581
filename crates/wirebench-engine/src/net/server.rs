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
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant};

use socket2::{Domain, Socket, Type};
use wirebench_proto::control::{CRR_STREAM, PACKET_LOG_STREAM};
use wirebench_proto::header::UdpHello;
use wirebench_proto::results::{Datapath, Results, Role, SideReport};
use wirebench_proto::spec::{Direction, Mechanism, Protocol, TestSpec};

use super::client::tool;
use super::roles::{Quiet, RoleEvent, Roles};
use super::{Pump, SETUP_TICK, TICK};
use crate::control::admission::{Admission, PendingId, Refusal, SlotLimits, SpecLimits, Ticket};
use crate::control::server::{ServerAction, ServerEvent, ServerParams, ServerSession};
use crate::control::{RunAction, SETUP_TIMEOUT};
use crate::file::{FileSink, FileSource};
use crate::log::LogOut;
use crate::role::{CrrPart, DataSocket, FilePart, RoleParams};
use crate::sys::udp::Offloads;
use crate::sys::{host_id, max_rss_kib, rss_kib, same_clock, tcp_datapath, udp_datapath};
use crate::EngineError;

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
    /// Who is let in: the pending stage, test slots, starts per minute.
    admission: Mutex<Admission>,
    /// A second handle on each connection in the pending stage, to drop it when evicted.
    pending_conns: Mutex<HashMap<PendingId, TcpStream>>,
    /// Clients refused for a wrong key, since the start.
    auth_failures: AtomicUsize,
    /// Set on SIGTERM: running tests end with a message, new ones are refused.
    shutdown: Arc<AtomicBool>,
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
    pub fn shutdown_flag(&self) -> Arc<AtomicBool> {
        Arc::clone(&self.state.shutdown)
    }

    /// Tests running now.
    pub fn running_tests(&self) -> usize {
        self.state.admission().running()
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
                admission: Mutex::new(Admission::new(SlotLimits {
                    max_tests: cfg.max_tests,
                    per_client: cfg.max_tests_per_client,
                    per_minute: cfg.max_tests_per_minute,
                })),
                pending_conns: Mutex::new(HashMap::new()),
                cfg,
                auth_failures: AtomicUsize::new(0),
                shutdown: Arc::new(AtomicBool::new(false)),
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
                        state.admission().running(),
                        state.admission().pending(),
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
            let Ok(peer) = conn.peer_addr() else {
                continue;
            };
            // A full pending stage drops its oldest connection (from this address when it
            // holds its share), so silent connections age out instead of locking others out.
            let (id, evict) = self.state.admission().pending_open(peer.ip());
            if let Ok(mut conns) = self.state.pending_conns.lock() {
                if let Some(old) = evict.and_then(|old| conns.remove(&old)) {
                    let _ = old.shutdown(std::net::Shutdown::Both);
                }
                if let Ok(c) = conn.try_clone() {
                    conns.insert(id, c);
                }
            }
            let state = Arc::clone(&self.state);
            let spawned = thread::Builder::new()
                .name("wirebench-conn".into())
                .spawn(move || connection(conn, id, &state));
            if spawned.is_err() {
                // The connection was dropped with the closure; give its place back.
                self.state.leave_pending(id);
            }
        }
        Ok(())
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

impl State {
    /// The admission state; a panic elsewhere while holding it leaves it usable.
    fn admission(&self) -> MutexGuard<'_, Admission> {
        self.admission.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The connection `id` said what it is, or ended: it leaves the pending stage.
    fn leave_pending(&self, id: PendingId) {
        self.admission().pending_close(id);
        if let Ok(mut conns) = self.pending_conns.lock() {
            conns.remove(&id);
        }
    }

    fn spec_limits(&self) -> SpecLimits {
        let cfg = &self.cfg;
        SpecLimits {
            max_duration: cfg.max_duration,
            max_rate_bps: cfg.max_rate_bps,
            max_bytes: cfg.max_bytes,
            max_streams: cfg.max_streams,
            max_size: cfg.max_size,
        }
    }
}

/// Serves one accepted connection: runs its session, carries out what it asks, logs how it
/// ended.
fn connection(conn: TcpStream, id: PendingId, state: &State) {
    let (Ok(peer), Ok(local), Ok(nonce)) =
        (conn.peer_addr(), conn.local_addr(), crate::auth::nonce())
    else {
        state.leave_pending(id);
        return;
    };
    let params = ServerParams {
        limits: state.spec_limits(),
        psk: state.cfg.psk.clone(),
        nonce,
        tool: tool(),
        host_id: host_id(),
        udp_port: state.port,
    };
    let mut session = ServerSession::new(Instant::now(), params);
    let Ok(mut pump) = Pump::new(conn) else {
        state.leave_pending(id);
        return;
    };
    let mut test: Option<Test<'_>> = None;
    let mut roles: Option<Roles> = None;
    let mut identified = false;
    let mut client_host = String::new();
    let mut handover = None;
    let mut shutdown_told = false;
    loop {
        while let Some(action) = session.poll_action() {
            let now = Instant::now();
            match action {
                ServerAction::Identified { host_id, .. } => {
                    state.leave_pending(id);
                    identified = true;
                    client_host = host_id;
                }
                ServerAction::Attach { cookie, stream } => {
                    state.leave_pending(id);
                    handover = Some((cookie, stream));
                }
                ServerAction::Admit => {
                    let event = match admit(state, &session, peer, local) {
                        Ok(t) => {
                            let event = ServerEvent::Admitted {
                                cookie: t.slot.cookie,
                                bytes: t.bytes,
                            };
                            test = Some(t);
                            event
                        }
                        Err(r) => ServerEvent::Refused(r),
                    };
                    session.handle_event(now, event);
                }
                ServerAction::StreamsReady => {
                    if let Some(t) = &test {
                        t.slot.unlist();
                    }
                }
                ServerAction::StartRoles => {
                    let started = test.as_mut().map(|t| Roles::start(t.roles(&client_host)));
                    match started {
                        Some(Ok(r)) => roles = Some(r),
                        Some(Err(e)) => {
                            let report = Box::new(SideReport {
                                error: Some(e.to_string()),
                                ..SideReport::default()
                            });
                            session.handle_event(now, ServerEvent::RolesDone { report });
                        }
                        None => {}
                    }
                }
                ServerAction::Run(RunAction::PeerCounts(counts)) => {
                    if let Some(r) = &roles {
                        r.peer_counts(&counts);
                    }
                }
                ServerAction::Run(RunAction::StopRoles) => {
                    if let Some(r) = &roles {
                        r.stop();
                    }
                }
            }
        }
        if session.is_closed() {
            break;
        }
        let tick = if session.awaits_streams() {
            SETUP_TICK
        } else {
            TICK
        };
        pump.round(&mut session, tick);
        if let Some(t) = &mut test {
            for event in t.arrivals() {
                session.handle_event(Instant::now(), event);
            }
            if !shutdown_told && state.shutdown.load(Ordering::SeqCst) {
                // The server is going away: tell the client why, and stop.
                shutdown_told = true;
                session.handle_event(Instant::now(), ServerEvent::Shutdown);
            }
        }
        if let Some(r) = &mut roles {
            for event in r.poll(&mut Quiet) {
                let event = match event {
                    RoleEvent::SendersDone(counts) => ServerEvent::SendersDone { counts },
                    RoleEvent::Done(report) => ServerEvent::RolesDone { report },
                };
                session.handle_event(Instant::now(), event);
            }
        }
    }
    state.leave_pending(id);
    if let Some((cookie, stream)) = handover {
        if let Err(e) = attach(pump.into_stream(), state, cookie, stream) {
            log(
                state,
                format_args!("client={peer} event=attach_refused reason={}", q(&e)),
            );
        }
        return;
    }
    drop(roles);
    let outcome = session.outcome().unwrap_or_default();
    let spec = test.as_ref().map(|t| (t.spec.clone(), t.slot.cookie));
    drop(test);
    if outcome.started {
        // The test's buffers and histograms are freed: give the memory back.
        crate::sys::release_free_memory();
    }
    let (Some((spec, cookie)), true) = (spec, outcome.started) else {
        let event = match (&outcome.refusal, identified) {
            (_, false) => "rejected",
            (Some(Refusal::AuthFailed), _) => {
                state.auth_failures.fetch_add(1, Ordering::SeqCst);
                "auth_failed"
            }
            (Some(_), _) => "refused",
            (None, true) => "failed",
        };
        if let Some(e) = outcome.error {
            log(
                state,
                format_args!("client={peer} event={event} reason={}", q(&e.to_string())),
            );
        }
        return;
    };
    let r = Results::assemble(
        &spec,
        peer.to_string(),
        outcome.peer.as_ref(),
        outcome.local.as_ref(),
        outcome.error.map(|e| e.to_string()),
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

/// Holds a test slot; gives it back, and forgets the test's routing entries, when the
/// session ends, however it ends.
struct Slot<'a> {
    state: &'a State,
    ticket: Option<Ticket>,
    cookie: u64,
}

impl Slot<'_> {
    /// Every stream arrived: no more connections or hellos for this test.
    fn unlist(&self) {
        if let Ok(mut p) = self.state.pending.lock() {
            p.remove(&self.cookie);
        }
    }
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        self.unlist();
        if let Ok(mut c) = self.state.crr.lock() {
            c.remove(&self.cookie);
        }
        if let Some(t) = self.ticket.take() {
            self.state.admission().release(t);
        }
    }
}

/// A stream that arrived, set up, waiting for `begin`.
struct Arrived {
    sock: DataSocket,
    datapath: Datapath,
    offloads: Offloads,
    hello: Option<[u8; wirebench_proto::header::UDP_HELLO_LEN]>,
}

/// The server's side of an admitted test.
struct Test<'a> {
    slot: Slot<'a>,
    /// The test as it runs (a reverse file transfer's amount set from the file).
    spec: TestSpec,
    /// The amount told to the client, for a file transfer.
    bytes: Option<u64>,
    rx: Receiver<(u32, DataSocket)>,
    log_rx: Receiver<TcpStream>,
    streams: Vec<Option<Arrived>>,
    packet_log: Option<LogOut>,
    file: Option<FilePart>,
    crr: Option<Receiver<TcpStream>>,
}

/// Takes a slot for the test the session asks for, prepares its file part, and lists it so
/// that its data connections and UDP hellos find it.
fn admit<'a>(
    state: &'a State,
    session: &ServerSession,
    peer: SocketAddr,
    local: SocketAddr,
) -> Result<Test<'a>, Refusal> {
    if state.shutdown.load(Ordering::SeqCst) {
        return Err(Refusal::ShuttingDown);
    }
    let mut spec = session
        .spec()
        .cloned()
        .ok_or_else(|| Refusal::Invalid("no test was asked".into()))?;
    let cookie = random_cookie().map_err(|e| Refusal::Internal(e.to_string()))?;
    let ticket = state.admission().admit(Instant::now(), peer.ip())?;
    let slot = Slot {
        state,
        ticket: Some(ticket),
        cookie,
    };
    let file = file_part(&state.cfg, &mut spec, cookie).map_err(Refusal::File)?;
    let bytes = file.is_some().then_some(spec.bytes).flatten();
    // Room for every stream and as many repeats (a resent hello): the session takes the
    // first socket of each stream and drops the rest.
    let (tx, rx) = sync_channel(2 * spec.total_streams() as usize);
    let (log_tx, log_rx) = sync_channel(1);
    let poisoned = || Refusal::Internal("server state poisoned".into());
    state.pending.lock().map_err(|_| poisoned())?.insert(
        cookie,
        Pending {
            peer: peer.ip(),
            local: local.ip(),
            protocol: spec.protocol,
            streams: spec.total_streams(),
            tx,
            log_tx: ServerSession::writes_log(&spec).then_some(log_tx),
        },
    );
    // --mode crr: each transaction's connection comes through `attach` to this queue.
    let mut crr = None;
    if spec.mechanism == Mechanism::Crr {
        let (crr_tx, crr_rx) = sync_channel(64);
        state
            .crr
            .lock()
            .map_err(|_| poisoned())?
            .insert(cookie, (peer.ip(), crr_tx));
        crr = Some(crr_rx);
    }
    Ok(Test {
        slot,
        streams: (0..spec.total_streams()).map(|_| None).collect(),
        spec,
        bytes,
        rx,
        log_rx,
        packet_log: None,
        file,
        crr,
    })
}

impl Test<'_> {
    /// The streams and the packet log connection that arrived since the last look, each
    /// set up as it comes.
    fn arrivals(&mut self) -> Vec<ServerEvent> {
        let mut events = Vec::new();
        while let Ok((stream, sock)) = self.rx.try_recv() {
            let Some(slot) = self
                .streams
                .get_mut(stream as usize)
                .filter(|s| s.is_none())
            else {
                continue;
            };
            let arrived = match &sock {
                DataSocket::Tcp(s) => match tcp_datapath(s, &self.spec) {
                    Ok(datapath) => Arrived {
                        sock,
                        datapath,
                        offloads: Offloads::default(),
                        hello: None,
                    },
                    Err(reason) => {
                        events.push(ServerEvent::StreamFailed { reason });
                        return events;
                    }
                },
                DataSocket::Udp(s) => {
                    let (datapath, offloads) =
                        udp_datapath(s, &self.spec, vec!["udp_reuseport".into()]);
                    let cookie = self.slot.cookie;
                    Arrived {
                        sock,
                        datapath,
                        offloads,
                        hello: Some(UdpHello { cookie, stream }.encode()),
                    }
                }
            };
            *slot = Some(arrived);
            events.push(ServerEvent::StreamArrived { stream });
        }
        if let Ok(conn) = self.log_rx.try_recv() {
            // A client that stops reading its log, or crawls, fails the log, not the
            // server: each write times out, and the log's writer is cut off by shutting
            // it down.
            let _ = conn.set_write_timeout(Some(SETUP_TIMEOUT));
            match conn.try_clone() {
                Ok(handle) => {
                    self.packet_log = Some(LogOut {
                        out: Box::new(conn),
                        abort: Some(Box::new(move || {
                            let _ = handle.shutdown(std::net::Shutdown::Both);
                        })),
                    });
                    events.push(ServerEvent::StreamArrived {
                        stream: PACKET_LOG_STREAM,
                    });
                }
                Err(e) => events.push(ServerEvent::StreamFailed {
                    reason: format!("keeping a handle on the packet log connection: {e}"),
                }),
            }
        }
        events
    }

    /// Every stream's role and parameters, in order.
    fn roles(&mut self, client_host: &str) -> Vec<(Role, DataSocket, RoleParams)> {
        let cfg = &self.slot.state.cfg;
        let same = same_clock(&host_id(), client_host);
        let deadline_ns = cfg.max_duration.map_or(u64::MAX, |d| {
            (d.as_nanos() as u64).saturating_add(self.spec.drain_ns)
        });
        let mut out = Vec::with_capacity(self.streams.len());
        for (i, arrived) in std::mem::take(&mut self.streams).into_iter().enumerate() {
            let Some(a) = arrived else { continue };
            let stream = i as u32;
            let params = RoleParams {
                spec: self.spec.clone(),
                deadline_ns,
                hello: a.hello,
                stream,
                intervals: None,
                datapath: a.datapath,
                same_clock: same,
                packet_log: if stream == 0 {
                    self.packet_log.take()
                } else {
                    None
                },
                offloads: a.offloads,
                crr: if stream == 0 {
                    self.crr.take().map(CrrPart::Server)
                } else {
                    None
                },
                file: if stream == 0 { self.file.take() } else { None },
            };
            out.push((ServerSession::role_of(&self.spec, stream), a.sock, params));
        }
        out
    }
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
