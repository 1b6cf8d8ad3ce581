//! Request/response: one transaction in flight, its round trip recorded; over a TCP
//! connection, over UDP, or over a new TCP connection per transaction (crr). Clients and
//! servers.
//!
//! A transaction costs what sockperf's ping-pong costs: on the client one send, one receive
//! and two clock reads (before the request, after the response); on the server one receive
//! and one send, with only the check of the request's keyed number between them over UDP
//! (a subtraction and a compare, [`rr_key`]), the clock read for its count after the send.
//! The checks of stop, deadline and intervals run on a clock value the loop has anyway; the
//! slower paths (a partial read, a timeout) are taken only when the first call does not
//! complete the message. With `--busy-poll` each wait first spins on a receive that does not
//! block ([`Spin`]).
//!
//! No TCP_QUICKACK: a response goes out right after its request is read and carries the
//! ACK, which the kernel's ping-pong detection already sees; quick ACKs would send a bare
//! ACK per message more, and the option does not stick, so it would cost a system call
//! per transaction.

use std::io::ErrorKind;
use std::net::{TcpStream, UdpSocket};
use std::os::fd::AsRawFd;
use std::time::Duration;

use wirebench_proto::results::{SideReport, UdpCounts};
use wirebench_stats::TimeHistogram;

use super::blocking::{is_timeout, read_full, send_datagram, write_full};
use super::count::{Count, IntervalUdp, Recorder, Snapshot};
use super::early_end::{early_stop, RoleError};
use super::recv_loop::{self, Flow, Receive, Until};
use super::rr_key::{self, Requests, Response};
use super::sender::{next_len, pace};
use super::user::Stream;
use super::{payload, report, DataSocket, RoleParams, POLL};
use crate::pace::Pacer;
use crate::sys::{recv_nowait, set_busy_poll};
use crate::{Hists, Shared};

/// `--busy-poll`: how a side waits for its next request or response. With a spin time, each
/// wait first spins on a receive that does not block, for up to that time, then blocks as
/// without it; the spin ends early on a stop. Without one, it does nothing.
#[derive(Debug, Default)]
pub(super) struct Spin {
    spin_ns: u64,
    /// Waits that the spin ended: the data (or an error) came while spinning.
    spun: u64,
    /// Waits that spun for the whole time, then blocked.
    blocked: u64,
}

impl Spin {
    pub(super) fn of(p: &RoleParams) -> Self {
        Self {
            spin_ns: p.spec.busy_poll_ns.unwrap_or(0),
            ..Self::default()
        }
    }

    /// Spins on `sock` for data into `buf`: `Some` with what the receive gave, `None` when
    /// busy polling is off or the spin time passed with nothing (the caller then blocks).
    #[inline]
    fn recv(
        &mut self,
        sock: &impl AsRawFd,
        buf: &mut [u8],
        sh: &Shared,
    ) -> Option<std::io::Result<usize>> {
        if self.spin_ns == 0 {
            return None;
        }
        // The clock is read once the first try found nothing: not when data is waiting.
        let mut start = None;
        loop {
            match recv_nowait(sock, buf) {
                Err(e) if is_timeout(&e) => {}
                r => {
                    self.spun += 1;
                    return Some(r);
                }
            }
            let now = sh.now_ns();
            let began = *start.get_or_insert(now);
            // Bounded: the spin time (at most MAX_BUSY_POLL_NS), or a stop.
            if sh.stopped() || now.saturating_sub(began) >= self.spin_ns {
                self.blocked += 1;
                return None;
            }
            // Yield between tries: a peer waiting for this core (both sides on one core, as
            // on a small machine; a spin without yields then costs the whole spin time per
            // wait) runs now, and one on another core loses nothing.
            std::thread::yield_now();
        }
    }

    /// Writes how this side waited into its report's datapath: the set-up's record (a
    /// kernel socket's; a user-space stack has none and does not spin) with the counts of
    /// this run.
    fn record(&self, rep: &mut SideReport, p: &RoleParams) {
        if self.spin_ns == 0 || p.datapath.busy_poll.is_none() {
            return;
        }
        let mut dp = p.datapath.clone();
        if let Some(bp) = dp.busy_poll.as_mut() {
            bp.spun = self.spun;
            bp.blocked = self.blocked;
        }
        rep.datapath = dp;
    }
}

