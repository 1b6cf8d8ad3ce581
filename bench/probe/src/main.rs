//! The limit probe of `bench/bench.py`: the simplest program that can move the bytes over
//! loopback, so that wirebench's figures (and its peers') are also read as a fraction of
//! what this machine moves at all in the same minutes.
//!
//! - TCP: one connection, the sender writes 1 MiB per call, the receiver reads 1 MiB per
//!   call; kernel default buffers (autotuning), no options.
//! - UDP: the sender sends one `sendmsg` per GSO batch (`UDP_SEGMENT`, up to 64 datagrams of
//!   SIZE bytes, at most 65,000 payload bytes), the receiver reads one GRO batch (`UDP_GRO`)
//!   per `recvmsg` into 64 KiB; both sockets ask for 4 MiB buffers, as wirebench does.
//!
//! Each end is its own process, so the bench can count the CPU time of both. A receiver binds
//! an ephemeral loopback port and prints `ready PORT` before it waits; every end prints one
//! JSON line of counts when it is done.
//!
//! ```text
//! probe tcp-recv                 probe tcp-send PORT SECONDS
//! probe udp-recv                 probe udp-send PORT SIZE SECONDS
//! ```
#![deny(clippy::undocumented_unsafe_blocks)]

use std::io::{self, Read, Write};
use std::net::{TcpListener, TcpStream, UdpSocket};
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// Bytes per TCP read or write call.
const TCP_CALL: usize = 1 << 20;
/// Most datagrams in one GSO send (the kernel's `UDP_MAX_SEGMENTS` on older kernels).
const MAX_SEGMENTS: usize = 64;
/// Most payload bytes in one GSO send: it must fit one UDP length before it is cut.
const GSO_MAX_BYTES: usize = 65_000;
/// A receive buffer that holds the largest GRO batch.
const SLOT: usize = 65_536;
/// The socket buffers the UDP ends ask for (wirebench asks for the same).
const UDP_BUFFER: libc::c_int = 4 << 20;
/// How long a UDP receiver waits for the first datagram, and then for the end marker after
/// the data stops (the marker can be lost to a full receive queue).
const UDP_FIRST_WAIT: Duration = Duration::from_secs(10);
const UDP_IDLE_END: Duration = Duration::from_secs(2);

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let result = match args.as_slice() {
        ["tcp-recv"] => tcp_recv(),
        ["tcp-send", port, secs] => parse(port).and_then(|p| tcp_send(p, seconds(secs)?)),
        ["udp-recv"] => udp_recv(),
        ["udp-send", port, size, secs] => {
            (|| udp_send(parse(port)?, parse(size)?, seconds(secs)?))()
        }
        _ => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "usage: probe tcp-recv | tcp-send PORT SECONDS | udp-recv | udp-send PORT SIZE SECONDS",
        )),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("probe: {e}");
            ExitCode::FAILURE
        }
    }
}

fn parse<T: std::str::FromStr>(s: &str) -> io::Result<T> {
    s.parse()
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, format!("not a number: {s}")))
}

fn seconds(s: &str) -> io::Result<Duration> {
    let v: f64 = parse(s)?;
    Duration::try_from_secs_f64(v)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, format!("bad seconds: {s}")))
}

/// Tells the bench where to connect, before the receiver blocks.
fn ready(port: u16) -> io::Result<()> {
    let mut out = io::stdout().lock();
    writeln!(out, "ready {port}")?;
    out.flush()
}

fn tcp_recv() -> io::Result<()> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    ready(listener.local_addr()?.port())?;
    let (mut conn, _) = listener.accept()?;
    let mut buf = vec![0u8; TCP_CALL];
    let (mut bytes, mut calls) = (0u64, 0u64);
    let mut first = None;
    loop {
        let n = match conn.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        first.get_or_insert_with(Instant::now);
        bytes += n as u64;
        calls += 1;
    }
    // First byte to end of stream: the span wirebench's receiver reports too.
    let secs = first.map_or(0.0, |t| t.elapsed().as_secs_f64());
    println!(r#"{{"bytes":{bytes},"seconds":{secs:.6},"calls":{calls}}}"#);
    Ok(())
}

