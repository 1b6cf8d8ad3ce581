//! A client session and a server session wired to each other in memory, with virtual time:
//! the harness moves bytes between them (the server never reading past its read limit),
//! answers the server's Admit with a real [`Admission`], routes data connections through a
//! second server session as the driver does, plays the roles with synthetic reports, and
//! jumps time to the next deadline.

use std::collections::VecDeque;
use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

use wirebench_proto::control::{encode, Message, PROTOCOL_VERSION};
use wirebench_proto::header::UdpHello;
use wirebench_proto::results::{Role, SideReport};
use wirebench_proto::spec::{Direction, Protocol, TestSpec};

use crate::admission::{Admission, SlotLimits, SpecLimits, Ticket};
use crate::client::{ClientAction, ClientEvent, ClientParams, ClientSession};
use crate::psk::Psk;
use crate::server::{ServerAction, ServerEvent, ServerParams, ServerSession};
use crate::Session;
use crate::{Outcome, RunAction};

/// The client's address as the server sees it.
pub(super) const CLIENT_IP: IpAddr = IpAddr::V4(Ipv4Addr::new(192, 0, 2, 7));

/// What a sender reports having sent.
pub(super) const SENT: u64 = 1000;

/// A one-stream TCP test of 1 MB.
pub fn spec() -> TestSpec {
    TestSpec::example()
}

/// A key.
pub(super) fn key(k: &str) -> Psk {
    Psk::new(format!("{k} is a key of enough bytes").as_bytes()).expect("a long key")
}

pub(super) fn client_params(spec: TestSpec, psk: Option<Psk>) -> ClientParams {
    ClientParams {
        spec,
        psk,
        nonce: "c0ffee".into(),
        tool: "wirebench test".into(),
        host_id: "client-host".into(),
        server: "server.test:5300".into(),
        packet_log: false,
    }
}

pub(super) fn server_params(limits: SpecLimits, psk: Option<Psk>, nonce: &str) -> ServerParams {
    ServerParams {
        limits,
        psk,
        nonce: nonce.into(),
        tool: "wirebench test".into(),
        host_id: "server-host".into(),
        udp_port: 5300,
    }
}

pub(super) fn slots(max_tests: usize) -> SlotLimits {
    SlotLimits {
        max_tests,
        per_client: None,
        per_minute: None,
    }
}

/// One side's synthetic roles.
#[derive(Debug, Default)]
pub(super) struct FakeRoles {
    pub started: Option<Instant>,
    pub roles: Vec<Role>,
    pub peer_counts: Vec<(u32, u64)>,
    pub stopped: bool,
    pub senders_reported: bool,
    pub done: bool,
    /// The roles never end by themselves (a receiver whose sender vanished).
    pub hang: bool,
}

impl FakeRoles {
    fn has(&self, r: Role) -> bool {
        self.roles.contains(&r)
    }

    /// When the senders finish by themselves.
    fn senders_end(&self, run: Duration) -> Option<Instant> {
        self.started.filter(|_| !self.hang).map(|t| t + run)
    }

    /// Every receiver stream has its peer's count.
    fn receivers_satisfied(&self) -> bool {
        self.roles
            .iter()
            .enumerate()
            .all(|(i, r)| *r != Role::Receiver || self.peer_counts.iter().any(|c| c.0 == i as u32))
    }

    fn report(&self, spec: &TestSpec) -> SideReport {
        let part = |role| SideReport {
            role: Some(role),
            messages: if role == Role::Sender { SENT } else { SENT - 1 },
            bytes: SENT * 1000,
            ..SideReport::default()
        };
        // Several streams each way: each stream's report inside the merge.
        let way = |role| {
            let mut r = part(role);
            if spec.streams > 1 {
                r.streams = (0..spec.streams).map(|_| part(role)).collect();
            }
            r
        };
        let mut r = way(self.roles[0]);
        if spec.direction == Direction::Bidir {
            r.reverse = Some(Box::new(way(self.roles[self.roles.len() - 1])));
        }
        r
    }
}

