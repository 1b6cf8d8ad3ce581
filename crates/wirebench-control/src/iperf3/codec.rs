//! iperf3's wire format, as esnet/iperf 3.x speaks it (`src/iperf_api.h`, `iperf_api.c`,
//! `iperf_udp.c`): the 37-byte cookie, one signed byte per state change, JSON documents
//! behind a 4-byte big-endian length, the UDP stream's 4-byte connect datagrams and the
//! sec/usec/sequence header every UDP datagram starts with. Pure: no I/O, no clock; every
//! decoder takes untrusted bytes and returns an error, never panics.

use serde::{Deserialize, Serialize};
use thiserror::Error;

/// The cookie: 36 characters from iperf3's alphabet and a NUL (`COOKIE_SIZE`).
pub const COOKIE_LEN: usize = 37;

/// The characters iperf3's `make_cookie` draws from.
const COOKIE_CHARS: &[u8] = b"abcdefghijklmnopqrstuvwxyz234567";

/// The largest JSON document a client accepts from an iperf3 server (results with
/// `--get-server-output` carry the server's whole output).
pub const MAX_JSON: usize = 1 << 20;

/// The largest parameters document a server accepts: iperf3's own cap
/// (`MAX_PARAMS_JSON_STRING`).
pub const MAX_PARAMS_JSON: usize = 8 * 1024;

/// The largest results document a server accepts from a client: a few hundred bytes a
/// stream, for the most streams a test may have, both ways.
pub const MAX_PEER_RESULTS_JSON: usize = 64 * 1024;

/// The UDP stream's connect datagram, written by iperf3 in host order without `htonl`
/// (`UDP_CONNECT_MSG` 0x36373839): on little-endian hosts the bytes read "9876".
pub const UDP_CONNECT_MSG: u32 = 0x3637_3839;
/// The server's answer to it (`UDP_CONNECT_REPLY`).
pub const UDP_CONNECT_REPLY: u32 = 0x3938_3736;
/// What iperf3 before 3.1 sent and answered (decimal 123456789 and 987654321).
const LEGACY_CONNECT: [u32; 2] = [123_456_789, 987_654_321];

/// The default port of iperf3 servers.
pub const DEFAULT_PORT: u16 = 5201;

/// The control channel's states (`iperf_api.h`); each travels as one signed byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(missing_docs)] // iperf3's own names, TEST_START and the rest, in its order
pub enum State {
    TestStart,
    TestRunning,
    TestEnd,
    ParamExchange,
    CreateStreams,
    ServerTerminate,
    ClientTerminate,
    ExchangeResults,
    DisplayResults,
    IperfStart,
    IperfDone,
    AccessDenied,
    ServerError,
}

impl State {
    /// The state a byte names; `None` for bytes iperf3 never sends (or only defines).
    pub fn from_byte(b: u8) -> Option<Self> {
        Some(match b as i8 {
            1 => Self::TestStart,
            2 => Self::TestRunning,
            4 => Self::TestEnd,
            9 => Self::ParamExchange,
            10 => Self::CreateStreams,
            11 => Self::ServerTerminate,
            12 => Self::ClientTerminate,
            13 => Self::ExchangeResults,
            14 => Self::DisplayResults,
            15 => Self::IperfStart,
            16 => Self::IperfDone,
            -1 => Self::AccessDenied,
            -2 => Self::ServerError,
            _ => return None,
        })
    }

    /// The byte on the wire.
    pub fn byte(self) -> u8 {
        let v: i8 = match self {
            Self::TestStart => 1,
            Self::TestRunning => 2,
            Self::TestEnd => 4,
            Self::ParamExchange => 9,
            Self::CreateStreams => 10,
            Self::ServerTerminate => 11,
            Self::ClientTerminate => 12,
            Self::ExchangeResults => 13,
            Self::DisplayResults => 14,
            Self::IperfStart => 15,
            Self::IperfDone => 16,
            Self::AccessDenied => -1,
            Self::ServerError => -2,
        };
        v as u8
    }
}

