//! What a server lets an iperf3 client ask: every number of its parameters is bounded here,
//! before the driver sizes a buffer, a channel or a thread by it. An iperf3 client's
//! parameters are only its word, as a wirebench client's spec is: this is the iperf3 side of
//! `SpecLimits::check`, and it refuses with the same [`Refusal`] kinds, so the metrics'
//! reasons mean one thing whichever client asked. Pure: no I/O, no clock.

use std::time::Duration;

use wirebench_proto::spec::MAX_STREAMS;

use super::codec::{DecodeError, Params, UdpHeader};
use crate::admission::{Refusal, SpecLimits, DEFAULT_MAX_DURATION};

/// iperf3's largest TCP block (`MAX_BLOCKSIZE` in `iperf.h`, 1 MiB): its own clients never
/// ask for more, and the server allocates one block per sending stream.
pub const MAX_TCP_LEN: u64 = 1 << 20;

/// The largest UDP payload over IPv4, 65535 − 20 − 8 (iperf3's `MAX_UDP_BLOCKSIZE`).
pub const MAX_UDP_LEN: u64 = 65_507;

/// The largest socket buffer (`-w`) accepted: above any tuning guide's `rmem_max` (the
/// kernel clamps to it anyway), and twice it (the kernel doubles what it is given) still
/// fits the `int` that `setsockopt` takes.
pub const MAX_WINDOW: u64 = 256 << 20;

/// The largest count accepted for `-n` (bytes) and `-b` (bits/s): iperf3 writes its
/// numbers through cJSON as doubles, exact up to 2^53, so no real client sends more.
pub const MAX_COUNT: u64 = 1 << 53;

/// The longest `--pacing-timer` accepted, µs (iperf3's default is 1,000): this server does
/// not pace by it, but takes nothing unbounded from a peer.
pub const MAX_PACING_TIMER_US: u64 = 10_000_000;

/// The longest congestion control name (`TCP_CA_NAME_MAX` is 16 with its NUL).
const MAX_CONGESTION_LEN: usize = 15;

/// The longest `client_version` kept: iperf3 sends "3.16" and the like.
const MAX_VERSION_LEN: usize = 64;

/// The longest `-O` accepted, s (iperf3's own `MAX_OMIT_TIME`).
pub const MAX_OMIT_S: u64 = 600;

/// The most blocks sent back to back (`-b RATE/BURST`; iperf3's `MAX_BURST`).
pub const MAX_BURST: u64 = 1000;

/// The largest `-M` accepted (iperf3's `MAX_MSS`, 9 KiB).
pub const MAX_MSS: u64 = 9 * 1024;

/// iperf3's error codes (`iperf_api.h`, the same in every 3.x release) that a server sends
/// in SERVER_ERROR; an iperf3 client prints the code's text (`iperf_error.c`), and after
/// some of them `strerror` of the errno sent with it.
#[allow(missing_docs)] // iperf3's own names (IEDURATION, IENUMSTREAMS, ...)
pub mod ie {
    pub const DURATION: i32 = 5;
    pub const NUM_STREAMS: i32 = 6;
    pub const BLOCK_SIZE: i32 = 7;
    pub const MSS: i32 = 10;
    pub const OMIT: i32 = 12;
    pub const BURST: i32 = 15;
    pub const NO_SCTP: i32 = 18;
    pub const UDP_BLOCK_SIZE: i32 = 20;
    pub const BAD_TOS: i32 = 21;
    pub const TOTAL_RATE: i32 = 27;
    pub const NEW_TEST: i32 = 100;
    pub const SET_BUF: i32 = 124;
    pub const AFFINITY: i32 = 132;
    pub const SET_CONGESTION: i32 = 134;
    pub const AUTH_TEST: i32 = 142;
}

/// What a refused iperf3 client hears: iperf3's error code and the errno after it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ErrorCode {
    /// iperf3's `i_errno`.
    pub code: i32,
    /// The system error the client prints after the texts of some codes (0: none).
    pub errno: i32,
}

impl ErrorCode {
    const fn new(code: i32, errno: i32) -> Self {
        Self { code, errno }
    }

