//! The chart of a `run --mode rrul` result: flent's "all" view, download, upload and the
//! probes' round trips on one time axis, the load's phase shaded in each panel.

use wirebench_proto::results::{ProbeKind, Results, Rrul};

use super::chart::{Axis, Band, Chart, Palette, Panel, Pt, Series, Style};
use super::scale::{with_unit, Quantity};
use super::PlotError;

/// The series' labels, in the palette's order.
const DOWNLOAD: &str = "download";
const UPLOAD: &str = "upload";
const UDP_RTT: &str = "UDP round trip";
const TCP_RTT: &str = "TCP round trip";

/// Steps of a rate: each interval drawn from its start (its end less one interval, or the
/// load's start for the first) to its end.
fn steps(
    rrul: &Rrul,
    f: impl Fn(&wirebench_proto::results::LoadInterval) -> Option<f64>,
) -> Vec<Pt> {
    let mut start = rrul.load_start_s;
    let mut out = Vec::with_capacity(rrul.load.len() * 2);
    for iv in &rrul.load {
        let from = start.max(iv.t_s - rrul.probe_interval_s);
        // An interval nobody measured is left out, not drawn as zero.
        if let Some(v) = f(iv) {
            out.push(Pt::at(from, v));
            out.push(Pt::at(iv.t_s, v));
        }
        start = iv.t_s;
    }
    out
}

/// The round trips of one kind of probe, in seconds.
fn probes(rrul: &Rrul, kind: ProbeKind) -> Vec<Pt> {
    rrul.probes
        .iter()
        .filter(|p| p.kind == kind)
        .map(|p| Pt::at(p.t_s, p.rtt_us * 1e-6))
        .collect()
}

fn series(label: &str, style: Style, points: Vec<Pt>) -> Option<Series> {
    (!points.is_empty()).then(|| Series {
        label: label.into(),
        style,
        points,
    })
}

/// The chart of an rrul result.
///
/// # Errors
///
/// When the result holds no `end.rrul` (it was not made by `run --mode rrul`).
pub fn rrul_chart(r: &Results) -> Result<Chart, PlotError> {
    let rrul = r.end.rrul.as_ref().ok_or(PlotError::NotForResult("rrul"))?;
    let x = Axis::linear("time since the run began", Quantity::Seconds);
    let streams = r.test.streams;
    let band = |text: String| Band {
        from: rrul.load_start_s,
        to: rrul.load_end_s,
        text,
    };
    let mut down = Panel::new(x.clone(), Axis::linear("download", Quantity::BitRate));
    down.series.extend(series(
        DOWNLOAD,
        Style::Line,
        steps(rrul, |i| i.download_bps),
    ));
    down.bands
        .push(band(format!("load: {streams} TCP streams each way")));
    down.weight = 2;
    let mut up = Panel::new(x.clone(), Axis::linear("upload", Quantity::BitRate));
    up.series
        .extend(series(UPLOAD, Style::Line, steps(rrul, |i| i.upload_bps)));
    up.bands.push(band(String::new()));
    up.weight = 2;
    let mut rtt = Panel::new(x, Axis::linear("round-trip time", Quantity::Seconds));
    rtt.series.extend(series(
        UDP_RTT,
        Style::LinePoints,
        probes(rrul, ProbeKind::Udp),
    ));
    rtt.series.extend(series(
        TCP_RTT,
        Style::LinePoints,
        probes(rrul, ProbeKind::Tcp),
    ));
    rtt.bands.push(band(String::new()));
    rtt.weight = 3;
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
             {} interval; each probe is drawn when it was sent.",
            r.server,
            with_unit(Quantity::Seconds, rrul.probe_interval_s),
            with_unit(Quantity::Seconds, rrul.idle_s),
            ms(rrul.idle_latency_us.as_ref()),
            ms(rrul.loaded_latency_us.as_ref()),
            rate_or_unknown(rrul.upload_bps),
            rate_or_unknown(rrul.download_bps),
            with_unit(Quantity::Seconds, rrul.probe_interval_s),
        ),
        panels: vec![down, up, rtt],
        palette: Palette::ordered(&[DOWNLOAD, UPLOAD, UDP_RTT, TCP_RTT]),
        no_legend: false,
    };
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
        // Rates in Mbit/s, round trips in ms: units chosen for the data's range.
        assert!(svg.contains("download (Mbit/s)"), "no Mbit/s download axis");
        assert!(svg.contains("upload (Mbit/s)"), "no Mbit/s upload axis");
        assert!(
            svg.contains("round-trip time (ms)"),
            "no ms round-trip axis"
        );
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
    fn a_result_without_rrul_is_refused() {
        let mut r = result();
        r.end.rrul = None;
        assert!(rrul_chart(&r).is_err());
    }
}
