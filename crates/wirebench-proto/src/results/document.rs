//! The results document (`run --json`, the contract documented in `docs/results.md`): its
//! types, as they are written and read back.

use serde::{Deserialize, Serialize};

use wirebench_stats::{LossRunsSummary, TimeSummary};

use super::side::{Datapath, QuicInfo, Resources, TcpInfo};
use crate::spec::{Direction, Mechanism, Protocol, TestSpec};

/// Version of the results document. Keys are only added within a version; renaming or
/// removing one bumps it.
pub const SCHEMA: u32 = 1;

/// Nanoseconds in a second, for the document's seconds.
pub(super) const NS_PER_S: f64 = 1e9;

/// A count read from a document written before its key existed, when it was 0 there.
fn zero() -> Option<u64> {
    Some(0)
}

/// Reads a key that is absent where it does not apply (`None`) and `null` where it applies
/// but is unknown (`Some(None)`): serde alone reads both as `None`.
pub(super) fn present<'de, D, T>(d: D) -> Result<Option<Option<T>>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(d).map(Some)
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
    /// Why the test did not complete, for code: the kind of `error` (a limit by its flag,
    /// `busy`, `timeout`, ...), when the side that failed said it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_cause: Option<crate::error_kind::ErrorKind>,
    /// Set when the far end was another tool (`run --iperf3`): which, and which figures it
    /// reported rather than wirebench measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peer: Option<PeerTool>,
    /// Set when the server's report came on a new connection: the control connection was
    /// stuck behind the test's own traffic (or closed before it came).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub server_report_fetched: bool,
}

/// The other tool at the far end of a test, and the figures taken from its own report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeerTool {
    /// The tool: `"iperf3"`.
    pub tool: String,
    /// The document's keys whose values the peer reported (its results exchange), or that
    /// are computed from what it reported; every other figure wirebench measured itself.
    pub reported_by_peer: Vec<String>,
}

impl PeerTool {
    /// An iperf3 server: it reports its own side's counts (the receiver's when wirebench
    /// sends, the sender's when it receives) and, as a UDP receiver, the jitter.
    pub fn iperf3(direction: Direction, udp: bool) -> Self {
        let mut keys = Vec::new();
        let mut add = |prefix: &str, server_sends: bool| {
            let side = if server_sends { "sent" } else { "received" };
            for k in ["bytes", "messages"] {
                keys.push(format!("{prefix}end.{side}.{k}"));
            }
            keys.push(format!("{prefix}end.{side}_bps"));
            keys.push(format!("{prefix}streams[].{side}"));
            if udp {
                keys.push(format!("{prefix}end.udp.lost"));
                keys.push(format!("{prefix}end.udp.loss_ratio"));
                if !server_sends {
                    keys.push(format!("{prefix}end.udp.jitter_ms"));
                }
            }
        };
        match direction {
            Direction::Forward => add("", false),
            Direction::Reverse => add("", true),
            Direction::Bidir => {
                add("", false);
                add("reverse.", true);
            }
        }
        Self {
            tool: "iperf3".into(),
            reported_by_peer: keys,
        }
    }
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
    /// "tcp", "udp" or "quic".
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
    /// The socket buffer asked for on the data sockets (`-w`), bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub socket_buffer_bytes: Option<u64>,
    /// The start left out of `end.after_omit` (`-O`), s; `duration_s` includes it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub omit_s: Option<f64>,
    /// UDP request/response, open loop: a request left every this many s whatever the
    /// answers (several in flight, matched by sequence number); absent: closed loop.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub open_loop_interval_s: Option<f64>,
    /// The test asked the server to run it alone among tests that ask so (`--exclusive`);
    /// absent when it did not.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub exclusive: bool,
    /// QUIC: streams per connection (`--quic-streams`); absent when one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quic_streams: Option<u32>,
    /// QUIC: the data went as datagrams (`--datagrams`), counted as UDP's are; absent when
    /// it went on streams.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub quic_datagrams: bool,
    /// QUIC crr: each transaction's connection asked to send its request in 0-RTT
    /// (`--quic-0rtt`); `end.quic.zero_rtt_accepted` says how many the server took.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub quic_zero_rtt: bool,
    /// QUIC: the largest packet the connections probed the path for (`--quic-mtu`), UDP
    /// payload bytes; absent when the path's MTU set it. `end.quic.mtu_bytes` is what
    /// the probing found.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quic_mtu: Option<u16>,
}

