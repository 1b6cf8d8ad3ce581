//! The running test and the end-of-test exchange, the same on both sides once `begin` has
//! passed: pass the peer's final counts to this side's receivers, tell the peer this side's
//! (`sender_counts` for `--bidir`, then `done`), and wait a bounded time for its report.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use wirebench_proto::control::{encode, Message};
use wirebench_proto::results::{IntervalRecord, Role, SideReport};
use wirebench_proto::spec::{Direction, TestSpec};

use super::wire::{earliest, Wire};
use super::SessionError;
use super::REPORT_GRACE;

/// What a running session asks of the roles.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunAction {
    /// The peer's senders are done: `(stream, messages sent)` for this side's receivers of
    /// those streams, so they know what to wait for.
    PeerCounts(Vec<(u32, u64)>),
    /// End every role now (an error, the server's ceiling, a shutdown, the user).
    StopRoles,
}

/// The running phase of one side.
#[derive(Debug)]
pub(super) struct Exchange {
    spec: TestSpec,
    /// This side's role on each stream.
    roles: Vec<Role>,
    /// The control connection still works both ways.
    channel_ok: bool,
    /// `sender_counts` sent, or not needed (a side with one role).
    counts_sent: bool,
    stop_sent: bool,
    local: Option<SideReport>,
    peer: Option<SideReport>,
    error: Option<SessionError>,
    /// Until when this side, done, waits for the peer's report.
    report_deadline: Option<Instant>,
    /// When this side's report was made.
    local_at: Option<Instant>,
    /// When the peer closed the connection while this side waited for its report.
    closed_at: Option<Instant>,
    /// When a timed test's data ends, as this side began it (set by the client).
    bound_end: Option<Instant>,
    /// When this side stops its roles whatever happens (the server's whole-test ceiling).
    ceiling: Option<Instant>,
    finished: bool,
    /// This side ends the test early (a server's limit) and has told the peer why: its
    /// report still goes out, then the session ends without waiting for the peer's.
    ending: bool,
    /// The peer's live intervals not yet taken by the driver (at most
    /// [`MAX_PEER_INTERVALS`]: a peer that floods them loses the oldest, not our memory).
    peer_intervals: VecDeque<PeerInterval>,
}

/// One of the peer's live intervals: its role, its stream (`None`: the sum of the role's
/// streams) and its counters.
pub type PeerInterval = (Role, Option<u32>, IntervalRecord);

/// How many of the peer's live intervals wait for the driver at most: one interval of
/// every stream and their sums, both ways.
const MAX_PEER_INTERVALS: usize = 2 * (wirebench_proto::spec::MAX_STREAMS as usize + 1);

impl Exchange {
    /// A test that has begun, with this side's `roles` per stream.
    pub(super) fn new(spec: TestSpec, roles: Vec<Role>, ceiling: Option<Instant>) -> Self {
        let both = roles.contains(&Role::Sender) && roles.contains(&Role::Receiver);
        Self {
            spec,
            roles,
            channel_ok: true,
            counts_sent: !both,
            stop_sent: false,
            local: None,
            peer: None,
            error: None,
            report_deadline: None,
            local_at: None,
            closed_at: None,
            bound_end: None,
            ceiling,
            finished: false,
            ending: false,
            peer_intervals: VecDeque::new(),
        }
    }

    /// The test began at `now` on this side: a timed test's peer report is due by its
    /// length and drain even while this side's receivers still wait for the peer's counts
    /// (which the report carries).
    #[must_use]
    pub(super) fn begun_at(mut self, now: Instant) -> Self {
        self.bound_end = self.spec.duration_ns.map(|d| now + Duration::from_nanos(d));
        self
    }

    /// Whether the exchange is over (the session closes once its output is written).
    pub(super) fn finished(&self) -> bool {
        self.finished
    }

    /// The next deadline.
    pub(super) fn poll_timeout(&self) -> Option<Instant> {
        let ceiling = if self.local.is_none() && !self.stop_sent {
            self.ceiling
        } else {
            None
        };
        earliest([ceiling, self.report_deadline])
    }

