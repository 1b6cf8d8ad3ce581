//! What each side measured and sends over the control channel at the end of a test
//! ([`SideReport`] and the records it holds).

use serde::{Deserialize, Serialize};

use wirebench_stats::{LossRunsSummary, TimeSummary};

/// What a side does in a test.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Sends the data.
    Sender,
    /// Receives and counts the data.
    Receiver,
}

/// How a side moved the data: recorded, not assumed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Datapath {
    /// System calls used for data, e.g. "send/recv" or "write/read".
    pub io: String,
    /// Messages handed to the kernel per system call.
    pub batch: u32,
    /// TCP: the most bytes one write hands the kernel (a sender) or one read asks for (a
    /// receiver). A streaming sender's calls need not follow the message size, which stays
    /// the unit of counting.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call_bytes: Option<u64>,
    /// Socket send buffer granted by the kernel (SO_SNDBUF as read back), bytes.
    pub send_buffer_bytes: u64,
    /// Socket receive buffer granted by the kernel (SO_RCVBUF as read back), bytes.
    pub recv_buffer_bytes: u64,
    /// Kernel features in use, e.g. "tcp_nodelay".
    #[serde(default, deserialize_with = "wirebench_stats::bounded::list")]
    pub features: Vec<String>,
    /// TCP: the congestion control of the data connection, as the kernel reports it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tcp_congestion: Option<String>,
    /// TCP senders with `--zerocopy`: what MSG_ZEROCOPY really did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zerocopy: Option<ZeroCopyUse>,
    /// The user-space TCP/IP stack that carried the data connection; absent when it was the
    /// kernel's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stack: Option<UserStack>,
    /// Figures this side could not measure, each with the reason, so that a reader does not
    /// take a missing figure for a zero.
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "wirebench_stats::bounded::list"
    )]
    pub unavailable: Vec<Unavailable>,
    /// Request/response with `--busy-poll`: how this side waited; absent when it blocked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub busy_poll: Option<BusyPoll>,
    /// Offloads this side wanted and went without, once each, with the kernel's reason:
    /// UDP GSO or GRO the kernel does not offer, or GSO a device refused mid-test.
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "wirebench_stats::bounded::list"
    )]
    pub fallbacks: Vec<Fallback>,
}

/// An offload a side went without (`datapath.fallbacks`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fallback {
    /// The feature, as `datapath.features` names it (`udp_gso`, `udp_gro`).
    pub feature: String,
    /// Why, in the kernel's words.
    pub reason: String,
}

/// How a request/response side busy-polled (`--busy-poll`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BusyPoll {
    /// How long each wait spun on the non-blocking socket before it blocked, ns.
    pub spin_ns: u64,
    /// SO_BUSY_POLL as the kernel holds it after asking for the spin time, µs; absent when
    /// the kernel refused it (raising it needs CAP_NET_ADMIN). It acts only on devices with
    /// NAPI polling (not loopback).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub so_busy_poll_us: Option<u64>,
    /// Why the kernel refused SO_BUSY_POLL, when it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub so_busy_poll_refused: Option<String>,
    /// Waits for a request or a response that the spin ended: the data came while spinning.
    pub spun: u64,
    /// Waits that fell back to blocking after the whole spin.
    pub blocked: u64,
}

/// A user-space TCP/IP stack (e.g. smoltcp on a TUN device) as it carried a test.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserStack {
    /// The stack, e.g. "smoltcp".
    pub name: String,
    /// Its version.
    pub version: String,
    /// The TUN device it sends and receives IP packets on.
    pub device: String,
    /// Its IPv4 address (with prefix), distinct from the kernel's addresses on the host.
    pub address: String,
    /// The device's MTU, bytes.
    pub mtu_bytes: u64,
    /// The MSS it announced (its receive side), bytes.
    pub mss_bytes: u64,
    /// The congestion control it ran ("none", "reno", "cubic").
    pub congestion_control: String,
    /// Its socket's send buffer, bytes (fixed: no autotuning).
    pub send_buffer_bytes: u64,
    /// Its socket's receive buffer, bytes (fixed; the largest window it can offer).
    pub recv_buffer_bytes: u64,
    /// All the memory the stack holds for packets and sockets, bytes: the two socket
    /// buffers and the device's packet buffer. Compare with the process's RSS.
    pub buffer_memory_bytes: u64,
    /// Segments it retransmitted, when the stack counts them; absent when it does not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retransmits: Option<u64>,
}

/// A figure a side could not measure, and why.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Unavailable {
    /// The figure, as named in the results document (e.g. "tcp_info").
    pub figure: String,
    /// Why it is absent.
    pub reason: String,
}

