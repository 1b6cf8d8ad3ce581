//! TCP streams: the sender (optionally with MSG_ZEROCOPY) and the receiver, streaming or
//! stop-and-wait (one byte of acknowledgement per message).

use std::net::TcpStream;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use wirebench_proto::results::{SideReport, ZeroCopyUse};
use wirebench_proto::spec::Mechanism;

use super::blocking::{is_timeout, write_full, write_full_zc, write_some};
use super::count::{Count, MsBins, Recorder, Snapshot};
use super::early_end::{early_stop, RoleError};
use super::recv_loop::{self, Flow, Receive, Until};
use super::sender::{next_step, Step};
use super::user::Stream;
use super::{payload, report, FilePart, RoleParams, POLL};
use crate::file::FileSink;
use crate::pace::Pacer;
use crate::sys::ZeroCopy;
use crate::Shared;

/// The TCP sender: paced writes of whole messages, then a shutdown of its side (EOF says
/// everything was sent); stop-and-wait waits for a one-byte ack after each.
pub(super) fn tcp_send<S: Stream>(
    mut s: S,
    p: &RoleParams,
    file: &mut Option<FilePart>,
    sh: &Shared,
) -> SideReport {
    let spec = &p.spec;
    let mut source = file.as_mut().and_then(FilePart::source);
    let saw = spec.mechanism == Mechanism::StopAndWait;
    s.timeouts(POLL);
    let mut zc = match s.kernel() {
        Some(k) if spec.zerocopy => ZeroCopy::enable(k),
        _ => None,
    };
    let mut pacer = Pacer::of(spec);
    let mut rec = Recorder::of(p);
    let mut count = Count::default();
    let mut bins = MsBins::new();
    let error: Option<RoleError>;
    let mut ack = [0u8; 1];
    // Unpaced streaming from memory over the kernel's TCP writes in large calls, not one
    // message per call: see `write_unit`. Messages stay the unit of counting.
    let unit = match s.kernel() {
        Some(k) if !saw && source.is_none() && zc.is_none() && pacer.unlimited() => {
            crate::sys::tcp_info(k).and_then(|i| write_unit(i.snd_mss_bytes))
        }
        _ => None,
    };
    // The most one write hands the kernel, for the results.
    let mut call_bytes = spec.size;
    if let Some(unit) = unit {
        let (c, e, u) = stream_coalesced(&mut s, unit, p, sh, &mut rec, &mut pacer, &mut bins);
        count = c;
        error = e;
        call_bytes = u;
    } else {
        // One message's bytes: these streams write one message per call.
        let mut buf = payload(spec.size);
        loop {
            let len = match next_step(&mut rec, &mut pacer, sh, p, &count, &|c| {
                Snapshot::of_stream(c, &s)
            }) {
                Step::Send(len) => len,
                Step::Again => continue,
                Step::Done(why) => {
                    error = why;
                    break;
                }
            };
            if let Some(src) = source.as_mut() {
                if let Err(e) = src.fill(&mut buf[..len as usize]) {
                    error = Some(e.into());
                    break;
                }
            }
            if let Err(e) = write_full_zc(&mut s, &buf[..len as usize], sh, p, &mut zc) {
                error = Some(e);
                break;
            }
            if saw {
                // The receiver answers one byte per whole message.
                let got = loop {
                    match s.read(&mut ack) {
                        Ok(1) => break Ok(()),
                        Ok(_) => break Err(RoleError::ClosedAwaitingAck),
                        Err(e) if is_timeout(&e) => {
                            if let Some(why) = early_stop(sh, p, sh.now_ns()) {
                                break Err(why);
                            }
                        }
                        Err(e) => break Err(RoleError::Ack(e)),
                    }
                };
                if let Err(e) = got {
                    error = Some(e);
                    break;
                }
            }
            let now = sh.now_ns();
            count.add(len, now);
            bins.add(now, len);
            pacer.sent(len, now);
            count.publish(sh);
        }
    }
    // EOF tells the receiver that everything was sent.
    s.shutdown_write();
    let intervals = rec.finish(sh.now_ns(), || Snapshot::of_stream(&count, &s));
    let mut rep = report(&count, intervals, error);
    rep.ms_bytes = bins.finish();
    rep.datapath = p.datapath.clone();
    rep.datapath.call_bytes = Some(call_bytes);
    if let Some(k) = s.kernel().filter(|_| spec.zerocopy) {
        rep.datapath.zerocopy = Some(zerocopy_use(k, zc, sh));
    }
    rep
}

