//! The client side of a test: connect, ask, set up the data stream, run, collect.

use std::fs::File;
use std::io::Write;
use std::net::{IpAddr, SocketAddr, TcpStream, ToSocketAddrs, UdpSocket};
use std::path::PathBuf;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use wirebench_proto::control::{encode, Message, MAX_FRAME, PACKET_LOG_STREAM, PROTOCOL_VERSION};
use wirebench_proto::header::UdpHello;
use wirebench_proto::results::{Results, Role};
use wirebench_proto::spec::{Direction, Mechanism, Protocol, TestSpec};

use crate::channel::Channel;
use crate::file::{FileSink, FileSource};
use crate::log::LogOut;
use crate::role::{CrrPart, DataSocket, FilePart, RoleParams};
use crate::session::{drive, Watch};
use crate::sys::udp::Offloads;
use crate::sys::{host_id, same_clock, tcp_datapath, udp_datapath};
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
    /// Where to write the packet log (`spec.packet_log` is set when this is).
    pub packet_log: Option<PathBuf>,
    /// `--file`: the file to send (forward); its name and the amount are in `spec`.
    pub file: Option<PathBuf>,
    /// `-R --file NAME --save PATH`: where to save the server's file.
    pub save: Option<PathBuf>,
    /// The pre-shared key to authenticate with (`--psk-file`).
    pub psk: Option<crate::auth::Psk>,
}

/// How long the client waits for more of the server's packet log before giving it up.
const LOG_IDLE: Duration = Duration::from_secs(60);

/// Sends an `attach` for `stream` of the test with `cookie` on a new connection.
fn attach(addr: SocketAddr, cookie: u64, stream: u32) -> Result<TcpStream, EngineError> {
    let mut s = TcpStream::connect_timeout(&addr, SETUP_TIMEOUT).map_err(|source| {
        EngineError::Connect {
            addr: addr.to_string(),
            source,
        }
    })?;
    let frame = encode(&Message::Attach {
        version: PROTOCOL_VERSION,
        cookie,
        stream,
    })
    .map_err(|e| EngineError::Protocol(e.to_string()))?;
    s.write_all(&frame)
        .map_err(|e| EngineError::io("attaching a connection to the test", e))?;
    Ok(s)
}

