//! An iperf3 client's control session: cookie, parameters, streams, run, end, results.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use super::codec::{
    frame_json, Expect, Item, Params, Reader, ResultsDoc, State, COOKIE_LEN, MAX_JSON,
};
use super::{Iperf3Error, STEP_TIMEOUT};
use crate::Session;

/// What the driver must do next.
#[derive(Debug, Clone, PartialEq)]
pub enum ClientAction {
    /// Open the data streams now (CREATE_STREAMS).
    CreateStreams,
    /// Start moving data (TEST_RUNNING).
    Run,
    /// This side's test is over (its time is up or its amount moved): stop sending.
    /// TEST_END is queued behind it.
    StopSending,
    /// The server asks for this side's results: call [`ClientSession::send_results`].
    SendResults,
    /// The server's results arrived.
    PeerResults(ResultsDoc),
    /// The exchange is over (IPERF_DONE sent).
    Done,
    /// The session failed.
    Failed(Iperf3Error),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Waiting for a state byte.
    States,
    /// SERVER_ERROR came; its code follows.
    ErrorCode,
    /// Our results are sent; the server's follow.
    PeerResults,
    /// Over.
    Over,
}

/// What this side's streams have moved so far, as the driver sees it once a tick.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Progress {
    /// Every sending stream has sent its share of the amount.
    pub senders_finished: bool,
    /// Bytes the receiving streams took, all together.
    pub received: u64,
}

/// The session.
#[derive(Debug)]
pub struct ClientSession {
    out: Vec<u8>,
    reader: Reader,
    params: Params,
    /// A timed test's length, to the nanosecond (the parameters carry whole seconds).
    length: Option<Duration>,
    phase: Phase,
    running: bool,
    actions: VecDeque<ClientAction>,
    deadline: Option<Instant>,
    /// Whether every stream of the server's results carried its counts at the end of the
    /// omitted seconds (`omitted_packets`, `omitted_errors`: iperf3 3.14 and later).
    peer_counts_omitted: bool,
}

impl ClientSession {
    /// A session that starts by sending `cookie`, for a test of `params` that this side
    /// ends after `length` once it runs (a timed test), or once its amount moved (`num`).
    pub fn new(
        now: Instant,
        cookie: [u8; COOKIE_LEN],
        params: Params,
        length: Option<Duration>,
    ) -> Self {
        Self {
            out: cookie.to_vec(),
            reader: Reader::default(),
            params,
            length,
            phase: Phase::States,
            running: false,
            actions: VecDeque::new(),
            deadline: Some(now + STEP_TIMEOUT),
            peer_counts_omitted: false,
        }
    }

    /// Whether the server's results (once [`ClientAction::PeerResults`] came) gave each
    /// stream's counts at the end of the omitted seconds; servers before iperf3 3.14 do not.
    pub fn peer_counts_omitted(&self) -> bool {
        self.peer_counts_omitted
    }

    /// The next action.
    pub fn poll_action(&mut self) -> Option<ClientAction> {
        self.actions.pop_front()
    }

    /// Whether the session has ended (done or failed).
    #[cfg(test)]
    pub fn is_over(&self) -> bool {
        self.phase == Phase::Over
    }

    fn fail(&mut self, e: Iperf3Error) {
        if self.phase != Phase::Over {
            self.phase = Phase::Over;
            self.deadline = None;
            self.actions.push_back(ClientAction::Failed(e));
        }
    }

    /// What the running test's streams moved: a test of an amount ends once every
    /// direction this side takes part in has moved it (its senders their shares, its
    /// receivers the whole).
    pub fn handle_progress(&mut self, now: Instant, moved: Progress) {
        let p = &self.params;
        if !self.running || p.num == 0 {
            return;
        }
        let sends = !p.reverse || p.bidirectional;
        let receives = p.reverse || p.bidirectional;
        if (!sends || moved.senders_finished) && (!receives || moved.received >= p.num) {
            self.end_test(now);
        }
    }

    /// The test is over on this side (time or amount reached): stop sending, TEST_END.
    fn end_test(&mut self, now: Instant) {
        if self.running && self.phase == Phase::States {
            self.running = false;
            self.actions.push_back(ClientAction::StopSending);
            self.out.push(State::TestEnd.byte());
            self.deadline = Some(now + STEP_TIMEOUT);
        }
    }

    /// This side's results, asked for by [`ClientAction::SendResults`].
    pub fn send_results(&mut self, now: Instant, doc: &ResultsDoc) {
        if self.phase == Phase::States {
            self.out.extend_from_slice(&frame_json(doc));
            self.phase = Phase::PeerResults;
            self.deadline = Some(now + STEP_TIMEOUT);
        }
    }

