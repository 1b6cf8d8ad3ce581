//! One QUIC connection and the thread that drives it: quinn on a one-thread tokio runtime,
//! one endpoint per connection over its own UDP socket (a server's is connected to its
//! client beside the port's hello socket, as a UDP test's sockets are), so that each
//! connection's crypto and I/O run on a thread of their own and no peer's packets pass
//! through another's loop.
//!
//! The control session and the data roles use the connection's streams from their own
//! threads, blocking ([`super::stream::QuicStream`]); the connection's thread runs the
//! runtime (its I/O and timers) until every handle is gone, then lets the connection close
//! cleanly (each stream's sent data acknowledged, bounded by [`LINGER`]).

use std::io::IoSliceMut;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use quinn::udp::RecvMeta;
use quinn::{AsyncUdpSocket, Runtime, TokioRuntime, UdpPoller};
use wirebench_proto::results::QuicInfo;

use super::cc::{Choice, Congestion, Factory};
use super::handshakes::Inbox;
use super::tls::{client_config, Identity, ServerCheck};
use crate::control::memory::{
    QUIC_CONNECTION_WINDOW, QUIC_DATAGRAM_WINDOW, QUIC_SEND_WINDOW, QUIC_SOCKET_BYTES,
    QUIC_STREAM_WINDOW,
};
use crate::control::SETUP_TIMEOUT;
use crate::EngineError;

/// The longest a connection stays open after its last handle went, for the peer to
/// acknowledge what was sent (a stream's finish, the last control frames).
pub(crate) const LINGER: Duration = Duration::from_secs(5);

/// How long a server connection waits for its first Initial to make a connection (it
/// does at once, or never: a resent one comes to the connection's own socket).
const FIRST_INITIAL: Duration = Duration::from_secs(1);

/// The most streams a peer may open on one connection: a test's data streams and its
/// control stream ([`wirebench_proto::spec::MAX_STREAMS`] + 1).
const MAX_PEER_STREAMS: u32 = wirebench_proto::spec::MAX_STREAMS + 1;

/// How long a connection may be silent before it is gone (keep-alives every
/// [`KEEP_ALIVE`] hold it open while a test waits).
const IDLE: Duration = Duration::from_secs(30);
const KEEP_ALIVE: Duration = Duration::from_secs(5);

/// The largest packet (UDP payload) a connection probes its path for unless told: quinn
/// hands the kernel up to ten packets a send (GSO), and the kernel takes at most 64 KiB a
/// send, so ten of these fit one. A path whose MTU is smaller stops the search sooner.
pub const DEFAULT_MAX_PACKET: u16 = 6500;

// The memory accounting's receive buffers assume this ceiling.
const _: () = assert!(
    crate::control::memory::QUIC_RECEIVE_BATCH_BYTES
        >= 32 * (GSO_BYTES as u64 + DEFAULT_MAX_PACKET as u64)
);

/// The smallest packet QUIC allows a path (RFC 9000): every connection starts there.
pub const MIN_PACKET: u16 = 1200;

/// The largest UDP payload QUIC may name (quinn's limit for an endpoint's).
pub const MAX_PACKET: u16 = 65527;

/// Quinn's own ceiling on the packets it probes for: what a path gets when its MTU
/// cannot be read.
const UNKNOWN_PATH_PACKET: u16 = 1452;

/// The largest packet a connection probes its path for: `asked` (`--quic-mtu`) when
/// given, else the MTU the kernel knows for the path (`path`) less the IP and UDP headers,
/// at most [`DEFAULT_MAX_PACKET`]. Probing (RFC 8899) finds what the path carries below it.
pub(crate) fn max_packet(asked: Option<u16>, path: std::io::Result<u32>, ipv6: bool) -> u16 {
    if let Some(p) = asked {
        return p.clamp(MIN_PACKET, MAX_PACKET);
    }
    let headers = if ipv6 { 48 } else { 28 };
    path.ok()
        .map(|mtu| mtu.saturating_sub(headers))
        .map_or(UNKNOWN_PATH_PACKET, |p| {
            u16::try_from(p).unwrap_or(u16::MAX)
        })
        .clamp(MIN_PACKET, DEFAULT_MAX_PACKET)
}

