//! The server's side of iperf3 clients: a control session per client, its data streams
//! routed here by cookie (TCP) or by address (UDP connect datagrams), the server's limits and
//! key rules applied as to wirebench clients.

use std::io::Read;
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::atomic::Ordering;
use std::sync::mpsc::{sync_channel, Receiver};
use std::sync::Arc;
use std::time::{Duration, Instant};

use socket2::SockRef;

use super::output;
use super::registry::Waiting;
use super::{budget, congestion_of, round, set_udp_window, set_window, Streams};
use crate::control::admission::{PendingId, Ticket};
use crate::control::memory::iperf3_test_memory;
use crate::control::reclaim::UseWindow;
use crate::control::Session;
use crate::control::SETUP_TIMEOUT;
use crate::iperf3::admit::{ie, Admitted, SocketOptions};
use crate::iperf3::codec::{
    check_cookie, connect_bytes, is_connect, COOKIE_LEN, UDP_CONNECT_REPLY,
};
use crate::iperf3::server::{ResultsTooLarge, ServerAction, ServerSession, MAX_RESULTS_JSON};
use crate::net::listen::reuse_port_udp;
use crate::net::roles::Quiet;
use crate::net::shared::{log, log_refused, q, State};
use crate::net::{Pump, SETUP_TICK, TICK};
use crate::role::iperf3::Plan;
use crate::role::limit::{MoveLimit, TestLimits};
use crate::role::DataSocket;
use crate::{EngineError, ErrorKind};

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
    // A test still waiting for streams from this address first; else one that has all it
    // asked for, for which this datagram is one too many.
    let Some(w) = tests
        .values_mut()
        .filter(|w| w.udp && w.peer == src.ip())
        .max_by_key(|w| w.udp_left > 0)
    else {
        return true;
    };
    if w.udp_taken.contains(&src) {
        // The client resends a stream's connect datagram: it did not get our answer.
        let most = MAX_EXTRA_REPLIES.saturating_mul(w.udp_taken.len() as u32);
        if w.udp_resent < most {
            w.udp_resent += 1;
            answer_connect(SocketAddr::new(w.local, w.port), src);
        }
        return true;
    }
    if w.udp_left == 0 {
        // Its streams are ambiguous: the test ends (its control thread sees the count).
        // The sender is answered, a few times a test at most, so that a real iperf3
        // client waiting on this stream reads the error instead of hanging.
        let extra = w.udp_extra.fetch_add(1, Ordering::Relaxed) + 1;
        if extra <= MAX_EXTRA_REPLIES {
            answer_connect(SocketAddr::new(w.local, w.port), src);
        }
        return true;
    }
    let sock = reuse_port_udp(SocketAddr::new(w.local, w.port), false)
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
            w.udp_taken.push(src);
        }
    }
    true
}

/// Answers a connect datagram from `src` without taking it as a stream, from a socket
/// connected to it (an unconnected one on the port would share its datagrams).
fn answer_connect(local: SocketAddr, src: SocketAddr) {
    if let Ok(s) = reuse_port_udp(local, false).and_then(|s| s.connect(&src.into()).map(|()| s)) {
        let _ = s.send(&connect_bytes(UDP_CONNECT_REPLY));
    }
}

/// How many connect datagrams past its streams a test answers (each then ends it anyway):
/// enough for a real client's streams, no reflection worth having.
const MAX_EXTRA_REPLIES: u32 = 8;

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
pub(crate) fn bind_port(
    ip: std::net::IpAddr,
    port: u16,
    v6_only: bool,
) -> Result<Iperf3Port, EngineError> {
    let (tcp, udp) =
        crate::net::listen::listen(SocketAddr::new(ip, port), v6_only, "--iperf3-port")?;
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
                udp_connect(&st, &buf[..n], crate::net::canonical(src));
            }
        })
        .map_err(|e| EngineError::io("starting the iperf3 UDP thread", e))?;
    Ok(tcp)
}

