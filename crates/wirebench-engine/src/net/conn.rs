//! The server's driver for one accepted connection: runs its [`ServerSession`], carries out
//! what it asks (route a data connection, admit a test, set up arriving streams, start and
//! stop the roles), and logs how it ended.

use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver};
use std::sync::Arc;
use std::time::Instant;

use wirebench_proto::control::PACKET_LOG_STREAM;
use wirebench_proto::header::{SeqToken, UdpHello};
use wirebench_proto::results::{Datapath, Results, Role, SideReport};
use wirebench_proto::spec::{Direction, Mechanism, TestSpec};

use super::client::tool;
use super::roles::{Collect, RoleEvent, Roles};
use super::shared::{log, log_refused, q, Pending, ServerConfig, State};
use super::user_accept::{self, Waiting};
use super::{Pump, SETUP_TICK, TICK};
use crate::control::admission::{PendingId, Refusal, Ticket};
use crate::control::reclaim::UseWindow;
use crate::control::server::{ServerAction, ServerEvent, ServerParams, ServerSession};
use crate::control::{Outcome, RunAction, SETUP_TIMEOUT};
use crate::file::{FileSink, FileSource};
use crate::packet_log_writer::LogOut;
use crate::quic::Congestion;
use crate::role::limit::{MoveLimit, TestLimits};
use crate::role::{CrrPart, DataSocket, FilePart, RoleParams};
use crate::sys::udp::Offloads;
use crate::sys::{host_id, same_clock, tcp_datapath, udp_datapath};
use crate::{EngineError, ErrorKind, SessionError};

/// A fresh session for a connection just accepted (none if no nonce can be drawn).
pub(super) fn new_session(state: &State) -> Option<ServerSession> {
    new_bound_session(state, None)
}

/// As [`new_session`], its pre-shared key bound to the TLS session that exported
/// `export` (a QUIC connection's), when given.
pub(super) fn new_bound_session(state: &State, export: Option<&[u8]>) -> Option<ServerSession> {
    let nonce = crate::auth::nonce().ok()?;
    let psk = state.cfg.psk.as_ref().map(|k| match export {
        Some(e) => k.bound(e),
        None => k.clone(),
    });
    let params = ServerParams {
        limits: state.spec_limits(),
        psk,
        nonce,
        tool: tool(),
        host_id: host_id(),
        udp_port: state.port,
    };
    Some(ServerSession::new(Instant::now(), params))
}

/// Runs a test whose handshake the pending stage's loop finished (its session has just
/// asked for [`ServerAction::Admit`]): admits or refuses it, carries out what its session
/// asks, logs how it ended. One thread per test from here on; none before.
pub(super) fn admitted(
    conn: TcpStream,
    session: ServerSession,
    id: PendingId,
    client_host: String,
    state: &State,
) {
    let Ok((peer, local)) = super::ends(&conn) else {
        state.leave_pending(id);
        return;
    };
    let Ok(pump) = Pump::new(conn) else {
        state.leave_pending(id);
        return;
    };
    run_admitted(pump, peer, local, session, Some(id), client_host, state);
}

/// As [`admitted`], over any control stream (a QUIC test's comes from no pending stage).
pub(super) fn run_admitted<S: super::ControlIo>(
    mut pump: Pump<S>,
    peer: SocketAddr,
    local: SocketAddr,
    session: ServerSession,
    id: Option<PendingId>,
    client_host: String,
    state: &State,
) {
    let mut served = Served {
        state,
        session,
        id,
        peer,
        local,
        client_host,
        test: None,
        roles: None,
        usage: None,
    };
    served.on_action(ServerAction::Admit);
    loop {
        while let Some(action) = served.session.poll_action() {
            served.on_action(action);
        }
        if served.session.is_closed() {
            break;
        }
        let tick = if served.session.awaits_streams() {
            SETUP_TICK
        } else {
            TICK
        };
        pump.round(&mut served.session, tick);
        served.after_round();
    }
    if let Some(id) = served.id.take() {
        state.leave_pending(id);
    }
    served.finish();
}

