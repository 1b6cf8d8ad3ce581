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

use crate::error_kind::ErrorKind;
use crate::results::{IntervalRecord, Role, SideReport};
use crate::spec::TestSpec;

/// Version of the control protocol this build speaks.
///
/// 2: the UDP header's send time is the sender's Unix time (was: time since its start), and
/// `start`/`accept` carry the host identity that tells whether the clocks are one.
/// 3: the UDP header's sequence number and stop-and-wait's acknowledgement are keyed with a
/// per-stream token drawn from the test's cookie ([`crate::header::SeqToken`]).
/// 4: UDP rr's request number (its first 8 bytes, echoed by the response) is keyed the same
/// way, and the server answers only numbers the client can have sent: a protocol-3 client's
/// requests would go unanswered, so it is refused with the version message instead.
pub const PROTOCOL_VERSION: u32 = 4;

/// The `stream` of an `attach` that opens a packet log connection: the server's receiver
/// writes its packet log to it (see [`crate::packet_log`]).
pub const PACKET_LOG_STREAM: u32 = u32::MAX;

/// The `stream` of an `attach` that opens one transaction of a `--mode crr` test: the request
/// follows the frame, the response comes back, and the connection closes.
pub const CRR_STREAM: u32 = u32::MAX - 1;

/// The `stream` of an `attach` that fetches a finished test's results on a new connection:
/// the server answers with the frames it ended the test with (an `error` if it ended early,
/// then its `done`) and closes, or closes at once when it has none for this test and
/// address. A client whose control connection is stuck behind its own test's traffic opens
/// one; a server that predates it closes the connection, and the client waits on as before.
pub const RESULTS_STREAM: u32 = u32::MAX - 2;

/// Cap for the first frame of a connection, before the peer is known to be a wirebench.
pub const MAX_HELLO_FRAME: usize = 64 * 1024;

/// Cap for any later frame: a `Done` report carries up to `MAX_INTERVALS` interval records.
pub const MAX_FRAME: usize = 4 * 1024 * 1024;

/// Most memory the lists of one decoded frame may take (a `Done` report's intervals, streams,
/// buckets and ranges; see [`wirebench_stats::bounded`]). A report of the most a test makes,
/// both ways, takes about a third of it; a frame of empty records built to swell in decoding
/// stops here.
pub const MAX_FRAME_LIST_BYTES: usize = 8 * 1024 * 1024;

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
        /// Why, for code (absent from a peer that does not send kinds).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error_kind: Option<ErrorKind>,
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
        #[serde(deserialize_with = "wirebench_stats::bounded::list")]
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
    /// most once per interval per side, and when the test's `live_streams` asks, once more
    /// per stream before it; a peer may ignore it.
    Interval {
        /// The role whose interval it is (the receiver's carries loss and jitter).
        role: Role,
        /// The interval's counters, relative to that side's start.
        record: IntervalRecord,
        /// One stream's interval (its index among the side's streams); absent: the sum.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        stream: Option<u32>,
    },
    /// Either way: the session ends because of this; the connection closes after it.
    Error {
        /// What went wrong.
        reason: String,
        /// What went wrong, for code (absent from a peer that does not send kinds).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error_kind: Option<ErrorKind>,
    },
}

impl Message {
    /// The message's type as the wire spells it (`done`, `begin`, ...): what a log line or
    /// an error says of a message that came out of turn, never its contents (a peer's
    /// frame may be megabytes).
    pub fn name(&self) -> &'static str {
        match self {
            Self::Start { .. } => "start",
            Self::Challenge { .. } => "challenge",
            Self::Auth { .. } => "auth",
            Self::Attach { .. } => "attach",
            Self::Accept { .. } => "accept",
            Self::Refuse { .. } => "refuse",
            Self::UdpReady { .. } => "udp_ready",
            Self::Begin => "begin",
            Self::SenderCounts { .. } => "sender_counts",
            Self::Done { .. } => "done",
            Self::Interval { .. } => "interval",
            Self::Error { .. } => "error",
        }
    }
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
    /// A frame other than a report with more values than any message has.
    #[error("control message of {values} JSON values exceeds the limit of {max}")]
    TooManyValues {
        /// Values counted.
        values: usize,
        /// Cap in force.
        max: usize,
    },
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
        let msg = decode_body(body)?;
        self.buf.drain(..4 + len);
        Ok(Some(msg))
    }
}

/// How a `done` frame starts, as [`encode`] writes it (serde writes the tag first).
const DONE_PREFIX: &[u8] = br#"{"type":"done","report":"#;

