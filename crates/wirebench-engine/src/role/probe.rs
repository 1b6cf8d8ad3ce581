//! Open-loop UDP probes, as irtt sends them: a request leaves on a fixed schedule whatever
//! the answers, several may be in flight, each answer is matched to its request by the
//! sequence number the server echoes, an answer that comes after later requests left counts
//! with its real delay, and a request unanswered after the timeout is lost (not waited for:
//! the schedule goes on). A closed-loop prober (rr.rs's `UdpRr`) sends the next request only
//! when the answer came, so on a path whose queue holds 400 ms it samples ~3 times a second,
//! mostly while the queue fills; this one samples at its rate all along.
//!
//! [`Book`] is the matching, sans-IO (times passed in): a ring of the requests in flight,
//! indexed by sequence number and sized from timeout / spacing, allocated once; and the
//! record of every request (when it left, its round trip or its loss), preallocated for the
//! test's length. Nothing is allocated per probe. The peer is not trusted: an answer whose
//! number was never sent, or was sent too long ago to tell, changes no count but its own;
//! a second answer to one request counts once.
//!
//! The sequence number on the wire is keyed with the stream's secret token
//! ([`SeqToken`](wirebench_proto::header::SeqToken)), as UDP data's are, so an answer made
//! up without seeing the requests decodes to a number never sent: counted `foreign`
//! (`end.udp.foreign`), never a round trip. The server's side is rr.rs's UDP server, which
//! answers only requests numbered as the client can have numbered them (`rr_key.rs`).

use std::io::ErrorKind;
use std::net::UdpSocket;
use std::time::Instant;

use wirebench_proto::results::{SideReport, UdpCounts};
use wirebench_stats::TimeHistogram;

use super::blocking::{is_timeout, send_datagram};
use super::count::{Count, Recorder};
use super::early_end::{early_stop, RoleError};
use super::rr::rr_snapshot;
use super::sender::next_len;
use super::{payload, report, RoleParams, POLL};
use crate::sys::{recv_nowait, wait_readable};
use crate::{Hists, Shared};

/// The most requests the ring follows at once: a 60 s timeout at 1 ms spacing (the spec's
/// bounds) needs 60,002.
const MAX_IN_FLIGHT: u64 = 65_536;

/// The most requests recorded one by one (24 bytes each, 24 MiB; rrul's default run of
/// 30 s at 10 a second records 302 in 7 KiB): a probe every 10 ms for 2.9 hours. Later ones
/// are counted, not recorded.
pub const MAX_RECORDS: u64 = 1 << 20;

/// What became of one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProbeFate {
    /// No answer yet, and its timeout has not passed (only at a stop: at the end every
    /// request is settled).
    Pending,
    /// Answered after this many ns.
    Answered(u64),
    /// Unanswered within the timeout.
    Lost,
}

/// One request as its sender saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProbeRecord {
    /// When it left, ns since the side started ([`ProbeLog::start`]).
    pub sent_ns: u64,
    /// Its fate.
    pub fate: ProbeFate,
}

/// What an open-loop prober counted, besides its records.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProbeTally {
    /// Requests sent.
    pub sent: u64,
    /// Requests answered within the timeout (each once).
    pub answered: u64,
    /// Requests unanswered within the timeout.
    pub lost: u64,
    /// Answers that came after the answer to a later request (irtt's "late").
    pub late: u64,
    /// Second and later answers to one request: not counted again.
    pub duplicates: u64,
    /// Answers that came after their request's timeout: it stays lost.
    pub after_timeout: u64,
    /// Answers whose number was never sent (or that are too short to carry one), or was
    /// sent too long ago to tell: ignored.
    pub unknown: u64,
    /// Of `unknown`, the answers that cannot be the server's: too short to carry a number,
    /// or numbered past every request sent (a field not keyed with the stream's token).
    pub foreign: u64,
    /// Requests beyond [`MAX_RECORDS`]: counted, not recorded.
    pub unrecorded: u64,
}

/// An open-loop prober's requests, handed to the client's [`Watch`](crate::Watch) as its
/// role ends.
#[derive(Debug, Clone, PartialEq)]
pub struct ProbeLog {
    /// The side's start: `sent_ns` counts from it.
    pub start: Instant,
    /// Every request, in the order sent (the first [`MAX_RECORDS`]).
    pub records: Vec<ProbeRecord>,
    /// The counts.
    pub tally: ProbeTally,
}

