//! What each side measured ([`SideReport`], sent over the control channel) and the results
//! document built from both ([`Results`], the JSON contract documented in `docs/results.md`).

use serde::{Deserialize, Serialize};

use wirebench_stats::{LossRunsSummary, TimeSummary};

use crate::spec::{Direction, Mechanism, Protocol, TestSpec};

/// Version of the results document. Keys are only added within a version; renaming or
/// removing one bumps it.
pub const SCHEMA: u32 = 1;

const NS_PER_S: f64 = 1e9;

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
    /// Socket send buffer granted by the kernel (SO_SNDBUF as read back), bytes.
    pub send_buffer_bytes: u64,
    /// Socket receive buffer granted by the kernel (SO_RCVBUF as read back), bytes.
    pub recv_buffer_bytes: u64,
    /// Kernel features in use, e.g. "tcp_nodelay".
    #[serde(default)]
    pub features: Vec<String>,
    /// TCP: the congestion control of the data connection, as the kernel reports it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tcp_congestion: Option<String>,
    /// TCP senders with `--zerocopy`: what MSG_ZEROCOPY really did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zerocopy: Option<ZeroCopyUse>,
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
    #[serde(default)]
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
    #[serde(default)]
    pub interarrival_buckets: Vec<NsBucket>,
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
    /// Stream senders: bytes sent in each millisecond of the test, as a distribution.
    #[serde(default)]
    pub ms_bytes: Option<TimeSummary>,
    /// File transfers: this side's part.
    #[serde(default)]
    pub file: Option<FileReport>,
    /// With several streams (`-P`): each stream's own report (without intervals); the
    /// fields above are then their sums (rates, counts) or merged distributions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub streams: Vec<SideReport>,
    /// `--bidir`: this side's streams of the reverse direction, merged the same way; the
    /// fields above are then the forward direction's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reverse: Option<Box<SideReport>>,
    /// How the data moved.
    pub datapath: Datapath,
    /// Why the side stopped early, if it did.
    pub error: Option<String>,
}

impl SideReport {
    /// Seconds from the side's start to its last message, or to its end if it had none.
    fn active_s(&self) -> f64 {
        self.last_ns.unwrap_or(self.elapsed_ns) as f64 / NS_PER_S
    }

    /// Seconds from the first message to the last (seed 002's send or receive time).
    fn first_to_last_s(&self) -> f64 {
        match (self.first_ns, self.last_ns) {
            (Some(a), Some(b)) => b.saturating_sub(a) as f64 / NS_PER_S,
            _ => 0.0,
        }
    }

    /// This side's totals.
    fn totals(&self) -> Totals {
        let transfer_s = self.first_to_last_s();
        Totals {
            bytes: self.bytes,
            messages: self.messages,
            duration_s: self.active_s(),
            transfer_s,
            transfer_bps: bps(self.bytes, transfer_s),
        }
    }
}

/// The results document (`run --json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Results {
    /// Document version, [`SCHEMA`].
    pub schema: u32,
    /// Tool version.
    pub wirebench: String,
    /// Server address the test ran against.
    pub server: String,
    /// The test as run.
    pub test: TestView,
    /// How each side moved the data.
    pub datapath: Sides<Datapath>,
    /// Per-interval figures, sender and receiver side by side.
    pub intervals: Vec<IntervalView>,
    /// Totals: the sum over all streams.
    pub end: End,
    /// With `-P` streams: each stream's own totals, in stream order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub streams: Vec<End>,
    /// `--bidir`: the reverse direction (the server sends) with the same keys as the
    /// top-level `intervals`, `end` and `streams`, which then describe the forward one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reverse: Option<Half>,
    /// Set when the test did not complete; the figures are then partial.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// A value for the client and one for the server.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Sides<T> {
    /// Client side.
    pub client: Option<T>,
    /// Server side.
    pub server: Option<T>,
}

