//! Every plot kind rendered to SVG and PNG, and its SVG read back as XML: no two pieces of
//! text overlap (their extents from the embedded font's metrics, as the PNG lays them
//! out), every axis and legend entry names its unit, and a series with a gap is drawn as
//! separate lines.

use std::collections::BTreeMap;
use std::path::PathBuf;

use wirebench_proto::packet_log::{file_header, Arrived, Record, RECORD_LEN};
use wirebench_proto::results::{
    IntervalView, LoadInterval, Percentiles, Probe, ProbeKind, Results, Rrul, UsBucket,
};

use super::chart::{Chart, Palette, Style};
use super::glyphs::text_width;
use super::look::{Look, AXIS_PX};
use super::scale::Quantity;
use super::{
    arrival_chart, experiment_chart, link_log_chart, packet_delay_chart, png_bytes, result_chart,
    rrul_comparison, svg_string_with, Kind, Options,
};
use crate::experiment::summary::{ExperimentSummary, Knee, PointSummary};

/// A piece of text as drawn: what it says, its box in pixels, its em.
#[derive(Debug, Clone)]
struct Placed {
    text: String,
    em: f64,
    x0: f64,
    y0: f64,
    x1: f64,
    y1: f64,
}

/// Every `<text>` of an SVG with its box: its advance width from the font, from the top of
/// its tallest glyph (0.76 em above the baseline, where plotters' "top" anchor puts it) to
/// its descenders (0.24 em below), placed by its anchor and turned by its rotation.
fn placed(svg: &str) -> Vec<Placed> {
    let doc = roxmltree::Document::parse(svg).expect("the SVG is XML");
    let num = |n: &roxmltree::Node, a: &str| -> f64 {
        n.attribute(a).and_then(|v| v.parse().ok()).unwrap_or(0.0)
    };
    let mut out = Vec::new();
    for n in doc.descendants().filter(|n| n.has_tag_name("text")) {
        let text = n.text().unwrap_or("").trim().to_string();
        if text.is_empty() {
            continue;
        }
        let em = num(&n, "font-size");
        let (x, y) = (num(&n, "x"), num(&n, "y"));
        let w = text_width(em * 1.24, &text);
        // DejaVu Sans' x-height is 0.547 em: "0.5ex" is about 0.27 em.
        let baseline = y + em
            * match n.attribute("dy") {
                Some("0.76em") => 0.76,
                Some("0.5ex") => 0.27,
                Some("-0.5ex") => -0.27,
                _ => 0.0,
            };
        let left = match n.attribute("text-anchor") {
            Some("middle") => x - w / 2.0,
            Some("end") => x - w,
            _ => x,
        };
        let (mut x0, mut y0, mut x1, mut y1) =
            (left, baseline - 0.76 * em, left + w, baseline + 0.24 * em);
        if let Some(t) = n.attribute("transform") {
            // rotate(270, cx, cy): (x, y) → (cx + (y − cy), cy − (x − cx)).
            let args: Vec<f64> = t
                .trim_start_matches("rotate(")
                .trim_end_matches(')')
                .split(',')
                .filter_map(|v| v.trim().parse().ok())
                .collect();
            assert_eq!(
                args.first(),
                Some(&270.0),
                "{t}: only upright text is drawn"
            );
            let (cx, cy) = (args[1], args[2]);
            let turn = |px: f64, py: f64| (cx + (py - cy), cy - (px - cx));
            let (a, b) = (turn(x0, y0), turn(x1, y1));
            (x0, x1) = (a.0.min(b.0), a.0.max(b.0));
            (y0, y1) = (a.1.min(b.1), a.1.max(b.1));
        }
        out.push(Placed {
            text,
            em,
            x0,
            y0,
            x1,
            y1,
        });
    }
    out
}