/// A QUIC connection, its runtime, and what it was made with.
#[derive(Debug)]
pub struct QuicConn {
    pub(crate) conn: quinn::Connection,
    pub(crate) handle: tokio::runtime::Handle,
    pub(crate) choice: Choice,
    /// Whether sends may go as GSO batches (`--no-offload` says no; read at each send).
    gso: Arc<AtomicBool>,
    /// From the first Initial (sent, or received) to the handshake's completion.
    pub(crate) handshake: Duration,
    /// A 0-RTT connection: how its handshake ended (it ends while the connection is used).
    early: Option<Early>,
    local: Option<SocketAddr>,
    /// The test's data streams on it not yet dropped (their roles running): the figures
    /// are taken once none is, so that they cover every stream's data.
    data_streams: std::sync::Mutex<u32>,
    data_streams_done: std::sync::Condvar,
    /// The connection's thread (its crypto and I/O), for its CPU time.
    thread: i32,
    /// Dropped with the connection: its thread then lets it close.
    _release: tokio::sync::oneshot::Sender<()>,
}

impl QuicConn {
    /// This side's address.
    pub fn local(&self) -> std::io::Result<SocketAddr> {
        self.local
            .map(crate::net::canonical)
            .ok_or_else(|| std::io::ErrorKind::AddrNotAvailable.into())
    }

