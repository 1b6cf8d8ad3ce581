//! Axis scales: the SI unit an axis shows (chosen from the data's range, so 30,000 Mbit/s
//! reads 30 Gbit/s), clean ticks at 1, 2 and 5 × 10ⁿ, and tick labels without spurious
//! decimals ("10", not "10.0").

/// What an axis measures, in its base SI unit (values are stored in it: bit/s, s, bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Quantity {
    /// Bits per second.
    BitRate,
    /// Seconds.
    Seconds,
    /// Bytes (decimal prefixes, as the size flags take them).
    Bytes,
    /// A percentage (0 to 100).
    Percent,
    /// A fraction (0 to 1), shown as such.
    Fraction,
    /// A plain count or number without a unit (sequence numbers).
    Count,
}

/// A display unit: the values are divided by `divisor` and labelled `name`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Unit {
    /// What a value is divided by to show it in this unit.
    pub divisor: f64,
    /// The unit's symbol ("" for none).
    pub name: &'static str,
}

const RATES: [(f64, &str); 5] = [
    (1.0, "bit/s"),
    (1e3, "kbit/s"),
    (1e6, "Mbit/s"),
    (1e9, "Gbit/s"),
    (1e12, "Tbit/s"),
];
const TIMES: [(f64, &str); 4] = [(1e-9, "ns"), (1e-6, "µs"), (1e-3, "ms"), (1.0, "s")];
const BYTES: [(f64, &str); 5] = [
    (1.0, "B"),
    (1e3, "kB"),
    (1e6, "MB"),
    (1e9, "GB"),
    (1e12, "TB"),
];

