//! What `run` shows while a test runs, as iperf3 shows it: "Connecting to host ..." at once,
//! then a line per interval (whatever stdout is; no escape codes), per stream and their
//! `[SUM]` with `-P`; and the NDJSON events of `--json-stream`. The summary at the end is the
//! table's (wirebench-report's `Human`), so the lines and the table give one answer.
//!
//! Whose view a line is: TCP and request/response, this side's (as iperf3: a sender's lines
//! carry its retransmits and window, a receiver's what arrived); UDP, the receiver's (loss
//! and jitter as they happen: the server's summed lines when it receives, which it sends
//! live; this side's sender lines only if it sends none).

use std::io::{self, Write};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use serde::Serialize;
use wirebench_engine::Watch;

use super::iperf3_record::Iperf3Record;
use wirebench_proto::results::{IntervalRecord, Role, TestView};
use wirebench_proto::spec::{Direction, Protocol, TestSpec};
use wirebench_report::export::lines::{self, Columns, Figures, Layout, RateUnits, RULE};
use wirebench_report::export::Iperf3Client;

/// How `run` shows a test as it goes.
pub struct Live {
    protocol: Protocol,
    /// The lines' layout (their columns are fixed for the test).
    layout: Layout,
    /// Print a line per interval.
    lines: bool,
    /// Write NDJSON events instead of lines.
    stream: bool,
    interval_ns: u64,
    /// `-O`: intervals that begin before this are marked omitted.
    omit_ns: u64,
    /// Streams each way (`-P`): above 1, a line per stream before the `[SUM]`.
    streams: u32,
    /// `--bidir`: lines are tagged with their direction.
    bidir: bool,
    header_done: bool,
    /// The last line printed is the rule.
    ruled: bool,
    /// The server sent at least one UDP receiver interval of its own.
    peer_seen: bool,
    /// UDP, this side sending: its summed intervals, shown at the end only if the server
    /// sent none (a server that does not send its intervals live).
    held: Vec<IntervalRecord>,
    /// One stream's intervals (`true`: this side's), waiting for the sum of their interval
    /// to be printed above it.
    waiting: Vec<(Role, u32, IntervalRecord, bool)>,
    /// Ctrl-C was pressed (set by the signal handler).
    interrupt: Arc<AtomicBool>,
    /// `--iperf3-json`: what iperf3's schema needs that the results do not hold.
    iperf3: Option<Iperf3Record>,
}

impl Live {
    /// A live view of a test of `spec`.
    pub fn new(
        spec: &TestSpec,
        lines: bool,
        stream: bool,
        units: RateUnits,
        interrupt: Arc<AtomicBool>,
    ) -> Self {
        let bidir = spec.direction == Direction::Bidir;
        Self {
            protocol: spec.protocol,
            layout: Layout {
                columns: Columns::of(spec.datagrams(), spec.mechanism),
                tag_width: if bidir { 11 } else { 5 },
                summary: false,
                units,
            },
            lines,
            stream,
            interval_ns: spec.interval_ns.max(1),
            omit_ns: spec.omit_ns,
            streams: spec.streams.max(1),
            bidir,
            header_done: false,
            ruled: false,
            peer_seen: false,
            held: Vec::new(),
            waiting: Vec::new(),
            interrupt,
            iperf3: None,
        }
    }

    /// Records what `--iperf3-json` needs as the test runs, into `record`.
    pub fn record_iperf3(&mut self, record: Iperf3Record) {
        self.iperf3 = Some(record);
    }

    /// What was recorded for `--iperf3-json` (empty when nothing was asked).
    pub fn iperf3_client(&mut self) -> Iperf3Client {
        self.iperf3
            .take()
            .map(Iperf3Record::finish)
            .unwrap_or_default()
    }

    /// Whether a line per interval is printed.
    pub fn shows_lines(&self) -> bool {
        self.lines
    }

    /// Whether the user pressed Ctrl-C.
    pub fn was_interrupted(&self) -> bool {
        self.interrupt.load(Ordering::Relaxed)
    }

    /// Ends the live lines: what was held back, then the rule above the summary.
    pub fn finish(&mut self) {
        if !self.lines {
            return;
        }
        if !self.peer_seen {
            let id = (self.streams <= 1).then_some(0);
            for rec in std::mem::take(&mut self.held) {
                self.line(Role::Sender, id, &rec, true);
            }
        }
        for (role, stream, rec, local) in std::mem::take(&mut self.waiting) {
            self.line(role, Some(stream), &rec, local);
        }
        self.rule();
    }

    /// The rule between groups of lines and above the summary, once.
    fn rule(&mut self) {
        if !self.ruled {
            self.ruled = true;
            let _ = writeln!(io::stdout().lock(), "{RULE}");
        }
    }

    /// Whether this side's lines of `role` are shown (UDP shows the receiver's view).
    fn local_shown(&self, role: Role) -> bool {
        self.protocol == Protocol::Tcp
            || self.layout.columns == Columns::Rr
            || role == Role::Receiver
    }

