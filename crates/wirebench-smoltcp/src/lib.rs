//! wirebench's data connections over smoltcp, a user-space TCP/IP stack, on a TUN device.
//!
//! A lab host with `--stack smoltcp` keeps its control connection on the kernel's stack and
//! opens each TCP data connection through a [`SmolStream`]: a smoltcp interface of its own
//! on the host's TUN device (which the lab made, routed and proxy-ARPed for the stack's
//! address), one TCP socket on it, driven by the stream's own reads and writes. The engine
//! sees a byte stream ([`wirebench_engine::UserStream`]) and counts, digests and reports as
//! it does for a kernel socket. A server host with `serve --stack smoltcp` takes each test's
//! data connection the same way ([`SmolListener`]): its stack listens on a port of its own,
//! which the server names to the client and the host forwards to the stack.
//!
//! Why no poll thread: a TUN device takes one reader, the engine's roles use one data
//! connection per thread, and a role always sits in a read or a write (with a timeout of
//! 20 ms) while its test runs, so the stream's own calls poll the interface often enough;
//! a second thread would only add a lock and a wake-up on every segment. At the end,
//! [`SmolStream`] lingers until its FIN is acknowledged: the stack lives in this process,
//! so nobody would send what is left once it is gone.
#![deny(unsafe_code)]

mod sys;

use std::fmt;
use std::io::{self, ErrorKind, Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use smoltcp::iface::{Config, Interface, PollResult, SocketHandle, SocketSet};
use smoltcp::phy::{Device, Medium, TunTapInterface};
use smoltcp::socket::tcp;
use smoltcp::wire::{HardwareAddress, IpAddress, IpCidr, Ipv4Address};
use wirebench_engine::{UserAccept, UserConnector, UserListener, UserStream};
use wirebench_proto::results::UserStack;
use wirebench_proto::spec::{Direction, Mechanism, Protocol, TestSpec};

/// smoltcp's version, as recorded in the results.
pub const SMOLTCP_VERSION: &str = "0.12.0";

/// The stack's default socket buffers, each way, bytes: enough for 20 Mbit/s over 100 ms,
/// the lab's usual links, and small, in the spirit of a stack measured in little memory.
pub const DEFAULT_BUFFER_BYTES: usize = 256 * 1024;

/// How long [`SmolStream`] waits at the end for the peer to take what is left, unless the
/// configuration says otherwise.
pub const DEFAULT_LINGER: Duration = Duration::from_secs(10);

/// How long a dropped stream keeps polling so that the peer gets its FIN.
const DROP_LINGER: Duration = Duration::from_millis(500);

/// How often a server's stack waiting for its connection looks whether the test ended.
const CANCEL_EVERY: Duration = Duration::from_millis(100);

/// The congestion controls smoltcp has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Congestion {
    /// None: the window is the peer's receive window alone.
    None,
    /// Reno.
    Reno,
    /// CUBIC (smoltcp's default when it is built in, as here).
    Cubic,
}

impl Congestion {
    /// From `--cc`'s name.
    ///
    /// # Errors
    ///
    /// Any other name, with the ones that exist.
    pub fn parse(name: &str) -> Result<Self, SmolError> {
        match name {
            "none" => Ok(Self::None),
            "reno" => Ok(Self::Reno),
            "cubic" => Ok(Self::Cubic),
            other => Err(SmolError::Congestion(other.to_owned())),
        }
    }

    fn name(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Reno => "reno",
            Self::Cubic => "cubic",
        }
    }

    fn smoltcp(self) -> tcp::CongestionControl {
        match self {
            Self::None => tcp::CongestionControl::None,
            Self::Reno => tcp::CongestionControl::Reno,
            Self::Cubic => tcp::CongestionControl::Cubic,
        }
    }
}