/// An admitted connection's test as its driver holds it between rounds: the session
/// decides, this carries it out on the server's state, the streams and the roles.
struct Served<'a> {
    state: &'a State,
    session: ServerSession,
    /// Its place in the pending stage, left once admitted or refused (none over QUIC).
    id: Option<PendingId>,
    peer: SocketAddr,
    local: SocketAddr,
    /// The client's host identity (one clock or two).
    client_host: String,
    test: Option<Test<'a>>,
    roles: Option<Roles>,
    /// Whether the running test moves enough to keep its memory (`control::reclaim`).
    usage: Option<UseWindow>,
}

impl Served<'_> {
    /// Carries out one of the session's actions.
    fn on_action(&mut self, action: ServerAction) {
        let now = Instant::now();
        match action {
            // The handshake loop saw these (they come before Admit).
            ServerAction::Identified { .. } | ServerAction::Attach { .. } => {}
            ServerAction::Admit => {
                if let Some(id) = self.id.take() {
                    self.state.leave_pending(id);
                }
                let event = match admit(self.state, &self.session, self.peer, self.local) {
                    Ok(t) => {
                        let event = ServerEvent::Admitted {
                            cookie: t.slot.cookie,
                            bytes: t.bytes,
                            tcp_port: t.tcp_port,
                        };
                        self.test = Some(t);
                        event
                    }
                    Err(r) => ServerEvent::Refused(r),
                };
                self.session.handle_event(now, event);
            }
            ServerAction::StreamsReady => {
                if let Some(t) = &self.test {
                    t.slot.unlist();
                }
            }
            ServerAction::StartRoles => {
                self.state.metrics.tests_started.inc();
                let Some(t) = &mut self.test else { return };
                let deadline_ns = self.session.role_deadline_ns();
                match Roles::start(t.roles(&self.client_host, deadline_ns)) {
                    Ok(r) => {
                        self.roles = Some(r);
                        self.usage = Some(UseWindow::new(now, t.spec.total_streams()));
                    }
                    Err(e) => {
                        let (reason, kind) = (e.to_string(), e.kind());
                        self.session
                            .handle_event(now, ServerEvent::RolesFailed { reason, kind });
                    }
                }
            }
            ServerAction::Run(RunAction::PeerCounts(counts)) => {
                if let Some(r) = &self.roles {
                    r.peer_counts(&counts);
                }
            }
            ServerAction::Run(RunAction::StopRoles) => {
                if let Some(r) = &self.roles {
                    r.stop();
                }
            }
        }
    }

    /// Tells the session what happened since the last round: streams that arrived, the
    /// server's shutdown, the roles' intervals and ends.
    fn after_round(&mut self) {
        if let Some(t) = &mut self.test {
            for event in t.arrivals() {
                self.session.handle_event(Instant::now(), event);
            }
        }
        if self.state.shutdown.load(Ordering::SeqCst) {
            // The server is going away: the session tells the client why, once, and stops.
            self.session
                .handle_event(Instant::now(), ServerEvent::Shutdown);
        }
        let Some(r) = &mut self.roles else { return };
        let mut closed = Collect {
            streams: self
                .test
                .as_ref()
                .is_some_and(|t| t.spec.live_streams && t.spec.streams > 1),
            ..Collect::default()
        };
        let events = r.poll(&mut closed);
        self.watch_use(closed.messages);
        // The client shows the receiver's intervals live; the server's watch, its own sums.
        for (role, stream, rec) in closed.closed {
            if let (Some(w), Some(t), None) = (&self.state.cfg.watch, &self.test, stream) {
                (w.0)(&super::roles::ServerInterval {
                    test: super::shared::test_id(t.slot.cookie),
                    peer: self.peer,
                    spec: &t.spec,
                    role,
                    record: &rec,
                });
            }
            self.session
                .local_interval(Instant::now(), role, rec, stream);
        }
        for event in events {
            let event = match event {
                RoleEvent::SendersDone(counts) => ServerEvent::SendersDone { counts },
                RoleEvent::Done(report) => {
                    // A limit that ended a stream is the test's first cause: the client
                    // hears it before the reports.
                    if let Some((kind, reason)) = limit_of(&report) {
                        let limit = ServerEvent::Limit { kind, reason };
                        self.session.handle_event(Instant::now(), limit);
                    }
                    ServerEvent::RolesDone { report }
                }
            };
            self.session.handle_event(Instant::now(), event);
        }
        if let (Some(frames), Some(t)) = (self.session.take_last_words(), &self.test) {
            if let Ok(mut shelf) = self.state.shelf.lock() {
                shelf.put(Instant::now(), t.slot.cookie, self.peer.ip(), frames);
            }
        }
    }

    /// Tells admission when the test turns idle or busy; ends it once its memory went to a
    /// test that waited for it (`control::reclaim`).
    fn watch_use(&mut self, messages: u64) {
        let (Some(w), Some(ticket)) = (
            &mut self.usage,
            self.test.as_ref().and_then(|t| t.slot.ticket.as_ref()),
        ) else {
            return;
        };
        let now = Instant::now();
        if let Some(idle) = w.observe(now, messages) {
            self.state.admission().set_idle(ticket, idle);
            if idle {
                log(
                    self.state,
                    format_args!(
                        "client={} event=idle test={:016x} reserved_bytes={}",
                        self.peer,
                        self.test
                            .as_ref()
                            .map_or(0, |t| super::shared::test_id(t.slot.cookie)),
                        ticket.memory()
                    ),
                );
            }
        }
        if ticket.reclaimed() {
            // Told once: the window is gone with it.
            self.usage = None;
            log(
                self.state,
                format_args!(
                    "client={} event=reclaimed test={:016x} reserved_bytes={}",
                    self.peer,
                    self.test
                        .as_ref()
                        .map_or(0, |t| super::shared::test_id(t.slot.cookie)),
                    ticket.memory()
                ),
            );
            self.session.handle_event(now, ServerEvent::Reclaimed);
        }
    }

    /// The slot and the memory given back, the counters moved and the test's log line.
    fn finish(mut self) {
        drop(self.roles.take());
        let outcome = self.session.outcome().unwrap_or_default();
        // The test (its slot, its memory) is held until its line is logged and counted: a
        // server shutting down waits for the slots, and must not exit before the line.
        let Some(test) = self.test.take() else {
            return not_started(self.state, self.peer, outcome, true);
        };
        if !outcome.started() {
            not_started(self.state, self.peer, outcome, true);
            return drop(test);
        }
        let log_sent = test.log_sent.load(Ordering::Relaxed);
        let (spec, cookie) = (&test.spec, test.slot.cookie);
        // A limit the server's own roles or session met, never a client's report's: a
        // client cannot move it. The roles' report holds it even when the client's error
        // (its data connection closed under it) reached the session first.
        let own = outcome
            .local
            .as_ref()
            .and_then(limit_of)
            .map(|(kind, _)| kind);
        let ended = match &outcome.error {
            Some(SessionError::Limit { kind, .. }) => Some(*kind),
            _ => None,
        };
        if let Some(kind) = own.or(ended) {
            self.state.metrics.limited(kind);
        }
        let (server_sent, server_received) =
            outcome.local.as_ref().map_or((0, 0), |l| moved_by(l, spec));
        // The packet log streamed to the client is the server's to count too.
        let moved = (server_sent.saturating_add(log_sent), server_received);
        let r = Results::assemble(
            spec,
            self.peer.to_string(),
            outcome.peer.as_ref(),
            outcome.local.as_ref(),
            outcome.error.map(|e| e.to_string()),
        );
        let reserved = test.slot.ticket.as_ref().map_or(0, Ticket::memory);
        log_test(self.state, self.peer, (cookie, spec, reserved), &r, moved);
        drop(test);
        // The test's buffers and histograms are freed: give the memory back.
        crate::sys::release_free_memory();
    }
}

