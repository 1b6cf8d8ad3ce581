//! The wirebench wire: control messages and their framing, the UDP data header, the test
//! spec, the results document and the units the CLI speaks.
//!
//! No I/O and no clock: every decoder takes untrusted bytes and returns an error, never
//! panics (see `fuzz/`).
#![deny(unsafe_code)]

pub mod control;
pub mod error_kind;
mod file_amounts;
pub mod header;
pub mod host_port;
pub mod link_log;
pub mod packet_log;
pub mod results;
pub mod spec;
pub mod units;
