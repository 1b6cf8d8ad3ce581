//! What a test will hold in the server's memory, from its spec alone: what `Admission`
//! reserves against `serve --max-memory`. Pure: the kernel's caps on socket buffers are read
//! once by the driver and passed in.
//!
//! The estimate is an upper bound on what the server allocates for the test, not on what the
//! allocator happens to touch: a buffer is counted whole although pages never written stay
//! out of the resident set. It counts, per stream of the server's side:
//!
//! - the message buffers the role allocates (a TCP read or write buffer, UDP batches of
//!   64 KiB slots, rr/crr request and response buffers), each at least one message long;
//! - the socket buffers the server sets (UDP always, TCP with `-w`), as the kernel grants
//!   them: twice the size asked (`socket(7)`: the kernel doubles `SO_RCVBUF`/`SO_SNDBUF` for
//!   its bookkeeping), capped at `net.core.{r,w}mem_max`; the receive buffer of a stream that
//!   receives, the send buffer of one that sends. TCP buffers left to autotuning are the
//!   kernel's own, bounded by `net.ipv4.tcp_mem`, and not counted;
//! - counts and histograms ([`PER_STREAM_BYTES`]);
//! - its interval records, allocated once at their bound (`TestSpec::interval_records`: one
//!   per interval of the test's time and drain, at most `MAX_INTERVALS`);
//!
//! and once per test: the session and results ([`PER_TEST_BYTES`]), the client's report as
//! it arrives ([`REPORT_BYTES`]; not for iperf3 clients, whose results are capped at 64 KiB),
//! this side's report and its frame ([`OWN_REPORT_BYTES`]), the control connection's output
//! ([`OUTPUT_BYTES`], which the session never passes), the packet log's queue, a file
//! transfer's buffer.

use wirebench_proto::control::MAX_FRAME;
use wirebench_proto::results::IntervalRecord;
use wirebench_proto::spec::{Direction, Mechanism, Protocol, TestSpec, MAX_INTERVALS};

pub use super::wire::OUTPUT_BYTES;

/// Counts, the HDR histograms of delay, jitter and round trips, and the touched part of the
/// role thread's stack (interval records are counted apart, by the test's length).
pub const PER_STREAM_BYTES: u64 = 1 << 20;

/// The control session, its frames, the two side reports and the results document.
pub const PER_TEST_BYTES: u64 = 1 << 20;

/// The client's report at the end of a test, as it arrives: its frame (at most
/// `MAX_FRAME`, 4 MiB) and what the frame's lists decode to (at most
/// `MAX_FRAME_LIST_BYTES`, 8 MiB). Measured: six tests each sending the largest report an
/// attacker can build took the server 60 MB past its idle size, 10 MB a test.
pub const REPORT_BYTES: u64 = 12 << 20;

/// One interval record in memory.
const RECORD_BYTES: u64 = std::mem::size_of::<IntervalRecord>() as u64;

/// This side's report: the sum of its streams' intervals (at most `MAX_INTERVALS`) and the
/// frame it is encoded into (at most `MAX_FRAME`), while the frame is copied to the output.
pub const OWN_REPORT_BYTES: u64 = MAX_INTERVALS * RECORD_BYTES + MAX_FRAME as u64;

/// What TCP roles allocate beyond one message: large writes of 2 MiB on loopback
/// (`role/tcp.rs`), reads of up to 512 KiB.
const TCP_CALL_BYTES: u64 = 2 << 20;

/// A UDP receiver's batch: `sys::udp::BATCH` (32) slots of 64 KiB; a sender's batch of GSO
/// messages is at most as large.
const UDP_BATCH_BYTES: u64 = 32 * 65_536;

/// One datagram's receive buffer for UDP rr, stop-and-wait and their acknowledgements.
const DATAGRAM_BYTES: u64 = 65_536;

