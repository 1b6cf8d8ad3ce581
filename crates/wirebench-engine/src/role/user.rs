//! Data connections carried by a user-space TCP/IP stack (smoltcp on a TUN device, in
//! `wirebench-smoltcp`) instead of the kernel's.
//!
//! The engine does not know the stack: the binary hands the client a [`UserConnector`], and
//! each data connection it opens is a [`UserStream`], a byte stream with the few socket
//! calls the TCP roles make. The TCP roles are written over [`Stream`], which both a kernel
//! [`TcpStream`] and a `UserStream` are, so that counting, digests and results stay one
//! piece of code whichever stack moved the bytes. The control connection stays on the
//! kernel's stack: it carries no test traffic.

use std::io::{self, Read, Write};
use std::net::{IpAddr, Shutdown, SocketAddr, TcpStream};
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use wirebench_proto::results::{Datapath, Unavailable, UserStack};
use wirebench_proto::spec::TestSpec;

/// A connected TCP byte stream in a user-space stack.
///
/// Reads and writes block at most the timeout set last, then fail with
/// [`io::ErrorKind::WouldBlock`], as a kernel socket with `SO_RCVTIMEO` does.
pub trait UserStream: Read + Write + Send + std::fmt::Debug {
    /// How long a read or write may wait for progress.
    fn set_timeout(&mut self, timeout: Duration);
    /// Sends FIN once everything written has been sent, and waits (bounded) until the peer
    /// has it: the stack lives in this process, so nobody sends what is left once the
    /// stream is gone.
    ///
    /// # Errors
    ///
    /// The connection broke, or the peer did not take the rest in time.
    fn shutdown_write(&mut self) -> io::Result<()>;
    /// The stack and its settings, as this connection used them.
    fn stack(&self) -> UserStack;
}

/// Opens data connections through a user-space stack.
pub trait UserConnector: Send + Sync + std::fmt::Debug {
    /// Connects to `addr` within `timeout`.
    ///
    /// # Errors
    ///
    /// The stack's device cannot be opened, or the peer did not answer.
    fn connect(&self, addr: SocketAddr, timeout: Duration) -> io::Result<Box<dyn UserStream>>;
}

/// Takes a server's data connections through a user-space stack (`serve --stack`): the
/// server tells the client to connect to [`UserListener::port`] (its accept's `tcp_port`),
/// which the host forwards to the stack.
pub trait UserListener: Send + Sync + std::fmt::Debug {
    /// The TCP port the stack listens on, and clients are sent to.
    fn port(&self) -> u16;
    /// Starts listening for the data connection of `spec`, whose client is at `peer`:
    /// before the test is admitted, so that a test the stack cannot carry, or a stack busy
    /// with another test, is refused with the reason and costs nothing.
    ///
    /// # Errors
    ///
    /// Why the test cannot go through the stack now, in words for the client.
    fn listen(&self, spec: &TestSpec, peer: IpAddr) -> io::Result<Box<dyn UserAccept>>;
}

/// A user-space stack listening for one test's data connection.
pub trait UserAccept: Send {
    /// Waits up to `timeout` for a connection from the test's client (others are turned
    /// away) and returns it once established; gives up soon after `cancel` is set (the
    /// test ended), so that the device is free for the next one.
    ///
    /// # Errors
    ///
    /// None came in time, the wait was cancelled, or the device failed.
    fn accept(
        self: Box<Self>,
        timeout: Duration,
        cancel: &AtomicBool,
    ) -> io::Result<Box<dyn UserStream>>;
}

/// What the results say of a connection over a user-space stack: its settings, and why
/// the kernel's figures are absent.
pub(crate) fn user_datapath(s: &dyn UserStream, spec: &TestSpec) -> Datapath {
    let stack = s.stack();
    let unavailable = [
        (
            "tcp_info",
            "the connection is in a user-space stack: the kernel's TCP_INFO does not see it",
        ),
        (
            "tcp_congestion",
            "the kernel's congestion control is not used: see stack.congestion_control",
        ),
    ];
    let mut features = vec![format!("user_stack_{}", stack.name)];
    if spec.mechanism != wirebench_proto::spec::Mechanism::Stream {
        features.push("nagle_off".into());
    }
    Datapath {
        io: format!("{} send/recv over TUN", stack.name),
        batch: 1,
        send_buffer_bytes: stack.send_buffer_bytes,
        recv_buffer_bytes: stack.recv_buffer_bytes,
        features,
        unavailable: unavailable
            .into_iter()
            .map(|(figure, reason)| Unavailable {
                figure: figure.into(),
                reason: reason.into(),
            })
            .collect(),
        stack: Some(stack),
        ..Datapath::default()
    }
}

/// A TCP data connection as the TCP roles use it, kernel's or user-space.
pub(super) trait Stream: Read + Write {
    /// Sets the read and write timeouts.
    fn timeouts(&mut self, d: Duration);
    /// Ends the sending side (EOF for the peer).
    fn shutdown_write(&mut self);
    /// The kernel socket, for what only it has (MSG_ZEROCOPY).
    fn kernel(&self) -> Option<&TcpStream>;
    /// A QUIC stream, for its connection's figures.
    fn quic(&self) -> Option<&crate::quic::QuicStream> {
        None
    }
}

impl Stream for Box<crate::quic::QuicStream> {
    fn timeouts(&mut self, d: Duration) {
        self.set_timeout(d);
    }

    fn shutdown_write(&mut self) {
        // A failure shows at the receiver, which counts what arrived.
        let _ = self.finish();
    }

    fn kernel(&self) -> Option<&TcpStream> {
        None
    }

    fn quic(&self) -> Option<&crate::quic::QuicStream> {
        Some(self)
    }
}

impl Stream for TcpStream {
    fn timeouts(&mut self, d: Duration) {
        let _ = self.set_read_timeout(Some(d));
        let _ = self.set_write_timeout(Some(d));
    }

    fn shutdown_write(&mut self) {
        let _ = self.shutdown(Shutdown::Write);
    }

    fn kernel(&self) -> Option<&TcpStream> {
        Some(self)
    }
}

impl Stream for Box<dyn UserStream> {
    fn timeouts(&mut self, d: Duration) {
        self.as_mut().set_timeout(d);
    }

    fn shutdown_write(&mut self) {
        // A failure shows at the receiver, which counts what arrived.
        let _ = UserStream::shutdown_write(self.as_mut());
    }

    fn kernel(&self) -> Option<&TcpStream> {
        None
    }
}
