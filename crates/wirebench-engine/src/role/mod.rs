//! The data roles: send or receive one stream over TCP or UDP, streaming or stop-and-wait,
//! or request/response.
//!
//! Each loop owns its counters and checks the clock once per message, which it needs anyway
//! for the UDP header and pacing. Blocking calls carry short kernel timeouts so that the
//! loop notices a stop, a deadline or an interval boundary while the path is idle.
//!
//! One idea per file: [`count`] holds the counters and the interval recorder, [`end`] why a
//! loop stops, [`recv_loop`] the receive loop every receiving role shares, [`sender`] what a
//! sender decides before each message, [`blocking`] the blocking calls that keep an eye on
//! the clock; then one file per role: [`tcp`], [`udp_send`], [`udp_recv`], [`saw`] (UDP
//! stop-and-wait), [`rr`] (request/response, rr and crr), [`rr_key`] (which UDP requests
//! and responses are the test's) and [`probe`] (open-loop UDP request/response: rrul's
//! probes).

mod blocking;
pub(crate) mod count;
mod early_end;
pub(crate) mod iperf3;
pub(crate) mod limit;
mod perf_rr;
pub(crate) mod probe;
mod quic_datagrams;
mod recv_loop;
pub(crate) mod rr;
mod rr_key;
mod saw;
mod sender;
mod tcp;
mod udp_recv;
mod udp_send;
pub(crate) mod user;

use std::net::{TcpStream, UdpSocket};
use std::sync::mpsc::Sender;
use std::time::Duration;

use wirebench_proto::header;
use wirebench_proto::results::{Datapath, IntervalRecord, Resources, Role, SideReport};
use wirebench_proto::spec::{Mechanism, TestSpec};

use crate::file::{FileSink, FileSource};
use crate::packet_log_writer::LogOut;
use crate::sys::udp::Offloads;
use crate::sys::{max_rss_kib, rss_kib, tcp_info, thread_cpu_ns};
use crate::Shared;
use count::Count;
use early_end::RoleError;

/// How long a blocking data call may wait before the loop looks at the clock again.
pub(super) const POLL: Duration = Duration::from_millis(20);

/// A connected data socket.
#[derive(Debug)]
pub enum DataSocket {
    /// A TCP data connection.
    Tcp(TcpStream),
    /// A connected UDP socket.
    Udp(UdpSocket),
    /// A TCP data connection in a user-space stack (see [`user`]).
    User(Box<dyn user::UserStream>),
    /// A stream of a QUIC connection.
    Quic(Box<crate::quic::QuicStream>),
}

/// What a role needs besides its socket.
pub struct RoleParams {
    /// The test.
    pub spec: TestSpec,
    /// Hard stop, ns since the side's start (a server limit); none on a client.
    pub deadline_ns: Option<u64>,
    /// The server's limits on what this stream moves, both ways; none on a client.
    pub limit: Option<limit::MoveLimit>,
    /// The UDP hello of this stream: retransmitted copies may arrive and are not data.
    pub hello: Option<[u8; header::UDP_HELLO_LEN]>,
    /// UDP: the stream's secret token, from the test's cookie; sequence numbers on the
    /// wire are keyed with it ([`header::SeqToken`]).
    pub token: header::SeqToken,
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
    pub(super) fn source(&mut self) -> Option<&mut FileSource> {
        match self {
            FilePart::Source(s) => Some(s),
            FilePart::Sink(_) => None,
        }
    }

    pub(super) fn sink(&mut self) -> Option<&mut FileSink> {
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
        /// A QUIC test: how each transaction's connection is made (else TCP).
        quic: Option<rr::QuicDial>,
    },
    /// The server gets each transaction's connection (a QUIC one's stream) from its
    /// `attach` here.
    Server(std::sync::mpsc::Receiver<DataSocket>),
    /// A QUIC perf server's request/response: each transaction a stream of its own on the
    /// connection of the stream the role was given (its first transaction's).
    PerfStreams,
}

