//! One end of a control connection without the connection: the frame decoder, the bytes
//! waiting to be written, and how long they have waited.

use std::time::Instant;

use wirebench_proto::control::{encode, FrameDecoder, FrameError, Message};

use super::SessionError;
use super::WRITE_TIMEOUT;

/// Decoder and output buffer of one control connection.
#[derive(Debug)]
pub(super) struct Wire {
    decoder: FrameDecoder,
    out: Vec<u8>,
    /// Since when the output has waited without any of it being written.
    stalled_since: Option<Instant>,
    /// A frame could not be decoded: nothing after it can be, so input is ignored.
    broken: bool,
}

impl Wire {
    /// A connection whose frames may be `max_frame` bytes long.
    pub(super) fn new(max_frame: usize) -> Self {
        Self {
            decoder: FrameDecoder::new(max_frame),
            out: Vec::new(),
            stalled_since: None,
            broken: false,
        }
    }

    /// Changes the frame cap (once the peer's first frame was good).
    pub(super) fn set_max(&mut self, max: usize) {
        self.decoder.set_max(max);
    }

    /// Bytes read from the connection.
    pub(super) fn feed(&mut self, bytes: &[u8]) {
        if !self.broken {
            self.decoder.feed(bytes);
        }
    }

    /// Bytes received but not yet decoded.
    pub(super) fn buffered(&self) -> usize {
        self.decoder.buffered()
    }

    /// The first `n` bytes received but not yet decoded.
    pub(super) fn peek_prefix(&self, n: usize) -> &[u8] {
        let p = self.decoder.pending();
        &p[..p.len().min(n)]
    }

    /// The next whole message, if there is one. After an error, never another message.
    pub(super) fn next_message(&mut self) -> Result<Option<Message>, FrameError> {
        if self.broken {
            return Ok(None);
        }
        let next = self.decoder.next_message();
        self.broken = next.is_err();
        next
    }

    /// Queues `msg` for writing.
    pub(super) fn send(&mut self, now: Instant, msg: &Message) -> Result<(), SessionError> {
        let frame = encode(msg).map_err(|e| SessionError::Protocol(e.to_string()))?;
        if self.out.is_empty() {
            self.stalled_since = Some(now);
        }
        self.out.extend_from_slice(&frame);
        Ok(())
    }

    /// The bytes to write, if any.
    pub(super) fn transmit(&self) -> Option<&[u8]> {
        (!self.out.is_empty()).then_some(&self.out[..])
    }

    /// The driver wrote `n` bytes of [`Self::transmit`].
    pub(super) fn written(&mut self, now: Instant, n: usize) {
        if n == 0 {
            return;
        }
        self.out.drain(..n.min(self.out.len()));
        self.stalled_since = (!self.out.is_empty()).then_some(now);
    }

    /// When the waiting output counts as a peer that stopped reading.
    pub(super) fn write_deadline(&self) -> Option<Instant> {
        self.stalled_since.map(|t| t + WRITE_TIMEOUT)
    }

    /// Forgets what was not written (the connection is gone).
    pub(super) fn discard_output(&mut self) {
        self.out.clear();
        self.stalled_since = None;
    }
}

/// The earliest of some deadlines.
pub(super) fn earliest(times: impl IntoIterator<Item = Option<Instant>>) -> Option<Instant> {
    times.into_iter().flatten().min()
}