/// What cannot be set up.
#[derive(Debug, thiserror::Error)]
pub enum SmolError {
    /// A congestion control smoltcp does not have.
    #[error("--cc {0}: smoltcp has only reno, cubic and none")]
    Congestion(String),
    /// A malformed `--stack-addr`.
    #[error("--stack-addr {0:?}: give an IPv4 address and prefix, e.g. 10.77.0.101/24")]
    Address(String),
    /// A test smoltcp cannot carry here, and why.
    #[error("{0}")]
    Unsupported(&'static str),
}

/// What a test over smoltcp can be, for a client's `--stack` and a server's alike: the
/// congestion control it asks for (CUBIC when it names none).
///
/// # Errors
///
/// What smoltcp cannot carry here, with why and what to do instead.
pub fn check(spec: &TestSpec) -> Result<Congestion, SmolError> {
    let no = |why| Err(SmolError::Unsupported(why));
    if spec.protocol == Protocol::Udp {
        return no("smoltcp carries TCP only here (UDP's GSO, GRO and batched calls are the kernel's): drop --udp");
    }
    if spec.zerocopy {
        return no("--zerocopy is MSG_ZEROCOPY, a kernel socket feature: smoltcp copies into its own buffers");
    }
    if spec.streams > 1 || spec.direction == Direction::Bidir {
        return no("smoltcp carries one data connection (one stack on one TUN device): use -P 1 without --bidir");
    }
    if spec.mechanism == Mechanism::Crr {
        return no("--mode crr opens a connection per transaction on the kernel's stack: use --mode rr over smoltcp");
    }
    spec.congestion
        .as_deref()
        .map_or(Ok(Congestion::Cubic), Congestion::parse)
}

/// Where and how the stack runs.
#[derive(Debug, Clone)]
pub struct SmolConfig {
    /// The TUN device (made, up and routed beforehand: see `wirebench-lab`'s `user_stack`).
    pub device: String,
    /// The stack's own address; not one of the kernel's.
    pub address: Ipv4Addr,
    /// Its prefix length: destinations inside are sent straight to the device.
    pub prefix: u8,
    /// Socket buffer each way, bytes.
    pub buffer_bytes: usize,
    /// Congestion control.
    pub congestion: Congestion,
    /// How long the sender waits at the end for the peer to take what is left in the
    /// stack's buffer (the kernel would go on sending after `close`; here the stack ends
    /// with the process). The test's drain time is the natural bound: the receiver stops
    /// waiting then too.
    pub linger: Duration,
}

impl SmolConfig {
    /// Parses `ADDR/PREFIX`.
    ///
    /// # Errors
    ///
    /// Not an IPv4 address with a prefix of 1 to 32.
    pub fn parse_address(text: &str) -> Result<(Ipv4Addr, u8), SmolError> {
        let bad = || SmolError::Address(text.to_owned());
        let (a, p) = text.split_once('/').ok_or_else(bad)?;
        let a: Ipv4Addr = a.parse().map_err(|_| bad())?;
        let p: u8 = p.parse().map_err(|_| bad())?;
        if !(1..=32).contains(&p) {
            return Err(bad());
        }
        Ok((a, p))
    }
}

/// Opens [`SmolStream`]s for the engine.
#[derive(Debug, Clone)]
pub struct SmolConnector(pub SmolConfig);

impl UserConnector for SmolConnector {
    fn connect(&self, addr: SocketAddr, timeout: Duration) -> io::Result<Box<dyn UserStream>> {
        Ok(Box::new(SmolStream::connect(&self.0, addr, timeout)?))
    }
}

/// One TCP connection in a smoltcp interface of its own, on a TUN device.
pub struct SmolStream {
    dev: sys::Tun,
    fd: std::os::fd::RawFd,
    iface: Interface,
    sockets: SocketSet<'static>,
    handle: SocketHandle,
    epoch: Instant,
    timeout: Duration,
    info: UserStack,
    closed: bool,
    linger: Duration,
}

impl fmt::Debug for SmolStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SmolStream")
            .field("device", &self.info.device)
            .field("address", &self.info.address)
            .finish_non_exhaustive()
    }
}