/// Reads one whole message into `buf`: the first receive (after a spin, with `--busy-poll`
/// on a kernel socket) usually brings all of it; the rest, or a wait past the socket's
/// timeout, goes through [`read_full`]. `Ok(false)` when the peer closed before its first
/// byte.
#[inline]
pub(super) fn read_message<S: Stream>(
    s: &mut S,
    buf: &mut [u8],
    spin: &mut Spin,
    sh: &Shared,
    p: &RoleParams,
) -> Result<bool, RoleError> {
    let first = match s.kernel().and_then(|k| spin.recv(k, buf, sh)) {
        Some(r) => r,
        None => s.read(buf),
    };
    match first {
        Ok(n) if n == buf.len() => Ok(true),
        Ok(0) => Ok(false),
        Ok(n) => {
            if read_full(s, &mut buf[n..], sh, p)? {
                Ok(true)
            } else {
                Err(RoleError::ClosedMidMessage)
            }
        }
        Err(e) if is_timeout(&e) => read_full(s, buf, sh, p),
        Err(e) => Err(RoleError::Read(e)),
    }
}

/// Writes one whole message: one call when the socket takes it all, as it does a small
/// message; otherwise the rest through [`write_full`].
#[inline]
pub(super) fn write_message<S: Stream>(
    s: &mut S,
    buf: &[u8],
    sh: &Shared,
    p: &RoleParams,
) -> Result<(), RoleError> {
    match s.write(buf) {
        Ok(n) if n == buf.len() => Ok(()),
        Ok(0) => Err(RoleError::Closed),
        Ok(n) => write_full(s, &buf[n..], sh, p),
        Err(e) if is_timeout(&e) => write_full(s, buf, sh, p),
        Err(e) => Err(RoleError::Send(e)),
    }
}

/// One request/response transaction of a client, over some transport.
pub(super) trait Transact {
    /// Sends request `seq` of `len` bytes, the clock reading `start_ns` just before, and
    /// waits for its whole response: `Ok(true)` when it came, `Ok(false)` when it timed out
    /// (UDP: a datagram was lost).
    fn transact(
        &mut self,
        seq: u64,
        len: u64,
        start_ns: u64,
        sh: &Shared,
        p: &RoleParams,
    ) -> Result<bool, RoleError>;

    /// How the client waited for responses (`--busy-poll`).
    fn spin(&self) -> &Spin;

    /// UDP: datagrams that reached the client's socket and were not the server's answers
    /// (see [`rr_key`]); `None` over TCP, whose bytes the kernel takes only from the peer.
    fn foreign(&self) -> Option<u64> {
        None
    }
}

/// Request/response over a TCP connection.
pub(super) struct TcpRr<S> {
    s: S,
    request: Vec<u8>,
    response: Vec<u8>,
    spin: Spin,
}

impl<S: Stream> TcpRr<S> {
    pub(super) fn new(mut s: S, p: &RoleParams) -> Self {
        s.timeouts(POLL);
        Self {
            s,
            request: payload(p.spec.size),
            response: vec![0u8; p.spec.response_len() as usize],
            spin: Spin::of(p),
        }
    }
}

impl<S: Stream> Transact for TcpRr<S> {
    #[inline]
    fn transact(
        &mut self,
        _seq: u64,
        len: u64,
        _start_ns: u64,
        sh: &Shared,
        p: &RoleParams,
    ) -> Result<bool, RoleError> {
        write_message(&mut self.s, &self.request[..len as usize], sh, p)?;
        if read_message(&mut self.s, &mut self.response, &mut self.spin, sh, p)? {
            Ok(true)
        } else {
            Err(RoleError::ServerClosed)
        }
    }

    fn spin(&self) -> &Spin {
        &self.spin
    }
}

/// Request/response over UDP: the request's first 8 bytes are its sequence number keyed with
/// the stream's token, which the response carries back, so a late answer to an earlier
/// request is not taken for this one, nor a forged one for any (see [`rr_key`]).
pub(super) struct UdpRr {
    s: UdpSocket,
    request: Vec<u8>,
    response: Vec<u8>,
    local_drops: u64,
    /// Datagrams that were not an answer to a request this client sent.
    foreign: u64,
    spin: Spin,
}

impl UdpRr {
    pub(super) fn new(s: UdpSocket, p: &RoleParams) -> Self {
        let _ = s.set_write_timeout(Some(POLL));
        let _ = s.set_read_timeout(Some(Duration::from_nanos(p.spec.ack_timeout_ns).min(POLL)));
        Self {
            s,
            request: payload(p.spec.size),
            response: vec![0u8; 65_536],
            local_drops: 0,
            foreign: 0,
            spin: Spin::of(p),
        }
    }
}

