//! The lines of a test as iperf3 prints them: the interval lines `run` prints as the test
//! goes and the summary the table begins with share these columns, so that a figure sits
//! under the same heading in both, and every line of a test has the same columns (a figure
//! one role does not have is left blank, never moved). Off a terminal they are the same
//! lines: no escape codes.

use wirebench_proto::spec::Mechanism;
use wirebench_proto::units::{format_bytes, format_rate_bps};

/// The units of rates (iperf3's `-f` letters).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RateUnits {
    /// The largest SI prefix that keeps the figure at or above 1, in bits/s.
    #[default]
    Auto,
    /// Bits/s with a fixed SI prefix: `k`, `m`, `g` (1e3, 1e6, 1e9).
    Bits(char),
    /// Bytes/s with a fixed prefix: `K`, `M`, `G` (1e3, 1e6, 1e9).
    Bytes(char),
}

/// A bit rate in the units asked for.
pub fn format_rate(bps: f64, units: RateUnits) -> String {
    let prefix = |c: char| match c.to_ascii_lowercase() {
        'k' => (1e3, "k"),
        'g' => (1e9, "G"),
        _ => (1e6, "M"),
    };
    match units {
        RateUnits::Auto => format_rate_bps(bps),
        RateUnits::Bits(c) => {
            let (div, name) = prefix(c);
            format!("{:.2} {name}bit/s", bps / div)
        }
        RateUnits::Bytes(c) => {
            let (div, name) = prefix(c);
            format!("{:.2} {name}B/s", bps / 8.0 / div)
        }
    }
}

/// A time in µs with 3 significant digits, in µs, ms or s (`24.3 µs`, `19.9 ms`): every
/// round trip and delay a line or summary prints is in this style.
pub fn format_us(us: f64) -> String {
    let (v, unit) = if us >= 1e6 {
        (us / 1e6, "s")
    } else if us >= 1e3 {
        (us / 1e3, "ms")
    } else {
        (us, "µs")
    };
    let decimals = if v >= 100.0 {
        0
    } else if v >= 10.0 {
        1
    } else {
        2
    };
    format!("{v:.decimals$} {unit}")
}

/// A share as iperf3 prints a loss: `0%`, else two significant digits (`7.5%`, `0.074%`).
pub fn format_percent(ratio: f64) -> String {
    let p = ratio * 100.0;
    if p <= 0.0 || !p.is_finite() {
        return "0%".into();
    }
    let digits = if p >= 10.0 {
        0
    } else {
        (1.0 - p.log10().floor()).clamp(1.0, 6.0) as usize
    };
    format!("{p:.digits$}%")
}

/// What a test's lines show beyond the time: fixed for the test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Columns {
    /// TCP: transfer and rate, and the sender's retransmits and (live) window; blank on a
    /// receiver's line.
    Tcp,
    /// UDP: transfer and rate, and the receiver's jitter and loss; blank on a sender's line.
    Udp,
    /// Request/response: transactions per second and the round trip's p50 and p99.
    Rr,
}

impl Columns {
    /// The columns of a test of this mechanism, whose messages are datagrams (UDP, QUIC's
    /// `--datagrams`) or a byte stream.
    pub fn of(datagrams: bool, mechanism: Mechanism) -> Self {
        match (datagrams, mechanism) {
            (_, m) if m.is_rr() => Self::Rr,
            (true, _) => Self::Udp,
            (false, _) => Self::Tcp,
        }
    }
}

/// One line's figures. Which are shown is the [`Layout`]'s columns'; a figure left `None`
/// is a blank cell.
#[derive(Debug, Clone, Copy, Default)]
pub struct Figures {
    /// Payload bytes.
    pub bytes: u64,
    /// Bits/s over the line's own span.
    pub bps: f64,
    /// TCP, a sender's line: segments retransmitted.
    pub retransmits: Option<u64>,
    /// TCP, a sender's live line: the congestion window at the interval's end, bytes.
    pub cwnd_bytes: Option<u64>,
    /// UDP, a receiver's line: RFC 3550 jitter, ms.
    pub jitter_ms: Option<f64>,
    /// UDP, a receiver's line: datagrams lost, and expected (received + lost); each `None`
    /// when unknown (without the sender's count the total is, and short datagrams without
    /// a header show no loss).
    pub lost: Option<(Option<u64>, Option<u64>)>,
    /// Request/response: transactions per second.
    pub per_s: f64,
    /// Request/response: the round trip's median, µs.
    pub rtt_p50_us: Option<f64>,
    /// Request/response: its 99th percentile, µs.
    pub rtt_p99_us: Option<f64>,
}