/// The two sessions and everything between them.
pub(super) struct Pair {
    pub base: Instant,
    pub now: Instant,
    pub client: ClientSession,
    pub server: ServerSession,
    pub admission: Admission,
    pub ticket: Option<Ticket>,
    pub shutting_down: bool,
    c2s: VecDeque<u8>,
    s2c: VecDeque<u8>,
    /// Each side reads its socket (false: a peer that stopped reading).
    pub client_reads: bool,
    pub server_reads: bool,
    /// The client is gone without a word: it neither writes nor closes.
    pub client_vanished: bool,
    client_eof_seen: bool,
    server_eof_seen: bool,
    /// UDP hellos to lose before one arrives (`u32::MAX`: all).
    pub lose_hellos: u32,
    pub hellos_sent: u32,
    /// Streams whose connection never arrives.
    pub lost_streams: Vec<u32>,
    /// TCP streams whose arrival the server has not seen yet, while `hold_arrivals` is set:
    /// the driver hands a data connection to the session later than the client opened it.
    pub held_arrivals: Vec<u32>,
    pub hold_arrivals: bool,
    pub cookie: Option<u64>,
    /// The TCP port the server's accept names for data connections (a user-space stack's).
    pub data_port: Option<u16>,
    pub client_roles: FakeRoles,
    pub server_roles: FakeRoles,
    /// How long the senders run.
    pub run: Duration,
    pub client_actions: Vec<ClientAction>,
    pub server_actions: Vec<ServerAction>,
    pub client_outcome: Option<Outcome>,
    pub server_outcome: Option<Outcome>,
    /// When each session closed.
    pub client_closed_at: Option<Instant>,
    pub server_closed_at: Option<Instant>,
    /// A client that reads slowly: the bytes it takes in each [`TICK`], a schedule cycled
    /// (0: a stall). None: it reads everything at once.
    pub client_read_plan: Option<Vec<usize>>,
    read_allowance: usize,
    plan_pos: usize,
    /// The server's roles close an interval this often while they run: one record per
    /// stream when the test asked for them (`live_streams`), and their sum.
    pub server_intervals: Option<Duration>,
    next_interval: Option<Instant>,
    next_tick: Instant,
    /// The most bytes the server's output held after any step.
    pub max_server_output: usize,
}

/// The harness's clock step while a client reads slowly or the server's roles close
/// intervals.
pub(super) const TICK: Duration = Duration::from_millis(10);

impl Pair {
    pub(super) fn new(client: ClientParams, server: ServerParams, admission: Admission) -> Self {
        let base = Instant::now();
        Self {
            base,
            now: base,
            client: ClientSession::new(base, client),
            server: ServerSession::new(base, server),
            admission,
            ticket: None,
            shutting_down: false,
            c2s: VecDeque::new(),
            s2c: VecDeque::new(),
            client_reads: true,
            server_reads: true,
            client_vanished: false,
            client_eof_seen: false,
            server_eof_seen: false,
            lose_hellos: 0,
            hellos_sent: 0,
            lost_streams: Vec::new(),
            held_arrivals: Vec::new(),
            hold_arrivals: false,
            cookie: None,
            data_port: None,
            client_roles: FakeRoles::default(),
            server_roles: FakeRoles::default(),
            run: Duration::from_secs(1),
            client_actions: Vec::new(),
            server_actions: Vec::new(),
            client_outcome: None,
            server_outcome: None,
            client_closed_at: None,
            server_closed_at: None,
            client_read_plan: None,
            read_allowance: 0,
            plan_pos: 0,
            server_intervals: None,
            next_interval: None,
            next_tick: base,
            max_server_output: 0,
        }
    }

    /// A plain pair: this spec and key on both sides, room for 4 tests.
    pub(super) fn with(spec: TestSpec) -> Self {
        Self::new(
            client_params(spec, None),
            server_params(SpecLimits::default(), None, "5eed"),
            Admission::new(slots(4)),
        )
    }

    /// Bytes on the connection to the server as if the client had sent them.
    pub(super) fn inject_to_server(&mut self, bytes: &[u8]) {
        self.c2s.extend(bytes);
    }

    /// The server sees the held streams arrive now.
    pub(super) fn release_arrivals(&mut self) {
        self.hold_arrivals = false;
        for stream in std::mem::take(&mut self.held_arrivals) {
            self.server
                .handle_event(self.now, ServerEvent::StreamArrived { stream });
        }
    }

    /// Virtual time since the start.
    pub(super) fn elapsed(&self) -> Duration {
        self.now - self.base
    }

    /// Runs until both sessions are closed or nothing is due before `limit`.
    pub(super) fn run_for(&mut self, limit: Duration) {
        let end = self.base + limit;
        loop {
            while self.step() {}
            if self.client_outcome.is_some() && self.server_outcome.is_some() {
                return;
            }
            let next = [
                self.client.poll_timeout(),
                self.server.poll_timeout(),
                self.role_deadline(),
                self.tick_due(),
            ]
            .into_iter()
            .flatten()
            .min();
            match next {
                Some(t) if t <= end => {
                    self.now = self.now.max(t);
                    self.tick();
                    if self.client.poll_timeout().is_some_and(|t| self.now >= t) {
                        self.client.handle_timeout(self.now);
                    }
                    if self.server.poll_timeout().is_some_and(|t| self.now >= t) {
                        self.server.handle_timeout(self.now);
                    }
                }
                _ => return,
            }
        }
    }