impl Transact for UdpRr {
    #[inline]
    fn transact(
        &mut self,
        seq: u64,
        len: u64,
        start_ns: u64,
        sh: &Shared,
        p: &RoleParams,
    ) -> Result<bool, RoleError> {
        let req = &mut self.request[..len as usize];
        if let Some(head) = req.get_mut(..8) {
            head.copy_from_slice(&p.token.encode(seq).to_be_bytes());
        }
        send_datagram(&self.s, req, sh, &mut self.local_drops)?;
        // The ack timeout runs from the clock reading just before the send: no clock read
        // here, as a response normally comes with the first receive.
        let sent = start_ns;
        loop {
            // Each wait spins first (with --busy-poll): a late answer to an earlier request
            // ends a spin, and the next one spins again, so every spin stays bounded.
            let got = match self.spin.recv(&self.s, &mut self.response, sh) {
                Some(r) => r,
                None => self.s.recv(&mut self.response),
            };
            match got {
                Ok(n) => match rr_key::response(p.token, seq, &self.response[..n]) {
                    Response::Ours => return Ok(true),
                    Response::Earlier => {}
                    Response::Foreign => self.foreign += 1,
                },
                Err(e) if is_timeout(&e) || e.kind() == ErrorKind::ConnectionRefused => {}
                Err(e) => return Err(RoleError::Response(e)),
            }
            let now = sh.now_ns();
            if let Some(why) = early_stop(sh, p, now) {
                return Err(why);
            }
            if now.saturating_sub(sent) >= p.spec.ack_timeout_ns {
                return Ok(false);
            }
        }
    }

    fn spin(&self) -> &Spin {
        &self.spin
    }

    fn foreign(&self) -> Option<u64> {
        Some(self.foreign)
    }
}

/// The round trips of the interval, and `lost` (requests unanswered so far), as an
/// interval record carries them; the interval's histogram is added to `total` and reset.
pub(super) fn rr_snapshot(
    count: &Count,
    lost: u64,
    interval: &mut TimeHistogram,
    total: &mut TimeHistogram,
) -> Snapshot {
    let udp = IntervalUdp {
        lost,
        jitter_ns: None,
        delay_p50_ns: interval.quantile(0.5),
        delay_p99_ns: interval.quantile(0.99),
    };
    total.add(interval);
    interval.reset();
    Snapshot {
        bytes: count.bytes,
        messages: count.messages,
        udp: Some(udp),
        tcp: None,
        quic: None,
    }
}

/// Request/response, the client: one transaction in flight, paced by `--rate` (packets/s:
/// transactions/s) and `--gap`, each round trip recorded in an HDR histogram, from before the
/// request's write to after the response's last byte.
pub(super) fn rr_client(t: &mut impl Transact, p: &RoleParams, sh: &Shared) -> SideReport {
    let spec = &p.spec;
    let mut pacer = Pacer::of(spec);
    let mut rec = Recorder::of(p);
    let mut count = Count::default();
    let mut interval = TimeHistogram::new();
    let mut total = TimeHistogram::new();
    let mut timeouts = 0u64;
    let mut error = None;
    // Two clock reads per transaction, as sockperf's: just before the request and just
    // after the response. The second is also the next transaction's `now`, on which the
    // interval, stop and deadline checks run; a paced wait reads the clock again after it.
    let mut now = sh.now_ns();
    loop {
        rec.tick(now, || rr_snapshot(&count, 0, &mut interval, &mut total));
        if let Some(why) = early_stop(sh, p, now) {
            error = Some(why);
            break;
        }
        let Some(len) = next_len(spec, &count, now) else {
            break;
        };
        if !pacer.unlimited() {
            let ready = pace(&mut pacer, sh, now);
            now = sh.now_ns();
            if !ready {
                continue;
            }
        }
        let start = sh.now_ns();
        let answered = match t.transact(count.messages, len, start, sh, p) {
            Ok(a) => a,
            Err(e) => {
                error = Some(e);
                break;
            }
        };
        let end = sh.now_ns();
        if answered {
            interval.record(i64::try_from(end.saturating_sub(start)).unwrap_or(i64::MAX));
        } else {
            timeouts += 1;
        }
        count.add(len, end);
        pacer.sent(len, end);
        count.publish(sh);
        now = end;
    }
    let intervals = rec.finish(sh.now_ns(), || {
        rr_snapshot(&count, 0, &mut interval, &mut total)
    });
    let mut rep = report(&count, intervals, error);
    rep.latency = total.summary();
    sh.keep_hists(Hists {
        latency: Some(total),
        ..Hists::default()
    });
    rep.timeouts = timeouts;
    rep.udp = t.foreign().map(|foreign| UdpCounts {
        sequenced: true,
        foreign,
        // No one-way delay is measured: `clocks` stays as it was before these counts.
        ..UdpCounts::default()
    });
    t.spin().record(&mut rep, p);
    rep
}

