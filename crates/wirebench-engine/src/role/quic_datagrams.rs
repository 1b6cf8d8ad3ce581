//! QUIC's unreliable datagrams (RFC 9221, `run --quic --datagrams`), counted as UDP's are:
//! each message one datagram with the UDP data header (sequence keyed with the stream's
//! token, send time), so the receiver's accounting is [`crate::rx::UdpRx`]'s: loss,
//! duplicates, reordering, jitter, one-way delay and the packet log.
//!
//! The sender gives the stack a batch at a time: one buffer for the batch, each datagram a
//! slice of it (no allocation per datagram), handed over while what the stack holds unsent
//! is under a congestion window's worth (at least 16 KiB), so that the stack never drops
//! an older datagram to make room, and a window-limited sender's queue in its stack adds
//! about a round trip to the one-way delay, not the seconds a full buffer would (its
//! congestion controller paces them out; the sender waits for it). What the sender counts
//! is what the stack took; what the receiver did not get was lost on the path or dropped
//! from the receiver's buffer unread, and counts as lost either way.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use quinn::SendDatagramError;
use wirebench_proto::header::{DataHeader, HEADER_LEN};
use wirebench_proto::results::SideReport;

use super::count::{Count, MsBins, QuicWindow, Recorder, Snapshot};
use super::early_end::{early_stop, idle_limit_ns, RoleError};
use super::limit::over_counted;
use super::recv_loop::{self, Flow, Receive, Until};
use super::sender::{sleep_for, wait_for};
use super::udp_recv::{sequenced_count, short_datagrams, start_log};
use super::udp_send::left_to_send;
use super::{payload, report, RoleParams, POLL};
use crate::pace::Pacer;
use crate::packet_log_writer::LogOut;
use crate::quic::{QuicConn, QuicStream};
use crate::rx::{StreamKey, UdpRx};
use crate::Shared;

/// Datagrams a sender hands over per batch, and a receiver takes per wake-up.
const BATCH: usize = 64;

/// The longest a sender waits at its end for the stack to send what it took.
const FLUSH: Duration = Duration::from_secs(1);

/// The least a sender lets the stack hold unsent, whatever its congestion window.
const MIN_AHEAD: usize = 16 * 1024;

/// How often a sender that is a window ahead looks whether the stack sent some.
const AHEAD_POLL: Duration = Duration::from_micros(200);

/// Why a test's datagrams do not fit: the peer takes none, or the path's packets are
/// smaller than the test's datagrams.
fn does_not_fit(conn: &QuicConn, size: u64) -> Option<RoleError> {
    match conn.conn.max_datagram_size() {
        None => Some(RoleError::DatagramsRefused),
        Some(max) if (max as u64) < size => Some(RoleError::DatagramTooLarge { size, max }),
        Some(_) => None,
    }
}

/// The streaming sender: paced (or, unlimited, as fast as the congestion controller lets
/// the datagrams out), batch by batch.
pub(super) fn quic_datagram_send(s: Box<QuicStream>, p: &RoleParams, sh: &Shared) -> SideReport {
    let conn = Arc::clone(s.connection());
    let spec = &p.spec;
    let size = spec.size;
    let body = payload(size);
    let mut pacer = Pacer::of(spec);
    let mut rec = Recorder::of(p);
    let mut count = Count::default();
    let mut bins = MsBins::new();
    let mut error = does_not_fit(&conn, size);
    let mut progress_ns = sh.now_ns();
    let empty = conn.conn.datagram_send_buffer_space();
    while error.is_none() {
        let now = sh.now_ns();
        rec.tick(now, || snapshot(&count, &conn));
        if let Some(why) = early_stop(sh, p, now)
            .or_else(|| over_counted(p.limit.as_ref(), count.bytes, count.messages, now))
        {
            error = Some(why);
            break;
        }
        let (left, last_len) = left_to_send(spec.bytes, spec.duration_ns, size, count.bytes, now);
        if left == 0 {
            break;
        }
        let cap = (BATCH as u64).min(left);
        let want = pacer.quantum(size, cap);
        let n = pacer.due(now, size, cap);
        if n < want {
            let due = pacer.due_by_ns(now, size, want);
            if want > 1 {
                sleep_for(now, due);
            } else {
                wait_for(sh, now, due);
            }
            continue;
        }
        let tail_len = if n == left { last_len } else { size };
        let batch = fill(count.messages, n, size, tail_len, sh.unix_ns(now), p, &body);
        let (sent, bytes, why) = hand_over(&conn, batch, size, empty);
        let now = sh.now_ns();
        // A stack whose buffer never drains: the peer stopped reading and acknowledging.
        if sent > 0 {
            progress_ns = now;
        } else if now.saturating_sub(progress_ns) > idle_limit_ns(spec) {
            error = Some(RoleError::ReceiverStuck);
            break;
        }
        count.add_many(sent, bytes, now);
        bins.add(now, bytes);
        pacer.sent_many(sent, bytes, now);
        count.publish(sh);
        error = why;
    }
    flush(&conn, empty);
    let intervals = rec.finish(sh.now_ns(), || snapshot(&count, &conn));
    let mut rep = report(&count, intervals, error);
    rep.ms_bytes = bins.finish();
    drop(s);
    rep
}

