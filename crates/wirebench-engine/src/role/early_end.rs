//! Why a loop ends before its natural end: a stop, the server's deadline, a peer gone idle.

use thiserror::Error;
use wirebench_proto::error_kind::ErrorKind;
use wirebench_proto::spec::TestSpec;

use super::RoleParams;
use crate::file::FileReadError;
use crate::packet_log_writer::LogError;
use crate::Shared;

/// Why a role ended before its natural end. The report carries it as text, the peer's and
/// the user's: each message says what happened on the data path.
#[derive(Debug, Error)]
pub(crate) enum RoleError {
    /// This side was told to stop.
    #[error("stopped")]
    Stopped,
    /// The server's time limit passed (`--max-duration`, or its default ceiling), in ns.
    #[error(
        "the server ended the test at its time limit: --max-duration {}",
        wirebench_proto::units::format_duration(std::time::Duration::from_nanos(*.0))
    )]
    ServerLimit(u64),
    /// The stream moved more than the server allows: which limit, and its value.
    #[error(
        "the server ended the test: more moved than its {} {value} allows",
        kind.limit_flag().unwrap_or("limit")
    )]
    OverLimit {
        /// Which limit.
        kind: ErrorKind,
        /// Its value, in the units its flag takes.
        value: String,
    },
    /// A receiver heard nothing for this many seconds while the sender was not done.
    #[error("no data from the sender for {0} s")]
    SenderSilent(u64),
    /// A byte stream still lacked data this many ms after the sender's report.
    #[error("data still missing {0} ms after the sender finished (--drain)")]
    DrainExpired(u64),
    /// The peer closed the data connection while data was being written.
    #[error("the data connection closed")]
    Closed,
    /// The peer closed the data connection instead of acknowledging.
    #[error("the data connection closed while waiting for an ack")]
    ClosedAwaitingAck,
    /// The peer closed a connection part way into a message.
    #[error("the connection closed in the middle of a message")]
    ClosedMidMessage,
    /// The request/response server closed the connection instead of answering.
    #[error("the server closed the connection")]
    ServerClosed,
    /// A crr transaction's connection closed without its response.
    #[error("the server closed a transaction's connection without answering")]
    TransactionUnanswered,
    /// A perf server's response longer than asked for.
    #[error("the server answered more than the {0} bytes asked")]
    AnsweredTooMuch(u64),
    /// A full socket did not drain for the idle limit.
    #[error("the receiver stopped reading")]
    ReceiverStuck,
    /// No answer came for the idle limit.
    #[error("the peer stopped answering")]
    PeerStuck,
    /// ICMP port unreachable, again and again.
    #[error("the receiver's UDP port is closed (ICMP port unreachable)")]
    PortUnreachable,
    /// A stop-and-wait sender got no acknowledgement for this many seconds.
    #[error("no acknowledgement for {0} s: the receiver is gone or the path drops everything")]
    NoAck(u64),
    /// QUIC: the peer takes no datagrams.
    #[error("the peer's QUIC stack takes no datagrams")]
    DatagramsRefused,
    /// QUIC: the path's packets carry smaller datagrams than the test's.
    #[error("the path carries QUIC datagrams of at most {max} bytes: give -l {max} or less")]
    DatagramTooLarge {
        /// The test's datagram size.
        size: u64,
        /// What fits now.
        max: usize,
    },
    /// Sending failed.
    #[error("sending data: {0}")]
    Send(std::io::Error),
    /// Receiving a stream's data failed.
    #[error("receiving data: {0}")]
    Receive(std::io::Error),
    /// Reading a request or a response failed.
    #[error("receiving: {0}")]
    Read(std::io::Error),
    /// Receiving requests (UDP rr server) failed.
    #[error("receiving requests: {0}")]
    ReceiveRequests(std::io::Error),
    /// Waiting for an acknowledgement failed.
    #[error("waiting for an ack: {0}")]
    Ack(std::io::Error),
    /// Waiting for a response failed.
    #[error("waiting for a response: {0}")]
    Response(std::io::Error),
    /// A crr transaction could not connect.
    #[error("connecting for a transaction: {0}")]
    Connect(std::io::Error),
    /// The packet log that was asked for could not be started.
    #[error("packet log: {0}")]
    LogStart(std::io::Error),
    /// The packet log is incomplete.
    #[error(transparent)]
    Log(#[from] LogError),
    /// The file to send could not be read.
    #[error(transparent)]
    File(#[from] FileReadError),
}

impl RoleError {
    /// The error's kind, beside its words in the side's report: what the server's driver
    /// reads to tell a limit from any other end.
    pub(crate) fn kind(&self) -> ErrorKind {
        match self {
            Self::Stopped => ErrorKind::Stopped,
            Self::ServerLimit(_) => ErrorKind::MaxDuration,
            Self::OverLimit { kind, .. } => *kind,
            Self::SenderSilent(_)
            | Self::DrainExpired(_)
            | Self::ReceiverStuck
            | Self::PeerStuck
            | Self::NoAck(_) => ErrorKind::Timeout,
            Self::Closed
            | Self::ClosedAwaitingAck
            | Self::ClosedMidMessage
            | Self::ServerClosed
            | Self::TransactionUnanswered
            | Self::PortUnreachable => ErrorKind::PeerClosed,
            Self::Send(_)
            | Self::Receive(_)
            | Self::Read(_)
            | Self::ReceiveRequests(_)
            | Self::Ack(_)
            | Self::Response(_)
            | Self::Connect(_)
            | Self::LogStart(_)
            | Self::Log(_)
            | Self::File(_)
            | Self::DatagramsRefused
            | Self::DatagramTooLarge { .. } => ErrorKind::Io,
            Self::AnsweredTooMuch(_) => ErrorKind::Protocol,
        }
    }
}

/// Why a loop ended early.
pub(super) fn early_stop(sh: &Shared, p: &RoleParams, now_ns: u64) -> Option<RoleError> {
    if sh.stopped() {
        Some(RoleError::Stopped)
    } else {
        // The deadline is the server's limit plus the test's drain.
        let deadline_ns = p.deadline_ns.filter(|&d| now_ns >= d)?;
        Some(RoleError::ServerLimit(
            deadline_ns.saturating_sub(p.spec.drain_ns),
        ))
    }
}

/// How long a side waits without any progress from its peer (no data arriving, or a full
/// socket that never drains) before it gives up: the peer is stuck or gone. Long enough for
/// the slowest legitimate test: the message gap and an ack timeout on top of half a minute.
pub(super) fn idle_limit_ns(spec: &TestSpec) -> u64 {
    30_000_000_000 + spec.gap_ns + spec.ack_timeout_ns
}