/// Request/response over TCP, the server's side of the receive loop: read a whole request,
/// write the response.
struct TcpRrServe<S> {
    s: S,
    request: Vec<u8>,
    response: Vec<u8>,
    count: Count,
    /// Response bytes written: they count against the server's limits.
    sent: u64,
    spin: Spin,
}

impl<S: Stream> Receive for TcpRrServe<S> {
    fn count(&self) -> &Count {
        &self.count
    }

    fn moved(&self) -> u64 {
        self.count.bytes.saturating_add(self.sent)
    }

    /// Each request and its response.
    fn packets(&self) -> u64 {
        self.count.messages.saturating_mul(2)
    }

    fn snapshot(&mut self) -> Snapshot {
        Snapshot::of(&self.count)
    }

    fn receive(&mut self, sh: &Shared, p: &RoleParams) -> Result<Flow, RoleError> {
        let spec = &p.spec;
        // The request's length: the last one of a `bytes` test may be shorter.
        let len = spec.bytes.map_or(spec.size, |total| {
            total.saturating_sub(self.count.bytes).clamp(1, spec.size)
        });
        if !read_message(
            &mut self.s,
            &mut self.request[..len as usize],
            &mut self.spin,
            sh,
            p,
        )? {
            // The client closed its side: every request was answered.
            return Ok(Flow::Closed);
        }
        // The answer first: the clock read for the count is then off the round trip.
        let answered = write_message(&mut self.s, &self.response, sh, p);
        self.count.add(len, sh.now_ns());
        answered?;
        self.sent += self.response.len() as u64;
        Ok(Flow::More)
    }
}

/// Request/response over TCP, the server.
pub(super) fn tcp_rr_server<S: Stream>(mut s: S, p: &RoleParams, sh: &Shared) -> SideReport {
    let spec = &p.spec;
    s.timeouts(POLL);
    let mut r = TcpRrServe {
        s,
        request: vec![0u8; spec.size as usize],
        response: payload(spec.response_len()),
        count: Count::default(),
        sent: 0,
        spin: Spin::of(p),
    };
    let (intervals, error) = recv_loop::run(&mut r, Until::Closed, p, sh);
    let mut rep = report(&r.count, intervals, error);
    r.spin.record(&mut rep, p);
    rep
}

/// Request/response over UDP, the server's side of the receive loop: answer each request
/// that is the client's with a response that starts with the request's keyed sequence
/// number; count any other as foreign, unanswered (see [`rr_key`]).
struct UdpRrServe {
    s: UdpSocket,
    buf: Vec<u8>,
    response: Vec<u8>,
    count: Count,
    requests: Requests,
    local_drops: u64,
    /// Response bytes sent: they count against the server's limits.
    sent: u64,
    spin: Spin,
}

impl Receive for UdpRrServe {
    fn count(&self) -> &Count {
        &self.count
    }

    fn moved(&self) -> u64 {
        self.count.bytes.saturating_add(self.sent)
    }

    /// Each request and its response.
    fn packets(&self) -> u64 {
        self.count.messages.saturating_mul(2)
    }

    fn snapshot(&mut self) -> Snapshot {
        Snapshot::of(&self.count)
    }

    #[inline]
    fn receive(&mut self, sh: &Shared, p: &RoleParams) -> Result<Flow, RoleError> {
        let got = match self.spin.recv(&self.s, &mut self.buf, sh) {
            Some(r) => r,
            None => self.s.recv(&mut self.buf),
        };
        let n = match got {
            Ok(n) => n,
            Err(e) if is_timeout(&e) || e.kind() == ErrorKind::ConnectionRefused => {
                return Ok(Flow::More)
            }
            Err(e) => return Err(RoleError::ReceiveRequests(e)),
        };
        let request = &self.buf[..n];
        if p.hello.is_some_and(|h| request == h) {
            return Ok(Flow::More);
        }
        let Some(field) = self.requests.check(request, || sh.now_ns()) else {
            return Ok(Flow::More);
        };
        self.response[..field.len()].copy_from_slice(&field);
        // The answer first: the clock read for the count is then off the round trip.
        let answered = send_datagram(&self.s, &self.response, sh, &mut self.local_drops);
        self.count.add(n as u64, sh.now_ns());
        answered?;
        self.sent += self.response.len() as u64;
        Ok(Flow::More)
    }
}