/// What an answer was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// The first answer to a request in flight: its round trip, ns.
    Counted(u64),
    /// A request already answered.
    Duplicate,
    /// A request whose timeout had passed: it stays lost.
    AfterTimeout,
    /// A request sent so long ago that the book forgot it.
    Unknown,
    /// A number never sent: not the server's answer (see [`ProbeTally::foreign`]).
    Foreign,
}

/// A slot of the ring: the request it follows and whether it is still in flight.
#[derive(Debug, Clone, Copy, Default)]
struct Slot {
    seq: u64,
    sent_ns: u64,
    /// An answer or a loss settled it.
    settled: bool,
    answered: bool,
    /// The slot has held a request.
    used: bool,
}

/// The requests in flight and the record of all of them (see the module doc). Times are ns
/// on one clock, passed in.
#[derive(Debug)]
pub(crate) struct Book {
    slots: Vec<Slot>,
    timeout_ns: u64,
    next_seq: u64,
    /// Every request below it is settled.
    oldest: u64,
    highest_answered: Option<u64>,
    records: Vec<ProbeRecord>,
    tally: ProbeTally,
}

impl Book {
    /// A book for requests every `interval_ns` that time out after `timeout_ns`, room for
    /// `expected` records (at most [`MAX_RECORDS`]).
    pub(crate) fn new(interval_ns: u64, timeout_ns: u64, expected: u64) -> Self {
        let in_flight = (timeout_ns / interval_ns.max(1)).saturating_add(2);
        let slots = in_flight.clamp(2, MAX_IN_FLIGHT) as usize;
        Self {
            slots: vec![Slot::default(); slots],
            timeout_ns: timeout_ns.max(1),
            next_seq: 0,
            oldest: 0,
            highest_answered: None,
            records: Vec::with_capacity(expected.min(MAX_RECORDS) as usize),
            tally: ProbeTally::default(),
        }
    }

    fn slot(&mut self, seq: u64) -> &mut Slot {
        let n = self.slots.len() as u64;
        &mut self.slots[(seq % n) as usize]
    }

    /// Records a request sent at `now_ns`; returns its sequence number.
    pub(crate) fn send(&mut self, now_ns: u64) -> u64 {
        let seq = self.next_seq;
        let old = *self.slot(seq);
        if old.used && !old.settled {
            // Only with a ring smaller than the timeout needs (capped): the oldest request
            // gives way, lost.
            self.settle_lost(old.seq);
        }
        *self.slot(seq) = Slot {
            seq,
            sent_ns: now_ns,
            settled: false,
            answered: false,
            used: true,
        };
        if (self.records.len() as u64) < MAX_RECORDS {
            self.records.push(ProbeRecord {
                sent_ns: now_ns,
                fate: ProbeFate::Pending,
            });
        } else {
            self.tally.unrecorded += 1;
        }
        self.tally.sent += 1;
        self.next_seq += 1;
        seq
    }

    fn record(&mut self, seq: u64) -> Option<&mut ProbeRecord> {
        usize::try_from(seq)
            .ok()
            .and_then(|i| self.records.get_mut(i))
    }

    fn settle_lost(&mut self, seq: u64) {
        let slot = self.slot(seq);
        if slot.seq != seq || slot.settled {
            return;
        }
        slot.settled = true;
        self.tally.lost += 1;
        if let Some(r) = self.record(seq) {
            r.fate = ProbeFate::Lost;
        }
    }

    /// An answer carrying `seq` arrived at `now_ns`.
    pub(crate) fn answer(&mut self, seq: u64, now_ns: u64) -> Answer {
        if seq >= self.next_seq {
            // Never sent: made up, or not the test's.
            self.foreign();
            return Answer::Foreign;
        }
        let timeout_ns = self.timeout_ns;
        let slot = *self.slot(seq);
        if !slot.used || slot.seq != seq {
            // Sent so long ago that its slot holds a later request: settled and forgotten.
            self.tally.unknown += 1;
            return Answer::Unknown;
        }
        if slot.answered {
            self.tally.duplicates += 1;
            return Answer::Duplicate;
        }
        let rtt_ns = now_ns.saturating_sub(slot.sent_ns);
        if slot.settled || rtt_ns > timeout_ns {
            self.settle_lost(seq);
            self.tally.after_timeout += 1;
            return Answer::AfterTimeout;
        }
        let s = self.slot(seq);
        s.settled = true;
        s.answered = true;
        self.tally.answered += 1;
        if self.highest_answered.is_some_and(|h| h > seq) {
            self.tally.late += 1;
        }
        self.highest_answered = self.highest_answered.max(Some(seq));
        if let Some(r) = self.record(seq) {
            r.fate = ProbeFate::Answered(rtt_ns);
        }
        Answer::Counted(rtt_ns)
    }