/// Fails naming the first two pieces of text whose boxes overlap (by more than a pixel),
/// or one that leaves the image.
fn assert_nothing_collides(name: &str, svg: &str, size: (u32, u32)) {
    let t = placed(svg);
    for (i, a) in t.iter().enumerate() {
        assert!(
            a.x0 >= -1.0
                && a.y0 >= -1.0
                && a.x1 <= f64::from(size.0) + 1.0
                && a.y1 <= f64::from(size.1) + 1.0,
            "{name}: {a:?} leaves the {size:?} image"
        );
        for b in &t[i + 1..] {
            let x = a.x1.min(b.x1) - a.x0.max(b.x0);
            let y = a.y1.min(b.y1) - a.y0.max(b.y0);
            assert!(x <= 1.0 || y <= 1.0, "{name}: {a:?} and {b:?} overlap");
        }
    }
}

/// The units a title or legend may name.
const UNITS: [&str; 17] = [
    "bit/s",
    "kbit/s",
    "Mbit/s",
    "Gbit/s",
    "Tbit/s",
    "ns",
    "µs",
    "ms",
    "s",
    "B",
    "kB",
    "MB",
    "GB",
    "%",
    "packets/s",
    "streams",
    "datagrams",
];

/// Every axis title names its unit in parentheses, unless its ticks carry units (a log
/// axis of rates, times or sizes; percentages on a log axis; category labels) or it counts
/// (sequence numbers); every legend entry with a number names the number's unit.
fn assert_units_named(name: &str, chart: &Chart, svg: &str, opts: &Options) {
    let axis_em = Look::new(opts).em(AXIS_PX);
    let titles: Vec<String> = placed(svg)
        .into_iter()
        // plotters sets its own labels at whole sizes: within half a pixel of the em.
        .filter(|p| (p.em - axis_em).abs() < 0.5)
        .map(|p| p.text)
        .collect();
    // A title may be set in two lines: its unit then a line of its own.
    let all = titles.join(" ");
    for p in &chart.panels {
        for (axis, is_y) in [(&p.y, true), (&p.x, false)] {
            let exempt = axis.quantity == Quantity::Count
                || !axis.categories.is_empty()
                || (axis.log && axis.quantity != Quantity::Fraction);
            if exempt {
                continue;
            }
            let named = UNITS.iter().any(|u| {
                all.contains(&format!("{} (", axis.label)) && all.contains(&format!("({u})"))
            });
            assert!(
                named || !is_y && !all.contains(&axis.label),
                "{name}: the axis {:?} names no unit in {titles:?}",
                axis.label
            );
        }
    }
    // A number in a legend ("size 1472 B", "4 TCP streams") has its unit within the next
    // two words ("99th percentile" is no number, "link 0" a name; "size=1472" names none).
    for (label, _, _) in chart.legend() {
        let words: Vec<&str> = label
            .split([' ', ',', ':'])
            .filter(|w| !w.is_empty())
            .collect();
        for (i, w) in words.iter().enumerate() {
            // "link 0" names a link.
            let name = i > 0 && words[i - 1] == "link";
            if !name && w.chars().all(|c| c.is_ascii_digit() || c == '.') {
                assert!(
                    words[i + 1..].iter().take(2).any(|u| UNITS.contains(u)),
                    "{name}: the legend entry {label:?} names no unit"
                );
            }
        }
        assert!(!label.contains('='), "{name}: {label:?}");
    }
}

/// How many lines of more than one point are drawn in `colour`.
fn lines_in(svg: &str, colour: plotters::style::RGBColor) -> usize {
    let hex = format!("#{:02X}{:02X}{:02X}", colour.0, colour.1, colour.2);
    let doc = roxmltree::Document::parse(svg).expect("the SVG is XML");
    doc.descendants()
        .filter(|n| n.has_tag_name("polyline") && n.attribute("stroke") == Some(hex.as_str()))
        .filter(|n| {
            n.attribute("points")
                .is_some_and(|p| p.split_whitespace().count() > 2)
        })
        .count()
}

fn point(params: &[(&str, &str)], offered: Option<f64>, figs: &[(&str, &[f64])]) -> PointSummary {
    PointSummary {
        point: params
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        offered_bps: offered,
        trials: figs.first().map_or(0, |f| f.1.len() as u64),
        failed: 0,
        figures: figs
            .iter()
            .filter_map(|(k, v)| wirebench_stats::summarize(v).map(|s| (k.to_string(), s)))
            .collect(),
        files: Vec::new(),
        failures: Vec::new(),
    }
}

