//! The roles of one side on their threads: started when the session says so, watched from
//! the driver's loop (live intervals and progress, senders done, all done), stopped or told
//! the peer's counts when the session says so. What the roles' completion means for the
//! protocol is the session's business ([`crate::control`]).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, Receiver};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use wirebench_proto::results::{IntervalRecord, Role, SideReport};
use wirebench_proto::spec::{Direction, Protocol, TestSpec};

use crate::role::{self, DataSocket, RoleParams};
use crate::{EngineError, Shared};

/// Live view of a running session, for progress display.
pub trait Watch {
    /// Called about every 50 ms with the side's live byte and message totals.
    fn progress(&mut self, _elapsed: Duration, _bytes: u64, _messages: u64) {}
    /// Called once for each data connection (or UDP data socket) this side opened, as it
    /// opens: its stream's index (as [`Watch::stream_interval`] numbers them), its local
    /// address and the peer's. Not called for a user-space stack's connections.
    fn connected(&mut self, _stream: u32, _local: SocketAddr, _remote: SocketAddr) {}
    /// Called for each interval the data threads closed, summed over the streams of `role`.
    fn interval(&mut self, _role: Role, _rec: &IntervalRecord) {}
    /// Called for each interval one stream's data thread closed (`stream`: its index among
    /// the side's streams; with `--bidir` the reverse ones follow the forward ones), before
    /// the sum it is part of.
    fn stream_interval(&mut self, _role: Role, _stream: u32, _rec: &IntervalRecord) {}
    /// Called for each interval the peer closed and sent live (the server's view: for a
    /// receiver, what arrived, with loss and jitter), summed over the streams of `role`.
    fn peer_interval(&mut self, _role: Role, _rec: &IntervalRecord) {}
    /// Called once as the roles end, for each open-loop UDP prober of this side (rrul's
    /// probe): every request it sent and what became of it.
    fn probes(&mut self, _log: crate::ProbeLog) {}
    /// Called for each interval one of the peer's streams closed and sent live, before
    /// their sum (only when the test's `live_streams` asked for them).
    fn peer_stream_interval(&mut self, _role: Role, _stream: u32, _rec: &IntervalRecord) {}
    /// Asked every driver round (about every 50 ms): whether the user wants the test
    /// stopped (Ctrl-C). Once true, the client stops sending, exchanges what was measured
    /// and returns the results.
    fn interrupted(&mut self) -> bool {
        false
    }
}

/// One interval a server's test closed, as [`ServerWatch`] sees it.
#[derive(Debug, Clone, Copy)]
pub struct ServerInterval<'a> {
    /// The test's id, as the server log names it (a hash of its secret cookie).
    pub test: u64,
    /// The client's address.
    pub peer: std::net::SocketAddr,
    /// The test.
    pub spec: &'a wirebench_proto::spec::TestSpec,
    /// What the server does in the stream the interval belongs to.
    pub role: Role,
    /// The server's own figures of the interval (a receiver's: what arrived, loss, jitter).
    pub record: &'a IntervalRecord,
}

/// What a server shows of its tests as they run (`serve`'s live lines): called on the
/// test's control thread once per interval, with the records already collected for the
/// client, so nothing is added to the data path.
#[derive(Clone)]
pub struct ServerWatch(pub std::sync::Arc<dyn Fn(&ServerInterval<'_>) + Send + Sync>);

impl std::fmt::Debug for ServerWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ServerWatch")
    }
}

/// A watcher that ignores everything (a server whose peer takes no live intervals: iperf3).
pub struct Quiet;
impl Watch for Quiet {}

/// A watcher that keeps the intervals its side closed, for the driver to send to the peer:
/// the sums, and with `streams` each stream's before them.
#[derive(Default)]
pub(crate) struct Collect {
    /// The intervals closed: role, stream (`None`: the sum) and counters.
    pub(crate) closed: Vec<(Role, Option<u32>, IntervalRecord)>,
    /// Keep each stream's intervals too.
    pub(crate) streams: bool,
    /// The side's messages so far (sent and received), as of the last look.
    pub(crate) messages: u64,
}
impl Watch for Collect {
    fn progress(&mut self, _elapsed: Duration, _bytes: u64, messages: u64) {
        self.messages = messages;
    }
    fn interval(&mut self, role: Role, rec: &IntervalRecord) {
        self.closed.push((role, None, *rec));
    }
    fn stream_interval(&mut self, role: Role, stream: u32, rec: &IntervalRecord) {
        if self.streams {
            self.closed.push((role, Some(stream), *rec));
        }
    }
}