    /// The code for a refusal of the server's own limits: the nearest of iperf3's words,
    /// so that the client prints the reason (the server's log has the numbers).
    pub fn of(r: &Refusal, udp: bool) -> Self {
        match r {
            Refusal::Duration { .. } => Self::new(ie::DURATION, 0),
            Refusal::Streams { .. } => Self::new(ie::NUM_STREAMS, 0),
            Refusal::Size { .. } if udp => Self::new(ie::UDP_BLOCK_SIZE, 0),
            Refusal::Size { .. } => Self::new(ie::BLOCK_SIZE, 0),
            Refusal::Rate { .. } | Refusal::UnlimitedRate { .. } => Self::new(ie::TOTAL_RATE, 0),
            Refusal::Memory { .. } => Self::new(ie::NEW_TEST, super::errno::ENOMEM),
            Refusal::Bytes { .. } | Refusal::Pps { .. } => {
                Self::new(ie::NEW_TEST, super::errno::ERANGE)
            }
            Refusal::AuthFailed | Refusal::AuthExpected(_) => Self::new(ie::AUTH_TEST, 0),
            _ => Self::new(ie::NEW_TEST, super::errno::EINVAL),
        }
    }
}

/// What an iperf3 client asks of the server's data sockets beyond [`Params`] (`--fq-rate`,
/// `-b RATE/BURST`, `-S`, `-N`, `-M`, `--dont-fragment`), and what this server refuses
/// (`--sctp`, `-A`'s server CPU), read from the same parameters document. iperf3 tells a
/// flag by its key's presence, a number by its value.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SocketOptions {
    /// `--fq-rate`, bits/s (0: none): the kernel paces each sending socket to it.
    pub fq_rate_bps: u64,
    /// Blocks sent back to back at the rate (0 or 1: each paced).
    pub burst: u64,
    /// `-S`: the IP TOS byte (IPv6 traffic class).
    pub tos: u64,
    /// `-N`: TCP_NODELAY.
    pub nodelay: bool,
    /// `-M`: the TCP maximum segment size, bytes (0: the kernel's).
    pub mss: u64,
    /// `--dont-fragment`: UDP datagrams with DF set, never fragmented.
    pub dont_fragment: bool,
    /// `--sctp`.
    pub sctp: bool,
    /// `-A N/M`: the CPU the client asks the server to run on.
    pub server_affinity: Option<i64>,
}

impl SocketOptions {
    /// Reads them from a client's parameters document: a number must be a non-negative
    /// integer, a flag any value (iperf3 writes `true` or a number).
    pub fn parse(doc: &[u8]) -> Result<Self, DecodeError> {
        let v: serde_json::Value =
            serde_json::from_slice(doc).map_err(|e| DecodeError::Json(e.to_string()))?;
        let Some(obj) = v.as_object() else {
            return Err(DecodeError::Json(
                "the parameters are not a JSON object".into(),
            ));
        };
        let number = |key: &str| -> Result<u64, DecodeError> {
            match obj.get(key) {
                None => Ok(0),
                Some(n) => n
                    .as_u64()
                    .ok_or_else(|| DecodeError::Json(format!("{key} is not a count"))),
            }
        };
        // A flag iperf3 writes as a number (0 for off): present and not 0 or false.
        let on = |key: &str| {
            obj.get(key)
                .is_some_and(|v| v.as_u64().map_or(v.as_bool() != Some(false), |n| n != 0))
        };
        Ok(Self {
            fq_rate_bps: number("fqrate")?,
            burst: number("burst")?,
            tos: number("TOS")?,
            nodelay: obj.contains_key("nodelay"),
            mss: number("MSS")?,
            dont_fragment: on("dont_fragment"),
            sctp: obj.contains_key("sctp"),
            server_affinity: obj
                .get("server_affinity")
                .and_then(serde_json::Value::as_i64),
        })
    }

    /// Within iperf3's own bounds, and nothing this server does not do.
    pub fn check(&self) -> Result<(), (Refusal, ErrorCode)> {
        let no = |why: &str, code: i32, errno: i32| {
            Err((invalid(why.into()), ErrorCode::new(code, errno)))
        };
        if self.sctp {
            return no("--sctp is not supported by this server", ie::NO_SCTP, 0);
        }
        if self.server_affinity.is_some_and(|cpu| cpu >= 0) {
            return no(
                "-A's server CPU is not supported by this server: it serves many clients",
                ie::AFFINITY,
                super::errno::EPERM,
            );
        }
        if self.burst > MAX_BURST {
            return no(&format!("a burst of over {MAX_BURST} blocks"), ie::BURST, 0);
        }
        if self.tos > 255 {
            return no("-S takes 0 to 255", ie::BAD_TOS, 0);
        }
        if self.mss > MAX_MSS {
            return no(&format!("-M over {MAX_MSS} bytes"), ie::MSS, 0);
        }
        if self.fq_rate_bps > MAX_COUNT {
            return no(
                &format!("--fq-rate over {MAX_COUNT}"),
                ie::NEW_TEST,
                super::errno::ERANGE,
            );
        }
        Ok(())
    }
}

