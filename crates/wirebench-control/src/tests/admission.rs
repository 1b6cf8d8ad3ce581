//! Admission on its own: the pending stage, slots, starts per minute.

use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use proptest::prelude::*;

use super::pair::{slots, CLIENT_IP};
use crate::admission::{Admission, Refusal, SlotLimits};
use wirebench_proto::error_kind::ErrorKind;

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

const MIB: u64 = 1 << 20;

#[test]
fn running_tests_together_stay_under_the_memory_budget() {
    let mut adm = Admission::new(slots(10)).with_max_memory(Some(256 * MIB), None);
    let now = std::time::Instant::now();
    let a = adm.admit_holding(now, CLIENT_IP, 200 * MIB).expect("fits");
    assert_eq!(adm.memory_in_use(), 200 * MIB);
    // 100 MiB more would pass 256 MiB with 200 in use: refused, and nothing reserved.
    let r = adm.admit_holding(now, CLIENT_IP, 100 * MIB).map(|_| ());
    let Err(e @ Refusal::Memory { .. }) = r else {
        panic!("not a memory refusal: {r:?}");
    };
    assert_eq!(e.kind(), "max_memory");
    let text = e.to_string();
    assert!(
        text.contains("about 104.86 MB of server memory")
            && text.contains("--max-memory 256 MiB (200 MiB in use by running tests)")
            && text.contains("fewer streams (-P)"),
        "{text}"
    );
    assert_eq!(adm.memory_in_use(), 200 * MIB);
    assert_eq!(adm.running(), 1);
    // Exactly what is left fits; then nothing more, not even one byte.
    let b = adm
        .admit_holding(now, CLIENT_IP, 56 * MIB)
        .expect("the rest fits");
    assert!(matches!(
        adm.admit_holding(now, CLIENT_IP, 1),
        Err(Refusal::Memory { in_use, .. }) if in_use == 256 * MIB
    ));
    // A test's reservation goes with its slot.
    adm.release(a);
    assert_eq!(adm.memory_in_use(), 56 * MIB);
    let c = adm.admit_holding(now, CLIENT_IP, 200 * MIB).expect("freed");
    adm.release(b);
    adm.release(c);
    assert_eq!(adm.memory_in_use(), 0);
}

#[test]
fn extreme_memory_estimates_neither_overflow_nor_panic() {
    let now = std::time::Instant::now();
    for max in [
        None,
        Some(0),
        Some(1),
        Some(u64::from(u32::MAX)),
        Some(u64::MAX),
    ] {
        let mut adm = Admission::new(slots(100)).with_max_memory(max, None);
        let mut held = Vec::new();
        for asked in [0, 1, u64::from(u32::MAX), u64::MAX, u64::MAX] {
            match adm.admit_holding(now, CLIENT_IP, asked) {
                Ok(t) => held.push(t),
                Err(Refusal::Memory {
                    asked: a,
                    max: m,
                    in_use,
                }) => {
                    assert_eq!((a, Some(m)), (asked, max));
                    assert!(in_use.checked_add(asked).is_none_or(|sum| sum > m));
                }
                Err(other) => panic!("{other}"),
            }
            assert!(max.is_none_or(|m| adm.memory_in_use() <= m));
        }
        if let Some(t) = held.last_mut() {
            let _ = adm.hold(t, u64::MAX);
            let _ = adm.hold(t, 0);
        }
        for t in held {
            adm.release(t);
        }
        assert_eq!((adm.memory_in_use(), adm.running()), (0, 0));
    }
}

#[test]
fn an_iperf3_test_reserves_its_memory_once_its_parameters_are_known() {
    let mut adm = Admission::new(slots(4)).with_max_memory(Some(64 * MIB), None);
    let now = std::time::Instant::now();
    let mut t = adm.admit(now, CLIENT_IP).expect("a slot");
    let caps = crate::memory::SocketCaps::default();
    let small = crate::memory::iperf3_test_memory(2, 128 * 1024, 0, caps);
    adm.hold(&mut t, small).expect("fits");
    assert_eq!(adm.memory_in_use(), small);
    let big = crate::memory::iperf3_test_memory(128, 1 << 20, 4 << 20, caps);
    let e = adm.hold(&mut t, big).map_err(|e| e.to_string());
    assert!(e.is_err_and(|e| e.contains("--max-memory 64 MiB")));
    assert_eq!(
        adm.memory_in_use(),
        small,
        "a refused hold reserves nothing"
    );
    adm.release(t);
    assert_eq!(adm.memory_in_use(), 0);
}

