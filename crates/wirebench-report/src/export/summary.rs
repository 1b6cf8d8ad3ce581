//! The summary a results table begins with, as iperf3's: a sender and a receiver line per
//! stream (with several) and for their sum, per direction. Its figures are the results
//! document's and nothing else: each side's rate is `end.sent_bps` / `end.received_bps`,
//! or with `-O` `end.after_omit`'s, so the summary, the live lines' end and the JSON give
//! one answer.

use std::io::{self, Write};

use wirebench_proto::results::{End, IntervalView, Results};
use wirebench_proto::spec::Direction;

use super::lines::{format_us, tag, Columns, Figures, Layout, RateUnits};

/// One direction of a test: its totals, its streams and its intervals.
pub(crate) struct Way<'a> {
    /// `c->s` or `s->c` with `--bidir`.
    pub(crate) direction: Option<&'static str>,
    pub(crate) end: &'a End,
    pub(crate) streams: &'a [End],
    pub(crate) intervals: &'a [IntervalView],
}

/// The directions of a test: one, or both with `--bidir`.
pub(crate) fn ways(r: &Results) -> Vec<Way<'_>> {
    let bidir = r.test.direction == Direction::Bidir;
    let mut out = vec![Way {
        direction: bidir.then_some("c->s"),
        end: &r.end,
        streams: &r.streams,
        intervals: &r.intervals,
    }];
    if let Some(rev) = &r.reverse {
        out.push(Way {
            direction: Some("s->c"),
            end: &rev.end,
            streams: &rev.streams,
            intervals: &rev.intervals,
        });
    }
    out
}

/// One side's figures in a summary: its span from the omitted start (0 without -O), its
/// bytes and rate; `None` when that side never reported.
#[derive(Debug, Clone, Copy)]
struct Side {
    secs: f64,
    bytes: u64,
    bps: f64,
    messages: u64,
}

/// A direction's answer: what the document says each side moved, after the omitted start
/// with `-O`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Answer {
    from_s: f64,
    sent: Option<Side>,
    received: Option<Side>,
    /// UDP: datagrams lost, of the part the answer covers.
    lost: Option<u64>,
}

impl Answer {
    /// The figures of `e` (with `-O`, its `after_omit`).
    pub(crate) fn of(e: &End) -> Self {
        let side = |secs: Option<f64>, bytes: Option<u64>, bps: Option<f64>, m: Option<u64>| {
            Some(Side {
                secs: secs?,
                bytes: bytes?,
                bps: bps?,
                messages: m.unwrap_or(0),
            })
        };
        match &e.after_omit {
            Some(a) => Self {
                from_s: a.omitted_s,
                sent: side(a.sent_duration_s, a.sent_bytes, a.sent_bps, a.sent_messages),
                received: side(
                    a.received_duration_s,
                    a.received_bytes,
                    a.received_bps,
                    a.received_messages,
                ),
                lost: match a.lost {
                    Some(lost) => lost,
                    None => e.udp.as_ref().and_then(|u| u.lost),
                },
            },
            None => Self {
                from_s: 0.0,
                sent: side(e.sent.duration_s, e.sent.bytes, e.sent_bps, e.sent.messages),
                received: side(
                    e.received.duration_s,
                    e.received.bytes,
                    e.received_bps,
                    e.received.messages,
                ),
                lost: e.udp.as_ref().and_then(|u| u.lost),
            },
        }
    }
}

/// The sender's retransmits of a direction: TCP_INFO's count over the connections' lives,
/// or with `-O` the intervals' after the omitted start.
fn retransmits(w: &Way<'_>, omit: Option<f64>) -> Option<u64> {
    let from_intervals = |from: f64| {
        let kept: Vec<u64> = w
            .intervals
            .iter()
            .filter(|i| i.start_s + 1e-9 >= from)
            .filter_map(|i| i.retransmits)
            .collect();
        (!kept.is_empty()).then(|| kept.iter().sum())
    };
    if let Some(from) = omit {
        return from_intervals(from);
    }
    if let Some(t) = &w.end.tcp {
        return Some(t.retransmits);
    }
    let per_stream: Vec<u64> = w
        .streams
        .iter()
        .filter_map(|s| s.tcp.map(|t| t.retransmits))
        .collect();
    if !per_stream.is_empty() {
        return Some(per_stream.iter().sum());
    }
    from_intervals(0.0)
}