/// Segments at least this large are loopback's (65,483 bytes) or a virtual link's with a
/// jumbo MTU: there the kernel's cost per call, not per segment, sets the pace, and
/// streams write and read in larger calls (see [`write_unit`]).
const LARGE_SEGMENT_BYTES: u64 = 16 * 1024;

/// What an unpaced streaming write hands the kernel at once on a path of large segments,
/// whatever the message size: 2 MiB, which is not a whole number of segments, so each call
/// ends in one short segment (on loopback one in 33).
const LARGE_WRITE_BYTES: u64 = 2 << 20;

/// About what an unpaced streaming write hands the kernel at once on other paths: large
/// enough that the call costs little per byte, small enough that the buffer stays in the
/// cache; a whole number of segments (see [`write_unit`]).
const WRITE_BYTES: u64 = 256 * 1024;

/// What a streaming read asks for at least: paced streams, and unpaced ones on other paths
/// or among many streams (see [`LARGE_READ_BYTES`]).
const READ_BYTES: usize = 256 * 1024;

/// The length of an unpaced streaming write for a connection whose segments carry `mss`
/// bytes. With large segments (loopback), [`LARGE_WRITE_BYTES`]: interleaved on loopback
/// (BENCHMARKS.md) 2 MiB writes moved 1.19x as much as writes of 4 whole segments (about
/// 256 KiB), 1.26x with 512 KiB reads, at 0.69x the CPU per byte: the sender rarely waited
/// for room and the receiver kept its queue short, copying data still in the cache. A
/// short segment is dear only when writes are small: 128 KiB messages, two segments and
/// 106 bytes each, moved 0.6x as much as exact two-segment writes. With wire-sized
/// segments, a whole number of them, about [`WRITE_BYTES`]: on the lab's emulated 5 Gbit/s
/// link (MSS 1,448), 2 MiB writes left it 1.5 to 5% short of its rate in 9 runs of 20
/// with 1 MiB reads and 1 of 11 with 512 KiB, these in 1 of 23 (1.2% short).
fn write_unit(mss: u64) -> Option<u64> {
    match mss {
        0 => None,
        m if m >= LARGE_SEGMENT_BYTES => Some(LARGE_WRITE_BYTES),
        m => Some((WRITE_BYTES / m).max(1) * m),
    }
}

/// What an unpaced streaming read asks for on a path of large segments (more when the
/// message is larger), shared out among a test's streams down to 256 KiB each, so that 64
/// streams hold what they held before. Reads of 1 MiB moved as much on loopback. Other
/// paths, and paced streams, read at most 256 KiB, which `--max-rate`'s window allows for.
const LARGE_READ_BYTES: usize = 512 << 10;

/// The bytes an unpaced stream from memory writes, shared by all such streams running at
/// once: 2 MiB for a server's 64 streams, not 2 MiB each, and given back when the last ends.
fn streaming_payload() -> Arc<Vec<u8>> {
    static SHARED: Mutex<Weak<Vec<u8>>> = Mutex::new(Weak::new());
    let mut shared = SHARED.lock().unwrap_or_else(PoisonError::into_inner);
    shared.upgrade().unwrap_or_else(|| {
        let bytes = Arc::new(payload(LARGE_WRITE_BYTES));
        *shared = Arc::downgrade(&bytes);
        bytes
    })
}

