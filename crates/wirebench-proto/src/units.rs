//! Parsing and formatting of the units the command line speaks: sizes, rates and durations.
//!
//! # Input grammar
//!
//! Every parser trims surrounding whitespace, then expects a plain decimal number followed by
//! an optional suffix:
//!
//! * The number is ASCII digits with an optional fractional part: `10`, `1.5`, `007`.
//!   A leading sign, a bare dot (`.5`, `5.`), exponents (`1e9`), hex (`0x10`), `NaN`, `inf`
//!   and non-ASCII digits are all rejected.
//! * Whitespace between the number and the suffix is allowed (`10 M`, `1.50 KB`,
//!   `943.21 Mbit/s`, `250 ms`), so everything the `format_*` functions print parses back.
//!   Whitespace *inside* the suffix is not (`10 M B` is an error).
//! * Arithmetic is exact: the integer and fractional digits are handled as integers, never
//!   through `f64`, so `1.1G` is exactly `1_100_000_000`.
//!
//! | Parser             | Suffixes (all ASCII case-insensitive)                               | Fractions                         |
//! |--------------------|---------------------------------------------------------------------|-----------------------------------|
//! | [`parse_size`]     | `K M G T` (x1000), `Ki Mi Gi Ti` (x1024), then an optional `B`      | must give whole bytes, else error |
//! | [`parse_rate`]     | `k M G T` (x1000), then `bps`, `bit`, `bit/s`, `bits/s`, `b/s` or `pps` | bit/s: rounded, pps: whole |
//! | [`parse_duration`] | `ns`, `us`/`µs`/`μs`, `ms`, `s` (default), `m` (minutes), `h`       | rounded to the nanosecond         |
//!
//! Rounding is to the nearest integer, halves away from zero. A non-zero input that would
//! round to zero (`0.4` bit/s, `0.1ns`) is an error rather than silently becoming "unlimited"
//! or an empty duration.
//!
//! # Output
//!
//! * [`format_bytes`]: SI (1000-based) with two decimals from 1000 B up: `999 B`, `1.50 KB`,
//!   `1.05 MB`; the largest unit is `TB`.
//! * [`format_rate_bps`]: `999 bit/s`, `1.50 kbit/s`, `943.21 Mbit/s`; the largest unit is
//!   `Tbit/s`; negative or non-finite input gives `n/a`.
//! * [`format_duration`]: `850 ns` below 1 µs, three significant digits in µs and ms
//!   (`1.23 µs`, `12.3 µs`, `250 ms`), and seconds with two decimals from 1 s up (`1.50 s`,
//!   `90.00 s`).
//!
//! A value that would round up to 1000 of its unit moves to the next unit (`999_999` bytes
//! is `1.00 MB`, not `1000.00 KB`).

use std::time::Duration;

/// Why a size, rate or duration given on the command line could not be parsed.
///
/// Every variant holds the offending input (with surrounding whitespace trimmed); its
/// `Display` is a short lowercase phrase saying what is allowed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum UnitError {
    /// The text is not a number with a known size suffix.
    #[error(
        "invalid size '{0}': use a number with an optional suffix K, M, G, T (x1000) \
         or Ki, Mi, Gi, Ti (x1024), e.g. 64K, 1.5M, 2GiB"
    )]
    InvalidSize(String),
    /// The size is not a whole number of bytes, e.g. `1.5` or `0.1Ki`.
    #[error("invalid size '{0}': must be a whole number of bytes, e.g. 1.5K but not 1.5")]
    SizeNotWhole(String),
    /// The size does not fit in a `u64`.
    #[error("invalid size '{0}': too large, the maximum is 18446744073709551615 bytes")]
    SizeTooLarge(String),
    /// The text is not a number with a known rate suffix.
    #[error(
        "invalid rate '{0}': use a number with an optional suffix k, M, G, T (x1000) \
         and an optional unit bit/s (default), bps or pps, e.g. 100M, 2.5Gbit/s, 10kpps; \
         0 means unlimited"
    )]
    InvalidRate(String),
    /// A packet rate that is not a whole number of packets per second, e.g. `1.5pps`.
    #[error(
        "invalid rate '{0}': must be a whole number of packets per second, \
         e.g. 1.5kpps but not 1.5pps"
    )]
    RateNotWhole(String),
    /// iperf3's `RATE/BURST` form, e.g. `1G/100`.
    #[error(
        "'{0}' is iperf3's RATE/BURST form: wirebench has no bursts of N packets (a paced \
         stream sends what falls due in 50 us at once); give the rate alone, e.g. -b {1}"
    )]
    Burst(String, String),
    /// A non-zero bit rate that would round to 0 bit/s (which would mean unlimited).
    #[error("invalid rate '{0}': use at least 1 bit/s, or 0 for unlimited")]
    RateTooSmall(String),
    /// The rate does not fit in a `u64`.
    #[error("invalid rate '{0}': too large, the maximum is 18446744073709551615 per second")]
    RateTooLarge(String),
    /// The text is not a number with a known duration unit.
    #[error(
        "invalid duration '{0}': use a number with an optional unit ns, us, ms, s, m, h \
         (default s), e.g. 250ms, 1.5s, 2m"
    )]
    InvalidDuration(String),
    /// A non-zero duration that would round to 0 ns.
    #[error("invalid duration '{0}': use at least 1ns, or 0")]
    DurationTooSmall(String),
    /// The duration exceeds `u64::MAX` nanoseconds (about 584 years).
    #[error(
        "invalid duration '{0}': too large, the maximum is 18446744073709551615ns \
         (about 584 years)"
    )]
    DurationTooLarge(String),
}

