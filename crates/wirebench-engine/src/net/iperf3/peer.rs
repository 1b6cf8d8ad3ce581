//! An iperf3 server's side of a test, from its results exchange, as wirebench's results
//! document carries it (`run --iperf3`). iperf3's per-stream figures mean (`iperf_api.c`,
//! `send_results`, `iperf_udp.c`, `iperf_reset_stats`):
//!
//! - `bytes`: what the stream sent or received after the omitted seconds (`-O`; all of it
//!   without), since the omit's end resets the counts;
//! - `packets`: a UDP sender's datagrams sent; a UDP receiver's highest sequence number
//!   seen, over the whole test (never reset);
//! - `errors`: a UDP receiver's lost datagrams, the gaps below that sequence number less
//!   the late arrivals that filled them, over the whole test: what `iperf3 -s` prints as
//!   `lost_packets`. Datagrams after the highest number it saw are not counted;
//! - `omitted_packets`, `omitted_errors` (iperf3 3.14 on): `packets` and `errors` when the
//!   omitted seconds ended;
//! - `start_time`, `end_time`: the stream's time, s, from the omit's end.
//!
//! So a receiving server received `packets − errors` datagrams, lost `errors`, and after the
//! omit received `bytes`.

use wirebench_proto::results::{
    AfterOmit, End, IntervalView, Results, Role, SideReport, UdpCounts, UdpEnd,
};
use wirebench_proto::spec::Direction;

use crate::iperf3::{ResultsDoc, StreamResult};

/// What the server's results say, with what reading them needs.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Exchange<'a> {
    /// The server's results.
    pub doc: &'a ResultsDoc,
    /// Its streams carry `omitted_packets` and `omitted_errors`.
    pub counts_omitted: bool,
    /// The whole seconds the test left out (the parameters' `omit`).
    pub omit_s: u64,
    /// Datagram (block) size, bytes: every datagram of a timed test has it.
    pub len: u64,
    /// A UDP test.
    pub udp: bool,
    /// This side's count of each stream (by index, in creation order) when the omitted
    /// seconds ended; empty without `-O`.
    pub ours_omitted: &'a [Moved],
    /// This side's count of each stream at the end.
    pub ours: &'a [Moved],
}

/// A stream of the server's side: its index among the test's streams and its iperf3 id.
pub(crate) type StreamRef = (usize, i64);

/// What a stream moved: bytes, and messages (datagrams for UDP).
pub(crate) type Moved = (u64, u64);

/// Datagrams the server found lost on a stream (`errors`; late arrivals and duplicates
/// can take it below 0, which is none).
fn lost(r: &StreamResult) -> u64 {
    u64::try_from(r.errors).unwrap_or(0)
}

/// Datagrams a receiving server took: up to its highest sequence number, less the lost.
fn received(r: &StreamResult) -> u64 {
    r.packets.saturating_sub(lost(r))
}

/// The stream's time after the omitted seconds, s.
fn post_omit_s(r: &StreamResult) -> f64 {
    let s = r.end_time - r.start_time;
    if s.is_finite() {
        s.max(0.0)
    } else {
        0.0
    }
}

/// A total of the server's numbers, which may be anything: never past `u64::MAX`.
fn sum(values: impl Iterator<Item = u64>) -> u64 {
    values.fold(0, u64::saturating_add)
}

fn bps(bytes: u64, seconds: f64) -> f64 {
    if seconds > 0.0 {
        bytes as f64 * 8.0 / seconds
    } else {
        0.0
    }
}

