//! The server: one TCP port for control and data connections, the same port number for UDP.
//!
//! Every connection starts in the pending stage, on one poll loop (`handshake.rs`): its
//! first frame says what it is. A `start` that passes the key gets a thread that runs that
//! test's control session; an `attach` hands a TCP data connection to the test whose
//! cookie it carries. UDP streams open with a hello datagram
//! carrying the cookie, sent to the server's UDP port; only then does the server open a
//! socket connected to the hello's source, so it never sends UDP to an address that has not
//! proven it holds a live test's cookie and comes from the control connection's host.
//! Whatever a client sends, only that client's session ends.

use std::collections::HashMap;
use std::net::{SocketAddr, TcpListener, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;

use wirebench_proto::header::UdpHello;
use wirebench_proto::spec::Protocol;

use super::listen::{listen, listen_addr, reuse_port_udp};
use super::shared::State;
pub use super::shared::{ServerBudget, ServerConfig, DEFAULT_MAX_DURATION, DEFAULT_MAX_TIMING};
use crate::control::admission::{Admission, SlotLimits};
use crate::role::DataSocket;
use crate::sys::{max_rss_kib, rss_kib};
use crate::EngineError;

/// Ends a server gracefully from another thread.
#[derive(Clone)]
pub struct ServerHandle {
    state: Arc<State>,
}

impl ServerHandle {
    /// The flag that, once set, ends every running test with a message to its client and
    /// refuses new ones (for `signal_hook::flag::register`).
    pub fn shutdown_flag(&self) -> Arc<AtomicBool> {
        Arc::clone(&self.state.shutdown)
    }

    /// Tests running now.
    pub fn running_tests(&self) -> usize {
        self.state.admission().running()
    }

    /// Waits until no test runs, or until `until`; returns the tests still running.
    pub fn wait_idle(&self, until: std::time::Instant) -> usize {
        self.state.wait_idle(until)
    }

    /// Waits until `n` admitted tests (wirebench's or iperf3's) have ended since the start
    /// (`serve -1`: one, then the server exits).
    pub fn wait_tests_ended(&self, n: u64) {
        self.state.wait_tests_ended(n);
    }
}

/// A bound server, ready to run.
pub struct Server {
    listener: TcpListener,
    udp: UdpSocket,
    state: Arc<State>,
    metrics: Option<SocketAddr>,
    iperf3: Option<super::iperf3::server::Iperf3Port>,
    /// `--quic-perf-port`'s socket.
    perf: Option<UdpSocket>,
}

impl Server {
    /// Binds the TCP port and the UDP port of the same number.
    pub fn bind(cfg: ServerConfig) -> Result<Self, EngineError> {
        crate::sys::tune_allocator();
        let (listener, udp) = listen(listen_addr(&cfg), cfg.ipv6_only, "-p")?;
        let addr = listener
            .local_addr()
            .map_err(|e| EngineError::io("reading the listening address", e))?;
        let perf = match (cfg.quic_perf_port, &cfg.quic) {
            (Some(p), Some(_)) => Some(
                reuse_port_udp(SocketAddr::new(addr.ip(), p), cfg.ipv6_only)
                    .map_err(|e| EngineError::io("binding --quic-perf-port", e))?,
            ),
            _ => None,
        };
        let iperf3 = cfg
            .iperf3_port
            .map(|p| super::iperf3::server::bind_port(addr.ip(), p, cfg.ipv6_only))
            .transpose()?;
        let state = Arc::new(State {
            port: addr.port(),
            admission: Mutex::new(
                Admission::new(SlotLimits {
                    max_tests: cfg.max_tests,
                    per_client: cfg.max_tests_per_client,
                    per_minute: cfg.max_tests_per_minute,
                })
                .with_max_memory(cfg.budget.max_memory, cfg.budget.max_memory_per_client),
            ),
            socket_caps: crate::sys::socket_caps(),
            cfg,
            auth_failures: AtomicUsize::new(0),
            test_ended: std::sync::Condvar::new(),
            tests_ended: Default::default(),
            metrics: super::metrics::Metrics::default(),
            shutdown: Arc::new(AtomicBool::new(false)),
            pending: Mutex::new(HashMap::new()),
            crr: Mutex::new(HashMap::new()),
            iperf3: Default::default(),
            log_budget: Mutex::default(),
            shelf: Mutex::default(),
            quic_handshakes: Mutex::default(),
        });
        let metrics = match state.cfg.metrics {
            Some(at) => {
                let st = Arc::clone(&state);
                Some(super::metrics_http::start(at, move |format| {
                    let (running, pending) = {
                        let a = st.admission();
                        (a.running(), a.pending())
                    };
                    st.metrics.render(running, pending, format)
                })?)
            }
            None => None,
        };
        Ok(Self {
            listener,
            udp,
            state,
            metrics,
            iperf3,
            perf: perf.map(UdpSocket::from),
        })
    }

    /// Where `--quic-perf-port` serves, once bound.
    pub fn quic_perf_addr(&self) -> Option<SocketAddr> {
        self.perf.as_ref().and_then(|s| s.local_addr().ok())
    }

    /// Where `--metrics` serves, once bound (its port resolved).
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics
    }

    /// The address the server listens on.
    pub fn local_addr(&self) -> Result<SocketAddr, EngineError> {
        self.listener
            .local_addr()
            .map_err(|e| EngineError::io("reading the listening address", e))
    }

    /// A handle to end the server gracefully (SIGTERM) and watch it drain.
    pub fn handle(&self) -> ServerHandle {
        ServerHandle {
            state: Arc::clone(&self.state),
        }
    }

    /// Serves until the process ends.
    pub fn run(self) -> Result<(), EngineError> {
        let iperf3 = match self.iperf3 {
            Some(bound) => Some(super::iperf3::server::serve_port(&self.state, bound)?),
            None => None,
        };
        let state = Arc::clone(&self.state);
        let udp = self.udp;
        thread::Builder::new()
            .name("wirebench-udp-hello".into())
            .spawn(move || udp_hellos(&udp, &state))
            .map_err(|e| EngineError::io("starting the UDP thread", e))?;
        if let Some(perf) = self.perf {
            let state = Arc::clone(&self.state);
            thread::Builder::new()
                .name("wirebench-quic-perf".into())
                .spawn(move || super::quic_perf_server::serve(&perf, &state))
                .map_err(|e| EngineError::io("starting the QUIC perf thread", e))?;
        }
        if let Some(every) = self.state.cfg.stats_every {
            let state = Arc::clone(&self.state);
            thread::Builder::new()
                .name("wirebench-stats".into())
                .spawn(move || loop {
                    // One look under one lock: two `admission()` calls in one statement
                    // would hold the first guard while taking the second, and deadlock
                    // the whole server (accepts and all).
                    let (running, pending, reserved) = {
                        let a = state.admission();
                        (a.running(), a.pending(), a.memory_in_use())
                    };
                    let quic = state.quic_handshakes.lock().map_or(0, |h| h.len());
                    eprintln!(
                        "stats: rss {} KiB (peak {} KiB), {running} tests running, {pending} connections in the handshake, {quic} QUIC handshakes, {} wrong keys, {} KiB held by running tests (--max-memory)",
                        rss_kib(),
                        max_rss_kib(),
                        state.auth_failures.load(Ordering::SeqCst),
                        reserved / 1024
                    );
                    thread::sleep(every);
                })
                .map_err(|e| EngineError::io("starting the stats thread", e))?;
        }
        // Every connection's handshake runs on this thread's poll loop; a thread is
        // spawned only for a test that passed it.
        super::handshake::serve(self.listener, iperf3, &self.state)
    }
}