/// What a `--zerocopy` TCP sender's MSG_ZEROCOPY sends became, from the kernel's
/// completion notifications.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ZeroCopyUse {
    /// The kernel accepted SO_ZEROCOPY on the socket; if not, plain sends were made.
    pub enabled: bool,
    /// Sends made with MSG_ZEROCOPY.
    pub sends: u64,
    /// Completions the kernel reported (it may still hold a few at the end).
    pub completed: u64,
    /// Completed sends that the kernel copied after all (loopback always does): zero copy
    /// was really used only for `completed - copied`.
    pub copied: u64,
}

/// A TCP connection's state from the kernel's TCP_INFO at the end of the test.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TcpInfo {
    /// Segments retransmitted over the connection's life (`tcpi_total_retrans`).
    pub retransmits: u64,
    /// Smoothed round-trip time, µs (`tcpi_rtt`).
    pub rtt_us: u64,
    /// Its variation, µs (`tcpi_rttvar`).
    pub rttvar_us: u64,
    /// Congestion window, segments (`tcpi_snd_cwnd`).
    pub snd_cwnd_segments: u64,
    /// Sender's maximum segment size, bytes (`tcpi_snd_mss`).
    pub snd_mss_bytes: u64,
}

/// A QUIC connection as its stack saw it (quinn's connection statistics), at the end of
/// the test or of an interval. Several connections (`-P`): counters add up, windows add
/// up, the smoothed round-trip time is the largest and the minimum the smallest.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct QuicInfo {
    /// The congestion controller (`--cc`): cubic, newreno or bbr.
    pub congestion_control: String,
    /// Smoothed round-trip time, µs.
    pub rtt_us: u64,
    /// Least round-trip time seen, µs.
    pub min_rtt_us: u64,
    /// Congestion window, bytes.
    pub cwnd_bytes: u64,
    /// Packets declared lost.
    pub lost_packets: u64,
    /// Bytes in the packets declared lost.
    pub lost_bytes: u64,
    /// Congestion events (window reductions).
    pub congestion_events: u64,
    /// QUIC packets sent.
    pub sent_packets: u64,
    /// UDP datagrams sent and received.
    pub wire_datagrams_sent: u64,
    /// See `wire_datagrams_sent`.
    pub wire_datagrams_received: u64,
    /// UDP payload bytes sent and received (QUIC's headers, acknowledgements and
    /// retransmissions included): the wire beside the goodput.
    pub wire_bytes_sent: u64,
    /// See `wire_bytes_sent`.
    pub wire_bytes_received: u64,
    /// The path's maximum UDP payload as the stack found it, bytes.
    pub mtu_bytes: u64,
    /// From the first Initial sent (client) or received (server) to the handshake's
    /// confirmation, µs.
    pub handshake_us: u64,
    /// Connections these figures cover.
    pub connections: u32,
    /// QUIC datagrams (`--datagrams`) the stack put in packets, and took from packets: its
    /// own count beside the test's. Absent when none.
    #[serde(default, skip_serializing_if = "crate::spec::is_zero")]
    pub datagrams_sent: u64,
    /// See `datagrams_sent`.
    #[serde(default, skip_serializing_if = "crate::spec::is_zero")]
    pub datagrams_received: u64,
    /// `--quic-0rtt`: connections whose first data the server took in 0-RTT (a resumed
    /// session's early data). Absent when none.
    #[serde(default, skip_serializing_if = "crate::spec::is_zero")]
    pub zero_rtt_accepted: u64,
}

impl QuicInfo {
    /// Adds another connection's figures to these.
    pub fn merge(&mut self, o: &QuicInfo) {
        if self.connections == 0 {
            *self = o.clone();
            return;
        }
        self.rtt_us = self.rtt_us.max(o.rtt_us);
        self.min_rtt_us = self.min_rtt_us.min(o.min_rtt_us);
        self.cwnd_bytes += o.cwnd_bytes;
        self.lost_packets += o.lost_packets;
        self.lost_bytes += o.lost_bytes;
        self.congestion_events += o.congestion_events;
        self.sent_packets += o.sent_packets;
        self.wire_datagrams_sent += o.wire_datagrams_sent;
        self.wire_datagrams_received += o.wire_datagrams_received;
        self.wire_bytes_sent += o.wire_bytes_sent;
        self.wire_bytes_received += o.wire_bytes_received;
        self.mtu_bytes = self.mtu_bytes.min(o.mtu_bytes);
        self.handshake_us = self.handshake_us.max(o.handshake_us);
        self.connections += o.connections;
        self.datagrams_sent += o.datagrams_sent;
        self.datagrams_received += o.datagrams_received;
        self.zero_rtt_accepted += o.zero_rtt_accepted;
    }
}

