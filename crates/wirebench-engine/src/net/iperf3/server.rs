//! The server's side of iperf3 clients: a control session per client, its data streams
//! routed here by cookie (TCP) or by address (UDP connect datagrams), the server's limits and
//! key rules applied as to wirebench clients.

use std::io::Read;
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::mpsc::{sync_channel, Receiver};
use std::sync::Arc;
use std::time::{Duration, Instant};

use socket2::{Domain, SockRef, Socket, Type};

use super::registry::Waiting;
use super::{budget, congestion_of, round, set_udp_window, set_window, Streams};
use crate::control::admission::{PendingId, DEFAULT_MAX_DURATION};
use crate::control::SETUP_TIMEOUT;
use crate::iperf3::codec::{
    check_cookie, connect_bytes, is_connect, COOKIE_LEN, IE_NEW_TEST, IE_TOTAL_RATE,
    UDP_CONNECT_REPLY,
};
use crate::iperf3::server::{ServerAction, ServerSession};
use crate::iperf3::Params;
use crate::net::roles::Quiet;
use crate::net::state::{log, q, State};
use crate::net::{Pump, SETUP_TICK, TICK};
use crate::role::iperf3::Plan;
use crate::role::limit::{MoveLimit, TestLimits};
use crate::role::DataSocket;
use crate::EngineError;

/// The errno sent with a refusal's `IENEWTEST`: iperf3 clients print "unable to create a
/// new test: Operation not permitted", the nearest of its words to "not by this server's
/// rules" (the server's log has the reason).
const EPERM: i32 = 1;

/// How long past the server's longest test an iperf3 client may take to end it before the
/// server ends it (the client's clock starts when TEST_RUNNING reaches it, after ours).
const DURATION_GRACE: Duration = Duration::from_secs(1);

/// How long past that the control session waits at most, whatever the driver does.
const END_GRACE: Duration = Duration::from_secs(5);

/// A UDP datagram that reached the server's UDP port: if it is an iperf3 connect datagram
/// from a client with a test waiting for UDP streams, opens that stream's socket (connected
/// to the sender, as iperf3 does) and answers. Returns whether it was one.
pub(crate) fn udp_connect(state: &State, bytes: &[u8], src: SocketAddr) -> bool {
    if bytes.len() != 4 || !is_connect(bytes) {
        return false;
    }
    let Ok(mut tests) = state.iperf3.tests() else {
        return true;
    };
    let Some(w) = tests
        .values_mut()
        .find(|w| w.udp && w.udp_left > 0 && w.peer == src.ip())
    else {
        return true;
    };
    let sock = reuse_port_udp(SocketAddr::new(w.local, w.port))
        .and_then(|s| s.connect(&src.into()).map(|()| s));
    if let Ok(sock) = sock {
        let sock: UdpSocket = sock.into();
        if sock.send(&connect_bytes(UDP_CONNECT_REPLY)).is_ok()
            // One thread answers the connect datagrams, which the client sends one stream
            // at a time: their order is the streams' order.
            && w
                .tx
                .try_send((u64::from(u32::MAX - w.udp_left), DataSocket::Udp(sock)))
                .is_ok()
        {
            w.udp_left -= 1;
        }
    }
    true
}

fn reuse_port_udp(addr: SocketAddr) -> std::io::Result<Socket> {
    let s = Socket::new(Domain::for_address(addr), Type::DGRAM, None)?;
    s.set_reuse_address(true)?;
    s.set_reuse_port(true)?;
    s.bind(&addr.into())?;
    Ok(s)
}

/// What is left of the handshake time of a connection accepted at `accepted` (the
/// server's one deadline for a connection to say what it is); at least a millisecond, since
/// a zero read timeout means none.
fn handshake_left(accepted: Instant) -> Duration {
    (accepted + SETUP_TIMEOUT)
        .saturating_duration_since(Instant::now())
        .max(Duration::from_millis(1))
}