/// Writes the summary of `r`: a heading, then for each direction a sender and a receiver
/// line per stream (with several; not with `-O`, whose streams have no figures after the
/// omitted start, nor for rrul's load) and for the whole.
pub(crate) fn write(r: &Results, units: RateUnits, out: &mut dyn Write) -> io::Result<()> {
    let columns = Columns::of(r.test.datagrams(), r.test.mechanism);
    if columns == Columns::Rr {
        return rr_line(r, false, out);
    }
    let ways = ways(r);
    let bidir = ways.len() > 1;
    let layout = Layout {
        columns,
        tag_width: if bidir { 11 } else { 5 },
        summary: true,
        units,
    };
    writeln!(out, "{}", layout.header())?;
    let omit = r.end.after_omit.map(|a| a.omitted_s);
    // rrul's load is there for its round trips: its sums are enough.
    let per_stream = omit.is_none() && r.end.rrul.is_none();
    for w in &ways {
        if per_stream && w.streams.len() > 1 {
            for (i, s) in w.streams.iter().enumerate() {
                let sw = Way {
                    direction: w.direction,
                    end: s,
                    streams: &[],
                    intervals: &[],
                };
                pair(
                    &layout,
                    &tag(Some(i as u32 + 1), w.direction),
                    &sw,
                    None,
                    out,
                )?;
            }
        }
        let id = (w.streams.len() <= 1).then_some(1);
        pair(&layout, &tag(id, w.direction), w, omit, out)?;
    }
    Ok(())
}

/// The sender's and the receiver's line of one stream or sum.
fn pair(
    layout: &Layout,
    tag: &str,
    w: &Way<'_>,
    omit: Option<f64>,
    out: &mut dyn Write,
) -> io::Result<()> {
    let a = Answer::of(w.end);
    match a.sent {
        Some(s) => {
            let f = Figures {
                bytes: s.bytes,
                bps: s.bps,
                retransmits: (layout.columns == Columns::Tcp)
                    .then(|| retransmits(w, omit))
                    .flatten(),
                ..Figures::default()
            };
            writeln!(
                out,
                "{}",
                layout.line(tag, a.from_s, a.from_s + s.secs, &f, "sender")
            )?;
        }
        None => writeln!(
            out,
            "{tag}  sender: unknown (the sending side did not report what it sent)"
        )?,
    }
    match a.received {
        Some(s) => {
            let udp = w
                .end
                .udp
                .as_ref()
                .filter(|_| layout.columns == Columns::Udp);
            let f = Figures {
                bytes: s.bytes,
                bps: s.bps,
                // Datagrams too short for the header carry no send time: no jitter.
                jitter_ms: udp.filter(|u| u.sequenced).and_then(|u| u.jitter_ms),
                // Lost of expected: expected is what was sent, which needs the sender's
                // report (without it, `lost` is the gaps seen, a total unknown).
                lost: udp.map(|_| {
                    let total = a.lost.filter(|_| a.sent.is_some());
                    (a.lost, total.map(|lost| s.messages + lost))
                }),
                ..Figures::default()
            };
            writeln!(
                out,
                "{}",
                layout.line(tag, a.from_s, a.from_s + s.secs, &f, "receiver")
            )
        }
        None => writeln!(
            out,
            "{tag}  receiver: unknown (the receiving side did not report what it received)"
        ),
    }
}

/// Request/response: transactions and the round trip, in the unit style of rrul's lines;
/// `verbose`: every percentile.
pub(crate) fn rr_line(r: &Results, verbose: bool, out: &mut dyn Write) -> io::Result<()> {
    let e = &r.end;
    let Some(l) = &e.latency_us else {
        return writeln!(out, "{}: no transaction was answered", r.test.mechanism);
    };
    let trips = if verbose {
        format!(
            "RTT p50 {}, p90 {}, p99 {}, p99.9 {}, max {}",
            format_us(l.p50),
            format_us(l.p90),
            format_us(l.p99),
            format_us(l.p999),
            format_us(l.max)
        )
    } else {
        format!(
            "RTT p50 {}, p99 {}, max {}",
            format_us(l.p50),
            format_us(l.p99),
            format_us(l.max)
        )
    };
    writeln!(
        out,
        "{}: {} transactions, {:.0}/s; {trips}{}",
        r.test.mechanism,
        l.count,
        e.transactions_per_s.unwrap_or(0.0),
        e.rr_timeouts
            .filter(|t| *t > 0)
            .map(|t| format!("; {t} timed out"))
            .unwrap_or_default()
    )
}

/// `-O`: what the figures above leave out (and, for UDP, what they do not).
pub(crate) fn omit_note(r: &Results, out: &mut dyn Write) -> io::Result<()> {
    if let Some(a) = r.end.after_omit {
        let jitter = if r.end.udp.is_some() {
            "; jitter counts the whole test"
        } else {
            ""
        };
        writeln!(
            out,
            "(-O: the first {:.2} s are left out of these figures{jitter})",
            a.omitted_s
        )?;
    }
    Ok(())
}
