//! The iperf3 tests of a server that wait for their data streams: TCP data connections
//! find theirs by cookie, UDP connect datagrams by the client's address.

use std::collections::HashMap;
use std::net::{IpAddr, TcpStream};
use std::sync::mpsc::SyncSender;
use std::sync::{Mutex, MutexGuard};

use crate::iperf3::codec::COOKIE_LEN;
use crate::role::DataSocket;

/// An iperf3 test waiting for its data streams.
pub(super) struct Waiting {
    pub(super) peer: IpAddr,
    pub(super) local: IpAddr,
    pub(super) port: u16,
    pub(super) udp: bool,
    /// UDP streams still to come.
    pub(super) udp_left: u32,
    /// Connect datagrams from the client's address after every stream was taken: its
    /// streams are then ambiguous (someone else sent from its address), and the test ends.
    pub(super) udp_extra: std::sync::Arc<std::sync::atomic::AtomicU32>,
    /// Where the UDP streams taken came from: a connect datagram again from one of them is
    /// the client resending (its answer was lost), answered again, not counted.
    pub(super) udp_taken: Vec<std::net::SocketAddr>,
    /// Answers sent to resent connect datagrams (at most `MAX_EXTRA_REPLIES` a stream).
    pub(super) udp_resent: u32,
    /// Where the streams go, each with its place in the order the client opened them
    /// (iperf3 tells a stream's direction by that order alone).
    pub(super) tx: SyncSender<(u64, DataSocket)>,
}

/// The iperf3 tests of a server that wait for data streams, by cookie.
#[derive(Default)]
pub(crate) struct Registry {
    tests: Mutex<HashMap<[u8; COOKIE_LEN], Waiting>>,
}

impl Registry {
    /// The waiting tests, locked.
    pub(super) fn tests(
        &self,
    ) -> std::sync::LockResult<MutexGuard<'_, HashMap<[u8; COOKIE_LEN], Waiting>>> {
        self.tests.lock()
    }

    /// Registers a test waiting for its streams; false, and nothing changed, when a test
    /// with the same cookie is already registered (its streams would go to the newcomer).
    pub(super) fn add(&self, cookie: [u8; COOKIE_LEN], w: Waiting) -> bool {
        let Ok(mut t) = self.tests.lock() else {
            return false;
        };
        match t.entry(cookie) {
            std::collections::hash_map::Entry::Occupied(_) => false,
            std::collections::hash_map::Entry::Vacant(v) => {
                v.insert(w);
                true
            }
        }
    }

    /// Whether a test with `cookie` waits for its streams.
    pub(super) fn has(&self, cookie: &[u8; COOKIE_LEN]) -> bool {
        self.tests.lock().is_ok_and(|t| t.contains_key(cookie))
    }

    pub(super) fn remove(&self, cookie: &[u8; COOKIE_LEN]) {
        if let Ok(mut t) = self.tests.lock() {
            t.remove(cookie);
        }
    }

    /// Hands a TCP data connection that sent `cookie` to its test, with its place in the
    /// order of accepts (`order`: each connection's thread reads its cookie on its own, so
    /// they may arrive here out of order); gives it back if there is no such test.
    pub(super) fn attach(
        &self,
        cookie: &[u8; COOKIE_LEN],
        conn: TcpStream,
        order: u64,
    ) -> Option<TcpStream> {
        let Ok(t) = self.tests.lock() else {
            return Some(conn);
        };
        let peer = crate::net::ends(&conn).ok().map(|(p, _)| p.ip());
        match t.get(cookie) {
            Some(w) if !w.udp && Some(w.peer) == peer => {
                // More connections than streams: dropped, the client sees it closed.
                let _ = w.tx.try_send((order, DataSocket::Tcp(conn)));
                None
            }
            _ => Some(conn),
        }
    }
}
