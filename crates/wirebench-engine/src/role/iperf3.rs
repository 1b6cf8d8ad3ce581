//! The data path of a test with an iperf3 peer: TCP streams are raw bytes (the cookie was
//! sent or read by the driver), UDP datagrams start with iperf3's sec/usec/sequence header
//! ([`UdpHeader`]). One loop per role, kept apart from the wirebench roles so that their hot
//! loops do not branch per packet on the header format.
//!
//! A receiver told to stop keeps reading while its stream's expected total (the sender's
//! count from the results exchange) is not yet reached, for a bounded time: that is how the
//! counts of both sides come out exact for TCP, and how UDP loss counts no datagram that was
//! only still in flight.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use wirebench_proto::error_kind::ErrorKind;
use wirebench_proto::packet_log::{Arrived, Record};
use wirebench_stats::{Arrival, SeqTracker};

use super::limit::{over_counted, MoveLimit};
use super::{payload, DataSocket, POLL};
use crate::iperf3::codec::is_connect;
use crate::iperf3::UdpHeader;
use crate::pace::{wait_until, Pacer};
use crate::packet_log_writer::{LogOut, LogSink};

/// How long a stopped receiver waits for more data once none arrives.
const DRAIN_IDLE: Duration = Duration::from_millis(300);
/// The longest a stopped receiver drains at all.
const DRAIN_MAX: Duration = Duration::from_secs(3);
/// How long a stopped receiver drains before it judges whether the rest comes in time.
const DRAIN_PROBE: Duration = Duration::from_millis(20);

/// What one stream shares with the driver: live counts and the stop.
#[derive(Debug)]
pub(crate) struct Live {
    /// Bytes sent or received so far.
    pub bytes: AtomicU64,
    /// Datagrams (UDP) or writes/reads (TCP) so far.
    pub packets: AtomicU64,
    /// Set to end the role; a receiver then drains up to its target.
    pub stop: AtomicBool,
    /// Set with `stop` when the peer counts nothing more (it sent TEST_END, or is gone):
    /// a sender then ends at once, without waiting for what it wrote to be read.
    pub quit: AtomicBool,
    /// UDP receivers: the highest sequence number seen so far.
    pub max_seq: AtomicU64,
    /// TCP senders: the kernel's figures at the last sample (every [`TCP_SAMPLE`]).
    pub tcp: TcpSample,
    /// Receivers: the sender's final total (bytes for TCP, datagrams for UDP), once known;
    /// `u64::MAX` until then.
    pub target: AtomicU64,
    /// Set by the role when the stream moved more than the server's limits allow: the
    /// driver then ends the whole test.
    pub limited: AtomicBool,
    /// Which limit, and in words: written once, when `limited` is set.
    pub limit_error: Mutex<Option<(ErrorKind, String)>>,
}

impl Default for Live {
    fn default() -> Self {
        Self {
            bytes: AtomicU64::new(0),
            packets: AtomicU64::new(0),
            stop: AtomicBool::new(false),
            quit: AtomicBool::new(false),
            max_seq: AtomicU64::new(0),
            tcp: TcpSample::default(),
            target: AtomicU64::new(u64::MAX),
            limited: AtomicBool::new(false),
            limit_error: Mutex::new(None),
        }
    }
}

/// The longest stall a paced sender makes up for: iperf3 paces to its average rate since
/// the start (`iperf_check_throttle`), so a sender descheduled for a while sends what fell
/// due meanwhile, and the test's rate is the rate asked.
const CATCH_UP: Duration = Duration::from_secs(1);

/// How often a TCP sender samples TCP_INFO (one `getsockopt` a period, never per write).
const TCP_SAMPLE: Duration = Duration::from_millis(100);

/// A TCP sender's last TCP_INFO sample, for the driver's interval records (iperf3's
/// `retransmits`, `snd_cwnd`, `rtt`, `rttvar`, `pmtu`).
#[derive(Debug, Default)]
pub(crate) struct TcpSample {
    /// Retransmissions so far.
    pub retransmits: AtomicU64,
    /// Congestion window, bytes.
    pub snd_cwnd_bytes: AtomicU64,
    /// Smoothed round-trip time, µs.
    pub rtt_us: AtomicU64,
    /// Its variation, µs.
    pub rttvar_us: AtomicU64,
    /// Path MTU, bytes.
    pub pmtu_bytes: AtomicU64,
}

