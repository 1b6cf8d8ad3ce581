//! A queue discipline and its parameters as people write them: tc's syntax
//! (`fq_codel target 5ms interval 100ms ecn`), and Mahimahi's queue arguments
//! (`codel packets=100,target=5,interval=100`); written back in tc's syntax with every
//! parameter spelled out.

use std::fmt;

use serde::{Deserialize, Serialize};
use wirebench_proto::units::{parse_duration, parse_size};

/// The queue discipline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum AqmKind {
    /// A FIFO that drops arriving packets when full (tc's `pfifo`/`bfifo`).
    DropTail,
    /// A FIFO that drops its oldest packets to make room (tc's `pfifo_head_drop`).
    DropHead,
    /// CoDel, RFC 8289.
    Codel,
    /// FQ-CoDel, RFC 8290: flow queues served by deficit round robin, CoDel in each.
    FqCodel,
    /// PIE, RFC 8033.
    Pie,
}

impl AqmKind {
    /// The name as tc and `--aqm` write it.
    pub fn name(self) -> &'static str {
        match self {
            Self::DropTail => "droptail",
            Self::DropHead => "drophead",
            Self::Codel => "codel",
            Self::FqCodel => "fq_codel",
            Self::Pie => "pie",
        }
    }

    /// The keywords this discipline takes, for messages.
    fn keywords(self) -> &'static str {
        match self {
            Self::DropTail | Self::DropHead => "limit, limit_bytes",
            Self::Codel => "limit, limit_bytes, target, interval, ecn, noecn",
            Self::FqCodel => {
                "limit, limit_bytes, flows, quantum, target, interval, drop_batch, ecn, noecn"
            }
            Self::Pie => {
                "limit, limit_bytes, target, tupdate, alpha, beta, max_burst, bytemode, \
                 nobytemode, ecn, noecn"
            }
        }
    }
}

/// A queue discipline and its parameters. [`AqmConfig::new`] gives each discipline's
/// defaults (RFC 8289, RFC 8290, and for PIE Linux's where RFC 8033 leaves a choice).
/// `Copy`, as the link's own `LinkConfig` is.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct AqmConfig {
    /// The discipline.
    pub kind: AqmKind,
    /// Most packets held; `None`: the link's `queue`.
    pub limit: Option<u32>,
    /// Most bytes held; `None`: the link's `queue-bytes`.
    pub limit_bytes: Option<u64>,
    /// CoDel's and FQ-CoDel's target sojourn time, PIE's target delay (QDELAY_REF), ns.
    pub target_ns: u64,
    /// CoDel's and FQ-CoDel's interval, ns.
    pub interval_ns: u64,
    /// FQ-CoDel's number of flow queues.
    pub flows: u32,
    /// FQ-CoDel's deficit round robin quantum, bytes.
    pub quantum: u32,
    /// FQ-CoDel: most packets one overflow drops from the fattest flow (Linux's
    /// `drop_batch`; it drops until half that flow's bytes are gone, or this many).
    pub drop_batch: u32,
    /// PIE's update period (T_UPDATE), ns.
    pub tupdate_ns: u64,
    /// PIE's alpha, per second (RFC 8033 units; tc's integer is sixteenths of this).
    pub alpha: f64,
    /// PIE's beta, per second.
    pub beta: f64,
    /// PIE's burst allowance (MAX_BURST), ns.
    pub max_burst_ns: u64,
    /// PIE: scale the drop probability by packet size (small packets dropped less).
    pub bytemode: bool,
    /// Mark ECN-capable packets with CE instead of dropping them (PIE: while its drop
    /// probability is at most 10%).
    pub ecn: bool,
}

const MS: u64 = 1_000_000;

/// The longest `limit` and `limit_bytes`: the link's own queue bounds
/// (`link_options::MAX_QUEUE_PACKETS` and `MAX_QUEUE_BYTES`, which a test holds equal).
pub const MAX_QUEUE_PACKETS: u32 = 1_000_000;
/// See [`MAX_QUEUE_PACKETS`].
pub const MAX_QUEUE_BYTES: u64 = 1 << 30;
/// The most flows, quantum and drop batch a config takes; each bounds memory or work.
pub const FLOWS: std::ops::RangeInclusive<u32> = 1..=65_536;
/// See [`FLOWS`].
pub const QUANTUM: std::ops::RangeInclusive<u32> = 64..=1 << 20;
/// See [`FLOWS`].
pub const DROP_BATCH: std::ops::RangeInclusive<u32> = 1..=1024;
/// CoDel's target and interval, PIE's target and burst allowance: up to 60 s, as the
/// link's delay.
pub const MAX_TIME_NS: u64 = 60_000_000_000;
/// PIE's update period: from 1 ms (each update is work on the data path) to 10 s.
pub const TUPDATE_NS: std::ops::RangeInclusive<u64> = 1_000_000..=10_000_000_000;

