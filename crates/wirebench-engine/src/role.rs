//! The data roles: send or receive one stream over TCP or UDP, streaming or stop-and-wait.
//!
//! Each loop owns its counters and checks the clock once per message, which it needs anyway
//! for the UDP header and pacing. Blocking calls carry short kernel timeouts so that the
//! loop notices a stop, a deadline or an interval boundary while the path is idle.

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, TcpStream, UdpSocket};
use std::sync::atomic::Ordering;
use std::sync::mpsc::Sender;
use std::time::Duration;

use wirebench_proto::header::{self, DataHeader, ACK_LEN, HEADER_LEN};
use wirebench_proto::results::{Datapath, IntervalRecord, Role, SideReport, UdpCounts};
use wirebench_proto::spec::{Mechanism, TestSpec, MAX_INTERVALS, RR_SEQ_LEN};
use wirebench_stats::TimeHistogram;

use crate::file::{FileSink, FileSource};
use crate::log::{LogOut, LogSink};
use crate::pace::{wait_until, Pacer};
use crate::rx::{IntervalUdp, UdpRx};
use crate::sys::udp::{BatchRecv, BatchSend, Offloads};
use crate::sys::{max_rss_kib, rss_kib, tcp_info, thread_cpu_ns, ZeroCopy};
use crate::{Hists, Shared};
use wirebench_proto::results::{Resources, ZeroCopyUse};

/// How long a blocking data call may wait before the loop looks at the clock again.
const POLL: Duration = Duration::from_millis(20);

/// A stop-and-wait sender gives up after this long without an acknowledgement.
const ACK_GIVE_UP: Duration = Duration::from_secs(10);

/// A connected data socket.
#[derive(Debug)]
pub enum DataSocket {
    /// A TCP data connection.
    Tcp(TcpStream),
    /// A connected UDP socket.
    Udp(UdpSocket),
}

/// What a role needs besides its socket.
pub struct RoleParams {
    /// The test.
    pub spec: TestSpec,
    /// Hard stop, ns since the side's start (a server limit); `u64::MAX` for none.
    pub deadline_ns: u64,
    /// The UDP hello of this stream: retransmitted copies may arrive and are not data.
    pub hello: Option<[u8; header::UDP_HELLO_LEN]>,
    /// Which of the test's streams this is.
    pub stream: u32,
    /// Each closed interval is sent here, with the stream, for live display.
    pub intervals: Option<Sender<(u32, IntervalRecord)>>,
    /// What the socket set-up recorded.
    pub datapath: Datapath,
    /// Both ends read one clock (same kernel boot id): one-way delays are absolute.
    pub same_clock: bool,
    /// UDP receivers: where the packet log goes, if one was asked for.
    pub packet_log: Option<LogOut>,
    /// UDP: the batched system calls and offloads the socket set-up enabled.
    pub offloads: Offloads,
    /// `--mode crr`: where transactions' connections go (client) or come from (server).
    pub crr: Option<CrrPart>,
    /// `--file`: the file this side sends, or receives.
    pub file: Option<FilePart>,
}

/// A side's part in a file transfer.
pub enum FilePart {
    /// The sender reads the file into its messages.
    Source(FileSource),
    /// The receiver writes them to a file (or only hashes them).
    Sink(FileSink),
}

impl FilePart {
    fn source(&mut self) -> Option<&mut FileSource> {
        match self {
            FilePart::Source(s) => Some(s),
            FilePart::Sink(_) => None,
        }
    }

    fn sink(&mut self) -> Option<&mut FileSink> {
        match self {
            FilePart::Sink(s) => Some(s),
            FilePart::Source(_) => None,
        }
    }

    /// This side's report, the file being `file_bytes` long.
    fn finish(self, file_bytes: u64) -> wirebench_proto::results::FileReport {
        match self {
            FilePart::Source(s) => s.report(),
            FilePart::Sink(s) => s.finish(file_bytes),
        }
    }
}

/// A side's part in a `--mode crr` test.
pub enum CrrPart {
    /// The client connects to `addr` for each transaction, attaching with the cookie.
    Client {
        /// The server's address.
        addr: std::net::SocketAddr,
        /// The test's cookie.
        cookie: u64,
    },
    /// The server gets each transaction's connection from its `attach` here.
    Server(std::sync::mpsc::Receiver<TcpStream>),
}

/// A side's running totals, as an interval closes.
#[derive(Debug, Clone, Copy, Default)]
struct Snapshot {
    bytes: u64,
    messages: u64,
    udp: Option<IntervalUdp>,
}

impl Snapshot {
    fn of(count: &Count) -> Self {
        Self {
            bytes: count.bytes,
            messages: count.messages,
            udp: None,
        }
    }
}

/// Closes intervals at fixed boundaries of the side's clock.
struct Recorder {
    interval_ns: u64,
    next_ns: u64,
    last: (u64, u64, u64),
    records: Vec<IntervalRecord>,
    stream: u32,
    tx: Option<Sender<(u32, IntervalRecord)>>,
}

impl Recorder {
    fn of(p: &RoleParams) -> Self {
        Self {
            interval_ns: p.spec.interval_ns,
            next_ns: p.spec.interval_ns,
            last: (0, 0, 0),
            records: Vec::with_capacity(1024),
            stream: p.stream,
            tx: p.intervals.clone(),
        }
    }

    /// Closes every interval that ended by `now_ns`, with the totals `snap` gives then (it is
    /// called only when an interval closes). A UDP `lost` is a running total that may go
    /// down (a late arrival fills a gap); an interval's loss is its increase, floored at 0.
    #[inline]
    fn tick(&mut self, now_ns: u64, mut snap: impl FnMut() -> Snapshot) {
        while now_ns >= self.next_ns {
            let end = self.next_ns;
            self.close(end, snap());
            self.next_ns += self.interval_ns;
        }
    }

    fn close(&mut self, end_ns: u64, snap: Snapshot) {
        let start_ns = self.records.last().map_or(0, |r| r.end_ns);
        let udp = snap.udp.unwrap_or_default();
        let rec = IntervalRecord {
            start_ns,
            end_ns,
            bytes: snap.bytes - self.last.0,
            messages: snap.messages - self.last.1,
            lost: udp.lost.saturating_sub(self.last.2),
            jitter_ns: udp.jitter_ns,
            delay_p50_ns: udp.delay_p50_ns,
            delay_p99_ns: udp.delay_p99_ns,
        };
        self.last = (snap.bytes, snap.messages, udp.lost.max(self.last.2));
        if self.records.len() < MAX_INTERVALS as usize {
            self.records.push(rec);
        }
        if let Some(tx) = &self.tx {
            let _ = tx.send((self.stream, rec));
        }
    }