impl TcpSample {
    fn store(&self, i: &crate::sys::SenderTcpInfo) {
        self.retransmits.store(i.retransmits, Ordering::Relaxed);
        self.snd_cwnd_bytes
            .store(i.snd_cwnd_bytes, Ordering::Relaxed);
        self.rtt_us.store(i.rtt_us, Ordering::Relaxed);
        self.rttvar_us.store(i.rttvar_us, Ordering::Relaxed);
        self.pmtu_bytes.store(i.pmtu_bytes, Ordering::Relaxed);
    }

    /// The sample as it stands.
    pub(crate) fn load(&self) -> crate::sys::SenderTcpInfo {
        crate::sys::SenderTcpInfo {
            retransmits: self.retransmits.load(Ordering::Relaxed),
            snd_cwnd_bytes: self.snd_cwnd_bytes.load(Ordering::Relaxed),
            rtt_us: self.rtt_us.load(Ordering::Relaxed),
            rttvar_us: self.rttvar_us.load(Ordering::Relaxed),
            pmtu_bytes: self.pmtu_bytes.load(Ordering::Relaxed),
        }
    }
}

/// A TCP sender's round-trip times over its samples, as iperf3 sums them up at the end
/// (`max_snd_cwnd`, `max_rtt`, `min_rtt`, `mean_rtt`).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct RttSummary {
    /// Largest congestion window seen, bytes.
    pub max_snd_cwnd_bytes: u64,
    /// Largest round-trip time, µs.
    pub max_rtt_us: u64,
    /// Smallest, µs (0 with no sample).
    pub min_rtt_us: u64,
    /// Sum of the samples' round-trip times, µs, and their number.
    pub rtt_sum_us: u64,
    /// Samples taken.
    pub samples: u64,
}

impl RttSummary {
    fn add(&mut self, i: &crate::sys::SenderTcpInfo) {
        self.max_snd_cwnd_bytes = self.max_snd_cwnd_bytes.max(i.snd_cwnd_bytes);
        self.max_rtt_us = self.max_rtt_us.max(i.rtt_us);
        self.min_rtt_us = if self.samples == 0 {
            i.rtt_us
        } else {
            self.min_rtt_us.min(i.rtt_us)
        };
        self.rtt_sum_us = self.rtt_sum_us.saturating_add(i.rtt_us);
        self.samples += 1;
    }

    /// The mean round-trip time, µs.
    pub fn mean_rtt_us(&self) -> u64 {
        self.rtt_sum_us.checked_div(self.samples).unwrap_or(0)
    }
}

/// Samples a TCP sender's TCP_INFO into `live` and `rtt` once `now_ns` reaches `next_ns`.
#[inline]
fn sample_tcp(s: &TcpStream, live: &Live, rtt: &mut RttSummary, now_ns: u64, next_ns: &mut u64) {
    if now_ns < *next_ns {
        return;
    }
    *next_ns = now_ns + TCP_SAMPLE.as_nanos() as u64;
    if let Some(i) = crate::sys::sender_tcp_info(s) {
        live.tcp.store(&i);
        rtt.add(&i);
    }
}

/// How a stream moves data.
#[derive(Debug, Clone)]
pub(crate) struct Plan {
    /// This side sends on the stream.
    pub sender: bool,
    /// Block (write) or datagram size, bytes.
    pub len: usize,
    /// Rate of this stream, bits/s; 0 is unlimited.
    pub rate_bps: u64,
    /// Blocks sent back to back each time the rate allows (iperf3's `-b RATE/BURST`); 0 or
    /// 1 paces each block.
    pub burst: u32,
    /// 64-bit UDP sequence numbers.
    pub wide: bool,
    /// Bytes all sending streams of the side may send together (`-n`), shared.
    pub budget: Option<Arc<AtomicU64>>,
    /// The side's start and its Unix time then, for the UDP timestamps.
    pub start: Instant,
    /// Unix time at `start`, ns.
    pub epoch_unix_ns: u64,
    /// Senders: stop by themselves at this time (ns since `start`); `u64::MAX` for never.
    pub stop_at_ns: u64,
    /// UDP senders: how long they go on once `budget` is spent, ns (0: they stop there),
    /// for a receiver that ends the test only when the whole amount came.
    pub past_budget_ns: u64,
    /// A server's share of its `--max-bytes` and `--max-rate` for this stream, counted on
    /// what the stream moves (an iperf3 client's parameters are only its word).
    pub limit: Option<MoveLimit>,
}

