//! Generated hostile peers for the iperf3 server session (issue 44, as
//! `control/tests/hostile.rs` does for wirebench's own): clients drawn at random (a cookie
//! whole, short or wrong; parameters valid or hostile; state bytes and results in any order;
//! writes and reads in stalls, one-byte drips and fast bursts; a close or a vanishing at any
//! point) against [`ServerSession`] in virtual time, its actions answered at once as the
//! driver (`net::iperf3::server`) answers them. At every step: nothing panics, the bytes the
//! session holds for the client stay under [`max_output`], it is fed no more than its read
//! limit and reads nothing while a decision waits, and each stage ends by the bound the
//! session's own constants give it ([`STEP_TIMEOUT`], [`IDLE_LIMIT`], [`DECLARED_GRACE`],
//! [`DURATION_GRACE`], the server's longest test).

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use proptest::prelude::*;
use serde_json::{json, Value};
use wirebench_proto::spec::MAX_STREAMS;

use super::admit::{ie, Admitted};
use super::codec::{
    cookie_from, frame_json, stream_id, Params, ResultsDoc, State, StreamResult, COOKIE_LEN,
    MAX_PARAMS_JSON, MAX_PEER_RESULTS_JSON,
};
use super::server::{
    ServerAction, ServerSession, DECLARED_GRACE, DURATION_GRACE, IDLE_LIMIT, MAX_RESULTS_JSON,
};
use super::STEP_TIMEOUT;
use crate::admission::{Refusal, SpecLimits, DEFAULT_MAX_DURATION};
use crate::Session;

/// The harness's tick: the client writes and reads once a tick.
const TICK: Duration = Duration::from_millis(10);

/// The most the driver reads at once: its pump's buffer (`net::Pump`, 16 KiB).
const READ_BYTES: usize = 16 * 1024;

/// The driver tells a running session once a tick that data moved; while it moves, the
/// harness jumps no further than this between two such calls (well inside [`IDLE_LIMIT`]).
const ACTIVITY_STEP: Duration = Duration::from_secs(1);

/// The state bytes one session writes in a whole test: PARAM_EXCHANGE, CREATE_STREAMS,
/// TEST_START, TEST_RUNNING, EXCHANGE_RESULTS, DISPLAY_RESULTS, and one ending, at most a
/// SERVER_ERROR with its code and errno (9 bytes).
const STATE_BYTES: usize = 6 + 9;

/// Results as the driver builds them without `--get-server-output` (`Streams::results_doc`:
/// one entry a stream), every figure as wide as JSON writes it.
fn our_results(streams: u32) -> ResultsDoc {
    let stream = |i: usize| StreamResult {
        id: stream_id(i),
        bytes: u64::MAX,
        retransmits: i64::MIN,
        jitter: f64::MAX,
        errors: i64::MIN,
        omitted_errors: i64::MIN,
        packets: u64::MAX,
        omitted_packets: u64::MAX,
        start_time: f64::MAX,
        end_time: f64::MAX,
    };
    ResultsDoc {
        cpu_util_total: f64::MAX,
        cpu_util_user: f64::MAX,
        cpu_util_system: f64::MAX,
        sender_has_retransmits: i64::MIN,
        // TCP_CA_NAME_MAX.
        congestion_used: Some("c".repeat(16)),
        streams: (0..streams as usize).map(stream).collect(),
    }
}

/// The bound on the bytes the session holds for its client: [`STATE_BYTES`] and one results
/// frame of at most [`MAX_RESULTS_JSON`], whatever the driver hands it.
fn max_output() -> usize {
    STATE_BYTES + 4 + MAX_RESULTS_JSON
}

/// The results with the server's output in text, as the driver sends them.
#[derive(serde::Serialize)]
struct WithText<'a> {
    #[serde(flatten)]
    doc: &'a ResultsDoc,
    server_output_text: String,
}

#[test]
fn the_results_alone_always_fit_in_one_results_document() {
    assert!(frame_json(&our_results(MAX_STREAMS)).len() <= 4 + MAX_RESULTS_JSON);
}

