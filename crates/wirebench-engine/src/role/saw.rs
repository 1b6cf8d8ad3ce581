//! UDP stop-and-wait: the sender sends one datagram and waits for its acknowledgement,
//! sending it again after the ack timeout; the receiver acknowledges each and counts copies.
//! (TCP stop-and-wait is the TCP stream roles with a one-byte acknowledgement: see [`super::tcp`].)

use std::io::ErrorKind;
use std::net::UdpSocket;
use std::time::Duration;

use wirebench_proto::header::{self, DataHeader, ACK_LEN, HEADER_LEN};
use wirebench_proto::results::{SideReport, UdpCounts};
use wirebench_proto::spec::Mechanism;

use super::blocking::{is_timeout, send_datagram};
use super::count::{Count, Recorder, Snapshot};
use super::early_end::{early_stop, RoleError};
use super::recv_loop::{self, Flow, Receive, Until};
use super::sender::{next_step, Step};
use super::{payload, report, FilePart, RoleParams, POLL};
use crate::file::FileSink;
use crate::pace::Pacer;
use crate::Shared;

/// A stop-and-wait sender gives up after this long without an acknowledgement.
pub(super) const ACK_GIVE_UP: Duration = Duration::from_secs(10);

/// The UDP stop-and-wait sender: one datagram, then its acknowledgement (sent again after
/// each ack timeout), then the next.
pub(super) fn udp_send(
    s: UdpSocket,
    p: &RoleParams,
    file: &mut Option<FilePart>,
    sh: &Shared,
) -> SideReport {
    let spec = &p.spec;
    let mut buf = payload(spec.size);
    let mut source = file.as_mut().and_then(FilePart::source);
    let saw = spec.mechanism == Mechanism::StopAndWait;
    let _ = s.set_read_timeout(Some(Duration::from_nanos(spec.ack_timeout_ns).min(POLL)));
    let _ = s.set_write_timeout(Some(POLL));
    let ack_timeout_ns = spec.ack_timeout_ns;
    let mut pacer = Pacer::of(spec);
    let mut rec = Recorder::of(p);
    let mut count = Count::default();
    let mut retransmits = 0u64;
    let mut local_drops = 0u64;
    let error: Option<RoleError>;
    let mut ack = [0u8; 64];
    let mut seq = 0u64;
    'messages: loop {
        let len = match next_step(&mut rec, &mut pacer, sh, p, &count, &Snapshot::of) {
            Step::Send(len) => len as usize,
            Step::Again => continue,
            Step::Done(why) => {
                error = why;
                break;
            }
        };
        // A datagram too short for the header (a headerless test, or the short last message of
        // a `bytes` test) carries the low byte of its sequence number instead.
        if len < HEADER_LEN {
            buf[0] = seq as u8;
        } else {
            let h = DataHeader {
                seq,
                stream: 0,
                send_ns: sh.unix_ns(sh.now_ns()),
            };
            let _ = h.write(p.token, &mut buf[..len]);
            if let Some(src) = source.as_mut() {
                if let Err(e) = src.fill(&mut buf[HEADER_LEN..len]) {
                    error = Some(e.into());
                    break;
                }
            }
        }
        if let Err(e) = send_datagram(&s, &buf[..len], sh, &mut local_drops) {
            error = Some(e);
            break;
        }
        if saw {
            let first_sent = sh.now_ns();
            let mut sent_at = first_sent;
            loop {
                match s.recv(&mut ack) {
                    Ok(n) => {
                        // The receiver echoes the keyed field: an ack only it could write.
                        let want = if len < HEADER_LEN {
                            seq & 0xff
                        } else {
                            p.token.encode(seq)
                        };
                        if header::decode_ack(&ack[..n]) == Some(want) {
                            break;
                        }
                    }
                    Err(e) if is_timeout(&e) || e.kind() == ErrorKind::ConnectionRefused => {}
                    Err(e) => {
                        error = Some(RoleError::Ack(e));
                        break 'messages;
                    }
                }
                let now = sh.now_ns();
                rec.tick(now, || Snapshot::of(&count));
                if let Some(why) = early_stop(sh, p, now) {
                    error = Some(why);
                    break 'messages;
                }
                if now - first_sent > ACK_GIVE_UP.as_nanos() as u64 {
                    error = Some(RoleError::NoAck(ACK_GIVE_UP.as_secs()));
                    break 'messages;
                }
                if now - sent_at >= ack_timeout_ns {
                    if let Err(e) = send_datagram(&s, &buf[..len], sh, &mut local_drops) {
                        error = Some(e);
                        break 'messages;
                    }
                    retransmits += 1;
                    sent_at = now;
                }
            }
        }
        let now = sh.now_ns();
        count.add(len as u64, now);
        pacer.sent(len as u64, now);
        seq += 1;
        count.publish(sh);
    }
    let intervals = rec.finish(sh.now_ns(), || Snapshot::of(&count));
    let mut rep = report(&count, intervals, error);
    rep.retransmits = retransmits;
    rep.local_drops = local_drops;
    rep
}

/// The UDP stop-and-wait receiver's side of the receive loop.
struct SawReceive<'a> {
    s: UdpSocket,
    buf: Vec<u8>,
    count: Count,
    duplicates: u64,
    /// Messages with a header that the sender cannot have sent (see [`Verdict::Foreign`]).
    foreign: u64,
    /// The next message's sequence number.
    expected: u64,
    sink: Option<&'a mut FileSink>,
}