/// Serves a connection that starts with an iperf3 cookie: a data stream of a waiting test,
/// or a new test's control connection. It stays in the server's pending stage (`pending`,
/// under its caps) until its whole cookie has come, within the handshake time.
pub(crate) fn handle(
    mut conn: TcpStream,
    state: &State,
    port: u16,
    pending: Option<PendingId>,
    accepted: Instant,
) {
    let mut cookie = [0u8; COOKIE_LEN];
    let _ = conn.set_read_timeout(Some(handshake_left(accepted)));
    let read = conn.read_exact(&mut cookie);
    if let Some(id) = pending {
        state.leave_pending(id);
    }
    if read.is_err() || check_cookie(&cookie).is_err() {
        return;
    }
    let _ = conn.set_read_timeout(None);
    // The pending id is the accept order: the order the client opened its streams in.
    let order = pending.unwrap_or(u64::MAX);
    if let Some(conn) = state.iperf3.attach(&cookie, conn, order) {
        control(conn, cookie, state, port);
    }
}

/// `--iperf3-port`, bound (TCP and UDP) before the server says it listens.
pub(crate) struct Iperf3Port {
    tcp: TcpListener,
    udp: UdpSocket,
}

/// Binds `--iperf3-port` on the server's address, TCP and UDP.
pub(crate) fn bind_port(ip: std::net::IpAddr, port: u16) -> Result<Iperf3Port, EngineError> {
    let addr = SocketAddr::new(ip, port);
    let tcp = TcpListener::bind(addr).map_err(|source| EngineError::Connect {
        addr: format!("{addr} (--iperf3-port)"),
        source,
    })?;
    let port = tcp.local_addr().map_or(port, |a| a.port());
    let udp: UdpSocket = reuse_port_udp(SocketAddr::new(addr.ip(), port))
        .map_err(|source| EngineError::Connect {
            addr: format!("{addr} (--iperf3-port, UDP)"),
            source,
        })?
        .into();
    Ok(Iperf3Port { tcp, udp })
}

/// Serves the UDP side of the bound `--iperf3-port` on a thread of its own, and returns its
/// TCP listener, whose connections the server's handshake loop accepts.
pub(crate) fn serve_port(
    state: &Arc<State>,
    bound: Iperf3Port,
) -> Result<TcpListener, EngineError> {
    let Iperf3Port { tcp, udp } = bound;
    let st = Arc::clone(state);
    std::thread::Builder::new()
        .name("wirebench-iperf3-udp".into())
        .spawn(move || {
            let mut buf = [0u8; 64];
            while let Ok((n, src)) = udp.recv_from(&mut buf) {
                udp_connect(&st, &buf[..n], src);
            }
        })
        .map_err(|e| EngineError::io("starting the iperf3 UDP thread", e))?;
    Ok(tcp)
}

/// Why the server will not run an iperf3 client's test.
struct Refused {
    /// The refusal's kind, as the `--metrics` counters name wirebench clients' refusals.
    kind: &'static str,
    /// In words, for the log.
    why: String,
    /// iperf3's error code for the client.
    code: i32,
}

impl Refused {
    fn new(kind: &'static str, why: String) -> Self {
        Self {
            kind,
            why,
            code: IE_NEW_TEST,
        }
    }
}

/// The longest test the server runs (its default ceiling without `--max-duration`).
fn max_duration(state: &State) -> Duration {
    state.cfg.max_duration.unwrap_or(DEFAULT_MAX_DURATION)
}