impl AqmConfig {
    /// `kind` with its defaults: CoDel target 5 ms and interval 100 ms (RFC 8289 §4.3–4.4);
    /// FQ-CoDel 1024 flows, quantum 1514, drop batch 64 (RFC 8290 §5.1, Linux); PIE target
    /// 15 ms, tupdate 15 ms, alpha 0.125, beta 1.25, max_burst 150 ms (Linux; RFC 8033
    /// §5.1 offers 15 ms/15 ms/0.125/1.25/150 ms too). ECN off: `--ecn` turns it on.
    pub fn new(kind: AqmKind) -> Self {
        Self {
            kind,
            limit: None,
            limit_bytes: None,
            target_ns: if kind == AqmKind::Pie {
                15 * MS
            } else {
                5 * MS
            },
            interval_ns: 100 * MS,
            flows: 1024,
            quantum: 1514,
            drop_batch: 64,
            tupdate_ns: 15 * MS,
            alpha: 0.125,
            beta: 1.25,
            max_burst_ns: 150 * MS,
            bytemode: false,
            ecn: false,
        }
    }

    /// Reads tc's syntax: a discipline (`droptail`/`pfifo`, `bfifo`, `drophead`/
    /// `pfifo_head_drop`, `codel`, `fq_codel`, `pie`) and its keywords, each followed by its
    /// value except the switches (`ecn`, `noecn`, `bytemode`, `nobytemode`). Durations need
    /// a unit (`5ms`, `500us`); `bfifo limit` is in bytes, every other `limit` in packets.
    ///
    /// # Errors
    ///
    /// An unknown discipline or keyword, a missing or malformed value, or one out of range;
    /// the message names it and what is accepted.
    pub fn parse(text: &str) -> Result<Self, AqmError> {
        let mut words = text.split_whitespace();
        let first = words.next().ok_or(AqmError::Empty)?;
        let (kind, bytes_limit) = match first.to_ascii_lowercase().as_str() {
            "droptail" | "pfifo" => (AqmKind::DropTail, false),
            "bfifo" => (AqmKind::DropTail, true),
            "drophead" | "pfifo_head_drop" => (AqmKind::DropHead, false),
            "codel" => (AqmKind::Codel, false),
            "fq_codel" | "fq-codel" => (AqmKind::FqCodel, false),
            "pie" => (AqmKind::Pie, false),
            _ => return Err(AqmError::UnknownKind(first.to_owned())),
        };
        let mut cfg = Self::new(kind);
        while let Some(word) = words.next() {
            let key = word.to_ascii_lowercase();
            if cfg.switch(&key) {
                continue;
            }
            if key.contains('=') {
                for pair in word.split(',').filter(|p| !p.is_empty()) {
                    cfg.set_mahimahi(pair)?;
                }
                continue;
            }
            let keyword = keyword_name(kind, &key).ok_or_else(|| AqmError::UnknownKeyword {
                kind: kind.name(),
                word: word.to_owned(),
                keywords: kind.keywords(),
            })?;
            let value = words.next().ok_or(AqmError::MissingValue {
                kind: kind.name(),
                keyword,
            })?;
            if keyword == "limit" && bytes_limit {
                cfg.limit_bytes = Some(limit_bytes(value)?);
            } else {
                cfg.set(keyword, value)?;
            }
        }
        Ok(cfg)
    }

    /// Applies a switch keyword; false if `key` is not one this discipline takes.
    fn switch(&mut self, key: &str) -> bool {
        let aqm = !matches!(self.kind, AqmKind::DropTail | AqmKind::DropHead);
        match key {
            "ecn" if aqm => self.ecn = true,
            "noecn" if aqm => self.ecn = false,
            "bytemode" if self.kind == AqmKind::Pie => self.bytemode = true,
            "nobytemode" if self.kind == AqmKind::Pie => self.bytemode = false,
            _ => return false,
        }
        true
    }