    /// Runs to the end (at most ten minutes of virtual time).
    pub(super) fn run(&mut self) {
        self.run_for(Duration::from_secs(600));
    }

    /// When the slow reader or the server's intervals next need the clock.
    fn tick_due(&self) -> Option<Instant> {
        let ticking = self.client_read_plan.is_some() || self.server_intervals.is_some();
        (ticking && self.server_outcome.is_none()).then_some(self.next_tick.max(self.now))
    }

    /// A tick of the clock: the slow reader's allowance grows; the server's running roles
    /// close their intervals.
    fn tick(&mut self) {
        if self.now < self.next_tick {
            return;
        }
        self.next_tick = self.now + TICK;
        if let Some(plan) = self.client_read_plan.as_ref().filter(|p| !p.is_empty()) {
            self.read_allowance += plan[self.plan_pos % plan.len()];
            self.plan_pos += 1;
        }
        let (Some(every), Some(started)) = (self.server_intervals, self.server_roles.started)
        else {
            return;
        };
        if self.server_roles.done {
            return;
        }
        let due = *self.next_interval.get_or_insert(started + every);
        if self.now < due {
            return;
        }
        self.next_interval = Some(due + every);
        let spec = self.server.spec().cloned().expect("a spec");
        let role = self.server_roles.roles[0];
        let record = wirebench_proto::results::IntervalRecord {
            start_ns: u64::try_from((due - every - started).as_nanos()).unwrap_or(0),
            end_ns: u64::try_from((due - started).as_nanos()).unwrap_or(0),
            bytes: 125_000,
            messages: 1000,
            jitter_ns: Some(1234.5),
            ..Default::default()
        };
        if spec.live_streams && spec.streams > 1 {
            for stream in 0..spec.total_streams() {
                self.server
                    .local_interval(self.now, role, record, Some(stream));
            }
        }
        self.server.local_interval(self.now, role, record, None);
    }

    fn role_deadline(&self) -> Option<Instant> {
        [&self.client_roles, &self.server_roles]
            .into_iter()
            .filter(|r| !r.done)
            .filter_map(|r| r.senders_end(self.run))
            .filter(|t| *t > self.now)
            .min()
    }

    /// Does what is due now; false when nothing was.
    fn step(&mut self) -> bool {
        let now = self.now;
        let mut progress = false;
        // Client → server, the server reading no more than its limit.
        if !self.client_vanished {
            if let Some(out) = self.client.poll_transmit() {
                let n = out.len();
                self.c2s.extend(out);
                self.client.handle_written(now, n);
                progress = true;
            }
        }
        if self.server_reads && !self.c2s.is_empty() {
            let n = self.server.read_limit().min(self.c2s.len());
            if n > 0 {
                let bytes: Vec<u8> = self.c2s.drain(..n).collect();
                self.server.handle_bytes(now, &bytes);
                progress = true;
            }
        }
        // Server → client: nothing moves while the client does not read; a slow reader
        // takes what its plan allows.
        if self.client_reads && !self.client_vanished {
            if let Some(out) = self.server.poll_transmit() {
                let n = match self.client_read_plan {
                    Some(_) => out.len().min(self.read_allowance),
                    None => out.len(),
                };
                if n > 0 {
                    self.read_allowance = self.read_allowance.saturating_sub(n);
                    self.s2c.extend(&out[..n]);
                    self.server.handle_written(now, n);
                    progress = true;
                }
            }
            if !self.s2c.is_empty() {
                let bytes: Vec<u8> = self.s2c.drain(..).collect();
                self.client.handle_bytes(now, &bytes);
                progress = true;
            }
        }
        // A closed session's socket is dropped: its peer reads the end of the stream.
        // (A client that vanished sends no end of stream either.)
        if self.client.is_closed()
            && self.c2s.is_empty()
            && !self.server_eof_seen
            && !self.client_vanished
        {
            self.server_eof_seen = true;
            self.server.handle_closed(now);
            progress = true;
        }
        if self.server.is_closed() && self.s2c.is_empty() && !self.client_eof_seen {
            self.client_eof_seen = true;
            self.client.handle_closed(now);
            progress = true;
        }
        while let Some(a) = self.client.poll_action() {
            self.client_actions.push(a.clone());
            self.client_action(a);
            progress = true;
        }
        while let Some(a) = self.server.poll_action() {
            self.server_actions.push(a.clone());
            self.server_action(a);
            progress = true;
        }
        progress |= self.roles_step(true);
        progress |= self.roles_step(false);
        let held = self.server.output_held();
        self.max_server_output = self.max_server_output.max(held);
        if self.client_outcome.is_none() {
            self.client_outcome = self.client.outcome();
            if self.client_outcome.is_some() {
                self.client_closed_at = Some(now);
            }
        }
        if self.server_outcome.is_none() {
            if let Some(o) = self.server.outcome() {
                self.server_closed_at = Some(now);
                if let Some(t) = self.ticket.take() {
                    self.admission.release(t);
                }
                self.server_outcome = Some(o);
            }
        }
        progress
    }

