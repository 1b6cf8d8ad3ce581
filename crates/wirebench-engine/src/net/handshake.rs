//! The pending stage on one thread: every connection the server accepts is read, answered
//! and timed out here, on one `mio` poll loop, until its first frame says what it is and
//! (with a key) it has proven the key. Only then does it cost a thread: a test to admit
//! gets one for its life ([`super::conn::admitted`]), a data connection goes to its test,
//! an iperf3 client to its handler. Silent, trickling and unauthenticated connections cost
//! a descriptor and a few hundred bytes each, never a thread, and the stage holds at most
//! [`crate::control::admission`]'s caps of them: when it is full the oldest is closed
//! (its own address's first), so one address cannot lock others out.
//!
//! The sessions are the same sans-IO [`ServerSession`]s a thread would drive; the loop only
//! reads (never past [`ServerSession::read_limit`]: a data connection's data follows its
//! `attach`), writes without blocking, and hands each session its deadlines.

use std::collections::HashMap;
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Registry, Token};

use super::conn::{admitted, new_session, not_started};
use super::shared::{attach, log_refused, q, State};
use crate::control::admission::PendingId;
use crate::control::server::{ServerAction, ServerEvent, ServerSession};
use crate::control::Session;
use crate::iperf3::codec::COOKIE_LEN;
use crate::EngineError;

/// The listening socket's token; connections use their pending id.
const LISTENER: Token = Token(usize::MAX);
/// `--iperf3-port`'s listener: its connections can only be iperf3 clients.
const IPERF3_LISTENER: Token = Token(usize::MAX - 1);

/// The longest the loop sleeps with nothing due (a safety net: every deadline is a
/// session's, and the loop wakes for it).
const IDLE_WAKE: Duration = Duration::from_secs(1);

/// How soon to retry `accept` after it failed for want of descriptors or memory: the
/// backlog keeps what waits, and the listener may not signal again until a new connection.
const ACCEPT_RETRY: Duration = Duration::from_millis(10);

/// One connection in the pending stage.
struct Handshake {
    sock: TcpStream,
    peer: SocketAddr,
    session: ServerSession,
    /// Its first frame was a `start`.
    identified: bool,
    /// The client's host identity, from its `start`.
    client_host: String,
    /// No byte looked at yet: the first may be an iperf3 cookie's.
    fresh: bool,
    /// Its first byte was an iperf3 cookie's: waiting for the rest of the cookie.
    iperf3: bool,
    /// Closed or broken: no more reads or writes.
    gone: bool,
    /// When it was accepted: the one handshake deadline counts from here.
    accepted: Instant,
    /// The port it came to (the main one, or `--iperf3-port`).
    port: u16,
    /// Registered for writability too (output waits).
    wants_write: bool,
}

/// Where a handshake goes after a step.
enum Next {
    /// Still pending.
    Keep,
    /// The session is over (refused, malformed, timed out, or the peer left).
    Closed,
    /// A data connection of a running test.
    Attach { cookie: u64, stream: u32 },
    /// A test to admit.
    Admit,
    /// An iperf3 client.
    Iperf3,
}

/// Accepts on `listener` (and on `iperf3`, `--iperf3-port`'s listener, when given) and runs
/// every connection's handshake, for ever.
pub(super) fn serve(
    listener: TcpListener,
    iperf3: Option<TcpListener>,
    state: &Arc<State>,
) -> Result<(), EngineError> {
    let io = |what: &'static str| move |e| EngineError::io(what, e);
    listener
        .set_nonblocking(true)
        .map_err(io("making the listening socket non-blocking"))?;
    let mut poll = Poll::new().map_err(io("creating the handshake poll"))?;
    poll.registry()
        .register(
            &mut SourceFd(&listener.as_raw_fd()),
            LISTENER,
            Interest::READABLE,
        )
        .map_err(io("watching the listening socket"))?;
    if let Some(l) = &iperf3 {
        l.set_nonblocking(true)
            .map_err(io("making the iperf3 listening socket non-blocking"))?;
        poll.registry()
            .register(
                &mut SourceFd(&l.as_raw_fd()),
                IPERF3_LISTENER,
                Interest::READABLE,
            )
            .map_err(io("watching the iperf3 listening socket"))?;
    }
    let mut events = Events::with_capacity(256);
    let mut open: HashMap<PendingId, Handshake> = HashMap::new();
    let mut buf = vec![0u8; 16 * 1024];
    let mut retry_accept = false;
    loop {
        let now = Instant::now();
        let mut wait = open
            .values()
            .filter_map(|h| h.session.poll_timeout())
            .min()
            .map_or(IDLE_WAKE, |t| {
                t.saturating_duration_since(now).min(IDLE_WAKE)
            });
        if retry_accept {
            wait = wait.min(ACCEPT_RETRY);
        }
        if let Err(e) = poll.poll(&mut events, Some(wait)) {
            if e.kind() == ErrorKind::Interrupted {
                continue;
            }
            return Err(EngineError::io("waiting for connections", e));
        }
        let mut accept = retry_accept;
        let mut accept_iperf3 = retry_accept && iperf3.is_some();
        for ev in &events {
            if ev.token() == LISTENER {
                accept = true;
            } else if ev.token() == IPERF3_LISTENER {
                accept_iperf3 = true;
            } else {
                let id = ev.token().0 as PendingId;
                step(poll.registry(), &mut open, id, &mut buf, state);
            }
        }
        let mut retry = false;
        if accept {
            retry |= accept_all(
                &listener,
                false,
                poll.registry(),
                &mut open,
                &mut buf,
                state,
            );
        }
        if let (true, Some(l)) = (accept_iperf3, &iperf3) {
            retry |= accept_all(l, true, poll.registry(), &mut open, &mut buf, state);
        }
        if accept || accept_iperf3 {
            retry_accept = retry;
        }
        let now = Instant::now();
        let due: Vec<PendingId> = open
            .iter()
            .filter(|(_, h)| h.session.poll_timeout().is_some_and(|t| now >= t))
            .map(|(id, _)| *id)
            .collect();
        for id in due {
            if let Some(h) = open.get_mut(&id) {
                h.session.handle_timeout(now);
            }
            step(poll.registry(), &mut open, id, &mut buf, state);
        }
    }
}