/// Which streams the server sends on, in the order the client opens them (iperf3's
/// `iperf_run_server`: with `--bidir`, the server's receiving streams come first).
fn server_sends(a: &Admitted) -> Vec<bool> {
    let p = a.params();
    let n = p.parallel as usize;
    if p.bidirectional {
        [vec![false; n], vec![true; n]].concat()
    } else {
        vec![p.reverse; n]
    }
}

/// The results with the server's output (`--get-server-output`): one of the two, as
/// `iperf3 -s` sends its text lines and `iperf3 -s -J` its JSON (`serve --iperf3-json`); an
/// iperf3 client reads only one (the JSON when both come).
#[derive(serde::Serialize)]
struct WithOutput<'a> {
    #[serde(flatten)]
    doc: &'a crate::iperf3::ResultsDoc,
    #[serde(skip_serializing_if = "Option::is_none")]
    server_output_json: Option<serde_json::Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    server_output_text: Option<String>,
}

/// A data connection's two ends, for the server's output.
fn addresses(s: &DataSocket) -> Option<(SocketAddr, SocketAddr)> {
    match s {
        DataSocket::Tcp(t) => Some((t.local_addr().ok()?, t.peer_addr().ok()?)),
        DataSocket::Udp(u) => Some((u.local_addr().ok()?, u.peer_addr().ok()?)),
        DataSocket::User(_) | DataSocket::Quic(_) => None,
    }
}

/// What the server's senders may send in all: a test's amount, `-n`, or `-k` blocks. A TCP
/// amount's bytes all arrive, and the client, which counts its reads of at most a block
/// each, ends the test by then. A UDP amount may never arrive whole (a datagram lost), so
/// its senders go on past it ([`PAST_AMOUNT`]), as `iperf3 -s`'s do until the client's
/// TEST_END.
fn sender_budget(p: &crate::iperf3::Params) -> Option<u64> {
    let amount = if p.num > 0 {
        p.num
    } else {
        p.blockcount.saturating_mul(p.len)
    };
    (amount > 0).then_some(amount)
}

/// How long the server's UDP senders go on past the test's amount: the client ends the test
/// as soon as it has counted the amount, so a little more than the loss makes up; bounded,
/// so that a client that stopped (and sends nothing during a UDP `-R` test) is not sent to
/// until `--max-duration`: its test ends once nothing moves.
const PAST_AMOUNT: Duration = Duration::from_secs(10);

