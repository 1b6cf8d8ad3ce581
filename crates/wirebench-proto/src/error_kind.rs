//! What kind of failure ended a test, as code reads it; the text beside it is for people.
//!
//! A refusal, a peer's error and a side's report carry an [`ErrorKind`] beside their reason
//! (`error_kind`, snake_case), so that what acts on a failure (a sweep that retries a busy
//! server, the server's metrics, the client's exit code and hints) switches on the kind and a
//! reworded message changes nothing. A limit is named by the server flag that sets it, the
//! word its operator knows. A peer without kinds sends none (`None` where it is read); a
//! newer peer's kind this build does not know reads as [`ErrorKind::Unknown`].

use serde::{Deserialize, Serialize};

/// Why a test was refused or ended early.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    /// The server runs as many tests as it allows (`--max-tests`): try again later.
    Busy,
    /// `--max-tests-per-client`: this address runs as many tests as the server allows it.
    MaxTestsPerClient,
    /// `--max-tests-per-minute`: this address started as many tests as it may this minute.
    MaxTestsPerMinute,
    /// `--max-duration`: the test asked for longer, or ran out the server's time.
    MaxDuration,
    /// `--max-bytes`: the test asked for more, or moved more.
    MaxBytes,
    /// `--max-rate`: the test asked for a higher rate, or moved faster.
    MaxRate,
    /// `--max-pps`: the test asked for more packets a second, or sent them.
    MaxPps,
    /// `--max-memory`: the test would hold more server memory than is left.
    MaxMemory,
    /// `--max-streams`.
    MaxStreams,
    /// `--max-size`: messages larger than the server takes.
    MaxSize,
    /// `--max-timing`: a `--gap`, `--ack-timeout` or `--drain` longer than the server takes.
    MaxTiming,
    /// The pre-shared key was wrong or missing, or this address sent too many wrong ones.
    Auth,
    /// The two sides speak different control protocol versions.
    Version,
    /// The server refused the test as asked (a request it cannot serve), or refused it for
    /// a reason its version did not name.
    Refused,
    /// A wait ran out: a set-up step, a report, a silent peer.
    Timeout,
    /// The peer closed a connection, or went away, before the test ended.
    PeerClosed,
    /// The server is shutting down.
    Shutdown,
    /// The peer broke the control protocol.
    Protocol,
    /// The connection to the server could not be made.
    Connect,
    /// The peer answered, but not as a wirebench server does.
    NotWirebench,
    /// The test cannot be set up on this host as asked.
    Setup,
    /// A system call failed (a socket, a file).
    Io,
    /// An rr or crr test completed no transaction: nothing was measured.
    NoTransaction,
    /// This side was told to stop (the user, or its peer's end).
    Stopped,
    /// The server failed to set the test up.
    Internal,
    /// A kind this build does not know (a newer peer's).
    #[serde(other)]
    Unknown,
}

impl ErrorKind {
    /// The server flag of a limit kind (`--max-bytes`), `None` for any other kind.
    pub fn limit_flag(self) -> Option<&'static str> {
        Some(match self {
            Self::Busy => "--max-tests",
            Self::MaxTestsPerClient => "--max-tests-per-client",
            Self::MaxTestsPerMinute => "--max-tests-per-minute",
            Self::MaxDuration => "--max-duration",
            Self::MaxBytes => "--max-bytes",
            Self::MaxRate => "--max-rate",
            Self::MaxPps => "--max-pps",
            Self::MaxMemory => "--max-memory",
            Self::MaxStreams => "--max-streams",
            Self::MaxSize => "--max-size",
            Self::MaxTiming => "--max-timing",
            _ => return None,
        })
    }

    /// Whether the same test may succeed if asked again later, unchanged: the server was
    /// busy. (A per-client or per-minute limit is this client's own doing; a sweep that
    /// waited it out would hide it.)
    pub fn try_again_later(self) -> bool {
        self == Self::Busy
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq, Deserialize, Serialize)]
    struct Frame {
        reason: String,
        #[serde(default)]
        error_kind: Option<ErrorKind>,
    }

    #[test]
    fn kinds_are_snake_case_on_the_wire() {
        let cases = [
            (ErrorKind::Busy, "\"busy\""),
            (ErrorKind::MaxBytes, "\"max_bytes\""),
            (ErrorKind::MaxTestsPerClient, "\"max_tests_per_client\""),
            (ErrorKind::PeerClosed, "\"peer_closed\""),
            (ErrorKind::NotWirebench, "\"not_wirebench\""),
        ];
        for (kind, wire) in cases {
            assert_eq!(serde_json::to_string(&kind).unwrap(), wire);
            assert_eq!(serde_json::from_str::<ErrorKind>(wire).unwrap(), kind);
        }
    }

    #[test]
    fn an_older_peer_without_kinds_and_a_newer_peer_with_new_ones_both_decode() {
        let old: Frame = serde_json::from_str(r#"{"reason":"server busy"}"#).unwrap();
        assert_eq!(old.error_kind, None);
        let null: Frame = serde_json::from_str(r#"{"reason":"x","error_kind":null}"#).unwrap();
        assert_eq!(null.error_kind, None);
        let newer: Frame =
            serde_json::from_str(r#"{"reason":"x","error_kind":"max_cpu"}"#).unwrap();
        assert_eq!(newer.error_kind, Some(ErrorKind::Unknown));
        // Not a string: the frame is malformed, as any other wrong type is.
        assert!(serde_json::from_str::<Frame>(r#"{"reason":"x","error_kind":{}}"#).is_err());
    }

    #[test]
    fn only_busy_is_worth_asking_again() {
        assert!(ErrorKind::Busy.try_again_later());
        for k in [
            ErrorKind::MaxTestsPerClient,
            ErrorKind::MaxBytes,
            ErrorKind::Refused,
            ErrorKind::Unknown,
        ] {
            assert!(!k.try_again_later(), "{k:?}");
        }
        assert_eq!(ErrorKind::MaxPps.limit_flag(), Some("--max-pps"));
        assert_eq!(ErrorKind::Timeout.limit_flag(), None);
    }
}
