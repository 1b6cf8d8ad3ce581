//! The plan of a sweep: the parameters it varies (`--vary`), the grid of their values, and
//! the named presets.

use serde::{Deserialize, Serialize};
use wirebench_proto::units::{parse_duration, parse_rate, parse_size, Rate, UnitError};

use crate::plot::scale::{clean, with_unit, Quantity};

/// Why a `--vary` or a `--preset` was refused; each message says what is allowed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum VaryError {
    /// The name is not a parameter a sweep can vary.
    #[error(
        "--vary {0}: not a parameter (rate, size, bytes, time, mode, proto, parallel, direction, server)"
    )]
    UnknownParam(String),
    /// No `=` in the argument.
    #[error("--vary {0}: expected NAME=VALUES")]
    NoEquals(String),
    /// A range that is not `FROM..TO:log|lin:N`.
    #[error("--vary {0}: a range is FROM..TO:log|lin:N")]
    RangeSyntax(String),
    /// A range's point count outside 2 to 1000.
    #[error("--vary {0}: N must be 2 to 1000")]
    PointCount(String),
    /// A range's scale that is neither `log` nor `lin`.
    #[error("--vary {0}: the scale is log or lin")]
    Scale(String),
    /// A range whose ends are not `0 < FROM < TO`.
    #[error("--vary {0}: FROM must be above 0 and below TO")]
    RangeOrder(String),
    /// A list with no value in it.
    #[error("--vary {0}: no values")]
    NoValues(String),
    /// A rate range given in packets/s.
    #[error("a rate range takes bits/s (e.g. 1M..1G:log:10), not packets/s")]
    RangeInPackets,
    /// A range of a parameter that has no order (mode, proto, ...).
    #[error("--vary {0}: no ranges, give a list")]
    NoRanges(&'static str),
    /// A range end that is not a size or a rate.
    #[error(transparent)]
    Unit(#[from] UnitError),
    /// A preset name that is not one.
    #[error("--preset {0}: the presets are rate-sweep and transfer-time")]
    UnknownPreset(String),
}

/// A parameter of `run` that a sweep can vary.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Param {
    /// `-b`: bits/s (or `Npps`).
    Rate,
    /// `-l`: message size, bytes.
    Size,
    /// `-n`: amount, bytes.
    Bytes,
    /// `-t`: duration.
    Time,
    /// `--mode`.
    Mode,
    /// `--tcp` / `--udp`.
    Proto,
    /// `-P`.
    Parallel,
    /// `-R`: `forward` or `reverse`.
    Direction,
    /// The server, `HOST[:PORT]` (`--targets`, or varied like any parameter): one sweep
    /// measures several servers, each point saying which.
    Server,
    /// The host that runs a point's trials (`--mesh`): a label, matched by the shard
    /// assignment, not a flag of the test. A point whose client is its server is left out
    /// of the grid (a host does not measure itself).
    Client,
}

impl Param {
    fn parse(name: &str) -> Result<Self, VaryError> {
        Ok(match name {
            "rate" | "b" => Self::Rate,
            "size" | "l" => Self::Size,
            "bytes" | "n" => Self::Bytes,
            "time" | "t" => Self::Time,
            "mode" => Self::Mode,
            "proto" | "protocol" => Self::Proto,
            "parallel" | "P" => Self::Parallel,
            "direction" => Self::Direction,
            "server" => Self::Server,
            "client" => Self::Client,
            other => return Err(VaryError::UnknownParam(other.to_string())),
        })
    }

    /// The name in results and CSV headers.
    pub fn name(self) -> &'static str {
        match self {
            Self::Rate => "rate",
            Self::Size => "size",
            Self::Bytes => "bytes",
            Self::Time => "time",
            Self::Mode => "mode",
            Self::Proto => "proto",
            Self::Parallel => "parallel",
            Self::Direction => "direction",
            Self::Server => "server",
            Self::Client => "client",
        }
    }
}

/// A parameter's value (`value` of the parameter named `name`) as the report shows it: a
/// rate in bits/s with an SI prefix and 3 significant digits ("79.4 Mbit/s", where
/// `--vary` took `79370053`), 0 as "unlimited"; a size or an amount in bytes, exact below
/// 10 kB ("1472 B") and with a prefix above ("200 kB"); a time in seconds ("2.00 s").
/// Other parameters, and a value that does not parse, as given.
pub fn shown_value(name: &str, value: &str) -> String {
    let bytes = |n: u64| {
        if n < 10_000 {
            format!("{n} B")
        } else {
            with_unit(Quantity::Bytes, n as f64)
        }
    };
    let shown = match Param::parse(name) {
        Ok(Param::Rate) => parse_rate(value).ok().map(|r| match r {
            Rate::BitsPerSecond(0) | Rate::PacketsPerSecond(0) => "unlimited".to_string(),
            Rate::BitsPerSecond(b) => with_unit(Quantity::BitRate, b as f64),
            Rate::PacketsPerSecond(p) => format!("{} packets/s", clean(p as f64)),
        }),
        Ok(Param::Size | Param::Bytes) => parse_size(value).ok().map(bytes),
        Ok(Param::Time) => parse_duration(value)
            .ok()
            .map(|d| with_unit(Quantity::Seconds, d.as_secs_f64())),
        _ => None,
    };
    shown.unwrap_or_else(|| value.to_string())
}

