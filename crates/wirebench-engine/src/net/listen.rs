//! The server's listening sockets: one port's TCP listener and UDP socket, dual stack
//! unless told otherwise, and the UDP sockets each stream gets beside them.

use std::net::{SocketAddr, TcpListener, UdpSocket};

use socket2::{Domain, Socket, Type};

use super::shared::ServerConfig;
use crate::EngineError;

/// A socket of `addr`'s family. An IPv6 one takes IPv4 peers too (as `::ffff:a.b.c.d`)
/// unless `v6_only`: IPV6_V6ONLY is set either way, since the host's default
/// (net.ipv6.bindv6only) may be either.
fn socket(addr: SocketAddr, ty: Type, v6_only: bool) -> std::io::Result<Socket> {
    let s = Socket::new(Domain::for_address(addr), ty, None)?;
    if addr.is_ipv6() {
        s.set_only_v6(v6_only)?;
    }
    Ok(s)
}

/// A UDP socket bound to `addr` beside others on its port (SO_REUSEADDR, SO_REUSEPORT): the
/// port's hello socket and each stream's socket connected to its client.
pub(crate) fn reuse_port_udp(addr: SocketAddr, v6_only: bool) -> std::io::Result<Socket> {
    let s = socket(addr, Type::DGRAM, v6_only)?;
    s.set_reuse_address(true)?;
    s.set_reuse_port(true)?;
    s.bind(&addr.into())?;
    Ok(s)
}

/// The TCP listener and the UDP socket of one port on `addr` (port 0: a free one, the same
/// number for both). `flag` is the one that chooses the port, for the error.
pub(crate) fn listen(
    addr: SocketAddr,
    v6_only: bool,
    flag: &'static str,
) -> Result<(TcpListener, UdpSocket), EngineError> {
    let failed = |addr, udp, error| EngineError::Listen {
        addr,
        udp,
        flag,
        error,
    };
    let tcp = socket(addr, Type::STREAM, v6_only).map_err(|e| failed(addr, false, e))?;
    let _ = tcp.set_reuse_address(true);
    tcp.bind(&addr.into())
        .and_then(|()| tcp.listen(128))
        .map_err(|e| failed(addr, false, e))?;
    let listener: TcpListener = tcp.into();
    let bound = listener
        .local_addr()
        .map_err(|e| EngineError::io("reading the listening address", e))?;
    let udp = reuse_port_udp(bound, v6_only).map_err(|e| failed(bound, true, e))?;
    Ok((listener, udp.into()))
}

/// Where the server listens: `cfg.bind`, except that the IPv6 wildcard of a dual-stack
/// server on a host without IPv6 (`socket` fails with EAFNOSUPPORT) is the IPv4 one.
pub(super) fn listen_addr(cfg: &ServerConfig) -> SocketAddr {
    let dual_wildcard = cfg.bind.ip() == std::net::Ipv6Addr::UNSPECIFIED && !cfg.ipv6_only;
    let no_ipv6 = || {
        Socket::new(Domain::IPV6, Type::STREAM, None)
            .is_err_and(|e| e.raw_os_error() == Some(libc::EAFNOSUPPORT))
    };
    if dual_wildcard && no_ipv6() {
        return SocketAddr::new(std::net::Ipv4Addr::UNSPECIFIED.into(), cfg.bind.port());
    }
    cfg.bind
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv6Addr, TcpStream};

    fn wildcard() -> SocketAddr {
        SocketAddr::new(Ipv6Addr::UNSPECIFIED.into(), 0)
    }

    /// `[::]` takes IPv4 and IPv6 clients on TCP and UDP alike, and an IPv4 peer is its
    /// IPv4 address once made canonical; `v6_only` takes IPv6 alone.
    #[test]
    fn the_ipv6_wildcard_takes_both_families_unless_v6_only() {
        let (tcp, udp) = listen(wildcard(), false, "-p").expect("listen");
        let port = tcp.local_addr().expect("addr").port();
        assert_eq!(udp.local_addr().expect("udp addr").port(), port);
        for client in ["127.0.0.1", "::1"] {
            let ip: std::net::IpAddr = client.parse().expect("ip");
            let _c = TcpStream::connect((ip, port)).expect("connect");
            let (conn, _) = tcp.accept().expect("accept");
            let (peer, local) = crate::net::ends(&conn).expect("ends");
            assert_eq!((peer.ip(), local.ip()), (ip, ip), "{client}");
            let s = UdpSocket::bind((ip, 0)).expect("client udp");
            s.send_to(b"x", (ip, port)).expect("send");
            let mut buf = [0u8; 4];
            let (_, src) = udp.recv_from(&mut buf).expect("recv");
            assert_eq!(crate::net::canonical(src).ip(), ip, "{client}");
        }
        let (tcp, _udp) = listen(wildcard(), true, "-p").expect("listen");
        let port = tcp.local_addr().expect("addr").port();
        assert!(TcpStream::connect(("127.0.0.1", port)).is_err());
        assert!(TcpStream::connect(("::1", port)).is_ok());
    }

    /// A port in use names itself and the flag that picks another.
    #[test]
    fn a_port_in_use_names_the_flag() {
        let (tcp, _udp) =
            listen("127.0.0.1:0".parse().expect("addr"), false, "-p").expect("listen");
        let taken = tcp.local_addr().expect("addr");
        let Err(e) = listen(taken, false, "--iperf3-port") else {
            panic!("listened twice on {taken}");
        };
        assert_eq!(
            e.to_string(),
            format!("cannot listen on {taken} (port in use): choose another with --iperf3-port")
        );
    }
}