impl TestView {
    /// True when each message was a datagram with the data header, counted for loss,
    /// duplicates, reordering and jitter: UDP, and QUIC's `--datagrams`.
    pub fn datagrams(&self) -> bool {
        self.protocol == Protocol::Udp || (self.protocol == Protocol::Quic && self.quic_datagrams)
    }
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
            rate_bps: s.rate_bps.unwrap_or(0),
            rate_pps: s.rate_pps.unwrap_or(0),
            gap_s: secs(s.gap_ns),
            streams: s.streams,
            interval_s: secs(s.interval_ns),
            drain_s: secs(s.drain_ns),
            ack_timeout_s: secs(s.ack_timeout_ns),
            response_size: s.mechanism.is_rr().then(|| s.response_len()),
            congestion: s.congestion.clone(),
            socket_buffer_bytes: s.socket_buffer_bytes,
            omit_s: (s.omit_ns > 0).then(|| secs(s.omit_ns)),
            open_loop_interval_s: s.open_loop_interval_ns.map(secs),
            exclusive: s.exclusive,
            quic_streams: s.quic_streams,
            quic_datagrams: s.quic_datagrams,
            quic_zero_rtt: s.quic_zero_rtt,
            quic_mtu: s.quic_mtu,
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
    /// Bytes sent in the interval; `null` when the sender never reported.
    #[serde(default)]
    pub sent_bytes: Option<u64>,
    /// Messages sent in the interval; `null` when the sender never reported.
    #[serde(default)]
    pub sent_messages: Option<u64>,
    /// Bytes received in the interval; `null` when the receiver never reported.
    #[serde(default)]
    pub received_bytes: Option<u64>,
    /// Messages received in the interval; `null` when the receiver never reported.
    #[serde(default)]
    pub received_messages: Option<u64>,
    /// Send rate over the interval, bits/s; `null` when the sender never reported.
    #[serde(default)]
    pub sent_bps: Option<f64>,
    /// Receive rate over the interval, bits/s; `null` when the receiver never reported.
    #[serde(default)]
    pub received_bps: Option<f64>,
    /// The receiver's own interval: its start and end, s since the receiver started (the
    /// interval's `start_s` and `end_s` are the sender's). Goodput is counted on this
    /// clock: the receiver's last interval runs on past the sender's through the drain.
    /// Absent when the receiver never reported, and in documents written before it was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub received_start_s: Option<f64>,
    /// See `received_start_s`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub received_end_s: Option<f64>,
    /// UDP: datagrams found missing in the interval; `Some(None)` (`null`) when the
    /// receiver never reported, `None` (absent) over TCP.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub lost: Option<Option<u64>>,
    /// UDP streaming: RFC 3550 jitter at the interval's end, ms; `Some(None)` (`null`) when
    /// the receiver never reported, `None` (absent) where it is not measured.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub jitter_ms: Option<Option<f64>>,
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
    /// TCP: segments the sender retransmitted in the interval (its TCP_INFO).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retransmits: Option<u64>,
    /// TCP and QUIC: the sender's congestion window at the interval's end, bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwnd_bytes: Option<u64>,
    /// QUIC: the sender's smoothed round-trip time at the interval's end, µs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rtt_us: Option<u64>,
    /// QUIC: packets the sender declared lost in the interval.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lost_packets: Option<u64>,
}