/// What an iperf3 byte stream or datagram can be wrong about.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum DecodeError {
    /// A state byte iperf3 does not send.
    #[error("unknown iperf3 state byte {0}")]
    State(u8),
    /// A JSON document longer than the step allows.
    #[error("iperf3 JSON document of {len} bytes is over the {max}-byte limit")]
    TooLong {
        /// Its length.
        len: u32,
        /// The limit.
        max: usize,
    },
    /// A JSON document that does not parse as what was expected.
    #[error("iperf3 JSON document does not parse: {0}")]
    Json(String),
    /// A cookie with characters iperf3 does not use.
    #[error("not an iperf3 cookie")]
    Cookie,
    /// A datagram shorter than the header.
    #[error("UDP datagram of {0} bytes is shorter than iperf3's header")]
    Short(usize),
}

/// A fresh cookie from 36 random bytes (the caller's entropy: this module reads no source).
pub fn cookie_from(random: &[u8; COOKIE_LEN - 1]) -> [u8; COOKIE_LEN] {
    let mut c = [0u8; COOKIE_LEN];
    for (out, r) in c.iter_mut().zip(random) {
        *out = COOKIE_CHARS[(*r as usize) % COOKIE_CHARS.len()];
    }
    c
}

/// Whether `bytes` is a cookie as iperf3 makes them: 36 characters of its alphabet and NUL.
pub fn check_cookie(bytes: &[u8]) -> Result<[u8; COOKIE_LEN], DecodeError> {
    let c: [u8; COOKIE_LEN] = bytes.try_into().map_err(|_| DecodeError::Cookie)?;
    let ok = c[..COOKIE_LEN - 1].iter().all(|b| COOKIE_CHARS.contains(b)) && c[36] == 0;
    if ok {
        Ok(c)
    } else {
        Err(DecodeError::Cookie)
    }
}

/// Whether a connection's first byte can start an iperf3 cookie (a wirebench client's first
/// byte is always 0: the high byte of its frame length).
pub fn is_cookie_start(first: u8) -> bool {
    COOKIE_CHARS.contains(&first)
}

/// A JSON document behind its 4-byte big-endian length.
pub fn frame_json<T: Serialize>(doc: &T) -> Vec<u8> {
    // Serialising our own plain structs cannot fail; an empty object keeps the peer parsing.
    let body = serde_json::to_vec(doc).unwrap_or_else(|_| b"{}".to_vec());
    let mut out = Vec::with_capacity(4 + body.len());
    out.extend_from_slice(&(body.len() as u32).to_be_bytes());
    out.extend_from_slice(&body);
    out
}

/// One step of the control stream: a state byte, or a whole JSON document.
#[derive(Debug, Clone, PartialEq)]
pub enum Item {
    /// A state byte.
    State(State),
    /// A JSON document's bytes.
    Json(Vec<u8>),
    /// The 8 bytes after a `SERVER_ERROR`: iperf3's error code and the system errno.
    Error {
        /// iperf3's error code (`i_errno`).
        code: i32,
        /// The system error number sent with it.
        errno: i32,
    },
}

/// What the reader expects next: the protocol decides, the bytes cannot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expect {
    /// A state byte.
    State,
    /// A JSON document of at most this many bytes.
    Json(usize),
    /// SERVER_ERROR's code and errno.
    Error,
}

/// Accumulates control bytes and cuts them into items as the session expects them.
#[derive(Debug, Default)]
pub struct Reader {
    buf: Vec<u8>,
}

