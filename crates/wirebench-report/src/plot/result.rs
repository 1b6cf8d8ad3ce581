//! Charts of one results document: rate (and latency) over time, and the round-trip
//! distribution.

use wirebench_proto::results::{IntervalView, Results};

use super::chart::{Axis, Chart, Palette, Panel, Pt, Series, Style};
use super::latency::{latency_panels, Distribution};
use super::scale::{with_unit, Quantity};
use super::{Kind, PlotError};

/// Steps of a per-interval figure: each interval drawn over its own start and end, so a
/// short last interval is a short step at its real rate, and an interval at 0 a step down
/// to 0. An interval without a value (nobody measured it), or a hole between intervals,
/// breaks the line; trailing intervals at 0 (the side had stopped) are left out, rather
/// than drawn as a fall to 0.
fn steps(iv: &[IntervalView], f: impl Fn(&IntervalView) -> Option<f64>) -> Vec<Pt> {
    let mut pts: Vec<(f64, f64, Option<f64>)> = iv
        .iter()
        .filter(|i| i.end_s > i.start_s)
        .map(|i| (i.start_s, i.end_s, f(i)))
        .collect();
    while pts.last().is_some_and(|p| p.2.is_none_or(|v| v == 0.0)) {
        pts.pop();
    }
    let mut out = Vec::with_capacity(pts.len() * 2);
    let mut end: Option<f64> = None;
    for (a, b, v) in pts {
        match v {
            Some(v) => {
                // A hole of more than a hundredth of an interval: no line across it.
                if end.is_some_and(|e| a - e > (b - a) * 0.01) {
                    out.push(Pt::gap(a));
                }
                out.push(Pt::at(a, v));
                out.push(Pt::at(b, v));
                end = Some(b);
            }
            None => {
                if end.is_some() {
                    out.push(Pt::gap(a));
                }
                end = None;
            }
        }
    }
    out
}

fn line(label: &str, points: Vec<Pt>) -> Option<Series> {
    (!points.is_empty()).then(|| Series::new(label, Style::Line, points))
}

/// What a result measured, in a few words: "TCP stream, 10 s, 1 stream".
fn described(r: &Results) -> String {
    let t = &r.test;
    let proto = format!("{:?}", t.protocol).to_uppercase();
    let mech = serde_json::to_value(t.mechanism)
        .ok()
        .and_then(|v| v.as_str().map(String::from))
        .unwrap_or_default();
    format!(
        "One {proto} {mech} run of {}, {} stream(s)",
        with_unit(Quantity::Seconds, r.end.duration_s),
        t.streams
    )
}

/// The intervals with a last one shorter than a tenth of the others merged into the one
/// before: a sliver of a few hundred µs holds too little data for a rate worth a step.
/// Counts add saturating: a crafted file may hold any u64 (found by fuzz-smoke).
fn merged_tail(r: &Results) -> Vec<IntervalView> {
    let mut iv = r.intervals.clone();
    let n = iv.len();
    if n >= 2 {
        let last = &iv[n - 1];
        let len = last.end_s - last.start_s;
        if len < r.test.interval_s * 0.1 {
            let last = iv.remove(n - 1);
            let prev = &mut iv[n - 2];
            let secs = last.end_s - prev.start_s;
            prev.end_s = last.end_s;
            // A count nobody measured stays unknown.
            let add = |a: Option<u64>, b: Option<u64>| a.zip(b).map(|(a, b)| a.saturating_add(b));
            prev.sent_bytes = add(prev.sent_bytes, last.sent_bytes);
            prev.sent_messages = add(prev.sent_messages, last.sent_messages);
            prev.received_bytes = add(prev.received_bytes, last.received_bytes);
            prev.received_messages = add(prev.received_messages, last.received_messages);
            if secs > 0.0 {
                prev.sent_bps = prev.sent_bytes.map(|b| b as f64 * 8.0 / secs);
                prev.received_bps = prev.received_bytes.map(|b| b as f64 * 8.0 / secs);
            }
        }
    }
    iv
}

