//! The UDP streaming sender: batches of datagrams per system call, each with its header.

use std::io::ErrorKind;
use std::net::UdpSocket;

use wirebench_proto::header::{DataHeader, HEADER_LEN};
use wirebench_proto::results::SideReport;

use super::blocking::is_timeout;
use super::count::{Count, MsBins, Recorder, Snapshot};
use super::end::{early_stop, RoleError};
use super::limit::over_counted;
use super::sender::wait_for;
use super::{payload, report, FilePart, RoleParams, POLL};
use crate::pace::Pacer;
use crate::sys::udp::BatchSend;
use crate::Shared;

/// Streams UDP in batches: as many datagrams per call as are due (all of a batch when the
/// rate is unlimited), each with its own header; one clock read per batch, so the datagrams
/// of a batch carry the same send time, the time they were handed to the kernel together.
pub(super) fn udp_send_stream(
    s: UdpSocket,
    p: &RoleParams,
    file: &mut Option<FilePart>,
    sh: &Shared,
) -> SideReport {
    let mut source = file.as_mut().and_then(FilePart::source);
    let spec = &p.spec;
    let size = spec.size;
    let _ = s.set_write_timeout(Some(POLL));
    let mut io = BatchSend::new(size as usize, p.offloads, &payload(size));
    let mut pacer = Pacer::new(spec.rate_bps, spec.rate_pps, spec.gap_ns);
    let mut rec = Recorder::of(p);
    let mut count = Count::default();
    let mut local_drops = 0u64;
    let mut refused = 0u32;
    let mut bins = MsBins::new();
    let mut error = None;
    let mut file_error = None;
    loop {
        let now = sh.now_ns();
        rec.tick(now, || Snapshot::of(&count));
        // The server's limits, once per batch: a `-l 1` test must not become a flood.
        if let Some(why) = early_stop(sh, p, now)
            .or_else(|| over_counted(p.limit.as_ref(), count.bytes, count.messages, now))
        {
            error = Some(why);
            break;
        }
        // Datagrams left, and the length of the last one of a `bytes` test.
        let (left, last_len) = match (spec.bytes, spec.duration_ns) {
            (Some(total), _) => {
                let rest = total.saturating_sub(count.bytes);
                (
                    rest.div_ceil(size),
                    rest - (rest.div_ceil(size).max(1) - 1) * size,
                )
            }
            (None, Some(d)) if now < d => (u64::MAX, size),
            _ => (0, size),
        };
        if left == 0 {
            break;
        }
        let cap = (io.capacity() as u64).min(left);
        // A paced sender waits until a quantum of its schedule is due (pace.rs).
        let want = pacer.quantum(size, cap);
        let n = pacer.due(now, size, cap);
        if n < want {
            let due = pacer.due_by_ns(now, size, want);
            wait_for(sh, now, due);
            continue;
        }
        let tail_len = if n == left { last_len } else { size };
        let send_ns = sh.unix_ns(now);
        for i in 0..n {
            let seq = count.messages + i;
            let d = io.datagram(i as usize);
            let len = if i + 1 == n { tail_len } else { size };
            if len < HEADER_LEN as u64 {
                d[0] = seq as u8;
            } else {
                let h = DataHeader {
                    seq,
                    stream: 0,
                    send_ns,
                };
                let _ = h.write(p.token, d);
                if let Some(src) = source.as_mut() {
                    // After the header, the file's next piece.
                    if let Err(e) = src.fill(&mut d[HEADER_LEN..len as usize]) {
                        file_error = Some(e);
                    }
                }
            }
        }
        if let Some(e) = file_error.take() {
            error = Some(e.into());
            break;
        }
        let sent = match io.send(&s, n as usize, tail_len as usize) {
            Ok(k) => k as u64,
            // A local firewall rule dropped the first message (all its segments): sent, as
            // far as this program is concerned, and lost on the path.
            Err(e) if e.raw_os_error() == Some(libc::EPERM) => {
                let k = (io.segments() as u64).min(n);
                local_drops += k;
                k
            }
            Err(e) if e.kind() == ErrorKind::ConnectionRefused => {
                // A pending ICMP error from the peer: the kernel reports it once, then sends.
                refused += 1;
                if refused > 100 {
                    error = Some(RoleError::PortUnreachable);
                    break;
                }
                continue;
            }
            Err(e) if is_timeout(&e) || e.raw_os_error() == Some(libc::ENOBUFS) => {
                std::thread::yield_now();
                continue;
            }
            Err(e) => {
                error = Some(RoleError::Send(e));
                break;
            }
        };
        let bytes = if sent == n {
            (n - 1) * size + tail_len
        } else {
            sent * size
        };
        let now = sh.now_ns();
        count.add_many(sent, bytes, now);
        bins.add(now, bytes);
        pacer.sent_many(sent, bytes, now);
        count.publish(sh);
    }
    let intervals = rec.finish(sh.now_ns(), || Snapshot::of(&count));
    let mut rep = report(&count, intervals, error);
    rep.local_drops = local_drops;
    rep.ms_bytes = bins.finish();
    rep.datapath = p.datapath.clone();
    if p.offloads.gso && !io.offloads().gso {
        // The device refused GSO (EIO) and the sender went on without it.
        rep.datapath.features.retain(|f| f != "udp_gso");
        rep.datapath.features.push("udp_gso_refused".into());
    }
    rep
}
