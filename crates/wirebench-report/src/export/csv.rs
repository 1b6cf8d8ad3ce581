//! CSV: a row per direction of a results document, a row per point of an experiment's
//! summary (`summary.csv`), and a packet log, a line per datagram and per lost sequence
//! number. Written by the `csv` crate: a field with a comma, a quote or a line break is
//! quoted as RFC 4180 says, and a row type's fields are its header, so that the two cannot
//! drift apart.

use std::borrow::Cow;
use std::fmt::Display;
use std::io::{self, Read, Write};

use serde::{Serialize, Serializer};
use wirebench_proto::packet_log::{Arrived, LogError, Reader, Record};
use wirebench_proto::results::{End, Results};

use super::{BothDirections, Exporter};
use crate::experiment::plan::{base_unit_column, in_base_unit};
use crate::experiment::summary::ExperimentSummary;

/// CSV with a header row. For results: a row per direction (`bidir`: forward, then
/// reverse), the columns docs/results.md lists (the fields of `ResultsRow`). For an
/// experiment's summary: a row per point, its parameters (as given to `--vary`), `trials`,
/// `failed`, then for each figure its mean, sd, min, median, max and 95% CI half-width
/// (`FIGURE_mean`, ...), then each parameter with a unit as a number in it (`rate_bps`,
/// `size_bytes`, `amount_bytes`, `time_s`). Numbers are raw (bits/s, bytes, seconds as
/// the column's name says), for programs; the report and the table show them in SI units.
///
/// Text from a file or a peer (a parameter's value, a peer's error) has its control
/// characters but line breaks and tabs written as their escapes, `\u{1b}`: a spreadsheet
/// or a terminal would act on them.
pub struct Csv;

/// Writes a number as Rust prints it (`0.5`, `0`, `160000`), as the JSON's readers and
/// earlier files have it; the `csv` crate's own float format would write `0.0`, `160000.0`.
pub(super) fn display<T: Display, S: Serializer>(v: &T, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(v)
}

/// [`display`] of a value that may be missing: an empty field then.
fn display_opt<T: Display, S: Serializer>(v: &Option<T>, s: S) -> Result<S::Ok, S::Error> {
    match v {
        Some(v) => s.collect_str(v),
        None => s.serialize_none(),
    }
}

/// The row of one direction's totals: its fields, in order, are the columns and their
/// names the header. Rates are bits/s, times seconds, as in the JSON; a field is empty
/// where the test did not measure it.
#[derive(Default, Serialize)]
struct ResultsRow<'a> {
    direction: Cow<'a, str>,
    protocol: String,
    mechanism: String,
    size: u64,
    #[serde(serialize_with = "display")]
    duration_s: f64,
    sent_messages: Option<u64>,
    sent_bytes: Option<u64>,
    received_messages: Option<u64>,
    received_bytes: Option<u64>,
    #[serde(serialize_with = "display_opt")]
    sent_bps: Option<f64>,
    #[serde(serialize_with = "display_opt")]
    received_bps: Option<f64>,
    lost: Option<u64>,
    #[serde(serialize_with = "display_opt")]
    loss_ratio: Option<f64>,
    /// Only for a sequenced stream: without sequence numbers there is no jitter.
    #[serde(serialize_with = "display_opt")]
    jitter_ms: Option<f64>,
    #[serde(serialize_with = "display_opt")]
    latency_p50_us: Option<f64>,
    #[serde(serialize_with = "display_opt")]
    latency_p99_us: Option<f64>,
    error: Cow<'a, str>,
}