    /// Closes the connection now, and waits (at most 200 ms) until its close went out: a
    /// process that exits next must not leave its peer to find out by the idle timeout.
    pub fn close_now(&self) {
        self.conn.close(0u32.into(), b"done");
        let start = Instant::now();
        while self.conn.stats().frame_tx.connection_close == 0
            && start.elapsed() < Duration::from_millis(200)
        {
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// The keying material exported from its TLS session (RFC 8446 7.5): the same on
    /// both ends of one session, different on any other, to bind the pre-shared key to it.
    ///
    /// # Errors
    ///
    /// The session exports nothing (its handshake has not ended).
    pub(crate) fn tls_export(&self) -> Result<[u8; 32], EngineError> {
        let mut out = [0u8; 32];
        self.conn
            .export_keying_material(&mut out, b"EXPORTER-wirebench-psk", b"")
            .map_err(|_| {
                EngineError::Setup("the QUIC session exported no keying material".into())
            })?;
        Ok(out)
    }

    /// The fingerprint of the key the server showed, for the test's other connections.
    pub(crate) fn peer_fingerprint(&self) -> Option<super::Fingerprint> {
        let certs = self
            .conn
            .peer_identity()?
            .downcast::<Vec<rustls::pki_types::CertificateDer<'static>>>()
            .ok()?;
        super::Fingerprint::of_cert(certs.first()?).ok()
    }

    /// The user and system CPU time its thread took so far, ns (none where it cannot be
    /// read).
    pub(crate) fn thread_cpu_ns(&self) -> Option<(u64, u64)> {
        crate::sys::task_cpu_ns(self.thread)
    }

    /// A data stream was opened on it.
    pub(crate) fn data_stream_opened(&self) {
        if let Ok(mut n) = self.data_streams.lock() {
            *n = n.saturating_add(1);
        }
    }

    /// A data stream was dropped (its role ended, or never ran).
    pub(crate) fn data_stream_closed(&self) {
        if let Ok(mut n) = self.data_streams.lock() {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.data_streams_done.notify_all();
            }
        }
    }

    /// Its figures once every data stream on it was dropped (their roles end about when
    /// the caller's does; a stuck one is not waited for past [`LINGER`]), so that they
    /// cover every stream's data.
    pub(crate) fn info_once_streams_done(&self) -> QuicInfo {
        if let Ok(n) = self.data_streams.lock() {
            let _ = self
                .data_streams_done
                .wait_timeout_while(n, LINGER, |n| *n > 0);
        }
        self.info()
    }

    /// Lets sends go as GSO batches, or one packet a system call (`--no-offload`: as
    /// packets that a firewall on the path counts one by one).
    pub(crate) fn set_gso(&self, on: bool) {
        self.gso.store(on, Ordering::Relaxed);
    }

    /// Whether sends may go as GSO batches.
    pub(crate) fn gso(&self) -> bool {
        self.gso.load(Ordering::Relaxed)
    }

    /// The peer's address.
    pub fn remote(&self) -> SocketAddr {
        crate::net::canonical(self.conn.remote_address())
    }

    /// From the first Initial to the handshake's end (a 0-RTT connection's, once it ended).
    fn handshake(&self) -> Duration {
        self.early
            .as_ref()
            .and_then(Early::get)
            .map_or(self.handshake, |(_, d)| d)
    }

    /// What the stack counted for this connection, as the results say it.
    pub(crate) fn info(&self) -> QuicInfo {
        let s = self.conn.stats();
        QuicInfo {
            congestion_control: self.choice.get().name().to_string(),
            rtt_us: s.path.rtt.as_micros() as u64,
            min_rtt_us: s.path.min_rtt.as_micros() as u64,
            cwnd_bytes: s.path.cwnd,
            lost_packets: s.path.lost_packets,
            lost_bytes: s.path.lost_bytes,
            congestion_events: s.path.congestion_events,
            sent_packets: s.path.sent_packets,
            wire_datagrams_sent: s.udp_tx.datagrams,
            wire_datagrams_received: s.udp_rx.datagrams,
            wire_bytes_sent: s.udp_tx.bytes,
            wire_bytes_received: s.udp_rx.bytes,
            mtu_bytes: u64::from(s.path.current_mtu),
            handshake_us: self.handshake().as_micros() as u64,
            connections: 1,
            zero_rtt_accepted: u64::from(
                self.early
                    .as_ref()
                    .and_then(Early::get)
                    .is_some_and(|(took, _)| took),
            ),
            datagrams_sent: s.frame_tx.datagram,
            datagrams_received: s.frame_rx.datagram,
        }
    }
}

/// A QUIC socket's buffers ([`QUIC_SOCKET_BYTES`] each way, as the kernel grants them;
/// what it refuses leaves its default).
pub(crate) fn socket_buffers(s: &socket2::SockRef<'_>) {
    let _ = s.set_send_buffer_size(QUIC_SOCKET_BYTES as usize);
    let _ = s.set_recv_buffer_size(QUIC_SOCKET_BYTES as usize);
}

/// The transport settings every wirebench QUIC connection has, with `choice`'s controller,
/// probing its path for packets of up to `packet` bytes.
fn transport(choice: &Choice, packet: u16) -> quinn::TransportConfig {
    let mut t = quinn::TransportConfig::default();
    let mut probing = quinn::MtuDiscoveryConfig::default();
    probing.upper_bound(packet);
    t.mtu_discovery_config(Some(probing));
    t.congestion_controller_factory(Arc::new(Factory(choice.clone())))
        .max_concurrent_bidi_streams(MAX_PEER_STREAMS.into())
        .max_concurrent_uni_streams(0u32.into())
        .keep_alive_interval(Some(KEEP_ALIVE))
        .datagram_receive_buffer_size(Some(QUIC_DATAGRAM_WINDOW as usize))
        .datagram_send_buffer_size(QUIC_DATAGRAM_WINDOW as usize)
        .stream_receive_window(quinn::VarInt::from_u64(QUIC_STREAM_WINDOW).unwrap_or_default())
        .receive_window(quinn::VarInt::from_u64(QUIC_CONNECTION_WINDOW).unwrap_or_default())
        .send_window(QUIC_SEND_WINDOW);
    if let Ok(idle) = quinn::IdleTimeout::try_from(IDLE) {
        t.max_idle_timeout(Some(idle));
    }
    t
}

/// An endpoint that tells its peer to send it packets of at most `packet` bytes (a
/// client's `--quic-mtu` holds both ways).
fn endpoint_config(packet: u16) -> quinn::EndpointConfig {
    let mut e = quinn::EndpointConfig::default();
    // Within the bounds quinn takes (`max_packet` keeps it there).
    let _ = e.max_udp_payload_size(packet);
    e
}

/// The most a send with GSO, or a read with GRO, carries: the kernel's 64 KiB.
const GSO_BYTES: usize = 65_535;

/// What a connection's thread hands back once the handshake is done.
type Made = Result<(quinn::Connection, Duration, Option<Early>), String>;

/// Starts a connection's thread: it builds the runtime and the endpoint, runs `make` for
/// the connection, hands it back, and then drives the runtime until the connection is
/// released and closed.
fn spawn<F, Fut>(choice: Choice, gso: Arc<AtomicBool>, make: F) -> Result<QuicConn, EngineError>
where
    F: FnOnce(Arc<dyn Runtime>) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = (Option<quinn::Endpoint>, Made)>,
{
    let (made_tx, made_rx) = std::sync::mpsc::sync_channel(1);
    let (release_tx, release_rx) = tokio::sync::oneshot::channel::<()>();
    std::thread::Builder::new()
        .name("wirebench-quic".into())
        .spawn(move || {
            let thread = crate::sys::thread_id();
            let rt = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => {
                    let _ = made_tx.send(Err(format!("starting the QUIC runtime: {e}")));
                    return;
                }
            };
            let handle = rt.handle().clone();
            rt.block_on(async move {
                let (endpoint, made) = make(Arc::new(TokioRuntime)).await;
                let ok = made.is_ok();
                let local = endpoint.as_ref().and_then(|e| e.local_addr().ok());
                let _ = made_tx.send(made.map(|(c, d, e)| (c, d, e, handle, local, thread)));
                let Some(endpoint) = endpoint else { return };
                if ok {
                    // Released (or the receiver gone): every stream lingers in a task of
                    // its own until acknowledged; then the connection closes by itself.
                    let _ = release_rx.await;
                    let _ = tokio::time::timeout(LINGER, endpoint.wait_idle()).await;
                }
                endpoint.close(0u32.into(), b"");
                let _ =
                    tokio::time::timeout(Duration::from_millis(100), endpoint.wait_idle()).await;
            });
        })
        .map_err(|e| EngineError::io("starting the QUIC connection's thread", e))?;
    let (conn, handshake, early, handle, local, thread) = made_rx
        .recv()
        .map_err(|_| EngineError::Setup("the QUIC connection's thread ended".into()))?
        .map_err(EngineError::Setup)?;
    Ok(QuicConn {
        conn,
        handle,
        choice,
        gso,
        handshake,
        early,
        local,
        data_streams: std::sync::Mutex::new(0),
        data_streams_done: std::sync::Condvar::new(),
        thread,
        _release: release_tx,
    })
}