/// One thing the client does, in its script's order.
#[derive(Debug, Clone)]
enum Step {
    /// Writes these bytes (they reach the server as its write plan and the read limit let).
    Send(Vec<u8>),
    /// Waits until it has read this state byte from the server.
    Await(State),
    /// Waits this long.
    Pause(Duration),
}

/// How the client leaves.
#[derive(Debug, Clone, Copy)]
enum End {
    /// Closes once its script is done and the server has read its bytes.
    Close,
    /// Stays connected once its script is done, reading and writing nothing more.
    Linger,
    /// Closes at this time after the start, whatever it was doing (unread bytes lost).
    CloseAt(Duration),
    /// Goes silent at this time, its streams too; the connection stays open.
    VanishAt(Duration),
}

/// The driver's answer to the cookie: its slots and key rules decide.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    Welcome,
    /// ACCESS_DENIED: no slot, or shutting down.
    Deny,
    /// SERVER_ERROR: a key required, or the cookie in use.
    Refuse,
}

/// One drawn client, and the server's side of it that is not the session's.
#[derive(Debug, Clone)]
struct Peer {
    script: Vec<Step>,
    /// Bytes of its writes the server's socket has for it each tick, cycled.
    writes: Vec<usize>,
    /// Bytes it reads of the server's output each tick, cycled.
    reads: Vec<usize>,
    end: End,
    verdict: Verdict,
    /// The driver refuses the parameters for the server's memory.
    over_memory: bool,
    /// When, after the server accepted the parameters, all its streams are there.
    streams_after: Option<Duration>,
    /// How long data moves on them once the test runs; `None`: as long as it runs.
    moving_for: Option<Duration>,
    /// `serve --max-duration`.
    max_duration: Option<Duration>,
    /// With `--get-server-output`: how many bytes of output the driver has for the client,
    /// up to twice what one results document may hold.
    server_output: Option<usize>,
}

fn framed(body: &[u8]) -> Vec<u8> {
    let mut v = (body.len() as u32).to_be_bytes().to_vec();
    v.extend_from_slice(body);
    v
}

/// A length prefix over `max`, and no document behind it.
fn oversized(max: usize) -> impl Strategy<Value = Vec<u8>> {
    (max as u32 + 1..=u32::MAX).prop_map(|n| n.to_be_bytes().to_vec())
}

/// A length prefix of at most `max` and fewer bytes than it says.
fn truncated(max: usize) -> impl Strategy<Value = Vec<u8>> {
    (1..=max as u32, 0.0..1.0f64).prop_map(|(n, part)| {
        let mut v = n.to_be_bytes().to_vec();
        v.resize(4 + (f64::from(n - 1) * part) as usize, b'{');
        v
    })
}

/// Bytes a peer moves in a tick: a stall, a drip, a slow one, a fast one.
fn rate() -> impl Strategy<Value = usize> {
    prop_oneof![
        Just(0usize),
        Just(1usize),
        2usize..=16,
        100usize..=2_000,
        16_384usize..=1_048_576,
    ]
}

fn rates() -> impl Strategy<Value = Vec<usize>> {
    prop_oneof![
        1 => Just(vec![1usize]),
        4 => prop::collection::vec(rate(), 1..6),
        // Bursts between stalls: the plan moves bytes at last.
        4 => (prop::collection::vec(rate(), 0..5), 1usize..=1_048_576).prop_map(|(mut v, n)| {
            v.push(n);
            v
        }),
    ]
}

fn cookie() -> impl Strategy<Value = Vec<u8>> {
    let good = prop::collection::vec(any::<u8>(), COOKIE_LEN - 1).prop_map(|r| {
        let r: [u8; COOKIE_LEN - 1] = r.try_into().unwrap_or([0; COOKIE_LEN - 1]);
        cookie_from(&r).to_vec()
    });
    prop_oneof![
        14 => good.clone(),
        1 => (good, 0..COOKIE_LEN).prop_map(|(c, n)| c[..n].to_vec()),
        1 => prop::collection::vec(any::<u8>(), COOKIE_LEN),
    ]
}