/// What a stream did.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct StreamEnd {
    /// Bytes sent or received.
    pub bytes: u64,
    /// Datagrams (UDP) sent or received.
    pub packets: u64,
    /// UDP receivers: highest sequence number seen.
    pub max_seq: u64,
    /// UDP receivers: datagrams that arrived after a higher sequence number.
    pub out_of_order: u64,
    /// UDP receivers: RFC 3550 jitter at the end, ns.
    pub jitter_ns: f64,
    /// First and last data, ns since the side's start.
    pub first_ns: Option<u64>,
    /// Last data.
    pub last_ns: Option<u64>,
    /// Why the role ended early.
    pub error: Option<String>,
    /// Why, for code: set when a server limit ended the stream.
    pub error_kind: Option<ErrorKind>,
    /// CPU time of the stream's thread, user and system, ns (the thread is the test's own).
    pub cpu_ns: (u64, u64),
    /// TCP senders: the kernel's TCP_INFO at the end.
    pub tcp_info: Option<wirebench_proto::results::TcpInfo>,
    /// TCP senders: congestion window and round-trip times over the samples.
    pub rtt: RttSummary,
}

impl StreamEnd {
    fn add(&mut self, n: usize, now_ns: u64) {
        self.bytes += n as u64;
        self.packets += 1;
        self.first_ns.get_or_insert(now_ns);
        self.last_ns = Some(now_ns);
    }
}

/// Whether the stream has moved more than the server allows by `now_ns`: if so, says why
/// in `end` and tells the driver.
#[inline]
fn over_limit(plan: &Plan, live: &Live, end: &mut StreamEnd, now_ns: u64) -> bool {
    match over_counted(plan.limit.as_ref(), end.bytes, end.packets, now_ns) {
        Some(e) => {
            let text = e.to_string();
            if let Ok(mut l) = live.limit_error.lock() {
                *l = Some((e.kind(), text.clone()));
            }
            end.error = Some(text);
            end.error_kind = Some(e.kind());
            live.limited.store(true, Ordering::Release);
            true
        }
        None => false,
    }
}

/// After a limit ended the stream: it keeps its socket open, reading and dropping what
/// comes, until the driver stops it, so that the iperf3 client hears why on the control
/// connection before its data connection closes under it (a write into a closed
/// connection would be its first, and wrong, error).
fn hold_tcp(s: &mut TcpStream, live: &Live) {
    if !live.limited.load(Ordering::Relaxed) {
        return;
    }
    let _ = s.set_read_timeout(Some(POLL));
    let mut buf = [0u8; 16 * 1024];
    while !live.stop.load(Ordering::Relaxed) {
        match s.read(&mut buf) {
            Ok(0) => return,
            Ok(_) => {}
            Err(e) if is_timeout(&e) => {}
            Err(_) => return,
        }
    }
}

/// [`hold_tcp`] for a UDP stream: a closed socket would answer the client's datagrams
/// with ICMP port unreachable.
fn hold_udp(s: &UdpSocket, live: &Live) {
    if !live.limited.load(Ordering::Relaxed) {
        return;
    }
    let _ = s.set_read_timeout(Some(POLL));
    let mut buf = [0u8; 2048];
    while !live.stop.load(Ordering::Relaxed) {
        match s.recv(&mut buf) {
            Ok(_) => {}
            Err(e) if is_timeout(&e) || e.kind() == std::io::ErrorKind::ConnectionRefused => {}
            Err(_) => return,
        }
    }
}

/// Takes up to `want` bytes from the shared budget; 0 when it is spent.
fn reserve(budget: Option<&AtomicU64>, want: u64) -> u64 {
    let Some(b) = budget else {
        return want;
    };
    let mut left = b.load(Ordering::Relaxed);
    loop {
        let take = left.min(want);
        if take == 0 {
            return 0;
        }
        match b.compare_exchange_weak(left, left - take, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => return take,
            Err(now) => left = now,
        }
    }
}

fn is_timeout(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::WouldBlock
            | std::io::ErrorKind::TimedOut
            | std::io::ErrorKind::Interrupted
    )
}

