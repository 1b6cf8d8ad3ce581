//! QUIC tests (`run --quic`): quinn's connections, each on a thread of its own
//! ([`conn`]), their streams as the roles and the control pump use sockets ([`stream`]),
//! the server's key pair and the client's pin ([`tls`]), and the congestion controller a
//! test chooses ([`cc`]). The control dialogue and the roles are the TCP ones: a QUIC
//! stream is a byte stream, so every mode, limit and count is written once.

pub mod cc;
pub mod conn;
pub mod handshakes;
pub mod stream;
pub mod tls;

pub use cc::Congestion;
pub use conn::{connect, Dialer, QuicConn};
pub use stream::QuicStream;
pub use tls::{Fingerprint, Identity, ServerCheck, ALPN};

/// Whether `d` is a QUIC version 1 client Initial that a server must answer: a long header
/// of type Initial, version 1, padded to at least 1200 bytes as RFC 9000 requires of a
/// client (smaller ones are dropped unanswered, so the server never amplifies them). The
/// fixed bit is not looked at: a client that learnt the server greases it (RFC 9287; quinn
/// does, on a resumed session) may clear it.
pub fn is_initial(d: &[u8]) -> bool {
    d.len() >= 1200 && d[0] & 0xb0 == 0x80 && d[1..5] == [0, 0, 0, 1]
}

/// Whether `d` is any QUIC version 1 long-header packet (Initial, 0-RTT, Handshake, Retry),
/// its fixed bit greased or not.
pub fn is_long_header(d: &[u8]) -> bool {
    d.len() > 5 && d[0] & 0x80 != 0 && d[1..5] == [0, 0, 0, 1]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_padded_version_1_initials_are_initials() {
        let mut d = vec![0u8; 1200];
        d[0] = 0xc3;
        d[1..5].copy_from_slice(&[0, 0, 0, 1]);
        assert!(is_initial(&d));
        assert!(!is_initial(&d[..1199]));
        d[0] = 0xe3; // a Handshake packet
        assert!(!is_initial(&d));
        d[0] = 0xa3; // a Handshake packet, its fixed bit greased
        assert!(!is_initial(&d));
        d[0] = 0x83; // an Initial, its fixed bit greased (RFC 9287)
        assert!(is_initial(&d));
        assert!(is_long_header(&d));
        d[0] = 0xc3;
        d[4] = 2;
        assert!(!is_initial(&d));
        // wirebench's UDP hello and iperf3's connect datagram are short.
        assert!(!is_initial(&[0u8; 64]));
    }
}
