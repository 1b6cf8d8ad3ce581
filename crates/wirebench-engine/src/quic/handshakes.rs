//! The server's QUIC connections between their first Initial and their first stream's
//! first frame, capped overall and per address (`net::quic` takes and gives back places).

use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, SocketAddr};

/// Most QUIC connections in their handshake at once.
pub(crate) const MAX_HANDSHAKES: usize = 64;
/// Most of them from one address.
pub(crate) const MAX_HANDSHAKES_PER_ADDR: usize = 8;

/// QUIC connections between their first Initial and their first stream's first frame.
#[derive(Debug, Default)]
pub(crate) struct Handshakes {
    by_peer: HashSet<SocketAddr>,
    per_addr: HashMap<IpAddr, usize>,
}

impl Handshakes {
    /// Takes a place for `src`; false when it has one already (a repeated Initial) or the
    /// caps are reached.
    pub(crate) fn enter(&mut self, src: SocketAddr) -> bool {
        let n = self.per_addr.get(&src.ip()).copied().unwrap_or(0);
        if self.by_peer.contains(&src)
            || self.by_peer.len() >= MAX_HANDSHAKES
            || n >= MAX_HANDSHAKES_PER_ADDR
        {
            return false;
        }
        self.by_peer.insert(src);
        self.per_addr.insert(src.ip(), n + 1);
        true
    }

    pub(crate) fn leave(&mut self, src: SocketAddr) {
        if self.by_peer.remove(&src) {
            if let Some(n) = self.per_addr.get_mut(&src.ip()) {
                *n -= 1;
                if *n == 0 {
                    self.per_addr.remove(&src.ip());
                }
            }
        }
    }

    /// Connections in their handshake now.
    pub(crate) fn len(&self) -> usize {
        self.by_peer.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handshakes_are_capped_overall_and_per_address() {
        let mut h = Handshakes::default();
        let at = |ip: u8, port: u16| SocketAddr::from(([127, 0, 0, ip], port));
        for port in 0..MAX_HANDSHAKES_PER_ADDR as u16 {
            assert!(h.enter(at(1, port)));
        }
        assert!(!h.enter(at(1, 999)), "per address");
        assert!(!h.enter(at(1, 0)), "a repeated Initial");
        let mut ip = 2;
        while h.len() < MAX_HANDSHAKES {
            for port in 0..MAX_HANDSHAKES_PER_ADDR as u16 {
                if h.len() < MAX_HANDSHAKES {
                    assert!(h.enter(at(ip, port)));
                }
            }
            ip += 1;
        }
        assert!(!h.enter(at(200, 1)), "overall");
        h.leave(at(1, 0));
        assert!(h.enter(at(200, 1)));
        h.leave(at(1, 0)); // gone already: nothing changes
        assert_eq!(h.len(), MAX_HANDSHAKES);
    }
}
