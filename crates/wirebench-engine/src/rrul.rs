//! Latency under load, as flent's RRUL test measures it: three ordinary tests at once against
//! one server. A UDP and a TCP request/response probe run from the start to the end: the UDP
//! one open loop, as irtt's (a request every spacing whatever the answers, several in
//! flight), the TCP one closed loop at one transaction per spacing at most (what an
//! application's requests over a busy connection see); after an idle phase, a TCP load with
//! streams each way runs for the test's time. One document comes out: the load's, with
//! `end.rrul` put together by [`Rrul::assemble`]. While it runs, a line a second
//! ([`RrulSecond`]) goes to the caller.
//!
//! Why several tests and not a new mechanism: each part is a test the server already runs and
//! limits (one slot each: three, which the default per-client share of `serve` allows), and
//! every figure of the load (per stream, TCP_INFO, intervals) comes out as it does for a
//! bidirectional test. Why here and not in the binary: `run` and `sweep` both run it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError, Sender};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use serde::Serialize;
use wirebench_proto::results::{
    IntervalRecord, OpenLoop, Part, ProbeKind, Results, Role, Rrul, RrulParts, SentProbe,
    UdpProbeSummary,
};
use wirebench_proto::spec::{Direction, Mechanism, Protocol, TestSpec};

use crate::{ClientConfig, EngineError, ProbeFate, ProbeLog, Watch};

/// The probes' spacing unless the test's interval says otherwise: 10 probes a second of each
/// kind.
pub const PROBE_INTERVAL: Duration = Duration::from_millis(100);

/// Load streams each way unless the test asks for more than one (flent's RRUL uses 4).
pub const LOAD_STREAMS: u32 = 4;

/// The size of a probe's request and response: a small message, as netperf's and sockperf's
/// request/response tests send.
const PROBE_SIZE: u64 = 64;

/// How long a UDP probe waits for its answer: longer than a bloated queue's delay (a second
/// or more), so that a slow answer is measured rather than counted lost.
const UDP_PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// How long the load's receivers wait for the data still in flight when its senders stop,
/// at least: a bloated queue and the senders' socket buffers hold seconds of data on a slow
/// link, which the 1 s default of `--drain` counts as missing.
const LOAD_DRAIN: Duration = Duration::from_secs(5);

/// How often the idle phases look whether the user stopped the run and for the UDP probe's
/// seconds.
const IDLE_TICK: Duration = Duration::from_millis(20);

/// The live lines' period: the UDP probe's interval records.
const LIVE_INTERVAL: Duration = Duration::from_secs(1);

/// Why an rrul run could not be planned or run; each message says what to do.
#[derive(Debug, thiserror::Error)]
pub enum RrulError {
    /// An amount instead of a time.
    #[error("--mode rrul runs for a time (-t): not with -n or --file")]
    NotTimed,
    /// UDP, reverse or bidirectional asked of the load, which is fixed.
    #[error(
        "--mode rrul sends both ways over TCP (QUIC with --quic) with UDP and TCP probes: \
         leave out -u, --datagrams, -R, --bidir and --both-directions"
    )]
    FixedShape,
    /// A part's test is not one the server would take.
    #[error("--mode rrul: {0}")]
    Invalid(String),
    /// A probe's thread could not be started.
    #[error("starting a probe: {0}")]
    Thread(std::io::Error),
    /// A probe's thread ended without its results.
    #[error("the {0} probe's thread failed")]
    Panicked(&'static str),
    /// One of the three tests failed before it measured anything.
    #[error("{part}: {source}")]
    Part {
        /// Which test, in words.
        part: &'static str,
        /// Why.
        source: EngineError,
    },
}

