//! The wirebench data path and sessions: TCP and UDP senders and receivers in both
//! mechanisms, pacing, per-interval records, and the control session that ties a client to a
//! server.
//!
//! Threads: each side runs its data role on a thread of its own and drives the control
//! channel from the calling thread. The data thread owns all per-packet state; it shares only
//! a few atomics (progress, stop) and sends one record per interval over a channel, so nothing
//! on the data path allocates, locks or logs per packet.
#![deny(unsafe_code)]

mod auth;
mod file;
mod kernel_counters;
mod net;
pub mod pace;
mod packet_log_writer;
pub mod quic;
mod role;
pub mod rrul;
mod rx;
mod stream_sum;
mod sys;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use wirebench_stats::{LossRuns, TimeHistogram};

pub use auth::{load_psk, Psk, PskError};
pub use file::{SaveDir, DEFAULT_SAVE_QUOTA};
pub use net::client::{run, ClientConfig};
pub use net::iperf3::client::{run_iperf3, split_target, Iperf3Config};
pub use net::metrics::Format as MetricsFormat;
pub use net::quic_perf::{
    run_quic_perf, PerfRefusal, QuicPerfConfig, DEFAULT_PERF_PORT, PERF_ALPN,
};
pub use net::roles::{ServerInterval, ServerWatch, Watch};
pub use net::serve_metrics;
pub use net::server::{
    Server, ServerBudget, ServerConfig, ServerHandle, DEFAULT_MAX_DURATION, DEFAULT_MAX_TIMING,
};
pub use role::probe::{ProbeFate, ProbeLog, ProbeRecord, ProbeTally};
pub use role::user::{UserAccept, UserConnector, UserListener, UserStream};
/// The protocols the engine drives, sans-IO (`wirebench-control`): `crate::control` here.
pub(crate) use wirebench_control as control;
/// iperf3's protocol: its codec, parameters and sessions (`wirebench_control::iperf3`).
pub use wirebench_control::iperf3;

use thiserror::Error;

pub use control::SessionError;
pub use wirebench_proto::error_kind::ErrorKind;

/// What can end a test.
#[derive(Debug, Error)]
pub enum EngineError {
    /// Could not reach the server.
    #[error("cannot connect to {addr}: {source}")]
    Connect {
        /// Address tried.
        addr: String,
        /// Why.
        source: std::io::Error,
    },
    /// A server could not listen (the port taken, an address not this host's).
    #[error("{}", listen_message(*addr, *udp, flag, error))]
    Listen {
        /// Where it tried.
        addr: std::net::SocketAddr,
        /// Whether it was the UDP socket of that port.
        udp: bool,
        /// The flag that chooses the port (`-p`, `--iperf3-port`, `--metrics`).
        flag: &'static str,
        /// Why (in the message: not a separate cause, so it is said once).
        error: std::io::Error,
    },
    /// The control session ended it (a refusal, the peer's error, a limit, a timeout).
    #[error(transparent)]
    Session(#[from] SessionError),
    /// The peer broke the protocol.
    #[error("protocol error: {0}")]
    Protocol(String),
    /// A wait ran out.
    #[error("timed out waiting for {0}")]
    Timeout(&'static str),
    /// The test cannot be set up on this host as asked.
    #[error("cannot set up the test: {0}")]
    Setup(String),
    /// A system call failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: &'static str,
        /// Why it failed.
        source: std::io::Error,
    },
}

impl EngineError {
    pub(crate) fn io(context: &'static str, source: std::io::Error) -> Self {
        Self::Io { context, source }
    }

    /// The error's kind: what code that acts on a failure (retry, exit code, hint) reads.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Self::Connect { .. } => ErrorKind::Connect,
            Self::Listen { .. } => ErrorKind::Setup,
            Self::Session(e) => e.kind(),
            Self::Protocol(_) => ErrorKind::Protocol,
            Self::Timeout(_) => ErrorKind::Timeout,
            Self::Setup(_) => ErrorKind::Setup,
            Self::Io { .. } => ErrorKind::Io,
        }
    }
}

/// [`EngineError::Listen`]'s words: what failed and the flag that fixes it.
fn listen_message(
    addr: std::net::SocketAddr,
    udp: bool,
    flag: &str,
    error: &std::io::Error,
) -> String {
    use std::io::ErrorKind as K;
    let on = if udp {
        format!("{addr} (UDP)")
    } else {
        addr.to_string()
    };
    match error.kind() {
        K::AddrInUse => format!("cannot listen on {on} (port in use): choose another with {flag}"),
        K::AddrNotAvailable => {
            format!(
                "cannot listen on {on} (not an address of this host): name one of its addresses"
            )
        }
        K::PermissionDenied => format!(
            "cannot listen on {on} (permission denied: ports below 1024 need root or \
             CAP_NET_BIND_SERVICE): choose another with {flag}"
        ),
        _ => format!("cannot listen on {on}: {error}"),
    }
}

/// An iperf3 session's failure, as the peer's error it is reported as.
impl From<iperf3::Iperf3Error> for EngineError {
    fn from(e: iperf3::Iperf3Error) -> Self {
        Self::Session(SessionError::Peer {
            kind: Some(e.kind()),
            reason: e.to_string(),
        })
    }
}