/// A rate sweep of datagrams of 500 and 1472 bytes, 25 kbit/s to 5 Gbit/s, some loss.
fn rate_sweep() -> ExperimentSummary {
    let mut points = Vec::new();
    for size in ["500", "1472"] {
        for rate in ["25k", "100k", "3.3M", "79370053", "500M", "5000000000"] {
            let bps = match rate {
                "25k" => 25e3,
                "100k" => 1e5,
                "3.3M" => 3.3e6,
                "79370053" => 79_370_053.0,
                "500M" => 5e8,
                _ => 5e9,
            };
            let got = if bps > 1e9 { 0.6 } else { 0.995 };
            points.push(point(
                &[("rate", rate), ("size", size)],
                Some(bps),
                &[
                    (
                        "received_bps",
                        &[bps * got, bps * got * 0.98, bps * got * 1.01],
                    ),
                    ("delivered_fraction", &[got, got * 0.98, got]),
                    ("loss_ratio", &[1.0 - got, 1.0 - got * 0.98, 1.0 - got]),
                ],
            ));
        }
    }
    ExperimentSummary {
        points,
        knees: ["500", "1472"]
            .iter()
            .map(|s| Knee {
                series: BTreeMap::from([("size".to_string(), s.to_string())]),
                knee99_bps: Some(5e8),
                knee95_bps: Some(5e8),
                tested_up_to_bps: Some(5e9),
            })
            .collect(),
    }
}

/// A transfer-time sweep.
fn bytes_sweep() -> ExperimentSummary {
    let points = ["10K", "100K", "1M", "10M", "100M"]
        .iter()
        .enumerate()
        .map(|(i, b)| {
            let t = 0.0002 * 10f64.powi(i as i32);
            point(
                &[("bytes", b)],
                None,
                &[("duration_s", &[t, t * 1.1]), ("received_bps", &[8e9, 7e9])],
            )
        })
        .collect();
    ExperimentSummary {
        points,
        knees: Vec::new(),
    }
}

/// An rrul sweep's summary over the load's length (no trial files: medians only).
fn rrul_sweep() -> ExperimentSummary {
    let points = ["5s", "10s", "30s"]
        .iter()
        .map(|t| {
            point(
                &[("time", t)],
                None,
                &[
                    ("rrul_loaded_latency_p50_us", &[250e3, 300e3, 350e3]),
                    ("received_bps", &[1e7, 1e7, 1e7]),
                ],
            )
        })
        .collect();
    ExperimentSummary {
        points,
        knees: Vec::new(),
    }
}

fn document(mechanism: &str) -> Results {
    let doc = serde_json::json!({
        "schema": 1, "wirebench": "t", "server": "10.77.0.2:5300",
        "test": {"protocol": "tcp", "mechanism": mechanism, "direction": "bidir",
                 "size": 131072, "rate_bps": 0, "rate_pps": 0, "gap_s": 0.0,
                 "streams": 4, "interval_s": 0.5, "drain_s": 1.0,
                 "ack_timeout_s": 0.2, "congestion": "cubic"},
        "datapath": {},
        "intervals": [],
        "end": {"duration_s": 10.0,
                "sent": {"bytes": 0, "messages": 0, "duration_s": 0.0},
                "received": {"bytes": 0, "messages": 0, "duration_s": 0.0},
                "sent_bps": 0.0, "received_bps": 0.0, "retransmits": 0,
                "local_drops": 0, "resources": {}},
    });
    serde_json::from_value(doc).expect("a valid document")
}

fn interval(i: u32, bps: Option<f64>) -> IntervalView {
    let a = f64::from(i) * 0.5;
    let mut iv: IntervalView = serde_json::from_value(serde_json::json!({
        "start_s": a, "end_s": a + 0.5,
    }))
    .expect("an interval");
    iv.sent_bps = bps;
    iv.received_bps = bps;
    iv.latency_p50_us = bps.map(|_| 200.0 + f64::from(i));
    iv.latency_p99_us = bps.map(|_| 400.0 + f64::from(i));
    iv
}

