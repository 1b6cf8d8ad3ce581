//! How the results document is built from both sides' reports: which side sent, the
//! totals, UDP loss from the sender's count (or, without it, the receiver's gaps), the
//! intervals side by side; a side that never reported leaves its figures null.

use wirebench_stats::TimeSummary;

use super::document::{
    AfterOmit, End, FileEnd, Half, Interarrival, IntervalView, Percentiles, QuicEnd, Results,
    Sides, TestView, Totals, UdpEnd, UsBucket, NS_PER_S, SCHEMA,
};
use super::side::{IntervalRecord, SideReport, UdpCounts};
use crate::error_kind::ErrorKind;
use crate::spec::{Direction, Mechanism, Protocol, TestSpec};

impl SideReport {
    /// Seconds from the side's start to its last message, or to its end if it had none.
    fn active_s(&self) -> f64 {
        self.last_ns.unwrap_or(self.elapsed_ns) as f64 / NS_PER_S
    }

    /// Seconds from the first message to the last (the send or receive time of a transfer).
    fn first_to_last_s(&self) -> f64 {
        match (self.first_ns, self.last_ns) {
            (Some(a), Some(b)) => b.saturating_sub(a) as f64 / NS_PER_S,
            _ => 0.0,
        }
    }

    /// A sender's time of the test, s: from its start to the end of its time bound (the
    /// test's `-t`, or sooner if it ended early), or to its last message when that is later
    /// or the test is an amount. What iperf3 divides by: a test that sent one message in
    /// 3 s moved its bytes in 3 s, not in the microsecond its message took.
    fn sender_test_s(&self, spec: &TestSpec) -> f64 {
        let active = self.active_s();
        match spec.duration_ns {
            Some(d) => active.max(self.elapsed_ns.min(d) as f64 / NS_PER_S),
            None => active,
        }
    }

    /// This side's totals over `test_s`, its time of the test.
    fn totals(&self, test_s: f64) -> Totals {
        let transfer_s = self.first_to_last_s();
        let active_s = self.active_s();
        Totals {
            bytes: Some(self.bytes),
            messages: Some(self.messages),
            duration_s: Some(test_s),
            active_s: Some(active_s),
            active_bps: Some(bps(self.bytes, active_s)),
            transfer_s: Some(transfer_s),
            transfer_bps: Some(bps(self.bytes, transfer_s)),
        }
    }
}

impl UdpEnd {
    /// `sent_messages`: the sender's count, `None` when it never reported; `received`: the
    /// receiver's count and sequence accounting, `None` when it never reported. `merged`:
    /// the counts are several streams' sum, so what belongs to one sequence (UDPmon's
    /// prefix figures) is not given here but per stream.
    fn new(
        spec: &TestSpec,
        sent_messages: Option<u64>,
        received: Option<(u64, &UdpCounts)>,
        merged: bool,
    ) -> Self {
        let sequenced = !spec.headerless();
        // The receiver never reported: nothing it counts is known.
        let Some((received_messages, c)) = received else {
            return Self {
                sequenced,
                ..Self::default()
            };
        };
        // Exact, tail included, from the sender's count; without it, the gaps the receiver
        // saw below the highest sequence number it got (what its loss runs settled on:
        // `rx::Receiver::finish`), which short datagrams without a header cannot show.
        let lost = match sent_messages {
            Some(sent) => Some(sent.saturating_sub(received_messages)),
            None => sequenced.then_some(c.loss_runs.lost),
        };
        let one_sequence = sequenced && !merged;
        let ms = |s: &TimeSummary| Percentiles::from_ns(s, 1e6);
        let last_in_order_seq = c.in_order_prefix.checked_sub(1).filter(|_| one_sequence);
        let bandwidth_without_loss_bps =
            match (last_in_order_seq, c.prefix_start_ns, c.prefix_end_ns) {
                (Some(last), Some(a), Some(b)) if last > 0 && b > a => {
                    Some(last as f64 * spec.size as f64 * 8.0 / ((b - a) as f64 / NS_PER_S))
                }
                _ => None,
            };
        Self {
            sequenced,
            lost,
            duplicates: Some(c.duplicates),
            reordered: Some(c.reordered),
            loss_ratio: lost.zip(sent_messages).map(|(lost, sent)| {
                if sent > 0 {
                    lost as f64 / sent as f64
                } else {
                    0.0
                }
            }),
            jitter_ms: Some(c.jitter_ns / 1e6),
            too_old: Some(c.too_old),
            foreign: Some(c.foreign),
            foreign_requests: None,
            foreign_responses: None,
            max_reorder_extent: Some(c.max_reorder_extent),
            clocks: Some(
                if c.same_clock {
                    "same-host"
                } else {
                    "unsynchronized"
                }
                .into(),
            ),
            delay_ms: c.delay.as_ref().filter(|_| c.same_clock).map(ms),
            delay_variation_ms: c.delay.as_ref().map(|d| ms(&d.shifted(d.min_ns))),
            interarrival_us: c.interarrival.as_ref().map(|s| Interarrival {
                percentiles: Percentiles::from_ns(s, 1e3),
                histogram: c
                    .interarrival_buckets
                    .iter()
                    .map(|b| UsBucket {
                        min_us: b.low_ns as f64 / 1e3,
                        max_us: b.high_ns as f64 / 1e3,
                        count: b.count,
                    })
                    .collect(),
            }),
            loss_runs: Some(c.loss_runs.clone()),
            last_in_order_seq,
            first_lost_seq: (one_sequence && lost.is_some_and(|l| l > 0))
                .then_some(c.in_order_prefix),
            bandwidth_without_loss_bps,
            checksum_errors: c.checksum_errors,
        }
    }

