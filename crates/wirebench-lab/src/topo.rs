//! A running emulated network: nodes (hosts and routers) in network namespaces of their
//! own, joined by emulated links.
//!
//! Each link `i` between nodes A and B is two veth pairs that meet in a hidden core
//! namespace, where the emulator forwards frames between them through the link model:
//!
//! ```text
//!  A: ethK 10.77.i.1/24 ══ veth ══ core: li a ─► link model a→b ─► li b ══ veth ══ B: ethM 10.77.i.2/24
//!                                          ◄─ link model b→a ◄─
//! ```
//!
//! Where packet sockets take `PACKET_VNET_HDR`, the interfaces keep their offloads (TSO, UDP
//! GSO, checksums) and the emulator reads GSO frames whole, charging the link per wire
//! packet inside them ([`crate::gso`]); with [`Topology::no_offload`], or where the kernel
//! lacks it, every interface has its offloads off, so a frame the emulator reads is one
//! real packet.
//! Nodes with more than one link forward IPv4; every node gets a route to every subnet it
//! is not on, through its neighbour on a shortest path. IPv6 is off, so nothing but the
//! tests' own traffic (and ARP) crosses the links.

use std::collections::VecDeque;
use std::io;
use std::net::Ipv4Addr;
use std::os::fd::{AsFd, AsRawFd};
use std::process::Command;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use wirebench_proto::link_log::{LinkLog, LinkTrace};

use crate::emu::{Direction, DirectionReport};
use crate::link::LinkConfig;
use crate::netns::NetNs;
use crate::rtnl::Rtnl;
use crate::sys;

/// One node of a topology.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeSpec {
    /// Its name, unique in the topology.
    pub name: String,
}

/// One link of a topology, between nodes `a` and `b` (indices into the node list).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LinkSpec {
    /// One end.
    pub a: usize,
    /// The other end.
    pub b: usize,
    /// The direction a → b ("up").
    pub up: LinkConfig,
    /// The direction b → a ("down").
    pub down: LinkConfig,
}

/// Nodes and the links between them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Topology {
    /// The nodes.
    pub nodes: Vec<NodeSpec>,
    /// The links.
    pub links: Vec<LinkSpec>,
    /// Offloads off on every interface, so that each frame is one wire packet (as before
    /// the emulator read GSO frames): slower, for comparison.
    #[serde(default)]
    pub no_offload: bool,
}

/// Most links in one topology: each has its own /24 in 10.77.0.0/16.
pub const MAX_LINKS: usize = 256;

/// A topology that cannot be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TopologyError {
    /// More links than addresses for them.
    #[error("at most {MAX_LINKS} links")]
    TooManyLinks,
    /// Two nodes share a name, or one has none.
    #[error("node name {0:?} is empty or used twice")]
    NodeName(String),
    /// A link to a node that does not exist, or to itself.
    #[error("a link must join two different nodes")]
    LinkEnds,
}

impl Topology {
    /// One link between a client host (10.77.0.1) and a server host (10.77.0.2).
    pub fn pair(up: LinkConfig, down: LinkConfig) -> Self {
        Self {
            nodes: vec![
                NodeSpec {
                    name: "client".into(),
                },
                NodeSpec {
                    name: "server".into(),
                },
            ],
            links: vec![LinkSpec {
                a: 0,
                b: 1,
                up,
                down,
            }],
            no_offload: false,
        }
    }

    /// Each link's name, `a-b` from its ends' names (`client-server` on one link).
    pub fn link_names(&self) -> Vec<String> {
        self.links
            .iter()
            .map(|l| {
                let name = |n: usize| self.nodes.get(n).map_or("?", |n| n.name.as_str());
                format!("{}-{}", name(l.a), name(l.b))
            })
            .collect()
    }

    /// The index of node `name`.
    pub fn node(&self, name: &str) -> Option<usize> {
        self.nodes.iter().position(|n| n.name == name)
    }

    /// The address of `node` on link `link` (which it must be an end of).
    pub fn address(&self, link: usize, node: usize) -> Ipv4Addr {
        let host = if self.links[link].a == node { 1 } else { 2 };
        Ipv4Addr::new(10, 77, link as u8, host)
    }

    /// A node's main address: the one on its first link.
    pub fn node_address(&self, node: usize) -> Option<Ipv4Addr> {
        let link = self.links.iter().position(|l| l.a == node || l.b == node)?;
        Some(self.address(link, node))
    }

