//! The test a client asks for: validated once on the client, and again by the server, which
//! must not trust it.

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::header::HEADER_LEN;

/// Largest UDP payload over IPv4: 65535 minus the 20-byte IP and 8-byte UDP headers.
pub const MAX_UDP_SIZE: u64 = 65_507;
/// Largest TCP message: a message is the unit of a write, of stop-and-wait and of counting.
pub const MAX_TCP_SIZE: u64 = 16 * 1024 * 1024;
/// Largest QUIC datagram (`--datagrams`) a test may ask for: what one QUIC packet carries
/// at the largest path MTU the stack probes for. The path decides what fits; the sender
/// checks it at the start and says so.
pub const MAX_QUIC_DATAGRAM: u64 = 1400;
/// Request/response over UDP: the bytes of the sequence number at the start of each request
/// and response (big-endian, keyed with the stream's token as the UDP header's `seq` is,
/// since protocol 4; the response echoes the request's).
pub const RR_SEQ_LEN: u64 = 8;
/// Most parallel streams of a test (`-P`): each is a connection or socket pair and a thread
/// on both sides.
pub const MAX_STREAMS: u32 = 64;
/// Most interval records one side keeps; a test that would make more is refused.
pub const MAX_INTERVALS: u64 = 10_000;

/// Transport protocol of a test.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    /// TCP: one connection per stream.
    Tcp,
    /// UDP: one connected socket pair per stream.
    Udp,
    /// QUIC: a stream of a QUIC connection per stream; the control dialogue runs over the
    /// first connection too, so the test needs UDP alone.
    Quic,
}

/// How messages are sent. The names are the JSON's, and the CLI's, table's and logs' too.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mechanism {
    /// Send without waiting, as fast as the rate allows.
    Stream,
    /// Send one message, wait until the receiver acknowledges it whole, then the next.
    StopAndWait,
    /// Request/response: the client sends a request of `size` bytes, the server answers with
    /// `response_size` bytes, one transaction in flight; every round trip is timed.
    Rr,
    /// Connect/request/response (netperf's TCP_CRR): as `Rr`, on a new TCP connection per
    /// transaction, whose set-up is part of the round trip.
    Crr,
}

impl Mechanism {
    /// Request/response, on one connection or a new one each time.
    pub fn is_rr(self) -> bool {
        matches!(self, Mechanism::Rr | Mechanism::Crr)
    }
}

/// Which side sends the data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Direction {
    /// The client sends, the server receives.
    Forward,
    /// The server sends, the client receives (`-R`).
    Reverse,
    /// Both at once (`--bidir`): `streams` streams each way.
    Bidir,
}

macro_rules! display_as {
    ($ty:ty { $($variant:ident => $name:literal),+ $(,)? }) => {
        impl std::fmt::Display for $ty {
            /// The name used in the results document.
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(match self {
                    $(Self::$variant => $name),+
                })
            }
        }
    };
}

display_as!(Protocol { Tcp => "tcp", Udp => "udp", Quic => "quic" });
display_as!(Mechanism { Stream => "stream", StopAndWait => "stop-and-wait", Rr => "rr", Crr => "crr" });
display_as!(Direction { Forward => "forward", Reverse => "reverse", Bidir => "bidir" });

/// Everything both sides need to know about a test. All durations are in nanoseconds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TestSpec {
    /// Transport protocol.
    pub protocol: Protocol,
    /// Streaming or stop-and-wait.
    pub mechanism: Mechanism,
    /// Who sends.
    pub direction: Direction,
    /// Message (payload) size in bytes; the last message of a `bytes` test may be shorter.
    pub size: u64,
    /// Amount of data to send; exclusive with `duration_ns`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
    /// How long to send; exclusive with `bytes`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_ns: Option<u64>,
    /// Sending rate in bits/s of payload; none: unlimited (0 on the wire).
    #[serde(with = "zero_is_none")]
    pub rate_bps: Option<u64>,
    /// Sending rate in messages/s, which takes precedence over `rate_bps`; none: not set (0
    /// on the wire).
    #[serde(default, with = "zero_is_none")]
    pub rate_pps: Option<u64>,
    /// Pause after each message (`--gap`), to send more gently than the rate alone would.
    #[serde(default)]
    pub gap_ns: u64,
    /// Parallel streams.
    pub streams: u32,
    /// Reporting interval for the per-interval records.
    pub interval_ns: u64,
    /// How long the receiver waits for data in flight after the sender is done.
    pub drain_ns: u64,
    /// Stop-and-wait over UDP: resend a message not acknowledged within this time.
    pub ack_timeout_ns: u64,
    /// The receiver writes a packet log (`--packet-log`): a record per datagram and per
    /// loss run, to the client (over a TCP connection of its own when the server receives).
    #[serde(default)]
    pub packet_log: bool,
    /// UDP: no batched system calls, GSO or GRO on either side: one datagram per call.
    #[serde(default)]
    pub no_offload: bool,
    /// Request/response: the response's size in bytes; none: the same as `size` (0 on the
    /// wire).
    #[serde(default, with = "zero_is_none")]
    pub response_size: Option<u64>,
    /// TCP: the congestion control for the data connection on both sides (`--cc`), e.g.
    /// "cubic", "reno", "bbr"; none: the host's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub congestion: Option<String>,
    /// TCP senders: send with MSG_ZEROCOPY (`--zerocopy`).
    #[serde(default)]
    pub zerocopy: bool,
    /// A file transfer (`--file`): the file's name (no directory), whose contents the sender
    /// sends instead of generated bytes. Forward: the client's file, saved by a server with
    /// `--save-dir` under this name. Reverse: a file in the server's `--files-dir`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    /// A forward file transfer that the client will ask back next (`--both-directions
    /// --file`): the server refuses it before a byte moves unless its `--files-dir` holds a
    /// file of that name to send back. Left out when off: a server that predates it takes
    /// the test as before.
    #[serde(default, skip_serializing_if = "is_false")]
    pub file_back: bool,
    /// The socket buffer (SO_SNDBUF and SO_RCVBUF) both sides ask for on their data sockets
    /// (`-w/--window`, as iperf3's); none: TCP is left to the kernel's autotuning and UDP
    /// asks for a large one (4 MiB). The kernel caps what it grants; the
    /// results' datapath records what it granted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub socket_buffer_bytes: Option<u64>,
    /// The first part of the test that the figures after omission leave out (`-O/--omit`,
    /// as iperf3's: TCP's slow start, a path's queues filling). The test runs this much
    /// longer than `duration_ns` says is measured; 0: nothing omitted.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub omit_ns: u64,
    /// Request/response (`--busy-poll`): each side spins on its non-blocking socket for up to
    /// this long before it blocks for the next request or response, and asks the kernel for
    /// SO_BUSY_POLL of the same time; none: off. Left out of the message when off, so that a
    /// peer that predates it still takes every other test.
    #[serde(default, with = "zero_is_none", skip_serializing_if = "none_or_zero")]
    pub busy_poll_ns: Option<u64>,
    /// Request/response over UDP, open loop (as irtt's probes): the client sends a request
    /// every this many ns whatever the answers, several may be in flight, each answer is
    /// matched by its sequence number, and a request unanswered after `ack_timeout_ns` is
    /// lost. None: one request in flight, the next after the answer (closed loop). The
    /// server's side is the same either way. Left out of the message when off, so that a
    /// peer that predates it still takes every other test.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub open_loop_interval_ns: Option<u64>,
    /// The client prints a line per stream as the test runs (`-P` above 1): the server sends
    /// each stream's intervals live too, beside their sum. Left out of the message when off:
    /// a client that predates it would show each stream's interval as a sum.
    #[serde(default, skip_serializing_if = "is_false")]
    pub live_streams: bool,
    /// The test asks to run alone among tests that ask so (`run --exclusive`; a mesh's
    /// throughput tests): the server refuses it as busy while another such test runs, and
    /// runs the others beside it. Left out of the message when off.
    #[serde(default, skip_serializing_if = "is_false")]
    pub exclusive: bool,
    /// QUIC: the streams each connection carries (`--quic-streams`); the test's streams
    /// are `-P` connections of this many each. Left out of the message when none (one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quic_streams: Option<u32>,
    /// QUIC: the data goes as unreliable datagrams (RFC 9221, `--datagrams`), one per
    /// message with the UDP data header, counted as UDP's are. Left out when off.
    #[serde(default, skip_serializing_if = "is_false")]
    pub quic_datagrams: bool,
    /// QUIC `--mode crr`: each transaction's connection resumes the last one's session and
    /// sends its request in 0-RTT (`--quic-0rtt`). Left out when off.
    #[serde(default, skip_serializing_if = "is_false")]
    pub quic_zero_rtt: bool,
    /// QUIC: the largest packet to probe the path for, both ways (`--quic-mtu`); or none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quic_mtu: Option<u16>,
}