/// Checks an iperf3 client's parameters against the server's limits, as wirebench clients'
/// specs are checked (`SpecLimits::check`): what they say they will move is checked here,
/// what they do move is counted by the roles.
fn check_limits(p: &Params, state: &State) -> Result<(), Refused> {
    let cfg = &state.cfg;
    let streams = p.parallel.max(1) * if p.bidirectional { 2 } else { 1 };
    if p.omit > 0 {
        return Err(Refused::new(
            "invalid",
            "--omit is not supported by this server".into(),
        ));
    }
    if p.blockcount > 0 {
        return Err(Refused::new(
            "invalid",
            "-k (blocks) is not supported by this server".into(),
        ));
    }
    if p.len == 0 || (p.udp && p.len < 12) {
        return Err(Refused::new(
            "invalid",
            format!("block size {} is too small", p.len),
        ));
    }
    if let Some(max) = cfg.max_streams {
        if streams > max {
            return Err(Refused::new(
                "max_streams",
                format!("{streams} streams is over this server's {max}"),
            ));
        }
    }
    if let Some(max) = cfg.max_size {
        if p.len > max {
            return Err(Refused::new(
                "max_size",
                format!("block size {} is over this server's {max}", p.len),
            ));
        }
    }
    let max_time = max_duration(state);
    if p.num == 0 && Duration::from_secs(p.time) > max_time {
        return Err(Refused::new(
            "max_duration",
            format!(
                "{} s is over this server's {} s",
                p.time,
                max_time.as_secs()
            ),
        ));
    }
    if let Some(max) = cfg.max_bytes {
        let bytes = if p.num > 0 {
            u128::from(p.num)
        } else {
            u128::from(p.bandwidth / 8) * u128::from(p.time) * u128::from(streams)
        };
        if bytes == 0 {
            return Err(Refused::new(
                "unbounded",
                format!("the test must move at most {max} bytes: set -n, or -b and -t"),
            ));
        }
        if bytes > u128::from(max) {
            return Err(Refused::new(
                "max_bytes",
                format!("{bytes} bytes is over this server's {max}"),
            ));
        }
    }
    if let Some(max) = cfg.max_rate_bps {
        let rate = p.bandwidth.saturating_mul(u64::from(streams));
        if p.bandwidth == 0 || rate > max {
            return Err(Refused {
                kind: if p.bandwidth == 0 {
                    "unlimited_rate"
                } else {
                    "max_rate"
                },
                why: format!("the rate must be set (-b) and at most {max} bit/s in all"),
                code: IE_TOTAL_RATE,
            });
        }
    }
    Ok(())
}

/// How early the server's senders stop before a timed test's end, so that what they sent
/// has reached the iperf3 client (which stops counting when it sends TEST_END) by then.
const SENDER_LEAD: Duration = Duration::from_millis(100);

/// When the server's senders stop by themselves: a little before a timed test's end (the
/// client's timer starts when TEST_RUNNING reaches it, after this side's start), never for a
/// test of an amount (the budget ends it).
fn sender_stop_ns(p: &Params) -> u64 {
    if p.num > 0 || p.time == 0 {
        return u64::MAX;
    }
    let t = Duration::from_secs(p.time).saturating_sub(SENDER_LEAD);
    u64::try_from(t.as_nanos()).unwrap_or(u64::MAX)
}

/// Which streams the server sends on, in the order the client opens them (iperf3's
/// `iperf_run_server`: with `--bidir`, the server's receiving streams come first).
fn server_sends(p: &Params) -> Vec<bool> {
    let n = p.parallel.max(1) as usize;
    if p.bidirectional {
        [vec![false; n], vec![true; n]].concat()
    } else {
        vec![p.reverse; n]
    }
}

/// How long the server waits, after ending a test, for the iperf3 client to close its
/// control connection (it exits once it has read why).
const CLOSE_WAIT: Duration = Duration::from_secs(2);

/// Waits until the peer closes `sock`, at most `limit`; what it sends meanwhile is dropped.
fn wait_closed(sock: &TcpStream, limit: Duration) {
    let until = Instant::now() + limit;
    let mut buf = [0u8; 256];
    loop {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() || sock.set_read_timeout(Some(left)).is_err() {
            return;
        }
        match (&*sock).read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
    }
}

/// Why the server ends a running iperf3 test before the client does.
fn stop_reason(streams: &Streams, state: &State) -> Option<&'static str> {
    if streams.limited() {
        Some("limit")
    } else if streams.start.elapsed() >= max_duration(state) + DURATION_GRACE {
        Some("max_duration")
    } else if state.shutdown.load(std::sync::atomic::Ordering::Relaxed) {
        Some("shutting down")
    } else {
        None
    }
}

/// Which server limit a stream's error names (`max-bytes`, `max-rate`), for the metrics.
fn limit_of(error: &str) -> Option<&'static str> {
    ["--max-bytes", "--max-rate"]
        .into_iter()
        .find(|flag| error.contains(flag))
        .map(|flag| &flag[2..])
}