/// Parameters as an iperf3 client sends them, with its -P, -t, -n, -l, -u, -R, --bidir.
fn valid_params() -> impl Strategy<Value = Params> {
    (
        any::<bool>(),
        prop_oneof![3 => 1u32..=8, 1 => 1u32..=70],
        prop_oneof![4 => 0u64..=30, 1 => 0u64..=4_000],
        prop_oneof![3 => Just(0u64), 1 => 1u64..=1 << 40],
        prop_oneof![1 => Just(0u64), 8 => 16u64..=65_507, 1 => 1u64..=2 << 20],
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(
            |(udp, parallel, time, num, len, reverse, bidirectional)| Params {
                tcp: !udp,
                udp,
                time,
                num,
                len,
                parallel,
                reverse,
                bidirectional,
                ..Params::default()
            },
        )
}

/// A value of the wrong size or type.
fn hostile_value() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(json!(u64::MAX)),
        Just(json!(u64::from(u32::MAX) + 1)),
        Just(json!(-1)),
        Just(json!(1e300)),
        Just(json!(0.5)),
        Just(json!("7")),
        Just(json!([1])),
        Just(json!({})),
        Just(Value::Null),
        Just(json!("x".repeat(10_000))),
    ]
}

/// Parameters a hostile client sends: a field of the wrong size or type, no object, bytes
/// that are no JSON, a length prefix over the cap or longer than what follows.
fn hostile_params() -> impl Strategy<Value = Vec<u8>> {
    let keys = prop::sample::select(vec![
        "tcp",
        "udp",
        "omit",
        "time",
        "num",
        "blockcount",
        "parallel",
        "reverse",
        "bidirectional",
        "window",
        "len",
        "bandwidth",
        "pacing_timer",
        "congestion",
        "MSS",
        "fqrate",
        "client_version",
    ]);
    let field = (valid_params(), keys, hostile_value()).prop_map(|(p, k, v)| {
        let mut doc = serde_json::to_value(p).unwrap_or(Value::Null);
        if let Some(o) = doc.as_object_mut() {
            o.insert(k.to_string(), v);
        }
        framed(doc.to_string().as_bytes())
    });
    prop_oneof![
        4 => field,
        1 => prop::sample::select(vec!["[]", "\"x\"", "42", "null", "{", "", "[[[["])
            .prop_map(|b| framed(b.repeat(if b == "[[[[" { 1_000 } else { 1 }).as_bytes())),
        1 => prop::collection::vec(any::<u8>(), 0..64).prop_map(|b| framed(&b)),
        1 => oversized(MAX_PARAMS_JSON),
        1 => truncated(MAX_PARAMS_JSON),
    ]
}

fn params() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        3 => valid_params().prop_map(|p| frame_json(&p)),
        1 => hostile_params(),
    ]
}

/// The client's results: of random size (past the cap from about 250 streams), blank, or
/// a length prefix over the cap or longer than what follows.
fn results() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        4 => (0..=MAX_STREAMS).prop_map(|n| frame_json(&our_results(n))),
        1 => (0u32..=400).prop_map(|n| frame_json(&our_results(n))),
        1 => (0usize..=70_000).prop_map(|n| framed(&vec![b' '; n])),
        1 => oversized(MAX_PEER_RESULTS_JSON),
        1 => truncated(MAX_PEER_RESULTS_JSON),
    ]
}

fn pause() -> impl Strategy<Value = Duration> {
    prop_oneof![0u64..=2_000, 0u64..=40_000, 3_590_000u64..=3_700_000]
        .prop_map(Duration::from_millis)
}

fn state_step() -> impl Strategy<Value = Step> {
    prop_oneof![
        2 => Just(Step::Send(vec![State::TestEnd.byte()])),
        1 => Just(Step::Send(vec![State::IperfDone.byte()])),
        1 => Just(Step::Send(vec![State::ClientTerminate.byte()])),
        1 => any::<u8>().prop_map(|b| Step::Send(vec![b])),
        1 => results().prop_map(Step::Send),
        2 => prop::sample::select(vec![
            State::TestRunning,
            State::ExchangeResults,
            State::DisplayResults
        ])
        .prop_map(Step::Await),
        2 => pause().prop_map(Step::Pause),
    ]
}