impl Reader {
    /// Adds bytes read from the connection.
    pub fn push(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// Bytes held and not yet cut.
    pub fn held(&self) -> usize {
        self.buf.len()
    }

    /// Takes exactly `n` raw bytes (the cookie), if they are there.
    pub fn take_raw(&mut self, n: usize) -> Option<Vec<u8>> {
        (self.buf.len() >= n).then(|| self.buf.drain(..n).collect())
    }

    /// The next item of the kind expected, `Ok(None)` until it is complete.
    pub fn next(&mut self, expect: Expect) -> Result<Option<Item>, DecodeError> {
        match expect {
            Expect::State => {
                let Some(&b) = self.buf.first() else {
                    return Ok(None);
                };
                let s = State::from_byte(b).ok_or(DecodeError::State(b))?;
                self.buf.drain(..1);
                Ok(Some(Item::State(s)))
            }
            Expect::Json(max) => {
                let Some(len) = self.buf.get(..4) else {
                    return Ok(None);
                };
                let len = u32::from_be_bytes([len[0], len[1], len[2], len[3]]);
                if len as usize > max {
                    return Err(DecodeError::TooLong { len, max });
                }
                let end = 4 + len as usize;
                if self.buf.len() < end {
                    return Ok(None);
                }
                let doc = self.buf[4..end].to_vec();
                self.buf.drain(..end);
                Ok(Some(Item::Json(doc)))
            }
            Expect::Error => {
                let Some(b) = self.buf.get(..8) else {
                    return Ok(None);
                };
                let code = i32::from_be_bytes([b[0], b[1], b[2], b[3]]);
                let errno = i32::from_be_bytes([b[4], b[5], b[6], b[7]]);
                self.buf.drain(..8);
                Ok(Some(Item::Error { code, errno }))
            }
        }
    }
}

/// The 4 bytes a UDP stream's connect datagram or its reply carry, in iperf3's host order.
pub fn connect_bytes(v: u32) -> [u8; 4] {
    v.to_ne_bytes()
}

/// Whether a 4-byte datagram is a connect message or reply of any iperf3 version, in either
/// byte order (older servers answer with the legacy value).
pub fn is_connect(bytes: &[u8]) -> bool {
    let Ok(b): Result<[u8; 4], _> = bytes.try_into() else {
        return false;
    };
    let (be, le) = (u32::from_be_bytes(b), u32::from_le_bytes(b));
    [UDP_CONNECT_MSG, UDP_CONNECT_REPLY]
        .iter()
        .chain(&LEGACY_CONNECT)
        .any(|v| *v == be || *v == le)
}

/// The header every iperf3 UDP datagram starts with (`iperf_udp_send`): the sender's time
/// and the datagram's sequence number, from 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdpHeader {
    /// Sender's Unix time, seconds.
    pub sec: u32,
    /// Its microseconds.
    pub usec: u32,
    /// Sequence number, 1 for the first datagram.
    pub seq: u64,
}

impl UdpHeader {
    /// Header length: 12 bytes with 32-bit counters, 16 with `--udp-counters-64bit`.
    pub fn len(wide: bool) -> usize {
        if wide {
            16
        } else {
            12
        }
    }

    /// Writes the header at the start of `buf` (at least [`UdpHeader::len`] long).
    pub fn encode(&self, wide: bool, buf: &mut [u8]) -> Result<(), DecodeError> {
        let n = Self::len(wide);
        let Some(out) = buf.get_mut(..n) else {
            return Err(DecodeError::Short(buf.len()));
        };
        out[..4].copy_from_slice(&self.sec.to_be_bytes());
        out[4..8].copy_from_slice(&self.usec.to_be_bytes());
        if wide {
            out[8..16].copy_from_slice(&self.seq.to_be_bytes());
        } else {
            out[8..12].copy_from_slice(&(self.seq as u32).to_be_bytes());
        }
        Ok(())
    }

    /// Reads the header at the start of a datagram.
    pub fn decode(wide: bool, buf: &[u8]) -> Result<Self, DecodeError> {
        let n = Self::len(wide);
        let Some(b) = buf.get(..n) else {
            return Err(DecodeError::Short(buf.len()));
        };
        let u32_at = |i: usize| u32::from_be_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let seq = if wide {
            u64::from(u32_at(8)) << 32 | u64::from(u32_at(12))
        } else {
            u64::from(u32_at(8))
        };
        Ok(Self {
            sec: u32_at(0),
            usec: u32_at(4),
            seq,
        })
    }
}