/// A sending rate as the user gave it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rate {
    /// Bits per second; 0 means unlimited.
    BitsPerSecond(u64),
    /// Packets (messages) per second. `0pps` parses to `PacketsPerSecond(0)`; what it means
    /// is up to the caller.
    PacketsPerSecond(u64),
}

/// Parses a size in bytes, e.g. `64K` (64 000), `2GiB` (2 147 483 648), `1.5M`, `500`.
///
/// Suffixes `K`, `M`, `G`, `T` are powers of 1000 and `Ki`, `Mi`, `Gi`, `Ti` powers of 1024,
/// each optionally followed by `B`; all case-insensitive. A fraction is allowed if the
/// result is a whole number of bytes (`0.5Ki` is 512, `1.5` is an error).
///
/// # Errors
///
/// [`UnitError::InvalidSize`] for malformed text, [`UnitError::SizeNotWhole`] for a
/// fractional byte count and [`UnitError::SizeTooLarge`] above `u64::MAX`.
pub fn parse_size(s: &str) -> Result<u64, UnitError> {
    let t = s.trim();
    let invalid = || UnitError::InvalidSize(t.to_owned());
    let too_large = || UnitError::SizeTooLarge(t.to_owned());
    let (number, suffix) = split_number(t).ok_or_else(invalid)?;
    let multiplier = size_multiplier(suffix).ok_or_else(invalid)?;
    let scaled = number.scale(multiplier).ok_or_else(too_large)?;
    let bytes = u64::try_from(scaled.floor).map_err(|_| too_large())?;
    if !scaled.exact {
        return Err(UnitError::SizeNotWhole(t.to_owned()));
    }
    Ok(bytes)
}

/// Parses a sending rate, e.g. `10M` (10 Mbit/s), `2.5Gbit/s`, `100kpps`, `0` (unlimited).
///
/// The optional SI prefix `k`, `M`, `G`, `T` is a power of 1000 (binary prefixes are not
/// accepted); the optional unit is `bps`, `bit` (tc's `10mbit`), `bit/s`, `bits/s` or `b/s`
/// (the default) or `pps`.
/// Everything is case-insensitive, so `10MBPS` is 10 Mbit/s too.
///
/// A fractional bit rate is rounded to the nearest bit/s, halves up (`1.5` is 2 bit/s,
/// `1.0000001k` is 1000 bit/s); a packet rate must come out whole (`1.5kpps` is fine,
/// `1.5pps` is not).
///
/// # Errors
///
/// [`UnitError::InvalidRate`] for malformed text, [`UnitError::RateNotWhole`] for a
/// fractional packet rate, [`UnitError::RateTooSmall`] for a non-zero bit rate that rounds
/// to 0, and [`UnitError::RateTooLarge`] above `u64::MAX`.
pub fn parse_rate(s: &str) -> Result<Rate, UnitError> {
    let t = s.trim();
    if let Some((rate, burst)) = t.rsplit_once('/') {
        if !burst.is_empty() && burst.bytes().all(|b| b.is_ascii_digit()) {
            return Err(UnitError::Burst(t.to_owned(), rate.to_owned()));
        }
    }
    let invalid = || UnitError::InvalidRate(t.to_owned());
    let too_large = || UnitError::RateTooLarge(t.to_owned());
    let (number, suffix) = split_number(t).ok_or_else(invalid)?;
    let (multiplier, packets) = rate_suffix(suffix).ok_or_else(invalid)?;
    let scaled = number.scale(multiplier).ok_or_else(too_large)?;
    if packets {
        let pps = u64::try_from(scaled.floor).map_err(|_| too_large())?;
        if !scaled.exact {
            return Err(UnitError::RateNotWhole(t.to_owned()));
        }
        Ok(Rate::PacketsPerSecond(pps))
    } else {
        let bits = scaled.rounded().ok_or_else(too_large)?;
        let bits = u64::try_from(bits).map_err(|_| too_large())?;
        if bits == 0 && !scaled.exact {
            return Err(UnitError::RateTooSmall(t.to_owned()));
        }
        Ok(Rate::BitsPerSecond(bits))
    }
}

/// Parses a duration, e.g. `250ms`, `1.5s`, `2m`, `1h`, `500us`, or `10` (seconds).
///
/// Units are `ns`, `us` (or `µs`/`μs`), `ms`, `s`, `m` (minutes) and `h`, ASCII
/// case-insensitive; a bare number is seconds. The result is rounded to the nearest
/// nanosecond, halves up. The maximum is `u64::MAX` nanoseconds (about 584 years), so the
/// result can always be added to an `Instant` or turned into `u64` nanoseconds.
///
/// # Errors
///
/// [`UnitError::InvalidDuration`] for malformed text, [`UnitError::DurationTooSmall`] for a
/// non-zero value that rounds to 0 ns, and [`UnitError::DurationTooLarge`] above the maximum.
pub fn parse_duration(s: &str) -> Result<Duration, UnitError> {
    let t = s.trim();
    let invalid = || UnitError::InvalidDuration(t.to_owned());
    let too_large = || UnitError::DurationTooLarge(t.to_owned());
    let (number, suffix) = split_number(t).ok_or_else(invalid)?;
    let nanos_per_unit = duration_unit(suffix).ok_or_else(invalid)?;
    let scaled = number.scale(nanos_per_unit).ok_or_else(too_large)?;
    let nanos = scaled.rounded().ok_or_else(too_large)?;
    let nanos = u64::try_from(nanos).map_err(|_| too_large())?;
    if nanos == 0 && !scaled.exact {
        return Err(UnitError::DurationTooSmall(t.to_owned()));
    }
    Ok(Duration::from_nanos(nanos))
}

