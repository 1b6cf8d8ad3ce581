//! An attacker's tools: connections from another loopback address, wirebench control frames
//! written and read by hand, and what `/proc` says of the server.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};

use wirebench_proto::control::{encode, FrameDecoder, Message, PROTOCOL_VERSION};
use wirebench_proto::spec::TestSpec;

/// A TCP connection from `from` (an address of 127/8) to the server's `port` on 127.0.0.1.
pub fn connect_port(from: &str, port: u16) -> std::io::Result<TcpStream> {
    super::connect_from(from, SocketAddr::from(([127, 0, 0, 1], port)))
}

/// Raises this process's open-file limit to its hard limit (flood tests hold many sockets;
/// the server child inherits the limit).
#[allow(unsafe_code)]
pub fn raise_fd_limit() {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit read and write the one struct passed, which lives here.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 {
            lim.rlim_cur = lim.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
    }
}

/// A field of `/proc/PID/status` in its unit (kB for memory), 0 if unreadable.
pub fn proc_status(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|st| {
            st.lines()
                .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
                .and_then(|v| v.split_whitespace().next()?.parse().ok())
        })
        .unwrap_or(0)
}

/// A minimal good spec: `bytes` of TCP stream, 1000-byte messages.
pub fn spec(bytes: u64) -> TestSpec {
    serde_json::from_value(serde_json::json!({
        "protocol": "tcp", "mechanism": "stream", "direction": "forward", "size": 1000,
        "bytes": bytes, "rate_bps": 0, "streams": 1, "interval_ns": 1_000_000_000u64,
        "drain_ns": 1_000_000_000u64, "ack_timeout_ns": 200_000_000u64
    }))
    .expect("a spec")
}

/// A `start` for `spec` from a client calling itself `tool`, with client nonce "c".
pub fn start(spec: TestSpec, tool: &str) -> Message {
    Message::Start {
        version: PROTOCOL_VERSION,
        tool: tool.into(),
        spec,
        host_id: String::new(),
        nonce: "c".into(),
    }
}

/// Writes one control frame.
pub fn send(c: &mut TcpStream, m: &Message) {
    c.write_all(&encode(m).expect("encodes"))
        .expect("write a frame");
}

/// Reads frames until one arrives (or the connection ends: `None`).
pub fn recv(c: &mut TcpStream, d: &mut FrameDecoder) -> Option<Message> {
    let mut buf = [0u8; 4096];
    loop {
        if let Ok(Some(m)) = d.next_message() {
            return Some(m);
        }
        match c.read(&mut buf) {
            Ok(0) | Err(_) => return None,
            Ok(n) => d.feed(&buf[..n]),
        }
    }
}

/// A fresh temporary directory for test `name` of this process.
pub fn tmp_dir(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("wirebench-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("a temporary directory");
    d
}
