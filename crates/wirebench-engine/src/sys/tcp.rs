//! TCP: the data socket's set-up (congestion control, Nagle, buffers), TCP_INFO at the end of
//! a test, and MSG_ZEROCOPY sending.

use std::net::TcpStream;

use socket2::SockRef;
use thiserror::Error;
use wirebench_proto::results::{Datapath, TcpInfo};
use wirebench_proto::spec::{Mechanism, TestSpec};

use wirebench_sys::cmsg;

use super::sockopt;
use crate::EngineError;

/// A TCP data socket cannot be set up as the test asks.
#[derive(Debug, Error)]
pub enum TcpSetupError {
    /// The congestion control asked for (`--cc`) is not available on this host.
    #[error(
        "congestion control {name:?} is not available on this host ({source}): see \
         /proc/sys/net/ipv4/tcp_available_congestion_control (as root, `modprobe tcp_{name}`)"
    )]
    Congestion {
        /// The algorithm asked for.
        name: String,
        /// What the kernel said.
        source: std::io::Error,
    },
}

/// The control session reports a set-up failure as [`EngineError::Setup`], with the text.
impl From<TcpSetupError> for EngineError {
    fn from(e: TcpSetupError) -> Self {
        EngineError::Setup(e.to_string())
    }
}

/// Sets up a TCP data socket and records what was granted; an error when the congestion
/// control the test asks for (`--cc`) is not available here.
pub fn tcp_datapath(s: &TcpStream, spec: &TestSpec) -> Result<Datapath, TcpSetupError> {
    let sock = SockRef::from(s);
    if let Some(cc) = &spec.congestion {
        sock.set_tcp_congestion(cc.as_bytes())
            .map_err(|source| TcpSetupError::Congestion {
                name: cc.clone(),
                source,
            })?;
    }
    let mut features = Vec::new();
    // Stop-and-wait and request/response send one message and wait: Nagle's algorithm would
    // hold a short message back waiting for an ACK that the peer delays, so it is off there.
    if spec.mechanism != Mechanism::Stream && s.set_nodelay(true).is_ok() {
        features.push("tcp_nodelay".to_string());
    }
    match spec.socket_buffer_bytes {
        // `-w`: the size asked for, as iperf3's -w sets it. This turns autotuning off for the
        // connection. The window scale was fixed at the handshake from the sysctls' maxima,
        // so a buffer set now can still use all of it.
        Some(size) => {
            let size = usize::try_from(size).unwrap_or(usize::MAX);
            // A refusal is not fatal: what was granted is read back below and recorded.
            let _ = sock.set_send_buffer_size(size);
            let _ = sock.set_recv_buffer_size(size);
            features.push("socket_buffer_set".to_string());
        }
        // Otherwise TCP buffers are left to the kernel's autotuning, which grows them with the
        // path's bandwidth-delay product (up to net.ipv4.tcp_{w,r}mem); setting
        // SO_SNDBUF/SO_RCVBUF would turn it off and cap a long, fast path (iperf3 leaves them
        // alone too). What is recorded is the size at the start.
        None => features.push("tcp_autotuning".to_string()),
    }
    let (snd, rcv) = (
        sock.send_buffer_size().unwrap_or(0) as u64,
        sock.recv_buffer_size().unwrap_or(0) as u64,
    );
    Ok(Datapath {
        io: "write/read".into(),
        batch: 1,
        send_buffer_bytes: snd,
        recv_buffer_bytes: rcv,
        features,
        tcp_congestion: SockRef::from(s).tcp_congestion().ok().map(|c| {
            String::from_utf8_lossy(&c)
                .trim_end_matches('\0')
                .to_string()
        }),
        zerocopy: None,
        busy_poll: super::busy_poll_setup(s, spec),
        ..Datapath::default()
    })
}

/// What the kernel's TCP_INFO says of a connection now.
pub fn tcp_info(s: &TcpStream) -> Option<TcpInfo> {
    let info: libc::tcp_info = sockopt::get(s, libc::IPPROTO_TCP, libc::TCP_INFO).ok()?;
    Some(TcpInfo {
        retransmits: u64::from(info.tcpi_total_retrans),
        rtt_us: u64::from(info.tcpi_rtt),
        rttvar_us: u64::from(info.tcpi_rttvar),
        snd_cwnd_segments: u64::from(info.tcpi_snd_cwnd),
        snd_mss_bytes: u64::from(info.tcpi_snd_mss),
    })
}