impl RrulError {
    /// The engine's error, when one of the tests failed with one (a busy server, say).
    pub fn engine(&self) -> Option<&EngineError> {
        match self {
            Self::Part { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// The three tests of an rrul run and its schedule.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RrulPlan {
    /// Each idle phase's length (the probes alone, before and after the load), ns.
    pub idle_ns: u64,
    /// The probes' spacing, ns.
    pub probe_interval_ns: u64,
    /// The load: TCP streams each way.
    pub load: TestSpec,
    /// The UDP probe.
    pub udp: TestSpec,
    /// The TCP probe.
    pub tcp: TestSpec,
}

fn ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl RrulPlan {
    /// The plan for `base`, the load as the user's flags describe it (a TCP stream test for
    /// a time): its streams become `base.streams` each way (4 unless more than one is
    /// asked), its drain at least 5 s; the probes run for the load's time and both idle
    /// phases, one 64-byte transaction per `probe_interval` (100 ms when `None` or zero),
    /// the TCP probe with the load's congestion control; the UDP probe open loop (a request
    /// every `probe_interval`, lost after 2 s), its intervals a second long. Every part is
    /// validated.
    ///
    /// # Errors
    ///
    /// `base` sends an amount or a file, over UDP, or not forward only; or a part is not a
    /// valid test.
    pub fn new(
        base: &TestSpec,
        idle: Duration,
        probe_interval: Option<Duration>,
    ) -> Result<Self, RrulError> {
        if base.bytes.is_some() || base.file.is_some() {
            return Err(RrulError::NotTimed);
        }
        // The load is TCP, or QUIC (`--quic`: streams each way over QUIC connections); the
        // probes are the UDP and TCP ones either way, so both loads meet the same yardstick.
        if base.datagrams() || base.direction != Direction::Forward {
            return Err(RrulError::FixedShape);
        }
        let probe_interval = probe_interval
            .filter(|d| !d.is_zero())
            .unwrap_or(PROBE_INTERVAL);
        let per_s = (1.0 / probe_interval.as_secs_f64()).round().max(1.0) as u64;
        let mut load = base.clone();
        load.mechanism = Mechanism::Stream;
        load.direction = Direction::Bidir;
        load.interval_ns = ns(probe_interval);
        load.drain_ns = load.drain_ns.max(ns(LOAD_DRAIN));
        if load.streams <= 1 {
            load.streams = LOAD_STREAMS;
        }
        let mut tcp = base.clone();
        tcp.protocol = Protocol::Tcp;
        tcp.quic_streams = None;
        if base.protocol == Protocol::Quic {
            // QUIC's controllers are not the kernel's: the TCP probe keeps the host's.
            tcp.congestion = None;
        }
        tcp.mechanism = Mechanism::Rr;
        tcp.duration_ns = base
            .duration_ns
            .map(|d| d.saturating_add(ns(idle).saturating_mul(2)));
        tcp.interval_ns = ns(probe_interval);
        tcp.rate_bps = None;
        tcp.rate_pps = Some(per_s);
        tcp.streams = 1;
        tcp.size = PROBE_SIZE;
        let mut udp = tcp.clone();
        udp.protocol = Protocol::Udp;
        udp.congestion = None;
        udp.ack_timeout_ns = ns(UDP_PROBE_TIMEOUT);
        udp.open_loop_interval_ns = Some(ns(probe_interval));
        // Its intervals are the live lines' seconds; its requests are recorded one by one.
        udp.interval_ns = ns(LIVE_INTERVAL);
        for part in [&load, &tcp, &udp] {
            part.validate()
                .map_err(|e| RrulError::Invalid(e.to_string()))?;
        }
        Ok(Self {
            idle_ns: ns(idle),
            probe_interval_ns: ns(probe_interval),
            load,
            udp,
            tcp,
        })
    }

    /// Each idle phase's length.
    pub fn idle(&self) -> Duration {
        Duration::from_nanos(self.idle_ns)
    }

    /// The load's length.
    pub fn load_time(&self) -> Duration {
        Duration::from_nanos(self.load.duration_ns.unwrap_or(0))
    }
}

/// One second of an rrul run as it goes: what the live lines show.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct RrulSecond {
    /// The second's end, s since the run began.
    pub t_s: f64,
    /// What the server received of the load in the intervals it reported during the second,
    /// bits/s; `None` when none arrived (the load is not running).
    pub upload_bps: Option<f64>,
    /// What this side received of the load in its intervals closed during the second,
    /// bits/s; `None` when none closed.
    pub download_bps: Option<f64>,
    /// The median round trip of the UDP probes answered during the second, µs; `None`
    /// when none was.
    pub udp_rtt_p50_us: Option<f64>,
    /// UDP probes sent during the second.
    pub udp_sent: u64,
    /// UDP probes found lost during the second (their timeout ran out in it).
    pub udp_lost: u64,
}

/// The load's bytes received in the intervals seen since the last second, and their length.
#[derive(Debug, Default, Clone, Copy)]
struct Received {
    bytes: u64,
    ns: u64,
}

impl Received {
    fn add(&mut self, rec: &IntervalRecord) {
        self.bytes = self.bytes.saturating_add(rec.bytes);
        self.ns = self
            .ns
            .saturating_add(rec.end_ns.saturating_sub(rec.start_ns));
    }

    /// Their rate, and a fresh start.
    fn take_bps(&mut self) -> Option<f64> {
        let r = std::mem::take(self);
        (r.ns > 0).then(|| r.bytes as f64 * 8e9 / r.ns as f64)
    }
}

/// The seconds of the live lines: the load's intervals are summed until the UDP probe closes
/// its next one-second interval, which makes the line. Sans-IO: times passed in.
#[derive(Debug)]
struct Seconds {
    t0: Instant,
    up: Received,
    down: Received,
}

impl Seconds {
    fn new(t0: Instant) -> Self {
        Self {
            t0,
            up: Received::default(),
            down: Received::default(),
        }
    }

    /// An interval of the load: what the server (`upload`) or this side received.
    fn load(&mut self, upload: bool, rec: &IntervalRecord) {
        if upload {
            self.up.add(rec);
        } else {
            self.down.add(rec);
        }
    }

    /// The UDP probe's interval `rec`, its side having started at `start` (when known;
    /// else the line is dated `now`): the second's line.
    fn udp(&mut self, rec: &IntervalRecord, start: Option<Instant>, now: Instant) -> RrulSecond {
        let t_s = match start {
            Some(s) => s.saturating_duration_since(self.t0).as_secs_f64() + rec.end_ns as f64 / 1e9,
            None => now.saturating_duration_since(self.t0).as_secs_f64(),
        };
        RrulSecond {
            t_s,
            upload_bps: self.up.take_bps(),
            download_bps: self.down.take_bps(),
            udp_rtt_p50_us: rec.delay_p50_ns.map(|ns| ns as f64 / 1e3),
            udp_sent: rec.messages,
            udp_lost: rec.lost,
        }
    }
}

/// What a probe's thread hears of its test: the stop, its side's start, its intervals (the
/// UDP probe's go to the live lines) and, at the end, its requests.
struct ProbeWatch {
    stop: Arc<AtomicBool>,
    live: Option<Sender<(IntervalRecord, Option<Instant>)>>,
    start: Option<Instant>,
    log: Option<ProbeLog>,
}

impl Watch for ProbeWatch {
    fn progress(&mut self, elapsed: Duration, _bytes: u64, _messages: u64) {
        if self.start.is_none() {
            self.start = Instant::now().checked_sub(elapsed);
        }
    }

    fn interval(&mut self, role: Role, rec: &IntervalRecord) {
        if let (Role::Sender, Some(tx)) = (role, &self.live) {
            let _ = tx.send((*rec, self.start));
        }
    }

    fn probes(&mut self, log: ProbeLog) {
        self.log = Some(log);
    }

    fn interrupted(&mut self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }
}

/// The live lines' state on the calling thread: the seconds, where the UDP probe's
/// intervals arrive, and where lines go.
struct Live<'a> {
    seconds: Seconds,
    rx: Receiver<(IntervalRecord, Option<Instant>)>,
    show: &'a mut dyn FnMut(&RrulSecond),
}

impl Live<'_> {
    /// Makes a line of each UDP interval that arrived, waiting up to `wait` for the first.
    fn pump(&mut self, wait: Duration) {
        let first = match self.rx.recv_timeout(wait) {
            Ok(x) => Some(x),
            Err(RecvTimeoutError::Timeout) => None,
            // The probe's thread is gone: only the clock is left to wait on.
            Err(RecvTimeoutError::Disconnected) => {
                thread::sleep(wait);
                None
            }
        };
        let rest: Vec<_> = first.into_iter().chain(self.rx.try_iter()).collect();
        for (rec, start) in rest {
            // The probe's last interval is cut short by its end: a sliver says nothing.
            if rec.end_ns.saturating_sub(rec.start_ns) < ns(LIVE_INTERVAL) / 20 {
                continue;
            }
            let line = self.seconds.udp(&rec, start, Instant::now());
            (self.show)(&line);
        }
    }
}

