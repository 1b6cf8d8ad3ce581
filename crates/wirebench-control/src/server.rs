//! The server's session on one accepted connection: its first frame says what it is (a
//! data connection to route, or a test to admit), then the key, the limits, the slots, the
//! data streams, `begin`, the running test and the exchange of reports.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use wirebench_proto::control::{
    Message, MAX_FRAME, MAX_HELLO_FRAME, PACKET_LOG_STREAM, PROTOCOL_VERSION,
};
use wirebench_proto::results::{Role, SideReport};
use wirebench_proto::spec::{Direction, Protocol, TestSpec};

use super::admission::{Refusal, SpecLimits, DEFAULT_MAX_DURATION};
use super::exchange::{Exchange, RunAction};
use super::wire::{earliest, Wire};
use super::{Outcome, Session, SessionError, REPORT_GRACE, SETUP_TIMEOUT};
use crate::psk::Psk;
use wirebench_proto::error_kind::ErrorKind;

/// What the server session knows of its server.
#[derive(Debug, Clone)]
pub struct ServerParams {
    /// The limits on what a test may ask; `max_duration` also bounds every test.
    pub limits: SpecLimits,
    /// The key clients must prove, if any.
    pub psk: Option<Psk>,
    /// This session's fresh nonce, for the challenge.
    pub nonce: String,
    /// This build's name and version.
    pub tool: String,
    /// This host's identity.
    pub host_id: String,
    /// The server's UDP port.
    pub udp_port: u16,
}

/// What the server driver reports.
#[derive(Debug)]
pub enum ServerEvent {
    /// [`ServerAction::Admit`] found a slot: the test's cookie, and for a file transfer
    /// its amount in bytes (the server's file sets it for a reverse one).
    Admitted {
        /// The test's cookie.
        cookie: u64,
        /// The amount to put in the accept, for a file transfer.
        bytes: Option<u64>,
        /// Where the test's TCP data connections go, when not to the control port.
        tcp_port: Option<u16>,
    },
    /// [`ServerAction::Admit`] found no slot, or the file cannot be served.
    Refused(Refusal),
    /// The connection or socket of `stream` arrived (`PACKET_LOG_STREAM`: the packet log
    /// connection) and is set up.
    StreamArrived {
        /// Which.
        stream: u32,
    },
    /// A stream arrived but cannot be set up as the test asks.
    StreamFailed {
        /// Why.
        reason: String,
    },
    /// This side's senders are done (`--bidir`): `(stream, messages)`.
    SendersDone {
        /// Each sending stream's final count.
        counts: Vec<(u32, u64)>,
    },
    /// Every role is done; this side's report.
    RolesDone {
        /// The merged report.
        report: Box<SideReport>,
    },
    /// The roles could not be started: the test ends with this side's report saying why.
    RolesFailed {
        /// Why, in one line.
        reason: String,
        /// Its kind.
        kind: ErrorKind,
    },
    /// The server is going away: end the test with a message to the client. The driver
    /// may say so on every round: once the session is ending, it changes nothing.
    Shutdown,
    /// A role ended the test at one of the server's limits: tell the client which, and its
    /// value, and stop (the client keeps its partial results).
    Limit {
        /// Which limit.
        kind: ErrorKind,
        /// The limit's flag and value, as the role put it.
        reason: String,
    },
    /// The test sat idle and its memory went to a test that waited for it
    /// (`control::reclaim`): it ends as at a limit (`--max-memory`), and the session by
    /// [`REPORT_GRACE`] and [`STOP_GRACE`] from now, whatever its bound: the memory is
    /// another test's already.
    Reclaimed,
}