/// A client as iperf3's runs (its test's length drawn apart from its `-t`), then a few
/// steps more (TEST_END again, junk after IPERF_DONE).
fn honest() -> impl Strategy<Value = Vec<Step>> {
    (
        pause(),
        results(),
        prop::collection::vec(state_step(), 0..3),
    )
        .prop_map(|(length, results, tail)| {
            let mut s = vec![
                Step::Await(State::TestRunning),
                Step::Pause(length),
                Step::Send(vec![State::TestEnd.byte()]),
                Step::Await(State::ExchangeResults),
                Step::Send(results),
                Step::Await(State::DisplayResults),
                Step::Send(vec![State::IperfDone.byte()]),
            ];
            s.extend(tail);
            s
        })
}

fn script() -> impl Strategy<Value = Vec<Step>> {
    let opening = (cookie(), any::<bool>(), params()).prop_map(|(c, wait, p)| {
        let mut s = vec![Step::Send(c)];
        if wait {
            s.push(Step::Await(State::ParamExchange));
        }
        s.push(Step::Send(p));
        s
    });
    let rest = prop_oneof![honest(), prop::collection::vec(state_step(), 0..8)];
    (opening, rest).prop_map(|(mut a, b)| {
        a.extend(b);
        a
    })
}

fn end() -> impl Strategy<Value = End> {
    let at = || (0u64..=120_000).prop_map(Duration::from_millis);
    prop_oneof![
        Just(End::Close),
        Just(End::Linger),
        at().prop_map(End::CloseAt),
        at().prop_map(End::VanishAt),
    ]
}

fn peer() -> impl Strategy<Value = Peer> {
    let secs = |max: u64| (0..=max * 1000).prop_map(Duration::from_millis);
    (
        script(),
        rates(),
        rates(),
        end(),
        prop_oneof![
            18 => Just(Verdict::Welcome),
            1 => Just(Verdict::Deny),
            1 => Just(Verdict::Refuse),
        ],
        prop::bool::weighted(0.1),
        prop::option::weighted(0.9, secs(12)),
        prop::option::of(secs(60)),
        prop::option::of((1u64..=120).prop_map(Duration::from_secs)),
        prop::option::of(0..=2 * MAX_RESULTS_JSON),
    )
        .prop_map(
            |(
                script,
                writes,
                reads,
                end,
                verdict,
                over_memory,
                streams_after,
                moving_for,
                max,
                server_output,
            )| {
                Peer {
                    script,
                    writes,
                    reads,
                    end,
                    verdict,
                    over_memory,
                    streams_after,
                    moving_for,
                    max_duration: max,
                    server_output,
                }
            },
        )
}

/// The session under a drawn client, the driver's part and what the harness checks.
struct Run<'a> {
    peer: &'a Peer,
    s: ServerSession,
    t0: Instant,
    now: Instant,
    ticks: usize,
    // The client.
    step: usize,
    pause_until: Option<Instant>,
    in_flight: VecDeque<u8>,
    heard: Vec<u8>,
    heard_seen: usize,
    /// Vanished or closed: it writes and reads no more.
    silent: bool,
    // The driver.
    admitted: Option<Admitted>,
    accepted_at: Option<Instant>,
    streams_at: Option<Instant>,
    ran_at: Option<Instant>,
    last_activity: Instant,
    /// Cookie bytes fed before the cookie's action.
    cookie_fed: usize,
    // The bounds.
    /// When the current stage must have ended, and its name.
    due: Instant,
    stage: &'static str,
    outcome: String,
}

impl<'a> Run<'a> {
    fn new(peer: &'a Peer) -> Self {
        let t0 = Instant::now();
        let limits = SpecLimits {
            max_duration: peer.max_duration,
            ..SpecLimits::default()
        };
        Self {
            peer,
            s: ServerSession::new(t0, limits),
            t0,
            now: t0,
            ticks: 0,
            step: 0,
            pause_until: None,
            in_flight: VecDeque::new(),
            heard: Vec::new(),
            heard_seen: 0,
            silent: false,
            admitted: None,
            accepted_at: None,
            streams_at: None,
            ran_at: None,
            last_activity: t0,
            cookie_fed: 0,
            due: t0 + STEP_TIMEOUT,
            stage: "cookie",
            outcome: String::new(),
        }
    }