    /// UDP rr: both sides received, so `foreign` counts what reached either socket, the
    /// server's (`foreign` so far, the receiver's) and the client's (`responses`: absent
    /// from a client that predates the count).
    fn rr_foreign(&mut self, responses: Option<u64>) {
        self.foreign_requests = self.foreign;
        self.foreign_responses = responses;
        // The server's count unknown (it never reported): the total is unknown too.
        self.foreign = self
            .foreign
            .map(|f| f.saturating_add(responses.unwrap_or(0)));
    }
}

fn bps(bytes: u64, seconds: f64) -> f64 {
    if seconds > 0.0 {
        bytes as f64 * 8.0 / seconds
    } else {
        0.0
    }
}

impl Results {
    /// Builds the document from both sides' reports; a missing report (the peer failed)
    /// leaves every figure only that side measured null (unknown, never 0: docs/results.md,
    /// "Unknown is null"), each direction of `--bidir` on its own, and `error` says why.
    pub fn assemble(
        spec: &TestSpec,
        server: String,
        client_report: Option<&SideReport>,
        server_report: Option<&SideReport>,
        error: Option<String>,
    ) -> Self {
        let (forward, reverse) = if spec.direction == Direction::Bidir {
            (
                Half::of(
                    &spec.one_way(Direction::Forward),
                    client_report,
                    server_report,
                ),
                Some(Half::of(
                    &spec.one_way(Direction::Reverse),
                    reverse_part(client_report),
                    reverse_part(server_report),
                )),
            )
        } else {
            (Half::of(spec, client_report, server_report), None)
        };
        // The caller's error sets its own `error_cause`; a report's comes with its kind.
        let reported = [client_report, server_report]
            .into_iter()
            .flatten()
            .find_map(|r| r.error.clone().map(|e| (e, r.error_kind)));
        let (error, error_cause) = match (error, reported) {
            (Some(e), _) => (Some(e), None),
            (None, Some((e, kind))) => (Some(e), kind),
            (None, None) => match no_transaction(spec, client_report) {
                Some(e) => (Some(e), Some(ErrorKind::NoTransaction)),
                None => (None, None),
            },
        };
        Self {
            schema: SCHEMA,
            wirebench: format!("wirebench {}", env!("CARGO_PKG_VERSION")),
            server,
            test: TestView::from(spec),
            datapath: Sides {
                client: client_report.map(|c| c.datapath.clone()),
                server: server_report.map(|c| c.datapath.clone()),
            },
            intervals: forward.intervals,
            end: End {
                live_intervals_dropped: server_report.map_or(0, |s| s.live_intervals_dropped),
                ..forward.end
            },
            streams: forward.streams,
            reverse,
            error,
            error_cause,
            peer: None,
            server_report_fetched: false,
        }
    }
}

/// The failure of an rr or crr test whose client completed no transaction: it measured
/// nothing, so it is not a result (a test that ran out its time on one 16 MB answer, or
/// whose every request timed out). The client's report counts requests and timeouts.
fn no_transaction(spec: &TestSpec, client_report: Option<&SideReport>) -> Option<String> {
    let c = client_report?;
    (spec.mechanism.is_rr() && c.messages.saturating_sub(c.timeouts) == 0).then(|| {
        format!(
            "{NO_TRANSACTION} ({} requests timed out): use fewer streams (-P), smaller messages (-l, --response-size) or a longer --time",
            c.timeouts
        )
    })
}

/// How the error of an rr or crr test that completed no transaction begins.
pub const NO_TRANSACTION: &str = "no transaction completed";

/// A side's report of the reverse direction of a `--bidir` test.
fn reverse_part(r: Option<&SideReport>) -> Option<&SideReport> {
    r.and_then(|x| x.reverse.as_deref())
}