    /// Sets one of Mahimahi's queue arguments (`mm-link --uplink-queue-args=packets=100,
    /// target=5,interval=100`): `packets`, `bytes`, and times in ms (`target`, `interval`,
    /// PIE's `qdelay_ref` and `max_burst`), so that a Mahimahi command line carries over.
    fn set_mahimahi(&mut self, pair: &str) -> Result<(), AqmError> {
        const MAHIMAHI: &str =
            "packets=N, bytes=N, target=MS, interval=MS, qdelay_ref=MS, max_burst=MS (Mahimahi's)";
        let unknown = || AqmError::UnknownKeyword {
            kind: self.kind.name(),
            word: pair.to_owned(),
            keywords: MAHIMAHI,
        };
        let (key, value) = pair.split_once('=').ok_or_else(unknown)?;
        let (keyword, in_ms) = match key.to_ascii_lowercase().as_str() {
            "packets" => ("limit", false),
            "bytes" => ("limit_bytes", false),
            "target" | "qdelay_ref" => ("target", true),
            "interval" => ("interval", true),
            "max_burst" => ("max_burst", true),
            _ => return Err(unknown()),
        };
        if keyword_name(self.kind, keyword).is_none() {
            return Err(unknown());
        }
        let bare = !value.is_empty() && value.chars().all(|c| c.is_ascii_digit() || c == '.');
        if in_ms && bare {
            self.set(keyword, &format!("{value}ms"))
        } else {
            self.set(keyword, value)
        }
    }

    /// Sets `keyword` (one [`keyword_name`] gave for this kind) from `value`.
    fn set(&mut self, keyword: &'static str, value: &str) -> Result<(), AqmError> {
        match keyword {
            "limit" => {
                self.limit = Some(bounded(
                    keyword,
                    value,
                    1..=MAX_QUEUE_PACKETS,
                    "1 to 1000000",
                )?)
            }
            "limit_bytes" => self.limit_bytes = Some(limit_bytes(value)?),
            "flows" => self.flows = bounded(keyword, value, FLOWS, "1 to 65536")?,
            "quantum" => self.quantum = size_in(keyword, value, QUANTUM, "64 to 1Mi bytes")?,
            "drop_batch" => self.drop_batch = bounded(keyword, value, DROP_BATCH, "1 to 1024")?,
            "target" => self.target_ns = time(keyword, value, 1_000..=MAX_TIME_NS, "1us to 60s")?,
            "interval" => {
                self.interval_ns = time(keyword, value, 1_000..=MAX_TIME_NS, "1us to 60s")?
            }
            "tupdate" => self.tupdate_ns = time(keyword, value, TUPDATE_NS, "1ms to 10s")?,
            "max_burst" => self.max_burst_ns = time(keyword, value, 0..=MAX_TIME_NS, "0 to 60s")?,
            "alpha" => self.alpha = gain(keyword, value)?,
            "beta" => self.beta = gain(keyword, value)?,
            _ => unreachable_keyword(keyword)?,
        }
        Ok(())
    }
}

/// The canonical name of a keyword with a value that `kind` takes.
fn keyword_name(kind: AqmKind, key: &str) -> Option<&'static str> {
    let name = match key {
        "limit" => "limit",
        "limit_bytes" => "limit_bytes",
        "flows" => "flows",
        "quantum" => "quantum",
        "drop_batch" => "drop_batch",
        "target" => "target",
        "interval" => "interval",
        "tupdate" => "tupdate",
        "alpha" => "alpha",
        "beta" => "beta",
        "max_burst" => "max_burst",
        _ => return None,
    };
    kind.keywords()
        .split(", ")
        .any(|k| k == name)
        .then_some(name)
}

/// `set` is only called with names `keyword_name` returned; a name it lacks is a bug here,
/// reported as an unknown keyword rather than a panic.
fn unreachable_keyword(keyword: &'static str) -> Result<(), AqmError> {
    Err(AqmError::UnknownKeyword {
        kind: "aqm",
        word: keyword.to_owned(),
        keywords: "",
    })
}

fn bad(keyword: &'static str, value: &str, hint: &'static str) -> AqmError {
    AqmError::BadValue {
        keyword,
        value: value.to_owned(),
        hint,
    }
}