/// What the roles did since the last look.
#[derive(Debug)]
pub(crate) enum RoleEvent {
    /// Every sending stream is done (reported once, only on a side with both roles):
    /// `(stream, messages sent)`.
    SendersDone(Vec<(u32, u64)>),
    /// Every role is done: the side's merged report (reported once).
    Done(Box<SideReport>),
}

/// Sums the interval records of several streams into one record per interval, in order, as
/// each interval has arrived from every stream.
struct IntervalSum {
    streams: usize,
    next: Vec<usize>,
    acc: Vec<(IntervalRecord, usize)>,
    emitted: usize,
}

impl IntervalSum {
    /// A sum over `streams` streams, numbered below `total`.
    fn new(streams: usize, total: usize) -> Self {
        Self {
            streams,
            next: vec![0; total],
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
        crate::stream_sum::add_interval(&mut self.acc[i].0, rec);
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

/// The other role.
fn other(role: Role) -> Role {
    match role {
        Role::Sender => Role::Receiver,
        Role::Receiver => Role::Sender,
    }
}

/// One side's running roles.
pub(crate) struct Roles {
    spec: TestSpec,
    roles: Vec<Role>,
    /// Each role of this side with the sum of its streams' intervals, shown live (with
    /// `--bidir` both: forward first).
    shared: Vec<Arc<Shared>>,
    threads: Vec<JoinHandle<SideReport>>,
    rx: Receiver<(u32, IntervalRecord)>,
    sums: Vec<(Role, IntervalSum)>,
    start: Instant,
    side_stop: Arc<AtomicBool>,
    /// `SendersDone` is still to be reported (a side with both roles only).
    senders_pending: bool,
    done: bool,
    /// The host's UDP checksum errors when a side receiving UDP started (read again at its
    /// end: datagrams corrupted on the way never reach a socket to be counted).
    checksum_errors_at_start: Option<u64>,
}

impl Roles {
    /// Starts each stream's role on a thread of its own. Live intervals are each role's,
    /// summed over the streams of that role.
    pub(crate) fn start(streams: Vec<(Role, DataSocket, RoleParams)>) -> Result<Self, EngineError> {
        let Some(first) = streams.first() else {
            return Err(EngineError::Setup("no data stream".into()));
        };
        let shown = first.0;
        let spec = first.2.spec.clone();
        let roles: Vec<Role> = streams.iter().map(|s| s.0).collect();
        let (start, epoch) = crate::sys::clock_pair();
        let side_stop = Arc::new(AtomicBool::new(false));
        let (tx, rx) = channel();
        let mut shared = Vec::with_capacity(streams.len());
        let mut threads = Vec::with_capacity(streams.len());
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
                    return Err(EngineError::io("starting a data thread", e));
                }
            }
        }
        let both = roles.contains(&Role::Sender) && roles.contains(&Role::Receiver);
        let checksum_errors_at_start = (spec.protocol == Protocol::Udp
            && roles.contains(&Role::Receiver))
        .then(crate::kernel_counters::udp_checksum_errors)
        .flatten();
        let mut sums = Vec::new();
        for role in [shown, other(shown)] {
            let n = roles.iter().filter(|r| **r == role).count();
            if n > 0 {
                sums.push((role, IntervalSum::new(n, roles.len())));
            }
        }
        Ok(Self {
            spec,
            roles,
            shared,
            threads,
            rx,
            sums,
            start,
            side_stop,
            senders_pending: both,
            done: false,
            checksum_errors_at_start,
        })
    }

    /// Ends every role at once.
    pub(crate) fn stop(&self) {
        self.side_stop.store(true, Ordering::Relaxed);
    }

    /// The peer's senders' final counts, for this side's receivers of those streams.
    pub(crate) fn peer_counts(&self, counts: &[(u32, u64)]) {
        for (stream, messages) in counts {
            let i = *stream as usize;
            if self.roles.get(i) == Some(&Role::Receiver) {
                if let Some(sh) = self.shared.get(i) {
                    sh.peer_done(*messages);
                }
            }
        }
    }

