//! The client side of a test: connect, ask, set up the data stream, run, collect.

use std::net::{IpAddr, SocketAddr, TcpStream, ToSocketAddrs, UdpSocket};
use std::time::{Duration, Instant};

use wirebench_proto::control::{encode, Message, MAX_FRAME, PROTOCOL_VERSION};
use wirebench_proto::header::UdpHello;
use wirebench_proto::results::{Results, Role};
use wirebench_proto::spec::{Direction, Protocol, TestSpec};

use crate::channel::Channel;
use crate::role::{DataSocket, RoleParams};
use crate::session::{drive, Watch};
use crate::sys::{tcp_datapath, udp_datapath};
use crate::EngineError;

/// How long the client waits for the server's answer to each set-up step.
const SETUP_TIMEOUT: Duration = Duration::from_secs(10);

/// How often a UDP hello is sent until the server confirms it.
const HELLO_EVERY: Duration = Duration::from_millis(100);

/// What the client needs to run a test.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// Server host name or address.
    pub host: String,
    /// Server port (TCP for control and data, UDP for UDP data).
    pub port: u16,
    /// The test, already validated.
    pub spec: TestSpec,
}

/// The name and version this build reports to its peer.
pub fn tool() -> String {
    format!("wirebench {}", env!("CARGO_PKG_VERSION"))
}

fn resolve(host: &str, port: u16) -> Result<SocketAddr, EngineError> {
    let err = |source| EngineError::Connect {
        addr: format!("{host}:{port}"),
        source,
    };
    (host, port)
        .to_socket_addrs()
        .map_err(err)?
        .next()
        .ok_or_else(|| err(std::io::Error::other("the name resolved to no address")))
}

/// Runs one test against a server. Returns the results document; when the test started but
/// did not complete, the document carries what was measured and `error` says why.
pub fn run(cfg: &ClientConfig, watch: &mut dyn Watch) -> Result<Results, EngineError> {
    let addr = resolve(&cfg.host, cfg.port)?;
    let connect = |addr: SocketAddr| {
        TcpStream::connect_timeout(&addr, SETUP_TIMEOUT).map_err(|source| EngineError::Connect {
            addr: addr.to_string(),
            source,
        })
    };
    let mut ch = Channel::new(connect(addr)?, MAX_FRAME)?;
    let spec = &cfg.spec;
    ch.send(&Message::Start {
        version: PROTOCOL_VERSION,
        tool: tool(),
        spec: spec.clone(),
    })?;
    let (cookie, udp_port) = match ch.expect(SETUP_TIMEOUT, "the server's answer")? {
        Message::Accept {
            cookie, udp_port, ..
        } => (cookie, udp_port),
        Message::Refuse { reason } => return Err(EngineError::Refused(reason)),
        Message::Error { reason } => return Err(EngineError::Peer(reason)),
        other => {
            return Err(EngineError::Protocol(format!(
                "expected accept or refuse, got {other:?}"
            )))
        }
    };
    let datapath;
    let (sock, hello) = match spec.protocol {
        Protocol::Tcp => {
            let mut s = connect(addr)?;
            let frame = encode(&Message::Attach {
                version: PROTOCOL_VERSION,
                cookie,
                stream: 0,
            })
            .map_err(|e| EngineError::Protocol(e.to_string()))?;
            std::io::Write::write_all(&mut s, &frame)
                .map_err(|e| EngineError::io("attaching the data connection", e))?;
            datapath = tcp_datapath(&s, spec);
            (DataSocket::Tcp(s), None)
        }
        Protocol::Udp => {
            let local: IpAddr = ch
                .stream()
                .local_addr()
                .map_err(|e| EngineError::io("reading the control connection's address", e))?
                .ip();
            let s = UdpSocket::bind((local, 0))
                .map_err(|e| EngineError::io("opening the UDP data socket", e))?;
            s.connect((addr.ip(), udp_port))
                .map_err(|e| EngineError::io("connecting the UDP data socket", e))?;
            datapath = udp_datapath(&s, Vec::new());
            let hello = UdpHello { cookie, stream: 0 }.encode();
            udp_handshake(&mut ch, &s, &hello)?;
            (DataSocket::Udp(s), Some(hello))
        }
    };
    let role = match spec.direction {
        Direction::Forward => Role::Sender,
        Direction::Reverse => Role::Receiver,
    };
    ch.send(&Message::Begin)?;
    let params = RoleParams {
        spec: spec.clone(),
        deadline_ns: u64::MAX,
        hello,
        intervals: None,
        datapath,
    };
    let out = drive(&mut ch, role, sock, params, watch);
    Ok(Results::assemble(
        spec,
        addr.to_string(),
        Some(&out.local),
        out.peer.as_ref(),
        out.error,
    ))
}

/// Sends the UDP hello until the server confirms it over the control channel.
fn udp_handshake(ch: &mut Channel, s: &UdpSocket, hello: &[u8]) -> Result<(), EngineError> {
    let deadline = Instant::now() + SETUP_TIMEOUT;
    while Instant::now() < deadline {
        // A refused send (ICMP from an earlier hello) is retried on the next round.
        let _ = s.send(hello);
        match ch.recv(HELLO_EVERY)? {
            None => {}
            Some(Message::UdpReady { .. }) => return Ok(()),
            Some(Message::Error { reason }) => return Err(EngineError::Peer(reason)),
            Some(other) => {
                return Err(EngineError::Protocol(format!(
                    "expected udp_ready, got {other:?}"
                )))
            }
        }
    }
    Err(EngineError::Timeout(
        "the server to see our UDP datagrams (is UDP to the server's port blocked?)",
    ))
}
