//! A QUIC stream as the roles and the control pump use a socket: blocking reads and writes
//! that give up after the timeout set last ([`std::io::ErrorKind::WouldBlock`], as a kernel
//! socket with `SO_RCVTIMEO` does), driven by the connection's own thread.

use std::io::{self, Read, Write};
use std::sync::Arc;
use std::time::Duration;

use quinn::{RecvStream, SendStream};
use wirebench_proto::results::QuicInfo;

use super::conn::{QuicConn, LINGER};

/// One bidirectional stream of a QUIC connection.
#[derive(Debug)]
pub struct QuicStream {
    send: Option<SendStream>,
    recv: RecvStream,
    conn: Arc<QuicConn>,
    timeout: Duration,
    /// The first of its connection's streams in the test: its report carries the
    /// connection's figures (the others' would count them again).
    reports_connection: bool,
    /// A stream of the test's data: counted among its connection's running ones until
    /// dropped ([`QuicConn::info_once_streams_done`] waits for them).
    data: bool,
}

impl QuicStream {
    /// Wraps a stream of `conn`.
    pub(crate) fn new(conn: Arc<QuicConn>, send: SendStream, recv: RecvStream) -> Self {
        Self {
            send: Some(send),
            recv,
            conn,
            timeout: Duration::from_secs(10),
            reports_connection: false,
            data: false,
        }
    }

    /// Makes this a stream of the test's data, the one whose report carries its
    /// connection's figures when `reports`: its connection counts it as running until it
    /// is dropped.
    pub(crate) fn data_stream(&mut self, reports: bool) {
        if !self.data {
            self.data = true;
            self.conn.data_stream_opened();
        }
        self.reports_connection = reports;
    }

    /// Whether this stream's report carries its connection's figures.
    pub(crate) fn reports_connection(&self) -> bool {
        self.reports_connection
    }

    /// Opens a new stream on `conn`, within `timeout`.
    ///
    /// # Errors
    ///
    /// The connection is gone, or the peer allows no more streams in time.
    pub fn open(conn: &Arc<QuicConn>, timeout: Duration) -> io::Result<Self> {
        let c = conn.conn.clone();
        let (send, recv) = conn
            .handle
            .block_on(async move { tokio::time::timeout(timeout, c.open_bi()).await })
            .map_err(|_| io::Error::from(io::ErrorKind::TimedOut))?
            .map_err(io::Error::other)?;
        Ok(Self::new(Arc::clone(conn), send, recv))
    }

    /// Waits up to `timeout` for the peer's next stream on `conn`.
    ///
    /// # Errors
    ///
    /// None came in time, or the connection closed.
    pub(crate) fn accept(conn: &Arc<QuicConn>, timeout: Duration) -> io::Result<Self> {
        let c = conn.conn.clone();
        let (send, recv) = conn
            .handle
            .block_on(async move { tokio::time::timeout(timeout, c.accept_bi()).await })
            .map_err(|_| io::Error::from(io::ErrorKind::TimedOut))?
            .map_err(io::Error::other)?;
        Ok(Self::new(Arc::clone(conn), send, recv))
    }

    /// Its connection.
    pub fn connection(&self) -> &Arc<QuicConn> {
        &self.conn
    }

    /// How long reads and writes wait.
    pub fn set_timeout(&mut self, d: Duration) {
        self.timeout = d.max(Duration::from_millis(1));
    }

    /// Reads what arrived within `wait` (0: the peer finished the stream).
    ///
    /// # Errors
    ///
    /// `WouldBlock` when nothing came in time; the peer reset the stream or the connection
    /// failed.
    pub fn read_for(&mut self, buf: &mut [u8], wait: Duration) -> io::Result<usize> {
        let recv = &mut self.recv;
        let got = self
            .conn
            .handle
            .block_on(async { tokio::time::timeout(wait, recv.read(buf)).await });
        match got {
            Err(_) => Err(io::ErrorKind::WouldBlock.into()),
            Ok(Ok(Some(n))) => Ok(n),
            Ok(Ok(None)) => Ok(0),
            Ok(Err(e)) => Err(io::Error::new(io::ErrorKind::ConnectionReset, e)),
        }
    }