/// Counts a test that ran for `--metrics` and writes its log line; `moved` is what the
/// server sent and received, `reserved` the memory the test held against `--max-memory`.
fn log_test(
    state: &State,
    peer: SocketAddr,
    (cookie, spec, reserved): (u64, &TestSpec, u64),
    r: &Results,
    moved: (u64, u64),
) {
    let (server_sent, server_received) = moved;
    state.metrics.bytes_sent.inc_by(server_sent);
    state.metrics.bytes_received.inc_by(server_received);
    if r.error.is_none() {
        let rr = spec.mechanism.is_rr();
        let latest = super::metrics::Latest {
            throughput_bps: r.end.received_bps.filter(|_| !rr),
            latency_s: r.end.latency_us.as_ref().map(|p| p.p50 / 1e6),
            loss_ratio: r.end.udp.as_ref().and_then(|u| u.loss_ratio),
            ended_unix_s: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0.0, |d| d.as_secs_f64()),
        };
        let kind = if rr { "latency" } else { "throughput" };
        state.metrics.latest(peer.ip(), kind, latest);
    }
    log(
        state,
        format_args!(
            "client={peer} event=test test={:016x} protocol={} mechanism={} direction={} size={} streams={} sent_bytes={} sent_messages={} received_bytes={} received_messages={} lost={} server_sent_bytes={server_sent} server_received_bytes={server_received} reserved_bytes={reserved} result={}",
            super::shared::test_id(cookie),
            spec.protocol,
            spec.mechanism,
            spec.direction,
            spec.size,
            spec.total_streams(),
            known(r.end.sent.bytes),
            known(r.end.sent.messages),
            known(r.end.received.bytes),
            known(r.end.received.messages),
            r.end.udp.as_ref().map_or_else(|| "0".to_string(), |u| known(u.lost)),
            r.error.as_ref().map_or_else(|| "ok".to_string(), |e| q(&format!("error: {e}")))
        ),
    );
}