/// Totals of one side. Each figure is `None` (`null` in JSON) when that side never
/// reported it (its process or connection died before its report): unknown, never 0.
/// `Default` is that: nothing known.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Totals {
    /// Payload bytes.
    pub bytes: Option<u64>,
    /// Messages.
    pub messages: Option<u64>,
    /// The side's time of the test, s: the sender's from its start to the end of its time
    /// bound (or its last message, when later or for an amount); the receiver's to its last
    /// message or the sender's end, whichever is later. The headline rates divide by it.
    pub duration_s: Option<f64>,
    /// From the side's start to its last message, s (before this version, `duration_s`).
    #[serde(default)]
    pub active_s: Option<f64>,
    /// Bytes × 8 / `active_s` (before this version, the headline rate).
    #[serde(default)]
    pub active_bps: Option<f64>,
    /// From the side's first message to its last, s: the send (or receive) time of a transfer.
    #[serde(default)]
    pub transfer_s: Option<f64>,
    /// Bytes × 8 / `transfer_s`: the send (or receive) rate of a transfer.
    #[serde(default)]
    pub transfer_bps: Option<f64>,
}

/// A distribution in the unit its key names (`_ms`, `_us`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
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
    /// `end.latency_us` only: the whole distribution, as the HDR histogram's buckets merged
    /// into log-spaced ones about 2% wide (`{min_us, max_us, count}`, ascending, empty
    /// buckets left out), so plots draw the CDF and its tail rather than a line through
    /// seven percentiles. Absent when the side did not send it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub histogram: Vec<UsBucket>,
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
            histogram: Vec::new(),
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

/// UDP totals. A figure the receiver counts is `None` (`null`) when the receiver never
/// reported (its process or connection died first): unknown, never 0. `lost` and
/// `loss_ratio` need the sender's count too; without it, `lost` is the gaps the receiver
/// saw below the highest sequence number it received (as `loss_runs`), and `loss_ratio`
/// is `null`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct UdpEnd {
    /// Whether datagrams carried sequence numbers; if not, loss is sent minus received
    /// messages and duplicates and reordering cannot be seen.
    pub sequenced: bool,
    /// Datagrams sent but never received, including at the tail; with the sender's count
    /// unknown, the gaps below the highest sequence number received (tail unknown).
    pub lost: Option<u64>,
    /// Datagrams received more than once.
    pub duplicates: Option<u64>,
    /// Datagrams received out of order.
    pub reordered: Option<u64>,
    /// `lost` / sent messages; `None` when either is unknown.
    pub loss_ratio: Option<f64>,
    /// RFC 3550 interarrival jitter, ms.
    pub jitter_ms: Option<f64>,
    /// Datagrams too far behind to tell late from duplicate (counted as lost).
    pub too_old: Option<u64>,
    /// Datagrams that arrived on the test's socket but were not the test's (not keyed with
    /// the stream's secret token): dropped, and counted in nothing else. 0 in documents
    /// written before the key.
    #[serde(default = "zero")]
    pub foreign: Option<u64>,
    /// UDP rr: of `foreign`, the requests the server did not take as the client's (never
    /// answered, not in `received`); absent for other tests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub foreign_requests: Option<u64>,
    /// UDP rr: of `foreign`, the datagrams the client did not take as the server's answers
    /// (no round trip); absent for other tests, and when the client did not report it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub foreign_responses: Option<u64>,
    /// Largest distance below the highest sequence number at which a datagram arrived.
    pub max_reorder_extent: Option<u64>,
    /// "same-host" when both ends read one clock (one-way delay is absolute), else
    /// "unsynchronized" (only delay variation is meaningful).
    pub clocks: Option<String>,
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
    pub loss_runs: Option<LossRunsSummary>,
    /// UDPmon's "last received sequence number without loss": every datagram up to it
    /// arrived; null when datagram 0 was lost.
    pub last_in_order_seq: Option<u64>,
    /// The lowest sequence number lost; null without loss.
    pub first_lost_seq: Option<u64>,
    /// UDPmon's "bandwidth without loss": `last_in_order_seq × size × 8` over the time from
    /// the arrival of datagram 0 to the arrival that completed `0..=last_in_order_seq`,
    /// bits/s; null with fewer than two datagrams in order.
    pub bandwidth_without_loss_bps: Option<f64>,
    /// UDP datagrams the receiving host's kernel dropped for a bad checksum during the test:
    /// corrupted on the way (a lab's `--corrupt`), so in `lost`, not in the received
    /// counts. The host's (network namespace's) count over the test, whatever socket they
    /// were for; absent where the receiver could not read its kernel's counters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checksum_errors: Option<u64>,
}