    /// Closes the last, partial interval.
    fn finish(mut self, now_ns: u64, mut snap: impl FnMut() -> Snapshot) -> Vec<IntervalRecord> {
        self.tick(now_ns, &mut snap);
        let start = self.records.last().map_or(0, |r| r.end_ns);
        if now_ns > start {
            self.close(now_ns, snap());
        }
        self.records
    }
}

/// Bytes sent in each millisecond, folded into a distribution as each millisecond ends: how
/// evenly a sender spread its data (a paced sender should show little spread). Milliseconds
/// without a send between the first and the last count as 0; the last, partial one is left
/// out.
struct MsBins {
    bin: Option<u64>,
    bytes: u64,
    hist: TimeHistogram,
}

impl MsBins {
    const NS: u64 = 1_000_000;

    fn new() -> Self {
        Self {
            bin: None,
            bytes: 0,
            hist: TimeHistogram::new(),
        }
    }

    /// Counts `bytes` sent at `now_ns`.
    #[inline]
    fn add(&mut self, now_ns: u64, bytes: u64) {
        let bin = now_ns / Self::NS;
        match self.bin {
            Some(cur) if cur != bin => {
                self.hist
                    .record(i64::try_from(self.bytes).unwrap_or(i64::MAX));
                self.hist.record_n(0, bin.saturating_sub(cur + 1));
                self.bin = Some(bin);
                self.bytes = 0;
            }
            Some(_) => {}
            None => self.bin = Some(bin),
        }
        self.bytes += bytes;
    }

    fn finish(self) -> Option<wirebench_stats::TimeSummary> {
        self.hist.summary()
    }
}

/// Running totals of a role.
#[derive(Debug, Default)]
pub struct Count {
    /// Payload bytes.
    pub bytes: u64,
    /// Messages.
    pub messages: u64,
    /// First message, ns since the side started.
    pub first_ns: Option<u64>,
    /// Last message, ns since the side started.
    pub last_ns: Option<u64>,
}

impl Count {
    /// Counts one message of `len` bytes at `now_ns`.
    #[inline]
    pub fn add(&mut self, len: u64, now_ns: u64) {
        self.add_many(1, len, now_ns);
    }

    /// Counts `messages` messages of `bytes` bytes in all at `now_ns`.
    #[inline]
    pub fn add_many(&mut self, messages: u64, bytes: u64, now_ns: u64) {
        self.bytes += bytes;
        self.messages += messages;
        self.first_ns.get_or_insert(now_ns);
        self.last_ns = Some(now_ns);
    }
}

/// Why a loop ended early.
fn early_stop(sh: &Shared, p: &RoleParams, now_ns: u64) -> Option<String> {
    if sh.stopped() {
        Some("stopped".into())
    } else if now_ns >= p.deadline_ns {
        Some("stopped at the server's --max-duration limit".into())
    } else {
        None
    }
}

/// How long a side waits without any progress from its peer (no data arriving, or a full
/// socket that never drains) before it gives up: the peer is stuck or gone. Long enough for
/// the slowest legitimate test: the message gap and an ack timeout on top of half a minute.
fn idle_limit_ns(spec: &TestSpec) -> u64 {
    30_000_000_000 + spec.gap_ns + spec.ack_timeout_ns
}

/// Receivers: an error once nothing arrived for the idle limit while the sender is not done.
fn idle_error(sh: &Shared, p: &RoleParams, last_ns: Option<u64>, now_ns: u64) -> Option<String> {
    let limit = idle_limit_ns(&p.spec);
    let silent = now_ns.saturating_sub(last_ns.unwrap_or(0));
    (silent > limit && sh.peer_done_ns.load(Ordering::Relaxed) == u64::MAX)
        .then(|| format!("no data from the sender for {} s", silent / 1_000_000_000))
}

/// Receivers: true once the drain time after the sender's report has passed.
fn drain_expired(sh: &Shared, p: &RoleParams, now_ns: u64) -> bool {
    let done_ns = sh.peer_done_ns.load(Ordering::Relaxed);
    done_ns != u64::MAX && now_ns >= done_ns.saturating_add(p.spec.drain_ns)
}

/// Receivers: whether the loop ends now: `Some(None)` when every message arrived or the drain
/// time passed, `Some(Some(why))` when it stops early (a stop, the deadline, a silent sender).
fn receiver_done(
    sh: &Shared,
    p: &RoleParams,
    count: &Count,
    now_ns: u64,
) -> Option<Option<String>> {
    if let Some(why) =
        early_stop(sh, p, now_ns).or_else(|| idle_error(sh, p, count.last_ns, now_ns))
    {
        return Some(Some(why));
    }
    drained(sh, p, count.messages, now_ns).then_some(None)
}

/// Receivers: true once the sender's count is reached or the drain time has passed.
fn drained(sh: &Shared, p: &RoleParams, messages: u64, now_ns: u64) -> bool {
    messages >= sh.peer_messages.load(Ordering::Relaxed) || drain_expired(sh, p, now_ns)
}

fn payload(size: u64) -> Vec<u8> {
    // Not all zeros, so that compression on the path cannot flatter the result.
    (0..size)
        .map(|i| (i.wrapping_mul(131) >> 3) as u8)
        .collect()
}

/// The amount left to send: the next message's length, or `None` when done.
fn next_len(spec: &TestSpec, sent: &Count, now_ns: u64) -> Option<u64> {
    match (spec.bytes, spec.duration_ns) {
        (Some(total), _) => {
            let left = total.saturating_sub(sent.bytes);
            (left > 0).then(|| left.min(spec.size))
        }
        (None, Some(d)) => (now_ns < d).then_some(spec.size),
        (None, None) => None,
    }
}

fn is_timeout(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
    )
}