/// Parameters that passed [`admit_with`]: every number in them is bounded, so the driver may
/// size buffers, channels and threads by them.
#[derive(Debug, Clone, PartialEq)]
pub struct Admitted {
    params: Params,
    streams: u32,
    len: usize,
    options: SocketOptions,
}

impl Admitted {
    /// The parameters, each within its bound.
    pub fn params(&self) -> &Params {
        &self.params
    }

    /// Data streams, both ways with `--bidir`: 1 to [`MAX_STREAMS`].
    pub fn streams(&self) -> u32 {
        self.streams
    }

    /// Block (TCP write) or datagram size, bytes: at most [`MAX_TCP_LEN`].
    pub fn block_len(&self) -> usize {
        self.len
    }

    /// What the client asks of the server's data sockets, each within its bound.
    pub fn options(&self) -> &SocketOptions {
        &self.options
    }

    /// The test's length if it is timed: the omitted seconds and `-t` (none for a test of
    /// an amount, `-n` or `-k`, which the client ends).
    pub fn declared(&self) -> Option<Duration> {
        let p = &self.params;
        (p.num == 0 && p.blockcount == 0 && p.time > 0)
            .then(|| Duration::from_secs(p.time.saturating_add(p.omit)))
    }
}

fn invalid(why: String) -> Refusal {
    Refusal::Invalid(why)
}

/// [`admit_with`] without socket options, the refusal alone: the tests' shorthand.
#[cfg(test)]
pub fn admit(p: Params, limits: &SpecLimits) -> Result<Admitted, Refusal> {
    admit_with(p, SocketOptions::default(), limits).map_err(|(r, _)| r)
}

/// Checks an iperf3 client's parameters and [`SocketOptions`] against the server's limits
/// (`limits`; without a `--max-streams`, wirebench's own cap of [`MAX_STREAMS`]; without a
/// `--max-duration`, [`DEFAULT_MAX_DURATION`]), refusing with the iperf3 error code the
/// client hears. What they say they will move is checked here, what they do move is
/// counted by the roles.
pub fn admit_with(
    p: Params,
    options: SocketOptions,
    limits: &SpecLimits,
) -> Result<Admitted, (Refusal, ErrorCode)> {
    let coded = |r: Refusal| {
        let code = ErrorCode::of(&r, p.udp);
        (r, code)
    };
    options.check()?;
    check_shape(&p)?;
    let len = check_len(&p, limits).map_err(|r| {
        let code = match r {
            Refusal::Invalid(_) if p.udp => ErrorCode::new(ie::UDP_BLOCK_SIZE, 0),
            Refusal::Invalid(_) => ErrorCode::new(ie::BLOCK_SIZE, 0),
            _ => ErrorCode::of(&r, p.udp),
        };
        (r, code)
    })?;
    let streams = check_streams(&p, limits).map_err(|r| (r, ErrorCode::new(ie::NUM_STREAMS, 0)))?;
    let max_time = limits.max_duration.unwrap_or(DEFAULT_MAX_DURATION);
    // The omitted seconds run before the measured ones.
    let asked = Duration::from_secs(p.time.saturating_add(p.omit));
    if asked > max_time {
        return Err(coded(Refusal::Duration {
            asked,
            max: max_time,
        }));
    }
    check_amounts(&p, limits, streams).map_err(coded)?;
    Ok(Admitted {
        params: p,
        streams,
        len,
        options,
    })
}