/// Streams from memory in writes of `unit` bytes (see [`write_unit`]) rather than one
/// message per write, counting messages where the byte stream crosses their boundaries as
/// the receiver does. A timed test still ends on a message boundary: the message under way
/// when the time is up is completed. Returns the count, why it stopped early if it did, and
/// the unit it wrote in last (it follows the segment size).
fn stream_coalesced<S: Stream>(
    s: &mut S,
    unit: u64,
    p: &RoleParams,
    sh: &Shared,
    rec: &mut Recorder,
    pacer: &mut Pacer,
    bins: &mut MsBins,
) -> (Count, Option<RoleError>, u64) {
    let size = p.spec.size.max(1);
    let buf = streaming_payload();
    let mut unit = unit.min(buf.len() as u64);
    let mut count = Count::default();
    // Time is up and the message under way is being completed.
    let mut finishing = false;
    let mut writes = 0u64;
    // When bytes last moved: read after each write, so the next one needs no clock read.
    let mut now = sh.now_ns();
    let error = loop {
        // Look at the segment size again after write 1, 2, 4, ... 1024: about ten system
        // calls in a test, none per write once it has settled (before the first data the
        // kernel may report a smaller one than it then uses: 32,768 on loopback, then 65,483).
        if writes.is_power_of_two() && writes <= 1024 {
            if let Some(u) = s
                .kernel()
                .and_then(crate::sys::tcp_info)
                .and_then(|i| write_unit(i.snd_mss_bytes))
            {
                unit = u.min(buf.len() as u64);
            }
        }
        writes += 1;
        let into = count.bytes % size;
        let len = if finishing {
            if into == 0 {
                break None;
            }
            (size - into).min(unit)
        } else {
            match next_step(rec, pacer, sh, p, &count, &|c| Snapshot::of_stream(c, s)) {
                // As many bytes as the unit holds, never past the test's amount.
                Step::Send(_) => p.spec.bytes.map_or(unit, |b| unit.min(b - count.bytes)),
                Step::Again => continue,
                Step::Done(None) if into > 0 && p.spec.bytes.is_none() => {
                    finishing = true;
                    (size - into).min(unit)
                }
                Step::Done(why) => break why,
            }
        };
        // Counted per call: on a slow path a call returns what the kernel took in one poll.
        let wrote = match write_some(s, &buf[..len as usize], sh, p, now) {
            Ok(n) => n,
            Err(e) => break Some(e),
        };
        now = sh.now_ns();
        let messages = (count.bytes + wrote) / size - count.bytes / size;
        count.add_many(messages, wrote, now);
        bins.add(now, wrote);
        pacer.sent(wrote, now);
        count.publish(sh);
    };
    if !count.bytes.is_multiple_of(size) {
        // The last, shorter message (a `bytes` test's tail, or one cut short by an error),
        // as the receiver counts it.
        count.messages += 1;
    }
    (count, error, unit)
}

/// What became of the MSG_ZEROCOPY sends: waits briefly for the last completions, then
/// says whether the kernel sent without copying (`zerocopy` in the features) or copied after
/// all (`zerocopy_copied`, as on loopback), or refused the option (`zerocopy_unavailable`).
pub(super) fn zerocopy_use(s: &TcpStream, zc: Option<ZeroCopy>, sh: &Shared) -> ZeroCopyUse {
    let Some(mut z) = zc else {
        return ZeroCopyUse::default();
    };
    let until = sh.now_ns() + 200_000_000;
    z.reap(s);
    while z.completed < z.sends && sh.now_ns() < until {
        std::thread::sleep(Duration::from_millis(1));
        z.reap(s);
    }
    ZeroCopyUse {
        enabled: true,
        sends: z.sends,
        completed: z.completed,
        copied: z.copied,
    }
}

/// The TCP receiver's side of the receive loop.
struct TcpReceive<'a, S> {
    s: S,
    buf: Vec<u8>,
    /// Stop-and-wait: read up to the end of each message and acknowledge it.
    saw: bool,
    count: Count,
    /// Messages are the sender's unit: here they are counted at message boundaries in the
    /// byte stream (every `size` bytes, the last one possibly shorter).
    in_message: u64,
    sink: Option<&'a mut FileSink>,
}