/// Runs the role and returns what it measured; errors end the role early and are recorded in
/// the report, with the counts up to then.
pub fn run(role: Role, sock: DataSocket, mut p: RoleParams, sh: &Shared) -> SideReport {
    let cpu_start = thread_cpu_ns();
    let rss_before_kib = rss_kib();
    // A second handle on a TCP connection, to read its TCP_INFO once the role is done.
    // (Not for --mode crr, whose set-up connection carries no data.)
    let tcp = match &sock {
        DataSocket::Tcp(s) if p.crr.is_none() => s.try_clone().ok(),
        _ => None,
    };
    let saw = p.spec.mechanism == Mechanism::StopAndWait;
    let rr = p.spec.mechanism == Mechanism::Rr;
    let crr = p.crr.take();
    let mut file = p.file.take();
    let mut rep = match (role, sock) {
        // Connect/request/response: the set-up connection is not used.
        (_, _) if crr.is_some() => match crr {
            Some(CrrPart::Client { addr, cookie }) => {
                rr_client(&mut CrrTransact::new(addr, cookie, &p), &p, sh)
            }
            Some(CrrPart::Server(conns)) => crr_server(&conns, &p, sh),
            None => SideReport::default(),
        },
        (Role::Sender, DataSocket::Tcp(s)) if rr => rr_client(&mut TcpRr::new(s, &p), &p, sh),
        (Role::Sender, DataSocket::Udp(s)) if rr => rr_client(&mut UdpRr::new(s, &p), &p, sh),
        (Role::Receiver, DataSocket::Tcp(s)) if rr => tcp_rr_server(s, &p, sh),
        (Role::Receiver, DataSocket::Udp(s)) if rr => udp_rr_server(s, &p, sh),
        (Role::Sender, DataSocket::Tcp(s)) => tcp_send(s, &p, &mut file, sh),
        (Role::Receiver, DataSocket::Tcp(s)) => tcp_receive(s, &p, &mut file, sh),
        (Role::Sender, DataSocket::Udp(s)) if saw => udp_send(s, &p, &mut file, sh),
        (Role::Sender, DataSocket::Udp(s)) => udp_send_stream(s, &p, &mut file, sh),
        (Role::Receiver, DataSocket::Udp(s)) if saw => udp_receive_saw(s, &p, &mut file, sh),
        (Role::Receiver, DataSocket::Udp(s)) => {
            let log = p.packet_log.take();
            udp_receive(s, &p, log, &mut file, sh)
        }
    };
    rep.role = Some(role);
    rep.epoch_unix_ns = sh.epoch_unix_ns;
    if let Some(f) = file {
        rep.file = Some(f.finish(p.spec.file_bytes()));
    }
    rep.tcp_info = tcp.as_ref().and_then(tcp_info);
    let cpu_end = thread_cpu_ns();
    let (user, system) = (
        cpu_end.0.saturating_sub(cpu_start.0) as f64 / 1e9,
        cpu_end.1.saturating_sub(cpu_start.1) as f64 / 1e9,
    );
    let elapsed = sh.now_ns() as f64 / 1e9;
    rep.resources = Some(Resources {
        cpu_user_s: user,
        cpu_system_s: system,
        cpu_percent: if elapsed > 0.0 {
            (user + system) / elapsed * 100.0
        } else {
            0.0
        },
        max_rss_kib: max_rss_kib(),
        rss_before_kib,
        rss_after_kib: rss_kib(),
    });
    rep.elapsed_ns = sh.now_ns();
    if rep.datapath.io.is_empty() {
        rep.datapath = p.datapath;
    }
    rep
}

fn report(count: &Count, intervals: Vec<IntervalRecord>, error: Option<String>) -> SideReport {
    SideReport {
        bytes: count.bytes,
        messages: count.messages,
        first_ns: count.first_ns,
        last_ns: count.last_ns,
        intervals,
        error,
        ..SideReport::default()
    }
}

/// Waits for the pacer; returns false if the wait was cut short to look at the clock again.
fn pace(pacer: &mut Pacer, sh: &Shared, now_ns: u64) -> bool {
    if pacer.unlimited() {
        return true;
    }
    let due = pacer.next_ns(now_ns);
    if due <= now_ns {
        return true;
    }
    // Wait in slices so that a stop or an interval boundary is not missed during long gaps.
    let slice_end = now_ns + POLL.as_nanos() as u64;
    wait_until(sh.start, due.min(slice_end));
    due <= slice_end
}

/// What a sender does next.
enum Step {
    /// Send a message of this many bytes now.
    Send(u64),
    /// Nothing yet: the pacer cut its wait short to look at the clock again.
    Again,
    /// The sender is done; with the reason if it stopped early.
    Done(Option<String>),
}

/// Closes due intervals, then decides whether the next message goes now.
fn next_step(
    rec: &mut Recorder,
    pacer: &mut Pacer,
    sh: &Shared,
    p: &RoleParams,
    count: &Count,
) -> Step {
    let now = sh.now_ns();
    rec.tick(now, || Snapshot::of(count));
    if let Some(why) = early_stop(sh, p, now) {
        return Step::Done(Some(why));
    }
    let Some(len) = next_len(&p.spec, count, now) else {
        return Step::Done(None);
    };
    if pace(pacer, sh, now) {
        Step::Send(len)
    } else {
        Step::Again
    }
}

/// Writes all of `buf`, looking at stop and deadline while the socket is full.
fn write_full(s: &mut TcpStream, buf: &[u8], sh: &Shared, p: &RoleParams) -> Result<(), String> {
    write_full_zc(s, buf, sh, p, &mut None)
}

/// As [`write_full`], with `MSG_ZEROCOPY` sends when `zc` is set; completions are read off
/// the error queue every 64 sends and whenever the kernel runs out of room for them.
fn write_full_zc(
    s: &mut TcpStream,
    buf: &[u8],
    sh: &Shared,
    p: &RoleParams,
    zc: &mut Option<ZeroCopy>,
) -> Result<(), String> {
    let mut off = 0;
    let mut progress_ns = sh.now_ns();
    while off < buf.len() {
        let sent = match zc {
            Some(z) => {
                if z.sends % 64 == 0 {
                    z.reap(s);
                }
                z.send(s, &buf[off..])
            }
            None => s.write(&buf[off..]),
        };
        match sent {
            Ok(0) => return Err("the data connection closed".into()),
            Ok(n) => {
                off += n;
                progress_ns = sh.now_ns();
            }
            Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) && zc.is_some() => {
                // Too many sends in flight for the socket's option memory: read completions.
                if let Some(z) = zc {
                    z.reap(s);
                }
                std::thread::yield_now();
            }
            Err(e) if is_timeout(&e) => {
                let now = sh.now_ns();
                if let Some(why) = early_stop(sh, p, now) {
                    return Err(why);
                }
                if now - progress_ns > idle_limit_ns(&p.spec) {
                    return Err("the receiver stopped reading".into());
                }
            }
            Err(e) => return Err(format!("sending data: {e}")),
        }
    }
    Ok(())
}

