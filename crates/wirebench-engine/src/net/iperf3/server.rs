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
use super::{budget, congestion_of, round, set_window, Streams};
use crate::iperf3::codec::{
    check_cookie, connect_bytes, is_connect, is_cookie_start, COOKIE_LEN, UDP_CONNECT_REPLY,
};
use crate::iperf3::server::{ServerAction, ServerSession};
use crate::iperf3::{Params, STEP_TIMEOUT};
use crate::net::roles::Quiet;
use crate::net::state::{log, q, State};
use crate::net::{Pump, SETUP_TICK, TICK};
use crate::role::iperf3::Plan;
use crate::role::DataSocket;
use crate::EngineError;

/// iperf3's error code for a test the server cannot run as asked (`IEINITTEST`).
const IE_INIT_TEST: i32 = 100;

/// How long past the server's longest test an iperf3 client may take to end it.
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
            && w.tx.try_send(DataSocket::Udp(sock)).is_ok()
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

/// Whether a connection's first byte says it is an iperf3 client's (a cookie), looking
/// without taking it; waits at most the set-up time.
pub(crate) fn is_iperf3(conn: &TcpStream) -> bool {
    let mut b = [0u8; 1];
    let _ = conn.set_read_timeout(Some(STEP_TIMEOUT));
    let seen = matches!(conn.peek(&mut b), Ok(1)) && is_cookie_start(b[0]);
    let _ = conn.set_read_timeout(None);
    seen
}

/// Serves a connection that starts with an iperf3 cookie: a data stream of a waiting test,
/// or a new test's control connection.
pub(crate) fn handle(mut conn: TcpStream, state: &State, port: u16) {
    let mut cookie = [0u8; COOKIE_LEN];
    let _ = conn.set_read_timeout(Some(STEP_TIMEOUT));
    if conn.read_exact(&mut cookie).is_err() || check_cookie(&cookie).is_err() {
        return;
    }
    let _ = conn.set_read_timeout(None);
    if let Some(conn) = state.iperf3.attach(&cookie, conn) {
        control(conn, cookie, state, port);
    }
}

/// Binds `--iperf3-port` (TCP and UDP) and serves iperf3 clients there on threads of their
/// own.
pub(crate) fn spawn_port(state: &Arc<State>, port: u16) -> Result<(), EngineError> {
    let addr = SocketAddr::new(state.cfg.bind.ip(), port);
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
    let st = Arc::clone(state);
    std::thread::Builder::new()
        .name("wirebench-iperf3-accept".into())
        .spawn(move || {
            for conn in tcp.incoming().flatten() {
                let st = Arc::clone(&st);
                let _ = std::thread::Builder::new()
                    .name("wirebench-iperf3-conn".into())
                    .spawn(move || handle(conn, &st, port));
            }
        })
        .map_err(|e| EngineError::io("starting the iperf3 accept thread", e))?;
    Ok(())
}

