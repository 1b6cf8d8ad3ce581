//! One side's report from its streams' reports (`-P`): counts and bytes add up, distributions
//! are merged from the raw histograms (never from the streams' percentiles), and what only
//! makes sense per stream (UDPmon's in-order prefix, TCP_INFO, per-millisecond rates, jitter
//! estimates) stays in each stream's own report.

use wirebench_proto::results::{IntervalRecord, Resources, SideReport, UdpCounts};
use wirebench_stats::{LossRuns, TimeHistogram};

use crate::rx::ns_buckets;
use crate::Hists;

/// Adds a stream's interval record to the side's: the first one is taken whole, later ones
/// add their counts, and the distributions (which cannot be added) are dropped.
pub fn add_interval(acc: &mut IntervalRecord, rec: &IntervalRecord) {
    if *acc == IntervalRecord::default() {
        *acc = *rec;
        return;
    }
    acc.start_ns = acc.start_ns.min(rec.start_ns);
    acc.end_ns = acc.end_ns.max(rec.end_ns);
    acc.bytes += rec.bytes;
    acc.messages += rec.messages;
    acc.lost += rec.lost;
    // Several connections: their retransmits and windows add up.
    let add = |a: Option<u64>, b: Option<u64>| match (a, b) {
        (None, None) => None,
        (a, b) => Some(a.unwrap_or(0) + b.unwrap_or(0)),
    };
    acc.retransmits = add(acc.retransmits, rec.retransmits);
    acc.cwnd_bytes = add(acc.cwnd_bytes, rec.cwnd_bytes);
    acc.lost_packets = add(acc.lost_packets, rec.lost_packets);
    acc.rtt_us = acc.rtt_us.max(rec.rtt_us);
    acc.jitter_ns = None;
    acc.delay_p50_ns = None;
    acc.delay_p99_ns = None;
}

/// Merges optional histograms; `None` when no stream had one.
fn merged(hs: impl Iterator<Item = Option<TimeHistogram>>) -> Option<TimeHistogram> {
    hs.flatten().reduce(|mut a, b| {
        a.add(&b);
        a
    })
}

/// The side's report from each stream's report and raw distributions. One stream: its report
/// as it is.
pub fn sum_streams(mut outs: Vec<(SideReport, Hists)>) -> SideReport {
    if outs.len() <= 1 {
        return outs.pop().map(|o| o.0).unwrap_or_default();
    }
    let (reports, hists): (Vec<SideReport>, Vec<Hists>) = outs.into_iter().unzip();
    let mut agg = SideReport {
        role: reports[0].role,
        epoch_unix_ns: reports[0].epoch_unix_ns,
        datapath: reports[0].datapath.clone(),
        ..SideReport::default()
    };
    for r in &reports {
        agg.bytes += r.bytes;
        agg.messages += r.messages;
        agg.first_ns = match (agg.first_ns, r.first_ns) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        agg.last_ns = agg.last_ns.max(r.last_ns);
        agg.elapsed_ns = agg.elapsed_ns.max(r.elapsed_ns);
        agg.retransmits += r.retransmits;
        agg.local_drops += r.local_drops;
        agg.timeouts += r.timeouts;
        if let Some(q) = &r.quic {
            agg.quic.get_or_insert_with(Default::default).merge(q);
        }
        if agg.error.is_none() {
            agg.error = r.error.clone();
            agg.error_kind = r.error_kind;
        }
        for (i, rec) in r.intervals.iter().enumerate() {
            if agg.intervals.len() <= i {
                agg.intervals.push(IntervalRecord::default());
            }
            add_interval(&mut agg.intervals[i], rec);
        }
        if let Some(x) = r.resources {
            let a = agg.resources.get_or_insert(Resources::default());
            a.cpu_user_s += x.cpu_user_s;
            a.cpu_system_s += x.cpu_system_s;
            a.cpu_percent += x.cpu_percent;
            a.max_rss_kib = a.max_rss_kib.max(x.max_rss_kib);
            a.rss_before_kib = a.rss_before_kib.max(x.rss_before_kib);
            a.rss_after_kib = a.rss_after_kib.max(x.rss_after_kib);
        }
    }
    let (mut delays, mut gaps, mut latencies, mut runs) = (vec![], vec![], vec![], vec![]);
    for h in hists {
        delays.push(h.delay);
        gaps.push(h.gaps);
        latencies.push(h.latency);
        runs.push(h.loss_runs);
    }
    agg.latency = merged(latencies.into_iter()).and_then(|h| h.summary());
    if reports.iter().any(|r| r.udp.is_some()) {
        let udps: Vec<&UdpCounts> = reports.iter().filter_map(|r| r.udp.as_ref()).collect();
        let gaps = merged(gaps.into_iter());
        let loss_runs = runs
            .into_iter()
            .flatten()
            .fold(LossRuns::new(), |mut a, b| {
                a.merge(&b);
                a
            });
        // Jitter is a running estimate per stream: the side's is their mean, weighted by
        // the datagrams each counted (as iperf3 reports it for several streams).
        let weight: u64 = reports.iter().map(|r| r.messages).sum();
        let jitter_ns = if weight > 0 {
            reports
                .iter()
                .filter_map(|r| r.udp.as_ref().map(|u| u.jitter_ns * r.messages as f64))
                .sum::<f64>()
                / weight as f64
        } else {
            0.0
        };
        agg.udp = Some(UdpCounts {
            sequenced: udps.iter().all(|u| u.sequenced),
            duplicates: udps.iter().map(|u| u.duplicates).sum(),
            reordered: udps.iter().map(|u| u.reordered).sum(),
            too_old: udps.iter().map(|u| u.too_old).sum(),
            foreign: udps.iter().map(|u| u.foreign).sum(),
            jitter_ns,
            max_reorder_extent: udps.iter().map(|u| u.max_reorder_extent).max().unwrap_or(0),
            same_clock: udps.iter().all(|u| u.same_clock),
            loss_runs: loss_runs.summary(),
            delay: merged(delays.into_iter()).and_then(|h| h.summary()),
            interarrival: gaps.as_ref().and_then(TimeHistogram::summary),
            interarrival_buckets: gaps.as_ref().map(ns_buckets).unwrap_or_default(),
            // UDPmon's prefix is a property of one sequence: see each stream.
            ..UdpCounts::default()
        });
    }
    agg.streams = reports
        .into_iter()
        .map(|mut r| {
            // The side's intervals carry the sums; each stream's stay home (frame size).
            r.intervals.clear();
            r
        })
        .collect();
    agg
}

