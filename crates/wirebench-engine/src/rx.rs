//! What a UDP streaming receiver does with each datagram: sequence accounting, one-way
//! delay, jitter, arrival gaps, UDPmon's in-order prefix and the packet log. Sans-IO: bytes
//! and a time in, counters out, so the tests below feed it crafted datagrams and GRO buffers.
//!
//! Datagrams that are not the test's (spoofed from the peer's address by someone who cannot
//! read the traffic) are told apart by the stream's secret token (see
//! [`wirebench_proto::header`]) and counted as `foreign`, never in the loss, duplicate,
//! reorder, byte, delay or jitter figures: one add and one compare per datagram.

use wirebench_proto::header::{
    one_way_delay_ns, DataHeader, SeqToken, HEADER_LEN, PLAUSIBLE_AHEAD, UDP_HELLO_LEN,
};
use wirebench_proto::packet_log::{Arrived, Record};
use wirebench_proto::results::{NsBucket, UdpCounts};
use wirebench_stats::{Arrival, Jitter, LostRun, SeqTracker, TimeHistogram};

use crate::file::FileSink;
use crate::packet_log_writer::{LogError, LogSink};
use crate::role::count::{Count, IntervalUdp};
use crate::Hists;

/// What tells a stream's own datagrams from others that reach its socket.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StreamKey {
    /// The stream's token: sequence numbers on the wire are keyed with it.
    pub token: SeqToken,
    /// Which datagrams shorter than a header are the test's.
    pub short: ShortDatagrams,
}

/// Which datagrams shorter than the header a stream's receiver counts: a spoofed short
/// datagram carries no token to check, so only those the test itself sends count.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ShortDatagrams {
    /// A headerless test (`-l` under the header's size): every datagram is short.
    #[default]
    All,
    /// Every datagram of the test carries a header: a shorter one is not the test's.
    None,
    /// A `bytes` test whose last message is shorter than the header: one datagram of
    /// exactly that length.
    Tail(usize),
}

/// A UDP streaming receiver's accounting.
pub struct UdpRx {
    /// Unique datagrams and bytes counted.
    pub count: Count,
    key: StreamKey,
    foreign: u64,
    /// The short last message of a `bytes` test was counted.
    tail_seen: bool,
    tracker: SeqTracker,
    jitter: Jitter,
    delay: TimeHistogram,
    interval_delay: TimeHistogram,
    /// Datagrams of equal one-way delay in a row (a GRO buffer of one send: one stamp, one
    /// arrival time), not yet in `jitter` and `interval_delay`: taken in one go when the
    /// delay changes or the interval closes, not one update and one record each.
    delay_run: (i64, u64),
    gaps: TimeHistogram,
    /// Arrivals at the same time as the one before (a batch read at once), added to `gaps`
    /// in one go rather than one record each.
    zero_gaps: u64,
    last_arrival_ns: Option<u64>,
    prefix_start_ns: Option<u64>,
    prefix_end_ns: Option<u64>,
    duplicates: u64,
    /// This side's Unix time at its start, ns: arrival times are `epoch + now`.
    epoch_unix_ns: u64,
    hello: Option<[u8; UDP_HELLO_LEN]>,
    log: Option<LogSink>,
    /// `--file`: where datagrams' file pieces go, each at `seq * chunk`.
    file: Option<(FileSink, u64, u64)>,
}

impl UdpRx {
    /// A receiver whose side started at Unix time `epoch_unix_ns`, ignoring copies of the
    /// stream's `hello`, counting only datagrams that `key` says are the stream's, writing a
    /// packet log to `log` if given.
    pub fn new(
        epoch_unix_ns: u64,
        hello: Option<[u8; UDP_HELLO_LEN]>,
        key: StreamKey,
        log: Option<LogSink>,
    ) -> Self {
        Self {
            count: Count::default(),
            key,
            foreign: 0,
            tail_seen: false,
            tracker: SeqTracker::new(),
            jitter: Jitter::new(),
            delay: TimeHistogram::new(),
            interval_delay: TimeHistogram::new(),
            delay_run: (0, 0),
            gaps: TimeHistogram::new(),
            zero_gaps: 0,
            last_arrival_ns: None,
            prefix_start_ns: None,
            prefix_end_ns: None,
            duplicates: 0,
            epoch_unix_ns,
            hello,
            log,
            file: None,
        }
    }

