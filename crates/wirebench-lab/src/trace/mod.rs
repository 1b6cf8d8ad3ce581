//! Trace-driven links, as Mahimahi's `mm-link` replays them: a file of delivery
//! opportunities (one line each: a time in ms from the trace's start), looped, each letting
//! [`BYTES_PER_OPPORTUNITY`] bytes leave the queue.
//!
//! The rule is Mahimahi's own (github.com/ravinet/mahimahi, commit ae477d4,
//! `src/frontend/link_queue.cc` and `link_queue.hh`), followed exactly:
//!
//! - **Bytes, not packets.** `PACKET_SIZE = 1504; /* default max TUN payload size */`. In
//!   `LinkQueue::rationalize`, each opportunity starts with `bytes_left_in_this_delivery =
//!   PACKET_SIZE` and takes bytes from the packet in transit, then from the next ones in the
//!   queue (`amount_to_send = min( bytes_left_in_this_delivery, packet_in_transit_bytes_left_
//!   )`), until the opportunity or the queue is empty. So a small packet does not use a
//!   whole opportunity: the packets behind it share what it left, and a packet that does not
//!   fit in what is left finishes in the next opportunity. A packet leaves (`record_departure(
//!   this_delivery_time, ...)`) at the opportunity that carries its last byte.
//! - **Only packets already waiting share an opportunity.** `read_packet` calls
//!   `rationalize( now )` before it enqueues, so an opportunity before a packet's arrival is
//!   spent (used by others or lost) before that packet can use it. Here: an opportunity's
//!   leftover bytes go to the next packet only if that packet was ready by the opportunity's
//!   time ([`TraceLink::next_start`]; an opportunity at `m` ms is at the start of that ms, as
//!   on Mahimahi's whole-ms clock, and a packet ready at that very instant is in time).
//! - **Unused opportunities are lost.** `rationalize` burns every opportunity up to `now`
//!   (`use_a_delivery_opportunity`) whether or not a packet is waiting; the leftover bytes of
//!   one the queue could not fill are dropped with it (`break` out of the byte loop).
//! - **Looping.** On wrap-around `base_timestamp_ += schedule_.back()`: the period is the last
//!   line's time, and the next pass starts there, so a first line of 0 and the last line of
//!   the previous pass are at the same instant. A trace whose last line is 0 is refused
//!   ("trace must last for a nonzero amount of time"), as are times that go back ("timestamps
//!   must be monotonically nondecreasing") and empty lines ("invalid empty line").
//! - **What a packet's size is.** The TUN device is opened `IFF_TUN` without `IFF_NO_PI`
//!   (`src/util/netdevice.cc`), so each packet Mahimahi reads carries the 4-byte `tun_pi`
//!   header before the IP packet: a 1500-byte IP packet is 1504 bytes, exactly one
//!   opportunity. The lab charges `IP length + overhead` bytes per packet, and a direction
//!   with a trace defaults its overhead to [`TUN_HEADER_BYTES`] so that the same packets fill
//!   the same opportunities as under `mm-link`.
//!
//! Where the lab goes past `mm-link`: a packet larger than an opportunity (Mahimahi stops with
//! "packet size is greater than maximum") spans as many opportunities as its bytes need, by
//! the same byte-counting rule; times are in ns, an opportunity at `m` ms being at exactly
//! `m` × 10⁶ ns after the lab's start.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use wirebench_proto::link_log::LinkInterval;

use times::{Times, TimesBuilder};

pub mod file;
mod times;

/// Bytes one opportunity lets leave: Mahimahi's `PACKET_SIZE` (a 1500-byte MTU and the
/// 4-byte TUN header).
pub const BYTES_PER_OPPORTUNITY: u64 = 1504;

/// The bytes Mahimahi counts in each packet beyond its IP length (the TUN device's
/// `tun_pi` header): a trace-driven direction's default overhead.
pub const TUN_HEADER_BYTES: u32 = 4;

/// The largest trace file read: 64 MiB (Mahimahi's longest published trace is 3.4 MB).
pub const MAX_TRACE_BYTES: u64 = 64 << 20;

/// The latest time a line may give, ms (about 49 days: no trace is longer).
pub const MAX_TRACE_MS: u64 = u32::MAX as u64;

const NS_PER_MS: u64 = 1_000_000;

