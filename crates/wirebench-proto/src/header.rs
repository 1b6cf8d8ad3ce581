//! The header that starts every UDP data datagram, and the stop-and-wait acknowledgement.
//!
//! Layout (16 bytes, big-endian), chosen so that a datagram of 16 bytes or more carries
//! everything the receiver needs for exact per-packet accounting:
//!
//! ```text
//! 0       8        10                    16
//! | seq u64 | stream u16 | send time: the sender's Unix time in ns, modulo 2^48 |
//! ```
//!
//! 48 bits of nanoseconds cover 78 hours. The receiver takes its own Unix time at arrival,
//! subtracts, and reads the difference modulo 2^48 as a signed number ([`one_way_delay_ns`]):
//! the one-way delay, exact when both ends share a clock (one host, or its namespaces) and
//! offset by the clocks' difference otherwise, as long as that stays under 39 hours. Both
//! sides take their Unix time once at the start and add a monotonic clock to it, so a clock
//! step during a test does not show as delay. Datagrams shorter than [`HEADER_LEN`] carry no header: those tests count bytes
//! and messages only (and the results say so), except that stop-and-wait puts the sequence
//! number modulo 256 in the first byte so a resent message is not counted twice.
//!
//! The `seq` field is keyed (protocol 3): it carries the sequence number plus the stream's
//! [`SeqToken`], modulo 2^64. The token comes from the test's cookie, a random 64-bit secret
//! that only the two ends know (it crosses the control connection and the hello), so a
//! sender who cannot read the test's traffic cannot write a sequence number the receiver
//! decodes to anything but a uniformly random one. The receiver drops as foreign any
//! datagram whose decoded number is more than [`PLAUSIBLE_AHEAD`] past the highest it has
//! seen: a blind guess lands with a chance of about 2^-32, and otherwise changes no count.
//! Stop-and-wait acknowledgements carry the keyed field back, for the same reason.

use thiserror::Error;

/// Bytes taken by [`DataHeader`] at the start of a datagram.
pub const HEADER_LEN: usize = 16;

/// Largest send time that fits the header's 48-bit field.
pub const MAX_SEND_NS: u64 = (1 << 48) - 1;

/// How far past the highest sequence number seen a datagram's may be and still count as the
/// test's. Further means a datagram not keyed with the stream's token, most likely not sent
/// by the test's sender: no real sender gets 2^32 datagrams ahead of what arrives.
pub const PLAUSIBLE_AHEAD: u64 = 1 << 32;

/// The per-stream secret added to sequence numbers on the wire (see the module doc).
/// `SeqToken::default()` is zero: the plain sequence number, for tests and peers without
/// a shared secret.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SeqToken(pub u64);

impl SeqToken {
    /// Stream `stream`'s token in the test whose secret cookie is `cookie`.
    ///
    /// splitmix64's finaliser over the cookie and the stream index: a bijection of the
    /// cookie for each stream, so a uniformly random cookie gives a uniformly random token,
    /// and the streams of a test (both directions of `--bidir`) get different ones.
    pub fn of_stream(cookie: u64, stream: u32) -> Self {
        let mut z = cookie ^ (u64::from(stream) + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        Self(z ^ (z >> 31))
    }

    /// The `seq` field that carries sequence number `seq`.
    #[inline]
    pub fn encode(self, seq: u64) -> u64 {
        seq.wrapping_add(self.0)
    }

    /// The sequence number a `seq` field carries.
    #[inline]
    pub fn decode(self, field: u64) -> u64 {
        field.wrapping_sub(self.0)
    }
}

/// What a datagram of at least [`HEADER_LEN`] bytes carries in front of its payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DataHeader {
    /// Per-stream sequence number, starting at 0 (on the wire: plus the stream's token).
    pub seq: u64,
    /// Stream index within the test.
    pub stream: u16,
    /// The sender's Unix time in ns when it sent the datagram, modulo 2^48.
    pub send_ns: u64,
}

/// A buffer too short to hold what was asked of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
#[error("datagram of {len} bytes is too short for a {need}-byte header")]
pub struct TooShort {
    /// Length of the buffer given.
    pub len: usize,
    /// Length needed.
    pub need: usize,
}

impl DataHeader {
    /// Writes the header into the first [`HEADER_LEN`] bytes of `buf`, its sequence number
    /// keyed with `token`.
    #[inline]
    pub fn write(&self, token: SeqToken, buf: &mut [u8]) -> Result<(), TooShort> {
        let len = buf.len();
        let out = buf.get_mut(..HEADER_LEN).ok_or(TooShort {
            len,
            need: HEADER_LEN,
        })?;
        out[..8].copy_from_slice(&token.encode(self.seq).to_be_bytes());
        let word = (u64::from(self.stream) << 48) | (self.send_ns & MAX_SEND_NS);
        out[8..].copy_from_slice(&word.to_be_bytes());
        Ok(())
    }