    fn longest(&self) -> Duration {
        self.peer.max_duration.unwrap_or(DEFAULT_MAX_DURATION)
    }

    /// A running test's bound: its time (its own `-t` and grace, or the server's longest
    /// and grace, whichever is first) and the client's silence.
    fn running_due(&self, ran_at: Instant) -> Instant {
        let server = self.longest() + DURATION_GRACE;
        let time = match self.admitted.as_ref().and_then(Admitted::declared) {
            Some(t) => (t + DECLARED_GRACE).min(server),
            None => server,
        };
        (ran_at + time).min(self.last_activity + IDLE_LIMIT)
    }

    /// Answers the session's actions at once, as the driver does, and checks what it holds.
    fn answer(&mut self) -> Result<(), TestCaseError> {
        let limit = self.s.read_limit();
        while let Some(action) = self.s.poll_action() {
            prop_assert_eq!(limit, 0, "{:?} came with a read limit of {}", action, limit);
            let now = self.now;
            match action {
                ServerAction::Cookie(_) => match self.peer.verdict {
                    Verdict::Welcome => {
                        self.s.welcome(now);
                        (self.due, self.stage) = (now + STEP_TIMEOUT, "parameters");
                    }
                    Verdict::Deny => self.s.deny(),
                    Verdict::Refuse => self.s.refuse(ie::AUTH_TEST, 0),
                },
                ServerAction::Params(a) if self.peer.over_memory => {
                    let r = Refusal::Memory {
                        asked: 2,
                        max: 1,
                        in_use: 0,
                    };
                    self.s.refuse_for(r, a.params().udp);
                }
                ServerAction::Params(a) => {
                    self.admitted = Some(a);
                    self.s.accept(now);
                    self.accepted_at = Some(now);
                    (self.due, self.stage) = (now + STEP_TIMEOUT, "streams");
                }
                ServerAction::TimeUp(why) => {
                    self.outcome = format!("time up: {why}");
                    self.s.terminate();
                }
                ServerAction::TestEnd => {
                    self.s.exchange(now);
                    (self.due, self.stage) = (now + STEP_TIMEOUT, "results");
                }
                ServerAction::PeerResults(_) => {
                    // The driver's results have an entry a stream once they started.
                    let n = match (&self.admitted, self.streams_at) {
                        (Some(a), Some(_)) => a.streams(),
                        _ => 0,
                    };
                    // As the driver does: the results with the server's output, and without
                    // it when that is too large.
                    let ours = our_results(n);
                    let with = self.peer.server_output.map(|len| WithText {
                        doc: &ours,
                        server_output_text: "x".repeat(len),
                    });
                    let sent = with.map(|w| self.s.send_results(now, &w));
                    if !matches!(sent, Some(Ok(()))) {
                        prop_assert_eq!(self.s.send_results(now, &ours), Ok(()));
                    }
                    (self.due, self.stage) = (now + STEP_TIMEOUT, "IPERF_DONE");
                }
                ServerAction::Refused(r) => self.outcome = format!("refused: {r}"),
                ServerAction::Done => self.outcome = "done".into(),
                ServerAction::Failed(e) => self.outcome = format!("failed: {e}"),
            }
        }
        let held = self.s.poll_transmit().map_or(0, <[u8]>::len);
        prop_assert!(
            held <= max_output(),
            "the session held {held} bytes of output, over {}",
            max_output()
        );
        if self.s.is_over() {
            prop_assert_eq!(self.s.read_limit(), 0, "an ended session reads");
            prop_assert_eq!(self.s.poll_timeout(), None, "an ended session waits");
            if self.outcome.is_empty() {
                self.outcome = "ended by the driver".into();
            }
        }
        Ok(())
    }

