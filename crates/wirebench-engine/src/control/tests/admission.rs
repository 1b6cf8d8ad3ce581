//! Admission on its own: the pending stage, slots, starts per minute.

use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use super::pair::{slots, CLIENT_IP};
use crate::control::admission::{Admission, Refusal, SlotLimits};

#[test]
fn a_full_pending_stage_drops_its_oldest_connection() {
    let a = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
    let b = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2));
    let mut adm = Admission::with_pending_caps(slots(1), 3, 2);
    let (a1, e) = adm.pending_open(a);
    assert_eq!(e, None);
    let (a2, _) = adm.pending_open(a);
    // A third from `a` pushes out `a`'s oldest, not anyone else's.
    let (_a3, e) = adm.pending_open(a);
    assert_eq!(e, Some(a1));
    let (b1, e) = adm.pending_open(b);
    assert_eq!(e, None);
    // The stage is full (3): the oldest overall goes.
    let (_b2, e) = adm.pending_open(b);
    assert_eq!(e, Some(a2));
    adm.pending_close(b1);
    assert_eq!(adm.pending(), 2);
}

#[test]
fn a_flood_from_ten_addresses_never_pushes_out_a_lone_clients_handshake() {
    let mut adm = Admission::with_pending_caps(slots(1), 256, 64);
    let (lone, _) = adm.pending_open(CLIENT_IP);
    let flooders: Vec<IpAddr> = (10..20)
        .map(|i| IpAddr::V4(Ipv4Addr::new(10, 0, 0, i)))
        .collect();
    // 20,000 connections, round robin over the ten: each eviction is a flooder's own.
    let mut evicted = 0;
    for n in 0..20_000 {
        let (_, e) = adm.pending_open(flooders[n % flooders.len()]);
        assert_ne!(e, Some(lone), "after {n} flood connections");
        evicted += usize::from(e.is_some());
    }
    assert_eq!(adm.pending(), 256);
    assert_eq!(evicted, 20_000 + 1 - 256);
    // The lone client is still there: closing it frees one place.
    adm.pending_close(lone);
    assert_eq!(adm.pending(), 255);
}

#[test]
fn of_equally_busy_addresses_the_one_with_the_oldest_connection_gives_way() {
    let (a, b, c) = (
        IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
        IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)),
        IpAddr::V4(Ipv4Addr::new(10, 0, 0, 3)),
    );
    let mut adm = Admission::with_pending_caps(slots(1), 4, 4);
    let (b1, _) = adm.pending_open(b);
    let (_a1, _) = adm.pending_open(a);
    let (_b2, _) = adm.pending_open(b);
    let (_a2, _) = adm.pending_open(a);
    // Full, a and b hold two each: b's first came first, so it goes.
    let (_, e) = adm.pending_open(c);
    assert_eq!(e, Some(b1));
}

#[test]
fn only_admitted_starts_count_towards_the_minute() {
    let limits = SlotLimits {
        max_tests: 1,
        per_client: None,
        per_minute: Some(2),
    };
    let mut adm = Admission::new(limits);
    let base = std::time::Instant::now();
    let held = adm.admit(base, CLIENT_IP).unwrap();
    // Refused for busy, many times: no start is counted.
    for _ in 0..5 {
        assert!(matches!(
            adm.admit(base, CLIENT_IP),
            Err(Refusal::Busy { .. })
        ));
    }
    adm.release(held);
    let t = adm
        .admit(base, CLIENT_IP)
        .expect("the second start of the minute");
    adm.release(t);
    assert!(matches!(
        adm.admit(base, CLIENT_IP),
        Err(Refusal::PerMinute { started: 2, .. })
    ));
    // A minute later the window has moved.
    let t = adm
        .admit(base + Duration::from_secs(60), CLIENT_IP)
        .expect("a new minute");
    adm.release(t);
}

#[test]
fn released_tickets_free_their_slots() {
    let limits = SlotLimits {
        max_tests: 2,
        per_client: Some(1),
        per_minute: None,
    };
    let mut adm = Admission::new(limits);
    let now = std::time::Instant::now();
    let other = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 9));
    let t1 = adm.admit(now, CLIENT_IP).unwrap();
    assert!(matches!(
        adm.admit(now, CLIENT_IP),
        Err(Refusal::PerClient { running: 1, .. })
    ));
    let t2 = adm.admit(now, other).unwrap();
    assert_eq!(adm.running(), 2);
    adm.release(t1);
    adm.release(t2);
    assert_eq!(adm.running(), 0);
    let t = adm.admit(now, CLIENT_IP).expect("free again");
    adm.release(t);
}