    /// This side's last words for the peer once its report is made: the reason the test
    /// ended early if it did, then the report, encoded as the wire sends them; none before.
    /// What the server keeps for a client that fetches them on a new connection
    /// (`control::shelf`).
    pub(super) fn last_words(&self) -> Option<Vec<u8>> {
        let report = self.local.as_ref()?;
        let mut frames = Vec::new();
        if let Some(e) = &self.error {
            let error = Message::Error {
                reason: e.to_string(),
                error_kind: Some(e.kind()),
            };
            frames.extend(encode(&error).ok()?);
        }
        let done = Message::Done {
            report: Box::new(report.clone()),
        };
        frames.extend(encode(&done).ok()?);
        Some(frames)
    }

    /// While the peer's report has not come: when it was due at the latest had the channel
    /// been clear: the drain after this side's report, or after a timed test's length
    /// (whichever is first); none before either is known.
    pub(super) fn peer_report_due(&self) -> Option<Instant> {
        if self.finished || self.peer.is_some() {
            return None;
        }
        let drain = Duration::from_nanos(self.spec.drain_ns);
        let by_local = self.local_at.map(|t| t + drain);
        let by_bound = self.bound_end.map(|t| t + drain);
        match (by_local, by_bound) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Whether this side's part is over and only the peer's report is awaited: its report
    /// is out, or a timed test is past its length.
    fn awaiting_peer(&self, now: Instant) -> bool {
        !self.finished
            && self.peer.is_none()
            && (self.local.is_some() || self.bound_end.is_some_and(|t| now >= t))
    }

    /// What the session ends with: local report, peer report, error.
    pub(super) fn take(
        &mut self,
    ) -> (Option<SideReport>, Option<SideReport>, Option<SessionError>) {
        (self.local.take(), self.peer.take(), self.error.take())
    }

    /// An interval this side's roles closed (of `stream`, or their sum): tell the peer,
    /// while the test runs and the channel works (a lost one only costs a live line, never
    /// a result).
    pub(super) fn local_interval(
        &mut self,
        now: Instant,
        wire: &mut Wire,
        role: Role,
        record: IntervalRecord,
        stream: Option<u32>,
    ) {
        if self.channel_ok && self.local.is_none() && !self.finished {
            let msg = Message::Interval {
                role,
                record,
                stream,
            };
            if let Err(e) = wire.send_live(now, &msg) {
                self.error.get_or_insert(e);
                self.channel_ok = false;
            }
        }
    }

    /// The peer's next live interval, oldest first.
    pub(super) fn take_peer_interval(&mut self) -> Option<PeerInterval> {
        self.peer_intervals.pop_front()
    }

    fn stop(&mut self, actions: &mut VecDeque<RunAction>) {
        if !self.stop_sent && self.local.is_none() {
            self.stop_sent = true;
            actions.push_back(RunAction::StopRoles);
        }
    }

    /// Ends the test with `error` (the first cause is kept); `tell` is sent to the peer
    /// when the channel still works, and the channel is then given up.
    pub(super) fn fail(
        &mut self,
        now: Instant,
        wire: &mut Wire,
        error: SessionError,
        tell: Option<&str>,
        actions: &mut VecDeque<RunAction>,
    ) {
        if let (true, Some(reason)) = (self.channel_ok, tell) {
            let _ = wire.send(
                now,
                &Message::Error {
                    reason: reason.to_string(),
                    error_kind: Some(error.kind()),
                },
            );
        }
        self.error.get_or_insert(error);
        self.channel_ok = false;
        self.report_deadline = None;
        self.stop(actions);
        if self.local.is_some() {
            self.finished = true;
        }
    }

    /// Ends the test early for `reason` (a limit the server keeps), keeping what was
    /// measured: `reason` goes to the peer as the error that ends the session, the roles
    /// stop, and this side's report follows before the connection closes (the peer takes a
    /// report after an error until the close). Without a working channel, as [`fail`].
    ///
    /// [`fail`]: Exchange::fail
    pub(super) fn end_early(
        &mut self,
        now: Instant,
        wire: &mut Wire,
        error: SessionError,
        reason: &str,
        actions: &mut VecDeque<RunAction>,
    ) {
        if !self.channel_ok || self.local.is_some() {
            return self.fail(now, wire, error, Some(reason), actions);
        }
        // The reason first, so the peer hears why before its roles see the data stop.
        if let Err(e) = wire.send(
            now,
            &Message::Error {
                reason: reason.to_string(),
                error_kind: Some(error.kind()),
            },
        ) {
            self.channel_ok = false;
            self.error.get_or_insert(e);
        }
        self.error.get_or_insert(error);
        self.ending = true;
        self.stop(actions);
    }

    /// A message from the peer.
    pub(super) fn on_message(
        &mut self,
        now: Instant,
        wire: &mut Wire,
        msg: Message,
        actions: &mut VecDeque<RunAction>,
    ) {
        if !self.channel_ok || self.finished {
            return;
        }
        match msg {
            Message::SenderCounts { counts } => {
                // Once this side is done, its receivers no longer listen (TCP ends at EOF).
                if self.local.is_none() {
                    let mine: Vec<(u32, u64)> = counts
                        .into_iter()
                        .filter(|(s, _)| self.roles.get(*s as usize) == Some(&Role::Receiver))
                        .collect();
                    if !mine.is_empty() {
                        actions.push_back(RunAction::PeerCounts(mine));
                    }
                }
            }
            Message::Done { report } => {
                if let (None, Some(e)) = (&self.local, &report.error) {
                    // The peer ended first, and says why (a server's limit): that is the
                    // first cause, not what its end did to our roles (a closed connection).
                    self.error.get_or_insert(SessionError::Peer {
                        kind: report.error_kind,
                        reason: printable(e),
                    });
                }
                if self.local.is_none() {
                    // Each stream's receiver waits for its own sender's count; a report that
                    // does not list every stream is a broken peer, not a slow one.
                    let mut counts = Vec::new();
                    let mut missing = None;
                    for (i, role) in self.roles.iter().enumerate() {
                        if *role != Role::Receiver {
                            continue;
                        }
                        match peer_stream(&report, &self.spec, i) {
                            Some(r) => counts.push((i as u32, r.messages)),
                            None => missing = missing.or(Some(i)),
                        }
                    }
                    if !counts.is_empty() {
                        actions.push_back(RunAction::PeerCounts(counts));
                    }
                    if let Some(i) = missing {
                        self.error.get_or_insert(SessionError::Protocol(format!(
                            "the peer's report has no stream {i}"
                        )));
                        self.stop(actions);
                    }
                }
                self.peer = Some(*report);
                if self.local.is_some() {
                    self.finished = true;
                }
            }
            Message::Interval {
                role,
                record,
                stream,
            } => {
                if self.peer_intervals.len() >= MAX_PEER_INTERVALS {
                    self.peer_intervals.pop_front();
                }
                if self.local.is_none() || self.peer.is_none() {
                    self.peer_intervals.push_back((role, stream, record));
                }
            }
            Message::Error { reason, error_kind } => {
                // The peer's reason is the first cause; what follows (it closes) is not. Its
                // report may still follow (a server that ends a test at a limit sends it
                // before closing): until it closes, it is taken.
                let reason = printable(&reason);
                self.error.get_or_insert(SessionError::Peer {
                    kind: error_kind,
                    reason,
                });
                self.stop(actions);
                match (&self.local, &self.peer) {
                    (Some(_), Some(_)) => self.finished = true,
                    // Ours is out, theirs may come yet: wait for it until they close, or a
                    // grace at most.
                    (Some(_), None) => {
                        self.report_deadline.get_or_insert(now + REPORT_GRACE);
                    }
                    (None, _) => {}
                }
            }
            other => {
                let at = if self.local.is_some() {
                    "at the end"
                } else {
                    "during the test"
                };
                self.fail(
                    now,
                    wire,
                    SessionError::Protocol(format!(
                        "unexpected control message {at}: {}",
                        other.name()
                    )),
                    Some(&format!("unexpected control message {at}")),
                    actions,
                );
            }
        }
    }

    /// This side's senders are done (only `--bidir` needs it): tell the peer their counts.
    pub(super) fn senders_done(&mut self, now: Instant, wire: &mut Wire, counts: Vec<(u32, u64)>) {
        if self.counts_sent || !self.channel_ok {
            return;
        }
        self.counts_sent = true;
        if let Err(e) = wire.send(now, &Message::SenderCounts { counts }) {
            self.error.get_or_insert(e);
        }
    }

    /// This side's roles are all done: send the report, then wait for the peer's.
    pub(super) fn roles_done(&mut self, now: Instant, wire: &mut Wire, mut report: SideReport) {
        if self.local.is_some() {
            return;
        }
        // No live line is sent after the report: it can say how many the peer missed.
        report.live_intervals_dropped = wire.live_dropped();
        self.local_at = Some(now);
        if self.channel_ok {
            if let Err(e) = wire.send(
                now,
                &Message::Done {
                    report: Box::new(report.clone()),
                },
            ) {
                self.error.get_or_insert(e);
                self.channel_ok = false;
            }
        }
        self.local = Some(report);
        if self.ending {
            // Our report is out after the reason: the session ends here.
            self.channel_ok = false;
            self.report_deadline = None;
            self.finished = true;
            return;
        }
        if self.peer.is_some() || !self.channel_ok {
            self.finished = true;
        } else if self.closed_at.is_none() {
            let drain = Duration::from_nanos(self.spec.drain_ns);
            self.report_deadline = Some(now + drain + REPORT_GRACE);
        }
    }

    /// The peer closed the connection while this side waits for its report, which may be
    /// fetched on a new connection (`control::shelf`, the client): the wait goes on for
    /// `grace`, and ends as the close if nothing came. Whether it does (else as
    /// [`Exchange::on_closed`]).
    pub(super) fn on_closed_awaiting(
        &mut self,
        now: Instant,
        wire: &mut Wire,
        grace: Duration,
    ) -> bool {
        if self.closed_at.is_some() {
            return true;
        }
        // A close after the peer said why it ends (its error, then no report) is its end,
        // not a stuck channel: in order, its report would have come before the close.
        let told = matches!(self.error, Some(SessionError::Peer { .. }));
        if !self.channel_ok || told || !self.awaiting_peer(now) {
            return false;
        }
        // Nothing more goes out; what comes, comes from the fetch (the channel stays "ok"
        // for that: the messages are the peer's, taken as they would have been here).
        wire.discard_output();
        self.closed_at = Some(now);
        let until = now + grace;
        // This side's receivers may still wait for the peer's counts: they stop with it.
        self.report_deadline = Some(self.report_deadline.map_or(until, |t| t.min(until)));
        true
    }

    /// When the peer's report is worth fetching on a new connection: `after` past its due
    /// time, or at once when the peer closed the connection before it came; none when it is
    /// not awaited.
    pub(super) fn fetch_from(&self, after: Duration) -> Option<Instant> {
        let due = self.peer_report_due()?;
        Some(self.closed_at.unwrap_or(due + after))
    }

    /// The fetch cannot succeed (nobody listens): a wait that goes on only for it (the peer
    /// closed) ends now, as the close.
    pub(super) fn give_up_fetch(&mut self, now: Instant, actions: &mut VecDeque<RunAction>) {
        if self.closed_at.is_some() && self.report_deadline.is_some() {
            self.report_deadline = Some(now);
            self.on_timeout(now, actions);
        }
    }

    /// The peer closed the connection.
    pub(super) fn on_closed(
        &mut self,
        now: Instant,
        wire: &mut Wire,
        actions: &mut VecDeque<RunAction>,
    ) {
        if self.channel_ok {
            wire.discard_output();
            self.fail(now, wire, SessionError::PeerClosed, None, actions);
        }
    }

    /// Deadlines: the ceiling stops the roles; the report deadline ends the wait.
    pub(super) fn on_timeout(&mut self, now: Instant, actions: &mut VecDeque<RunAction>) {
        if self.report_deadline.is_some_and(|t| now >= t) {
            self.report_deadline = None;
            if self.closed_at.is_some() {
                // Nothing was fetched: the close ends it, as it would have at once. Roles
                // still waiting for the peer's counts stop and report first.
                self.error.get_or_insert(SessionError::PeerClosed);
                self.channel_ok = false;
                self.stop(actions);
                self.finished = self.local.is_some();
            } else {
                self.error
                    .get_or_insert(SessionError::Timeout("the peer's report"));
                self.finished = true;
            }
        }
        if self.local.is_none() && !self.stop_sent && self.ceiling.is_some_and(|t| now >= t) {
            self.error.get_or_insert(SessionError::Timeout(
                "the test to end within its time bound, drain and grace",
            ));
            self.stop(actions);
        }
    }

    /// Stop the roles without an error and exchange what they measured (the user's Ctrl-C).
    pub(super) fn interrupt(&mut self, actions: &mut VecDeque<RunAction>) {
        self.stop(actions);
    }
}

/// Text from the peer made safe to print: control characters (escape sequences, new
/// lines that would forge output) are shown escaped, and it is cut at 1,000 characters.
pub fn printable(text: &str) -> String {
    let mut out = String::with_capacity(text.len().min(1000));
    for c in text.chars().take(1000) {
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

/// The peer's report of stream `i` (for `--bidir`: within its reverse part for the second
/// half of the streams), if it sent one.
pub(super) fn peer_stream<'a>(
    report: &'a SideReport,
    spec: &TestSpec,
    i: usize,
) -> Option<&'a SideReport> {
    let per_way = spec.streams as usize;
    let (part, j) = if spec.direction == Direction::Bidir && i >= per_way {
        (report.reverse.as_deref()?, i - per_way)
    } else {
        (report, i)
    };
    if part.streams.is_empty() {
        (j == 0).then_some(part)
    } else {
        part.streams.get(j)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wirebench_proto::error_kind::ErrorKind;

    /// A peer's live intervals wait for the driver, but a flood of them is bounded.
    #[test]
    fn peer_intervals_are_kept_in_order_and_bounded() {
        let spec = TestSpec::example();
        let mut x = Exchange::new(spec, vec![Role::Sender], None);
        let mut wire = Wire::new(wirebench_proto::control::MAX_FRAME);
        let mut actions = VecDeque::new();
        let now = Instant::now();
        for i in 0..(MAX_PEER_INTERVALS as u64 + 10) {
            let record = IntervalRecord {
                start_ns: i,
                ..IntervalRecord::default()
            };
            let msg = Message::Interval {
                role: Role::Receiver,
                record,
                stream: None,
            };
            x.on_message(now, &mut wire, msg, &mut actions);
        }
        assert!(actions.is_empty());
        let got: Vec<u64> = std::iter::from_fn(|| x.take_peer_interval())
            .map(|(_, _, r)| r.start_ns)
            .collect();
        assert_eq!(got.len(), MAX_PEER_INTERVALS);
        assert_eq!(got.first(), Some(&10));
        assert!(!x.finished());
    }

    /// A server that ends a test at a limit sends its reason, then its report: a client
    /// whose roles were already done keeps that report (it dropped it at the reason).
    #[test]
    fn a_report_after_the_peers_reason_is_kept_when_this_side_is_done() {
        let mut x = Exchange::new(TestSpec::example(), vec![Role::Sender], None);
        let mut wire = Wire::new(wirebench_proto::control::MAX_FRAME);
        let mut actions = VecDeque::new();
        let now = Instant::now();
        x.roles_done(now, &mut wire, SideReport::default());
        let reason = "the server ended the test: more moved than its --max-rate allows";
        let error = Message::Error {
            reason: reason.into(),
            error_kind: Some(ErrorKind::MaxRate),
        };
        x.on_message(now, &mut wire, error, &mut actions);
        assert!(!x.finished(), "the report may still come");
        let report = SideReport {
            messages: 19,
            ..SideReport::default()
        };
        let done = Message::Done {
            report: Box::new(report),
        };
        x.on_message(now, &mut wire, done, &mut actions);
        assert!(x.finished());
        let (_, peer, error) = x.take();
        assert_eq!(peer.map(|p| p.messages), Some(19));
        assert!(error.is_some_and(|e| e.kind() == ErrorKind::MaxRate));
        // A peer that closes instead: over at once, with the reason, without its report.
        let mut x = Exchange::new(TestSpec::example(), vec![Role::Sender], None);
        x.roles_done(now, &mut wire, SideReport::default());
        let error = Message::Error {
            reason: reason.into(),
            error_kind: Some(ErrorKind::MaxRate),
        };
        x.on_message(now, &mut wire, error, &mut actions);
        x.on_closed(now, &mut wire, &mut actions);
        assert!(x.finished());
    }

    /// This side's intervals go to the peer while the test runs, not after its report.
    #[test]
    fn local_intervals_are_sent_until_the_report() {
        let spec = TestSpec::example();
        let mut x = Exchange::new(spec, vec![Role::Receiver], None);
        let mut wire = Wire::new(wirebench_proto::control::MAX_FRAME);
        let now = Instant::now();
        x.local_interval(
            now,
            &mut wire,
            Role::Receiver,
            IntervalRecord::default(),
            None,
        );
        let sent = wire.transmit().map_or(0, <[u8]>::len);
        assert!(sent > 0);
        x.roles_done(now, &mut wire, SideReport::default());
        let with_report = wire.transmit().map_or(0, <[u8]>::len);
        x.local_interval(
            now,
            &mut wire,
            Role::Receiver,
            IntervalRecord::default(),
            None,
        );
        assert_eq!(wire.transmit().map_or(0, <[u8]>::len), with_report);
    }
}