/// Answers UDP hellos: opens a socket connected to the hello's source for the test it names.
/// The test's entry stays pending until its session has every connection it waits for;
/// repeated hellos meanwhile find the stream taken and are dropped.
fn udp_hellos(udp: &UdpSocket, state: &Arc<State>) {
    // Room for a QUIC Initial (at least 1200 bytes; larger ones are cut and fail).
    let mut buf = vec![0u8; 2048];
    loop {
        let Ok((n, src)) = udp.recv_from(&mut buf) else {
            continue;
        };
        if crate::quic::is_initial(&buf[..n]) {
            super::quic::initial(state, &buf[..n], src, super::quic::Serves::tests(state));
            continue;
        }
        if super::quic::early(state, &buf[..n], src) {
            continue;
        }
        // As the control connection's peer was taken (an IPv4 client of a dual-stack
        // socket is its IPv4 address).
        let src = super::canonical(src);
        if super::iperf3::server::udp_connect(state, &buf[..n], src) {
            continue;
        }
        // Anything that is not a hello for a pending UDP test from its client is dropped
        // without an answer.
        let Ok(hello) = UdpHello::decode(&buf[..n]) else {
            continue;
        };
        let Ok(pending) = state.pending.lock() else {
            return;
        };
        let Some(p) = pending.get(&hello.cookie) else {
            continue;
        };
        if p.peer != src.ip() || p.protocol != Protocol::Udp || hello.stream >= p.streams {
            continue;
        }
        let sock = reuse_port_udp(SocketAddr::new(p.local, state.port), false)
            .and_then(|s| s.connect(&src.into()).map(|()| s));
        if let Ok(sock) = sock {
            let _ = p.tx.try_send((hello.stream, DataSocket::Udp(sock.into())));
        }
    }
}