/// What the server session asks of its driver.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServerAction {
    /// The first frame was a `start`: the connection leaves the pending stage.
    Identified {
        /// The client's tool and version, for the log.
        tool: String,
        /// The client's host identity (one clock or two).
        host_id: String,
    },
    /// The first frame was an `attach`: this is a data connection of test `cookie`; route
    /// it. The session is over.
    Attach {
        /// The test's cookie.
        cookie: u64,
        /// The stream (or `PACKET_LOG_STREAM`, `CRR_STREAM`).
        stream: u32,
    },
    /// The test passed version, key and limits: take a slot, prepare the file part, draw
    /// a cookie and expect the streams; answer with Admitted or Refused.
    Admit,
    /// Every stream arrived: stop expecting connections for this test.
    StreamsReady,
    /// `begin` came: start the roles.
    StartRoles,
    /// What the running test asks of the roles.
    Run(RunAction),
}

#[derive(Debug)]
enum State {
    /// Waiting for the first frame.
    Hello {
        deadline: Instant,
    },
    /// Challenge sent; waiting for `auth`.
    Auth {
        deadline: Instant,
    },
    /// Waiting for the driver's answer to Admit.
    Admitting,
    /// Accept sent; waiting for every stream (and the packet log connection).
    Streams {
        deadline: Instant,
        missing: Vec<bool>,
        log_missing: bool,
        /// `begin` came before the driver saw the last TCP stream (they race).
        begin_seen: bool,
        /// What the client sent after `begin` while a stream was still on its way to the
        /// session (a short test's counts and report can overtake it too): played to the
        /// exchange once it runs. At most [`EARLY_MAX`] messages.
        early: Vec<Message>,
    },
    /// Waiting for `begin`.
    Begin {
        deadline: Instant,
    },
    Running(Box<Exchange>),
    Done,
}

/// Messages of a running test kept while its last stream reaches the session: what a test
/// shorter than that race sends (its counts, its report, an interval). Each is one frame,
/// bounded as every frame is, and at most one is a report (`done`, the one large frame, for
/// which the test reserves its memory); a client sending more before its streams arrive is
/// refused as before.
const EARLY_MAX: usize = 3;

/// Time the roles get to stop and hand over their report after the whole-test ceiling
/// stopped them: the session then ends, with its slot, threads and memory, whatever the
/// client has read.
pub const STOP_GRACE: Duration = Duration::from_secs(2);

/// The server's session on one connection.
#[derive(Debug)]
pub struct ServerSession {
    params: ServerParams,
    wire: Wire,
    state: State,
    actions: VecDeque<ServerAction>,
    run_actions: VecDeque<RunAction>,
    spec: Option<TestSpec>,
    client_nonce: String,
    server_mac: Option<String>,
    closing: bool,
    /// The server's shutdown was handled.
    shutting_down: bool,
    /// When the session ends whatever the client reads (set at `begin`): the test's bound,
    /// drain and grace, and [`STOP_GRACE`] for the roles to stop. Output not yet written
    /// then (a report the client is too slow to take) is dropped, not waited for.
    hard_end: Option<Instant>,
    /// See [`ServerSession::take_last_words`].
    last_words: Option<Vec<u8>>,
    outcome: Outcome,
}

impl ServerSession {
    /// A connection just accepted.
    pub fn new(now: Instant, params: ServerParams) -> Self {
        Self {
            params,
            wire: Wire::new(MAX_HELLO_FRAME),
            state: State::Hello {
                deadline: now + SETUP_TIMEOUT,
            },
            actions: VecDeque::new(),
            run_actions: VecDeque::new(),
            spec: None,
            client_nonce: String::new(),
            server_mac: None,
            closing: false,
            shutting_down: false,
            hard_end: None,
            last_words: None,
            outcome: Outcome::default(),
        }
    }

    /// The test asked for (once the `start` came; a reverse file transfer's amount is set
    /// by the Admitted event).
    pub fn spec(&self) -> Option<&TestSpec> {
        self.spec.as_ref()
    }

    /// This side's role on `stream` of `spec`.
    pub fn role_of(spec: &TestSpec, stream: u32) -> Role {
        match spec.stream_direction(stream) {
            Direction::Reverse => Role::Sender,
            Direction::Forward | Direction::Bidir => Role::Receiver,
        }
    }