fn tcp_send(
    mut s: TcpStream,
    p: &RoleParams,
    file: &mut Option<FilePart>,
    sh: &Shared,
) -> SideReport {
    let spec = &p.spec;
    let mut buf = payload(spec.size);
    let mut source = file.as_mut().and_then(FilePart::source);
    let saw = spec.mechanism == Mechanism::StopAndWait;
    let _ = s.set_write_timeout(Some(POLL));
    let _ = s.set_read_timeout(Some(POLL));
    let mut zc = if spec.zerocopy {
        ZeroCopy::enable(&s)
    } else {
        None
    };
    let mut pacer = Pacer::new(spec.rate_bps, spec.rate_pps, spec.gap_ns);
    let mut rec = Recorder::of(p);
    let mut count = Count::default();
    let mut bins = MsBins::new();
    let error: Option<String>;
    let mut ack = [0u8; 1];
    loop {
        let len = match next_step(&mut rec, &mut pacer, sh, p, &count) {
            Step::Send(len) => len,
            Step::Again => continue,
            Step::Done(why) => {
                error = why;
                break;
            }
        };
        if let Some(src) = source.as_mut() {
            if let Err(e) = src.fill(&mut buf[..len as usize]) {
                error = Some(e);
                break;
            }
        }
        if let Err(e) = write_full_zc(&mut s, &buf[..len as usize], sh, p, &mut zc) {
            error = Some(e);
            break;
        }
        if saw {
            // The receiver answers one byte per whole message.
            let got = loop {
                match s.read(&mut ack) {
                    Ok(1) => break Ok(()),
                    Ok(_) => {
                        break Err("the data connection closed while waiting for an ack".into())
                    }
                    Err(e) if is_timeout(&e) => {
                        if let Some(why) = early_stop(sh, p, sh.now_ns()) {
                            break Err(why);
                        }
                    }
                    Err(e) => break Err(format!("waiting for an ack: {e}")),
                }
            };
            if let Err(e) = got {
                error = Some(e);
                break;
            }
        }
        let now = sh.now_ns();
        count.add(len, now);
        bins.add(now, len);
        pacer.sent(len, now);
        sh.bytes.store(count.bytes, Ordering::Relaxed);
        sh.messages.store(count.messages, Ordering::Relaxed);
    }
    // EOF tells the receiver that everything was sent.
    let _ = s.shutdown(Shutdown::Write);
    let intervals = rec.finish(sh.now_ns(), || Snapshot::of(&count));
    let mut rep = report(&count, intervals, error);
    rep.ms_bytes = bins.finish();
    rep.datapath = p.datapath.clone();
    if spec.zerocopy {
        rep.datapath.zerocopy = Some(zerocopy_use(&s, zc, sh));
    }
    rep
}

/// What became of the MSG_ZEROCOPY sends: waits briefly for the last completions, then
/// says whether the kernel sent without copying (`zerocopy` in the features) or copied after
/// all (`zerocopy_copied`, as on loopback), or refused the option (`zerocopy_unavailable`).
fn zerocopy_use(s: &TcpStream, zc: Option<ZeroCopy>, sh: &Shared) -> ZeroCopyUse {
    let Some(mut z) = zc else {
        return ZeroCopyUse::default();
    };
    let until = sh.now_ns() + 200_000_000;
    z.reap(s);
    while z.completed < z.sends && sh.now_ns() < until {
        std::thread::sleep(Duration::from_millis(1));
        z.reap(s);
    }
    ZeroCopyUse {
        enabled: true,
        sends: z.sends,
        completed: z.completed,
        copied: z.copied,
    }
}

fn tcp_receive(
    mut s: TcpStream,
    p: &RoleParams,
    file: &mut Option<FilePart>,
    sh: &Shared,
) -> SideReport {
    let mut sink = file.as_mut().and_then(FilePart::sink);
    let spec = &p.spec;
    let saw = spec.mechanism == Mechanism::StopAndWait;
    let mut buf = vec![
        0u8;
        if saw {
            spec.size as usize
        } else {
            (spec.size as usize).max(256 * 1024)
        }
    ];
    let _ = s.set_read_timeout(Some(POLL));
    let _ = s.set_write_timeout(Some(POLL));
    let mut rec = Recorder::of(p);
    let mut count = Count::default();
    // Messages are the sender's unit: here they are counted at message boundaries in the
    // byte stream (every `size` bytes, the last one possibly shorter).
    let mut in_message = 0u64;
    let mut error = None;
    loop {
        let now = sh.now_ns();
        rec.tick(now, || Snapshot::of(&count));
        if let Some(why) = early_stop(sh, p, now).or_else(|| idle_error(sh, p, count.last_ns, now))
        {
            error = Some(why);
            break;
        }
        if drain_expired(sh, p, now) {
            error = Some(format!(
                "data still missing {} ms after the sender finished (--drain)",
                spec.drain_ns / 1_000_000
            ));
            break;
        }
        // The current message's length: the last one of a `bytes` test may be shorter.
        let msg_len = spec.bytes.map_or(spec.size, |total| {
            total
                .saturating_sub(count.bytes - in_message)
                .clamp(1, spec.size)
        });
        // Stop-and-wait reads exactly up to the end of the current message.
        let want = if saw {
            (msg_len - in_message).max(1) as usize
        } else {
            buf.len()
        };
        match s.read(&mut buf[..want]) {
            Ok(0) => break,
            Ok(n) => {
                if let Some(sink) = sink.as_mut() {
                    sink.write(&buf[..n]);
                }
                let now = sh.now_ns();
                let n = n as u64;
                count.bytes += n;
                count.first_ns.get_or_insert(now);
                count.last_ns = Some(now);
                in_message += n;
                let msg_len = if saw { msg_len } else { spec.size };
                while in_message >= msg_len {
                    in_message -= msg_len;
                    count.messages += 1;
                    if saw {
                        if let Err(e) = write_full(&mut s, &[1], sh, p) {
                            error = Some(e);
                        }
                    }
                }
                sh.bytes.store(count.bytes, Ordering::Relaxed);
                sh.messages.store(count.messages, Ordering::Relaxed);
                if error.is_some() {
                    break;
                }
            }
            Err(e) if is_timeout(&e) => {}
            Err(e) => {
                error = Some(format!("receiving data: {e}"));
                break;
            }
        }
    }
    if in_message > 0 {
        // The sender's last, shorter message.
        count.messages += 1;
    }
    let intervals = rec.finish(sh.now_ns(), || Snapshot::of(&count));
    report(&count, intervals, error)
}

/// Sends one datagram, retrying while the kernel is out of buffers. A pending ICMP error
/// (ECONNREFUSED) is reported by the kernel on the next send, which it then drops: retry it,
/// and fail only if the peer keeps refusing. EPERM is a local firewall rule dropping the
/// datagram on its way out: it was sent as far as this program is concerned, the path lost
/// it, and `local_drops` counts it.
fn send_datagram(
    s: &UdpSocket,
    buf: &[u8],
    sh: &Shared,
    local_drops: &mut u64,
) -> Result<(), String> {
    let mut refused = 0;
    loop {
        match s.send(buf) {
            Ok(_) => return Ok(()),
            Err(e) if e.raw_os_error() == Some(libc::EPERM) => {
                *local_drops += 1;
                return Ok(());
            }
            Err(e) if e.kind() == ErrorKind::ConnectionRefused => {
                refused += 1;
                if refused > 100 {
                    return Err("the receiver's UDP port is closed (ICMP port unreachable)".into());
                }
            }
            Err(e) if is_timeout(&e) || e.raw_os_error() == Some(libc::ENOBUFS) => {
                if sh.stopped() {
                    return Err("stopped".into());
                }
                std::thread::yield_now();
            }
            Err(e) => return Err(format!("sending data: {e}")),
        }
    }
}

