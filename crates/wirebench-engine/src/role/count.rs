//! A role's counters: running totals, the per-interval records closed at fixed boundaries
//! of the side's clock, and the per-millisecond send bins.

use std::sync::atomic::Ordering;
use std::sync::mpsc::Sender;

use wirebench_proto::results::IntervalRecord;
use wirebench_proto::spec::MAX_INTERVALS;
use wirebench_stats::TimeHistogram;

use super::RoleParams;
use crate::Shared;

/// Figures of one reporting interval beyond bytes and messages: UDP receivers' loss, jitter
/// and delays, request/response clients' round trips.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct IntervalUdp {
    /// Datagrams missing so far (a running total).
    pub lost: u64,
    /// RFC 3550 jitter now, ns.
    pub jitter_ns: Option<f64>,
    /// Median one-way delay of the interval's datagrams, ns.
    pub delay_p50_ns: Option<i64>,
    /// 99th percentile of the interval's one-way delays, ns.
    pub delay_p99_ns: Option<i64>,
}

/// A side's running totals, as an interval closes.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Snapshot {
    pub(super) bytes: u64,
    pub(super) messages: u64,
    pub(super) udp: Option<IntervalUdp>,
    /// TCP senders: (segments retransmitted so far, congestion window in bytes).
    pub(super) tcp: Option<(u64, u64)>,
    /// QUIC senders: the connection's window, round-trip time and losses so far.
    pub(super) quic: Option<QuicWindow>,
}

/// A QUIC connection's state as an interval closes.
#[derive(Debug, Clone, Copy)]
pub(super) struct QuicWindow {
    pub(super) cwnd_bytes: u64,
    pub(super) rtt_us: u64,
    /// Packets declared lost so far.
    pub(super) lost_packets: u64,
}

impl QuicWindow {
    /// The connection's figures now (read under its lock, once per interval).
    pub(super) fn of(conn: &crate::quic::QuicConn) -> Self {
        let i = conn.info();
        Self {
            cwnd_bytes: i.cwnd_bytes,
            rtt_us: i.rtt_us,
            lost_packets: i.lost_packets,
        }
    }
}

impl Snapshot {
    pub(super) fn of(count: &Count) -> Self {
        Self {
            bytes: count.bytes,
            messages: count.messages,
            udp: None,
            tcp: None,
            quic: None,
        }
    }

    /// As [`Snapshot::of_tcp`] for whatever stream a TCP role runs over: the kernel's
    /// TCP_INFO, or a QUIC connection's figures (read under its lock, once per interval).
    pub(super) fn of_stream<S: super::user::Stream + ?Sized>(count: &Count, s: &S) -> Self {
        match s.quic() {
            Some(q) => Self {
                quic: Some(QuicWindow::of(q.connection())),
                ..Self::of(count)
            },
            None => Self::of_tcp(count, s.kernel()),
        }
    }

    /// As [`Snapshot::of`], with a TCP sender's TCP_INFO: one system call per interval, as
    /// the interval closes (never per message).
    pub(super) fn of_tcp(count: &Count, sock: Option<&std::net::TcpStream>) -> Self {
        Self {
            tcp: sock.and_then(crate::sys::tcp_info).map(|i| {
                (
                    i.retransmits,
                    i.snd_cwnd_segments.saturating_mul(i.snd_mss_bytes),
                )
            }),
            ..Self::of(count)
        }
    }
}

/// Closes intervals at fixed boundaries of the side's clock.
pub(super) struct Recorder {
    interval_ns: u64,
    next_ns: u64,
    last: (u64, u64, u64),
    /// Segments retransmitted when the last interval closed (TCP senders).
    last_retransmits: u64,
    /// Packets declared lost when the last interval closed (QUIC senders).
    last_lost_packets: u64,
    /// Kept records, allocated once at their bound (`TestSpec::interval_records`, which the
    /// server's memory estimate counts): later ones go out live but are not kept.
    records: Vec<IntervalRecord>,
    keep: usize,
    /// Where the last closed interval ended, ns (kept or not).
    closed_ns: u64,
    stream: u32,
    tx: Option<Sender<(u32, IntervalRecord)>>,
}

impl Recorder {
    pub(super) fn of(p: &RoleParams) -> Self {
        let keep = usize::try_from(p.spec.interval_records()).unwrap_or(MAX_INTERVALS as usize);
        Self {
            interval_ns: p.spec.interval_ns,
            next_ns: p.spec.interval_ns,
            last: (0, 0, 0),
            last_retransmits: 0,
            last_lost_packets: 0,
            records: Vec::with_capacity(keep),
            keep,
            closed_ns: 0,
            stream: p.stream,
            tx: p.intervals.clone(),
        }
    }

    /// Closes every interval that ended by `now_ns`, with the totals `snap` gives then (it is
    /// called only when an interval closes). A UDP `lost` is a running total that may go
    /// down (a late arrival fills a gap); an interval's loss is its increase, floored at 0.
    #[inline]
    pub(super) fn tick(&mut self, now_ns: u64, mut snap: impl FnMut() -> Snapshot) {
        while now_ns >= self.next_ns {
            let end = self.next_ns;
            self.close(end, snap());
            self.next_ns += self.interval_ns;
        }
    }