/// The validated spec in the document's units.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TestView {
    /// "tcp" or "udp".
    pub protocol: Protocol,
    /// "stream" or "stop-and-wait".
    pub mechanism: Mechanism,
    /// "forward" (client sends) or "reverse" (server sends).
    pub direction: Direction,
    /// Message size, bytes.
    pub size: u64,
    /// Amount of data asked for, bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
    /// Duration asked for, s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_s: Option<f64>,
    /// Rate asked for, bits/s of payload; 0 is unlimited.
    pub rate_bps: u64,
    /// Rate asked for, messages/s; 0 is not set.
    pub rate_pps: u64,
    /// Pause after each message, s.
    pub gap_s: f64,
    /// Parallel streams.
    pub streams: u32,
    /// Reporting interval, s.
    pub interval_s: f64,
    /// Receiver's wait for data in flight after the sender is done, s.
    pub drain_s: f64,
    /// Stop-and-wait over UDP: resend timeout, s.
    pub ack_timeout_s: f64,
    /// TCP: the congestion control asked for (`--cc`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub congestion: Option<String>,
    /// Request/response: response size, bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_size: Option<u64>,
}

impl From<&TestSpec> for TestView {
    fn from(s: &TestSpec) -> Self {
        let secs = |ns: u64| ns as f64 / NS_PER_S;
        Self {
            protocol: s.protocol,
            mechanism: s.mechanism,
            direction: s.direction,
            size: s.size,
            bytes: s.bytes,
            duration_s: s.duration_ns.map(secs),
            rate_bps: s.rate_bps,
            rate_pps: s.rate_pps,
            gap_s: secs(s.gap_ns),
            streams: s.streams,
            interval_s: secs(s.interval_ns),
            drain_s: secs(s.drain_ns),
            ack_timeout_s: secs(s.ack_timeout_ns),
            response_size: s.mechanism.is_rr().then(|| s.response_len()),
            congestion: s.congestion.clone(),
        }
    }
}

/// One interval, both sides.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IntervalView {
    /// Start, s since the side started.
    pub start_s: f64,
    /// End, s since the side started.
    pub end_s: f64,
    /// Bytes sent in the interval.
    pub sent_bytes: u64,
    /// Messages sent in the interval.
    pub sent_messages: u64,
    /// Bytes received in the interval.
    pub received_bytes: u64,
    /// Messages received in the interval.
    pub received_messages: u64,
    /// Send rate over the interval, bits/s.
    pub sent_bps: f64,
    /// Receive rate over the interval, bits/s.
    pub received_bps: f64,
    /// UDP: datagrams found missing in the interval.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lost: Option<u64>,
    /// UDP: RFC 3550 jitter at the interval's end, ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jitter_ms: Option<f64>,
    /// UDP, both ends on one clock: median one-way delay in the interval, ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delay_p50_ms: Option<f64>,
    /// UDP, both ends on one clock: 99th percentile one-way delay in the interval, ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delay_p99_ms: Option<f64>,
    /// Request/response: median round trip in the interval, µs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_p50_us: Option<f64>,
    /// Request/response: 99th percentile round trip in the interval, µs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_p99_us: Option<f64>,
    /// UDP: median one-way delay in the interval minus the test's smallest, ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delay_variation_p50_ms: Option<f64>,
    /// UDP: 99th percentile one-way delay in the interval minus the test's smallest, ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delay_variation_p99_ms: Option<f64>,
}

/// Totals of one side.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Totals {
    /// Payload bytes.
    pub bytes: u64,
    /// Messages.
    pub messages: u64,
    /// From the side's start to its last message, s.
    pub duration_s: f64,
    /// From the side's first message to its last, s: seed 002's send (or receive) time.
    #[serde(default)]
    pub transfer_s: f64,
    /// Bytes × 8 / `transfer_s`: seed 002's send (or receive) rate.
    #[serde(default)]
    pub transfer_bps: f64,
}