/// A request/response run of 10 s: one interval nobody measured (a gap in every line), one
/// at 0 (a step), one receive burst 6 times the rest, and a round-trip histogram.
fn rr_result() -> Results {
    let mut r = document("rr");
    r.intervals = (0..20)
        .map(|i| {
            let v = match i {
                7 => None,
                9 => Some(0.0),
                12 => Some(120e6),
                _ => Some(20e6 + f64::from(i % 3) * 1e6),
            };
            interval(i, v)
        })
        .collect();
    r.end.latency_us = Some(Percentiles {
        count: 1000,
        min: 150.0,
        p50: 200.0,
        p90: 300.0,
        p99: 5000.0,
        p999: 9000.0,
        max: 10000.0,
        histogram: (0..40)
            .map(|i| UsBucket {
                min_us: 150.0 * 1.15f64.powi(i),
                max_us: 150.0 * 1.15f64.powi(i + 1),
                count: 100 / (i as u64 + 1),
            })
            .collect(),
        ..Percentiles::default()
    });
    r
}

/// An rrul run: 5 s idle, 15 s of load, 5 s idle; no UDP answer from 8 to 11 s (a gap),
/// a TCP stall of 600 ms at 6 s, and a queue that fills to 28 ms.
fn rrul_result(loaded_ms: f64) -> Results {
    let mut r = document("stream");
    let probes = (0..250)
        .flat_map(|i| {
            let t = f64::from(i) / 10.0;
            let base = if (5.0..20.0).contains(&t) {
                loaded_ms
            } else {
                20.0
            };
            [ProbeKind::Udp, ProbeKind::Tcp]
                .into_iter()
                .filter(move |k| !(*k == ProbeKind::Udp && (8.0..11.0).contains(&t)))
                .map(move |kind| Probe {
                    t_s: t,
                    kind,
                    rtt_us: if kind == ProbeKind::Tcp && (6.0..6.1).contains(&t) {
                        600_000.0
                    } else {
                        (base + f64::from(i % 5) * 0.4) * 1e3
                    },
                })
        })
        .collect();
    r.end.rrul = Some(Rrul {
        idle_s: 5.0,
        load_start_s: 5.0,
        load_end_s: 20.0,
        probe_interval_s: 0.1,
        upload_bps: Some(18e6),
        download_bps: Some(19e6),
        latency_ratio_p50: Some(1.4),
        load: (1..=150)
            .map(|i| LoadInterval {
                t_s: 5.0 + f64::from(i) / 10.0,
                upload_bps: Some(18e6),
                // A receive burst of 120 Mbit/s, and an interval with no report.
                download_bps: match i {
                    40 => Some(120e6),
                    90 => None,
                    _ => Some(19e6 + f64::from(i % 4) * 0.3e6),
                },
            })
            .collect(),
        probes,
        ..Rrul::default()
    });
    r
}

fn temp(name: &str, bytes: &[u8]) -> PathBuf {
    let p = std::env::temp_dir().join(format!("wirebench-svgchecks-{}-{name}", std::process::id()));
    std::fs::write(&p, bytes).expect("write");
    p
}

/// A packet log of 2000 datagrams, every 50th lost.
fn packet_log() -> PathBuf {
    let mut bytes = file_header().to_vec();
    for seq in 0..2000u64 {
        let r = if seq % 50 == 49 {
            Record::Lost {
                first: seq,
                count: 1,
            }
        } else {
            Record::Datagram {
                kind: Arrived::Received,
                seq,
                size: 1000,
                send_unix_ns: 1_000_000_000 + seq * 10_000,
                arrival_unix_ns: 1_000_000_000 + seq * 10_000 + 40_000 + (seq % 7) * 3_000,
            }
        };
        let mut b = [0u8; RECORD_LEN];
        r.encode(&mut b);
        bytes.extend_from_slice(&b);
    }
    temp("packets.log", &bytes)
}