    /// Ends the sending side once all written is sent, without waiting for the peer to
    /// have it (it goes out behind what was written; the stream's drop waits for that).
    ///
    /// # Errors
    ///
    /// The sending side was ended or reset already.
    pub fn end_sending(&mut self) -> io::Result<()> {
        match self.send.as_mut() {
            Some(send) => send
                .finish()
                .map_err(|e| io::Error::new(io::ErrorKind::BrokenPipe, e)),
            None => Err(io::ErrorKind::BrokenPipe.into()),
        }
    }

    /// Ends the sending side once all written is sent, and waits (at most [`LINGER`]) until
    /// the peer has it.
    pub fn finish(&mut self) -> io::Result<()> {
        let Some(mut send) = self.send.take() else {
            return Ok(());
        };
        send.finish()
            .map_err(|e| io::Error::new(io::ErrorKind::BrokenPipe, e))?;
        let acked = self
            .conn
            .handle
            .block_on(async move { tokio::time::timeout(LINGER, send.stopped()).await });
        match acked {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(io::Error::new(io::ErrorKind::BrokenPipe, e)),
            Err(_) => Err(io::ErrorKind::TimedOut.into()),
        }
    }

    /// The connection's figures now.
    pub fn info(&self) -> QuicInfo {
        self.conn.info()
    }
}

impl Read for QuicStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let wait = self.timeout;
        self.read_for(buf, wait)
    }
}

impl Write for QuicStream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let Some(send) = self.send.as_mut() else {
            return Err(io::ErrorKind::BrokenPipe.into());
        };
        let wait = self.timeout;
        let got = self
            .conn
            .handle
            .block_on(async { tokio::time::timeout(wait, send.write(buf)).await });
        match got {
            Err(_) => Err(io::ErrorKind::WouldBlock.into()),
            Ok(Ok(n)) => Ok(n),
            Ok(Err(e)) => Err(io::Error::new(io::ErrorKind::BrokenPipe, e)),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Drop for QuicStream {
    fn drop(&mut self) {
        // What was written still goes out, and the connection stays open until the peer
        // has it (or LINGER passes): the stream's send side waits in a task of its own.
        if let Some(mut send) = self.send.take() {
            let _ = send.finish();
            self.conn.handle.spawn(async move {
                let _ = tokio::time::timeout(LINGER, send.stopped()).await;
            });
        }
        let _ = self.recv.stop(0u32.into());
        if self.data {
            self.conn.data_stream_closed();
        }
    }
}

/// What the results say of a QUIC stream's data path.
pub(crate) fn datapath(s: &QuicStream) -> wirebench_proto::results::Datapath {
    use wirebench_proto::results::{Datapath, Unavailable};
    let c = s.connection();
    Datapath {
        io: if c.gso() {
            "quinn 0.11 over UDP (sendmsg with GSO, recvmsg with GRO where the kernel has them)"
        } else {
            "quinn 0.11 over UDP (one packet a sendmsg: --no-offload; recvmsg with GRO where the kernel has it)"
        }
        .into(),
        batch: 1,
        recv_buffer_bytes: crate::control::memory::QUIC_STREAM_WINDOW,
        send_buffer_bytes: crate::control::memory::QUIC_SEND_WINDOW,
        features: vec![
            "quic".into(),
            format!("quic_cc_{}", c.choice.get().name()),
            "tls13".into(),
        ],
        unavailable: vec![Unavailable {
            figure: "tcp_info".into(),
            reason: "the stream is QUIC's: see end.quic for its connection's figures".into(),
        }],
        ..Datapath::default()
    }
}