/// A count for the log: a side that never reported is "unknown" there, as in the results.
fn known(v: Option<u64>) -> String {
    v.map_or_else(|| "unknown".to_string(), |x| x.to_string())
}

/// Logs a session that ended before its test started (refused, wrong key, malformed, or
/// gone), and counts it for `--metrics`.
pub(super) fn not_started(state: &State, peer: SocketAddr, outcome: Outcome, identified: bool) {
    let event = match (&outcome.refusal, identified) {
        (_, false) => "rejected",
        (Some(Refusal::AuthFailed), _) => {
            state.auth_failures.fetch_add(1, Ordering::SeqCst);
            state.metrics.auth_failures.inc();
            state.admission().key_failed(Instant::now(), peer.ip());
            "auth_failed"
        }
        (Some(_), _) => "refused",
        (None, true) => "failed",
    };
    if let Some(r) = &outcome.refusal {
        state.metrics.refused(r.kind());
    }
    if let Some(e) = outcome.error {
        log_refused(
            state,
            peer.ip(),
            format_args!("client={peer} event={event} reason={}", q(&e.to_string())),
        );
    }
}

/// The data bytes the server's side `rep` sent and received: a sender's bytes, a
/// receiver's, and for rr/crr each request's response (the report counts requests only).
fn moved_by(rep: &SideReport, spec: &TestSpec) -> (u64, u64) {
    let (mut sent, mut received) = match rep.role {
        Some(Role::Sender) => (rep.bytes, 0),
        Some(Role::Receiver) => {
            let responses = match spec.mechanism {
                Mechanism::Rr | Mechanism::Crr => rep.messages.saturating_mul(spec.response_len()),
                _ => 0,
            };
            (responses, rep.bytes)
        }
        None => (0, 0),
    };
    if let Some(rev) = &rep.reverse {
        let (s, r) = moved_by(rev, spec);
        sent = sent.saturating_add(s);
        received = received.saturating_add(r);
    }
    (sent, received)
}

/// The server limit that ended one of `rep`'s streams, if one did: its kind and words.
fn limit_of(rep: &SideReport) -> Option<(ErrorKind, String)> {
    let own = match (rep.error_kind, &rep.error) {
        (Some(kind), Some(reason)) if kind.limit_flag().is_some() => Some((kind, reason.clone())),
        _ => None,
    };
    own.or_else(|| rep.streams.iter().find_map(limit_of))
        .or_else(|| rep.reverse.as_deref().and_then(limit_of))
}

/// Holds a test slot; gives it back, and forgets the test's routing entries, when the
/// session ends, however it ends.
struct Slot<'a> {
    state: &'a State,
    ticket: Option<Ticket>,
    cookie: u64,
    /// Set when the test ends: a user-space stack still waiting for its connection stops.
    cancel: Arc<AtomicBool>,
}

impl Slot<'_> {
    /// Every stream arrived: no more connections or hellos for this test.
    fn unlist(&self) {
        if let Ok(mut p) = self.state.pending.lock() {
            p.remove(&self.cookie);
        }
    }
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        self.cancel.store(true, Ordering::Relaxed);
        self.unlist();
        if let Ok(mut c) = self.state.crr.lock() {
            c.remove(&self.cookie);
        }
        if let Some(t) = self.ticket.take() {
            self.state.release(t);
        }
    }
}

