//! The packet log's writer: the receive thread fills fixed batches of encoded records and
//! hands them to a writer thread, which writes them out and hands the emptied buffers back.
//!
//! Nothing is allocated per record (the buffers are made once), nothing is dropped: when the
//! writer falls behind by the whole pool (8 MiB of records), the receiver waits for it, which
//! costs the measurement rather than the log. A writer that stays stuck or crawls (a client
//! that stops reading its log connection, or reads a byte at a time) is cut off: after
//! [`STALL`] without a free batch, or [`FINISH`] for the last ones, the log's [`LogOut::abort`]
//! closes its connection and the log ends with an error, never the receiver.

use std::io::Write;
use std::sync::mpsc::{channel, sync_channel, Receiver, RecvTimeoutError, SyncSender};
use std::time::Duration;

use thiserror::Error;
use wirebench_proto::packet_log::{file_header, Record, RECORD_LEN};
use wirebench_sys::output::Pending;

/// Bytes of records handed to the writer at once (8192 records).
const BATCH_BYTES: usize = 8192 * RECORD_LEN;

/// Batches in circulation between the receiver and the writer.
const POOL: usize = 32;

/// The most a log's queue holds, the batch being filled among them (the server's memory
/// budget counts it, `control::memory`).
pub(crate) const QUEUE_BYTES: u64 = (POOL * BATCH_BYTES) as u64;
// The budget's figure is the queue's (the control crate cannot see this one).
const _: () = assert!(QUEUE_BYTES == crate::control::memory::PACKET_LOG_QUEUE_BYTES);

/// How long the receiver waits for the writer to free a batch before giving the log up.
const STALL: Duration = Duration::from_secs(if cfg!(test) { 1 } else { 10 });

/// How long the end of a test waits for the writer to write what is left (up to the whole
/// pool, 8 MiB) before giving the log up.
const FINISH: Duration = Duration::from_secs(if cfg!(test) { 1 } else { 30 });

/// Why a packet log is incomplete. The receiver's measurement is never affected: only the log
/// is given up.
#[derive(Debug, Error)]
pub enum LogError {
    /// Writing the log failed (a full disk, a closed connection).
    #[error("packet log: {0}")]
    Write(#[from] std::io::Error),
    /// The writer thread ended without saying why.
    #[error("packet log: the writer failed")]
    WriterFailed,
    /// The writer took no batch for this many seconds: it was cut off.
    #[error("packet log: the writer made no progress for {0} s")]
    Stalled(u64),
    /// The writer did not take the last batches within this many seconds: it was cut off.
    #[error("packet log: the rest was not taken within {0} s")]
    FinishTimedOut(u64),
}

/// Where a packet log's bytes go: a connection to the client, or a file that takes its name
/// only once the whole log is in it.
pub trait LogTarget: Write + Send {
    /// Everything was written: a file is synced and renamed over its target here. Not
    /// called for a log given up, whose file is then removed and any earlier one kept.
    fn complete(self: Box<Self>) -> std::io::Result<()> {
        Ok(())
    }
}

impl LogTarget for Pending {
    fn complete(self: Box<Self>) -> std::io::Result<()> {
        (*self)
            .commit()
            .map_err(|e| std::io::Error::new(e.source.kind(), e.to_string()))
    }
}

/// Where a packet log goes, and how to cut it off.
pub struct LogOut {
    /// The file, or the connection to the client.
    pub out: Box<dyn LogTarget>,
    /// Makes a blocked write of `out` fail at once (shuts a connection down); none for a
    /// local file.
    pub abort: Option<Box<dyn FnOnce() + Send>>,
}

/// The receiving end of a packet log.
pub struct LogSink {
    buf: Vec<u8>,
    full: Option<SyncSender<Vec<u8>>>,
    free: Receiver<Vec<u8>>,
    /// The writer's result, when it is done.
    done: Receiver<std::io::Result<()>>,
    abort: Option<Box<dyn FnOnce() + Send>>,
    records: u64,
    error: Option<LogError>,
}

impl LogSink {
    /// Starts the writer thread on `log.out`; the file header is its first write.
    pub fn start(log: LogOut) -> std::io::Result<Self> {
        let LogOut { mut out, abort } = log;
        let (full_tx, full_rx) = sync_channel::<Vec<u8>>(POOL);
        let (free_tx, free_rx) = channel::<Vec<u8>>();
        let (done_tx, done_rx) = sync_channel(1);
        for _ in 1..POOL {
            let _ = free_tx.send(Vec::with_capacity(BATCH_BYTES));
        }
        // Detached: a writer stuck on a dead peer is cut off by `abort`, not joined.
        std::thread::Builder::new()
            .name("wirebench-packet-log".into())
            .spawn(move || {
                let result = (|| {
                    out.write_all(&file_header())?;
                    for mut batch in full_rx {
                        out.write_all(&batch)?;
                        batch.clear();
                        // The receiver may be done and gone: then the buffer is dropped.
                        let _ = free_tx.send(batch);
                    }
                    out.flush()?;
                    out.complete()
                })();
                let _ = done_tx.send(result);
            })?;
        Ok(Self {
            buf: Vec::with_capacity(BATCH_BYTES),
            full: Some(full_tx),
            free: free_rx,
            done: done_rx,
            abort,
            records: 0,
            error: None,
        })
    }

