//! An iperf3 server's control session: cookie, parameters, streams, run, end, results.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use super::codec::{
    check_cookie, frame_json, Expect, Item, Params, Reader, ResultsDoc, State, COOKIE_LEN,
};
use super::{Iperf3Error, STEP_TIMEOUT};

/// What the driver must do next.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum ServerAction {
    /// The cookie arrived: admit the test ([`ServerSession::welcome`]) or deny it.
    Cookie([u8; COOKIE_LEN]),
    /// The parameters arrived: accept ([`ServerSession::accept`]) or refuse them.
    Params(Params),
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
    /// Streams being opened, then the test running: state bytes.
    States,
    PeerResults,
    /// Results sent: IPERF_DONE next.
    Finishing,
    Over,
}

/// The session.
#[derive(Debug)]
pub(crate) struct ServerSession {
    out: Vec<u8>,
    reader: Reader,
    phase: Phase,
    actions: VecDeque<ServerAction>,
    deadline: Option<Instant>,
}

impl ServerSession {
    /// A session on a new control connection.
    pub(crate) fn new(now: Instant) -> Self {
        Self {
            out: Vec::new(),
            reader: Reader::default(),
            phase: Phase::Cookie,
            actions: VecDeque::new(),
            deadline: Some(now + STEP_TIMEOUT),
        }
    }

    /// Bytes to write.
    pub(crate) fn poll_transmit(&self) -> Option<&[u8]> {
        (!self.out.is_empty()).then_some(&self.out[..])
    }

    /// `n` bytes were written.
    pub(crate) fn handle_written(&mut self, _now: Instant, n: usize) {
        self.out.drain(..n.min(self.out.len()));
    }

    /// The next action.
    pub(crate) fn poll_action(&mut self) -> Option<ServerAction> {
        self.actions.pop_front()
    }

    /// The next deadline.
    pub(crate) fn poll_timeout(&self) -> Option<Instant> {
        self.deadline
    }

    /// Whether the session has ended.
    pub(crate) fn is_over(&self) -> bool {
        self.phase == Phase::Over
    }

    /// Reads no further than the cookie before the driver decided (the rest may be a data
    /// connection's, or nothing).
    pub(crate) fn read_limit(&self) -> usize {
        match self.phase {
            Phase::Cookie => COOKIE_LEN.saturating_sub(self.reader.held()),
            Phase::Deciding | Phase::Over => 0,
            _ => usize::MAX,
        }
    }

    fn fail(&mut self, e: Iperf3Error) {
        if self.phase != Phase::Over {
            self.phase = Phase::Over;
            self.deadline = None;
            self.actions.push_back(ServerAction::Failed(e));
        }
    }

    /// A deadline passed.
    pub(crate) fn handle_timeout(&mut self, now: Instant) {
        if self.deadline.is_some_and(|d| now >= d) {
            let what = match self.phase {
                Phase::Cookie => "cookie",
                Phase::Params => "parameters",
                Phase::PeerResults => "results",
                Phase::States => "end of the test",
                _ => "next control message",
            };
            self.fail(Iperf3Error::Timeout(what));
        }
    }

    /// The connection closed.
    pub(crate) fn handle_closed(&mut self, _now: Instant) {
        if self.phase == Phase::Finishing {
            // iperf3 clients may close right after IPERF_DONE, or instead of it.
            self.phase = Phase::Over;
            self.deadline = None;
            self.actions.push_back(ServerAction::Done);
        } else {
            self.fail(Iperf3Error::Closed);
        }
    }

    /// Admits the test: PARAM_EXCHANGE.
    pub(crate) fn welcome(&mut self, now: Instant) {
        if self.phase == Phase::Deciding {
            self.out.push(State::ParamExchange.byte());
            self.phase = Phase::Params;
            self.deadline = Some(now + STEP_TIMEOUT);
        }
    }

    /// Refuses the test as iperf3 does when busy: ACCESS_DENIED, then the end.
    pub(crate) fn deny(&mut self) {
        self.out.push(State::AccessDenied.byte());
        self.phase = Phase::Over;
        self.deadline = None;
    }