/// Runs one stream's role to its end; a UDP receiver writes `log` (`--packet-log`).
pub(crate) fn run(sock: DataSocket, plan: &Plan, live: &Live, log: Option<LogOut>) -> StreamEnd {
    let mut end = match (sock, plan.sender) {
        (DataSocket::Tcp(s), true) => tcp_send(s, plan, live),
        (DataSocket::Tcp(s), false) => tcp_receive(s, plan, live),
        (DataSocket::Udp(s), true) => udp_send(&s, plan, live),
        (DataSocket::Udp(s), false) => udp_receive(&s, plan, live, log),
        // The iperf3 client opens kernel sockets only.
        (DataSocket::User(_) | DataSocket::Quic(_), _) => StreamEnd::default(),
    };
    end.cpu_ns = crate::sys::thread_cpu_ns();
    end
}

/// When a paced sender may send next: now while a burst lasts (`burst_left` blocks
/// still to go back to back), else the pacer's time, and a new burst starts when it is due.
#[inline]
fn next_due(pacer: &mut Pacer, burst: u32, burst_left: &mut u32, now: u64) -> u64 {
    if *burst_left > 0 {
        return now;
    }
    let due = pacer.next_ns(now);
    if due <= now {
        *burst_left = burst.max(1);
    }
    due
}

/// The packet log of a UDP stream from an iperf3 sender, in wirebench's format: iperf3
/// numbers its datagrams from 1, the log from 0 (`seq` is iperf3's number minus one), so
/// that, as for wirebench senders, every number below the sender's count is covered by one
/// `received` record or one `lost` run.
struct PacketLog {
    sink: LogSink,
    seq: SeqTracker,
}

impl PacketLog {
    fn start(out: LogOut) -> std::io::Result<Self> {
        Ok(Self {
            sink: LogSink::start(out)?,
            seq: SeqTracker::new(),
        })
    }

    /// A datagram with iperf3's sequence number `seq` arrived.
    #[inline]
    fn datagram(&mut self, seq: u64, size: usize, send_unix_ns: u64, arrival_unix_ns: u64) {
        let seq = seq.saturating_sub(1);
        let sink = &mut self.sink;
        let arrival = self.seq.record_with(seq, &mut |run| {
            sink.push(&Record::Lost {
                first: run.first,
                count: run.count,
            })
        });
        let kind = match arrival {
            Arrival::Duplicate => Arrived::Duplicate,
            Arrival::TooOld => Arrived::TooOld,
            _ => Arrived::Received,
        };
        self.sink.push(&Record::Datagram {
            kind,
            seq,
            size: u32::try_from(size).unwrap_or(u32::MAX),
            send_unix_ns,
            arrival_unix_ns,
        });
    }

    /// The sender sent `sent` datagrams (unknown: as far as the highest that came): the
    /// last loss runs, and the log written out.
    fn finish(mut self, sent: Option<u64>) -> Result<u64, crate::packet_log_writer::LogError> {
        let sent = sent.unwrap_or_else(|| self.seq.highest().map_or(0, |h| h + 1));
        let sink = &mut self.sink;
        self.seq.finish_with(sent, &mut |run| {
            sink.push(&Record::Lost {
                first: run.first,
                count: run.count,
            })
        });
        self.sink.finish()
    }
}

fn now_ns(plan: &Plan) -> u64 {
    plan.start.elapsed().as_nanos() as u64
}

