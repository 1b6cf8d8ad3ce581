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
    pub(super) tx: SyncSender<DataSocket>,
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

    pub(super) fn add(&self, cookie: [u8; COOKIE_LEN], w: Waiting) {
        if let Ok(mut t) = self.tests.lock() {
            t.insert(cookie, w);
        }
    }

    pub(super) fn remove(&self, cookie: &[u8; COOKIE_LEN]) {
        if let Ok(mut t) = self.tests.lock() {
            t.remove(cookie);
        }
    }

    /// Hands a TCP data connection that sent `cookie` to its test; gives it back if none.
    pub(super) fn attach(&self, cookie: &[u8; COOKIE_LEN], conn: TcpStream) -> Option<TcpStream> {
        let Ok(t) = self.tests.lock() else {
            return Some(conn);
        };
        let peer = conn.peer_addr().ok().map(|a| a.ip());
        match t.get(cookie) {
            Some(w) if !w.udp && Some(w.peer) == peer => {
                // More connections than streams: dropped, the client sees it closed.
                let _ = w.tx.try_send(DataSocket::Tcp(conn));
                None
            }
            _ => Some(conn),
        }
    }
}
