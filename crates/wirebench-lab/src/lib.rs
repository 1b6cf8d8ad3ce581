//! wirebench's emulated networks. So far: the link model ([`link`]), one direction of an
//! emulated link as a pure, seeded state machine with virtual time, tested without sockets.
//! The namespaces, TUN devices and I/O loop around it are issue 6's remaining work.
#![deny(unsafe_code)]

pub mod link;