    /// When the roles stop by themselves, in nanoseconds from their start: at the server's
    /// longest test (`--max-duration`, or the documented ceiling) and the test's drain,
    /// whatever the client does or asked for.
    pub fn role_deadline_ns(&self) -> u64 {
        let longest = self
            .params
            .limits
            .max_duration
            .unwrap_or(DEFAULT_MAX_DURATION);
        let drain_ns = self.spec.as_ref().map_or(0, |s| s.drain_ns);
        u64::try_from(longest.as_nanos())
            .unwrap_or(u64::MAX)
            .saturating_add(drain_ns)
    }

    /// Whether the server writes the test's packet log (and so waits for its connection).
    pub fn writes_log(spec: &TestSpec) -> bool {
        super::memory::server_writes_log(spec)
    }

    /// An interval this side's roles closed (of `stream`, or their sum): sent to the client
    /// for its live lines.
    pub fn local_interval(
        &mut self,
        now: Instant,
        role: Role,
        record: wirebench_proto::results::IntervalRecord,
        stream: Option<u32>,
    ) {
        if let State::Running(x) = &mut self.state {
            x.local_interval(now, &mut self.wire, role, record, stream);
        }
    }

    /// Something the driver reports.
    pub fn handle_event(&mut self, now: Instant, event: ServerEvent) {
        if self.closing {
            return;
        }
        match event {
            ServerEvent::Admitted {
                cookie,
                bytes,
                tcp_port,
            } => self.admitted(now, cookie, bytes, tcp_port),
            ServerEvent::Refused(r) => self.refuse(now, r),
            ServerEvent::StreamArrived { stream } => self.arrived(now, stream),
            ServerEvent::StreamFailed { reason } => {
                let tell = format!("server: {reason}");
                self.fail(now, SessionError::Setup(reason), Some(&tell));
            }
            ServerEvent::SendersDone { counts } => {
                if let State::Running(x) = &mut self.state {
                    x.senders_done(now, &mut self.wire, counts);
                }
            }
            ServerEvent::RolesDone { report } => self.roles_done(now, *report),
            ServerEvent::RolesFailed { reason, kind } => self.roles_done(
                now,
                SideReport {
                    error: Some(reason),
                    error_kind: Some(kind),
                    ..SideReport::default()
                },
            ),
            ServerEvent::Limit { kind, reason } => {
                // The client keeps what was measured: our report first, then the reason.
                if let State::Running(x) = &mut self.state {
                    let e = SessionError::Limit {
                        kind,
                        reason: reason.clone(),
                    };
                    x.end_early(now, &mut self.wire, e, &reason, &mut self.run_actions);
                    self.after_run();
                }
            }
            ServerEvent::Reclaimed => {
                if let State::Running(x) = &mut self.state {
                    let reason = reclaimed_reason();
                    let e = SessionError::Limit {
                        kind: ErrorKind::MaxMemory,
                        reason: reason.clone(),
                    };
                    x.end_early(now, &mut self.wire, e, &reason, &mut self.run_actions);
                    self.after_run();
                }
                let soon = now + REPORT_GRACE + STOP_GRACE;
                self.hard_end = Some(self.hard_end.map_or(soon, |t| t.min(soon)));
            }
            // Told once: the driver reports the shutdown on every round until the end.
            ServerEvent::Shutdown if self.shutting_down => {}
            ServerEvent::Shutdown => {
                self.shutting_down = true;
                match self.state {
                    State::Hello { .. } | State::Auth { .. } | State::Admitting => {
                        self.refuse(now, Refusal::ShuttingDown)
                    }
                    _ => self.fail(
                        now,
                        SessionError::Shutdown,
                        Some("the server is shutting down"),
                    ),
                }
            }
        }
    }

    fn roles_done(&mut self, now: Instant, report: SideReport) {
        if let State::Running(x) = &mut self.state {
            x.roles_done(now, &mut self.wire, report);
            self.last_words = x.last_words();
            self.after_run();
        }
    }