fn tcp_send(port: u16, duration: Duration) -> io::Result<()> {
    let mut conn = TcpStream::connect(("127.0.0.1", port))?;
    let buf = vec![0u8; TCP_CALL];
    let (mut bytes, mut calls) = (0u64, 0u64);
    let start = Instant::now();
    while start.elapsed() < duration {
        match conn.write(&buf) {
            Ok(n) => bytes += n as u64,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
        calls += 1;
    }
    drop(conn);
    let secs = start.elapsed().as_secs_f64();
    println!(r#"{{"bytes":{bytes},"seconds":{secs:.6},"calls":{calls}}}"#);
    Ok(())
}

fn udp_recv() -> io::Result<()> {
    let sock = UdpSocket::bind("127.0.0.1:0")?;
    sys::set_int(&sock, libc::SOL_SOCKET, libc::SO_RCVBUF, UDP_BUFFER)?;
    sys::set_int(&sock, libc::SOL_UDP, libc::UDP_GRO, 1)?;
    sock.set_read_timeout(Some(UDP_FIRST_WAIT))?;
    ready(sock.local_addr()?.port())?;
    let mut buf = vec![0u8; SLOT];
    let (mut bytes, mut datagrams, mut calls) = (0u64, 0u64, 0u64);
    let mut span: Option<(Instant, Instant)> = None;
    loop {
        let (n, seg) = match sys::recv_gro(&sock, &mut buf) {
            Ok(got) => got,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            // No data for UDP_IDLE_END after it flowed: the marker was lost, the sender is
            // done all the same.
            Err(e) if is_timeout(&e) && span.is_some() => break,
            Err(e) => return Err(e),
        };
        // The end marker: an empty datagram, sent from another socket so GRO never joins it
        // to the data.
        if n == 0 {
            break;
        }
        let now = Instant::now();
        match &mut span {
            Some((_, last)) => *last = now,
            None => {
                span = Some((now, now));
                sock.set_read_timeout(Some(UDP_IDLE_END))?;
            }
        }
        bytes += n as u64;
        datagrams += seg.map_or(1, |s| n.div_ceil(s.max(1))) as u64;
        calls += 1;
    }
    let secs = span.map_or(0.0, |(a, b)| (b - a).as_secs_f64());
    println!(r#"{{"bytes":{bytes},"datagrams":{datagrams},"seconds":{secs:.6},"calls":{calls}}}"#);
    Ok(())
}

fn is_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    )
}

fn udp_send(port: u16, size: usize, duration: Duration) -> io::Result<()> {
    if size == 0 || size > GSO_MAX_BYTES {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "size must be 1 to 65000",
        ));
    }
    let sock = UdpSocket::bind("127.0.0.1:0")?;
    sys::set_int(&sock, libc::SOL_SOCKET, libc::SO_SNDBUF, UDP_BUFFER)?;
    sock.connect(("127.0.0.1", port))?;
    let segs = (GSO_MAX_BYTES / size).clamp(1, MAX_SEGMENTS);
    let buf = vec![0u8; segs * size];
    let seg = u16::try_from(size).map_err(|_| io::Error::other("size"))?;
    let (mut datagrams, mut calls, mut refused) = (0u64, 0u64, 0u64);
    let start = Instant::now();
    while start.elapsed() < duration {
        match sys::send_gso(&sock, &buf, seg) {
            Ok(n) => datagrams += (n / size) as u64,
            // A full device queue or a signal: the datagrams were not sent, try again.
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::ENOBUFS | libc::EAGAIN | libc::EINTR)
                ) => {}
            // An ICMP port unreachable from an earlier datagram: counted, not fatal.
            Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => refused += 1,
            Err(e) => return Err(e),
        }
        calls += 1;
    }
    let secs = start.elapsed().as_secs_f64();
    // The end marker, from another socket (another flow, which GRO never merges with the
    // data), a few times over in case the receive queue is still full.
    let marker = UdpSocket::bind("127.0.0.1:0")?;
    for _ in 0..3 {
        let _ = marker.send_to(&[], ("127.0.0.1", port));
        std::thread::sleep(Duration::from_millis(20));
    }
    let bytes = datagrams * size as u64;
    println!(
        r#"{{"bytes":{bytes},"datagrams":{datagrams},"seconds":{secs:.6},"calls":{calls},"refused":{refused}}}"#
    );
    Ok(())
}