    fn on_item(&mut self, now: Instant, item: Item) {
        match item {
            Item::State(s) => self.on_state(now, s),
            Item::Json(doc) => match ResultsDoc::parse(&doc) {
                Ok(r) => {
                    self.peer_counts_omitted = counts_omitted(&doc, r.streams.len());
                    self.phase = Phase::States;
                    self.deadline = Some(now + STEP_TIMEOUT);
                    self.actions.push_back(ClientAction::PeerResults(r));
                }
                Err(e) => self.fail(e.into()),
            },
            Item::Error { code, errno } => self.fail(Iperf3Error::Server {
                text: super::codec::error_text(code, errno),
                code,
            }),
        }
    }

    fn on_state(&mut self, now: Instant, s: State) {
        self.deadline = Some(now + STEP_TIMEOUT);
        match s {
            State::ParamExchange => self.out.extend_from_slice(&frame_json(&self.params)),
            State::CreateStreams => self.actions.push_back(ClientAction::CreateStreams),
            State::TestStart => {}
            State::TestRunning => {
                // The control connection is silent while the test runs: the one deadline
                // is a timed test's end (a test of an amount ends by its progress).
                self.deadline = self.length.map(|l| now + l);
                self.running = true;
                self.actions.push_back(ClientAction::Run);
            }
            State::ExchangeResults => self.actions.push_back(ClientAction::SendResults),
            State::DisplayResults => {
                self.out.push(State::IperfDone.byte());
                self.phase = Phase::Over;
                self.deadline = None;
                self.actions.push_back(ClientAction::Done);
            }
            State::AccessDenied => self.fail(Iperf3Error::Busy),
            State::ServerError => self.phase = Phase::ErrorCode,
            State::ServerTerminate => self.fail(Iperf3Error::ServerTerminated),
            other => self.fail(Iperf3Error::Protocol(format!(
                "a server does not send {other:?}"
            ))),
        }
    }
}

/// Whether each of a results document's `streams` (there are `n`) carries
/// `omitted_packets` and `omitted_errors`: a missing key is "not said", not 0.
pub fn counts_omitted(doc: &[u8], n: usize) -> bool {
    use serde::de::IgnoredAny;
    #[derive(serde::Deserialize)]
    struct Stream {
        omitted_packets: Option<IgnoredAny>,
        omitted_errors: Option<IgnoredAny>,
    }
    #[derive(serde::Deserialize)]
    struct Doc {
        // A list of at most `MAX_JSON` bytes' worth of two-byte elements.
        streams: Vec<Stream>,
    }
    serde_json::from_slice::<Doc>(doc).is_ok_and(|d| {
        n > 0
            && d.streams.len() == n
            && d.streams
                .iter()
                .all(|s| s.omitted_packets.is_some() && s.omitted_errors.is_some())
    })
}

impl Session for ClientSession {
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
        while self.phase != Phase::Over {
            let expect = match self.phase {
                Phase::States => Expect::State,
                Phase::ErrorCode => Expect::Error,
                Phase::PeerResults => Expect::Json(MAX_JSON),
                Phase::Over => return,
            };
            let item = match self.reader.next(expect) {
                Ok(Some(item)) => item,
                Ok(None) => return,
                Err(e) => return self.fail(e.into()),
            };
            self.on_item(now, item);
        }
    }

    /// The connection closed.
    fn handle_closed(&mut self, _now: Instant) {
        self.fail(Iperf3Error::Closed);
    }

    /// A deadline passed: a running test's length, or a step's time.
    fn handle_timeout(&mut self, now: Instant) {
        if self.running {
            if self.deadline.is_some_and(|d| now >= d) {
                self.end_test(now);
            }
            return;
        }
        if self.deadline.is_some_and(|d| now >= d) {
            let what = if self.phase == Phase::PeerResults {
                "results"
            } else {
                "next control message"
            };
            self.fail(Iperf3Error::Timeout(what));
        }
    }

    /// The next deadline.
    fn poll_timeout(&self) -> Option<Instant> {
        self.deadline
    }
}

#[cfg(test)]
mod tests {
    use super::counts_omitted;

    /// Each stream must carry both omitted counts for them to be read; 3.12 sends none.
    #[test]
    fn omitted_counts_are_read_only_when_every_stream_has_them() {
        let both = br#"{"streams":[{"id":1,"omitted_packets":3,"omitted_errors":0}]}"#;
        assert!(counts_omitted(both, 1));
        let v312 = br#"{"streams":[{"id":1,"packets":3,"errors":0}]}"#;
        assert!(!counts_omitted(v312, 1));
        let half =
            br#"{"streams":[{"omitted_packets":3,"omitted_errors":0},{"omitted_packets":1}]}"#;
        assert!(!counts_omitted(half, 2));
        assert!(!counts_omitted(b"[]", 0));
        assert!(!counts_omitted(both, 2));
    }
}