/// Copies the server's packet log from its connection into the file until the server closes
/// it; returns the bytes copied.
fn copy_log(mut from: TcpStream, mut to: File) -> std::io::Result<u64> {
    from.set_read_timeout(Some(LOG_IDLE))?;
    let n = std::io::copy(&mut from, &mut to)?;
    to.flush()?;
    Ok(n)
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
    // Fail on an unwritable log path before any traffic.
    let log_file = match &cfg.packet_log {
        Some(path) => Some(File::create(path).map_err(|e| EngineError::Io {
            context: "creating the packet log file",
            source: e,
        })?),
        None => None,
    };
    let connect = |addr: SocketAddr| {
        TcpStream::connect_timeout(&addr, SETUP_TIMEOUT).map_err(|source| EngineError::Connect {
            addr: addr.to_string(),
            source,
        })
    };
    // This side's part of a file transfer, opened before any traffic.
    let mut file = match (&cfg.file, cfg.spec.direction) {
        (Some(path), Direction::Forward) => Some(FilePart::Source(
            FileSource::open(path)
                .map_err(|e| EngineError::io("opening the file to send", e))?
                .0,
        )),
        (_, Direction::Reverse) if cfg.spec.file.is_some() => Some(FilePart::Sink(
            FileSink::create(cfg.save.clone())
                .map_err(|e| EngineError::io("creating the file to save to", e))?,
        )),
        _ => None,
    };
    let mut ch = Channel::new(connect(addr)?, MAX_FRAME)?;
    let mut spec = cfg.spec.clone();
    let spec = &mut spec;
    let client_nonce = crate::auth::nonce().map_err(EngineError::Setup)?;
    let spec_json = serde_json::to_string(&*spec).unwrap_or_default();
    ch.send(&Message::Start {
        version: PROTOCOL_VERSION,
        tool: tool(),
        spec: spec.clone(),
        host_id: host_id(),
        nonce: client_nonce.clone(),
    })?;
    let mut answer = ch.expect(SETUP_TIMEOUT, "the server's answer")?;
    let mut server_nonce = None;
    if let Message::Challenge { nonce } = &answer {
        let psk = cfg.psk.as_ref().ok_or_else(|| {
            EngineError::Setup(
                "the server asks for a pre-shared key: give it with --psk-file or WIREBENCH_PSK"
                    .into(),
            )
        })?;
        ch.send(&Message::Auth {
            mac: psk.client_mac(&client_nonce, nonce, &spec_json),
        })?;
        server_nonce = Some(nonce.clone());
        answer = ch.expect(SETUP_TIMEOUT, "the server's answer")?;
    }
    let (cookie, udp_port, server_host) = match answer {
        Message::Accept {
            cookie,
            udp_port,
            host_id,
            bytes,
            server_mac,
            ..
        } => {
            // With a key, the server must have proven it has the key too.
            if let Some(psk) = &cfg.psk {
                let proven = match (&server_nonce, &server_mac) {
                    (Some(sn), Some(mac)) => psk.verify_server(sn, &client_nonce, mac),
                    _ => false,
                };
                if !proven {
                    return Err(EngineError::Setup(
                        "the server did not prove it holds the pre-shared key".into(),
                    ));
                }
            }
            // A reverse file transfer: the server's file sets the amount.
            if spec.file.is_some() && spec.bytes.is_none() {
                spec.bytes = bytes;
                spec.validate()
                    .map_err(|e| EngineError::Protocol(format!("the server's file: {e}")))?;
            }
            (cookie, udp_port, host_id)
        }
        Message::Refuse { reason } => return Err(EngineError::Refused(reason)),
        Message::Error { reason } => return Err(EngineError::Peer(reason)),
        other => {
            return Err(EngineError::Protocol(format!(
                "expected accept or refuse, got {other:?}"
            )))
        }
    };
    // The role of stream 0; with --bidir, the second half of the streams has the other.
    let role_of = |stream: u32| match spec.stream_direction(stream) {
        Direction::Reverse => Role::Receiver,
        Direction::Forward | Direction::Bidir => Role::Sender,
    };
    let role = role_of(0);
    // The packet log: written here when this side receives, else the server's receiver
    // streams it over a connection of its own, opened before the UDP handshake.
    let mut local_log: Option<LogOut> = None;
    let mut log_copier: Option<JoinHandle<std::io::Result<u64>>> = None;
    if let Some(file) = log_file {
        if role == Role::Receiver {
            local_log = Some(LogOut {
                out: Box::new(file),
                abort: None,
            });
        } else {
            let conn = attach(addr, cookie, PACKET_LOG_STREAM)?;
            log_copier = Some(
                std::thread::Builder::new()
                    .name("wirebench-log-copy".into())
                    .spawn(move || copy_log(conn, file))
                    .map_err(|e| EngineError::io("starting the packet log thread", e))?,
            );
        }
    }
    // The data streams, in order: TCP connections attached with their index, or UDP sockets
    // each confirmed by its hello.
    let same = same_clock(&host_id(), &server_host);
    let mut streams = Vec::with_capacity(spec.total_streams() as usize);
    for stream in 0..spec.total_streams() {
        let (sock, hello, datapath, offloads) = match spec.protocol {
            Protocol::Tcp => {
                let s = attach(addr, cookie, stream)?;
                let dp = tcp_datapath(&s, spec).map_err(EngineError::from)?;
                (DataSocket::Tcp(s), None, dp, Offloads::default())
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
                let (dp, off) = udp_datapath(&s, spec, Vec::new());
                let hello = UdpHello { cookie, stream }.encode();
                udp_handshake(&mut ch, &s, stream, &hello)?;
                (DataSocket::Udp(s), Some(hello), dp, off)
            }
        };
        let params = RoleParams {
            spec: spec.clone(),
            deadline_ns: u64::MAX,
            hello,
            stream,
            intervals: None,
            datapath,
            same_clock: same,
            packet_log: if stream == 0 { local_log.take() } else { None },
            offloads,
            crr: (spec.mechanism == Mechanism::Crr).then_some(CrrPart::Client { addr, cookie }),
            file: if stream == 0 { file.take() } else { None },
        };
        streams.push((role_of(stream), sock, params));
    }
    ch.send(&Message::Begin)?;
    let out = drive(&mut ch, streams, watch, None);
    let mut error = out.error;
    if let Some(copier) = log_copier {
        // The server closes the log connection when its receiver is done.
        if !matches!(copier.join(), Ok(Ok(_))) {
            error.get_or_insert("the server's packet log did not arrive whole".into());
        }
    }
    Ok(Results::assemble(
        spec,
        addr.to_string(),
        Some(&out.local),
        out.peer.as_ref(),
        error,
    ))
}

/// Sends stream `stream`'s UDP hello until the server confirms it over the control channel.
fn udp_handshake(
    ch: &mut Channel,
    s: &UdpSocket,
    stream: u32,
    hello: &[u8],
) -> Result<(), EngineError> {
    let deadline = Instant::now() + SETUP_TIMEOUT;
    while Instant::now() < deadline {
        // A refused send (ICMP from an earlier hello) is retried on the next round.
        let _ = s.send(hello);
        match ch.recv(HELLO_EVERY)? {
            None => {}
            Some(Message::UdpReady { stream: ready }) if ready == stream => return Ok(()),
            // A confirmation of an earlier stream, repeated: not this one's.
            Some(Message::UdpReady { .. }) => {}
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