/// The columns of a block of lines: the live lines (`summary` false) or the summary's, which
/// ends each line with its role and has no window column.
#[derive(Debug, Clone, Copy)]
pub struct Layout {
    /// What the lines show.
    pub columns: Columns,
    /// The width of the tag (`[  1]`, `[SUM]`, with `--bidir` `[SUM][c->s]`).
    pub tag_width: usize,
    /// The summary's lines: no window, and the role at the end.
    pub summary: bool,
    /// Rate units.
    pub units: RateUnits,
}

/// The width of a line's time span: `10.00-11.00 s` and longer fit.
const SPAN: usize = 14;

impl Layout {
    /// The heading line.
    pub fn header(&self) -> String {
        let cells: Vec<(String, usize)> = match self.columns {
            Columns::Tcp if self.summary => vec![("Retr".into(), 5)],
            Columns::Tcp => vec![("Retr".into(), 5), ("Cwnd".into(), 9)],
            Columns::Udp => vec![("Jitter".into(), 8), ("Lost/Total".into(), 0)],
            Columns::Rr => vec![],
        };
        let head = match self.columns {
            Columns::Rr => vec![
                ("Trans/s".into(), 10),
                ("RTT p50".into(), 9),
                ("RTT p99".into(), 9),
            ],
            _ => vec![("Transfer".into(), 9), ("Bitrate".into(), 13)],
        };
        self.join("[ ID]", "Interval", head.into_iter().chain(cells))
    }

    /// A line: `tag`, the span `from_s`-`to_s`, the figures, and in a summary `role`.
    pub fn line(&self, tag: &str, from_s: f64, to_s: f64, f: &Figures, role: &str) -> String {
        let opt = |v: Option<String>| v.unwrap_or_default();
        let cells: Vec<(String, usize)> = match self.columns {
            Columns::Rr => vec![
                (format!("{:.0}", f.per_s), 10),
                (opt(f.rtt_p50_us.map(format_us)), 9),
                (opt(f.rtt_p99_us.map(format_us)), 9),
            ],
            Columns::Tcp => {
                let mut c = vec![
                    (format_bytes(f.bytes), 9),
                    (format_rate(f.bps, self.units), 13),
                    (opt(f.retransmits.map(|r| r.to_string())), 5),
                ];
                if !self.summary {
                    c.push((opt(f.cwnd_bytes.map(format_bytes)), 9));
                }
                c
            }
            Columns::Udp => vec![
                (format_bytes(f.bytes), 9),
                (format_rate(f.bps, self.units), 13),
                (opt(f.jitter_ms.map(|j| format!("{j:.3} ms"))), 8),
                (
                    opt(f.lost.map(|loss| match loss {
                        (Some(lost), Some(total)) => {
                            let ratio = if total > 0 {
                                lost as f64 / total as f64
                            } else {
                                0.0
                            };
                            format!("{lost}/{total} ({})", format_percent(ratio))
                        }
                        (Some(lost), None) => format!("{lost}/unknown"),
                        (None, _) => "unknown".into(),
                    })),
                    0,
                ),
            ],
        };
        let span = format!("{from_s:.2}-{to_s:.2} s");
        let mut text = self.join(tag, &span, cells.into_iter());
        if self.summary && !role.is_empty() {
            // The role in a column of its own, after a loss as a loopback test prints it.
            let width = match self.columns {
                Columns::Udp => self.width_to_loss() + 12,
                _ => text.chars().count(),
            };
            let pad = width.saturating_sub(text.chars().count());
            text.push_str(&" ".repeat(pad));
            text.push_str("  ");
            text.push_str(role);
        }
        text.trim_end().to_string()
    }

    /// The columns before a UDP line's loss.
    fn width_to_loss(&self) -> usize {
        self.tag_width + SPAN + 2 + 9 + 2 + 13 + 2 + 8 + 2
    }

