//! The server's QUIC side, on the port's UDP socket: a client's first Initial comes to the
//! hello socket; the server opens a socket beside it connected to the client, and that
//! connection's own thread does the handshake ([`crate::quic::conn::accept`]). Then each
//! stream the client opens says what it is with its first frame, as a TCP connection does:
//! a `start` (the test's control dialogue, admitted as any other), or an `attach` (one of a
//! test's data streams, handed to it).
//!
//! Bounds: at most [`MAX_HANDSHAKES`] connections between their first Initial and their
//! first stream's first frame, [`MAX_HANDSHAKES_PER_ADDR`] of them per address (an Initial
//! beyond is dropped unanswered); each has the set-up time for the handshake and again for
//! that frame. A connection whose first stream is neither a test nor a stream of one is
//! closed. A connection takes streams only while its test sets up: none later than
//! [`SETUP_TIMEOUT`] after its first stream's first frame.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use wirebench_proto::control::CRR_STREAM;
use wirebench_proto::spec::Protocol;

use super::conn::{new_bound_session, not_started, run_admitted};
use super::shared::{log_refused, q, State};
use super::{Pump, SETUP_TICK};
use crate::control::server::{ServerAction, ServerEvent};
use crate::control::SETUP_TIMEOUT;
use crate::quic::{QuicConn, QuicStream};
use crate::role::DataSocket;

/// What a QUIC port serves: its port, its ALPN, and what takes a connection once its
/// handshake is done (wirebench's tests here; the perf protocol's clients on a port of their
/// own, `serve --quic-perf-port`).
#[derive(Clone, Copy)]
pub(super) struct Serves {
    pub(super) port: u16,
    pub(super) alpn: &'static [u8],
    pub(super) then: fn(&Arc<QuicConn>, &Arc<State>, &mut Place<'_>),
}

impl Serves {
    /// wirebench's tests, on the server's port.
    pub(super) fn tests(state: &State) -> Self {
        Self {
            port: state.port,
            alpn: crate::quic::ALPN,
            then: streams,
        }
    }
}

/// Its place among the handshakes, given back however the thread ends.
pub(super) struct Place<'a> {
    state: &'a State,
    src: SocketAddr,
    held: bool,
}

impl Place<'_> {
    pub(super) fn leave(&mut self) {
        if std::mem::take(&mut self.held) {
            if let Ok(mut h) = self.state.quic_handshakes.lock() {
                h.leave(self.src);
            }
        }
    }
}

impl Drop for Place<'_> {
    fn drop(&mut self) {
        self.leave();
    }
}

/// A datagram `d` from `src` came to the port's hello socket and is a QUIC Initial: unless
/// the server has no QUIC side or is at its caps, a connection's thread takes it.
pub(super) fn initial(state: &Arc<State>, d: &[u8], src: SocketAddr, serves: Serves) {
    let Some(identity) = state.cfg.quic.clone() else {
        return;
    };
    let arrived = Instant::now();
    let inbox = match state.quic_handshakes.lock() {
        // A repeated Initial of a connection being made: it goes to that connection.
        Ok(mut h) => match h.inbox(src) {
            Some(inbox) => return inbox.push(d),
            None => h.enter(src),
        },
        Err(_) => None,
    };
    let Some(inbox) = inbox else { return };
    inbox.push(d);
    // The server's bind address (a wildcard answers from the route's source address).
    let sock =
        super::listen::reuse_port_udp(SocketAddr::new(state.cfg.bind.ip(), serves.port), false)
            .and_then(|s| s.connect(&src.into()).map(|()| s));
    if let Ok(s) = &sock {
        crate::quic::conn::socket_buffers(&socket2::SockRef::from(s));
    }
    let st = Arc::clone(state);
    let spawned = match sock {
        Ok(sock) => std::thread::Builder::new()
            .name("wirebench-quic-accept".into())
            .spawn(move || {
                let mut place = Place {
                    state: &st,
                    src,
                    held: true,
                };
                let alpn = serves.alpn;
                let made =
                    crate::quic::conn::accept(sock.into(), inbox, src, arrived, &identity, alpn);
                if let Ok(conn) = made {
                    (serves.then)(&Arc::new(conn), &st, &mut place);
                }
            })
            .is_ok(),
        Err(_) => false,
    };
    if !spawned {
        if let Ok(mut h) = state.quic_handshakes.lock() {
            h.leave(src);
        }
    }
}

/// A QUIC packet that is not an Initial (`d`, from `src`) came to the hello socket: one
/// that a client sent right behind its first Initial (its 0-RTT packets) before its
/// connection's own socket was there. It goes to that connection, if one is being made
/// for `src`; true when it was taken.
pub(super) fn early(state: &State, d: &[u8], src: SocketAddr) -> bool {
    if !crate::quic::is_long_header(d) || state.cfg.quic.is_none() {
        return false;
    }
    match state.quic_handshakes.lock().ok().and_then(|h| h.inbox(src)) {
        Some(inbox) => {
            inbox.push(d);
            true
        }
        None => false,
    }
}

/// What one stream's first frame made of it.
enum First {
    /// A data stream handed to its test.
    Attached,
    /// A `--mode crr` transaction's stream: its connection carries nothing else.
    Transaction,
    /// A test's control dialogue, running on a thread of its own now.
    Test,
    /// Neither: refused, malformed or silent.
    Nothing,
}