/// `end.quic`: a QUIC test's connections as the stack saw them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct QuicEnd {
    /// The sender's connections (the client's for request/response).
    #[serde(flatten)]
    pub info: QuicInfo,
    /// The receiving side's handshake time, µs.
    #[serde(default)]
    pub peer_handshake_us: Option<u64>,
    /// UDP payload bytes the sender put on the wire per byte of goodput, minus one: QUIC's
    /// headers, acknowledgements, retransmissions and padding over what was delivered.
    #[serde(default)]
    pub overhead_ratio: Option<f64>,
    /// `--datagrams`: the datagrams the receiving side's stack took from packets (its own
    /// count: what arrived, whether or not the test read it in time).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peer_datagrams_received: Option<u64>,
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
    /// Sent bytes × 8 / sender's duration; `None` (null) when the sender never reported.
    pub sent_bps: Option<f64>,
    /// Received bytes × 8 / receiver's duration (its start to its last message); `None`
    /// (null) when the receiver never reported.
    pub received_bps: Option<f64>,
    /// UDP loss accounting.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub udp: Option<UdpEnd>,
    /// Messages sent again after an ack timeout (stop-and-wait over UDP); `None` (null)
    /// when the sender never reported.
    pub retransmits: Option<u64>,
    /// UDP: datagrams dropped by a firewall rule on the sending host (send gave EPERM);
    /// `None` (null) when the sender never reported.
    pub local_drops: Option<u64>,
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
    /// QUIC: the sending side's connections as its stack saw them, and the wire's cost.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quic: Option<QuicEnd>,
    /// What each side's data thread cost.
    pub resources: Sides<Resources>,
    /// A file transfer (`--file`): what went and what arrived.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<FileEnd>,
    /// With `-O/--omit`: the totals of the intervals after the omitted start (the other
    /// keys of `end` keep the whole test).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after_omit: Option<AfterOmit>,
    /// Live interval records the server dropped because the client read the control
    /// connection too slowly: live lines that were not shown (the intervals above are
    /// complete). Absent when none were.
    #[serde(default, skip_serializing_if = "crate::spec::is_zero")]
    pub live_intervals_dropped: u64,
    /// `run --mode rrul`: latency under load (idle and loaded round trips, the load's rates,
    /// the probes' time series).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rrul: Option<Rrul>,
}

