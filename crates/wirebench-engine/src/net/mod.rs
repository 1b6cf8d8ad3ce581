//! The thin driver: sockets and threads around the control sessions.

pub(crate) mod channel;
pub(crate) mod client;
pub(crate) mod roles;
pub(crate) mod server;