    /// Refuses, or ends a running test, with SERVER_ERROR: iperf3's error `code` and an
    /// `errno` (iperf3 clients print `strerror(errno)` after the texts of some codes).
    pub(crate) fn refuse(&mut self, code: i32, errno: i32) {
        self.out.push(State::ServerError.byte());
        self.out.extend_from_slice(&code.to_be_bytes());
        self.out.extend_from_slice(&errno.to_be_bytes());
        self.phase = Phase::Over;
        self.deadline = None;
    }

    /// Ends a running test from this side (a server limit, a shutdown): SERVER_TERMINATE,
    /// which iperf3 clients report as "the server has terminated" after their summary.
    pub(crate) fn terminate(&mut self) {
        if self.phase != Phase::Over {
            self.out.push(State::ServerTerminate.byte());
            self.phase = Phase::Over;
            self.deadline = None;
        }
    }

    /// Accepts the parameters: CREATE_STREAMS; streams must arrive within the step time.
    pub(crate) fn accept(&mut self, now: Instant) {
        if self.phase == Phase::Deciding {
            self.out.push(State::CreateStreams.byte());
            self.phase = Phase::States;
            self.deadline = Some(now + STEP_TIMEOUT);
        }
    }

    /// Every stream is there: TEST_START and TEST_RUNNING. The test must end by
    /// `limit` after now (the server's longest test and a grace), if given.
    pub(crate) fn run(&mut self, now: Instant, limit: Option<Duration>) {
        if self.phase == Phase::States {
            self.out.push(State::TestStart.byte());
            self.out.push(State::TestRunning.byte());
            self.deadline = limit.map(|l| now + l);
        }
    }

    /// Sending stopped after TEST_END: EXCHANGE_RESULTS; the client's results come next.
    pub(crate) fn exchange(&mut self, now: Instant) {
        if self.phase == Phase::Deciding {
            self.out.push(State::ExchangeResults.byte());
            self.phase = Phase::PeerResults;
            self.deadline = Some(now + STEP_TIMEOUT);
        }
    }

    /// This side's results, then DISPLAY_RESULTS.
    pub(crate) fn send_results(&mut self, now: Instant, doc: &ResultsDoc) {
        if self.phase == Phase::Deciding {
            self.out.extend_from_slice(&frame_json(doc));
            self.out.push(State::DisplayResults.byte());
            self.phase = Phase::Finishing;
            self.deadline = Some(now + STEP_TIMEOUT);
        }
    }

    /// Bytes read from the control connection.
    pub(crate) fn handle_bytes(&mut self, now: Instant, bytes: &[u8]) {
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
                Phase::Params | Phase::PeerResults => self.reader.next(Expect::Json),
                Phase::States | Phase::Finishing => self.reader.next(Expect::State),
                Phase::Deciding | Phase::Over => return,
            };
            match item {
                Ok(Some(item)) => self.on_item(now, item),
                Ok(None) => return,
                Err(e) => return self.fail(e.into()),
            }
        }
    }

    fn on_item(&mut self, _now: Instant, item: Item) {
        match (self.phase, item) {
            (Phase::Params, Item::Json(doc)) => match Params::parse(&doc) {
                Ok(p) => {
                    self.phase = Phase::Deciding;
                    self.deadline = None;
                    self.actions.push_back(ServerAction::Params(p));
                }
                Err(e) => self.fail(e.into()),
            },
            (Phase::PeerResults, Item::Json(doc)) => match ResultsDoc::parse(&doc) {
                Ok(r) => {
                    self.phase = Phase::Deciding;
                    self.deadline = None;
                    self.actions.push_back(ServerAction::PeerResults(r));
                }
                Err(e) => self.fail(e.into()),
            },
            (Phase::States, Item::State(State::TestEnd)) => {
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
            (_, other) => self.fail(Iperf3Error::Protocol(format!(
                "unexpected {other:?} from the client"
            ))),
        }
    }
}
