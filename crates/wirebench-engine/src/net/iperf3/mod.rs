//! The driver of tests with iperf3 peers: sockets and threads around the sans-IO sessions
//! of [`crate::iperf3`]. [`client`] runs `wirebench run --iperf3`; [`server`] answers iperf3
//! clients on the server's port (told apart by their first byte) or on `--iperf3-port`.

pub(crate) mod client;
mod output;
mod output_text;
pub(crate) mod peer;
pub(crate) mod registry;
pub(crate) mod server;

use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use socket2::SockRef;
use wirebench_proto::error_kind::ErrorKind;
use wirebench_proto::results::{IntervalRecord, Role, SideReport, UdpCounts};

use super::roles::Watch;
use super::Pump;
use crate::control::Session;
use crate::iperf3::codec::stream_id;
use crate::iperf3::{ResultsDoc, StreamResult};
use crate::packet_log_writer::LogOut;
use crate::role::iperf3::{Live, Plan, StreamEnd};
use crate::role::DataSocket;
use crate::EngineError;

/// Sets the socket buffers both ways (`-w`), as iperf3 does for its data sockets.
fn set_window(s: SockRef<'_>, window: u64) {
    if window > 0 {
        let w = usize::try_from(window).unwrap_or(usize::MAX);
        let _ = s.set_send_buffer_size(w);
        let _ = s.set_recv_buffer_size(w);
    }
}

/// The buffers of a UDP data socket without `-w`: as large as wirebench's own UDP data
/// sockets ask for (`sys::sockopt::DATA_BUFFER_BYTES`, capped by `net.core.rmem_max`), so
/// that a receiver descheduled for a moment does not lose what the kernel would hold.
const UDP_BUFFER_BYTES: u64 = 4 * 1024 * 1024;

/// [`set_window`] for a UDP data socket: `-w`, or wirebench's UDP default.
fn set_udp_window(s: SockRef<'_>, window: u64) {
    set_window(s, if window > 0 { window } else { UDP_BUFFER_BYTES });
}

/// A side's streams on their threads.
struct Streams {
    senders: Vec<bool>,
    udp: bool,
    live: Vec<Arc<Live>>,
    threads: Vec<Option<JoinHandle<StreamEnd>>>,
    ends: Vec<Option<StreamEnd>>,
    start: Instant,
    /// Interval sampling for the live lines: the last boundary and the totals then.
    next_interval: Duration,
    interval: Duration,
    last_bytes: u64,
    last_packets: u64,
    /// Each stream's bytes, datagrams and retransmissions at the last boundary: its own
    /// line of the interval (`-P`), as iperf3 prints one per stream.
    last_stream: Vec<(u64, u64, u64)>,
    intervals: Vec<IntervalRecord>,
    /// When the omitted seconds (`-O`) end, from the start, until they have.
    omit_until: Option<Duration>,
    /// Each stream's counts when they ended: what its results leave out.
    omitted: Vec<Omitted>,
    /// How long the omitted seconds were (zero without `-O`).
    omitted_for: Duration,
    /// When the test ended on this side, from the start: TEST_END sent (the client) or
    /// read (the server). iperf3's streams end there, so a stream's time is the test's,
    /// not its first to last byte (a 3.21 client ends an `-n` test on its next second).
    ended: Option<Duration>,
    /// The server's output, when the iperf3 client asked for it.
    output: Option<output::ServerOutput>,
}

/// A stream's counts when the omitted seconds (`-O`) ended, as iperf3's `iperf_reset_stats`
/// keeps them: bytes, datagrams, and the highest sequence number received.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct Omitted {
    bytes: u64,
    packets: u64,
    max_seq: u64,
}

