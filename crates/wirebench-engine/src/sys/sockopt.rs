//! Socket options: the one `getsockopt(2)`/`setsockopt(2)` pair every option goes through,
//! and the socket buffers asked for and granted.
#![allow(unsafe_code)]

use std::io;
use std::mem;
use std::os::fd::AsRawFd;

use socket2::SockRef;

/// An option value the kernel reads or writes as plain bytes.
///
/// # Safety
///
/// Implementors are plain C data (integers, arrays and structs of them, no pointers, no
/// padding invariants): all-zero bytes are a valid value, and so is any value the kernel
/// writes into them.
pub(super) unsafe trait OptValue: Copy {}

// SAFETY: a C int is plain data; every bit pattern is valid.
unsafe impl OptValue for libc::c_int {}

// SAFETY: `struct tcp_info` holds only integer fields.
unsafe impl OptValue for libc::tcp_info {}

/// The size of `T` as the kernel wants it.
fn opt_len<T>() -> libc::socklen_t {
    mem::size_of::<T>() as libc::socklen_t
}

/// Sets option `name` at `level` of `sock` to `value`.
pub(super) fn set<T: OptValue>(
    sock: &impl AsRawFd,
    level: libc::c_int,
    name: libc::c_int,
    value: &T,
) -> io::Result<()> {
    // SAFETY: the fd is a live socket owned by `sock`; `value` is valid for reads of
    // `size_of::<T>()` bytes during the call, and that is the length passed.
    let rc = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            level,
            name,
            (value as *const T).cast(),
            opt_len::<T>(),
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Reads option `name` at `level` of `sock`. A kernel that knows a shorter version of `T`
/// (an older `tcp_info`) writes less: the rest stays zero.
pub(super) fn get<T: OptValue>(
    sock: &impl AsRawFd,
    level: libc::c_int,
    name: libc::c_int,
) -> io::Result<T> {
    // SAFETY: all-zero bytes are a valid `T` (the `OptValue` contract).
    let mut value: T = unsafe { mem::zeroed() };
    let mut len = opt_len::<T>();
    // SAFETY: `value` and `len` are valid for writes of their sizes; the kernel writes at
    // most `len` bytes into `value` and sets `len` to what it wrote.
    let rc = unsafe {
        libc::getsockopt(
            sock.as_raw_fd(),
            level,
            name,
            (&mut value as *mut T).cast(),
            &mut len,
        )
    };
    if rc == 0 {
        Ok(value)
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Socket buffer size asked for on data sockets. The kernel caps it at
/// `net.core.{r,w}mem_max`; the granted size is read back and recorded.
pub const DATA_BUFFER_BYTES: usize = 4 * 1024 * 1024;

/// Asks for socket buffers of `bytes` ([`DATA_BUFFER_BYTES`] unless the test says) and
/// returns the (send, receive) sizes granted.
pub fn size_buffers(sock: SockRef<'_>, bytes: usize) -> (u64, u64) {
    // A refusal here is not fatal: the granted size, whatever it is, goes into the results.
    let _ = sock.set_send_buffer_size(bytes);
    let _ = sock.set_recv_buffer_size(bytes);
    (
        sock.send_buffer_size().unwrap_or(0) as u64,
        sock.recv_buffer_size().unwrap_or(0) as u64,
    )
}

/// Caps the kernel's pacing of what `sock` sends at `bytes_per_s` (`SO_MAX_PACING_RATE`,
/// as iperf3's `--fq-rate` sets it: TCP paces by it itself, other sockets under the `fq`
/// qdisc), saturating at the 32-bit value every kernel takes.
pub fn set_max_pacing_rate(sock: &impl AsRawFd, bytes_per_s: u64) -> io::Result<()> {
    // The kernel reads the int's bits as an unsigned 32-bit rate (~0U: no cap).
    let rate = bytes_per_s.min(u64::from(u32::MAX)) as u32 as libc::c_int;
    set(sock, libc::SOL_SOCKET, libc::SO_MAX_PACING_RATE, &rate)
}

/// Sets the don't-fragment bit on what a UDP socket sends (`IP_PMTUDISC_DO`, IPv6's
/// `IPV6_PMTUDISC_DO`), as iperf3's `--dont-fragment`: a datagram over the path's MTU is
/// refused by the kernel, never fragmented.
pub fn set_dont_fragment(sock: &impl AsRawFd, ipv6: bool) -> io::Result<()> {
    if ipv6 {
        set(
            sock,
            libc::IPPROTO_IPV6,
            libc::IPV6_MTU_DISCOVER,
            &libc::IPV6_PMTUDISC_DO,
        )
    } else {
        set(
            sock,
            libc::IPPROTO_IP,
            libc::IP_MTU_DISCOVER,
            &libc::IP_PMTUDISC_DO,
        )
    }
}

/// The MTU the kernel knows for the path of a connected socket (`IP_MTU`, IPv6's
/// `IPV6_MTU`): its route's, or less where the path said so (an ICMP "too big").
pub fn path_mtu(sock: &impl AsRawFd, ipv6: bool) -> io::Result<u32> {
    let mtu: libc::c_int = if ipv6 {
        get(sock, libc::IPPROTO_IPV6, libc::IPV6_MTU)?
    } else {
        get(sock, libc::IPPROTO_IP, libc::IP_MTU)?
    };
    u32::try_from(mtu).map_err(|_| io::ErrorKind::InvalidData.into())
}

/// The kernel's caps on the socket buffers a process may ask for (`net.core.rmem_max`,
/// `net.core.wmem_max`); a cap that cannot be read is unknown (none).
pub(crate) fn socket_caps() -> crate::control::memory::SocketCaps {
    let read = |name: &str| {
        std::fs::read_to_string(format!("/proc/sys/net/core/{name}"))
            .ok()
            .and_then(|v| v.trim().parse::<u64>().ok())
    };
    crate::control::memory::SocketCaps {
        receive_max: read("rmem_max"),
        send_max: read("wmem_max"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_int_option_reads_back_what_was_set() {
        let s = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind");
        set(&s, libc::SOL_SOCKET, libc::SO_REUSEADDR, &1).expect("set");
        let v: libc::c_int = get(&s, libc::SOL_SOCKET, libc::SO_REUSEADDR).expect("get");
        assert_eq!(v, 1);
        assert!(get::<libc::c_int>(&s, libc::SOL_SOCKET, -1).is_err());
    }

    #[test]
    fn a_connected_socket_knows_its_path_mtu_and_an_unconnected_one_does_not() {
        let s = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind");
        assert!(path_mtu(&s, false).is_err());
        s.connect("127.0.0.1:9").expect("connect");
        let lo: u32 = std::fs::read_to_string("/sys/class/net/lo/mtu")
            .expect("lo's MTU")
            .trim()
            .parse()
            .expect("a number");
        // An IP packet's length is 16 bits: loopback's 65536 reads as 65535.
        assert_eq!(path_mtu(&s, false).expect("IP_MTU"), lo.min(65535));
    }
}