pub(crate) fn is_zero(n: &u64) -> bool {
    *n == 0
}

fn is_false(b: &bool) -> bool {
    !*b
}

fn none_or_zero(n: &Option<u64>) -> bool {
    n.is_none_or(|n| n == 0)
}

/// An optional number as the control protocol spells it: 0 for none. Every build of this
/// protocol version sends and reads the spec so, whatever type the program gives the field.
mod zero_is_none {
    use serde::{Deserialize, Deserializer, Serializer};

    /// None (and a zero) as 0.
    pub(super) fn serialize<S: Serializer>(n: &Option<u64>, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(n.unwrap_or(0))
    }

    /// 0 as none.
    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
        let n = u64::deserialize(d)?;
        Ok((n != 0).then_some(n))
    }
}

/// Longest spin `--busy-poll` takes before a blocking wait: a spin this long already burns
/// a core through most idle gaps, and a stop is still seen within it.
pub const MAX_BUSY_POLL_NS: u64 = 10_000_000;

/// Smallest socket buffer a test may ask for (`-w`): below it a TCP connection cannot hold
/// one segment's worth, and the kernel raises it anyway.
pub const MIN_SOCKET_BUFFER: u64 = 1024;
/// Largest socket buffer a test may ask for (`-w`); the kernel caps it further at
/// `net.core.{w,r}mem_max`.
pub const MAX_SOCKET_BUFFER: u64 = 1 << 30;