impl Streams {
    /// Starts one thread per stream.
    /// The first receiving stream writes `log` (`--packet-log`), if given.
    fn start(
        socks: Vec<DataSocket>,
        senders: Vec<bool>,
        plan: &Plan,
        interval: Duration,
        mut log: Option<LogOut>,
    ) -> Result<Self, EngineError> {
        let udp = matches!(socks.first(), Some(DataSocket::Udp(_)));
        let mut live = Vec::new();
        let mut threads = Vec::new();
        for (i, (sock, sender)) in socks.into_iter().zip(&senders).enumerate() {
            let l = Arc::new(Live::default());
            live.push(Arc::clone(&l));
            let plan = Plan {
                sender: *sender,
                ..plan.clone()
            };
            let log = if *sender { None } else { log.take() };
            let t = std::thread::Builder::new()
                .name(format!("wirebench-iperf3-{i}"))
                .spawn(move || crate::role::iperf3::run(sock, &plan, &l, log))
                .map_err(|e| EngineError::io("starting a data thread", e))?;
            threads.push(Some(t));
        }
        let n = threads.len();
        Ok(Self {
            senders,
            udp,
            live,
            threads,
            ends: vec![None; n],
            start: plan.start,
            next_interval: interval,
            interval,
            last_bytes: 0,
            last_packets: 0,
            last_stream: vec![(0, 0, 0); n],
            intervals: Vec::new(),
            omit_until: None,
            omitted: vec![Omitted::default(); n],
            omitted_for: Duration::ZERO,
            ended: None,
            output: None,
        })
    }

    /// Leaves the first `omit` of the test out of the results (iperf3's `-O`).
    fn omit(&mut self, omit: Duration) {
        self.omit_until = (!omit.is_zero()).then_some(omit);
    }

    /// Once the omitted seconds are over: each stream's counts then, which its results
    /// leave out.
    fn end_omit(&mut self, elapsed: Duration) {
        let Some(at) = self.omit_until.filter(|at| elapsed >= *at) else {
            return;
        };
        for (o, l) in self.omitted.iter_mut().zip(&self.live) {
            *o = Omitted {
                bytes: l.bytes.load(Ordering::Relaxed),
                packets: l.packets.load(Ordering::Relaxed),
                max_seq: l.max_seq.load(Ordering::Relaxed),
            };
        }
        self.omit_until = None;
        self.omitted_for = at;
    }

    /// Live total of the streams this side sends (`true`) or receives on.
    fn total(&self, sending: bool) -> u64 {
        self.live
            .iter()
            .zip(&self.senders)
            .filter(|(_, s)| **s == sending)
            .map(|(l, _)| l.bytes.load(Ordering::Relaxed))
            .sum()
    }

    /// Whether every sending stream has ended by itself (its share of `-n` sent).
    fn senders_finished(&self) -> bool {
        self.threads
            .iter()
            .zip(&self.senders)
            .all(|(t, s)| !*s || t.as_ref().is_none_or(JoinHandle::is_finished))
    }

    /// Closes the intervals due and shows them (the first direction's streams).
    fn watch(&mut self, watch: &mut dyn Watch, force: bool) {
        let shown = self.senders.first().copied().unwrap_or(true);
        let role = if shown { Role::Sender } else { Role::Receiver };
        let elapsed = self.start.elapsed();
        self.end_omit(elapsed);
        let (bytes, packets) = self
            .live
            .iter()
            .zip(&self.senders)
            .filter(|(_, s)| **s == shown)
            .fold((0, 0), |(b, p), (l, _)| {
                (
                    b + l.bytes.load(Ordering::Relaxed),
                    p + l.packets.load(Ordering::Relaxed),
                )
            });
        watch.progress(elapsed, bytes, packets);
        if elapsed >= self.next_interval || (force && bytes > self.last_bytes) {
            let start = self.next_interval.saturating_sub(self.interval);
            let mut rec = IntervalRecord {
                start_ns: start.as_nanos() as u64,
                end_ns: elapsed.min(self.next_interval).as_nanos() as u64,
                bytes: bytes - self.last_bytes,
                messages: packets - self.last_packets,
                ..IntervalRecord::default()
            };
            self.last_bytes = bytes;
            self.last_packets = packets;
            self.next_interval += self.interval;
            if let Some(mut out) = self.output.take() {
                let end = elapsed.min(self.next_interval - self.interval);
                let omitted = self.omit_until.is_some() || end <= self.omitted_for;
                out.interval(self, start, end, omitted);
                self.output = Some(out);
            }
            rec.retransmits = self.stream_intervals(watch, role, shown, &rec);
            watch.interval(role, &rec);
            self.intervals.push(rec);
        }
    }