fn range(keyword: &'static str, value: &str, why: &'static str) -> AqmError {
    AqmError::OutOfRange {
        keyword,
        value: value.to_owned(),
        why,
    }
}

fn bounded(
    keyword: &'static str,
    value: &str,
    ok: std::ops::RangeInclusive<u32>,
    why: &'static str,
) -> Result<u32, AqmError> {
    let n: u64 = value
        .parse()
        .map_err(|_| bad(keyword, value, "expected a whole number"))?;
    u32::try_from(n)
        .ok()
        .filter(|n| ok.contains(n))
        .ok_or_else(|| range(keyword, value, why))
}

fn size_in(
    keyword: &'static str,
    value: &str,
    ok: std::ops::RangeInclusive<u32>,
    why: &'static str,
) -> Result<u32, AqmError> {
    let n = parse_size(value)
        .map_err(|_| bad(keyword, value, "expected a size in bytes, e.g. 1514"))?;
    u32::try_from(n)
        .ok()
        .filter(|n| ok.contains(n))
        .ok_or_else(|| range(keyword, value, why))
}

fn limit_bytes(value: &str) -> Result<u64, AqmError> {
    let n =
        parse_size(value).map_err(|_| bad("limit_bytes", value, "expected a size, e.g. 64K"))?;
    if n == 0 || n > MAX_QUEUE_BYTES {
        return Err(range("limit_bytes", value, "1 to 1Gi bytes"));
    }
    Ok(n)
}

fn time(
    keyword: &'static str,
    value: &str,
    ok: std::ops::RangeInclusive<u64>,
    why: &'static str,
) -> Result<u64, AqmError> {
    // tc reads a bare number as microseconds and wirebench as seconds: ask for the unit.
    if !value.is_empty() && value.chars().all(|c| c.is_ascii_digit() || c == '.') {
        return Err(bad(
            keyword,
            value,
            "give a unit, e.g. 5ms or 500us (tc reads a bare number as µs)",
        ));
    }
    let d =
        parse_duration(value).map_err(|_| bad(keyword, value, "expected a duration, e.g. 5ms"))?;
    u64::try_from(d.as_nanos())
        .ok()
        .filter(|n| ok.contains(n))
        .ok_or_else(|| range(keyword, value, why))
}

/// PIE's alpha and beta in RFC 8033's units (per second); Linux bounds tc's sixteenths to
/// 0..=32, the same 0 to 2.
fn gain(keyword: &'static str, value: &str) -> Result<f64, AqmError> {
    let g: f64 = value
        .parse()
        .map_err(|_| bad(keyword, value, "expected a number, e.g. 0.125"))?;
    if !(0.0..=2.0).contains(&g) {
        return Err(range(
            keyword,
            value,
            "0 to 2 per second, as RFC 8033 writes it (tc's sixteenths: alpha 2 beta 20 is alpha 0.125 beta 1.25)",
        ));
    }
    Ok(g)
}

/// A duration as `parse_duration` reads it back exactly: the largest unit that divides it.
fn fmt_ns(ns: u64) -> String {
    for (unit, name) in [(1_000_000_000, "s"), (MS, "ms"), (1_000, "us")] {
        if ns != 0 && ns.is_multiple_of(unit) {
            return format!("{}{name}", ns / unit);
        }
    }
    format!("{ns}ns")
}

impl fmt::Display for AqmConfig {
    /// Every parameter the discipline uses, in tc's syntax, so that results record what ran;
    /// [`AqmConfig::parse`] reads it back to the same config.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.kind.name())?;
        if let Some(l) = self.limit {
            write!(f, " limit {l}")?;
        }
        if let Some(b) = self.limit_bytes {
            write!(f, " limit_bytes {b}")?;
        }
        let (target, interval) = (fmt_ns(self.target_ns), fmt_ns(self.interval_ns));
        match self.kind {
            AqmKind::DropTail | AqmKind::DropHead => return Ok(()),
            AqmKind::Codel => write!(f, " target {target} interval {interval}")?,
            AqmKind::FqCodel => write!(
                f,
                " flows {} quantum {} target {target} interval {interval} drop_batch {}",
                self.flows, self.quantum, self.drop_batch
            )?,
            AqmKind::Pie => write!(
                f,
                " target {target} tupdate {} alpha {} beta {} max_burst {}{}",
                fmt_ns(self.tupdate_ns),
                self.alpha,
                self.beta,
                fmt_ns(self.max_burst_ns),
                if self.bytemode { " bytemode" } else { "" }
            )?,
        }
        f.write_str(if self.ecn { " ecn" } else { " noecn" })
    }
}