/// A link log of two directions over 10 s, with a 3-second hole in its rows.
fn link_log() -> PathBuf {
    let mut csv = String::from("t_s,link,direction,delivered_bps,max_queue_delay_ms\n");
    for i in 0..100 {
        if (40..70).contains(&i) {
            continue;
        }
        let t = f64::from(i) * 0.1;
        let burst = if i == 20 { 120e6 } else { 20e6 };
        csv.push_str(&format!(
            "{t:.1},0,up,{burst},{}\n",
            5.0 + f64::from(i % 10)
        ));
        csv.push_str(&format!("{t:.1},0,down,{},{}\n", 1e6, 0.5));
    }
    temp("link.csv", csv.as_bytes())
}

/// A link log with capacities, over 10 s with a 3-second hole in its rows: `up` through a
/// trace alternating 48 and 6 Mbit/s each second, `down` with no limit (capacity 0); with
/// `links` links of those two directions each.
fn capacity_log(links: u32) -> PathBuf {
    let mut csv =
        String::from("t_s,link,direction,delivered_bps,max_queue_delay_ms,capacity_bps\n");
    for i in 0..100 {
        if (40..70).contains(&i) {
            continue;
        }
        let t = f64::from(i) * 0.1;
        let capacity = if (i / 10) % 2 == 0 { 48.128e6 } else { 6.016e6 };
        for link in 0..links {
            csv.push_str(&format!(
                "{t:.1},{link},up,{},{},{capacity}\n",
                f64::min(20e6, capacity),
                5.0 + f64::from(i % 10)
            ));
            csv.push_str(&format!("{t:.1},{link},down,{},{},0\n", 1e6, 0.5));
        }
    }
    temp(&format!("capacity-{links}.csv"), csv.as_bytes())
}

/// Every kind, from the fixtures above.
fn every_chart() -> Vec<(&'static str, Chart)> {
    let sweep = rate_sweep();
    let rr = rr_result();
    let rrul = rrul_result(28.0);
    let log = packet_log();
    let link = link_log();
    let ok = |c: Result<Chart, super::PlotError>, what: &str| {
        c.unwrap_or_else(|e| panic!("{what}: {e}"))
    };
    vec![
        ("rate", ok(experiment_chart(Kind::Rate, &sweep), "rate")),
        (
            "received",
            ok(experiment_chart(Kind::Received, &sweep), "received"),
        ),
        ("box", ok(experiment_chart(Kind::Box, &sweep), "box")),
        (
            "time",
            ok(experiment_chart(Kind::Time, &bytes_sweep()), "time"),
        ),
        (
            "rrul box",
            ok(experiment_chart(Kind::Box, &rrul_sweep()), "rrul box"),
        ),
        (
            "throughput",
            ok(result_chart(Kind::Throughput, &rr), "throughput"),
        ),
        ("latency", ok(result_chart(Kind::Latency, &rr), "latency")),
        ("rrul", ok(result_chart(Kind::Rrul, &rrul), "rrul")),
        (
            "rrul latency",
            ok(result_chart(Kind::Latency, &rrul), "rrul latency"),
        ),
        (
            "rrul comparison",
            ok(
                rrul_comparison(&[
                    ("queue 1000".into(), rrul_result(350.0)),
                    ("queue 20".into(), rrul.clone()),
                ]),
                "comparison",
            ),
        ),
        ("arrival", ok(arrival_chart(&log), "arrival")),
        (
            "one-way delay",
            ok(packet_delay_chart(&log), "one-way delay"),
        ),
        (
            "link throughput",
            ok(link_log_chart(&link, Kind::Throughput), "link"),
        ),
        (
            "link delay",
            ok(link_log_chart(&link, Kind::Latency), "link delay"),
        ),
        (
            "link capacity",
            ok(
                link_log_chart(&capacity_log(1), Kind::Throughput),
                "capacity",
            ),
        ),
        (
            "links' capacity",
            ok(
                link_log_chart(&capacity_log(3), Kind::Throughput),
                "capacities",
            ),
        ),
    ]
}