impl<S: Stream> Receive for TcpReceive<'_, S> {
    fn count(&self) -> &Count {
        &self.count
    }

    fn snapshot(&mut self) -> Snapshot {
        Snapshot::of(&self.count)
    }

    #[inline]
    fn receive(&mut self, sh: &Shared, p: &RoleParams) -> Result<Flow, RoleError> {
        let spec = &p.spec;
        let (saw, count) = (self.saw, &mut self.count);
        // The current message's length: the last one of a `bytes` test may be shorter.
        let msg_len = spec.bytes.map_or(spec.size, |total| {
            total
                .saturating_sub(count.bytes - self.in_message)
                .clamp(1, spec.size)
        });
        // Stop-and-wait reads exactly up to the end of the current message.
        let want = if saw {
            (msg_len - self.in_message).max(1) as usize
        } else {
            self.buf.len()
        };
        match self.s.read(&mut self.buf[..want]) {
            Ok(0) => Ok(Flow::Closed),
            Ok(n) => {
                if let Some(sink) = self.sink.as_mut() {
                    sink.write(&self.buf[..n]);
                }
                let now = sh.now_ns();
                let n = n as u64;
                count.bytes += n;
                count.first_ns.get_or_insert(now);
                count.last_ns = Some(now);
                self.in_message += n;
                let msg_len = if saw { msg_len } else { spec.size };
                let mut error = None;
                while self.in_message >= msg_len {
                    self.in_message -= msg_len;
                    count.messages += 1;
                    if saw {
                        if let Err(e) = write_full(&mut self.s, &[1], sh, p) {
                            error = Some(e);
                        }
                    }
                }
                error.map_or(Ok(Flow::More), Err)
            }
            Err(e) if is_timeout(&e) => Ok(Flow::More),
            Err(e) => Err(RoleError::Receive(e)),
        }
    }

    fn settle(&mut self) {
        if self.in_message > 0 {
            // The sender's last, shorter message.
            self.count.messages += 1;
        }
    }
}

/// The TCP receiver: reads until the sender shuts its side down, counting messages at their
/// boundaries in the byte stream; stop-and-wait acknowledges each with one byte.
pub(super) fn tcp_receive<S: Stream>(
    mut s: S,
    p: &RoleParams,
    file: &mut Option<FilePart>,
    sh: &Shared,
) -> SideReport {
    let spec = &p.spec;
    let saw = spec.mechanism == Mechanism::StopAndWait;
    let unpaced = Pacer::of(spec).unlimited();
    let large_segments = s
        .kernel()
        .and_then(crate::sys::tcp_info)
        .is_some_and(|i| i.snd_mss_bytes >= LARGE_SEGMENT_BYTES);
    let buf = vec![
        0u8;
        if saw {
            spec.size as usize
        } else if unpaced && large_segments {
            let share = LARGE_READ_BYTES / spec.streams.max(1) as usize;
            (spec.size as usize).max(share).max(READ_BYTES)
        } else {
            (spec.size as usize).max(READ_BYTES)
        }
    ];
    s.timeouts(POLL);
    let mut r = TcpReceive {
        s,
        buf,
        saw,
        count: Count::default(),
        in_message: 0,
        sink: file.as_mut().and_then(FilePart::sink),
    };
    let (intervals, error) = recv_loop::run(&mut r, Until::Closed, p, sh);
    let mut rep = report(&r.count, intervals, error);
    rep.datapath = p.datapath.clone();
    rep.datapath.call_bytes = Some(r.buf.len() as u64);
    rep
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streaming_writes_are_large_calls_on_loopback_and_whole_segments_on_wire_paths() {
        // Loopback's segments, before and after the first data: 2 MiB calls either way.
        assert_eq!(write_unit(32_768), Some(LARGE_WRITE_BYTES));
        assert_eq!(write_unit(65_483), Some(LARGE_WRITE_BYTES));
        // A 1500-byte MTU with timestamps: 181 whole segments, just under 256 KiB.
        assert_eq!(write_unit(1_448), Some(181 * 1_448));
        // A 9000-byte MTU: 29 whole segments.
        assert_eq!(write_unit(9_000), Some(29 * 9_000));
        assert_eq!(write_unit(0), None);
        // Every unit fits the shared payload.
        for mss in [1, 536, 1_448, 9_000, 16_383, 16_384, 65_483] {
            assert!(write_unit(mss).is_some_and(|u| u <= LARGE_WRITE_BYTES));
        }
    }
}
