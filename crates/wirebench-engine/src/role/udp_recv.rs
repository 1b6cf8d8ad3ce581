//! The UDP streaming receiver: batches of datagrams per system call into the sequence, delay
//! and loss accounting of [`crate::rx::UdpRx`].

use std::io::ErrorKind;
use std::net::UdpSocket;
use std::sync::atomic::Ordering;

use wirebench_proto::header::HEADER_LEN;
use wirebench_proto::results::SideReport;
use wirebench_proto::spec::TestSpec;

use super::blocking::is_timeout;
use super::count::{Count, Recorder, Snapshot};
use super::early_end::RoleError;
use super::recv_loop::{self, Flow, Receive, Until};
use super::{report, FilePart, RoleParams, POLL};
use crate::packet_log_writer::{LogOut, LogSink};
use crate::rx::{ShortDatagrams, StreamKey, UdpRx};
use crate::sys::udp::BatchRecv;
use crate::Shared;

/// Whether a `bytes` test ends with a message too short for the header.
fn short_tail(spec: &TestSpec) -> bool {
    spec.bytes
        .is_some_and(|b| b % spec.size != 0 && b % spec.size < HEADER_LEN as u64)
}

/// Which datagrams shorter than a header each stream of `spec` sends: all of them in a
/// headerless test, else at most its short last message.
pub(super) fn short_datagrams(spec: &TestSpec) -> ShortDatagrams {
    match spec.bytes {
        _ if spec.headerless() => ShortDatagrams::All,
        Some(b) if short_tail(spec) => ShortDatagrams::Tail((b % spec.size) as usize),
        _ => ShortDatagrams::None,
    }
}

/// The number of datagrams with a header among the sender's `messages`: all but a short
/// last one of a `bytes` test.
pub(super) fn sequenced_count(spec: &TestSpec, messages: u64) -> u64 {
    let short_tail = short_tail(spec);
    // `messages` comes from the peer: saturate rather than overflow.
    if short_tail
        && messages > 0
        && spec
            .bytes
            .is_some_and(|b| messages.saturating_mul(spec.size) >= b)
    {
        messages - 1
    } else {
        messages
    }
}

/// The packet log asked for, started; or why it could not be (then there is no test).
pub(super) fn start_log(packet_log: Option<LogOut>) -> (Option<LogSink>, Option<RoleError>) {
    match packet_log.map(LogSink::start) {
        None => (None, None),
        Some(Ok(l)) => (Some(l), None),
        Some(Err(e)) => (None, Some(RoleError::LogStart(e))),
    }
}

/// The UDP streaming receiver's side of the receive loop.
struct UdpReceive {
    s: UdpSocket,
    io: BatchRecv,
    rx: UdpRx,
}

impl Receive for UdpReceive {
    fn count(&self) -> &Count {
        &self.rx.count
    }

    /// What arrived and the packet log streamed back: the log is bytes the server sends.
    fn moved(&self) -> u64 {
        self.rx.count.bytes.saturating_add(self.rx.log_bytes())
    }

    fn snapshot(&mut self) -> Snapshot {
        Snapshot {
            bytes: self.rx.count.bytes,
            messages: self.rx.count.messages,
            udp: Some(self.rx.close_interval()),
            tcp: None,
            quic: None,
        }
    }

    #[inline]
    fn receive(&mut self, sh: &Shared, _p: &RoleParams) -> Result<Flow, RoleError> {
        let n = match self.io.recv(&self.s) {
            Ok(n) => n,
            Err(e) if is_timeout(&e) || e.kind() == ErrorKind::ConnectionRefused => {
                return Ok(Flow::More)
            }
            Err(e) => return Err(RoleError::Receive(e)),
        };
        // One clock read per batch: its datagrams were all queued when the call returned.
        let now = sh.now_ns();
        for i in 0..n {
            let (bytes, segment) = self.io.message(i);
            self.rx.on_buffer(bytes, segment, now);
        }
        Ok(Flow::More)
    }
}

/// The UDP streaming receiver: batches into [`UdpRx`], until the sender's count arrived or
/// the drain time passed; then the sender's count settles the loss.
pub(super) fn udp_receive(
    s: UdpSocket,
    p: &RoleParams,
    packet_log: Option<LogOut>,
    file: &mut Option<FilePart>,
    sh: &Shared,
) -> SideReport {
    let spec = &p.spec;
    let _ = s.set_read_timeout(Some(POLL));
    let io = BatchRecv::new(p.offloads);
    let (log, log_start_error) = start_log(packet_log);
    let key = StreamKey {
        token: p.token,
        short: short_datagrams(spec),
    };
    let mut rx = UdpRx::new(sh.epoch_unix_ns, p.hello, key, log);
    let sink = match file.take() {
        Some(FilePart::Sink(sink)) => Some(sink),
        other => {
            *file = other;
            None
        }
    };
    rx.save_file(sink, spec.file_chunk(), spec.file_bytes());
    let mut r = UdpReceive { s, io, rx };
    let (intervals, error) = match log_start_error {
        None => recv_loop::run(&mut r, Until::Counted, p, sh),
        // A packet log that was asked for and cannot be written: no test.
        Some(e) => (
            Recorder::of(p).finish(sh.now_ns(), || r.snapshot()),
            Some(e),
        ),
    };
    let sent = sh.peer_messages.load(Ordering::Relaxed);
    let sent = (sent != u64::MAX).then(|| sequenced_count(spec, sent));
    let (count, mut udp, log_error, hists, sink) = r.rx.finish(sent, p.same_clock);
    sh.keep_hists(hists);
    if let Some(sink) = sink {
        *file = Some(FilePart::Sink(sink));
    }
    udp.sequenced = !spec.headerless();
    let mut rep = report(&count, intervals, error.or(log_error.map(RoleError::Log)));
    rep.udp = Some(udp);
    rep
}
