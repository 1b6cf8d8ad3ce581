//! The client's control session: `start`, the key, the server's answer, the data streams one
//! by one, `begin`, then the running test and the exchange of reports.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use wirebench_proto::control::{Message, PACKET_LOG_STREAM, PROTOCOL_VERSION};
use wirebench_proto::results::{Role, SideReport};
use wirebench_proto::spec::{Direction, Protocol, TestSpec};

use super::exchange::{printable, Exchange, RunAction};
use super::wire::{earliest, Wire};
use super::{Outcome, Session, SessionError, FIRST_BYTES_TIMEOUT, HELLO_EVERY, SETUP_TIMEOUT};
use crate::psk::Psk;
use wirebench_proto::error_kind::ErrorKind;

/// What the client session needs to know of its test and of itself.
#[derive(Debug, Clone)]
pub struct ClientParams {
    /// The test asked for.
    pub spec: TestSpec,
    /// The key to prove, if any.
    pub psk: Option<Psk>,
    /// This session's fresh nonce.
    pub nonce: String,
    /// This build's name and version.
    pub tool: String,
    /// This host's identity (one clock or two).
    pub host_id: String,
    /// The server as the user named it, for messages.
    pub server: String,
    /// The user asked for a packet log.
    pub packet_log: bool,
}

/// What the client driver reports.
#[derive(Debug)]
pub enum ClientEvent {
    /// The connection or socket of `stream` (or the packet log, `PACKET_LOG_STREAM`) is
    /// open, as [`ClientAction::OpenStream`] or [`ClientAction::OpenLog`] asked.
    Opened {
        /// Which.
        stream: u32,
    },
    /// Opening a stream failed.
    OpenFailed {
        /// Why.
        error: SessionError,
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
    /// The user asked to stop (Ctrl-C): stop sending, exchange what was measured. The
    /// driver may say so on every round: the session acts on the first.
    Interrupt,
}

/// What the client session asks of its driver.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClientAction {
    /// The server accepted: the test's cookie, where UDP streams go, its host identity.
    /// [`ClientSession::spec`] is now the test as it will run.
    Accepted {
        /// The test's cookie.
        cookie: u64,
        /// The server's UDP port.
        udp_port: u16,
        /// Where TCP data connections go, when not to the control port.
        tcp_port: Option<u16>,
        /// The server's host identity.
        host_id: String,
    },
    /// Open the packet log connection (an `attach` to `PACKET_LOG_STREAM`).
    OpenLog,
    /// Open data stream `stream`: a TCP `attach`, or a connected UDP socket.
    OpenStream {
        /// Which.
        stream: u32,
    },
    /// Send stream `stream`'s UDP hello (again).
    SendHello {
        /// Which.
        stream: u32,
    },
    /// Every stream is set up and `begin` is sent: start the roles.
    StartRoles,
    /// What the running test asks of the roles.
    Run(RunAction),
}

/// Where the set-up is.
#[derive(Debug)]
enum State {
    /// `start` (and maybe `auth`) sent; waiting for the server's answer.
    Answer {
        deadline: Instant,
        /// The server's nonce, once its challenge was answered.
        challenge: Option<String>,
    },
    /// Opening the packet log connection or a data stream, in order.
    Opening {
        /// `PACKET_LOG_STREAM`, or the stream index.
        what: u32,
        deadline: Instant,
        /// A UDP stream waiting for `udp_ready`: when to resend its hello.
        hello_at: Option<Instant>,
    },
    Running(Box<Exchange>),
    Done,
}

/// The client's control session.
#[derive(Debug)]
pub struct ClientSession {
    params: ClientParams,
    spec_json: String,
    wire: Wire,
    state: State,
    actions: VecDeque<ClientAction>,
    run_actions: VecDeque<RunAction>,
    /// The server's live intervals, for the driver (as many as the exchange keeps).
    peer_intervals: VecDeque<super::exchange::PeerInterval>,
    /// A whole frame came from the server: it speaks the protocol.
    frames_seen: bool,
    /// The first bytes came but no frame yet: when they count as no wirebench server.
    first_bytes_deadline: Option<Instant>,
    /// Closing once the output is written.
    closing: bool,
    outcome: Outcome,
}

/// How long past its due time the client waits for the server's report before it fetches it
/// on a new connection too: a clear path has delivered it by then, a flooded one may keep it
/// in retransmission backoff for a minute.
pub const FETCH_AFTER: Duration = Duration::from_secs(2);