    /// Each shown stream's part of the interval `sum`, to `watch` before the sum (its index
    /// among the shown streams): bytes and datagrams, and a TCP sender's retransmissions
    /// and window from its TCP_INFO. Returns the streams' retransmissions in all (TCP
    /// senders only).
    fn stream_intervals(
        &mut self,
        watch: &mut dyn Watch,
        role: Role,
        shown: bool,
        sum: &IntervalRecord,
    ) -> Option<u64> {
        let mut k = 0u32;
        let mut total = None;
        for ((live, sending), last) in self
            .live
            .iter()
            .zip(&self.senders)
            .zip(&mut self.last_stream)
        {
            if *sending != shown {
                continue;
            }
            let bytes = live.bytes.load(Ordering::Relaxed);
            let packets = live.packets.load(Ordering::Relaxed);
            let tcp = (!self.udp && *sending).then(|| live.tcp.load());
            let retrans = tcp.map_or(0, |t| t.retransmits);
            let rec = IntervalRecord {
                start_ns: sum.start_ns,
                end_ns: sum.end_ns,
                bytes: bytes.saturating_sub(last.0),
                messages: packets.saturating_sub(last.1),
                retransmits: tcp.map(|_| retrans.saturating_sub(last.2)),
                cwnd_bytes: tcp.map(|t| t.snd_cwnd_bytes).filter(|&c| c > 0),
                ..IntervalRecord::default()
            };
            *last = (bytes, packets, retrans);
            if let Some(r) = rec.retransmits {
                *total.get_or_insert(0) += r;
            }
            watch.stream_interval(role, k, &rec);
            k += 1;
        }
        total
    }

    /// Whether a stream moved more than the server's limits allow (the test then ends).
    fn limited(&self) -> bool {
        self.live.iter().any(|l| l.limited.load(Ordering::Relaxed))
    }

    /// The server limit that ended a stream, and in words, if one did.
    fn limit_error(&self) -> Option<(ErrorKind, String)> {
        self.live
            .iter()
            .filter(|l| l.limited.load(Ordering::Acquire))
            .find_map(|l| l.limit_error.lock().ok().and_then(|e| e.clone()))
    }

    /// Stops every stream at once (the test ended early: nobody counts what is still on
    /// its way) and waits for them.
    fn stop_all(&mut self) {
        for l in &self.live {
            l.quit.store(true, Ordering::Relaxed);
        }
        self.stop_where(|_| true);
    }

    /// Notes that the test ended now (TEST_END sent or read), once.
    fn mark_ended(&mut self) {
        let now = self.start.elapsed();
        self.ended.get_or_insert(now);
    }

    /// Stops the sending streams and waits for them.
    fn stop_senders(&mut self) {
        self.stop_where(|s| s);
    }

    /// Stops the sending streams at once, waiting for none of their bytes to be read: the
    /// peer ended the test and counts no more (iperf3 counts only while the test runs).
    fn quit_senders(&mut self) {
        for (l, s) in self.live.iter().zip(&self.senders) {
            if *s {
                l.quit.store(true, Ordering::Relaxed);
            }
        }
        self.stop_where(|s| s);
    }

    /// Tells each receiving stream the sender's total (by iperf3 stream id) from the peer's
    /// results, stops them, and waits until they have drained to it.
    fn finish_receivers(&mut self, peer: Option<&ResultsDoc>) {
        for (i, (l, s)) in self.live.iter().zip(&self.senders).enumerate() {
            if *s {
                continue;
            }
            let theirs = peer.and_then(|d| d.streams.iter().find(|r| r.id == stream_id(i)));
            if let Some(r) = theirs {
                let target = if self.udp { r.packets } else { r.bytes };
                l.target.store(target, Ordering::Relaxed);
            }
        }
        self.stop_where(|s| !s);
    }