/// A distribution in the unit its key names (`_ms`, `_us`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Percentiles {
    /// Values.
    pub count: u64,
    /// Smallest.
    pub min: f64,
    /// Mean.
    pub mean: f64,
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
    /// 99.9th percentile.
    pub p999: f64,
    /// Largest.
    pub max: f64,
}

impl Percentiles {
    /// Converts a summary in ns into units of `unit_ns` ns (1e6 for ms).
    pub fn from_ns(s: &TimeSummary, unit_ns: f64) -> Self {
        let u = |v: i64| v as f64 / unit_ns;
        Self {
            count: s.count,
            min: u(s.min_ns),
            mean: s.mean_ns / unit_ns,
            p50: u(s.p50_ns),
            p90: u(s.p90_ns),
            p99: u(s.p99_ns),
            p999: u(s.p999_ns),
            max: u(s.max_ns),
        }
    }
}

/// Times between arrivals: percentiles and a histogram, µs.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Interarrival {
    /// Percentiles, µs.
    #[serde(flatten)]
    pub percentiles: Percentiles,
    /// Power-of-two buckets, µs: `{min_us, max_us, count}`.
    pub histogram: Vec<UsBucket>,
}

/// One histogram bucket, µs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct UsBucket {
    /// Lowest value, µs.
    pub min_us: f64,
    /// Highest value, µs.
    pub max_us: f64,
    /// Values counted.
    pub count: u64,
}

/// UDP totals.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct UdpEnd {
    /// Whether datagrams carried sequence numbers; if not, loss is sent minus received
    /// messages and duplicates and reordering cannot be seen.
    pub sequenced: bool,
    /// Datagrams sent but never received, including at the tail.
    pub lost: u64,
    /// Datagrams received more than once.
    pub duplicates: u64,
    /// Datagrams received out of order.
    pub reordered: u64,
    /// `lost` / sent messages.
    pub loss_ratio: f64,
    /// RFC 3550 interarrival jitter, ms.
    pub jitter_ms: f64,
    /// Datagrams too far behind to tell late from duplicate (counted as lost).
    pub too_old: u64,
    /// Largest distance below the highest sequence number at which a datagram arrived.
    pub max_reorder_extent: u64,
    /// "same-host" when both ends read one clock (one-way delay is absolute), else
    /// "unsynchronized" (only delay variation is meaningful).
    pub clocks: String,
    /// One-way delay, ms; only when `clocks` is "same-host".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delay_ms: Option<Percentiles>,
    /// One-way delay minus the smallest one, ms: valid whatever the clocks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delay_variation_ms: Option<Percentiles>,
    /// Times between consecutive arrivals, µs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interarrival_us: Option<Interarrival>,
    /// Loss runs: how many losses came in runs of 1, 2, 3-4, 5-8, ... datagrams.
    pub loss_runs: LossRunsSummary,
    /// UDPmon's "last received sequence number without loss": every datagram up to it
    /// arrived; null when datagram 0 was lost.
    pub last_in_order_seq: Option<u64>,
    /// The lowest sequence number lost; null without loss.
    pub first_lost_seq: Option<u64>,
    /// UDPmon's "bandwidth without loss": `last_in_order_seq × size × 8` over the time from
    /// the arrival of datagram 0 to the arrival that completed `0..=last_in_order_seq`,
    /// bits/s; null with fewer than two datagrams in order.
    pub bandwidth_without_loss_bps: Option<f64>,
}

