//! Socket set-up, and what the kernel actually granted; the batched UDP system calls.
//!
//! The only place in the engine with `unsafe`: [`udp`] wraps sendmmsg/recvmmsg with UDP GSO
//! and GRO control messages, which the standard library does not offer.

pub mod udp;

use std::net::{TcpStream, UdpSocket};

use socket2::SockRef;
use wirebench_proto::results::Datapath;
use wirebench_proto::spec::{Mechanism, TestSpec};

/// Socket buffer size asked for on data sockets. The kernel caps it at
/// `net.core.{r,w}mem_max`; the granted size is read back and recorded.
pub const DATA_BUFFER_BYTES: usize = 4 * 1024 * 1024;

/// Asks for large socket buffers and returns the (send, receive) sizes granted.
pub fn size_buffers(sock: SockRef<'_>) -> (u64, u64) {
    // A refusal here is not fatal: the granted size, whatever it is, goes into the results.
    let _ = sock.set_send_buffer_size(DATA_BUFFER_BYTES);
    let _ = sock.set_recv_buffer_size(DATA_BUFFER_BYTES);
    (
        sock.send_buffer_size().unwrap_or(0) as u64,
        sock.recv_buffer_size().unwrap_or(0) as u64,
    )
}

/// Wall-clock time in ns since the Unix epoch (0 if the clock is before it).
pub fn unix_now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

/// This kernel's boot id (`/proc/sys/kernel/random/boot_id`), empty where there is none. Two
/// processes with the same boot id read the same clocks, also from different network
/// namespaces: their one-way delays are absolute.
pub fn host_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// Whether two hosts' ids say they share a clock.
pub fn same_clock(a: &str, b: &str) -> bool {
    !a.is_empty() && a == b
}

/// Sets up a TCP data socket and records what was granted.
pub fn tcp_datapath(s: &TcpStream, spec: &TestSpec) -> Datapath {
    let mut features = Vec::new();
    // Stop-and-wait and request/response send one message and wait: Nagle's algorithm would
    // hold a short message back waiting for an ACK that the peer delays, so it is off there.
    if spec.mechanism != Mechanism::Stream && s.set_nodelay(true).is_ok() {
        features.push("tcp_nodelay".to_string());
    }
    let (snd, rcv) = size_buffers(SockRef::from(s));
    Datapath {
        io: "write/read".into(),
        batch: 1,
        send_buffer_bytes: snd,
        recv_buffer_bytes: rcv,
        features,
    }
}

/// Sets up a UDP data socket for `spec`: buffers, and the batched system calls and
/// offloads unless the test turns them off (`--no-offload`) or is stop-and-wait (one message
/// at a time). Records what was granted, with `features` the caller already uses.
pub fn udp_datapath(
    s: &UdpSocket,
    spec: &TestSpec,
    mut features: Vec<String>,
) -> (Datapath, udp::Offloads) {
    let (snd, rcv) = size_buffers(SockRef::from(s));
    let off = udp::enable(s, spec.mechanism == Mechanism::Stream && !spec.no_offload);
    features.extend(off.features());
    let dp = Datapath {
        io: off.io().into(),
        batch: if off.batch { udp::BATCH as u32 } else { 1 },
        send_buffer_bytes: snd,
        recv_buffer_bytes: rcv,
        features,
    };
    (dp, off)
}