    fn stop_where(&mut self, which: fn(bool) -> bool) {
        for (l, s) in self.live.iter().zip(&self.senders) {
            if which(*s) {
                l.stop.store(true, Ordering::Relaxed);
            }
        }
        for (i, s) in self.senders.clone().into_iter().enumerate() {
            if which(s) {
                if let Some(t) = self.threads[i].take() {
                    self.ends[i] = Some(t.join().unwrap_or_else(|_| StreamEnd {
                        error: Some("a data thread failed".into()),
                        ..StreamEnd::default()
                    }));
                }
            }
        }
    }

    /// What each stream has done so far (ended ones exactly, running ones live).
    fn snapshot(&self, i: usize) -> StreamEnd {
        self.ends[i].clone().unwrap_or_else(|| StreamEnd {
            bytes: self.live[i].bytes.load(Ordering::Relaxed),
            packets: self.live[i].packets.load(Ordering::Relaxed),
            ..StreamEnd::default()
        })
    }

    /// This side's results for the exchange, in iperf3's terms (`send_results`); `peer`
    /// (the other side's results, when already known) gives the senders' counts that make
    /// UDP loss exact.
    fn results_doc(&self, peer: Option<&ResultsDoc>, congestion: Option<String>) -> ResultsDoc {
        let streams: Vec<StreamResult> = (0..self.senders.len())
            .map(|i| self.stream_result(i, peer))
            .collect();
        let sending = self.senders.iter().any(|s| *s);
        // iperf3: -1 from a side that only receives, 1 from a TCP sender on Linux.
        let sender_has_retransmits = match (sending, self.udp) {
            (false, _) => -1,
            (true, false) => 1,
            (true, true) => 0,
        };
        let (user, system) = (0..self.senders.len())
            .map(|i| self.snapshot(i).cpu_ns)
            .fold((0u64, 0u64), |(u, s), (a, b)| (u + a, s + b));
        let wall = self.start.elapsed().as_nanos().max(1) as f64;
        let pct = |ns: u64| ns as f64 * 100.0 / wall;
        ResultsDoc {
            cpu_util_total: pct(user + system),
            cpu_util_user: pct(user),
            cpu_util_system: pct(system),
            sender_has_retransmits,
            congestion_used: congestion,
            streams,
        }
    }

    /// One stream's figures as iperf3 reports them: bytes after the omitted seconds; a UDP
    /// receiver's `packets` the datagrams the sender sent up to the last one counted
    /// (received and lost, iperf3's highest sequence number), so that the peer's loss
    /// percentage, `errors` over `packets`, is right.
    fn stream_result(&self, i: usize, peer: Option<&ResultsDoc>) -> StreamResult {
        let e = self.snapshot(i);
        let o = self.omitted.get(i).copied().unwrap_or_default();
        let id = stream_id(i);
        let sender = self.senders[i];
        // The test's end, or the stream's last byte when that came later (a receiver drains
        // to the sender's count).
        let ended = self.ended.map_or(0, |d| d.as_nanos() as u64);
        let end_ns = e.last_ns.unwrap_or(0).max(ended);
        let mut r = StreamResult {
            id,
            bytes: e.bytes.saturating_sub(o.bytes),
            retransmits: -1,
            start_time: 0.0,
            end_time: end_ns.saturating_sub(self.omitted_for.as_nanos() as u64) as f64 / 1e9,
            ..StreamResult::default()
        };
        if sender && !self.udp {
            r.retransmits = e.tcp_info.map_or(0, |t| t.retransmits as i64);
        }
        if !self.udp {
            // iperf3 counts datagrams only: its TCP streams report 0.
        } else if sender {
            r.packets = e.packets;
            r.omitted_packets = o.packets;
        } else {
            let sent = peer
                .and_then(|d| d.streams.iter().find(|s| s.id == id))
                .map_or(e.max_seq, |s| s.packets);
            let lost = sent.saturating_sub(e.packets);
            r.errors = i64::try_from(lost).unwrap_or(i64::MAX);
            r.packets = e.packets.saturating_add(lost);
            r.omitted_packets = o.max_seq;
            r.omitted_errors = i64::try_from(o.max_seq.saturating_sub(o.packets)).unwrap_or(0);
            r.jitter = e.jitter_ns / 1e9;
        }
        r
    }