/// The error for a TUN device that cannot be opened, with what to do.
fn tun_error(device: &str, e: io::Error) -> io::Error {
    let hint = match e.kind() {
        ErrorKind::PermissionDenied => {
            "/dev/net/tun refused: attaching to a TUN device needs CAP_NET_ADMIN or the device's owner; \
             run inside `wirebench lab`, as root, or in a user namespace that owns the network namespace"
        }
        ErrorKind::NotFound => "/dev/net/tun is missing: load the tun module (modprobe tun)",
        ErrorKind::ResourceBusy => {
            "another test holds it: a TUN device carries one stack at a time; try again when that test ends"
        }
        _ => "the lab makes this device for a host with a user-space stack (lab --stack or --server-stack smoltcp)",
    };
    io::Error::new(
        e.kind(),
        format!("opening TUN device {device}: {e} ({hint})"),
    )
}

impl SmolStream {
    /// Connects to `remote` within `timeout`.
    ///
    /// # Errors
    ///
    /// The TUN device cannot be opened, the peer refuses, or does not answer in time.
    pub fn connect(cfg: &SmolConfig, remote: SocketAddr, timeout: Duration) -> io::Result<Self> {
        let SocketAddr::V4(remote) = remote else {
            return Err(io::Error::new(
                ErrorKind::Unsupported,
                "the smoltcp stack here speaks IPv4 only",
            ));
        };
        let mut s = Self::open(cfg, timeout)?;
        let local_port = 49152 + (seed() % 16000) as u16;
        let r = remote.ip().octets();
        s.sockets
            .get_mut::<tcp::Socket>(s.handle)
            .connect(
                s.iface.context(),
                (IpAddress::v4(r[0], r[1], r[2], r[3]), remote.port()),
                local_port,
            )
            .map_err(|e| io::Error::other(format!("smoltcp connect: {e}")))?;
        let until = Instant::now() + timeout;
        loop {
            s.poll();
            match s.socket().state() {
                tcp::State::Established => return Ok(s),
                tcp::State::Closed => {
                    return Err(io::Error::new(
                        ErrorKind::ConnectionRefused,
                        format!("{remote} refused the connection from the smoltcp stack"),
                    ))
                }
                _ => {}
            }
            if !s.wait(until) {
                return Err(io::Error::new(
                    ErrorKind::TimedOut,
                    format!(
                        "no answer from {remote} to the smoltcp stack on {} in {timeout:?}: \
                         is the device up and routed?",
                        cfg.device
                    ),
                ));
            }
        }
    }

    /// A stack listening on `port` for one connection ([`UserAccept::accept`] takes it).
    ///
    /// # Errors
    ///
    /// The TUN device cannot be opened (another test holds it: a TUN device takes one
    /// stack at a time).
    pub fn listen(cfg: &SmolConfig, port: u16) -> io::Result<Self> {
        let mut s = Self::open(cfg, DEFAULT_LINGER)?;
        s.socket()
            .listen(port)
            .map_err(|e| io::Error::other(format!("smoltcp listen on port {port}: {e}")))?;
        Ok(s)
    }

    /// Waits for an established connection from `peer`, turning others away at once (a
    /// handshake from elsewhere must not hold the only socket), until `timeout` or `cancel`.
    fn accept_from(
        mut self,
        port: u16,
        peer: Ipv4Addr,
        timeout: Duration,
        cancel: &AtomicBool,
    ) -> io::Result<Self> {
        let until = Instant::now() + timeout;
        let peer = IpAddress::from(peer);
        loop {
            self.poll();
            let s = self.socket();
            let ours = s.remote_endpoint().is_some_and(|e| e.addr == peer);
            match s.state() {
                tcp::State::Listen => {}
                tcp::State::SynReceived if ours => {}
                // The attach may come with the handshake, and a FIN after it: the caller
                // reads what arrived either way.
                tcp::State::Established | tcp::State::CloseWait if ours => return Ok(self),
                // Another address (the server takes data connections only from its test's
                // client), or a handshake that failed or ended: listen again.
                _ => {
                    s.abort();
                    self.poll();
                    self.socket()
                        .listen(port)
                        .map_err(|e| io::Error::other(format!("smoltcp listen: {e}")))?;
                }
            }
            if cancel.load(Ordering::Relaxed) {
                return Err(io::Error::new(
                    ErrorKind::Interrupted,
                    "the test ended before its data connection came",
                ));
            }
            let now = Instant::now();
            if now >= until {
                return Err(io::Error::new(
                    ErrorKind::TimedOut,
                    format!(
                        "no data connection from {peer} reached the server's smoltcp stack on \
                         {} port {port} in {timeout:?}: does the host forward port {port} to {}?",
                        self.info.device, self.info.address
                    ),
                ));
            }
            self.wait(until.min(now + CANCEL_EVERY));
        }
    }