/// A stream that arrived, set up, waiting for `begin`.
struct Arrived {
    sock: DataSocket,
    datapath: Datapath,
    offloads: Offloads,
    hello: Option<[u8; wirebench_proto::header::UDP_HELLO_LEN]>,
}

/// The server's side of an admitted test.
struct Test<'a> {
    slot: Slot<'a>,
    /// The test as it runs (a reverse file transfer's amount set from the file).
    spec: TestSpec,
    /// The amount told to the client, for a file transfer.
    bytes: Option<u64>,
    /// Where the data connection comes in, when through the server's user-space stack.
    tcp_port: Option<u16>,
    /// Why it did not come, when it did not.
    user_failed: Option<Receiver<String>>,
    rx: Receiver<(u32, DataSocket)>,
    log_rx: Receiver<TcpStream>,
    streams: Vec<Option<Arrived>>,
    packet_log: Option<LogOut>,
    /// Bytes of packet log written to the client: the server sent them.
    log_sent: Arc<AtomicU64>,
    file: Option<FilePart>,
    crr: Option<Receiver<DataSocket>>,
}

/// Takes a slot for the test the session asks for, prepares its file part, and lists it so
/// that its data connections and UDP hellos find it.
fn admit<'a>(
    state: &'a State,
    session: &ServerSession,
    peer: SocketAddr,
    local: SocketAddr,
) -> Result<Test<'a>, Refusal> {
    if state.shutdown.load(Ordering::SeqCst) {
        return Err(Refusal::ShuttingDown);
    }
    let mut spec = session
        .spec()
        .cloned()
        .ok_or_else(|| Refusal::Invalid("no test was asked".into()))?;
    // `serve --stack`: the data connection comes through the user-space stack, which
    // listens from now on, or says why it cannot carry the test: before the slot is taken
    // and any file made, so that such a refusal costs nothing.
    let user = match &state.cfg.user_stack {
        Some(stack) => Some((
            stack.port(),
            stack
                .listen(&spec, peer.ip().to_canonical())
                .map_err(|e| Refusal::UserStack(e.to_string()))?,
        )),
        None => None,
    };
    let cookie = random_cookie().map_err(|e| Refusal::Internal(e.to_string()))?;
    // What the test will hold in memory, from its spec: reserved until its slot is freed.
    let memory = crate::control::memory::test_memory(&spec, state.socket_caps);
    let ticket = state
        .admission()
        .admit_test(Instant::now(), peer.ip(), memory, spec.exclusive)?;
    let slot = Slot {
        state,
        ticket: Some(ticket),
        cookie,
        cancel: Arc::new(AtomicBool::new(false)),
    };
    let file = file_part(&state.cfg, &mut spec, cookie).map_err(Refusal::File)?;
    if file.is_some() {
        // A reverse transfer's amount is the server's file: the limits hold on it too.
        state.spec_limits().check(&spec)?;
    }
    let bytes = file.is_some().then_some(spec.bytes).flatten();
    // Room for every stream and as many repeats (a resent hello): the session takes the
    // first socket of each stream and drops the rest.
    let (tx, rx) = sync_channel(2 * spec.total_streams() as usize);
    let (log_tx, log_rx) = sync_channel(1);
    let poisoned = || Refusal::Internal("server state poisoned".into());
    let mut user_failed = None;
    let tcp_port = match user {
        Some((port, listener)) => {
            let (failed, failed_rx) = sync_channel(1);
            user_failed = Some(failed_rx);
            let waiting = Waiting {
                cookie,
                streams: spec.total_streams(),
                tx: tx.clone(),
                failed,
                cancel: Arc::clone(&slot.cancel),
            };
            std::thread::Builder::new()
                .name("wirebench-user-accept".into())
                .spawn(move || user_accept::take(listener, &waiting))
                .map_err(|e| Refusal::Internal(format!("starting the stack's accept: {e}")))?;
            Some(port)
        }
        None => None,
    };
    state.pending.lock().map_err(|_| poisoned())?.insert(
        cookie,
        Pending {
            peer: peer.ip(),
            local: local.ip(),
            protocol: spec.protocol,
            streams: spec.total_streams(),
            // Through a user-space stack, the kernel's listener takes no data connection
            // for this test (only its packet log).
            user_stack: tcp_port.is_some(),
            tx,
            log_tx: ServerSession::writes_log(&spec).then_some(log_tx),
        },
    );
    // --mode crr: each transaction's connection comes through `attach` to this queue.
    let mut crr = None;
    if spec.mechanism == Mechanism::Crr {
        let (crr_tx, crr_rx) = sync_channel(64);
        state
            .crr
            .lock()
            .map_err(|_| poisoned())?
            .insert(cookie, (peer.ip(), crr_tx));
        crr = Some(crr_rx);
    }
    Ok(Test {
        slot,
        streams: (0..spec.total_streams()).map(|_| None).collect(),
        spec,
        bytes,
        tcp_port,
        user_failed,
        rx,
        log_rx,
        packet_log: None,
        log_sent: Arc::new(AtomicU64::new(0)),
        file,
        crr,
    })
}