/// The `end.after_omit` object: totals over the intervals that begin at or after the
/// omitted start (`-O`), each side on its own clock, as iperf3's summary after `-O`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct AfterOmit {
    /// The time left out, s (`test.omit_s`).
    pub omitted_s: f64,
    /// Bytes sent in the intervals after it (`null` for this and the next three when the
    /// sender never reported).
    #[serde(default)]
    pub sent_bytes: Option<u64>,
    /// Messages sent in them.
    #[serde(default)]
    pub sent_messages: Option<u64>,
    /// Their length on the sender's clock, s.
    #[serde(default)]
    pub sent_duration_s: Option<f64>,
    /// `sent_bytes` × 8 / `sent_duration_s`.
    #[serde(default)]
    pub sent_bps: Option<f64>,
    /// Bytes received in the intervals after it (`null` for this and the next three when
    /// the receiver never reported).
    #[serde(default)]
    pub received_bytes: Option<u64>,
    /// Messages received in them.
    #[serde(default)]
    pub received_messages: Option<u64>,
    /// Their length on the receiver's clock, s.
    #[serde(default)]
    pub received_duration_s: Option<f64>,
    /// `received_bytes` × 8 / `received_duration_s`.
    #[serde(default)]
    pub received_bps: Option<f64>,
    /// UDP: datagrams found missing in those intervals; `Some(None)` (`null`) when the
    /// receiver never reported, `None` (absent) over TCP.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub lost: Option<Option<u64>>,
    /// UDP: `lost` / (`received_messages` + `lost`); as `lost` when unknown.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub loss_ratio: Option<Option<f64>>,
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
    /// Where the receiver saved the copy: only a whole one is kept.
    pub saved_as: Option<String>,
    /// Why the receiver kept no copy although it was to save one (the copy was not whole,
    /// or could not be written).
    #[serde(default)]
    pub save_error: Option<String>,
    /// UDP streaming: `[start, end)` byte ranges of the file that never arrived.
    pub missing: Vec<(u64, u64)>,
    /// Bytes in those ranges.
    pub missing_bytes: u64,
    /// Ranges beyond the 10,000 listed.
    pub missing_ranges_more: u64,
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

/// The transport of a latency probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ProbeKind {
    /// A UDP request/response (`--udp --mode rr`).
    Udp,
    /// A TCP request/response over one connection (`--mode rr`).
    Tcp,
}

impl ProbeKind {
    /// Its spelling in the document and in plots.
    pub fn name(self) -> &'static str {
        match self {
            Self::Udp => "udp",
            Self::Tcp => "tcp",
        }
    }
}

/// The way a load stream sends, seen from the client.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LoadDirection {
    /// Client to server.
    Upload,
    /// Server to client.
    Download,
}

/// One round trip of a probe.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Probe {
    /// When it was sent, s since the rrul run began: a UDP probe's own send time; a TCP
    /// probe's, the middle of the interval it left in.
    pub t_s: f64,
    /// Its transport.
    pub kind: ProbeKind,
    /// Its round trip, µs.
    pub rtt_us: f64,
}

/// A probe that got no answer within its timeout.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LostProbe {
    /// When it was sent, s since the rrul run began.
    pub t_s: f64,
    /// Its transport.
    pub kind: ProbeKind,
}

/// What became of the probes of one kind sent in one phase.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProbeCounts {
    /// Requests sent in the phase (a closed-loop TCP probe: transactions completed).
    pub sent: u64,
    /// Of them, answered within the timeout.
    pub answered: u64,
    /// Of them, unanswered within the timeout (never for TCP, which resends).
    pub lost: u64,
}

/// One kind's probe counts, phase by phase.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PhaseCounts {
    /// Sent before the load began.
    pub idle_before: ProbeCounts,
    /// Sent while the load ran.
    pub loaded: ProbeCounts,
    /// Sent after the load ended.
    pub idle_after: ProbeCounts,
}

/// The `end.rrul.probe_counts` object.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RrulProbeCounts {
    /// The UDP probe's.
    pub udp: PhaseCounts,
    /// The TCP probe's.
    pub tcp: PhaseCounts,
}

/// The `end.rrul.udp_probe` object: how the UDP probe sent and what came back besides the
/// answers counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct UdpProbeSummary {
    /// Requests left on a fixed schedule, whatever the answers (irtt's way); false: one in
    /// flight, the next when the answer came (documents before open-loop probes).
    pub open_loop: bool,
    /// How long a request waits for its answer before it counts lost, s.
    pub timeout_s: f64,
    /// Answers that came after the answer to a later request (irtt's "late"), counted with
    /// their real delay.
    pub late: u64,
    /// Second and later answers to one request, not counted again.
    pub duplicates: u64,
    /// Answers that came after their request's timeout: it stays lost.
    pub after_timeout: u64,
    /// Answers to no request sent (made up, or not the test's): ignored.
    pub unknown: u64,
    /// Requests beyond the 1,048,576 recorded one by one: in the counts, not in `probes`.
    pub unrecorded: u64,
}