/// A trace that cannot be used; each message is one line naming the file or the line.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    /// The file could not be opened or read, is not a regular file, or is too large.
    #[error(transparent)]
    Read(Box<wirebench_report::input::InputError>),
    /// A problem in a file, which the message is prefixed with.
    #[error("{}: {source}", .path.display())]
    InFile {
        /// The file.
        path: PathBuf,
        /// The problem.
        source: Box<TraceError>,
    },
    /// Not UTF-8 text.
    #[error("not a text file: a Mahimahi trace has one time in ms per line")]
    NotText,
    /// A line that is not a whole number of milliseconds.
    #[error(
        "line {line}: {text:?} is not a time in ms: each line of a Mahimahi trace is one \
         delivery opportunity, a whole number of ms from the trace's start"
    )]
    NotANumber {
        /// The line, from 1.
        line: usize,
        /// The line as written (cut to 40 characters).
        text: String,
    },
    /// An empty line, which Mahimahi also refuses.
    #[error("line {line}: empty line: remove it (each line is one delivery opportunity)")]
    EmptyLine {
        /// The line, from 1.
        line: usize,
    },
    /// A time before the line above.
    #[error("line {line}: {ms} ms is before the line above ({before} ms): times never go back")]
    Decreasing {
        /// The line, from 1.
        line: usize,
        /// Its time.
        ms: u64,
        /// The time of the line above.
        before: u64,
    },
    /// A time past [`MAX_TRACE_MS`].
    #[error("line {line}: {ms} ms is past the longest trace ({MAX_TRACE_MS} ms)")]
    TooLong {
        /// The line, from 1.
        line: usize,
        /// Its time.
        ms: u64,
    },
    /// No line at all.
    #[error("no delivery opportunities: a trace has one line per opportunity (e.g. `1`)")]
    Empty,
    /// Every line is 0: the trace would loop without time passing.
    #[error(
        "the trace lasts 0 ms (its last line is 0): it loops after its last line, which \
         must be later than 0 (a file holding `1` is one packet per ms)"
    )]
    ZeroPeriod,
}

/// A Mahimahi trace: the delivery opportunities of one period, each a millisecond offset.
/// Cloning shares the opportunities (a file is loaded once however many links replay it:
/// [`Trace::load`]); `{:?}` shows their count, not each of them. It crosses a process
/// boundary (a testbed's holder) as its file, which the other side reads again
/// ([`file`]).
#[derive(Clone)]
pub struct Trace {
    inner: Arc<Inner>,
}

struct Inner {
    /// The opportunities' times in one period, ms, in order (repeats: several in that ms).
    times: Times,
    /// The last line's time: the trace loops after it.
    period_ms: u64,
    /// The file it was read from (absolute), if it was.
    file: Option<PathBuf>,
}

impl PartialEq for Trace {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
            || (self.inner.period_ms == other.inner.period_ms
                && self.inner.times == other.inner.times)
    }
}

/// Reads a trace line by line, as `mm-link` does, checking each line as it comes.
#[derive(Default)]
struct Parser {
    times: TimesBuilder,
    before: u64,
    line: usize,
}

impl Parser {
    /// The next line (without its line end).
    fn line(&mut self, line: &str) -> Result<(), TraceError> {
        self.line += 1;
        let line_no = self.line;
        let t = line.trim();
        if t.is_empty() {
            return Err(TraceError::EmptyLine { line: line_no });
        }
        let v = if t.bytes().all(|b| b.is_ascii_digit()) {
            // All digits: only too many of them fails, and that is past the longest.
            t.parse::<u64>().unwrap_or(u64::MAX)
        } else {
            return Err(TraceError::NotANumber {
                line: line_no,
                text: t.chars().take(40).collect(),
            });
        };
        let Ok(ms) = u32::try_from(v) else {
            return Err(TraceError::TooLong {
                line: line_no,
                ms: v,
            });
        };
        if v < self.before {
            return Err(TraceError::Decreasing {
                line: line_no,
                ms: v,
                before: self.before,
            });
        }
        self.before = v;
        self.times.push(ms);
        Ok(())
    }

    /// The trace, once every line is in.
    fn finish(self, file: Option<PathBuf>) -> Result<Trace, TraceError> {
        if self.line == 0 {
            return Err(TraceError::Empty);
        }
        if self.before == 0 {
            return Err(TraceError::ZeroPeriod);
        }
        Ok(Trace {
            inner: Arc::new(Inner {
                times: self.times.finish(),
                period_ms: self.before,
                file,
            }),
        })
    }
}