    /// The packet log's bytes so far (0 without one): a server counts what it sends.
    #[inline]
    pub fn log_bytes(&self) -> u64 {
        self.log.as_ref().map_or(0, LogSink::bytes)
    }

    /// Writes each datagram's file piece (after its header) to `sink`, at `seq * chunk`, and
    /// records the byte ranges of lost datagrams of a `file_bytes` file.
    pub fn save_file(&mut self, sink: Option<FileSink>, chunk: u64, file_bytes: u64) {
        self.file = sink.map(|s| (s, chunk, file_bytes));
    }

    /// Accounts for a buffer of datagrams of `segment` bytes each, the last one possibly
    /// shorter, all received at `now_ns`: what UDP GRO hands over in one read. A plain
    /// datagram is a buffer of one segment.
    #[inline]
    pub fn on_buffer(&mut self, buf: &[u8], segment: usize, now_ns: u64) {
        for d in buf.chunks(segment.max(1)) {
            self.on_datagram(d, now_ns);
        }
    }

    /// Accounts for one datagram received at `now_ns` (ns since the side started).
    #[inline]
    pub fn on_datagram(&mut self, d: &[u8], now_ns: u64) {
        if self.hello.is_some_and(|h| d == h) {
            return;
        }
        if d.len() < HEADER_LEN {
            let ours = match self.key.short {
                ShortDatagrams::All => true,
                ShortDatagrams::None => false,
                ShortDatagrams::Tail(len) => {
                    let first = d.len() == len && !self.tail_seen;
                    self.tail_seen |= first;
                    first
                }
            };
            if !ours {
                self.foreign += 1;
                return;
            }
            // Headerless tests, and the short last message of a `bytes` test: counted by
            // bytes and messages only.
            self.count.add(d.len() as u64, now_ns);
            self.gap(now_ns);
            return;
        }
        let Ok(h) = DataHeader::read(d, self.key.token) else {
            return;
        };
        let highest = self.tracker.highest().unwrap_or(0);
        if h.seq > highest.saturating_add(PLAUSIBLE_AHEAD) {
            // Not keyed with this stream's token: a blind guess decodes to a random number,
            // almost surely this far out. Counting it would settle billions as lost.
            self.foreign += 1;
            return;
        }
        let arrival_unix_ns = self.epoch_unix_ns.wrapping_add(now_ns);
        let delay_ns = one_way_delay_ns(arrival_unix_ns, h.send_ns);
        let prefix = self.tracker.prefix();
        let (log, file) = (&mut self.log, &mut self.file);
        let arrival = self.tracker.record_with(h.seq, &mut |run| {
            lost_run(log, file, run);
        });
        let kind = match arrival {
            Arrival::Duplicate => {
                self.duplicates += 1;
                Arrived::Duplicate
            }
            Arrival::TooOld => Arrived::TooOld,
            Arrival::InOrder | Arrival::Gap { .. } | Arrival::Late { .. } => {
                self.count.add(d.len() as u64, now_ns);
                if let Some((sink, chunk, _)) = self.file.as_mut() {
                    sink.write_at(h.seq.saturating_mul(*chunk), &d[HEADER_LEN..]);
                }
                // Jitter and the interval's distribution (it joins the test's at the interval's
                // end) take a run of equal delays in one step.
                if self.delay_run.0 == delay_ns {
                    self.delay_run.1 += 1;
                } else {
                    self.flush_delays();
                    self.delay_run = (delay_ns, 1);
                }
                self.gap(now_ns);
                if self.tracker.prefix() != prefix {
                    if prefix == 0 {
                        self.prefix_start_ns = Some(now_ns);
                    }
                    self.prefix_end_ns = Some(now_ns);
                }
                Arrived::Received
            }
        };
        if let Some(log) = self.log.as_mut() {
            log.push(&Record::Datagram {
                kind,
                seq: h.seq,
                size: d.len() as u32,
                send_unix_ns: arrival_unix_ns.wrapping_sub(delay_ns as u64),
                arrival_unix_ns,
            });
        }
    }