    /// Gives the log up: cuts the writer off, if it can be.
    fn give_up(&mut self, why: LogError) {
        if let Some(abort) = self.abort.take() {
            abort();
        }
        self.error.get_or_insert(why);
    }

    /// The log's bytes so far, the file header and every record pushed: what the log sends,
    /// which a server counts against its limits.
    #[inline]
    pub fn bytes(&self) -> u64 {
        (wirebench_proto::packet_log::FILE_HEADER_LEN as u64)
            .saturating_add(self.records.saturating_mul(RECORD_LEN as u64))
    }

    /// Appends one record.
    #[inline]
    pub fn push(&mut self, rec: &Record) {
        if self.error.is_some() {
            return;
        }
        if self.buf.len() + RECORD_LEN > BATCH_BYTES {
            self.hand_over();
            if self.error.is_some() {
                return;
            }
        }
        let mut b = [0u8; RECORD_LEN];
        rec.encode(&mut b);
        self.buf.extend_from_slice(&b);
        self.records += 1;
    }

    /// Sends the current batch to the writer and takes a free one.
    fn hand_over(&mut self) {
        let next = match self.free.recv_timeout(STALL) {
            Ok(b) => b,
            Err(RecvTimeoutError::Timeout) => {
                self.give_up(LogError::Stalled(STALL.as_secs()));
                return;
            }
            Err(RecvTimeoutError::Disconnected) => {
                self.error = Some(LogError::WriterFailed);
                return;
            }
        };
        let batch = std::mem::replace(&mut self.buf, next);
        if let Some(tx) = &self.full {
            if tx.send(batch).is_err() {
                self.error = Some(LogError::WriterFailed);
            }
        }
    }