    /// The stack on the device, with one TCP socket, neither connected nor listening.
    fn open(cfg: &SmolConfig, timeout: Duration) -> io::Result<Self> {
        let mut tun =
            TunTapInterface::new(&cfg.device, Medium::Ip).map_err(|e| tun_error(&cfg.device, e))?;
        let fd = tun.as_raw_fd();
        let mtu = tun.capabilities().max_transmission_unit;
        let epoch = Instant::now();
        let mut config = Config::new(HardwareAddress::Ip);
        config.random_seed = seed();
        let mut iface = Interface::new(config, &mut tun, smoltcp::time::Instant::ZERO);
        let a = cfg.address.octets();
        iface.update_ip_addrs(|addrs| {
            let _ = addrs.push(IpCidr::new(
                IpAddress::v4(a[0], a[1], a[2], a[3]),
                cfg.prefix,
            ));
        });
        // Everything else also goes to the device: the host's kernel routes it on. (The
        // gateway is only a name for that: on an IP-only device nothing is resolved.)
        let _ = iface
            .routes_mut()
            .add_default_ipv4_route(Ipv4Address::new(a[0], a[1], a[2], 254));
        let buffer = cfg.buffer_bytes.max(4096);
        let mut sock = tcp::Socket::new(
            tcp::SocketBuffer::new(vec![0; buffer]),
            tcp::SocketBuffer::new(vec![0; buffer]),
        );
        sock.set_congestion_control(cfg.congestion.smoltcp());
        // The engine writes whole messages and waits for answers in stop-and-wait and rr:
        // Nagle's algorithm would hold the tail of each back (the kernel's roles turn it off
        // there too).
        sock.set_nagle_enabled(false);
        let mut sockets = SocketSet::new(Vec::new());
        let handle = sockets.add(sock);
        let info = UserStack {
            name: "smoltcp".into(),
            version: SMOLTCP_VERSION.into(),
            device: cfg.device.clone(),
            address: format!("{}/{}", cfg.address, cfg.prefix),
            mtu_bytes: mtu as u64,
            // IPv4 and TCP headers without options.
            mss_bytes: mtu.saturating_sub(40) as u64,
            congestion_control: cfg.congestion.name().into(),
            send_buffer_bytes: buffer as u64,
            recv_buffer_bytes: buffer as u64,
            // The two socket rings and the device's one receive buffer of an MTU.
            buffer_memory_bytes: (2 * buffer + mtu) as u64,
            retransmits: None,
        };
        Ok(Self {
            dev: sys::Tun(tun),
            fd,
            iface,
            sockets,
            handle,
            epoch,
            timeout,
            info,
            closed: false,
            linger: cfg.linger,
        })
    }