    /// The direction of a line of `role` (`local`: this side's) with `--bidir`.
    fn direction(&self, role: Role, local: bool) -> Option<&'static str> {
        let client_sends = self.client_sends(role, local);
        self.bidir
            .then_some(if client_sends { "c->s" } else { "s->c" })
    }

    /// One line: stream `stream` (`None`: the sum), of `role` on this side (`local`) or the
    /// server's; whether it was printed.
    fn line(&mut self, role: Role, stream: Option<u32>, rec: &IntervalRecord, local: bool) -> bool {
        // The last interval is cut short by the end of the test: a part of it is shown with
        // its own length (its rate is over that length); a sliver under a twentieth of an
        // interval, whose rate would mean little, is left to the summary, which counts it.
        let len_ns = rec.end_ns.saturating_sub(rec.start_ns);
        if len_ns < self.interval_ns / 20 {
            return false;
        }
        // Nor is an empty last part (the receiver's wait for data in flight, which found none).
        if rec.bytes == 0 && rec.messages == 0 && len_ns < self.interval_ns {
            return false;
        }
        let mut out = io::stdout().lock();
        if !self.header_done {
            self.header_done = true;
            let _ = writeln!(out, "{}", self.layout.header());
        }
        let id = stream.map(|s| s % self.streams + 1);
        let tag = lines::tag(id, self.direction(role, local));
        let mut f = figures(rec, role, self.layout.columns);
        if stream.is_none() {
            // Windows of several connections do not add up to one (iperf3 leaves it out too).
            f.cwnd_bytes = None;
        }
        let mut text = self.layout.line(
            &tag,
            rec.start_ns as f64 / 1e9,
            rec.end_ns as f64 / 1e9,
            &f,
            "",
        );
        if rec.start_ns < self.omit_ns {
            text.push_str("  (omitted)");
        }
        let _ = writeln!(out, "{text}");
        self.ruled = false;
        true
    }

    /// The sum of an interval (`local`: this side's): the lines of its streams first (with
    /// several), then its own.
    fn sum_line(&mut self, role: Role, rec: &IntervalRecord, local: bool) {
        if self.streams <= 1 {
            self.line(role, Some(0), rec, local);
            return;
        }
        let n = rec.start_ns / self.interval_ns;
        let (mine, rest): (Vec<_>, Vec<_>) = std::mem::take(&mut self.waiting)
            .into_iter()
            .partition(|(r, _, x, l)| {
                *r == role && *l == local && x.start_ns / self.interval_ns <= n
            });
        self.waiting = rest;
        let mut mine = mine;
        mine.sort_by_key(|(_, s, x, _)| (x.start_ns, *s));
        let mut rec = *rec;
        if rec.jitter_ns.is_none() {
            // The streams' jitter weighted by their datagrams, as `end.udp.jitter_ms`.
            let (sum, n) = mine
                .iter()
                .filter_map(|(_, _, x, _)| x.jitter_ns.map(|j| (j * x.messages as f64, x.messages)))
                .fold((0.0, 0), |(a, m), (j, k)| (a + j, m + k));
            rec.jitter_ns = (n > 0).then(|| sum / n as f64);
        }
        for (r, s, x, l) in mine {
            self.line(r, Some(s), &x, l);
        }
        // With --bidir the two directions' intervals interleave as they come: no rule.
        if self.line(role, None, &rec, local) && !self.bidir {
            self.rule();
        }
    }

    /// Whether a line of `role` (`local`: this side's) is of what the client sends.
    fn client_sends(&self, role: Role, local: bool) -> bool {
        (role == Role::Sender) == local
    }

    /// Keeps one stream's interval for the lines above its sum, if they are shown.
    fn wait(&mut self, role: Role, stream: u32, rec: &IntervalRecord, local: bool) {
        if self.lines
            && self.streams > 1
            && self.waiting.len() < 4 * wirebench_proto::spec::MAX_STREAMS as usize
        {
            self.waiting.push((role, stream, *rec, local));
        }
    }

    fn event(&self, side: &str, role: Role, rec: &IntervalRecord) {
        let ev = IntervalEvent {
            event: "interval",
            side,
            role,
            record: rec,
        };
        emit(&ev);
    }
}