impl Receive for SawReceive<'_> {
    fn count(&self) -> &Count {
        &self.count
    }

    fn snapshot(&mut self) -> Snapshot {
        Snapshot::of(&self.count)
    }

    #[inline]
    fn receive(&mut self, sh: &Shared, p: &RoleParams) -> Result<Flow, RoleError> {
        let n = match self.s.recv(&mut self.buf) {
            Ok(n) => n,
            Err(e) if is_timeout(&e) || e.kind() == ErrorKind::ConnectionRefused => {
                return Ok(Flow::More)
            }
            Err(e) => return Err(RoleError::Receive(e)),
        };
        let now = sh.now_ns();
        let dgram = &self.buf[..n];
        if p.hello.is_some_and(|h| dgram == h) {
            return Ok(Flow::More);
        }
        let short = n < HEADER_LEN;
        let seq = if short {
            dgram.first().map(|&b| u64::from(b))
        } else {
            DataHeader::read(dgram, p.token).ok().map(|h| h.seq)
        };
        let Some(seq) = seq else {
            return Ok(Flow::More);
        };
        match verdict(seq, self.expected, short) {
            Verdict::Next => {
                self.count.add(n as u64, now);
                self.expected += 1;
                if let Some(sink) = self.sink.as_mut() {
                    sink.write(dgram.get(HEADER_LEN..).unwrap_or_default());
                }
            }
            // The sender did not get our ack and sent the message again.
            Verdict::Again => self.duplicates += 1,
            Verdict::Late => return Ok(Flow::More),
            Verdict::Foreign => {
                self.foreign += 1;
                return Ok(Flow::More);
            }
        }
        let mut ack = [0u8; ACK_LEN];
        let field = if short { seq } else { p.token.encode(seq) };
        let len = header::encode_ack(field, n, &mut ack);
        let _ = self.s.send(&ack[..len]);
        Ok(Flow::More)
    }
}

/// What a stop-and-wait receiver makes of a message numbered `seq` (modulo 256 if `short`)
/// when it expects `expected`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    /// The next message: counted and acknowledged.
    Next,
    /// The one before, sent again because our ack was lost: acknowledged again.
    Again,
    /// An older copy, still on its way: dropped.
    Late,
    /// A message with a header numbered ahead of the one expected: a real sender never
    /// sends past an unacknowledged message, so it is not the test's (its number was not
    /// keyed with the stream's token). Dropped and counted apart.
    Foreign,
}

fn verdict(seq: u64, expected: u64, short: bool) -> Verdict {
    let mask = if short { 0xff } else { u64::MAX };
    if seq == expected & mask {
        Verdict::Next
    } else if expected > 0 && seq == (expected - 1) & mask {
        Verdict::Again
    } else if short || seq < expected {
        // One byte cannot tell an old copy from a forged one.
        Verdict::Late
    } else {
        Verdict::Foreign
    }
}

/// The UDP stop-and-wait receiver: acknowledges each message, counts the sender's copies.
pub(super) fn udp_receive_saw(
    s: UdpSocket,
    p: &RoleParams,
    file: &mut Option<FilePart>,
    sh: &Shared,
) -> SideReport {
    let spec = &p.spec;
    let _ = s.set_read_timeout(Some(POLL));
    let _ = s.set_write_timeout(Some(POLL));
    let mut r = SawReceive {
        s,
        buf: vec![0u8; 65_536],
        count: Count::default(),
        duplicates: 0,
        foreign: 0,
        expected: 0,
        sink: file.as_mut().and_then(FilePart::sink),
    };
    let (intervals, error) = recv_loop::run(&mut r, Until::Counted, p, sh);
    let mut rep = report(&r.count, intervals, error);
    rep.udp = Some(UdpCounts {
        sequenced: !spec.headerless(),
        duplicates: r.duplicates,
        foreign: r.foreign,
        same_clock: p.same_clock,
        // Each message is acknowledged before the next: whatever arrived, arrived in order.
        in_order_prefix: r.count.messages,
        ..UdpCounts::default()
    });
    rep
}

#[cfg(test)]
mod tests {
    use super::*;
    use wirebench_proto::header::SeqToken;

    #[test]
    fn messages_ahead_of_the_expected_one_are_foreign() {
        assert_eq!(verdict(5, 5, false), Verdict::Next);
        assert_eq!(verdict(4, 5, false), Verdict::Again);
        assert_eq!(verdict(2, 5, false), Verdict::Late);
        assert_eq!(verdict(6, 5, false), Verdict::Foreign);
        // An unkeyed 2^62, decoded with the stream's token: anywhere, most likely ahead.
        let forged = SeqToken::of_stream(0xc00c, 0).decode(1 << 62);
        assert_eq!(verdict(forged, 5, false), Verdict::Foreign);
        assert_eq!(verdict(0, 0, false), Verdict::Next);
        assert_eq!(verdict(u64::MAX, 0, false), Verdict::Foreign);
        // One byte: modulo 256, and never told foreign.
        assert_eq!(verdict(5, 261, true), Verdict::Next);
        assert_eq!(verdict(4, 261, true), Verdict::Again);
        assert_eq!(verdict(9, 261, true), Verdict::Late);
    }
}