    /// Writes what is left and waits for the writer; returns the records written, or why the
    /// log is incomplete.
    pub fn finish(mut self) -> Result<u64, LogError> {
        if self.error.is_none() && !self.buf.is_empty() {
            let batch = std::mem::take(&mut self.buf);
            if let Some(tx) = &self.full {
                let _ = tx.send(batch);
            }
        }
        drop(self.full.take());
        let done = match self.done.recv_timeout(FINISH) {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(LogError::Write(e)),
            Err(RecvTimeoutError::Timeout) => {
                self.give_up(LogError::FinishTimedOut(FINISH.as_secs()));
                Ok(())
            }
            Err(RecvTimeoutError::Disconnected) => Err(LogError::WriterFailed),
        };
        match (self.error.take(), done) {
            (Some(e), _) | (None, Err(e)) => Err(e),
            (None, Ok(())) => Ok(self.records),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};
    use wirebench_proto::packet_log::{Arrived, Reader};

    /// A `Write` whose bytes the test can read after the writer thread is done.
    #[derive(Clone, Default)]
    struct Shared(Arc<Mutex<Vec<u8>>>);
    impl LogTarget for Shared {}
    impl Write for Shared {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0
                .lock()
                .map_err(|_| std::io::Error::other("poisoned"))?
                .extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn every_record_arrives_in_order_across_many_batches() {
        let out = Shared::default();
        let mut sink = LogSink::start(LogOut {
            out: Box::new(out.clone()),
            abort: None,
        })
        .expect("start");
        let n = 3 * POOL as u64 * (BATCH_BYTES / RECORD_LEN) as u64 + 17;
        for seq in 0..n {
            sink.push(&Record::Datagram {
                kind: Arrived::Received,
                seq,
                size: 1472,
                send_unix_ns: seq,
                arrival_unix_ns: seq + 1,
            });
        }
        sink.push(&Record::Lost { first: n, count: 5 });
        assert_eq!(sink.finish().ok(), Some(n + 1));
        let bytes = out.0.lock().expect("lock").clone();
        let mut expect = 0u64;
        for rec in Reader::new(&bytes[..]).expect("header") {
            match rec.expect("record") {
                Record::Datagram { seq, .. } => {
                    assert_eq!(seq, expect);
                    expect += 1;
                }
                Record::Lost { first, count } => assert_eq!((first, count), (n, 5)),
            }
        }
        assert_eq!(expect, n);
    }

    struct Broken;
    impl LogTarget for Broken {}
    impl Write for Broken {
        fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
            Err(std::io::Error::other("disk full"))
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// A reader that takes a byte now and then until it is cut off.
    struct Crawl(Arc<std::sync::atomic::AtomicBool>);
    impl LogTarget for Crawl {}
    impl Write for Crawl {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            if self.0.load(std::sync::atomic::Ordering::SeqCst) {
                return Err(std::io::Error::other("shut down"));
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
            Ok(b.len().min(1))
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_crawling_reader_is_cut_off_in_bounded_time() {
        let cut = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = Arc::clone(&cut);
        let mut sink = LogSink::start(LogOut {
            out: Box::new(Crawl(Arc::clone(&cut))),
            abort: Some(Box::new(move || {
                flag.store(true, std::sync::atomic::Ordering::SeqCst)
            })),
        })
        .expect("start");
        for seq in 0..1000 {
            sink.push(&Record::Lost {
                first: seq,
                count: 1,
            });
        }
        let started = std::time::Instant::now();
        assert!(sink.finish().is_err());
        assert!(started.elapsed() < std::time::Duration::from_secs(10));
        assert!(
            cut.load(std::sync::atomic::Ordering::SeqCst),
            "the abort ran"
        );
    }

    #[test]
    fn a_failing_writer_is_an_error_not_a_hang() {
        let mut sink = LogSink::start(LogOut {
            out: Box::new(Broken),
            abort: None,
        })
        .expect("start");
        for seq in 0..(POOL as u64 + 2) * 8192 {
            sink.push(&Record::Lost {
                first: seq,
                count: 1,
            });
        }
        assert!(sink.finish().is_err());
    }

    #[test]
    fn a_log_file_takes_its_name_only_when_the_log_is_whole() {
        let dir = std::env::temp_dir().join(format!("wb-log-file-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("log.wbpl");
        std::fs::write(&path, b"earlier").expect("earlier");
        let out = Pending::create(&path).expect("create");
        let mut sink = LogSink::start(LogOut {
            out: Box::new(out),
            abort: None,
        })
        .expect("start");
        sink.push(&Record::Lost { first: 0, count: 1 });
        assert_eq!(std::fs::read(&path).expect("read"), b"earlier");
        assert_eq!(sink.finish().ok(), Some(1));
        let bytes = std::fs::read(&path).expect("read");
        let entries = std::fs::read_dir(&dir).expect("ls").count();
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(Reader::new(&bytes[..]).expect("header").count(), 1);
        assert_eq!(entries, 1);
    }
}