impl Half {
    /// One direction from both sides' reports (for `--bidir`: their parts of that direction).
    pub fn of(
        spec: &TestSpec,
        client_report: Option<&SideReport>,
        server_report: Option<&SideReport>,
    ) -> Self {
        let (sender, receiver) = match spec.direction {
            Direction::Reverse => (server_report, client_report),
            // A bidirectional test is measured one way at a time (`TestSpec::one_way`).
            Direction::Forward | Direction::Bidir => (client_report, server_report),
        };
        let empty = SideReport::default();
        let s = sender.unwrap_or(&empty);
        let r = receiver.unwrap_or(&empty);
        let counts = r.udp.clone().unwrap_or_default();
        let udp = spec.datagrams();
        // A UDP stream receiver's intervals carry jitter when its datagrams carry headers.
        let jitter = udp && spec.mechanism == Mechanism::Stream && !spec.headerless();
        let n = s.streams.len().max(r.streams.len());
        let streams = if n > 1 {
            (0..n)
                .map(|i| {
                    End::of(
                        spec,
                        client_report.and_then(|x| x.streams.get(i)),
                        server_report.and_then(|x| x.streams.get(i)),
                    )
                })
                .collect()
        } else {
            Vec::new()
        };
        // Delay variation is measured from the smallest delay of the whole test.
        let min_delay_ns = counts.delay.map(|d| d.min_ns);
        let ms = |ns: i64| ns as f64 / 1e6;
        let us = |ns: i64| ns as f64 / 1e3;
        // Request/response: the client's interval records carry round trips where a UDP
        // receiver's carry one-way delays.
        let rr = spec.mechanism.is_rr();
        let n = s.intervals.len().max(r.intervals.len());
        let intervals = (0..n)
            .map(|i| {
                let si = s.intervals.get(i).copied().unwrap_or_default();
                let ri = r.intervals.get(i).copied().unwrap_or_default();
                let (start_ns, end_ns) = if s.intervals.len() > i {
                    (si.start_ns, si.end_ns)
                } else {
                    (ri.start_ns, ri.end_ns)
                };
                let secs = |a: u64, b: u64| b.saturating_sub(a) as f64 / NS_PER_S;
                let sent = sender.is_some();
                let received = receiver.is_some();
                IntervalView {
                    start_s: start_ns as f64 / NS_PER_S,
                    end_s: end_ns as f64 / NS_PER_S,
                    sent_bytes: sent.then_some(si.bytes),
                    sent_messages: sent.then_some(si.messages),
                    received_bytes: received.then_some(ri.bytes),
                    received_messages: received.then_some(ri.messages),
                    sent_bps: sent.then(|| bps(si.bytes, secs(si.start_ns, si.end_ns))),
                    received_bps: received.then(|| bps(ri.bytes, secs(ri.start_ns, ri.end_ns))),
                    received_start_s: received.then(|| ri.start_ns as f64 / NS_PER_S),
                    received_end_s: received.then(|| ri.end_ns as f64 / NS_PER_S),
                    lost: udp.then(|| received.then_some(ri.lost)),
                    jitter_ms: match ri.jitter_ns {
                        Some(j) => Some(Some(j / 1e6)),
                        None => (jitter && !received).then_some(None),
                    },
                    latency_p50_us: si.delay_p50_ns.filter(|_| rr).map(us),
                    latency_p99_us: si.delay_p99_ns.filter(|_| rr).map(us),
                    delay_p50_ms: ri.delay_p50_ns.filter(|_| counts.same_clock).map(ms),
                    delay_p99_ms: ri.delay_p99_ns.filter(|_| counts.same_clock).map(ms),
                    delay_variation_p50_ms: ri
                        .delay_p50_ns
                        .zip(min_delay_ns)
                        .map(|(d, m)| ms(d.saturating_sub(m))),
                    delay_variation_p99_ms: ri
                        .delay_p99_ns
                        .zip(min_delay_ns)
                        .map(|(d, m)| ms(d.saturating_sub(m))),
                    retransmits: si.retransmits,
                    cwnd_bytes: si.cwnd_bytes,
                    rtt_us: si.rtt_us,
                    lost_packets: si.lost_packets,
                }
            })
            .collect();
        let mut end = End::of(spec, client_report, server_report);
        end.after_omit = (spec.omit_ns > 0).then(|| AfterOmit::of(spec, sender, receiver));
        Self {
            intervals,
            end,
            streams,
        }
    }
}

impl AfterOmit {
    /// The totals of the sender's and the receiver's intervals that begin at or after the
    /// omitted start, each on its side's clock (a side starts when the test begins, so the
    /// two agree to within the control connection's latency).
    fn of(spec: &TestSpec, s: Option<&SideReport>, r: Option<&SideReport>) -> Self {
        let after = |recs: &[IntervalRecord]| {
            let mut kept: Vec<&IntervalRecord> =
                recs.iter().filter(|i| i.start_ns >= spec.omit_ns).collect();
            // A receiver's drain adds empty intervals after the last message: its time ends
            // there, as `end.received.duration_s` does.
            while kept.len() > 1 && kept.last().is_some_and(|i| i.bytes == 0) {
                kept.pop();
            }
            let bytes: u64 = kept.iter().map(|i| i.bytes).sum();
            let messages: u64 = kept.iter().map(|i| i.messages).sum();
            let lost: u64 = kept.iter().map(|i| i.lost).sum();
            let secs = match (kept.first(), kept.last()) {
                (Some(a), Some(b)) => b.end_ns.saturating_sub(a.start_ns) as f64 / NS_PER_S,
                _ => 0.0,
            };
            (bytes, messages, lost, secs)
        };
        let sent = s.map(|s| after(&s.intervals));
        let received = r.map(|r| after(&r.intervals));
        let udp = spec.datagrams();
        Self {
            omitted_s: spec.omit_ns as f64 / NS_PER_S,
            sent_bytes: sent.map(|s| s.0),
            sent_messages: sent.map(|s| s.1),
            sent_duration_s: sent.map(|s| s.3),
            sent_bps: sent.map(|s| bps(s.0, s.3)),
            received_bytes: received.map(|r| r.0),
            received_messages: received.map(|r| r.1),
            received_duration_s: received.map(|r| r.3),
            received_bps: received.map(|r| bps(r.0, r.3)),
            // The receiver's gaps; their ratio stands for the share of what was sent only
            // when the sender's count settled the tail, as `end.udp.loss_ratio`.
            lost: udp.then(|| received.map(|r| r.2)),
            loss_ratio: udp.then(|| {
                received
                    .filter(|_| sent.is_some())
                    .map(|(_, messages, lost, _)| {
                        let total = messages + lost;
                        if total > 0 {
                            lost as f64 / total as f64
                        } else {
                            0.0
                        }
                    })
            }),
        }
    }
}