/// How long the client tries to fetch the server's report when the server closed the
/// control connection before it came (a close that queued behind the test's own flood).
pub const FETCH_AFTER_CLOSE: Duration = Duration::from_secs(5);

impl ClientSession {
    /// A session that has just connected: its `start` is queued.
    pub fn new(now: Instant, params: ClientParams) -> Self {
        let spec_json = serde_json::to_string(&params.spec).unwrap_or_default();
        let mut s = Self {
            spec_json,
            wire: Wire::new(wirebench_proto::control::MAX_FRAME),
            state: State::Answer {
                deadline: now + SETUP_TIMEOUT,
                challenge: None,
            },
            actions: VecDeque::new(),
            run_actions: VecDeque::new(),
            peer_intervals: VecDeque::new(),
            frames_seen: false,
            first_bytes_deadline: None,
            closing: false,
            outcome: Outcome::default(),
            params,
        };
        let start = Message::Start {
            version: PROTOCOL_VERSION,
            tool: s.params.tool.clone(),
            spec: s.params.spec.clone(),
            host_id: s.params.host_id.clone(),
            nonce: s.params.nonce.clone(),
        };
        if let Err(e) = s.wire.send(now, &start) {
            s.end(e);
        }
        s
    }

    /// The test as it runs (a reverse file transfer takes its amount from the server).
    pub fn spec(&self) -> &TestSpec {
        &self.params.spec
    }

    /// This side's role on `stream`.
    pub fn role_of(&self, stream: u32) -> Role {
        match self.params.spec.stream_direction(stream) {
            Direction::Reverse => Role::Receiver,
            Direction::Forward | Direction::Bidir => Role::Sender,
        }
    }

    /// Whether this side writes the packet log itself (it receives) rather than the server.
    pub fn logs_locally(&self) -> bool {
        self.role_of(0) == Role::Receiver
    }

    /// Something the driver reports.
    pub fn handle_event(&mut self, now: Instant, event: ClientEvent) {
        if self.closing {
            return;
        }
        match event {
            ClientEvent::Opened { stream } => self.opened(now, stream),
            ClientEvent::OpenFailed { error } => self.fail(now, error, None),
            ClientEvent::SendersDone { counts } => {
                if let State::Running(x) = &mut self.state {
                    x.senders_done(now, &mut self.wire, counts);
                }
            }
            ClientEvent::RolesDone { report } => self.roles_done(now, *report),
            ClientEvent::RolesFailed { reason, kind } => self.roles_done(
                now,
                SideReport {
                    error: Some(reason),
                    error_kind: Some(kind),
                    ..SideReport::default()
                },
            ),
            ClientEvent::Interrupt if self.outcome.interrupted => {}
            ClientEvent::Interrupt => {
                self.outcome.interrupted = true;
                match &mut self.state {
                    State::Running(x) => x.interrupt(&mut self.run_actions),
                    _ => self.fail(
                        now,
                        SessionError::Setup("interrupted before the test began".into()),
                        Some("the client was interrupted"),
                    ),
                }
            }
        }
    }

    fn roles_done(&mut self, now: Instant, report: SideReport) {
        if let State::Running(x) = &mut self.state {
            x.roles_done(now, &mut self.wire, report);
            self.after_run();
        }
    }

    /// The server's next live interval (its view of the test: for a receiver, what arrived),
    /// to show as it comes.
    pub fn poll_peer_interval(&mut self) -> Option<super::exchange::PeerInterval> {
        self.peer_intervals.pop_front()
    }

