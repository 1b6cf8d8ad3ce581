//! The charts of `run --mode rrul` results: flent's "all" view (download, upload and the
//! probes' round trips on one time axis, the load's phase shaded in each panel), several
//! results compared side by side on shared scales, and the probes' round-trip CDFs idle
//! against loaded (flent's ping CDF).

use wirebench_proto::results::{Probe, ProbeKind, Results, Rrul};

use super::chart::{Axis, Band, Chart, Palette, Panel, Pt, Series, Style};
use super::latency::{latency_panels, Distribution};
use super::scale::{with_unit, Quantity};
use super::PlotError;

/// The series' labels, in the palette's order.
const DOWNLOAD: &str = "download";
const UPLOAD: &str = "upload";
const UDP_RTT: &str = "UDP round trip";
const TCP_RTT: &str = "TCP round trip";

/// Steps of a rate: each interval drawn from its start (its end less one interval, or the
/// load's start for the first) to its end. An interval nobody measured, or a hole of more
/// than half an interval between two, breaks the line.
fn steps(
    rrul: &Rrul,
    f: impl Fn(&wirebench_proto::results::LoadInterval) -> Option<f64>,
) -> Vec<Pt> {
    let mut start = rrul.load_start_s;
    let mut end: Option<f64> = None;
    let mut out = Vec::with_capacity(rrul.load.len() * 2);
    for iv in &rrul.load {
        let from = start.max(iv.t_s - rrul.probe_interval_s);
        match f(iv) {
            Some(v) => {
                if end.is_some_and(|e| from - e > rrul.probe_interval_s * 0.5) {
                    out.push(Pt::gap(from));
                }
                out.push(Pt::at(from, v));
                out.push(Pt::at(iv.t_s, v));
                end = Some(iv.t_s);
            }
            None if end.is_some() => {
                out.push(Pt::gap(from));
                end = None;
            }
            None => {}
        }
        start = iv.t_s;
    }
    out
}

/// A probe's round trip in seconds; `None` for one that got no answer (lost).
pub(super) fn rtt_s(p: &Probe) -> Option<f64> {
    Some(p.rtt_us * 1e-6).filter(|v| v.is_finite() && *v >= 0.0)
}

/// The round trips of one kind of probe, in seconds (answered probes only).
fn probes(rrul: &Rrul, kind: ProbeKind) -> Vec<Pt> {
    rrul.probes
        .iter()
        .filter(|p| p.kind == kind)
        .filter_map(|p| Some(Pt::at(p.t_s, rtt_s(p)?)))
        .collect()
}

/// Whether a probe sent at `t_s` was sent while the load ran (else before or after it).
fn in_load(rrul: &Rrul, t_s: f64) -> bool {
    t_s >= rrul.load_start_s && t_s <= rrul.load_end_s
}

/// The answered round trips of `kind`'s probes sent while the load ran (or, with
/// `under_load` false, before or after it), seconds.
pub(super) fn samples(rrul: &Rrul, kind: ProbeKind, under_load: bool) -> Vec<f64> {
    rrul.probes
        .iter()
        .filter(|p| p.kind == kind && in_load(rrul, p.t_s) == under_load)
        .filter_map(rtt_s)
        .collect()
}

/// How many probes of `kind` were sent in a phase (`under_load`; `None`: the whole run) and
/// how many of them got no answer: the document's counts where it has them (exact past the
/// probes it lists one by one), else its lists of answered and lost probes.
fn sent_and_lost(rrul: &Rrul, kind: ProbeKind, under_load: Option<bool>) -> (u64, u64) {
    if let Some(counts) = &rrul.probe_counts {
        let c = match kind {
            ProbeKind::Udp => &counts.udp,
            ProbeKind::Tcp => &counts.tcp,
        };
        let phases = match under_load {
            Some(true) => vec![c.loaded],
            Some(false) => vec![c.idle_before, c.idle_after],
            None => vec![c.idle_before, c.loaded, c.idle_after],
        };
        return phases.iter().fold((0u64, 0u64), |(s, l), p| {
            (s.saturating_add(p.sent), l.saturating_add(p.lost))
        });
    }
    listed(rrul, kind, under_load)
}

/// As [`sent_and_lost`], from the probes the document lists one by one (answered and lost),
/// sorted into phases by their send time, as the curves are.
fn listed(rrul: &Rrul, kind: ProbeKind, under_load: Option<bool>) -> (u64, u64) {
    let in_phase = |t_s: f64| under_load.is_none_or(|u| u == in_load(rrul, t_s));
    let answered = rrul
        .probes
        .iter()
        .filter(|p| p.kind == kind && in_phase(p.t_s))
        .count() as u64;
    let lost = rrul
        .lost_probes
        .iter()
        .filter(|p| p.kind == kind && in_phase(p.t_s))
        .count() as u64;
    (answered + lost, lost)
}