/// A spec that no side can run.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum SpecError {
    /// Message size outside what the protocol allows.
    #[error("--size {size} is not allowed for {proto}: {allowed}")]
    Size {
        /// Size asked for.
        size: u64,
        /// "tcp" or "udp".
        proto: &'static str,
        /// What is allowed, in words.
        allowed: &'static str,
    },
    /// Neither or both of bytes and duration.
    #[error("give exactly one of --bytes and --time")]
    Amount,
    /// A zero amount.
    #[error("--bytes and --time must be greater than zero")]
    ZeroAmount,
    /// Streams outside the range this version runs.
    #[error("--parallel {0} is not supported: 1 to {MAX_STREAMS} streams")]
    Streams(u32),
    /// Too many streams both ways.
    #[error("--parallel {0} with --bidir makes {n} streams: at most {MAX_STREAMS} in all", n = 2 * .0)]
    BidirStreams(u32),
    /// A mode that has one direction by nature.
    #[error("--bidir applies to streaming and stop-and-wait, not to --mode rr or --packet-log")]
    Bidir,
    /// A packet log of several streams.
    #[error("--packet-log records one stream: it cannot be combined with --parallel")]
    PacketLogStreams,
    /// Interval too small or would make too many records.
    #[error(
        "--interval must be at least 10ms and make at most {MAX_INTERVALS} records over the test"
    )]
    Interval,
    /// Ack timeout out of range.
    #[error("--ack-timeout must be between 1ms and 60s")]
    AckTimeout,
    /// Drain out of range.
    #[error("--drain must be at most 60s")]
    Drain,
    /// Gap out of range.
    #[error("--gap must be at most 60s")]
    Gap,
    /// A packet log of a test without sequence numbers.
    #[error("--packet-log needs UDP streaming (-u) with messages of at least {HEADER_LEN} bytes, which carry sequence numbers")]
    PacketLog,
    /// Request/response asked in reverse.
    #[error("--mode rr/crr: the client always sends the requests; -R and --bidir do not apply")]
    RrReverse,
    /// Connect/request/response outside TCP or with several streams.
    #[error(
        "--mode crr opens a connection per transaction: TCP or QUIC (not -u), one stream (no -P)"
    )]
    Crr,
    /// A UDP request or response too short for its sequence number.
    #[error("--mode rr over UDP: requests and responses carry an 8-byte sequence number, so --size and --response-size must be at least 8")]
    RrUdpSize,
    /// Response size out of range.
    #[error("--response-size {0} is not allowed: the same limits as --size apply")]
    ResponseSize(u64),
    /// A file name that is not a plain name, or a file test that cannot carry a file.
    #[error("--file: {0}")]
    File(&'static str),
    /// Zero copy where it does not apply.
    #[error("--zerocopy applies to TCP streaming and stop-and-wait senders")]
    ZeroCopy,
    /// A congestion control name that cannot be one, or one for UDP.
    #[error("--cc takes a TCP congestion control name of 1 to 15 letters, digits or '_' (e.g. cubic, reno, bbr), for TCP tests")]
    Congestion,
    /// A socket buffer out of range.
    #[error("--window {0} is not allowed: 1K to 1G")]
    SocketBuffer(u64),
    /// An omitted start that leaves nothing to measure, or is too long.
    #[error("--omit must be at most 60s, and the test must measure something after it")]
    Omit,
    /// Open-loop probes outside UDP request/response, or a spacing out of range.
    #[error("open-loop requests apply to --mode rr over UDP (-u), sent every 1ms to 60s")]
    OpenLoop,
    /// Busy polling outside request/response, or a spin too long.
    #[error("--busy-poll applies to --mode rr and crr, and spins at most {max}", max = crate::units::format_duration(std::time::Duration::from_nanos(MAX_BUSY_POLL_NS)))]
    BusyPoll,
    /// `--quic-streams` without QUIC, out of range, or not a divisor of the streams.
    #[error("--quic-streams applies to --quic tests: 1 to {MAX_STREAMS} streams per connection, -P connections of them, at most {MAX_STREAMS} streams in all")]
    QuicStreams,
    /// A congestion controller QUIC does not have.
    #[error("--cc for a --quic test is one of cubic, newreno, bbr")]
    QuicCongestion,
    /// `--datagrams` outside a streaming QUIC test of one stream per connection.
    #[error("--datagrams applies to --quic streaming tests (no --mode rr, crr or stop-and-wait, --file or --quic-streams; -P gives more connections)")]
    Datagrams,
    /// `--quic-0rtt` outside a QUIC crr test.
    #[error("--quic-0rtt applies to --quic --mode crr: each transaction's connection resumes the last one's")]
    ZeroRtt,
    /// `--quic-mtu` without QUIC, or out of range.
    #[error("--quic-mtu applies to --quic tests: the largest packet to probe the path for, 1200 to 65527 bytes of UDP payload")]
    QuicMtu,
    /// What a QUIC test cannot do yet.
    #[error("{0} does not apply to --quic tests")]
    NotQuic(&'static str),
}

/// The congestion controllers a QUIC test chooses from (`--cc`), as the QUIC stack names
/// them.
pub const QUIC_CONGESTION: [&str; 3] = ["cubic", "newreno", "bbr"];

const NS_PER_S: u64 = 1_000_000_000;

impl Default for TestSpec {
    /// What `wirebench run HOST` asks for without flags: ten seconds of one TCP stream
    /// forward in 128 KiB messages, unpaced, a record a second.
    fn default() -> Self {
        Self {
            protocol: Protocol::Tcp,
            mechanism: Mechanism::Stream,
            direction: Direction::Forward,
            size: 128 * 1024,
            bytes: None,
            duration_ns: Some(10 * NS_PER_S),
            rate_bps: None,
            rate_pps: None,
            gap_ns: 0,
            streams: 1,
            interval_ns: NS_PER_S,
            drain_ns: NS_PER_S,
            ack_timeout_ns: 200_000_000,
            packet_log: false,
            no_offload: false,
            response_size: None,
            congestion: None,
            zerocopy: false,
            file: None,
            file_back: false,
            socket_buffer_bytes: None,
            omit_ns: 0,
            busy_poll_ns: None,
            open_loop_interval_ns: None,
            live_streams: false,
            exclusive: false,
            quic_streams: None,
            quic_datagrams: false,
            quic_zero_rtt: false,
            quic_mtu: None,
        }
    }
}

/// Setters, each taking and giving back the spec, so that a test reads as the default (or
/// [`example`](TestSpec::example)) and what differs from it:
/// `TestSpec::example().protocol(Protocol::Udp).rate_bps(1_000_000)`. They set; they do not
/// check (`validate` does).
impl TestSpec {
    /// A small test that passes `validate`: one TCP stream of 1 MB in 1000-byte messages,
    /// forward. Tests and examples start from it and set what they are about.
    ///
    /// ```
    /// use wirebench_proto::spec::{Protocol, TestSpec};
    ///
    /// let udp = TestSpec::example().protocol(Protocol::Udp).rate_bps(10_000_000);
    /// assert_eq!(udp.validate(), Ok(()));
    /// assert_eq!((udp.rate_bps, udp.rate_pps), (Some(10_000_000), None));
    /// ```
    pub fn example() -> Self {
        Self::default().size(1000).bytes(1_000_000)
    }

    /// Sets the transport protocol.
    #[must_use]
    pub fn protocol(mut self, protocol: Protocol) -> Self {
        self.protocol = protocol;
        self
    }

    /// Sets how messages are sent.
    #[must_use]
    pub fn mechanism(mut self, mechanism: Mechanism) -> Self {
        self.mechanism = mechanism;
        self
    }

    /// Sets who sends.
    #[must_use]
    pub fn direction(mut self, direction: Direction) -> Self {
        self.direction = direction;
        self
    }

    /// Sets the message size in bytes.
    #[must_use]
    pub fn size(mut self, size: u64) -> Self {
        self.size = size;
        self
    }

    /// Sends `bytes` in all, instead of for a time.
    #[must_use]
    pub fn bytes(mut self, bytes: u64) -> Self {
        self.bytes = Some(bytes);
        self.duration_ns = None;
        self
    }

    /// Sends for `duration_ns`, instead of an amount.
    #[must_use]
    pub fn duration_ns(mut self, duration_ns: u64) -> Self {
        self.duration_ns = Some(duration_ns);
        self.bytes = None;
        self
    }

    /// Paces to `rate_bps` bits/s of payload; 0: unlimited, as `-b 0`.
    #[must_use]
    pub fn rate_bps(mut self, rate_bps: u64) -> Self {
        self.rate_bps = (rate_bps != 0).then_some(rate_bps);
        self
    }

    /// Paces to `rate_pps` messages/s; 0: not set.
    #[must_use]
    pub fn rate_pps(mut self, rate_pps: u64) -> Self {
        self.rate_pps = (rate_pps != 0).then_some(rate_pps);
        self
    }

    /// Sets the pause after each message.
    #[must_use]
    pub fn gap_ns(mut self, gap_ns: u64) -> Self {
        self.gap_ns = gap_ns;
        self
    }

    /// Sets the parallel streams (each way, with `--bidir`).
    #[must_use]
    pub fn streams(mut self, streams: u32) -> Self {
        self.streams = streams;
        self
    }

    /// Sets the reporting interval.
    #[must_use]
    pub fn interval_ns(mut self, interval_ns: u64) -> Self {
        self.interval_ns = interval_ns;
        self
    }

    /// Sets the receiver's wait for data in flight.
    #[must_use]
    pub fn drain_ns(mut self, drain_ns: u64) -> Self {
        self.drain_ns = drain_ns;
        self
    }

    /// Sets stop-and-wait's resend timeout.
    #[must_use]
    pub fn ack_timeout_ns(mut self, ack_timeout_ns: u64) -> Self {
        self.ack_timeout_ns = ack_timeout_ns;
        self
    }

    /// QUIC: the data as datagrams or not.
    #[must_use]
    pub fn quic_datagrams(mut self, on: bool) -> Self {
        self.quic_datagrams = on;
        self
    }

    /// Asks for a packet log or not.
    #[must_use]
    pub fn packet_log(mut self, packet_log: bool) -> Self {
        self.packet_log = packet_log;
        self
    }

    /// Turns UDP batching and offloads off or on.
    #[must_use]
    pub fn no_offload(mut self, no_offload: bool) -> Self {
        self.no_offload = no_offload;
        self
    }

    /// Sets request/response's response size; 0: the same as `size`.
    #[must_use]
    pub fn response_size(mut self, response_size: u64) -> Self {
        self.response_size = (response_size != 0).then_some(response_size);
        self
    }

    /// Sets the TCP congestion control.
    #[must_use]
    pub fn congestion(mut self, congestion: impl Into<String>) -> Self {
        self.congestion = Some(congestion.into());
        self
    }

    /// Sends with MSG_ZEROCOPY or not.
    #[must_use]
    pub fn zerocopy(mut self, zerocopy: bool) -> Self {
        self.zerocopy = zerocopy;
        self
    }

    /// Makes the test a transfer of the file `name`.
    #[must_use]
    pub fn file(mut self, name: impl Into<String>) -> Self {
        self.file = Some(name.into());
        self
    }

    /// Asks the server, at admission, whether it can send this file back afterwards
    /// (`--both-directions`).
    #[must_use]
    pub fn file_back(mut self, yes: bool) -> Self {
        self.file_back = yes;
        self
    }

    /// Asks for socket buffers of `bytes` (`-w`).
    #[must_use]
    pub fn socket_buffer_bytes(mut self, bytes: u64) -> Self {
        self.socket_buffer_bytes = Some(bytes);
        self
    }

    /// Leaves the first `omit_ns` out of the figures after omission.
    #[must_use]
    pub fn omit_ns(mut self, omit_ns: u64) -> Self {
        self.omit_ns = omit_ns;
        self
    }

    /// Busy-polls for up to `busy_poll_ns`; 0: off.
    #[must_use]
    pub fn busy_poll_ns(mut self, busy_poll_ns: u64) -> Self {
        self.busy_poll_ns = (busy_poll_ns != 0).then_some(busy_poll_ns);
        self
    }

    /// Sets open-loop request/response: a request every `every_ns`, 0 for closed loop.
    #[must_use]
    pub fn open_loop_interval_ns(mut self, every_ns: u64) -> Self {
        self.open_loop_interval_ns = (every_ns != 0).then_some(every_ns);
        self
    }
}

impl TestSpec {
    /// Checks every field; both the client (before any traffic) and the server (on what it
    /// received) call this.
    pub fn validate(&self) -> Result<(), SpecError> {
        self.check_size()?;
        self.check_amount()?;
        if let Some(name) = &self.file {
            self.check_file(name)?;
        } else if self.file_back {
            return Err(SpecError::File(
                "a file asked back (--both-directions) needs the file: give --file",
            ));
        }
        self.check_streams()?;
        self.check_timing()?;
        self.check_request_response()?;
        self.check_tuning()?;
        if self.protocol == Protocol::Quic && self.open_loop_interval_ns.is_some() {
            return Err(SpecError::NotQuic("open-loop requests"));
        }
        self.check_datagrams()?;
        let quic_mtu = |m| self.protocol == Protocol::Quic && (1200..=65527).contains(&m);
        if !self.quic_mtu.is_none_or(quic_mtu) {
            return Err(SpecError::QuicMtu);
        }
        if self.packet_log
            && (!self.datagrams() || self.mechanism != Mechanism::Stream || self.headerless())
        {
            return Err(SpecError::PacketLog);
        }
        Ok(())
    }

    fn check_size(&self) -> Result<(), SpecError> {
        match self.protocol {
            Protocol::Udp if !(1..=MAX_UDP_SIZE).contains(&self.size) => Err(SpecError::Size {
                size: self.size,
                proto: "udp",
                allowed: "a datagram carries 1 to 65507 bytes",
            }),
            p @ (Protocol::Tcp | Protocol::Quic) if !(1..=MAX_TCP_SIZE).contains(&self.size) => {
                Err(SpecError::Size {
                    size: self.size,
                    proto: if p == Protocol::Tcp { "tcp" } else { "quic" },
                    allowed: "a message is 1 byte to 16 MiB",
                })
            }
            _ => Ok(()),
        }
    }

    /// `--datagrams`: QUIC, streaming, one stream per connection, each datagram with the
    /// header and within one packet.
    fn check_datagrams(&self) -> Result<(), SpecError> {
        if !self.quic_datagrams {
            return Ok(());
        }
        if self.protocol != Protocol::Quic
            || self.mechanism != Mechanism::Stream
            || self.quic_streams.is_some_and(|m| m > 1)
            || self.file.is_some()
        {
            return Err(SpecError::Datagrams);
        }
        if !(HEADER_LEN as u64..=MAX_QUIC_DATAGRAM).contains(&self.size) {
            return Err(SpecError::Size {
                size: self.size,
                proto: "quic --datagrams",
                allowed:
                    "a datagram carries the 16-byte header and fits one packet: 16 to 1400 bytes",
            });
        }
        Ok(())
    }

    fn check_amount(&self) -> Result<(), SpecError> {
        match (self.bytes, self.duration_ns) {
            (Some(0), None) | (None, Some(0)) => Err(SpecError::ZeroAmount),
            (Some(_), None) | (None, Some(_)) => Ok(()),
            // A reverse file transfer: the server's file gives the amount.
            (None, None) if self.file.is_some() && self.direction == Direction::Reverse => Ok(()),
            _ => Err(SpecError::Amount),
        }
    }

    fn check_file(&self, name: &str) -> Result<(), SpecError> {
        let plain = !name.is_empty()
            && name.len() <= 255
            && name != "."
            && name != ".."
            && !name.contains(['/', '\\', '\0']);
        if !plain {
            return Err(SpecError::File(
                "the name must be a plain file name, without a directory",
            ));
        }
        if self.duration_ns.is_some() {
            return Err(SpecError::File(
                "a file transfer sends the file once: no --time",
            ));
        }
        if self.mechanism.is_rr() || self.direction == Direction::Bidir || self.streams != 1 {
            return Err(SpecError::File(
                "a file goes one way on one stream: no rr, crr, --bidir or -P",
            ));
        }
        if self.zerocopy {
            return Err(SpecError::File(
                "--zerocopy sends pages the kernel may still hold, so they cannot change: not with a file",
            ));
        }
        if self.protocol == Protocol::Udp && self.size <= HEADER_LEN as u64 {
            return Err(SpecError::File(
                "over UDP each datagram carries a 16-byte header and a piece of the file: --size must be more than 16",
            ));
        }
        Ok(())
    }

    fn check_streams(&self) -> Result<(), SpecError> {
        if !(1..=MAX_STREAMS).contains(&self.streams) {
            return Err(SpecError::Streams(self.streams));
        }
        if let Some(m) = self.quic_streams {
            if self.protocol != Protocol::Quic
                || !(1..=MAX_STREAMS).contains(&m)
                || !self.streams.is_multiple_of(m)
            {
                return Err(SpecError::QuicStreams);
            }
        }
        if self.direction == Direction::Bidir {
            if self.total_streams() > MAX_STREAMS {
                return Err(SpecError::BidirStreams(self.streams));
            }
            if self.mechanism.is_rr() || self.packet_log {
                return Err(SpecError::Bidir);
            }
        }
        if self.packet_log && self.streams > 1 {
            return Err(SpecError::PacketLogStreams);
        }
        Ok(())
    }

    /// The most interval records one role of this test keeps: one per interval of its time
    /// bound and drain and a last, partial one (at most [`MAX_INTERVALS`], all a test bounded
    /// by bytes alone may keep). What the server's memory estimate counts for them.
    pub fn interval_records(&self) -> u64 {
        match self.duration_ns {
            Some(d) => (d.saturating_add(self.drain_ns) / self.interval_ns.max(1))
                .saturating_add(2)
                .min(MAX_INTERVALS),
            None => MAX_INTERVALS,
        }
    }

    fn check_timing(&self) -> Result<(), SpecError> {
        if self.interval_ns < 10_000_000 {
            return Err(SpecError::Interval);
        }
        if let Some(d) = self.duration_ns {
            if d / self.interval_ns > MAX_INTERVALS {
                return Err(SpecError::Interval);
            }
        }
        if !(1_000_000..=60 * NS_PER_S).contains(&self.ack_timeout_ns) {
            return Err(SpecError::AckTimeout);
        }
        if self.drain_ns > 60 * NS_PER_S {
            return Err(SpecError::Drain);
        }
        if self.gap_ns > 60 * NS_PER_S {
            return Err(SpecError::Gap);
        }
        Ok(())
    }

    fn check_request_response(&self) -> Result<(), SpecError> {
        if self.quic_zero_rtt
            && (self.protocol != Protocol::Quic || self.mechanism != Mechanism::Crr)
        {
            return Err(SpecError::ZeroRtt);
        }
        if self.mechanism == Mechanism::Crr && (self.protocol == Protocol::Udp || self.streams != 1)
        {
            return Err(SpecError::Crr);
        }
        if let Some(every) = self.open_loop_interval_ns {
            if self.protocol != Protocol::Udp
                || self.mechanism != Mechanism::Rr
                || !(1_000_000..=60 * NS_PER_S).contains(&every)
            {
                return Err(SpecError::OpenLoop);
            }
        }
        if !self.mechanism.is_rr() {
            return Ok(());
        }
        if self.direction != Direction::Forward {
            return Err(SpecError::RrReverse);
        }
        let max = match self.protocol {
            Protocol::Udp => MAX_UDP_SIZE,
            Protocol::Tcp | Protocol::Quic => MAX_TCP_SIZE,
        };
        if let Some(r) = self.response_size.filter(|&r| r > max) {
            return Err(SpecError::ResponseSize(r));
        }
        // Every request, the short last one of a `--bytes` test too, carries the number.
        let tail = self.bytes.map_or(0, |b| b % self.size);
        if self.protocol == Protocol::Udp
            && (self.size < RR_SEQ_LEN
                || self.response_len() < RR_SEQ_LEN
                || (tail != 0 && tail < RR_SEQ_LEN))
        {
            return Err(SpecError::RrUdpSize);
        }
        Ok(())
    }

    /// The per-socket and per-test options: `--cc`, `--zerocopy`, `-w`, `-O`, `--busy-poll`.
    fn check_tuning(&self) -> Result<(), SpecError> {
        if let Some(cc) = self
            .congestion
            .as_deref()
            .filter(|_| self.protocol == Protocol::Quic)
        {
            if !QUIC_CONGESTION.contains(&cc) {
                return Err(SpecError::QuicCongestion);
            }
        } else if let Some(cc) = &self.congestion {
            let name_ok = (1..=15).contains(&cc.len())
                && cc.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
            if !name_ok || self.protocol != Protocol::Tcp {
                return Err(SpecError::Congestion);
            }
        }
        if self.zerocopy && (self.protocol != Protocol::Tcp || self.mechanism == Mechanism::Rr) {
            return Err(SpecError::ZeroCopy);
        }
        if let Some(b) = self.socket_buffer_bytes {
            if !(MIN_SOCKET_BUFFER..=MAX_SOCKET_BUFFER).contains(&b) {
                return Err(SpecError::SocketBuffer(b));
            }
        }
        if self.omit_ns > 60 * NS_PER_S || self.duration_ns.is_some_and(|d| d <= self.omit_ns) {
            return Err(SpecError::Omit);
        }
        if self
            .busy_poll_ns
            .is_some_and(|b| b > 0 && (!self.mechanism.is_rr() || b > MAX_BUSY_POLL_NS))
        {
            return Err(SpecError::BusyPoll);
        }
        Ok(())
    }

    /// Streams of the test in all: `streams`, or twice that with `--bidir`.
    pub fn total_streams(&self) -> u32 {
        if self.direction == Direction::Bidir {
            self.streams.saturating_mul(2)
        } else {
            self.streams
        }
    }

    /// The direction stream `i` carries: with `--bidir`, streams `0..streams` go forward
    /// and the others in reverse.
    pub fn stream_direction(&self, i: u32) -> Direction {
        match self.direction {
            Direction::Bidir if i < self.streams => Direction::Forward,
            Direction::Bidir => Direction::Reverse,
            d => d,
        }
    }

    /// This test as one direction of it is measured (for `--bidir`, each half).
    pub fn one_way(&self, direction: Direction) -> Self {
        self.clone().direction(direction)
    }

    /// Request/response: the response's length.
    pub fn response_len(&self) -> u64 {
        self.response_size.filter(|&r| r > 0).unwrap_or(self.size)
    }

    /// True when each message is a datagram with the UDP data header, sequenced and counted
    /// for loss, duplicates, reordering and jitter: UDP, and QUIC's `--datagrams`.
    pub fn datagrams(&self) -> bool {
        self.protocol == Protocol::Udp || (self.protocol == Protocol::Quic && self.quic_datagrams)
    }

    /// True when messages of this test are too short to carry the UDP data header.
    pub fn headerless(&self) -> bool {
        self.protocol == Protocol::Udp && self.size < HEADER_LEN as u64
    }

    /// The payload rate this test asks for in bits/s, `None` when unlimited.
    pub fn offered_bps(&self) -> Option<u64> {
        match (self.rate_pps.filter(|&p| p > 0), self.rate_bps) {
            (Some(pps), _) => Some(pps.saturating_mul(self.size).saturating_mul(8)),
            (None, bps) => bps.filter(|&b| b > 0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The example as UDP: 1 MB in 1000-byte datagrams.
    fn spec() -> TestSpec {
        TestSpec::example().protocol(Protocol::Udp)
    }

    /// What this protocol version sent for three specs before the fields that mean "none"
    /// became `Option`s, captured from its encoder (at 983308e). Peers of the same version (older builds
    /// among them) send and expect exactly this.
    const WIRE_PLAIN: &str = r#"{"protocol":"udp","mechanism":"stream","direction":"forward","size":1000,"bytes":1000000,"rate_bps":0,"rate_pps":0,"gap_ns":0,"streams":1,"interval_ns":1000000000,"drain_ns":1000000000,"ack_timeout_ns":200000000,"packet_log":false,"no_offload":false,"response_size":0,"zerocopy":false}"#;
    const WIRE_RR: &str = r#"{"protocol":"tcp","mechanism":"rr","direction":"forward","size":64,"duration_ns":2000000000,"rate_bps":0,"rate_pps":1000,"gap_ns":0,"streams":1,"interval_ns":1000000000,"drain_ns":1000000000,"ack_timeout_ns":200000000,"packet_log":false,"no_offload":false,"response_size":200,"congestion":"cubic","zerocopy":false,"socket_buffer_bytes":65536,"omit_ns":1000000000,"busy_poll_ns":50000}"#;
    const WIRE_PACED: &str = r#"{"protocol":"udp","mechanism":"stream","direction":"bidir","size":1000,"bytes":1000000,"rate_bps":100000000,"rate_pps":0,"gap_ns":5,"streams":2,"interval_ns":1000000000,"drain_ns":1000000000,"ack_timeout_ns":200000000,"packet_log":true,"no_offload":true,"response_size":0,"zerocopy":true,"file":"f.bin"}"#;

    fn wire_specs() -> [(&'static str, TestSpec); 3] {
        [
            (WIRE_PLAIN, spec()),
            (
                WIRE_RR,
                TestSpec::example()
                    .mechanism(Mechanism::Rr)
                    .size(64)
                    .duration_ns(2 * NS_PER_S)
                    .rate_pps(1000)
                    .response_size(200)
                    .congestion("cubic")
                    .socket_buffer_bytes(65536)
                    .omit_ns(NS_PER_S)
                    .busy_poll_ns(50_000),
            ),
            (
                WIRE_PACED,
                spec()
                    .direction(Direction::Bidir)
                    .streams(2)
                    .rate_bps(100_000_000)
                    .gap_ns(5)
                    .packet_log(true)
                    .no_offload(true)
                    .zerocopy(true)
                    .file("f.bin"),
            ),
        ]
    }

    #[test]
    fn wire_encoding_is_the_one_peers_of_this_version_send() {
        for (json, spec) in wire_specs() {
            assert_eq!(serde_json::to_string(&spec).expect("encode"), json);
        }
    }

    #[test]
    fn wire_zeros_decode_as_none_and_back() {
        for (json, spec) in wire_specs() {
            let back: TestSpec = serde_json::from_str(json).expect("decode");
            assert_eq!(back, spec, "{json}");
        }
        let plain: TestSpec = serde_json::from_str(WIRE_PLAIN).expect("decode");
        assert_eq!(
            (plain.rate_bps, plain.rate_pps, plain.response_size),
            (None, None, None)
        );
        assert_eq!(plain.busy_poll_ns, None);
    }

    /// A zero set in the program travels as the sentinel it is, and comes back as none.
    #[test]
    fn wire_some_zero_is_sent_as_none() {
        let mut s = spec();
        s.rate_bps = Some(0);
        s.busy_poll_ns = Some(0);
        s.response_size = Some(0);
        let json = serde_json::to_string(&s).expect("encode");
        assert_eq!(json, WIRE_PLAIN);
    }

    /// A peer that predates the optional fields leaves them out; `rate_bps` it always sent.
    #[test]
    fn wire_minimal_spec_of_an_older_peer_decodes() {
        let old: TestSpec = serde_json::from_str(
            r#"{"protocol":"tcp","mechanism":"stream","direction":"forward","size":1000,
                "bytes":1000000,"rate_bps":0,"streams":1,"interval_ns":1000000000,
                "drain_ns":1000000000,"ack_timeout_ns":200000000}"#,
        )
        .expect("decode");
        assert_eq!(old, TestSpec::example());
        let no_rate = serde_json::from_str::<TestSpec>(
            r#"{"protocol":"tcp","mechanism":"stream","direction":"forward","size":1000,
                "bytes":1000000,"streams":1,"interval_ns":1000000000,
                "drain_ns":1000000000,"ack_timeout_ns":200000000}"#,
        );
        assert!(no_rate.is_err(), "rate_bps stays required, as it was");
    }

    #[test]
    fn default_and_example_are_valid() {
        assert_eq!(TestSpec::default().validate(), Ok(()));
        assert_eq!(TestSpec::example().validate(), Ok(()));
        assert_eq!(TestSpec::default().duration_ns, Some(10 * NS_PER_S));
    }

    #[test]
    fn file_rules() {
        let udp = spec().file("data.bin");
        assert_eq!(udp.validate(), Ok(()));
        assert_eq!(udp.file_chunk(), 984);
        // 2000 bytes in pieces of 984: 3 datagrams, 3 headers
        assert_eq!(udp.bytes_for_file(2000), 2048);
        let tcp = udp.clone().protocol(Protocol::Tcp);
        assert_eq!(tcp.bytes_for_file(2000), 2000);
        for f in [1u64, 983, 984, 985, 2000, 1_000_000] {
            let s = udp.clone().bytes(udp.bytes_for_file(f));
            assert_eq!(s.file_bytes(), f, "{f}");
        }
        for bad in ["", "..", "a/b", "../etc/passwd", "x\\y"] {
            let s = udp.clone().file(bad);
            assert!(matches!(s.validate(), Err(SpecError::File(_))), "{bad:?}");
        }
        let mut reverse_unsized = udp.clone().direction(Direction::Reverse);
        reverse_unsized.bytes = None;
        assert_eq!(reverse_unsized.validate(), Ok(()));
        let short = udp.size(16);
        assert!(short.validate().is_err());
    }

    #[test]
    fn rr_rules() {
        let rr = spec().mechanism(Mechanism::Rr).size(64);
        assert_eq!(rr.validate(), Ok(()));
        assert_eq!(rr.response_len(), 64);
        let big = rr.clone().response_size(1000);
        assert_eq!(big.response_len(), 1000);
        for (bad, err) in [
            (
                rr.clone().direction(Direction::Reverse),
                SpecError::RrReverse,
            ),
            (rr.clone().size(4), SpecError::RrUdpSize),
            (
                rr.clone().response_size(70_000),
                SpecError::ResponseSize(70_000),
            ),
        ] {
            assert_eq!(bad.validate(), Err(err));
        }
        assert_eq!(Mechanism::Rr.to_string(), "rr");
    }

    #[test]
    fn busy_poll_is_for_request_response_and_optional_on_the_wire() {
        let rr = spec()
            .mechanism(Mechanism::Rr)
            .size(64)
            .busy_poll_ns(50_000);
        assert_eq!(rr.validate(), Ok(()));
        let too_long = rr.clone().busy_poll_ns(MAX_BUSY_POLL_NS + 1);
        assert_eq!(too_long.validate(), Err(SpecError::BusyPoll));
        let stream = rr.clone().mechanism(Mechanism::Stream);
        assert_eq!(stream.validate(), Err(SpecError::BusyPoll));
        // Off, the field is not sent, so a peer that predates it takes the spec; a spec
        // from such a peer (no field) is one without busy polling.
        let off = rr.clone().busy_poll_ns(0);
        let json = serde_json::to_string(&off).expect("serialize");
        assert!(!json.contains("busy_poll"), "{json}");
        let back: TestSpec = serde_json::from_str(&json).expect("deserialize");
        assert_eq!(back, off);
        let on: TestSpec =
            serde_json::from_str(&serde_json::to_string(&rr).expect("serialize")).expect("back");
        assert_eq!(on.busy_poll_ns, Some(50_000));
    }

    #[test]
    fn open_loop_is_for_udp_request_response_and_optional_on_the_wire() {
        let probe = spec()
            .protocol(Protocol::Udp)
            .mechanism(Mechanism::Rr)
            .size(64)
            .open_loop_interval_ns(100_000_000);
        assert_eq!(probe.validate(), Ok(()));
        for bad in [
            probe.clone().protocol(Protocol::Tcp),
            probe.clone().mechanism(Mechanism::Stream),
            probe.clone().open_loop_interval_ns(999_999),
            probe.clone().open_loop_interval_ns(61_000_000_000),
        ] {
            assert_eq!(bad.validate(), Err(SpecError::OpenLoop), "{bad:?}");
        }
        // Off, the field is not sent: a peer that predates it takes the spec.
        let off = probe.clone().open_loop_interval_ns(0);
        let json = serde_json::to_string(&off).expect("serialize");
        assert!(!json.contains("open_loop"), "{json}");
        let back: TestSpec = serde_json::from_str(&json).expect("deserialize");
        assert_eq!(back, off);
        let on: TestSpec =
            serde_json::from_str(&serde_json::to_string(&probe).expect("serialize")).expect("back");
        assert_eq!(on.open_loop_interval_ns, Some(100_000_000));
    }

    #[test]
    fn live_streams_is_sent_only_when_asked() {
        // Off, the spec is spelled as before, so a peer that predates the field takes it.
        let off = spec().streams(2);
        let json = serde_json::to_string(&off).expect("serialize");
        assert!(!json.contains("live_streams"), "{json}");
        let mut on = off.clone();
        on.live_streams = true;
        let json = serde_json::to_string(&on).expect("serialize");
        let back: TestSpec = serde_json::from_str(&json).expect("deserialize");
        assert!(back.live_streams, "{json}");
    }

    #[test]
    fn bidir_streams_and_directions() {
        let b = spec().direction(Direction::Bidir).streams(3);
        assert_eq!(b.validate(), Ok(()));
        assert_eq!(b.total_streams(), 6);
        let dirs: Vec<Direction> = (0..6).map(|i| b.stream_direction(i)).collect();
        assert_eq!(dirs[..3], [Direction::Forward; 3]);
        assert_eq!(dirs[3..], [Direction::Reverse; 3]);
        assert_eq!(b.one_way(Direction::Reverse).direction, Direction::Reverse);
        assert_eq!(spec().stream_direction(5), Direction::Forward);
        let many = b.clone().streams(40);
        assert_eq!(many.validate(), Err(SpecError::BidirStreams(40)));
        let rr = b.clone().mechanism(Mechanism::Rr).size(64);
        assert!(rr.validate().is_err());
        assert_eq!(Direction::Bidir.to_string(), "bidir");
    }

    #[test]
    fn congestion_names() {
        let tcp = TestSpec::example();
        for good in ["cubic", "bbr", "reno", "h_tcp2"] {
            let s = tcp.clone().congestion(good);
            assert_eq!(s.validate(), Ok(()), "{good}");
        }
        for bad in ["", "a/b", "x; rm", "sixteen_chars_xx"] {
            let s = tcp.clone().congestion(bad);
            assert_eq!(s.validate(), Err(SpecError::Congestion), "{bad:?}");
        }
        let udp = spec().congestion("cubic");
        assert_eq!(udp.validate(), Err(SpecError::Congestion));
    }

    #[test]
    fn valid_spec_passes() {
        assert_eq!(spec().validate(), Ok(()));
    }

    #[test]
    fn udp_size_bounds() {
        for (size, ok) in [(0, false), (1, true), (65_507, true), (65_508, false)] {
            let s = spec().size(size);
            assert_eq!(s.validate().is_ok(), ok, "size {size}");
        }
    }

    #[test]
    fn tcp_size_bounds() {
        for (size, ok) in [
            (0, false),
            (1, true),
            (MAX_TCP_SIZE, true),
            (MAX_TCP_SIZE + 1, false),
        ] {
            let s = TestSpec::example().size(size);
            assert_eq!(s.validate().is_ok(), ok, "size {size}");
        }
    }

    #[test]
    fn amount_rules() {
        let mut both = spec();
        both.duration_ns = Some(1);
        assert_eq!(both.validate(), Err(SpecError::Amount));
        let mut none = spec();
        none.bytes = None;
        assert_eq!(none.validate(), Err(SpecError::Amount));
        let zero = spec().bytes(0);
        assert_eq!(zero.validate(), Err(SpecError::ZeroAmount));
    }

    #[test]
    fn too_many_intervals() {
        let s = spec().duration_ns(3600 * NS_PER_S).interval_ns(10_000_000);
        assert_eq!(s.validate(), Err(SpecError::Interval));
    }

    #[test]
    fn display_matches_the_json_names() {
        for (shown, json) in [
            (
                Protocol::Udp.to_string(),
                serde_json::to_string(&Protocol::Udp).unwrap(),
            ),
            (
                Mechanism::StopAndWait.to_string(),
                serde_json::to_string(&Mechanism::StopAndWait).unwrap(),
            ),
            (
                Direction::Reverse.to_string(),
                serde_json::to_string(&Direction::Reverse).unwrap(),
            ),
        ] {
            assert_eq!(format!("\"{shown}\""), json);
        }
    }

    #[test]
    fn offered_rate() {
        assert_eq!(spec().offered_bps(), None);
        assert_eq!(spec().rate_pps(10).offered_bps(), Some(80_000));
        assert_eq!(spec().rate_bps(5).offered_bps(), Some(5));
        assert_eq!(spec().rate_bps(5).rate_pps(10).offered_bps(), Some(80_000));
    }

    /// `-w` and `-O` are checked on both sides: a buffer in 1K..=1G, an omitted start shorter
    /// than the test.
    #[test]
    fn window_and_omit_are_bounded() {
        let with = |b: Option<u64>, omit_ns: u64| {
            let mut s = spec().duration_ns(2 * NS_PER_S).omit_ns(omit_ns);
            s.socket_buffer_bytes = b;
            s
        };
        assert_eq!(with(Some(1024), NS_PER_S).validate(), Ok(()));
        assert_eq!(with(Some(1 << 30), 0).validate(), Ok(()));
        assert_eq!(
            with(Some(10), 0).validate(),
            Err(SpecError::SocketBuffer(10))
        );
        assert!(with(Some((1 << 30) + 1), 0).validate().is_err());
        assert_eq!(with(None, 2 * NS_PER_S).validate(), Err(SpecError::Omit));
        assert!(with(None, 61 * NS_PER_S).validate().is_err());
    }

    #[test]
    fn error_messages_name_the_flag() {
        assert_eq!(
            spec().size(70_000).validate().unwrap_err().to_string(),
            "--size 70000 is not allowed for udp: a datagram carries 1 to 65507 bytes"
        );
    }
}