/// Streams UDP in batches: as many datagrams per call as are due (all of a batch when the
/// rate is unlimited), each with its own header; one clock read per batch, so the datagrams
/// of a batch carry the same send time, the time they were handed to the kernel together.
fn udp_send_stream(
    s: UdpSocket,
    p: &RoleParams,
    file: &mut Option<FilePart>,
    sh: &Shared,
) -> SideReport {
    let mut source = file.as_mut().and_then(FilePart::source);
    let spec = &p.spec;
    let size = spec.size;
    let _ = s.set_write_timeout(Some(POLL));
    let mut io = BatchSend::new(size as usize, p.offloads, &payload(size));
    let mut pacer = Pacer::new(spec.rate_bps, spec.rate_pps, spec.gap_ns);
    let mut rec = Recorder::of(p);
    let mut count = Count::default();
    let mut local_drops = 0u64;
    let mut refused = 0u32;
    let mut bins = MsBins::new();
    let mut error = None;
    let mut file_error = None;
    loop {
        let now = sh.now_ns();
        rec.tick(now, || Snapshot::of(&count));
        if let Some(why) = early_stop(sh, p, now) {
            error = Some(why);
            break;
        }
        // Datagrams left, and the length of the last one of a `bytes` test.
        let (left, last_len) = match (spec.bytes, spec.duration_ns) {
            (Some(total), _) => {
                let rest = total.saturating_sub(count.bytes);
                (
                    rest.div_ceil(size),
                    rest - (rest.div_ceil(size).max(1) - 1) * size,
                )
            }
            (None, Some(d)) if now < d => (u64::MAX, size),
            _ => (0, size),
        };
        if left == 0 {
            break;
        }
        let cap = (io.capacity() as u64).min(left);
        let n = pacer.due(now, size, cap);
        if n == 0 {
            pace(&mut pacer, sh, now);
            continue;
        }
        let tail_len = if n == left { last_len } else { size };
        let send_ns = sh.unix_ns(now);
        for i in 0..n {
            let seq = count.messages + i;
            let d = io.datagram(i as usize);
            let len = if i + 1 == n { tail_len } else { size };
            if len < HEADER_LEN as u64 {
                d[0] = seq as u8;
            } else {
                let h = DataHeader {
                    seq,
                    stream: 0,
                    send_ns,
                };
                let _ = h.write(d);
                if let Some(src) = source.as_mut() {
                    // After the header, the file's next piece.
                    if let Err(e) = src.fill(&mut d[HEADER_LEN..len as usize]) {
                        file_error = Some(e);
                    }
                }
            }
        }
        if let Some(e) = file_error.take() {
            error = Some(e);
            break;
        }
        let sent = match io.send(&s, n as usize, tail_len as usize) {
            Ok(k) => k as u64,
            // A local firewall rule dropped the first message (all its segments): sent, as
            // far as this program is concerned, and lost on the path.
            Err(e) if e.raw_os_error() == Some(libc::EPERM) => {
                let k = (io.segments() as u64).min(n);
                local_drops += k;
                k
            }
            Err(e) if e.kind() == ErrorKind::ConnectionRefused => {
                // A pending ICMP error from the peer: the kernel reports it once, then sends.
                refused += 1;
                if refused > 100 {
                    error =
                        Some("the receiver's UDP port is closed (ICMP port unreachable)".into());
                    break;
                }
                continue;
            }
            Err(e) if is_timeout(&e) || e.raw_os_error() == Some(libc::ENOBUFS) => {
                std::thread::yield_now();
                continue;
            }
            Err(e) => {
                error = Some(format!("sending data: {e}"));
                break;
            }
        };
        let bytes = if sent == n {
            (n - 1) * size + tail_len
        } else {
            sent * size
        };
        let now = sh.now_ns();
        count.add_many(sent, bytes, now);
        bins.add(now, bytes);
        pacer.sent_many(sent, bytes, now);
        sh.bytes.store(count.bytes, Ordering::Relaxed);
        sh.messages.store(count.messages, Ordering::Relaxed);
    }
    let intervals = rec.finish(sh.now_ns(), || Snapshot::of(&count));
    let mut rep = report(&count, intervals, error);
    rep.local_drops = local_drops;
    rep.ms_bytes = bins.finish();
    rep.datapath = p.datapath.clone();
    if p.offloads.gso && !io.offloads().gso {
        // The device refused GSO (EIO) and the sender went on without it.
        rep.datapath.features.retain(|f| f != "udp_gso");
        rep.datapath.features.push("udp_gso_refused".into());
    }
    rep
}

fn udp_send(s: UdpSocket, p: &RoleParams, file: &mut Option<FilePart>, sh: &Shared) -> SideReport {
    let spec = &p.spec;
    let mut buf = payload(spec.size);
    let mut source = file.as_mut().and_then(FilePart::source);
    let saw = spec.mechanism == Mechanism::StopAndWait;
    let _ = s.set_read_timeout(Some(Duration::from_nanos(spec.ack_timeout_ns).min(POLL)));
    let _ = s.set_write_timeout(Some(POLL));
    let ack_timeout_ns = spec.ack_timeout_ns;
    let mut pacer = Pacer::new(spec.rate_bps, spec.rate_pps, spec.gap_ns);
    let mut rec = Recorder::of(p);
    let mut count = Count::default();
    let mut retransmits = 0u64;
    let mut local_drops = 0u64;
    let error: Option<String>;
    let mut ack = [0u8; 64];
    let mut seq = 0u64;
    'messages: loop {
        let len = match next_step(&mut rec, &mut pacer, sh, p, &count) {
            Step::Send(len) => len as usize,
            Step::Again => continue,
            Step::Done(why) => {
                error = why;
                break;
            }
        };
        // A datagram too short for the header (a headerless test, or the short last message of
        // a `bytes` test) carries the low byte of its sequence number instead.
        if len < HEADER_LEN {
            buf[0] = seq as u8;
        } else {
            let h = DataHeader {
                seq,
                stream: 0,
                send_ns: sh.unix_ns(sh.now_ns()),
            };
            let _ = h.write(&mut buf[..len]);
            if let Some(src) = source.as_mut() {
                if let Err(e) = src.fill(&mut buf[HEADER_LEN..len]) {
                    error = Some(e);
                    break;
                }
            }
        }
        if let Err(e) = send_datagram(&s, &buf[..len], sh, &mut local_drops) {
            error = Some(e);
            break;
        }
        if saw {
            let first_sent = sh.now_ns();
            let mut sent_at = first_sent;
            loop {
                match s.recv(&mut ack) {
                    Ok(n) => {
                        let want = if len < HEADER_LEN { seq & 0xff } else { seq };
                        if header::decode_ack(&ack[..n]) == Some(want) {
                            break;
                        }
                    }
                    Err(e) if is_timeout(&e) || e.kind() == ErrorKind::ConnectionRefused => {}
                    Err(e) => {
                        error = Some(format!("waiting for an ack: {e}"));
                        break 'messages;
                    }
                }
                let now = sh.now_ns();
                rec.tick(now, || Snapshot::of(&count));
                if let Some(why) = early_stop(sh, p, now) {
                    error = Some(why);
                    break 'messages;
                }
                if now - first_sent > ACK_GIVE_UP.as_nanos() as u64 {
                    error = Some(format!(
                        "no acknowledgement for {} s: the receiver is gone or the path drops everything",
                        ACK_GIVE_UP.as_secs()
                    ));
                    break 'messages;
                }
                if now - sent_at >= ack_timeout_ns {
                    if let Err(e) = send_datagram(&s, &buf[..len], sh, &mut local_drops) {
                        error = Some(e);
                        break 'messages;
                    }
                    retransmits += 1;
                    sent_at = now;
                }
            }
        }
        let now = sh.now_ns();
        count.add(len as u64, now);
        pacer.sent(len as u64, now);
        seq += 1;
        sh.bytes.store(count.bytes, Ordering::Relaxed);
        sh.messages.store(count.messages, Ordering::Relaxed);
    }
    let intervals = rec.finish(sh.now_ns(), || Snapshot::of(&count));
    let mut rep = report(&count, intervals, error);
    rep.retransmits = retransmits;
    rep.local_drops = local_drops;
    rep
}