    fn close(&mut self, end_ns: u64, snap: Snapshot) {
        let start_ns = self.closed_ns;
        self.closed_ns = end_ns;
        let udp = snap.udp.unwrap_or_default();
        let rec = IntervalRecord {
            start_ns,
            end_ns,
            bytes: snap.bytes - self.last.0,
            messages: snap.messages - self.last.1,
            lost: udp.lost.saturating_sub(self.last.2),
            jitter_ns: udp.jitter_ns,
            delay_p50_ns: udp.delay_p50_ns,
            delay_p99_ns: udp.delay_p99_ns,
            retransmits: snap
                .tcp
                .map(|(r, _)| r.saturating_sub(self.last_retransmits)),
            cwnd_bytes: snap.tcp.map(|(_, c)| c).or(snap.quic.map(|q| q.cwnd_bytes)),
            rtt_us: snap.quic.map(|q| q.rtt_us),
            lost_packets: snap
                .quic
                .map(|q| q.lost_packets.saturating_sub(self.last_lost_packets)),
        };
        if let Some(q) = snap.quic {
            self.last_lost_packets = q.lost_packets;
        }
        if let Some((r, _)) = snap.tcp {
            self.last_retransmits = r;
        }
        self.last = (snap.bytes, snap.messages, udp.lost.max(self.last.2));
        if self.records.len() < self.keep {
            self.records.push(rec);
        }
        if let Some(tx) = &self.tx {
            let _ = tx.send((self.stream, rec));
        }
    }

    /// Closes the last, partial interval.
    pub(super) fn finish(
        mut self,
        now_ns: u64,
        mut snap: impl FnMut() -> Snapshot,
    ) -> Vec<IntervalRecord> {
        self.tick(now_ns, &mut snap);
        if now_ns > self.closed_ns {
            self.close(now_ns, snap());
        }
        self.records
    }
}

/// Bytes sent in each millisecond, folded into a distribution as each millisecond ends: how
/// evenly a sender spread its data (a paced sender should show little spread). Milliseconds
/// without a send between the first and the last count as 0; the last, partial one is left
/// out.
pub(super) struct MsBins {
    bin: Option<u64>,
    bytes: u64,
    hist: TimeHistogram,
}

impl MsBins {
    const NS: u64 = 1_000_000;

    pub(super) fn new() -> Self {
        Self {
            bin: None,
            bytes: 0,
            hist: TimeHistogram::new(),
        }
    }

    /// Counts `bytes` sent at `now_ns`.
    #[inline]
    pub(super) fn add(&mut self, now_ns: u64, bytes: u64) {
        let bin = now_ns / Self::NS;
        match self.bin {
            Some(cur) if cur != bin => {
                self.hist
                    .record(i64::try_from(self.bytes).unwrap_or(i64::MAX));
                self.hist.record_n(0, bin.saturating_sub(cur + 1));
                self.bin = Some(bin);
                self.bytes = 0;
            }
            Some(_) => {}
            None => self.bin = Some(bin),
        }
        self.bytes += bytes;
    }

    pub(super) fn finish(self) -> Option<wirebench_stats::TimeSummary> {
        self.hist.summary()
    }
}

/// Running totals of a role.
#[derive(Debug, Default)]
pub struct Count {
    /// Payload bytes.
    pub bytes: u64,
    /// Messages.
    pub messages: u64,
    /// First message, ns since the side started.
    pub first_ns: Option<u64>,
    /// Last message, ns since the side started.
    pub last_ns: Option<u64>,
}

impl Count {
    /// Counts one message of `len` bytes at `now_ns`.
    #[inline]
    pub fn add(&mut self, len: u64, now_ns: u64) {
        self.add_many(1, len, now_ns);
    }

    /// Counts `messages` messages of `bytes` bytes in all at `now_ns`.
    #[inline]
    pub fn add_many(&mut self, messages: u64, bytes: u64, now_ns: u64) {
        self.bytes += bytes;
        self.messages += messages;
        self.first_ns.get_or_insert(now_ns);
        self.last_ns = Some(now_ns);
    }

    /// Publishes the totals for the live progress display: two relaxed stores, no lock.
    #[inline]
    pub(super) fn publish(&self, sh: &Shared) {
        sh.bytes.store(self.bytes, Ordering::Relaxed);
        sh.messages.store(self.messages, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ms_bins_count_every_millisecond_between_the_first_and_the_last() {
        let mut b = MsBins::new();
        b.add(5_100_000, 100); // ms 5
        b.add(5_900_000, 100);
        b.add(6_000_000, 300); // ms 6
        b.add(9_500_000, 50); // ms 9: ms 7 and 8 sent nothing; ms 9 is partial
        let s = b.finish().expect("whole milliseconds");
        assert_eq!(s.count, 4); // 5, 6, 7, 8
        assert_eq!((s.min_ns, s.max_ns), (0, 300));
        assert_eq!(s.mean_ns, 125.0);
        assert_eq!(MsBins::new().finish(), None);
    }
}