impl<'a> ResultsRow<'a> {
    /// The row of `e`, one direction of `r`.
    fn of(r: &'a Results, direction: Cow<'a, str>, e: &End) -> Self {
        let udp = e.udp.as_ref();
        let latency = e.latency_us.as_ref();
        Self {
            direction,
            protocol: r.test.protocol.to_string(),
            mechanism: r.test.mechanism.to_string(),
            size: r.test.size,
            duration_s: e.duration_s,
            sent_messages: e.sent.messages,
            sent_bytes: e.sent.bytes,
            received_messages: e.received.messages,
            received_bytes: e.received.bytes,
            sent_bps: e.sent_bps,
            received_bps: e.received_bps,
            // Empty over TCP and where unknown (a side never reported).
            lost: udp.and_then(|u| u.lost),
            loss_ratio: udp.and_then(|u| u.loss_ratio),
            jitter_ms: udp.filter(|u| u.sequenced).and_then(|u| u.jitter_ms),
            latency_p50_us: latency.map(|l| l.p50),
            latency_p99_us: latency.map(|l| l.p99),
            error: crate::text::printable_text(r.error.as_deref().unwrap_or("")),
        }
    }

    /// A document's rows: a row per direction.
    fn all(r: &'a Results) -> Vec<Self> {
        match &r.reverse {
            Some(rev) => vec![
                Self::of(r, "forward".into(), &r.end),
                Self::of(r, "reverse".into(), &rev.end),
            ],
            None => vec![Self::of(r, r.test.direction.to_string().into(), &r.end)],
        }
    }
}

/// The CSV writer of every table here: `\n` after each row, fields quoted only where they
/// must be, and no header of its own (see [`header`]).
fn writer<W: Write>(out: W) -> csv::Writer<W> {
    csv::WriterBuilder::new()
        .has_headers(false)
        .terminator(csv::Terminator::Any(b'\n'))
        .quote_style(csv::QuoteStyle::Necessary)
        .from_writer(out)
}

/// The header line of rows of type `T`: the names of its fields, in order. The `csv`
/// writer names the columns only as it writes a first row, and a file without a row
/// still has its header: a default row is written aside, and its header line kept.
pub(super) fn header<T: Serialize + Default>() -> io::Result<Vec<u8>> {
    let mut aside = csv::WriterBuilder::new()
        .terminator(csv::Terminator::Any(b'\n'))
        .from_writer(Vec::new());
    aside.serialize(T::default())?;
    let mut bytes = aside.into_inner().map_err(|e| e.into_error())?;
    let end = bytes.iter().position(|&b| b == b'\n').map_or(0, |i| i + 1);
    bytes.truncate(end);
    Ok(bytes)
}

/// A row that could not be written, as the I/O error it was when writing failed: a closed
/// pipe (`wirebench packet-log F | head`) stays a broken pipe, which is not an error.
fn io_error(e: csv::Error) -> io::Error {
    if !e.is_io_error() {
        return io::Error::other(e);
    }
    match e.into_kind() {
        csv::ErrorKind::Io(e) => e,
        other => io::Error::other(format!("{other:?}")),
    }
}

/// Writes `rows` under the header of their type.
pub(super) fn write_rows<T: Serialize + Default>(
    rows: impl IntoIterator<Item = T>,
    out: &mut dyn Write,
) -> io::Result<()> {
    out.write_all(&header::<T>()?)?;
    let mut w = writer(out);
    for row in rows {
        w.serialize(row).map_err(io_error)?;
    }
    w.flush()
}

impl Exporter<Results> for Csv {
    fn export(&self, doc: &Results, out: &mut dyn Write) -> io::Result<()> {
        write_rows(ResultsRow::all(doc), out)
    }
}

impl Exporter<[Results]> for Csv {
    fn export(&self, docs: &[Results], out: &mut dyn Write) -> io::Result<()> {
        write_rows(docs.iter().flat_map(ResultsRow::all), out)
    }
}