    /// Reads a header from untrusted bytes, decoding its sequence number with `token`: a
    /// datagram keyed with another token decodes to a number unrelated to the stream's.
    #[inline]
    pub fn read(buf: &[u8], token: SeqToken) -> Result<Self, TooShort> {
        let bytes: &[u8; HEADER_LEN] = buf
            .get(..HEADER_LEN)
            .and_then(|b| b.try_into().ok())
            .ok_or(TooShort {
                len: buf.len(),
                need: HEADER_LEN,
            })?;
        let mut seq = [0u8; 8];
        let mut word = [0u8; 8];
        seq.copy_from_slice(&bytes[..8]);
        word.copy_from_slice(&bytes[8..]);
        let word = u64::from_be_bytes(word);
        Ok(Self {
            seq: token.decode(u64::from_be_bytes(seq)),
            stream: (word >> 48) as u16,
            send_ns: word & MAX_SEND_NS,
        })
    }
}

/// The one-way delay of a datagram whose header carried `send_ns`, received at Unix time
/// `arrival_unix_ns` (receiver's clock): the difference modulo 2^48, as a signed value in
/// `-2^47 .. 2^47` ns (about ±39 h).
pub fn one_way_delay_ns(arrival_unix_ns: u64, send_ns: u64) -> i64 {
    let d = arrival_unix_ns.wrapping_sub(send_ns) & MAX_SEND_NS;
    // Sign-extend the 48-bit difference.
    ((d << 16) as i64) >> 16
}

/// Tag at the start of a UDP stream's hello datagram.
pub const UDP_HELLO_MAGIC: [u8; 4] = *b"WBUH";

/// Length of a UDP hello datagram.
pub const UDP_HELLO_LEN: usize = 16;

/// The datagram a client sends (and resends) to the server's UDP port to open a UDP stream;
/// the server answers over the control channel, never to an address that has not proven
/// itself with the test's secret cookie.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdpHello {
    /// The test's cookie, from the server's accept message.
    pub cookie: u64,
    /// Stream index within the test.
    pub stream: u32,
}

/// Why bytes are not a [`UdpHello`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum HelloError {
    /// Wrong length.
    #[error("hello datagram must be {UDP_HELLO_LEN} bytes, got {0}")]
    Length(usize),
    /// Wrong tag.
    #[error("hello datagram has a wrong tag")]
    Magic,
}

impl UdpHello {
    /// Encodes the hello.
    pub fn encode(&self) -> [u8; UDP_HELLO_LEN] {
        let mut out = [0u8; UDP_HELLO_LEN];
        out[..4].copy_from_slice(&UDP_HELLO_MAGIC);
        out[4..12].copy_from_slice(&self.cookie.to_be_bytes());
        out[12..].copy_from_slice(&self.stream.to_be_bytes());
        out
    }

    /// Decodes a hello from untrusted bytes.
    pub fn decode(buf: &[u8]) -> Result<Self, HelloError> {
        if buf.len() != UDP_HELLO_LEN {
            return Err(HelloError::Length(buf.len()));
        }
        if buf[..4] != UDP_HELLO_MAGIC {
            return Err(HelloError::Magic);
        }
        let mut cookie = [0u8; 8];
        let mut stream = [0u8; 4];
        cookie.copy_from_slice(&buf[4..12]);
        stream.copy_from_slice(&buf[12..16]);
        Ok(Self {
            cookie: u64::from_be_bytes(cookie),
            stream: u32::from_be_bytes(stream),
        })
    }
}

/// Length of a stop-and-wait acknowledgement for a message with a header.
pub const ACK_LEN: usize = 8;

/// Encodes the acknowledgement of message `seq` for a message of `message_len` bytes: the whole
/// sequence number when the message could carry a header, else its low byte (one byte).
/// Stop-and-wait passes the keyed `seq` field ([`SeqToken::encode`]), so that an ack cannot
/// be forged by someone who cannot read the test's traffic either.
pub fn encode_ack(seq: u64, message_len: usize, out: &mut [u8; ACK_LEN]) -> usize {
    if message_len >= HEADER_LEN {
        *out = seq.to_be_bytes();
        ACK_LEN
    } else {
        out[0] = seq as u8;
        1
    }
}

