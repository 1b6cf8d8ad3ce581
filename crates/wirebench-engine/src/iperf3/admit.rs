//! What a server lets an iperf3 client ask: every number of its parameters is bounded here,
//! before the driver sizes a buffer, a channel or a thread by it. An iperf3 client's
//! parameters are only its word, as a wirebench client's spec is: this is the iperf3 side of
//! `SpecLimits::check`, and it refuses with the same [`Refusal`] kinds, so the metrics'
//! reasons mean one thing whichever client asked. Pure: no I/O, no clock.

use std::time::Duration;

use wirebench_proto::spec::MAX_STREAMS;

use super::codec::{Params, UdpHeader};
use crate::control::admission::{Refusal, SpecLimits, DEFAULT_MAX_DURATION};

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

/// Parameters that passed [`admit`]: every number in them is bounded, so the driver may
/// size buffers, channels and threads by them.
#[derive(Debug, Clone, PartialEq)]
pub struct Admitted {
    params: Params,
    streams: u32,
    len: usize,
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
}

fn invalid(why: String) -> Refusal {
    Refusal::Invalid(why)
}

/// Checks an iperf3 client's parameters against the server's limits (`limits`; without a
/// `--max-streams`, wirebench's own cap of [`MAX_STREAMS`]; without a `--max-duration`,
/// [`DEFAULT_MAX_DURATION`]). What they say they will move is checked here, what they do
/// move is counted by the roles.
pub(crate) fn admit(p: Params, limits: &SpecLimits) -> Result<Admitted, Refusal> {
    check_shape(&p)?;
    let len = check_len(&p, limits)?;
    let streams = check_streams(&p, limits)?;
    let max_time = limits.max_duration.unwrap_or(DEFAULT_MAX_DURATION);
    let asked = Duration::from_secs(p.time);
    if asked > max_time {
        return Err(Refusal::Duration {
            asked,
            max: max_time,
        });
    }
    check_amounts(&p, limits, streams)?;
    Ok(Admitted {
        params: p,
        streams,
        len,
    })
}

/// What this server does not do, and the numbers no limit flag covers.
fn check_shape(p: &Params) -> Result<(), Refusal> {
    if p.tcp && p.udp {
        return Err(invalid("a test is TCP or UDP, not both".into()));
    }
    if p.omit > 0 {
        return Err(invalid("--omit is not supported by this server".into()));
    }
    if p.blockcount > 0 {
        return Err(invalid(
            "-k (blocks) is not supported by this server: use -n or -t".into(),
        ));
    }
    if p.window > MAX_WINDOW {
        return Err(invalid(format!(
            "-w {} is over this server's {MAX_WINDOW}-byte socket buffer limit",
            p.window
        )));
    }
    if p.pacing_timer > MAX_PACING_TIMER_US {
        return Err(invalid(format!(
            "--pacing-timer {} µs is over this server's {MAX_PACING_TIMER_US}",
            p.pacing_timer
        )));
    }
    if p.num > MAX_COUNT || p.bandwidth > MAX_COUNT {
        return Err(invalid(format!(
            "-n {} or -b {} is over this server's {MAX_COUNT}",
            p.num, p.bandwidth
        )));
    }
    if let Some(cc) = &p.congestion {
        let printable = cc.bytes().all(|b| b.is_ascii_graphic());
        if cc.is_empty() || cc.len() > MAX_CONGESTION_LEN || !printable {
            return Err(invalid(format!(
                "-C takes a congestion control name of 1 to {MAX_CONGESTION_LEN} letters"
            )));
        }
    }
    if p.client_version
        .as_ref()
        .is_some_and(|v| v.len() > MAX_VERSION_LEN)
    {
        return Err(invalid(format!(
            "a client version of over {MAX_VERSION_LEN} bytes"
        )));
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
    let tight = SpecLimits {
        max_duration: Some(Duration::from_secs(10)),
        max_rate_bps: Some(1_000_000_000),
        max_bytes: Some(1_000_000_000),
        max_streams: Some(4),
        max_size: Some(65_536),
        ..SpecLimits::default()
    };
    for limits in [SpecLimits::default(), tight] {
        if let Ok(a) = admit(p.clone(), &limits) {
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
    assert!(p.omit == 0 && p.blockcount == 0, "{a:?}");
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
            for key in ["omit", "blockcount"] {
                assert_eq!(with(key, v.into(), &lim).is_ok(), v == 0, "{key} {v}");
            }
            for (key, max) in [
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
