//! A server whose data connections come through a user-space stack (`serve --stack`), with
//! a stand-in for the stack: a kernel listener on another loopback port. So the engine's
//! side of it runs without a TUN device or privileges: the accept's `tcp_port`, the attach
//! read from the stack, the refusals at admission, one test at a time, and a test that ends
//! before its connection came freeing the stack at once (smoltcp itself is tested in the
//! lab, `crates/wirebench/tests/smoltcp.rs`).

use std::io::{self, Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use wirebench_engine::{
    ClientConfig, EngineError, Server, ServerConfig, UserAccept, UserListener, UserStream, Watch,
};
use wirebench_proto::control::{encode, FrameDecoder, Message, PROTOCOL_VERSION};
use wirebench_proto::results::UserStack;
use wirebench_proto::spec::{Direction, Mechanism, Protocol, TestSpec};

/// What the stand-in stack saw, shared with the test.
#[derive(Debug, Default)]
struct Seen {
    /// Set while a test holds the stack (listening or connected), as a TUN device is held.
    held: Mutex<bool>,
    /// Told each time `held` changes.
    released: Condvar,
    /// The client addresses listened for.
    peers: Mutex<Vec<IpAddr>>,
    /// How each wait for a connection ended: "accepted", "cancelled", "timed out".
    endings: Mutex<Vec<&'static str>>,
}

impl Seen {
    /// Waits until no test holds the stack (at most `limit`): true once free.
    fn wait_free(&self, limit: Duration) -> bool {
        let held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        let (held, _) = self
            .released
            .wait_timeout_while(held, limit, |h| *h)
            .unwrap_or_else(|p| p.into_inner());
        !*held
    }

    fn endings(&self) -> Vec<&'static str> {
        self.endings.lock().map(|e| e.clone()).unwrap_or_default()
    }
}

/// Holds the stack until dropped.
struct Hold(Arc<Seen>);

impl Drop for Hold {
    fn drop(&mut self) {
        if let Ok(mut h) = self.0.held.lock() {
            *h = false;
        }
        self.0.released.notify_all();
    }
}

#[derive(Debug)]
struct StandIn {
    listener: Arc<TcpListener>,
    port: u16,
    seen: Arc<Seen>,
}

impl StandIn {
    fn new() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the stand-in's port");
        listener.set_nonblocking(true).expect("non-blocking");
        let port = listener.local_addr().expect("its address").port();
        Self {
            listener: Arc::new(listener),
            port,
            seen: Arc::default(),
        }
    }
}

impl UserListener for StandIn {
    fn port(&self) -> u16 {
        self.port
    }

    fn listen(&self, spec: &TestSpec, peer: IpAddr) -> io::Result<Box<dyn UserAccept>> {
        if spec.protocol == Protocol::Udp {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "the stand-in carries TCP only",
            ));
        }
        let mut held = self.seen.held.lock().unwrap_or_else(|p| p.into_inner());
        if *held {
            return Err(io::Error::new(
                io::ErrorKind::ResourceBusy,
                "the stand-in carries another test",
            ));
        }
        *held = true;
        self.seen.released.notify_all();
        if let Ok(mut p) = self.seen.peers.lock() {
            p.push(peer);
        }
        Ok(Box::new(Listening {
            listener: Arc::clone(&self.listener),
            hold: Hold(Arc::clone(&self.seen)),
        }))
    }
}

struct Listening {
    listener: Arc<TcpListener>,
    hold: Hold,
}

impl UserAccept for Listening {
    fn accept(
        self: Box<Self>,
        timeout: Duration,
        cancel: &AtomicBool,
    ) -> io::Result<Box<dyn UserStream>> {
        let until = Instant::now() + timeout;
        let end = |how| {
            if let Ok(mut e) = self.hold.0.endings.lock() {
                e.push(how);
            }
        };
        loop {
            match self.listener.accept() {
                Ok((s, _)) => {
                    s.set_nonblocking(false)?;
                    end("accepted");
                    return Ok(Box::new(Stream {
                        s,
                        _hold: self.hold,
                    }));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(e),
            }
            if cancel.load(Ordering::Relaxed) {
                end("cancelled");
                return Err(io::ErrorKind::Interrupted.into());
            }
            if Instant::now() >= until {
                end("timed out");
                return Err(io::ErrorKind::TimedOut.into());
            }
            // The stand-in polls its non-blocking listener, as smoltcp polls its device.
            std::thread::sleep(Duration::from_millis(2));
        }
    }
}

#[derive(Debug)]
struct Stream {
    s: TcpStream,
    _hold: Hold,
}

impl std::fmt::Debug for Hold {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Hold")
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.s.read(buf)
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.s.write(buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.s.flush()
    }
}

impl UserStream for Stream {
    fn set_timeout(&mut self, timeout: Duration) {
        let _ = self.s.set_read_timeout(Some(timeout));
        let _ = self.s.set_write_timeout(Some(timeout));
    }
    fn shutdown_write(&mut self) -> io::Result<()> {
        self.s.shutdown(std::net::Shutdown::Write)
    }
    fn stack(&self) -> UserStack {
        UserStack {
            name: "stand-in".into(),
            ..UserStack::default()
        }
    }
}

/// A server on loopback whose data connections come through `stack`; its port.
fn server(stack: &Arc<StandIn>) -> u16 {
    let server = Server::bind(ServerConfig {
        bind: SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 0),
        ipv6_only: false,
        max_tests: 8,
        max_duration: None,
        max_timing: Duration::from_secs(10),
        metrics: None,
        max_rate_bps: None,
        budget: Default::default(),
        max_bytes: None,
        max_streams: None,
        max_size: None,
        max_tests_per_client: None,
        max_tests_per_minute: None,
        log: false,
        stats_every: None,
        psk: None,
        save_dir: None,
        files_dir: None,
        allow_iperf3: false,
        iperf3_json: false,
        iperf3_port: None,
        quic_perf_port: None,
        watch: None,
        user_stack: Some(Arc::clone(stack) as Arc<dyn UserListener>),
        quic: None,
    })
    .expect("bind the server");
    let port = server.local_addr().expect("its address").port();
    std::thread::spawn(move || server.run());
    port
}