/// "n UDP probes of m got no answer (k of them under load). " when any did, else nothing.
fn unanswered(rrul: &Rrul) -> String {
    let mut parts = Vec::new();
    for (kind, name) in [(ProbeKind::Udp, "UDP"), (ProbeKind::Tcp, "TCP")] {
        let (sent, lost) = sent_and_lost(rrul, kind, None);
        if lost > 0 {
            let (_, loaded) = sent_and_lost(rrul, kind, Some(true));
            parts.push(format!(
                "{lost} of {sent} {name} probes got no answer ({loaded} of them under load)"
            ));
        }
    }
    if parts.is_empty() {
        String::new()
    } else {
        format!(" {}.", parts.join("; "))
    }
}

fn series(label: &str, style: Style, points: Vec<Pt>) -> Option<Series> {
    (!points.is_empty()).then(|| Series::new(label, style, points))
}

/// A probe line: joined only between probes sent at most two intervals apart, so a stretch
/// with no answer is a gap, not a straight line across it.
fn probe_series(rrul: &Rrul, label: &str, kind: ProbeKind) -> Option<Series> {
    series(label, Style::LinePoints, probes(rrul, kind)).map(|mut s| {
        s.max_gap = Some(rrul.probe_interval_s * 2.0 + 1e-9);
        s
    })
}

/// The three panels of an rrul result: download, upload, round trips, the load shaded.
fn rrul_panels(r: &Results, rrul: &Rrul) -> Vec<Panel> {
    let x = Axis::linear("time since the run began", Quantity::Seconds);
    let band = |text: String| Band {
        from: rrul.load_start_s,
        to: rrul.load_end_s,
        text,
    };
    let shading = format!("load: {} TCP streams each way", r.test.streams);
    let mut down = Panel::new(x.clone(), Axis::linear("download", Quantity::BitRate));
    down.series.extend(series(
        DOWNLOAD,
        Style::Line,
        steps(rrul, |i| i.download_bps),
    ));
    down.bands.push(band(shading));
    down.weight = 2;
    let mut up = Panel::new(x.clone(), Axis::linear("upload", Quantity::BitRate));
    up.series
        .extend(series(UPLOAD, Style::Line, steps(rrul, |i| i.upload_bps)));
    up.bands.push(band(String::new()));
    up.weight = 2;
    let mut rtt = Panel::new(x, Axis::linear("round-trip time", Quantity::Seconds));
    rtt.series
        .extend(probe_series(rrul, UDP_RTT, ProbeKind::Udp));
    rtt.series
        .extend(probe_series(rrul, TCP_RTT, ProbeKind::Tcp));
    rtt.bands.push(band(String::new()));
    rtt.weight = 3;
    for p in [&mut down, &mut up, &mut rtt] {
        p.body = true;
    }
    vec![down, up, rtt]
}

/// The chart of an rrul result.
///
/// # Errors
///
/// When the result holds no `end.rrul` (it was not made by `run --mode rrul`).
pub fn rrul_chart(r: &Results) -> Result<Chart, PlotError> {
    let rrul = r.end.rrul.as_ref().ok_or(PlotError::NotForResult("rrul"))?;
    let streams = r.test.streams;
    let ms = |p: Option<&wirebench_proto::results::Percentiles>| {
        p.map_or("none".to_string(), |p| {
            with_unit(Quantity::Seconds, p.p50 * 1e-6)
        })
    };
    let ratio = rrul
        .latency_ratio_p50
        .map(|x| format!(" (×{x:.1})"))
        .unwrap_or_default();
    let cc = r
        .test
        .congestion
        .as_deref()
        .map(|c| format!(", {c}"))
        .unwrap_or_default();
    let chart = Chart {
        title: "Latency under load (rrul)".into(),
        caption: format!(
            "One run against {}: UDP and TCP request/response probes every {}, alone for {} \
             before and after the shaded load ({streams} TCP streams each way{cc}). Median \
             round trip idle {}, loaded {}{ratio}; upload {}, download {}. Rates are per \
             {} interval; each probe is drawn when it was sent, and a probe line breaks where \
             no answer came for more than two intervals.{}",
            r.server,
            with_unit(Quantity::Seconds, rrul.probe_interval_s),
            with_unit(Quantity::Seconds, rrul.idle_s),
            ms(rrul.idle_latency_us.as_ref()),
            ms(rrul.loaded_latency_us.as_ref()),
            rate_or_unknown(rrul.upload_bps),
            rate_or_unknown(rrul.download_bps),
            with_unit(Quantity::Seconds, rrul.probe_interval_s),
            unanswered(rrul),
        ),
        panels: rrul_panels(r, rrul),
        palette: Palette::ordered(&[DOWNLOAD, UPLOAD, UDP_RTT, TCP_RTT]),
        ..Chart::default()
    };
    Ok(chart)
}