/// Formats a byte count with SI (1000-based) units: `999 B`, `1.50 KB`, `1.05 MB`,
/// `2.15 GB`, up to `TB` (`18446744.07 TB` for `u64::MAX`).
///
/// Two decimals from 1000 B up, rounded half up with exact integer arithmetic.
pub fn format_bytes(bytes: u64) -> String {
    const UNITS: [&str; 4] = ["KB", "MB", "GB", "TB"];
    if bytes < 1000 {
        return format!("{bytes} B");
    }
    let bytes = u128::from(bytes);
    let mut divisor: u128 = 1000;
    let mut unit = 0;
    while unit + 1 < UNITS.len() && bytes >= divisor * 1000 {
        divisor *= 1000;
        unit += 1;
    }
    let mut hundredths = div_round(bytes * 100, divisor);
    if hundredths >= 100_000 && unit + 1 < UNITS.len() {
        divisor *= 1000;
        unit += 1;
        hundredths = div_round(bytes * 100, divisor);
    }
    format!(
        "{}.{:02} {}",
        hundredths / 100,
        hundredths % 100,
        UNITS.get(unit).copied().unwrap_or("TB")
    )
}

/// Formats a bit rate with SI (1000-based) units: `0 bit/s`, `999 bit/s`, `1.50 kbit/s`,
/// `943.21 Mbit/s`, `2.50 Gbit/s`, up to `Tbit/s`.
///
/// Below 1000 bit/s the value is rounded to a whole number; from there on it has two
/// decimals. Negative or non-finite input gives `n/a`.
pub fn format_rate_bps(bits_per_second: f64) -> String {
    const UNITS: [&str; 4] = ["kbit/s", "Mbit/s", "Gbit/s", "Tbit/s"];
    let bps = bits_per_second;
    if !bps.is_finite() || bps < 0.0 {
        return "n/a".to_owned();
    }
    let whole = bps.round();
    if whole < 1000.0 {
        // `as` saturates and maps -0.0 to 0; the value is in 0..1000 here anyway.
        return format!("{} bit/s", whole as u64);
    }
    let mut divisor = 1000.0;
    let mut unit = 0;
    while unit + 1 < UNITS.len() && bps >= divisor * 1000.0 {
        divisor *= 1000.0;
        unit += 1;
    }
    let mut hundredths = (bps / divisor * 100.0).round();
    if hundredths >= 100_000.0 && unit + 1 < UNITS.len() {
        divisor *= 1000.0;
        unit += 1;
        hundredths = (bps / divisor * 100.0).round();
    }
    format!(
        "{:.2} {}",
        hundredths / 100.0,
        UNITS.get(unit).copied().unwrap_or("Tbit/s")
    )
}

/// Formats a duration for people: `850 ns` below 1 µs; three significant digits in µs and
/// ms (`1.23 µs`, `12.3 µs`, `250 ms`); seconds with two decimals from 1 s up (`1.50 s`,
/// `90.00 s`, `3600.00 s`).
///
/// Rounding is half up; a value that rounds to 1000 of its unit moves to the next unit
/// (999 999 ns is `1.00 ms`).
pub fn format_duration(d: Duration) -> String {
    let nanos = d.as_nanos();
    if nanos < 1000 {
        return format!("{nanos} ns");
    }
    for (unit, name) in [(1_000_u128, "µs"), (1_000_000, "ms")] {
        if nanos < unit * 1000 {
            if let Some(text) = three_significant_digits(nanos, unit) {
                return format!("{text} {name}");
            }
        }
    }
    let centis = div_round(nanos, 10_000_000);
    format!("{}.{:02} s", centis / 100, centis % 100)
}

/// `value / unit` (with `unit <= value < 1000 * unit`) to three significant digits, or `None`
/// if it rounds up to 1000.
fn three_significant_digits(value: u128, unit: u128) -> Option<String> {
    for (decimals, scale) in [(2_usize, 100_u128), (1, 10), (0, 1)] {
        let rounded = div_round(value * scale, unit);
        if rounded < 1000 {
            return Some(if decimals == 0 {
                rounded.to_string()
            } else {
                format!(
                    "{}.{:0decimals$}",
                    rounded / scale,
                    rounded % scale,
                    decimals = decimals
                )
            });
        }
    }
    None
}

/// `n / d` rounded half up. Callers keep `n` far below `u128::MAX` and `d > 0`.
fn div_round(n: u128, d: u128) -> u128 {
    n.saturating_add(d / 2) / d.max(1)
}

/// A non-negative decimal number as written: ASCII digits before and after the dot.
#[derive(Debug, Clone, Copy)]
struct Decimal<'a> {
    int: &'a str,
    frac: &'a str,
}

/// `Decimal * multiplier`, split into the integer part and how the remainder compares.
#[derive(Debug, Clone, Copy)]
struct Scaled {
    /// The product, rounded down.
    floor: u128,
    /// The product has no fractional part.
    exact: bool,
    /// The fractional part is at least one half.
    round_up: bool,
}

impl Scaled {
    /// The product rounded to the nearest integer, halves up; `None` on overflow.
    fn rounded(self) -> Option<u128> {
        self.floor.checked_add(u128::from(self.round_up))
    }
}

