//! Control messages and their framing.
//!
//! A frame is a 4-byte big-endian length followed by that many bytes of JSON, one
//! [`Message`]. JSON keeps the channel debuggable and versionable (as iperf3's control
//! channel is); it carries a handful of messages per test, so its cost does not matter. Every
//! decoder takes untrusted bytes: a frame longer than the decoder's cap, bytes that are not
//! JSON or a message of an unknown kind end that session with an error, never a panic.
//! Unknown fields are ignored, so a newer peer may add fields within a protocol version.

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::results::{IntervalRecord, Role, SideReport};
use crate::spec::TestSpec;

/// Version of the control protocol this build speaks.
///
/// 2: the UDP header's send time is the sender's Unix time (was: time since its start), and
/// `start`/`accept` carry the host identity that tells whether the clocks are one.
/// 3: the UDP header's sequence number and stop-and-wait's acknowledgement are keyed with a
/// per-stream token drawn from the test's cookie ([`crate::header::SeqToken`]).
pub const PROTOCOL_VERSION: u32 = 3;

/// The `stream` of an `attach` that opens a packet log connection: the server's receiver
/// writes its packet log to it (see [`crate::packet_log`]).
pub const PACKET_LOG_STREAM: u32 = u32::MAX;

/// The `stream` of an `attach` that opens one transaction of a `--mode crr` test: the request
/// follows the frame, the response comes back, and the connection closes.
pub const CRR_STREAM: u32 = u32::MAX - 1;

/// Cap for the first frame of a connection, before the peer is known to be a wirebench.
pub const MAX_HELLO_FRAME: usize = 64 * 1024;

/// Cap for any later frame: a `Done` report carries up to `MAX_INTERVALS` interval records.
pub const MAX_FRAME: usize = 4 * 1024 * 1024;

/// One control message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Message {
    /// Client → server, first frame of a control connection: the test asked for.
    Start {
        /// Control protocol version of the client.
        version: u32,
        /// Tool name and version of the client, for the server's log.
        tool: String,
        /// The test.
        spec: TestSpec,
        /// The client's kernel boot id: equal on both sides means one clock.
        #[serde(default)]
        host_id: String,
        /// The client's fresh nonce, for a server that authenticates (hex).
        #[serde(default)]
        nonce: String,
    },
    /// Server → client, when the server has a pre-shared key: prove you have it too.
    Challenge {
        /// The server's fresh nonce (hex).
        nonce: String,
    },
    /// Client → server: the answer to the challenge (HMAC-SHA256, hex).
    Auth {
        /// The client's MAC over both nonces and the spec.
        mac: String,
    },
    /// Client → server, first frame of a TCP data connection: which test and stream it is.
    Attach {
        /// Control protocol version of the client.
        version: u32,
        /// The test's cookie, from [`Message::Accept`].
        cookie: u64,
        /// Stream index.
        stream: u32,
    },
    /// Server → client: the test is accepted.
    Accept {
        /// Secret that tags the test's data streams.
        cookie: u64,
        /// UDP port for the test's UDP streams.
        udp_port: u16,
        /// TCP port for the test's data connections when it is not the control
        /// connection's (absent: the same). A server whose test traffic goes through a
        /// user-space stack (`serve --stack smoltcp`) takes them there.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tcp_port: Option<u16>,
        /// Tool name and version of the server.
        tool: String,
        /// The server's kernel boot id: equal on both sides means one clock.
        #[serde(default)]
        host_id: String,
        /// A reverse file transfer: the test's amount in payload bytes, from the size of the
        /// server's file; the client adopts it.
        #[serde(default)]
        bytes: Option<u64>,
        /// After a challenge: the server's MAC over both nonces, proving it has the key.
        #[serde(default)]
        server_mac: Option<String>,
    },
    /// Server → client: the test is refused; the connection closes after this.
    Refuse {
        /// Why, in words the user can act on.
        reason: String,
    },
    /// Server → client: the UDP hello of a stream arrived and its socket is ready.
    UdpReady {
        /// Stream index.
        stream: u32,
    },
    /// Client → server: all streams are set up; start.
    Begin,
    /// Either way, `--bidir`: this side's senders are done; each one's final message count
    /// as `(stream, messages)`, so that the peer's receivers of those streams can stop
    /// waiting before this side's own receivers are done (which the `done` waits for).
    SenderCounts {
        /// (stream index, messages sent) for every sending stream of this side.
        counts: Vec<(u32, u64)>,
    },
    /// Either way: this side's role is over; its counters and intervals.
    Done {
        /// What this side measured.
        report: Box<SideReport>,
    },
    /// Either way, while the test runs: an interval this side's roles just closed (summed
    /// over the streams of that role), so the peer can show live what the receiver saw
    /// (iperf3's server prints its own; here the client prints both sides' view). Sent at
    /// most once per interval per side; a peer may ignore it.
    Interval {
        /// The role whose interval it is (the receiver's carries loss and jitter).
        role: Role,
        /// The interval's counters, relative to that side's start.
        record: IntervalRecord,
    },
    /// Either way: the session ends because of this; the connection closes after it.
    Error {
        /// What went wrong.
        reason: String,
    },
}