    /// Takes the run of equal delays held back into jitter and the interval's distribution.
    fn flush_delays(&mut self) {
        match self.delay_run {
            (_, 0) => {}
            (d, 1) => {
                self.jitter.on_transit(d);
                self.interval_delay.record(d);
            }
            (d, n) => {
                self.jitter.on_transit_run(d, n);
                self.interval_delay.record_n(d, n);
            }
        }
        self.delay_run.1 = 0;
    }

    #[inline]
    fn gap(&mut self, now_ns: u64) {
        match self.last_arrival_ns.replace(now_ns) {
            Some(last) if last == now_ns => self.zero_gaps += 1,
            Some(last) => self
                .gaps
                .record(i64::try_from(now_ns.saturating_sub(last)).unwrap_or(i64::MAX)),
            None => {}
        }
    }

    /// Closes an interval: its figures, and a fresh delay distribution for the next one.
    pub fn close_interval(&mut self) -> IntervalUdp {
        self.flush_delays();
        let out = IntervalUdp {
            lost: self.tracker.lost_so_far(),
            jitter_ns: (self.jitter.samples() > 0).then(|| self.jitter.jitter_ns()),
            delay_p50_ns: self.interval_delay.quantile(0.5),
            delay_p99_ns: self.interval_delay.quantile(0.99),
        };
        self.delay.add(&self.interval_delay);
        self.interval_delay.reset();
        out
    }

    /// Settles the loss of every sequence number below `sent` (the sender's count of
    /// datagrams with a header; `None` when it never reported: then only the holes below the
    /// highest seen), finishes the packet log and returns what was counted.
    pub fn finish(
        mut self,
        sent: Option<u64>,
        same_clock: bool,
    ) -> (Count, UdpCounts, Option<LogError>, Hists, Option<FileSink>) {
        let sent =
            sent.unwrap_or_else(|| self.tracker.highest().map_or(0, |h| h.saturating_add(1)));
        let (log, file) = (&mut self.log, &mut self.file);
        self.tracker.finish_with(sent, &mut |run| {
            lost_run(log, file, run);
        });
        let log_error = self.log.take().and_then(|l| l.finish().err());
        self.flush_delays();
        self.delay.add(&self.interval_delay);
        self.gaps.record_n(0, self.zero_gaps);
        let counts = UdpCounts {
            sequenced: true,
            duplicates: self.duplicates,
            reordered: self.tracker.reordered(),
            too_old: self.tracker.too_old(),
            foreign: self.foreign,
            jitter_ns: self.jitter.jitter_ns(),
            max_reorder_extent: self.tracker.max_reorder_extent(),
            same_clock,
            loss_runs: self.tracker.loss_runs().summary(),
            in_order_prefix: self.tracker.prefix(),
            prefix_start_ns: self.prefix_start_ns,
            prefix_end_ns: self.prefix_end_ns,
            delay: self.delay.summary(),
            interarrival: self.gaps.summary(),
            interarrival_buckets: ns_buckets(&self.gaps),
            // The host's count, not this stream's: the side adds it once (net/roles.rs).
            checksum_errors: None,
        };
        let hists = Hists {
            delay: Some(self.delay),
            gaps: Some(self.gaps),
            latency: None,
            loss_runs: Some(self.tracker.loss_runs().clone()),
            probes: None,
        };
        (
            self.count,
            counts,
            log_error,
            hists,
            self.file.map(|(sink, _, _)| sink),
        )
    }
}