/// One side of a file transfer (`--file`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileReport {
    /// File bytes sent, or received (the headers of UDP datagrams not included).
    pub bytes: u64,
    /// XXH3-64 of the file's bytes as sent, or of the copy as received (hex).
    #[serde(default)]
    pub digest: Option<String>,
    /// Where the receiver saved the copy, if it did.
    #[serde(default)]
    pub saved_as: Option<String>,
    /// UDP streaming: byte ranges `[start, end)` of the file that never arrived.
    #[serde(default, deserialize_with = "wirebench_stats::bounded::list")]
    pub missing: Vec<(u64, u64)>,
    /// Ranges beyond the 10,000 listed.
    #[serde(default)]
    pub missing_more: u64,
    /// Why saving failed, if it did.
    #[serde(default)]
    pub error: Option<String>,
}

/// What a side's data thread cost.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Resources {
    /// CPU time in user space of the data thread, s.
    pub cpu_user_s: f64,
    /// CPU time in the kernel on behalf of the data thread, s.
    pub cpu_system_s: f64,
    /// Both, as a percentage of one core over the side's time.
    pub cpu_percent: f64,
    /// Peak resident memory of the side's process, KiB (a server's: since it started).
    pub max_rss_kib: u64,
    /// Resident memory of the side's process when the data began, KiB (a server's: what it
    /// holds between tests, plus any other tests running).
    #[serde(default)]
    pub rss_before_kib: u64,
    /// Resident memory of the side's process when the data ended, KiB.
    #[serde(default)]
    pub rss_after_kib: u64,
}

/// Counters of one reporting interval, relative to the side's start.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct IntervalRecord {
    /// Interval start, ns since the side started.
    pub start_ns: u64,
    /// Interval end, ns since the side started.
    pub end_ns: u64,
    /// Bytes sent or received in the interval.
    pub bytes: u64,
    /// Messages sent or received in the interval.
    pub messages: u64,
    /// UDP receivers: datagrams newly found missing in the interval (gaps in sequence numbers
    /// that late arrivals did not fill by the interval's end; 0 when they filled older ones).
    #[serde(default)]
    pub lost: u64,
    /// UDP receivers: RFC 3550 jitter at the interval's end, ns.
    #[serde(default)]
    pub jitter_ns: Option<f64>,
    /// UDP receivers: median one-way delay of the interval's datagrams, ns (offset by the
    /// clocks' difference between hosts).
    #[serde(default)]
    pub delay_p50_ns: Option<i64>,
    /// UDP receivers: 99th percentile of the interval's one-way delays, ns.
    #[serde(default)]
    pub delay_p99_ns: Option<i64>,
    /// TCP senders: segments retransmitted in the interval (TCP_INFO's `tcpi_total_retrans`,
    /// read once as the interval closes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retransmits: Option<u64>,
    /// TCP senders: the congestion window at the interval's end, bytes (`tcpi_snd_cwnd` ×
    /// `tcpi_snd_mss`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwnd_bytes: Option<u64>,
    /// QUIC senders: the smoothed round-trip time at the interval's end, µs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rtt_us: Option<u64>,
    /// QUIC senders: packets declared lost in the interval.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lost_packets: Option<u64>,
}

/// Counts of values in one bucket `low_ns ..= high_ns` of a histogram.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NsBucket {
    /// Lowest value of the bucket, ns.
    pub low_ns: u64,
    /// Highest value of the bucket, ns.
    pub high_ns: u64,
    /// Values counted.
    pub count: u64,
}