/// Runs one iperf3 client's test on its control connection (cookie already read).
fn control(conn: TcpStream, cookie: [u8; COOKIE_LEN], state: &State, port: u16) {
    let Ok(peer) = conn.peer_addr() else {
        return;
    };
    let local = conn.local_addr().map_or(state.cfg.bind.ip(), |a| a.ip());
    let who = format!("client={peer} peer_tool=iperf3");
    let mut session = ServerSession::new(Instant::now());
    let Ok(mut pump) = Pump::new(conn) else {
        return;
    };
    session.handle_bytes(Instant::now(), &cookie);
    let metrics = &state.metrics;
    let mut ticket = None;
    let mut params: Option<Params> = None;
    let mut rx: Option<Receiver<(u64, DataSocket)>> = None;
    let mut socks: Vec<(u64, DataSocket)> = Vec::new();
    let mut streams: Option<Streams> = None;
    let mut congestion = None;
    // The server limit that ended the test, as `--metrics` names it.
    let mut limited: Option<&'static str> = None;
    // From the start of the streams to TEST_END: the server's limits end the test.
    let mut running = false;
    let outcome: String = 'session: loop {
        while let Some(action) = session.poll_action() {
            let now = Instant::now();
            match action {
                ServerAction::Cookie(_) => {
                    if state.cfg.psk.is_some() && !state.cfg.allow_iperf3 {
                        log(state, format_args!(
                            "{who} event=refused reason=\"the server requires a pre-shared key, which iperf3 cannot prove; serve --allow-iperf3 admits iperf3 clients\""
                        ));
                        metrics.refused("auth_expected");
                        session.deny();
                        break 'session "refused".into();
                    }
                    if state.shutdown.load(std::sync::atomic::Ordering::Relaxed) {
                        metrics.refused("shutting_down");
                        session.deny();
                        break 'session "refused: shutting down".into();
                    }
                    match state.admission().admit(now, peer.ip()) {
                        Ok(t) => ticket = Some(t),
                        Err(r) => {
                            log(
                                state,
                                format_args!("{who} event=refused reason={}", q(&r.to_string())),
                            );
                            metrics.refused(r.kind());
                            session.deny();
                            break 'session "refused".into();
                        }
                    }
                    session.welcome(now);
                }
                ServerAction::Params(p) => {
                    if let Err(r) = check_limits(&p, state) {
                        log(
                            state,
                            format_args!("{who} event=refused reason={}", q(&r.why)),
                        );
                        metrics.refused(r.kind);
                        let errno = if r.code == IE_NEW_TEST { EPERM } else { 0 };
                        session.refuse(r.code, errno);
                        break 'session "refused".into();
                    }
                    let n = server_sends(&p).len() as u32;
                    let (tx, r) = sync_channel(n as usize);
                    state.iperf3.add(
                        cookie,
                        Waiting {
                            peer: peer.ip(),
                            local,
                            port,
                            udp: p.udp,
                            udp_left: if p.udp { n } else { 0 },
                            tx,
                        },
                    );
                    rx = Some(r);
                    log(state, format_args!(
                        "{who} event=start protocol={} streams={} reverse={} bidir={} len={} time_s={} bytes={} rate_bps={}",
                        if p.udp { "udp" } else { "tcp" },
                        p.parallel, p.reverse, p.bidirectional, p.len, p.time, p.num, p.bandwidth
                    ));
                    params = Some(p);
                    session.accept(now);
                }
                ServerAction::TestEnd => {
                    running = false;
                    if let Some(s) = streams.as_mut() {
                        s.stop_senders();
                    }
                    session.exchange(now);
                }
                ServerAction::PeerResults(doc) => {
                    let ours = match streams.as_mut() {
                        Some(s) => {
                            s.finish_receivers(Some(&doc));
                            s.results_doc(Some(&doc), congestion.clone())
                        }
                        None => Default::default(),
                    };
                    session.send_results(Instant::now(), &ours);
                }
                ServerAction::Done => break 'session "done".into(),
                ServerAction::Failed(e) => break 'session e.to_string(),
            }
        }
        if session.is_over() {
            break "ended".into();
        }
        // Streams arriving: once all are there, the test runs.
        if let (Some(r), Some(p), None) = (&rx, &params, &streams) {
            while let Ok((order, s)) = r.try_recv() {
                if let DataSocket::Tcp(t) = &s {
                    set_window(SockRef::from(t), p.window);
                    if let Some(cc) = &p.congestion {
                        let _ = SockRef::from(t).set_tcp_congestion(cc.as_bytes());
                    }
                    congestion = congestion.or_else(|| congestion_of(t));
                } else if let DataSocket::Udp(u) = &s {
                    set_udp_window(SockRef::from(u), p.window);
                }
                socks.push((order, s));
            }
            let senders = server_sends(p);
            if socks.len() == senders.len() {
                socks.sort_by_key(|(order, _)| *order);
                let socks = std::mem::take(&mut socks)
                    .into_iter()
                    .map(|(_, s)| s)
                    .collect();
                state.iperf3.remove(&cookie);
                let limits = TestLimits {
                    max_bytes: state.cfg.max_bytes,
                    max_rate_bps: state.cfg.max_rate_bps,
                };
                let plan = Plan {
                    sender: true,
                    len: p.len as usize,
                    rate_bps: p.bandwidth,
                    wide: p.udp_counters_64bit,
                    budget: budget((p.num > 0).then_some(p.num)),
                    start: Instant::now(),
                    epoch_unix_ns: crate::sys::unix_now_ns(),
                    stop_at_ns: sender_stop_ns(p),
                    limit: (limits != TestLimits::default())
                        .then(|| MoveLimit::share(limits, senders.len() as u32, p.len)),
                };
                match Streams::start(socks, senders, &plan, Duration::from_secs(1), None) {
                    Ok(s) => streams = Some(s),
                    Err(e) => break e.to_string(),
                }
                running = true;
                metrics.tests_started.inc();
                // A backstop: the driver ends the test at the server's longest itself.
                session.run(Instant::now(), Some(max_duration(state) + END_GRACE));
            }
        }
        if let Some(s) = streams.as_mut() {
            s.watch(&mut Quiet, false);
            if let Some(why) = stop_reason(s, state).filter(|_| running) {
                // The server ends the test: the client hears why in iperf3's words (a rate
                // over the limit has its own code), the log in ours.
                let error = s.limit_error();
                let text = match why {
                    "limit" => error.unwrap_or_else(|| "a server limit".into()),
                    "max_duration" => {
                        "the server ended the test at its time limit (serve --max-duration)"
                            .to_string()
                    }
                    other => other.to_string(),
                };
                limited = match why {
                    "limit" => limit_of(&text),
                    "max_duration" => Some("max-duration"),
                    _ => None,
                };
                if limited == Some("max-rate") {
                    session.refuse(IE_TOTAL_RATE, 0);
                } else {
                    session.terminate();
                }
                // The client hears it before its data connections close: a limited stream
                // holds its socket open, the others run on, until it has read and gone.
                pump.flush(&mut session);
                wait_closed(pump.stream(), CLOSE_WAIT);
                s.stop_all();
                break format!("error: {text}");
            }
        }
        let tick = if streams.is_none() { SETUP_TICK } else { TICK };
        round(&mut pump, &mut session, tick);
    };
    // The counters and the log first: an operator who scrapes once the client has its
    // answer sees them moved.
    state.iperf3.remove(&cookie);
    if let Some(limit) = limited {
        metrics.limited(limit);
    }
    if let Some(s) = streams.as_ref() {
        let sent = s.total(true);
        let received = s.total(false);
        metrics.bytes_sent.inc_by(sent);
        metrics.bytes_received.inc_by(received);
        log(
            state,
            format_args!(
                "{who} event=test sent_bytes={sent} received_bytes={received} result={}",
                q(&outcome)
            ),
        );
    } else if outcome != "refused" {
        log(
            state,
            format_args!("{who} event=test result={}", q(&outcome)),
        );
    }
    // The slot is free before the client hears the end, so that its next test finds it
    // free (the streams have stopped by now, except after a failure, where this waits).
    drop(streams);
    if let Some(t) = ticket {
        state.release(t);
    }
    // What waits to be written (ACCESS_DENIED, SERVER_ERROR, DISPLAY_RESULTS) goes out.
    pump.flush(&mut session);
}