/// The test parameters an iperf3 client sends (`send_parameters`); fields this code does
/// not use are kept out, and unknown ones are ignored on reading.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Params {
    /// TCP test.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub tcp: bool,
    /// UDP test.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub udp: bool,
    /// Seconds to leave out at the start (wirebench sends 0 and refuses others).
    #[serde(default)]
    pub omit: u64,
    /// Test length, s (0 with `num`).
    #[serde(default)]
    pub time: u64,
    /// Bytes to send (0: by time).
    #[serde(default)]
    pub num: u64,
    /// Blocks to send (0: not by blocks).
    #[serde(default)]
    pub blockcount: u64,
    /// Parallel streams.
    #[serde(default = "one")]
    pub parallel: u32,
    /// The server sends.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub reverse: bool,
    /// Both send.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub bidirectional: bool,
    /// Socket buffer size, bytes (0: the system's).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub window: u64,
    /// Block (write or datagram) size, bytes.
    #[serde(default)]
    pub len: u64,
    /// Rate per stream, bits/s (0: unlimited).
    #[serde(default)]
    pub bandwidth: u64,
    /// Pacing timer, µs.
    #[serde(default)]
    pub pacing_timer: u64,
    /// Congestion control to use.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub congestion: Option<String>,
    /// 64-bit UDP sequence numbers.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub udp_counters_64bit: bool,
    /// The client wants the server's output in the results.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub get_server_output: bool,
    /// The client's version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_version: Option<String>,
    /// TCP maximum segment size the server sets on its data sockets (`-M`), bytes; 0 for
    /// the system's. iperf3 spells the key in capitals.
    #[serde(rename = "MSS", default, skip_serializing_if = "is_zero")]
    pub mss: u64,
    /// Fair-queue pacing of each data socket (`--fq-rate`, SO_MAX_PACING_RATE), bits/s;
    /// 0 for none.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub fqrate: u64,
}

fn one() -> u32 {
    1
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

impl Params {
    /// Parses a client's parameters (iperf3 sends 0/1 for some flags; both spellings pass).
    pub fn parse(doc: &[u8]) -> Result<Self, DecodeError> {
        let mut v: serde_json::Value =
            serde_json::from_slice(doc).map_err(|e| DecodeError::Json(e.to_string()))?;
        // Only an object: serde would also read a struct from a sequence (`[]`: all
        // defaults).
        let Some(obj) = v.as_object_mut() else {
            return Err(DecodeError::Json(
                "the parameters are not a JSON object".into(),
            ));
        };
        for (_, val) in obj.iter_mut() {
            // iperf3 writes some flags as `1`, others as `true`: read both as one.
            if val.is_boolean() {
                *val = serde_json::Value::from(u64::from(val.as_bool() == Some(true)));
            }
        }
        for key in [
            "tcp",
            "udp",
            "reverse",
            "bidirectional",
            "udp_counters_64bit",
            "get_server_output",
        ] {
            if let Some(val) = obj.get_mut(key) {
                *val = serde_json::Value::Bool(val.as_u64().unwrap_or(0) != 0);
            }
        }
        serde_json::from_value(v).map_err(|e| DecodeError::Json(e.to_string()))
    }
}

/// One stream's figures in the results exchange (`get_results`, `send_results`). iperf3
/// fails the exchange if `id`, `bytes`, `retransmits`, `jitter`, `errors` or `packets` is
/// missing, so all are always written.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StreamResult {
    /// Stream id: 1, then 3, 4, 5, ... (iperf3's `iperf_add_stream` numbering).
    pub id: i64,
    /// Bytes this side sent (its sending streams) or received (its receiving ones).
    pub bytes: u64,
    /// TCP retransmissions (senders), else 0.
    #[serde(default, deserialize_with = "lenient_i64")]
    pub retransmits: i64,
    /// UDP jitter, s (receivers).
    #[serde(default)]
    pub jitter: f64,
    /// UDP datagrams lost (receivers).
    #[serde(default, deserialize_with = "lenient_i64")]
    pub errors: i64,
    /// UDP lost during the omitted seconds.
    #[serde(default, deserialize_with = "lenient_i64")]
    pub omitted_errors: i64,
    /// UDP datagrams sent or received.
    #[serde(default)]
    pub packets: u64,
    /// UDP datagrams during the omitted seconds.
    #[serde(default)]
    pub omitted_packets: u64,
    /// Stream start, s from the test's start.
    #[serde(default)]
    pub start_time: f64,
    /// Stream end, s.
    #[serde(default)]
    pub end_time: f64,
}

