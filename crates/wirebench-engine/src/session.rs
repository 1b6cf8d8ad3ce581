//! What both sides do once the data streams are set up: run the data role on its own thread,
//! serve the control channel meanwhile, exchange reports at the end.

use std::sync::atomic::Ordering;
use std::sync::mpsc::{channel, Receiver};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use wirebench_proto::control::Message;
use wirebench_proto::results::{IntervalRecord, Role, SideReport};

use crate::channel::Channel;
use crate::role::{self, DataSocket, RoleParams};
use crate::Shared;

/// How often the control thread looks at the channel and the data thread while a test runs.
const TICK: Duration = Duration::from_millis(50);

/// Extra time the sender waits for the receiver's report beyond the drain time.
const REPORT_GRACE: Duration = Duration::from_secs(10);

/// What a finished session measured.
pub struct Outcome {
    /// This side's report.
    pub local: SideReport,
    /// The peer's report, if it arrived.
    pub peer: Option<SideReport>,
    /// Why the session failed, if it did.
    pub error: Option<String>,
}

/// Live view of a running session, for progress display.
pub trait Watch {
    /// Called about every 50 ms with the side's live byte and message totals.
    fn progress(&mut self, _elapsed: Duration, _bytes: u64, _messages: u64) {}
    /// Called for each interval the data thread closed.
    fn interval(&mut self, _role: Role, _rec: &IntervalRecord) {}
}

/// A watcher that ignores everything (the server).
pub struct Quiet;
impl Watch for Quiet {}

/// Sums the interval records of several streams into one record per interval, in order, as
/// each interval has arrived from every stream.
struct IntervalSum {
    streams: usize,
    next: Vec<usize>,
    acc: Vec<(IntervalRecord, usize)>,
    emitted: usize,
}

impl IntervalSum {
    fn new(streams: usize) -> Self {
        Self {
            streams,
            next: vec![0; streams],
            acc: Vec::new(),
            emitted: 0,
        }
    }

    /// Adds stream `s`'s next record; returns the records now complete.
    fn add(&mut self, s: usize, rec: &IntervalRecord) -> Vec<IntervalRecord> {
        let Some(k) = self.next.get_mut(s) else {
            return Vec::new();
        };
        let i = *k;
        *k += 1;
        if self.acc.len() <= i {
            self.acc.resize(i + 1, (IntervalRecord::default(), 0));
        }
        crate::merge::add_interval(&mut self.acc[i].0, rec);
        self.acc[i].1 += 1;
        self.drain(self.streams)
    }

    /// The records complete from `need` streams (all, or at the end: whatever came).
    fn drain(&mut self, need: usize) -> Vec<IntervalRecord> {
        let mut out = Vec::new();
        while self.emitted < self.acc.len() && self.acc[self.emitted].1 >= need.max(1) {
            out.push(self.acc[self.emitted].0);
            self.emitted += 1;
        }
        out
    }
}