    /// This side's report of the streams in one direction (`sending`), as wirebench's
    /// results document takes it.
    fn side_report(&self, sending: bool, peer: Option<&ResultsDoc>) -> SideReport {
        let mut rep = SideReport {
            role: Some(if sending {
                Role::Sender
            } else {
                Role::Receiver
            }),
            elapsed_ns: self.start.elapsed().as_nanos() as u64,
            intervals: if self.senders.first() == Some(&sending) {
                self.intervals.clone()
            } else {
                Vec::new()
            },
            ..SideReport::default()
        };
        let mut udp = UdpCounts {
            sequenced: true,
            ..UdpCounts::default()
        };
        let mut jitter_n = 0.0;
        for i in (0..self.senders.len()).filter(|i| self.senders[*i] == sending) {
            let e = self.snapshot(i);
            let part = SideReport {
                role: rep.role,
                bytes: e.bytes,
                messages: e.packets,
                first_ns: e.first_ns,
                last_ns: e.last_ns,
                elapsed_ns: rep.elapsed_ns,
                error: e.error.clone(),
                error_kind: e.error_kind,
                ..SideReport::default()
            };
            rep.bytes += e.bytes;
            rep.messages += e.packets;
            rep.first_ns = match (rep.first_ns, e.first_ns) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            rep.last_ns = rep.last_ns.max(e.last_ns);
            if rep.error.is_none() {
                rep.error.clone_from(&e.error);
                rep.error_kind = e.error_kind;
            }
            if self.udp && !sending {
                udp.reordered += e.out_of_order;
                udp.jitter_ns += e.jitter_ns;
                jitter_n += 1.0;
            }
            rep.streams.push(part);
        }
        let _ = peer;
        if self.udp && !sending {
            if jitter_n > 0.0 {
                udp.jitter_ns /= jitter_n;
            }
            rep.udp = Some(udp);
        }
        rep
    }
}

impl Drop for Streams {
    fn drop(&mut self) {
        // Whatever ended the test, no peer waits for these bytes now.
        for l in &self.live {
            l.quit.store(true, Ordering::Relaxed);
            l.stop.store(true, Ordering::Relaxed);
        }
        for t in self.threads.iter_mut().filter_map(Option::take) {
            let _ = t.join();
        }
    }
}

/// Runs the pump until the session has an action or is over, at most `tick` at a time.
fn round(pump: &mut Pump, s: &mut impl Session, tick: Duration) {
    pump.round(s, tick);
}

/// The address family's unspecified address, for a UDP socket that connects to `to`.
fn any_for(to: SocketAddr) -> SocketAddr {
    match to {
        SocketAddr::V4(_) => SocketAddr::from(([0, 0, 0, 0], 0)),
        SocketAddr::V6(_) => SocketAddr::from(([0u16; 8], 0)),
    }
}

/// The congestion control a TCP socket uses, for the results exchange.
fn congestion_of(s: &TcpStream) -> Option<String> {
    SockRef::from(s).tcp_congestion().ok().map(|v| {
        String::from_utf8_lossy(&v)
            .trim_end_matches('\0')
            .to_string()
    })
}

/// Shared by both drivers: the per-stream counts that came from the peer, as budget.
fn budget(bytes: Option<u64>) -> Option<Arc<AtomicU64>> {
    bytes.map(|b| Arc::new(AtomicU64::new(b)))
}