impl Exporter<BothDirections> for Csv {
    fn export(&self, doc: &BothDirections, out: &mut dyn Write) -> io::Result<()> {
        let rows = ResultsRow::all(&doc.send)
            .into_iter()
            .chain(ResultsRow::all(&doc.receive));
        write_rows(rows, out)
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
        // The parameters with a unit again in it, as numbers: appended after the columns
        // earlier files had, so that a script reading those by position still reads them.
        let units: Vec<(&String, &str)> = params
            .iter()
            .filter_map(|k| base_unit_column(k).map(|c| (k, c)))
            .collect();
        let mut head: Vec<String> = params.clone();
        head.push("trials".into());
        head.push("failed".into());
        for f in &figs {
            for stat in ["mean", "sd", "min", "median", "max", "ci95"] {
                head.push(format!("{f}_{stat}"));
            }
        }
        head.extend(units.iter().map(|(_, c)| c.to_string()));
        // Columns by the points' parameters and figures: a row type cannot name them.
        let mut w = writer(out);
        w.write_record(&head)?;
        for p in &s.points {
            let mut row: Vec<String> = params
                .iter()
                .map(|k| {
                    crate::text::printable_text(p.point.get(k).map_or("", String::as_str))
                        .into_owned()
                })
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
            for (k, _) in &units {
                let v = p.point.get(*k).and_then(|v| in_base_unit(k, v));
                row.push(v.map_or_else(String::new, |v| format!("{v}")));
            }
            w.write_record(&row)?;
        }
        w.flush()
    }
}

/// A datagram's one-way delay as the CSV prints it: arrival minus send in whole ns, exact
/// whatever the two times (a u64 difference taken modulo 2^64 and read as signed turned a
/// send time one ns past the arrival, or two times more than 2^63 ns apart, into a wrapped
/// number such as -1); none when the send time is unknown (0: an iperf3 sender's
/// timestamp that was no time).
fn delay_ns(send_unix_ns: u64, arrival_unix_ns: u64) -> Option<i128> {
    if send_unix_ns == 0 {
        return None;
    }
    Some(i128::from(arrival_unix_ns) - i128::from(send_unix_ns))
}

/// A line of a packet log's CSV: a datagram, or lost sequence numbers (no size or times).
#[derive(Default, Serialize)]
struct PacketRow {
    kind: &'static str,
    seq: u64,
    count: u64,
    size: Option<u32>,
    send_unix_ns: Option<u64>,
    arrival_unix_ns: Option<u64>,
    #[serde(serialize_with = "display_opt")]
    delay_ns: Option<i128>,
}

impl PacketRow {
    /// `count` lost sequence numbers from `first`.
    fn lost(first: u64, count: u64) -> Self {
        Self {
            kind: "lost",
            seq: first,
            count,
            ..Self::default()
        }
    }
}