/// What a client connects with: its TLS (checking the server, asking for an ALPN), shared
/// by every connection made with it, so that a later connection resumes an earlier one's
/// session and sends its first data in 0-RTT, when asked to (`--quic-0rtt`).
#[derive(Clone)]
pub struct Dialer {
    crypto: Arc<quinn::crypto::rustls::QuicClientConfig>,
    zero_rtt: bool,
    /// The largest packet asked for (`--quic-mtu`); none: the path's, as `max_packet` says.
    packet: Option<u16>,
}

impl std::fmt::Debug for Dialer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dialer")
            .field("zero_rtt", &self.zero_rtt)
            .finish_non_exhaustive()
    }
}

impl Dialer {
    /// Checking the server as `check` says, asking for `alpn`; resuming sessions and
    /// sending 0-RTT when `zero_rtt` (else every connection makes the whole handshake).
    ///
    /// # Errors
    ///
    /// TLS could not be set up.
    pub fn new(
        check: ServerCheck,
        alpn: &'static [u8],
        zero_rtt: bool,
    ) -> Result<Self, EngineError> {
        let tls = client_config(check, &[alpn], zero_rtt)?;
        let crypto = quinn::crypto::rustls::QuicClientConfig::try_from(tls)
            .map_err(|e| EngineError::Setup(format!("setting up QUIC's TLS: {e}")))?;
        Ok(Self {
            crypto: Arc::new(crypto),
            zero_rtt,
            packet: None,
        })
    }

    /// Probes for packets of up to `packet` bytes (`--quic-mtu`), both ways; none: up to
    /// what the path's MTU allows, at most [`DEFAULT_MAX_PACKET`].
    #[must_use]
    pub fn max_packet(mut self, packet: Option<u16>) -> Self {
        self.packet = packet;
        self
    }