/// No randomness: as any failed system call.
impl From<auth::NonceError> for EngineError {
    fn from(e: auth::NonceError) -> Self {
        Self::io("drawing a nonce", std::io::Error::other(e.0.to_string()))
    }
}

/// A driver's failure the session hears of (a data stream that would not open): its kind
/// and words go to the peer and into the results.
impl From<EngineError> for SessionError {
    fn from(e: EngineError) -> Self {
        match e {
            EngineError::Session(e) => e,
            e => SessionError::Local {
                kind: e.kind(),
                reason: e.to_string(),
            },
        }
    }
}

/// The raw distributions a stream's role ends with, so that several streams' can be merged
/// exactly (percentiles of a union are not a function of the parts' percentiles).
#[derive(Debug, Default)]
pub(crate) struct Hists {
    /// One-way delays (UDP receivers).
    pub delay: Option<TimeHistogram>,
    /// Times between arrivals (UDP receivers).
    pub gaps: Option<TimeHistogram>,
    /// Round trips (request/response clients).
    pub latency: Option<TimeHistogram>,
    /// Loss runs (UDP receivers).
    pub loss_runs: Option<LossRuns>,
    /// Open-loop probes: every request and what became of it.
    pub probes: Option<role::probe::ProbeLog>,
}

/// State one stream's data thread shares with its side's control thread.
#[derive(Debug)]
pub(crate) struct Shared {
    /// The side's start; every `*_ns` time of the side is measured from it.
    pub start: Instant,
    /// Unix time at `start`, ns: `epoch_unix_ns + now_ns()` is the side's Unix time, on a
    /// clock that a step of the system clock during the test does not move.
    pub epoch_unix_ns: u64,
    /// Set to end the data role at once.
    pub stop: AtomicBool,
    /// The sender's final message count, `u64::MAX` until its report arrives.
    pub peer_messages: AtomicU64,
    /// When the sender's report arrived (ns since start), `u64::MAX` until then.
    pub peer_done_ns: AtomicU64,
    /// Live totals for progress display, stored by the data thread.
    pub bytes: AtomicU64,
    /// Live message count for progress display.
    pub messages: AtomicU64,
    /// Set once by the role as it ends: its raw distributions.
    pub hists: Mutex<Hists>,
    /// Set to end the whole side at once (every stream's `stop` follows it).
    pub side_stop: Arc<AtomicBool>,
}

impl Shared {
    /// A stream's state: its side's start (the same for every stream of a side) and stop.
    pub(crate) fn new(start: Instant, epoch_unix_ns: u64, side_stop: Arc<AtomicBool>) -> Self {
        Self {
            epoch_unix_ns,
            start,
            stop: AtomicBool::new(false),
            peer_messages: AtomicU64::new(u64::MAX),
            peer_done_ns: AtomicU64::new(u64::MAX),
            bytes: AtomicU64::new(0),
            messages: AtomicU64::new(0),
            hists: Mutex::new(Hists::default()),
            side_stop,
        }
    }

    /// Keeps the role's raw distributions for the side's merge (once, at the role's end).
    pub(crate) fn keep_hists(&self, h: Hists) {
        if let Ok(mut slot) = self.hists.lock() {
            *slot = h;
        }
    }

    pub(crate) fn now_ns(&self) -> u64 {
        self.start.elapsed().as_nanos() as u64
    }

    /// The side's Unix time at `now_ns` (ns since its start).
    pub(crate) fn unix_ns(&self, now_ns: u64) -> u64 {
        self.epoch_unix_ns.wrapping_add(now_ns)
    }

    pub(crate) fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed) || self.side_stop.load(Ordering::Relaxed)
    }

    pub(crate) fn peer_done(&self, messages: u64) {
        self.peer_messages.store(messages, Ordering::Relaxed);
        self.peer_done_ns.store(self.now_ns(), Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What sweep asks of a failed trial, as it asks it: the engine's error's kind.
    fn asked_again(e: SessionError) -> bool {
        EngineError::from(e).kind().try_again_later()
    }

    #[test]
    fn a_retry_follows_the_kind_and_never_the_words() {
        let busy = |reason: &str| SessionError::Refused {
            kind: ErrorKind::Busy,
            reason: reason.into(),
        };
        assert!(asked_again(busy("server busy: 1 tests running")));
        assert!(asked_again(busy("reworded: all slots taken")));
        // The old words without the kind (a server without kinds): not busy as far as code
        // knows, so not asked again.
        assert!(!asked_again(SessionError::Refused {
            kind: ErrorKind::Refused,
            reason: "server busy: 1 tests running, the limit is 1 (--max-tests)".into(),
        }));
        let limit = SessionError::Limit {
            kind: ErrorKind::MaxBytes,
            reason: "no flag named here".into(),
        };
        assert_eq!(limit.kind(), ErrorKind::MaxBytes);
        assert!(!asked_again(limit));
    }

    #[test]
    fn a_drivers_failure_keeps_its_kind_through_the_session() {
        let e = EngineError::Setup("no such interface".into());
        let s = SessionError::from(e);
        assert_eq!(s.kind(), ErrorKind::Setup);
        assert_eq!(s.to_string(), "cannot set up the test: no such interface");
        // A session's own error comes back out as itself.
        let back = EngineError::from(SessionError::PeerClosed);
        assert!(matches!(SessionError::from(back), SessionError::PeerClosed));
    }
}