impl UdpEnd {
    /// `merged`: the counts are several streams' sum, so what belongs to one sequence
    /// (UDPmon's prefix figures) is not given here but per stream.
    fn new(
        spec: &TestSpec,
        sent_messages: u64,
        received_messages: u64,
        c: &UdpCounts,
        merged: bool,
    ) -> Self {
        let lost = sent_messages.saturating_sub(received_messages);
        let one_sequence = !spec.headerless() && !merged;
        let ms = |s: &TimeSummary| Percentiles::from_ns(s, 1e6);
        let last_in_order_seq = c.in_order_prefix.checked_sub(1).filter(|_| one_sequence);
        let bandwidth_without_loss_bps =
            match (last_in_order_seq, c.prefix_start_ns, c.prefix_end_ns) {
                (Some(last), Some(a), Some(b)) if last > 0 && b > a => {
                    Some(last as f64 * spec.size as f64 * 8.0 / ((b - a) as f64 / NS_PER_S))
                }
                _ => None,
            };
        Self {
            sequenced: !spec.headerless(),
            lost,
            duplicates: c.duplicates,
            reordered: c.reordered,
            loss_ratio: if sent_messages > 0 {
                lost as f64 / sent_messages as f64
            } else {
                0.0
            },
            jitter_ms: c.jitter_ns / 1e6,
            too_old: c.too_old,
            max_reorder_extent: c.max_reorder_extent,
            clocks: if c.same_clock {
                "same-host"
            } else {
                "unsynchronized"
            }
            .into(),
            delay_ms: c.delay.as_ref().filter(|_| c.same_clock).map(ms),
            delay_variation_ms: c.delay.as_ref().map(|d| ms(&d.shifted(d.min_ns))),
            interarrival_us: c.interarrival.as_ref().map(|s| Interarrival {
                percentiles: Percentiles::from_ns(s, 1e3),
                histogram: c
                    .interarrival_buckets
                    .iter()
                    .map(|b| UsBucket {
                        min_us: b.low_ns as f64 / 1e3,
                        max_us: b.high_ns as f64 / 1e3,
                        count: b.count,
                    })
                    .collect(),
            }),
            loss_runs: c.loss_runs.clone(),
            last_in_order_seq,
            first_lost_seq: (one_sequence && lost > 0).then_some(c.in_order_prefix),
            bandwidth_without_loss_bps,
        }
    }
}

/// The `end` object.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct End {
    /// The sender's time from start to its last message, s.
    pub duration_s: f64,
    /// What the sender sent.
    pub sent: Totals,
    /// What the receiver received.
    pub received: Totals,
    /// Sent bytes × 8 / sender's duration.
    pub sent_bps: f64,
    /// Received bytes × 8 / receiver's duration (its start to its last message).
    pub received_bps: f64,
    /// UDP loss accounting.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub udp: Option<UdpEnd>,
    /// Messages sent again after an ack timeout (stop-and-wait over UDP).
    pub retransmits: u64,
    /// UDP: datagrams dropped by a firewall rule on the sending host (send gave EPERM).
    pub local_drops: u64,
    /// Request/response: round-trip times, µs (from the request's write to the response's
    /// last byte).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_us: Option<Percentiles>,
    /// Request/response: transactions answered per second of the client's time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transactions_per_s: Option<f64>,
    /// Request/response over UDP: transactions that timed out (counted in no latency).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rr_timeouts: Option<u64>,
    /// Streaming: the sender's rate in each millisecond, bits/s (count is the number of
    /// milliseconds): how evenly the pacer spread the data.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub send_rate_spread: Option<Percentiles>,
    /// TCP: the sender's connection as TCP_INFO saw it at the end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tcp: Option<TcpInfo>,
    /// What each side's data thread cost.
    pub resources: Sides<Resources>,
    /// A file transfer (`--file`): what went and what arrived.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<FileEnd>,
}

/// The `end.file` object of a file transfer.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileEnd {
    /// The file's name.
    pub name: String,
    /// Its size, bytes.
    pub bytes: u64,
    /// File bytes that arrived (over UDP streaming, without duplicates).
    pub received_bytes: u64,
    /// The digest's algorithm.
    pub algorithm: String,
    /// Digest of the file as sent.
    pub sent_digest: Option<String>,
    /// Digest of the copy as received (over UDP streaming: of the saved copy, read back).
    pub received_digest: Option<String>,
    /// Both digests known and equal, and every byte arrived.
    pub identical: bool,
    /// Where the receiver saved the copy.
    pub saved_as: Option<String>,
    /// UDP streaming: `[start, end)` byte ranges of the file that never arrived.
    pub missing: Vec<(u64, u64)>,
    /// Bytes in those ranges.
    pub missing_bytes: u64,
    /// Ranges beyond the 10,000 listed.
    pub missing_ranges_more: u64,
}