fn spec(protocol: Protocol, mechanism: Mechanism, direction: Direction) -> TestSpec {
    TestSpec::example()
        .protocol(protocol)
        .mechanism(mechanism)
        .direction(direction)
        .bytes(200_000)
}

struct Quiet;
impl Watch for Quiet {}

fn run(port: u16, spec: TestSpec) -> Result<wirebench_proto::results::Results, EngineError> {
    let cfg = ClientConfig {
        host: "127.0.0.1".into(),
        port,
        spec,
        packet_log: None,
        file: None,
        save: None,
        psk: None,
        bind: None,
        stack: None,
        quic: None,
    };
    wirebench_engine::run(&cfg, &mut Quiet)
}

#[test]
fn data_connections_go_to_the_stacks_port_in_every_mode_and_the_results_name_it() {
    let stack = Arc::new(StandIn::new());
    let port = server(&stack);
    for (mechanism, direction) in [
        (Mechanism::Stream, Direction::Forward),
        (Mechanism::Stream, Direction::Reverse),
        (Mechanism::StopAndWait, Direction::Forward),
        (Mechanism::Rr, Direction::Forward),
    ] {
        let r = run(port, spec(Protocol::Tcp, mechanism, direction))
            .unwrap_or_else(|e| panic!("{mechanism:?} {direction:?}: {e}"));
        assert_eq!(
            r.end.received.bytes,
            Some(200_000),
            "{mechanism:?} {direction:?}"
        );
        let server_stack = r.datapath.server.as_ref().and_then(|d| d.stack.as_ref());
        assert_eq!(server_stack.map(|s| s.name.as_str()), Some("stand-in"));
        assert!(r
            .datapath
            .client
            .as_ref()
            .is_some_and(|d| d.stack.is_none()));
        assert!(stack.seen.wait_free(Duration::from_secs(10)));
    }
    assert_eq!(stack.seen.endings(), ["accepted"; 4]);
    let peers = stack
        .seen
        .peers
        .lock()
        .map(|p| p.clone())
        .unwrap_or_default();
    assert!(
        peers.iter().all(|p| *p == IpAddr::V4(Ipv4Addr::LOCALHOST)),
        "{peers:?}"
    );
}

#[test]
fn what_the_stack_cannot_carry_and_a_second_test_at_once_are_refused_with_the_reason() {
    let stack = Arc::new(StandIn::new());
    let port = server(&stack);
    let udp = run(
        port,
        spec(Protocol::Udp, Mechanism::Stream, Direction::Forward),
    );
    let err = udp.err().map(|e| e.to_string()).unwrap_or_default();
    assert!(err.contains("TCP only"), "{err}");
    // A test holds the stack: it has a stack's connection, the other is refused.
    let long = spec(Protocol::Tcp, Mechanism::Stream, Direction::Forward)
        .duration_ns(2_000_000_000)
        .rate_bps(8_000_000);
    let first = std::thread::spawn(move || run(port, long));
    let held = {
        let h = stack.seen.held.lock().unwrap_or_else(|p| p.into_inner());
        let (h, _) = stack
            .seen
            .released
            .wait_timeout_while(h, Duration::from_secs(10), |h| !*h)
            .unwrap_or_else(|p| p.into_inner());
        *h
    };
    assert!(held, "the first test never held the stack");
    let second = run(
        port,
        spec(Protocol::Tcp, Mechanism::Stream, Direction::Forward),
    );
    let err = second.err().map(|e| e.to_string()).unwrap_or_default();
    assert!(err.contains("carries another test"), "{err}");
    let first = first.join().expect("the first test's thread");
    assert!(first.is_ok(), "{:?}", first.err());
}

#[test]
fn a_test_that_ends_before_its_connection_frees_the_stack_at_once() {
    let stack = Arc::new(StandIn::new());
    let port = server(&stack);
    // A client that gets the accept, then goes away without a data connection.
    let mut c = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    let start = Message::Start {
        version: PROTOCOL_VERSION,
        tool: "test".into(),
        spec: spec(Protocol::Tcp, Mechanism::Stream, Direction::Forward),
        host_id: String::new(),
        nonce: String::new(),
    };
    c.write_all(&encode(&start).expect("encode"))
        .expect("send start");
    let mut d = FrameDecoder::new(1 << 20);
    let mut buf = [0u8; 4096];
    let accept = loop {
        if let Ok(Some(m)) = d.next_message() {
            break m;
        }
        let n = c.read(&mut buf).expect("read the answer");
        assert!(n > 0, "the server closed without an answer");
        d.feed(&buf[..n]);
    };
    let Message::Accept { tcp_port, .. } = accept else {
        panic!("expected accept, got {accept:?}");
    };
    assert_eq!(tcp_port, Some(stack.port));
    drop(c);
    // The session ends with the control connection; the stack's wait is cancelled rather
    // than left to its 10 s timeout, and the next test gets the stack.
    assert!(stack.seen.wait_free(Duration::from_secs(30)));
    assert_eq!(stack.seen.endings(), ["cancelled"]);
    let r = run(
        port,
        spec(Protocol::Tcp, Mechanism::Stream, Direction::Forward),
    );
    assert!(r.is_ok(), "{:?}", r.err());
}
