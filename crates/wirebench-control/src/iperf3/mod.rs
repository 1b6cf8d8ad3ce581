//! Speaking iperf3 (esnet/iperf 3.x), sans-IO: the codec ([`codec`]) and the control
//! sessions of an iperf3 client ([`client`]) and server ([`server`]) as state machines with
//! `now` passed in, in the style of [`crate::control`]. The driver is `net::iperf3`.
//!
//! The protocol, read from iperf3's source (`iperf_client_api.c`, `iperf_server_api.c`):
//! the client connects, sends its cookie; the server answers PARAM_EXCHANGE; the client sends
//! its parameters as JSON; the server answers CREATE_STREAMS, the client opens its data
//! streams (TCP: connect and send the cookie; UDP: a 4-byte connect datagram, answered with
//! 4 bytes); the server sends TEST_START and TEST_RUNNING and both move data; the client
//! sends TEST_END; the server answers EXCHANGE_RESULTS, the client sends its results and the
//! server its own; the server sends DISPLAY_RESULTS and the client IPERF_DONE.

/// The system error numbers iperf3 sends after SERVER_ERROR (Linux's, which iperf3 clients
/// print with `strerror`): the protocol's values, not this host's calls.
pub mod errno {
    /// Operation not permitted.
    pub const EPERM: i32 = 1;
    /// Out of memory.
    pub const ENOMEM: i32 = 12;
    /// Invalid argument.
    pub const EINVAL: i32 = 22;
    /// Result too large.
    pub const ERANGE: i32 = 34;
    /// No buffer space available.
    pub const ENOBUFS: i32 = 105;
}

pub mod admit;
pub mod client;
pub mod codec;
pub mod server;

use crate::Session;
use thiserror::Error;
use wirebench_proto::error_kind::ErrorKind;

pub use admit::admit_anything;
pub use codec::{DecodeError, Params, ResultsDoc, StreamResult, UdpHeader, DEFAULT_PORT};

/// How long each step of the set-up and of the results exchange may take: iperf3's own
/// servers wait as long for the cookie and parameters (`rcv_timeout` defaults aside).
pub const STEP_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Why an iperf3 session ended early, in one line each.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum Iperf3Error {
    /// The server runs another test (iperf3 serves one at a time).
    #[error("the iperf3 server is busy running a test (ACCESS_DENIED): try again later")]
    Busy,
    /// The server reported an error.
    #[error("the iperf3 server reported an error: {text}")]
    Server {
        /// Its message: the code's text, and the system error it sent if any.
        text: String,
        /// iperf3's error code (`i_errno`).
        code: i32,
    },
    /// The server ended the test (SERVER_TERMINATE).
    #[error("the iperf3 server ended the test (SERVER_TERMINATE)")]
    ServerTerminated,
    /// The client ended the test (CLIENT_TERMINATE).
    #[error("the iperf3 client ended the test (CLIENT_TERMINATE)")]
    ClientTerminated,
    /// The peer sent what the protocol does not allow here.
    #[error("iperf3 protocol error: {0}")]
    Protocol(String),
    /// The peer closed the control connection before the end.
    #[error("the iperf3 peer closed the control connection")]
    Closed,
    /// A step took too long.
    #[error("timed out waiting for the iperf3 peer's {0}")]
    Timeout(&'static str),
    /// A running test's client sent nothing, on its control connection or its streams.
    #[error("the iperf3 client sent nothing for {0} s: the server ended its test")]
    Idle(u64),
}

impl Iperf3Error {
    /// The error's kind, as wirebench's own sessions give theirs: what the client's exit
    /// code, hints and `error_cause` read.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Self::Busy => ErrorKind::Busy,
            Self::Server { code, .. } if *code == codec::IE_TOTAL_RATE => ErrorKind::MaxRate,
            Self::Server { .. } => ErrorKind::Unknown,
            Self::ServerTerminated | Self::ClientTerminated => ErrorKind::Stopped,
            Self::Protocol(_) => ErrorKind::Protocol,
            Self::Closed => ErrorKind::PeerClosed,
            Self::Timeout(_) | Self::Idle(_) => ErrorKind::Timeout,
        }
    }
}

impl From<DecodeError> for Iperf3Error {
    fn from(e: DecodeError) -> Self {
        Self::Protocol(e.to_string())
    }
}

/// Feeds `bytes` to every iperf3 decoder and to both control sessions at `now`, for the fuzz
/// target and the random-bytes unit test: whatever the bytes, nothing may panic.
pub fn decode_everything(bytes: &[u8], now: std::time::Instant) {
    use codec::{Expect, Reader};
    for expect in [Expect::State, Expect::Json(codec::MAX_JSON), Expect::Error] {
        let mut r = Reader::default();
        r.push(bytes);
        while let Ok(Some(_)) = r.next(expect) {}
    }
    let _ = UdpHeader::decode(false, bytes);
    let _ = UdpHeader::decode(true, bytes);
    let _ = Params::parse(bytes);
    if let Ok(o) = admit::SocketOptions::parse(bytes) {
        let _ = o.check();
    }
    let _ = ResultsDoc::parse(bytes);
    let _ = client::counts_omitted(bytes, 1);
    let _ = codec::check_cookie(bytes);
    let _ = codec::is_connect(bytes);
    let cookie = codec::cookie_from(&[0; 36]);
    let mut c = client::ClientSession::new(now, cookie, Params::default(), None);
    c.handle_bytes(now, bytes);
    while c.poll_action().is_some() {}
    let mut s = server::ServerSession::new(now, crate::admission::SpecLimits::default());
    // As the driver does: read no more than the session's limit, and say yes to each step.
    let mut rest = bytes;
    while !rest.is_empty() {
        let n = s.read_limit().min(rest.len());
        if n == 0 {
            s.welcome(now);
            s.accept(now);
            s.exchange(now);
            if s.read_limit() == 0 {
                break;
            }
            continue;
        }
        s.handle_bytes(now, &rest[..n]);
        rest = &rest[n..];
        while s.poll_action().is_some() {}
    }
}

#[cfg(test)]
mod hostile;
#[cfg(test)]
mod tests;