    /// This side's last words once its report is made (the reason the test ended early,
    /// then the report, encoded), taken once: what the driver keeps for a client that
    /// fetches them on a new connection (`control::shelf`).
    pub fn take_last_words(&mut self) -> Option<Vec<u8>> {
        self.last_words.take()
    }

    /// Bytes the session's output holds for the client now (at most
    /// [`super::wire::OUTPUT_BYTES`]).
    #[cfg(test)]
    pub fn output_held(&self) -> usize {
        self.wire.held()
    }

    /// The next thing the driver must do.
    pub fn poll_action(&mut self) -> Option<ServerAction> {
        self.actions
            .pop_front()
            .or_else(|| self.run_actions.pop_front().map(ServerAction::Run))
    }

    /// Whether the driver should look for arriving streams often (set-up is on).
    pub fn awaits_streams(&self) -> bool {
        matches!(self.state, State::Streams { .. })
    }

    /// The session is over and its output written.
    pub fn is_closed(&self) -> bool {
        self.closing && self.wire.transmit().is_none()
    }

    /// How it ended, once closed (taken once).
    pub fn outcome(&mut self) -> Option<Outcome> {
        self.is_closed().then(|| std::mem::take(&mut self.outcome))
    }

    fn on_message(&mut self, now: Instant, msg: Message) {
        match &mut self.state {
            State::Hello { .. } => self.first_frame(now, msg),
            State::Auth { .. } => match msg {
                Message::Auth { mac } => self.check_auth(now, &mac),
                other => self.refuse(now, Refusal::AuthExpected(other.name().to_string())),
            },
            State::Streams {
                begin_seen, early, ..
            } => match msg {
                Message::Begin if !*begin_seen => *begin_seen = true,
                Message::Error { reason, error_kind } => self.peer_failed(now, reason, error_kind),
                // One report at most: it is what the test's memory reserve covers.
                Message::Interval { .. } | Message::SenderCounts { .. } | Message::Done { .. }
                    if *begin_seen
                        && early.len() < EARLY_MAX
                        && !(matches!(msg, Message::Done { .. })
                            && early.iter().any(|m| matches!(m, Message::Done { .. }))) =>
                {
                    early.push(msg);
                }
                other => self.unexpected(now, "during set-up", other),
            },
            State::Begin { .. } => match msg {
                Message::Begin => self.begin(now),
                Message::Error { reason, error_kind } => self.peer_failed(now, reason, error_kind),
                other => {
                    let e = SessionError::Protocol(format!("expected begin, got {}", other.name()));
                    self.fail(now, e, Some("expected begin"));
                }
            },
            State::Admitting => self.unexpected(now, "during set-up", msg),
            State::Running(x) => {
                x.on_message(now, &mut self.wire, msg, &mut self.run_actions);
                self.after_run();
            }
            State::Done => {}
        }
    }

    fn unexpected(&mut self, now: Instant, at: &str, msg: Message) {
        let e = SessionError::Protocol(format!("unexpected control message {at}: {}", msg.name()));
        self.fail(now, e, Some(&format!("unexpected control message {at}")));
    }

    fn first_frame(&mut self, now: Instant, msg: Message) {
        match msg {
            Message::Attach { cookie, stream, .. } => {
                self.actions
                    .push_back(ServerAction::Attach { cookie, stream });
                self.state = State::Done;
                self.closing = true;
            }
            Message::Start {
                version,
                tool,
                spec,
                host_id,
                nonce,
            } => {
                // Frames stay at the hello's cap until the test is admitted (with a key:
                // after its proof): an unauthenticated peer cannot make the server hold
                // more than that for it.
                self.actions.push_back(ServerAction::Identified {
                    tool: tool.clone(),
                    host_id,
                });
                self.spec = Some(spec);
                self.client_nonce = nonce;
                if version != PROTOCOL_VERSION {
                    // A server with a key tells an unauthenticated peer its protocol, not
                    // its build: the version is for clients that proved the key.
                    let server_tool = match self.params.psk {
                        Some(_) => "wirebench".to_string(),
                        None => self.params.tool.clone(),
                    };
                    return self.refuse(
                        now,
                        Refusal::Version {
                            client_tool: tool,
                            client_version: version,
                            server_tool,
                            server_version: PROTOCOL_VERSION,
                        },
                    );
                }
                // Authenticate first: an unauthenticated client learns nothing of the limits.
                if self.params.psk.is_some() {
                    let challenge = Message::Challenge {
                        nonce: self.params.nonce.clone(),
                    };
                    if let Err(e) = self.wire.send(now, &challenge) {
                        return self.fail(now, e, None);
                    }
                    // One deadline for the whole handshake, from the connection to the
                    // key's proof: a peer that trickles cannot stretch it step by step.
                    let deadline = match self.state {
                        State::Hello { deadline } => deadline,
                        _ => now + SETUP_TIMEOUT,
                    };
                    self.state = State::Auth { deadline };
                } else {
                    self.check_limits(now);
                }
            }
            other => {
                let e =
                    SessionError::Protocol(format!("unexpected first message {}", other.name()));
                self.fail(now, e, Some("the first message must be start or attach"));
            }
        }
    }