impl Exchange<'_> {
    fn stream(&self, id: i64) -> Option<&StreamResult> {
        self.doc.streams.iter().find(|r| r.id == id)
    }

    /// What this side moved on the streams of `ids` after the omitted seconds, by its
    /// count when they ended; `None` without one.
    fn ours_after(&self, ids: &[StreamRef]) -> Option<Moved> {
        if self.ours_omitted.is_empty() {
            return None;
        }
        Some(ids.iter().fold((0, 0), |(b, m), &(i, _)| {
            let (end, omitted) = (
                self.ours.get(i).copied().unwrap_or_default(),
                self.ours_omitted.get(i).copied().unwrap_or_default(),
            );
            (
                b.saturating_add(end.0.saturating_sub(omitted.0)),
                m.saturating_add(end.1.saturating_sub(omitted.1)),
            )
        }))
    }

    /// This side's time after the omit, s, from its time over the whole test.
    fn after_omit_s(&self, whole_s: Option<f64>) -> Option<f64> {
        whole_s.map(|s| (s - self.omit_s as f64).max(0.0))
    }

    /// The streams of `ids` the server reported on.
    fn streams<'s>(&'s self, ids: &'s [StreamRef]) -> impl Iterator<Item = &'s StreamResult> {
        ids.iter().filter_map(|(_, id)| self.stream(*id))
    }

    /// One stream's whole-test bytes and messages on the server's side (`sending`: it
    /// sends on it). After `-O` iperf3 reports bytes of the rest only: a UDP stream's whole
    /// count follows from its datagrams, a TCP stream's adds this side's count of the
    /// omitted seconds (what TCP delivered then, to within what was in flight at the omit's
    /// end), kept within what TCP allows: a receiver no more than was sent, a sender no
    /// less than was received.
    fn whole(&self, index: usize, r: &StreamResult, sending: bool) -> (u64, u64) {
        let messages = match (self.udp, sending) {
            (true, true) => r.packets,
            (true, false) => received(r),
            (false, _) => r.packets,
        };
        if self.omit_s == 0 {
            return (r.bytes, messages);
        }
        let bytes = if self.udp {
            messages.saturating_mul(self.len)
        } else {
            let omitted = self.ours_omitted.get(index).map_or(0, |o| o.0);
            let estimate = r.bytes.saturating_add(omitted);
            match self.ours.get(index) {
                Some(&(ours, _)) if sending => estimate.max(ours),
                Some(&(ours, _)) => estimate.min(ours),
                None => estimate,
            }
        };
        (bytes, messages)
    }

    /// The server's side of one direction (`sending`: the server sends), over the whole
    /// test, as a wirebench side would report it (without intervals: iperf3 sends none).
    pub(crate) fn side(&self, ids: &[StreamRef], sending: bool) -> SideReport {
        let role = Some(if sending {
            Role::Sender
        } else {
            Role::Receiver
        });
        let mut rep = SideReport {
            role,
            ..SideReport::default()
        };
        let (mut jitter_s, mut n) = (0.0, 0.0);
        for &(index, id) in ids {
            let Some(r) = self.stream(id) else {
                continue;
            };
            let (bytes, messages) = self.whole(index, r, sending);
            let end_ns = ((self.omit_s as f64 + post_omit_s(r)) * 1e9) as u64;
            let udp = (self.udp && !sending).then(|| UdpCounts {
                sequenced: true,
                jitter_ns: r.jitter * 1e9,
                ..UdpCounts::default()
            });
            rep.bytes = rep.bytes.saturating_add(bytes);
            rep.messages = rep.messages.saturating_add(messages);
            rep.elapsed_ns = rep.elapsed_ns.max(end_ns);
            rep.first_ns = Some(0);
            rep.last_ns = Some(rep.last_ns.unwrap_or(0).max(end_ns));
            jitter_s += r.jitter;
            n += 1.0;
            rep.streams.push(SideReport {
                role,
                bytes,
                messages,
                first_ns: Some(0),
                last_ns: Some(end_ns),
                elapsed_ns: end_ns,
                udp,
                ..SideReport::default()
            });
        }
        if self.udp && !sending {
            rep.udp = Some(UdpCounts {
                sequenced: true,
                jitter_ns: if n > 0.0 { jitter_s / n * 1e9 } else { 0.0 },
                ..UdpCounts::default()
            });
        }
        rep
    }

    /// Puts into the assembled document what it cannot compute from sent minus received
    /// where the server counted: UDP loss as the server counted it, and the figures after
    /// `-O` that only the server's exchange gives; the server's side of each interval is
    /// unknown (null: iperf3 exchanges no intervals), not 0. `received` are the streams the
    /// server received on, `sent` those it sent on.
    pub(crate) fn settle(
        &self,
        r: &mut Results,
        direction: Direction,
        received: &[StreamRef],
        sent: &[StreamRef],
    ) {
        match direction {
            Direction::Forward => {
                self.settle_receiver(&mut r.end, &mut r.streams, received);
                r.intervals.iter_mut().for_each(unknown_received);
            }
            Direction::Reverse => {
                self.settle_sender(&mut r.end, sent);
                r.intervals.iter_mut().for_each(unknown_sent);
            }
            Direction::Bidir => {
                self.settle_receiver(&mut r.end, &mut r.streams, received);
                r.intervals.iter_mut().for_each(unknown_received);
                if let Some(back) = r.reverse.as_mut() {
                    self.settle_sender(&mut back.end, sent);
                    back.intervals.iter_mut().for_each(unknown_sent);
                }
            }
        }
    }

    /// A direction the server received: its loss count, and its figures after the omit.
    fn settle_receiver(&self, end: &mut End, streams: &mut [End], ids: &[StreamRef]) {
        if self.udp {
            let total = sum(self.streams(ids).map(lost));
            set_lost(end, total);
            if streams.len() == ids.len() {
                for (e, (_, id)) in streams.iter_mut().zip(ids) {
                    if let Some(r) = self.stream(*id) {
                        set_lost(e, lost(r));
                    }
                }
            }
        }
        let our_s = self.after_omit_s(end.sent.duration_s);
        let Some(a) = end.after_omit.as_mut().filter(|_| self.omit_s > 0) else {
            return;
        };
        // This side sent: its count at the omit's end, as the server's reset then.
        if let Some((b, m)) = self.ours_after(ids) {
            a.sent_bytes = Some(b);
            a.sent_messages = Some(m);
            a.sent_duration_s = our_s;
            a.sent_bps = our_s.map(|s| bps(b, s));
        }
        let bytes = sum(self.streams(ids).map(|r| r.bytes));
        let secs = self.streams(ids).map(post_omit_s).fold(0.0, f64::max);
        a.received_bytes = Some(bytes);
        a.received_duration_s = Some(secs);
        a.received_bps = Some(bps(bytes, secs));
        // iperf3 counts no TCP messages; a UDP stream's datagrams all carry `len` bytes.
        a.received_messages = self.udp.then(|| bytes / self.len.max(1));
        let lost_after = (self.udp && self.counts_omitted).then(|| {
            sum(self
                .streams(ids)
                .map(|r| u64::try_from(r.errors.saturating_sub(r.omitted_errors)).unwrap_or(0)))
        });
        set_after_omit_loss(a, lost_after);
    }

    /// A direction the server sent: its figures after the omit, and with them the loss
    /// this side saw after it.
    fn settle_sender(&self, end: &mut End, ids: &[StreamRef]) {
        let our_s = self.after_omit_s(end.received.duration_s);
        let Some(a) = end.after_omit.as_mut().filter(|_| self.omit_s > 0) else {
            return;
        };
        // This side received: its count at the omit's end (with --bidir its intervals
        // follow the other direction).
        if let Some((b, m)) = self.ours_after(ids) {
            a.received_bytes = Some(b);
            a.received_messages = Some(m);
            a.received_duration_s = our_s;
            a.received_bps = our_s.map(|s| bps(b, s));
        }
        let bytes = sum(self.streams(ids).map(|r| r.bytes));
        let secs = self.streams(ids).map(post_omit_s).fold(0.0, f64::max);
        a.sent_bytes = Some(bytes);
        a.sent_duration_s = Some(secs);
        a.sent_bps = Some(bps(bytes, secs));
        a.sent_messages = self.udp.then(|| bytes / self.len.max(1));
        let lost_after = a
            .sent_messages
            .zip(a.received_messages)
            .map(|(s, r)| s.saturating_sub(r));
        if self.udp {
            set_after_omit_loss(a, lost_after);
        }
    }
}

