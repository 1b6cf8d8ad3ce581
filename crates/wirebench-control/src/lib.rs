//! wirebench's protocols as sans-IO state machines: its control protocol (this module's
//! sessions, admission, memory estimates, throttles, wire framing, the results shelf), the
//! pre-shared key's MACs (`psk`) and iperf3's protocol (`iperf3`: its codec, its parameters'
//! bounds and its sessions). The crate has no socket, thread, file or clock dependency: its
//! lints (`clippy.toml` beside its manifest) refuse `std::net`'s sockets, `std::thread`,
//! `std::fs` and reading the clock outside its tests. The engine drives it.
//!
//! The control protocol as sans-IO state machines, in the manner of quinn-proto's
//! `Connection`: bytes, driver events and the current time go in; bytes to write, actions for
//! the driver and the next deadline come out. Nothing here opens a socket, starts a thread,
//! sleeps or reads a clock, so every step and every wait is unit-tested in virtual time
//! (`tests.rs`), and the driver (`net`, the one part with sockets) is a thin loop around it.
//!
//! # The protocol, step by step (each wait with its deadline)
//!
//! ```text
//! client                                   server
//!   connect ─────────────────────────────▶ accept         pending stage (Admission): at most
//!                                                         256 connections, 64 per address;
//!                                                         when full the oldest is dropped
//!   start {version, spec, nonce} ────────▶                first frame within SETUP_TIMEOUT
//!                                                         (read byte-exactly: read_limit())
//!                     ◀──────── challenge {nonce}         with a key only
//!   auth {mac} ──────────────────────────▶                within SETUP_TIMEOUT
//!                                                         version, key, limits, slots
//!                     ◀──────── accept {cookie} | refuse  client waits SETUP_TIMEOUT for
//!                                                         each answer; bytes that are no
//!                                                         frame: "not a wirebench server"
//!                                                         within FIRST_BYTES_TIMEOUT;
//!                                                         accept's tcp_port (serve --stack):
//!                                                         TCP data connections go there
//!   attach {cookie, PACKET_LOG_STREAM} ──▶                (another connection) when the
//!                                                         server writes the packet log
//!   attach {cookie, i} / UDP hello i ────▶                every stream within
//!                                                         SETUP_TIMEOUT of the accept; a
//!                     ◀──────── udp_ready {i}             UDP hello is resent every
//!                                                         HELLO_EVERY until confirmed
//!   begin ───────────────────────────────▶                within SETUP_TIMEOUT of the
//!                                                         last stream
//!   … data …                                              server: whole-test ceiling of
//!                                                         the test's time bound + drain +
//!                                                         REPORT_GRACE, then it stops
//!   sender_counts (--bidir) ◀──────────▶ sender_counts
//!   done {report} ◀──────────────────────▶ done {report}  each side, once its roles are done,
//!                                                         waits drain + REPORT_GRACE for
//!                                                         the peer's
//! ```
//!
//! On both sides, a write that makes no progress for WRITE_TIMEOUT (a peer that stopped
//! reading) ends the session. Anything malformed, oversized or out of order gets an `error`
//! to the peer, and the session closes; the server keeps serving everyone else.

#![cfg_attr(test, allow(clippy::disallowed_methods, clippy::disallowed_types))]

pub mod admission;
pub mod client;
mod error;
pub mod exchange;
pub mod iperf3;
pub mod memory;
pub mod psk;
pub mod reclaim;
pub mod server;
pub mod shelf;
pub mod throttle;
pub mod wire;

#[cfg(test)]
mod tests;

use std::time::{Duration, Instant};

use wirebench_proto::results::SideReport;

pub use error::SessionError;
pub use exchange::RunAction;

/// How long each set-up step may take: the first frame, the answer to the challenge, the
/// server's answer, the data streams, the `begin`.
pub const SETUP_TIMEOUT: Duration = Duration::from_secs(10);

/// After the first bytes from a server, how long they may take to make a control frame
/// before the client says the peer is no wirebench server (instead of waiting the whole
/// SETUP_TIMEOUT).
pub const FIRST_BYTES_TIMEOUT: Duration = Duration::from_secs(2);

/// How often a UDP hello is sent until the server confirms it.
pub const HELLO_EVERY: Duration = Duration::from_millis(100);

/// Extra time a side waits for its peer's report beyond the drain time.
pub const REPORT_GRACE: Duration = Duration::from_secs(10);

/// How long a control write may make no progress before the peer counts as gone.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(10);

/// What every sans-IO session (this protocol's, and iperf3's in [`crate::iperf3`]) offers
/// the driver's one I/O loop (`net::Pump`): bytes out and in, the close, its next deadline.
/// The sessions implement it directly, so the loop is written once for all four.
pub trait Session {
    /// Bytes to write.
    fn poll_transmit(&self) -> Option<&[u8]>;
    /// `n` of them were written.
    fn handle_written(&mut self, now: Instant, n: usize);
    /// Bytes were read (never more than [`Session::read_limit`]).
    fn handle_bytes(&mut self, now: Instant, bytes: &[u8]);
    /// The peer closed, or the connection failed.
    fn handle_closed(&mut self, now: Instant);
    /// Deadlines that have passed by `now`.
    fn handle_timeout(&mut self, now: Instant);
    /// When the session next needs [`Session::handle_timeout`].
    fn poll_timeout(&self) -> Option<Instant>;
    /// How many bytes the driver may read now.
    fn read_limit(&self) -> usize {
        usize::MAX
    }
}

/// How a closed session ended.
#[derive(Debug, Default)]
pub struct Outcome {
    /// This side's report, once its roles ran.
    pub local: Option<SideReport>,
    /// The peer's report, if it arrived.
    pub peer: Option<SideReport>,
    /// Why the session failed, if it did.
    pub error: Option<SessionError>,
    /// When the roles were started, if they were: a failure before is the run's error, one
    /// after is written into the results beside what was measured.
    pub began: Option<Instant>,
    /// Set on the client when the user interrupted the test.
    pub interrupted: bool,
    /// Set on the server when it refused the test, with the limit it was.
    pub refusal: Option<admission::Refusal>,
    /// Set on the client when the server's report came on a new connection.
    pub report_fetched: bool,
}

impl Outcome {
    /// Whether the roles were started.
    pub fn started(&self) -> bool {
        self.began.is_some()
    }
}