/// What this server does not do, and the numbers no limit flag covers.
fn check_shape(p: &Params) -> Result<(), (Refusal, ErrorCode)> {
    let no = |why: String, code: i32, errno: i32| Err((invalid(why), ErrorCode::new(code, errno)));
    if p.tcp && p.udp {
        return no(
            "a test is TCP or UDP, not both".into(),
            ie::NEW_TEST,
            super::errno::EINVAL,
        );
    }
    if p.omit > MAX_OMIT_S {
        return no(format!("-O {} is over {MAX_OMIT_S} s", p.omit), ie::OMIT, 0);
    }
    if p.window > MAX_WINDOW {
        return no(
            format!(
                "-w {} is over this server's {MAX_WINDOW}-byte socket buffer limit",
                p.window
            ),
            ie::SET_BUF,
            super::errno::ENOBUFS,
        );
    }
    if p.pacing_timer > MAX_PACING_TIMER_US {
        return no(
            format!(
                "--pacing-timer {} µs is over this server's {MAX_PACING_TIMER_US}",
                p.pacing_timer
            ),
            ie::NEW_TEST,
            super::errno::EINVAL,
        );
    }
    if p.num > MAX_COUNT || p.bandwidth > MAX_COUNT || p.blockcount > MAX_COUNT {
        return no(
            format!(
                "-n {}, -k {} or -b {} is over this server's {MAX_COUNT}",
                p.num, p.blockcount, p.bandwidth
            ),
            ie::NEW_TEST,
            super::errno::ERANGE,
        );
    }
    if let Some(cc) = &p.congestion {
        let printable = cc.bytes().all(|b| b.is_ascii_graphic());
        if cc.is_empty() || cc.len() > MAX_CONGESTION_LEN || !printable {
            return no(
                format!("-C takes a congestion control name of 1 to {MAX_CONGESTION_LEN} letters"),
                ie::SET_CONGESTION,
                super::errno::EINVAL,
            );
        }
    }
    if p.client_version
        .as_ref()
        .is_some_and(|v| v.len() > MAX_VERSION_LEN)
    {
        return no(
            format!("a client version of over {MAX_VERSION_LEN} bytes"),
            ie::NEW_TEST,
            super::errno::EINVAL,
        );
    }
    Ok(())
}

/// The block size: iperf3's own bounds for the protocol, then `--max-size`.
fn check_len(p: &Params, limits: &SpecLimits) -> Result<usize, Refusal> {
    let (min, max, what) = if p.udp {
        let header = UdpHeader::len(p.udp_counters_64bit) as u64;
        (header, MAX_UDP_LEN, "a UDP datagram")
    } else {
        (1, MAX_TCP_LEN, "iperf3's TCP block")
    };
    if p.len < min {
        return Err(invalid(format!(
            "-l {} is too small: {what} takes at least {min} bytes",
            p.len
        )));
    }
    if p.len > max {
        return Err(invalid(format!(
            "-l {} is too large: {what} carries at most {max} bytes",
            p.len
        )));
    }
    if let Some(max) = limits.max_size {
        if p.len > max {
            return Err(Refusal::Size { asked: p.len, max });
        }
    }
    usize::try_from(p.len).map_err(|_| invalid(format!("-l {} does not fit", p.len)))
}

/// The streams, both ways with `--bidir`, against `--max-streams` (at most wirebench's own
/// [`MAX_STREAMS`]: the server spends a thread and a descriptor on each).
fn check_streams(p: &Params, limits: &SpecLimits) -> Result<u32, Refusal> {
    if p.parallel == 0 {
        return Err(invalid("-P 0: a test has at least one stream".into()));
    }
    let streams = u64::from(p.parallel) * if p.bidirectional { 2 } else { 1 };
    let max = limits.max_streams.unwrap_or(MAX_STREAMS).min(MAX_STREAMS);
    match u32::try_from(streams) {
        Ok(s) if s <= max => Ok(s),
        _ => Err(Refusal::Streams {
            asked: u32::try_from(streams).unwrap_or(u32::MAX),
            max,
        }),
    }
}