/// A signed count as iperf3 writes it: "unknown" is -1, which some versions print as an
/// unsigned 64-bit number; read either as -1, and fractions as their integer part.
fn lenient_i64<'de, D: serde::Deserializer<'de>>(d: D) -> Result<i64, D::Error> {
    let v = serde_json::Number::deserialize(d)?;
    Ok(v.as_i64()
        .or_else(|| v.as_u64().map(|u| u as i64))
        .or_else(|| v.as_f64().map(|f| f as i64))
        .unwrap_or(0))
}

/// A side's results document in the exchange.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ResultsDoc {
    /// CPU use, percent.
    pub cpu_util_total: f64,
    /// User CPU, percent.
    pub cpu_util_user: f64,
    /// System CPU, percent.
    pub cpu_util_system: f64,
    /// 1 when the sender's figures include retransmissions (TCP on Linux).
    #[serde(deserialize_with = "lenient_i64")]
    pub sender_has_retransmits: i64,
    /// Congestion control used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub congestion_used: Option<String>,
    /// Per stream.
    pub streams: Vec<StreamResult>,
}

impl ResultsDoc {
    /// Parses a peer's results.
    pub fn parse(doc: &[u8]) -> Result<Self, DecodeError> {
        serde_json::from_slice(doc).map_err(|e| DecodeError::Json(e.to_string()))
    }
}

/// iperf3's stream ids in creation order: 1, 3, 4, 5, ... (`iperf_add_stream` starts
/// counting at 2 and adds one per stream already there).
pub fn stream_id(index: usize) -> i64 {
    if index == 0 {
        1
    } else {
        index as i64 + 2
    }
}

/// The message for an iperf3 error code (`iperf_api.h`, 3.x numbering; codes vary between
/// versions, so only a few stable ones are named and the number is always given).
pub fn error_text(code: i32, errno: i32) -> String {
    // The codes an iperf3 server sends in SERVER_ERROR (esnet/iperf `src/iperf_api.h`),
    // worded as `iperf_error.c` words them.
    let what = match code {
        5 => "test duration too long",
        6 => "number of parallel streams too large",
        7 => "block size too large",
        10 => "TCP MSS too large",
        12 => "bogus value for --omit",
        15 => "invalid burst count",
        18 => "no SCTP support available",
        20 => "block size invalid",
        21 => "bad TOS value (must be between 0 and 255 inclusive)",
        IE_TOTAL_RATE => "total required bandwidth is larger than server limit",
        IE_NEW_TEST => "unable to create a new test",
        101 => "test initialization failed",
        102 => "unable to start listener for connections",
        114 => "unable to receive parameters from client",
        120 => "the server has terminated",
        121 => "the server is busy running a test",
        124 => "unable to set socket buffer size",
        130 => "unable to set the socket window size",
        132 => "unable to set CPU affinity",
        134 => "unable to set TCP_CONGESTION: supplied congestion control algorithm not supported on this host",
        141 => "socket buffer size not set correctly (-w is over what the server's host allows)",
        142 => "test authorization failed",
        200..=208 => "a data stream failed",
        _ => "",
    };
    let mut out = if what.is_empty() {
        format!("iperf3 error code {code}")
    } else {
        format!("{what} (iperf3 error code {code})")
    };
    if errno != 0 {
        out.push_str(&format!(": {}", std::io::Error::from_raw_os_error(errno)));
    }
    out
}