    fn check_auth(&mut self, now: Instant, mac: &str) {
        let (Some(psk), Some(spec)) = (&self.params.psk, &self.spec) else {
            return self.refuse(now, Refusal::AuthFailed);
        };
        let spec_json = serde_json::to_string(spec).unwrap_or_default();
        let cn = &self.client_nonce;
        if cn.is_empty() || !psk.verify_client(cn, &self.params.nonce, &spec_json, mac) {
            return self.refuse(now, Refusal::AuthFailed);
        }
        self.server_mac = Some(psk.server_mac(&self.params.nonce, cn));
        self.check_limits(now);
    }

    fn check_limits(&mut self, now: Instant) {
        let checked = match &self.spec {
            Some(spec) => self.params.limits.check(spec),
            None => Err(Refusal::Invalid("no test was asked".into())),
        };
        match checked {
            Ok(()) => {
                self.state = State::Admitting;
                self.actions.push_back(ServerAction::Admit);
            }
            Err(r) => self.refuse(now, r),
        }
    }

    fn admitted(&mut self, now: Instant, cookie: u64, bytes: Option<u64>, tcp_port: Option<u16>) {
        let (State::Admitting, Some(spec)) = (&self.state, &mut self.spec) else {
            return;
        };
        if bytes.is_some() {
            spec.bytes = bytes;
        }
        let accept = Message::Accept {
            cookie,
            udp_port: self.params.udp_port,
            tcp_port,
            tool: self.params.tool.clone(),
            host_id: self.params.host_id.clone(),
            bytes,
            server_mac: self.server_mac.clone(),
        };
        let missing = vec![true; spec.total_streams() as usize];
        let log_missing = Self::writes_log(spec);
        if let Err(e) = self.wire.send(now, &accept) {
            return self.fail(now, e, None);
        }
        // Admitted: the client may now send what a test needs (its report at the end).
        self.wire.set_max(MAX_FRAME);
        self.state = State::Streams {
            deadline: now + SETUP_TIMEOUT,
            missing,
            log_missing,
            begin_seen: false,
            early: Vec::new(),
        };
    }

    fn arrived(&mut self, now: Instant, stream: u32) {
        let udp = self
            .spec
            .as_ref()
            .is_some_and(|s| s.protocol == Protocol::Udp);
        let State::Streams {
            missing,
            log_missing,
            begin_seen,
            early,
            ..
        } = &mut self.state
        else {
            return;
        };
        if stream == PACKET_LOG_STREAM {
            *log_missing = false;
        } else {
            // A repeated stream (a resent hello) is not confirmed twice.
            let Some(slot) = missing.get_mut(stream as usize).filter(|m| **m) else {
                return;
            };
            *slot = false;
            if udp {
                if let Err(e) = self.wire.send(now, &Message::UdpReady { stream }) {
                    return self.fail(now, e, None);
                }
            }
        }
        if *log_missing || missing.iter().any(|m| *m) {
            return;
        }
        let begin_seen = *begin_seen;
        let early = std::mem::take(early);
        self.actions.push_back(ServerAction::StreamsReady);
        if begin_seen {
            self.begin(now);
            for msg in early {
                self.on_message(now, msg);
            }
        } else {
            self.state = State::Begin {
                deadline: now + SETUP_TIMEOUT,
            };
        }
    }

