//! CSV: a row per direction of a results document, a row per point of an experiment's
//! summary (`summary.csv`), and a packet log, a line per datagram and per lost sequence
//! number. Fields that may hold a comma or a quote (an error) are quoted as RFC 4180 says.

use std::io::{self, Read, Write};

use wirebench_proto::packet_log::{Arrived, LogError, Reader, Record};
use wirebench_proto::results::{End, Results};

use super::{BothDirections, Exporter};
use crate::experiment::summary::ExperimentSummary;

/// CSV with a header row. For results: a row per direction (`bidir`: forward, then
/// reverse), the columns of [`RESULTS_HEADER`]. For an experiment's summary: a row per point,
/// its parameters, `trials`, `failed`, then for each figure its mean, sd, min, median, max
/// and 95% CI half-width (`FIGURE_mean`, ...).
pub struct Csv;

/// The columns of a results row. Rates are bits/s, times seconds, as in the JSON.
pub const RESULTS_HEADER: &str = "direction,protocol,mechanism,size,duration_s,\
sent_messages,sent_bytes,received_messages,received_bytes,sent_bps,received_bps,\
lost,loss_ratio,jitter_ms,latency_p50_us,latency_p99_us,error";

/// A field quoted when it must be (RFC 4180): with a comma, a quote or a line break.
/// Control characters but line breaks and tabs (from a name or a peer's error) are written
/// as their escapes, `\u{1b}`: a spreadsheet or a terminal would act on them.
fn field(s: &str) -> String {
    let s = crate::text::printable_text(s);
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

fn opt<T: ToString>(v: Option<T>) -> String {
    v.map_or_else(String::new, |x| x.to_string())
}

/// The row of one direction's totals.
fn results_row(r: &Results, direction: &str, e: &End, out: &mut dyn Write) -> io::Result<()> {
    let udp = e.udp.as_ref();
    writeln!(
        out,
        "{direction},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}",
        r.test.protocol,
        r.test.mechanism,
        r.test.size,
        e.duration_s,
        opt(e.sent.messages),
        opt(e.sent.bytes),
        opt(e.received.messages),
        opt(e.received.bytes),
        opt(e.sent_bps),
        opt(e.received_bps),
        udp.map_or_else(String::new, |u| u.lost.to_string()),
        opt(udp.map(|u| u.loss_ratio)),
        opt(udp.filter(|u| u.sequenced).map(|u| u.jitter_ms)),
        opt(e.latency_us.as_ref().map(|l| l.p50)),
        opt(e.latency_us.as_ref().map(|l| l.p99)),
        field(r.error.as_deref().unwrap_or("")),
    )
}

/// A document's rows, without the header.
fn results_rows(r: &Results, out: &mut dyn Write) -> io::Result<()> {
    match &r.reverse {
        Some(rev) => {
            results_row(r, "forward", &r.end, out)?;
            results_row(r, "reverse", &rev.end, out)
        }
        None => results_row(r, &r.test.direction.to_string(), &r.end, out),
    }
}

impl Exporter<Results> for Csv {
    fn export(&self, doc: &Results, out: &mut dyn Write) -> io::Result<()> {
        writeln!(out, "{RESULTS_HEADER}")?;
        results_rows(doc, out)
    }
}

impl Exporter<[Results]> for Csv {
    fn export(&self, docs: &[Results], out: &mut dyn Write) -> io::Result<()> {
        writeln!(out, "{RESULTS_HEADER}")?;
        docs.iter().try_for_each(|d| results_rows(d, out))
    }
}

impl Exporter<BothDirections> for Csv {
    fn export(&self, doc: &BothDirections, out: &mut dyn Write) -> io::Result<()> {
        writeln!(out, "{RESULTS_HEADER}")?;
        results_rows(&doc.send, out)?;
        results_rows(&doc.receive, out)
    }
}

impl Exporter<ExperimentSummary> for Csv {
    fn export(&self, s: &ExperimentSummary, out: &mut dyn Write) -> io::Result<()> {
        let params: Vec<String> = {
            let mut v: Vec<String> = s
                .points
                .iter()
                .flat_map(|p| p.point.keys().cloned())
                .collect();
            v.sort();
            v.dedup();
            v
        };
        let figs: Vec<String> = {
            let mut v: Vec<String> = s
                .points
                .iter()
                .flat_map(|p| p.figures.keys().cloned())
                .collect();
            v.sort();
            v.dedup();
            v
        };
        let mut head: Vec<String> = params.clone();
        head.push("trials".into());
        head.push("failed".into());
        for f in &figs {
            for stat in ["mean", "sd", "min", "median", "max", "ci95"] {
                head.push(format!("{f}_{stat}"));
            }
        }
        writeln!(out, "{}", head.join(","))?;
        for p in &s.points {
            let mut row: Vec<String> = params
                .iter()
                .map(|k| field(p.point.get(k).map_or("", String::as_str)))
                .collect();
            row.push(p.trials.to_string());
            row.push(p.failed.to_string());
            for f in &figs {
                match p.figures.get(f) {
                    Some(x) => {
                        for v in [x.mean, x.stddev, x.min, x.median, x.max, x.ci95] {
                            row.push(format!("{v}"));
                        }
                    }
                    None => row.extend(std::iter::repeat_n(String::new(), 6)),
                }
            }
            writeln!(out, "{}", row.join(","))?;
        }
        Ok(())
    }
}

/// A datagram's one-way delay as the CSV prints it: arrival minus send in whole ns, exact
/// whatever the two times (a u64 difference taken modulo 2^64 and read as signed turned a
/// send time one ns past the arrival, or two times more than 2^63 ns apart, into a wrapped
/// number such as -1); empty when the send time is unknown (0: an iperf3 sender's
/// timestamp that was no time).
fn delay_ns(send_unix_ns: u64, arrival_unix_ns: u64) -> String {
    if send_unix_ns == 0 {
        return String::new();
    }
    (i128::from(arrival_unix_ns) - i128::from(send_unix_ns)).to_string()
}

/// Prints a packet log as CSV: `kind,seq,count,size,send_unix_ns,arrival_unix_ns,delay_ns`,
/// a line per datagram (kind `received`, `duplicate` or `too_old`) and a line per lost
/// sequence number (kind `lost`, `count` 1). A run longer than a million (a sender that
/// jumped, not a path that dropped) stays one line, its length in `count`; so does every run
/// once a million lost numbers have been written one by one, so that a crafted log of many
/// long runs cannot make gigabytes of CSV out of a few megabytes (issue 15).
///
/// A log can be larger than memory: it is read record by record, not as a document.
pub fn packet_log(input: impl Read, out: &mut impl Write) -> Result<(), LogError> {
    const MAX_EXPAND: u64 = 1_000_000;
    let mut budget = MAX_EXPAND;
    let reader = Reader::new(input)?;
    writeln!(
        out,
        "kind,seq,count,size,send_unix_ns,arrival_unix_ns,delay_ns"
    )?;
    for rec in reader {
        match rec? {
            Record::Datagram {
                kind,
                seq,
                size,
                send_unix_ns,
                arrival_unix_ns,
            } => {
                let kind = match kind {
                    Arrived::Received => "received",
                    Arrived::Duplicate => "duplicate",
                    Arrived::TooOld => "too_old",
                };
                let delay = delay_ns(send_unix_ns, arrival_unix_ns);
                writeln!(
                    out,
                    "{kind},{seq},1,{size},{send_unix_ns},{arrival_unix_ns},{delay}"
                )?;
            }
            Record::Lost { first, count } if count > budget => {
                writeln!(out, "lost,{first},{count},,,,")?;
            }
            Record::Lost { first, count } => {
                budget -= count;
                // The reader checked that the run's last number, first + count - 1, is a u64.
                for seq in first..=first + (count - 1) {
                    writeln!(out, "lost,{seq},1,,,,")?;
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use wirebench_proto::results::{SideReport, UdpCounts};
    use wirebench_proto::spec::{Mechanism, Protocol, TestSpec};

    /// A UDP test's document: 10 datagrams sent, 7 received.
    pub(crate) fn sample() -> Results {
        let spec = TestSpec::example()
            .protocol(Protocol::Udp)
            .mechanism(Mechanism::StopAndWait)
            .bytes(10_000);
        let sender = SideReport {
            bytes: 10_000,
            messages: 10,
            last_ns: Some(500_000_000),
            ..Default::default()
        };
        let receiver = SideReport {
            bytes: 7_000,
            messages: 7,
            last_ns: Some(1_000_000_000),
            udp: Some(UdpCounts {
                sequenced: true,
                ..Default::default()
            }),
            ..Default::default()
        };
        Results::assemble(
            &spec,
            "127.0.0.1:5300".into(),
            Some(&sender),
            Some(&receiver),
            Some("peer gone, \"early\"".into()),
        )
    }

    #[test]
    fn a_result_is_a_header_and_a_row_with_the_jsons_spellings() {
        let mut out = Vec::new();
        Csv.export(&sample(), &mut out).expect("write");
        let text = String::from_utf8(out).expect("utf-8");
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], RESULTS_HEADER);
        assert_eq!(
            lines[1],
            "forward,udp,stop-and-wait,1000,0.5,10,10000,7,7000,160000,56000,3,0.3,0,,,\"peer gone, \"\"early\"\"\""
        );
        assert_eq!(lines.len(), 2);
        assert_eq!(
            lines[0].split(',').count(),
            lines[1]
                .replace("\"peer gone, \"\"early\"\"\"", "e")
                .split(',')
                .count()
        );
    }

    #[test]
    fn fields_are_quoted_and_control_characters_escaped() {
        assert_eq!(field("cubic-sack"), "cubic-sack");
        assert_eq!(field("a,b"), "\"a,b\"");
        assert_eq!(field("say \"x\"\nthen"), "\"say \"\"x\"\"\nthen\"");
        assert_eq!(field("cu\u{1b}[2J"), "cu\\u{1b}[2J");
    }

    #[test]
    fn packet_log_csv_expands_loss_runs() {
        let mut log = wirebench_proto::packet_log::file_header().to_vec();
        for r in [
            Record::Datagram {
                kind: Arrived::Received,
                seq: 0,
                size: 100,
                send_unix_ns: 1000,
                arrival_unix_ns: 1250,
            },
            Record::Lost { first: 1, count: 3 },
            Record::Lost {
                first: 10,
                count: 5_000_000,
            },
            // A run that ends at the last sequence number: both of its datagrams.
            Record::Lost {
                first: u64::MAX - 1,
                count: 2,
            },
        ] {
            let mut b = [0u8; wirebench_proto::packet_log::RECORD_LEN];
            r.encode(&mut b);
            log.extend_from_slice(&b);
        }
        let mut out = Vec::new();
        packet_log(&log[..], &mut out).expect("valid log");
        let text = String::from_utf8(out).expect("utf-8");
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines,
            vec![
                "kind,seq,count,size,send_unix_ns,arrival_unix_ns,delay_ns",
                "received,0,1,100,1000,1250,250",
                "lost,1,1,,,,",
                "lost,2,1,,,,",
                "lost,3,1,,,,",
                "lost,10,5000000,,,,",
                "lost,18446744073709551614,1,,,,",
                "lost,18446744073709551615,1,,,,",
            ]
        );
        assert!(packet_log(&b"junk"[..], &mut Vec::new()).is_err());
    }

    #[test]
    fn delays_are_exact_and_never_wrapped() {
        assert_eq!(delay_ns(1000, 1250), "250");
        // Another host's clock ahead of this one's: a true negative delay.
        assert_eq!(delay_ns(1001, 1000), "-1");
        // Times far apart (a crafted log): the difference, not a wrapped one.
        assert_eq!(delay_ns(1, u64::MAX), (u64::MAX - 1).to_string());
        assert_eq!(delay_ns(u64::MAX, 1), format!("-{}", u64::MAX - 1));
        // No send time: unknown, not a number.
        assert_eq!(delay_ns(0, 5), "");
    }
}