    /// An answer that cannot be the server's arrived: counted, and nothing else.
    pub(crate) fn foreign(&mut self) {
        self.tally.unknown += 1;
        self.tally.foreign += 1;
    }

    /// Settles as lost every request whose timeout has passed by `now_ns`.
    pub(crate) fn expire(&mut self, now_ns: u64) {
        while self.oldest < self.next_seq {
            let seq = self.oldest;
            let slot = *self.slot(seq);
            if slot.seq == seq && !slot.settled {
                if now_ns.saturating_sub(slot.sent_ns) < self.timeout_ns {
                    return;
                }
                self.settle_lost(seq);
            }
            self.oldest += 1;
        }
    }

    /// When the oldest request in flight times out (after [`Book::expire`]).
    pub(crate) fn next_expiry(&self) -> Option<u64> {
        let n = self.slots.len() as u64;
        let slot = self.slots[(self.oldest % n) as usize];
        (self.oldest < self.next_seq && slot.seq == self.oldest && !slot.settled)
            .then(|| slot.sent_ns.saturating_add(self.timeout_ns))
    }

    /// Whether a request is still in flight (after [`Book::expire`]).
    pub(crate) fn in_flight(&self) -> bool {
        self.next_expiry().is_some()
    }

    /// The counts so far.
    pub(crate) fn tally(&self) -> &ProbeTally {
        &self.tally
    }

    /// The log, the side having started at `start`.
    pub(crate) fn into_log(self, start: Instant) -> ProbeLog {
        ProbeLog {
            start,
            records: self.records,
            tally: self.tally,
        }
    }
}

/// The socket, the request being built and the buffer answers are read into.
struct Wire<'a> {
    s: &'a UdpSocket,
    request: Vec<u8>,
    answer: [u8; 64],
    local_drops: u64,
}

impl Wire<'_> {
    /// Reads every answer waiting (no wait), each matched in `book` at the clock read once
    /// per answer; the round trips go into `interval`.
    fn take_answers(
        &mut self,
        book: &mut Book,
        p: &RoleParams,
        sh: &Shared,
        interval: &mut TimeHistogram,
    ) -> Result<(), RoleError> {
        loop {
            // A longer answer is cut to the buffer: only its first 8 bytes are read.
            match recv_nowait(self.s, &mut self.answer) {
                Ok(n) if n >= 8 => {
                    let mut field = [0u8; 8];
                    field.copy_from_slice(&self.answer[..8]);
                    let seq = p.token.decode(u64::from_be_bytes(field));
                    if let Answer::Counted(rtt) = book.answer(seq, sh.now_ns()) {
                        interval.record(i64::try_from(rtt).unwrap_or(i64::MAX));
                    }
                }
                Ok(_) => book.foreign(),
                Err(e) if is_timeout(&e) => return Ok(()),
                // An ICMP port unreachable from an earlier send: the server's socket is
                // gone, which the control connection reports; the requests count lost.
                Err(e) if e.kind() == ErrorKind::ConnectionRefused => {}
                Err(e) => return Err(RoleError::Response(e)),
            }
        }
    }
}

