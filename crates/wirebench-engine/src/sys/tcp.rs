//! TCP: the data socket's set-up (congestion control, Nagle, buffers), TCP_INFO at the end of
//! a test, and MSG_ZEROCOPY sending.

use std::net::TcpStream;

use socket2::SockRef;
use wirebench_proto::results::{Datapath, TcpInfo};
use wirebench_proto::spec::{Mechanism, TestSpec};

/// Sets up a TCP data socket and records what was granted; an error when the congestion
/// control the test asks for (`--cc`) is not available here.
pub fn tcp_datapath(s: &TcpStream, spec: &TestSpec) -> Result<Datapath, String> {
    let sock = SockRef::from(s);
    if let Some(cc) = &spec.congestion {
        sock.set_tcp_congestion(cc.as_bytes()).map_err(|e| {
            format!(
                "congestion control {cc:?} is not available on this host ({e}): see \
                 /proc/sys/net/ipv4/tcp_available_congestion_control (as root, `modprobe tcp_{cc}`)"
            )
        })?;
    }
    let mut features = Vec::new();
    // Stop-and-wait and request/response send one message and wait: Nagle's algorithm would
    // hold a short message back waiting for an ACK that the peer delays, so it is off there.
    if spec.mechanism != Mechanism::Stream && s.set_nodelay(true).is_ok() {
        features.push("tcp_nodelay".to_string());
    }
    // TCP buffers are left to the kernel's autotuning, which grows them with the path's
    // bandwidth-delay product (up to net.ipv4.tcp_{w,r}mem); setting SO_SNDBUF/SO_RCVBUF
    // would turn it off and cap a long, fast path (iperf3 leaves them alone too). What is
    // recorded is the size at the start.
    features.push("tcp_autotuning".to_string());
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
    })
}

/// What the kernel's TCP_INFO says of a connection now.
#[allow(unsafe_code)]
pub fn tcp_info(s: &TcpStream) -> Option<TcpInfo> {
    use std::os::fd::AsRawFd;
    // SAFETY: all-zero is a valid tcp_info (plain integers).
    let mut info: libc::tcp_info = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
    // SAFETY: `info` and `len` are valid for writes of their sizes; the kernel writes at
    // most `len` bytes and sets `len` to what it wrote.
    let rc = unsafe {
        libc::getsockopt(
            s.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            (&mut info as *mut libc::tcp_info).cast(),
            &mut len,
        )
    };
    (rc == 0).then(|| TcpInfo {
        retransmits: u64::from(info.tcpi_total_retrans),
        rtt_us: u64::from(info.tcpi_rtt),
        rttvar_us: u64::from(info.tcpi_rttvar),
        snd_cwnd_segments: u64::from(info.tcpi_snd_cwnd),
        snd_mss_bytes: u64::from(info.tcpi_snd_mss),
    })
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
    #[allow(unsafe_code)]
    pub fn enable(s: &TcpStream) -> Option<Self> {
        use std::os::fd::AsRawFd;
        let one: libc::c_int = 1;
        // SAFETY: a live socket; the option value is a c_int on the stack with its size.
        let rc = unsafe {
            libc::setsockopt(
                s.as_raw_fd(),
                libc::SOL_SOCKET,
                SO_ZEROCOPY,
                (&one as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        (rc == 0).then(Self::default)
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
        let mut control = [0u64; 16];
        loop {
            // SAFETY: all-zero is a valid msghdr; it points at our control buffer only.
            let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
            msg.msg_control = control.as_mut_ptr().cast();
            msg.msg_controllen = std::mem::size_of_val(&control);
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
            // SAFETY: the kernel wrote msg_controllen bytes of control messages into
            // `control`; CMSG_FIRSTHDR/NXTHDR stay within them, and a RECVERR message's data
            // is a sock_extended_err, read unaligned.
            unsafe {
                let mut c = libc::CMSG_FIRSTHDR(&msg);
                while !c.is_null() {
                    let recverr = ((*c).cmsg_level == libc::SOL_IP
                        && (*c).cmsg_type == libc::IP_RECVERR)
                        || ((*c).cmsg_level == libc::SOL_IPV6
                            && (*c).cmsg_type == libc::IPV6_RECVERR);
                    if recverr {
                        let e: libc::sock_extended_err =
                            std::ptr::read_unaligned(libc::CMSG_DATA(c).cast());
                        if e.ee_errno == 0 && e.ee_origin == SO_EE_ORIGIN_ZEROCOPY {
                            // Sends ee_info ..= ee_data (a 32-bit counter) completed.
                            let n = u64::from(e.ee_data.wrapping_sub(e.ee_info)) + 1;
                            self.completed += n;
                            if e.ee_code & SO_EE_CODE_ZEROCOPY_COPIED != 0 {
                                self.copied += n;
                            }
                        }
                    }
                    c = libc::CMSG_NXTHDR(&msg, c);
                }
            }
        }
    }
}