/// Several rrul results side by side (`plot A.json B.json ...`): each one's stack of
/// panels under its name, every row of panels on one y axis (one unit, one range) and
/// all on one time axis, so that they compare by eye.
///
/// # Errors
///
/// When a result holds no `end.rrul`.
pub fn rrul_comparison(results: &[(String, Results)]) -> Result<Chart, PlotError> {
    let mut chart = Chart {
        title: "Latency under load (rrul), compared".into(),
        palette: Palette::ordered(&[DOWNLOAD, UPLOAD, UDP_RTT, TCP_RTT]),
        ..Chart::default()
    };
    let mut words = Vec::new();
    for (name, r) in results {
        let rrul = r.end.rrul.as_ref().ok_or(PlotError::NotForResult("rrul"))?;
        chart.panels.extend(rrul_panels(r, rrul));
        chart.cells.push(name.clone());
        let p50 = |k: bool| {
            let mut v = samples(rrul, ProbeKind::Udp, k);
            v.sort_by(f64::total_cmp);
            v.get(v.len() / 2)
                .map_or("none".to_string(), |m| with_unit(Quantity::Seconds, *m))
        };
        let (sent, lost) = sent_and_lost(rrul, ProbeKind::Udp, Some(true));
        let lost = if lost > 0 {
            format!(" ({lost} of {sent} loaded probes unanswered)")
        } else {
            String::new()
        };
        words.push(format!(
            "{name}: UDP median idle {}, loaded {}{lost}",
            p50(false),
            p50(true)
        ));
    }
    chart.caption = format!(
        "{} rrul runs, each under its name; each row of panels shares one y axis (unit and \
         range) and every panel one time axis. {}.",
        results.len(),
        words.join("; ")
    );
    Ok(chart)
}

/// The round-trip distributions of an rrul result's probes, idle and under load, per kind
/// of probe (flent's ping CDF): CDF, and CCDF for the tail.
///
/// # Errors
///
/// When the result holds no `end.rrul`, or no probe was answered.
pub fn rrul_latency_chart(r: &Results) -> Result<Chart, PlotError> {
    let rrul = r.end.rrul.as_ref().ok_or(PlotError::NotForResult("rrul"))?;
    let mut runs = Vec::new();
    let mut counts = Vec::new();
    for (kind, name) in [(ProbeKind::Udp, "UDP"), (ProbeKind::Tcp, "TCP")] {
        for (under, phase) in [(false, "idle"), (true, "loaded")] {
            let v = samples(rrul, kind, under);
            // Counted as the curves are (the document's own counts may put a probe at a
            // phase's edge in the other phase).
            let (sent, _) = listed(rrul, kind, Some(under));
            if let Some(d) = Distribution::of_samples(v) {
                counts.push(format!("{name} {phase} {} of {sent} answered", d.count));
                runs.push((format!("{name} {phase}"), d));
            }
        }
    }
    if runs.is_empty() {
        return Err(PlotError::NoLatency);
    }
    let mut chart = Chart {
        palette: Palette::ordered(&["UDP idle", "UDP loaded", "TCP idle", "TCP loaded"]),
        ..Chart::default()
    };
    latency_panels(&mut chart, &runs);
    chart.title = "Round trips idle and under load (rrul)".into();
    chart.caption = format!(
        "One rrul run against {}: every answered probe's round trip, idle (before and after \
         the load) and loaded (sent while it ran), per kind of probe ({}; a probe with no \
         answer is in no curve). Bottom: the share slower than x, on a log scale.",
        r.server,
        counts.join(", ")
    );
    Ok(chart)
}

/// A rate in words, or "unknown" when nobody measured it.
fn rate_or_unknown(bps: Option<f64>) -> String {
    bps.map_or("unknown".into(), |b| with_unit(Quantity::BitRate, b))
}

#[cfg(test)]
mod tests {
    use super::*;
    use wirebench_proto::results::{LoadInterval, Probe};