/// Issue 44: one address held the whole budget with one idle test, and every other
/// address was refused naming `--max-memory`. It now holds at most its share, at
/// admission and when an iperf3 test's size becomes known, and others get the rest.
#[test]
fn one_address_holds_at_most_its_share_of_the_memory() {
    let mut adm = Admission::new(slots(10)).with_max_memory(Some(256 * MIB), Some(128 * MIB));
    let now = std::time::Instant::now();
    let other: IpAddr = "198.51.100.9".parse().expect("an address");
    let r = adm.admit_holding(now, CLIENT_IP, 255 * MIB).map(|_| ());
    let Err(e @ Refusal::MemoryPerClient { .. }) = r else {
        panic!("not a per-address refusal: {r:?}");
    };
    assert_eq!(e.kind(), "max_memory_per_client");
    assert_eq!(e.error_kind(), ErrorKind::MaxMemory);
    assert!(e.to_string().contains("--max-memory-per-client"), "{e}");
    let a = adm
        .admit_holding(now, CLIENT_IP, 100 * MIB)
        .expect("its share");
    let mut b = adm.admit(now, CLIENT_IP).expect("a slot");
    // An iperf3 test's memory, known later, counts against the same share.
    assert!(matches!(
        adm.hold(&mut b, 29 * MIB),
        Err(Refusal::MemoryPerClient { in_use, .. }) if in_use == 100 * MIB
    ));
    adm.hold(&mut b, 28 * MIB).expect("the rest of its share");
    // Another address still gets the other half.
    let c = adm
        .admit_holding(now, other, 128 * MIB)
        .expect("others get in");
    assert_eq!(adm.memory_in_use(), 256 * MIB);
    for t in [a, b, c] {
        adm.release(t);
    }
    assert_eq!(adm.memory_in_use(), 0);
    let d = adm.admit_holding(now, CLIENT_IP, 128 * MIB).expect("freed");
    adm.release(d);
}

#[test]
fn an_idle_tests_memory_goes_to_a_test_that_waits_for_it_and_only_then() {
    let mut adm = Admission::new(slots(10)).with_max_memory(Some(256 * MIB), Some(200 * MIB));
    let now = std::time::Instant::now();
    let ip = |i| IpAddr::V4(Ipv4Addr::new(10, 0, 0, i));
    let a = adm.admit_holding(now, ip(2), 120 * MIB).expect("a");
    let b = adm.admit_holding(now, ip(3), 100 * MIB).expect("b");
    // In use: the newcomer is refused and nothing is taken.
    let r = adm.admit_holding(now, ip(1), 60 * MIB).map(|_| ());
    assert!(matches!(r, Err(Refusal::Memory { .. })), "{r:?}");
    assert!(!a.reclaimed() && !b.reclaimed());
    // `b` idle is not enough for 140 (36 free + 100): refused, `b` keeps its memory.
    adm.set_idle(&b, true);
    let r = adm.admit_holding(now, ip(1), 140 * MIB).map(|_| ());
    assert!(matches!(r, Err(Refusal::Memory { .. })), "{r:?}");
    assert!(!b.reclaimed());
    // Both idle: the largest goes, and only it.
    adm.set_idle(&a, true);
    let c = adm.admit_holding(now, ip(1), 60 * MIB).expect("room made");
    assert!(a.reclaimed() && !b.reclaimed());
    assert_eq!(adm.memory_in_use(), 160 * MIB);
    // The reclaimed test's release gives back nothing twice.
    adm.release(a);
    assert_eq!(adm.memory_in_use(), 160 * MIB);
    // An address past its share never reclaims: `ip(1)` holds 60 of its 200.
    let r = adm.admit_holding(now, ip(1), 150 * MIB).map(|_| ());
    assert!(matches!(r, Err(Refusal::MemoryPerClient { .. })), "{r:?}");
    assert!(!b.reclaimed());
    for t in [b, c] {
        adm.release(t);
    }
    assert_eq!(adm.memory_in_use(), 0);
}

#[test]
fn an_iperf3_test_whose_size_comes_later_can_take_an_idle_tests_memory() {
    let mut adm = Admission::new(slots(10)).with_max_memory(Some(100 * MIB), Some(100 * MIB));
    let now = std::time::Instant::now();
    let idle = adm
        .admit_holding(now, CLIENT_IP, 90 * MIB)
        .expect("the idle test");
    let other = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 9));
    let mut late = adm.admit(now, other).expect("a slot");
    assert!(matches!(
        adm.hold(&mut late, 20 * MIB),
        Err(Refusal::Memory { .. })
    ));
    adm.set_idle(&idle, true);
    adm.hold(&mut late, 20 * MIB)
        .expect("the idle test's memory");
    assert!(idle.reclaimed());
    assert_eq!(adm.memory_in_use(), 20 * MIB);
    adm.release(idle);
    adm.release(late);
    assert_eq!(adm.memory_in_use(), 0);
}