    /// The next thing the driver must do.
    pub fn poll_action(&mut self) -> Option<ClientAction> {
        self.actions
            .pop_front()
            .or_else(|| self.run_actions.pop_front().map(ClientAction::Run))
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
            State::Answer { challenge, .. } => {
                let challenge = challenge.clone();
                self.on_answer(now, msg, challenge);
            }
            State::Opening { what, hello_at, .. } => match msg {
                Message::UdpReady { stream } if hello_at.is_some() && stream == *what => {
                    self.next_stream(now, Some(stream));
                }
                // A confirmation of an earlier stream, repeated: not this one's.
                Message::UdpReady { .. } => {}
                Message::Error { reason, error_kind } => {
                    let reason = printable(&reason);
                    let e = SessionError::Peer {
                        kind: error_kind,
                        reason,
                    };
                    self.fail(now, e, None)
                }
                other => {
                    let e =
                        SessionError::Protocol(format!("expected udp_ready, got {}", other.name()));
                    self.fail(now, e, Some("unexpected control message during set-up"));
                }
            },
            State::Running(x) => {
                x.on_message(now, &mut self.wire, msg, &mut self.run_actions);
                // Taken now: the report that ends the exchange may come in the same read.
                while let Some(i) = x.take_peer_interval() {
                    self.peer_intervals.push_back(i);
                }
                self.after_run();
            }
            State::Done => {}
        }
    }

    fn on_answer(&mut self, now: Instant, msg: Message, challenge: Option<String>) {
        match msg {
            Message::Challenge { nonce } if challenge.is_none() => {
                let Some(psk) = &self.params.psk else {
                    let e = SessionError::Key(
                        "the server asks for a pre-shared key: give it with --psk-file or WIREBENCH_PSK",
                    );
                    return self.fail(now, e, None);
                };
                let mac = psk.client_mac(&self.params.nonce, &nonce, &self.spec_json);
                if let Err(e) = self.wire.send(now, &Message::Auth { mac }) {
                    return self.fail(now, e, None);
                }
                self.state = State::Answer {
                    deadline: now + SETUP_TIMEOUT,
                    challenge: Some(nonce),
                };
            }
            Message::Accept {
                cookie,
                udp_port,
                tcp_port,
                host_id,
                bytes,
                server_mac,
                ..
            } => {
                // With a key, the server must have proven it has the key too.
                if let Some(psk) = &self.params.psk {
                    let proven = match (&challenge, &server_mac) {
                        (Some(sn), Some(mac)) => psk.verify_server(sn, &self.params.nonce, mac),
                        _ => false,
                    };
                    if !proven {
                        let e = SessionError::Key(
                            "the server did not prove it holds the pre-shared key",
                        );
                        return self.fail(now, e, None);
                    }
                }
                // A reverse file transfer: the server's file sets the amount.
                let spec = &mut self.params.spec;
                if spec.file.is_some() && spec.bytes.is_none() {
                    spec.bytes = bytes;
                    if let Err(e) = spec.validate() {
                        let e = SessionError::Protocol(format!("the server's file: {e}"));
                        return self.fail(now, e, Some("the file's size does not make a test"));
                    }
                }
                self.actions.push_back(ClientAction::Accepted {
                    cookie,
                    udp_port,
                    tcp_port,
                    host_id,
                });
                self.next_stream(now, None);
            }
            Message::Refuse { reason, error_kind } => {
                let reason = printable(&reason);
                // A server without kinds: refused, for a reason code cannot read.
                let kind = error_kind.unwrap_or(ErrorKind::Refused);
                self.fail(now, SessionError::Refused { kind, reason }, None)
            }
            Message::Error { reason, error_kind } => {
                let reason = printable(&reason);
                let e = SessionError::Peer {
                    kind: error_kind,
                    reason,
                };
                self.fail(now, e, None)
            }
            other => {
                let e = SessionError::Protocol(format!(
                    "expected accept or refuse, got {}",
                    other.name()
                ));
                self.fail(now, e, Some("unexpected control message during set-up"));
            }
        }
    }

    /// Opens what comes after `done` (none: the first): the packet log connection when
    /// the server writes the log, then the streams in order; then `begin`.
    fn next_stream(&mut self, now: Instant, done: Option<u32>) {
        let total = self.params.spec.total_streams();
        let next = match done {
            None if self.params.packet_log && !self.logs_locally() => PACKET_LOG_STREAM,
            None | Some(PACKET_LOG_STREAM) => 0,
            Some(i) => i + 1,
        };
        if next != PACKET_LOG_STREAM && next >= total {
            if let Err(e) = self.wire.send(now, &Message::Begin) {
                return self.fail(now, e, None);
            }
            let roles = (0..total).map(|i| self.role_of(i)).collect();
            let x = Exchange::new(self.params.spec.clone(), roles, None).begun_at(now);
            self.state = State::Running(Box::new(x));
            self.outcome.began = Some(now);
            self.actions.push_back(ClientAction::StartRoles);
            return;
        }
        self.actions.push_back(if next == PACKET_LOG_STREAM {
            ClientAction::OpenLog
        } else {
            ClientAction::OpenStream { stream: next }
        });
        self.state = State::Opening {
            what: next,
            deadline: now + SETUP_TIMEOUT,
            hello_at: None,
        };
    }

    fn opened(&mut self, now: Instant, stream: u32) {
        let State::Opening { what, hello_at, .. } = &mut self.state else {
            return;
        };
        if stream != *what || hello_at.is_some() {
            return;
        }
        if stream == PACKET_LOG_STREAM || self.params.spec.protocol != Protocol::Udp {
            return self.next_stream(now, Some(stream));
        }
        // UDP: the hello, until the server confirms it over this connection.
        self.state = State::Opening {
            what: stream,
            deadline: now + SETUP_TIMEOUT,
            hello_at: Some(now + HELLO_EVERY),
        };
        self.actions.push_back(ClientAction::SendHello { stream });
    }

    /// When to fetch the server's last words on a new connection (`RESULTS_STREAM`): once
    /// this side's report is out and the server's is [`FETCH_AFTER`] past due, or at once
    /// when the server closed the connection before it came; none otherwise, or when the
    /// server cannot have them (it has no test yet).
    pub fn fetch_due(&self) -> Option<Instant> {
        match &self.state {
            State::Running(x) => x.fetch_from(FETCH_AFTER),
            _ => None,
        }
    }

    /// The server's last words, fetched on a new connection: taken as if they came on this
    /// one (a report that arrives here too afterwards changes nothing, the session is over).
    /// Bytes that are not whole frames of its messages are ignored: the wait goes on.
    pub fn fetched(&mut self, now: Instant, mut frames: &[u8]) {
        let mut msgs = Vec::new();
        while let Ok(Some((msg, n))) =
            wirebench_proto::control::decode(frames, wirebench_proto::control::MAX_FRAME)
        {
            frames = &frames[n..];
            msgs.push(msg);
        }
        if !msgs.iter().any(|m| matches!(m, Message::Done { .. })) {
            return;
        }
        for msg in msgs {
            if let State::Running(x) = &mut self.state {
                x.on_message(now, &mut self.wire, msg, &mut self.run_actions);
            }
        }
        self.outcome.report_fetched = true;
        self.after_run();
    }

    /// The server's port refused the fetch's connection: nobody is there to send its report.
    /// A wait that goes on only for a fetch (the server closed the control connection) ends
    /// now; a control connection still open is waited on as before.
    pub fn fetch_refused(&mut self, now: Instant) {
        if let State::Running(x) = &mut self.state {
            x.give_up_fetch(now, &mut self.run_actions);
        }
        self.after_run();
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

    /// Ends the session with `error`; `tell` goes to the server first.
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

    fn end(&mut self, error: SessionError) {
        self.outcome.error.get_or_insert(error);
        self.state = State::Done;
        self.closing = true;
    }

    /// The server's first bytes are no wirebench control frame: say what it looks like.
    fn not_wirebench(&mut self) {
        let (seen, hint) = describe(self.wire.peek_prefix(64));
        self.wire.discard_output();
        self.end(SessionError::NotWirebench {
            server: self.params.server.clone(),
            seen,
            hint,
        });
    }
}