/// The three calls std does not offer: an int socket option, a GSO send, a GRO receive.
mod sys {
    use std::io;
    use std::mem;
    use std::net::UdpSocket;
    use std::os::fd::AsRawFd;

    /// Room for one control message holding an int.
    const CMSG_ROOM: usize = 64;

    pub fn set_int(
        sock: &UdpSocket,
        level: libc::c_int,
        name: libc::c_int,
        value: libc::c_int,
    ) -> io::Result<()> {
        // SAFETY: the pointer and length describe `value`, which lives across the call.
        let rc = unsafe {
            libc::setsockopt(
                sock.as_raw_fd(),
                level,
                name,
                (&value as *const libc::c_int).cast(),
                mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if rc == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }

    /// Sends `buf` as one message that the kernel cuts into `seg`-byte datagrams.
    pub fn send_gso(sock: &UdpSocket, buf: &[u8], seg: u16) -> io::Result<usize> {
        let mut iov = libc::iovec {
            iov_base: buf.as_ptr() as *mut libc::c_void,
            iov_len: buf.len(),
        };
        let mut control = [0u64; CMSG_ROOM / 8];
        // SAFETY: msghdr is plain data; all-zero is a valid empty header.
        let mut msg: libc::msghdr = unsafe { mem::zeroed() };
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr().cast();
        // SAFETY: CMSG_SPACE only computes a size.
        msg.msg_controllen = unsafe { libc::CMSG_SPACE(mem::size_of::<u16>() as u32) } as _;
        // SAFETY: msg_control points at `control`, which is 8-aligned and larger than
        // CMSG_SPACE(2), so the first header and its data lie inside it.
        unsafe {
            let c = libc::CMSG_FIRSTHDR(&msg);
            (*c).cmsg_level = libc::SOL_UDP;
            (*c).cmsg_type = libc::UDP_SEGMENT;
            (*c).cmsg_len = libc::CMSG_LEN(mem::size_of::<u16>() as u32) as _;
            std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<u16>(), seg);
        }
        // SAFETY: msg and everything it points to (iov, buf, control) live across the call;
        // the kernel only reads them.
        let n = unsafe { libc::sendmsg(sock.as_raw_fd(), &msg, 0) };
        if n < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(n as usize)
        }
    }

    /// Receives one datagram or GRO batch; returns its length and, for a batch, the size of
    /// its datagrams (all but the last are exactly that size).
    pub fn recv_gro(sock: &UdpSocket, buf: &mut [u8]) -> io::Result<(usize, Option<usize>)> {
        let mut iov = libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: buf.len(),
        };
        let mut control = [0u64; CMSG_ROOM / 8];
        // SAFETY: msghdr is plain data; all-zero is a valid empty header.
        let mut msg: libc::msghdr = unsafe { mem::zeroed() };
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = CMSG_ROOM as _;
        // SAFETY: msg points at `iov` (describing `buf`) and `control`, all live and writable
        // across the call, with their true lengths.
        let n = unsafe { libc::recvmsg(sock.as_raw_fd(), &mut msg, 0) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        let mut seg = None;
        // SAFETY: the kernel filled msg_control up to msg_controllen; CMSG_FIRSTHDR and
        // CMSG_NXTHDR stay inside it and the data is read unaligned.
        unsafe {
            let mut c = libc::CMSG_FIRSTHDR(&msg);
            while !c.is_null() {
                if (*c).cmsg_level == libc::SOL_UDP && (*c).cmsg_type == libc::UDP_GRO {
                    let v = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<libc::c_int>());
                    seg = usize::try_from(v).ok();
                }
                c = libc::CMSG_NXTHDR(&msg, c);
            }
        }
        Ok((n as usize, seg))
    }
}