/// One step of a drawn life of the server's tests.
#[derive(Debug, Clone)]
enum Op {
    Admit { ip: u8, mib: u64 },
    Idle { which: usize, idle: bool },
    Release { which: usize },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0u8..4, 0u64..=200).prop_map(|(ip, mib)| Op::Admit { ip, mib }),
        2 => (any::<usize>(), any::<bool>()).prop_map(|(which, idle)| Op::Idle { which, idle }),
        1 => any::<usize>().prop_map(|which| Op::Release { which }),
    ]
}

proptest! {
    /// Whatever tests come, idle and go: the memory in use is what the tests that were not
    /// reclaimed hold, never over `--max-memory`; a test in use is never reclaimed; a test
    /// is reclaimed only for a newcomer that is then admitted; a newcomer is refused for
    /// `--max-memory` only when ending every idle test would not make room.
    #[test]
    fn reclaiming_keeps_the_budget_and_takes_only_idle_memory(
        ops in prop::collection::vec(op(), 1..200),
    ) {
        let max = 512 * MIB;
        let mut adm = Admission::new(slots(64)).with_max_memory(Some(max), Some(256 * MIB));
        let now = std::time::Instant::now();
        // (ticket, memory, idle) of the running tests.
        let mut running: Vec<(crate::admission::Ticket, u64, bool)> = Vec::new();
        for op in ops {
            match op {
                Op::Admit { ip, mib } => {
                    let before: Vec<bool> = running.iter().map(|r| r.0.reclaimed()).collect();
                    let idle_mem: u64 = running
                        .iter()
                        .filter(|r| r.2 && !r.0.reclaimed())
                        .map(|r| r.1)
                        .sum();
                    let free = max - adm.memory_in_use();
                    let ip = IpAddr::V4(Ipv4Addr::new(10, 0, 0, ip));
                    let got = adm.admit_holding(now, ip, mib * MIB);
                    let newly: Vec<usize> = running
                        .iter()
                        .enumerate()
                        .filter(|(i, r)| r.0.reclaimed() && !before[*i])
                        .map(|(i, _)| i)
                        .collect();
                    for &i in &newly {
                        prop_assert!(running[i].2, "a test in use was reclaimed");
                    }
                    match got {
                        Ok(t) => running.push((t, mib * MIB, false)),
                        Err(Refusal::Memory { .. }) => {
                            prop_assert!(newly.is_empty(), "reclaimed for a refused test");
                            prop_assert!(mib * MIB > free + idle_mem, "refused with room");
                        }
                        Err(_) => prop_assert!(newly.is_empty(), "reclaimed for a refused test"),
                    }
                }
                Op::Idle { which, idle } if !running.is_empty() => {
                    let i = which % running.len();
                    adm.set_idle(&running[i].0, idle);
                    running[i].2 = idle;
                }
                Op::Release { which } if !running.is_empty() => {
                    let (t, ..) = running.remove(which % running.len());
                    adm.release(t);
                }
                _ => {}
            }
            let held: u64 = running
                .iter()
                .filter(|r| !r.0.reclaimed())
                .map(|r| r.1)
                .sum();
            prop_assert_eq!(adm.memory_in_use(), held);
            prop_assert!(held <= max);
        }
        for (t, ..) in running {
            adm.release(t);
        }
        prop_assert_eq!(adm.memory_in_use(), 0);
    }
}

/// Admits, exclusive or not, and releases drawn at random: at most one running test asked
/// to run alone at any step; one that asked is refused (as busy) exactly when another that
/// asked runs; tests that did not ask are never refused for it.
#[test]
fn at_most_one_exclusive_test_runs_and_the_others_run_beside_it() {
    let step = (any::<bool>(), any::<bool>(), 0usize..8);
    proptest!(|(steps in proptest::collection::vec(step, 1..200))| {
        // Room for every step's test: only running alone refuses here.
        let mut adm = Admission::new(slots(256));
        let now = std::time::Instant::now();
        let mut running: Vec<(crate::admission::Ticket, bool)> = Vec::new();
        for (admit, exclusive, k) in steps {
            if admit || running.is_empty() {
                let alone_now = running.iter().any(|(_, x)| *x);
                match adm.admit_test(now, CLIENT_IP, 0, exclusive) {
                    Ok(t) => {
                        prop_assert!(!(exclusive && alone_now));
                        running.push((t, exclusive));
                    }
                    Err(r) => {
                        prop_assert!(exclusive && alone_now, "refused: {r}");
                        prop_assert_eq!(r.error_kind(), ErrorKind::Busy);
                    }
                }
            } else {
                let (t, _) = running.swap_remove(k % running.len());
                adm.release(t);
            }
            prop_assert!(running.iter().filter(|(_, x)| *x).count() <= 1);
        }
    });
}
