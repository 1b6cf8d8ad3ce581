//! What `run` shows while a test runs: a line per interval as iperf3 prints them (the
//! receiver's view, which the server sends live when it is the receiver), the NDJSON events
//! of `--json-stream`, and the summary's sender and receiver lines at the end.

use std::io::{self, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use serde::Serialize;
use wirebench_engine::Watch;
use wirebench_proto::results::{End, IntervalRecord, Results, Role, TestView};
use wirebench_proto::spec::{Direction, Protocol, TestSpec};
use wirebench_proto::units::{format_bytes, format_rate_bps};

use crate::cli::RateUnits;

/// How `run` shows a test as it goes.
pub struct Live {
    protocol: Protocol,
    /// Print a line per interval.
    lines: bool,
    /// Write NDJSON events instead of lines.
    stream: bool,
    units: RateUnits,
    interval_ns: u64,
    /// `-O`: intervals that begin before this are marked omitted.
    omit_ns: u64,
    header_done: bool,
    /// The server sent at least one interval of its own.
    peer_seen: bool,
    /// This side's sender intervals, shown at the end only if the server sent none (a
    /// server that does not send its intervals live).
    held: Vec<IntervalRecord>,
    /// TCP: the sender's retransmits and window per interval (by the interval's number), to
    /// show beside what the receiver got.
    tcp_sent: Vec<(bool, u64, Option<u64>, Option<u64>)>,
    /// `--bidir`: lines are tagged with their direction.
    bidir: bool,
    /// TCP, the server sending: this side's receiver line, waiting (until the next one) for
    /// the server's figures of the same interval.
    pending: Option<IntervalRecord>,
    /// Ctrl-C was pressed (set by the signal handler).
    interrupt: Arc<AtomicBool>,
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
        Self {
            protocol: spec.protocol,
            lines,
            stream,
            units,
            interval_ns: spec.interval_ns.max(1),
            omit_ns: spec.omit_ns,
            header_done: false,
            peer_seen: false,
            held: Vec::new(),
            tcp_sent: Vec::new(),
            bidir: spec.direction == Direction::Bidir,
            pending: None,
            interrupt,
        }
    }

    /// Whether the user pressed Ctrl-C.
    pub fn was_interrupted(&self) -> bool {
        self.interrupt.load(Ordering::Relaxed)
    }

    /// Ends the live lines: what was held back, then iperf3's two summary lines.
    pub fn finish(&mut self, results: &Results, note: Option<&str>) {
        if !self.lines {
            return;
        }
        if let Some(p) = self.pending.take() {
            self.receiver_line(true, &p);
        }
        if !self.peer_seen {
            for rec in std::mem::take(&mut self.held) {
                self.line("sender", &rec);
            }
        }
        let mut out = io::stdout().lock();
        let _ = writeln!(out, "{}", "- ".repeat(40).trim_end());
        let unknown =
            results.datapath.server.is_none() && results.test.direction == Direction::Forward;
        let (fwd, rev) = match &results.reverse {
            Some(r) => ("c->s ", Some(&r.end)),
            None => ("", None),
        };
        let mut lines = self.summary(&results.end, fwd, unknown);
        if let Some(e) = rev {
            lines.extend(self.summary(e, "s->c ", false));
        }
        for l in lines {
            let _ = writeln!(out, "{l}");
        }
        if let Some(from) = results.end.after_omit.map(|a| a.omitted_s) {
            let _ = writeln!(
                out,
                "(the first {from:.2} s omitted, -O; jitter and out of order count the whole test)"
            );
        }
        if let Some(n) = note {
            let _ = writeln!(out, "{n}");
        }
    }

    /// iperf3's two summary lines of one direction (`tag`: its name with `--bidir`); with -O,
    /// of the intervals after the omitted start. `unknown`: the server never said what it
    /// received.
    fn summary(&self, e: &End, tag: &str, unknown: bool) -> Vec<String> {
        let s = Summary::of(e);
        let w = 10 + tag.len();
        let mut out = vec![match s.sent {
            Some((sent_s, sent_bytes, sent_bps)) => format!(
                "{:<w$} {:>13}  {:>12}  {:>16}",
                format!("[{tag}sender]"),
                format!("{:.2}-{:.2} s", s.from_s, s.from_s + sent_s),
                format_bytes(sent_bytes),
                self.rate(sent_bps),
            ),
            None => format!(
                "{:<w$} unknown: the server did not report what it sent",
                format!("[{tag}sender]")
            ),
        }];
        if unknown || !s.received_known {
            out.push(format!(
                "{:<w$} unknown: the server did not report what it received",
                format!("[{tag}receiver]")
            ));
            return out;
        }
        let mut receiver = format!(
            "{:<w$} {:>13}  {:>12}  {:>16}",
            format!("[{tag}receiver]"),
            format!("{:.2}-{:.2} s", s.from_s, s.from_s + s.received_s),
            format_bytes(s.received_bytes),
            self.rate(s.received_bps),
        );
        if let Some(u) = &e.udp {
            let lost = s.lost.unwrap_or(u.lost);
            let total = s.received_messages + lost;
            let ratio = s.loss_ratio.unwrap_or(u.loss_ratio);
            receiver.push_str(&format!(
                "  lost {}/{} ({:.2}%)  jitter {:.3} ms  out of order {}",
                lost,
                total,
                ratio * 100.0,
                u.jitter_ms,
                u.reordered
            ));
        } else if let Some(t) = e.tcp.filter(|_| self.protocol == Protocol::Tcp) {
            // The sender's TCP_INFO at the end (`end.retransmits` is stop-and-wait's count).
            receiver.push_str(&format!(
                "  retransmits {}  cwnd {}",
                t.retransmits,
                format_bytes(t.snd_cwnd_segments * t.snd_mss_bytes)
            ));
        }
        out.push(receiver);
        out
    }

    fn rate(&self, bps: f64) -> String {
        format_rate(bps, self.units)
    }

    fn line(&mut self, who: &str, rec: &IntervalRecord) {
        // The last interval is cut short by the end of the test: a part of it is shown with
        // its own length (its rate is over that length); a sliver under a twentieth of an
        // interval, whose rate would mean little, is left to the summary, which counts it.
        let len_ns = rec.end_ns.saturating_sub(rec.start_ns);
        if len_ns < self.interval_ns / 20 {
            return;
        }
        // Nor is an empty last part (the receiver's wait for data in flight, which found none).
        if rec.bytes == 0 && len_ns < self.interval_ns {
            return;
        }
        let udp_receiver = self.protocol == Protocol::Udp && who != "sender";
        let mut out = io::stdout().lock();
        if !self.header_done {
            self.header_done = true;
            let _ = writeln!(out, "{:<10} {}", "", interval_header(udp_receiver));
        }
        let mut text = format!(
            "{:<10} {}",
            format!("[{who}]"),
            interval_text(rec, udp_receiver, self.units)
        );
        if rec.start_ns < self.omit_ns {
            text.push_str("  (omitted)");
        }
        let _ = writeln!(out, "{}", text.trim_end());
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

impl Live {
    /// The sender's figures of the interval of `rec`, which a receiver on the other side
    /// (`local`: this one) got.
    fn sender_of(&self, local: bool, rec: &IntervalRecord) -> Option<(Option<u64>, Option<u64>)> {
        let n = rec.start_ns / self.interval_ns;
        self.tcp_sent
            .iter()
            .rev()
            .find(|(l, k, _, _)| *l != local && *k == n)
            .map(|&(_, _, r, c)| (r, c))
    }

    /// Keeps a TCP sender's figures of an interval (`local`: this side's) for the
    /// receiver's line of it.
    fn keep_tcp(&mut self, local: bool, role: Role, rec: &IntervalRecord) {
        if role == Role::Sender
            && rec.retransmits.is_some()
            && self.tcp_sent.len() < 2 * wirebench_proto::spec::MAX_INTERVALS as usize
        {
            self.tcp_sent.push((
                local,
                rec.start_ns / self.interval_ns,
                rec.retransmits,
                rec.cwnd_bytes,
            ));
        }
    }

    /// The tag of a receiver's line: with `--bidir`, its direction.
    fn receiver_tag(&self, local: bool) -> &'static str {
        match (self.bidir, local) {
            (false, _) => "receiver",
            (true, false) => "c->s",
            (true, true) => "s->c",
        }
    }

    /// A receiver's line (`local`: this side received), with its sender's TCP figures.
    fn receiver_line(&mut self, local: bool, rec: &IntervalRecord) {
        let mut rec = *rec;
        if let Some((r, c)) = self.sender_of(local, &rec) {
            (rec.retransmits, rec.cwnd_bytes) = (r, c);
        }
        let tag = self.receiver_tag(local);
        self.line(tag, &rec);
    }
}

impl Watch for Live {
    fn interval(&mut self, role: Role, rec: &IntervalRecord) {
        self.keep_tcp(true, role, rec);
        if self.stream {
            self.event("client", role, rec);
        }
        if !self.lines {
            return;
        }
        match role {
            Role::Receiver if self.protocol == Protocol::Tcp => {
                if let Some(p) = self.pending.take() {
                    self.receiver_line(true, &p);
                }
                if self.sender_of(true, rec).is_some() {
                    self.receiver_line(true, rec);
                } else {
                    self.pending = Some(*rec);
                }
            }
            Role::Receiver => self.receiver_line(true, rec),
            // What was sent is shown only if the server sends no receiver lines.
            Role::Sender if self.peer_seen => {}
            Role::Sender => self.held.push(*rec),
        }
    }

    fn peer_interval(&mut self, role: Role, rec: &IntervalRecord) {
        self.keep_tcp(false, role, rec);
        if self.stream {
            self.event("server", role, rec);
        }
        if let Some(p) = self
            .pending
            .filter(|p| self.lines && self.sender_of(true, p).is_some())
        {
            self.pending = None;
            self.receiver_line(true, &p);
        }
        if role == Role::Receiver {
            self.peer_seen = true;
            self.held.clear();
            if self.lines {
                self.receiver_line(false, rec);
            }
        }
    }

    fn interrupted(&mut self) -> bool {
        self.was_interrupted()
    }
}

/// The column heads of [`interval_text`].
pub fn interval_header(udp_receiver: bool) -> String {
    format!(
        "{:>13}  {:>12}  {:>16}{}",
        "interval",
        "transfer",
        "rate",
        if udp_receiver {
            "  lost/total (%)          jitter"
        } else {
            ""
        }
    )
}

/// One interval as a live line shows it (without the side's tag): its time, bytes and rate
/// over its own length, and for a UDP receiver the loss and jitter.
pub fn interval_text(rec: &IntervalRecord, udp_receiver: bool, units: RateUnits) -> String {
    let secs = rec.end_ns.saturating_sub(rec.start_ns) as f64 / 1e9;
    let rate = if secs > 0.0 {
        rec.bytes as f64 * 8.0 / secs
    } else {
        0.0
    };
    let mut text = format!(
        "{:>13}  {:>12}  {:>16}",
        format!(
            "{:.2}-{:.2} s",
            rec.start_ns as f64 / 1e9,
            rec.end_ns as f64 / 1e9
        ),
        format_bytes(rec.bytes),
        format_rate(rate, units)
    );
    if udp_receiver {
        let total = rec.messages + rec.lost;
        let pct = if total > 0 {
            rec.lost as f64 * 100.0 / total as f64
        } else {
            0.0
        };
        let lost = format!("{}/{} ({pct:.2}%)", rec.lost, total);
        text.push_str(&format!("  {lost:<22}"));
        if let Some(j) = rec.jitter_ns {
            text.push_str(&format!("  {:.3} ms", j / 1e6));
        }
    }
    // TCP: the sender's retransmits in the interval and its window at the end (TCP_INFO).
    if let Some(n) = rec.retransmits {
        text.push_str(&format!("  retr {n}"));
    }
    if let Some(c) = rec.cwnd_bytes {
        text.push_str(&format!("  cwnd {}", format_bytes(c)));
    }
    text
}

/// The figures of the summary lines: the whole test's, or with `-O` those after the
/// omitted start.
struct Summary {
    from_s: f64,
    /// The sender's time, bytes and rate; `None` if it never reported.
    sent: Option<(f64, u64, f64)>,
    /// Whether the receiver reported (its figures below are 0 if not).
    received_known: bool,
    received_s: f64,
    received_bytes: u64,
    received_messages: u64,
    received_bps: f64,
    lost: Option<u64>,
    loss_ratio: Option<f64>,
}

impl Summary {
    fn of(e: &End) -> Self {
        match &e.after_omit {
            Some(a) => Self {
                from_s: a.omitted_s,
                sent: match (a.sent_duration_s, a.sent_bytes, a.sent_bps) {
                    (Some(s), Some(b), Some(r)) => Some((s, b, r)),
                    _ => None,
                },
                received_known: a.received_bytes.is_some(),
                received_s: a.received_duration_s.unwrap_or(0.0),
                received_bytes: a.received_bytes.unwrap_or(0),
                received_messages: a.received_messages.unwrap_or(0),
                received_bps: a.received_bps.unwrap_or(0.0),
                lost: a.lost,
                loss_ratio: a.loss_ratio,
            },
            None => Self {
                from_s: 0.0,
                sent: match (e.sent.duration_s, e.sent.bytes, e.sent_bps) {
                    (Some(s), Some(b), Some(r)) => Some((s, b, r)),
                    _ => None,
                },
                received_known: e.received.bytes.is_some(),
                received_s: e.received.duration_s.unwrap_or(0.0),
                received_bytes: e.received.bytes.unwrap_or(0),
                received_messages: e.received.messages.unwrap_or(0),
                received_bps: e.received_bps.unwrap_or(0.0),
                lost: None,
                loss_ratio: None,
            },
        }
    }
}

/// A bit rate in the units asked for.
pub fn format_rate(bps: f64, units: RateUnits) -> String {
    match units {
        RateUnits::Auto => format_rate_bps(bps),
        RateUnits::Bits(c) => {
            let (div, name) = prefix(c);
            format!("{:.2} {name}bit/s", bps / div)
        }
        RateUnits::Bytes(c) => {
            let (div, name) = prefix(c);
            format!("{:.2} {name}B/s", bps / 8.0 / div)
        }
    }
}

fn prefix(c: char) -> (f64, &'static str) {
    match c.to_ascii_lowercase() {
        'k' => (1e3, "k"),
        'g' => (1e9, "G"),
        _ => (1e6, "M"),
    }
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