/// The load's watch: its receivers' intervals go to the live lines, which it also pumps
/// (it runs on the calling thread); a stop passes on to the test.
struct LoadWatch<'a, 'b> {
    stop: &'a AtomicBool,
    live: &'a mut Live<'b>,
}

impl Watch for LoadWatch<'_, '_> {
    fn interval(&mut self, role: Role, rec: &IntervalRecord) {
        if role == Role::Receiver {
            self.live.seconds.load(false, rec);
        }
    }

    fn peer_interval(&mut self, role: Role, rec: &IntervalRecord) {
        if role == Role::Receiver {
            self.live.seconds.load(true, rec);
        }
    }

    fn interrupted(&mut self) -> bool {
        self.live.pump(Duration::ZERO);
        self.stop.load(Ordering::Relaxed)
    }
}

/// A probe's test on a thread of its own: its offset from `t0`, its results and its watch.
type ProbeThread = JoinHandle<(Duration, Result<Results, EngineError>, ProbeWatch)>;

fn spawn_probe(
    kind: ProbeKind,
    cfg: ClientConfig,
    t0: Instant,
    mut watch: ProbeWatch,
) -> Result<ProbeThread, RrulError> {
    thread::Builder::new()
        .name(format!("wirebench-rrul-{}", kind.name()))
        .spawn(move || {
            let offset = t0.elapsed();
            let results = crate::run(&cfg, &mut watch);
            (offset, results, watch)
        })
        .map_err(RrulError::Thread)
}