impl Trace {
    /// Parses a trace's text, as `mm-link` reads it: one whole number of ms per line, never
    /// decreasing, the last above 0. Surrounding spaces and a `\r` are allowed.
    ///
    /// # Errors
    ///
    /// The first bad line, by number; or a trace that is empty or lasts 0 ms.
    pub fn parse(text: &str) -> Result<Trace, TraceError> {
        let mut p = Parser::default();
        for line in text.lines() {
            p.line(line)?;
        }
        p.finish(None)
    }

    /// The file it was read from, absolute; `None` for a trace parsed from text.
    pub fn file(&self) -> Option<&Path> {
        self.inner.file.as_deref()
    }

    /// The heap its opportunities take, bytes (shared by every clone).
    pub fn heap_bytes(&self) -> usize {
        self.inner.times.heap_bytes()
    }

    /// The trace's period, ms: the last line's time.
    pub fn period_ms(&self) -> u64 {
        self.inner.period_ms
    }

    /// Opportunities in one period.
    pub fn len(&self) -> u64 {
        self.inner.times.len() as u64
    }

    /// Always false: a trace has at least one opportunity.
    pub fn is_empty(&self) -> bool {
        self.inner.times.len() == 0
    }

    /// Opportunities in [start_ns, end_ns) of the looping trace (for capacity per interval).
    pub fn opportunities_in(&self, start_ns: u64, end_ns: u64) -> u64 {
        if end_ns <= start_ns {
            return 0;
        }
        self.before(end_ns) - self.before(start_ns)
    }

    /// Mean capacity, bits/s (opportunities × bytes per opportunity × 8 / period).
    pub fn mean_bps(&self) -> f64 {
        self.len() as f64 * BYTES_PER_OPPORTUNITY as f64 * 8.0 / (self.period_ms() as f64 / 1e3)
    }

    /// The longest the looping trace takes to offer `n` opportunities, from any moment on
    /// (its slowest stretch of `n`), ns: from just after one opportunity to the `n`th after
    /// it. One pass over a period.
    pub fn slowest_ns(&self, n: u64) -> u64 {
        if n == 0 {
            return 0;
        }
        (0..self.len())
            .map(|i| self.at_ns(i.saturating_add(n)) - self.at_ns(i))
            .max()
            .unwrap_or(0)
    }

    /// Opportunities of the looping trace strictly before `t_ns`: the index of the first at
    /// or after it.
    fn before(&self, t_ns: u64) -> u64 {
        // Opportunity at m ms is before t_ns when m < ⌈t_ns / 1 ms⌉.
        let c = t_ns.div_ceil(NS_PER_MS);
        let period_ms = self.period_ms();
        let (q, r) = (c / period_ms, c % period_ms);
        // Pass k holds times k·P + m: the passes before q − 1 fall wholly before c; pass
        // q − 1 all but its lines at P when r = 0; pass q the lines before r.
        let below = |y: u64| self.inner.times.below(y) as u64;
        if q == 0 {
            below(r)
        } else {
            (q - 1)
                .saturating_mul(self.len())
                .saturating_add(below(period_ms + r))
                .saturating_add(below(r))
        }
    }

    /// The time of the opportunity of index `n` in the looping trace, ns.
    fn at_ns(&self, n: u64) -> u64 {
        let (pass, i) = (n / self.len(), n % self.len());
        let m = usize::try_from(i)
            .ok()
            .and_then(|i| self.inner.times.get(i))
            .map_or(0, u64::from);
        pass.saturating_mul(self.period_ms())
            .saturating_add(m)
            .saturating_mul(NS_PER_MS)
    }
}

impl std::fmt::Debug for Trace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Trace")
            .field("opportunities", &self.len())
            .field("period_ms", &self.period_ms())
            .finish()
    }
}

/// The serializer of a trace-driven link: when the bytes of each packet leave.
///
/// Called in time order, per packet: `next_start(max(arrival, when the previous packet
/// left))`, then `send` at the time it gave. Each call is O(1) while the link is busy
/// (O(log n) in the trace's length after an idle gap) and allocates nothing.
#[derive(Debug, Clone)]
pub struct TraceLink {
    trace: Trace,
    /// The index (in the looping trace) of the next opportunity not yet begun.
    next: u64,
    /// The opportunity being used: its time, ns...
    cur_ns: u64,
    /// ... and the bytes it has left (0: none is being used).
    cur_left: u64,
}