    /// The links of `node`, in order, with the node at their other end.
    fn neighbours(&self, node: usize) -> impl Iterator<Item = (usize, usize)> + '_ {
        self.links.iter().enumerate().filter_map(move |(i, l)| {
            if l.a == node {
                Some((i, l.b))
            } else if l.b == node {
                Some((i, l.a))
            } else {
                None
            }
        })
    }

    /// Checks names, indices and size.
    ///
    /// # Errors
    ///
    /// A one-line description of the first problem.
    pub fn validate(&self) -> Result<(), TopologyError> {
        if self.links.len() > MAX_LINKS {
            return Err(TopologyError::TooManyLinks);
        }
        for (i, n) in self.nodes.iter().enumerate() {
            if n.name.is_empty() || self.nodes[..i].iter().any(|m| m.name == n.name) {
                return Err(TopologyError::NodeName(n.name.clone()));
            }
        }
        for l in &self.links {
            if l.a >= self.nodes.len() || l.b >= self.nodes.len() || l.a == l.b {
                return Err(TopologyError::LinkEnds);
            }
        }
        Ok(())
    }

    /// For `from`, the routes it needs: (subnet of link j, gateway), for every link it is
    /// not an end of and can reach, through its neighbour on a shortest path.
    pub fn routes(&self, from: usize) -> Vec<(Ipv4Addr, Ipv4Addr)> {
        // Breadth-first search, remembering the first hop: (link, neighbour).
        let mut first: Vec<Option<(usize, usize)>> = vec![None; self.nodes.len()];
        let mut seen = vec![false; self.nodes.len()];
        seen[from] = true;
        let mut queue = VecDeque::new();
        for (link, n) in self.neighbours(from) {
            if !seen[n] {
                seen[n] = true;
                first[n] = Some((link, n));
                queue.push_back(n);
            }
        }
        while let Some(m) = queue.pop_front() {
            for (_, n) in self.neighbours(m) {
                if !seen[n] {
                    seen[n] = true;
                    first[n] = first[m];
                    queue.push_back(n);
                }
            }
        }
        let mut routes = Vec::new();
        for (j, l) in self.links.iter().enumerate() {
            if l.a == from || l.b == from {
                continue;
            }
            // Towards either end: from there the subnet is on the wire.
            let hop = first[l.a].or(first[l.b]);
            if let Some((link, neighbour)) = hop {
                routes.push((
                    Ipv4Addr::new(10, 77, j as u8, 0),
                    self.address(link, neighbour),
                ));
            }
        }
        routes
    }
}

/// What one link did, both directions.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct LinkReport {
    /// a → b.
    pub up: DirectionReport,
    /// b → a.
    pub down: DirectionReport,
}

/// A built, running network. Dropping it stops the emulator and closes the namespaces;
/// they vanish once no process runs in them.
pub struct Lab {
    nodes: Vec<NetNs>,
    links: Vec<(Direction, Direction)>,
    /// Each link's name in logs: its ends, `a-b`.
    names: Vec<String>,
    log_ns: u64,
    // Held so the core namespace lives; the emulator's sockets are in it.
    _core: NetNs,
}

fn ipv6_off(ns: &NetNs) -> io::Result<()> {
    if std::path::Path::new("/proc/sys/net/ipv6").exists() {
        ns.sysctl("net/ipv6/conf/all/disable_ipv6", "1")?;
        ns.sysctl("net/ipv6/conf/default/disable_ipv6", "1")?;
    }
    Ok(())
}

impl Lab {
    /// Builds `topo`: namespaces, veth pairs, addresses, routes, forwarding, and the
    /// emulator threads.
    ///
    /// # Errors
    ///
    /// Any refused set-up step, named; whatever was made so far is undone.
    pub fn build(topo: &Topology) -> io::Result<Self> {
        Self::build_logged(topo, 0)
    }