#[test]
fn every_kind_renders_with_no_text_colliding_and_every_unit_named() {
    let charts = every_chart();
    let sizes = [
        Options::default(),
        // Old 960 × 600 at a screen's resolution, and a narrow one at print resolution.
        Options {
            width: Some(960),
            height: Some(600),
            dpi: 165.0,
            ..Options::default()
        },
        Options {
            width: Some(800),
            dpi: 220.0,
            ..Options::default()
        },
    ];
    for (name, chart) in &charts {
        for opts in &sizes {
            let svg = svg_string_with(chart, opts).unwrap_or_else(|e| panic!("{name}: {e}"));
            let size = opts.size(chart).expect("a size");
            assert!(
                svg.contains(&format!("width=\"{}\"", size.0)),
                "{name}: SVG width"
            );
            assert_nothing_collides(&format!("{name} at {size:?}"), &svg, size);
            assert_units_named(name, chart, &svg, opts);
            let png = png_bytes(chart, opts).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"), "{name}: a PNG");
        }
    }
}

#[test]
fn a_link_log_shades_capacity_under_what_was_delivered() {
    let chart = link_log_chart(&capacity_log(1), Kind::Throughput).expect("link");
    let panels: Vec<(&str, Vec<(&str, Style)>)> = chart
        .panels
        .iter()
        .map(|p| {
            let series = p
                .series
                .iter()
                .map(|s| (s.label.as_str(), s.style))
                .collect();
            (p.y.label.as_str(), series)
        })
        .collect();
    // A panel per direction, as mm-link graphs each on its own; the capacity shaded first
    // so that the delivered line is drawn over it; none for a direction without a limit.
    assert_eq!(
        panels,
        [
            (
                "link 0 up",
                vec![("capacity", Style::Area), ("delivered", Style::Line)]
            ),
            ("link 0 down", vec![("delivered", Style::Line)]),
        ]
    );
    assert!(chart.caption.contains("capacity"), "{}", chart.caption);
    let svg = svg_string_with(&chart, &Options::default()).expect("svg");
    let c = chart.palette.color("capacity");
    assert_ne!(c, chart.palette.color("delivered"));
    let hex = format!("#{:02X}{:02X}{:02X}", c.0, c.1, c.2);
    let doc = roxmltree::Document::parse(&svg).expect("the SVG is XML");
    let shaded = doc
        .descendants()
        .filter(|n| n.has_tag_name("polygon") && n.attribute("fill") == Some(hex.as_str()))
        .count();
    // One shape per run of rows (the 3 s hole splits it), each with its edge.
    assert_eq!(shaded, 2, "{hex}");
    assert_eq!(lines_in(&svg, c), 2);
    // More directions than panels: one panel, a shaded capacity per limited direction.
    let many = link_log_chart(&capacity_log(3), Kind::Throughput).expect("links");
    assert_eq!(many.panels.len(), 1);
    let areas: Vec<&str> = many.panels[0]
        .series
        .iter()
        .filter(|s| s.style == Style::Area)
        .map(|s| s.label.as_str())
        .collect();
    assert_eq!(
        areas,
        [
            "link 0 up capacity",
            "link 1 up capacity",
            "link 2 up capacity"
        ]
    );
    // The deliveries keep the colours they have in a log without capacities.
    let without =
        Palette::new((0..3).flat_map(|l| [format!("link {l} up"), format!("link {l} down")]));
    for label in ["link 0 down", "link 1 up", "link 2 up"] {
        assert_eq!(many.palette.color(label), without.color(label), "{label}");
    }
    // The latency view, and a log from before the column, draw no capacity.
    let delay = link_log_chart(&capacity_log(1), Kind::Latency).expect("delay");
    assert!(delay.panels[0]
        .series
        .iter()
        .all(|s| s.style == Style::Line));
    let old = link_log_chart(&link_log(), Kind::Throughput).expect("old");
    assert_eq!(old.panels.len(), 1);
    assert!(!old.caption.contains("capacity"), "{}", old.caption);
}