    /// Connects to `addr`, from `bind` if given, with controller `cc`.
    ///
    /// # Errors
    ///
    /// No answer within the set-up time, a refused handshake (a wrong pin says so), or a
    /// socket that cannot be opened.
    pub fn connect(
        &self,
        addr: SocketAddr,
        bind: Option<IpAddr>,
        cc: Congestion,
    ) -> Result<QuicConn, EngineError> {
        let local = bind.unwrap_or(match addr {
            SocketAddr::V4(_) => std::net::Ipv4Addr::UNSPECIFIED.into(),
            SocketAddr::V6(_) => std::net::Ipv6Addr::UNSPECIFIED.into(),
        });
        let sock = UdpSocket::bind((local, 0))
            .map_err(|e| EngineError::io("opening the QUIC socket", e))?;
        socket_buffers(&socket2::SockRef::from(&sock));
        // The path's MTU, from a socket connected for the asking (the connection's own
        // stays unconnected, as quinn's client sockets are).
        let path = UdpSocket::bind((local, 0)).and_then(|probe| {
            probe.connect(addr)?;
            crate::sys::path_mtu(&probe, addr.is_ipv6())
        });
        let packet = max_packet(self.packet, path, addr.is_ipv6());
        let choice = Choice::new(cc);
        let mut cfg = quinn::ClientConfig::new(self.crypto.clone());
        cfg.transport_config(Arc::new(transport(&choice, packet)));
        let gso = Arc::new(AtomicBool::new(true));
        let sends = Arc::clone(&gso);
        let zero_rtt = self.zero_rtt;
        spawn(choice, gso, move |runtime| async move {
            let socket = match runtime.wrap_udp_socket(sock) {
                Ok(inner) => Arc::new(Stashed {
                    inner,
                    early: None,
                    gso: sends,
                    packet,
                }),
                Err(e) => return (None, Err(format!("opening the QUIC socket: {e}"))),
            };
            let endpoint = match quinn::Endpoint::new_with_abstract_socket(
                endpoint_config(packet),
                None,
                socket,
                runtime,
            ) {
                Ok(e) => e,
                Err(e) => return (None, Err(format!("opening the QUIC endpoint: {e}"))),
            };
            let started = Instant::now();
            let connecting = match endpoint.connect_with(cfg, addr, "wirebench") {
                Ok(c) => c,
                Err(e) => return (Some(endpoint), Err(format!("connecting over QUIC: {e}"))),
            };
            let connecting = if zero_rtt {
                match connecting.into_0rtt() {
                    // Usable at once; the handshake ends (and says whether the server took
                    // the early data) in a task of its own.
                    Ok((conn, accepted)) => {
                        let early = Early::default();
                        let seen = early.clone();
                        tokio::spawn(async move {
                            let took = accepted.await;
                            seen.done(took, started.elapsed());
                        });
                        return (Some(endpoint), Ok((conn, Duration::ZERO, Some(early))));
                    }
                    Err(c) => c,
                }
            } else {
                connecting
            };
            let made = match tokio::time::timeout(SETUP_TIMEOUT, connecting).await {
                Ok(Ok(conn)) => Ok((conn, started.elapsed(), None)),
                Ok(Err(e)) => Err(handshake_failed(addr, &e)),
                Err(_) => Err(format!(
                    "no QUIC answer from {addr} within {} s: is the server there (`wirebench serve`), and UDP let through?",
                    SETUP_TIMEOUT.as_secs()
                )),
            };
            (Some(endpoint), made)
        })
    }
}

/// A 0-RTT connection's handshake, which ends while the connection is in use: whether the
/// server took the early data, and when the handshake ended.
#[derive(Debug, Clone, Default)]
pub(crate) struct Early(Arc<(AtomicBool, AtomicU64)>);

impl Early {
    fn done(&self, accepted: bool, took: Duration) {
        self.0 .0.store(accepted, Ordering::Relaxed);
        let ns = u64::try_from(took.as_nanos()).unwrap_or(u64::MAX).max(1);
        self.0 .1.store(ns, Ordering::Relaxed);
    }

    /// Whether the early data was taken, and the handshake's time, once it ended.
    fn get(&self) -> Option<(bool, Duration)> {
        let ns = self.0 .1.load(Ordering::Relaxed);
        (ns > 0).then(|| (self.0 .0.load(Ordering::Relaxed), Duration::from_nanos(ns)))
    }
}