/// A TCP sender's figures as iperf3 reports them per interval (`iperf_tcp.c`'s `save_tcpinfo`):
/// retransmissions so far, the congestion window in bytes, smoothed round-trip time and
/// its variation in µs, and the path MTU.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SenderTcpInfo {
    /// `tcpi_total_retrans`.
    pub retransmits: u64,
    /// `tcpi_snd_cwnd` × `tcpi_snd_mss`, bytes.
    pub snd_cwnd_bytes: u64,
    /// `tcpi_rtt`, µs.
    pub rtt_us: u64,
    /// `tcpi_rttvar`, µs.
    pub rttvar_us: u64,
    /// `tcpi_pmtu`, bytes.
    pub pmtu_bytes: u64,
}

/// [`SenderTcpInfo`] of a connection now.
pub fn sender_tcp_info(s: &TcpStream) -> Option<SenderTcpInfo> {
    let info: libc::tcp_info = sockopt::get(s, libc::IPPROTO_TCP, libc::TCP_INFO).ok()?;
    Some(SenderTcpInfo {
        retransmits: u64::from(info.tcpi_total_retrans),
        snd_cwnd_bytes: u64::from(info.tcpi_snd_cwnd) * u64::from(info.tcpi_snd_mss),
        rtt_us: u64::from(info.tcpi_rtt),
        rttvar_us: u64::from(info.tcpi_rttvar),
        pmtu_bytes: u64::from(info.tcpi_pmtu),
    })
}

/// Whether everything written on `s` has been acknowledged by the peer (nothing unsent,
/// nothing unacknowledged); `None` when TCP_INFO cannot be read.
pub fn tcp_all_acked(s: &TcpStream) -> Option<bool> {
    let info: libc::tcp_info = sockopt::get(s, libc::IPPROTO_TCP, libc::TCP_INFO).ok()?;
    Some(info.tcpi_unacked == 0 && info.tcpi_notsent_bytes == 0)
}

/// `SO_ZEROCOPY` (include/uapi/asm-generic/socket.h).
const SO_ZEROCOPY: libc::c_int = 60;
/// `SO_EE_ORIGIN_ZEROCOPY` (include/uapi/linux/errqueue.h).
const SO_EE_ORIGIN_ZEROCOPY: u8 = 5;
/// `SO_EE_CODE_ZEROCOPY_COPIED`: the kernel copied after all (loopback, no device support).
const SO_EE_CODE_ZEROCOPY_COPIED: u8 = 1;

/// TCP `MSG_ZEROCOPY` sending (Documentation/networking/msg_zerocopy.rst): the kernel sends
/// from the caller's pages and reports on the socket's error queue when it is done with
/// them, and whether it had to copy after all. The payload the sender hands over never
/// changes, so a page still in flight may be sent again; the notifications are only read
/// to keep the error queue short and to learn what really happened.
#[derive(Debug, Default)]
pub struct ZeroCopy {
    /// Sends made with MSG_ZEROCOPY.
    pub sends: u64,
    /// Of those, completions the kernel reported.
    pub completed: u64,
    /// Of those, the ones it sent by copying.
    pub copied: u64,
}

impl ZeroCopy {
    /// Turns MSG_ZEROCOPY on for `s`; `None` where the kernel does not offer it.
    pub fn enable(s: &TcpStream) -> Option<Self> {
        sockopt::set(s, libc::SOL_SOCKET, SO_ZEROCOPY, &1)
            .ok()
            .map(|()| Self::default())
    }

    /// One `send(2)` of `buf` with MSG_ZEROCOPY.
    #[allow(unsafe_code)]
    pub fn send(&mut self, s: &TcpStream, buf: &[u8]) -> std::io::Result<usize> {
        use std::os::fd::AsRawFd;
        // SAFETY: `buf` is valid for reads of its length during the call; the kernel keeps a
        // reference to its pages until it reports completion, and the caller never changes
        // them (see the type's documentation).
        let n = unsafe {
            libc::send(
                s.as_raw_fd(),
                buf.as_ptr().cast(),
                buf.len(),
                libc::MSG_ZEROCOPY,
            )
        };
        if n < 0 {
            return Err(std::io::Error::last_os_error());
        }
        self.sends += 1;
        Ok(n as usize)
    }