/// `--max-bytes` and `--max-rate` on what the test says it will move.
fn check_amounts(p: &Params, limits: &SpecLimits, streams: u32) -> Result<(), Refusal> {
    if let Some(max) = limits.max_bytes {
        // -n is the test's total each way (`--bidir` moves it both ways); -b is per stream.
        let ways = if p.bidirectional { 2 } else { 1 };
        let most = if p.num > 0 {
            u128::from(p.num) * ways
        } else {
            u128::from(p.bandwidth / 8) * u128::from(p.time) * u128::from(streams)
        };
        if most == 0 {
            return Err(Refusal::Unbounded { max });
        }
        if most > u128::from(max) {
            let asked = u64::try_from(most).unwrap_or(u64::MAX);
            return Err(Refusal::Bytes { asked, max });
        }
    }
    if let Some(max) = limits.max_rate_bps {
        if p.bandwidth == 0 {
            return Err(Refusal::UnlimitedRate { max });
        }
        let asked = p.bandwidth.saturating_mul(u64::from(streams));
        if asked > max {
            return Err(Refusal::Rate { asked, max });
        }
    }
    if let Some(max) = limits.max_pps {
        // Each block is a datagram (UDP) or a write (TCP), as wirebench's tests count
        // messages: -b bits/s per stream in blocks of -l bytes.
        if p.bandwidth == 0 {
            return Err(Refusal::UnlimitedPps { max });
        }
        let per_stream = p.bandwidth.div_ceil(p.len.max(1).saturating_mul(8));
        let asked = per_stream.saturating_mul(u64::from(streams));
        if asked > max {
            return Err(Refusal::Pps { asked, max });
        }
    }
    Ok(())
}

/// Feeds arbitrary bytes to [`Params::parse`] and what parses to [`admit`] under no limits
/// and under tight ones, for the fuzz target: nothing may panic, and whatever is admitted
/// must be within every bound.
pub fn admit_anything(bytes: &[u8]) {
    let Ok(p) = Params::parse(bytes) else {
        return;
    };
    let options = SocketOptions::parse(bytes).unwrap_or_default();
    let tight = SpecLimits {
        max_duration: Some(Duration::from_secs(10)),
        max_rate_bps: Some(1_000_000_000),
        max_bytes: Some(1_000_000_000),
        max_streams: Some(4),
        max_size: Some(65_536),
        ..SpecLimits::default()
    };
    for limits in [SpecLimits::default(), tight] {
        if let Ok(a) = admit_with(p.clone(), options.clone(), &limits) {
            assert_within(&a, &limits);
        }
    }
}