    fn socket(&mut self) -> &mut tcp::Socket<'static> {
        self.sockets.get_mut::<tcp::Socket>(self.handle)
    }

    fn now(&self) -> smoltcp::time::Instant {
        smoltcp::time::Instant::from_micros(self.epoch.elapsed().as_micros() as i64)
    }

    /// Moves packets both ways until neither the device nor the socket has more to do now.
    fn poll(&mut self) {
        // One egress pass sends at most one segment per socket: go round until idle. The
        // bound only keeps a flood of arriving packets from starving the caller's clock.
        for _ in 0..4096 {
            let now = self.now();
            if self.iface.poll(now, &mut self.dev.0, &mut self.sockets) == PollResult::None {
                break;
            }
        }
    }

    /// Waits for a packet or the stack's next timer, at most until `until`; false once
    /// `until` has passed.
    fn wait(&mut self, until: Instant) -> bool {
        let now = Instant::now();
        if now >= until {
            return false;
        }
        let left = until - now;
        let timer = self
            .iface
            .poll_delay(self.now(), &self.sockets)
            .map_or(left, |d| Duration::from_micros(d.total_micros()));
        let d = timer.min(left);
        let _ = smoltcp::phy::wait(
            self.fd,
            Some(smoltcp::time::Duration::from_micros(d.as_micros() as u64)),
        );
        true
    }

    /// Polls until the FIN is acknowledged (or the connection is gone), at most `linger`.
    fn finish(&mut self, linger: Duration) -> io::Result<()> {
        if !self.closed {
            self.socket().close();
            self.closed = true;
        }
        let until = Instant::now() + linger;
        loop {
            self.poll();
            let s = self.socket();
            match s.state() {
                tcp::State::FinWait2 | tcp::State::TimeWait | tcp::State::Closed => return Ok(()),
                _ if s.send_queue() == 0 && !s.is_open() => return Ok(()),
                _ => {}
            }
            if !self.wait(until) {
                return Err(io::Error::new(
                    ErrorKind::TimedOut,
                    format!(
                        "the peer did not take the last {} bytes in {linger:?}",
                        self.socket().send_queue()
                    ),
                ));
            }
        }
    }
}

fn seed() -> u64 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    t ^ (u64::from(std::process::id()) << 32)
}

impl Read for SmolStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let until = Instant::now() + self.timeout;
        loop {
            self.poll();
            match self.socket().recv_slice(buf) {
                Ok(0) => {}
                Ok(n) => {
                    // Let the peer know the window opened, without waiting for the next call.
                    self.poll();
                    return Ok(n);
                }
                Err(tcp::RecvError::Finished) => return Ok(0),
                Err(tcp::RecvError::InvalidState) => {
                    return Err(io::Error::new(
                        ErrorKind::ConnectionReset,
                        "the smoltcp connection is closed",
                    ))
                }
            }
            if !self.wait(until) {
                return Err(ErrorKind::WouldBlock.into());
            }
        }
    }
}

impl Write for SmolStream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let until = Instant::now() + self.timeout;
        loop {
            self.poll();
            let s = self.socket();
            if !s.may_send() {
                return Err(io::Error::new(
                    ErrorKind::BrokenPipe,
                    "the smoltcp connection cannot send any more",
                ));
            }
            let n = s
                .send_slice(buf)
                .map_err(|e| io::Error::new(ErrorKind::BrokenPipe, format!("smoltcp: {e}")))?;
            if n > 0 || buf.is_empty() {
                self.poll();
                return Ok(n);
            }
            if !self.wait(until) {
                return Err(ErrorKind::WouldBlock.into());
            }
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        self.poll();
        Ok(())
    }
}

impl UserStream for SmolStream {
    fn set_timeout(&mut self, timeout: Duration) {
        self.timeout = timeout;
    }

    fn shutdown_write(&mut self) -> io::Result<()> {
        self.finish(self.linger)
    }

    fn stack(&self) -> UserStack {
        self.info.clone()
    }
}

/// A server's stack: each test's data connection comes in on `port` (`serve --stack
/// smoltcp`), one test at a time (the device takes one stack).
#[derive(Debug, Clone)]
pub struct SmolListener {
    /// The stack's settings; congestion control and linger come from each test.
    pub config: SmolConfig,
    /// The port it listens on.
    pub port: u16,
}

impl UserListener for SmolListener {
    fn port(&self) -> u16 {
        self.port
    }