impl QuicEnd {
    /// A QUIC test's `end.quic`: the sender's connections, beside what the receiver's
    /// stack counted.
    fn of(spec: &TestSpec, s: &SideReport, r: &SideReport) -> Option<Self> {
        let info = s.quic.clone()?;
        Some(QuicEnd {
            overhead_ratio: (s.bytes > 0)
                .then(|| info.wire_bytes_sent as f64 / s.bytes as f64 - 1.0),
            peer_handshake_us: r.quic.as_ref().map(|q| q.handshake_us),
            peer_datagrams_received: r
                .quic
                .as_ref()
                .filter(|_| spec.quic_datagrams)
                .map(|q| q.datagrams_received),
            info,
        })
    }
}

impl End {
    /// The totals of one test (or one stream of it) from both sides' reports.
    pub fn of(
        spec: &TestSpec,
        client_report: Option<&SideReport>,
        server_report: Option<&SideReport>,
    ) -> Self {
        let (sender, receiver) = match spec.direction {
            Direction::Reverse => (server_report, client_report),
            // A bidirectional test is measured one way at a time (`TestSpec::one_way`).
            Direction::Forward | Direction::Bidir => (client_report, server_report),
        };
        let empty = SideReport::default();
        let s = sender.unwrap_or(&empty);
        let r = receiver.unwrap_or(&empty);
        let rr = spec.mechanism.is_rr();
        // A side that never reported (its process or connection died first): its figures
        // are unknown, not 0.
        // Each side's time of the test: the sender's to its bound; the receiver's to its
        // last message, or to the sender's end when that is later (what it did not get in
        // that time it did not get). A receiver's never ends before its last message: on a
        // slow link it receives after the sender stopped, and its rate stays the link's.
        let sent_s = sender.map(|s| s.sender_test_s(spec));
        let received_s = receiver.map(|r| r.active_s().max(sent_s.unwrap_or(0.0)));
        let sent = sender
            .zip(sent_s)
            .map(|(s, t)| s.totals(t))
            .unwrap_or_default();
        let received = receiver
            .zip(received_s)
            .map(|(r, t)| r.totals(t))
            .unwrap_or_default();
        let no_counts = UdpCounts::default();
        let mut udp = spec.datagrams().then(|| {
            UdpEnd::new(
                spec,
                sender.map(|s| s.messages),
                receiver.map(|r| (r.messages, r.udp.as_ref().unwrap_or(&no_counts))),
                r.streams.len() > 1,
            )
        });
        if let Some(u) = udp.as_mut().filter(|_| rr) {
            u.rr_foreign(sender.and_then(|s| s.udp.as_ref()).map(|c| c.foreign));
        }
        End {
            // The test's time on the sender's clock, or on the receiver's when the sender
            // never said.
            duration_s: sent.duration_s.or(received.duration_s).unwrap_or(0.0),
            sent_bps: sender.zip(sent_s).map(|(s, t)| bps(s.bytes, t)),
            received_bps: receiver.zip(received_s).map(|(r, t)| bps(r.bytes, t)),
            sent,
            received,
            udp,
            retransmits: sender.map(|s| s.retransmits),
            local_drops: sender.map(|s| s.local_drops),
            latency_us: s.latency.as_ref().filter(|_| rr).map(|l| Percentiles {
                histogram: s
                    .latency_buckets
                    .iter()
                    .map(|b| UsBucket {
                        min_us: b.low_ns as f64 / 1e3,
                        max_us: b.high_ns as f64 / 1e3,
                        count: b.count,
                    })
                    .collect(),
                ..Percentiles::from_ns(l, 1e3)
            }),
            transactions_per_s: rr.then(|| {
                let secs = s.active_s();
                if secs > 0.0 {
                    s.messages.saturating_sub(s.timeouts) as f64 / secs
                } else {
                    0.0
                }
            }),
            rr_timeouts: (rr && spec.protocol == Protocol::Udp).then_some(s.timeouts),
            // bytes per ms × 8000 = bits/s
            send_rate_spread: s
                .ms_bytes
                .as_ref()
                .map(|m| Percentiles::from_ns(m, 1.0 / 8000.0)),
            tcp: s.tcp_info,
            quic: QuicEnd::of(spec, s, r),
            file: spec.file.as_ref().map(|name| {
                let sent = s.file.clone().unwrap_or_default();
                let got = r.file.clone().unwrap_or_default();
                let bytes = spec.file_bytes();
                FileEnd {
                    name: name.clone(),
                    bytes,
                    received_bytes: got.bytes,
                    algorithm: "xxh3-64".into(),
                    identical: sent.digest.is_some()
                        && sent.digest == got.digest
                        && got.bytes == bytes
                        && sent.bytes == bytes,
                    sent_digest: sent.digest,
                    received_digest: got.digest,
                    saved_as: got.saved_as,
                    save_error: got.error,
                    missing_bytes: got.missing.iter().map(|(a, b)| b - a).sum(),
                    missing: got.missing,
                    missing_ranges_more: got.missing_more,
                }
            }),
            resources: Sides {
                client: client_report.and_then(|c| c.resources),
                server: server_report.and_then(|c| c.resources),
            },
            after_omit: None,
            rrul: None,
            live_intervals_dropped: 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::{Role, UdpCounts};
    use wirebench_stats::LossRunsSummary;

    /// A reverse UDP test of 10 kB.
    fn spec() -> TestSpec {
        TestSpec::example()
            .protocol(Protocol::Udp)
            .direction(Direction::Reverse)
            .bytes(10_000)
    }

    /// An rr test whose client completed nothing (no request, or every one timed out) is
    /// a failure in the document, whichever side assembles it; one answered request is not.
    #[test]
    fn rr_with_no_completed_transaction_is_an_error() {
        let rr = spec()
            .protocol(Protocol::Tcp)
            .mechanism(Mechanism::Rr)
            .direction(Direction::Forward);
        let client = |messages, timeouts| SideReport {
            role: Some(Role::Sender),
            messages,
            timeouts,
            ..SideReport::default()
        };
        for (messages, timeouts) in [(0, 0), (5, 5), (0, u64::MAX)] {
            let c = client(messages, timeouts);
            let r = Results::assemble(&rr, "s".into(), Some(&c), None, None);
            let e = r.error.unwrap_or_default();
            assert!(e.starts_with(NO_TRANSACTION), "{e}");
        }
        let c = client(5, 4);
        assert_eq!(
            Results::assemble(&rr, "s".into(), Some(&c), None, None).error,
            None
        );
        // Another error stays the first cause; a stream test is not concerned.
        let r = Results::assemble(&rr, "s".into(), Some(&client(0, 0)), None, Some("x".into()));
        assert_eq!(r.error.as_deref(), Some("x"));
        let c = client(0, 0);
        assert_eq!(
            Results::assemble(&spec(), "s".into(), Some(&c), None, None).error,
            None
        );
    }

    #[test]
    fn udp_rr_counts_foreign_requests_and_responses_apart_and_together() {
        let rr = spec()
            .protocol(Protocol::Udp)
            .mechanism(Mechanism::Rr)
            .direction(Direction::Forward);
        let side = |role, messages, foreign: Option<u64>| SideReport {
            role: Some(role),
            messages,
            udp: foreign.map(|foreign| UdpCounts {
                foreign,
                ..UdpCounts::default()
            }),
            ..SideReport::default()
        };
        let client = side(Role::Sender, 10, Some(3));
        let server = side(Role::Receiver, 10, Some(20_000));
        let r = Results::assemble(&rr, "s".into(), Some(&client), Some(&server), None);
        let u = r.end.udp.unwrap_or_default();
        assert_eq!(
            (u.foreign, u.foreign_requests, u.foreign_responses, u.lost),
            (Some(20_003), Some(20_000), Some(3), Some(0))
        );
        // A client that predates the count says nothing of responses.
        let old = side(Role::Sender, 10, None);
        let r = Results::assemble(&rr, "s".into(), Some(&old), Some(&server), None);
        let u = r.end.udp.unwrap_or_default();
        assert_eq!((u.foreign, u.foreign_responses), (Some(20_000), None));
        // A stream test has neither key: its foreign is the receiver's alone.
        let stream = spec().direction(Direction::Forward);
        let r = Results::assemble(&stream, "s".into(), Some(&client), Some(&server), None);
        let u = r.end.udp.unwrap_or_default();
        assert_eq!((u.foreign, u.foreign_requests), (Some(20_000), None));
        let json = serde_json::to_string(&u).unwrap_or_default();
        assert!(!json.contains("foreign_re"), "{json}");
    }

    /// `-O 1s`: `end.after_omit` counts only the intervals from 1 s on; `end` the whole test.
    #[test]
    fn after_omit_leaves_out_the_first_intervals() {
        let rec = |i: u64, bytes: u64, lost: u64| IntervalRecord {
            start_ns: i * 1_000_000_000,
            end_ns: (i + 1) * 1_000_000_000,
            bytes,
            messages: bytes / 1000,
            lost,
            ..IntervalRecord::default()
        };
        let sender = SideReport {
            role: Some(crate::results::Role::Sender),
            bytes: 30_000,
            messages: 30,
            intervals: vec![rec(0, 10_000, 0), rec(1, 10_000, 0), rec(2, 10_000, 0)],
            ..SideReport::default()
        };
        let receiver = SideReport {
            role: Some(crate::results::Role::Receiver),
            bytes: 26_000,
            messages: 26,
            intervals: vec![rec(0, 8_000, 2), rec(1, 9_000, 1), rec(2, 9_000, 1)],
            ..SideReport::default()
        };
        let spec = spec().duration_ns(3_000_000_000).omit_ns(1_000_000_000);
        // Reverse: the server sends.
        let r = Results::assemble(&spec, "s".into(), Some(&receiver), Some(&sender), None);
        assert_eq!(r.test.omit_s, Some(1.0));
        let a = r.end.after_omit.expect("after_omit");
        assert_eq!(
            (a.sent_bytes, a.received_bytes),
            (Some(20_000), Some(18_000))
        );
        assert_eq!(a.lost, Some(Some(2)));
        assert!(a
            .received_bps
            .is_some_and(|b| (b - 18_000.0 * 8.0 / 2.0).abs() < 1e-6));
        assert!((a.loss_ratio.flatten().unwrap_or(0.0) - 2.0 / 20.0).abs() < 1e-9);
        assert_eq!(r.end.sent.bytes, Some(30_000));
        let whole = spec.omit_ns(0);
        let none = Results::assemble(&whole, "s".into(), None, None, None);
        assert!(none.end.after_omit.is_none());
    }

    #[test]
    fn assemble_counts_tail_loss_from_the_senders_total() {
        let sender = SideReport {
            role: Some(Role::Sender),
            bytes: 10_000,
            messages: 10,
            last_ns: Some(500_000_000),
            ..Default::default()
        };
        let receiver = SideReport {
            role: Some(Role::Receiver),
            bytes: 7_000,
            messages: 7,
            last_ns: Some(1_000_000_000),
            udp: Some(UdpCounts {
                sequenced: true,
                duplicates: 2,
                ..Default::default()
            }),
            ..Default::default()
        };
        // Reverse: the server sends.
        let r = Results::assemble(&spec(), "x".into(), Some(&receiver), Some(&sender), None);
        let udp = r.end.udp.unwrap();
        assert_eq!((udp.lost, udp.duplicates), (Some(3), Some(2)));
        assert!((udp.loss_ratio.unwrap_or(0.0) - 0.3).abs() < 1e-12);
        assert_eq!(r.end.sent_bps, Some(160_000.0));
        assert_eq!(r.end.received_bps, Some(56_000.0));
        assert_eq!(r.end.duration_s, 0.5);
    }

    /// Issue 46: `run -b 100 -t 3` printed `0.00-0.00 s ... 867.75 Mbit/s`: its one message
    /// over the microsecond it took. The headline is over the test's time, as iperf3's; the
    /// old figure stays as `active_s`/`active_bps`. A receiver that gets data after the
    /// sender's end (a slow link's queue) counts to its last message, so its rate is never
    /// above what arrived per second.
    #[test]
    fn headline_rates_are_over_the_tests_own_time() {
        let timed = TestSpec::example().duration_ns(3_000_000_000);
        let sender = |last_ms: u64| SideReport {
            role: Some(Role::Sender),
            bytes: 131_072,
            messages: 1,
            first_ns: Some(0),
            last_ns: Some(last_ms * 1_000_000),
            elapsed_ns: 3_050_000_000,
            ..Default::default()
        };
        let receiver = |last_ms: u64| SideReport {
            role: Some(Role::Receiver),
            bytes: 131_072,
            messages: 1,
            first_ns: Some(1_000_000),
            last_ns: Some(last_ms * 1_000_000),
            elapsed_ns: 4_000_000_000,
            ..Default::default()
        };
        let r = Results::assemble(
            &timed,
            "x".into(),
            Some(&sender(1)),
            Some(&receiver(2)),
            None,
        );
        assert_eq!(r.end.duration_s, 3.0);
        assert_eq!(r.end.sent.duration_s, Some(3.0));
        assert_eq!(r.end.received.duration_s, Some(3.0));
        assert_eq!(r.end.sent_bps, Some(131_072.0 * 8.0 / 3.0));
        assert_eq!(r.end.received_bps, Some(131_072.0 * 8.0 / 3.0));
        assert_eq!(r.end.sent.active_s, Some(0.001));
        assert_eq!(r.end.sent.active_bps, Some(131_072.0 * 8.0 / 0.001));
        // The last byte came at 5 s, 2 s after the sender's bound.
        let r = Results::assemble(
            &timed,
            "x".into(),
            Some(&sender(1)),
            Some(&receiver(5000)),
            None,
        );
        assert_eq!(r.end.received.duration_s, Some(5.0));
        assert_eq!(r.end.received_bps, Some(131_072.0 * 8.0 / 5.0));
        // An amount: the sender's time is its last message's.
        let amount = TestSpec::example().bytes(131_072);
        let r = Results::assemble(
            &amount,
            "x".into(),
            Some(&sender(40)),
            Some(&receiver(41)),
            None,
        );
        assert_eq!(r.end.sent.duration_s, Some(0.04));
        assert_eq!(r.end.received.duration_s, Some(0.041));
    }

    #[test]
    fn the_receivers_checksum_errors_reach_end_udp_and_are_absent_when_unread() {
        let sender = SideReport {
            role: Some(Role::Sender),
            messages: 10,
            ..Default::default()
        };
        let receiver = |errors| SideReport {
            role: Some(Role::Receiver),
            messages: 7,
            udp: Some(UdpCounts {
                sequenced: true,
                checksum_errors: errors,
                ..Default::default()
            }),
            ..Default::default()
        };
        for errors in [Some(0), Some(3)] {
            let r = Results::assemble(
                &spec(),
                "x".into(),
                Some(&receiver(errors)),
                Some(&sender),
                None,
            );
            let v = serde_json::to_value(&r).unwrap();
            assert_eq!(v["end"]["udp"]["checksum_errors"], errors.unwrap());
        }
        let r = Results::assemble(
            &spec(),
            "x".into(),
            Some(&receiver(None)),
            Some(&sender),
            None,
        );
        let v = serde_json::to_value(&r).unwrap();
        assert!(v["end"]["udp"].get("checksum_errors").is_none());
        // A report from a peer without the field reads as not measured.
        let old: UdpCounts = serde_json::from_str(
            r#"{"sequenced":true,"duplicates":0,"reordered":0,"too_old":0,"jitter_ns":0.0}"#,
        )
        .unwrap();
        assert_eq!(old.checksum_errors, None);
    }

    #[test]
    fn json_has_the_contract_keys() {
        let r = Results::assemble(&spec(), "x".into(), None, None, Some("boom".into()));
        let v = serde_json::to_value(&r).unwrap();
        for key in [
            "schema",
            "wirebench",
            "test",
            "datapath",
            "intervals",
            "end",
        ] {
            assert!(v.get(key).is_some(), "{key}");
        }
        for key in [
            "duration_s",
            "sent",
            "received",
            "sent_bps",
            "received_bps",
            "udp",
            "retransmits",
        ] {
            assert!(v["end"].get(key).is_some(), "end.{key}");
        }
        for key in ["lost", "duplicates", "reordered", "loss_ratio", "jitter_ms"] {
            assert!(v["end"]["udp"].get(key).is_some(), "end.udp.{key}");
        }
        assert_eq!(v["test"]["protocol"], "udp");
        assert_eq!(v["test"]["direction"], "reverse");
        assert_eq!(v["error"], "boom");
    }

    /// The spec's "none" is echoed in `test` as the documented 0 (rates) or the size the
    /// test used (rr's response), keys and values as before they became `Option`s.
    #[test]
    fn the_echoed_spec_keeps_its_keys_and_zeros() {
        let test = |s: &TestSpec| {
            let r = Results::assemble(s, "x".into(), None, None, None);
            serde_json::to_value(&r).expect("json")["test"].clone()
        };
        let plain = test(&spec());
        assert_eq!(
            (plain["rate_bps"].as_u64(), plain["rate_pps"].as_u64()),
            (Some(0), Some(0))
        );
        assert!(plain.get("response_size").is_none());
        let paced = test(&spec().rate_bps(5_000).rate_pps(10));
        assert_eq!(
            (paced["rate_bps"].as_u64(), paced["rate_pps"].as_u64()),
            (Some(5_000), Some(10))
        );
        let rr = spec()
            .direction(Direction::Forward)
            .mechanism(Mechanism::Rr)
            .size(64);
        assert_eq!(test(&rr)["response_size"].as_u64(), Some(64));
        assert_eq!(
            test(&rr.response_size(200))["response_size"].as_u64(),
            Some(200)
        );
    }

    /// `-R` with the server gone before its report: what the client received is known,
    /// what the server sent is not, and the document says null for it, never 0.
    #[test]
    fn a_side_that_never_reported_is_unknown_not_zero() {
        let client = SideReport {
            role: Some(Role::Receiver),
            bytes: 1_230_000,
            messages: 1230,
            last_ns: Some(2_000_000_000),
            ..SideReport::default()
        };
        let spec = spec().protocol(Protocol::Tcp);
        let r = Results::assemble(&spec, "s".into(), Some(&client), None, Some("gone".into()));
        assert_eq!(r.end.sent, Totals::default());
        assert_eq!(r.end.sent_bps, None);
        assert_eq!(r.end.received.bytes, Some(1_230_000));
        assert!(r.end.received_bps.is_some_and(|b| b > 0.0));
        assert_eq!(
            r.end.duration_s, 2.0,
            "the receiver's time, the sender's being unknown"
        );
        let json = serde_json::to_value(&r).expect("serialise");
        assert!(json["end"]["sent"]["bytes"].is_null());
        assert!(json["end"]["sent_bps"].is_null());
        let back: Results = serde_json::from_value(json).expect("read back");
        assert_eq!(back.end.sent.bytes, None);
    }

    /// A UDP receiver's report of 900 datagrams, with gaps of 100 below the highest
    /// sequence number it got (its loss runs, settled without the sender's count).
    fn udp_receiver(role: Role) -> SideReport {
        let runs = LossRunsSummary {
            runs: 1,
            lost: 100,
            ..LossRunsSummary::default()
        };
        SideReport {
            role: Some(role),
            bytes: 900_000,
            messages: 900,
            last_ns: Some(1_000_000_000),
            intervals: vec![IntervalRecord {
                end_ns: 1_000_000_000,
                bytes: 900_000,
                messages: 900,
                lost: 100,
                jitter_ns: Some(20_000.0),
                ..IntervalRecord::default()
            }],
            udp: Some(UdpCounts {
                sequenced: true,
                duplicates: 1,
                jitter_ns: 20_000.0,
                loss_runs: runs,
                in_order_prefix: 400,
                ..UdpCounts::default()
            }),
            ..SideReport::default()
        }
    }

    /// A UDP sender's report of 1,000 datagrams.
    fn udp_sender() -> SideReport {
        SideReport {
            role: Some(Role::Sender),
            bytes: 1_000_000,
            messages: 1000,
            last_ns: Some(1_000_000_000),
            intervals: vec![IntervalRecord {
                end_ns: 1_000_000_000,
                bytes: 1_000_000,
                messages: 1000,
                ..IntervalRecord::default()
            }],
            ..SideReport::default()
        }
    }

    /// Every figure only the receiver counts is null when it never reported; the sender's
    /// stay known. Issue 44: a killed server read "2475 of 2475 lost".
    fn assert_receiver_unknown(half: &serde_json::Value) {
        let e = &half["end"];
        for key in [
            "bytes",
            "messages",
            "duration_s",
            "transfer_s",
            "transfer_bps",
        ] {
            assert!(e["received"][key].is_null(), "received.{key}: {e}");
        }
        assert!(e["received_bps"].is_null(), "{e}");
        let u = &e["udp"];
        for key in [
            "lost",
            "duplicates",
            "reordered",
            "loss_ratio",
            "jitter_ms",
            "too_old",
            "foreign",
            "max_reorder_extent",
            "clocks",
            "loss_runs",
            "last_in_order_seq",
            "first_lost_seq",
            "bandwidth_without_loss_bps",
        ] {
            assert!(u.get(key).is_some_and(|v| v.is_null()), "udp.{key}: {u}");
        }
        assert_eq!(u["sequenced"], true, "the spec says it");
        assert_eq!(e["sent"]["messages"], 1000);
        assert_eq!(e["retransmits"], 0);
        for i in half["intervals"].as_array().expect("intervals") {
            for key in [
                "received_bytes",
                "received_messages",
                "received_bps",
                "lost",
            ] {
                assert!(i.get(key).is_some_and(|v| v.is_null()), "{key}: {i}");
            }
            assert!(i.get("jitter_ms").is_some_and(|v| v.is_null()), "{i}");
            assert_eq!(i["sent_messages"], 1000);
        }
    }

    /// The receiver saw what arrived; the sender's count is unknown, so `lost` is the gaps
    /// the receiver saw (as its loss runs) and `loss_ratio` is null.
    fn assert_sender_unknown(half: &serde_json::Value) {
        let e = &half["end"];
        for key in [
            "bytes",
            "messages",
            "duration_s",
            "transfer_s",
            "transfer_bps",
        ] {
            assert!(e["sent"][key].is_null(), "sent.{key}: {e}");
        }
        for key in ["sent_bps", "retransmits", "local_drops"] {
            assert!(e[key].is_null(), "{key}: {e}");
        }
        assert_eq!(e["received"]["messages"], 900);
        let u = &e["udp"];
        assert_eq!(u["lost"], 100, "{u}");
        assert_eq!(u["loss_runs"]["lost"], u["lost"], "{u}");
        assert!(u["loss_ratio"].is_null(), "{u}");
        assert_eq!(u["first_lost_seq"], 400);
        assert_eq!(u["duplicates"], 1);
        assert_eq!(u["jitter_ms"], 0.02);
        assert_eq!(u["clocks"], "unsynchronized");
        for i in half["intervals"].as_array().expect("intervals") {
            assert!(i["sent_messages"].is_null(), "{i}");
            assert_eq!(i["lost"], 100, "{i}");
        }
    }

    #[test]
    fn udp_forward_with_the_receiver_gone_is_null_where_it_counted() {
        let spec = spec().direction(Direction::Forward);
        let r = Results::assemble(&spec, "s".into(), Some(&udp_sender()), None, None);
        assert_receiver_unknown(&serde_json::to_value(&r).expect("json"));
        // -O: the receiver's part of `after_omit` is null too, keys kept.
        let omit = spec.duration_ns(3_000_000_000).omit_ns(1);
        let r = Results::assemble(&omit, "s".into(), Some(&udp_sender()), None, None);
        let a = serde_json::to_value(r.end.after_omit).expect("json");
        for key in ["received_messages", "lost", "loss_ratio"] {
            assert!(a.get(key).is_some_and(|v| v.is_null()), "{key}: {a}");
        }
    }

    #[test]
    fn udp_reverse_with_the_sender_gone_counts_the_gaps_it_saw() {
        let c = udp_receiver(Role::Receiver);
        let r = Results::assemble(&spec(), "s".into(), Some(&c), None, None);
        assert_sender_unknown(&serde_json::to_value(&r).expect("json"));
        // With the sender's count, the tail is in: 1000 - 900.
        let r = Results::assemble(&spec(), "s".into(), Some(&c), Some(&udp_sender()), None);
        let u = r.end.udp.expect("udp");
        assert_eq!((u.lost, u.loss_ratio), (Some(100), Some(0.1)));
        // Short datagrams carry no sequence number: no gap is seen, loss is unknown.
        let short = spec().size(8);
        let r = Results::assemble(&short, "s".into(), Some(&c), None, None);
        let u = r.end.udp.expect("udp");
        assert_eq!((u.lost, u.loss_ratio, u.sequenced), (None, None, false));
    }

    /// `--bidir` with the server gone: client → server lost its receiver, server → client
    /// its sender; each half says so on its own.
    #[test]
    fn udp_bidir_with_the_server_gone_is_unknown_per_direction() {
        let spec = spec().direction(Direction::Bidir);
        let client = SideReport {
            reverse: Some(Box::new(udp_receiver(Role::Receiver))),
            ..udp_sender()
        };
        let r = Results::assemble(&spec, "s".into(), Some(&client), None, None);
        let v = serde_json::to_value(&r).expect("json");
        assert_receiver_unknown(&v);
        assert_sender_unknown(&v["reverse"]);
    }

    /// What the document says null reads back as null, and older documents (0 there, no
    /// `foreign`) read as they were written.
    #[test]
    fn unknown_figures_read_back() {
        let r = Results::assemble(&spec(), "s".into(), None, Some(&udp_sender()), None);
        let back: Results =
            serde_json::from_value(serde_json::to_value(&r).expect("json")).expect("read");
        assert_eq!(back, r);
        assert_eq!(back.intervals[0].lost, Some(None));
        let old: UdpEnd = serde_json::from_str(
            r#"{"sequenced":true,"lost":3,"duplicates":0,"reordered":0,"loss_ratio":0.3,
                "jitter_ms":0.1,"too_old":0,"max_reorder_extent":0,"clocks":"same-host",
                "loss_runs":{"runs":0,"lost":0,"buckets":[]},"last_in_order_seq":null,
                "first_lost_seq":null,"bandwidth_without_loss_bps":null}"#,
        )
        .expect("an older end.udp");
        assert_eq!((old.lost, old.foreign), (Some(3), Some(0)));
    }
}
