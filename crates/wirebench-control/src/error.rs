//! Why a control session ended: the sessions' own error, so that they import nothing from
//! the drivers (the engine turns it into its `EngineError`).

use thiserror::Error;
use wirebench_proto::error_kind::ErrorKind;

/// What can end a control session. Each carries its [`ErrorKind`] ([`SessionError::kind`]):
/// the kind goes to the peer beside the words, and what acts on a failure reads the kind.
#[derive(Debug, Error)]
pub enum SessionError {
    /// The server said no.
    #[error("server refused the test: {reason}")]
    Refused {
        /// Why, for code (a server without kinds: [`ErrorKind::Refused`]).
        kind: ErrorKind,
        /// Why, in the server's words.
        reason: String,
    },
    /// The peer broke the protocol.
    #[error("protocol error: {0}")]
    Protocol(String),
    /// The peer reported an error.
    #[error("peer reported: {reason}")]
    Peer {
        /// What went wrong, for code, if the peer said.
        kind: Option<ErrorKind>,
        /// What went wrong, in the peer's words.
        reason: String,
    },
    /// A wait ran out.
    #[error("timed out waiting for {0}")]
    Timeout(&'static str),
    /// The test cannot be set up on this host as asked.
    #[error("cannot set up the test: {0}")]
    Setup(String),
    /// The pre-shared key is missing here, or the server did not prove it holds it.
    #[error("cannot set up the test: {0}")]
    Key(&'static str),
    /// The server answered, but not as a wirebench server does.
    #[error("{server} is not a wirebench server: it answered {seen}; {hint}")]
    NotWirebench {
        /// The server as the user named it.
        server: String,
        /// What it answered, in words.
        seen: String,
        /// What to do.
        hint: &'static str,
    },
    /// The server is going away (SIGTERM).
    #[error("the server is shutting down")]
    Shutdown,
    /// The server ended the test at one of its limits (the text names the flag and value).
    #[error("{reason}")]
    Limit {
        /// Which limit.
        kind: ErrorKind,
        /// The limit in words.
        reason: String,
    },
    /// The peer closed the control connection.
    #[error("the peer closed the control connection")]
    PeerClosed,
    /// What the driver could not do for the session (open a data stream), in its words.
    #[error("{reason}")]
    Local {
        /// What failed, for code.
        kind: ErrorKind,
        /// What failed, in words.
        reason: String,
    },
}

impl SessionError {
    /// The error's kind, as it goes to the peer and into the results.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Self::Refused { kind, .. } | Self::Limit { kind, .. } | Self::Local { kind, .. } => {
                *kind
            }
            Self::Peer { kind, .. } => kind.unwrap_or(ErrorKind::Unknown),
            Self::Protocol(_) => ErrorKind::Protocol,
            Self::Timeout(_) => ErrorKind::Timeout,
            Self::Setup(_) => ErrorKind::Setup,
            Self::Key(_) => ErrorKind::Auth,
            Self::NotWirebench { .. } => ErrorKind::NotWirebench,
            Self::Shutdown => ErrorKind::Shutdown,
            Self::PeerClosed => ErrorKind::PeerClosed,
        }
    }
}
