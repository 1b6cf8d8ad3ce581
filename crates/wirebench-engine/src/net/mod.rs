//! The thin driver around [`crate::control`]: it owns the sockets and threads, turns what
//! happens on them into session events, and carries out the sessions' actions. The
//! protocol's decisions and deadlines are all in the sessions; the loop here only reads,
//! writes and waits until the next deadline or a short tick, whichever comes first.

pub(crate) mod client;
mod conn;
mod handshake;
pub(crate) mod iperf3;
mod listen;
pub(crate) mod metrics;
mod metrics_http;
mod quic;
pub(crate) mod quic_perf;
mod quic_perf_server;
pub(crate) mod roles;
pub(crate) mod server;
pub(crate) mod shared;
mod user_accept;

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use crate::control::Session;

/// How often the driver looks at the roles (progress, completion) while nothing else
/// happens.
pub(crate) const TICK: Duration = Duration::from_millis(50);

/// The tick while a server session waits for its streams: they arrive through a queue the
/// loop polls, and a UDP client waits for each confirmation before its next stream.
pub(crate) const SETUP_TICK: Duration = Duration::from_millis(2);

/// An address as people and the server's bookkeeping know it: an IPv4 client of a
/// dual-stack (`[::]`) socket arrives as `::ffff:a.b.c.d`, and is `a.b.c.d` here, so that
/// its TCP connections, its UDP datagrams, the logs and the per-address caps all name one
/// host whichever socket family carried them.
pub(crate) fn canonical(addr: SocketAddr) -> SocketAddr {
    SocketAddr::new(addr.ip().to_canonical(), addr.port())
}

/// Serves what `render` makes at `http://ADDR/metrics` from a thread of its own, with the
/// bounds of `serve --metrics` (a mesh agent's `--metrics` too): the address bound.
///
/// # Errors
///
/// `addr` cannot be bound.
pub fn serve_metrics(
    addr: SocketAddr,
    render: impl Fn(metrics::Format) -> String + Send + Sync + 'static,
) -> Result<SocketAddr, crate::EngineError> {
    metrics_http::start(addr, render)
}

/// The two ends of an accepted connection, each [`canonical`].
pub(crate) fn ends(conn: &TcpStream) -> std::io::Result<(SocketAddr, SocketAddr)> {
    Ok((canonical(conn.peer_addr()?), canonical(conn.local_addr()?)))
}

/// A client's data socket's own end and its peer's, each [`canonical`] (for
/// [`roles::Watch::connected`]); `None` for a user-space stack's connection, whose ends are
/// the stack's.
pub(crate) fn data_ends(sock: &crate::role::DataSocket) -> Option<(SocketAddr, SocketAddr)> {
    let (local, peer) = match sock {
        crate::role::DataSocket::Tcp(s) => (s.local_addr(), s.peer_addr()),
        crate::role::DataSocket::Udp(s) => (s.local_addr(), s.peer_addr()),
        crate::role::DataSocket::Quic(s) => {
            let c = s.connection();
            (c.local(), Ok(c.remote()))
        }
        crate::role::DataSocket::User(_) => return None,
    };
    Some((canonical(local.ok()?), canonical(peer.ok()?)))
}

/// What a control dialogue runs over: a TCP connection, or a QUIC stream.
pub(crate) trait ControlIo {
    /// Reads what arrived within `wait` (0: the peer closed).
    fn read_for(&mut self, buf: &mut [u8], wait: Duration) -> std::io::Result<usize>;
    /// Writes some of `buf`, waiting at most a tick.
    fn write_some(&mut self, buf: &[u8]) -> std::io::Result<usize>;
}

impl ControlIo for TcpStream {
    fn read_for(&mut self, buf: &mut [u8], wait: Duration) -> std::io::Result<usize> {
        self.set_read_timeout(Some(wait))?;
        self.read(buf)
    }

    fn write_some(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.write(buf)
    }
}

impl ControlIo for crate::quic::QuicStream {
    fn read_for(&mut self, buf: &mut [u8], wait: Duration) -> std::io::Result<usize> {
        crate::quic::QuicStream::read_for(self, buf, wait)
    }

    fn write_some(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.set_timeout(TICK);
        self.write(buf)
    }
}

/// A control connection under a session.
pub(crate) struct Pump<S: ControlIo = TcpStream> {
    sock: S,
    buf: Vec<u8>,
    /// The connection is closed or broken: no more reads or writes.
    gone: bool,
}

impl Pump {
    /// Wraps a connected stream. Writes block at most a tick, so a peer that stops reading
    /// is a deadline in the session, not a stuck thread.
    pub(crate) fn new(sock: TcpStream) -> std::io::Result<Self> {
        sock.set_write_timeout(Some(TICK))?;
        // Control messages are small and latency matters more than batching.
        let _ = sock.set_nodelay(true);
        Ok(Self {
            sock,
            buf: vec![0u8; 16 * 1024],
            gone: false,
        })
    }

    /// The stream.
    pub(crate) fn stream(&self) -> &TcpStream {
        &self.sock
    }
}

impl<S: ControlIo> Pump<S> {
    /// The stream, for whoever takes it on (a data stream after its `attach`).
    pub(crate) fn into_inner(self) -> S {
        self.sock
    }
}

impl Pump<crate::quic::QuicStream> {
    /// A control dialogue over a QUIC stream.
    pub(crate) fn quic(sock: crate::quic::QuicStream) -> Self {
        Self {
            sock,
            buf: vec![0u8; 16 * 1024],
            gone: false,
        }
    }
}

impl<S: ControlIo> Pump<S> {
    /// Writes what waits, once (before the roles start, so that `begin` leaves first).
    pub(crate) fn flush(&mut self, s: &mut impl Session) {
        if self.gone {
            return;
        }
        if let Some(out) = s.poll_transmit() {
            match self.sock.write_some(out) {
                Ok(n) => s.handle_written(Instant::now(), n),
                Err(e) if transient(&e) => {}
                Err(_) => self.close(s),
            }
        }
    }

    /// One round: writes what waits, reads for at most `tick` or until the session's next
    /// deadline, then lets the session handle its deadlines.
    pub(crate) fn round(&mut self, s: &mut impl Session, tick: Duration) {
        self.flush(s);
        let now = Instant::now();
        let wait = s
            .poll_timeout()
            .map_or(tick, |t| t.saturating_duration_since(now).min(tick))
            // A zero timeout means "block forever" to the kernel: keep at least 1 ms.
            .max(Duration::from_millis(1));
        let limit = s.read_limit().min(self.buf.len());
        if self.gone || limit == 0 {
            std::thread::sleep(wait);
        } else {
            match self.sock.read_for(&mut self.buf[..limit], wait) {
                Ok(0) => self.close(s),
                Ok(n) => s.handle_bytes(Instant::now(), &self.buf[..n]),
                Err(e) if transient(&e) => {}
                Err(_) => self.close(s),
            }
        }
        let now = Instant::now();
        if s.poll_timeout().is_some_and(|t| now >= t) {
            s.handle_timeout(now);
        }
    }

    fn close(&mut self, s: &mut impl Session) {
        self.gone = true;
        s.handle_closed(Instant::now());
        // What waits to be written cannot be: tell the session it is gone.
        if let Some(out) = s.poll_transmit() {
            let n = out.len();
            s.handle_written(Instant::now(), n);
        }
    }
}

fn transient(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
    )
}