impl Decimal<'_> {
    /// Multiplies by `multiplier` exactly, however many digits there are; `None` if the
    /// integer part of the product does not fit in a `u128`.
    fn scale(self, multiplier: u128) -> Option<Scaled> {
        let mut int: u128 = 0;
        for b in self.int.bytes() {
            int = int.checked_mul(10)?.checked_add(digit(b)?)?;
        }
        // Long multiplication of the fractional digits by `multiplier`, least significant
        // digit first: what carries out of the last (leftmost) digit is the integer part of
        // `0.frac * multiplier`, and the digits left behind are its fractional part, the
        // most significant of them last.
        let mut carry: u128 = 0;
        let mut exact = true;
        let mut leading_remainder_digit = 0;
        for b in self.frac.bytes().rev() {
            let x = digit(b)?.checked_mul(multiplier)?.checked_add(carry)?;
            leading_remainder_digit = x % 10;
            carry = x / 10;
            exact &= leading_remainder_digit == 0;
        }
        let floor = int.checked_mul(multiplier)?.checked_add(carry)?;
        Some(Scaled {
            floor,
            exact,
            round_up: leading_remainder_digit >= 5,
        })
    }
}

/// The value of an ASCII digit.
fn digit(b: u8) -> Option<u128> {
    char::from(b).to_digit(10).map(u128::from)
}

/// Splits trimmed text into a decimal number and its suffix, skipping whitespace between
/// the two. `None` unless the text starts with `digits` or `digits.digits`.
fn split_number(s: &str) -> Option<(Decimal<'_>, &str)> {
    let end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (number, rest) = s.split_at(end);
    let (int, frac) = match number.split_once('.') {
        None => (number, ""),
        Some((int, frac)) if !frac.is_empty() && frac.bytes().all(|b| b.is_ascii_digit()) => {
            (int, frac)
        }
        Some(_) => return None,
    };
    if int.is_empty() {
        return None;
    }
    Some((Decimal { int, frac }, rest.trim_start()))
}

/// The byte multiplier of a size suffix.
fn size_multiplier(suffix: &str) -> Option<u128> {
    let lower = suffix.to_ascii_lowercase();
    let prefix = lower.strip_suffix('b').unwrap_or(&lower);
    Some(match prefix {
        "" => 1,
        "k" => 1_000,
        "m" => 1_000_000,
        "g" => 1_000_000_000,
        "t" => 1_000_000_000_000,
        "ki" => 1 << 10,
        "mi" => 1 << 20,
        "gi" => 1 << 30,
        "ti" => 1 << 40,
        _ => return None,
    })
}

/// The multiplier of a rate suffix and whether it counts packets (else bits).
fn rate_suffix(suffix: &str) -> Option<(u128, bool)> {
    // An upper-case B means bytes ("10MB/s"): rates are in bits, and reading it as bits
    // would be off by 8, so it is refused rather than guessed.
    if suffix.contains('B') {
        return None;
    }
    let lower = suffix.to_ascii_lowercase();
    let (multiplier, unit) = [
        ("k", 1_000),
        ("m", 1_000_000),
        ("g", 1_000_000_000),
        ("t", 1_000_000_000_000),
    ]
    .into_iter()
    .find_map(|(prefix, multiplier)| lower.strip_prefix(prefix).map(|unit| (multiplier, unit)))
    .unwrap_or((1, lower.as_str()));
    match unit {
        // `bit` as tc writes rates (`10mbit`, `100kbit`).
        "" | "bps" | "bit" | "bit/s" | "bits/s" | "b/s" => Some((multiplier, false)),
        "pps" => Some((multiplier, true)),
        _ => None,
    }
}