#[test]
fn a_series_with_a_gap_is_drawn_as_separate_lines() {
    let opts = Options::default();
    // rrul: no UDP answer from 8 to 11 s, one download interval unreported.
    let rrul = result_chart(Kind::Rrul, &rrul_result(28.0)).expect("rrul");
    let svg = svg_string_with(&rrul, &opts).expect("svg");
    assert_eq!(lines_in(&svg, rrul.palette.color("UDP round trip")), 2);
    assert_eq!(lines_in(&svg, rrul.palette.color("download")), 2);
    // One interval of a run unmeasured: every line of the throughput plot breaks there;
    // the interval at 0 is a step down, not a break.
    let tp = result_chart(Kind::Throughput, &rr_result()).expect("throughput");
    let svg = svg_string_with(&tp, &opts).expect("svg");
    for label in ["received", "median"] {
        assert_eq!(lines_in(&svg, tp.palette.color(label)), 2, "{label}");
    }
    let received = &tp.panels[0].series[1];
    assert!(
        received.points.iter().any(|p| p.y == 0.0),
        "the 0 interval is drawn"
    );
    // A link log with 3 s of no rows.
    let link = link_log_chart(&link_log(), Kind::Throughput).expect("link");
    let svg = svg_string_with(&link, &opts).expect("svg");
    assert_eq!(lines_in(&svg, link.palette.color("link 0 up")), 2);
}

#[test]
fn a_capacity_peak_is_the_link_not_a_spike_and_stays_on_the_axis() {
    // A trace's first interval at 54 Mbit/s, then 6 to 10: the delivered rate follows it.
    let mut csv =
        String::from("t_s,link,direction,delivered_bps,max_queue_delay_ms,capacity_bps\n");
    for i in 0..50 {
        let capacity = if i == 0 {
            54e6
        } else {
            6e6 + f64::from(i % 5) * 1e6
        };
        let t = f64::from(i) * 0.1;
        csv.push_str(&format!("{t:.1},0,up,{},5,{capacity}\n", capacity * 0.9));
    }
    let chart = link_log_chart(&temp("capacity-peak.csv", csv.as_bytes()), Kind::Throughput)
        .expect("chart");
    let svg = svg_string_with(&chart, &Options::default()).expect("svg");
    assert!(
        !svg.contains("▲"),
        "the peak is drawn, not marked at the edge"
    );
    let ticks: Vec<String> = placed(&svg).into_iter().map(|p| p.text).collect();
    let top = ticks
        .iter()
        .filter_map(|t| t.parse::<f64>().ok())
        .fold(0.0, f64::max);
    assert!(top >= 54.0, "the axis reaches the peak: {ticks:?}");
}

#[test]
fn a_spike_is_marked_at_the_edge_and_full_range_draws_it() {
    let chart = result_chart(Kind::Rrul, &rrul_result(28.0)).expect("rrul");
    let body = svg_string_with(&chart, &Options::default()).expect("svg");
    // The 600 ms stall and the 120 Mbit/s burst are off the axes, counted in the caption.
    let words: Vec<String> = placed(&body).into_iter().map(|p| p.text).collect();
    let caption = words.join(" ");
    assert!(caption.contains("up to 600 ms"), "the stall in {caption}");
    assert!(
        caption.contains("up to 120 Mbit/s"),
        "the burst in {caption}"
    );
    assert!(body.contains("▲"));
    let full = svg_string_with(
        &chart,
        &Options {
            full_range: true,
            ..Options::default()
        },
    )
    .expect("svg");
    assert!(!full.contains("▲"));
    let ticks = |svg: &str| -> Vec<String> { placed(svg).into_iter().map(|p| p.text).collect() };
    assert!(
        ticks(&full).iter().any(|t| t == "500"),
        "{:?}",
        ticks(&full)
    );
    assert!(
        !ticks(&body).iter().any(|t| t == "500"),
        "{:?}",
        ticks(&body)
    );
}