    /// As [`build`](Self::build), and the emulator also logs what each link does in
    /// intervals of `interval_ns` (0: no log); [`stop_logged`](Self::stop_logged) gives it.
    ///
    /// # Errors
    ///
    /// As [`build`](Self::build).
    pub fn build_logged(topo: &Topology, interval_ns: u64) -> io::Result<Self> {
        topo.validate().map_err(io::Error::other)?;
        let core = NetNs::new()?;
        // A link that treats each wire packet apart (an AQM, netem's reorder, duplicate or
        // corrupt) needs each frame to be one: offloads off, for the whole lab.
        let per_packet = topo
            .links
            .iter()
            .any(|l| l.up.per_packet() || l.down.per_packet());
        let ecn = topo.links.iter().any(|l| {
            [&l.up, &l.down]
                .iter()
                .any(|c| c.queues_packets() && c.aqm.as_ref().is_some_and(|a| a.ecn))
        });
        let offload =
            !topo.no_offload && !per_packet && core.run(|| Ok(sys::vnet_hdr_supported()))?;
        ipv6_off(&core)?;
        let mut nodes = Vec::with_capacity(topo.nodes.len());
        for _ in &topo.nodes {
            let ns = NetNs::new()?;
            ipv6_off(&ns)?;
            nodes.push(ns);
        }
        // veth pairs: core `l{i}a` / node A `eth{k}`, core `l{i}b` / node B `eth{m}`.
        let mut eth_count = vec![0usize; topo.nodes.len()];
        let mut ends = Vec::new(); // (link, node, core name, node name)
        for (i, l) in topo.links.iter().enumerate() {
            for (side, node) in [("a", l.a), ("b", l.b)] {
                let eth = format!("eth{}", eth_count[node]);
                eth_count[node] += 1;
                ends.push((i, node, format!("l{i}{side}"), eth));
            }
        }
        core.run(|| {
            let mut nl = Rtnl::open()?;
            for (_, node, core_name, eth) in &ends {
                nl.add_veth(core_name, eth, nodes[*node].as_fd())?;
                if !offload {
                    sys::offloads_off(core_name)?;
                }
                nl.set_up(sys::if_index(core_name)?)?;
            }
            Ok(())
        })?;
        for (n, ns) in nodes.iter().enumerate() {
            let mine: Vec<_> = ends.iter().filter(|e| e.1 == n).collect();
            let routes = topo.routes(n);
            ns.run(|| {
                let mut nl = Rtnl::open()?;
                nl.set_up(sys::if_index("lo")?)?;
                for (link, node, _, eth) in &mine {
                    if !offload {
                        sys::offloads_off(eth)?;
                    }
                    let index = sys::if_index(eth)?;
                    nl.add_address(index, topo.address(*link, *node), 24)?;
                    nl.set_up(index)?;
                }
                for (dst, gw) in &routes {
                    nl.add_route(*dst, 24, *gw)?;
                }
                Ok(())
            })?;
            if mine.len() > 1 {
                ns.sysctl("net/ipv4/ip_forward", "1")?;
            }
            // A link that marks ECN-capable packets: the hosts' TCP asks for ECN on the
            // connections it opens (Linux's default, 2, only answers a peer that asks).
            if ecn {
                ns.sysctl("net/ipv4/tcp_ecn", "1")?;
            }
        }
        let mut links = Vec::with_capacity(topo.links.len());
        // One clock origin for every direction, so that their logs line up.
        let base = std::time::Instant::now();
        for (i, l) in topo.links.iter().enumerate() {
            let (a, b) = core.run(|| {
                let a = sys::packet_socket(sys::if_index(&format!("l{i}a"))?)?;
                let b = sys::packet_socket(sys::if_index(&format!("l{i}b"))?)?;
                // Room for a stall of the emulator's thread: 32 MiB holds about 140 ms of
                // full-size frames at 1 Gbit/s (each costs its skb's truesize, ~2.3 KiB).
                for s in [&a, &b] {
                    sys::force_buffers(s.as_fd(), 32 << 20);
                    if offload {
                        sys::vnet_hdr(s.as_fd())?;
                    }
                }
                Ok((Arc::new(a), Arc::new(b)))
            })?;
            let up = Direction::start(
                format!("link{i}-up"),
                a.clone(),
                b.clone(),
                l.up.clone(),
                base,
                interval_ns,
                offload,
            )?;
            let down = Direction::start(
                format!("link{i}-down"),
                b,
                a,
                l.down.clone(),
                base,
                interval_ns,
                offload,
            )?;
            links.push((up, down));
        }
        Ok(Self {
            nodes,
            links,
            names: topo.link_names(),
            log_ns: interval_ns,
            _core: core,
        })
    }

    /// The namespace of node `node`.
    pub fn netns(&self, node: usize) -> &NetNs {
        &self.nodes[node]
    }

    /// A command that runs in node `node`, and is killed if the thread that spawns it
    /// exits (spawn from a thread that outlives the child, e.g. the one that waits for it).
    pub fn command(&self, node: usize, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut cmd = Command::new(program);
        sys::run_in(&mut cmd, self.nodes[node].as_fd().as_raw_fd());
        cmd
    }

    /// Stops the emulator and returns each link's report.
    ///
    /// # Errors
    ///
    /// An I/O error of a link thread.
    pub fn stop(self) -> io::Result<Vec<LinkReport>> {
        self.stop_logged().map(|(reports, _)| reports)
    }

    /// Stops the emulator and returns each link's report and log (empty unless built with
    /// [`build_logged`](Self::build_logged)).
    ///
    /// # Errors
    ///
    /// An I/O error of a link thread.
    pub fn stop_logged(self) -> io::Result<(Vec<LinkReport>, LinkLog)> {
        let mut reports = Vec::with_capacity(self.links.len());
        let mut log = LinkLog::default();
        for (up, down) in &self.links {
            up.ask_stop();
            down.ask_stop();
        }
        for ((up, down), link) in self.links.into_iter().zip(self.names) {
            let (up, up_log) = up.stop()?;
            let (down, down_log) = down.stop()?;
            reports.push(LinkReport { up, down });
            log.links.push(LinkTrace {
                link,
                interval_ns: self.log_ns,
                up: up_log,
                down: down_log,
            });
        }
        Ok((reports, log))
    }
}