/// Checks an iperf3 client's parameters against the server's limits; the refusal in words.
fn check_limits(p: &Params, state: &State) -> Result<(), String> {
    let cfg = &state.cfg;
    let streams = p.parallel.max(1) * if p.bidirectional { 2 } else { 1 };
    if p.omit > 0 {
        return Err("--omit is not supported by this server".into());
    }
    if p.blockcount > 0 {
        return Err("-k (blocks) is not supported by this server".into());
    }
    if p.len == 0 || (p.udp && p.len < 12) {
        return Err(format!("block size {} is too small", p.len));
    }
    if let Some(max) = cfg.max_streams {
        if streams > max {
            return Err(format!("{streams} streams is over this server's {max}"));
        }
    }
    if let Some(max) = cfg.max_size {
        if p.len > max {
            return Err(format!("block size {} is over this server's {max}", p.len));
        }
    }
    if let Some(max) = cfg.max_duration {
        if p.num == 0 && Duration::from_secs(p.time) > max {
            return Err(format!(
                "{} s is over this server's {} s",
                p.time,
                max.as_secs()
            ));
        }
    }
    if let Some(max) = cfg.max_rate_bps {
        let rate = p.bandwidth.saturating_mul(u64::from(streams));
        if p.bandwidth == 0 || rate > max {
            return Err(format!(
                "the rate must be set and at most {max} bit/s in all"
            ));
        }
    }
    if let Some(max) = cfg.max_bytes {
        let bytes = if p.num > 0 {
            p.num
        } else {
            (p.bandwidth / 8)
                .saturating_mul(p.time)
                .saturating_mul(u64::from(streams))
        };
        if bytes == 0 || bytes > max {
            return Err(format!(
                "the test must move at most {max} bytes (-n, or -b and -t)"
            ));
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
    let mut ticket = None;
    let mut params: Option<Params> = None;
    let mut rx: Option<Receiver<DataSocket>> = None;
    let mut socks: Vec<DataSocket> = Vec::new();
    let mut streams: Option<Streams> = None;
    let mut congestion = None;
    let outcome: String = 'session: loop {
        while let Some(action) = session.poll_action() {
            let now = Instant::now();
            match action {
                ServerAction::Cookie(_) => {
                    if state.cfg.psk.is_some() && !state.cfg.allow_iperf3 {
                        log(state, format_args!(
                            "{who} event=refused reason=\"the server requires a pre-shared key, which iperf3 cannot prove; serve --allow-iperf3 admits iperf3 clients\""
                        ));
                        session.deny();
                        break 'session "refused".into();
                    }
                    if state.shutdown.load(std::sync::atomic::Ordering::Relaxed) {
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
                            session.deny();
                            break 'session "refused".into();
                        }
                    }
                    session.welcome(now);
                }
                ServerAction::Params(p) => {
                    if let Err(why) = check_limits(&p, state) {
                        log(
                            state,
                            format_args!("{who} event=refused reason={}", q(&why)),
                        );
                        session.refuse(IE_INIT_TEST);
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
            while let Ok(s) = r.try_recv() {
                if let DataSocket::Tcp(t) = &s {
                    set_window(SockRef::from(t), p.window);
                    if let Some(cc) = &p.congestion {
                        let _ = SockRef::from(t).set_tcp_congestion(cc.as_bytes());
                    }
                    congestion = congestion.or_else(|| congestion_of(t));
                } else if let DataSocket::Udp(u) = &s {
                    set_window(SockRef::from(u), p.window);
                }
                socks.push(s);
            }
            let senders = server_sends(p);
            if socks.len() == senders.len() {
                state.iperf3.remove(&cookie);
                let plan = Plan {
                    sender: true,
                    len: p.len as usize,
                    rate_bps: p.bandwidth,
                    wide: p.udp_counters_64bit,
                    budget: budget((p.num > 0).then_some(p.num)),
                    start: Instant::now(),
                    epoch_unix_ns: crate::sys::unix_now_ns(),
                    stop_at_ns: sender_stop_ns(p),
                };
                match Streams::start(
                    std::mem::take(&mut socks),
                    senders,
                    &plan,
                    Duration::from_secs(1),
                ) {
                    Ok(s) => streams = Some(s),
                    Err(e) => break e.to_string(),
                }
                let limit = state.cfg.max_duration.map(|d| d + END_GRACE);
                session.run(Instant::now(), limit);
            }
        }
        if let Some(s) = streams.as_mut() {
            s.watch(&mut Quiet, false);
        }
        let tick = if streams.is_none() { SETUP_TICK } else { TICK };
        round(&mut pump, &mut session, tick);
    };
    // What waits to be written (ACCESS_DENIED, SERVER_ERROR, DISPLAY_RESULTS) goes out.
    pump.flush(&mut session);
    state.iperf3.remove(&cookie);
    if let Some(s) = streams.as_ref() {
        let sent = s.total(true);
        let received = s.total(false);
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
    drop(streams);
    if let Some(t) = ticket {
        state.release(t);
    }
}
