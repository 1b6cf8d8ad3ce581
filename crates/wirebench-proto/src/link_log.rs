//! The link log of `wirebench lab --link-log`: what each direction of each emulated link did,
//! interval by interval. The lab produces it; the report crate writes it as CSV and plots it
//! from that CSV. It lives here, beside the packet log, so that neither needs the other.

use serde::{Deserialize, Serialize};
use thiserror::Error;

/// The CSV header of a link log: one row per link, direction and interval.
pub const HEADER: &str = "t_s,link,direction,packets_in,bytes_in,dropped_loss,\
dropped_queue,delivered,delivered_bytes,delivered_bps,max_queue_delay_ms,dropped_aqm,marked,capacity_bps";

/// What one direction did in one interval: packets are counted in the interval of their
/// arrival, deliveries in that in which they left the serializer (before the delay, as
/// `mm-link` counts departures).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LinkInterval {
    /// IP packets offered to the link...
    pub packets_in: u64,
    /// ... and their bytes.
    pub bytes_in: u64,
    /// Of those, lost at random...
    pub dropped_loss: u64,
    /// ... and dropped by the full queue.
    pub dropped_queue: u64,
    /// Packets delivered...
    pub delivered: u64,
    /// ... and their IP bytes.
    pub delivered_bytes: u64,
    /// The longest wait for the serializer of a packet that arrived in the interval, ns.
    pub max_queue_delay_ns: u64,
    /// Packets the AQM dropped in the interval (a full queue's drops are `dropped_queue`).
    #[serde(default)]
    pub dropped_aqm: u64,
    /// Packets of the interval's arrivals the AQM marked Congestion Experienced.
    #[serde(default)]
    pub marked: u64,
    /// Bytes the direction could have carried in the interval (wire bytes: IP length and
    /// overhead): a trace's opportunities × 1504, or rate × interval / 8; 0 for no limit.
    #[serde(default)]
    pub capacity_bytes: u64,
}

/// One link's log, both directions.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LinkTrace {
    /// The link's name: its two ends, `a-b` (`client-server` on one link).
    pub link: String,
    /// The length of an interval, ns; interval `k` starts `k` intervals after the lab did.
    pub interval_ns: u64,
    /// a → b ("up").
    pub up: Vec<LinkInterval>,
    /// b → a ("down").
    pub down: Vec<LinkInterval>,
}

/// The log of every link of a lab, in link order.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LinkLog {
    /// The links.
    pub links: Vec<LinkTrace>,
}

/// One row of a link log: a link's direction in one interval.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinkLogRow<'a> {
    /// The interval's number: it starts `index` intervals after the lab began.
    pub index: u64,
    /// The interval's length, ns.
    pub interval_ns: u64,
    /// The link's name.
    pub link: &'a str,
    /// `up` or `down`.
    pub direction: &'static str,
    /// What happened in it.
    pub counts: LinkInterval,
}

impl LinkLogRow<'_> {
    /// The interval's length, s.
    fn secs(&self) -> f64 {
        self.interval_ns as f64 / 1e9
    }

    /// The interval's start since the lab began, s (as the index times the length in s, so
    /// that the CSV's figures stay those it always had).
    pub fn t_s(&self) -> f64 {
        self.index as f64 * self.secs()
    }

    /// The rate the direction delivered in the interval, bits/s of IP packets.
    pub fn delivered_bps(&self) -> f64 {
        self.counts.delivered_bytes as f64 * 8.0 / self.secs()
    }

    /// The longest queue wait, ms.
    pub fn max_queue_delay_ms(&self) -> f64 {
        self.counts.max_queue_delay_ns as f64 / 1e6
    }

    /// The rate the direction could have carried in the interval, bits/s of wire bytes (0:
    /// no limit).
    pub fn capacity_bps(&self) -> f64 {
        self.counts.capacity_bytes as f64 * 8.0 / self.secs()
    }
}

impl LinkInterval {
    /// Whether a packet did anything in it (its capacity aside, which every interval of a
    /// limited link has).
    pub fn is_quiet(&self) -> bool {
        LinkInterval {
            capacity_bytes: 0,
            ..*self
        } == LinkInterval::default()
    }
}

impl LinkLog {
    /// Its rows: link by link, `up` then `down`, each from its first interval in which
    /// a packet did anything (capacity alone is not enough, so that the rows a log had
    /// before it counted capacity stay the same) to its last kept, quiet ones between
    /// included.
    pub fn rows(&self) -> impl Iterator<Item = LinkLogRow<'_>> + '_ {
        self.links.iter().flat_map(|l| {
            [("up", &l.up), ("down", &l.down)]
                .into_iter()
                .flat_map(move |(direction, bins)| {
                    let first = bins
                        .iter()
                        .position(|b| !b.is_quiet())
                        .unwrap_or(bins.len());
                    bins.iter()
                        .enumerate()
                        .skip(first)
                        .map(move |(k, counts)| LinkLogRow {
                            index: k as u64,
                            interval_ns: l.interval_ns,
                            link: &l.link,
                            direction,
                            counts: *counts,
                        })
                })
        })
    }
}

