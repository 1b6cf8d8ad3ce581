//! What one address may cost the server over time, with the time passed in: how often it
//! may try a pre-shared key after getting it wrong (doubling waits), and how many log lines
//! its refusals may write (a token bucket, with a count of the lines left out). Pure: the
//! driver holds these behind the locks it already takes and carries out what they say.

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::{Duration, Instant};

/// The address that per-address caps count under: an IPv4 address as it is (an IPv4-mapped
/// IPv6 one as IPv4), an IPv6 address by its /64, since one host commonly holds a whole /64
/// and could otherwise take a fresh address for every connection.
pub fn client_key(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let prefix = u128::from(v6) & !((1u128 << 64) - 1);
                IpAddr::V6(prefix.into())
            }
        },
    }
}

/// Most addresses remembered at once; past it, the one not heard from longest is forgotten
/// (an attacker with many addresses then meets the same first waits on each, no more).
pub const MAX_ADDRESSES: usize = 4096;

/// Wrong keys an address may send before it has to wait.
pub const FREE_GUESSES: u32 = 3;

/// The first wait, after [`FREE_GUESSES`] wrong keys; each further wrong key doubles it.
pub const FIRST_WAIT: Duration = Duration::from_secs(1);

/// The longest wait between two tries: about 60 guesses an hour from one address.
pub const MAX_WAIT: Duration = Duration::from_secs(60);

/// An address forgotten after this long without a wrong key (its count starts again).
const FORGET_AFTER: Duration = Duration::from_secs(600);

/// A map from client address (by [`client_key`]) to `T`, bounded to [`MAX_ADDRESSES`].
#[derive(Debug)]
struct PerAddress<T> {
    map: HashMap<IpAddr, (T, Instant)>,
}

impl<T> Default for PerAddress<T> {
    fn default() -> Self {
        Self {
            map: HashMap::new(),
        }
    }
}

impl<T> PerAddress<T> {
    /// The entry of `ip`, made with `new` if there is none; `now` marks it as heard from.
    fn entry(&mut self, now: Instant, ip: IpAddr, new: impl FnOnce() -> T) -> &mut T {
        let ip = client_key(ip);
        if !self.map.contains_key(&ip) && self.map.len() >= MAX_ADDRESSES {
            self.map
                .retain(|_, (_, seen)| now.saturating_duration_since(*seen) < FORGET_AFTER);
            if self.map.len() >= MAX_ADDRESSES {
                let oldest = self.map.iter().min_by_key(|(_, (_, seen))| *seen);
                if let Some(old) = oldest.map(|(k, _)| *k) {
                    self.map.remove(&old);
                }
            }
        }
        let e = self.map.entry(ip).or_insert_with(|| (new(), now));
        e.1 = now;
        &mut e.0
    }

    fn get(&self, ip: IpAddr) -> Option<&(T, Instant)> {
        self.map.get(&client_key(ip))
    }

    fn remove(&mut self, ip: IpAddr) {
        self.map.remove(&client_key(ip));
    }
}

/// Wrong pre-shared keys by address: after [`FREE_GUESSES`], an address waits
/// [`FIRST_WAIT`], then twice that after each further wrong key, up to [`MAX_WAIT`], before
/// the server looks at another of its keys. A right key clears its count.
#[derive(Debug, Default)]
pub struct KeyGuesses {
    failures: PerAddress<u32>,
}

impl KeyGuesses {
    /// `ip` sent a wrong key at `now`.
    pub fn failed(&mut self, now: Instant, ip: IpAddr) {
        let n = self.failures.entry(now, ip, || 0);
        *n = n.saturating_add(1);
    }

    /// `ip` proved the key: its count starts again.
    pub fn proven(&mut self, ip: IpAddr) {
        self.failures.remove(ip);
    }

    /// How long `ip` must still wait before it may try a key, if it must.
    pub fn wait(&self, now: Instant, ip: IpAddr) -> Option<Duration> {
        let (failures, last) = self.failures.get(ip)?;
        let over = failures.checked_sub(FREE_GUESSES).filter(|n| *n > 0)?;
        if now.saturating_duration_since(*last) >= FORGET_AFTER {
            return None;
        }
        let wait = FIRST_WAIT
            .saturating_mul(1u32 << (over - 1).min(16))
            .min(MAX_WAIT);
        let left = (*last + wait).saturating_duration_since(now);
        (!left.is_zero()).then_some(left)
    }
}

/// Log lines of refusals an address may write at once.
pub const LOG_BURST: u32 = 5;

/// How often an address earns another log line once it used its burst.
pub const LOG_EVERY: Duration = Duration::from_secs(10);

/// One address's log budget: tokens, when they were last counted, lines left out since the
/// last one written.
#[derive(Debug)]
struct Bucket {
    tokens: u32,
    refilled: Instant,
    suppressed: u64,
}

/// Log lines for refused connections, by address: [`LOG_BURST`] at once, then one every
/// [`LOG_EVERY`]; the next line written says how many were left out meanwhile.
#[derive(Debug, Default)]
pub struct LogBudget {
    buckets: PerAddress<Bucket>,
}