/// The socket buffer the server asks for on UDP data sockets when the test does not
/// (`sys::sockopt::DATA_BUFFER_BYTES`).
const UDP_DEFAULT_SOCKET_BYTES: u64 = 4 << 20;

/// The packet log's queue between the receiver and its writer (`log.rs`).
/// 32 batches of 8192 records (the engine's `packet_log_writer` sizes its queue by it).
pub const PACKET_LOG_QUEUE_BYTES: u64 = 32 * 8192 * wirebench_proto::packet_log::RECORD_LEN as u64;

/// A file transfer's buffer (a 1 MiB reader, or the saved copy's write buffer).
const FILE_BUFFER_BYTES: u64 = 1 << 20;

/// The kernel's caps on the socket buffers a process may set (`net.core.rmem_max`,
/// `net.core.wmem_max`), in bytes; none: unknown, the size asked is granted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SocketCaps {
    /// `net.core.rmem_max`.
    pub receive_max: Option<u64>,
    /// `net.core.wmem_max`.
    pub send_max: Option<u64>,
}

/// What the kernel charges for a socket buffer of `asked` bytes under `cap`: twice what is
/// asked, as `setsockopt(SO_RCVBUF)` doubles it, after the cap.
fn granted(asked: u64, cap: Option<u64>) -> u64 {
    asked.min(cap.unwrap_or(u64::MAX)).saturating_mul(2)
}

/// The most the server's side of `spec` holds in memory, bytes (saturating at `u64::MAX`).
pub fn test_memory(spec: &TestSpec, caps: SocketCaps) -> u64 {
    let streams = u128::from(spec.total_streams().max(1));
    let per_stream = u128::from(stream_memory(spec, caps));
    let mut once =
        u128::from(PER_TEST_BYTES + REPORT_BYTES + OWN_REPORT_BYTES + OUTPUT_BYTES as u64);
    if server_writes_log(spec) {
        once += u128::from(PACKET_LOG_QUEUE_BYTES);
    }
    if spec.file.is_some() {
        once += u128::from(FILE_BUFFER_BYTES);
    }
    if spec.protocol == Protocol::Quic {
        once += quic_memory(spec);
    }
    u64::try_from(per_stream * streams + once).unwrap_or(u64::MAX)
}

/// What the QUIC stacks of the test's connections may hold on the server. Each: what its
/// peer sends, read or not, on any stream and whatever the test's direction, up to the
/// connection's receive window, its datagrams, and the stack's receive buffers; and when
/// the server sends on it, its whole send window and datagrams to send. A crr test holds
/// its first connection and one transaction's at a time.
fn quic_memory(spec: &TestSpec) -> u128 {
    let per = spec.quic_streams.unwrap_or(1).max(1);
    let receives = QUIC_CONNECTION_WINDOW + QUIC_DATAGRAM_WINDOW + QUIC_RECEIVE_BATCH_BYTES;
    let sends = QUIC_SEND_WINDOW + QUIC_DATAGRAM_WINDOW;
    if spec.mechanism.is_rr() {
        let connections = if spec.mechanism == Mechanism::Crr {
            2
        } else {
            1
        };
        let connections = connections.max(spec.total_streams().div_ceil(per));
        return u128::from(connections) * u128::from(receives + sends);
    }
    (0..spec.total_streams().max(1).div_ceil(per))
        .map(|k| match spec.stream_direction(k * per) {
            Direction::Forward => u128::from(receives),
            _ => u128::from(receives + sends),
        })
        .sum()
}