/// The load's rates in one interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LoadInterval {
    /// The interval's end, s since the rrul run began.
    pub t_s: f64,
    /// Received by the server in it, over all upload streams, bits/s; `null` when the
    /// server never reported.
    #[serde(default)]
    pub upload_bps: Option<f64>,
    /// Received by the client in it, over all download streams, bits/s; `null` when no
    /// download was measured.
    #[serde(default)]
    pub download_bps: Option<f64>,
}

/// One load stream's totals.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LoadStream {
    /// Its direction.
    pub direction: LoadDirection,
    /// What its receiver received, bits/s; `null` when the receiver never reported.
    #[serde(default)]
    pub received_bps: Option<f64>,
    /// Segments its sender retransmitted (its TCP_INFO at the end).
    pub retransmits: u64,
}

/// The `end.rrul` object.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Rrul {
    /// Each idle phase's length (before and after the load), s.
    pub idle_s: f64,
    /// When the load began, s since the run began.
    pub load_start_s: f64,
    /// When the load ended (its sender's last message), s since the run began.
    pub load_end_s: f64,
    /// The probes' spacing, s (the UDP probe sends one request per spacing; the TCP probe
    /// at most one).
    pub probe_interval_s: f64,
    /// Round trips of the UDP probes sent before the load began, µs. (Before open-loop
    /// probes: of both kinds.)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_latency_us: Option<Percentiles>,
    /// Round trips of the UDP probes sent while the load ran, µs. (Before open-loop
    /// probes: of both kinds.)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loaded_latency_us: Option<Percentiles>,
    /// Round trips of the UDP probes sent after the load ended, µs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_after_latency_us: Option<Percentiles>,
    /// Loaded p50 over idle p50 (UDP probes): how many times the queues multiplied the
    /// delay.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_ratio_p50: Option<f64>,
    /// Round trips of the TCP probe's transactions sent before the load began, µs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tcp_idle_latency_us: Option<Percentiles>,
    /// Round trips of the TCP probe's transactions sent while the load ran, µs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tcp_loaded_latency_us: Option<Percentiles>,
    /// Round trips of the TCP probe's transactions sent after the load ended, µs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tcp_idle_after_latency_us: Option<Percentiles>,
    /// Loaded p50 over idle p50 of the TCP probe.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tcp_latency_ratio_p50: Option<f64>,
    /// Received over all upload streams, bits/s; `null` when the server never reported.
    #[serde(default)]
    pub upload_bps: Option<f64>,
    /// Received over all download streams, bits/s; `null` when no download was measured.
    #[serde(default)]
    pub download_bps: Option<f64>,
    /// Each load stream.
    pub streams: Vec<LoadStream>,
    /// Segments the load's senders retransmitted, over all streams both ways (their
    /// TCP_INFO); absent when no sender reported it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retransmits: Option<u64>,
    /// UDP probes that got no answer within the probe's timeout (counted in no latency).
    pub udp_probe_timeouts: u64,
    /// Probes sent, answered and lost, per kind and phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probe_counts: Option<RrulProbeCounts>,
    /// How the UDP probe sent, and the answers it did not count.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub udp_probe: Option<UdpProbeSummary>,
    /// The load's rates per interval.
    pub load: Vec<LoadInterval>,
    /// Every answered probe's round trip, in time order.
    pub probes: Vec<Probe>,
    /// Every probe that got no answer within its timeout, in time order.
    #[serde(default)]
    pub lost_probes: Vec<LostProbe>,
}
