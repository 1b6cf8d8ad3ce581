//! The control channel: framed [`Message`]s over the test's TCP control connection, with a
//! deadline on every wait.

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use wirebench_proto::control::{encode, FrameDecoder, Message};

use crate::EngineError;

/// How long a write of one control frame may block before the peer counts as gone.
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);

/// One end of a control connection.
#[derive(Debug)]
pub struct Channel {
    stream: TcpStream,
    decoder: FrameDecoder,
    buf: Vec<u8>,
}

impl Channel {
    /// Wraps a connected stream; frames longer than `max_frame` end the session.
    pub fn new(stream: TcpStream, max_frame: usize) -> Result<Self, EngineError> {
        stream
            .set_write_timeout(Some(WRITE_TIMEOUT))
            .map_err(|e| EngineError::io("configuring the control connection", e))?;
        // Control messages are small and latency matters more than batching.
        let _ = stream.set_nodelay(true);
        Ok(Self {
            stream,
            decoder: FrameDecoder::new(max_frame),
            buf: vec![0u8; 16 * 1024],
        })
    }

    /// The underlying stream.
    pub fn stream(&self) -> &TcpStream {
        &self.stream
    }

    /// Sends one message.
    pub fn send(&mut self, msg: &Message) -> Result<(), EngineError> {
        let frame = encode(msg).map_err(|e| EngineError::Protocol(e.to_string()))?;
        self.stream
            .write_all(&frame)
            .map_err(|e| EngineError::io("sending a control message", e))
    }

    /// Waits up to `timeout` for the next message; `Ok(None)` when none came in time.
    pub fn recv(&mut self, timeout: Duration) -> Result<Option<Message>, EngineError> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(msg) = self
                .decoder
                .next_message()
                .map_err(|e| EngineError::Protocol(e.to_string()))?
            {
                return Ok(Some(msg));
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(None);
            }
            // A zero timeout means "block forever" to the kernel: keep at least 1 ms.
            self.stream
                .set_read_timeout(Some(left.max(Duration::from_millis(1))))
                .map_err(|e| EngineError::io("configuring the control connection", e))?;
            match self.stream.read(&mut self.buf) {
                Ok(0) => return Err(EngineError::PeerClosed),
                Ok(n) => self.decoder.feed(&self.buf[..n]),
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(EngineError::io("reading the control connection", e)),
            }
        }
    }

    /// Waits up to `timeout` for a message, failing if none comes.
    pub fn expect(
        &mut self,
        timeout: Duration,
        what: &'static str,
    ) -> Result<Message, EngineError> {
        self.recv(timeout)?.ok_or(EngineError::Timeout(what))
    }
}