/// Prints a packet log as CSV: `kind,seq,count,size,send_unix_ns,arrival_unix_ns,delay_ns`,
/// a line per datagram (kind `received`, `duplicate` or `too_old`) and a line per lost
/// sequence number (kind `lost`, `count` 1). A run longer than a million (a sender that
/// jumped, not a path that dropped) stays one line, its length in `count`; so does every run
/// once a million lost numbers have been written one by one, so that a crafted log of many
/// long runs cannot make gigabytes of CSV out of a few megabytes.
///
/// A log can be larger than memory: it is read record by record, not as a document.
pub fn packet_log(input: impl Read, out: &mut impl Write) -> Result<(), LogError> {
    const MAX_EXPAND: u64 = 1_000_000;
    let mut budget = MAX_EXPAND;
    let reader = Reader::new(input)?;
    out.write_all(&header::<PacketRow>()?)?;
    let mut w = writer(out);
    let mut put = |row: PacketRow| -> io::Result<()> { w.serialize(row).map_err(io_error) };
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
                put(PacketRow {
                    kind,
                    seq,
                    count: 1,
                    size: Some(size),
                    send_unix_ns: Some(send_unix_ns),
                    arrival_unix_ns: Some(arrival_unix_ns),
                    delay_ns: delay_ns(send_unix_ns, arrival_unix_ns),
                })?;
            }
            Record::Lost { first, count } if count > budget => {
                put(PacketRow::lost(first, count))?;
            }
            Record::Lost { first, count } => {
                budget -= count;
                // The reader checked that the run's last number, first + count - 1, is a u64.
                for seq in first..=first + (count - 1) {
                    put(PacketRow::lost(seq, 1))?;
                }
            }
        }
    }
    w.flush()?;
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
        assert_eq!(
            lines[0],
            "direction,protocol,mechanism,size,duration_s,sent_messages,sent_bytes,\
             received_messages,received_bytes,sent_bps,received_bps,lost,loss_ratio,\
             jitter_ms,latency_p50_us,latency_p99_us,error"
        );
        assert_eq!(
            lines[1],
            "forward,udp,stop-and-wait,1000,0.5,10,10000,7,7000,160000,56000,3,0.3,0,,,\"peer gone, \"\"early\"\"\""
        );
        assert_eq!(lines.len(), 2);
    }

    #[test]
    fn a_summary_keeps_its_columns_and_adds_its_parameters_in_base_units_last() {
        use crate::experiment::summary::{summarize_points, PointTrials};
        use crate::experiment::{grid, parse_vary};
        let points = grid(&[
            parse_vary("rate=10M,79370053").expect("vary"),
            parse_vary("proto=udp").expect("vary"),
        ]);
        let trials = vec![
            PointTrials {
                completed: vec![(
                    "a".into(),
                    crate::experiment::trial::tests::udp(1000, 1000, 1000, None),
                )],
                ..PointTrials::default()
            };
            2
        ];
        let s = summarize_points(&points, &[Some(10e6), Some(79_370_053.0)], &trials);
        let mut out = Vec::new();
        Csv.export(&s, &mut out).expect("write");
        let text = String::from_utf8(out).expect("utf-8");
        let lines: Vec<&str> = text.lines().collect();
        // The columns earlier files had, in their places; the rate in bits/s at the end.
        assert!(lines[0].starts_with("proto,rate,trials,failed,delivered_fraction_mean,"));
        assert!(
            lines[0].ends_with(",sent_messages_ci95,rate_bps"),
            "{}",
            lines[0]
        );
        assert!(lines[1].starts_with("udp,10M,1,0,1,"), "{}", lines[1]);
        assert!(lines[1].ends_with(",10000000"), "{}", lines[1]);
        assert!(lines[2].ends_with(",79370053"), "{}", lines[2]);
    }

    #[test]
    fn no_result_is_the_header_alone() {
        let mut out = Vec::new();
        Csv.export(&[][..], &mut out).expect("write");
        let text = String::from_utf8(out).expect("utf-8");
        assert!(text.starts_with("direction,protocol,"), "{text}");
        assert!(text.ends_with(",error\n"), "{text}");
        assert_eq!(text.lines().count(), 1);
    }

    #[test]
    fn fields_are_quoted_and_control_characters_escaped() {
        let mut r = sample();
        for (error, field) in [
            ("cubic-sack", "cubic-sack"),
            ("a,b", "\"a,b\""),
            ("say \"x\"\nthen", "\"say \"\"x\"\"\nthen\""),
            ("cu\u{1b}[2J", "cu\\u{1b}[2J"),
        ] {
            r.error = Some(error.into());
            let mut out = Vec::new();
            Csv.export(&r, &mut out).expect("write");
            let text = String::from_utf8(out).expect("utf-8");
            assert!(text.ends_with(&format!(",,,{field}\n")), "{text}");
        }
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
        assert_eq!(delay_ns(1000, 1250), Some(250));
        // Another host's clock ahead of this one's: a true negative delay.
        assert_eq!(delay_ns(1001, 1000), Some(-1));
        // Times far apart (a crafted log): the difference, not a wrapped one.
        assert_eq!(delay_ns(1, u64::MAX), Some(i128::from(u64::MAX - 1)));
        assert_eq!(delay_ns(u64::MAX, 1), Some(-i128::from(u64::MAX - 1)));
        // No send time: unknown, not a number.
        assert_eq!(delay_ns(0, 5), None);
    }
}