/// Nanoseconds per duration unit.
fn duration_unit(suffix: &str) -> Option<u128> {
    const SECOND: u128 = 1_000_000_000;
    Some(match suffix.to_ascii_lowercase().as_str() {
        "ns" => 1,
        // U+00B5 MICRO SIGN and U+03BC GREEK SMALL LETTER MU look the same.
        "us" | "\u{b5}s" | "\u{3bc}s" => 1_000,
        "ms" => 1_000_000,
        "" | "s" => SECOND,
        "m" => 60 * SECOND,
        "h" => 3600 * SECOND,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The expected result of a parse: a value, or the error variant (which gets the trimmed
    /// input).
    type Expect<T> = Result<T, fn(String) -> UnitError>;

    fn check<T: Clone + PartialEq + std::fmt::Debug>(
        parse: fn(&str) -> Result<T, UnitError>,
        cases: &[(&str, Expect<T>)],
    ) {
        for (input, expected) in cases {
            let expected = match expected {
                Ok(v) => Ok(v.clone()),
                Err(variant) => Err(variant(input.trim().to_owned())),
            };
            assert_eq!(parse(input), expected, "input {input:?}");
        }
    }

    #[test]
    fn parse_size_snapshot() {
        use UnitError::{InvalidSize as Bad, SizeNotWhole as Frac, SizeTooLarge as Big};
        check(
            parse_size,
            &[
                ("0", Ok(0)),
                ("500", Ok(500)),
                ("500B", Ok(500)),
                ("500b", Ok(500)),
                ("64K", Ok(64_000)),
                ("64k", Ok(64_000)),
                ("64KB", Ok(64_000)),
                ("64kB", Ok(64_000)),
                ("64kb", Ok(64_000)),
                ("1M", Ok(1_000_000)),
                ("1m", Ok(1_000_000)),
                ("1MB", Ok(1_000_000)),
                ("1G", Ok(1_000_000_000)),
                ("1T", Ok(1_000_000_000_000)),
                ("1Ki", Ok(1024)),
                ("1ki", Ok(1024)),
                ("1KI", Ok(1024)),
                ("1KiB", Ok(1024)),
                ("1kib", Ok(1024)),
                ("64KiB", Ok(65_536)),
                ("1Mi", Ok(1_048_576)),
                ("1MiB", Ok(1_048_576)),
                ("2GiB", Ok(2_147_483_648)),
                ("1Ti", Ok(1_099_511_627_776)),
                ("1.5K", Ok(1500)),
                ("1.50K", Ok(1500)),
                ("1.5M", Ok(1_500_000)),
                ("1.1G", Ok(1_100_000_000)),
                ("0.5Ki", Ok(512)),
                ("1.5Mi", Ok(1_572_864)),
                ("0.001K", Ok(1)),
                ("0.0009765625Ki", Ok(1)),
                ("1.0", Ok(1)),
                ("000064K", Ok(64_000)),
                (
                    "1.000000000000000000000000000000000000000000000000K",
                    Ok(1000),
                ),
                ("  64K  ", Ok(64_000)),
                ("\t64K\n", Ok(64_000)),
                ("64 K", Ok(64_000)),
                ("1.50 KB", Ok(1500)),
                ("18446744073709551615", Ok(u64::MAX)),
                ("18446744073709551615B", Ok(u64::MAX)),
                ("16777215Ti", Ok(16_777_215 << 40)),
                // Malformed.
                ("", Err(Bad)),
                (" ", Err(Bad)),
                ("K", Err(Bad)),
                ("B", Err(Bad)),
                ("KiB", Err(Bad)),
                ("12Q", Err(Bad)),
                ("-1", Err(Bad)),
                ("+1", Err(Bad)),
                ("-0", Err(Bad)),
                ("1e9", Err(Bad)),
                ("1E3", Err(Bad)),
                ("1.2.3", Err(Bad)),
                ("1.", Err(Bad)),
                (".5", Err(Bad)),
                (".", Err(Bad)),
                ("1..2", Err(Bad)),
                ("NaN", Err(Bad)),
                ("nan", Err(Bad)),
                ("inf", Err(Bad)),
                ("infinity", Err(Bad)),
                ("0x10", Err(Bad)),
                ("１０", Err(Bad)),
                ("1,000", Err(Bad)),
                ("1_000", Err(Bad)),
                ("10M B", Err(Bad)),
                ("10 M B", Err(Bad)),
                ("1 k i", Err(Bad)),
                ("1KK", Err(Bad)),
                ("1bb", Err(Bad)),
                ("1iB", Err(Bad)),
                ("1i", Err(Bad)),
                ("1P", Err(Bad)),
                ("1PiB", Err(Bad)),
                ("1Kbit", Err(Bad)),
                ("1K/s", Err(Bad)),
                ("64K!", Err(Bad)),
                ("1µ", Err(Bad)),
                // Not a whole number of bytes.
                ("1.5", Err(Frac)),
                ("0.5", Err(Frac)),
                ("1.1B", Err(Frac)),
                ("1.0001K", Err(Frac)),
                ("0.1Ki", Err(Frac)),
                ("0.00000000000001T", Err(Frac)),
                // Too large.
                ("18446744073709551616", Err(Big)),
                ("99999999999999999999999", Err(Big)),
                ("99999999999999999999999.5", Err(Big)),
                ("18446744073709551615K", Err(Big)),
                ("20000000T", Err(Big)),
                ("16777216Ti", Err(Big)),
                ("340282366920938463463374607431768211456", Err(Big)),
                ("340282366920938463463374607431768211455Ti", Err(Big)),
            ],
        );
    }

    #[test]
    fn iperf3s_burst_form_is_named() {
        let e = parse_rate("1G/100").unwrap_err();
        assert_eq!(e, UnitError::Burst("1G/100".into(), "1G".into()));
        assert!(e.to_string().contains("-b 1G"), "{e}");
        assert_eq!(
            parse_rate("2.5Gbit/s"),
            Ok(Rate::BitsPerSecond(2_500_000_000))
        );
    }

    #[test]
    fn parse_rate_snapshot() {
        use Rate::{BitsPerSecond as Bps, PacketsPerSecond as Pps};
        use UnitError::{
            InvalidRate as Bad, RateNotWhole as Frac, RateTooLarge as Big, RateTooSmall as Tiny,
        };
        check(
            parse_rate,
            &[
                ("0", Ok(Bps(0))),
                ("0.0", Ok(Bps(0))),
                ("0bps", Ok(Bps(0))),
                ("0M", Ok(Bps(0))),
                ("1", Ok(Bps(1))),
                ("10M", Ok(Bps(10_000_000))),
                ("10m", Ok(Bps(10_000_000))),
                ("10k", Ok(Bps(10_000))),
                ("10K", Ok(Bps(10_000))),
                ("2.5G", Ok(Bps(2_500_000_000))),
                ("1T", Ok(Bps(1_000_000_000_000))),
                ("10Mbps", Ok(Bps(10_000_000))),
                ("10MBPS", Err(Bad)),
                ("10MB/s", Err(Bad)),
                ("10mbps", Ok(Bps(10_000_000))),
                ("1Gbit/s", Ok(Bps(1_000_000_000))),
                ("1gbits/s", Ok(Bps(1_000_000_000))),
                ("1kb/s", Ok(Bps(1000))),
                ("500bps", Ok(Bps(500))),
                ("500bit/s", Ok(Bps(500))),
                // tc's spelling.
                ("10mbit", Ok(Bps(10_000_000))),
                ("100kbit", Ok(Bps(100_000))),
                ("1Gbit", Ok(Bps(1_000_000_000))),
                ("500b/s", Ok(Bps(500))),
                ("10 Mbit/s", Ok(Bps(10_000_000))),
                ("943.21 Mbit/s", Ok(Bps(943_210_000))),
                (" 10M ", Ok(Bps(10_000_000))),
                ("10 M", Ok(Bps(10_000_000))),
                // Bit rates round to the nearest bit/s, halves up.
                ("1.5", Ok(Bps(2))),
                ("2.4", Ok(Bps(2))),
                ("0.5", Ok(Bps(1))),
                ("1.0000001k", Ok(Bps(1000))),
                ("1.0005k", Ok(Bps(1001))),
                ("1.0004999k", Ok(Bps(1000))),
                ("18446744073709551615", Ok(Bps(u64::MAX))),
                ("18446744073709551614.5", Ok(Bps(u64::MAX))),
                // Packet rates.
                ("100kpps", Ok(Pps(100_000))),
                ("100Kpps", Ok(Pps(100_000))),
                ("1500pps", Ok(Pps(1500))),
                ("1500PPS", Ok(Pps(1500))),
                ("1.5kpps", Ok(Pps(1500))),
                ("1Mpps", Ok(Pps(1_000_000))),
                ("0pps", Ok(Pps(0))),
                ("10 kpps", Ok(Pps(10_000))),
                ("18446744073709551615pps", Ok(Pps(u64::MAX))),
                // Malformed.
                ("", Err(Bad)),
                (" ", Err(Bad)),
                ("M", Err(Bad)),
                ("bps", Err(Bad)),
                ("pps", Err(Bad)),
                ("10Q", Err(Bad)),
                ("10Mb", Err(Bad)),
                ("10Mbit", Ok(Bps(10_000_000))),
                ("10Mi", Err(Bad)),
                ("10MiB", Err(Bad)),
                ("1P", Err(Bad)),
                ("10kk", Err(Bad)),
                ("10 k bps", Err(Bad)),
                ("10M bps", Err(Bad)),
                ("10Mpps bps", Err(Bad)),
                ("10/s", Err(Bad)),
                ("-1", Err(Bad)),
                ("-1M", Err(Bad)),
                ("1e9", Err(Bad)),
                ("1.2.3", Err(Bad)),
                (".5M", Err(Bad)),
                ("NaN", Err(Bad)),
                ("inf", Err(Bad)),
                ("0x10", Err(Bad)),
                ("１０", Err(Bad)),
                ("unlimited", Err(Bad)),
                // A packet rate must be whole.
                ("1.5pps", Err(Frac)),
                ("0.5pps", Err(Frac)),
                ("1.0001kpps", Err(Frac)),
                // A non-zero bit rate must not round to 0 (unlimited).
                ("0.4", Err(Tiny)),
                ("0.49999", Err(Tiny)),
                ("0.0001k", Err(Tiny)),
                // Too large.
                ("18446744073709551616", Err(Big)),
                ("18446744073709551615.5", Err(Big)),
                ("99999999999999999999999", Err(Big)),
                ("20000000T", Err(Big)),
                ("18446744073709551616pps", Err(Big)),
                ("18446744073709551615.5pps", Err(Frac)),
                ("99999999999999999999999999999999999999999999", Err(Big)),
            ],
        );
    }

    #[test]
    fn parse_duration_snapshot() {
        use UnitError::{
            DurationTooLarge as Big, DurationTooSmall as Tiny, InvalidDuration as Bad,
        };
        let ns = Duration::from_nanos;
        let ms = Duration::from_millis;
        let secs = Duration::from_secs;
        check(
            parse_duration,
            &[
                ("0", Ok(Duration::ZERO)),
                ("0s", Ok(Duration::ZERO)),
                ("0.0ms", Ok(Duration::ZERO)),
                ("10", Ok(secs(10))),
                ("60s", Ok(secs(60))),
                ("1.5s", Ok(ms(1500))),
                ("1.5", Ok(ms(1500))),
                ("250ms", Ok(ms(250))),
                ("2m", Ok(secs(120))),
                ("1h", Ok(secs(3600))),
                ("1.5h", Ok(secs(5400))),
                ("0.5m", Ok(secs(30))),
                ("500us", Ok(ns(500_000))),
                ("500\u{b5}s", Ok(ns(500_000))),
                ("500\u{3bc}s", Ok(ns(500_000))),
                ("850ns", Ok(ns(850))),
                ("0.5ms", Ok(ns(500_000))),
                ("250MS", Ok(ms(250))),
                ("10S", Ok(secs(10))),
                ("1H", Ok(secs(3600))),
                ("2M", Ok(secs(120))),
                (" 1.5 s ", Ok(ms(1500))),
                ("12.3 µs", Ok(ns(12_300))),
                ("1.50 s", Ok(ms(1500))),
                ("90.00 s", Ok(secs(90))),
                // Rounded to the nearest nanosecond, halves up.
                ("1.0000000005s", Ok(ns(1_000_000_001))),
                ("1.0000000004999s", Ok(ns(1_000_000_000))),
                ("0.5ns", Ok(ns(1))),
                ("1.5ns", Ok(ns(2))),
                ("0.0000000005", Ok(ns(1))),
                // The maximum is u64::MAX nanoseconds.
                ("18446744073709551615ns", Ok(ns(u64::MAX))),
                ("18446744073.709551615s", Ok(ns(u64::MAX))),
                ("18446744073709551614.5ns", Ok(ns(u64::MAX))),
                ("5124095h", Ok(secs(5_124_095 * 3600))),
                // Malformed.
                ("", Err(Bad)),
                (" ", Err(Bad)),
                ("s", Err(Bad)),
                ("ms", Err(Bad)),
                ("10Q", Err(Bad)),
                ("10sec", Err(Bad)),
                ("10 sec", Err(Bad)),
                ("10min", Err(Bad)),
                ("1d", Err(Bad)),
                ("10ss", Err(Bad)),
                ("10 m s", Err(Bad)),
                ("1h30m", Err(Bad)),
                ("-1s", Err(Bad)),
                ("-1", Err(Bad)),
                ("1e3", Err(Bad)),
                ("1.2.3s", Err(Bad)),
                ("1.s", Err(Bad)),
                (".5s", Err(Bad)),
                ("NaN", Err(Bad)),
                ("inf", Err(Bad)),
                ("0x10", Err(Bad)),
                ("１０s", Err(Bad)),
                ("10µ", Err(Bad)),
                // A non-zero duration must not round to 0.
                ("0.4ns", Err(Tiny)),
                ("0.0000000001s", Err(Tiny)),
                // Too large.
                ("18446744073709551616ns", Err(Big)),
                ("18446744073709551615.5ns", Err(Big)),
                ("18446744074s", Err(Big)),
                ("5124096h", Err(Big)),
                ("99999999999999999999999", Err(Big)),
                ("340282366920938463463374607431768211456", Err(Big)),
            ],
        );
    }

    #[test]
    fn error_display_snapshot() {
        let cases = [
            (
                parse_size("12Q").err(),
                "invalid size '12Q': use a number with an optional suffix K, M, G, T (x1000) \
                 or Ki, Mi, Gi, Ti (x1024), e.g. 64K, 1.5M, 2GiB",
            ),
            (
                parse_size(" 1.5 ").err(),
                "invalid size '1.5': must be a whole number of bytes, e.g. 1.5K but not 1.5",
            ),
            (
                parse_size("20000000T").err(),
                "invalid size '20000000T': too large, the maximum is 18446744073709551615 bytes",
            ),
            (
                parse_rate("10Q").err(),
                "invalid rate '10Q': use a number with an optional suffix k, M, G, T (x1000) \
                 and an optional unit bit/s (default), bps or pps, e.g. 100M, 2.5Gbit/s, \
                 10kpps; 0 means unlimited",
            ),
            (
                parse_rate("1.5pps").err(),
                "invalid rate '1.5pps': must be a whole number of packets per second, \
                 e.g. 1.5kpps but not 1.5pps",
            ),
            (
                parse_rate("0.4").err(),
                "invalid rate '0.4': use at least 1 bit/s, or 0 for unlimited",
            ),
            (
                parse_rate("20000000T").err(),
                "invalid rate '20000000T': too large, the maximum is 18446744073709551615 \
                 per second",
            ),
            (
                parse_duration("10Q").err(),
                "invalid duration '10Q': use a number with an optional unit ns, us, ms, s, \
                 m, h (default s), e.g. 250ms, 1.5s, 2m",
            ),
            (
                parse_duration("0.1ns").err(),
                "invalid duration '0.1ns': use at least 1ns, or 0",
            ),
            (
                parse_duration("5124096h").err(),
                "invalid duration '5124096h': too large, the maximum is \
                 18446744073709551615ns (about 584 years)",
            ),
        ];
        for (error, expected) in cases {
            assert_eq!(error.map(|e| e.to_string()).as_deref(), Some(expected));
        }
    }

    #[test]
    fn format_bytes_snapshot() {
        let cases: &[(u64, &str)] = &[
            (0, "0 B"),
            (1, "1 B"),
            (999, "999 B"),
            (1000, "1.00 KB"),
            (1004, "1.00 KB"),
            (1005, "1.01 KB"),
            (1500, "1.50 KB"),
            (65_536, "65.54 KB"),
            (999_994, "999.99 KB"),
            (999_995, "1.00 MB"),
            (1_000_000, "1.00 MB"),
            (1_048_576, "1.05 MB"),
            (999_999_999, "1.00 GB"),
            (2_147_483_648, "2.15 GB"),
            (1_000_000_000_000, "1.00 TB"),
            (1_099_511_627_776, "1.10 TB"),
            (999_995_000_000_000, "1000.00 TB"),
            (u64::MAX, "18446744.07 TB"),
        ];
        for &(input, expected) in cases {
            assert_eq!(format_bytes(input), expected, "input {input}");
        }
    }

    #[test]
    fn format_rate_bps_snapshot() {
        let cases: &[(f64, &str)] = &[
            (0.0, "0 bit/s"),
            (-0.0, "0 bit/s"),
            (0.4, "0 bit/s"),
            (0.5, "1 bit/s"),
            (1.0, "1 bit/s"),
            (999.0, "999 bit/s"),
            (999.4, "999 bit/s"),
            (999.5, "1.00 kbit/s"),
            (1000.0, "1.00 kbit/s"),
            (1_500.0, "1.50 kbit/s"),
            (999_994.0, "999.99 kbit/s"),
            (999_996.0, "1.00 Mbit/s"),
            (1_000_000.0, "1.00 Mbit/s"),
            (943_210_000.0, "943.21 Mbit/s"),
            (2.5e9, "2.50 Gbit/s"),
            (1e12, "1.00 Tbit/s"),
            (1e15, "1000.00 Tbit/s"),
            (f64::NAN, "n/a"),
            (f64::INFINITY, "n/a"),
            (f64::NEG_INFINITY, "n/a"),
            (-1.0, "n/a"),
            (-1e-300, "n/a"),
        ];
        for &(input, expected) in cases {
            assert_eq!(format_rate_bps(input), expected, "input {input}");
        }
    }

    #[test]
    fn format_duration_snapshot() {
        let ns = Duration::from_nanos;
        let cases: &[(Duration, &str)] = &[
            (Duration::ZERO, "0 ns"),
            (ns(1), "1 ns"),
            (ns(850), "850 ns"),
            (ns(999), "999 ns"),
            (ns(1_000), "1.00 µs"),
            (ns(1_234), "1.23 µs"),
            (ns(1_235), "1.24 µs"),
            (ns(9_995), "10.0 µs"),
            (ns(12_345), "12.3 µs"),
            (ns(123_456), "123 µs"),
            (ns(999_499), "999 µs"),
            (ns(999_500), "1.00 ms"),
            (ns(1_000_000), "1.00 ms"),
            (ns(12_300_000), "12.3 ms"),
            (Duration::from_millis(250), "250 ms"),
            (ns(999_999_999), "1.00 s"),
            (Duration::from_secs(1), "1.00 s"),
            (Duration::from_millis(1500), "1.50 s"),
            (ns(1_234_999_999), "1.23 s"),
            (ns(1_235_000_000), "1.24 s"),
            (Duration::from_secs(90), "90.00 s"),
            (Duration::from_secs(3600), "3600.00 s"),
            (Duration::MAX, "18446744073709551616.00 s"),
        ];
        for &(input, expected) in cases {
            assert_eq!(format_duration(input), expected, "input {input:?}");
        }
    }

    #[test]
    fn junk_is_rejected_everywhere() {
        let junk = [
            "",
            " ",
            "\t\n",
            "K",
            "1e9",
            "-1",
            "+1",
            "1.2.3",
            "99999999999999999999999",
            "１０",
            "NaN",
            "inf",
            "-inf",
            "0x10",
            ".",
            "..",
            "1.",
            ".5",
            "1 2",
            "1\u{0}",
            "\u{0}",
            "💥",
            "1💥",
            "1K💥",
            "Ⅷ",
            "٣",
            "1\u{200b}",
            "10 M B",
            "1'000",
        ];
        for s in junk {
            assert!(parse_size(s).is_err(), "size {s:?}");
            assert!(parse_rate(s).is_err(), "rate {s:?}");
            assert!(parse_duration(s).is_err(), "duration {s:?}");
        }
        // Valid for some parsers only.
        assert!(parse_size("1.5").is_err());
        assert_eq!(parse_rate("1.5"), Ok(Rate::BitsPerSecond(2)));
        assert_eq!(parse_duration("1.5"), Ok(Duration::from_millis(1500)));
        // Whitespace between number and suffix is accepted; "10 M" is 10 minutes as a duration.
        assert_eq!(parse_size("10 M"), Ok(10_000_000));
        assert_eq!(parse_rate("10 M"), Ok(Rate::BitsPerSecond(10_000_000)));
        assert_eq!(parse_duration("10 M"), Ok(Duration::from_secs(600)));
    }

    #[test]
    fn nothing_panics() {
        // Every string of up to three characters over an alphabet of troublemakers...
        let alphabet = [
            "0", "1", "5", "9", ".", " ", "-", "+", "e", "x", "k", "K", "i", "B", "b", "p", "s",
            "/", "m", "M", "T", "n", "u", "h", "\u{b5}", "\u{3bc}", "１", "💥", "\u{0}",
        ];
        let mut inputs = vec![String::new()];
        let mut layer = vec![String::new()];
        for _ in 0..3 {
            layer = layer
                .iter()
                .flat_map(|prefix| alphabet.iter().map(move |c| format!("{prefix}{c}")))
                .collect();
            inputs.extend(layer.iter().cloned());
        }
        // ...plus longer pseudo-random ones (a fixed LCG, so failures reproduce).
        let mut state: u64 = 0x5eed;
        for _ in 0..20_000 {
            let mut s = String::new();
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1);
            let len = (state >> 33) % 48;
            for _ in 0..len {
                state = state
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1);
                let index = usize::try_from((state >> 33) % alphabet.len() as u64).unwrap_or(0);
                s.push_str(alphabet.get(index).copied().unwrap_or("0"));
            }
            inputs.push(s);
        }
        inputs.push("9".repeat(10_000));
        inputs.push(format!("0.{}1Ti", "0".repeat(10_000)));
        inputs.push(format!("{}1.{}h", "0".repeat(10_000), "9".repeat(10_000)));
        for s in &inputs {
            // Whatever is accepted must be printable without panicking too.
            if let Ok(n) = parse_size(s) {
                let _ = format_bytes(n);
            }
            if let Ok(Rate::BitsPerSecond(bps) | Rate::PacketsPerSecond(bps)) = parse_rate(s) {
                let _ = format_rate_bps(bps as f64);
            }
            if let Ok(d) = parse_duration(s) {
                let _ = format_duration(d);
            }
        }
        for x in [
            f64::MAX,
            f64::MIN,
            f64::MIN_POSITIVE,
            f64::EPSILON,
            -f64::EPSILON,
            1e300,
            u64::MAX as f64,
        ] {
            let _ = format_rate_bps(x);
        }
        let _ = format_duration(Duration::MAX);
        let _ = format_bytes(u64::MAX);
    }

    #[test]
    fn formatted_values_parse_back() {
        for bytes in [0, 999, 1000, 1500, 1_048_576, 2_147_483_648, u64::MAX] {
            let text = format_bytes(bytes);
            assert!(parse_size(&text).is_ok(), "{text:?}");
        }
        assert_eq!(parse_size(&format_bytes(1500)), Ok(1500));
        for bps in [0.0, 999.0, 1500.0, 943_210_000.0, 2.5e9, 1e12] {
            let text = format_rate_bps(bps);
            assert!(parse_rate(&text).is_ok(), "{text:?}");
        }
        assert_eq!(
            parse_rate(&format_rate_bps(943_210_000.0)),
            Ok(Rate::BitsPerSecond(943_210_000))
        );
        for nanos in [0, 850, 12_345, 250_000_000, 1_500_000_000, 90_000_000_000] {
            let text = format_duration(Duration::from_nanos(nanos));
            assert!(parse_duration(&text).is_ok(), "{text:?}");
        }
        assert_eq!(
            parse_duration(&format_duration(Duration::from_millis(250))),
            Ok(Duration::from_millis(250))
        );
    }
}
