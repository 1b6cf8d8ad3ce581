//! Latency under load, as flent's RRUL test measures it: three ordinary tests at once against
//! one server. A UDP and a TCP request/response probe, paced at one transaction per interval,
//! run from the start to the end; after an idle phase, a TCP load with streams each way runs
//! for the test's time. One document comes out: the load's, with `end.rrul` put together by
//! [`Rrul::assemble`].
//!
//! Why several tests and not a new mechanism: each part is a test the server already runs and
//! limits (one slot each: three, which the default per-client share of `serve` allows), and
//! every figure of the load (per stream, TCP_INFO, intervals) comes out as it does for a
//! bidirectional test. Why here and not in the binary: `run` and `sweep` both run it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use serde::Serialize;
use wirebench_proto::results::{Part, ProbeKind, Results, Rrul};
use wirebench_proto::spec::{Direction, Mechanism, Protocol, TestSpec};

use crate::{ClientConfig, EngineError, Watch};

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

/// How often the idle phase looks whether the user stopped the run.
const IDLE_TICK: Duration = Duration::from_millis(20);

/// Why an rrul run could not be planned or run; each message says what to do.
#[derive(Debug, thiserror::Error)]
pub enum RrulError {
    /// An amount instead of a time.
    #[error("--mode rrul runs for a time (-t): not with -n or --file")]
    NotTimed,
    /// UDP, reverse or bidirectional asked of the load, which is fixed.
    #[error(
        "--mode rrul sends both ways over TCP with UDP and TCP probes: leave out -u, -R, \
         --bidir and --both-directions"
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
    /// the TCP probe with the load's congestion control. Every part is validated.
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
        if base.protocol != Protocol::Tcp || base.direction != Direction::Forward {
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

/// A watcher that shows nothing and passes a stop on to the test.
struct Stop(Arc<AtomicBool>);

impl Watch for Stop {
    fn interrupted(&mut self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

/// Runs `plan` against the server `server` names (its host, port, key and local address;
/// its test, files, packet log and stack are not used): the probes start, the load starts
/// after the idle phase, and the load's document comes back with `end.rrul`. Setting `stop`
/// ends every part early, as an interrupted test ends.
///
/// # Errors
///
/// A probe's thread could not start, or one of the three tests failed before it measured
/// anything ([`RrulError::Part`], with the engine's error).
pub fn run_rrul(
    server: &ClientConfig,
    plan: &RrulPlan,
    stop: &Arc<AtomicBool>,
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
    };
    let t0 = Instant::now();
    let probe = |kind: ProbeKind, spec: &TestSpec| {
        let cfg = config(spec);
        let stop = Arc::clone(stop);
        thread::Builder::new()
            .name(format!("wirebench-rrul-{}", kind.name()))
            .spawn(move || {
                let offset = t0.elapsed();
                (offset, crate::run(&cfg, &mut Stop(stop)))
            })
            .map_err(RrulError::Thread)
    };
    let udp = probe(ProbeKind::Udp, &plan.udp)?;
    let tcp = probe(ProbeKind::Tcp, &plan.tcp)?;
    // The idle phase: the probes alone. Waiting is the measurement's schedule here.
    while t0.elapsed() < plan.idle() && !stop.load(Ordering::Relaxed) {
        thread::sleep(IDLE_TICK);
    }
    let load_offset = t0.elapsed();
    let load = crate::run(&config(&plan.load), &mut Stop(Arc::clone(stop)));
    let (udp_offset, udp) = udp.join().map_err(|_| RrulError::Panicked("UDP"))?;
    let (tcp_offset, tcp) = tcp.join().map_err(|_| RrulError::Panicked("TCP"))?;
    let failed = |part: &'static str| move |source| RrulError::Part { part, source };
    let mut doc = load.map_err(failed("the rrul load (TCP both ways)"))?;
    let udp = udp.map_err(failed("the rrul UDP probe"))?;
    let tcp = tcp.map_err(failed("the rrul TCP probe"))?;
    let part = |results, offset: Duration| Part {
        results,
        offset_s: offset.as_secs_f64(),
    };
    let rrul = Rrul::assemble(
        plan.idle().as_secs_f64(),
        Duration::from_nanos(plan.probe_interval_ns).as_secs_f64(),
        part(&doc, load_offset),
        &[
            (ProbeKind::Udp, part(&udp, udp_offset)),
            (ProbeKind::Tcp, part(&tcp, tcp_offset)),
        ],
    );
    doc.end.rrul = Some(rrul);
    let failed_probe = [&udp, &tcp].into_iter().find(|r| r.error.is_some());
    if let (None, Some(probe)) = (&doc.error, failed_probe) {
        doc.error = probe.error.as_ref().map(|e| format!("a probe: {e}"));
        doc.error_cause = probe.error_cause;
    }
    Ok(doc)
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