fn tcp_send(mut s: TcpStream, plan: &Plan, live: &Live) -> StreamEnd {
    let buf = payload(plan.len as u64);
    let _ = s.set_write_timeout(Some(POLL));
    let mut pacer = Pacer::new(plan.rate_bps, 0, 0).with_max_lag_ns(CATCH_UP.as_nanos() as u64);
    let mut end = StreamEnd::default();
    let mut burst_left = 0;
    let mut next_sample = 0;
    while !live.stop.load(Ordering::Relaxed) {
        let now = now_ns(plan);
        if now >= plan.stop_at_ns {
            break;
        }
        sample_tcp(&s, live, &mut end.rtt, now, &mut next_sample);
        let due = next_due(&mut pacer, plan.burst, &mut burst_left, now);
        if due > now {
            wait_until(plan.start, due.min(now + POLL.as_nanos() as u64));
            continue;
        }
        burst_left -= 1;
        let len = reserve(plan.budget.as_deref(), buf.len() as u64) as usize;
        if len == 0 {
            break;
        }
        let mut off = 0;
        while off < len {
            match s.write(&buf[off..len]) {
                Ok(0) => {
                    end.error = Some("the peer closed the data connection".into());
                    break;
                }
                Ok(n) => off += n,
                Err(e) if is_timeout(&e) => {
                    if live.stop.load(Ordering::Relaxed) {
                        break;
                    }
                }
                Err(e) => {
                    end.error = Some(format!("sending: {e}"));
                    break;
                }
            }
        }
        let now = now_ns(plan);
        end.add(off, now);
        pacer.sent(off as u64, now);
        live.bytes.store(end.bytes, Ordering::Relaxed);
        live.packets.store(end.packets, Ordering::Relaxed);
        if end.error.is_none() && over_limit(plan, live, &mut end, now) {
            break;
        }
        if end.error.is_some() || off < len {
            // A write cut short by the stop: what went out is counted; give the rest back.
            if let Some(b) = plan.budget.as_deref() {
                b.fetch_add((len - off) as u64, Ordering::Relaxed);
            }
            break;
        }
    }
    end.tcp_info = crate::sys::tcp_info(&s);
    sample_tcp(&s, live, &mut end.rtt, 0, &mut 0);
    if live.limited.load(Ordering::Relaxed) {
        hold_tcp(&mut s, live);
        return end;
    }
    // iperf3 counts what it read until TEST_END arrives and drops what its socket still
    // holds then (`iperf_handle_message_server` closes the streams unread): before the
    // driver sends it, let what was written reach the peer (acknowledged) and, when the peer
    // runs on this host, its application (read), at most a bounded time, so that its count
    // and this one agree. A remote peer's unread bytes cannot be seen from here.
    // A peer that counts no more (it ended the test, or is gone) is not waited for.
    let until = Instant::now() + DRAIN_MAX;
    let local = is_local_peer(&s);
    while Instant::now() < until
        && !live.quit.load(Ordering::Relaxed)
        && (crate::sys::tcp_all_acked(&s) == Some(false)
            || (local && peer_unread_bytes(&s).is_some_and(|n| n > 0)))
    {
        std::thread::sleep(Duration::from_millis(2));
    }
    end
}

/// Whether the peer of `s` runs on this host: loopback, or our own address (the kernel then
/// lists both ends of the connection in `/proc/net/tcp`).
fn is_local_peer(s: &TcpStream) -> bool {
    match (s.local_addr(), s.peer_addr()) {
        (Ok(l), Ok(p)) => p.ip().is_loopback() || p.ip() == l.ip(),
        _ => false,
    }
}

/// `/proc/net/tcp`'s spelling of an address: each 32-bit word of the address in hex as the
/// kernel holds it (network order read as a native integer), then the port.
fn proc_net_addr(a: SocketAddr) -> String {
    let words: Vec<u8> = match a.ip() {
        std::net::IpAddr::V4(v4) => v4.octets().to_vec(),
        std::net::IpAddr::V6(v6) => v6.octets().to_vec(),
    };
    let mut out = String::with_capacity(42);
    for w in words.chunks_exact(4) {
        let word = u32::from_ne_bytes([w[0], w[1], w[2], w[3]]);
        out.push_str(&format!("{word:08X}"));
    }
    out.push_str(&format!(":{:04X}", a.port()));
    out
}

/// The bytes the peer's socket of `s` holds unread (its `rx_queue` in `/proc/net/tcp`),
/// for a peer on this host; `None` when its socket is not listed.
fn peer_unread_bytes(s: &TcpStream) -> Option<u64> {
    let (local, peer) = (s.local_addr().ok()?, s.peer_addr().ok()?);
    let table = if local.is_ipv4() {
        "/proc/net/tcp"
    } else {
        "/proc/net/tcp6"
    };
    let text = std::fs::read_to_string(table).ok()?;
    rx_queue_of(&text, &proc_net_addr(peer), &proc_net_addr(local))
}

/// The `rx_queue` of the socket from `local` to `remote` in a `/proc/net/tcp` table.
fn rx_queue_of(table: &str, local: &str, remote: &str) -> Option<u64> {
    table.lines().skip(1).find_map(|line| {
        let mut f = line.split_whitespace().skip(1);
        let (l, r, _state, queues) = (f.next()?, f.next()?, f.next()?, f.next()?);
        if l != local || r != remote {
            return None;
        }
        let (_tx, rx) = queues.split_once(':')?;
        u64::from_str_radix(rx, 16).ok()
    })
}