fn bps(bytes: u64, seconds: f64) -> f64 {
    if seconds > 0.0 {
        bytes as f64 * 8.0 / seconds
    } else {
        0.0
    }
}

impl Results {
    /// Builds the document from both sides' reports; a missing report (the peer failed)
    /// leaves its figures at zero, and `error` says why.
    pub fn assemble(
        spec: &TestSpec,
        server: String,
        client_report: Option<&SideReport>,
        server_report: Option<&SideReport>,
        error: Option<String>,
    ) -> Self {
        let (forward, reverse) = if spec.direction == Direction::Bidir {
            (
                Half::of(
                    &spec.one_way(Direction::Forward),
                    client_report,
                    server_report,
                ),
                Some(Half::of(
                    &spec.one_way(Direction::Reverse),
                    reverse_part(client_report),
                    reverse_part(server_report),
                )),
            )
        } else {
            (Half::of(spec, client_report, server_report), None)
        };
        let error = error
            .or_else(|| client_report.and_then(|c| c.error.clone()))
            .or_else(|| server_report.and_then(|c| c.error.clone()));
        Self {
            schema: SCHEMA,
            wirebench: format!("wirebench {}", env!("CARGO_PKG_VERSION")),
            server,
            test: TestView::from(spec),
            datapath: Sides {
                client: client_report.map(|c| c.datapath.clone()),
                server: server_report.map(|c| c.datapath.clone()),
            },
            intervals: forward.intervals,
            end: forward.end,
            streams: forward.streams,
            reverse,
            error,
        }
    }
}

/// A side's report of the reverse direction of a `--bidir` test.
fn reverse_part(r: Option<&SideReport>) -> Option<&SideReport> {
    r.and_then(|x| x.reverse.as_deref())
}

/// One direction of a test: its intervals, totals and streams.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Half {
    /// Per-interval figures.
    pub intervals: Vec<IntervalView>,
    /// Totals over all streams of this direction.
    pub end: End,
    /// Each stream's totals (with several streams).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub streams: Vec<End>,
}