/// What the client asks of a data socket, set as `iperf3 -s` sets it (`-S`, `--fq-rate`,
/// `-N`, `-M`, `--dont-fragment`); what the kernel refuses is left as it was, as
/// wirebench's own socket options are.
fn set_options(s: &DataSocket, o: &SocketOptions, ipv6: bool) {
    let sock = match s {
        DataSocket::Tcp(t) => SockRef::from(t),
        DataSocket::Udp(u) => SockRef::from(u),
        DataSocket::User(_) | DataSocket::Quic(_) => return,
    };
    let tos = u32::try_from(o.tos).unwrap_or(0);
    if tos > 0 {
        let _ = if ipv6 {
            sock.set_tclass_v6(tos)
        } else {
            sock.set_tos(tos)
        };
    }
    if o.fq_rate_bps > 0 {
        let _ = crate::sys::set_max_pacing_rate(&*sock, o.fq_rate_bps / 8);
    }
    match s {
        DataSocket::Tcp(_) => {
            if o.nodelay {
                let _ = sock.set_nodelay(true);
            }
            if let Ok(mss) = u32::try_from(o.mss) {
                if mss > 0 {
                    let _ = sock.set_mss(mss);
                }
            }
        }
        DataSocket::Udp(_) if o.dont_fragment => {
            let _ = crate::sys::set_dont_fragment(&*sock, ipv6);
        }
        _ => {}
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

/// One iperf3 client's test, as the driver holds it between rounds: the session decides,
/// this carries it out on the sockets, threads and the server's shared state.
struct Test<'a> {
    state: &'a State,
    session: ServerSession,
    pump: Pump,
    cookie: [u8; COOKIE_LEN],
    peer: SocketAddr,
    local: IpAddr,
    port: u16,
    /// The log's prefix for this client.
    who: String,
    ticket: Option<Ticket>,
    admitted: Option<Admitted>,
    /// Where the registry sends the test's data streams as they come.
    rx: Option<Receiver<(u64, DataSocket)>>,
    socks: Vec<(u64, DataSocket)>,
    streams: Option<Streams>,
    congestion: Option<String>,
    /// The server limit that ended the test, for `--metrics`.
    limited: Option<ErrorKind>,
    /// A limit a stream met after the client's TEST_END (a `--bidir -n` test whose sender
    /// finished first): too late to end the test, still the log's outcome and counted.
    late_limit: Option<String>,
    /// The streams' bytes both ways at the last look: when they move, the client is alive.
    moved: u64,
    /// Whether the running test moves enough to keep its memory (`control::reclaim`).
    usage: Option<UseWindow>,
    /// The registry holds this test under its cookie (another test's entry is never ours
    /// to remove).
    registered: bool,
    /// UDP connect datagrams from the client's address past its streams (the registry
    /// counts them; a UDP test stays registered while it runs, so they are seen).
    udp_extra: Arc<std::sync::atomic::AtomicU32>,
}

/// Runs one iperf3 client's test on its control connection (cookie already read).
fn control(conn: TcpStream, cookie: [u8; COOKIE_LEN], state: &State, port: u16) {
    let Ok((peer, local)) = crate::net::ends(&conn) else {
        return;
    };
    let local = local.ip();
    // iperf3's protocol leaves the control connection silent while a test runs (and a UDP
    // `-R` client silent on every connection): TCP keepalives end the test of a client
    // whose host went away 30 s after its last sign of life, where no byte could.
    let keepalive = socket2::TcpKeepalive::new()
        .with_time(Duration::from_secs(10))
        .with_interval(Duration::from_secs(5))
        .with_retries(4);
    let _ = SockRef::from(&conn).set_tcp_keepalive(&keepalive);
    let mut session = ServerSession::new(Instant::now(), state.spec_limits());
    let Ok(pump) = Pump::new(conn) else {
        return;
    };
    session.handle_bytes(Instant::now(), &cookie);
    let mut test = Test {
        state,
        session,
        pump,
        cookie,
        peer,
        local,
        port,
        who: format!("client={peer} peer_tool=iperf3"),
        ticket: None,
        admitted: None,
        rx: None,
        socks: Vec::new(),
        streams: None,
        congestion: None,
        limited: None,
        late_limit: None,
        moved: 0,
        usage: None,
        registered: false,
        udp_extra: Arc::default(),
    };
    let outcome = test.serve();
    test.finish(&outcome);
}

impl Test<'_> {
    /// Rounds of the session until the test is over; returns how it ended, for the log.
    fn serve(&mut self) -> String {
        loop {
            while let Some(action) = self.session.poll_action() {
                if let Some(end) = self.on_action(action) {
                    return end;
                }
            }
            if self.session.is_over() {
                self.note_late_limit();
                return match self.late_limit.take() {
                    Some(text) => format!("error: {text}"),
                    None => "ended".into(),
                };
            }
            if let Err(e) = self.collect_streams() {
                return e;
            }
            if let Some(end) = self.ambiguous() {
                return end;
            }
            if let Some(end) = self.watch() {
                return end;
            }
            let tick = if self.streams.is_none() {
                SETUP_TICK
            } else {
                TICK
            };
            round(&mut self.pump, &mut self.session, tick);
        }
    }

    /// Carries out one of the session's actions; how the test ended, if it did.
    fn on_action(&mut self, action: ServerAction) -> Option<String> {
        let now = Instant::now();
        match action {
            ServerAction::Cookie(_) => return self.on_cookie(now),
            ServerAction::Params(a) => self.on_params(now, a),
            ServerAction::Refused(r) => {
                self.log_refused(&r.to_string());
                self.state.metrics.refused(r.kind());
                return Some("refused".into());
            }
            ServerAction::TimeUp(why) => return Some(self.stop(why.to_string(), why.limit())),
            ServerAction::TestEnd => {
                // The client counts no more: the senders stop at once (iperf3's server
                // sends until it reads TEST_END, whatever -n or -k said).
                if let Some(s) = self.streams.as_mut() {
                    s.mark_ended();
                    s.quit_senders();
                }
                self.session.exchange(now);
            }
            ServerAction::PeerResults(doc) => {
                let mut output = None;
                let ours = match self.streams.as_mut() {
                    Some(s) => {
                        s.finish_receivers(Some(&doc));
                        let ours = s.results_doc(Some(&doc), self.congestion.clone());
                        let as_json = self.state.cfg.iperf3_json;
                        output = s.output.take().map(|o| {
                            let json = o.finish(s, &ours, &doc);
                            if as_json {
                                (Some(json), None)
                            } else {
                                let text = super::output_text::text(&json, &s.senders, s.udp);
                                (None, Some(text))
                            }
                        });
                        ours
                    }
                    None => Default::default(),
                };
                self.send_results(&ours, output);
            }
            ServerAction::Done => return Some("done".into()),
            ServerAction::Failed(e) => return Some(e.to_string()),
        }
        None
    }

    /// Sends this side's results, with the server's output when the client asked for it and
    /// it fits in [`MAX_RESULTS_JSON`]; past that the output is left out (logged), as the
    /// results alone always fit (one entry per stream, at most `MAX_STREAMS`).
    fn send_results(
        &mut self,
        ours: &crate::iperf3::ResultsDoc,
        output: Option<(Option<serde_json::Value>, Option<String>)>,
    ) {
        let now = Instant::now();
        if let Some((json, text)) = output {
            let with = WithOutput {
                doc: ours,
                server_output_json: json,
                server_output_text: text,
            };
            match self.session.send_results(now, &with) {
                Ok(()) => return,
                Err(ResultsTooLarge { bytes }) => log(
                    self.state,
                    format_args!(
                        "{} event=server_output_left_out bytes={bytes} max_bytes={MAX_RESULTS_JSON}",
                        self.who
                    ),
                ),
            }
        }
        if let Err(ResultsTooLarge { bytes }) = self.session.send_results(now, ours) {
            // Cannot happen (see above); the client then hears the test ended, not silence.
            log(
                self.state,
                format_args!("{} event=results_too_large bytes={bytes}", self.who),
            );
            self.session.terminate();
        }
    }

    fn log_refused(&self, why: &str) {
        log_refused(
            self.state,
            self.peer.ip(),
            format_args!("{} event=refused reason={}", self.who, q(why)),
        );
    }

    /// Issue 44: spoofed connect datagrams from the client's address took an iperf3 UDP
    /// test's streams, and the real client hung. More connect datagrams than streams make
    /// the streams ambiguous: the test ends with SERVER_ERROR ("unable to create a new
    /// test: Address already in use"), which the client prints and exits on.
    fn ambiguous(&mut self) -> Option<String> {
        let extra = self.udp_extra.load(Ordering::Relaxed);
        if extra == 0 {
            return None;
        }
        let streams = self.admitted.as_ref().map_or(0, Admitted::streams);
        let why = format!(
            "{extra} more UDP connect datagrams from {} than its {streams} streams: which are the client's is ambiguous (another host may send from its address)",
            self.peer.ip()
        );
        self.log_refused(&why);
        self.state.metrics.refused("ambiguous_streams");
        self.session.refuse(ie::NEW_TEST, libc::EADDRINUSE);
        self.pump.flush(&mut self.session);
        if let Some(s) = self.streams.as_mut() {
            s.stop_all();
        }
        Some(format!("error: {why}"))
    }

    /// Takes the test out of the registry, if it is there under its cookie.
    fn unregister(&mut self) {
        if std::mem::take(&mut self.registered) {
            self.state.iperf3.remove(&self.cookie);
        }
    }

    /// A test with the same cookie waits for its streams: this one is refused, and the
    /// first keeps its streams (a client reusing a cookie, or a peer that saw it).
    fn cookie_in_use(&mut self) {
        self.log_refused("another test already uses this cookie");
        self.state.metrics.refused("cookie_in_use");
        self.session.refuse(ie::NEW_TEST, libc::EEXIST);
    }

    /// The cookie came: the key rules and the server's slots decide.
    fn on_cookie(&mut self, now: Instant) -> Option<String> {
        let (state, metrics) = (self.state, &self.state.metrics);
        if state.iperf3.has(&self.cookie) {
            self.cookie_in_use();
            return Some("refused: cookie in use".into());
        }
        if state.cfg.psk.is_some() && !state.cfg.allow_iperf3 {
            self.log_refused("the server requires a pre-shared key, which iperf3 cannot prove; serve --allow-iperf3 admits iperf3 clients");
            metrics.refused("auth_expected");
            // iperf3's words for it: "test authorization failed".
            self.session.refuse(ie::AUTH_TEST, 0);
            return Some("refused".into());
        }
        if state.shutdown.load(Ordering::Relaxed) {
            metrics.refused("shutting_down");
            self.session.deny();
            return Some("refused: shutting down".into());
        }
        match state.admission().admit(now, self.peer.ip()) {
            Ok(t) => self.ticket = Some(t),
            Err(r) => {
                self.log_refused(&r.to_string());
                metrics.refused(r.kind());
                self.session.deny();
                return Some("refused".into());
            }
        }
        self.session.welcome(now);
        None
    }

    /// Parameters within the server's limits: the registry waits for the test's streams.
    fn on_params(&mut self, now: Instant, a: Admitted) {
        let n = a.streams();
        let p = a.params();
        // What the streams will hold, against the server's memory budget, before any of it
        // is allocated.
        let memory = iperf3_test_memory(
            u64::from(n),
            a.block_len() as u64,
            p.window,
            self.state.socket_caps,
        );
        if let Some(ticket) = self.ticket.as_mut() {
            if let Err(r) = self.state.admission().hold(ticket, memory) {
                return self.session.refuse_for(r, p.udp);
            }
        }
        let (tx, r) = sync_channel(n as usize);
        let registered = self.state.iperf3.add(
            self.cookie,
            Waiting {
                peer: self.peer.ip(),
                local: self.local,
                port: self.port,
                udp: p.udp,
                udp_left: if p.udp { n } else { 0 },
                udp_extra: Arc::clone(&self.udp_extra),
                udp_taken: Vec::with_capacity(if p.udp { n as usize } else { 0 }),
                udp_resent: 0,
                tx,
            },
        );
        if !registered {
            return self.cookie_in_use();
        }
        self.registered = true;
        self.rx = Some(r);
        log(self.state, format_args!(
            "{} event=start protocol={} streams={} reverse={} bidir={} len={} time_s={} bytes={} rate_bps={}",
            self.who,
            if p.udp { "udp" } else { "tcp" },
            p.parallel, p.reverse, p.bidirectional, p.len, p.time, p.num, p.bandwidth
        ));
        self.admitted = Some(a);
        self.session.accept(now);
    }

    /// Takes the streams that arrived; once all are there, starts them and the test runs.
    fn collect_streams(&mut self) -> Result<(), String> {
        let (Some(r), Some(a), None) = (&self.rx, &self.admitted, &self.streams) else {
            return Ok(());
        };
        let p = a.params();
        while let Ok((order, s)) = r.try_recv() {
            if let DataSocket::Tcp(t) = &s {
                set_window(SockRef::from(t), p.window);
                if let Some(cc) = &p.congestion {
                    let _ = SockRef::from(t).set_tcp_congestion(cc.as_bytes());
                }
                self.congestion = self.congestion.take().or_else(|| congestion_of(t));
            } else if let DataSocket::Udp(u) = &s {
                set_udp_window(SockRef::from(u), p.window);
            }
            set_options(&s, a.options(), self.peer.is_ipv6());
            self.socks.push((order, s));
        }
        let senders = server_sends(a);
        if self.socks.len() < senders.len() {
            return Ok(());
        }
        self.socks.sort_by_key(|(order, _)| *order);
        let socks: Vec<DataSocket> = std::mem::take(&mut self.socks)
            .into_iter()
            .map(|(_, s)| s)
            .collect();
        let output = p.get_server_output.then(|| {
            let ends: Vec<_> = socks.iter().filter_map(addresses).collect();
            output::start_section(&ends, self.peer, p, a.options().tos)
        });
        // A TCP test's entry goes (a connection with its cookie is no stream of it now); a
        // UDP test's stays until it ends, so that more connect datagrams are seen.
        if !p.udp && std::mem::take(&mut self.registered) {
            self.state.iperf3.remove(&self.cookie);
        }
        let limits = TestLimits {
            max_bytes: self.state.cfg.max_bytes,
            max_rate_bps: self.state.cfg.max_rate_bps,
        };
        let (max_pps, streams) = (self.state.cfg.budget.max_pps, senders.len() as u32);
        // TEST_START and TEST_RUNNING go out before the first byte: an iperf3 client counts
        // only once it has read TEST_RUNNING (a UDP datagram before it would count as lost).
        // The session holds the test's deadlines from here: its length and the client's
        // silence.
        self.session.run(Instant::now());
        self.pump.flush(&mut self.session);
        let plan = Plan {
            sender: true,
            len: a.block_len(),
            rate_bps: p.bandwidth,
            burst: u32::try_from(a.options().burst).unwrap_or(1),
            wide: p.udp_counters_64bit,
            budget: budget(sender_budget(p)),
            start: Instant::now(),
            epoch_unix_ns: crate::sys::unix_now_ns(),
            // The senders run until the client's TEST_END (or a bound of the session's).
            stop_at_ns: u64::MAX,
            past_budget_ns: if p.udp {
                PAST_AMOUNT.as_nanos() as u64
            } else {
                0
            },
            limit: (limits != TestLimits::default() || max_pps.is_some())
                .then(|| MoveLimit::share(limits, streams, p.len).with_packets(max_pps, streams)),
        };
        let mut streams = Streams::start(socks, senders, &plan, Duration::from_secs(1), None)
            .map_err(|e| e.to_string())?;
        streams.omit(Duration::from_secs(p.omit));
        if let Some(start) = output {
            streams.output = Some(output::ServerOutput::new(start, streams.senders.len()));
        }
        self.streams = Some(streams);
        self.usage = Some(UseWindow::new(Instant::now(), a.streams()));
        self.state.metrics.tests_started.inc();
        Ok(())
    }

    /// Looks at the running streams: their moving bytes tell the session the client is
    /// alive; a stream over a server limit, or the server's shutdown, ends the test.
    fn watch(&mut self) -> Option<String> {
        let s = self.streams.as_mut()?;
        s.watch(&mut Quiet, false);
        let moved = s.total(true).wrapping_add(s.total(false));
        if moved != self.moved {
            self.moved = moved;
            self.session.handle_activity(Instant::now());
        }
        // From the start of the streams to TEST_END: the server's limits end the test.
        if !self.session.is_running() {
            self.note_late_limit();
            return None;
        }
        if self.reclaimed(moved) {
            let text = "it sat idle and another test needed the memory it held (--max-memory)";
            return Some(self.stop(text.into(), Some(ErrorKind::MaxMemory)));
        }
        let s = self.streams.as_ref()?;
        if s.limited() {
            // The client hears why in iperf3's words (a rate over the limit has its own
            // code), the log in ours.
            let (limit, text) = match s.limit_error() {
                Some((kind, text)) => (Some(kind), text),
                None => (None, "a server limit".into()),
            };
            return Some(self.stop(text, limit));
        }
        if self.state.shutdown.load(Ordering::Relaxed) {
            return Some(self.stop("shutting down".into(), None));
        }
        None
    }

    /// Tells admission when the test turns idle or busy (its blocks moved both ways,
    /// `moved` bytes in all); whether its memory went to a test that waited for it
    /// (`control::reclaim`).
    fn reclaimed(&mut self, moved: u64) -> bool {
        let (Some(w), Some(ticket), Some(a)) = (&mut self.usage, &self.ticket, &self.admitted)
        else {
            return false;
        };
        let blocks = moved / (a.block_len().max(1) as u64);
        if let Some(idle) = w.observe(Instant::now(), blocks) {
            self.state.admission().set_idle(ticket, idle);
            if idle {
                let reserved = ticket.memory();
                log(
                    self.state,
                    format_args!("{} event=idle reserved_bytes={reserved}", self.who),
                );
            }
        }
        if !ticket.reclaimed() {
            return false;
        }
        let reserved = ticket.memory();
        self.usage = None;
        log(
            self.state,
            format_args!("{} event=reclaimed reserved_bytes={reserved}", self.who),
        );
        true
    }

    /// A limit a stream met once the test was no longer running: counted and logged, as
    /// the client can no longer be told.
    fn note_late_limit(&mut self) {
        let Some(s) = self.streams.as_ref() else {
            return;
        };
        if self.limited.is_none() && s.limited() {
            if let Some((kind, text)) = s.limit_error() {
                self.limited = Some(kind);
                self.late_limit = Some(text);
            }
        }
    }

    /// The server ends the running test: tells the client, waits a moment for it to go,
    /// and stops the streams. Returns the log's outcome.
    fn stop(&mut self, text: String, limit: Option<ErrorKind>) -> String {
        self.limited = limit;
        if limit == Some(ErrorKind::MaxRate) {
            self.session.refuse(ie::TOTAL_RATE, 0);
        } else {
            self.session.terminate();
        }
        // The client hears it before its data connections close: a limited stream holds
        // its socket open, the others run on, until it has read and gone.
        self.pump.flush(&mut self.session);
        wait_closed(self.pump.stream(), CLOSE_WAIT);
        if let Some(s) = self.streams.as_mut() {
            s.stop_all();
        }
        format!("error: {text}")
    }

    /// The counters and the log, the slot given back, and the session's last words out.
    fn finish(mut self, outcome: &str) {
        // The counters and the log first: an operator who scrapes once the client has its
        // answer sees them moved.
        let state = self.state;
        self.unregister();
        if let Some(limit) = self.limited {
            state.metrics.limited(limit);
        }
        if let Some(s) = self.streams.as_ref() {
            let sent = s.total(true);
            let received = s.total(false);
            state.metrics.bytes_sent.inc_by(sent);
            state.metrics.bytes_received.inc_by(received);
            log(
                state,
                format_args!(
                    "{} event=test sent_bytes={sent} received_bytes={received} result={}",
                    self.who,
                    q(outcome)
                ),
            );
        } else if outcome != "refused" {
            log(
                state,
                format_args!("{} event=test result={}", self.who, q(outcome)),
            );
        }
        // The slot is free before the client hears the end, so that its next test finds it
        // free (the streams have stopped by now, except after a failure, where this waits).
        drop(self.streams.take());
        if let Some(t) = self.ticket.take() {
            state.release(t);
        }
        // What waits to be written (ACCESS_DENIED, SERVER_ERROR, DISPLAY_RESULTS) goes out.
        self.pump.flush(&mut self.session);
    }
}