    /// Passes intervals and progress to `watch`; returns what happened since the last look.
    pub(crate) fn poll(&mut self, watch: &mut dyn Watch) -> Vec<RoleEvent> {
        let mut events = Vec::new();
        if self.done {
            return events;
        }
        self.forward(watch);
        let total = |f: fn(&Shared) -> &std::sync::atomic::AtomicU64| {
            self.shared
                .iter()
                .map(|sh| f(sh).load(Ordering::Relaxed))
                .sum::<u64>()
        };
        watch.progress(
            self.start.elapsed(),
            total(|sh| &sh.bytes),
            total(|sh| &sh.messages),
        );
        // A side that both sends and receives (--bidir) tells its peer the senders' counts
        // as soon as they are done: the peer's receivers need them to finish, and this
        // side's final report waits for its own receivers, which wait for the peer's counts.
        if self.senders_pending
            && self
                .threads
                .iter()
                .zip(&self.roles)
                .all(|(t, r)| *r != Role::Sender || t.is_finished())
        {
            self.senders_pending = false;
            let counts = self
                .shared
                .iter()
                .zip(&self.roles)
                .enumerate()
                .filter(|(_, (_, r))| **r == Role::Sender)
                .map(|(i, (sh, _))| (i as u32, sh.messages.load(Ordering::Relaxed)))
                .collect();
            events.push(RoleEvent::SendersDone(counts));
        }
        if self.threads.iter().all(|t| t.is_finished()) {
            self.done = true;
            events.push(RoleEvent::Done(Box::new(self.finish(watch))));
        }
        events
    }

    fn forward(&mut self, watch: &mut dyn Watch) {
        for (stream, rec) in self.rx.try_iter() {
            let Some(role) = self.roles.get(stream as usize) else {
                continue;
            };
            if let Some((role, sum)) = self.sums.iter_mut().find(|(r, _)| r == role) {
                watch.stream_interval(*role, stream, &rec);
                for done in sum.add(stream as usize, &rec) {
                    watch.interval(*role, &done);
                }
            }
        }
    }

    /// Joins the threads and merges their reports (for `--bidir`, each direction apart).
    fn finish(&mut self, watch: &mut dyn Watch) -> SideReport {
        let outputs: Vec<(SideReport, crate::Hists)> = std::mem::take(&mut self.threads)
            .into_iter()
            .zip(&self.shared)
            .map(|(t, sh)| {
                let report = t.join().unwrap_or_else(|_| SideReport {
                    error: Some("a data thread failed".into()),
                    error_kind: Some(wirebench_proto::error_kind::ErrorKind::Internal),
                    ..SideReport::default()
                });
                let hists = sh.hists.lock().map(|mut h| std::mem::take(&mut *h));
                (report, hists.unwrap_or_default())
            })
            .collect();
        let mut outputs = outputs;
        for (_, h) in &mut outputs {
            if let Some(log) = h.probes.take() {
                watch.probes(log);
            }
        }
        let local = if self.spec.direction == Direction::Bidir {
            // The first `streams` go forward, the rest in reverse: each half merged apart.
            let mut outputs = outputs;
            let reverse = outputs.split_off((self.spec.streams as usize).min(outputs.len()));
            let mut local = crate::stream_sum::sum_streams(outputs);
            local.reverse = Some(Box::new(crate::stream_sum::sum_streams(reverse)));
            local
        } else {
            crate::stream_sum::sum_streams(outputs)
        };
        let mut local = local;
        self.add_checksum_errors(&mut local);
        self.forward(watch);
        for (role, sum) in &mut self.sums {
            for rec in sum.drain(1) {
                watch.interval(*role, &rec);
            }
        }
        local
    }
}

impl Roles {
    /// Gives the receiving half of `local` (its own counts, or with `--bidir` perhaps its
    /// reverse's) the host's UDP checksum errors over the test.
    fn add_checksum_errors(&self, local: &mut SideReport) {
        if self.checksum_errors_at_start.is_none() {
            return;
        }
        let errors = crate::kernel_counters::since(
            self.checksum_errors_at_start,
            crate::kernel_counters::udp_checksum_errors(),
        );
        let udp = match local.udp.as_mut() {
            Some(udp) => Some(udp),
            None => local.reverse.as_mut().and_then(|r| r.udp.as_mut()),
        };
        if let Some(udp) = udp {
            udp.checksum_errors = errors;
        }
    }
}

impl Drop for Roles {
    fn drop(&mut self) {
        // A driver that leaves early (an error) must not leave data threads running.
        self.stop();
        for t in std::mem::take(&mut self.threads) {
            let _ = t.join();
        }
    }
}
