//! The UDP streaming sender: batches of datagrams per system call, each with its header.

use std::io::ErrorKind;
use std::net::UdpSocket;

use wirebench_proto::header::{DataHeader, HEADER_LEN};
use wirebench_proto::results::SideReport;

use super::blocking::is_timeout;
use super::count::{Count, MsBins, Recorder, Snapshot};
use super::early_end::{early_stop, RoleError};
use super::limit::over_counted;
use super::sender::{sleep_for, wait_for};
use super::{payload, report, FilePart, RoleParams, POLL};
use crate::file::{FileReadError, FileSource};
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
    let spec = &p.spec;
    let size = spec.size;
    let _ = s.set_write_timeout(Some(POLL));
    let mut io = BatchSend::new(size as usize, p.offloads, &payload(size));
    let chunk = (size as usize).saturating_sub(HEADER_LEN);
    let mut file = file
        .as_mut()
        .and_then(FilePart::source)
        .map(|src| FileBatch::new(src, chunk, io.capacity()));
    let mut pacer = Pacer::of(spec);
    let mut rec = Recorder::of(p);
    let mut count = Count::default();
    let mut local_drops = 0u64;
    let mut refused = 0u32;
    let mut bins = MsBins::new();
    let mut error = None;
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
        let (left, last_len) = left_to_send(spec.bytes, spec.duration_ns, size, count.bytes, now);
        if left == 0 {
            break;
        }
        let cap = (io.capacity() as u64).min(left);
        // A paced sender waits until a quantum of its schedule is due (pace.rs).
        let want = pacer.quantum(size, cap);
        let n = pacer.due(now, size, cap);
        if n < want {
            let due = pacer.due_by_ns(now, size, want);
            // A batch waits asleep: waking late only makes the next batch larger, so a
            // spin would buy nothing and take a core from a receiver or an emulator
            // here. A sender of one datagram at a time spins the last stretch, to keep
            // its spacing.
            if want > 1 {
                sleep_for(now, due);
            } else {
                wait_for(sh, now, due);
            }
            continue;
        }
        let tail_len = if n == left { last_len } else { size };
        let batch = Batch {
            first_seq: count.messages,
            n,
            size,
            tail_len,
            send_ns: sh.unix_ns(now),
        };
        if let Err(e) = batch.fill(&mut io, p, file.as_mut()) {
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
        if let Some(f) = file.as_mut() {
            f.sent(sent as usize);
        }
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
        gso_refused(&mut rep.datapath, io.gso_refused());
    }
    rep
}

/// The device refused GSO (EIO) and the sender went on without it: said once, and why.
fn gso_refused(dp: &mut wirebench_proto::results::Datapath, why: Option<&std::io::Error>) {
    dp.features.retain(|f| f != "udp_gso");
    dp.features.push("udp_gso_refused".into());
    let why = why.map_or_else(String::new, |e| format!(" ({e})"));
    dp.fallbacks.push(wirebench_proto::results::Fallback {
        feature: "udp_gso".into(),
        reason: format!("a send with GSO failed{why}: one datagram a message from then on"),
    });
}

/// Datagrams of `size` bytes left to send, and the length of the last one: a `bytes` test
/// (`total`) ends with what is left after `sent` bytes, a shorter datagram if it does not
/// divide; a timed one (`duration_ns`) sends whole datagrams until `now` reaches its end.
pub(super) fn left_to_send(
    total: Option<u64>,
    duration_ns: Option<u64>,
    size: u64,
    sent: u64,
    now: u64,
) -> (u64, u64) {
    match (total, duration_ns) {
        (Some(total), _) => {
            let rest = total.saturating_sub(sent);
            let left = rest.div_ceil(size);
            (left, rest - (left.max(1) - 1) * size)
        }
        (None, Some(d)) if now < d => (u64::MAX, size),
        _ => (0, size),
    }
}

/// One batch of datagrams: sequence numbers `first_seq ..first_seq + n`, all `size` bytes
/// but the last (`tail_len`), stamped with one send time.
struct Batch {
    first_seq: u64,
    n: u64,
    size: u64,
    tail_len: u64,
    send_ns: u64,
}

impl Batch {
    /// Writes each datagram's header and, with a file, its chunk of the file after it.
    fn fill(
        &self,
        io: &mut BatchSend,
        p: &RoleParams,
        mut file: Option<&mut FileBatch<'_>>,
    ) -> Result<(), FileReadError> {
        if let Some(f) = file.as_mut() {
            let tail = (self.tail_len as usize).saturating_sub(HEADER_LEN);
            f.load(self.first_seq, self.n as usize, tail)?;
        }
        for i in 0..self.n {
            let seq = self.first_seq + i;
            let d = io.datagram(i as usize);
            let len = if i + 1 == self.n {
                self.tail_len
            } else {
                self.size
            };
            if len < HEADER_LEN as u64 {
                d[0] = seq as u8;
                continue;
            }
            let h = DataHeader {
                seq,
                stream: 0,
                send_ns: self.send_ns,
            };
            let _ = h.write(p.token, d);
            if let Some(f) = file.as_deref() {
                // After the header, the file's chunk of this sequence number.
                let body = &mut d[HEADER_LEN.min(len as usize)..len as usize];
                let piece = f.chunk(i as usize);
                let m = piece.len().min(body.len());
                body[..m].copy_from_slice(&piece[..m]);
            }
        }
        Ok(())
    }
}