    fn client_action(&mut self, a: ClientAction) {
        let now = self.now;
        match a {
            ClientAction::Accepted { .. } => {}
            ClientAction::OpenLog => self
                .client
                .handle_event(now, ClientEvent::Opened { stream: u32::MAX }),
            ClientAction::OpenStream { stream } => {
                if self.client.spec().protocol == Protocol::Udp {
                    return self
                        .client
                        .handle_event(now, ClientEvent::Opened { stream });
                }
                if self.lost_streams.contains(&stream) {
                    return;
                }
                // The data connection's first frame goes through a server session of its
                // own, which must route it and read no byte past the frame.
                let frame = encode(&Message::Attach {
                    version: PROTOCOL_VERSION,
                    cookie: self.cookie.unwrap_or(0),
                    stream,
                })
                .expect("encodes");
                let mut conn =
                    ServerSession::new(now, server_params(SpecLimits::default(), None, "x"));
                let mut wire: Vec<u8> = frame.clone();
                wire.extend_from_slice(b"data that follows the attach");
                let mut read = 0;
                while !conn.is_closed() {
                    let n = conn.read_limit().min(wire.len() - read);
                    assert!(n > 0, "the attach frame was read whole");
                    conn.handle_bytes(now, &wire[read..read + n]);
                    read += n;
                }
                assert_eq!(read, frame.len(), "no byte past the attach is read");
                if let Some(ServerAction::Attach { cookie, stream }) = conn.poll_action() {
                    if Some(cookie) == self.cookie && self.hold_arrivals {
                        self.held_arrivals.push(stream);
                    } else if Some(cookie) == self.cookie {
                        self.server
                            .handle_event(now, ServerEvent::StreamArrived { stream });
                    }
                }
                self.client
                    .handle_event(now, ClientEvent::Opened { stream });
            }
            ClientAction::SendHello { stream } => {
                self.hellos_sent += 1;
                if self.lose_hellos > 0 {
                    self.lose_hellos -= 1;
                    return;
                }
                // The server's hello socket checks the cookie.
                let hello = UdpHello {
                    cookie: self.cookie.unwrap_or(0),
                    stream,
                };
                if Some(hello.cookie) == self.cookie && !self.lost_streams.contains(&stream) {
                    self.server
                        .handle_event(now, ServerEvent::StreamArrived { stream });
                }
            }
            ClientAction::StartRoles => {
                let spec = self.client.spec().clone();
                self.client_roles.started = Some(now);
                self.client_roles.roles = (0..spec.total_streams())
                    .map(|i| self.client.role_of(i))
                    .collect();
            }
            ClientAction::Run(RunAction::PeerCounts(c)) => self.client_roles.peer_counts.extend(c),
            ClientAction::Run(RunAction::StopRoles) => self.client_roles.stopped = true,
        }
    }

    fn server_action(&mut self, a: ServerAction) {
        let now = self.now;
        match a {
            ServerAction::Identified { .. }
            | ServerAction::Attach { .. }
            | ServerAction::StreamsReady => {}
            ServerAction::Admit => {
                let event = if self.shutting_down {
                    ServerEvent::Refused(crate::admission::Refusal::ShuttingDown)
                } else {
                    match self.admission.admit(now, CLIENT_IP) {
                        Ok(t) => {
                            self.ticket = Some(t);
                            let cookie = 0x5eed_0000_0000_0001;
                            self.cookie = Some(cookie);
                            ServerEvent::Admitted {
                                cookie,
                                bytes: None,
                                tcp_port: self.data_port,
                            }
                        }
                        Err(r) => ServerEvent::Refused(r),
                    }
                };
                self.server.handle_event(now, event);
            }
            ServerAction::StartRoles => {
                let spec = self.server.spec().cloned().expect("a spec");
                self.server_roles.started = Some(now);
                self.server_roles.roles = (0..spec.total_streams())
                    .map(|i| ServerSession::role_of(&spec, i))
                    .collect();
            }
            ServerAction::Run(RunAction::PeerCounts(c)) => self.server_roles.peer_counts.extend(c),
            ServerAction::Run(RunAction::StopRoles) => self.server_roles.stopped = true,
        }
    }