/// Connects to a wirebench server's QUIC side (or, with `alpn`, another's) at `addr`, from
/// `bind` if given, checking the server as `check` says, with controller `cc`, probing for
/// packets of up to `packet` bytes (none: the path's, as [`Dialer::max_packet`] says): the
/// whole handshake, no session resumed.
///
/// # Errors
///
/// No answer within the set-up time, a refused handshake (a wrong pin says so), or a
/// socket that cannot be opened.
pub fn connect(
    addr: SocketAddr,
    bind: Option<IpAddr>,
    check: ServerCheck,
    cc: Congestion,
    alpn: &'static [u8],
    packet: Option<u16>,
) -> Result<QuicConn, EngineError> {
    Dialer::new(check, alpn, false)?
        .max_packet(packet)
        .connect(addr, bind, cc)
}

/// A handshake's failure in words: a wrong pin is the user's to fix, and says so.
fn handshake_failed(addr: SocketAddr, e: &quinn::ConnectionError) -> String {
    let text = e.to_string();
    if text.contains("pinned") {
        format!("the QUIC server at {addr} is not the one pinned: {text}; check --quic-pin against what `serve` printed")
    } else if text.contains("no_application_protocol") || text.contains("0x178") {
        format!("the QUIC server at {addr} does not speak wirebench's protocol (ALPN refused)")
    } else {
        format!("the QUIC handshake with {addr} failed: {text}")
    }
}

/// The server's side of a connection whose first Initial (`first`, from `src`, at
/// `arrived`) came to the port's hello socket: `sock` is bound beside it and connected to
/// `src`, so the rest come there. Waits for the handshake at most the set-up time.
///
/// # Errors
///
/// The handshake failed or timed out.
pub(crate) fn accept(
    sock: UdpSocket,
    inbox: Arc<Inbox>,
    src: SocketAddr,
    arrived: Instant,
    identity: &Identity,
    alpn: &'static [u8],
) -> Result<QuicConn, EngineError> {
    let crypto = identity.quic_server_config(alpn)?;
    let choice = Choice::default();
    // The socket is connected to the client: the kernel knows the path's MTU.
    let packet = max_packet(
        None,
        crate::sys::path_mtu(&sock, src.is_ipv6()),
        src.is_ipv6(),
    );
    let mut cfg = quinn::ServerConfig::with_crypto(crypto);
    cfg.transport_config(Arc::new(transport(&choice, packet)))
        .migration(false);
    let gso = Arc::new(AtomicBool::new(true));
    let sends = Arc::clone(&gso);
    spawn(choice, gso, move |runtime| async move {
        let inner = match runtime.wrap_udp_socket(sock) {
            Ok(s) => s,
            Err(e) => return (None, Err(format!("opening the QUIC socket: {e}"))),
        };
        let socket = Arc::new(Stashed {
            inner,
            early: Some((inbox, src)),
            gso: sends,
            packet,
        });
        let endpoint = match quinn::Endpoint::new_with_abstract_socket(
            endpoint_config(packet),
            Some(cfg),
            socket,
            runtime,
        ) {
            Ok(e) => e,
            Err(e) => return (None, Err(format!("opening the QUIC endpoint: {e}"))),
        };
        // A first Initial that is one makes a connection at once; one that does not (junk
        // behind a valid header) gives its place back within FIRST_INITIAL.
        let incoming = match tokio::time::timeout(FIRST_INITIAL, endpoint.accept()).await {
            Ok(Some(i)) => i,
            _ => return (Some(endpoint), Err("not a QUIC Initial".into())),
        };
        let connecting = match incoming.accept() {
            Ok(c) => c,
            Err(e) => return (Some(endpoint), Err(e.to_string())),
        };
        // A resumed session's 0-RTT request is read, and answered, before the handshake
        // ends (0.5-RTT: the answer goes with the server's first flight), as a client
        // that asked for 0-RTT expects. A session that is not resumed brings no stream
        // before the handshake ends, so nothing changes for it; its first frame has the
        // set-up time, as before.
        let made = match connecting.into_0rtt() {
            Ok((conn, accepted)) => {
                let early = Early::default();
                let seen = early.clone();
                tokio::spawn(async move {
                    let took = accepted.await;
                    seen.done(took, arrived.elapsed());
                });
                Ok((conn, Duration::ZERO, Some(early)))
            }
            Err(connecting) => tokio::time::timeout(SETUP_TIMEOUT, connecting)
                .await
                .map_err(|_| "no QUIC handshake within the set-up time".to_string())
                .and_then(|r| r.map_err(|e| e.to_string()))
                .map(|conn| (conn, arrived.elapsed(), None)),
        };
        (Some(endpoint), made)
    })
}

