//! `end.rrul`: latency under load (flent's RRUL, "realtime response under load"), put together
//! from the ordinary tests `run --mode rrul` runs at once against one server: a TCP load with
//! streams each way (`--bidir -P N`), and a UDP and a TCP request/response probe that run
//! from before the load starts until after it ends.
//!
//! The UDP probe is open loop (irtt's way): a request every spacing whatever the answers,
//! each request's send time and round trip (or its loss) recorded by its sender; its round
//! trips are the headline figures. The TCP probe is closed loop (one transaction in flight,
//! as an application's request over a busy connection), paced at one per interval, so its
//! intervals are its time series; it is reported apart. Each figure is split into three
//! phases by when the probe was sent: before, during and after the load.

use wirebench_stats::TimeHistogram;

use super::document::{
    End, LoadDirection, LoadInterval, LoadStream, LostProbe, Percentiles, PhaseCounts, Probe,
    ProbeCounts, ProbeKind, Results, Rrul, RrulProbeCounts, UdpProbeSummary,
};

/// A test of an rrul run and when it started.
#[derive(Debug, Clone, Copy)]
pub struct Part<'a> {
    /// Its results.
    pub results: &'a Results,
    /// When it was started, s since the rrul run began.
    pub offset_s: f64,
}

/// One request of an open-loop probe, on the rrul run's clock.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SentProbe {
    /// When it left, s since the rrul run began.
    pub t_s: f64,
    /// Its round trip, µs; `None`: unanswered within the timeout (lost).
    pub rtt_us: Option<f64>,
}

/// An open-loop UDP probe's requests (in the order sent) and what else it counted.
#[derive(Debug, Clone, Copy)]
pub struct OpenLoop<'a> {
    /// Every request whose fate is known.
    pub sent: &'a [SentProbe],
    /// How it sent, and the answers it did not count.
    pub summary: UdpProbeSummary,
}

/// What [`Rrul::assemble`] puts together.
#[derive(Debug, Clone, Copy)]
pub struct RrulParts<'a> {
    /// Each idle phase's length, s.
    pub idle_s: f64,
    /// The probes' spacing, s.
    pub probe_interval_s: f64,
    /// The load test (`--bidir`).
    pub load: Part<'a>,
    /// The UDP probe's requests, when it ran.
    pub udp: Option<OpenLoop<'a>>,
    /// The TCP probe's test (rr, one transaction per interval), when it ran.
    pub tcp: Option<Part<'a>>,
}

/// Which phase a probe sent at `t_s` belongs to: 0 before the load, 1 during, 2 after.
fn phase(t_s: f64, load_start_s: f64, load_end_s: f64) -> usize {
    if t_s < load_start_s {
        0
    } else if t_s <= load_end_s {
        1
    } else {
        2
    }
}

/// One kind's figures, phase by phase.
#[derive(Default)]
struct Phases {
    hists: [TimeHistogram; 3],
    counts: [ProbeCounts; 3],
}

impl Phases {
    fn latency(&self, phase: usize) -> Option<Percentiles> {
        self.hists[phase]
            .summary()
            .map(|s| Percentiles::from_ns(&s, 1e3))
    }

    fn counts(&self) -> PhaseCounts {
        PhaseCounts {
            idle_before: self.counts[0],
            loaded: self.counts[1],
            idle_after: self.counts[2],
        }
    }

    fn ratio(&self) -> Option<f64> {
        match (self.latency(0), self.latency(1)) {
            (Some(i), Some(l)) if i.p50 > 0.0 => Some(l.p50 / i.p50),
            _ => None,
        }
    }
}

fn record(h: &mut TimeHistogram, rtt_us: f64) {
    h.record((rtt_us * 1e3) as i64);
}