impl TraceLink {
    /// Time 0 is the lab's start, at the trace's start.
    pub fn new(trace: Trace) -> Self {
        Self {
            trace,
            next: 0,
            cur_ns: 0,
            cur_left: 0,
        }
    }

    /// The trace it replays.
    pub fn trace(&self) -> &Trace {
        &self.trace
    }

    /// The earliest time ≥ `ready_ns` at which a packet ready then (at the head of the queue)
    /// may begin to leave: the current opportunity's unused bytes if that opportunity is not
    /// before `ready_ns` (Mahimahi lets a packet waiting at an opportunity use what the one
    /// before it left), else the next opportunity at or after `ready_ns`. Opportunities
    /// before it are gone, unused.
    pub fn next_start(&mut self, ready_ns: u64) -> u64 {
        if self.cur_left > 0 && self.cur_ns >= ready_ns {
            return self.cur_ns;
        }
        // A few steps first: while busy, the next opportunity is nearly always the one.
        let mut n = self.next;
        let mut found = false;
        for _ in 0..4 {
            if self.trace.at_ns(n) >= ready_ns {
                found = true;
                break;
            }
            n += 1;
        }
        if !found {
            n = n.max(self.trace.before(ready_ns));
        }
        self.cur_ns = self.trace.at_ns(n);
        self.cur_left = BYTES_PER_OPPORTUNITY;
        self.next = n + 1;
        self.cur_ns
    }

    /// Sends `bytes` starting at `start_ns` (a time `next_start` returned); returns the time
    /// its last byte leaves (the opportunity that carries it), consuming what it used.
    pub fn send(&mut self, start_ns: u64, bytes: u64) -> u64 {
        if self.cur_left == 0 || self.cur_ns < start_ns {
            // Not begun through next_start (or the opportunity was used up): begin now.
            self.next_start(start_ns);
        }
        if bytes <= self.cur_left {
            self.cur_left -= bytes;
            return self.cur_ns;
        }
        // The rest fills whole opportunities, the last of them partly.
        let rest = bytes - self.cur_left;
        let more = rest.div_ceil(BYTES_PER_OPPORTUNITY);
        let last = self.next + more - 1;
        self.cur_ns = self.trace.at_ns(last);
        self.cur_left = more * BYTES_PER_OPPORTUNITY - rest;
        self.next = last + 1;
        self.cur_ns
    }
}

/// What a direction could carry: for the link log's capacity column.
#[derive(Debug, Clone, PartialEq)]
pub enum Capacity {
    /// No limit (logged as 0).
    Unlimited,
    /// A fixed rate, bits/s of wire bytes (IP length and overhead).
    Rate(u64),
    /// A trace's opportunities.
    Trace(Trace),
}

impl Capacity {
    /// A direction's capacity from its configuration: its trace if it has one, else its
    /// rate (0: no limit).
    pub fn of(rate_bps: u64, trace: Option<&Trace>) -> Self {
        match (trace, rate_bps) {
            (Some(t), _) => Capacity::Trace(t.clone()),
            (None, 0) => Capacity::Unlimited,
            (None, bps) => Capacity::Rate(bps),
        }
    }

    /// Bytes the direction could have carried in [start_ns, end_ns): the trace's
    /// opportunities × [`BYTES_PER_OPPORTUNITY`], rate × time / 8, or 0 for no limit.
    pub fn bytes_in(&self, start_ns: u64, end_ns: u64) -> u64 {
        match self {
            Capacity::Unlimited => 0,
            Capacity::Rate(bps) => {
                let ns = u128::from(end_ns.saturating_sub(start_ns));
                u64::try_from(ns * u128::from(*bps) / 8_000_000_000).unwrap_or(u64::MAX)
            }
            Capacity::Trace(t) => t
                .opportunities_in(start_ns, end_ns)
                .saturating_mul(BYTES_PER_OPPORTUNITY),
        }
    }
}

