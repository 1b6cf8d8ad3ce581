//! Finished tests' results, kept for their clients to fetch on a new connection.
//!
//! A test that floods the server-to-client direction of its own path queues its control
//! messages behind the flood: the server's report can sit in retransmission backoff for a
//! minute after the path is clear again, and the client gave up before it came. So the server
//! keeps each test's last words (its report, after the reason the test ended early if it did)
//! here, encoded as sent, and a client that waits too long for them opens a new connection
//! (`attach` to `RESULTS_STREAM` with the test's cookie) and takes them: a fresh connection has
//! no backoff to wait out.
//!
//! Bounded by construction: at most [`SHELF_BYTES`] in all (the oldest go first to make room;
//! a report larger than that is not kept), each for at most [`SHELF_TIME`], taken at most
//! once, and only from the address the test's client came from. Pure: the driver passes the
//! time.

use std::collections::VecDeque;
use std::net::IpAddr;
use std::time::{Duration, Instant};

/// The most the shelf holds, bytes: a few large reports, or thousands of ordinary ones.
pub const SHELF_BYTES: usize = 16 << 20;

/// How long a test's results stay after its session made them.
pub const SHELF_TIME: Duration = Duration::from_secs(60);

#[derive(Debug)]
struct Entry {
    cookie: u64,
    ip: IpAddr,
    at: Instant,
    frames: Vec<u8>,
}

/// Finished tests' last frames, oldest first.
#[derive(Debug, Default)]
pub struct Shelf {
    entries: VecDeque<Entry>,
    bytes: usize,
}

impl Shelf {
    /// Keeps `frames` for the test `cookie` whose client is `ip`, from `now`.
    pub fn put(&mut self, now: Instant, cookie: u64, ip: IpAddr, frames: Vec<u8>) {
        self.expire(now);
        if frames.len() > SHELF_BYTES {
            return;
        }
        while self.bytes + frames.len() > SHELF_BYTES {
            let Some(old) = self.entries.pop_front() else {
                break;
            };
            self.bytes -= old.frames.len();
        }
        self.bytes += frames.len();
        self.entries.push_back(Entry {
            cookie,
            ip,
            at: now,
            frames,
        });
    }

    /// The frames of test `cookie`, for a connection from `ip`: taken (a second fetch gets
    /// nothing), or none when there are none, they expired, or `ip` is not its client's.
    pub fn take(&mut self, now: Instant, cookie: u64, ip: IpAddr) -> Option<Vec<u8>> {
        self.expire(now);
        let i = self
            .entries
            .iter()
            .position(|e| e.cookie == cookie && e.ip == ip)?;
        let e = self.entries.remove(i)?;
        self.bytes -= e.frames.len();
        Some(e.frames)
    }

    /// Bytes held now.
    #[cfg(test)]
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    fn expire(&mut self, now: Instant) {
        while self
            .entries
            .front()
            .is_some_and(|e| now.saturating_duration_since(e.at) >= SHELF_TIME)
        {
            if let Some(old) = self.entries.pop_front() {
                self.bytes -= old.frames.len();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ip(i: u8) -> IpAddr {
        IpAddr::from([10, 0, 0, i])
    }

    #[test]
    fn results_are_taken_once_by_their_own_client_within_their_time() {
        let t0 = Instant::now();
        let mut s = Shelf::default();
        s.put(t0, 7, ip(1), vec![1; 10]);
        s.put(t0, 8, ip(1), vec![2; 10]);
        assert_eq!(s.take(t0, 7, ip(2)), None, "another address");
        assert_eq!(s.take(t0, 9, ip(1)), None, "another test");
        assert_eq!(s.take(t0, 7, ip(1)), Some(vec![1; 10]));
        assert_eq!(s.take(t0, 7, ip(1)), None, "taken already");
        assert_eq!(s.take(t0 + SHELF_TIME, 8, ip(1)), None, "expired");
        assert_eq!(s.bytes(), 0);
    }

    proptest! {
        /// Whatever is put and taken, and when: the shelf never holds more than its bound,
        /// its count of bytes is what it holds, and what it gives is what was put for that
        /// test and address, no older than its time.
        #[test]
        fn the_shelf_holds_at_most_its_bound(
            ops in prop::collection::vec(
                (any::<bool>(), 0u64..8, 0u8..3, 0usize..=8 << 20, 0u64..30_000),
                1..200,
            ),
        ) {
            let t0 = Instant::now();
            let mut now = t0;
            let mut s = Shelf::default();
            let mut put_at = std::collections::HashMap::new();
            for (put, cookie, from, len, gap_ms) in ops {
                now += Duration::from_millis(gap_ms);
                if put {
                    // The first byte says which test, for the check below.
                    let mut frames = vec![0u8; len.max(1)];
                    frames[0] = cookie as u8;
                    s.put(now, cookie, ip(from), frames);
                    put_at.insert((cookie, from), now);
                } else if let Some(f) = s.take(now, cookie, ip(from)) {
                    prop_assert_eq!(f[0], cookie as u8);
                    let at = put_at.get(&(cookie, from)).copied();
                    prop_assert!(at.is_some_and(|t| now - t < SHELF_TIME), "expired results given");
                }
                prop_assert!(s.bytes() <= SHELF_BYTES);
                prop_assert_eq!(s.bytes(), s.entries.iter().map(|e| e.frames.len()).sum::<usize>());
            }
        }
    }
}