    fn begin(&mut self, now: Instant) {
        let Some(spec) = self.spec.clone() else {
            return;
        };
        // The whole-test ceiling: every test (its own time bound, or the server's longest)
        // ends by then, however its peer behaves; the session by STOP_GRACE later.
        let longest = self
            .params
            .limits
            .max_duration
            .unwrap_or(DEFAULT_MAX_DURATION);
        let bound = spec
            .duration_ns
            .map_or(longest, |d| Duration::from_nanos(d).min(longest));
        let ceiling = now + bound + Duration::from_nanos(spec.drain_ns) + REPORT_GRACE;
        self.hard_end = Some(ceiling + STOP_GRACE);
        let ceiling = Some(ceiling);
        let roles = (0..spec.total_streams())
            .map(|i| Self::role_of(&spec, i))
            .collect();
        self.state = State::Running(Box::new(Exchange::new(spec, roles, ceiling)));
        self.outcome.began = Some(now);
        self.actions.push_back(ServerAction::StartRoles);
    }

    fn after_run(&mut self) {
        let State::Running(x) = &mut self.state else {
            return;
        };
        if x.finished() {
            let (local, peer, error) = x.take();
            self.outcome.local = local;
            self.outcome.peer = peer;
            self.outcome.error = error;
            self.state = State::Done;
            self.closing = true;
        }
    }

    /// Refuses the test with `r`, telling the client, and closes.
    fn refuse(&mut self, now: Instant, r: Refusal) {
        let (reason, kind) = (r.to_string(), r.error_kind());
        let _ = self.wire.send(
            now,
            &Message::Refuse {
                reason: reason.clone(),
                error_kind: Some(kind),
            },
        );
        self.outcome.refusal = Some(r);
        self.end(SessionError::Refused { kind, reason });
    }

    /// The client reported an error during set-up.
    fn peer_failed(&mut self, now: Instant, reason: String, kind: Option<ErrorKind>) {
        self.fail(now, SessionError::Peer { kind, reason }, None);
    }

    /// Ends the session with `error`; `tell` goes to the client first.
    fn fail(&mut self, now: Instant, error: SessionError, tell: Option<&str>) {
        if let State::Running(x) = &mut self.state {
            x.fail(now, &mut self.wire, error, tell, &mut self.run_actions);
            return self.after_run();
        }
        if let Some(reason) = tell {
            let _ = self.wire.send(
                now,
                &Message::Error {
                    reason: reason.to_string(),
                    error_kind: Some(error.kind()),
                },
            );
        }
        self.end(error);
    }

    /// The test's bound, drain, grace and [`STOP_GRACE`] have passed: the session ends now,
    /// with what it has. Roles still running are stopped (the driver joins them), output
    /// the client has not read is dropped, and the reason is the session's error (the log
    /// line says it).
    fn end_at_bound(&mut self, now: Instant) {
        let unread = self.wire.transmit().map_or(0, <[u8]>::len);
        self.wire.discard_output();
        let e = SessionError::Timeout(if unread > 0 {
            "the client to read its results by the test's bound, drain and grace"
        } else {
            "the test to end within its time bound, drain and grace"
        });
        if let State::Running(x) = &mut self.state {
            x.fail(now, &mut self.wire, e, None, &mut self.run_actions);
            let (local, peer, error) = x.take();
            self.outcome.local = local;
            self.outcome.peer = peer;
            self.outcome.error = error;
        } else if unread > 0 {
            self.outcome.error.get_or_insert(e);
        }
        self.hard_end = None;
        self.state = State::Done;
        self.closing = true;
    }

    fn end(&mut self, error: SessionError) {
        self.outcome.error.get_or_insert(error);
        self.state = State::Done;
        self.closing = true;
    }
}