/// The file's part of a UDP sender's batches. Datagram `seq` carries the file's chunk at
/// `seq × chunk` (`chunk`: the datagram's size less its header), read by position in one
/// pread a batch; only the chunks of the datagrams the kernel took are hashed and counted,
/// in sequence order. A partial send leaves the rest to the next batch, which begins at the
/// first unsent sequence number and so reads those bytes again: the digest and the byte
/// count cover exactly what was sent, and no sequence number carries two pieces of the file.
struct FileBatch<'a> {
    src: &'a mut FileSource,
    chunk: usize,
    /// The batch's file bytes, chunk after chunk; allocated once, for the largest batch.
    buf: Vec<u8>,
    /// How many of `buf`'s bytes the current batch holds.
    loaded: usize,
}

impl<'a> FileBatch<'a> {
    /// Batches of at most `capacity` datagrams of `chunk` file bytes each from `src`.
    fn new(src: &'a mut FileSource, chunk: usize, capacity: usize) -> Self {
        Self {
            src,
            chunk,
            buf: vec![0; chunk.saturating_mul(capacity.max(1))],
            loaded: 0,
        }
    }

    /// Reads the file bytes of `n` datagrams from `first_seq` on, the last of them
    /// carrying `tail` bytes of the file.
    fn load(&mut self, first_seq: u64, n: usize, tail: usize) -> Result<(), FileReadError> {
        let len = n.saturating_sub(1).saturating_mul(self.chunk) + tail;
        self.loaded = len.min(self.buf.len());
        let offset = first_seq.saturating_mul(self.chunk as u64);
        self.src.read_at(offset, &mut self.buf[..self.loaded])
    }

    /// The file bytes of the batch's datagram `i`.
    fn chunk(&self, i: usize) -> &[u8] {
        let start = i.saturating_mul(self.chunk).min(self.loaded);
        let end = start.saturating_add(self.chunk).min(self.loaded);
        &self.buf[start..end]
    }

    /// The batch's first `k` datagrams were sent: their chunks are counted and hashed.
    fn sent(&mut self, k: usize) {
        let end = k.saturating_mul(self.chunk).min(self.loaded);
        self.src.sent(&self.buf[..end]);
        self.loaded = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use xxhash_rust::xxh3::xxh3_64;

    /// A sender whose socket takes only half of each batch (rounded up), as a full socket
    /// buffer or a paced `sendmmsg` may: every datagram still carries the file's bytes of
    /// its own sequence number, the copy a receiver puts together at `seq × chunk` is the
    /// file, and the digest covers what was sent, once, in order.
    #[test]
    fn a_bytes_test_ends_with_a_short_datagram_and_a_timed_one_at_its_end() {
        assert_eq!(left_to_send(Some(2500), None, 1000, 0, 0), (3, 500));
        assert_eq!(left_to_send(Some(2500), None, 1000, 2000, 0), (1, 500));
        assert_eq!(left_to_send(Some(3000), None, 1000, 1000, 0), (2, 1000));
        assert_eq!(left_to_send(Some(2500), None, 1000, 2500, 0).0, 0);
        assert_eq!(
            left_to_send(Some(10), None, 1000, 99, 0).0,
            0,
            "over-counted"
        );
        assert_eq!(left_to_send(None, Some(100), 1000, 0, 99), (u64::MAX, 1000));
        assert_eq!(left_to_send(None, Some(100), 1000, 0, 100).0, 0);
        assert_eq!(left_to_send(None, None, 1000, 0, 0).0, 0);
    }

    #[test]
    fn a_socket_that_takes_half_of_each_batch_still_delivers_the_file_identically() {
        let path = std::env::temp_dir().join(format!("wirebench-half-{}", std::process::id()));
        let data: Vec<u8> = (0..100_003u32).map(|i| (i * 31 % 253) as u8).collect();
        std::fs::write(&path, &data).expect("write the file");
        let (mut src, len) = FileSource::open(&path).expect("open");
        let (chunk, capacity) = (1000usize, 8usize);
        let mut copy = vec![0u8; len as usize];
        let mut batch = FileBatch::new(&mut src, chunk, capacity);
        let (mut seq, mut batches) = (0u64, 0);
        let total = len.div_ceil(chunk as u64);
        while seq < total {
            let n = (total - seq).min(capacity as u64) as usize;
            let last = seq + n as u64 == total;
            let tail = if last {
                len as usize - (total as usize - 1) * chunk
            } else {
                chunk
            };
            batch.load(seq, n, tail).expect("read the batch");
            let datagrams: Vec<Vec<u8>> = (0..n).map(|i| batch.chunk(i).to_vec()).collect();
            let taken = n.div_ceil(2);
            for (i, d) in datagrams.iter().take(taken).enumerate() {
                let at = (seq as usize + i) * chunk;
                copy[at..at + d.len()].copy_from_slice(d);
            }
            batch.sent(taken);
            seq += taken as u64;
            batches += 1;
        }
        assert!(batches > total / capacity as u64 * 2, "every batch was cut");
        assert_eq!(copy, data);
        let report = src.report();
        assert_eq!(report.bytes, len);
        assert_eq!(report.digest, Some(format!("{:016x}", xxh3_64(&data))));
        let _ = std::fs::remove_file(path);
    }
}