/// A control frame that cannot be decoded or encoded.
#[derive(Debug, Error)]
pub enum FrameError {
    /// Length prefix above the cap.
    #[error("control frame of {len} bytes exceeds the limit of {max} bytes")]
    TooLarge {
        /// Length announced.
        len: usize,
        /// Cap in force.
        max: usize,
    },
    /// Body that is not a message.
    #[error("malformed control message: {0}")]
    Malformed(#[from] serde_json::Error),
}

/// Encodes one message as a frame.
pub fn encode(msg: &Message) -> Result<Vec<u8>, FrameError> {
    let mut out = vec![0u8; 4];
    serde_json::to_writer(&mut out, msg)?;
    let len = out.len() - 4;
    if len > MAX_FRAME {
        return Err(FrameError::TooLarge {
            len,
            max: MAX_FRAME,
        });
    }
    out[..4].copy_from_slice(&(len as u32).to_be_bytes());
    Ok(out)
}

/// Collects bytes from a stream and yields whole messages.
#[derive(Debug)]
pub struct FrameDecoder {
    buf: Vec<u8>,
    max: usize,
}

impl FrameDecoder {
    /// A decoder that refuses frames longer than `max` bytes.
    pub fn new(max: usize) -> Self {
        Self {
            buf: Vec::new(),
            max,
        }
    }

    /// Changes the cap, e.g. once the peer's first frame was good.
    pub fn set_max(&mut self, max: usize) {
        self.max = max;
    }

    /// Appends bytes read from the stream.
    pub fn feed(&mut self, data: &[u8]) {
        self.buf.extend_from_slice(data);
    }

    /// Bytes received but not yet decoded.
    pub fn buffered(&self) -> usize {
        self.buf.len()
    }

    /// The bytes received but not yet decoded (to say what a peer that is not a wirebench
    /// sent).
    pub fn pending(&self) -> &[u8] {
        &self.buf
    }

    /// The next whole message, `Ok(None)` if more bytes are needed.
    pub fn next_message(&mut self) -> Result<Option<Message>, FrameError> {
        let Some(prefix) = self.buf.get(..4) else {
            return Ok(None);
        };
        let mut len = [0u8; 4];
        len.copy_from_slice(prefix);
        let len = u32::from_be_bytes(len) as usize;
        if len > self.max {
            return Err(FrameError::TooLarge { len, max: self.max });
        }
        let Some(body) = self.buf.get(4..4 + len) else {
            return Ok(None);
        };
        let msg = serde_json::from_slice(body)?;
        self.buf.drain(..4 + len);
        Ok(Some(msg))
    }
}

/// Decodes exactly one frame from a byte slice (fuzzing and tests): the message and the
/// number of bytes it used, `Ok(None)` if the slice holds no whole frame.
pub fn decode(bytes: &[u8], max: usize) -> Result<Option<(Message, usize)>, FrameError> {
    let mut d = FrameDecoder::new(max);
    d.feed(bytes);
    let before = d.buffered();
    Ok(d.next_message()?.map(|m| (m, before - d.buffered())))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(body: &[u8]) -> Vec<u8> {
        let mut v = (body.len() as u32).to_be_bytes().to_vec();
        v.extend_from_slice(body);
        v
    }

    #[test]
    fn round_trip_in_pieces() {
        let msgs = [
            Message::Begin,
            Message::Refuse {
                reason: "busy".into(),
            },
            Message::Interval {
                role: Role::Receiver,
                record: IntervalRecord {
                    end_ns: 1_000_000_000,
                    bytes: 1500,
                    messages: 1,
                    lost: 2,
                    jitter_ns: Some(3.5),
                    ..IntervalRecord::default()
                },
            },
            Message::Attach {
                version: 1,
                cookie: u64::MAX,
                stream: 0,
            },
        ];
        let mut wire = Vec::new();
        for m in &msgs {
            wire.extend(encode(m).unwrap());
        }
        let mut d = FrameDecoder::new(MAX_FRAME);
        let mut got = Vec::new();
        for b in wire {
            d.feed(&[b]);
            while let Some(m) = d.next_message().unwrap() {
                got.push(m);
            }
        }
        assert_eq!(got, msgs);
    }

    #[test]
    fn oversized_frame_is_refused_before_reading_it() {
        let mut d = FrameDecoder::new(MAX_HELLO_FRAME);
        d.feed(&u32::MAX.to_be_bytes());
        assert!(matches!(
            d.next_message(),
            Err(FrameError::TooLarge { len, .. }) if len == u32::MAX as usize
        ));
    }

    #[test]
    fn malformed_bodies_are_errors() {
        for body in [
            &b""[..],
            b"{",
            b"null",
            b"{\"type\":\"nope\"}",
            b"{\"type\":\"attach\",\"version\":1,\"cookie\":-1,\"stream\":0}",
            b"\xff\xfe",
        ] {
            assert!(
                matches!(
                    decode(&frame(body), MAX_FRAME),
                    Err(FrameError::Malformed(_))
                ),
                "{body:?}"
            );
        }
    }

    #[test]
    fn random_bytes_never_panic() {
        // A cheap stand-in for the fuzz target (`fuzz/`), run on every test.
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for round in 0..2000 {
            let len = round % 300;
            let bytes: Vec<u8> = (0..len)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x as u8
                })
                .collect();
            let mut framed = ((len as u32) % 64).to_be_bytes().to_vec();
            framed.extend_from_slice(&bytes);
            let _ = decode(&bytes, MAX_HELLO_FRAME);
            let _ = decode(&framed, MAX_HELLO_FRAME);
        }
    }

    #[test]
    fn partial_frames_wait_for_more() {
        assert!(decode(&[0, 0], MAX_FRAME).unwrap().is_none());
        assert!(decode(&[0, 0, 0, 9, b'{'], MAX_FRAME).unwrap().is_none());
    }

    #[test]
    fn wire_form_is_tagged_json() {
        let bytes = encode(&Message::UdpReady { stream: 2 }).unwrap();
        assert_eq!(&bytes[4..], br#"{"type":"udp_ready","stream":2}"#);
    }
}