/// An interval's figures of a receiving iperf3 server: not known.
fn unknown_received(i: &mut IntervalView) {
    i.received_bytes = None;
    i.received_messages = None;
    i.received_bps = None;
    // Null where the key applies (UDP), absent where it does not.
    i.lost = i.lost.map(|_| None);
    i.jitter_ms = i.jitter_ms.map(|_| None);
}

/// An interval's figures of a sending iperf3 server: not known.
fn unknown_sent(i: &mut IntervalView) {
    i.sent_bytes = None;
    i.sent_messages = None;
    i.sent_bps = None;
}

/// The end's UDP loss as the receiving server counted it (not sent minus received: the
/// datagrams after the highest sequence number it saw are in neither). What only a
/// receiver that tracked sequence numbers itself knows is unknown here.
fn set_lost(end: &mut End, lost: u64) {
    let sent = end.sent.messages;
    if let Some(u) = end.udp.as_mut() {
        *u = UdpEnd {
            lost: Some(lost),
            loss_ratio: sent.map(|sent| {
                if sent > 0 {
                    lost as f64 / sent as f64
                } else {
                    0.0
                }
            }),
            last_in_order_seq: None,
            first_lost_seq: None,
            bandwidth_without_loss_bps: None,
            ..u.clone()
        };
    }
}