/// A batch of `n` datagrams from sequence number `first_seq`, all `size` bytes but the last
/// (`tail_len`), stamped with one send time: one buffer, split into the datagrams.
fn fill(
    first_seq: u64,
    n: u64,
    size: u64,
    tail_len: u64,
    send_ns: u64,
    p: &RoleParams,
    body: &[u8],
) -> Vec<Bytes> {
    let total = (n.saturating_sub(1) * size + tail_len) as usize;
    let mut buf = BytesMut::with_capacity(total);
    let mut lens = [0usize; BATCH];
    for i in 0..n {
        let len = if i + 1 == n { tail_len } else { size } as usize;
        let start = buf.len();
        buf.extend_from_slice(&body[..len]);
        let seq = first_seq + i;
        if len < HEADER_LEN {
            // The short last datagram of a `bytes` test: as over UDP, no header.
            buf[start] = seq as u8;
        } else {
            let h = DataHeader {
                seq,
                stream: 0,
                send_ns,
            };
            let _ = h.write(p.token, &mut buf[start..start + len]);
        }
        lens[i as usize] = len;
    }
    let mut whole = buf.freeze();
    lens[..n as usize]
        .iter()
        .map(|&len| whole.split_to(len))
        .collect()
}

/// Gives the batch to the stack, each datagram once the stack holds less than a congestion
/// window unsent (its buffer holds `empty` bytes when it holds none), waiting for that at
/// most the poll time. Returns the datagrams and bytes it took, and why it stopped early;
/// a datagram not taken in time is not sent, and the next batch starts at its sequence
/// number.
fn hand_over(
    conn: &QuicConn,
    batch: Vec<Bytes>,
    size: u64,
    empty: usize,
) -> (u64, u64, Option<RoleError>) {
    let (mut sent, mut bytes) = (0u64, 0u64);
    let window = usize::try_from(conn.conn.stats().path.cwnd).unwrap_or(usize::MAX);
    let ahead = window.clamp(MIN_AHEAD, empty.max(MIN_AHEAD));
    for d in batch {
        let len = d.len();
        // The clock is read only once the sender has to wait.
        let mut waiting_since = None;
        let has_room = loop {
            let held = empty.saturating_sub(conn.conn.datagram_send_buffer_space());
            if held + len <= ahead || held == 0 {
                break true;
            }
            let since = *waiting_since.get_or_insert_with(Instant::now);
            if since.elapsed() >= POLL || conn.conn.close_reason().is_some() {
                break false;
            }
            // The congestion controller's pace: a window's worth goes out a round trip.
            std::thread::sleep(AHEAD_POLL);
        };
        if !has_room {
            break;
        }
        let taken = conn.conn.send_datagram(d);
        if let Err(e) = taken {
            return (sent, bytes, Some(send_failed(conn, e, size)));
        }
        sent += 1;
        bytes += len as u64;
    }
    (sent, bytes, None)
}

