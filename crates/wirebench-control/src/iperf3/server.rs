//! An iperf3 server's control session: cookie, parameters, streams, run, end, results.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use super::admit::{admit_with, Admitted, ErrorCode, SocketOptions};
use super::codec::{
    check_cookie, frame_json, Expect, Item, Params, Reader, ResultsDoc, State, COOKIE_LEN,
    MAX_PARAMS_JSON, MAX_PEER_RESULTS_JSON,
};
use super::{Iperf3Error, STEP_TIMEOUT};
use crate::admission::{Refusal, SpecLimits, DEFAULT_MAX_DURATION};
use crate::Session;

/// How long a running test may go without a byte from the client, on its control
/// connection or its streams (received, or sent and taken by its socket), as wirebench's
/// own tests: a stuck client frees its slot, whatever `-t` it declared.
pub const IDLE_LIMIT: Duration = Duration::from_secs(30);

/// How long past the server's longest test an iperf3 client may take to end it before the
/// server ends it (the client's clock starts when TEST_RUNNING reaches it, after ours).
pub const DURATION_GRACE: Duration = Duration::from_secs(1);

/// How long past its own `-t` a timed test may run before the server ends it: the client
/// sends TEST_END at its end, so this bounds a client that receives UDP and says nothing
/// (whose silence the idle limit cannot tell from a good test's).
pub const DECLARED_GRACE: Duration = Duration::from_secs(10);

/// The largest results document the server sends (1 MiB, what wirebench's own iperf3
/// client reads): the results with the server's output, or without it when that would be
/// larger.
pub const MAX_RESULTS_JSON: usize = super::codec::MAX_JSON;

/// A results document over [`MAX_RESULTS_JSON`], not queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResultsTooLarge {
    /// Its length, serialised.
    pub bytes: usize,
}

/// Which time bound ended a running test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeUp {
    /// The server's longest test (`--max-duration`, or its default) and its grace.
    MaxDuration,
    /// The client's own `-t` and [`DECLARED_GRACE`], without its TEST_END.
    Declared {
        /// The client's `-t`, seconds.
        time_s: u64,
    },
}

impl TimeUp {
    /// The server limit it is, as `--metrics` counts it: none for the client's own time.
    pub fn limit(self) -> Option<wirebench_proto::error_kind::ErrorKind> {
        match self {
            Self::MaxDuration => Some(wirebench_proto::error_kind::ErrorKind::MaxDuration),
            Self::Declared { .. } => None,
        }
    }
}

impl std::fmt::Display for TimeUp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::MaxDuration => {
                f.write_str("the server ended the test at its time limit (serve --max-duration)")
            }
            Self::Declared { time_s } => write!(
                f,
                "the client did not end its {time_s} s test within {} s of its end",
                DECLARED_GRACE.as_secs()
            ),
        }
    }
}

/// What the driver must do next.
#[derive(Debug, Clone, PartialEq)]
pub enum ServerAction {
    /// The cookie arrived: admit the test ([`ServerSession::welcome`]) or deny it.
    Cookie([u8; COOKIE_LEN]),
    /// The parameters arrived and are within the server's limits: set the streams up and
    /// accept them ([`ServerSession::accept`]).
    Params(Admitted),
    /// The parameters are over a limit: the session has answered SERVER_ERROR and is over.
    Refused(Refusal),
    /// A running test reached a time bound: end it ([`ServerSession::terminate`]).
    TimeUp(TimeUp),
    /// The client ended the test (TEST_END): stop sending, then
    /// [`ServerSession::exchange`].
    TestEnd,
    /// The client's results arrived: answer with [`ServerSession::send_results`].
    PeerResults(ResultsDoc),
    /// The client said IPERF_DONE (or closed after the results): over.
    Done,
    /// The session failed.
    Failed(Iperf3Error),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Cookie,
    /// Waiting for the driver's decision.
    Deciding,
    Params,
    /// Streams being opened: state bytes.
    States,
    /// The test running: state bytes, and data on the streams.
    Running,
    PeerResults,
    /// Results sent: IPERF_DONE next.
    Finishing,
    Over,
}