/// A message's payload of `size` bytes.
pub(super) fn payload(size: u64) -> Vec<u8> {
    // Not all zeros, so that compression on the path cannot flatter the result.
    (0..size)
        .map(|i| (i.wrapping_mul(131) >> 3) as u8)
        .collect()
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
    // A QUIC stream's connection, for its figures once the role is done (the first stream
    // of each connection reports them; a crr client's are its transactions').
    let own_connection = matches!(crr, None | Some(CrrPart::PerfStreams));
    let quic = match &sock {
        DataSocket::Quic(s) if s.reports_connection() && own_connection => {
            Some(std::sync::Arc::clone(s.connection()))
        }
        _ => None,
    };
    // Its thread's CPU (the stack's crypto and I/O) belongs to the test too.
    let quic_cpu_start = quic.as_ref().and_then(|c| c.thread_cpu_ns());
    let mut rep = match (role, sock) {
        // The perf protocol's requests: the set-up stream carries the first.
        (_, DataSocket::Quic(s)) if matches!(crr, Some(CrrPart::PerfStreams)) => {
            rr::rr_client(&mut perf_rr::PerfRr::new(s, &p), &p, sh)
        }
        // Connect/request/response: the set-up connection is not used.
        (_, _) if crr.is_some() => match crr {
            Some(CrrPart::Client { addr, cookie, quic }) => {
                let mut t = rr::CrrTransact::new(addr, cookie, quic, &p);
                let mut rep = rr::rr_client(&mut t, &p, sh);
                rep.quic = t.quic_info();
                rep
            }
            Some(CrrPart::Server(conns)) => rr::crr_server(&conns, &p, sh),
            Some(CrrPart::PerfStreams) | None => SideReport::default(),
        },
        (Role::Sender, DataSocket::Tcp(s)) if rr => {
            rr::rr_client(&mut rr::TcpRr::new(s, &p), &p, sh)
        }
        (Role::Sender, DataSocket::Udp(s)) if rr && p.spec.open_loop_interval_ns.is_some() => {
            probe::udp_probe_client(&s, &p, sh)
        }
        (Role::Sender, DataSocket::Udp(s)) if rr => {
            rr::rr_client(&mut rr::UdpRr::new(s, &p), &p, sh)
        }
        (Role::Receiver, DataSocket::Tcp(s)) if rr => rr::tcp_rr_server(s, &p, sh),
        (Role::Receiver, DataSocket::Udp(s)) if rr => rr::udp_rr_server(s, &p, sh),
        (Role::Sender, DataSocket::User(s)) if rr => {
            rr::rr_client(&mut rr::TcpRr::new(s, &p), &p, sh)
        }
        (Role::Receiver, DataSocket::User(s)) if rr => rr::tcp_rr_server(s, &p, sh),
        (Role::Sender, DataSocket::Quic(s)) if rr => {
            rr::rr_client(&mut rr::TcpRr::new(s, &p), &p, sh)
        }
        (Role::Receiver, DataSocket::Quic(s)) if rr => rr::tcp_rr_server(s, &p, sh),
        (Role::Sender, DataSocket::Quic(s)) if p.spec.quic_datagrams => {
            quic_datagrams::quic_datagram_send(s, &p, sh)
        }
        (Role::Receiver, DataSocket::Quic(s)) if p.spec.quic_datagrams => {
            let log = p.packet_log.take();
            quic_datagrams::quic_datagram_receive(s, &p, log, sh)
        }
        (Role::Sender, DataSocket::Quic(s)) => tcp::tcp_send(s, &p, &mut file, sh),
        (Role::Receiver, DataSocket::Quic(s)) => tcp::tcp_receive(s, &p, &mut file, sh),
        (Role::Sender, DataSocket::User(s)) => tcp::tcp_send(s, &p, &mut file, sh),
        (Role::Receiver, DataSocket::User(s)) => tcp::tcp_receive(s, &p, &mut file, sh),
        (Role::Sender, DataSocket::Tcp(s)) => tcp::tcp_send(s, &p, &mut file, sh),
        (Role::Receiver, DataSocket::Tcp(s)) => tcp::tcp_receive(s, &p, &mut file, sh),
        (Role::Sender, DataSocket::Udp(s)) if saw => saw::udp_send(s, &p, &mut file, sh),
        (Role::Sender, DataSocket::Udp(s)) => udp_send::udp_send_stream(s, &p, &mut file, sh),
        (Role::Receiver, DataSocket::Udp(s)) if saw => saw::udp_receive_saw(s, &p, &mut file, sh),
        (Role::Receiver, DataSocket::Udp(s)) => {
            let log = p.packet_log.take();
            udp_recv::udp_receive(s, &p, log, &mut file, sh)
        }
    };
    rep.role = Some(role);
    rep.epoch_unix_ns = sh.epoch_unix_ns;
    if let Some(f) = file {
        rep.file = Some(f.finish(p.spec.file_bytes()));
    }
    rep.tcp_info = tcp.as_ref().and_then(tcp_info);
    // (A crr client's figures are its transactions' connections', which its role kept.)
    if let Some(c) = &quic {
        rep.quic = Some(c.info_once_streams_done());
    }
    // This thread's CPU, and its QUIC connection's thread's where both its readings came.
    let mut cpu = delta(cpu_start, thread_cpu_ns());
    let quic_end = quic.as_ref().and_then(|c| c.thread_cpu_ns());
    if let (Some(start), Some(end)) = (quic_cpu_start, quic_end) {
        let q = delta(start, end);
        cpu = (cpu.0 + q.0, cpu.1 + q.1);
    }
    rep.resources = Some(resources(cpu, rss_before_kib, sh));
    rep.elapsed_ns = sh.now_ns();
    if rep.datapath.io.is_empty() {
        rep.datapath = p.datapath;
    }
    rep
}

/// User and system CPU time between two readings, ns.
fn delta(start: (u64, u64), end: (u64, u64)) -> (u64, u64) {
    (end.0.saturating_sub(start.0), end.1.saturating_sub(start.1))
}

/// What the role cost: `cpu` (user, system ns), and memory.
fn resources(cpu: (u64, u64), rss_before_kib: u64, sh: &Shared) -> Resources {
    let (user, system) = (cpu.0 as f64 / 1e9, cpu.1 as f64 / 1e9);
    let elapsed = sh.now_ns() as f64 / 1e9;
    Resources {
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
    }
}

/// A role's report from its totals, its intervals and why it ended early, if it did.
pub(super) fn report(
    count: &Count,
    intervals: Vec<IntervalRecord>,
    error: Option<RoleError>,
) -> SideReport {
    SideReport {
        bytes: count.bytes,
        messages: count.messages,
        first_ns: count.first_ns,
        last_ns: count.last_ns,
        intervals,
        error_kind: error.as_ref().map(RoleError::kind),
        error: error.map(|e| e.to_string()),
        ..SideReport::default()
    }
}