/// The number of datagrams with a header among the sender's `messages`: all but a short
/// last one of a `bytes` test.
fn sequenced_count(spec: &TestSpec, messages: u64) -> u64 {
    let short_tail = spec
        .bytes
        .is_some_and(|b| b % spec.size != 0 && b % spec.size < HEADER_LEN as u64);
    // `messages` comes from the peer: saturate rather than overflow.
    if short_tail
        && messages > 0
        && spec
            .bytes
            .is_some_and(|b| messages.saturating_mul(spec.size) >= b)
    {
        messages - 1
    } else {
        messages
    }
}

fn udp_receive(
    s: UdpSocket,
    p: &RoleParams,
    packet_log: Option<LogOut>,
    file: &mut Option<FilePart>,
    sh: &Shared,
) -> SideReport {
    let spec = &p.spec;
    let _ = s.set_read_timeout(Some(POLL));
    let mut io = BatchRecv::new(p.offloads);
    let mut rec = Recorder::of(p);
    let (log, mut error) = match packet_log.map(LogSink::start) {
        None => (None, None),
        Some(Ok(l)) => (Some(l), None),
        Some(Err(e)) => (None, Some(format!("packet log: {e}"))),
    };
    let mut rx = UdpRx::new(sh.epoch_unix_ns, p.hello, log);
    let sink = match file.take() {
        Some(FilePart::Sink(sink)) => Some(sink),
        other => {
            *file = other;
            None
        }
    };
    rx.save_file(sink, spec.file_chunk(), spec.file_bytes());
    let snap = |rx: &mut UdpRx| Snapshot {
        bytes: rx.count.bytes,
        messages: rx.count.messages,
        udp: Some(rx.close_interval()),
    };
    while error.is_none() {
        let now = sh.now_ns();
        rec.tick(now, || snap(&mut rx));
        if let Some(why) = receiver_done(sh, p, &rx.count, now) {
            error = why;
            break;
        }
        let n = match io.recv(&s) {
            Ok(n) => n,
            Err(e) if is_timeout(&e) || e.kind() == ErrorKind::ConnectionRefused => continue,
            Err(e) => {
                error = Some(format!("receiving data: {e}"));
                break;
            }
        };
        // One clock read per batch: its datagrams were all queued when the call returned.
        let now = sh.now_ns();
        for i in 0..n {
            let (bytes, segment) = io.message(i);
            rx.on_buffer(bytes, segment, now);
        }
        sh.bytes.store(rx.count.bytes, Ordering::Relaxed);
        sh.messages.store(rx.count.messages, Ordering::Relaxed);
    }
    let intervals = rec.finish(sh.now_ns(), || snap(&mut rx));
    let sent = sh.peer_messages.load(Ordering::Relaxed);
    let sent = (sent != u64::MAX).then(|| sequenced_count(spec, sent));
    let (count, mut udp, log_error, hists, sink) = rx.finish(sent, p.same_clock);
    sh.keep_hists(hists);
    if let Some(sink) = sink {
        *file = Some(FilePart::Sink(sink));
    }
    udp.sequenced = !spec.headerless();
    let mut rep = report(&count, intervals, error.or(log_error));
    rep.udp = Some(udp);
    rep
}

fn udp_receive_saw(
    s: UdpSocket,
    p: &RoleParams,
    file: &mut Option<FilePart>,
    sh: &Shared,
) -> SideReport {
    let mut sink = file.as_mut().and_then(FilePart::sink);
    let spec = &p.spec;
    let _ = s.set_read_timeout(Some(POLL));
    let _ = s.set_write_timeout(Some(POLL));
    let mut buf = vec![0u8; 65_536];
    let mut rec = Recorder::of(p);
    let mut count = Count::default();
    let mut duplicates = 0u64;
    let mut expected = 0u64; // next message
    let mut ack = [0u8; ACK_LEN];
    let error: Option<String>;
    loop {
        let now = sh.now_ns();
        rec.tick(now, || Snapshot::of(&count));
        if let Some(why) = receiver_done(sh, p, &count, now) {
            error = why;
            break;
        }
        let n = match s.recv(&mut buf) {
            Ok(n) => n,
            Err(e) if is_timeout(&e) || e.kind() == ErrorKind::ConnectionRefused => continue,
            Err(e) => {
                error = Some(format!("receiving data: {e}"));
                break;
            }
        };
        let now = sh.now_ns();
        let dgram = &buf[..n];
        if p.hello.is_some_and(|h| dgram == h) {
            continue;
        }
        let short = n < HEADER_LEN;
        let seq = if short {
            dgram.first().map(|&b| u64::from(b))
        } else {
            DataHeader::read(dgram).ok().map(|h| h.seq)
        };
        let Some(seq) = seq else { continue };
        let mask = if short { 0xff } else { u64::MAX };
        if seq == expected & mask {
            count.add(n as u64, now);
            expected += 1;
            if let Some(sink) = sink.as_mut() {
                sink.write(dgram.get(HEADER_LEN..).unwrap_or_default());
            }
        } else if expected > 0 && seq == (expected - 1) & mask {
            // The sender did not get our ack and sent the message again.
            duplicates += 1;
        } else {
            continue;
        }
        let len = header::encode_ack(seq, n, &mut ack);
        let _ = s.send(&ack[..len]);
        sh.bytes.store(count.bytes, Ordering::Relaxed);
        sh.messages.store(count.messages, Ordering::Relaxed);
    }
    let intervals = rec.finish(sh.now_ns(), || Snapshot::of(&count));
    let mut rep = report(&count, intervals, error);
    rep.udp = Some(UdpCounts {
        sequenced: !spec.headerless(),
        duplicates,
        same_clock: p.same_clock,
        // Each message is acknowledged before the next: whatever arrived, arrived in order.
        in_order_prefix: count.messages,
        ..UdpCounts::default()
    });
    rep
}