/// Accepts every connection that waits; each enters the pending stage, pushing out the
/// oldest one when the stage is full. Returns whether `accept` failed in a way worth
/// retrying soon (out of descriptors or memory). `iperf3_only`: the listener is
/// `--iperf3-port`'s.
fn accept_all(
    listener: &TcpListener,
    iperf3_only: bool,
    registry: &Registry,
    open: &mut HashMap<PendingId, Handshake>,
    buf: &mut [u8],
    state: &Arc<State>,
) -> bool {
    loop {
        let (sock, peer) = match listener.accept() {
            Ok(c) => c,
            Err(e) if e.kind() == ErrorKind::WouldBlock => return false,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            // A connection reset before accept: the next one may be fine.
            Err(e) if e.kind() == ErrorKind::ConnectionAborted => continue,
            // Out of descriptors or memory: what waits stays in the backlog; try again
            // shortly (silent connections age out meanwhile).
            Err(_) => return true,
        };
        let peer = super::canonical(peer);
        let accepted = Instant::now();
        let port = listener.local_addr().map_or(state.port, |a| a.port());
        let Some(session) = new_session(state) else {
            continue;
        };
        if sock.set_nonblocking(true).is_err() {
            continue;
        }
        let (id, evict) = state.admission().pending_open(peer.ip());
        if let Some(old) = evict.and_then(|old| open.remove(&old)) {
            // Its place in the stage is already given to the new one: close it.
            let _ = registry.deregister(&mut SourceFd(&old.sock.as_raw_fd()));
            drop(old);
        }
        let token = Token(id as usize);
        if registry
            .register(&mut SourceFd(&sock.as_raw_fd()), token, Interest::READABLE)
            .is_err()
        {
            state.leave_pending(id);
            continue;
        }
        let _ = sock.set_nodelay(true);
        open.insert(
            id,
            Handshake {
                sock,
                peer,
                session,
                identified: false,
                client_host: String::new(),
                fresh: !iperf3_only,
                iperf3: iperf3_only,
                gone: false,
                wants_write: false,
                accepted,
                port,
            },
        );
        // Bytes may already wait (they came with the connection): an edge-triggered
        // poll would not report them again.
        step(registry, open, id, buf, state);
    }
}

