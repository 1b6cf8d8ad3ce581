//! The server's side of the QUIC performance protocol (`serve --quic-perf-port PORT`): the
//! clients of msquic's secnetperf, picoquic's quicperf or quinn's perf, on a UDP port of
//! its own, with ALPN `perf` (see [`super::quic_perf`] for the protocol).
//!
//! A perf connection is a test to the server: admitted as any other (slots, per-client
//! slots, starts per minute, memory), its handshake in the same capped stage as QUIC tests'
//! (with the same inbox for what comes behind the first Initial), and ended at the server's
//! limits: `--max-duration` from its admission, `--max-bytes` over what its streams move
//! both ways, `--max-rate` over each second, `--max-streams` streams at once, and 30 s
//! without a stream. Each stream has a thread while it runs.

use std::io::{ErrorKind, Read, Write};
use std::net::UdpSocket;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::quic::Place;
use super::shared::{log, log_refused, q, State, DEFAULT_MAX_DURATION};
use crate::control::memory::{
    QUIC_CONNECTION_WINDOW, QUIC_DATAGRAM_WINDOW, QUIC_RECEIVE_BATCH_BYTES, QUIC_SEND_WINDOW,
    QUIC_SOCKET_BYTES,
};
use crate::quic::{QuicConn, QuicStream};

/// How long a perf connection may go without a stream, and a stream without data.
const IDLE: Duration = Duration::from_secs(30);

/// A stream's read and write size, and its buffers'.
const CHUNK: usize = 64 * 1024;

/// How long a blocking stream call waits before the stream looks at its limits again.
const POLL: Duration = Duration::from_millis(100);

/// What one perf connection may hold of the server's memory, with `streams` streams: the
/// stack's windows (receive, send, datagrams both ways) and receive buffers, its socket's
/// buffers and each stream's two buffers.
fn memory(streams: u32) -> u64 {
    QUIC_CONNECTION_WINDOW
        + QUIC_SEND_WINDOW
        + QUIC_RECEIVE_BATCH_BYTES
        + 2 * QUIC_DATAGRAM_WINDOW
        + 2 * QUIC_SOCKET_BYTES
        + u64::from(streams) * 2 * CHUNK as u64
}

/// The port's receive loop: Initials start connections (as on the main port), what comes
/// behind them goes to their inbox.
pub(super) fn serve(sock: &UdpSocket, state: &Arc<State>) {
    let mut buf = vec![0u8; 2048];
    let serves = super::quic::Serves {
        port: sock.local_addr().map_or(0, |a| a.port()),
        alpn: super::quic_perf::PERF_ALPN,
        then: connection,
    };
    loop {
        let Ok((n, src)) = sock.recv_from(&mut buf) else {
            continue;
        };
        if crate::quic::is_initial(&buf[..n]) {
            super::quic::initial(state, &buf[..n], src, serves);
        } else {
            super::quic::early(state, &buf[..n], src);
        }
    }
}

/// What a perf connection's streams moved, and whether it must end.
#[derive(Default)]
struct Moved {
    received: AtomicU64,
    sent: AtomicU64,
    /// Set at a limit: every stream ends.
    ended: AtomicBool,
    /// Why, for the log.
    why: std::sync::Mutex<Option<&'static str>>,
    /// Streams being served: counted out once a stream's whole answer is written, before
    /// the client can have it, so that a client that opens its next stream as soon as it
    /// has the last one's answer (requests/s) is never over `--max-streams` by the count.
    active: std::sync::atomic::AtomicU32,
}

/// A stream counted among those being served until it is dropped.
struct Serving<'a>(&'a Moved);

