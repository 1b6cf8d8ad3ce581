//! Turning results into what people read: the terminal table, live interval lines and JSON.
//!
//! Every output format is an [`Exporter`]; each works from a finished [`Results`] document,
//! never from live state (the live lines are built from the same interval records that end
//! up in the document).
#![deny(unsafe_code)]

use std::io::{self, Write};

use wirebench_proto::results::{IntervalRecord, Results, Role};
use wirebench_proto::spec::{Direction, Mechanism, Protocol};
use wirebench_proto::units::{format_bytes, format_rate_bps};

/// Writes a results document in one format.
pub trait Exporter {
    /// Writes `results` to `out`.
    fn export(&self, results: &Results, out: &mut dyn Write) -> io::Result<()>;
}

/// The results document as pretty-printed JSON (the contract in `docs/results.md`).
pub struct Json;

impl Exporter for Json {
    fn export(&self, results: &Results, out: &mut dyn Write) -> io::Result<()> {
        serde_json::to_writer_pretty(&mut *out, results)?;
        writeln!(out)
    }
}

/// The human summary: seed 001's table columns plus throughput of both sides and loss.
pub struct Table;

fn protocol_name(p: Protocol) -> &'static str {
    match p {
        Protocol::Tcp => "tcp",
        Protocol::Udp => "udp",
    }
}

fn mechanism_name(m: Mechanism) -> &'static str {
    match m {
        Mechanism::Stream => "streaming",
        Mechanism::StopAndWait => "stop_and_wait",
    }
}

/// Renders rows as columns, right-aligned, separated by two spaces.
fn columns(rows: &[Vec<String>]) -> String {
    let n = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..n)
        .map(|i| {
            rows.iter()
                .filter_map(|r| r.get(i))
                .map(|c| c.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for row in rows {
        let line: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:>w$}"))
            .collect();
        out.push_str(line.join("  ").trim_end());
        out.push('\n');
    }
    out
}

impl Exporter for Table {
    fn export(&self, r: &Results, out: &mut dyn Write) -> io::Result<()> {
        let e = &r.end;
        let loss = match &e.udp {
            Some(u) => format!("{} ({:.3}%)", u.lost, u.loss_ratio * 100.0),
            None => "0".into(),
        };
        let rows = vec![
            [
                "Time (ms)",
                "Sent messages",
                "Sent bytes",
                "Read messages",
                "Read bytes",
                "Protocol",
                "Mechanism",
                "Send rate",
                "Receive rate",
                "Lost",
            ]
            .map(String::from)
            .to_vec(),
            vec![
                format!("{:.0}", e.duration_s * 1000.0),
                e.sent.messages.to_string(),
                e.sent.bytes.to_string(),
                e.received.messages.to_string(),
                e.received.bytes.to_string(),
                protocol_name(r.test.protocol).into(),
                mechanism_name(r.test.mechanism).into(),
                format_rate_bps(e.sent_bps),
                format_rate_bps(e.received_bps),
                loss,
            ],
        ];
        out.write_all(columns(&rows).as_bytes())?;
        let dir = match r.test.direction {
            Direction::Forward => "client → server",
            Direction::Reverse => "server → client",
        };
        writeln!(
            out,
            "{dir} {}, {} messages of {} bytes; received {} in {:.3} s",
            r.server,
            protocol_name(r.test.protocol),
            r.test.size,
            format_bytes(e.received.bytes),
            e.received.duration_s,
        )?;
        if let Some(u) = &e.udp {
            if u.sequenced {
                writeln!(
                    out,
                    "udp: {} lost, {} duplicates, {} reordered, jitter {:.3} ms",
                    u.lost, u.duplicates, u.reordered, u.jitter_ms
                )?;
            } else {
                writeln!(
                    out,
                    "udp: messages of {} bytes are too short for the 16-byte header: only bytes and messages were counted (loss = sent - received; no reordering, duplicate or jitter figures)",
                    r.test.size
                )?;
            }
        }
        if r.test.mechanism == Mechanism::StopAndWait && r.test.protocol == Protocol::Udp {
            writeln!(out, "retransmits: {}", e.retransmits)?;
        }
        if let Some(err) = &r.error {
            writeln!(out, "incomplete: {err}")?;
        }
        Ok(())
    }
}

/// The header line printed above live interval lines.
pub fn interval_header(role: Role) -> String {
    let what = match role {
        Role::Sender => "sent",
        Role::Receiver => "received",
    };
    format!(
        "{:>15}  {:>12}  {:>10}  {:>15}  {:>8}",
        "interval (s)", what, "messages", "rate", "lost"
    )
}

/// One live line for a closed interval of this side.
pub fn interval_line(rec: &IntervalRecord, protocol: Protocol, role: Role) -> String {
    let secs = rec.end_ns.saturating_sub(rec.start_ns) as f64 / 1e9;
    let rate = if secs > 0.0 {
        rec.bytes as f64 * 8.0 / secs
    } else {
        0.0
    };
    let lost = if protocol == Protocol::Udp && role == Role::Receiver {
        rec.lost.to_string()
    } else {
        String::new()
    };
    format!(
        "{:>15}  {:>12}  {:>10}  {:>15}  {:>8}",
        format!(
            "{:.2}-{:.2}",
            rec.start_ns as f64 / 1e9,
            rec.end_ns as f64 / 1e9
        ),
        format_bytes(rec.bytes),
        rec.messages,
        format_rate_bps(rate),
        lost
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_align_right() {
        let rows = vec![
            vec!["a".to_string(), "bbb".to_string()],
            vec!["ccc".to_string(), "d".to_string()],
        ];
        assert_eq!(columns(&rows), "  a  bbb\nccc    d\n");
    }

    #[test]
    fn interval_line_shows_rate() {
        let rec = IntervalRecord {
            start_ns: 0,
            end_ns: 1_000_000_000,
            bytes: 125_000_000,
            messages: 1000,
            lost: 3,
        };
        let line = interval_line(&rec, Protocol::Udp, Role::Receiver);
        assert!(line.contains("1.00 Gbit/s"), "{line}");
        assert!(line.trim_end().ends_with('3'), "{line}");
    }
}