/// The sender's transport as it closed each interval, below the rate: its congestion
/// window (TCP's or QUIC's), and QUIC's smoothed round trip (not drawn when the round trips
/// of request/response are). What the caption adds for them.
fn window_panels(chart: &mut Chart, intervals: &[IntervalView], rr: bool) -> &'static str {
    let x = Axis::linear("time since the test began", Quantity::Seconds);
    let mut cwnd = Panel::new(
        x.clone(),
        Axis::linear("congestion window", Quantity::Bytes),
    );
    cwnd.series.extend(line(
        "congestion window",
        steps(intervals, |i| i.cwnd_bytes.map(|b| b as f64)),
    ));
    let mut rtt = Panel::new(x, Axis::linear("smoothed round trip", Quantity::Seconds));
    if !rr {
        rtt.series.extend(line(
            "smoothed round trip",
            steps(intervals, |i| i.rtt_us.map(|us| us as f64 * 1e-6)),
        ));
    }
    let (has_cwnd, has_rtt) = (!cwnd.series.is_empty(), !rtt.series.is_empty());
    for mut p in [cwnd, rtt].into_iter().filter(|p| !p.series.is_empty()) {
        p.weight = 2;
        p.body = true;
        chart.panels.push(p);
    }
    match (has_cwnd, has_rtt) {
        (true, true) => " Then the sender's congestion window and its stack's smoothed round trip as each interval closed (QUIC).",
        (true, false) => " Then the sender's congestion window as each interval closed.",
        (false, true) => " Then the sender's smoothed round trip as each interval closed.",
        (false, false) => "",
    }
}

/// A per-interval figure in its base unit.
type Figure = fn(&IntervalView) -> Option<f64>;

/// A chart from one results document.
pub fn result_chart(kind: Kind, r: &Results) -> Result<Chart, PlotError> {
    let mut chart = Chart::default();
    match kind {
        Kind::Throughput => {
            chart.palette = Palette::ordered(&[
                "sent",
                "received",
                "median",
                "99th percentile",
                "congestion window",
                "smoothed round trip",
            ]);
            let x = Axis::linear("time since the test began", Quantity::Seconds);
            let intervals = merged_tail(r);
            let mut rate = Panel::new(x.clone(), Axis::linear("rate", Quantity::BitRate));
            // A side that sent nothing at all (the receiver's document) has no sent line;
            // a sender that paused has its steps at 0.
            let sent = steps(&intervals, |i| i.sent_bps);
            if sent.iter().any(|p| p.y > 0.0) {
                rate.series.extend(line("sent", sent));
            }
            rate.series
                .extend(line("received", steps(&intervals, |i| i.received_bps)));
            rate.weight = 3;
            rate.body = true;
            chart.panels.push(rate);
            // Latency per interval: round trips (rr) or one-way delay (UDP, one clock).
            let rr = r.intervals.iter().any(|i| i.latency_p50_us.is_some());
            let (what, p50, p99): (&str, Figure, Figure) = if rr {
                (
                    "round-trip time",
                    |i| i.latency_p50_us.map(|v| v * 1e-6),
                    |i| i.latency_p99_us.map(|v| v * 1e-6),
                )
            } else {
                (
                    "one-way delay",
                    |i| i.delay_p50_ms.map(|v| v * 1e-3),
                    |i| i.delay_p99_ms.map(|v| v * 1e-3),
                )
            };
            let mut lat = Panel::new(x, Axis::linear(what, Quantity::Seconds));
            lat.series.extend(line("median", steps(&intervals, p50)));
            lat.series
                .extend(line("99th percentile", steps(&intervals, p99)));
            lat.weight = 2;
            lat.body = true;
            let has_latency = !lat.series.is_empty();
            if has_latency {
                chart.panels.push(lat);
            }
            let stack = window_panels(&mut chart, &intervals, rr);
            chart.title = "Rate over time".into();
            chart.caption = format!(
                "{}; each step is one {} s interval's rate over its own length (the last \
                 interval is only as long as the test ran into it; one shorter than a tenth \
                 of an interval is merged into the one before).{}",
                described(r),
                r.test.interval_s,
                if has_latency {
                    format!(" Below: the {what} of the interval's packets or transactions, median and 99th percentile.")
                } else {
                    String::new()
                }
            );
            chart.caption.push_str(stack);
        }
        Kind::Latency if r.end.rrul.is_some() => return super::rrul::rrul_latency_chart(r),
        Kind::Latency => {
            let d = Distribution::of(r).ok_or(PlotError::NoLatency)?;
            let label = "round trip".to_string();
            chart.palette = Palette::ordered(&[&label]);
            latency_panels(&mut chart, &[(label, d)]);
            chart.caption = format!("{}. {}", described(r), chart.caption);
        }
        Kind::Rrul => return super::rrul::rrul_chart(r),
        _ => return Err(PlotError::NotForResult(kind.name())),
    }
    Ok(chart)
}