/// A connection's socket: for a server's, what came from its client to the hello socket
/// (its inbox: the first Initial, and what came right behind it), then what comes to its
/// own; sends in GSO batches while `gso` says so, of packets of up to `packet` bytes.
#[derive(Debug)]
struct Stashed {
    inner: Arc<dyn AsyncUdpSocket>,
    early: Option<(Arc<Inbox>, SocketAddr)>,
    gso: Arc<AtomicBool>,
    packet: u16,
}

impl AsyncUdpSocket for Stashed {
    fn create_io_poller(self: Arc<Self>) -> Pin<Box<dyn UdpPoller>> {
        Arc::clone(&self.inner).create_io_poller()
    }

    fn try_send(&self, transmit: &quinn::udp::Transmit<'_>) -> std::io::Result<()> {
        self.inner.try_send(transmit)
    }

    fn poll_recv(
        &self,
        cx: &mut Context<'_>,
        bufs: &mut [IoSliceMut<'_>],
        meta: &mut [RecvMeta],
    ) -> Poll<std::io::Result<usize>> {
        let early = self
            .early
            .as_ref()
            .and_then(|(inbox, src)| inbox.pop(cx).map(|d| (d, *src)));
        if let (Some((d, src)), Some(buf), Some(m)) = (early, bufs.first_mut(), meta.first_mut()) {
            if d.len() <= buf.len() {
                buf[..d.len()].copy_from_slice(&d);
                *m = RecvMeta {
                    addr: src,
                    len: d.len(),
                    stride: d.len(),
                    ..RecvMeta::default()
                };
                return Poll::Ready(Ok(1));
            }
        }
        self.inner.poll_recv(cx, bufs, meta)
    }

    fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.inner.local_addr()
    }

    fn max_transmit_segments(&self) -> usize {
        if self.gso.load(Ordering::Relaxed) {
            // The kernel takes at most 64 KiB a send.
            let fit = (GSO_BYTES / usize::from(self.packet)).max(1);
            self.inner.max_transmit_segments().min(fit)
        } else {
            1
        }
    }

    /// Quinn gives each of its receive buffers room for this many packets of the largest
    /// size: enough for one coalesced read (GRO: at most 64 KiB), no more.
    fn max_receive_segments(&self) -> usize {
        GSO_BYTES
            .div_ceil(usize::from(self.packet))
            .min(self.inner.max_receive_segments())
            .max(1)
    }

    fn may_fragment(&self) -> bool {
        self.inner.may_fragment()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_largest_packet_is_the_paths_within_bounds_unless_asked() {
        let path = |mtu: u32| -> std::io::Result<u32> { Ok(mtu) };
        // An Ethernet path: its MTU less 20 + 8 bytes of headers (IPv6: 40 + 8).
        assert_eq!(max_packet(None, path(1500), false), 1472);
        assert_eq!(max_packet(None, path(1500), true), 1452);
        // Loopback's 64 KiB: ten packets a GSO send.
        assert_eq!(max_packet(None, path(65536), false), DEFAULT_MAX_PACKET);
        // A path under QUIC's minimum still starts at it (probing goes no lower).
        assert_eq!(max_packet(None, path(1232), true), MIN_PACKET);
        // Unknown: quinn's own ceiling.
        let unknown = Err(std::io::ErrorKind::NotConnected.into());
        assert_eq!(max_packet(None, unknown, false), 1452);
        // Asked: that, past the path's and the default ceiling alike.
        assert_eq!(max_packet(Some(9000), path(1500), false), 9000);
        assert_eq!(max_packet(Some(1300), path(65536), false), 1300);
    }
}