/// Panics if an admitted test breaks a bound: the fuzz target's oracle.
fn assert_within(a: &Admitted, limits: &SpecLimits) {
    let p = a.params();
    let max_streams = limits.max_streams.unwrap_or(MAX_STREAMS).min(MAX_STREAMS);
    assert!((1..=max_streams).contains(&a.streams()), "{a:?}");
    assert!(
        a.block_len() >= 1 && a.block_len() as u64 <= MAX_TCP_LEN,
        "{a:?}"
    );
    assert!(!p.udp || a.block_len() as u64 <= MAX_UDP_LEN, "{a:?}");
    assert!(
        limits.max_size.is_none_or(|m| a.block_len() as u64 <= m),
        "{a:?}"
    );
    assert!(
        p.window <= MAX_WINDOW && p.pacing_timer <= MAX_PACING_TIMER_US,
        "{a:?}"
    );
    assert!(p.num <= MAX_COUNT && p.bandwidth <= MAX_COUNT, "{a:?}");
    let max_time = limits.max_duration.unwrap_or(DEFAULT_MAX_DURATION);
    assert!(Duration::from_secs(p.time) <= max_time, "{a:?}");
    assert!(p.omit <= MAX_OMIT_S && p.blockcount <= MAX_COUNT, "{a:?}");
    let o = a.options();
    assert!(
        o.burst <= MAX_BURST && o.tos <= 255 && o.mss <= MAX_MSS && o.fq_rate_bps <= MAX_COUNT,
        "{a:?}"
    );
    assert!(!o.sctp && o.server_affinity.is_none_or(|c| c < 0), "{a:?}");
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A good client's parameters, as iperf3 3.x sends them for `-c HOST`.
    fn base() -> serde_json::Value {
        serde_json::json!({
            "tcp": true, "omit": 0, "time": 10, "num": 0, "blockcount": 0, "parallel": 1,
            "len": 131072, "pacing_timer": 1000, "client_version": "3.16"
        })
    }

    /// `base()` with `key` set to `value`, parsed and admitted under `limits`.
    fn with(key: &str, value: serde_json::Value, limits: &SpecLimits) -> Result<Admitted, String> {
        let mut doc = base();
        doc[key] = value;
        let p = Params::parse(doc.to_string().as_bytes()).map_err(|e| format!("parse: {e}"))?;
        admit(p, limits).map_err(|r| format!("{}: {r}", r.kind()))
    }

    const EXTREMES: [u64; 5] = [0, 1, (1 << 32) - 1, 1 << 40, u64::MAX];

    #[test]
    fn packet_rates_obey_max_pps_as_wirebench_clients_do() {
        let lim = SpecLimits {
            max_pps: Some(20_000),
            ..SpecLimits::default()
        };
        // 10 Mbit/s in 16-byte datagrams: 78,125 a second.
        let mut doc = base();
        doc["tcp"] = false.into();
        doc["udp"] = true.into();
        doc["len"] = 16.into();
        doc["bandwidth"] = 10_000_000.into();
        let p = Params::parse(doc.to_string().as_bytes()).expect("parses");
        let e = admit(p, &lim).expect_err("over --max-pps");
        assert_eq!(
            e,
            Refusal::Pps {
                asked: 78_125,
                max: 20_000
            }
        );
        // No rate at all: unlimited, refused; 1472-byte datagrams at 10 Mbit/s: 850/s.
        assert!(with("bandwidth", 0.into(), &lim)
            .unwrap_err()
            .contains("unlimited_pps"));
        doc["len"] = 1472.into();
        let p = Params::parse(doc.to_string().as_bytes()).expect("parses");
        assert!(admit(p.clone(), &lim).is_ok());
        // Streams multiply it.
        let mut four = p;
        four.parallel = 24;
        assert!(matches!(
            admit(four, &lim),
            Err(Refusal::Pps { asked: 20_400, .. })
        ));
        for v in EXTREMES {
            let _ = with("bandwidth", v.into(), &lim);
        }
    }

    #[test]
    fn a_good_client_is_admitted() {
        let a = with("time", 10.into(), &SpecLimits::default()).expect("admitted");
        assert_eq!((a.streams(), a.block_len()), (1, 131_072));
    }

    #[test]
    fn the_issues_two_crash_inputs_are_refused() {
        let lim = SpecLimits::default();
        let p = Params::parse(br#"{"tcp":1,"reverse":1,"len":1099511627776,"time":1}"#)
            .expect("parses");
        let e = admit(p, &lim).expect_err("len 2^40");
        assert!(
            matches!(e, Refusal::Invalid(ref w) if w.contains("-l 1099511627776 is too large"))
        );
        let p = Params::parse(br#"{"tcp":1,"parallel":4294967295,"len":131072,"time":1}"#)
            .expect("parses");
        assert_eq!(
            admit(p, &lim),
            Err(Refusal::Streams {
                asked: u32::MAX,
                max: MAX_STREAMS
            })
        );
    }

    #[test]
    fn len_is_bounded_for_tcp_and_udp() {
        let lim = SpecLimits::default();
        for v in EXTREMES {
            let ok = with("len", v.into(), &lim).is_ok();
            assert_eq!(ok, v == 1, "tcp len {v}");
        }
        assert!(with("len", MAX_TCP_LEN.into(), &lim).is_ok());
        assert!(with("len", (MAX_TCP_LEN + 1).into(), &lim).is_err());
        let udp = |len: u64, wide: bool| {
            let mut doc = base();
            doc["tcp"] = false.into();
            doc["udp"] = true.into();
            doc["udp_counters_64bit"] = wide.into();
            doc["len"] = len.into();
            admit(
                Params::parse(doc.to_string().as_bytes()).expect("parses"),
                &lim,
            )
        };
        assert!(udp(11, false).is_err() && udp(12, false).is_ok());
        assert!(udp(15, true).is_err() && udp(16, true).is_ok());
        assert!(udp(65_507, false).is_ok() && udp(65_508, false).is_err());
        for v in EXTREMES {
            assert!(udp(v, false).is_err(), "udp len {v}");
        }
        let small = SpecLimits {
            max_size: Some(1000),
            ..SpecLimits::default()
        };
        assert_eq!(
            with("len", 1001.into(), &small).unwrap_err(),
            "max_size: messages of 1001 bytes exceed the server's --max-size 1000"
        );
    }

    #[test]
    fn streams_obey_max_streams_and_wirebenchs_cap() {
        let lim = SpecLimits::default();
        for v in EXTREMES {
            let r = with("parallel", v.into(), &lim);
            match v {
                1 => assert!(r.is_ok()),
                0 => assert!(r.unwrap_err().starts_with("invalid: -P 0")),
                // Over u32: iperf3's field is an int, so the document does not parse.
                v if v > u64::from(u32::MAX) => assert!(r.unwrap_err().starts_with("parse")),
                _ => assert!(r.unwrap_err().starts_with("max_streams"), "{v}"),
            }
        }
        assert!(with("parallel", 64.into(), &lim).is_ok());
        assert!(with("parallel", 65.into(), &lim).is_err());
        assert!(with("parallel", 1500.into(), &lim)
            .unwrap_err()
            .contains("1500 streams exceed the server's --max-streams 64"));
        let mut doc = base();
        doc["parallel"] = 33.into();
        doc["bidirectional"] = true.into();
        let p = Params::parse(doc.to_string().as_bytes()).expect("parses");
        assert!(matches!(
            admit(p, &lim),
            Err(Refusal::Streams { asked: 66, max: 64 })
        ));
        // An operator's cap above wirebench's does not lift it.
        let wide = SpecLimits {
            max_streams: Some(1000),
            ..SpecLimits::default()
        };
        assert!(with("parallel", 65.into(), &wide).is_err());
        let narrow = SpecLimits {
            max_streams: Some(2),
            ..SpecLimits::default()
        };
        assert!(with("parallel", 3.into(), &narrow).is_err());
    }

    #[test]
    fn time_is_bounded_by_max_duration() {
        let lim = SpecLimits::default();
        for v in EXTREMES {
            let r = with("time", v.into(), &lim);
            assert_eq!(r.is_ok(), v <= 3600, "{v}: {r:?}");
            if v > 3600 {
                assert!(r.unwrap_err().starts_with("max_duration"));
            }
        }
        let short = SpecLimits {
            max_duration: Some(Duration::from_secs(5)),
            ..SpecLimits::default()
        };
        assert!(with("time", 5.into(), &short).is_ok());
        assert!(with("time", 6.into(), &short).is_err());
    }

    #[test]
    fn every_other_number_is_bounded() {
        let lim = SpecLimits::default();
        for v in EXTREMES {
            for (key, max) in [
                ("omit", MAX_OMIT_S),
                ("blockcount", MAX_COUNT),
                ("window", MAX_WINDOW),
                ("pacing_timer", MAX_PACING_TIMER_US),
                ("num", MAX_COUNT),
                ("bandwidth", MAX_COUNT),
            ] {
                let r = with(key, v.into(), &lim);
                assert_eq!(r.is_ok(), v <= max, "{key} {v}: {r:?}");
            }
        }
        assert!(with("congestion", "cubic".into(), &lim).is_ok());
        for cc in ["", "a-name-that-is-too-long", "cu\nbic"] {
            assert!(with("congestion", cc.into(), &lim).is_err(), "{cc:?}");
        }
        assert!(with("client_version", "x".repeat(65).into(), &lim).is_err());
        let mut doc = base();
        doc["udp"] = true.into();
        let p = Params::parse(doc.to_string().as_bytes()).expect("parses");
        assert!(admit(p, &lim).is_err(), "tcp and udp at once");
    }

    /// What JSON allows beyond unsigned integers: refused by the parser or by the check,
    /// never a panic and never a value past its bound.
    #[test]
    fn negative_huge_string_null_and_nested_values_are_errors() {
        let lim = SpecLimits::default();
        let odd: [serde_json::Value; 8] = [
            (-1).into(),
            i64::MIN.into(),
            1e300.into(),
            0.5.into(),
            "5".into(),
            serde_json::Value::Null,
            serde_json::json!({"a": {"b": [1]}}),
            serde_json::json!([1, 2]),
        ];
        for key in [
            "time",
            "num",
            "blockcount",
            "parallel",
            "len",
            "bandwidth",
            "window",
            "omit",
            "pacing_timer",
        ] {
            for v in &odd {
                assert!(with(key, v.clone(), &lim).is_err(), "{key}: {v}");
            }
        }
        // A flag is a boolean or a number; anything else reads as false.
        for v in &odd {
            let r = with("reverse", v.clone(), &lim).expect("admitted");
            assert!(!r.params().reverse, "{v}");
        }
        for doc in [&b"null"[..], b"[]", b"5", b"\"x\"", b"{", &[b'['; 10_000]] {
            assert!(Params::parse(doc).is_err());
        }
        for doc in [&b"{}"[..], br#"{"len":1,"time":1}"#, br#"{"parallel":-1}"#] {
            admit_anything(doc);
        }
    }

    #[test]
    fn amounts_and_rates_follow_the_servers_limits() {
        let lim = SpecLimits {
            max_bytes: Some(1_000_000),
            max_rate_bps: Some(10_000_000),
            ..SpecLimits::default()
        };
        let mut doc = base();
        doc["bandwidth"] = 1_000_000.into();
        doc["time"] = 5.into();
        let p = Params::parse(doc.to_string().as_bytes()).expect("parses");
        assert!(admit(p, &lim).is_ok(), "625 kB at 1 Mbit/s");
        let e = with("time", 10.into(), &lim).unwrap_err();
        assert!(e.starts_with("unbounded"), "{e}");
        doc["num"] = u64::from(u32::MAX).into();
        let p = Params::parse(doc.to_string().as_bytes()).expect("parses");
        assert_eq!(admit(p, &lim).unwrap_err().kind(), "max_bytes");
        doc["num"] = 0.into();
        doc["bandwidth"] = MAX_COUNT.into();
        let p = Params::parse(doc.to_string().as_bytes()).expect("parses");
        assert_eq!(admit(p, &lim).unwrap_err().kind(), "max_bytes");
        let rate_only = SpecLimits {
            max_rate_bps: Some(10_000_000),
            ..SpecLimits::default()
        };
        assert_eq!(
            with("bandwidth", 0.into(), &rate_only).unwrap_err(),
            with("time", 1.into(), &rate_only).unwrap_err()
        );
        assert!(with("bandwidth", 20_000_000.into(), &rate_only)
            .unwrap_err()
            .starts_with("max_rate"));
    }

    /// Every socket option a client sends is a count within iperf3's own bound or refused
    /// with its code; wrong types are decode errors; flags read either spelling.
    #[test]
    fn socket_options_are_bounded_before_use() {
        let parse = |doc: &str| SocketOptions::parse(doc.as_bytes());
        for (key, max, code) in [
            ("burst", MAX_BURST, ie::BURST),
            ("TOS", 255, ie::BAD_TOS),
            ("MSS", MAX_MSS, ie::MSS),
            ("fqrate", MAX_COUNT, ie::NEW_TEST),
        ] {
            for v in EXTREMES.iter().chain(&[max, max + 1]) {
                let o = parse(&format!(r#"{{"{key}":{v}}}"#)).expect("a count parses");
                match o.check() {
                    Ok(()) => assert!(*v <= max, "{key} {v}"),
                    Err((_, c)) => assert!(*v > max && c.code == code, "{key} {v}: {c:?}"),
                }
            }
            for odd in ["-1", "0.5", "\"5\"", "null", "[1]", "{}"] {
                assert!(
                    parse(&format!(r#"{{"{key}":{odd}}}"#)).is_err(),
                    "{key} {odd}"
                );
            }
        }
        let o = parse(r#"{"nodelay":true,"dont_fragment":1,"sctp":false}"#).expect("flags");
        // iperf3 tells nodelay and sctp by the key alone, dont_fragment by its value.
        assert!(o.nodelay && o.dont_fragment && o.sctp);
        assert!(!parse(r#"{"dont_fragment":0}"#).expect("off").dont_fragment);
        assert_eq!(
            parse(r#"{"server_affinity":-1}"#).expect("none").check(),
            Ok(())
        );
        for doc in ["[]", "5", "{", "null"] {
            assert!(parse(doc).is_err(), "{doc}");
        }
    }

    /// `--bidir -n N` moves N each way: 2N against `--max-bytes`, as wirebench's own
    /// `--bidir -n` is counted.
    #[test]
    fn a_bidir_amount_counts_both_ways() {
        let lim = SpecLimits {
            max_bytes: Some(50_000_000),
            ..SpecLimits::default()
        };
        let mut doc = base();
        doc["num"] = 30_000_000.into();
        assert!(admit(
            Params::parse(doc.to_string().as_bytes()).expect("parses"),
            &lim
        )
        .is_ok());
        doc["bidirectional"] = true.into();
        let p = Params::parse(doc.to_string().as_bytes()).expect("parses");
        assert!(matches!(
            admit(p, &lim),
            Err(Refusal::Bytes {
                asked: 60_000_000,
                max: 50_000_000
            })
        ));
    }
}