    fn listen(&self, spec: &TestSpec, peer: IpAddr) -> io::Result<Box<dyn UserAccept>> {
        let refuse = |kind, why: &dyn fmt::Display| {
            io::Error::new(
                kind,
                format!("this server's test traffic goes through smoltcp: {why}"),
            )
        };
        let IpAddr::V4(peer) = peer else {
            return Err(refuse(
                ErrorKind::Unsupported,
                &"its stack speaks IPv4 only: connect over IPv4",
            ));
        };
        // A receiver's congestion control plays no part: one smoltcp lacks is refused only
        // when this side sends, and a receiver otherwise takes the one asked, as recorded.
        let sends = spec.direction == Direction::Reverse || spec.mechanism != Mechanism::Stream;
        let congestion = match check(spec) {
            Ok(c) => c,
            Err(SmolError::Congestion(_)) if !sends => Congestion::Cubic,
            Err(e) => return Err(refuse(ErrorKind::Unsupported, &e)),
        };
        let cfg = SmolConfig {
            congestion,
            linger: linger(spec),
            ..self.config.clone()
        };
        let stream = SmolStream::listen(&cfg, self.port).map_err(|e| match e.kind() {
            ErrorKind::ResourceBusy => refuse(
                e.kind(),
                &"its stack carries another test now, one at a time (a TUN device takes one \
                  stack): try again when that test ends",
            ),
            _ => refuse(e.kind(), &e),
        })?;
        Ok(Box::new(Listening {
            stream,
            port: self.port,
            peer,
        }))
    }
}

/// How long a sender's stack waits at the end for the peer to take the rest of its buffer:
/// the test's drain time (at least 1 s), as long as the receiver waits for it.
pub fn linger(spec: &TestSpec) -> Duration {
    Duration::from_nanos(spec.drain_ns).max(Duration::from_secs(1))
}

/// Checks that `device` exists in this network namespace and can be opened, before a test
/// needs it: opening a name that does not exist would, as root, make a new device that is
/// down and unrouted, and smoltcp's device panics on its first write there. `maker` is the
/// command that makes one, for the message.
///
/// # Errors
///
/// No such device here, or it cannot be opened (with what to do).
pub fn probe(device: &str, maker: &str) -> io::Result<()> {
    // The calling process's network namespace's devices, one per line, "NAME: counters".
    let devices = std::fs::read_to_string("/proc/self/net/dev")?;
    if !devices
        .lines()
        .filter_map(|l| l.split_once(':'))
        .any(|(name, _)| name.trim() == device)
    {
        return Err(io::Error::new(
            ErrorKind::NotFound,
            format!(
                "no network device {device} here: the TUN device must exist, up and routed \
                 (`{maker}` makes one)"
            ),
        ));
    }
    TunTapInterface::new(device, Medium::Ip)
        .map(drop)
        .map_err(|e| tun_error(device, e))
}

/// A stack listening for one test's connection, from its client at `peer`.
struct Listening {
    stream: SmolStream,
    port: u16,
    peer: Ipv4Addr,
}

impl UserAccept for Listening {
    fn accept(
        self: Box<Self>,
        timeout: Duration,
        cancel: &AtomicBool,
    ) -> io::Result<Box<dyn UserStream>> {
        let s = self
            .stream
            .accept_from(self.port, self.peer, timeout, cancel)?;
        Ok(Box::new(s))
    }
}

impl Drop for SmolStream {
    fn drop(&mut self) {
        // The receiver's side ends at the peer's FIN: answer with ours, briefly, so that the
        // peer is not left retransmitting it to a stack that is gone.
        let _ = self.finish(DROP_LINGER);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_and_congestion_parse() {
        assert_eq!(
            SmolConfig::parse_address("10.77.0.101/24").ok(),
            Some((Ipv4Addr::new(10, 77, 0, 101), 24))
        );
        assert!(SmolConfig::parse_address("10.77.0.101").is_err());
        assert!(SmolConfig::parse_address("10.77.0.101/33").is_err());
        assert_eq!(Congestion::parse("reno").ok(), Some(Congestion::Reno));
        assert!(Congestion::parse("bbr")
            .err()
            .is_some_and(|e| e.to_string().contains("only reno, cubic and none")));
    }
}