/// A queue discipline that cannot be read; each message names the word and what is accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AqmError {
    /// Nothing given.
    #[error("no queue discipline given: use droptail, drophead, codel, fq_codel or pie")]
    Empty,
    /// Not a discipline this link has.
    #[error(
        "unknown queue discipline {0:?}: use droptail (pfifo, bfifo), drophead, codel, \
         fq_codel or pie"
    )]
    UnknownKind(String),
    /// A keyword the discipline does not take.
    #[error("{kind} has no parameter {word:?}: it takes {keywords}")]
    UnknownKeyword {
        /// The discipline.
        kind: &'static str,
        /// The word as given.
        word: String,
        /// The keywords it takes.
        keywords: &'static str,
    },
    /// A keyword at the end, without its value.
    #[error("{kind}: {keyword} needs a value after it")]
    MissingValue {
        /// The discipline.
        kind: &'static str,
        /// The keyword.
        keyword: &'static str,
    },
    /// A value that does not read as its kind.
    #[error("{keyword} {value:?}: {hint}")]
    BadValue {
        /// The keyword.
        keyword: &'static str,
        /// The value as given.
        value: String,
        /// What it should look like.
        hint: &'static str,
    },
    /// A value past its bounds.
    #[error("{keyword} {value:?}: must be {why}")]
    OutOfRange {
        /// The keyword.
        keyword: &'static str,
        /// The value as given.
        value: String,
        /// The bounds, in words.
        why: &'static str,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tc_syntax_reads_with_defaults() {
        let c = AqmConfig::parse("fq_codel").unwrap();
        assert_eq!(c, AqmConfig::new(AqmKind::FqCodel));
        assert_eq!(
            (c.flows, c.quantum, c.target_ns, c.interval_ns),
            (1024, 1514, 5 * MS, 100 * MS)
        );
        let c = AqmConfig::parse("codel target 5ms interval 100ms ecn").unwrap();
        assert_eq!((c.kind, c.ecn), (AqmKind::Codel, true));
        let c = AqmConfig::parse(
            "fq_codel flows 1024 quantum 1514 target 5ms interval 100ms limit 10240 ecn",
        )
        .unwrap();
        assert_eq!((c.limit, c.ecn), (Some(10240), true));
        let c = AqmConfig::parse("pie target 15ms tupdate 15ms alpha 0.125 beta 1.25 limit 1000")
            .unwrap();
        assert_eq!(
            c,
            AqmConfig {
                limit: Some(1000),
                ..AqmConfig::new(AqmKind::Pie)
            }
        );
        let c = AqmConfig::parse("PIE target 20ms max_burst 0ms bytemode ecn noecn").unwrap();
        assert_eq!(
            (c.target_ns, c.max_burst_ns, c.bytemode, c.ecn),
            (20 * MS, 0, true, false)
        );
        assert_eq!(
            AqmConfig::parse("drophead").unwrap().kind,
            AqmKind::DropHead
        );
        assert_eq!(
            AqmConfig::parse("pfifo_head_drop limit 5").unwrap().limit,
            Some(5)
        );
        assert_eq!(
            AqmConfig::parse("  droptail  ").unwrap().kind,
            AqmKind::DropTail
        );
        assert_eq!(
            AqmConfig::parse("bfifo limit 64K").unwrap().limit_bytes,
            Some(64_000)
        );
        assert_eq!(
            AqmConfig::parse("codel target 500us").unwrap().target_ns,
            500_000
        );
    }

    #[test]
    fn mahimahis_queue_arguments_read_too() {
        for (mahimahi, tc) in [
            ("droptail packets=100", "droptail limit 100"),
            ("drophead bytes=30000", "drophead limit_bytes 30000"),
            (
                "codel packets=100,target=5,interval=100",
                "codel limit 100 target 5ms interval 100ms",
            ),
            (
                "pie packets=100,qdelay_ref=20,max_burst=100",
                "pie limit 100 target 20ms max_burst 100ms",
            ),
            ("fq_codel target=2ms ecn", "fq_codel target 2ms ecn"),
        ] {
            assert_eq!(
                AqmConfig::parse(mahimahi).unwrap(),
                AqmConfig::parse(tc).unwrap(),
                "{mahimahi}"
            );
        }
        for (text, needle) in [
            (
                "codel packets=100,frobs=3",
                "codel has no parameter \"frobs=3\": it takes packets=N",
            ),
            (
                "droptail target=5",
                "droptail has no parameter \"target=5\"",
            ),
            ("codel packets", "codel has no parameter \"packets\""),
            ("codel packets=0", "limit \"0\": must be 1 to 1000000"),
            ("codel target=", "target \"\": expected a duration"),
        ] {
            let e = AqmConfig::parse(text).unwrap_err().to_string();
            assert!(e.contains(needle), "{text:?}: {e}");
        }
    }

    #[test]
    fn display_reads_back_to_the_same_config() {
        for text in [
            "droptail",
            "bfifo limit 1500",
            "drophead limit 7",
            "codel target 2500us interval 1s ecn",
            "fq_codel flows 16 quantum 300 limit_bytes 1M drop_batch 1",
            "pie target 20ms tupdate 30ms alpha 0.25 beta 2 max_burst 0ms bytemode ecn",
            "pie target 1500ns",
        ] {
            let c = AqmConfig::parse(text).unwrap();
            let shown = c.to_string();
            assert_eq!(AqmConfig::parse(&shown).unwrap(), c, "{text} → {shown}");
        }
        assert_eq!(
            AqmConfig::new(AqmKind::FqCodel).to_string(),
            "fq_codel flows 1024 quantum 1514 target 5ms interval 100ms drop_batch 64 noecn"
        );
        assert_eq!(
            AqmConfig::new(AqmKind::Pie).to_string(),
            "pie target 15ms tupdate 15ms alpha 0.125 beta 1.25 max_burst 150ms noecn"
        );
        assert_eq!(
            AqmConfig::parse("pfifo limit 9").unwrap().to_string(),
            "droptail limit 9"
        );
    }

    #[test]
    fn bad_text_is_named_with_what_is_accepted() {
        for (text, needle) in [
            ("", "no queue discipline given"),
            ("red", "unknown queue discipline \"red\": use droptail"),
            (
                "codel flows 4",
                "codel has no parameter \"flows\": it takes limit, limit_bytes, target",
            ),
            ("droptail ecn", "droptail has no parameter \"ecn\""),
            ("codel bytemode", "codel has no parameter \"bytemode\""),
            ("fq_codel target", "fq_codel: target needs a value"),
            ("codel target 5", "target \"5\": give a unit, e.g. 5ms"),
            ("codel target soon", "target \"soon\": expected a duration"),
            ("codel target 0ms", "target \"0ms\": must be 1us to 60s"),
            ("codel interval 2m", "interval \"2m\": must be 1us to 60s"),
            ("fq_codel flows 0", "flows \"0\": must be 1 to 65536"),
            (
                "fq_codel flows 65537",
                "flows \"65537\": must be 1 to 65536",
            ),
            ("fq_codel flows -1", "flows \"-1\": expected a whole number"),
            (
                "fq_codel quantum 63",
                "quantum \"63\": must be 64 to 1Mi bytes",
            ),
            (
                "fq_codel quantum 2Mi",
                "quantum \"2Mi\": must be 64 to 1Mi bytes",
            ),
            (
                "fq_codel drop_batch 0",
                "drop_batch \"0\": must be 1 to 1024",
            ),
            ("pie limit 0", "limit \"0\": must be 1 to 1000000"),
            (
                "pie limit 99999999999",
                "limit \"99999999999\": must be 1 to 1000000",
            ),
            (
                "pie limit_bytes 2Gi",
                "limit_bytes \"2Gi\": must be 1 to 1Gi bytes",
            ),
            ("bfifo limit 0", "limit_bytes \"0\": must be 1 to 1Gi bytes"),
            ("pie alpha 20", "alpha \"20\": must be 0 to 2 per second"),
            ("pie beta -1", "beta \"-1\": must be 0 to 2"),
            ("pie beta NaN", "beta \"NaN\": must be 0 to 2"),
            ("pie tupdate 10us", "tupdate \"10us\": must be 1ms to 10s"),
        ] {
            let e = AqmConfig::parse(text).unwrap_err().to_string();
            assert!(e.contains(needle), "{text:?}: {e}");
            assert!(!e.contains('\n'));
        }
    }
}