/// The session.
#[derive(Debug)]
pub struct ServerSession {
    out: Vec<u8>,
    reader: Reader,
    phase: Phase,
    actions: VecDeque<ServerAction>,
    deadline: Option<Instant>,
    limits: SpecLimits,
    /// The admitted test's own length, if it is timed.
    declared: Option<Duration>,
    /// While running: when the time bound ends it, and which bound that is.
    end_by: Option<(Instant, TimeUp)>,
    /// While running: when it ends for want of a byte from the client.
    idle_by: Option<Instant>,
}

impl ServerSession {
    /// A session on a new control connection of a server with these `limits`.
    pub fn new(now: Instant, limits: SpecLimits) -> Self {
        Self {
            out: Vec::new(),
            reader: Reader::default(),
            phase: Phase::Cookie,
            actions: VecDeque::new(),
            deadline: Some(now + STEP_TIMEOUT),
            limits,
            declared: None,
            end_by: None,
            idle_by: None,
        }
    }

    /// The next action.
    pub fn poll_action(&mut self) -> Option<ServerAction> {
        self.actions.pop_front()
    }

    /// Whether the session has ended.
    pub fn is_over(&self) -> bool {
        self.phase == Phase::Over
    }

    /// Whether the test runs: from TEST_RUNNING to the client's TEST_END or a time bound.
    pub fn is_running(&self) -> bool {
        self.phase == Phase::Running
    }

    fn fail(&mut self, e: Iperf3Error) {
        if self.phase != Phase::Over {
            self.phase = Phase::Over;
            self.deadline = None;
            self.actions.push_back(ServerAction::Failed(e));
        }
    }

    /// A running test's deadlines: its time bound ends it in order (the driver terminates
    /// it); a silent client's ends it at once, telling the client (if it still listens) that
    /// the server ended it.
    fn running_timeout(&mut self, now: Instant) {
        if let Some((_, why)) = self.end_by.filter(|(at, _)| now >= *at) {
            self.phase = Phase::Deciding;
            self.deadline = None;
            self.actions.push_back(ServerAction::TimeUp(why));
        } else if self.idle_by.is_some_and(|at| now >= at) {
            self.out.push(State::ServerTerminate.byte());
            self.fail(Iperf3Error::Idle(IDLE_LIMIT.as_secs()));
        }
    }

    /// Data moved on the test's streams (or a stream arrived): the client is alive. The
    /// driver calls this when it sees the streams' counts move, once a tick, not per packet.
    pub fn handle_activity(&mut self, now: Instant) {
        if self.phase == Phase::Running {
            self.idle_by = Some(now + IDLE_LIMIT);
            self.set_running_deadline();
        }
    }

    fn set_running_deadline(&mut self) {
        let end = self.end_by.map(|(at, _)| at);
        self.deadline = match (end, self.idle_by) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
    }

    /// Admits the test: PARAM_EXCHANGE.
    pub fn welcome(&mut self, now: Instant) {
        if self.phase == Phase::Deciding {
            self.out.push(State::ParamExchange.byte());
            self.phase = Phase::Params;
            self.deadline = Some(now + STEP_TIMEOUT);
        }
    }

    /// Refuses the test as iperf3 does when busy: ACCESS_DENIED, then the end.
    pub fn deny(&mut self) {
        self.out.push(State::AccessDenied.byte());
        self.phase = Phase::Over;
        self.deadline = None;
    }

    /// Refuses, or ends a running test, with SERVER_ERROR: iperf3's error `code` and an
    /// `errno` (iperf3 clients print `strerror(errno)` after the texts of some codes).
    pub fn refuse(&mut self, code: i32, errno: i32) {
        self.out.push(State::ServerError.byte());
        self.out.extend_from_slice(&code.to_be_bytes());
        self.out.extend_from_slice(&errno.to_be_bytes());
        self.phase = Phase::Over;
        self.deadline = None;
    }

    /// Ends a running test from this side (a server limit, a shutdown): SERVER_TERMINATE,
    /// which iperf3 clients report as "the server has terminated" after their summary.
    pub fn terminate(&mut self) {
        if self.phase != Phase::Over {
            self.out.push(State::ServerTerminate.byte());
            self.phase = Phase::Over;
            self.deadline = None;
        }
    }