/// Request/response over UDP, the server.
pub(super) fn udp_rr_server(s: UdpSocket, p: &RoleParams, sh: &Shared) -> SideReport {
    let spec = &p.spec;
    let _ = s.set_read_timeout(Some(POLL));
    let _ = s.set_write_timeout(Some(POLL));
    let mut r = UdpRrServe {
        s,
        buf: vec![0u8; 65_536],
        response: payload(spec.response_len()),
        count: Count::default(),
        requests: Requests::new(spec, p.token),
        local_drops: 0,
        sent: 0,
        spin: Spin::of(p),
    };
    let (intervals, error) = recv_loop::run(&mut r, Until::Counted, p, sh);
    let mut rep = report(&r.count, intervals, error);
    rep.udp = Some(UdpCounts {
        sequenced: true,
        foreign: r.requests.foreign(),
        ..UdpCounts::default()
    });
    r.spin.record(&mut rep, p);
    rep
}

/// Connect/request/response: a new TCP connection per transaction, attached to the test with
/// its cookie in the same write as the request, closed with a reset (SO_LINGER 0) so that
/// thousands of transactions leave no TIME_WAIT behind to exhaust the client's ports.
pub(super) struct CrrTransact {
    addr: std::net::SocketAddr,
    quic: Option<QuicDial>,
    quic_info: Option<wirebench_proto::results::QuicInfo>,
    /// The attach frame, then the request.
    request: Vec<u8>,
    frame_len: usize,
    response: Vec<u8>,
    spin: Spin,
}

impl CrrTransact {
    pub(super) fn new(
        addr: std::net::SocketAddr,
        cookie: u64,
        quic: Option<QuicDial>,
        p: &RoleParams,
    ) -> Self {
        let frame = wirebench_proto::control::encode(&wirebench_proto::control::Message::Attach {
            version: wirebench_proto::control::PROTOCOL_VERSION,
            cookie,
            stream: wirebench_proto::control::CRR_STREAM,
        })
        .unwrap_or_default();
        let frame_len = frame.len();
        let mut request = frame;
        request.extend_from_slice(&payload(p.spec.size));
        Self {
            addr,
            quic,
            quic_info: None,
            request,
            frame_len,
            response: vec![0u8; p.spec.response_len() as usize],
            spin: Spin::of(p),
        }
    }
}

/// How a QUIC crr client makes each transaction's connection: the server's check, the
/// congestion controller, the local address.
#[derive(Debug, Clone)]
pub(crate) struct QuicDial {
    pub(crate) dialer: crate::quic::Dialer,
    pub(crate) cc: crate::quic::Congestion,
    pub(crate) bind: Option<std::net::IpAddr>,
}

impl CrrTransact {
    /// A QUIC client's figures over its transactions' connections (none over TCP).
    pub(super) fn quic_info(&self) -> Option<wirebench_proto::results::QuicInfo> {
        self.quic_info.clone()
    }

    /// A transaction over a new QUIC connection: its handshake, a stream with the attach
    /// and the request, the response; then the connection is closed at once (the answer
    /// came: nothing is left to acknowledge). Its figures join the others'.
    fn transact_quic(&mut self, len: u64, sh: &Shared, p: &RoleParams) -> Result<bool, RoleError> {
        let Some(dial) = &self.quic else {
            return Ok(false);
        };
        let conn = dial
            .dialer
            .connect(self.addr, dial.bind, dial.cc)
            .map_err(|e| RoleError::Connect(std::io::Error::other(e.to_string())))?;
        let conn = std::sync::Arc::new(conn);
        let mut s = Box::new(
            crate::quic::QuicStream::open(&conn, Duration::from_secs(10))
                .map_err(RoleError::Connect)?,
        );
        s.set_timeout(POLL);
        let end = self.frame_len + len as usize;
        let answered = write_message(&mut s, &self.request[..end], sh, p)
            .and_then(|()| read_message(&mut s, &mut self.response, &mut self.spin, sh, p));
        self.quic_info
            .get_or_insert_with(Default::default)
            .merge(&conn.info());
        conn.conn.close(0u32.into(), b"");
        drop(s);
        match answered? {
            true => Ok(true),
            false => Err(RoleError::TransactionUnanswered),
        }
    }
}