/// One request/response transaction of a client, over some transport.
trait Transact {
    /// Sends request `seq` of `len` bytes and waits for its whole response: `Ok(true)` when
    /// it came, `Ok(false)` when it timed out (UDP: a datagram was lost).
    fn transact(&mut self, seq: u64, len: u64, sh: &Shared, p: &RoleParams)
        -> Result<bool, String>;
}

/// Request/response over a TCP connection.
struct TcpRr {
    s: TcpStream,
    request: Vec<u8>,
    response: Vec<u8>,
}

impl TcpRr {
    fn new(s: TcpStream, p: &RoleParams) -> Self {
        let _ = s.set_write_timeout(Some(POLL));
        let _ = s.set_read_timeout(Some(POLL));
        Self {
            s,
            request: payload(p.spec.size),
            response: vec![0u8; p.spec.response_len() as usize],
        }
    }
}

/// Reads exactly `buf.len()` bytes, looking at stop and deadline while nothing comes.
/// `Ok(false)` when the peer closed the connection before the first byte.
fn read_full(
    s: &mut TcpStream,
    buf: &mut [u8],
    sh: &Shared,
    p: &RoleParams,
) -> Result<bool, String> {
    let mut off = 0;
    let mut progress_ns = sh.now_ns();
    while off < buf.len() {
        match s.read(&mut buf[off..]) {
            Ok(0) if off == 0 => return Ok(false),
            Ok(0) => return Err("the connection closed in the middle of a message".into()),
            Ok(n) => {
                off += n;
                progress_ns = sh.now_ns();
            }
            Err(e) if is_timeout(&e) => {
                let now = sh.now_ns();
                if let Some(why) = early_stop(sh, p, now) {
                    return Err(why);
                }
                if now - progress_ns > idle_limit_ns(&p.spec) {
                    return Err("the peer stopped answering".into());
                }
            }
            Err(e) => return Err(format!("receiving: {e}")),
        }
    }
    Ok(true)
}

impl Transact for TcpRr {
    fn transact(
        &mut self,
        _seq: u64,
        len: u64,
        sh: &Shared,
        p: &RoleParams,
    ) -> Result<bool, String> {
        write_full(&mut self.s, &self.request[..len as usize], sh, p)?;
        if read_full(&mut self.s, &mut self.response, sh, p)? {
            Ok(true)
        } else {
            Err("the server closed the connection".into())
        }
    }
}

/// Request/response over UDP: the request's first 8 bytes are its sequence number, which the
/// response carries back, so a late answer to an earlier request is not taken for this one.
struct UdpRr {
    s: UdpSocket,
    request: Vec<u8>,
    response: Vec<u8>,
    local_drops: u64,
}

impl UdpRr {
    fn new(s: UdpSocket, p: &RoleParams) -> Self {
        let _ = s.set_write_timeout(Some(POLL));
        let _ = s.set_read_timeout(Some(Duration::from_nanos(p.spec.ack_timeout_ns).min(POLL)));
        Self {
            s,
            request: payload(p.spec.size),
            response: vec![0u8; 65_536],
            local_drops: 0,
        }
    }
}

impl Transact for UdpRr {
    fn transact(
        &mut self,
        seq: u64,
        len: u64,
        sh: &Shared,
        p: &RoleParams,
    ) -> Result<bool, String> {
        let req = &mut self.request[..len as usize];
        if let Some(head) = req.get_mut(..8) {
            head.copy_from_slice(&seq.to_be_bytes());
        }
        send_datagram(&self.s, req, sh, &mut self.local_drops)?;
        let sent = sh.now_ns();
        loop {
            match self.s.recv(&mut self.response) {
                Ok(n) if n >= 8 && self.response[..8] == seq.to_be_bytes() => return Ok(true),
                Ok(_) => {}
                Err(e) if is_timeout(&e) || e.kind() == ErrorKind::ConnectionRefused => {}
                Err(e) => return Err(format!("waiting for a response: {e}")),
            }
            let now = sh.now_ns();
            if let Some(why) = early_stop(sh, p, now) {
                return Err(why);
            }
            if now - sent >= p.spec.ack_timeout_ns {
                return Ok(false);
            }
        }
    }
}

/// The round trips of the interval, as an interval record carries them.
fn rr_snapshot(count: &Count, interval: &mut TimeHistogram, total: &mut TimeHistogram) -> Snapshot {
    let udp = IntervalUdp {
        lost: 0,
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
    }
}

/// Request/response, the client: one transaction in flight, paced by `--rate` (packets/s:
/// transactions/s) and `--gap`, each round trip recorded in an HDR histogram, from before the
/// request's write to after the response's last byte.
fn rr_client(t: &mut impl Transact, p: &RoleParams, sh: &Shared) -> SideReport {
    let spec = &p.spec;
    let mut pacer = Pacer::new(spec.rate_bps, spec.rate_pps, spec.gap_ns);
    let mut rec = Recorder::of(p);
    let mut count = Count::default();
    let mut interval = TimeHistogram::new();
    let mut total = TimeHistogram::new();
    let mut timeouts = 0u64;
    let mut error = None;
    loop {
        let now = sh.now_ns();
        rec.tick(now, || rr_snapshot(&count, &mut interval, &mut total));
        if let Some(why) = early_stop(sh, p, now) {
            error = Some(why);
            break;
        }
        let Some(len) = next_len(spec, &count, now) else {
            break;
        };
        if !pace(&mut pacer, sh, now) {
            continue;
        }
        let start = sh.now_ns();
        let answered = match t.transact(count.messages, len, sh, p) {
            Ok(a) => a,
            Err(e) => {
                error = Some(e);
                break;
            }
        };
        let end = sh.now_ns();
        if answered {
            interval.record(i64::try_from(end - start).unwrap_or(i64::MAX));
        } else {
            timeouts += 1;
        }
        count.add(len, end);
        pacer.sent(len, end);
        sh.bytes.store(count.bytes, Ordering::Relaxed);
        sh.messages.store(count.messages, Ordering::Relaxed);
    }
    let intervals = rec.finish(sh.now_ns(), || {
        rr_snapshot(&count, &mut interval, &mut total)
    });
    let mut rep = report(&count, intervals, error);
    rep.latency = total.summary();
    sh.keep_hists(Hists {
        latency: Some(total),
        ..Hists::default()
    });
    rep.timeouts = timeouts;
    rep
}

