//! wirebench's emulated networks: hosts in network namespaces joined by links that are
//! emulated in user space.
//!
//! - [`link`]: one direction of a link as a pure, seeded state machine in virtual time.
//! - [`aqm`]: the link's queue disciplines (drop-tail, drop-head, CoDel, FQ-CoDel, PIE),
//!   pure and in virtual time too.
//! - [`netem`]: netem's per-packet random decisions (delay distributions, reorder, duplicate,
//!   corrupt), pure and seeded, for the link.
//! - [`emu`]: the I/O loop that moves frames through it, between two packet sockets.
//! - [`gso`]: where the wire packets of a segmentation-offload frame lie, and how to cut it.
//! - [`headers`]: what the link reads and writes in an IP header (flow, ECN, the CE mark).
//! - [`topo`]: namespaces, veth pairs, addresses and routes for a topology; running
//!   commands inside its nodes.
//! - [`netns`], [`rtnl`]: unnamed network namespaces and route netlink.
//! - [`props`], [`scenario`]: links and scenario files as people write them.
//! - [`trace`]: Mahimahi traces, and the serializer of a link that replays one.
//! - [`pair`]: one link between a client and a server host, a test or a program over it.
//! - [`testbed`]: a network kept up between commands (`lab up|exec|down|list`).
//! - [`run`], [`trial`], [`summary`]: a scenario's trials, their files and their summary.
//! - [`server`]: servers in a lab's hosts, waited for until they listen.
//! - [`user_stack`]: hosts whose test traffic goes through a user-space TCP/IP stack.
#![deny(unsafe_code)]

pub mod aqm;
pub mod bind;
pub mod emu;
pub mod gso;
pub mod headers;
pub mod link;
pub mod link_options;
pub mod netem;
pub mod netns;
pub mod pair;
pub mod rtnl;
pub mod run;
pub mod scenario;
pub mod server;
mod splitmix;
pub mod summary;
mod sys;
pub mod testbed;
pub mod topo;
pub mod trace;
pub mod trial;
pub mod user_stack;

pub use netns::ensure_privilege;

/// The lab's errors say whose fault they are, so that the command line can exit 2 for a
/// usage error (a bad flag, file or name) and 1 for a failure at run time.
pub trait Usage: std::error::Error + Send + Sync + 'static {
    /// Whether the user asked for something impossible, rather than the system failing.
    fn is_usage(&self) -> bool;
}

impl Usage for link_options::PropsError {
    fn is_usage(&self) -> bool {
        true
    }
}

impl Usage for topo::TopologyError {
    fn is_usage(&self) -> bool {
        true
    }
}

impl Usage for scenario::ScenarioError {
    /// Also a file that cannot be read: the path given is the problem.
    fn is_usage(&self) -> bool {
        true
    }
}

impl Usage for pair::LogIntervalError {
    fn is_usage(&self) -> bool {
        true
    }
}

impl Usage for aqm::AqmError {
    fn is_usage(&self) -> bool {
        true
    }
}