/// Runs `plan` against the server `server` names (its host, port, key and local address;
/// its test, files, packet log and stack are not used), as [`run_rrul_live`] does, with no
/// live lines.
///
/// # Errors
///
/// As [`run_rrul_live`].
pub fn run_rrul(
    server: &ClientConfig,
    plan: &RrulPlan,
    stop: &Arc<AtomicBool>,
) -> Result<Results, RrulError> {
    run_rrul_live(server, plan, stop, &mut |_| {})
}

/// Runs `plan` against the server `server` names: the probes start, the load starts after
/// the idle phase, and the load's document comes back with `end.rrul`. `show` gets a line
/// a second (each of the UDP probe's intervals) on the calling thread. Setting `stop` ends
/// every part early, as an interrupted test ends.
///
/// # Errors
///
/// A probe's thread could not start, or one of the three tests failed before it measured
/// anything ([`RrulError::Part`], with the engine's error).
pub fn run_rrul_live(
    server: &ClientConfig,
    plan: &RrulPlan,
    stop: &Arc<AtomicBool>,
    show: &mut dyn FnMut(&RrulSecond),
) -> Result<Results, RrulError> {
    let config = |spec: &TestSpec| ClientConfig {
        host: server.host.clone(),
        port: server.port,
        spec: spec.clone(),
        packet_log: None,
        file: None,
        save: None,
        psk: server.psk.clone(),
        bind: server.bind,
        stack: None,
        quic: server.quic,
    };
    let t0 = Instant::now();
    let (tx, rx) = channel();
    let watch = |live| ProbeWatch {
        stop: Arc::clone(stop),
        live,
        start: None,
        log: None,
    };
    let udp = spawn_probe(ProbeKind::Udp, config(&plan.udp), t0, watch(Some(tx)))?;
    let tcp = spawn_probe(ProbeKind::Tcp, config(&plan.tcp), t0, watch(None))?;
    let mut live = Live {
        seconds: Seconds::new(t0),
        rx,
        show,
    };
    // The idle phase: the probes alone. Waiting is the measurement's schedule here.
    while t0.elapsed() < plan.idle() && !stop.load(Ordering::Relaxed) {
        live.pump(IDLE_TICK.min(plan.idle().saturating_sub(t0.elapsed())));
    }
    let load_offset = t0.elapsed();
    let load = crate::run(
        &config(&plan.load),
        &mut LoadWatch {
            stop,
            live: &mut live,
        },
    );
    // The idle phase after: the probes alone until they end.
    while !(udp.is_finished() && tcp.is_finished()) {
        live.pump(IDLE_TICK);
    }
    live.pump(Duration::ZERO);
    let (_, udp, udp_watch) = udp.join().map_err(|_| RrulError::Panicked("UDP"))?;
    let (tcp_offset, tcp, _) = tcp.join().map_err(|_| RrulError::Panicked("TCP"))?;
    let failed = |part: &'static str| move |source| RrulError::Part { part, source };
    let mut doc = load.map_err(failed("the rrul load (streams both ways)"))?;
    let udp = udp.map_err(failed("the rrul UDP probe"))?;
    let tcp = tcp.map_err(failed("the rrul TCP probe"))?;
    let sent = udp_watch
        .log
        .as_ref()
        .map(|log| sent_probes(log, t0))
        .unwrap_or_default();
    let open = udp_watch.log.as_ref().map(|log| OpenLoop {
        sent: &sent,
        summary: udp_summary(log, plan),
    });
    let rrul = Rrul::assemble(&RrulParts {
        idle_s: plan.idle().as_secs_f64(),
        probe_interval_s: Duration::from_nanos(plan.probe_interval_ns).as_secs_f64(),
        load: Part {
            results: &doc,
            offset_s: load_offset.as_secs_f64(),
        },
        udp: open,
        tcp: Some(Part {
            results: &tcp,
            offset_s: tcp_offset.as_secs_f64(),
        }),
    });
    doc.end.rrul = Some(rrul);
    let failed_probe = [&udp, &tcp].into_iter().find(|r| r.error.is_some());
    if let (None, Some(probe)) = (&doc.error, failed_probe) {
        doc.error = probe.error.as_ref().map(|e| format!("a probe: {e}"));
        doc.error_cause = probe.error_cause;
    }
    Ok(doc)
}