impl Half {
    /// One direction from both sides' reports (for `--bidir`: their parts of that direction).
    pub fn of(
        spec: &TestSpec,
        client_report: Option<&SideReport>,
        server_report: Option<&SideReport>,
    ) -> Self {
        let (sender, receiver) = match spec.direction {
            Direction::Reverse => (server_report, client_report),
            // A bidirectional test is measured one way at a time (`TestSpec::one_way`).
            Direction::Forward | Direction::Bidir => (client_report, server_report),
        };
        let empty = SideReport::default();
        let s = sender.unwrap_or(&empty);
        let r = receiver.unwrap_or(&empty);
        let counts = r.udp.clone().unwrap_or_default();
        let udp = (spec.protocol == Protocol::Udp)
            .then(|| UdpEnd::new(spec, s.messages, r.messages, &counts, r.streams.len() > 1));
        let n = s.streams.len().max(r.streams.len());
        let streams = if n > 1 {
            (0..n)
                .map(|i| {
                    End::of(
                        spec,
                        client_report.and_then(|x| x.streams.get(i)),
                        server_report.and_then(|x| x.streams.get(i)),
                    )
                })
                .collect()
        } else {
            Vec::new()
        };
        // Delay variation is measured from the smallest delay of the whole test.
        let min_delay_ns = counts.delay.map(|d| d.min_ns);
        let ms = |ns: i64| ns as f64 / 1e6;
        let us = |ns: i64| ns as f64 / 1e3;
        // Request/response: the client's interval records carry round trips where a UDP
        // receiver's carry one-way delays.
        let rr = spec.mechanism.is_rr();
        let n = s.intervals.len().max(r.intervals.len());
        let intervals = (0..n)
            .map(|i| {
                let si = s.intervals.get(i).copied().unwrap_or_default();
                let ri = r.intervals.get(i).copied().unwrap_or_default();
                let (start_ns, end_ns) = if s.intervals.len() > i {
                    (si.start_ns, si.end_ns)
                } else {
                    (ri.start_ns, ri.end_ns)
                };
                let secs = |a: u64, b: u64| b.saturating_sub(a) as f64 / NS_PER_S;
                IntervalView {
                    start_s: start_ns as f64 / NS_PER_S,
                    end_s: end_ns as f64 / NS_PER_S,
                    sent_bytes: si.bytes,
                    sent_messages: si.messages,
                    received_bytes: ri.bytes,
                    received_messages: ri.messages,
                    sent_bps: bps(si.bytes, secs(si.start_ns, si.end_ns)),
                    received_bps: bps(ri.bytes, secs(ri.start_ns, ri.end_ns)),
                    lost: udp.as_ref().map(|_| ri.lost),
                    jitter_ms: ri.jitter_ns.map(|j| j / 1e6),
                    latency_p50_us: si.delay_p50_ns.filter(|_| rr).map(us),
                    latency_p99_us: si.delay_p99_ns.filter(|_| rr).map(us),
                    delay_p50_ms: ri.delay_p50_ns.filter(|_| counts.same_clock).map(ms),
                    delay_p99_ms: ri.delay_p99_ns.filter(|_| counts.same_clock).map(ms),
                    delay_variation_p50_ms: ri
                        .delay_p50_ns
                        .zip(min_delay_ns)
                        .map(|(d, m)| ms(d.saturating_sub(m))),
                    delay_variation_p99_ms: ri
                        .delay_p99_ns
                        .zip(min_delay_ns)
                        .map(|(d, m)| ms(d.saturating_sub(m))),
                }
            })
            .collect();
        Self {
            intervals,
            end: End::of(spec, client_report, server_report),
            streams,
        }
    }
}