/// Drives connection `id` as far as it goes without blocking, then keeps it pending or
/// hands it on.
fn step(
    registry: &Registry,
    open: &mut HashMap<PendingId, Handshake>,
    id: PendingId,
    buf: &mut [u8],
    state: &Arc<State>,
) {
    let Some(mut h) = open.remove(&id) else {
        return;
    };
    let next = drive(&mut h, buf, state);
    if let Next::Keep = next {
        let wants_write = !h.gone && h.session.poll_transmit().is_some();
        if wants_write != h.wants_write {
            let interest = if wants_write {
                Interest::READABLE | Interest::WRITABLE
            } else {
                Interest::READABLE
            };
            let _ = registry.reregister(
                &mut SourceFd(&h.sock.as_raw_fd()),
                Token(id as usize),
                interest,
            );
            h.wants_write = wants_write;
        }
        open.insert(id, h);
        return;
    }
    let _ = registry.deregister(&mut SourceFd(&h.sock.as_raw_fd()));
    // Whoever takes the connection on blocks on it (with timeouts of its own).
    let _ = h.sock.set_nonblocking(false);
    match next {
        Next::Keep => {}
        Next::Closed => {
            state.leave_pending(id);
            let outcome = h.session.outcome().unwrap_or_default();
            not_started(state, h.peer, outcome, h.identified);
        }
        Next::Attach { cookie, stream } => {
            state.leave_pending(id);
            if let Err(e) = attach(h.sock, state, cookie, stream) {
                log_refused(
                    state,
                    h.peer.ip(),
                    format_args!("client={} event=attach_refused reason={}", h.peer, q(e)),
                );
            }
        }
        Next::Admit => {
            let st = Arc::clone(state);
            let (sock, session, host) = (h.sock, h.session, h.client_host);
            let spawned = thread::Builder::new()
                .name("wirebench-conn".into())
                .spawn(move || admitted(sock, session, id, host, &st));
            if spawned.is_err() {
                // The connection was dropped with the closure; give its place back.
                state.leave_pending(id);
            }
        }
        Next::Iperf3 => {
            // Its whole cookie is here: the handler reads it at once and leaves the stage.
            let st = Arc::clone(state);
            let (sock, port, accepted) = (h.sock, h.port, h.accepted);
            let spawned = thread::Builder::new()
                .name("wirebench-iperf3".into())
                .spawn(move || {
                    super::iperf3::server::handle(sock, &st, port, Some(id), accepted);
                });
            if spawned.is_err() {
                state.leave_pending(id);
            }
        }
    }
}

/// Writes what waits, carries out the session's actions, reads what arrived; again, until
/// the connection would block or the session is done here.
fn drive(h: &mut Handshake, buf: &mut [u8], state: &State) -> Next {
    loop {
        while !h.gone {
            let Some(out) = h.session.poll_transmit() else {
                break;
            };
            match h.sock.write(out) {
                Ok(n) if n > 0 => h.session.handle_written(Instant::now(), n),
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Ok(_) | Err(_) => close(h),
            }
        }
        while let Some(action) = h.session.poll_action() {
            match action {
                ServerAction::Identified { host_id, .. } => {
                    // Still pending: a connection leaves the stage (and its caps) only
                    // once it has proven its key, at Admit.
                    h.identified = true;
                    h.client_host = host_id;
                    // An address that sent too many wrong keys waits before the next is
                    // looked at: guessing costs it time, not the server's log or CPU.
                    if state.cfg.psk.is_some() {
                        let now = Instant::now();
                        if let Err(r) = state.admission().key_wait(now, h.peer.ip()) {
                            h.session.handle_event(now, ServerEvent::Refused(r));
                        }
                    }
                }
                ServerAction::Admit if state.cfg.psk.is_some() => {
                    state.admission().key_proven(h.peer.ip());
                    return Next::Admit;
                }
                ServerAction::Attach { cookie, stream } => return Next::Attach { cookie, stream },
                ServerAction::Admit => return Next::Admit,
                // Only a running test asks for these.
                ServerAction::StreamsReady | ServerAction::StartRoles | ServerAction::Run(_) => {}
            }
        }
        if h.session.is_closed() {
            return Next::Closed;
        }
        let limit = h.session.read_limit().min(buf.len());
        if h.gone || limit == 0 {
            return Next::Keep;
        }
        if h.fresh || h.iperf3 {
            // An iperf3 client's first byte is its cookie's; a wirebench client's is 0. An
            // iperf3 client stays here until its whole cookie came: a thread only for a
            // connection that has said all it must (one byte then silence costs none).
            match h.sock.peek(&mut buf[..COOKIE_LEN]) {
                Ok(n) if n > 0 => {
                    if h.fresh {
                        h.fresh = false;
                        h.iperf3 = crate::iperf3::codec::is_cookie_start(buf[0]);
                    }
                    if h.iperf3 {
                        return if n >= COOKIE_LEN {
                            Next::Iperf3
                        } else {
                            Next::Keep
                        };
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Next::Keep,
                // The end, or an error: the read below tells the session.
                _ => h.fresh = false,
            }
        }
        match h.sock.read(&mut buf[..limit]) {
            Ok(0) => close(h),
            Ok(n) => h.session.handle_bytes(Instant::now(), &buf[..n]),
            Err(e) if e.kind() == ErrorKind::WouldBlock => return Next::Keep,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(_) => close(h),
        }
    }
}

/// The peer closed or the connection broke: the session hears it, and what it still meant
/// to write is dropped.
fn close(h: &mut Handshake) {
    h.gone = true;
    h.session.handle_closed(Instant::now());
    if let Some(out) = h.session.poll_transmit() {
        let n = out.len();
        h.session.handle_written(Instant::now(), n);
    }
}