/// `after_omit`'s loss, `None` when unknown (an iperf3 server before 3.14 does not say
/// what it had lost by the omit's end).
fn set_after_omit_loss(a: &mut AfterOmit, lost: Option<u64>) {
    a.lost = lost.map(Some);
    a.loss_ratio = lost.map(|l| {
        let total = a.received_messages.unwrap_or(0).saturating_add(l);
        Some(if total > 0 {
            l as f64 / total as f64
        } else {
            0.0
        })
    });
}

/// The document's keys an iperf3 server's exchange gives after `-O`, beyond those of
/// `PeerTool::iperf3`.
pub(crate) fn after_omit_keys(direction: Direction, udp: bool) -> Vec<String> {
    let mut keys = Vec::new();
    let mut add = |prefix: &str, server_sends: bool| {
        let side = if server_sends { "sent" } else { "received" };
        for k in ["bytes", "messages", "duration_s", "bps"] {
            keys.push(format!("{prefix}end.after_omit.{side}_{k}"));
        }
        if udp {
            keys.push(format!("{prefix}end.after_omit.lost"));
            keys.push(format!("{prefix}end.after_omit.loss_ratio"));
        }
    };
    match direction {
        Direction::Forward => add("", false),
        Direction::Reverse => add("", true),
        Direction::Bidir => {
            add("", false);
            add("reverse.", true);
        }
    }
    keys
}

#[cfg(test)]
mod tests {
    use super::*;
    use wirebench_proto::results::Results;
    use wirebench_proto::spec::{Protocol, TestSpec};

    const LEN: u64 = 1000;

    fn stream(id: i64, bytes: u64, packets: u64, errors: i64) -> StreamResult {
        StreamResult {
            id,
            bytes,
            packets,
            errors,
            jitter: 0.000_01,
            end_time: 2.0,
            ..StreamResult::default()
        }
    }