fn send_failed(conn: &QuicConn, e: SendDatagramError, size: u64) -> RoleError {
    match e {
        SendDatagramError::TooLarge => {
            does_not_fit(conn, size).unwrap_or(RoleError::DatagramTooLarge {
                size,
                max: conn.conn.max_datagram_size().unwrap_or(0),
            })
        }
        SendDatagramError::UnsupportedByPeer | SendDatagramError::Disabled => {
            RoleError::DatagramsRefused
        }
        SendDatagramError::ConnectionLost(e) => RoleError::Send(std::io::Error::other(e)),
    }
}

/// Waits (at most [`FLUSH`]) until the stack sent every datagram it took: until its buffer
/// has the room it had before the first (`empty`).
fn flush(conn: &QuicConn, empty: usize) {
    let start = Instant::now();
    while conn.conn.datagram_send_buffer_space() < empty
        && conn.conn.close_reason().is_none()
        && start.elapsed() < FLUSH
    {
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn snapshot(count: &Count, conn: &QuicConn) -> Snapshot {
    Snapshot {
        quic: Some(QuicWindow::of(conn)),
        ..Snapshot::of(count)
    }
}

/// The receiver's side of the receive loop: the connection's datagrams, up to a batch per
/// wake-up, into [`UdpRx`].
struct DatagramReceive {
    conn: Arc<QuicConn>,
    rx: UdpRx,
    got: Vec<Bytes>,
}

impl Receive for DatagramReceive {
    fn count(&self) -> &Count {
        &self.rx.count
    }

    fn moved(&self) -> u64 {
        self.rx.count.bytes.saturating_add(self.rx.log_bytes())
    }

    fn snapshot(&mut self) -> Snapshot {
        Snapshot {
            bytes: self.rx.count.bytes,
            messages: self.rx.count.messages,
            udp: Some(self.rx.close_interval()),
            tcp: None,
            quic: None,
        }
    }

    fn receive(&mut self, sh: &Shared, _p: &RoleParams) -> Result<Flow, RoleError> {
        let c = &self.conn.conn;
        let got = &mut self.got;
        let read = self.conn.handle.block_on(async {
            // The first within the poll time; then whatever is there already.
            let mut wait = POLL;
            while got.len() < BATCH {
                match tokio::time::timeout(wait, c.read_datagram()).await {
                    Ok(Ok(d)) => got.push(d),
                    Ok(Err(e)) => return Err(e),
                    Err(_) => break,
                }
                wait = Duration::ZERO;
            }
            Ok(())
        });
        let now = sh.now_ns();
        for d in self.got.drain(..) {
            self.rx.on_datagram(&d, now);
        }
        match read {
            Ok(()) => Ok(Flow::More),
            Err(e) => Err(RoleError::Receive(std::io::Error::other(e))),
        }
    }
}

/// The streaming receiver: the connection's datagrams into [`UdpRx`] until the sender's
/// count arrived or the drain time passed; the sender's count then settles the loss.
pub(super) fn quic_datagram_receive(
    s: Box<QuicStream>,
    p: &RoleParams,
    packet_log: Option<LogOut>,
    sh: &Shared,
) -> SideReport {
    let (log, log_start_error) = start_log(packet_log);
    let key = StreamKey {
        token: p.token,
        short: short_datagrams(&p.spec),
    };
    let mut r = DatagramReceive {
        conn: Arc::clone(s.connection()),
        rx: UdpRx::new(sh.epoch_unix_ns, None, key, log),
        got: Vec::with_capacity(BATCH),
    };
    let (intervals, error) = match log_start_error {
        None => recv_loop::run(&mut r, Until::Counted, p, sh),
        Some(e) => (
            Recorder::of(p).finish(sh.now_ns(), || r.snapshot()),
            Some(e),
        ),
    };
    let sent = sh.peer_messages.load(Ordering::Relaxed);
    let sent = (sent != u64::MAX).then(|| sequenced_count(&p.spec, sent));
    let (count, mut udp, log_error, hists, _) = r.rx.finish(sent, p.same_clock);
    sh.keep_hists(hists);
    udp.sequenced = true;
    let mut rep = report(&count, intervals, error.or(log_error.map(RoleError::Log)));
    rep.udp = Some(udp);
    drop(s);
    rep
}
