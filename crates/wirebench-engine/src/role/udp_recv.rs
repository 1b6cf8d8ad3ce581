//! The UDP streaming receiver: batches of datagrams per system call into the sequence, delay
//! and loss accounting of [`crate::rx::UdpRx`].

use std::io::ErrorKind;
use std::net::UdpSocket;
use std::sync::atomic::Ordering;

use wirebench_proto::header::HEADER_LEN;
use wirebench_proto::results::SideReport;
use wirebench_proto::spec::TestSpec;

use super::blocking::is_timeout;
use super::count::{Recorder, Snapshot};
use super::recv_loop::receiver_done;
use super::{report, FilePart, RoleParams, POLL};
use crate::log::{LogOut, LogSink};
use crate::rx::UdpRx;
use crate::sys::udp::BatchRecv;
use crate::Shared;

/// The number of datagrams with a header among the sender's `messages`: all but a short
/// last one of a `bytes` test.
pub(super) fn sequenced_count(spec: &TestSpec, messages: u64) -> u64 {
    let short_tail = spec
        .bytes
        .is_some_and(|b| b % spec.size != 0 && b % spec.size < HEADER_LEN as u64);
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

pub(super) fn udp_receive(
    s: UdpSocket,
    p: &RoleParams,
    packet_log: Option<LogOut>,
    file: &mut Option<FilePart>,
    sh: &Shared,
) -> SideReport {
    let spec = &p.spec;
    let _ = s.set_read_timeout(Some(POLL));
    let mut io = BatchRecv::new(p.offloads);
    let mut rec = Recorder::of(p);
    let (log, mut error) = match packet_log.map(LogSink::start) {
        None => (None, None),
        Some(Ok(l)) => (Some(l), None),
        Some(Err(e)) => (None, Some(format!("packet log: {e}"))),
    };
    let mut rx = UdpRx::new(sh.epoch_unix_ns, p.hello, log);
    let sink = match file.take() {
        Some(FilePart::Sink(sink)) => Some(sink),
        other => {
            *file = other;
            None
        }
    };
    rx.save_file(sink, spec.file_chunk(), spec.file_bytes());
    let snap = |rx: &mut UdpRx| Snapshot {
        bytes: rx.count.bytes,
        messages: rx.count.messages,
        udp: Some(rx.close_interval()),
    };
    while error.is_none() {
        let now = sh.now_ns();
        rec.tick(now, || snap(&mut rx));
        if let Some(why) = receiver_done(sh, p, &rx.count, now) {
            error = why;
            break;
        }
        let n = match io.recv(&s) {
            Ok(n) => n,
            Err(e) if is_timeout(&e) || e.kind() == ErrorKind::ConnectionRefused => continue,
            Err(e) => {
                error = Some(format!("receiving data: {e}"));
                break;
            }
        };
        // One clock read per batch: its datagrams were all queued when the call returned.
        let now = sh.now_ns();
        for i in 0..n {
            let (bytes, segment) = io.message(i);
            rx.on_buffer(bytes, segment, now);
        }
        sh.bytes.store(rx.count.bytes, Ordering::Relaxed);
        sh.messages.store(rx.count.messages, Ordering::Relaxed);
    }
    let intervals = rec.finish(sh.now_ns(), || snap(&mut rx));
    let sent = sh.peer_messages.load(Ordering::Relaxed);
    let sent = (sent != u64::MAX).then(|| sequenced_count(spec, sent));
    let (count, mut udp, log_error, hists, sink) = rx.finish(sent, p.same_clock);
    sh.keep_hists(hists);
    if let Some(sink) = sink {
        *file = Some(FilePart::Sink(sink));
    }
    udp.sequenced = !spec.headerless();
    let mut rep = report(&count, intervals, error.or(log_error));
    rep.udp = Some(udp);
    rep
}