/// Fills each interval's `capacity_bytes` of a direction's link log (interval `k` is
/// [k·interval_ns, (k+1)·interval_ns) since the lab's start) from `capacity(start_ns,
/// end_ns)`; run once when the log is built, not on the data path.
pub fn fill_capacity(
    bins: &mut [LinkInterval],
    interval_ns: u64,
    capacity: &dyn Fn(u64, u64) -> u64,
) {
    for (k, bin) in bins.iter_mut().enumerate() {
        let start = (k as u64).saturating_mul(interval_ns);
        bin.capacity_bytes = capacity(start, start.saturating_add(interval_ns));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = NS_PER_MS;
    const S: u64 = 1_000 * MS;

    #[test]
    fn the_slowest_stretch_is_the_longest_wait_for_n_opportunities() {
        // Three at the start of a 100 ms period, then one at its end (and the loop).
        let t = Trace::parse("1\n2\n3\n100\n").unwrap();
        assert_eq!(t.slowest_ns(0), 0);
        // From just after the one at 3 ms to the one at 100 ms.
        assert_eq!(t.slowest_ns(1), 97 * MS);
        // From just after 1 ms: 2, 3 and 100; from just after 3 ms: 100, 101 and 102.
        assert_eq!(t.slowest_ns(3), 99 * MS);
        // Over periods: the 9 after the one at 3 ms are 100, 101, 102, 103, 200, 201, 202,
        // 203 and 300.
        assert_eq!(t.slowest_ns(9), 297 * MS);
        let constant = Trace::parse(&constant_text()).unwrap();
        assert_eq!(constant.slowest_ns(1000), S);
    }

    /// One opportunity per ms: 12 Mbit/s of 1500-byte packets.
    fn constant_text() -> String {
        "1\n".to_owned()
    }

    /// 1 s of 4 opportunities per ms (48 Mbit/s), then 1 s of one per 2 ms (6 Mbit/s).
    fn alternating_text() -> String {
        let mut s = String::new();
        for ms in 1..=1000 {
            for _ in 0..4 {
                s.push_str(&format!("{ms}\n"));
            }
        }
        for ms in (1002..=2000).step_by(2) {
            s.push_str(&format!("{ms}\n"));
        }
        s
    }

    fn trace(text: &str) -> Trace {
        Trace::parse(text).expect("a trace")
    }

    /// Offers a packet of `bytes` at each of `arrivals` (in order) through `link`, as the
    /// lab does, and returns when each left.
    fn through(link: &mut TraceLink, arrivals: &[u64], bytes: u64) -> Vec<u64> {
        let mut left = 0;
        arrivals
            .iter()
            .map(|&a| {
                let start = link.next_start(a.max(left));
                assert!(start >= a.max(left));
                left = link.send(start, bytes);
                left
            })
            .collect()
    }

    /// A saturating sender: always a packet waiting. Returns the packets out by `until_ns`.
    fn saturate(link: &mut TraceLink, bytes: u64, until_ns: u64) -> u64 {
        let (mut left, mut n) = (0, 0);
        loop {
            let start = link.next_start(left);
            let out = link.send(start, bytes);
            if out >= until_ns {
                return n;
            }
            left = out;
            n += 1;
        }
    }

    #[test]
    fn the_committed_examples_are_the_ones_made_here() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios/traces");
        let read = |f: &str| std::fs::read_to_string(dir.join(f)).expect(f);
        assert_eq!(read("const-12mbit"), constant_text());
        assert_eq!(read("alternating-48-6"), alternating_text());
        let c = Trace::load(&dir.join("const-12mbit")).expect("loads");
        assert_eq!((c.len(), c.period_ms()), (1, 1));
        let a = Trace::load(&dir.join("alternating-48-6")).expect("loads");
        assert_eq!((a.len(), a.period_ms()), (4500, 2000));
        // 4500 × 1504 bytes in 2 s.
        assert!(
            (a.mean_bps() - 27_072_000.0).abs() < 1.0,
            "{}",
            a.mean_bps()
        );
    }

    #[test]
    fn the_constant_trace_carries_one_1500_byte_packet_per_ms() {
        let mut link = TraceLink::new(trace(&constant_text()));
        // 1500 IP bytes + the 4-byte TUN header: one opportunity each.
        let wire = 1500 + u64::from(TUN_HEADER_BYTES);
        let arrivals = vec![0; 1000];
        let left = through(&mut link, &arrivals, wire);
        let want: Vec<u64> = (1..=1000).map(|k| k * MS).collect();
        assert_eq!(left, want);
        // 11.776 Mbit/s of 1472-byte UDP payload.
        let payload_bps = 1000.0 * 1472.0 * 8.0 / 1.0;
        assert!((payload_bps - 11.776e6_f64).abs() < 1.0);
    }

    #[test]
    fn the_alternating_trace_delivers_its_mean_over_10_s() {
        let t = trace(&alternating_text());
        let mean = t.mean_bps();
        let mut link = TraceLink::new(t);
        let n = saturate(&mut link, BYTES_PER_OPPORTUNITY, 10 * S);
        let got = n as f64 * BYTES_PER_OPPORTUNITY as f64 * 8.0 / 10.0;
        assert!((got / mean - 1.0).abs() < 0.001, "{got} of {mean}");
        // Of 1500-byte IP packets: 26.496 Mbit/s of 1472-byte payload.
        let mut link = TraceLink::new(trace(&alternating_text()));
        let n = saturate(&mut link, 1504, 10 * S) as f64;
        let payload = n * 1472.0 * 8.0 / 10.0;
        assert!((payload / 26.496e6 - 1.0).abs() < 0.001, "{payload}");
    }

    #[test]
    fn small_packets_share_an_opportunity_as_mahimahi_does() {
        let mut link = TraceLink::new(trace("1\n2\n3\n"));
        let left = through(&mut link, &[0, 0, 0, 0], 504);
        // 504 + 504 = 1008 at 1 ms, 496 left; the third takes 496 there and 8 at 2 ms;
        // the fourth fits in what 2 ms has left.
        assert_eq!(left, [MS, MS, 2 * MS, 2 * MS]);
        // 100-byte packets: 15 per opportunity (1500 bytes), the 16th spills over.
        let mut link = TraceLink::new(trace("1\n2\n"));
        let left = through(&mut link, &[0; 16], 100);
        assert!(left[..15].iter().all(|&t| t == MS));
        assert_eq!(left[15], 2 * MS);
    }

    #[test]
    fn a_packet_arriving_after_an_opportunity_does_not_use_its_leftover() {
        // The first packet uses 104 of the opportunity at 1 ms; the second arrives at
        // 1.5 ms, after it: Mahimahi spent the opportunity before enqueuing it.
        let mut link = TraceLink::new(trace("1\n2\n"));
        let left = through(&mut link, &[0, 3 * MS / 2], 104);
        assert_eq!(left, [MS, 2 * MS]);
        // Waiting by the opportunity's time, it shares it.
        for second in [MS / 2, MS] {
            let mut link = TraceLink::new(trace("1\n2\n"));
            let left = through(&mut link, &[0, second], 104);
            assert_eq!(left, [MS, MS]);
        }
    }

    #[test]
    fn several_opportunities_in_one_ms_leave_together() {
        let mut link = TraceLink::new(trace("5\n5\n5\n7\n"));
        let left = through(&mut link, &[0; 5], 1504);
        assert_eq!(left, [5 * MS, 5 * MS, 5 * MS, 7 * MS, 12 * MS]);
    }

    #[test]
    fn a_large_packet_spans_opportunities() {
        // A 64 KiB GSO frame's packet of 4000 bytes: 1504 + 1504 + 992.
        let mut link = TraceLink::new(trace("1\n2\n3\n4\n"));
        let left = through(&mut link, &[0, 0], 4000);
        // The second takes the 512 bytes 3 ms left, then 1504 at 4, then 1504 at 5 (the next
        // pass's 1), then 480 at 6.
        assert_eq!(left, [3 * MS, 6 * MS]);
    }

    #[test]
    fn the_trace_loops_from_its_last_line() {
        // Period 10 ms; a first line of 0 falls on the previous pass's last line.
        let t = trace("0\n4\n10\n");
        assert_eq!(t.period_ms(), 10);
        let mut link = TraceLink::new(t.clone());
        let left = through(&mut link, &[0; 7], 1504);
        assert_eq!(
            left,
            [0, 4 * MS, 10 * MS, 10 * MS, 14 * MS, 20 * MS, 20 * MS]
        );
        assert_eq!(t.opportunities_in(0, 10 * MS), 2);
        assert_eq!(t.opportunities_in(0, 10 * MS + 1), 4);
        assert_eq!(t.opportunities_in(10 * MS, 20 * MS), 3);
        assert_eq!(t.opportunities_in(0, 1000 * MS), 299);
        // Counted the slow way over many passes and odd intervals.
        let mut n = 0;
        for k in 0..50 {
            let (a, b) = (k * 7_300_000, (k + 1) * 7_300_000);
            let slow = (0..2000)
                .map(|i| t.at_ns(i))
                .filter(|&x| x >= a && x < b)
                .count() as u64;
            assert_eq!(t.opportunities_in(a, b), slow, "[{a}, {b})");
            n += slow;
        }
        assert_eq!(t.opportunities_in(0, 50 * 7_300_000), n);
    }

    #[test]
    fn an_idle_gap_wastes_its_opportunities() {
        let mut link = TraceLink::new(trace(&constant_text()));
        // One packet, then nothing for a second: the next gets the first opportunity after
        // it arrives, not the 1000 that went by.
        let left = through(&mut link, &[0, S + MS / 2, S + MS / 2], 1504);
        assert_eq!(left, [MS, S + MS, S + 2 * MS]);
        // A long gap in a long trace: straight to the right pass and line.
        let mut link = TraceLink::new(trace(&alternating_text()));
        let t = 3_600 * S + 1500 * MS + 1;
        let start = link.next_start(t);
        assert_eq!(start, 3_600 * S + 1502 * MS);
        // Leftover bytes of an opportunity the queue could not fill are lost too.
        let mut link = TraceLink::new(trace(&constant_text()));
        let left = through(&mut link, &[0, 5 * MS / 2], 100);
        assert_eq!(left, [MS, 3 * MS]);
    }

    /// Mahimahi's `LinkQueue` (`read_packet`, `rationalize`, `use_a_delivery_opportunity`)
    /// transcribed line for line, on its whole-ms clock with an unlimited queue: each
    /// packet's departure, ms.
    fn mm_link(schedule: &[u64], packets: &[(u64, u64)]) -> Vec<u64> {
        let period = *schedule.last().expect("a schedule");
        let (mut next, mut base) = (0usize, 0u64);
        let mut queue = std::collections::VecDeque::new();
        let mut in_transit: Option<(usize, u64)> = None;
        let mut out = vec![0; packets.len()];
        // Returns how many packets left.
        let mut rationalize = |now: u64, queue: &mut std::collections::VecDeque<(usize, u64)>| {
            let mut departed = 0;
            while schedule[next] + base <= now {
                let this_delivery_time = schedule[next] + base;
                let mut bytes_left = BYTES_PER_OPPORTUNITY;
                next = (next + 1) % schedule.len();
                if next == 0 {
                    base += period;
                }
                while bytes_left > 0 {
                    let (id, left) = match in_transit.take() {
                        Some(p) => p,
                        None => match queue.pop_front() {
                            Some(p) => p,
                            None => break,
                        },
                    };
                    let send = bytes_left.min(left);
                    bytes_left -= send;
                    if left - send == 0 {
                        out[id] = this_delivery_time;
                        departed += 1;
                    } else {
                        in_transit = Some((id, left - send));
                    }
                }
            }
            departed
        };
        let mut departed = 0;
        for (id, &(arrival_ms, bytes)) in packets.iter().enumerate() {
            departed += rationalize(arrival_ms, &mut queue);
            queue.push_back((id, bytes));
        }
        // Then time goes on until the last has left.
        let mut now = packets.last().map_or(0, |p| p.0);
        while departed < packets.len() {
            now += 1;
            departed += rationalize(now, &mut queue);
        }
        out
    }

    #[test]
    fn departures_are_mm_links_own() {
        let lte = std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../scenarios/traces/TMobile-LTE-driving-30s.down"),
        )
        .expect("the excerpt");
        let mut rng = 0x1234_5678_9ABC_DEF0_u64;
        let mut next = move || crate::splitmix::next(&mut rng);
        for text in [
            lte,
            alternating_text(),
            "0\n4\n10\n".to_owned(),
            constant_text(),
        ] {
            let t = trace(&text);
            let schedule: Vec<u64> = text.lines().map(|l| l.trim().parse().unwrap()).collect();
            // Bursts and gaps, packets of 40 to 1504 bytes (mm-link takes no larger).
            let (mut ms, mut packets) = (0u64, Vec::new());
            for _ in 0..20_000 {
                ms += match next() % 10 {
                    0 => next() % 200,
                    1..=3 => next() % 3,
                    _ => 0,
                };
                packets.push((ms, 40 + next() % 1465));
            }
            let want = mm_link(&schedule, &packets);
            // Here, each arrives at some instant within its ms (mm-link's clock shows the
            // ms), and leaves as the lab asks the link.
            let mut link = TraceLink::new(t);
            let mut left = 0;
            for (i, &(ms, bytes)) in packets.iter().enumerate() {
                let arrival = ms * MS + 1 + next() % (MS - 1);
                let start = link.next_start(arrival.max(left));
                left = link.send(start, bytes);
                assert_eq!(left, want[i] * MS, "packet {i} of {bytes} bytes at {ms} ms");
            }
        }
    }

    #[test]
    fn bad_traces_are_refused_by_line() {
        for (text, needle) in [
            ("", "no delivery opportunities"),
            ("0\n0\n", "lasts 0 ms"),
            ("1\n\n2\n", "line 2: empty line"),
            ("1\n2\nx3\n", "line 3: \"x3\" is not a time in ms"),
            ("1\n-2\n", "line 2: \"-2\" is not"),
            ("5\n4\n", "line 2: 4 ms is before the line above (5 ms)"),
            (
                "1\n99999999999999999999999\n",
                "line 2: 18446744073709551615 ms is past",
            ),
            ("1\n4294967296\n", "past the longest trace"),
        ] {
            let e = Trace::parse(text).expect_err(text).to_string();
            assert!(e.contains(needle), "{text:?}: {e}");
            assert!(!e.contains('\n'), "{e}");
        }
        // What Mahimahi takes, and a Windows line end.
        assert_eq!(trace("1\r\n 3 \n3\n").period_ms(), 3);
    }

    #[test]
    fn a_file_is_named_and_its_size_checked_first() {
        let dir = std::env::temp_dir().join(format!("wirebench-trace-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let bad = dir.join("bad.up");
        std::fs::write(&bad, "1\n2\noops\n").expect("write");
        let e = Trace::load(&bad).expect_err("bad").to_string();
        assert!(e.contains("bad.up: line 3:"), "{e}");
        let e = Trace::load(&dir.join("missing.up")).expect_err("missing");
        assert!(e.to_string().contains("missing.up"), "{e}");
        // Past the cap: refused from its size, unread (a sparse file costs no disk).
        let big = dir.join("big.up");
        let f = std::fs::File::create(&big).expect("create");
        f.set_len(MAX_TRACE_BYTES + 1).expect("set_len");
        let e = Trace::load(&big).expect_err("big").to_string();
        assert!(e.contains("too large"), "{e}");
        let e = Trace::load(&dir).expect_err("a directory").to_string();
        assert!(e.contains("not a regular file"), "{e}");
        std::fs::remove_dir_all(&dir).expect("clean up");
    }

    #[test]
    fn the_lte_excerpt_parses_and_loops() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../scenarios/traces/TMobile-LTE-driving-30s.down");
        let t = Trace::load(&path).expect("the excerpt");
        assert_eq!((t.len(), t.period_ms()), (21_200, 29_998));
        // Saturated for two passes, the link carries every opportunity (and those of the
        // third pass's first ms, which is the second's last).
        let mut link = TraceLink::new(t.clone());
        let until = 2 * 29_998 * MS + 1;
        let n = saturate(&mut link, BYTES_PER_OPPORTUNITY, until);
        assert_eq!(n, t.opportunities_in(0, until));
        let at_0 = t.opportunities_in(0, 1);
        assert_eq!(n, 2 * 21_200 + at_0);
    }

    #[test]
    fn capacity_fills_each_interval() {
        let mut bins = vec![LinkInterval::default(); 3];
        let cap = Capacity::Trace(trace(&constant_text()));
        fill_capacity(&mut bins, 100 * MS, &|a, b| cap.bytes_in(a, b));
        // [0, 100 ms) holds the opportunities at 1..=99 ms; later ones 100 each.
        let got: Vec<u64> = bins.iter().map(|b| b.capacity_bytes).collect();
        assert_eq!(got, [99 * 1504, 100 * 1504, 100 * 1504]);
        let cap = Capacity::Rate(12_000_000);
        fill_capacity(&mut bins, 100 * MS, &|a, b| cap.bytes_in(a, b));
        assert!(bins.iter().all(|b| b.capacity_bytes == 150_000));
        fill_capacity(&mut bins, 100 * MS, &|a, b| {
            Capacity::Unlimited.bytes_in(a, b)
        });
        assert!(bins.iter().all(|b| b.capacity_bytes == 0));
        let t = trace(&constant_text());
        assert_eq!(Capacity::of(5_000, Some(&t)), Capacity::Trace(t.clone()));
        assert_eq!(Capacity::of(5_000, None), Capacity::Rate(5_000));
        assert_eq!(Capacity::of(0, None), Capacity::Unlimited);
        // A long trace prints as its size.
        let long = trace(&alternating_text());
        assert_eq!(
            format!("{long:?}"),
            "Trace { opportunities: 4500, period_ms: 2000 }"
        );
    }
}