/// Where a stopped receiver's drain stands: when it began, and the count then.
#[derive(Debug, Clone, Copy)]
struct Drain {
    at: Instant,
    count: u64,
}

/// Whether a stopped receiver is done: its target reached, or no data for a while, or
/// draining too long, or arriving too slowly to reach the target soon (a paced sender's
/// socket still holds what it wrote: `--fq-rate`); `count` is bytes or datagrams.
fn drained(live: &Live, count: u64, drain: &mut Option<Drain>, last_data: Instant) -> bool {
    if !live.stop.load(Ordering::Relaxed) {
        return false;
    }
    let d = *drain.get_or_insert_with(|| Drain {
        at: Instant::now(),
        count,
    });
    let target = live.target.load(Ordering::Relaxed);
    if target == u64::MAX || count >= target || live.quit.load(Ordering::Relaxed) {
        // No sender's count to wait for: what arrived by the stop is what counts.
        return true;
    }
    let spent = d.at.elapsed();
    if last_data.elapsed() >= DRAIN_IDLE || spent >= DRAIN_MAX {
        return true;
    }
    !drain_on_time(target - count, count - d.count, spent)
}

/// Whether `left` more, at the pace `got` arrived in the `spent` draining so far, arrive
/// within [`DRAIN_IDLE`] of the drain's start (judged after [`DRAIN_PROBE`]).
fn drain_on_time(left: u64, got: u64, spent: Duration) -> bool {
    if spent < DRAIN_PROBE {
        return true;
    }
    // left / (got / spent) <= DRAIN_IDLE - spent, without dividing by a zero `got`.
    let budget = DRAIN_IDLE.saturating_sub(spent).as_nanos();
    u128::from(left) * spent.as_nanos() <= u128::from(got) * budget
}

fn tcp_receive(mut s: TcpStream, plan: &Plan, live: &Live) -> StreamEnd {
    let mut buf = vec![0u8; plan.len.clamp(1024, 1 << 20)];
    let _ = s.set_read_timeout(Some(POLL));
    let mut end = StreamEnd::default();
    let mut drain = None;
    let mut last_data = Instant::now();
    loop {
        if drained(live, end.bytes, &mut drain, last_data) {
            break;
        }
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                let now = now_ns(plan);
                end.add(n, now);
                last_data = Instant::now();
                live.bytes.store(end.bytes, Ordering::Relaxed);
                if over_limit(plan, live, &mut end, now) {
                    break;
                }
            }
            Err(e) if is_timeout(&e) => {}
            Err(e) => {
                end.error = Some(format!("receiving: {e}"));
                break;
            }
        }
    }
    hold_tcp(&mut s, live);
    end
}

fn udp_send(s: &UdpSocket, plan: &Plan, live: &Live) -> StreamEnd {
    let mut buf = payload(plan.len as u64);
    let _ = s.set_write_timeout(Some(POLL));
    let mut pacer = Pacer::new(plan.rate_bps, 0, 0).with_max_lag_ns(CATCH_UP.as_nanos() as u64);
    let mut end = StreamEnd::default();
    let mut seq = 0u64;
    let mut burst_left = 0;
    let mut past_budget = None;
    while !live.stop.load(Ordering::Relaxed) {
        let now = now_ns(plan);
        if now >= plan.stop_at_ns {
            break;
        }
        let due = next_due(&mut pacer, plan.burst, &mut burst_left, now);
        if due > now {
            wait_until(plan.start, due.min(now + POLL.as_nanos() as u64));
            continue;
        }
        burst_left -= 1;
        let mut len = reserve(plan.budget.as_deref(), buf.len() as u64) as usize;
        if len == 0 {
            let until = *past_budget.get_or_insert(now.saturating_add(plan.past_budget_ns));
            if now >= until {
                break;
            }
            len = buf.len();
        }
        let unix = plan.epoch_unix_ns + now;
        let h = UdpHeader {
            sec: (unix / 1_000_000_000) as u32,
            usec: (unix % 1_000_000_000 / 1000) as u32,
            seq: seq + 1,
        };
        if h.encode(plan.wide, &mut buf).is_err() {
            end.error = Some("the datagram is shorter than iperf3's header".into());
            break;
        }
        match s.send(&buf[..len.max(UdpHeader::len(plan.wide))]) {
            Ok(n) => {
                seq += 1;
                end.add(n, now);
                pacer.sent(n as u64, now);
                live.bytes.store(end.bytes, Ordering::Relaxed);
                live.packets.store(end.packets, Ordering::Relaxed);
                if over_limit(plan, live, &mut end, now) {
                    break;
                }
            }
            // A full socket buffer or a refused port (nobody listening yet): not sent.
            Err(e) if is_timeout(&e) || e.kind() == std::io::ErrorKind::ConnectionRefused => {
                if let Some(b) = plan.budget.as_deref() {
                    b.fetch_add(len as u64, Ordering::Relaxed);
                }
            }
            Err(e) => {
                end.error = Some(format!("sending: {e}"));
                break;
            }
        }
    }
    hold_udp(s, live);
    end
}