/// The name of the column a CSV gives the parameter `name` in its base unit beside the
/// value as given: `rate_bps`, `size_bytes`, `amount_bytes` (`-n`), `time_s`; `None` for a
/// parameter without a unit.
pub fn base_unit_column(name: &str) -> Option<&'static str> {
    match Param::parse(name).ok()? {
        Param::Rate => Some("rate_bps"),
        Param::Size => Some("size_bytes"),
        Param::Bytes => Some("amount_bytes"),
        Param::Time => Some("time_s"),
        _ => None,
    }
}

/// The value `value` of the parameter `name` in its base unit (bits/s, bytes, seconds), as
/// [`base_unit_column`] names it; `None` where it has none (a rate in packets/s, a value
/// that does not parse, a parameter without a unit).
pub fn in_base_unit(name: &str, value: &str) -> Option<f64> {
    match Param::parse(name).ok()? {
        Param::Rate => match parse_rate(value).ok()? {
            Rate::BitsPerSecond(b) => Some(b as f64),
            Rate::PacketsPerSecond(_) => None,
        },
        Param::Size | Param::Bytes => parse_size(value).ok().map(|b| b as f64),
        Param::Time => parse_duration(value).ok().map(|d| d.as_secs_f64()),
        _ => None,
    }
}

/// A point's parameters as the report names it: "rate 79.4 Mbit/s, size 1472 B" (values
/// as [`shown_value`] shows them), or "every trial" for a point of no parameter.
pub fn point_words<'a>(point: impl IntoIterator<Item = (&'a String, &'a String)>) -> String {
    let words: Vec<String> = point
        .into_iter()
        .map(|(k, v)| format!("{k} {}", shown_value(k, v)))
        .collect();
    if words.is_empty() {
        "every trial".into()
    } else {
        words.join(", ")
    }
}

/// One `--vary NAME=VALUES`: the parameter and its values, as `run` would take them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Vary {
    /// What varies.
    pub param: Param,
    /// Its values, in order.
    pub values: Vec<String>,
}

/// A number of a range end: a size or a rate, with suffixes.
fn range_number(param: Param, s: &str) -> Result<f64, VaryError> {
    match param {
        Param::Rate => match parse_rate(s)? {
            Rate::BitsPerSecond(b) => Ok(b as f64),
            Rate::PacketsPerSecond(_) => Err(VaryError::RangeInPackets),
        },
        Param::Size | Param::Bytes | Param::Parallel => Ok(parse_size(s)? as f64),
        _ => Err(VaryError::NoRanges(param.name())),
    }
}

/// Parses `NAME=V1,V2,...` or `NAME=FROM..TO:log:N` / `NAME=FROM..TO:lin:N` (N points,
/// ends included; log spaces them evenly in ratio, as a rate sweep's send rates).
pub fn parse_vary(s: &str) -> Result<Vary, VaryError> {
    let (name, values) = s
        .split_once('=')
        .ok_or_else(|| VaryError::NoEquals(s.to_string()))?;
    let param = Param::parse(name.trim())?;
    let values = values.trim();
    // A host is a list only: its `HOST:PORT` or `[V6]:PORT` is no range.
    let hosts = matches!(param, Param::Server | Param::Client);
    let list: Vec<String> = if let Some((range, spec)) = values.split_once(':').filter(|_| !hosts) {
        let (from, to) = range
            .split_once("..")
            .ok_or_else(|| VaryError::RangeSyntax(s.to_string()))?;
        let (scale, n) = spec
            .split_once(':')
            .ok_or_else(|| VaryError::RangeSyntax(s.to_string()))?;
        let n: usize = n
            .parse()
            .ok()
            .filter(|n| (2..=1000).contains(n))
            .ok_or_else(|| VaryError::PointCount(s.to_string()))?;
        if scale != "log" && scale != "lin" {
            return Err(VaryError::Scale(s.to_string()));
        }
        let (a, b) = (range_number(param, from)?, range_number(param, to)?);
        if !(a > 0.0 && b > a) {
            return Err(VaryError::RangeOrder(s.to_string()));
        }
        (0..n)
            .map(|i| {
                let f = i as f64 / (n - 1) as f64;
                let v = match scale {
                    "log" => a * (b / a).powf(f),
                    "lin" => a + (b - a) * f,
                    _ => f64::NAN,
                };
                format!("{}", v.round() as u64)
            })
            .collect()
    } else {
        values
            .split(',')
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty())
            .collect()
    };
    if list.is_empty() {
        return Err(VaryError::NoValues(s.to_string()));
    }
    Ok(Vary {
        param,
        values: list,
    })
}