    fn exchange(doc: &ResultsDoc) -> Exchange<'_> {
        Exchange {
            doc,
            counts_omitted: false,
            omit_s: 0,
            len: LEN,
            udp: true,
            ours_omitted: &[],
            ours: &[],
        }
    }

    /// This side sent `sent` datagrams of `LEN` bytes on each stream of `ids`.
    fn ours(ids: &[StreamRef], sent: u64) -> SideReport {
        let mut rep = SideReport {
            role: Some(Role::Sender),
            bytes: sent * LEN * ids.len() as u64,
            messages: sent * ids.len() as u64,
            first_ns: Some(0),
            last_ns: Some(2_000_000_000),
            elapsed_ns: 2_000_000_000,
            ..SideReport::default()
        };
        if ids.len() > 1 {
            rep.streams = ids
                .iter()
                .map(|_| SideReport {
                    bytes: sent * LEN,
                    messages: sent,
                    ..rep.clone()
                })
                .collect();
        }
        rep
    }

    fn udp_spec() -> TestSpec {
        TestSpec::example()
            .protocol(Protocol::Udp)
            .direction(Direction::Forward)
            .size(LEN)
    }

    fn assemble(spec: &TestSpec, ours: &SideReport, server: &SideReport) -> Results {
        Results::assemble(spec, "s".into(), Some(ours), Some(server), None)
    }

    /// The server received datagrams 1..=90 of 100 sent but for 7 (`errors`): the document
    /// says 7 lost, 83 received, as `iperf3 -s` would, not 100 − 83; the 10 after its
    /// highest number are in neither, as in iperf3's count.
    #[test]
    fn udp_loss_is_the_servers_count() {
        let ids = [(0, 1)];
        let doc = ResultsDoc {
            streams: vec![stream(1, 83 * LEN, 90, 7)],
            ..ResultsDoc::default()
        };
        let ex = exchange(&doc);
        let server = ex.side(&ids, false);
        assert_eq!((server.bytes, server.messages), (83 * LEN, 83));
        let mut sender = ours(&ids, 100);
        sender.intervals = vec![wirebench_proto::results::IntervalRecord {
            end_ns: 1_000_000_000,
            bytes: 100 * LEN,
            messages: 100,
            ..Default::default()
        }];
        let mut r = assemble(&udp_spec(), &sender, &server);
        ex.settle(&mut r, Direction::Forward, &ids, &[]);
        let u = r.end.udp.expect("udp");
        assert_eq!(u.lost, Some(7));
        assert!((u.loss_ratio.unwrap_or(0.0) - 0.07).abs() < 1e-12);
        assert_eq!(u.first_lost_seq, None);
        assert_eq!(r.end.received.messages, Some(83));
        assert!((u.jitter_ms.unwrap_or(0.0) - 0.01).abs() < 1e-9);
        // Per interval the server's side is unknown (iperf3 exchanges none), not 0.
        let i = &r.intervals[0];
        assert_eq!(
            (i.sent_bytes, i.received_bytes, i.lost),
            (Some(100 * LEN), None, Some(None)),
            "lost: null, as docs/results.md says of a peer's interval figures"
        );
    }

    /// A server's numbers may be anything: the document saturates, never panics.
    #[test]
    fn hostile_numbers_do_not_panic() {
        let ids = [(0, 1), (1, 3)];
        let mut big = stream(1, u64::MAX, u64::MAX, i64::MAX);
        (big.omitted_errors, big.end_time, big.start_time) = (i64::MIN, f64::MAX, -f64::MAX);
        let doc = ResultsDoc {
            streams: vec![big.clone(), StreamResult { id: 3, ..big }],
            ..ResultsDoc::default()
        };
        for udp in [true, false] {
            let ex = Exchange {
                counts_omitted: true,
                omit_s: 60,
                udp,
                ours_omitted: &[(u64::MAX, u64::MAX)],
                ours: &[(0, 0)],
                ..exchange(&doc)
            };
            let spec = udp_spec()
                .streams(2)
                .duration_ns(70_000_000_000)
                .omit_ns(60_000_000_000);
            for sending in [true, false] {
                let server = ex.side(&ids, sending);
                let mut r = assemble(&spec, &ours(&ids, 1), &server);
                ex.settle(&mut r, Direction::Bidir, &ids, &ids);
            }
        }
    }

    /// Late arrivals and duplicates can take iperf3's `errors` below 0: none lost.
    #[test]
    fn negative_errors_are_no_loss() {
        let r = stream(1, 0, 10, -2);
        assert_eq!((lost(&r), received(&r)), (0, 10));
    }

    /// Two streams: the total and each stream's loss are the server's, paired by id.
    #[test]
    fn each_streams_loss_is_its_own() {
        let ids = [(0, 1), (1, 3)];
        let doc = ResultsDoc {
            streams: vec![stream(3, 95 * LEN, 100, 5), stream(1, 99 * LEN, 100, 1)],
            ..ResultsDoc::default()
        };
        let ex = exchange(&doc);
        let server = ex.side(&ids, false);
        let mut r = assemble(&udp_spec().streams(2), &ours(&ids, 100), &server);
        ex.settle(&mut r, Direction::Forward, &ids, &[]);
        assert_eq!(r.end.udp.as_ref().and_then(|u| u.lost), Some(6));
        let per: Vec<u64> = r
            .streams
            .iter()
            .filter_map(|e| e.udp.as_ref().and_then(|u| u.lost))
            .collect();
        assert_eq!(per, [1, 5]);
    }

    /// `-O 2`: the server's bytes are those after the omit, its `packets` and `errors` the
    /// whole test's; a 3.14 server also says where they stood at the omit's end.
    #[test]
    fn after_omit_comes_from_the_servers_counts() {
        let ids = [(0, 1)];
        let mut s = stream(1, 60 * LEN, 100, 10);
        (s.omitted_packets, s.omitted_errors) = (30, 4);
        let doc = ResultsDoc {
            streams: vec![s],
            ..ResultsDoc::default()
        };
        let mut ex = Exchange {
            counts_omitted: true,
            omit_s: 2,
            ours_omitted: &[(30 * LEN, 30)],
            ours: &[(100 * LEN, 100)],
            ..exchange(&doc)
        };
        let spec = udp_spec().duration_ns(4_000_000_000).omit_ns(2_000_000_000);
        let server = ex.side(&ids, false);
        // The whole test: 90 received of 100, 10 lost.
        assert_eq!((server.bytes, server.messages), (90 * LEN, 90));
        let mut r = assemble(&spec, &ours(&ids, 100), &server);
        ex.settle(&mut r, Direction::Forward, &ids, &[]);
        let a = r.end.after_omit.expect("after_omit");
        assert_eq!(a.received_bytes, Some(60 * LEN));
        assert_eq!(a.received_messages, Some(60));
        assert_eq!(a.received_duration_s, Some(2.0));
        assert_eq!(a.lost, Some(Some(6)));
        assert_eq!(r.end.received.duration_s, Some(4.0));
        // This side's after the omit: by its count when the omit ended.
        assert_eq!((a.sent_bytes, a.sent_messages), (Some(70 * LEN), Some(70)));
        assert_eq!(a.sent_duration_s, Some(0.0));
        // A server before 3.14: the loss after the omit is not known.
        ex.counts_omitted = false;
        let mut r = assemble(&spec, &ours(&ids, 100), &server);
        ex.settle(&mut r, Direction::Forward, &ids, &[]);
        let a = r.end.after_omit.expect("after_omit");
        assert_eq!(
            (a.received_messages, a.lost, a.loss_ratio),
            (Some(60), None, None)
        );
    }

    /// TCP after `-O`: the server's bytes after the omit, and the whole test's as those
    /// plus this side's count of the omitted seconds, within what TCP allows.
    #[test]
    fn tcp_after_omit_and_whole() {
        let ids = [(0, 1)];
        let doc = ResultsDoc {
            streams: vec![stream(1, 7_000, 0, 0)],
            ..ResultsDoc::default()
        };
        let ex = Exchange {
            omit_s: 1,
            udp: false,
            ours_omitted: &[(3_000, 3)],
            ours: &[(10_000, 10)],
            ..exchange(&doc)
        };
        let server = ex.side(&ids, false);
        assert_eq!(server.bytes, 10_000);
        // This side's count of the omit ran late: never more received than sent, nor
        // less sent than received.
        let late = Exchange {
            ours_omitted: &[(3_500, 4)],
            ..ex
        };
        assert_eq!(late.side(&ids, false).bytes, 10_000);
        assert_eq!(late.side(&ids, true).bytes, 10_500);
        let early = Exchange {
            ours_omitted: &[(2_500, 3)],
            ..ex
        };
        assert_eq!(early.side(&ids, true).bytes, 10_000);
        let spec = TestSpec::example()
            .protocol(Protocol::Tcp)
            .direction(Direction::Forward)
            .duration_ns(3_000_000_000)
            .omit_ns(1_000_000_000);
        let mut r = assemble(&spec, &ours(&ids, 10), &server);
        ex.settle(&mut r, Direction::Forward, &ids, &[]);
        let a = r.end.after_omit.expect("after_omit");
        assert_eq!((a.received_bytes, a.received_messages), (Some(7_000), None));
        assert_eq!(a.received_bps, Some(7_000.0 * 8.0 / 2.0));
    }

    /// The server sent (`-R -O 1`, UDP): its datagrams after the omit, and the loss this
    /// side saw after it.
    #[test]
    fn a_sending_servers_after_omit() {
        let ids = [(0, 1)];
        let doc = ResultsDoc {
            streams: vec![stream(1, 50 * LEN, 80, 0)],
            ..ResultsDoc::default()
        };
        let ex = Exchange {
            omit_s: 1,
            ours_omitted: &[(20 * LEN, 20)],
            ours: &[(65 * LEN, 65)],
            ..exchange(&doc)
        };
        let server = ex.side(&ids, true);
        assert_eq!((server.bytes, server.messages), (80 * LEN, 80));
        let spec = udp_spec()
            .direction(Direction::Reverse)
            .duration_ns(3_000_000_000)
            .omit_ns(1_000_000_000);
        let ours = SideReport {
            role: Some(Role::Receiver),
            bytes: 65 * LEN,
            messages: 65,
            first_ns: Some(0),
            last_ns: Some(3_000_000_000),
            ..SideReport::default()
        };
        let mut r = assemble(&spec, &ours, &server);
        ex.settle(&mut r, Direction::Reverse, &[], &ids);
        let a = r.end.after_omit.expect("after_omit");
        assert_eq!((a.sent_bytes, a.sent_messages), (Some(50 * LEN), Some(50)));
        assert_eq!(
            (a.received_messages, a.received_duration_s),
            (Some(45), Some(2.0))
        );
        assert_eq!(a.lost, Some(Some(5)));
    }
}
