//! wirebench's emulated networks: hosts in network namespaces joined by links that are
//! emulated in user space.
//!
//! - [`link`]: one direction of a link as a pure, seeded state machine in virtual time.
//! - [`emu`]: the I/O loop that moves frames through it, between two packet sockets.
//! - [`topo`]: namespaces, veth pairs, addresses and routes for a topology; running
//!   commands inside its nodes.
//! - [`netns`], [`rtnl`]: unnamed network namespaces and route netlink.
#![deny(unsafe_code)]

pub mod emu;
pub mod link;
pub mod netns;
pub mod props;
pub mod rtnl;
pub mod scenario;
mod sys;
pub mod topo;

pub use netns::ensure_privilege;