    /// The driver's look at the streams: when all are there the test runs; while data
    /// moves on them, the session hears of it.
    fn streams(&mut self) -> Result<(), TestCaseError> {
        let now = self.now;
        if let (Some(at), Some(after), None) =
            (self.accepted_at, self.peer.streams_after, self.streams_at)
        {
            if now >= at + after && !self.silent {
                self.streams_at = Some(now);
                // As the driver: whatever the session's stage (a no-op past the streams').
                self.s.run(now);
                if self.s.is_running() {
                    self.ran_at = Some(now);
                    self.last_activity = now;
                    (self.due, self.stage) = (self.running_due(now), "running");
                }
                self.answer()?;
            }
        }
        if self.moving() {
            self.s.handle_activity(now);
            if let Some(ran_at) = self.ran_at.filter(|_| self.s.is_running()) {
                self.last_activity = now;
                self.due = self.running_due(ran_at);
            }
        }
        Ok(())
    }

    fn moving(&self) -> bool {
        let Some(at) = self.streams_at else {
            return false;
        };
        !self.silent && self.peer.moving_for.is_none_or(|m| self.now < at + m)
    }

    /// The client reads what its read plan lets it of the server's output.
    fn client_reads(&mut self) -> Result<(), TestCaseError> {
        if self.silent {
            return Ok(());
        }
        let want = self.peer.reads[self.ticks % self.peer.reads.len()];
        if let Some(out) = self.s.poll_transmit() {
            let n = want.min(out.len());
            self.heard.extend_from_slice(&out[..n]);
            self.s.handle_written(self.now, n);
            self.answer()?;
        }
        Ok(())
    }

    /// The client's script, its end, and its bytes to the server.
    fn client_acts(&mut self) -> Result<(), TestCaseError> {
        if self.silent {
            return Ok(());
        }
        match self.peer.end {
            End::CloseAt(t) if self.now >= self.t0 + t => return self.close(),
            End::VanishAt(t) if self.now >= self.t0 + t => {
                self.silent = true;
                self.in_flight.clear();
                return Ok(());
            }
            _ => {}
        }
        while let Some(step) = self.peer.script.get(self.step) {
            match step {
                Step::Send(b) => self.in_flight.extend(b),
                Step::Await(state) => {
                    let Some(at) = self.heard[self.heard_seen..]
                        .iter()
                        .position(|b| *b == state.byte())
                    else {
                        break;
                    };
                    self.heard_seen += at + 1;
                }
                Step::Pause(d) => {
                    let until = *self.pause_until.get_or_insert(self.now + *d);
                    if self.now < until {
                        break;
                    }
                    self.pause_until = None;
                }
            }
            self.step += 1;
        }
        self.deliver()?;
        let done = self.step == self.peer.script.len() && self.in_flight.is_empty();
        if done && matches!(self.peer.end, End::Close) && !self.s.is_over() {
            return self.close();
        }
        Ok(())
    }

    /// One read of the driver's: no more than the session's read limit and its buffer.
    fn deliver(&mut self) -> Result<(), TestCaseError> {
        let want = self.peer.writes[self.ticks % self.peer.writes.len()];
        let limit = self.s.read_limit();
        if self.stage == "cookie" {
            prop_assert!(
                limit <= COOKIE_LEN - self.cookie_fed,
                "read limit {limit} past the cookie's {} bytes left",
                COOKIE_LEN - self.cookie_fed
            );
        }
        let n = want.min(READ_BYTES).min(limit).min(self.in_flight.len());
        if n > 0 {
            let bytes: Vec<u8> = self.in_flight.drain(..n).collect();
            if self.stage == "cookie" {
                self.cookie_fed += n;
            }
            self.s.handle_bytes(self.now, &bytes);
            self.answer()?;
        }
        Ok(())
    }

    /// The client closes: the driver's pump tells the session and drops what it held.
    fn close(&mut self) -> Result<(), TestCaseError> {
        self.silent = true;
        self.in_flight.clear();
        self.s.handle_closed(self.now);
        if let Some(n) = self.s.poll_transmit().map(<[u8]>::len) {
            self.s.handle_written(self.now, n);
        }
        self.answer()
    }