/// What a line of `role` shows of `rec` in `columns`: a figure of the other role is left
/// out, never put on this one's line.
fn figures(rec: &IntervalRecord, role: Role, columns: Columns) -> Figures {
    let secs = rec.end_ns.saturating_sub(rec.start_ns) as f64 / 1e9;
    let per_s = |n: u64| if secs > 0.0 { n as f64 / secs } else { 0.0 };
    let mut f = Figures {
        bytes: rec.bytes,
        bps: per_s(rec.bytes) * 8.0,
        ..Figures::default()
    };
    match (columns, role) {
        (Columns::Tcp, Role::Sender) => {
            f.retransmits = rec.retransmits;
            f.cwnd_bytes = rec.cwnd_bytes;
        }
        (Columns::Udp, Role::Receiver) => {
            f.jitter_ms = rec.jitter_ns.map(|j| j / 1e6);
            f.lost = Some((Some(rec.lost), Some(rec.messages + rec.lost)));
        }
        (Columns::Rr, _) => {
            f.per_s = per_s(rec.messages);
            f.rtt_p50_us = rec.delay_p50_ns.map(|ns| ns as f64 / 1e3);
            f.rtt_p99_us = rec.delay_p99_ns.map(|ns| ns as f64 / 1e3);
        }
        _ => {}
    }
    f
}

impl Watch for Live {
    fn interval(&mut self, role: Role, rec: &IntervalRecord) {
        if self.stream {
            self.event("client", role, rec);
        }
        if !self.lines {
            return;
        }
        if self.local_shown(role) {
            self.sum_line(role, rec, true);
        } else if !self.peer_seen && self.held.len() < wirebench_proto::spec::MAX_INTERVALS as usize
        {
            self.held.push(*rec);
        }
    }

    fn connected(&mut self, stream: u32, local: SocketAddr, remote: SocketAddr) {
        if let Some(r) = &mut self.iperf3 {
            r.connected(stream, local, remote);
        }
    }

    fn stream_interval(&mut self, role: Role, stream: u32, rec: &IntervalRecord) {
        if let Some(r) = &mut self.iperf3 {
            r.stream_interval(role, stream, rec);
        }
        if self.local_shown(role) {
            self.wait(role, stream, rec, true);
        }
    }

    fn peer_stream_interval(&mut self, role: Role, stream: u32, rec: &IntervalRecord) {
        if self.layout.columns == Columns::Udp && role == Role::Receiver {
            self.wait(role, stream, rec, false);
        }
    }

    fn peer_interval(&mut self, role: Role, rec: &IntervalRecord) {
        if self.stream {
            self.event("server", role, rec);
        }
        // UDP: what the server received, as it received it (summed over the streams).
        if self.layout.columns == Columns::Udp && role == Role::Receiver {
            self.peer_seen = true;
            self.held.clear();
            if self.lines {
                self.sum_line(role, rec, false);
            }
        }
    }

    fn interrupted(&mut self) -> bool {
        self.was_interrupted()
    }
}

/// iperf3's first line, printed before anything is sent: the test has begun to connect.
pub fn connecting(host: &str, port: u16, spec: &TestSpec) {
    let mut out = io::stdout().lock();
    let _ = writeln!(out, "Connecting to host {host}, port {port}");
    if spec.direction == Direction::Reverse {
        let _ = writeln!(out, "Reverse mode, remote host {host} is sending");
    }
    let _ = out.flush();
}

/// One interval as the server's live lines show it (without the side's tag): its time,
/// bytes and rate over its own length, the sender's retransmits and window (TCP), the
/// receiver's loss and jitter (UDP).
pub fn interval_text(rec: &IntervalRecord, udp_receiver: bool, units: RateUnits) -> String {
    let (columns, role) = match (udp_receiver, rec.retransmits.is_some()) {
        (true, _) => (Columns::Udp, Role::Receiver),
        (false, true) => (Columns::Tcp, Role::Sender),
        (false, false) => (Columns::Tcp, Role::Receiver),
    };
    let layout = Layout {
        columns,
        tag_width: 0,
        summary: false,
        units,
    };
    layout.line(
        "",
        rec.start_ns as f64 / 1e9,
        rec.end_ns as f64 / 1e9,
        &figures(rec, role, columns),
        "",
    )
}

/// One line of `--json-stream` on stdout.
pub fn emit<T: Serialize>(event: &T) {
    let mut out = io::stdout().lock();
    if serde_json::to_writer(&mut out, event).is_ok() {
        let _ = writeln!(out);
        let _ = out.flush();
    }
}

/// `--json-stream`: the test as asked, before it runs.
#[derive(Serialize)]
pub struct StartEvent<'a> {
    /// `start`.
    pub event: &'static str,
    /// The tool's version.
    pub wirebench: &'static str,
    /// The server as named.
    pub server: &'a str,
    /// The test (the keys of the document's `test`).
    pub test: TestView,
}

/// `--json-stream`: an interval one side closed.
#[derive(Serialize)]
struct IntervalEvent<'a> {
    event: &'static str,
    /// `client` or `server`.
    side: &'a str,
    role: Role,
    #[serde(flatten)]
    record: &'a IntervalRecord,
}

/// `--json-stream`: the end, with the results document's keys.
#[derive(Serialize)]
pub struct EndEvent<'a, T: Serialize> {
    /// `end`, or `error` when the test failed.
    pub event: &'static str,
    /// The document (or, for an error, the error document).
    #[serde(flatten)]
    pub doc: &'a T,
}
