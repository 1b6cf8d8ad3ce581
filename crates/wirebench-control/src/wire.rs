//! One end of a control connection without the connection: the frame decoder, the bytes
//! waiting to be written, and how long they have waited.
//!
//! The output is bounded by construction: it never holds more than [`OUTPUT_BYTES`]. Live
//! interval records ([`Wire::send_live`]) are queued only while less than
//! [`LIVE_OUTPUT_BYTES`] waits, and are dropped (and counted) past it, so a peer that reads
//! slowly costs it its live lines, never the sender's memory. Every other frame is one the
//! protocol needs (the accept, a report, an error): they fit in what is left, and one that
//! would not ends the session, as a peer that stopped reading does.

use std::time::Instant;

use wirebench_proto::control::{encode, FrameDecoder, FrameError, Message, MAX_FRAME};

use super::SessionError;
use super::WRITE_TIMEOUT;

/// Most bytes of live interval records a control connection's output holds: about 250
/// records, a second of 64 streams' sums at `-i 250ms`. Past it a record is dropped.
pub const LIVE_OUTPUT_BYTES: usize = 64 * 1024;

/// Most bytes a control connection's output ever holds: the largest frame (a report) with
/// room for the live records before it and the small frames around it.
pub const OUTPUT_BYTES: usize = MAX_FRAME + 4 * LIVE_OUTPUT_BYTES;

/// Decoder and output buffer of one control connection.
#[derive(Debug)]
pub(super) struct Wire {
    decoder: FrameDecoder,
    out: Vec<u8>,
    /// Live interval records dropped because the output held [`LIVE_OUTPUT_BYTES`].
    live_dropped: u64,
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
            live_dropped: 0,
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

    /// Queues `msg` for writing. A frame that would take the output past [`OUTPUT_BYTES`]
    /// is not queued: the peer has left that much unread, and the session ends.
    pub(super) fn send(&mut self, now: Instant, msg: &Message) -> Result<(), SessionError> {
        let frame = encode(msg).map_err(|e| SessionError::Protocol(e.to_string()))?;
        if self.out.len() + frame.len() > OUTPUT_BYTES {
            return Err(SessionError::Timeout(
                "the peer to read the control connection (its output is full)",
            ));
        }
        self.push(now, &frame);
        Ok(())
    }

    /// Queues a live interval record (`msg`), unless [`LIVE_OUTPUT_BYTES`] or more would
    /// then wait: a record the peer is too slow to take is dropped and counted
    /// ([`Self::live_dropped`]). Only live lines are lost; the report carries every interval.
    pub(super) fn send_live(&mut self, now: Instant, msg: &Message) -> Result<(), SessionError> {
        // Full already: not even encoded.
        if self.out.len() >= LIVE_OUTPUT_BYTES {
            self.live_dropped += 1;
            return Ok(());
        }
        let frame = encode(msg).map_err(|e| SessionError::Protocol(e.to_string()))?;
        if self.out.len() + frame.len() > LIVE_OUTPUT_BYTES {
            self.live_dropped += 1;
            return Ok(());
        }
        self.push(now, &frame);
        Ok(())
    }

    fn push(&mut self, now: Instant, frame: &[u8]) {
        if self.out.is_empty() {
            self.stalled_since = Some(now);
        }
        // Grown by doubling as a Vec is, but never past OUTPUT_BYTES (a Vec's own doubling
        // could take a nearly full buffer to twice that).
        if self.out.capacity() < OUTPUT_BYTES && self.out.len() + frame.len() > self.out.capacity()
        {
            let want = (self.out.len() + frame.len())
                .next_power_of_two()
                .min(OUTPUT_BYTES);
            self.out.reserve_exact(want - self.out.len());
        }
        self.out.extend_from_slice(frame);
    }

    /// Live interval records dropped so far.
    pub(super) fn live_dropped(&self) -> u64 {
        self.live_dropped
    }

    /// Bytes waiting to be written, and the capacity held for them.
    #[cfg(test)]
    pub(super) fn held(&self) -> usize {
        self.out.capacity().max(self.out.len())
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
        self.out = Vec::new();
        self.stalled_since = None;
    }
}

/// The earliest of some deadlines.
pub(super) fn earliest(times: impl IntoIterator<Item = Option<Instant>>) -> Option<Instant> {
    times.into_iter().flatten().min()
}