/// The UDP probe's settled requests on the run's clock (one still in flight at a stop is
/// in none).
fn sent_probes(log: &ProbeLog, t0: Instant) -> Vec<SentProbe> {
    let offset_s = log.start.saturating_duration_since(t0).as_secs_f64();
    log.records
        .iter()
        .filter_map(|r| {
            let t_s = offset_s + r.sent_ns as f64 / 1e9;
            match r.fate {
                ProbeFate::Answered(ns) => Some(SentProbe {
                    t_s,
                    rtt_us: Some(ns as f64 / 1e3),
                }),
                ProbeFate::Lost => Some(SentProbe { t_s, rtt_us: None }),
                ProbeFate::Pending => None,
            }
        })
        .collect()
}

fn udp_summary(log: &ProbeLog, plan: &RrulPlan) -> UdpProbeSummary {
    let t = log.tally;
    UdpProbeSummary {
        open_loop: true,
        timeout_s: Duration::from_nanos(plan.udp.ack_timeout_ns).as_secs_f64(),
        late: t.late,
        duplicates: t.duplicates,
        after_timeout: t.after_timeout,
        unknown: t.unknown,
        unrecorded: t.unrecorded,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A TCP stream test for `secs`, as `run -t` describes one.
    fn base(secs: u64) -> TestSpec {
        let s = TestSpec::default().duration_ns(secs * 1_000_000_000);
        s.validate().expect("valid");
        s
    }

    #[test]
    fn the_plan_is_a_bidir_load_and_two_paced_probes() {
        let mut b = base(20);
        b.congestion = Some("cubic".into());
        let p = RrulPlan::new(&b, Duration::from_secs(3), None).expect("a plan");
        assert_eq!(p.load.streams, 4);
        assert_eq!(p.load.direction, Direction::Bidir);
        assert_eq!(p.load.duration_ns, Some(20_000_000_000));
        assert_eq!(p.load.drain_ns, 5_000_000_000);
        assert_eq!(p.load.interval_ns, 100_000_000);
        assert_eq!(p.tcp.duration_ns, Some(26_000_000_000));
        assert_eq!(
            (p.tcp.rate_pps, p.tcp.size, p.tcp.streams),
            (Some(10), 64, 1)
        );
        assert_eq!(p.tcp.mechanism, Mechanism::Rr);
        assert_eq!(p.udp.protocol, Protocol::Udp);
        assert_eq!(p.udp.congestion, None);
        assert_eq!(p.tcp.congestion.as_deref(), Some("cubic"));
        assert_eq!(p.udp.ack_timeout_ns, 2_000_000_000);
        // The UDP probe is open loop at the spacing; its intervals are the live seconds.
        assert_eq!(p.udp.open_loop_interval_ns, Some(100_000_000));
        assert_eq!(p.udp.interval_ns, 1_000_000_000);
        assert_eq!(p.tcp.open_loop_interval_ns, None);
        assert_eq!(p.idle(), Duration::from_secs(3));
        assert_eq!(p.load_time(), Duration::from_secs(20));
    }

    #[test]
    fn more_streams_and_another_spacing_are_kept() {
        let mut b = base(2);
        b.streams = 2;
        let p = RrulPlan::new(&b, Duration::ZERO, Some(Duration::from_millis(50))).expect("plan");
        assert_eq!(p.load.streams, 2);
        assert_eq!(
            (p.tcp.rate_pps, p.probe_interval_ns),
            (Some(20), 50_000_000)
        );
        assert_eq!(p.tcp.duration_ns, Some(2_000_000_000));
        // A zero interval is no interval: the default spacing.
        let p = RrulPlan::new(&b, Duration::ZERO, Some(Duration::ZERO)).expect("plan");
        assert_eq!(p.probe_interval_ns, 100_000_000);
    }

    fn record(start_ms: u64, end_ms: u64, bytes: u64) -> IntervalRecord {
        IntervalRecord {
            start_ns: start_ms * 1_000_000,
            end_ns: end_ms * 1_000_000,
            bytes,
            ..IntervalRecord::default()
        }
    }

    #[test]
    fn a_live_second_is_the_udp_probes_interval_with_the_load_seen_since_the_last() {
        let t0 = Instant::now();
        let mut s = Seconds::new(t0);
        let probe_start = t0 + Duration::from_millis(30);
        let udp = IntervalRecord {
            messages: 10,
            lost: 1,
            delay_p50_ns: Some(25_000_000),
            ..record(1000, 2000, 640)
        };
        // Idle: no load interval, so no rates.
        let idle = s.udp(&udp, Some(probe_start), t0);
        assert_eq!((idle.upload_bps, idle.download_bps), (None, None));
        assert!((idle.t_s - 2.03).abs() < 1e-9, "{idle:?}");
        assert_eq!(idle.udp_rtt_p50_us, Some(25_000.0));
        assert_eq!((idle.udp_sent, idle.udp_lost), (10, 1));
        // Loaded: 11 upload intervals of 100 ms arrived late and in a bunch, 10 download.
        for i in 0..11 {
            s.load(true, &record(i * 100, i * 100 + 100, 250_000));
        }
        for i in 0..10 {
            s.load(false, &record(i * 100, i * 100 + 100, 125_000));
        }
        let loaded = s.udp(&udp, None, t0 + Duration::from_secs(3));
        assert!(
            loaded.upload_bps.is_some_and(|b| (b - 20e6).abs() < 1.0),
            "{loaded:?}"
        );
        assert!(loaded.download_bps.is_some_and(|b| (b - 10e6).abs() < 1.0));
        assert!(
            (loaded.t_s - 3.0).abs() < 1e-9,
            "dated when it came: {loaded:?}"
        );
        // Each second starts afresh.
        let next = s.udp(&udp, Some(probe_start), t0);
        assert_eq!(next.upload_bps, None);
    }

    #[test]
    fn rrul_refuses_what_it_cannot_mean() {
        let idle = Duration::from_secs(1);
        let mut amount = base(1);
        amount.bytes = Some(1_000_000);
        amount.duration_ns = None;
        assert!(matches!(
            RrulPlan::new(&amount, idle, None),
            Err(RrulError::NotTimed)
        ));
        for change in [
            |s: &mut TestSpec| s.protocol = Protocol::Udp,
            |s: &mut TestSpec| s.direction = Direction::Reverse,
            |s: &mut TestSpec| s.direction = Direction::Bidir,
        ] {
            let mut s = base(1);
            change(&mut s);
            assert!(matches!(
                RrulPlan::new(&s, idle, None),
                Err(RrulError::FixedShape)
            ));
        }
    }
}
