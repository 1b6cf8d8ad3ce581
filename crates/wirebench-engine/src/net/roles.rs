//! What both sides do once the data streams are set up: run the data role on its own thread,
//! serve the control channel meanwhile, exchange reports at the end.

use std::sync::atomic::Ordering;
use std::sync::mpsc::{channel, Receiver};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use wirebench_proto::control::Message;
use wirebench_proto::results::{IntervalRecord, Role, SideReport};
use wirebench_proto::spec::{Direction, TestSpec};

use crate::net::channel::Channel;
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

/// The peer's report of stream `i` (for `--bidir`: within its reverse part for the second
/// half of the streams), if it sent one.
fn peer_stream<'a>(report: &'a SideReport, spec: &TestSpec, i: usize) -> Option<&'a SideReport> {
    let per_way = spec.streams as usize;
    let (part, j) = if spec.direction == Direction::Bidir && i >= per_way {
        (report.reverse.as_deref()?, i - per_way)
    } else {
        (report, i)
    };
    if part.streams.is_empty() {
        (j == 0).then_some(part)
    } else {
        part.streams.get(j)
    }
}

/// Runs each stream's role on its socket, serving `ch` until both sides' reports are
/// exchanged. Each stream runs on a thread of its own; the report sent to the peer is the
/// streams' merge, with each stream's own report inside it when there are several (and for
/// `--bidir`, the reverse direction's streams merged apart, in `reverse`). Live intervals
/// are those of the first stream's role.
pub fn drive(
    ch: &mut Channel,
    streams: Vec<(Role, DataSocket, RoleParams)>,
    watch: &mut dyn Watch,
    shutdown: Option<&std::sync::atomic::AtomicBool>,
) -> Outcome {
    let n = streams.len();
    let Some(first) = streams.first() else {
        return Outcome {
            local: SideReport::default(),
            peer: None,
            error: Some("no data stream".into()),
        };
    };
    let role = first.0;
    let spec = first.2.spec.clone();
    let shown = streams.iter().filter(|s| s.0 == role).count();
    let roles: Vec<Role> = streams.iter().map(|s| s.0).collect();
    let drain = Duration::from_nanos(spec.drain_ns);
    let start = std::time::Instant::now();
    let epoch = crate::sys::unix_now_ns();
    let side_stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (tx, rx) = channel();
    let mut shared = Vec::with_capacity(n);
    let mut threads = Vec::with_capacity(n);
    for (i, (stream_role, sock, mut params)) in streams.into_iter().enumerate() {
        params.intervals = Some(tx.clone());
        let sh = Arc::new(Shared::new(start, epoch, Arc::clone(&side_stop)));
        shared.push(Arc::clone(&sh));
        let spawned = thread::Builder::new()
            .name(format!("wirebench-{stream_role:?}-{i}").to_lowercase())
            .spawn(move || role::run(stream_role, sock, params, &sh));
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
    let mut sums = IntervalSum::new(shown);
    let mut peer = None;
    let mut error = None;
    let mut channel_ok = true;
    let forward =
        |rx: &Receiver<(u32, IntervalRecord)>, sums: &mut IntervalSum, watch: &mut dyn Watch| {
            for (stream, rec) in rx.try_iter() {
                // Streams of the shown role come first (forward before reverse).
                if roles.get(stream as usize) != Some(&role) {
                    continue;
                }
                for done in sums.add(stream as usize, &rec) {
                    watch.interval(role, &done);
                }
            }
        };
    // A side that both sends and receives (--bidir) tells its peer the senders' counts as
    // soon as they are done: the peer's receivers need them to finish, and this side's
    // final report waits for its own receivers, which wait for the peer's counts.
    let both_roles = roles.contains(&Role::Sender) && roles.contains(&Role::Receiver);
    let mut counts_sent = !both_roles;
    let mut shut = false;
    while !threads.iter().all(|t| t.is_finished()) {
        if !shut && shutdown.is_some_and(|f| f.load(Ordering::Relaxed)) {
            // The server is going away: tell the client why, and stop.
            shut = true;
            error.get_or_insert("the server is shutting down".to_string());
            let _ = ch.send(&Message::Error {
                reason: "the server is shutting down".into(),
            });
            side_stop.store(true, Ordering::Relaxed);
            channel_ok = false;
        }
        if !counts_sent
            && channel_ok
            && threads
                .iter()
                .zip(&roles)
                .all(|(t, r)| *r != Role::Sender || t.is_finished())
        {
            let counts = shared
                .iter()
                .zip(&roles)
                .enumerate()
                .filter(|(_, (_, r))| **r == Role::Sender)
                .map(|(i, (sh, _))| (i as u32, sh.messages.load(Ordering::Relaxed)))
                .collect();
            if let Err(e) = ch.send(&Message::SenderCounts { counts }) {
                error.get_or_insert(e.to_string());
                side_stop.store(true, Ordering::Relaxed);
                channel_ok = false;
            }
            counts_sent = true;
        }
        if channel_ok {
            match ch.recv(TICK) {
                Ok(None) => {}
                Ok(Some(Message::SenderCounts { counts })) => {
                    for (stream, messages) in counts {
                        let i = stream as usize;
                        if roles.get(i) == Some(&Role::Receiver) {
                            if let Some(sh) = shared.get(i) {
                                sh.peer_done(messages);
                            }
                        }
                    }
                }
                Ok(Some(Message::Done { report })) => {
                    // Each stream's receiver waits for its own sender's count; a report
                    // that does not list every stream is a broken peer, not a slow one.
                    for (i, sh) in shared.iter().enumerate() {
                        if roles[i] != Role::Receiver {
                            continue;
                        }
                        match peer_stream(&report, &spec, i) {
                            Some(r) => sh.peer_done(r.messages),
                            None => {
                                error.get_or_insert(format!(
                                    "protocol error: the peer's report has no stream {i}"
                                ));
                                side_stop.store(true, Ordering::Relaxed);
                            }
                        }
                    }
                    peer = Some(*report);
                }
                Ok(Some(Message::Error { reason })) => {
                    // The peer's reason is the first cause; what follows (it closes) is not.
                    error.get_or_insert(format!("peer reported: {reason}"));
                    side_stop.store(true, Ordering::Relaxed);
                    channel_ok = false;
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
                    error.get_or_insert(e.to_string());
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
    let local = if spec.direction == Direction::Bidir {
        // The first `streams` go forward, the rest in reverse: each half merged on its own.
        let mut outputs = outputs;
        let reverse = outputs.split_off((spec.streams as usize).min(outputs.len()));
        let mut local = crate::merge::merge(outputs);
        local.reverse = Some(Box::new(crate::merge::merge(reverse)));
        local
    } else {
        crate::merge::merge(outputs)
    };
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
        let deadline = std::time::Instant::now() + drain + REPORT_GRACE;
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match ch.recv(left) {
                Ok(Some(Message::Done { report })) => peer = Some(*report),
                // The peer's senders finishing after this side's receivers (TCP ends at EOF).
                Ok(Some(Message::SenderCounts { .. })) if !left.is_zero() => continue,
                Ok(Some(Message::Error { reason })) => {
                    error.get_or_insert(format!("peer reported: {reason}"));
                }
                Ok(Some(other)) => {
                    error
                        .get_or_insert(format!("unexpected control message at the end: {other:?}"));
                }
                Ok(None) => {
                    error.get_or_insert("timed out waiting for the peer's report".into());
                }
                Err(e) => {
                    error.get_or_insert(e.to_string());
                }
            }
            break;
        }
    }
    Outcome { local, peer, error }
}