impl Test<'_> {
    /// The streams and the packet log connection that arrived since the last look, each
    /// set up as it comes.
    fn arrivals(&mut self) -> Vec<ServerEvent> {
        let mut events = Vec::new();
        if let Some(reason) = self.user_failed.as_ref().and_then(|f| f.try_recv().ok()) {
            events.push(ServerEvent::StreamFailed { reason });
            return events;
        }
        while let Ok((stream, sock)) = self.rx.try_recv() {
            let Some(slot) = self
                .streams
                .get_mut(stream as usize)
                .filter(|s| s.is_none())
            else {
                continue;
            };
            let arrived = match &sock {
                DataSocket::Tcp(s) => match tcp_datapath(s, &self.spec) {
                    Ok(datapath) => Arrived {
                        sock,
                        datapath,
                        offloads: Offloads::default(),
                        hello: None,
                    },
                    Err(reason) => {
                        events.push(ServerEvent::StreamFailed {
                            reason: reason.to_string(),
                        });
                        return events;
                    }
                },
                DataSocket::Quic(s) => {
                    // Data has not moved yet: the test's controller takes over now.
                    let cc = self.spec.congestion.as_deref();
                    s.connection()
                        .choice
                        .set(cc.and_then(Congestion::of_name).unwrap_or_default());
                    s.connection().set_gso(!self.spec.no_offload);
                    Arrived {
                        datapath: crate::quic::stream::datapath(s),
                        sock,
                        offloads: Offloads::default(),
                        hello: None,
                    }
                }
                DataSocket::User(s) => Arrived {
                    datapath: crate::role::user::user_datapath(s.as_ref(), &self.spec),
                    sock,
                    offloads: Offloads::default(),
                    hello: None,
                },
                DataSocket::Udp(s) => {
                    let (datapath, offloads) =
                        udp_datapath(s, &self.spec, vec!["udp_reuseport".into()]);
                    let cookie = self.slot.cookie;
                    Arrived {
                        sock,
                        datapath,
                        offloads,
                        hello: Some(UdpHello { cookie, stream }.encode()),
                    }
                }
            };
            *slot = Some(arrived);
            events.push(ServerEvent::StreamArrived { stream });
        }
        if let Ok(conn) = self.log_rx.try_recv() {
            // A client that stops reading its log, or crawls, fails the log, not the
            // server: each write times out, and the log's writer is cut off by shutting
            // it down.
            let _ = conn.set_write_timeout(Some(SETUP_TIMEOUT));
            match conn.try_clone() {
                Ok(handle) => {
                    self.packet_log = Some(LogOut {
                        out: Box::new(Counted {
                            out: conn,
                            bytes: Arc::clone(&self.log_sent),
                        }),
                        abort: Some(Box::new(move || {
                            let _ = handle.shutdown(std::net::Shutdown::Both);
                        })),
                    });
                    events.push(ServerEvent::StreamArrived {
                        stream: PACKET_LOG_STREAM,
                    });
                }
                Err(e) => events.push(ServerEvent::StreamFailed {
                    reason: format!("keeping a handle on the packet log connection: {e}"),
                }),
            }
        }
        events
    }

    /// Every stream's role and parameters, in order; each role stops by itself at
    /// `deadline_ns` from its start.
    fn roles(
        &mut self,
        client_host: &str,
        deadline_ns: u64,
    ) -> Vec<(Role, DataSocket, RoleParams)> {
        let cfg = &self.slot.state.cfg;
        let same = same_clock(&host_id(), client_host);
        let mut out = Vec::with_capacity(self.streams.len());
        for (i, arrived) in std::mem::take(&mut self.streams).into_iter().enumerate() {
            let Some(a) = arrived else { continue };
            let stream = i as u32;
            let limit = MoveLimit::share(
                TestLimits {
                    max_bytes: cfg.max_bytes,
                    max_rate_bps: cfg.max_rate_bps,
                },
                self.spec.total_streams(),
                self.spec.size.max(self.spec.response_len()),
            )
            .with_packets(cfg.budget.max_pps, self.spec.total_streams());
            let params = RoleParams {
                spec: self.spec.clone(),
                deadline_ns: Some(deadline_ns),
                limit: Some(limit),
                hello: a.hello,
                token: SeqToken::of_stream(self.slot.cookie, stream),
                stream,
                intervals: None,
                datapath: a.datapath,
                same_clock: same,
                packet_log: if stream == 0 {
                    self.packet_log.take()
                } else {
                    None
                },
                offloads: a.offloads,
                crr: if stream == 0 {
                    self.crr.take().map(CrrPart::Server)
                } else {
                    None
                },
                file: if stream == 0 { self.file.take() } else { None },
            };
            out.push((ServerSession::role_of(&self.spec, stream), a.sock, params));
        }
        out
    }
}