fn udp_receive(s: &UdpSocket, plan: &Plan, live: &Live, log: Option<LogOut>) -> StreamEnd {
    let mut buf = vec![0u8; 65_536];
    let _ = s.set_read_timeout(Some(POLL));
    let mut end = StreamEnd::default();
    let mut log = match log.map(PacketLog::start) {
        Some(Ok(l)) => Some(l),
        Some(Err(e)) => {
            end.error = Some(format!("packet log: {e}"));
            return end;
        }
        None => None,
    };
    let mut drain = None;
    let mut last_data = Instant::now();
    let mut prev_transit: Option<i64> = None;
    let mut jitter = 0.0f64;
    loop {
        if drained(live, end.packets, &mut drain, last_data) {
            break;
        }
        let n = match s.recv(&mut buf) {
            Ok(n) => n,
            Err(e) if is_timeout(&e) || e.kind() == std::io::ErrorKind::ConnectionRefused => {
                continue
            }
            Err(e) => {
                end.error = Some(format!("receiving: {e}"));
                break;
            }
        };
        // A repeated connect datagram is set-up, not data.
        if n == 4 && is_connect(&buf[..4]) {
            continue;
        }
        let Ok(h) = UdpHeader::decode(plan.wide, &buf[..n]) else {
            continue;
        };
        let now = now_ns(plan);
        last_data = Instant::now();
        end.add(n, now);
        if h.seq > end.max_seq {
            end.max_seq = h.seq;
            live.max_seq.store(h.seq, Ordering::Relaxed);
        } else {
            end.out_of_order += 1;
        }
        // RFC 3550 §6.4.1 on the sender's timestamp, as iperf3 does (its clocks need not
        // agree: only the changes of the transit time count).
        let sent_ns = i64::from(h.sec) * 1_000_000_000 + i64::from(h.usec) * 1000;
        let transit = (plan.epoch_unix_ns + now) as i64 - sent_ns;
        if let Some(l) = log.as_mut() {
            l.datagram(h.seq, n, sent_ns.max(0) as u64, plan.epoch_unix_ns + now);
        }
        if let Some(p) = prev_transit {
            let d = (transit - p).unsigned_abs() as f64;
            jitter += (d - jitter) / 16.0;
        }
        prev_transit = Some(transit);
        live.bytes.store(end.bytes, Ordering::Relaxed);
        live.packets.store(end.packets, Ordering::Relaxed);
        if over_limit(plan, live, &mut end, now) {
            break;
        }
    }
    hold_udp(s, live);
    end.jitter_ns = jitter;
    if let Some(l) = log {
        let target = live.target.load(Ordering::Relaxed);
        if let Err(e) = l.finish((target != u64::MAX).then_some(target)) {
            end.error.get_or_insert(e.to_string());
        }
    }
    end
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A drain goes on while the rest arrives soon at the pace seen, and gives up at once
    /// when it would take long (a paced sender's socket full of what it wrote).
    #[test]
    fn a_drain_judges_the_rest_by_the_pace_it_sees() {
        let ms = Duration::from_millis;
        assert!(drain_on_time(1 << 30, 0, ms(5)), "too early to judge");
        // 1 MB in 20 ms: 1 MB more comes in 20 ms more, well within the allowance.
        assert!(drain_on_time(1_000_000, 1_000_000, ms(20)));
        // 12.5 kB in 20 ms (5 Mbit/s): 4 MB more would take 6.4 s.
        assert!(!drain_on_time(4_000_000, 12_500, ms(20)));
        assert!(!drain_on_time(1, 0, ms(20)), "nothing came");
        assert!(!drain_on_time(1, 1 << 40, DRAIN_IDLE), "past the allowance");
    }

    /// Bursts go back to back, then the pacer's schedule rules again.
    #[test]
    fn a_burst_sends_its_blocks_back_to_back() {
        // 1 Mbit/s in 1000-byte blocks: one every 8 ms.
        let mut pacer = Pacer::new(1_000_000, 0, 0);
        let mut left = 0;
        let mut now = 0u64;
        let mut sent_at = Vec::new();
        while sent_at.len() < 8 {
            let due = next_due(&mut pacer, 4, &mut left, now);
            if due > now {
                now = due;
                continue;
            }
            left -= 1;
            pacer.sent(1000, now);
            sent_at.push(now);
        }
        // Four at once, then four more 32 ms later (four blocks' worth of the rate).
        assert!(sent_at[..4].iter().all(|t| *t == sent_at[0]), "{sent_at:?}");
        assert!(sent_at[4..].iter().all(|t| *t == sent_at[4]), "{sent_at:?}");
        let gap = sent_at[4] - sent_at[0];
        assert!((31_000_000..=33_000_000).contains(&gap), "{gap}");
    }

    /// After a stall the sender makes up what fell due, as iperf3's average-rate throttle
    /// does (the default pacer drops a stall over 10 ms: a loaded host's test fell 3% short).
    #[test]
    fn a_paced_sender_catches_up_on_a_stall() {
        // 8 Mbit/s in 1000-byte blocks: one a millisecond.
        let mut p = Pacer::new(8_000_000, 0, 0).with_max_lag_ns(CATCH_UP.as_nanos() as u64);
        p.sent(1000, 0);
        // Stalled 500 ms: the 500 blocks due by then go one after another.
        let stalled = 500_000_000;
        for _ in 0..500 {
            assert!(p.next_ns(stalled) <= stalled);
            p.sent(1000, stalled);
        }
        assert!(p.next_ns(stalled) > stalled, "caught up, then paced again");
        let mut dropped = Pacer::new(8_000_000, 0, 0);
        dropped.sent(1000, 0);
        dropped.next_ns(stalled);
        dropped.sent(1000, stalled);
        assert!(
            dropped.next_ns(stalled) > stalled,
            "the default forgets the stall"
        );
    }

    #[test]
    fn round_trip_times_sum_up_as_iperf3s() {
        let mut r = RttSummary::default();
        assert_eq!(r.mean_rtt_us(), 0);
        for (rtt, cwnd) in [(30, 100), (10, 300), (20, 200)] {
            r.add(&crate::sys::SenderTcpInfo {
                rtt_us: rtt,
                snd_cwnd_bytes: cwnd,
                ..Default::default()
            });
        }
        assert_eq!((r.min_rtt_us, r.max_rtt_us, r.mean_rtt_us()), (10, 30, 20));
        assert_eq!(r.max_snd_cwnd_bytes, 300);
    }

    #[test]
    fn the_budget_is_shared_exactly() {
        let b = AtomicU64::new(2500);
        assert_eq!(reserve(Some(&b), 1000), 1000);
        assert_eq!(reserve(Some(&b), 1000), 1000);
        assert_eq!(reserve(Some(&b), 1000), 500);
        assert_eq!(reserve(Some(&b), 1000), 0);
        assert_eq!(reserve(None, 7), 7);
    }

    #[test]
    fn the_peers_unread_bytes_are_read_from_its_line_of_proc_net_tcp() {
        let table = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
   0: 0100007F:1451 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1 0 100 0 0 10 0\n\
   1: 0100007F:1451 0100007F:9C40 01 00000000:0001F400 00:00000000 00000000     0        0 2 1 0 20 4 30 10 -1\n";
        let server = proc_net_addr(SocketAddr::from(([127, 0, 0, 1], 5201)));
        let client = proc_net_addr(SocketAddr::from(([127, 0, 0, 1], 40000)));
        if cfg!(target_endian = "little") {
            assert_eq!(server, "0100007F:1451");
        }
        assert_eq!(rx_queue_of(table, &server, &client), Some(128_000));
        assert_eq!(rx_queue_of(table, &client, &server), None);
    }
}