/// A settled loss run goes to the packet log and to the file's missing ranges.
fn lost_run(log: &mut Option<LogSink>, file: &mut Option<(FileSink, u64, u64)>, run: LostRun) {
    if let Some(log) = log.as_mut() {
        log.push(&Record::Lost {
            first: run.first,
            count: run.count,
        });
    }
    if let Some((sink, chunk, bytes)) = file.as_mut() {
        sink.lost(run, *chunk, *bytes);
    }
}

/// A histogram's power-of-two buckets as the results carry them.
pub fn ns_buckets(h: &TimeHistogram) -> Vec<NsBucket> {
    h.log2_buckets()
        .into_iter()
        .map(|(low_ns, high_ns, count)| NsBucket {
            low_ns,
            high_ns,
            count,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const EPOCH: u64 = 1_700_000_000_000_000_000;
    const COOKIE: u64 = 0x5eed_0f7e_57c0_0c11;

    /// Stream 0's key in the test of [`COOKIE`], whose datagrams may be short.
    fn key() -> StreamKey {
        StreamKey {
            token: SeqToken::of_stream(COOKIE, 0),
            short: ShortDatagrams::All,
        }
    }

    /// A datagram of `len` bytes with sequence number `seq`, sent `delay_ns` before `now_ns`.
    fn dgram(seq: u64, len: usize, now_ns: u64, delay_ns: u64) -> Vec<u8> {
        keyed(key().token, seq, len, now_ns, delay_ns)
    }

    /// As [`dgram`], its sequence number keyed with `token`.
    fn keyed(token: SeqToken, seq: u64, len: usize, now_ns: u64, delay_ns: u64) -> Vec<u8> {
        let mut d = vec![0xabu8; len];
        DataHeader {
            seq,
            stream: 0,
            send_ns: EPOCH + now_ns - delay_ns,
        }
        .write(token, &mut d)
        .expect("len >= 16");
        d
    }

    /// 1,000 datagrams 10 µs apart, delays varying, with `extra` arriving after number 500;
    /// what the receiver counted.
    fn a_test_with(rx_key: StreamKey, extra: &[Vec<u8>]) -> (Count, UdpCounts) {
        let mut rx = UdpRx::new(EPOCH, None, rx_key, None);
        for s in 0..1000u64 {
            let now = 1_000_000 + s * 10_000;
            rx.on_datagram(&dgram(s, 100, now, 50_000 + (s % 7) * 1_000), now);
            if s == 500 {
                for d in extra {
                    rx.on_datagram(d, now + 1);
                }
            }
        }
        let (count, c, _, _, _) = rx.finish(Some(1000), true);
        (count, c)
    }

    #[test]
    fn datagrams_not_keyed_with_the_streams_token_are_foreign_not_lost() {
        let (clean_count, clean) = a_test_with(key(), &[]);
        assert_eq!((clean_count.messages, clean.loss_runs.lost), (1000, 0));
        let now = 6_000_000;
        let forged = [
            // The attack: sequence number 2^62, written as an old peer would.
            keyed(SeqToken::default(), 1 << 62, 100, now, 0),
            // Guesses of the next numbers, without the token.
            keyed(SeqToken::default(), 501, 100, now, 0),
            keyed(SeqToken::default(), 0, 100, now, 0),
            // Another stream's token: in `--bidir` the other direction's, in `-P` a
            // sibling's.
            keyed(SeqToken::of_stream(COOKIE, 1), 501, 100, now, 0),
            // The right token, but further ahead than a real sender can be.
            dgram(500 + PLAUSIBLE_AHEAD + 1, 100, now, 0),
            // A short datagram where every one of the test carries a header.
            vec![0u8; 8],
        ];
        let only_headers = StreamKey {
            short: ShortDatagrams::None,
            ..key()
        };
        let (count, attacked) = a_test_with(only_headers, &forged);
        assert_eq!(attacked.foreign, forged.len() as u64);
        // Nothing else moved: loss, duplicates, reordering, bytes, delay, jitter, gaps.
        assert_eq!(
            (count.messages, count.bytes),
            (clean_count.messages, clean_count.bytes)
        );
        assert_eq!(
            UdpCounts {
                foreign: 0,
                ..attacked
            },
            clean
        );
    }

    #[test]
    fn the_plausible_window_follows_the_highest_number_counted() {
        let mut rx = UdpRx::new(EPOCH, None, key(), None);
        // A real gap of 2^31 (the path lost them) is loss, not foreign...
        rx.on_datagram(&dgram(0, 100, 10, 0), 10);
        rx.on_datagram(&dgram(1 << 31, 100, 20, 0), 20);
        // ...and the window now reaches 2^32 past it.
        rx.on_datagram(&dgram((1 << 31) + PLAUSIBLE_AHEAD, 100, 30, 0), 30);
        rx.on_datagram(&dgram((1 << 31) + 2 * PLAUSIBLE_AHEAD + 1, 100, 40, 0), 40);
        assert_eq!(rx.foreign, 1);
        assert_eq!(rx.count.messages, 3);
    }

    #[test]
    fn a_headerless_test_still_counts_short_datagrams() {
        let mut rx = UdpRx::new(EPOCH, None, key(), None);
        rx.on_datagram(&[7u8; 8], 10);
        let (count, c, _, _, _) = rx.finish(None, true);
        assert_eq!((count.messages, c.foreign), (1, 0));
    }

    #[test]
    fn a_bytes_tests_short_tail_counts_once_and_other_short_datagrams_are_foreign() {
        let tail = StreamKey {
            short: ShortDatagrams::Tail(5),
            ..key()
        };
        let mut rx = UdpRx::new(EPOCH, None, tail, None);
        rx.on_datagram(&dgram(0, 100, 1_000_000, 50_000), 1_000_000);
        // Spoofed short datagrams: of another length, and the tail's length again.
        rx.on_datagram(&[7u8; 8], 1_000_001);
        rx.on_datagram(&[7u8; 5], 1_000_002);
        rx.on_datagram(&[7u8; 5], 1_000_003);
        rx.on_datagram(&[7u8; 1], 1_000_004);
        let (count, c, _, _, _) = rx.finish(None, true);
        assert_eq!((count.messages, count.bytes, c.foreign), (2, 105, 3));
    }

    #[test]
    fn a_gro_buffer_counts_as_its_datagrams() {
        let mut rx = UdpRx::new(EPOCH, None, key(), None);
        // 64 datagrams of 1000 bytes coalesced, then a short last one (600 bytes),
        // with 10 and 20 missing and 5 repeated.
        let seqs: Vec<u64> = (0..64u64)
            .filter(|s| *s != 10 && *s != 20)
            .chain([5, 64, 65])
            .collect();
        let mut buf = Vec::new();
        for (i, &s) in seqs.iter().enumerate() {
            let len = if i + 1 == seqs.len() { 600 } else { 1000 };
            buf.extend(dgram(s, len, 1_000_000, 50_000));
        }
        rx.on_buffer(&buf, 1000, 1_000_000);
        assert_eq!(rx.count.messages, 64);
        assert_eq!(rx.count.bytes, 63 * 1000 + 600);
        assert_eq!(rx.close_interval().lost, 2);
        let (count, c, err, _, _) = rx.finish(Some(68), true);
        assert!(err.is_none());
        assert_eq!(count.messages, 64);
        assert_eq!(c.duplicates, 1);
        assert_eq!(c.loss_runs.lost, 4); // 10, 20 and the tail 66, 67
        assert_eq!(c.loss_runs.runs, 3);
        assert_eq!(c.in_order_prefix, 10);
        let d = c.delay.expect("delays");
        assert_eq!((d.min_ns, d.max_ns, d.count), (50_000, 50_000, 64));
    }

    #[test]
    fn runs_of_equal_delays_count_as_every_datagram_recorded_alone() {
        // Delays in runs (a GRO buffer shares one stamp and one arrival time) and alone,
        // across an interval's end: the interval's and the test's distributions are those
        // of one record per datagram.
        let delays = [
            5_000u64, 5_000, 5_000, 7_000, 7_000, 5_000, 9_000, 9_000, 9_000, 9_000,
        ];
        let mut rx = UdpRx::new(EPOCH, None, key(), None);
        let mut want = TimeHistogram::new();
        let mut first = TimeHistogram::new();
        let mut jitter = Jitter::new();
        for (seq, &d) in delays.iter().enumerate() {
            rx.on_datagram(&dgram(seq as u64, 100, 1_000_000, d), 1_000_000);
            want.record(d as i64);
            jitter.on_transit(d as i64);
            if seq < 4 {
                first.record(d as i64);
            }
            if seq == 3 {
                let i = rx.close_interval();
                assert_eq!(i.delay_p50_ns, first.quantile(0.5));
                assert_eq!(i.delay_p99_ns, first.quantile(0.99));
            }
        }
        let (_, c, _, hists, _) = rx.finish(Some(10), true);
        assert_eq!(c.delay, want.summary());
        assert!(
            (c.jitter_ns - jitter.jitter_ns()).abs() < 1e-6,
            "{}",
            c.jitter_ns
        );
        let got = hists.delay.expect("delays");
        assert_eq!(got.log2_buckets(), want.log2_buckets());
    }

    #[test]
    fn delay_jitter_prefix_and_gaps_follow_the_arrivals() {
        let mut rx = UdpRx::new(EPOCH, Some(*b"WBUH0123456789ab"), key(), None);
        rx.on_datagram(b"WBUH0123456789ab", 5); // a late hello copy is not data
                                                // 0..100 every 10 µs, delay 100 µs, except seq 50 arrives 300 µs late
        for s in 0..100u64 {
            let now = 1_000_000 + s * 10_000;
            let extra = if s == 50 { 300_000 } else { 0 };
            if s == 50 {
                continue;
            }
            rx.on_datagram(&dgram(s, 100, now + extra, 100_000), now + extra);
        }
        rx.on_datagram(&dgram(50, 100, 2_300_000, 100_000 + 800_000), 2_300_000);
        let iv = rx.close_interval();
        assert_eq!(iv.lost, 0);
        // HDR precision: within 0.1 %
        let p50 = iv.delay_p50_ns.expect("delays");
        assert!((100_000..=100_100).contains(&p50), "{p50}");
        assert!(iv.jitter_ns.expect("jitter") > 0.0);
        assert_eq!(rx.close_interval().delay_p50_ns, None);
        let (count, c, _, _, _) = rx.finish(Some(100), false);
        assert_eq!(count.messages, 100);
        assert_eq!((c.reordered, c.max_reorder_extent), (1, 49));
        assert_eq!(c.in_order_prefix, 100);
        assert_eq!(c.prefix_start_ns, Some(1_000_000));
        assert_eq!(c.prefix_end_ns, Some(2_300_000));
        let d = c.delay.expect("delays");
        assert_eq!((d.min_ns, d.max_ns), (100_000, 900_000));
        let g = c.interarrival.expect("gaps");
        assert_eq!(g.count, 99);
        assert_eq!(g.min_ns, 10_000);
        assert_eq!(
            c.interarrival_buckets.iter().map(|b| b.count).sum::<u64>(),
            99
        );
        assert!(!c.same_clock);
    }

    #[test]
    fn garbage_and_short_datagrams_never_panic() {
        let mut rx = UdpRx::new(0, None, StreamKey::default(), None);
        rx.on_datagram(&[], 1);
        rx.on_datagram(&[1, 2, 3], 2);
        rx.on_datagram(&[0xff; 16], 3); // seq u64::MAX, send time in the future
        rx.on_datagram(&[0x00; 16], 3); // seq 0, send time 0
        rx.on_buffer(&[0u8; 100], 0, 4);
        let (count, c, _, _, _) = rx.finish(None, true);
        // the empty and 3-byte datagrams, the header of seq 0, a hundred 1-byte segments;
        // seq u64::MAX is far past anything seen
        assert_eq!(count.messages, 1 + 1 + 1 + 100);
        assert_eq!(c.foreign, 1);
        assert_eq!(c.in_order_prefix, 1);
    }
}