    fn result() -> Results {
        let doc = serde_json::json!({
            "schema": 1, "wirebench": "t", "server": "10.77.0.2:5300",
            "test": {"protocol": "tcp", "mechanism": "stream", "direction": "bidir",
                     "size": 131072, "rate_bps": 0, "rate_pps": 0, "gap_s": 0.0,
                     "streams": 4, "interval_s": 0.1, "drain_s": 1.0,
                     "ack_timeout_s": 0.2, "congestion": "cubic"},
            "datapath": {},
            "intervals": [],
            "end": {"duration_s": 2.0,
                    "sent": {"bytes": 0, "messages": 0, "duration_s": 0.0},
                    "received": {"bytes": 0, "messages": 0, "duration_s": 0.0},
                    "sent_bps": 0.0, "received_bps": 0.0, "retransmits": 0,
                    "local_drops": 0, "resources": {}},
        });
        let mut r: Results = serde_json::from_value(doc).expect("a valid document");
        let probes = (0..40)
            .flat_map(|i| {
                let t = f64::from(i) / 10.0;
                let rtt_us = if (1.0..3.0).contains(&t) {
                    250_000.0
                } else {
                    20_000.0
                };
                [ProbeKind::Udp, ProbeKind::Tcp].map(|kind| Probe {
                    t_s: t,
                    kind,
                    rtt_us,
                })
            })
            .collect();
        r.end.rrul = Some(Rrul {
            idle_s: 1.0,
            load_start_s: 1.0,
            load_end_s: 3.0,
            probe_interval_s: 0.1,
            upload_bps: Some(18e6),
            download_bps: Some(19e6),
            latency_ratio_p50: Some(12.5),
            load: (1..=20)
                .map(|i| LoadInterval {
                    t_s: 1.0 + f64::from(i) / 10.0,
                    upload_bps: Some(18e6),
                    download_bps: Some(19e6),
                })
                .collect(),
            probes,
            ..Rrul::default()
        });
        r
    }

    #[test]
    fn the_rrul_chart_shares_time_across_rates_and_round_trips() {
        let chart = rrul_chart(&result()).expect("a chart");
        let svg = super::super::svg_string(&chart).expect("an svg");
        // Rates in Mbit/s, round trips in ms: units chosen for the data's range (a
        // title in two lines where the panel is short).
        for title in ["download", "upload", "round-trip time", "(Mbit/s)", "(ms)"] {
            assert!(svg.contains(title), "no {title} in the axes' titles");
        }
        assert!(svg.contains("time since the run began (s)"));
        for label in [DOWNLOAD, UPLOAD, UDP_RTT, TCP_RTT] {
            assert!(svg.contains(label), "legend lacks {label}");
        }
        assert!(svg.contains("load: 4 TCP streams each way"));
        assert_eq!(chart.panels.len(), 3);
        assert!(chart.panels.iter().all(|p| p.bands.len() == 1));
        assert!(chart.caption.contains("×12.5"), "{}", chart.caption);
        assert!(chart.caption.contains("cubic"));
    }

    #[test]
    fn probes_without_an_answer_are_counted_in_every_caption() {
        let mut r = result();
        let rrul = r.end.rrul.as_mut().expect("rrul");
        // Five UDP probes lost under the load, beside its 21 answered (1.0 s to 3.0 s).
        rrul.lost_probes = (0..5)
            .map(|i| wirebench_proto::results::LostProbe {
                t_s: 1.05 + f64::from(i) / 10.0,
                kind: ProbeKind::Udp,
            })
            .collect();
        let caption = rrul_chart(&r).expect("a chart").caption;
        assert!(
            caption.contains("5 of 45 UDP probes got no answer (5 of them under load)"),
            "{caption}"
        );
        assert!(!caption.contains("TCP probes got no answer"), "{caption}");
        let cdf = rrul_latency_chart(&r).expect("a chart").caption;
        assert!(cdf.contains("UDP loaded 21 of 26 answered"), "{cdf}");
        assert!(cdf.contains("UDP idle 19 of 19 answered"), "{cdf}");
        let both = rrul_comparison(&[("a".into(), r.clone())]).expect("a chart");
        assert!(
            both.caption.contains("(5 of 26 loaded probes unanswered)"),
            "{}",
            both.caption
        );
        // The document's own counts win over its lists.
        let rrul = r.end.rrul.as_mut().expect("rrul");
        let mut counts = wirebench_proto::results::RrulProbeCounts::default();
        counts.udp.loaded = wirebench_proto::results::ProbeCounts {
            sent: 2_000_021,
            answered: 21,
            lost: 2_000_000,
        };
        rrul.probe_counts = Some(counts);
        let caption = rrul_chart(&r).expect("a chart").caption;
        assert!(
            caption.contains("2000000 of 2000021 UDP probes got no answer"),
            "{caption}"
        );
        // Without a lost probe, the caption says nothing of them.
        assert!(!rrul_chart(&result())
            .expect("a chart")
            .caption
            .contains("no answer ("));
    }

    #[test]
    fn a_result_without_rrul_is_refused() {
        let mut r = result();
        r.end.rrul = None;
        assert!(rrul_chart(&r).is_err());
    }
}