impl LogBudget {
    /// Whether a refusal of `ip` at `now` may be logged: `Some(left_out)` with the lines of
    /// this address left out since its last one, or `None` to leave this one out too.
    pub fn allow(&mut self, now: Instant, ip: IpAddr) -> Option<u64> {
        let b = self.buckets.entry(now, ip, || Bucket {
            tokens: LOG_BURST,
            refilled: now,
            suppressed: 0,
        });
        let earned = now.saturating_duration_since(b.refilled).as_nanos() / LOG_EVERY.as_nanos();
        if earned > 0 {
            let earned = u32::try_from(earned).unwrap_or(u32::MAX);
            b.tokens = b.tokens.saturating_add(earned).min(LOG_BURST);
            b.refilled += LOG_EVERY.saturating_mul(earned);
        }
        if b.tokens == 0 {
            b.suppressed += 1;
            return None;
        }
        b.tokens -= 1;
        Some(std::mem::take(&mut b.suppressed))
    }
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use super::*;

    fn ip(last: u8) -> IpAddr {
        IpAddr::V4(Ipv4Addr::new(192, 0, 2, last))
    }

    #[test]
    fn wrong_keys_make_an_address_wait_twice_as_long_each_time() {
        let t0 = Instant::now();
        let mut g = KeyGuesses::default();
        for _ in 0..FREE_GUESSES {
            assert_eq!(g.wait(t0, ip(1)), None);
            g.failed(t0, ip(1));
        }
        assert_eq!(g.wait(t0, ip(1)), None, "the free guesses are free");
        let mut now = t0;
        for (k, want) in [1u64, 2, 4, 8, 16, 32, 60, 60, 60].into_iter().enumerate() {
            g.failed(now, ip(1));
            let w = g.wait(now, ip(1));
            assert_eq!(w, Some(Duration::from_secs(want)), "after {} more", k + 1);
            // Not a nanosecond early; at the wait's end the next try is looked at.
            let before = now + Duration::from_secs(want) - Duration::from_nanos(1);
            assert!(g.wait(before, ip(1)).is_some());
            now += Duration::from_secs(want);
            assert_eq!(g.wait(now, ip(1)), None);
        }
        // Another address is not held back; a right key clears the count.
        assert_eq!(g.wait(now, ip(2)), None);
        g.proven(ip(1));
        g.failed(now, ip(1));
        assert_eq!(g.wait(now, ip(1)), None);
    }

    #[test]
    fn guessing_for_an_hour_buys_about_sixty_tries() {
        let mut now = Instant::now();
        let end = now + Duration::from_secs(3600);
        let mut g = KeyGuesses::default();
        let mut tries = 0;
        while now < end {
            match g.wait(now, ip(9)) {
                Some(w) => now += w,
                None => {
                    g.failed(now, ip(9));
                    tries += 1;
                }
            }
        }
        assert!((55..=75).contains(&tries), "{tries} tries in an hour");
    }

    #[test]
    fn an_address_is_forgotten_after_ten_quiet_minutes() {
        let t0 = Instant::now();
        let mut g = KeyGuesses::default();
        for _ in 0..10 {
            g.failed(t0, ip(3));
        }
        assert!(g.wait(t0, ip(3)).is_some());
        assert_eq!(g.wait(t0 + FORGET_AFTER, ip(3)), None);
    }

    #[test]
    fn the_map_of_addresses_stays_bounded() {
        let t0 = Instant::now();
        let mut g = KeyGuesses::default();
        for i in 0..(MAX_ADDRESSES as u32 + 100) {
            let a = IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + i));
            g.failed(t0 + Duration::from_millis(u64::from(i)), a);
        }
        assert_eq!(g.failures.map.len(), MAX_ADDRESSES);
        // The newest is kept, the oldest forgotten.
        let newest = IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + MAX_ADDRESSES as u32 + 99));
        assert!(g.failures.get(newest).is_some());
        assert!(g
            .failures
            .get(IpAddr::V4(Ipv4Addr::from(0x0a00_0000)))
            .is_none());
    }

    #[test]
    fn refusal_lines_come_in_a_burst_then_one_per_ten_seconds_with_the_count_left_out() {
        let t0 = Instant::now();
        let mut b = LogBudget::default();
        for _ in 0..LOG_BURST {
            assert_eq!(b.allow(t0, ip(1)), Some(0));
        }
        for _ in 0..1000 {
            assert_eq!(b.allow(t0 + Duration::from_secs(5), ip(1)), None);
        }
        // Another address has its own budget.
        assert_eq!(b.allow(t0, ip(2)), Some(0));
        assert_eq!(b.allow(t0 + LOG_EVERY, ip(1)), Some(1000));
        assert_eq!(b.allow(t0 + LOG_EVERY, ip(1)), None);
        // A long quiet earns the burst back, no more.
        let later = t0 + LOG_EVERY * 100;
        for _ in 0..LOG_BURST {
            assert!(b.allow(later, ip(1)).is_some());
        }
        assert_eq!(b.allow(later, ip(1)), None);
    }
}