impl Rrul {
    /// Puts the figures together from the load test (`--bidir`), the UDP probe's requests
    /// and the TCP probe's test.
    pub fn assemble(parts: &RrulParts<'_>) -> Self {
        let load = parts.load;
        let load_start_s = load.offset_s;
        let load_end_s = load.offset_s + load.results.end.duration_s;
        let at = |t_s: f64| phase(t_s, load_start_s, load_end_s);
        let mut probes = Vec::new();
        let mut lost_probes = Vec::new();
        let mut udp = Phases::default();
        if let Some(open) = parts.udp {
            for p in open.sent {
                let ph = at(p.t_s);
                udp.counts[ph].sent += 1;
                match p.rtt_us {
                    Some(rtt_us) => {
                        udp.counts[ph].answered += 1;
                        record(&mut udp.hists[ph], rtt_us);
                        probes.push(Probe {
                            t_s: p.t_s,
                            kind: ProbeKind::Udp,
                            rtt_us,
                        });
                    }
                    None => {
                        udp.counts[ph].lost += 1;
                        lost_probes.push(LostProbe {
                            t_s: p.t_s,
                            kind: ProbeKind::Udp,
                        });
                    }
                }
            }
        }
        let mut tcp = Phases::default();
        if let Some(part) = parts.tcp {
            for (t_s, transactions, rtt_us) in closed_loop_series(part) {
                let ph = at(t_s);
                tcp.counts[ph].sent += transactions;
                tcp.counts[ph].answered += transactions;
                if let Some(rtt_us) = rtt_us {
                    record(&mut tcp.hists[ph], rtt_us);
                    probes.push(Probe {
                        t_s,
                        kind: ProbeKind::Tcp,
                        rtt_us,
                    });
                }
            }
        }
        probes.sort_by(|a, b| a.t_s.total_cmp(&b.t_s));
        lost_probes.sort_by(|a, b| a.t_s.total_cmp(&b.t_s));
        let streams = load_streams(load.results);
        let retransmits = load_retransmits(load.results);
        let r = load.results;
        let back = r.reverse.as_ref();
        Self {
            idle_s: parts.idle_s,
            load_start_s,
            load_end_s,
            probe_interval_s: parts.probe_interval_s,
            idle_latency_us: udp.latency(0),
            loaded_latency_us: udp.latency(1),
            idle_after_latency_us: udp.latency(2),
            latency_ratio_p50: udp.ratio(),
            tcp_idle_latency_us: tcp.latency(0),
            tcp_loaded_latency_us: tcp.latency(1),
            tcp_idle_after_latency_us: tcp.latency(2),
            tcp_latency_ratio_p50: tcp.ratio(),
            upload_bps: r.end.received_bps,
            download_bps: back.and_then(|b| b.end.received_bps),
            streams,
            retransmits,
            udp_probe_timeouts: udp.counts.iter().map(|c| c.lost).sum(),
            probe_counts: Some(RrulProbeCounts {
                udp: udp.counts(),
                tcp: tcp.counts(),
            }),
            udp_probe: parts.udp.map(|o| o.summary),
            load: load_series(load),
            probes,
            lost_probes,
        }
    }
}

/// A load stream's retransmitted segments: its sender's TCP_INFO (`end.retransmits` is
/// stop-and-wait's count, 0 for TCP).
fn stream_retransmits(e: &End) -> Option<u64> {
    e.tcp.map(|t| t.retransmits)
}

/// Each direction's streams (or its totals, when it has one stream).
fn halves(r: &Results) -> Vec<(LoadDirection, &End)> {
    fn half<'a>(
        d: LoadDirection,
        end: &'a End,
        streams: &'a [End],
    ) -> Vec<(LoadDirection, &'a End)> {
        if streams.is_empty() {
            vec![(d, end)]
        } else {
            streams.iter().map(|e| (d, e)).collect()
        }
    }
    let mut out = half(LoadDirection::Upload, &r.end, &r.streams);
    if let Some(b) = &r.reverse {
        out.extend(half(LoadDirection::Download, &b.end, &b.streams));
    }
    out
}

fn load_streams(r: &Results) -> Vec<LoadStream> {
    halves(r)
        .into_iter()
        .map(|(direction, e)| LoadStream {
            direction,
            received_bps: e.received_bps,
            retransmits: stream_retransmits(e).unwrap_or(0),
        })
        .collect()
}

/// The load's retransmitted segments over every stream both ways; `None` when no sender
/// said.
fn load_retransmits(r: &Results) -> Option<u64> {
    halves(r)
        .into_iter()
        .filter_map(|(_, e)| stream_retransmits(e))
        .reduce(|a, b| a.saturating_add(b))
}