impl Quantity {
    /// The unit that shows `magnitude` (the largest value on the axis) with 1 to 3 digits
    /// before the decimal point.
    pub fn unit_for(self, magnitude: f64) -> Unit {
        let table: &[(f64, &'static str)] = match self {
            Self::BitRate => &RATES,
            Self::Seconds => &TIMES,
            Self::Bytes => &BYTES,
            Self::Percent => &[(1.0, "%")],
            Self::Fraction | Self::Count => &[(1.0, "")],
        };
        let m = magnitude.abs();
        let (divisor, name) = table
            .iter()
            .rev()
            .find(|(d, _)| m >= *d * 0.9995)
            .or(table.first())
            .copied()
            .unwrap_or((1.0, ""));
        Unit { divisor, name }
    }
}

/// `v` with as few digits as it needs, at most 3 significant ones: 10, 0.5, 2.5, 1200.
pub fn clean(v: f64) -> String {
    if v == 0.0 || !v.is_finite() {
        return "0".into();
    }
    let digits = v.abs().log10().floor() as i32;
    let decimals = (2 - digits).max(0) as usize;
    let s = format!("{v:.decimals$}");
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// `v` to 3 significant digits, keeping trailing zeros that are significant ("1.20").
pub fn sig3(v: f64) -> String {
    if v == 0.0 || !v.is_finite() {
        return "0".into();
    }
    let digits = v.abs().log10().floor() as i32;
    let decimals = (2 - digits).max(0) as usize;
    format!("{v:.decimals$}")
}

/// `v` (in `q`'s base unit) with its own unit, 3 significant digits: "48.2 Mbit/s".
pub fn with_unit(q: Quantity, v: f64) -> String {
    let u = q.unit_for(v);
    let n = sig3(v / u.divisor);
    if u.name.is_empty() {
        n
    } else if u.name == "%" {
        format!("{n}%")
    } else {
        format!("{n} {}", u.name)
    }
}

/// A sweep parameter's value as a reader wants it, with its unit: `rate` `79370053` →
/// "79.4 Mbit/s", `size` `1472` → "1472 B", `bytes` `10M` → "10.0 MB", `time` `500ms` →
/// "500 ms"; a value that does not parse, or a parameter without a unit, as written.
pub fn param_value(name: &str, value: &str) -> String {
    use wirebench_proto::units::{parse_duration, parse_rate, parse_size, Rate};
    match name {
        "rate" => match parse_rate(value) {
            Ok(Rate::BitsPerSecond(0)) => "unlimited".into(),
            Ok(Rate::BitsPerSecond(b)) => with_unit(Quantity::BitRate, b as f64),
            Ok(Rate::PacketsPerSecond(p)) => format!("{p} packets/s"),
            Err(_) => value.into(),
        },
        // A datagram's size is read exactly: "1472 B", not "1.47 kB".
        "size" => match parse_size(value) {
            Ok(b) if b < 10_000 => format!("{b} B"),
            Ok(b) => with_unit(Quantity::Bytes, b as f64),
            Err(_) => value.into(),
        },
        "bytes" => parse_size(value).map_or(value.into(), |b| with_unit(Quantity::Bytes, b as f64)),
        "time" => parse_duration(value).map_or(value.into(), |d| {
            with_unit(Quantity::Seconds, d.as_secs_f64())
        }),
        // Streams (each way, for rrul): a count with its unit.
        "parallel" if value.parse::<u32>().is_ok() => format!("{value} streams"),
        _ => value.into(),
    }
}

/// A sweep parameter with its value and unit, for legends and labels: "size 1472 B".
pub fn param_label(name: &str, value: &str) -> String {
    format!("{name} {}", param_value(name, value))
}

/// The tick step among 1, 2 and 5 × 10ⁿ that cuts `span` into at most `max_ticks` parts.
pub fn nice_step(span: f64, max_ticks: usize) -> f64 {
    if span <= 0.0 || !span.is_finite() {
        return 1.0;
    }
    let raw = span / max_ticks.max(1) as f64;
    let decade = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * decade)
        .find(|s| *s >= raw * 0.9999)
        .unwrap_or(10.0 * decade)
}

/// A linear axis from `lo` to `hi` rounded out to whole steps, and its ticks.
pub fn linear_ticks(lo: f64, hi: f64, max_ticks: usize) -> (f64, f64, Vec<f64>) {
    let step = nice_step(hi - lo, max_ticks);
    let a = (lo / step).floor() * step;
    let b = (hi / step).ceil() * step;
    let n = ((b - a) / step).round() as i64;
    // Each tick from its index, so that 0.1 × 3 prints as 0.3, not 0.30000000000000004.
    let ticks = (0..=n)
        .map(|i| ((a / step).round() + i as f64) * step)
        .collect();
    (a, b, ticks)
}

/// Ticks of a log axis from `lo` to `hi` (both > 0, in the data's unit): each decade, and
/// 2 and 5 × 10ⁿ between them when the axis spans at most three decades.
pub fn log_ticks(lo: f64, hi: f64) -> Vec<f64> {
    if lo <= 0.0 || hi <= lo {
        return Vec::new();
    }
    let (d0, d1) = (lo.log10().floor() as i32, hi.log10().ceil() as i32);
    let mult: &[f64] = if (hi / lo).log10() <= 3.0 {
        &[1.0, 2.0, 5.0]
    } else {
        &[1.0]
    };
    let mut out = Vec::new();
    for d in d0..=d1 {
        for m in mult {
            let v = m * 10f64.powi(d);
            if v >= lo * 0.9999 && v <= hi * 1.0001 {
                out.push(v);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_follow_the_datas_range() {
        assert_eq!(Quantity::BitRate.unit_for(30_000e6).name, "Gbit/s");
        assert_eq!(Quantity::BitRate.unit_for(999e6).name, "Mbit/s");
        assert_eq!(Quantity::BitRate.unit_for(1e9).name, "Gbit/s");
        assert_eq!(Quantity::BitRate.unit_for(500.0).name, "bit/s");
        assert_eq!(Quantity::Seconds.unit_for(0.000_250).name, "µs");
        assert_eq!(Quantity::Seconds.unit_for(0.012).name, "ms");
        assert_eq!(Quantity::Seconds.unit_for(12.0).name, "s");
        assert_eq!(Quantity::Bytes.unit_for(64e3).name, "kB");
        assert_eq!(with_unit(Quantity::BitRate, 48.23e6), "48.2 Mbit/s");
        assert_eq!(with_unit(Quantity::Seconds, 0.0012), "1.20 ms");
    }

    #[test]
    fn parameters_read_in_si_units_with_3_significant_digits() {
        assert_eq!(param_value("rate", "79370053"), "79.4 Mbit/s");
        assert_eq!(param_value("rate", "5000000000"), "5.00 Gbit/s");
        assert_eq!(param_value("rate", "25k"), "25.0 kbit/s");
        assert_eq!(param_label("size", "1472"), "size 1472 B");
        assert_eq!(param_value("bytes", "10M"), "10.0 MB");
        assert_eq!(param_value("time", "500ms"), "500 ms");
        assert_eq!(param_value("profile", "cubic"), "cubic");
        assert_eq!(param_label("parallel", "4"), "parallel 4 streams");
        assert_eq!(param_value("rate", "fast"), "fast");
    }

    #[test]
    fn ticks_are_1_2_5_and_print_clean() {
        assert_eq!(nice_step(100.0, 6), 20.0);
        assert_eq!(nice_step(1.0, 5), 0.2);
        assert_eq!(nice_step(30.0, 6), 5.0);
        let (a, b, t) = linear_ticks(0.0, 0.93, 6);
        assert_eq!((a, b), (0.0, 1.0));
        let labels: Vec<String> = t.iter().map(|v| clean(*v)).collect();
        assert_eq!(labels, ["0", "0.2", "0.4", "0.6", "0.8", "1"]);
        assert_eq!(clean(10.0), "10");
        assert_eq!(clean(2.5), "2.5");
        assert_eq!(clean(1200.0), "1200");
        assert_eq!(sig3(0.1234), "0.123");
        assert_eq!(sig3(48.0), "48.0");
        assert_eq!(log_ticks(8e6, 1.25e9), [1e7, 2e7, 5e7, 1e8, 2e8, 5e8, 1e9]);
        assert_eq!(log_ticks(1e3, 1e9), [1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9]);
    }
}