/// Takes the connection's streams while its test sets up, each by its first frame: the
/// first within the set-up time of the handshake, the others within the set-up time of
/// the first (a test's streams all come while it sets up, which is bounded so). Then the
/// connection takes no more: what a peer opens later is never read, and this thread ends.
fn streams(conn: &Arc<QuicConn>, state: &Arc<State>, place: &mut Place<'_>) {
    let peer = conn.remote();
    let Ok(local) = conn.local() else { return };
    let mut first_on_conn = true;
    let mut useful = false;
    let mut until = Instant::now() + SETUP_TIMEOUT;
    loop {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return;
        }
        let Ok(stream) = QuicStream::accept(conn, left) else {
            return;
        };
        match first(stream, peer, local, state, &mut first_on_conn, until) {
            First::Nothing if !useful => {
                conn.conn.close(0u32.into(), b"not a test");
                return;
            }
            First::Nothing => {}
            // The connection was made for this one transaction: no more streams.
            First::Transaction => return,
            First::Attached | First::Test if !useful => {
                useful = true;
                until = Instant::now() + SETUP_TIMEOUT;
            }
            First::Attached | First::Test => {}
        }
        // The handshake stage ends with the first stream's first frame.
        place.leave();
    }
}

/// Reads a stream's first frame with a pending session and carries out what it says.
fn first(
    stream: QuicStream,
    peer: SocketAddr,
    local: SocketAddr,
    state: &Arc<State>,
    first_on_conn: &mut bool,
    until: Instant,
) -> First {
    // The key, if the server has one, bound to this connection's TLS session. A stream
    // read before the handshake ended (a 0-RTT transaction's, which attaches) has no
    // session to bind to: bound to a fresh nonce instead, no start on it can prove the key.
    let export = match stream.connection().tls_export() {
        Ok(e) => e.to_vec(),
        Err(_) => crate::auth::nonce()
            .map(String::into_bytes)
            .unwrap_or_default(),
    };
    let Some(mut session) = new_bound_session(state, Some(&export)) else {
        return First::Nothing;
    };
    let mut pump = Pump::quic(stream);
    let mut identified = false;
    let mut client_host = String::new();
    loop {
        while let Some(action) = session.poll_action() {
            match action {
                ServerAction::Identified { host_id, .. } => {
                    identified = true;
                    client_host = host_id;
                    if state.cfg.psk.is_some() {
                        let now = Instant::now();
                        if let Err(r) = state.admission().key_wait(now, peer.ip()) {
                            session.handle_event(now, ServerEvent::Refused(r));
                        }
                    }
                }
                ServerAction::Attach { cookie, stream } => {
                    let mut s = pump.into_inner();
                    s.data_stream(std::mem::take(first_on_conn));
                    return match attach(s, state, peer, cookie, stream) {
                        Ok(()) if stream == CRR_STREAM => First::Transaction,
                        Ok(()) => First::Attached,
                        Err(e) => {
                            log_refused(
                                state,
                                peer.ip(),
                                format_args!("client={peer} event=attach_refused reason={}", q(e)),
                            );
                            First::Nothing
                        }
                    };
                }
                ServerAction::Admit => {
                    if state.cfg.psk.is_some() {
                        state.admission().key_proven(peer.ip());
                    }
                    let st = Arc::clone(state);
                    let spawned = std::thread::Builder::new()
                        .name("wirebench-conn".into())
                        .spawn(move || {
                            run_admitted(pump, peer, local, session, None, client_host, &st);
                        });
                    return if spawned.is_ok() {
                        First::Test
                    } else {
                        First::Nothing
                    };
                }
                ServerAction::StreamsReady | ServerAction::StartRoles | ServerAction::Run(_) => {}
            }
        }
        if session.is_closed() || Instant::now() > until {
            let outcome = session.outcome().unwrap_or_default();
            not_started(state, peer, outcome, identified);
            return First::Nothing;
        }
        pump.round(&mut session, SETUP_TICK);
    }
}

/// Hands a QUIC data stream to the test whose cookie its `attach` carries, if that test is
/// a QUIC one from the same address still waiting for stream `stream`.
fn attach(
    s: QuicStream,
    state: &State,
    peer: SocketAddr,
    cookie: u64,
    stream: u32,
) -> Result<(), &'static str> {
    if stream == CRR_STREAM {
        let crr = state.crr.lock().map_err(|_| "server state poisoned")?;
        return match crr.get(&cookie) {
            // A full queue drops the stream (and its connection): the client sees it reset.
            Some((ip, tx)) if *ip == peer.ip() => tx
                .try_send(DataSocket::Quic(Box::new(s)))
                .map_err(|_| "too many transactions at once"),
            _ => Err("unknown test or wrong address"),
        };
    }
    let pending = state.pending.lock().map_err(|_| "server state poisoned")?;
    match pending.get(&cookie) {
        Some(p) if p.peer == peer.ip() && p.protocol == Protocol::Quic && stream < p.streams => {
            p.tx.try_send((stream, DataSocket::Quic(Box::new(s))))
                .map_err(|_| "more data streams than the test has")
        }
        _ => Err("unknown test or wrong address"),
    }
}