/// A writer that counts what it wrote (the packet log's connection, once per batch).
struct Counted<W> {
    out: W,
    bytes: Arc<AtomicU64>,
}

impl<W: std::io::Write + Send> crate::packet_log_writer::LogTarget for Counted<W> {}

impl<W: std::io::Write> std::io::Write for Counted<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.out.write(buf)?;
        self.bytes.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.out.flush()
    }
}

fn random_cookie() -> Result<u64, EngineError> {
    let mut b = [0u8; 8];
    getrandom::getrandom(&mut b).map_err(|e| {
        EngineError::io(
            "drawing a test cookie",
            std::io::Error::other(e.to_string()),
        )
    })?;
    Ok(u64::from_ne_bytes(b))
}

/// The server's side of a file transfer: a copy to save (in `--save-dir`, named after the
/// test's cookie and the file) or a file to send (from `--files-dir`, never outside it).
fn file_part(
    cfg: &ServerConfig,
    spec: &mut TestSpec,
    cookie: u64,
) -> Result<Option<FilePart>, String> {
    let Some(name) = spec.file.clone() else {
        return Ok(None);
    };
    if spec.direction == Direction::Forward {
        if spec.file_back {
            // `--both-directions`: refused now if the way back would be, before the file
            // is sent for nothing.
            served_file(cfg, &name)
                .map_err(|e| format!("--both-directions cannot get the file back: {e}"))?;
        }
        let Some(dir) = &cfg.save_dir else {
            let sink = FileSink::create(None).map_err(|e| e.to_string())?;
            return Ok(Some(FilePart::Sink(sink.bounded(spec.file_bytes()))));
        };
        let (path, room) = dir
            .reserve(&format!("{cookie:016x}-{name}"), spec.file_bytes())
            .map_err(|e| e.to_string())?;
        let sink = FileSink::create(Some(path))
            .map_err(|e| format!("cannot save the file here: {e}"))?
            .bounded(spec.file_bytes())
            .holding(room);
        return Ok(Some(FilePart::Sink(sink)));
    }
    let (source, size) = served_file(cfg, &name)?;
    spec.bytes = Some(spec.bytes_for_file(size));
    spec.validate().map_err(|e| e.to_string())?;
    Ok(Some(FilePart::Source(source)))
}

/// The file `name` of the server's `--files-dir`, opened to send, and its size.
fn served_file(cfg: &ServerConfig, name: &str) -> Result<(FileSource, u64), String> {
    let dir = cfg
        .files_dir
        .as_ref()
        .ok_or("this server sends no files (it was started without --files-dir)")?;
    // The name is a plain name (validated); resolving links must not lead out of the dir.
    let unknown = || format!("no file {name:?} in this server's --files-dir");
    let base = dir.canonicalize().map_err(|_| unknown())?;
    let path = base.join(name).canonicalize().map_err(|_| unknown())?;
    if !path.starts_with(&base) {
        return Err(unknown());
    }
    FileSource::open(&path).map_err(|_| unknown())
}