    /// Accepts the parameters: CREATE_STREAMS; streams must arrive within the step time.
    pub fn accept(&mut self, now: Instant) {
        if self.phase == Phase::Deciding {
            self.out.push(State::CreateStreams.byte());
            self.phase = Phase::States;
            self.deadline = Some(now + STEP_TIMEOUT);
        }
    }

    /// Every stream is there: TEST_START and TEST_RUNNING. The test ends at the server's
    /// longest test (with [`DURATION_GRACE`]), at its own `-t` (with [`DECLARED_GRACE`]) if
    /// it is timed, and after [`IDLE_LIMIT`] without a byte from the client.
    pub fn run(&mut self, now: Instant) {
        if self.phase == Phase::States {
            self.out.push(State::TestStart.byte());
            self.out.push(State::TestRunning.byte());
            self.phase = Phase::Running;
            let longest = self.limits.max_duration.unwrap_or(DEFAULT_MAX_DURATION);
            let server = (now + longest + DURATION_GRACE, TimeUp::MaxDuration);
            self.end_by = Some(match self.declared {
                Some(t) if t + DECLARED_GRACE < longest + DURATION_GRACE => {
                    let time_s = t.as_secs();
                    (now + t + DECLARED_GRACE, TimeUp::Declared { time_s })
                }
                _ => server,
            });
            self.idle_by = Some(now + IDLE_LIMIT);
            self.set_running_deadline();
        }
    }

    /// Sending stopped after TEST_END: EXCHANGE_RESULTS; the client's results come next.
    pub fn exchange(&mut self, now: Instant) {
        if self.phase == Phase::Deciding {
            self.out.push(State::ExchangeResults.byte());
            self.phase = Phase::PeerResults;
            self.deadline = Some(now + STEP_TIMEOUT);
        }
    }

    /// This side's results (a [`ResultsDoc`], with the server's output if the client asked
    /// for it), then DISPLAY_RESULTS. A document over [`MAX_RESULTS_JSON`] is not queued:
    /// the session stays where it was and says how long it was, so the driver can send a
    /// smaller one (the results without the server's output). The session never holds more
    /// than its state bytes and one results frame of at most that size.
    pub fn send_results(
        &mut self,
        now: Instant,
        doc: &impl serde::Serialize,
    ) -> Result<(), ResultsTooLarge> {
        if self.phase == Phase::Deciding {
            let frame = frame_json(doc);
            let body = frame.len() - 4;
            if body > MAX_RESULTS_JSON {
                return Err(ResultsTooLarge { bytes: body });
            }
            self.out.extend_from_slice(&frame);
            self.out.push(State::DisplayResults.byte());
            self.phase = Phase::Finishing;
            self.deadline = Some(now + STEP_TIMEOUT);
        }
        Ok(())
    }

    /// The parameters: admitted within the server's limits, or refused with the iperf3
    /// error code that says why.
    fn on_params(&mut self, p: Params, options: SocketOptions) {
        match admit_with(p, options, &self.limits) {
            Ok(a) => {
                self.declared = a.declared();
                self.phase = Phase::Deciding;
                self.deadline = None;
                self.actions.push_back(ServerAction::Params(a));
            }
            Err((r, code)) => {
                self.refuse(code.code, code.errno);
                self.actions.push_back(ServerAction::Refused(r));
            }
        }
    }

    /// Refuses the parameters for `r` in iperf3's words, and tells the driver why: when the
    /// driver decides, after the parameters passed (the server's memory budget).
    pub fn refuse_for(&mut self, r: Refusal, udp: bool) {
        let code = ErrorCode::of(&r, udp);
        self.refuse(code.code, code.errno);
        self.actions.push_back(ServerAction::Refused(r));
    }