/// What a UDP receiver learned from sequence numbers and send times.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct UdpCounts {
    /// Whether the datagrams carried the header (16 bytes or more); if not, only bytes and
    /// messages were counted.
    pub sequenced: bool,
    /// Datagrams received more than once (not counted in the totals).
    pub duplicates: u64,
    /// Datagrams that arrived after one with a higher sequence number.
    pub reordered: u64,
    /// Datagrams too far behind to tell late from duplicate (not counted in the totals).
    pub too_old: u64,
    /// Datagrams that were not the test's (a sequence number not keyed with the stream's
    /// token, or a short datagram where every one carries a header): dropped, and in no
    /// other count.
    #[serde(default)]
    pub foreign: u64,
    /// RFC 3550 interarrival jitter at the end, ns.
    pub jitter_ns: f64,
    /// Largest distance below the highest sequence number at which a datagram arrived.
    #[serde(default)]
    pub max_reorder_extent: u64,
    /// Whether both ends read one clock (same kernel boot id), so one-way delay is absolute.
    #[serde(default)]
    pub same_clock: bool,
    /// Settled loss runs (after the sender's count was known).
    #[serde(default)]
    pub loss_runs: LossRunsSummary,
    /// Length of the hole-free run of sequence numbers from 0.
    #[serde(default)]
    pub in_order_prefix: u64,
    /// When sequence number 0 arrived, ns since the side started.
    #[serde(default)]
    pub prefix_start_ns: Option<u64>,
    /// When the hole-free run from 0 was last extended, ns since the side started.
    #[serde(default)]
    pub prefix_end_ns: Option<u64>,
    /// One-way delays (receiver's clock minus sender's), ns.
    #[serde(default)]
    pub delay: Option<TimeSummary>,
    /// Times between consecutive arrivals, ns.
    #[serde(default)]
    pub interarrival: Option<TimeSummary>,
    /// Times between consecutive arrivals in power-of-two buckets.
    #[serde(default, deserialize_with = "wirebench_stats::bounded::list")]
    pub interarrival_buckets: Vec<NsBucket>,
    /// UDP datagrams the receiving host's kernel dropped for a bad checksum during the test
    /// (`InCsumErrors` of IPv4 and IPv6, end minus start): corrupted on the way, so never
    /// counted above. The host's (network namespace's) count, any socket's; absent where
    /// the kernel's counters could not be read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checksum_errors: Option<u64>,
}

/// Everything one side measured.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SideReport {
    /// Sender or receiver.
    pub role: Option<Role>,
    /// Payload bytes sent, or received (unique).
    pub bytes: u64,
    /// Messages sent, or received (unique).
    pub messages: u64,
    /// Time of the first message sent or received, ns since the side started.
    pub first_ns: Option<u64>,
    /// Time of the last message sent (stop-and-wait: acknowledged) or received.
    pub last_ns: Option<u64>,
    /// Time from the side's start to its end, ns.
    pub elapsed_ns: u64,
    /// Wall-clock time of the side's start, ns since the Unix epoch.
    pub epoch_unix_ns: u64,
    /// Per-interval counters.
    #[serde(deserialize_with = "wirebench_stats::bounded::list")]
    pub intervals: Vec<IntervalRecord>,
    /// UDP receivers: sequence accounting.
    pub udp: Option<UdpCounts>,
    /// Stop-and-wait over UDP: messages sent again after an ack timeout.
    pub retransmits: u64,
    /// UDP senders: datagrams a local firewall rule dropped on the way out (send gave EPERM);
    /// they count as sent and, unless resent, as lost.
    #[serde(default)]
    pub local_drops: u64,
    /// Request/response clients: the round trips, ns.
    #[serde(default)]
    pub latency: Option<TimeSummary>,
    /// Request/response clients: the round trips' histogram, in log-spaced buckets (see
    /// `TimeHistogram::log_buckets`); empty when the side kept none.
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "wirebench_stats::bounded::list"
    )]
    pub latency_buckets: Vec<NsBucket>,
    /// Request/response over UDP: transactions given up after `--ack-timeout` without an
    /// answer (the request or the response was lost).
    #[serde(default)]
    pub timeouts: u64,
    /// What the side's data thread cost.
    #[serde(default)]
    pub resources: Option<Resources>,
    /// TCP: the data connection's TCP_INFO at the end.
    #[serde(default)]
    pub tcp_info: Option<TcpInfo>,
    /// QUIC: the stream's connection as the stack saw it at the end (on the first stream
    /// of each connection only, so that the side's sum counts each connection once).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quic: Option<QuicInfo>,
    /// Stream senders: bytes sent in each millisecond of the test, as a distribution.
    #[serde(default)]
    pub ms_bytes: Option<TimeSummary>,
    /// File transfers: this side's part.
    #[serde(default)]
    pub file: Option<FileReport>,
    /// With several streams (`-P`): each stream's own report (without intervals); the
    /// fields above are then their sums (rates, counts) or merged distributions.
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "wirebench_stats::bounded::list"
    )]
    pub streams: Vec<SideReport>,
    /// `--bidir`: this side's streams of the reverse direction, merged the same way; the
    /// fields above are then the forward direction's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reverse: Option<Box<SideReport>>,
    /// How the data moved.
    pub datapath: Datapath,
    /// Why the side stopped early, if it did.
    pub error: Option<String>,
    /// Why the side stopped early, for code (absent from a peer that does not send kinds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_kind: Option<crate::error_kind::ErrorKind>,
    /// Live interval records this side did not send because its peer read the control
    /// connection too slowly (the report itself still holds every interval).
    #[serde(default, skip_serializing_if = "crate::spec::is_zero")]
    pub live_intervals_dropped: u64,
}
