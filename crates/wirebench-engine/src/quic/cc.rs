//! The congestion controller of a QUIC connection (`--cc cubic|newreno|bbr`), chosen when
//! the test is known: the server's first connection of a test is made before its `start`
//! arrives, so its controller starts as the default and becomes the test's one when the
//! test says (before any data moves: the new controller starts fresh).

use std::any::Any;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Instant;

use quinn::congestion::{
    BbrConfig, Controller, ControllerFactory, ControllerMetrics, CubicConfig, NewRenoConfig,
};
use quinn_proto::RttEstimator;

/// A congestion controller QUIC tests choose from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[repr(u8)]
pub enum Congestion {
    /// CUBIC (RFC 9438), quinn's default.
    #[default]
    Cubic = 0,
    /// NewReno (RFC 9002).
    NewReno = 1,
    /// BBR (version 1, experimental in quinn).
    Bbr = 2,
}

impl Congestion {
    /// The controller named `name` (`--cc`); none for another name.
    pub fn of_name(name: &str) -> Option<Self> {
        match name {
            "cubic" => Some(Self::Cubic),
            "newreno" => Some(Self::NewReno),
            "bbr" => Some(Self::Bbr),
            _ => None,
        }
    }

    /// Its name, as `--cc` and the results spell it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Cubic => "cubic",
            Self::NewReno => "newreno",
            Self::Bbr => "bbr",
        }
    }

    fn of_u8(v: u8) -> Self {
        match v {
            1 => Self::NewReno,
            2 => Self::Bbr,
            _ => Self::Cubic,
        }
    }

    fn build(self, now: Instant, mtu: u16) -> Box<dyn Controller> {
        match self {
            Self::Cubic => Arc::new(CubicConfig::default()).build(now, mtu),
            Self::NewReno => Arc::new(NewRenoConfig::default()).build(now, mtu),
            Self::Bbr => Arc::new(BbrConfig::default()).build(now, mtu),
        }
    }
}

/// Which controller a connection uses; set it before data moves.
#[derive(Debug, Clone, Default)]
pub struct Choice(Arc<AtomicU8>);

impl Choice {
    /// A choice of `c`.
    pub fn new(c: Congestion) -> Self {
        Self(Arc::new(AtomicU8::new(c as u8)))
    }

    /// From now on, `c`.
    pub fn set(&self, c: Congestion) {
        self.0.store(c as u8, Ordering::Relaxed);
    }

    /// The controller chosen now.
    pub fn get(&self) -> Congestion {
        Congestion::of_u8(self.0.load(Ordering::Relaxed))
    }
}

/// Makes connections' controllers that follow a [`Choice`].
#[derive(Debug)]
pub struct Factory(pub Choice);

impl ControllerFactory for Factory {
    fn build(self: Arc<Self>, now: Instant, mtu: u16) -> Box<dyn Controller> {
        let kind = self.0.get();
        Box::new(Chosen {
            choice: self.0.clone(),
            kind,
            mtu,
            inner: kind.build(now, mtu),
        })
    }
}

/// A controller that is the chosen one: when the choice changes, a fresh one of the new
/// kind takes over at the next event that carries the time.
struct Chosen {
    choice: Choice,
    kind: Congestion,
    mtu: u16,
    inner: Box<dyn Controller>,
}

impl Chosen {
    fn follow(&mut self, now: Instant) {
        let want = self.choice.get();
        if want != self.kind {
            self.kind = want;
            self.inner = want.build(now, self.mtu);
        }
    }
}

impl Controller for Chosen {
    fn on_sent(&mut self, now: Instant, bytes: u64, last_packet_number: u64) {
        self.follow(now);
        self.inner.on_sent(now, bytes, last_packet_number);
    }

    fn on_ack(
        &mut self,
        now: Instant,
        sent: Instant,
        bytes: u64,
        app_limited: bool,
        rtt: &RttEstimator,
    ) {
        self.inner.on_ack(now, sent, bytes, app_limited, rtt);
    }

    fn on_end_acks(
        &mut self,
        now: Instant,
        in_flight: u64,
        app_limited: bool,
        largest_packet_num_acked: Option<u64>,
    ) {
        self.inner
            .on_end_acks(now, in_flight, app_limited, largest_packet_num_acked);
    }

    fn on_congestion_event(
        &mut self,
        now: Instant,
        sent: Instant,
        is_persistent_congestion: bool,
        lost_bytes: u64,
    ) {
        self.inner
            .on_congestion_event(now, sent, is_persistent_congestion, lost_bytes);
    }

    fn on_mtu_update(&mut self, new_mtu: u16) {
        self.mtu = new_mtu;
        self.inner.on_mtu_update(new_mtu);
    }

    fn window(&self) -> u64 {
        self.inner.window()
    }

    fn metrics(&self) -> ControllerMetrics {
        self.inner.metrics()
    }

    fn clone_box(&self) -> Box<dyn Controller> {
        Box::new(Chosen {
            choice: self.choice.clone(),
            kind: self.kind,
            mtu: self.mtu,
            inner: self.inner.clone_box(),
        })
    }

    fn initial_window(&self) -> u64 {
        self.inner.initial_window()
    }

    fn into_any(self: Box<Self>) -> Box<dyn Any> {
        self
    }
}