/// iperf3's `IETOTALRATE`: the client asked for more than the server's rate limit.
pub const IE_TOTAL_RATE: i32 = 27;
/// iperf3's `IENEWTEST`: the server cannot run the test (a perror code: the client prints
/// `strerror(errno)` after it).
pub const IE_NEW_TEST: i32 = 100;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_bytes_round_trip() {
        for b in 0..=255u8 {
            if let Some(s) = State::from_byte(b) {
                assert_eq!(s.byte(), b);
            }
        }
        assert_eq!(State::AccessDenied.byte(), 0xff);
        assert_eq!(State::from_byte(3), None);
    }

    #[test]
    fn reader_cuts_items_as_expected() {
        let mut r = Reader::default();
        r.push(&[9, 0, 0]);
        assert_eq!(
            r.next(Expect::State),
            Ok(Some(Item::State(State::ParamExchange)))
        );
        assert_eq!(r.next(Expect::Json(MAX_JSON)), Ok(None));
        r.push(&[0, 2, b'{', b'}']);
        assert_eq!(
            r.next(Expect::Json(MAX_JSON)),
            Ok(Some(Item::Json(b"{}".to_vec())))
        );
        r.push(&(MAX_JSON as u32 + 1).to_be_bytes());
        assert!(matches!(
            r.next(Expect::Json(MAX_JSON)),
            Err(DecodeError::TooLong { .. })
        ));
    }

    #[test]
    fn udp_header_round_trips() {
        let h = UdpHeader {
            sec: 1_700_000_000,
            usec: 999_999,
            seq: 5,
        };
        let mut b = [0u8; 16];
        h.encode(false, &mut b).unwrap();
        assert_eq!(UdpHeader::decode(false, &b[..12]), Ok(h));
        let wide = UdpHeader { seq: 1 << 40, ..h };
        wide.encode(true, &mut b).unwrap();
        assert_eq!(UdpHeader::decode(true, &b), Ok(wide));
        assert!(UdpHeader::decode(true, &b[..12]).is_err());
    }

    #[test]
    fn cookies_are_recognised() {
        let c = cookie_from(&[7u8; 36]);
        assert_eq!(check_cookie(&c), Ok(c));
        assert!(is_cookie_start(c[0]));
        assert!(!is_cookie_start(0));
        assert!(check_cookie(&[0u8; 37]).is_err());
    }

    #[test]
    fn connect_datagrams_are_recognised_in_both_orders() {
        assert!(is_connect(&connect_bytes(UDP_CONNECT_MSG)));
        assert!(is_connect(&UDP_CONNECT_REPLY.to_be_bytes()));
        assert!(is_connect(&123_456_789u32.to_le_bytes()));
        assert!(!is_connect(b"abcd"));
        assert!(!is_connect(b"98765"));
    }

    #[test]
    fn params_accept_iperf3_spellings() {
        let p = Params::parse(
            br#"{"tcp":true,"omit":0,"time":10,"num":0,"blockcount":0,"parallel":2,"reverse":1,"len":131072,"bandwidth":0,"pacing_timer":1000,"client_version":"3.12"}"#,
        )
        .unwrap();
        assert!(p.tcp && p.reverse && !p.udp);
        assert_eq!((p.parallel, p.time, p.len), (2, 10, 131_072));
        assert!(Params::parse(b"[1]").is_err());
        let r = ResultsDoc::parse(
            br#"{"cpu_util_total":1,"cpu_util_user":0.5,"cpu_util_system":0.5,"sender_has_retransmits":18446744073709551615,"streams":[{"id":1,"bytes":10,"retransmits":18446744073709551615,"jitter":0,"errors":0,"packets":0}]}"#,
        )
        .unwrap();
        assert_eq!(r.streams[0].retransmits, -1);
    }

    #[test]
    fn stream_ids_follow_iperf3() {
        let ids: Vec<i64> = (0..4).map(stream_id).collect();
        assert_eq!(ids, [1, 3, 4, 5]);
    }

    /// Random bytes into every decoder: errors, never a panic.
    #[test]
    fn decoders_survive_random_bytes() {
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for _ in 0..5_000 {
            let len = (next() % 64) as usize;
            let bytes: Vec<u8> = (0..len).map(|_| next() as u8).collect();
            let mut r = Reader::default();
            r.push(&bytes);
            for e in [Expect::State, Expect::Json(MAX_JSON), Expect::Error] {
                let _ = r.next(e);
            }
            let _ = UdpHeader::decode(false, &bytes);
            let _ = UdpHeader::decode(true, &bytes);
            let _ = Params::parse(&bytes);
            let _ = ResultsDoc::parse(&bytes);
            let _ = check_cookie(&bytes);
            let _ = is_connect(&bytes);
            super::super::decode_everything(&bytes, std::time::Instant::now());
        }
    }
}