#[cfg(test)]
mod tests {
    use super::*;
    use wirebench_proto::results::Role;

    fn stream(bytes: u64, messages: u64, delays: &[i64]) -> (SideReport, Hists) {
        let mut h = TimeHistogram::new();
        for &d in delays {
            h.record(d);
        }
        let mut runs = LossRuns::new();
        runs.record(2);
        let rep = SideReport {
            role: Some(Role::Receiver),
            bytes,
            messages,
            first_ns: Some(bytes),
            last_ns: Some(bytes * 10),
            intervals: vec![IntervalRecord {
                start_ns: 0,
                end_ns: 1_000,
                bytes,
                messages,
                lost: 1,
                jitter_ns: Some(5.0),
                delay_p50_ns: Some(7),
                delay_p99_ns: Some(9),
                retransmits: Some(2),
                cwnd_bytes: Some(1000),
                rtt_us: None,
                lost_packets: None,
            }],
            udp: Some(UdpCounts {
                sequenced: true,
                duplicates: 1,
                jitter_ns: 100.0,
                same_clock: true,
                ..UdpCounts::default()
            }),
            ..SideReport::default()
        };
        let hists = Hists {
            delay: Some(h),
            loss_runs: Some(runs),
            ..Hists::default()
        };
        (rep, hists)
    }

    #[test]
    fn one_stream_is_its_own_report() {
        let (rep, h) = stream(10, 1, &[5]);
        assert_eq!(sum_streams(vec![(rep.clone(), h)]), rep);
        assert_eq!(sum_streams(vec![]), SideReport::default());
    }

    #[test]
    fn streams_add_up_and_distributions_merge_from_histograms() {
        let a = stream(100, 10, &[1_000, 2_000]);
        let b = stream(300, 30, &[3_000, 4_000, 5_000, 6_000]);
        let m = sum_streams(vec![a, b]);
        assert_eq!((m.bytes, m.messages), (400, 40));
        assert_eq!((m.first_ns, m.last_ns), (Some(100), Some(3_000)));
        assert_eq!(m.streams.len(), 2);
        assert!(m.streams.iter().all(|s| s.intervals.is_empty()));
        let iv = m.intervals[0];
        assert_eq!((iv.bytes, iv.messages, iv.lost), (400, 40, 2));
        // TCP: retransmits and windows of the connections add up.
        assert_eq!((iv.retransmits, iv.cwnd_bytes), (Some(4), Some(2000)));
        assert_eq!(iv.delay_p50_ns, None, "percentiles do not add");
        let u = m.udp.expect("udp");
        assert_eq!(u.duplicates, 2);
        assert_eq!(u.loss_runs.runs, 2);
        let d = u.delay.expect("delays");
        // the median of the union, not of the medians
        assert_eq!((d.count, d.min_ns, d.max_ns), (6, 1_000, 6_000));
        assert!((3_000..=3_004).contains(&d.p50_ns), "{d:?}");
        assert!((u.jitter_ns - 100.0).abs() < 1e-9);
    }
}