impl Session for ServerSession {
    /// Bytes to write to the connection.
    fn poll_transmit(&self) -> Option<&[u8]> {
        self.wire.transmit()
    }

    /// The driver wrote `n` bytes of [`Self::poll_transmit`].
    fn handle_written(&mut self, now: Instant, n: usize) {
        self.wire.written(now, n);
    }

    /// Bytes read from the connection (never more than [`Self::read_limit`]).
    fn handle_bytes(&mut self, now: Instant, bytes: &[u8]) {
        if self.closing {
            return;
        }
        self.wire.feed(bytes);
        while !self.closing {
            match self.wire.next_message() {
                Ok(Some(msg)) => self.on_message(now, msg),
                Ok(None) => break,
                Err(e) => {
                    let reason = e.to_string();
                    self.fail(now, SessionError::Protocol(reason.clone()), Some(&reason));
                }
            }
        }
    }

    /// The client closed the connection.
    fn handle_closed(&mut self, now: Instant) {
        if self.closing {
            return;
        }
        if let State::Running(x) = &mut self.state {
            x.on_closed(now, &mut self.wire, &mut self.run_actions);
            return self.after_run();
        }
        self.wire.discard_output();
        self.end(SessionError::PeerClosed);
    }

    /// Deadlines that have passed by `now`.
    fn handle_timeout(&mut self, now: Instant) {
        if self.hard_end.is_some_and(|t| now >= t) {
            return self.end_at_bound(now);
        }
        if self.wire.write_deadline().is_some_and(|t| now >= t) {
            self.wire.discard_output();
            if !self.closing {
                let e = SessionError::Timeout("the client to read the control connection");
                self.fail(now, e, None);
            }
            return;
        }
        if self.closing {
            return;
        }
        let what = match &mut self.state {
            State::Hello { deadline } if now >= *deadline => "the first message",
            State::Auth { deadline } if now >= *deadline => "the client's answer to the challenge",
            State::Streams { deadline, .. } if now >= *deadline => "the client's data streams",
            State::Begin { deadline } if now >= *deadline => "the client's begin",
            State::Running(x) => {
                x.on_timeout(now, &mut self.run_actions);
                return self.after_run();
            }
            _ => return,
        };
        let e = SessionError::Timeout(what);
        let tell = e.to_string();
        self.fail(now, e, Some(&tell));
    }

    /// When the session next needs [`Self::handle_timeout`].
    fn poll_timeout(&self) -> Option<Instant> {
        if self.is_closed() {
            return None;
        }
        if self.closing {
            return earliest([self.wire.write_deadline(), self.hard_end]);
        }
        let state = match &self.state {
            State::Hello { deadline }
            | State::Auth { deadline }
            | State::Streams { deadline, .. }
            | State::Begin { deadline } => Some(*deadline),
            State::Running(x) => x.poll_timeout(),
            State::Admitting | State::Done => None,
        };
        earliest([self.wire.write_deadline(), state, self.hard_end])
    }

    /// How many bytes the driver may read now: while the first frame is not decoded, no
    /// byte past its end (a data connection's data follows its `attach`).
    fn read_limit(&self) -> usize {
        if !matches!(self.state, State::Hello { .. }) {
            return usize::MAX;
        }
        let have = self.wire.buffered();
        let prefix = self.wire.peek_prefix(4);
        if prefix.len() < 4 {
            return 4 - prefix.len();
        }
        let len = u32::from_be_bytes([prefix[0], prefix[1], prefix[2], prefix[3]]) as usize;
        (4 + len.min(MAX_HELLO_FRAME)).saturating_sub(have)
    }
}

/// What a test ended for its idle memory hears.
fn reclaimed_reason() -> String {
    format!(
        "the server ended this test: it moved fewer than {} messages a stream in {} s, and \
         another test needed the memory it held (--max-memory)",
        super::reclaim::MESSAGES_PER_STREAM,
        super::reclaim::WINDOW.as_secs()
    )
}