/// A QUIC stream's receive window: the most its peer may send ahead of what the reader
/// took, which the stack buffers (the engine sets it on every connection).
pub const QUIC_STREAM_WINDOW: u64 = 2 << 20;
/// A QUIC connection's send window: the most it holds unacknowledged, all streams together.
/// 4 MiB, as Linux's TCP send buffer at most grows to by default (`tcp_wmem`).
pub const QUIC_SEND_WINDOW: u64 = 4 << 20;
/// A QUIC connection's receive window, all streams together.
/// What a peer may make the stack hold on the server, whatever the test's direction.
pub const QUIC_CONNECTION_WINDOW: u64 = 4 << 20;
/// The send and receive buffers of each QUIC connection's UDP socket, both sides (as
/// quinn's own perf tool sets them: the kernel's default drops a burst on loopback).
pub const QUIC_SOCKET_BYTES: u64 = 2 << 20;
/// A QUIC connection's receive buffers: quinn reads up to 32 coalesced reads (GRO) at
/// once, each up to 64 KiB, into buffers of whole packets of the largest size the server
/// probes for (at most 6500 bytes).
pub const QUIC_RECEIVE_BATCH_BYTES: u64 = 32 * (65_535 + 6_500);
/// What a QUIC connection buffers of datagrams each way: arrived and not yet read (older
/// ones are dropped past it, and counted lost), and given and not yet sent. Every
/// connection accepts them.
pub const QUIC_DATAGRAM_WINDOW: u64 = 1 << 20;

/// One stream of `spec` on the server: its buffers, its socket buffers, its accounting.
fn stream_memory(spec: &TestSpec, caps: SocketCaps) -> u64 {
    let size = spec.size;
    let buffers = match (spec.mechanism, spec.protocol) {
        // The request read whole, the response written whole.
        (Mechanism::Rr | Mechanism::Crr, Protocol::Tcp) => size.saturating_add(spec.response_len()),
        // QUIC: the TCP roles' buffers (the stack's are its connection's: `quic_memory`).
        (_, Protocol::Quic) => size
            .saturating_add(spec.response_len())
            .saturating_add(TCP_CALL_BYTES),
        (Mechanism::Rr | Mechanism::Crr, Protocol::Udp) => size
            .saturating_add(spec.response_len())
            .saturating_add(DATAGRAM_BYTES),
        (Mechanism::StopAndWait, _) => size.saturating_add(DATAGRAM_BYTES),
        (Mechanism::Stream, Protocol::Tcp) => size.saturating_add(TCP_CALL_BYTES),
        (Mechanism::Stream, Protocol::Udp) => size.saturating_add(UDP_BATCH_BYTES),
    };
    // The server sets UDP and QUIC buffers always, TCP ones only when -w asks.
    let asked = match (spec.protocol, spec.socket_buffer_bytes) {
        (_, Some(w)) => Some(w),
        (Protocol::Udp, None) => Some(UDP_DEFAULT_SOCKET_BYTES),
        (Protocol::Quic, None) => Some(QUIC_SOCKET_BYTES),
        (Protocol::Tcp, None) => None,
    };
    let sockets = asked.map_or(0, |w| {
        let receive = granted(w, caps.receive_max);
        let send = granted(w, caps.send_max);
        match (spec.mechanism, spec.direction) {
            // Both ways carry data: requests in, responses out.
            (Mechanism::Rr | Mechanism::Crr, _) => receive.saturating_add(send),
            // The server receives (stream and stop-and-wait forward), or sends.
            (_, Direction::Forward) => receive,
            (_, Direction::Reverse) => send,
            (_, Direction::Bidir) => receive.max(send),
        }
    });
    buffers
        .saturating_add(sockets)
        .saturating_add(PER_STREAM_BYTES)
        .saturating_add(spec.interval_records().saturating_mul(RECORD_BYTES))
}

/// The same bound for an iperf3 client's test, from what its parameters say: `streams`
/// streams of blocks of `block_len` bytes, each socket's buffer set to `window_bytes` by the
/// driver (0: not set, left to the kernel). Each stream holds a block buffer of at least
/// 64 KiB (a receiver's datagram) and a send and a receive buffer.
pub fn iperf3_test_memory(
    streams: u64,
    block_len: u64,
    window_bytes: u64,
    caps: SocketCaps,
) -> u64 {
    let buffers = block_len.max(DATAGRAM_BYTES);
    let sockets = granted(window_bytes, caps.receive_max)
        .saturating_add(granted(window_bytes, caps.send_max));
    let per_stream = u128::from(
        buffers
            .saturating_add(sockets)
            .saturating_add(PER_STREAM_BYTES)
            .saturating_add(MAX_INTERVALS * RECORD_BYTES),
    );
    let total = per_stream * u128::from(streams.max(1)) + u128::from(PER_TEST_BYTES);
    u64::try_from(total).unwrap_or(u64::MAX)
}