impl Session for ClientSession {
    /// Bytes to write to the control connection.
    fn poll_transmit(&self) -> Option<&[u8]> {
        self.wire.transmit()
    }

    /// The driver wrote `n` bytes of [`Self::poll_transmit`].
    fn handle_written(&mut self, now: Instant, n: usize) {
        self.wire.written(now, n);
    }

    /// Bytes read from the control connection.
    fn handle_bytes(&mut self, now: Instant, bytes: &[u8]) {
        if self.closing || bytes.is_empty() {
            return;
        }
        let first = !self.frames_seen && self.wire.buffered() == 0;
        self.wire.feed(bytes);
        if first {
            // A wirebench frame starts with the high byte of a length of at most 4 MiB: 0.
            if bytes[0] != 0 {
                return self.not_wirebench();
            }
            self.first_bytes_deadline = Some(now + FIRST_BYTES_TIMEOUT);
        }
        while !self.closing {
            match self.wire.next_message() {
                Ok(Some(msg)) => {
                    self.frames_seen = true;
                    self.first_bytes_deadline = None;
                    self.on_message(now, msg);
                }
                Ok(None) => break,
                Err(_) if !self.frames_seen => return self.not_wirebench(),
                Err(e) => {
                    let reason = e.to_string();
                    self.fail(now, SessionError::Protocol(reason.clone()), Some(&reason));
                }
            }
        }
    }

