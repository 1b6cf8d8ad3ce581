//! What wirebench asks of the operating system beyond the standard library, in one place
//! every other crate uses: files written whole or not at all ([`output`]), files read back
//! only if regular and bounded ([`input`]), and batched
//! datagrams ([`mmsg`]: `sendmmsg`/`recvmmsg` with GSO, GRO and arrival times) over the
//! control messages of [`cmsg`].
//!
//! `unsafe` is allowed only in [`cmsg`] and [`mmsg`], each block with the reason it is
//! sound; the calls they offer borrow the caller's buffers for the call and keep no
//! pointer past it.
#![deny(unsafe_code)]

pub mod cmsg;
pub mod input;
pub mod mmsg;
pub mod output;
pub mod rundir;