    fn on_item(&mut self, _now: Instant, item: Item) {
        match (self.phase, item) {
            (Phase::Params, Item::Json(doc)) => {
                match Params::parse(&doc).and_then(|p| Ok((p, SocketOptions::parse(&doc)?))) {
                    Ok((p, options)) => self.on_params(p, options),
                    Err(e) => self.fail(e.into()),
                }
            }
            (Phase::PeerResults, Item::Json(doc)) => match ResultsDoc::parse(&doc) {
                Ok(r) => {
                    self.phase = Phase::Deciding;
                    self.deadline = None;
                    self.actions.push_back(ServerAction::PeerResults(r));
                }
                Err(e) => self.fail(e.into()),
            },
            (Phase::States | Phase::Running, Item::State(State::TestEnd)) => {
                self.phase = Phase::Deciding;
                self.deadline = None;
                self.actions.push_back(ServerAction::TestEnd);
            }
            (Phase::Finishing, Item::State(State::IperfDone)) => {
                self.phase = Phase::Over;
                self.deadline = None;
                self.actions.push_back(ServerAction::Done);
            }
            (_, Item::State(State::ClientTerminate)) => self.fail(Iperf3Error::ClientTerminated),
            (_, other) => {
                // Named, never printed whole: a document may be 64 KiB of the peer's bytes.
                let what = match other {
                    Item::State(s) => format!("{s:?}"),
                    Item::Json(doc) => format!("a JSON document of {} bytes", doc.len()),
                    Item::Error { code, errno } => format!("error {code} (errno {errno})"),
                };
                self.fail(Iperf3Error::Protocol(format!(
                    "unexpected {what} from the client"
                )))
            }
        }
    }
}

impl Session for ServerSession {
    /// Bytes to write.
    fn poll_transmit(&self) -> Option<&[u8]> {
        (!self.out.is_empty()).then_some(&self.out[..])
    }

    /// `n` bytes were written.
    fn handle_written(&mut self, _now: Instant, n: usize) {
        self.out.drain(..n.min(self.out.len()));
    }

    /// Bytes read from the control connection.
    fn handle_bytes(&mut self, now: Instant, bytes: &[u8]) {
        self.reader.push(bytes);
        loop {
            let item = match self.phase {
                Phase::Cookie => match self.reader.take_raw(COOKIE_LEN) {
                    Some(c) => match check_cookie(&c) {
                        Ok(c) => {
                            self.phase = Phase::Deciding;
                            self.deadline = None;
                            self.actions.push_back(ServerAction::Cookie(c));
                            continue;
                        }
                        Err(e) => return self.fail(e.into()),
                    },
                    None => return,
                },
                Phase::Params => self.reader.next(Expect::Json(MAX_PARAMS_JSON)),
                Phase::PeerResults => self.reader.next(Expect::Json(MAX_PEER_RESULTS_JSON)),
                Phase::States | Phase::Running | Phase::Finishing => {
                    self.reader.next(Expect::State)
                }
                Phase::Deciding | Phase::Over => return,
            };
            match item {
                Ok(Some(item)) => self.on_item(now, item),
                Ok(None) => return,
                Err(e) => return self.fail(e.into()),
            }
        }
    }

    /// The connection closed.
    fn handle_closed(&mut self, _now: Instant) {
        if self.phase == Phase::Finishing {
            // iperf3 clients may close right after IPERF_DONE, or instead of it.
            self.phase = Phase::Over;
            self.deadline = None;
            self.actions.push_back(ServerAction::Done);
        } else {
            self.fail(Iperf3Error::Closed);
        }
    }

    /// A deadline passed.
    fn handle_timeout(&mut self, now: Instant) {
        if self.phase == Phase::Running {
            return self.running_timeout(now);
        }
        if self.deadline.is_some_and(|d| now >= d) {
            let what = match self.phase {
                Phase::Cookie => "cookie",
                Phase::Params => "parameters",
                Phase::PeerResults => "results",
                Phase::States => "data streams",
                _ => "next control message",
            };
            self.fail(Iperf3Error::Timeout(what));
        }
    }

    /// The next deadline.
    fn poll_timeout(&self) -> Option<Instant> {
        self.deadline
    }

    /// Reads no further than the cookie before the driver decided (the rest may be a data
    /// connection's, or nothing).
    fn read_limit(&self) -> usize {
        match self.phase {
            Phase::Cookie => COOKIE_LEN.saturating_sub(self.reader.held()),
            Phase::Deciding | Phase::Over => 0,
            _ => usize::MAX,
        }
    }
}