/// Decodes an acknowledgement; `None` when the bytes are not one. For headerless messages
/// only the low byte of the sequence number is returned (the sender compares modulo 256).
pub fn decode_ack(buf: &[u8]) -> Option<u64> {
    match buf.len() {
        ACK_LEN => {
            let mut b = [0u8; 8];
            b.copy_from_slice(buf);
            Some(u64::from_be_bytes(b))
        }
        1 => Some(u64::from(buf[0])),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trips() {
        let h = DataHeader {
            seq: u64::MAX - 3,
            stream: 513,
            send_ns: MAX_SEND_NS,
        };
        let mut buf = [0u8; 20];
        h.write(SeqToken::default(), &mut buf).unwrap();
        assert_eq!(DataHeader::read(&buf, SeqToken::default()).unwrap(), h);
    }

    #[test]
    fn header_round_trips_with_its_token_and_not_with_another() {
        let token = SeqToken::of_stream(0x0123_4567_89ab_cdef, 2);
        let h = DataHeader {
            seq: 41,
            stream: 2,
            send_ns: 12_345,
        };
        let mut buf = [0u8; HEADER_LEN];
        h.write(token, &mut buf).unwrap();
        // On the wire: seq + token, modulo 2^64.
        assert_eq!(buf[..8], 41u64.wrapping_add(token.0).to_be_bytes());
        assert_eq!(DataHeader::read(&buf, token), Ok(h));
        // The wrong token (another stream's, or none) decodes far from the stream's numbers.
        for other in [
            SeqToken::default(),
            SeqToken::of_stream(0x0123_4567_89ab_cdef, 3),
        ] {
            let seq = DataHeader::read(&buf, other).unwrap().seq;
            assert!(seq > PLAUSIBLE_AHEAD, "{seq}");
        }
        // A forged field with the issue's sequence number 2^62 decodes to a random one.
        let forged = DataHeader {
            seq: 1 << 62,
            stream: 0,
            send_ns: 0,
        };
        forged.write(SeqToken::default(), &mut buf).unwrap();
        let seq = DataHeader::read(&buf, token).unwrap().seq;
        assert!(seq > PLAUSIBLE_AHEAD, "{seq}");
    }

    #[test]
    fn stream_tokens_differ_by_stream_and_cookie() {
        let mut seen = std::collections::HashSet::new();
        for cookie in [0, 1, u64::MAX, 0xdead_beef] {
            for stream in 0..64 {
                assert!(seen.insert(SeqToken::of_stream(cookie, stream).0));
            }
        }
        assert_eq!(SeqToken(5).decode(SeqToken(5).encode(u64::MAX)), u64::MAX);
    }

    #[test]
    fn header_masks_send_time() {
        let h = DataHeader {
            seq: 1,
            stream: 7,
            send_ns: (1 << 48) + 5,
        };
        let mut buf = [0u8; 16];
        h.write(SeqToken::default(), &mut buf).unwrap();
        let back = DataHeader::read(&buf, SeqToken::default()).unwrap();
        assert_eq!((back.stream, back.send_ns), (7, 5));
    }

    #[test]
    fn short_buffers_are_errors() {
        for len in 0..HEADER_LEN {
            let buf = vec![0xffu8; len];
            assert_eq!(
                DataHeader::read(&buf, SeqToken(7)),
                Err(TooShort {
                    len,
                    need: HEADER_LEN
                })
            );
            let mut out = vec![0u8; len];
            assert!(DataHeader {
                seq: 0,
                stream: 0,
                send_ns: 0
            }
            .write(SeqToken(7), &mut out)
            .is_err());
        }
    }

    #[test]
    fn one_way_delay_wraps_and_signs() {
        let now = 1_700_000_000_000_000_000u64; // a Unix time in ns
        let sent = (now - 250_000) & MAX_SEND_NS;
        assert_eq!(one_way_delay_ns(now, sent), 250_000);
        // the sender's clock ahead of the receiver's: negative
        assert_eq!(one_way_delay_ns(now, (now + 1_000) & MAX_SEND_NS), -1_000);
        // across the 2^48 wrap of the field
        let at_wrap = (1u64 << 48) * 6_000 + 10;
        assert_eq!(one_way_delay_ns(at_wrap, (at_wrap - 20) & MAX_SEND_NS), 20);
        assert_eq!(one_way_delay_ns(0, 0), 0);
        assert_eq!(one_way_delay_ns(u64::MAX, u64::MAX), 0);
    }

    #[test]
    fn hello_round_trips_and_rejects_junk() {
        let h = UdpHello {
            cookie: 0xdead_beef_0123_4567,
            stream: 3,
        };
        assert_eq!(UdpHello::decode(&h.encode()), Ok(h));
        assert_eq!(UdpHello::decode(&[0u8; 3]), Err(HelloError::Length(3)));
        assert_eq!(UdpHello::decode(&[0u8; 16]), Err(HelloError::Magic));
        assert_eq!(UdpHello::decode(&[0u8; 17]), Err(HelloError::Length(17)));
    }

    #[test]
    fn acks_round_trip() {
        let mut out = [0u8; ACK_LEN];
        let n = encode_ack(1 << 40, 16, &mut out);
        assert_eq!(decode_ack(&out[..n]), Some(1 << 40));
        let n = encode_ack(258, 2, &mut out);
        assert_eq!(decode_ack(&out[..n]), Some(2));
        assert_eq!(decode_ack(&[]), None);
        assert_eq!(decode_ack(&[1, 2, 3]), None);
    }
}