/// Open-loop request/response over UDP, the client: a request every
/// `open_loop_interval_ns` for the test's time (a stall of more than one spacing skips the
/// requests it missed rather than send them in a burst), then a wait of at most the timeout
/// (`ack_timeout_ns`) for the answers still in flight. Between sends it waits in the
/// kernel for an answer, the next send or the oldest request's timeout, whichever comes
/// first: no busy loop. Its round trips go into the interval records and the latency
/// histogram; the requests' records go to the side's watch ([`ProbeLog`]).
pub(super) fn udp_probe_client(s: &UdpSocket, p: &RoleParams, sh: &Shared) -> SideReport {
    let spec = &p.spec;
    let every = spec.open_loop_interval_ns.unwrap_or(100_000_000).max(1);
    let expected = spec
        .duration_ns
        .map_or(MAX_RECORDS, |d| (d / every).saturating_add(2));
    let mut book = Book::new(every, spec.ack_timeout_ns, expected);
    let mut rec = Recorder::of(p);
    let mut count = Count::default();
    let (mut interval, mut total) = (TimeHistogram::new(), TimeHistogram::new());
    let _ = s.set_write_timeout(Some(POLL));
    let mut wire = Wire {
        s,
        request: payload(spec.size),
        answer: [0u8; 64],
        local_drops: 0,
    };
    let poll_ns = u64::try_from(POLL.as_nanos()).unwrap_or(u64::MAX);
    let mut next_send = sh.now_ns();
    let mut sending = true;
    let mut error = None;
    loop {
        let now = sh.now_ns();
        rec.tick(now, || {
            rr_snapshot(&count, book.tally().lost, &mut interval, &mut total)
        });
        if let Some(why) = early_stop(sh, p, now) {
            error = Some(why);
            break;
        }
        book.expire(now);
        if sending && now >= next_send {
            match next_len(spec, &count, now) {
                Some(len) => {
                    let seq = book.send(now);
                    let req = &mut wire.request[..len as usize];
                    if let Some(head) = req.get_mut(..8) {
                        head.copy_from_slice(&p.token.encode(seq).to_be_bytes());
                    }
                    if let Err(e) = send_datagram(s, req, sh, &mut wire.local_drops) {
                        error = Some(e);
                        break;
                    }
                    count.add(len, now);
                    count.publish(sh);
                    next_send = next_send.saturating_add(every);
                    if next_send <= now {
                        next_send = now.saturating_add(every);
                    }
                }
                None => sending = false,
            }
        }
        if !sending && !book.in_flight() {
            break;
        }
        let mut wake = now.saturating_add(poll_ns);
        if sending {
            wake = wake.min(next_send);
        }
        if let Some(t) = book.next_expiry() {
            wake = wake.min(t);
        }
        let readable = match wait_readable(s, wake.saturating_sub(now)) {
            Ok(r) => r,
            Err(e) => {
                error = Some(RoleError::Response(e));
                break;
            }
        };
        if readable {
            if let Err(e) = wire.take_answers(&mut book, p, sh, &mut interval) {
                error = Some(e);
                break;
            }
        }
    }
    let intervals = rec.finish(sh.now_ns(), || {
        rr_snapshot(&count, book.tally().lost, &mut interval, &mut total)
    });
    let mut rep = report(&count, intervals, error);
    rep.latency = total.summary();
    rep.timeouts = book.tally().lost;
    rep.local_drops = wire.local_drops;
    rep.udp = Some(UdpCounts {
        sequenced: true,
        foreign: book.tally().foreign,
        ..UdpCounts::default()
    });
    sh.keep_hists(Hists {
        latency: Some(total),
        probes: Some(book.into_log(sh.start)),
        ..Hists::default()
    });
    rep
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    /// Probes every 100 ms that time out after 2 s, as rrul's.
    fn book() -> Book {
        Book::new(100 * MS, 2_000 * MS, 100)
    }

    #[test]
    fn a_late_answer_after_the_next_send_counts_with_its_real_delay() {
        let mut b = book();
        let s0 = b.send(0);
        let s1 = b.send(100 * MS);
        let s2 = b.send(200 * MS);
        b.expire(250 * MS);
        // The first answer comes after two more requests left, the second overtakes it.
        assert_eq!(b.answer(s1, 300 * MS), Answer::Counted(200 * MS));
        assert_eq!(b.answer(s0, 350 * MS), Answer::Counted(350 * MS));
        assert_eq!(b.answer(s2, 400 * MS), Answer::Counted(200 * MS));
        let t = *b.tally();
        assert_eq!((t.sent, t.answered, t.lost, t.late), (3, 3, 0, 1));
        b.expire(10_000 * MS);
        assert!(!b.in_flight());
        let log = b.into_log(Instant::now());
        assert_eq!(log.records[0].fate, ProbeFate::Answered(350 * MS));
        assert_eq!(log.records[1].sent_ns, 100 * MS);
    }

    #[test]
    fn a_lost_request_is_counted_once_and_not_waited_for() {
        let mut b = book();
        let s0 = b.send(0);
        assert_eq!(b.next_expiry(), Some(2_000 * MS));
        let mut t = 100 * MS;
        // The schedule goes on while it is in flight.
        while t <= 2_000 * MS {
            let s = b.send(t);
            assert_eq!(b.answer(s, t + 20 * MS), Answer::Counted(20 * MS));
            b.expire(t + 20 * MS);
            t += 100 * MS;
        }
        assert_eq!(b.tally().lost, 1, "expired at 2 s");
        // Its answer after the timeout leaves it lost, counted once.
        assert_eq!(b.answer(s0, 2_050 * MS), Answer::AfterTimeout);
        b.expire(2_700 * MS);
        b.expire(90_000 * MS);
        let tally = *b.tally();
        assert_eq!((tally.lost, tally.after_timeout), (1, 1));
        assert_eq!(tally.answered + tally.lost, tally.sent);
        let log = b.into_log(Instant::now());
        assert_eq!(log.records[0].fate, ProbeFate::Lost);
    }

    #[test]
    fn an_answer_past_its_timeout_not_yet_expired_is_lost_too() {
        let mut b = book();
        let s0 = b.send(0);
        assert_eq!(b.answer(s0, 2_001 * MS), Answer::AfterTimeout);
        assert_eq!(b.answer(s0, 2_002 * MS), Answer::AfterTimeout);
        b.expire(5_000 * MS);
        assert_eq!(b.tally().lost, 1);
        assert_eq!(b.tally().answered, 0);
    }

    #[test]
    fn a_duplicate_answer_does_not_count_twice() {
        let mut b = book();
        let s0 = b.send(0);
        assert_eq!(b.answer(s0, 30 * MS), Answer::Counted(30 * MS));
        assert_eq!(b.answer(s0, 40 * MS), Answer::Duplicate);
        assert_eq!(b.answer(s0, 50 * MS), Answer::Duplicate);
        let t = *b.tally();
        assert_eq!((t.answered, t.duplicates, t.lost), (1, 2, 0));
        assert_eq!(
            b.into_log(Instant::now()).records[0].fate,
            ProbeFate::Answered(30 * MS)
        );
    }

    #[test]
    fn forged_answers_with_unknown_or_future_numbers_are_ignored() {
        let mut b = book();
        let s0 = b.send(0);
        for forged in [s0 + 1, 1000, u64::MAX] {
            assert_eq!(b.answer(forged, 10 * MS), Answer::Foreign);
        }
        // A number so old its slot was reused is not taken for the later request there.
        let mut t = 0;
        while b.tally().sent < 200 {
            t += 100 * MS;
            let s = b.send(t);
            b.answer(s, t + MS);
            b.expire(t + MS);
        }
        assert_eq!(b.answer(s0, t + 2 * MS), Answer::Unknown);
        let tally = *b.tally();
        assert_eq!(tally.unknown, 4);
        assert_eq!(tally.foreign, 3, "the three never sent; request 0 was");
        assert_eq!(
            tally.answered, 199,
            "every later request, and not request 0"
        );
        assert_eq!(tally.lost, 1, "request 0, once");
    }

    #[test]
    fn the_ring_and_the_records_are_sized_once() {
        let b = Book::new(100 * MS, 2_000 * MS, 300);
        assert_eq!(b.slots.len(), 22);
        assert!(b.records.capacity() >= 300);
        // The spec's extremes stay within the cap; beyond it the oldest gives way, lost.
        let b = Book::new(MS, 60_000 * MS, u64::MAX);
        assert_eq!(b.slots.len(), 60_002);
        assert_eq!(b.records.capacity() as u64, MAX_RECORDS);
        assert_eq!(
            std::mem::size_of::<ProbeRecord>(),
            24,
            "as MAX_RECORDS says"
        );
        let mut small = Book::new(MS, 10 * MS, 10);
        let mut t = 0;
        for _ in 0..12 {
            small.send(t);
            t += MS / 2;
        }
        assert_eq!(small.tally().lost, 0, "12 in flight within the timeout fit");
        for _ in 0..3 {
            small.send(t);
            t += MS / 2;
        }
        assert_eq!(small.tally().lost, 3, "the ring of 12 gave up the oldest");
    }

    #[test]
    fn the_next_wake_is_the_oldest_timeout() {
        let mut b = book();
        assert_eq!(b.next_expiry(), None);
        let s0 = b.send(0);
        b.send(100 * MS);
        b.answer(s0, 10 * MS);
        b.expire(20 * MS);
        assert_eq!(b.next_expiry(), Some(2_100 * MS));
        b.expire(2_100 * MS);
        assert!(!b.in_flight());
        assert_eq!(b.tally().lost, 1);
    }
}
