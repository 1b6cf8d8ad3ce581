//! The server's QUIC connections between their first Initial and their first stream's
//! first frame, capped overall and per address (`net::quic` takes and gives back places).

use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::task::{Context, Waker};

/// Most QUIC connections in their handshake at once.
pub(crate) const MAX_HANDSHAKES: usize = 64;
/// Most of them from one address.
pub(crate) const MAX_HANDSHAKES_PER_ADDR: usize = 8;

/// QUIC connections between their first Initial and their first stream's first frame.
#[derive(Debug, Default)]
pub(crate) struct Handshakes {
    by_peer: HashMap<SocketAddr, Arc<Inbox>>,
    per_addr: HashMap<IpAddr, usize>,
}

/// What came to the port's hello socket from a client whose connection is being made: its
/// first Initial, and what it sent right behind it (its 0-RTT packets, a second Initial)
/// before the connection's own socket was there to take it. The connection's socket takes
/// these first. At most [`Inbox::MOST`] are kept; more are dropped, as a full socket would.
#[derive(Debug, Default)]
pub(crate) struct Inbox(Mutex<(VecDeque<Vec<u8>>, Option<Waker>)>);

impl Inbox {
    /// Most datagrams an inbox holds.
    pub(crate) const MOST: usize = 16;

    /// Keeps `d` for the connection, and wakes its socket.
    pub(crate) fn push(&self, d: &[u8]) {
        if let Ok(mut g) = self.0.lock() {
            if g.0.len() < Self::MOST {
                g.0.push_back(d.to_vec());
            }
            if let Some(w) = g.1.take() {
                w.wake();
            }
        }
    }

    /// The next datagram kept, or none (and `cx` is woken when one comes).
    pub(crate) fn pop(&self, cx: &Context<'_>) -> Option<Vec<u8>> {
        let mut g = self.0.lock().ok()?;
        let d = g.0.pop_front();
        if d.is_none() {
            g.1 = Some(cx.waker().clone());
        }
        d
    }
}

impl Handshakes {
    /// Takes a place for `src`, with the inbox its connection reads first; none when it
    /// has one already (a repeated Initial: see [`Handshakes::inbox`]) or the caps are
    /// reached.
    pub(crate) fn enter(&mut self, src: SocketAddr) -> Option<Arc<Inbox>> {
        let n = self.per_addr.get(&src.ip()).copied().unwrap_or(0);
        if self.by_peer.contains_key(&src)
            || self.by_peer.len() >= MAX_HANDSHAKES
            || n >= MAX_HANDSHAKES_PER_ADDR
        {
            return None;
        }
        let inbox = Arc::new(Inbox::default());
        self.by_peer.insert(src, Arc::clone(&inbox));
        self.per_addr.insert(src.ip(), n + 1);
        Some(inbox)
    }

    /// The inbox of `src`'s connection in its handshake, if there is one.
    pub(crate) fn inbox(&self, src: SocketAddr) -> Option<Arc<Inbox>> {
        self.by_peer.get(&src).cloned()
    }

    pub(crate) fn leave(&mut self, src: SocketAddr) {
        if self.by_peer.remove(&src).is_some() {
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
            assert!(h.enter(at(1, port)).is_some());
        }
        assert!(h.enter(at(1, 999)).is_none(), "per address");
        assert!(h.enter(at(1, 0)).is_none(), "a repeated Initial");
        let mut ip = 2;
        while h.len() < MAX_HANDSHAKES {
            for port in 0..MAX_HANDSHAKES_PER_ADDR as u16 {
                if h.len() < MAX_HANDSHAKES {
                    assert!(h.enter(at(ip, port)).is_some());
                }
            }
            ip += 1;
        }
        assert!(h.enter(at(200, 1)).is_none(), "overall");
        h.leave(at(1, 0));
        assert!(h.enter(at(200, 1)).is_some());
        h.leave(at(1, 0)); // gone already: nothing changes
        assert_eq!(h.len(), MAX_HANDSHAKES);
    }

    /// What a client sends behind its first Initial waits in its connection's inbox, in
    /// order, up to the inbox's bound; the socket that finds it empty is woken by the next.
    #[test]
    fn an_inbox_keeps_what_came_early_in_order_and_bounded() {
        use std::task::Wake;
        struct Flag(std::sync::atomic::AtomicBool);
        impl Wake for Flag {
            fn wake(self: Arc<Self>) {
                self.0.store(true, std::sync::atomic::Ordering::SeqCst);
            }
        }
        let flag = Arc::new(Flag(false.into()));
        let waker = Waker::from(Arc::clone(&flag));
        let cx = Context::from_waker(&waker);
        let inbox = Inbox::default();
        assert_eq!(inbox.pop(&cx), None);
        for i in 0..Inbox::MOST + 5 {
            inbox.push(&[i as u8]);
        }
        assert!(flag.0.load(std::sync::atomic::Ordering::SeqCst), "woken");
        for i in 0..Inbox::MOST {
            assert_eq!(inbox.pop(&cx), Some(vec![i as u8]));
        }
        assert_eq!(inbox.pop(&cx), None, "the rest were dropped");
    }
}
