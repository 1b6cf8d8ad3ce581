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

/// Runs `role` on `sock`, serving `ch` until both sides' reports are exchanged.
pub fn drive(
    ch: &mut Channel,
    role: Role,
    sock: DataSocket,
    mut params: RoleParams,
    watch: &mut dyn Watch,
) -> Outcome {
    let sh = Arc::new(Shared::new());
    let (tx, rx) = channel();
    params.intervals = Some(tx);
    let drain = Duration::from_nanos(params.spec.drain_ns);
    let data = {
        let sh = Arc::clone(&sh);
        thread::Builder::new()
            .name(format!("wirebench-{role:?}").to_lowercase())
            .spawn(move || role::run(role, sock, params, &sh))
    };
    let data = match data {
        Ok(h) => h,
        Err(e) => {
            return Outcome {
                local: SideReport::default(),
                peer: None,
                error: Some(format!("cannot start the data thread: {e}")),
            }
        }
    };
    let mut peer = None;
    let mut error = None;
    let mut channel_ok = true;
    let forward = |rx: &Receiver<IntervalRecord>, watch: &mut dyn Watch| {
        for rec in rx.try_iter() {
            watch.interval(role, &rec);
        }
    };
    while !data.is_finished() {
        if channel_ok {
            match ch.recv(TICK) {
                Ok(None) => {}
                Ok(Some(Message::Done { report })) => {
                    if role == Role::Receiver {
                        sh.peer_done(report.messages);
                    }
                    peer = Some(*report);
                }
                Ok(Some(Message::Error { reason })) => {
                    error = Some(format!("peer reported: {reason}"));
                    sh.stop.store(true, Ordering::Relaxed);
                }
                Ok(Some(other)) => {
                    error = Some(format!(
                        "unexpected control message during the test: {other:?}"
                    ));
                    let _ = ch.send(&Message::Error {
                        reason: "unexpected control message during the test".into(),
                    });
                    sh.stop.store(true, Ordering::Relaxed);
                    channel_ok = false;
                }
                Err(e) => {
                    error = Some(e.to_string());
                    sh.stop.store(true, Ordering::Relaxed);
                    channel_ok = false;
                }
            }
        } else {
            thread::sleep(TICK);
        }
        forward(&rx, watch);
        watch.progress(
            sh.start.elapsed(),
            sh.bytes.load(Ordering::Relaxed),
            sh.messages.load(Ordering::Relaxed),
        );
    }
    let local = match data.join() {
        Ok(r) => r,
        Err(_) => SideReport {
            error: Some("the data thread failed".into()),
            ..SideReport::default()
        },
    };
    forward(&rx, watch);
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