/// The load's rates per interval, on the run's clock.
fn load_series(load: Part<'_>) -> Vec<LoadInterval> {
    let r = load.results;
    let down_intervals = r.reverse.as_ref().map_or(&[][..], |b| &b.intervals[..]);
    r.intervals
        .iter()
        .enumerate()
        .map(|(i, up)| LoadInterval {
            t_s: load.offset_s + up.end_s,
            upload_bps: up.received_bps,
            download_bps: down_intervals.get(i).and_then(|d| d.received_bps),
        })
        .collect()
}

/// A closed-loop probe test's intervals: `(t_s, transactions, median round trip µs)` each,
/// drawn at the interval's middle. The rr client closes the intervals that passed while a
/// transaction was out only when it returns, the first of them with the round trip in it:
/// so the interval that holds a round trip is the one its request left in, however long
/// the answer took.
fn closed_loop_series(part: Part<'_>) -> impl Iterator<Item = (f64, u64, Option<f64>)> + '_ {
    part.results.intervals.iter().map(move |iv| {
        (
            part.offset_s + (iv.start_s + iv.end_s) / 2.0,
            iv.sent_messages.unwrap_or(0),
            iv.latency_p50_us,
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::{IntervalView, TcpInfo};

    fn interval(start_s: f64, rtt_us: Option<f64>, bps: f64) -> IntervalView {
        IntervalView {
            start_s,
            end_s: start_s + 0.1,
            sent_bytes: Some(0),
            sent_messages: Some(u64::from(rtt_us.is_some())),
            received_bytes: Some(0),
            received_messages: Some(0),
            sent_bps: Some(bps),
            received_bps: Some(bps),
            received_start_s: None,
            received_end_s: None,
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
            rtt_us: None,
            lost_packets: None,
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

    /// 3 s of probes every 100 ms: `idle_us` before 1 s and after 2 s, `loaded_us` between.
    fn rtt(t: f64, idle_us: f64, loaded_us: f64) -> f64 {
        if (1.0..2.0).contains(&t) {
            loaded_us
        } else {
            idle_us
        }
    }

    /// A load from 1 s to 2 s (its figures at 8 Mbit/s).
    fn load() -> Results {
        results(
            (0..10)
                .map(|i| interval(f64::from(i) / 10.0, None, 8e6))
                .collect(),
            1.0,
        )
    }

    fn parts<'a>(
        load: &'a Results,
        udp: Option<OpenLoop<'a>>,
        tcp: Option<&'a Results>,
    ) -> RrulParts<'a> {
        RrulParts {
            idle_s: 1.0,
            probe_interval_s: 0.1,
            load: Part {
                results: load,
                offset_s: 1.0,
            },
            udp,
            tcp: tcp.map(|results| Part {
                results,
                offset_s: 0.0,
            }),
        }
    }

    #[test]
    fn udp_probes_are_the_headline_and_tcp_probes_are_apart() {
        // UDP: 10 ms idle, 100 ms loaded; every fifth loaded request lost.
        let sent: Vec<SentProbe> = (0..30)
            .map(|i| {
                let t_s = f64::from(i) / 10.0 + 0.01;
                let lost = (1.0..2.0).contains(&t_s) && i % 5 == 0;
                SentProbe {
                    t_s,
                    rtt_us: (!lost).then(|| rtt(t_s, 10_000.0, 100_000.0)),
                }
            })
            .collect();
        // TCP: 10 ms idle, 300 ms loaded (stalls), one transaction per interval.
        let tcp = results(
            (0..30)
                .map(|i| {
                    let t = f64::from(i) / 10.0;
                    interval(t, Some(rtt(t, 10_000.0, 300_000.0)), 0.0)
                })
                .collect(),
            3.0,
        );
        let load = load();
        let open = OpenLoop {
            sent: &sent,
            summary: UdpProbeSummary {
                open_loop: true,
                timeout_s: 2.0,
                ..UdpProbeSummary::default()
            },
        };
        let r = Rrul::assemble(&parts(&load, Some(open), Some(&tcp)));
        let p50 = |p: &Option<Percentiles>| p.as_ref().map(|p| p.p50).expect("percentiles");
        assert!((p50(&r.idle_latency_us) - 10_000.0).abs() < 200.0);
        assert!((p50(&r.loaded_latency_us) - 100_000.0).abs() < 2_000.0);
        assert!((p50(&r.idle_after_latency_us) - 10_000.0).abs() < 200.0);
        assert!((p50(&r.tcp_loaded_latency_us) - 300_000.0).abs() < 5_000.0);
        assert!((p50(&r.tcp_idle_latency_us) - 10_000.0).abs() < 200.0);
        assert!(r.latency_ratio_p50.is_some_and(|x| (x - 10.0).abs() < 0.5));
        assert!(r.tcp_latency_ratio_p50.is_some_and(|x| x > 25.0));
        let c = r.probe_counts.expect("counts");
        assert_eq!(
            c.udp.idle_before,
            ProbeCounts {
                sent: 10,
                answered: 10,
                lost: 0
            }
        );
        assert_eq!(
            c.udp.loaded,
            ProbeCounts {
                sent: 10,
                answered: 8,
                lost: 2
            }
        );
        assert_eq!(c.udp.idle_after.sent, 10);
        assert_eq!(c.tcp.loaded.answered, 10);
        assert_eq!(r.udp_probe_timeouts, 2);
        assert_eq!(r.lost_probes.len(), 2);
        assert!(r.lost_probes.iter().all(|l| l.kind == ProbeKind::Udp));
        assert_eq!(r.probes.len(), 28 + 30);
        assert!(r.probes.windows(2).all(|w| w[0].t_s <= w[1].t_s));
        // A UDP probe is drawn at its own send time.
        assert!(r
            .probes
            .iter()
            .any(|p| p.kind == ProbeKind::Udp && (p.t_s - 0.01).abs() < 1e-9));
        assert_eq!(r.load.len(), 10);
        assert!((r.load[0].t_s - 1.1).abs() < 1e-9);
        assert!(r.upload_bps.is_some_and(|b| (b - 8e6).abs() < 1.0));
        assert_eq!(r.udp_probe.map(|u| u.open_loop), Some(true));
    }

    #[test]
    fn the_loads_retransmits_are_its_senders_tcp_info() {
        let mut load = load();
        let stream = |retransmits| End {
            tcp: Some(TcpInfo {
                retransmits,
                ..TcpInfo::default()
            }),
            ..load.end.clone()
        };
        load.streams = vec![stream(131), stream(20)];
        let mut back = crate::results::Half {
            end: load.end.clone(),
            ..Default::default()
        };
        back.streams = vec![stream(40), stream(3)];
        load.reverse = Some(back);
        let r = Rrul::assemble(&parts(&load, None, None));
        let per: Vec<(LoadDirection, u64)> = r
            .streams
            .iter()
            .map(|s| (s.direction, s.retransmits))
            .collect();
        assert_eq!(
            per,
            [
                (LoadDirection::Upload, 131),
                (LoadDirection::Upload, 20),
                (LoadDirection::Download, 40),
                (LoadDirection::Download, 3)
            ]
        );
        assert_eq!(r.retransmits, Some(194));
        // Without TCP_INFO (an older peer's report) the total is unknown, not 0.
        let r = Rrul::assemble(&parts(&self::load(), None, None));
        assert_eq!(r.retransmits, None);
        assert!(r.idle_latency_us.is_none() && r.probes.is_empty());
    }

    #[test]
    fn the_document_spells_kinds_in_lowercase_and_reads_older_ones() {
        let p = Probe {
            t_s: 1.0,
            kind: ProbeKind::Udp,
            rtt_us: 5.0,
        };
        let s = serde_json::to_string(&p).expect("serializes");
        assert!(s.contains("\"kind\":\"udp\""), "{s}");
        // An rrul object written before open-loop probes: the new keys are absent.
        let old: Rrul = serde_json::from_value(serde_json::json!({
            "idle_s": 5.0, "load_start_s": 5.0, "load_end_s": 25.0, "probe_interval_s": 0.1,
            "upload_bps": 1e6, "download_bps": 1e6, "streams": [], "udp_probe_timeouts": 0,
            "load": [], "probes": []
        }))
        .expect("an older document reads");
        assert!(old.lost_probes.is_empty() && old.probe_counts.is_none());
    }
}