    /// The server closed the control connection.
    fn handle_closed(&mut self, now: Instant) {
        if self.closing {
            return;
        }
        if let State::Running(x) = &mut self.state {
            // Closed before the server's report came: it may still be fetched.
            if !x.on_closed_awaiting(now, &mut self.wire, FETCH_AFTER_CLOSE) {
                x.on_closed(now, &mut self.wire, &mut self.run_actions);
            }
            return self.after_run();
        }
        self.wire.discard_output();
        if !self.frames_seen && self.wire.buffered() > 0 {
            return self.not_wirebench();
        }
        self.end(SessionError::PeerClosed);
    }

    /// Deadlines that have passed by `now`.
    fn handle_timeout(&mut self, now: Instant) {
        if self.closing {
            if self.wire.write_deadline().is_some_and(|t| now >= t) {
                self.wire.discard_output();
            }
            return;
        }
        if self.wire.write_deadline().is_some_and(|t| now >= t) {
            self.wire.discard_output();
            let e = SessionError::Timeout("the server to read the control connection");
            return self.fail(now, e, None);
        }
        if self.first_bytes_deadline.is_some_and(|t| now >= t) {
            return self.not_wirebench();
        }
        match &mut self.state {
            State::Answer { deadline, .. } if now >= *deadline => self.fail(
                now,
                SessionError::Timeout(
                    "the server's answer (is a wirebench server listening there?)",
                ),
                None,
            ),
            State::Opening {
                what,
                deadline,
                hello_at,
            } => {
                if now >= *deadline {
                    let what = match (hello_at.is_some(), *what) {
                        (true, _) => "the server to see our UDP datagrams (is UDP to the server's port blocked?)",
                        (false, PACKET_LOG_STREAM) => "the packet log connection",
                        (false, _) => "a data connection",
                    };
                    return self.fail(now, SessionError::Timeout(what), None);
                }
                if hello_at.is_some_and(|t| now >= t) {
                    *hello_at = Some(now + HELLO_EVERY);
                    let stream = *what;
                    self.actions.push_back(ClientAction::SendHello { stream });
                }
            }
            State::Running(x) => {
                x.on_timeout(now, &mut self.run_actions);
                self.after_run();
            }
            _ => {}
        }
    }

    /// When the session next needs [`Self::handle_timeout`].
    fn poll_timeout(&self) -> Option<Instant> {
        if self.is_closed() {
            return None;
        }
        if self.closing {
            return self.wire.write_deadline();
        }
        let state = match &self.state {
            State::Answer { deadline, .. } => Some(*deadline),
            State::Opening {
                deadline, hello_at, ..
            } => earliest([Some(*deadline), *hello_at]),
            State::Running(x) => x.poll_timeout(),
            State::Done => None,
        };
        earliest([self.wire.write_deadline(), self.first_bytes_deadline, state])
    }
}

/// iperf3's control states, as its server sends them as single bytes (`iperf_api.h`):
/// PARAM_EXCHANGE 9 is what it answers a connection with, ACCESS_DENIED -1 when busy,
/// SERVER_ERROR -2.
const IPERF3_STATES: [u8; 13] = [1, 2, 4, 9, 10, 11, 12, 13, 14, 15, 16, 0xff, 0xfe];

/// What the first bytes look like, and what to do about it.
fn describe(bytes: &[u8]) -> (String, &'static str) {
    const SERVE: &str = "check the host and --port, and run `wirebench serve` there";
    let text = |b: &[u8]| {
        let line = b.split(|c| *c == b'\r' || *c == b'\n').next().unwrap_or(b);
        String::from_utf8_lossy(&line[..line.len().min(40)]).into_owned()
    };
    match bytes {
        [] => ("nothing that makes a control frame".into(), SERVE),
        b if b.starts_with(b"HTTP/") => (
            format!("like an HTTP server ({:?})", text(b)),
            "it is a web server's port; check the host and --port",
        ),
        [b, ..] if IPERF3_STATES.contains(b) && bytes.len() <= 2 => (
            format!("like an iperf3 server (state byte {})", *b as i8),
            "measure against it with `wirebench run --iperf3 HOST[:PORT]`, or run \
             `wirebench serve` there",
        ),
        b if b
            .iter()
            .take(16)
            .all(|c| c.is_ascii_graphic() || *c == b' ') =>
        {
            (format!("with text {:?}", text(b)), SERVE)
        }
        b => {
            let hex: Vec<String> = b.iter().take(8).map(|c| format!("{c:02x}")).collect();
            (
                format!("with bytes {} that are no control frame", hex.join(" ")),
                SERVE,
            )
        }
    }
}