/// A link-log CSV value no link makes.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("line {line}: {column} = {value}: {why}")]
pub struct CsvValueError {
    /// The line, from 1.
    pub line: usize,
    /// The column's name.
    pub column: String,
    /// The field as written (cut to 40 characters).
    pub value: String,
    /// What it should be.
    pub why: &'static str,
}

/// The largest magnitude of a count, rate or delay in a link log (1e15: a petabit/s).
pub const MAX_CSV_VALUE: f64 = 1e15;

/// The latest interval start in a link log, s (31 years).
pub const MAX_CSV_SECONDS: f64 = 1e9;

/// Checks the numbers of a link-log CSV read back from a file: every field of a column other
/// than `link` and `direction` that parses as a number must be finite, not negative, and at
/// most [`MAX_CSV_VALUE`] ([`MAX_CSV_SECONDS`] for `t_s`). A crafted `1e308` or `inf` would
/// otherwise reach the plot's axes, whose tick loop does not end on them.
/// Fields that are not numbers are left to the reader that needs them.
///
/// # Errors
///
/// The first bad value, by line and column.
pub fn check_csv(text: &str) -> Result<(), CsvValueError> {
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap_or("").split(',').collect();
    for (n, line) in lines.enumerate() {
        for (i, field) in line.split(',').enumerate() {
            let column = header.get(i).copied().unwrap_or("?");
            if column == "link" || column == "direction" {
                continue;
            }
            let Ok(v) = field.trim().parse::<f64>() else {
                continue;
            };
            let max = if column == "t_s" {
                MAX_CSV_SECONDS
            } else {
                MAX_CSV_VALUE
            };
            let why = if !v.is_finite() {
                "not a finite number"
            } else if v < 0.0 {
                "cannot be negative"
            } else if v != 0.0 && v < 1e-100 {
                "too small (a non-zero value is at least 1e-100)"
            } else if v > max {
                "out of range"
            } else {
                continue;
            };
            return Err(CsvValueError {
                line: n + 2,
                column: column.chars().take(40).collect(),
                value: field.chars().take(40).collect(),
                why,
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_start_at_the_first_busy_interval_of_each_direction() {
        let busy = LinkInterval {
            packets_in: 1,
            ..LinkInterval::default()
        };
        let log = LinkLog {
            links: vec![LinkTrace {
                link: "a-b".into(),
                interval_ns: 100_000_000,
                up: vec![LinkInterval::default(), busy, LinkInterval::default()],
                down: vec![LinkInterval::default()],
            }],
        };
        let rows: Vec<_> = log.rows().map(|r| (r.index, r.direction)).collect();
        assert_eq!(rows, [(1, "up"), (2, "up")]);
        // Capacity is not activity: a trace-driven link's idle start is still left out.
        let idle = LinkInterval {
            capacity_bytes: 150_000,
            ..LinkInterval::default()
        };
        let log = LinkLog {
            links: vec![LinkTrace {
                link: "a-b".into(),
                interval_ns: 100_000_000,
                up: vec![
                    idle,
                    LinkInterval {
                        packets_in: 1,
                        ..idle
                    },
                    idle,
                ],
                down: vec![idle],
            }],
        };
        let rows: Vec<_> = log.rows().map(|r| (r.index, r.capacity_bps())).collect();
        assert_eq!(rows, [(1, 12e6), (2, 12e6)]);
    }

    #[test]
    fn csv_values_no_link_makes_are_refused() {
        let ok = format!("{HEADER}\n0.1,a-b,up,1,2,0,0,1,2,160,0.5,12000000\n");
        assert_eq!(check_csv(&ok), Ok(()));
        for (bad, column) in [
            ("1e308,a-b,up,1,2,0,0,1,2,160,0.5", "t_s"),
            ("0.1,a-b,up,1,2,0,0,1,2,inf,0.5", "delivered_bps"),
            ("0.1,a-b,up,1,2,0,0,1,2,160,-1", "max_queue_delay_ms"),
            ("0.1,a-b,up,1,2,0,0,1,2,NaN,0.5", "delivered_bps"),
            ("0.1,a-b,up,1,2,0,0,1,2,160,1e-308", "max_queue_delay_ms"),
            ("0.1,a-b,up,1,2,0,0,1,2,160,0.5,0,0,inf", "capacity_bps"),
            ("0.1,a-b,up,1,2,0,0,1,2,160,0.5,-1,0,0", "dropped_aqm"),
        ] {
            let e = check_csv(&format!("{HEADER}\n{bad}\n")).expect_err(bad);
            assert_eq!((e.line, e.column.as_str()), (2, column), "{bad}");
            assert!(!e.to_string().contains('\n'));
        }
    }
}