/// Runs `role` on each stream's socket, serving `ch` until both sides' reports are
/// exchanged. Each stream runs on a thread of its own; the report sent to the peer is the
/// streams' merge, with each stream's own report inside it when there are several.
pub fn drive(
    ch: &mut Channel,
    role: Role,
    streams: Vec<(DataSocket, RoleParams)>,
    watch: &mut dyn Watch,
) -> Outcome {
    let n = streams.len();
    let drain = Duration::from_nanos(streams.first().map_or(0, |s| s.1.spec.drain_ns));
    let start = std::time::Instant::now();
    let epoch = crate::sys::unix_now_ns();
    let side_stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (tx, rx) = channel();
    let mut shared = Vec::with_capacity(n);
    let mut threads = Vec::with_capacity(n);
    for (i, (sock, mut params)) in streams.into_iter().enumerate() {
        params.intervals = Some(tx.clone());
        let sh = Arc::new(Shared::new(start, epoch, Arc::clone(&side_stop)));
        shared.push(Arc::clone(&sh));
        let spawned = thread::Builder::new()
            .name(format!("wirebench-{role:?}-{i}").to_lowercase())
            .spawn(move || role::run(role, sock, params, &sh));
        match spawned {
            Ok(h) => threads.push(h),
            Err(e) => {
                side_stop.store(true, Ordering::Relaxed);
                for h in threads {
                    let _ = h.join();
                }
                return Outcome {
                    local: SideReport::default(),
                    peer: None,
                    error: Some(format!("cannot start a data thread: {e}")),
                };
            }
        }
    }
    drop(tx);
    let mut sums = IntervalSum::new(n);
    let mut peer = None;
    let mut error = None;
    let mut channel_ok = true;
    let forward =
        |rx: &Receiver<(u32, IntervalRecord)>, sums: &mut IntervalSum, watch: &mut dyn Watch| {
            for (stream, rec) in rx.try_iter() {
                for done in sums.add(stream as usize, &rec) {
                    watch.interval(role, &done);
                }
            }
        };
    while !threads.iter().all(|t| t.is_finished()) {
        if channel_ok {
            match ch.recv(TICK) {
                Ok(None) => {}
                Ok(Some(Message::Done { report })) => {
                    if role == Role::Receiver {
                        // Each stream's receiver waits for its own sender's count.
                        if report.streams.is_empty() {
                            if let Some(sh) = shared.first() {
                                sh.peer_done(report.messages);
                            }
                        } else {
                            for (sh, r) in shared.iter().zip(&report.streams) {
                                sh.peer_done(r.messages);
                            }
                        }
                    }
                    peer = Some(*report);
                }
                Ok(Some(Message::Error { reason })) => {
                    error = Some(format!("peer reported: {reason}"));
                    side_stop.store(true, Ordering::Relaxed);
                }
                Ok(Some(other)) => {
                    error = Some(format!(
                        "unexpected control message during the test: {other:?}"
                    ));
                    let _ = ch.send(&Message::Error {
                        reason: "unexpected control message during the test".into(),
                    });
                    side_stop.store(true, Ordering::Relaxed);
                    channel_ok = false;
                }
                Err(e) => {
                    error = Some(e.to_string());
                    side_stop.store(true, Ordering::Relaxed);
                    channel_ok = false;
                }
            }
        } else {
            thread::sleep(TICK);
        }
        forward(&rx, &mut sums, watch);
        let total = |f: fn(&Shared) -> &std::sync::atomic::AtomicU64| {
            shared
                .iter()
                .map(|sh| f(sh).load(Ordering::Relaxed))
                .sum::<u64>()
        };
        watch.progress(
            start.elapsed(),
            total(|sh| &sh.bytes),
            total(|sh| &sh.messages),
        );
    }
    let outputs: Vec<(SideReport, crate::Hists)> = threads
        .into_iter()
        .zip(&shared)
        .map(|(t, sh)| {
            let report = t.join().unwrap_or_else(|_| SideReport {
                error: Some("a data thread failed".into()),
                ..SideReport::default()
            });
            let hists = sh.hists.lock().map(|mut h| std::mem::take(&mut *h));
            (report, hists.unwrap_or_default())
        })
        .collect();
    let local = crate::merge::merge(outputs);
    forward(&rx, &mut sums, watch);
    for rec in sums.drain(1) {
        watch.interval(role, &rec);
    }
    if channel_ok {
        if let Err(e) = ch.send(&Message::Done {
            report: Box::new(local.clone()),
        }) {
            error.get_or_insert(e.to_string());
            channel_ok = false;
        }
    }
    if channel_ok && peer.is_none() {
        match ch.recv(drain + REPORT_GRACE) {
            Ok(Some(Message::Done { report })) => peer = Some(*report),
            Ok(Some(Message::Error { reason })) => {
                error.get_or_insert(format!("peer reported: {reason}"));
            }
            Ok(Some(other)) => {
                error.get_or_insert(format!("unexpected control message at the end: {other:?}"));
            }
            Ok(None) => {
                error.get_or_insert("timed out waiting for the peer's report".into());
            }
            Err(e) => {
                error.get_or_insert(e.to_string());
            }
        }
    }
    Outcome { local, peer, error }
}