/// One point of the grid: a value for each varied parameter.
pub type Point = Vec<(Param, String)>;

/// Every combination of the values, the first `--vary` varying slowest, less the points
/// whose client is their server (a mesh's host does not measure itself).
pub fn grid(varies: &[Vary]) -> Vec<Point> {
    let mut points: Vec<Point> = vec![Vec::new()];
    for v in varies {
        points = points
            .into_iter()
            .flat_map(|p| {
                v.values.iter().map(move |val| {
                    let mut q = p.clone();
                    q.push((v.param, val.clone()));
                    q
                })
            })
            .collect();
    }
    let value = |p: &Point, param| p.iter().find(|(k, _)| *k == param).map(|(_, v)| v.clone());
    points.retain(
        |p| match (value(p, Param::Client), value(p, Param::Server)) {
            (Some(c), Some(s)) => c != s,
            _ => true,
        },
    );
    points
}

/// A ready-made experiment, named by what it measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Preset {
    /// Receive rate and data received against send rate, from 1 Mbit/s to 1 Gbit/s on a log
    /// scale, for 2-byte and 500-byte messages over UDP and TCP, 1 MB each.
    RateSweep,
    /// Transfer time against the amount of data, 1 MB to 1536 MB, over TCP and UDP, streaming
    /// and stop-and-wait, with the table of times and counts.
    TransferTime,
}

/// What a preset asks of a sweep: the amount of each trial and the parameters it varies.
#[derive(Debug, Clone, PartialEq)]
pub struct PresetPlan {
    /// `-n`: each trial's amount, bytes (`None`: the amount is varied).
    pub bytes: Option<u64>,
    /// The `--vary` arguments, as the command line takes them.
    pub varies: Vec<String>,
}

impl Preset {
    /// The names listed in help and errors.
    pub const NAMES: [&'static str; 2] = ["rate-sweep", "transfer-time"];

    /// Parses a preset's name. The names of the first releases (`seed-000`, `seed-001`)
    /// still work, unlisted, so that saved command lines keep running.
    pub fn parse(name: &str) -> Result<Self, VaryError> {
        match name {
            "rate-sweep" | "seed-000" => Ok(Self::RateSweep),
            "transfer-time" | "seed-001" => Ok(Self::TransferTime),
            other => Err(VaryError::UnknownPreset(other.to_string())),
        }
    }

    /// The preset's name.
    pub fn name(self) -> &'static str {
        match self {
            Self::RateSweep => "rate-sweep",
            Self::TransferTime => "transfer-time",
        }
    }