impl Drop for Serving<'_> {
    fn drop(&mut self) {
        self.0.active.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Moved {
    fn total(&self) -> u64 {
        self.received.load(Ordering::Relaxed) + self.sent.load(Ordering::Relaxed)
    }

    fn end(&self, why: &'static str) {
        if !self.ended.swap(true, Ordering::Relaxed) {
            if let Ok(mut w) = self.why.lock() {
                *w = Some(why);
            }
        }
    }
}

/// The limits a perf connection runs under.
struct Limits {
    started: Instant,
    deadline: Instant,
    max_bytes: Option<u64>,
    max_rate_bps: Option<u64>,
}

/// Serves one perf connection once its handshake is done: admits it, takes its streams,
/// ends it at a limit or when its client is done, and frees its slot.
fn connection(conn: &Arc<QuicConn>, state: &Arc<State>, place: &mut Place<'_>) {
    let peer = conn.remote();
    let max_streams = state
        .cfg
        .max_streams
        .unwrap_or(wirebench_proto::spec::MAX_STREAMS)
        .min(wirebench_proto::spec::MAX_STREAMS);
    let admitted = state
        .admission()
        .admit_holding(Instant::now(), peer.ip(), memory(max_streams));
    place.leave();
    let ticket = match admitted {
        Ok(t) => t,
        Err(r) => {
            state.metrics.refused(r.kind());
            log_refused(
                state,
                peer.ip(),
                format_args!(
                    "client={peer} event=refused protocol=quic-perf reason={}",
                    q(&r.to_string())
                ),
            );
            conn.conn.close(1u32.into(), r.to_string().as_bytes());
            return;
        }
    };
    let started = Instant::now();
    let limits = Arc::new(Limits {
        started,
        deadline: started + state.cfg.max_duration.unwrap_or(DEFAULT_MAX_DURATION),
        max_bytes: state.cfg.max_bytes,
        max_rate_bps: state.cfg.max_rate_bps,
    });
    let moved = Arc::new(Moved::default());
    let mut threads: Vec<std::thread::JoinHandle<()>> = Vec::new();
    let mut streams = 0u32;
    let mut last = Instant::now();
    while !moved.ended.load(Ordering::Relaxed) {
        let left = limits.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            moved.end("max-duration");
            break;
        }
        threads.retain(|t| !t.is_finished());
        match QuicStream::accept(conn, left.min(Duration::from_secs(1))) {
            Ok(s) if moved.active.load(Ordering::Acquire) < max_streams => {
                moved.active.fetch_add(1, Ordering::AcqRel);
                streams += 1;
                last = Instant::now();
                let (m, l) = (Arc::clone(&moved), Arc::clone(&limits));
                match std::thread::Builder::new()
                    .name("wirebench-perf".into())
                    .spawn(move || stream(s, &m, &l))
                {
                    Ok(t) => threads.push(t),
                    Err(_) => {
                        moved.active.fetch_sub(1, Ordering::AcqRel);
                    }
                }
            }
            // More streams at once than --max-streams: this one is reset unread.
            Ok(_) => {}
            Err(e) if e.kind() == ErrorKind::TimedOut => {
                if threads.is_empty() && last.elapsed() >= IDLE {
                    moved.end("idle");
                }
            }
            // The client closed the connection, or it failed.
            Err(_) => break,
        }
    }
    if moved.ended.load(Ordering::Relaxed) {
        let why = moved.why.lock().ok().and_then(|w| *w).unwrap_or("limit");
        conn.conn.close(2u32.into(), why.as_bytes());
    }
    for t in threads {
        let _ = t.join();
    }
    state.release(ticket);
    let why = moved.why.lock().ok().and_then(|w| *w);
    log(
        state,
        format_args!(
            "client={peer} event=test protocol=quic-perf streams={streams} received_bytes={} sent_bytes={} duration_s={:.3}{}",
            moved.received.load(Ordering::Relaxed),
            moved.sent.load(Ordering::Relaxed),
            started.elapsed().as_secs_f64(),
            why.map_or(String::new(), |w| format!(" ended={w}")),
        ),
    );
}

/// One stream: the amount asked back, what the client uploads until its side ends, then
/// the answer. Ends early at the connection's limits, or after [`IDLE`] without data.
fn stream(mut s: QuicStream, moved: &Moved, limits: &Limits) {
    let serving = Serving(moved);
    s.set_timeout(POLL);
    let mut buf = vec![0u8; CHUNK];
    let mut head = [0u8; 8];
    let mut have = 0;
    let mut last = Instant::now();
    let go_on = |last: Instant| {
        !moved.ended.load(Ordering::Relaxed)
            && Instant::now() < limits.deadline
            && last.elapsed() < IDLE
    };
    // The head, then the upload, to the end of the client's side.
    loop {
        if !go_on(last) {
            return;
        }
        let into: &mut [u8] = if have < 8 {
            &mut head[have..]
        } else {
            &mut buf
        };
        match s.read(into) {
            Ok(0) => break,
            Ok(n) => {
                last = Instant::now();
                let body = if have < 8 {
                    let h = n.min(8 - have);
                    have += h;
                    n - h
                } else {
                    n
                };
                moved.received.fetch_add(body as u64, Ordering::Relaxed);
                if over(moved, limits) {
                    return close(&s, moved);
                }
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => {}
            Err(_) => return,
        }
    }
    if have < 8 {
        return;
    }
    let mut left = u64::from_be_bytes(head);
    let answer = vec![0u8; CHUNK];
    while left > 0 {
        if over(moved, limits) {
            return close(&s, moved);
        }
        if !go_on(last) {
            return;
        }
        let n = left.min(CHUNK as u64) as usize;
        match s.write(&answer[..n]) {
            Ok(k) => {
                last = Instant::now();
                left -= k as u64;
                moved.sent.fetch_add(k as u64, Ordering::Relaxed);
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => {}
            Err(_) => return,
        }
    }
    let _ = s.flush();
    // Counted out before the end goes: the stream's drop waits for its acknowledgement
    // on the connection's own thread, not this one.
    drop(serving);
    let _ = s.end_sending();
}

/// Ends the connection at once, saying which limit (the client must not take a stream
/// cut short for a whole one).
fn close(s: &QuicStream, moved: &Moved) {
    let why = moved.why.lock().ok().and_then(|w| *w).unwrap_or("limit");
    s.connection().conn.close(2u32.into(), why.as_bytes());
}

/// Whether the connection passed `--max-bytes` (both ways together) or `--max-rate` (over
/// its time so far, after its first second, with a 256 KiB allowance); if so, it ends.
fn over(moved: &Moved, limits: &Limits) -> bool {
    let total = moved.total();
    if limits.max_bytes.is_some_and(|m| total > m) {
        moved.end("max-bytes");
        return true;
    }
    let secs = limits.started.elapsed().as_secs_f64();
    if let Some(rate) = limits.max_rate_bps {
        let allowed = rate as f64 / 8.0 * secs.max(1.0) + 256.0 * 1024.0;
        if total as f64 > allowed {
            moved.end("max-rate");
            return true;
        }
    }
    moved.ended.load(Ordering::Relaxed)
}