/// Request/response over TCP, the server: read a whole request, write the response.
fn tcp_rr_server(mut s: TcpStream, p: &RoleParams, sh: &Shared) -> SideReport {
    let spec = &p.spec;
    let _ = s.set_read_timeout(Some(POLL));
    let _ = s.set_write_timeout(Some(POLL));
    let response = payload(spec.response_len());
    let mut request = vec![0u8; spec.size as usize];
    let mut rec = Recorder::of(p);
    let mut count = Count::default();
    let mut error = None;
    loop {
        rec.tick(sh.now_ns(), || Snapshot::of(&count));
        // The request's length: the last one of a `bytes` test may be shorter.
        let len = spec.bytes.map_or(spec.size, |total| {
            total.saturating_sub(count.bytes).clamp(1, spec.size)
        });
        match read_full(&mut s, &mut request[..len as usize], sh, p) {
            Ok(true) => {}
            // The client closed its side: every request was answered.
            Ok(false) => break,
            Err(e) => {
                error = Some(e);
                break;
            }
        }
        count.add(len, sh.now_ns());
        if let Err(e) = write_full(&mut s, &response, sh, p) {
            error = Some(e);
            break;
        }
        sh.bytes.store(count.bytes, Ordering::Relaxed);
        sh.messages.store(count.messages, Ordering::Relaxed);
    }
    let intervals = rec.finish(sh.now_ns(), || Snapshot::of(&count));
    report(&count, intervals, error)
}

/// Request/response over UDP, the server: answer each request with a response that starts
/// with the request's sequence number.
fn udp_rr_server(s: UdpSocket, p: &RoleParams, sh: &Shared) -> SideReport {
    let spec = &p.spec;
    let _ = s.set_read_timeout(Some(POLL));
    let _ = s.set_write_timeout(Some(POLL));
    let mut response = payload(spec.response_len());
    let mut buf = vec![0u8; 65_536];
    let mut rec = Recorder::of(p);
    let mut count = Count::default();
    let mut local_drops = 0u64;
    let error: Option<String>;
    loop {
        let now = sh.now_ns();
        rec.tick(now, || Snapshot::of(&count));
        if let Some(why) = receiver_done(sh, p, &count, now) {
            error = why;
            break;
        }
        let n = match s.recv(&mut buf) {
            Ok(n) => n,
            Err(e) if is_timeout(&e) || e.kind() == ErrorKind::ConnectionRefused => continue,
            Err(e) => {
                error = Some(format!("receiving requests: {e}"));
                break;
            }
        };
        let request = &buf[..n];
        if n < RR_SEQ_LEN as usize || p.hello.is_some_and(|h| request == h) {
            continue;
        }
        count.add(n as u64, sh.now_ns());
        response[..8].copy_from_slice(&request[..8]);
        if let Err(e) = send_datagram(&s, &response, sh, &mut local_drops) {
            error = Some(e);
            break;
        }
        sh.bytes.store(count.bytes, Ordering::Relaxed);
        sh.messages.store(count.messages, Ordering::Relaxed);
    }
    let intervals = rec.finish(sh.now_ns(), || Snapshot::of(&count));
    report(&count, intervals, error)
}

/// Connect/request/response: a new TCP connection per transaction, attached to the test with
/// its cookie in the same write as the request, closed with a reset (SO_LINGER 0) so that
/// thousands of transactions leave no TIME_WAIT behind to exhaust the client's ports.
struct CrrTransact {
    addr: std::net::SocketAddr,
    /// The attach frame, then the request.
    request: Vec<u8>,
    frame_len: usize,
    response: Vec<u8>,
}

impl CrrTransact {
    fn new(addr: std::net::SocketAddr, cookie: u64, p: &RoleParams) -> Self {
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
            request,
            frame_len,
            response: vec![0u8; p.spec.response_len() as usize],
        }
    }
}

impl Transact for CrrTransact {
    fn transact(
        &mut self,
        _seq: u64,
        len: u64,
        sh: &Shared,
        p: &RoleParams,
    ) -> Result<bool, String> {
        let mut s = TcpStream::connect_timeout(&self.addr, Duration::from_secs(10))
            .map_err(|e| format!("connecting for a transaction: {e}"))?;
        let _ = s.set_nodelay(true);
        let _ = socket2::SockRef::from(&s).set_linger(Some(Duration::ZERO));
        let _ = s.set_write_timeout(Some(POLL));
        let _ = s.set_read_timeout(Some(POLL));
        let end = self.frame_len + len as usize;
        write_full(&mut s, &self.request[..end], sh, p)?;
        if read_full(&mut s, &mut self.response, sh, p)? {
            Ok(true)
        } else {
            Err("the server closed a transaction's connection without answering".into())
        }
    }
}

/// Connect/request/response, the server: each transaction's connection arrives attached;
/// read its request, answer, close.
fn crr_server(
    conns: &std::sync::mpsc::Receiver<TcpStream>,
    p: &RoleParams,
    sh: &Shared,
) -> SideReport {
    let spec = &p.spec;
    let response = payload(spec.response_len());
    let mut request = vec![0u8; spec.size as usize];
    let mut rec = Recorder::of(p);
    let mut count = Count::default();
    let error: Option<String>;
    loop {
        let now = sh.now_ns();
        rec.tick(now, || Snapshot::of(&count));
        if let Some(why) = receiver_done(sh, p, &count, now) {
            error = why;
            break;
        }
        let Ok(mut s) = conns.recv_timeout(POLL) else {
            continue;
        };
        let _ = s.set_nodelay(true);
        let _ = s.set_read_timeout(Some(POLL));
        let _ = s.set_write_timeout(Some(POLL));
        let len = spec.bytes.map_or(spec.size, |total| {
            total.saturating_sub(count.bytes).clamp(1, spec.size)
        });
        // A transaction that breaks (the client reset it) ends that transaction only.
        if !matches!(
            read_full(&mut s, &mut request[..len as usize], sh, p),
            Ok(true)
        ) {
            continue;
        }
        count.add(len, sh.now_ns());
        let _ = write_full(&mut s, &response, sh, p);
        sh.bytes.store(count.bytes, Ordering::Relaxed);
        sh.messages.store(count.messages, Ordering::Relaxed);
    }
    let intervals = rec.finish(sh.now_ns(), || Snapshot::of(&count));
    report(&count, intervals, error)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ms_bins_count_every_millisecond_between_the_first_and_the_last() {
        let mut b = MsBins::new();
        b.add(5_100_000, 100); // ms 5
        b.add(5_900_000, 100);
        b.add(6_000_000, 300); // ms 6
        b.add(9_500_000, 50); // ms 9: ms 7 and 8 sent nothing; ms 9 is partial
        let s = b.finish().expect("whole milliseconds");
        assert_eq!(s.count, 4); // 5, 6, 7, 8
        assert_eq!((s.min_ns, s.max_ns), (0, 300));
        assert_eq!(s.mean_ns, 125.0);
        assert_eq!(MsBins::new().finish(), None);
    }
}