/// Most JSON values (objects, arrays, scalars) in a frame other than a `done` written as
/// [`encode`] writes it: the largest, a `sender_counts` of every stream both ways, holds a
/// few hundred. (serde reads an internally tagged enum by first building a tree of every
/// value, tens of bytes each: a frame of `[0,0,0,0]`s would take twenty times its size.)
pub const MAX_FRAME_VALUES: usize = 16_384;

/// A frame's body as a message. A `done` (the one frame that may be megabytes) is read
/// straight into its report, whose lists draw from [`MAX_FRAME_LIST_BYTES`]; any other frame
/// must hold at most [`MAX_FRAME_VALUES`] values before serde sees it.
fn decode_body(body: &[u8]) -> Result<Message, FrameError> {
    let report = body
        .strip_prefix(DONE_PREFIX)
        .and_then(|rest| rest.trim_ascii_end().strip_suffix(b"}"));
    if let Some(report) = report {
        let mut de = serde_json::Deserializer::from_slice(report);
        let report = wirebench_stats::bounded::with_allowance(MAX_FRAME_LIST_BYTES, || {
            crate::results::SideReport::deserialize(&mut de)
        })?;
        de.end()?;
        return Ok(Message::Done {
            report: Box::new(report),
        });
    }
    let values = json_values(body);
    if values > MAX_FRAME_VALUES {
        return Err(FrameError::TooManyValues {
            values,
            max: MAX_FRAME_VALUES,
        });
    }
    Ok(wirebench_stats::bounded::with_allowance(
        MAX_FRAME_LIST_BYTES,
        || serde_json::from_slice(body),
    )?)
}

