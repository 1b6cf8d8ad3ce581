//! Route netlink, synchronously: the few requests the lab makes (veth pairs, links up,
//! addresses, routes), built with `netlink-packet-route` and sent over a `netlink-sys`
//! socket. A socket belongs to the network namespace of the thread that opened it.

use std::io;
use std::net::Ipv4Addr;
use std::os::fd::{AsRawFd, BorrowedFd};

use netlink_packet_core::{
    NetlinkHeader, NetlinkMessage, NetlinkPayload, NLM_F_ACK, NLM_F_CREATE, NLM_F_EXCL,
    NLM_F_REQUEST,
};
use netlink_packet_route::address::{AddressAttribute, AddressMessage};
use netlink_packet_route::link::{
    InfoData, InfoKind, InfoVeth, LinkAttribute, LinkFlags, LinkInfo, LinkMessage,
};
use netlink_packet_route::route::{
    RouteAddress, RouteAttribute, RouteMessage, RouteProtocol, RouteScope, RouteType,
};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};
use netlink_sys::{protocols::NETLINK_ROUTE, Socket, SocketAddr};

/// A route netlink socket in the namespace it was opened in.
pub struct Rtnl {
    sock: Socket,
    seq: u32,
    buf: Vec<u8>,
}

impl Rtnl {
    /// Opens a socket in the calling thread's network namespace.
    pub fn open() -> io::Result<Self> {
        let mut sock = Socket::new(NETLINK_ROUTE)?;
        sock.bind_auto()?;
        sock.connect(&SocketAddr::new(0, 0))?;
        Ok(Self {
            sock,
            seq: 0,
            buf: vec![0; 16 * 1024],
        })
    }

    /// Sends one request and waits for its acknowledgement.
    fn request(&mut self, msg: RouteNetlinkMessage, what: &str) -> io::Result<()> {
        let mut hdr = NetlinkHeader::default();
        hdr.flags = NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL;
        self.seq += 1;
        hdr.sequence_number = self.seq;
        let mut msg = NetlinkMessage::new(hdr, NetlinkPayload::from(msg));
        msg.finalize();
        let len = msg.buffer_len();
        let mut out = vec![0; len];
        msg.serialize(&mut out);
        self.sock.send(&out, 0)?;
        loop {
            let n = self.sock.recv(&mut &mut self.buf[..], 0)?;
            let mut off = 0;
            while off < n {
                let reply =
                    NetlinkMessage::<RouteNetlinkMessage>::deserialize(&self.buf[off..n])
                        .map_err(|e| io::Error::other(format!("netlink reply to {what}: {e}")))?;
                let step = reply.header.length as usize;
                if reply.header.sequence_number == self.seq {
                    if let NetlinkPayload::Error(e) = reply.payload {
                        return match e.code {
                            None => Ok(()),
                            Some(_) => {
                                let err = e.to_io();
                                Err(io::Error::new(err.kind(), format!("{what}: {err}")))
                            }
                        };
                    }
                }
                if step == 0 {
                    break;
                }
                off += step;
            }
        }
    }

    /// Makes a veth pair: `name` here, `peer` in the network namespace `peer_ns`.
    pub fn add_veth(&mut self, name: &str, peer: &str, peer_ns: BorrowedFd<'_>) -> io::Result<()> {
        let mut peer_msg = LinkMessage::default();
        peer_msg
            .attributes
            .push(LinkAttribute::IfName(peer.to_owned()));
        peer_msg
            .attributes
            .push(LinkAttribute::NetNsFd(peer_ns.as_raw_fd()));
        let mut msg = LinkMessage::default();
        msg.attributes.push(LinkAttribute::IfName(name.to_owned()));
        msg.attributes.push(LinkAttribute::LinkInfo(vec![
            LinkInfo::Kind(InfoKind::Veth),
            LinkInfo::Data(InfoData::Veth(InfoVeth::Peer(peer_msg))),
        ]));
        self.request(
            RouteNetlinkMessage::NewLink(msg),
            &format!("creating veth {name}/{peer}"),
        )
    }

    /// Sets interface `index` up.
    pub fn set_up(&mut self, index: u32) -> io::Result<()> {
        let mut msg = LinkMessage::default();
        msg.header.index = index;
        msg.header.flags = LinkFlags::Up;
        msg.header.change_mask = LinkFlags::Up;
        self.request(
            RouteNetlinkMessage::SetLink(msg),
            &format!("setting interface {index} up"),
        )
    }

    /// Gives interface `index` the address `addr/prefix`.
    pub fn add_address(&mut self, index: u32, addr: Ipv4Addr, prefix: u8) -> io::Result<()> {
        let mut msg = AddressMessage::default();
        msg.header.family = AddressFamily::Inet;
        msg.header.prefix_len = prefix;
        msg.header.index = index;
        msg.attributes.push(AddressAttribute::Local(addr.into()));
        msg.attributes.push(AddressAttribute::Address(addr.into()));
        self.request(
            RouteNetlinkMessage::NewAddress(msg),
            &format!("adding address {addr}/{prefix}"),
        )
    }

    /// Routes `dst/prefix` through `gateway`.
    pub fn add_route(&mut self, dst: Ipv4Addr, prefix: u8, gateway: Ipv4Addr) -> io::Result<()> {
        let mut msg = RouteMessage::default();
        msg.header.address_family = AddressFamily::Inet;
        msg.header.destination_prefix_length = prefix;
        msg.header.table = 254; // main
        msg.header.protocol = RouteProtocol::Static;
        msg.header.scope = RouteScope::Universe;
        msg.header.kind = RouteType::Unicast;
        msg.attributes
            .push(RouteAttribute::Destination(RouteAddress::Inet(dst)));
        msg.attributes
            .push(RouteAttribute::Gateway(RouteAddress::Inet(gateway)));
        self.request(
            RouteNetlinkMessage::NewRoute(msg),
            &format!("adding route {dst}/{prefix} via {gateway}"),
        )
    }

    /// Routes `dst/prefix` straight out of interface `index` (no gateway): how the host's
    /// kernel reaches a user-space stack on a TUN device.
    pub fn add_device_route(&mut self, dst: Ipv4Addr, prefix: u8, index: u32) -> io::Result<()> {
        let mut msg = RouteMessage::default();
        msg.header.address_family = AddressFamily::Inet;
        msg.header.destination_prefix_length = prefix;
        msg.header.table = 254; // main
        msg.header.protocol = RouteProtocol::Static;
        msg.header.scope = RouteScope::Link;
        msg.header.kind = RouteType::Unicast;
        msg.attributes
            .push(RouteAttribute::Destination(RouteAddress::Inet(dst)));
        msg.attributes.push(RouteAttribute::Oif(index));
        self.request(
            RouteNetlinkMessage::NewRoute(msg),
            &format!("adding route {dst}/{prefix} to interface {index}"),
        )
    }
}