    fn timeouts(&mut self) -> Result<(), TestCaseError> {
        if self.s.poll_timeout().is_some_and(|t| self.now >= t) {
            self.s.handle_timeout(self.now);
            self.answer()?;
        }
        Ok(())
    }

    /// The next instant anything happens: the first of a tick while bytes move, the
    /// session's deadline, the client's next move, the streams and the stage's bound.
    fn advance(&mut self) {
        self.ticks += 1;
        let active = |plan: &[usize]| !self.silent && plan.iter().any(|n| *n > 0);
        let writing = !self.in_flight.is_empty() && active(&self.peer.writes);
        let reading = self.s.poll_transmit().is_some() && active(&self.peer.reads);
        let tick = (writing || reading).then(|| self.now + TICK);
        let streams = match (self.accepted_at, self.peer.streams_after, self.streams_at) {
            (Some(at), Some(after), None) if !self.silent => Some(at + after),
            _ => None,
        };
        let end = match self.peer.end {
            End::CloseAt(t) | End::VanishAt(t) if !self.silent => Some(self.t0 + t),
            _ => None,
        };
        let moving = self.moving().then(|| self.now + ACTIVITY_STEP);
        let next = [
            tick,
            self.s.poll_timeout(),
            self.pause_until.filter(|_| !self.silent),
            streams,
            end,
            moving,
            Some(self.due + TICK),
        ]
        .into_iter()
        .flatten()
        .min()
        .unwrap_or(self.due + TICK);
        // Every candidate lies ahead; the millisecond keeps a slip from looping.
        self.now = next.max(self.now + Duration::from_millis(1));
    }
}

/// Runs `peer` against a session until it ends; the error says which bound broke, the
/// outcome how it ended.
fn check(peer: &Peer) -> Result<String, TestCaseError> {
    let mut r = Run::new(peer);
    // Every stage at its bound: cookie, parameters, streams, the test, results, IPERF_DONE.
    let horizon = r.t0 + STEP_TIMEOUT * 5 + r.longest() + DURATION_GRACE;
    loop {
        r.streams()?;
        r.client_reads()?;
        r.client_acts()?;
        r.timeouts()?;
        if r.s.is_over() {
            break;
        }
        prop_assert!(
            r.now <= r.due,
            "the {} stage outlived its bound by {:?}",
            r.stage,
            r.now - r.due
        );
        r.advance();
        prop_assert!(
            r.now <= horizon,
            "the session was open after {:?}",
            r.now - r.t0
        );
    }
    prop_assert!(r.now <= r.due, "the {} stage ended late", r.stage);
    Ok(r.outcome)
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 256,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    /// Bytes held, bytes read and the session's end, for clients drawn at random.
    #[test]
    fn an_iperf3_server_session_holds_bounded_output_and_ends_by_its_bound(peer in peer()) {
        check(&peer)?;
    }
}

/// The harness itself: a client as iperf3's runs a whole test to IPERF_DONE, its -t
/// bound in force while the streams stay silent.
#[test]
fn an_honest_client_runs_to_the_end() {
    let p = Params {
        tcp: true,
        time: 5,
        parallel: 2,
        len: 1000,
        ..Params::default()
    };
    let peer = Peer {
        script: vec![
            Step::Send(cookie_from(&[1; 36]).to_vec()),
            Step::Await(State::ParamExchange),
            Step::Send(frame_json(&p)),
            Step::Await(State::TestRunning),
            Step::Pause(Duration::from_secs(5)),
            Step::Send(vec![State::TestEnd.byte()]),
            Step::Await(State::ExchangeResults),
            Step::Send(frame_json(&our_results(2))),
            Step::Await(State::DisplayResults),
            Step::Send(vec![State::IperfDone.byte()]),
        ],
        writes: vec![1],
        reads: vec![0, 7],
        end: End::Close,
        verdict: Verdict::Welcome,
        over_memory: false,
        streams_after: Some(Duration::from_millis(300)),
        moving_for: None,
        max_duration: None,
        // Output that does not fit: the results go without it and the test still ends well.
        server_output: Some(MAX_RESULTS_JSON + 1),
    };
    assert_eq!(check(&peer).expect("within its bounds"), "done");
}