#[test]
fn panels_of_a_comparison_share_their_units_and_ranges() {
    let chart = rrul_comparison(&[
        ("queue 1000".into(), rrul_result(350.0)),
        ("queue 20".into(), rrul_result(28.0)),
    ])
    .expect("comparison");
    let svg = svg_string_with(&chart, &Options::default()).expect("svg");
    let t = placed(&svg);
    // The two stacks side by side, split halfway between their headings: each row's y
    // tick labels are the same on both sides.
    let centre = |name: &str| {
        t.iter()
            .find(|p| p.text == name)
            .map(|p| (p.x0 + p.x1) / 2.0)
            .expect("a heading")
    };
    let mid = (centre("queue 1000") + centre("queue 20")) / 2.0;
    let tick_em = Look::new(&Options::default()).em(super::look::TICK_PX);
    let ys = |left: bool| -> Vec<(i64, String)> {
        let mut v: Vec<(i64, String)> = t
            .iter()
            .filter(|p| p.text.chars().all(|c| c.is_ascii_digit() || c == '.'))
            .filter(|p| (p.x1 < mid) == left && (p.em - tick_em).abs() < 0.5)
            .map(|p| (p.y0.round() as i64, p.text.clone()))
            .collect();
        v.sort();
        v
    };
    assert!(!ys(true).is_empty());
    assert_eq!(ys(true), ys(false));
    // One unit for the round trips of both.
    let titles: Vec<&str> = t
        .iter()
        .filter(|p| p.text.ends_with(')') && p.text.len() < 40)
        .map(|p| p.text.as_str())
        .collect();
    assert_eq!(
        titles.iter().filter(|u| u.ends_with("(ms)")).count(),
        2,
        "{titles:?}"
    );
    assert!(!titles
        .iter()
        .any(|u| u.ends_with("(s)") && u.contains("round")));
}

#[test]
fn rrul_latency_is_a_cdf_per_probe_kind_idle_and_loaded() {
    let chart = result_chart(Kind::Latency, &rrul_result(350.0)).expect("rrul latency");
    let labels: Vec<String> = chart.legend().into_iter().map(|(l, _, _)| l).collect();
    assert_eq!(labels, ["UDP idle", "UDP loaded", "TCP idle", "TCP loaded"]);
    // 20 ms idle against 350 ms (and a 600 ms stall): more than 30×, so x is log.
    let chart = result_chart(Kind::Latency, &rrul_result(700.0)).expect("rrul latency");
    assert!(chart.panels[0].x.log);
}

#[test]
fn the_y_scale_can_be_forced_either_way() {
    let chart = result_chart(Kind::Throughput, &rr_result()).expect("throughput");
    let texts = |opts: &Options| -> Vec<String> {
        let svg = svg_string_with(&chart, opts).expect("svg");
        placed(&svg).into_iter().map(|p| p.text).collect()
    };
    // Log: each tick carries its unit ("10 Mbit/s"); linear: the title does.
    let log = texts(&Options {
        y_scale: super::YScale::Log,
        ..Options::default()
    });
    assert!(log.iter().any(|t| t.ends_with(" Mbit/s")), "{log:?}");
    let linear = texts(&Options {
        y_scale: super::YScale::Linear,
        ..Options::default()
    });
    assert!(linear.iter().any(|t| t == "rate (Mbit/s)"), "{linear:?}");
}

/// A QUIC sender's intervals carry its congestion window and round trip: the rate chart
/// draws both below the rate; an rr result's round trips stay the transactions' (no stack
/// round trip drawn twice).
#[test]
fn a_quic_result_shows_its_window_and_round_trip_below_the_rate() {
    let mut r = document("stream");
    r.test.protocol = wirebench_proto::spec::Protocol::Quic;
    r.intervals = (0..6)
        .map(|i| {
            let mut iv = interval(i, Some(1e8));
            iv.latency_p50_us = None;
            iv.latency_p99_us = None;
            iv.cwnd_bytes = Some(100_000 + u64::from(i) * 1000);
            iv.rtt_us = Some(2_000);
            iv
        })
        .collect();
    let chart = result_chart(Kind::Throughput, &r).expect("a chart");
    let labels: Vec<&str> = chart.panels.iter().map(|p| p.y.label.as_str()).collect();
    assert_eq!(
        labels,
        ["rate", "congestion window", "smoothed round trip"],
        "{labels:?}"
    );
    assert!(
        chart.caption.contains("congestion window"),
        "{}",
        chart.caption
    );
    // Request/response: its own round trips are drawn; the stack's are not.
    let mut rr = rr_result();
    for iv in &mut rr.intervals {
        iv.rtt_us = Some(2_000);
    }
    let chart = result_chart(Kind::Throughput, &rr).expect("a chart");
    assert!(chart
        .panels
        .iter()
        .all(|p| p.y.label != "smoothed round trip"));
}