/// Whether the server writes the test's packet log and streams it to the client: when its
/// first stream receives (`ServerSession::writes_log`, which admission cannot import).
pub fn server_writes_log(spec: &TestSpec) -> bool {
    spec.packet_log && spec.stream_direction(0) != Direction::Reverse
}

/// Bytes as people read a memory budget: MiB, or GiB from 10 GiB up.
pub fn format_mib(bytes: u64) -> String {
    const MIB: f64 = 1024.0 * 1024.0;
    let mib = bytes as f64 / MIB;
    if mib >= 10.0 * 1024.0 {
        format!("{:.1} GiB", mib / 1024.0)
    } else if mib >= 10.0 || mib == mib.trunc() {
        format!("{mib:.0} MiB")
    } else {
        format!("{mib:.1} MiB")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wirebench_proto::spec::MAX_STREAMS;

    fn rr(streams: u32, size: u64, response: u64) -> TestSpec {
        TestSpec::example()
            .mechanism(Mechanism::Rr)
            .response_size(response)
            .streams(streams)
            .size(size)
    }

    /// What every test holds once.
    const ONCE: u64 = PER_TEST_BYTES + REPORT_BYTES + OWN_REPORT_BYTES + OUTPUT_BYTES as u64;

    /// The records of a stream bounded by bytes alone.
    const ALL_RECORDS: u64 = MAX_INTERVALS * RECORD_BYTES;

    /// Issue 44: `-P 64 -i 10ms -t 100s` rr kept 10,000 records a stream, grown by
    /// doubling to 1.9 MiB, where the estimate allowed 1 MiB for everything. Records are
    /// now allocated once at the test's own bound, and counted at it.
    #[test]
    fn interval_records_count_at_the_tests_own_bound() {
        let long = rr(64, 1, 1)
            .interval_ns(10_000_000)
            .duration_ns(100_000_000_000);
        let mut long = long;
        long.bytes = None;
        assert_eq!(long.interval_records(), MAX_INTERVALS);
        let mut short = long.clone().duration_ns(1_000_000_000);
        short.drain_ns = 0;
        assert_eq!(short.interval_records(), 102);
        assert_eq!(
            test_memory(&long, CAPS) - test_memory(&short, CAPS),
            64 * (MAX_INTERVALS - 102) * RECORD_BYTES
        );
    }

    const CAPS: SocketCaps = SocketCaps {
        receive_max: Some(4 << 20),
        send_max: Some(4 << 20),
    };

    #[test]
    fn rr_holds_its_request_and_response_buffers_per_stream() {
        let m = test_memory(&rr(64, 16 << 20, 16 << 20), CAPS);
        // 64 streams × (32 MiB of buffers + accounting) + the test's own.
        assert_eq!(m, 64 * ((32 << 20) + PER_STREAM_BYTES + ALL_RECORDS) + ONCE);
        assert!(m > 2 << 30, "{m}");
        let small = test_memory(&rr(1, 64, 64), CAPS);
        assert!(small < ONCE + ALL_RECORDS + (3 << 20), "{small}");
    }

    #[test]
    fn udp_socket_buffers_count_as_the_kernel_grants_them() {
        let udp = TestSpec::example().protocol(Protocol::Udp);
        let capped = test_memory(
            &udp,
            SocketCaps {
                receive_max: Some(212_992),
                send_max: Some(212_992),
            },
        );
        let uncapped = test_memory(&udp, SocketCaps::default());
        assert_eq!(uncapped - capped, 2 * ((4 << 20) - 212_992));
        // A TCP stream left to autotuning sets none.
        let tcp = TestSpec::example();
        assert_eq!(
            test_memory(&tcp, CAPS),
            tcp.size + TCP_CALL_BYTES + PER_STREAM_BYTES + ALL_RECORDS + ONCE
        );
    }

    #[test]
    fn a_quic_connection_counts_what_its_peer_may_send_whatever_the_direction() {
        let quic = TestSpec::example().protocol(Protocol::Quic);
        let (fwd, rev) = (
            test_memory(&quic, CAPS),
            test_memory(&quic.clone().direction(Direction::Reverse), CAPS),
        );
        let receives = QUIC_CONNECTION_WINDOW + QUIC_DATAGRAM_WINDOW + QUIC_RECEIVE_BATCH_BYTES;
        let sends = QUIC_SEND_WINDOW + QUIC_DATAGRAM_WINDOW;
        // A reverse test's server reads nothing, yet its peer may fill the window.
        assert!(rev >= receives + sends, "{rev}");
        assert!(fwd >= receives, "{fwd}");
        // Four streams on one connection: its windows once, not four times.
        let mut one = quic.clone().streams(4);
        one.quic_streams = Some(4);
        let four = quic.streams(4);
        assert_eq!(
            test_memory(&four, CAPS) - test_memory(&one, CAPS),
            3 * receives
        );
    }

    #[test]
    fn the_packet_log_queue_and_a_file_buffer_count_once() {
        let base = TestSpec::example().protocol(Protocol::Udp);
        let log = base.clone().packet_log(true);
        assert_eq!(
            test_memory(&log, CAPS) - test_memory(&base, CAPS),
            PACKET_LOG_QUEUE_BYTES
        );
        assert_eq!(PACKET_LOG_QUEUE_BYTES, 8 << 20);
    }

    #[test]
    fn extreme_sizes_and_streams_saturate_without_overflow() {
        for size in [0, 1, u64::from(u32::MAX), u64::MAX] {
            for streams in [0, 1, MAX_STREAMS, u32::MAX] {
                for w in [None, Some(0), Some(u64::MAX)] {
                    let mut s = rr(streams, size, size);
                    s.socket_buffer_bytes = w;
                    let m = test_memory(&s, SocketCaps::default());
                    assert!(m >= PER_TEST_BYTES);
                    s.mechanism = Mechanism::Stream;
                    s.direction = Direction::Bidir;
                    let _ = test_memory(&s, CAPS);
                }
                let _ = iperf3_test_memory(u64::from(streams), size, size, CAPS);
            }
        }
        assert_eq!(
            test_memory(&rr(u32::MAX, u64::MAX, u64::MAX), CAPS),
            u64::MAX
        );
        assert_eq!(
            iperf3_test_memory(u64::MAX, u64::MAX, u64::MAX, CAPS),
            u64::MAX
        );
    }

    #[test]
    fn iperf3_tests_count_blocks_and_windows() {
        let m = iperf3_test_memory(4, 128 * 1024, 1 << 20, CAPS);
        assert_eq!(
            m,
            4 * (128 * 1024 + 4 * (1 << 20) + PER_STREAM_BYTES + ALL_RECORDS) + PER_TEST_BYTES
        );
        assert!(iperf3_test_memory(0, 0, 0, CAPS) > PER_STREAM_BYTES);
    }

    #[test]
    fn budgets_read_in_mib() {
        assert_eq!(format_mib(256 << 20), "256 MiB");
        assert_eq!(format_mib(1_073_741_824), "1024 MiB");
        assert_eq!(format_mib(3 << 19), "1.5 MiB");
        assert_eq!(format_mib(20 << 30), "20.0 GiB");
        assert_eq!(format_mib(0), "0 MiB");
    }
}