    /// The sweep this preset runs, its amounts and point counts scaled by `scale` (0 to 1)
    /// to keep it short.
    pub fn plan(self, scale: f64) -> PresetPlan {
        let scaled = |bytes: f64| ((bytes * scale).round() as u64).max(1000);
        match self {
            Self::RateSweep => {
                let points = ((12.0 * scale.sqrt()).round() as usize).clamp(3, 12);
                PresetPlan {
                    bytes: Some(scaled(1_000_000.0)),
                    varies: vec![
                        "proto=udp,tcp".into(),
                        "size=2,500".into(),
                        format!("rate=1M..1G:log:{points}"),
                    ],
                }
            }
            Self::TransferTime => {
                let sizes: Vec<String> = [1e6, 5e6, 10e6, 50e6, 100e6, 500e6, 1536e6]
                    .iter()
                    .map(|b| scaled(*b).to_string())
                    .collect();
                PresetPlan {
                    bytes: None,
                    varies: vec![
                        "proto=tcp,udp".into(),
                        "mode=stream,stop-and-wait".into(),
                        format!("bytes={}", sizes.join(",")),
                    ],
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_shown_in_si_units_and_given_in_base_units() {
        assert_eq!(shown_value("rate", "79370053"), "79.4 Mbit/s");
        assert_eq!(shown_value("rate", "5000000000"), "5.00 Gbit/s");
        assert_eq!(shown_value("b", "10M"), "10.0 Mbit/s");
        assert_eq!(shown_value("rate", "0"), "unlimited");
        assert_eq!(shown_value("rate", "2500pps"), "2500 packets/s");
        assert_eq!(shown_value("size", "1472"), "1472 B");
        assert_eq!(shown_value("bytes", "1536M"), "1.54 GB");
        assert_eq!(shown_value("time", "2s"), "2.00 s");
        assert_eq!(shown_value("proto", "udp"), "udp");
        assert_eq!(shown_value("rate", "fast"), "fast");
        let point: std::collections::BTreeMap<String, String> = [("rate", "100M"), ("size", "500")]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        assert_eq!(point_words(&point), "rate 100 Mbit/s, size 500 B");
        assert_eq!(
            point_words(&std::collections::BTreeMap::new()),
            "every trial"
        );
        assert_eq!(base_unit_column("rate"), Some("rate_bps"));
        assert_eq!(base_unit_column("n"), Some("amount_bytes"));
        assert_eq!(base_unit_column("mode"), None);
        assert_eq!(in_base_unit("rate", "79.37M"), Some(79_370_000.0));
        assert_eq!(in_base_unit("rate", "10kpps"), None);
        assert_eq!(in_base_unit("time", "250ms"), Some(0.25));
        assert_eq!(in_base_unit("size", "64K"), Some(64_000.0));
    }

    #[test]
    fn varies_parse_lists_and_ranges() {
        let v = parse_vary("size=2,500").expect("list");
        assert_eq!(
            (v.param, v.values.clone()),
            (Param::Size, vec!["2".into(), "500".into()])
        );
        let r = parse_vary("rate=1M..1G:log:4").expect("range");
        assert_eq!(
            r.values,
            vec!["1000000", "10000000", "100000000", "1000000000"]
        );
        let l = parse_vary("bytes=1M..4M:lin:4").expect("lin");
        assert_eq!(l.values, vec!["1000000", "2000000", "3000000", "4000000"]);
        for bad in [
            "size",
            "color=1",
            "rate=1G..1M:log:3",
            "rate=1M..1G:cube:3",
            "rate=1M..1G:log:1",
            "size=",
            "mode=1..2:lin:2",
        ] {
            assert!(parse_vary(bad).is_err(), "{bad}");
        }
        let msg = |s: &str| parse_vary(s).err().map(|e| e.to_string());
        assert_eq!(
            msg("color=1"),
            Some("--vary color: not a parameter (rate, size, bytes, time, mode, proto, parallel, direction, server)".into())
        );
        assert_eq!(
            msg("rate=1M..1G:log:1"),
            Some("--vary rate=1M..1G:log:1: N must be 2 to 1000".into())
        );
        assert_eq!(
            msg("rate=1kpps..2kpps:lin:2"),
            Some("a rate range takes bits/s (e.g. 1M..1G:log:10), not packets/s".into())
        );
        assert_eq!(
            msg("mode=1..2:lin:2"),
            Some("--vary mode: no ranges, give a list".into())
        );
        // Servers with ports, as `run` takes its HOST.
        let s = parse_vary("server=a:1,[::1]:2,b").expect("servers");
        assert_eq!(s.values, vec!["a:1", "[::1]:2", "b"]);
    }

    #[test]
    fn the_grid_is_every_combination_first_slowest() {
        let g = grid(&[
            parse_vary("proto=tcp,udp").expect("v"),
            parse_vary("size=1,2,3").expect("v"),
        ]);
        assert_eq!(g.len(), 6);
        assert_eq!(
            g[0],
            vec![(Param::Proto, "tcp".into()), (Param::Size, "1".into())]
        );
        assert_eq!(
            g[5],
            vec![(Param::Proto, "udp".into()), (Param::Size, "3".into())]
        );
        assert_eq!(grid(&[]), vec![Vec::<(Param, String)>::new()]);
        // A mesh: every ordered pair of distinct hosts.
        let mesh = grid(&[
            parse_vary("client=a,b,c").expect("v"),
            parse_vary("server=a,b,c").expect("v"),
        ]);
        assert_eq!(mesh.len(), 6);
        assert!(mesh.iter().all(|p| p[0].1 != p[1].1));
    }

    #[test]
    fn presets_parse_by_name_and_by_their_first_names() {
        assert_eq!(Preset::parse("rate-sweep"), Ok(Preset::RateSweep));
        assert_eq!(Preset::parse("seed-000"), Ok(Preset::RateSweep));
        assert_eq!(Preset::parse("transfer-time"), Ok(Preset::TransferTime));
        assert_eq!(Preset::parse("seed-001"), Ok(Preset::TransferTime));
        let e = Preset::parse("fast").expect_err("not a preset");
        assert_eq!(
            e.to_string(),
            "--preset fast: the presets are rate-sweep and transfer-time"
        );
        let p = Preset::TransferTime.plan(0.001);
        assert_eq!(p.bytes, None);
        assert!(p.varies.iter().all(|v| parse_vary(v).is_ok()), "{p:?}");
        assert_eq!(Preset::RateSweep.plan(1.0).bytes, Some(1_000_000));
    }
}