    fn join(&self, tag: &str, span: &str, cells: impl Iterator<Item = (String, usize)>) -> String {
        let mut text = format!("{tag:<tw$}{span:>SPAN$}", tw = self.tag_width);
        for (cell, width) in cells {
            text.push_str("  ");
            text.push_str(&format!("{cell:>width$}"));
        }
        text
    }
}

/// A line's tag: `[  1]` for stream 1, `[SUM]` for `None`; with a direction (`--bidir`)
/// followed by it, `[SUM][c->s]`.
pub fn tag(stream: Option<u32>, direction: Option<&str>) -> String {
    let id = match stream {
        Some(n) => format!("[{n:>3}]"),
        None => "[SUM]".into(),
    };
    match direction {
        Some(d) => format!("{id}[{d}]"),
        None => id,
    }
}

/// The rule between intervals and before the summary, as iperf3's.
pub const RULE: &str = "- - - - - - - - - - - - - - - - - - - - - - - - -";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_line_of_a_layout_has_its_columns_in_the_same_place() {
        let live = Layout {
            columns: Columns::Tcp,
            tag_width: 5,
            summary: false,
            units: RateUnits::Auto,
        };
        let sender = Figures {
            bytes: 1_470_000_000,
            bps: 11.76e9,
            retransmits: Some(6),
            cwnd_bytes: Some(3_540_000),
            ..Figures::default()
        };
        let a = live.line("[  1]", 0.0, 1.0, &sender, "");
        let b = live.line("[SUM]", 9.0, 10.0, &sender, "");
        let h = live.header();
        assert_eq!(a.find("GB"), b.find("GB"), "{a}\n{b}");
        assert_eq!(a.find("Gbit/s"), b.find("Gbit/s"));
        assert_eq!(h.find("Cwnd").map(|i| i + 4), a.find(" MB").map(|i| i + 3));
        assert!(a.chars().count() <= 80 && h.chars().count() <= 80, "{a}");
    }

    #[test]
    fn a_summary_puts_the_role_last_and_a_receiver_leaves_the_senders_figures_blank() {
        let s = Layout {
            columns: Columns::Udp,
            tag_width: 5,
            summary: true,
            units: RateUnits::Bits('m'),
        };
        let recv = Figures {
            bytes: 24_280_000,
            bps: 97.12e6,
            jitter_ms: Some(0.038),
            lost: Some((Some(0), Some(16494))),
            ..Figures::default()
        };
        let sent = Figures {
            bytes: 24_280_000,
            bps: 97.12e6,
            ..Figures::default()
        };
        let r = s.line("[SUM]", 0.0, 2.0, &recv, "receiver");
        let t = s.line("[SUM]", 0.0, 2.0, &sent, "sender");
        assert!(r.contains("97.12 Mbit/s  0.038 ms  0/16494 (0%)"), "{r}");
        assert_eq!(r.find("receiver"), t.find("sender"), "{r}\n{t}");
        assert!(r.chars().count() <= 80, "{r}");
        let lossy = Figures {
            lost: Some((Some(3), Some(16494))),
            ..recv
        };
        let r = s.line("[SUM]", 0.0, 2.0, &lossy, "receiver");
        assert!(r.contains("  3/16494 (0.018%)  receiver"), "{r}");
    }

    #[test]
    fn times_and_shares_in_one_style() {
        assert_eq!(format_us(24.335), "24.3 µs");
        assert_eq!(format_us(19_946.662), "19.9 ms");
        assert_eq!(format_us(2.5e6), "2.50 s");
        assert_eq!(format_percent(0.0), "0%");
        assert_eq!(format_percent(0.075), "7.5%");
        assert_eq!(format_percent(0.00074), "0.074%");
        assert_eq!(format_percent(0.25), "25%");
        assert_eq!(tag(Some(2), Some("c->s")), "[  2][c->s]");
        assert_eq!(
            format_rate(12_111.62e6, RateUnits::Bits('m')),
            "12111.62 Mbit/s"
        );
        assert_eq!(format_rate(8e9, RateUnits::Bytes('G')), "1.00 GB/s");
    }
}
