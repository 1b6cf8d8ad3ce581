//! `end.rrul`: latency under load (flent's RRUL, "realtime response under load"), put together
//! from the ordinary tests `run --mode rrul` runs at once against one server: a TCP load with
//! streams each way (`--bidir -P N`), and a UDP and a TCP request/response probe paced at a
//! fixed rate that run from before the load starts until after it ends.
//!
//! The probes record one round trip per interval of their test (the interval is their
//! spacing), so the probes' intervals are the time series; the idle and loaded figures are
//! percentiles of the round trips sent before and during the load.

use wirebench_stats::TimeHistogram;

use super::document::{
    End, LoadDirection, LoadInterval, LoadStream, Percentiles, Probe, ProbeKind, Results, Rrul,
};

/// A test of an rrul run and when it started.
#[derive(Debug, Clone, Copy)]
pub struct Part<'a> {
    /// Its results.
    pub results: &'a Results,
    /// When it was started, s since the rrul run began.
    pub offset_s: f64,
}

impl Rrul {
    /// Puts the figures together from the load test (`--bidir`) and the probes' tests (rr,
    /// one round trip per interval).
    pub fn assemble(
        idle_s: f64,
        probe_interval_s: f64,
        load: Part<'_>,
        probes: &[(ProbeKind, Part<'_>)],
    ) -> Self {
        let load_start_s = load.offset_s;
        let load_end_s = load.offset_s + load.results.end.duration_s;
        let mut all: Vec<Probe> = probes
            .iter()
            .flat_map(|&(kind, part)| probe_series(kind, part))
            .collect();
        all.sort_by(|a, b| a.t_s.total_cmp(&b.t_s));
        let phase = |keep: &dyn Fn(f64) -> bool| {
            let mut h = TimeHistogram::new();
            for p in all.iter().filter(|p| keep(p.t_s)) {
                h.record((p.rtt_us * 1e3) as i64);
            }
            h.summary().map(|s| Percentiles::from_ns(&s, 1e3))
        };
        let idle_latency_us = phase(&|t| t < load_start_s);
        let loaded_latency_us = phase(&|t| (load_start_s..=load_end_s).contains(&t));
        let latency_ratio_p50 = match (&idle_latency_us, &loaded_latency_us) {
            (Some(i), Some(l)) if i.p50 > 0.0 => Some(l.p50 / i.p50),
            _ => None,
        };
        let r = load.results;
        let back = r.reverse.as_ref();
        let stream = |direction, e: &End| LoadStream {
            direction,
            received_bps: e.received_bps,
            retransmits: e.retransmits,
        };
        let mut streams: Vec<LoadStream> = r
            .streams
            .iter()
            .map(|e| stream(LoadDirection::Upload, e))
            .collect();
        if let Some(b) = back {
            streams.extend(b.streams.iter().map(|e| stream(LoadDirection::Download, e)));
        }
        let down_intervals = back.map_or(&[][..], |b| &b.intervals[..]);
        let load_series = r
            .intervals
            .iter()
            .enumerate()
            .map(|(i, up)| LoadInterval {
                t_s: load.offset_s + up.end_s,
                upload_bps: up.received_bps,
                download_bps: down_intervals.get(i).and_then(|d| d.received_bps),
            })
            .collect();
        Self {
            idle_s,
            load_start_s,
            load_end_s,
            probe_interval_s,
            idle_latency_us,
            loaded_latency_us,
            latency_ratio_p50,
            upload_bps: r.end.received_bps,
            download_bps: back.and_then(|b| b.end.received_bps),
            streams,
            udp_probe_timeouts: probes
                .iter()
                .filter(|(k, _)| *k == ProbeKind::Udp)
                .filter_map(|(_, p)| p.results.end.rr_timeouts)
                .sum(),
            load: load_series,
            probes: all,
        }
    }
}

/// A probe test's round trips: one per interval that holds one (its median), sent within
/// that interval, drawn at its middle. The rr client closes the intervals that passed while
/// a transaction was out only when it returns, the first of them with the round trip in
/// it: so the interval that holds a round trip is the one its request left in, however long
/// the answer took.
fn probe_series(kind: ProbeKind, part: Part<'_>) -> Vec<Probe> {
    part.results
        .intervals
        .iter()
        .filter_map(|iv| {
            let rtt_us = iv.latency_p50_us?;
            Some(Probe {
                t_s: part.offset_s + (iv.start_s + iv.end_s) / 2.0,
                kind,
                rtt_us,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::IntervalView;

    fn interval(start_s: f64, rtt_us: Option<f64>, bps: f64) -> IntervalView {
        IntervalView {
            start_s,
            end_s: start_s + 0.1,
            sent_bytes: Some(0),
            sent_messages: Some(0),
            received_bytes: Some(0),
            received_messages: Some(0),
            sent_bps: Some(bps),
            received_bps: Some(bps),
            lost: None,
            jitter_ms: None,
            delay_p50_ms: None,
            delay_p99_ms: None,
            latency_p50_us: rtt_us,
            latency_p99_us: rtt_us,
            delay_variation_p50_ms: None,
            delay_variation_p99_ms: None,
            retransmits: None,
            cwnd_bytes: None,
        }
    }

    fn results(intervals: Vec<IntervalView>, duration_s: f64) -> Results {
        let doc = serde_json::json!({
            "schema": 1, "wirebench": "t", "server": "s",
            "test": {"protocol": "tcp", "mechanism": "rr", "direction": "forward", "size": 64,
                     "rate_bps": 0, "rate_pps": 10, "gap_s": 0.0, "streams": 1,
                     "interval_s": 0.1, "drain_s": 1.0, "ack_timeout_s": 0.2},
            "datapath": {},
            "intervals": [],
            "end": {"duration_s": duration_s, "sent": {"bytes": 0, "messages": 0, "duration_s": 0.0},
                    "received": {"bytes": 0, "messages": 0, "duration_s": 0.0},
                    "sent_bps": 0.0, "received_bps": 8e6, "retransmits": 0, "local_drops": 0,
                    "resources": {}},
        });
        let mut r: Results = serde_json::from_value(doc).expect("a valid document");
        r.intervals = intervals;
        r
    }

    #[test]
    fn probes_split_into_idle_and_loaded_phases() {
        // 3 s of probes: 10 ms idle, 100 ms while the load runs from 1 s to 2 s.
        let probe = results(
            (0..30)
                .map(|i| {
                    let t = f64::from(i) / 10.0;
                    let rtt = if (1.0..2.0).contains(&t) {
                        100_000.0
                    } else {
                        10_000.0
                    };
                    interval(t, Some(rtt), 0.0)
                })
                .collect(),
            3.0,
        );
        let load = results(
            (0..10)
                .map(|i| interval(f64::from(i) / 10.0, None, 8e6))
                .collect(),
            1.0,
        );
        let r = Rrul::assemble(
            1.0,
            0.1,
            Part {
                results: &load,
                offset_s: 1.0,
            },
            &[(
                ProbeKind::Tcp,
                Part {
                    results: &probe,
                    offset_s: 0.0,
                },
            )],
        );
        let idle = r.idle_latency_us.expect("idle probes");
        let loaded = r.loaded_latency_us.expect("loaded probes");
        assert!((idle.p50 - 10_000.0).abs() < 200.0, "{idle:?}");
        assert!((loaded.p50 - 100_000.0).abs() < 2_000.0, "{loaded:?}");
        assert!(r.latency_ratio_p50.is_some_and(|x| x > 9.0));
        assert_eq!(r.probes.len(), 30);
        assert_eq!(r.load.len(), 10);
        assert!((r.load[0].t_s - 1.1).abs() < 1e-9);
        assert!(r.upload_bps.is_some_and(|b| (b - 8e6).abs() < 1.0));
        assert!(r.probes.windows(2).all(|w| w[0].t_s <= w[1].t_s));
    }

    #[test]
    fn the_document_spells_kinds_in_lowercase() {
        let p = Probe {
            t_s: 1.0,
            kind: ProbeKind::Udp,
            rtt_us: 5.0,
        };
        let s = serde_json::to_string(&p).expect("serializes");
        assert!(s.contains("\"kind\":\"udp\""), "{s}");
    }
}