    /// Plays one side's roles: senders end after `run`, receivers once they have their
    /// peer's counts, everything at once when stopped.
    fn roles_step(&mut self, client: bool) -> bool {
        let now = self.now;
        let run = self.run;
        let roles = if client {
            &mut self.client_roles
        } else {
            &mut self.server_roles
        };
        if roles.started.is_none() || roles.done {
            return false;
        }
        let senders_done = roles.stopped
            || !roles.has(Role::Sender)
            || roles.senders_end(run).is_some_and(|t| now >= t);
        let mut events = Vec::new();
        if senders_done && !roles.senders_reported && roles.has(Role::Sender) {
            roles.senders_reported = true;
            if roles.has(Role::Receiver) {
                let counts = roles
                    .roles
                    .iter()
                    .enumerate()
                    .filter(|(_, r)| **r == Role::Sender)
                    .map(|(i, _)| (i as u32, SENT))
                    .collect();
                events.push(Some(counts));
            }
        }
        let all_done =
            roles.stopped || (senders_done && roles.receivers_satisfied() && !roles.hang);
        let spec = if client {
            self.client.spec().clone()
        } else {
            self.server.spec().cloned().expect("a spec")
        };
        let roles = if client {
            &mut self.client_roles
        } else {
            &mut self.server_roles
        };
        let report = all_done.then(|| {
            roles.done = true;
            roles.report(&spec)
        });
        let progress = !events.is_empty() || report.is_some();
        for counts in events.into_iter().flatten() {
            if client {
                self.client
                    .handle_event(now, ClientEvent::SendersDone { counts });
            } else {
                self.server
                    .handle_event(now, ServerEvent::SendersDone { counts });
            }
        }
        if let Some(report) = report {
            if client {
                self.client.handle_event(
                    now,
                    ClientEvent::RolesDone {
                        report: Box::new(report),
                    },
                );
            } else {
                self.server.handle_event(
                    now,
                    ServerEvent::RolesDone {
                        report: Box::new(report),
                    },
                );
            }
        }
        progress
    }

    /// The client's error, as the user would read it.
    pub(super) fn client_error(&self) -> String {
        self.client_outcome
            .as_ref()
            .and_then(|o| o.error.as_ref())
            .map_or_else(String::new, |e| e.to_string())
    }

    /// The server's error, as its log would say it.
    pub(super) fn server_error(&self) -> String {
        self.server_outcome
            .as_ref()
            .and_then(|o| o.error.as_ref())
            .map_or_else(String::new, |e| e.to_string())
    }
}

/// A server session alone, fed raw bytes.
pub(super) struct Lone {
    pub base: Instant,
    pub server: ServerSession,
    pub sent: Vec<Message>,
    decoder: wirebench_proto::control::FrameDecoder,
}

impl Lone {
    pub(super) fn new(params: ServerParams) -> Self {
        let base = Instant::now();
        Self {
            base,
            server: ServerSession::new(base, params),
            sent: Vec::new(),
            decoder: wirebench_proto::control::FrameDecoder::new(usize::MAX >> 1),
        }
    }

    /// Feeds `bytes` at `at`, then collects what the server wrote.
    pub(super) fn feed(&mut self, at: Duration, bytes: &[u8]) {
        self.server.handle_bytes(self.base + at, bytes);
        self.collect(at);
    }

    /// Jumps to `at` and runs the deadlines due.
    pub(super) fn advance(&mut self, at: Duration) {
        let now = self.base + at;
        if self.server.poll_timeout().is_some_and(|t| now >= t) {
            self.server.handle_timeout(now);
        }
        self.collect(at);
    }

    fn collect(&mut self, at: Duration) {
        if let Some(out) = self.server.poll_transmit() {
            let n = out.len();
            self.decoder.feed(out);
            self.server.handle_written(self.base + at, n);
        }
        while let Ok(Some(m)) = self.decoder.next_message() {
            self.sent.push(m);
        }
    }
}