impl Transact for CrrTransact {
    fn transact(
        &mut self,
        _seq: u64,
        len: u64,
        _start_ns: u64,
        sh: &Shared,
        p: &RoleParams,
    ) -> Result<bool, RoleError> {
        if self.quic.is_some() {
            return self.transact_quic(len, sh, p);
        }
        let mut s = TcpStream::connect_timeout(&self.addr, Duration::from_secs(10))
            .map_err(RoleError::Connect)?;
        let _ = s.set_nodelay(true);
        let _ = socket2::SockRef::from(&s).set_linger(Some(Duration::ZERO));
        let _ = s.set_write_timeout(Some(POLL));
        let _ = s.set_read_timeout(Some(POLL));
        if self.spin.spin_ns > 0 {
            // What the kernel grants is recorded once, from the set-up connection.
            let _ = set_busy_poll(&s, self.spin.spin_ns);
        }
        let end = self.frame_len + len as usize;
        write_message(&mut s, &self.request[..end], sh, p)?;
        if read_message(&mut s, &mut self.response, &mut self.spin, sh, p)? {
            Ok(true)
        } else {
            Err(RoleError::TransactionUnanswered)
        }
    }

    fn spin(&self) -> &Spin {
        &self.spin
    }
}

/// Connect/request/response, the server's side of the receive loop: each transaction's
/// connection arrives attached; read its request, answer, close.
struct CrrServe<'a> {
    conns: &'a std::sync::mpsc::Receiver<DataSocket>,
    request: Vec<u8>,
    response: Vec<u8>,
    count: Count,
    /// Response bytes written: they count against the server's limits.
    sent: u64,
    spin: Spin,
}

impl Receive for CrrServe<'_> {
    fn count(&self) -> &Count {
        &self.count
    }

    fn moved(&self) -> u64 {
        self.count.bytes.saturating_add(self.sent)
    }

    /// Each request and its response.
    fn packets(&self) -> u64 {
        self.count.messages.saturating_mul(2)
    }

    fn snapshot(&mut self) -> Snapshot {
        Snapshot::of(&self.count)
    }

    fn receive(&mut self, sh: &Shared, p: &RoleParams) -> Result<Flow, RoleError> {
        match self.conns.recv_timeout(POLL) {
            Ok(DataSocket::Tcp(mut s)) => {
                let _ = s.set_nodelay(true);
                let _ = s.set_read_timeout(Some(POLL));
                let _ = s.set_write_timeout(Some(POLL));
                if self.spin.spin_ns > 0 {
                    let _ = set_busy_poll(&s, self.spin.spin_ns);
                }
                self.serve(&mut s, sh, p);
            }
            Ok(DataSocket::Quic(mut s)) => {
                s.set_timeout(POLL);
                self.serve(&mut s, sh, p);
            }
            Ok(_) | Err(_) => {}
        }
        Ok(Flow::More)
    }
}

impl CrrServe<'_> {
    /// One transaction: its request read, its response written.
    fn serve<S: Stream>(&mut self, s: &mut S, sh: &Shared, p: &RoleParams) {
        let spec = &p.spec;
        let len = spec.bytes.map_or(spec.size, |total| {
            total.saturating_sub(self.count.bytes).clamp(1, spec.size)
        });
        // A transaction that breaks (the client reset it) ends that transaction only.
        if !matches!(
            read_message(s, &mut self.request[..len as usize], &mut self.spin, sh, p),
            Ok(true)
        ) {
            return;
        }
        // What was written counts, whole or not: the limit is on what moved.
        let _ = write_message(s, &self.response, sh, p);
        self.count.add(len, sh.now_ns());
        self.sent += self.response.len() as u64;
    }
}

/// Connect/request/response, the server.
pub(super) fn crr_server(
    conns: &std::sync::mpsc::Receiver<DataSocket>,
    p: &RoleParams,
    sh: &Shared,
) -> SideReport {
    let spec = &p.spec;
    let mut r = CrrServe {
        conns,
        request: vec![0u8; spec.size as usize],
        response: payload(spec.response_len()),
        count: Count::default(),
        sent: 0,
        spin: Spin::of(p),
    };
    let (intervals, error) = recv_loop::run(&mut r, Until::Counted, p, sh);
    let mut rep = report(&r.count, intervals, error);
    r.spin.record(&mut rep, p);
    rep
}