/// About how many values a JSON text holds: its containers and its elements, counted on
/// the bytes outside strings, without parsing (at least the true count for valid JSON).
fn json_values(body: &[u8]) -> usize {
    let (mut n, mut in_string, mut escaped) = (1usize, false, false);
    for &b in body {
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
        } else {
            match b {
                b'"' => in_string = true,
                b'{' | b'[' | b',' | b':' => n += 1,
                _ => {}
            }
        }
    }
    n
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

    /// A `done` frame of the largest report a test makes: the most intervals, both ways,
    /// every stream with its buckets, a file's listed missing ranges.
    fn largest_report() -> crate::results::SideReport {
        use crate::results::{FileReport, IntervalRecord, NsBucket, SideReport};
        let intervals: Vec<IntervalRecord> = (0..crate::spec::MAX_INTERVALS)
            .map(|i| IntervalRecord {
                start_ns: i * 1_000_000_000,
                end_ns: (i + 1) * 1_000_000_000,
                bytes: 1_250_000_000,
                messages: 1_000_000,
                lost: 12_345,
                jitter_ns: Some(12_345.678),
                delay_p50_ns: Some(1_234_567),
                delay_p99_ns: Some(7_654_321),
                retransmits: Some(12),
                cwnd_bytes: Some(1_234_567),
                rtt_us: Some(1_234_567),
                lost_packets: Some(1_234_567),
            })
            .collect();
        let buckets: Vec<NsBucket> = (0..63)
            .map(|b| NsBucket {
                low_ns: 1 << b,
                high_ns: (2u64 << b) - 1,
                count: 1000,
            })
            .collect();
        let stream = SideReport {
            latency_buckets: buckets.clone(),
            ..SideReport::default()
        };
        let side = SideReport {
            intervals: intervals.clone(),
            latency_buckets: buckets,
            streams: vec![stream; crate::spec::MAX_STREAMS as usize],
            file: Some(FileReport {
                missing: (0..10_000).map(|i| (i * 2000, i * 2000 + 1000)).collect(),
                ..FileReport::default()
            }),
            ..SideReport::default()
        };
        SideReport {
            reverse: Some(Box::new(side.clone())),
            ..side
        }
    }

    #[test]
    fn the_largest_report_a_test_makes_decodes_within_the_lists_allowance() {
        // The most intervals both ways do not fit a frame: the reverse side's are cut
        // until the report does.
        let mut report = largest_report();
        let bytes = loop {
            let msg = Message::Done {
                report: Box::new(report.clone()),
            };
            match encode(&msg) {
                Ok(b) => break b,
                Err(_) => {
                    let rev = report.reverse.as_mut().expect("both ways");
                    let keep = rev.intervals.len().saturating_sub(500);
                    rev.intervals.truncate(keep);
                }
            }
        };
        assert!(bytes.len() > MAX_FRAME * 9 / 10, "{} bytes", bytes.len());
        let msg = Message::Done {
            report: Box::new(report),
        };
        let (back, _) = decode(&bytes, MAX_FRAME).expect("decodes").expect("whole");
        assert_eq!(back, msg);
    }

    #[test]
    fn a_frame_built_to_swell_in_decoding_is_refused_not_allocated() {
        use crate::results::SideReport;
        let empty = serde_json::to_value(SideReport::default()).unwrap();
        let room = MAX_FRAME - 4096;
        // Streams of empty reports: a kilobyte and more each once decoded.
        let each = empty.to_string().len() + 1;
        let mut report = empty.clone();
        report["streams"] = serde_json::Value::Array(vec![empty.clone(); room / each]);
        // Intervals as arrays, ten bytes each: a record of a hundred bytes and more.
        let mut arrays = empty;
        let quad = serde_json::json!([0, 0, 0, 0]);
        arrays["intervals"] = serde_json::Value::Array(vec![quad; room / 10]);
        for report in [report, arrays] {
            // As wirebench writes it: read straight into the report, whose lists stop at
            // their allowance.
            let body = format!(r#"{{"type":"done","report":{report}}}"#);
            assert!(body.len() <= MAX_FRAME);
            let err = decode(&frame(body.as_bytes()), MAX_FRAME).unwrap_err();
            assert!(err.to_string().contains("more list elements"), "{err}");
            // Written otherwise (the tag last): refused by its count of values, before serde
            // builds its tree of them.
            let body = format!(r#"{{"report":{report},"type":"done"}}"#);
            let err = decode(&frame(body.as_bytes()), MAX_FRAME).unwrap_err();
            assert!(err.to_string().contains("JSON values exceeds"), "{err}");
        }
    }

    #[test]
    fn values_are_counted_outside_strings_only() {
        assert_eq!(json_values(b"1"), 1);
        assert_eq!(json_values(br#"{"a":[1,2],"b":"x,y:{[\",z"}"#), 7);
        // A done written with the tag last, small: read as any other frame.
        let msg = Message::Done {
            report: Box::default(),
        };
        let canonical = encode(&msg).unwrap();
        let report = serde_json::to_string(&SideReport::default()).unwrap();
        let other = format!(r#"{{"report":{report},"type":"done"}}"#);
        assert_eq!(
            decode(&frame(other.as_bytes()), MAX_FRAME)
                .unwrap()
                .unwrap()
                .0,
            msg
        );
        assert_eq!(decode(&canonical, MAX_FRAME).unwrap().unwrap().0, msg);
    }

    #[test]
    fn round_trip_in_pieces() {
        let msgs = [
            Message::Begin,
            Message::Refuse {
                reason: "busy".into(),
                error_kind: Some(ErrorKind::Busy),
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
                stream: Some(1),
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
    fn kinds_from_older_and_newer_peers_decode() {
        // An older peer sends no kind; a newer one, a kind this build does not know.
        let old = frame(br#"{"type":"refuse","reason":"server busy: 1 tests running"}"#);
        let newer = frame(br#"{"type":"error","reason":"x","error_kind":"max_cpu","more":1}"#);
        assert_eq!(
            decode(&old, MAX_FRAME).unwrap().unwrap().0,
            Message::Refuse {
                reason: "server busy: 1 tests running".into(),
                error_kind: None,
            }
        );
        assert_eq!(
            decode(&newer, MAX_FRAME).unwrap().unwrap().0,
            Message::Error {
                reason: "x".into(),
                error_kind: Some(ErrorKind::Unknown),
            }
        );
        // A report, read straight in by its canonical prefix: the same.
        let report = SideReport {
            error: Some("the server ended the test".into()),
            error_kind: Some(ErrorKind::MaxBytes),
            ..SideReport::default()
        };
        let msg = Message::Done {
            report: Box::new(report),
        };
        let bytes = encode(&msg).unwrap();
        assert!(bytes[4..].starts_with(DONE_PREFIX));
        assert_eq!(decode(&bytes, MAX_FRAME).unwrap().unwrap().0, msg);
        let body = String::from_utf8(bytes[4..].to_vec())
            .unwrap()
            .replace(r#""max_bytes""#, r#""max_cpu""#);
        let Message::Done { report } = decode(&frame(body.as_bytes()), MAX_FRAME)
            .unwrap()
            .unwrap()
            .0
        else {
            panic!("not a done");
        };
        assert_eq!(report.error_kind, Some(ErrorKind::Unknown));
        let without = body.replace(r#","error_kind":"max_cpu""#, "");
        assert_ne!(without, body);
        let Message::Done { report } = decode(&frame(without.as_bytes()), MAX_FRAME)
            .unwrap()
            .unwrap()
            .0
        else {
            panic!("not a done");
        };
        assert_eq!(report.error_kind, None);
    }

    #[test]
    fn wire_form_is_tagged_json() {
        let bytes = encode(&Message::UdpReady { stream: 2 }).unwrap();
        assert_eq!(&bytes[4..], br#"{"type":"udp_ready","stream":2}"#);
    }
}