impl End {
    /// The totals of one test (or one stream of it) from both sides' reports.
    pub fn of(
        spec: &TestSpec,
        client_report: Option<&SideReport>,
        server_report: Option<&SideReport>,
    ) -> Self {
        let (sender, receiver) = match spec.direction {
            Direction::Reverse => (server_report, client_report),
            // A bidirectional test is measured one way at a time (`TestSpec::one_way`).
            Direction::Forward | Direction::Bidir => (client_report, server_report),
        };
        let empty = SideReport::default();
        let s = sender.unwrap_or(&empty);
        let r = receiver.unwrap_or(&empty);
        let rr = spec.mechanism.is_rr();
        let sent = s.totals();
        let received = r.totals();
        let counts = r.udp.clone().unwrap_or_default();
        let merged = r.streams.len() > 1;
        let udp = (spec.protocol == Protocol::Udp)
            .then(|| UdpEnd::new(spec, s.messages, r.messages, &counts, merged));
        End {
            duration_s: sent.duration_s,
            sent_bps: bps(sent.bytes, sent.duration_s),
            received_bps: bps(received.bytes, received.duration_s),
            sent,
            received,
            udp,
            retransmits: s.retransmits,
            local_drops: s.local_drops,
            latency_us: s
                .latency
                .as_ref()
                .filter(|_| rr)
                .map(|l| Percentiles::from_ns(l, 1e3)),
            transactions_per_s: rr.then(|| {
                let secs = s.active_s();
                if secs > 0.0 {
                    s.messages.saturating_sub(s.timeouts) as f64 / secs
                } else {
                    0.0
                }
            }),
            rr_timeouts: (rr && spec.protocol == Protocol::Udp).then_some(s.timeouts),
            // bytes per ms × 8000 = bits/s
            send_rate_spread: s
                .ms_bytes
                .as_ref()
                .map(|m| Percentiles::from_ns(m, 1.0 / 8000.0)),
            tcp: s.tcp_info,
            file: spec.file.as_ref().map(|name| {
                let sent = s.file.clone().unwrap_or_default();
                let got = r.file.clone().unwrap_or_default();
                let bytes = spec.file_bytes();
                FileEnd {
                    name: name.clone(),
                    bytes,
                    received_bytes: got.bytes,
                    algorithm: "xxh3-64".into(),
                    identical: sent.digest.is_some()
                        && sent.digest == got.digest
                        && got.bytes == bytes
                        && sent.bytes == bytes,
                    sent_digest: sent.digest,
                    received_digest: got.digest,
                    saved_as: got.saved_as,
                    missing_bytes: got.missing.iter().map(|(a, b)| b - a).sum(),
                    missing: got.missing,
                    missing_ranges_more: got.missing_more,
                }
            }),
            resources: Sides {
                client: client_report.and_then(|c| c.resources),
                server: server_report.and_then(|c| c.resources),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> TestSpec {
        TestSpec {
            protocol: Protocol::Udp,
            mechanism: Mechanism::Stream,
            direction: Direction::Reverse,
            size: 1000,
            bytes: Some(10_000),
            duration_ns: None,
            rate_bps: 0,
            rate_pps: 0,
            gap_ns: 0,
            streams: 1,
            interval_ns: 1_000_000_000,
            drain_ns: 1_000_000_000,
            ack_timeout_ns: 200_000_000,
            packet_log: false,
            no_offload: false,
            response_size: 0,
            congestion: None,
            zerocopy: false,
            file: None,
        }
    }

    #[test]
    fn assemble_counts_tail_loss_from_the_senders_total() {
        let sender = SideReport {
            role: Some(Role::Sender),
            bytes: 10_000,
            messages: 10,
            last_ns: Some(500_000_000),
            ..Default::default()
        };
        let receiver = SideReport {
            role: Some(Role::Receiver),
            bytes: 7_000,
            messages: 7,
            last_ns: Some(1_000_000_000),
            udp: Some(UdpCounts {
                sequenced: true,
                duplicates: 2,
                ..Default::default()
            }),
            ..Default::default()
        };
        // Reverse: the server sends.
        let r = Results::assemble(&spec(), "x".into(), Some(&receiver), Some(&sender), None);
        let udp = r.end.udp.unwrap();
        assert_eq!((udp.lost, udp.duplicates), (3, 2));
        assert!((udp.loss_ratio - 0.3).abs() < 1e-12);
        assert_eq!(r.end.sent_bps, 160_000.0);
        assert_eq!(r.end.received_bps, 56_000.0);
        assert_eq!(r.end.duration_s, 0.5);
    }

    #[test]
    fn json_has_the_contract_keys() {
        let r = Results::assemble(&spec(), "x".into(), None, None, Some("boom".into()));
        let v = serde_json::to_value(&r).unwrap();
        for key in [
            "schema",
            "wirebench",
            "test",
            "datapath",
            "intervals",
            "end",
        ] {
            assert!(v.get(key).is_some(), "{key}");
        }
        for key in [
            "duration_s",
            "sent",
            "received",
            "sent_bps",
            "received_bps",
            "udp",
            "retransmits",
        ] {
            assert!(v["end"].get(key).is_some(), "end.{key}");
        }
        for key in ["lost", "duplicates", "reordered", "loss_ratio", "jitter_ms"] {
            assert!(v["end"]["udp"].get(key).is_some(), "end.udp.{key}");
        }
        assert_eq!(v["test"]["protocol"], "udp");
        assert_eq!(v["test"]["direction"], "reverse");
        assert_eq!(v["error"], "boom");
    }
}