    /// Reads every completion waiting on the error queue, without blocking.
    #[allow(unsafe_code)]
    pub fn reap(&mut self, s: &TcpStream) {
        use std::os::fd::AsRawFd;
        let mut control = cmsg::Buf::<128>::default();
        loop {
            // SAFETY: all-zero is a valid msghdr; it points at our control buffer only.
            let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
            msg.msg_control = control.0.as_mut_ptr().cast();
            msg.msg_controllen = control.0.len();
            // SAFETY: `msg` points at `control`, alive and writable for the call.
            let rc = unsafe {
                libc::recvmsg(
                    s.as_raw_fd(),
                    &mut msg,
                    libc::MSG_ERRQUEUE | libc::MSG_DONTWAIT,
                )
            };
            if rc < 0 {
                return;
            }
            // Never past the buffer, whatever length the kernel wrote back.
            let written = msg.msg_controllen.min(control.0.len());
            for c in cmsg::walk(&control.0[..written]) {
                let recverr = (c.level == libc::SOL_IP && c.kind == libc::IP_RECVERR)
                    || (c.level == libc::SOL_IPV6 && c.kind == libc::IPV6_RECVERR);
                if let Some(e) = recverr.then(|| ExtendedErr::parse(c.data)).flatten() {
                    if e.errno == 0 && e.origin == SO_EE_ORIGIN_ZEROCOPY {
                        // Sends info ..= data (a 32-bit counter) completed.
                        let n = u64::from(e.data.wrapping_sub(e.info)) + 1;
                        self.completed += n;
                        if e.code & SO_EE_CODE_ZEROCOPY_COPIED != 0 {
                            self.copied += n;
                        }
                    }
                }
            }
        }
    }
}

/// The fields of a `struct sock_extended_err` (include/uapi/linux/errqueue.h) that a
/// MSG_ZEROCOPY completion uses, read from a control message's bytes.
struct ExtendedErr {
    errno: u32,
    origin: u8,
    code: u8,
    info: u32,
    data: u32,
}

impl ExtendedErr {
    /// `ee_errno` u32, `ee_origin` u8, `ee_type` u8, `ee_code` u8, `ee_pad` u8, `ee_info`
    /// u32, `ee_data` u32, in the host's byte order; `None` when the data is shorter.
    fn parse(b: &[u8]) -> Option<Self> {
        let u32_at = |i: usize| Some(u32::from_ne_bytes(b.get(i..i + 4)?.try_into().ok()?));
        Some(Self {
            errno: u32_at(0)?,
            origin: *b.get(4)?,
            code: *b.get(6)?,
            info: u32_at(8)?,
            data: u32_at(12)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::net::TcpListener;
    use std::time::{Duration, Instant};

    #[test]
    fn an_extended_error_reads_its_fields_and_refuses_short_data() {
        let mut b = [0u8; 16];
        b[4] = SO_EE_ORIGIN_ZEROCOPY;
        b[6] = SO_EE_CODE_ZEROCOPY_COPIED;
        b[8..12].copy_from_slice(&7u32.to_ne_bytes());
        b[12..16].copy_from_slice(&9u32.to_ne_bytes());
        let e = ExtendedErr::parse(&b).expect("16 bytes");
        assert_eq!((e.errno, e.origin, e.code), (0, 5, 1));
        assert_eq!((e.info, e.data), (7, 9));
        assert!(ExtendedErr::parse(&b[..15]).is_none());
    }

    #[test]
    fn zerocopy_completions_are_read_off_the_error_queue() {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind");
        let s = TcpStream::connect(l.local_addr().expect("addr")).expect("connect");
        let (mut peer, _) = l.accept().expect("accept");
        let mut z =
            ZeroCopy::enable(&s).expect("this test needs MSG_ZEROCOPY (Linux 4.14 and later)");
        let buf = vec![1u8; 64 * 1024];
        let mut sink = vec![0u8; 64 * 1024];
        let mut got = 0;
        for _ in 0..8 {
            let n = z.send(&s, &buf).expect("send");
            while got < n {
                got += peer.read(&mut sink).expect("read");
            }
            got -= n;
        }
        // Completions follow the peer's ACKs; poll the queue, loosely bounded.
        let until = Instant::now() + Duration::from_secs(10);
        while z.completed < z.sends && Instant::now() < until {
            z.reap(&s);
            std::thread::yield_now();
        }
        assert_eq!(z.sends, 8);
        assert_eq!(z.completed, 8);
        assert!(z.copied <= z.completed);
        assert!(tcp_info(&s).is_some_and(|i| i.snd_mss_bytes > 0));
    }
}
