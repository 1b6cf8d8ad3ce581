//! The schedule in virtual time, against meshes, run lengths and busy answers drawn at
//! random: every round is a run or a miss, once; runs start within their round's slip; no
//! two throughput runs share a host at any moment.

use std::time::Duration;

use proptest::prelude::*;

use super::*;
use crate::config::{Host, Mesh, Test};

/// A mesh of `hosts` hosts (all against all) and tests of the given (kind, every s, slip s).
fn mesh(hosts: usize, tests: &[(Kind, u64, u64)]) -> Mesh {
    let hosts: Vec<Host> = (0..hosts)
        .map(|i| Host {
            name: format!("h{i}"),
            address: format!("127.0.0.{}:5201", i + 1),
        })
        .collect();
    let tests: Vec<Test> = tests
        .iter()
        .enumerate()
        .map(|(i, &(kind, every, slip))| Test {
            name: format!("t{i}"),
            run: Vec::new(),
            every: Duration::from_secs(every),
            slip: Duration::from_secs(slip),
            kind,
            peer: crate::config::Peer::Wirebench,
        })
        .collect();
    let mut paths = Vec::new();
    for t in 0..tests.len() {
        for s in 0..hosts.len() {
            for d in 0..hosts.len() {
                if s != d {
                    paths.push(Path {
                        test: t,
                        source: s,
                        destination: d,
                    });
                }
            }
        }
    }
    Mesh {
        hosts,
        tests,
        paths,
    }
}

fn kind() -> impl Strategy<Value = Kind> {
    prop_oneof![Just(Kind::Throughput), Just(Kind::Latency)]
}

/// A run in progress: its id, path, end time, and whether the server answers busy.
struct Running {
    id: u64,
    path: usize,
    from: u64,
    until: u64,
    busy: bool,
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]
    #[test]
    fn every_round_is_a_run_or_a_miss_and_throughput_runs_never_share_a_host(
        hosts in 2usize..5,
        tests in proptest::collection::vec((kind(), 2u64..20, 0u64..3), 1..4),
        lengths in proptest::collection::vec((100u64..15_000, 0u8..10), 64),
        seed in any::<u64>(),
        horizon_s in 30u64..300,
    ) {
        let tests: Vec<(Kind, u64, u64)> =
            tests.into_iter().map(|(k, e, s)| (k, e, s.min(e))).collect();
        let m = mesh(hosts, &tests);
        let mut sched = Schedule::new(&m, &m.paths, 0, seed, &|_| None);
        let paths: Vec<Path> = sched.paths().collect();
        let mut now = 0u64;
        let horizon = horizon_s * 1000;
        let mut running: Vec<Running> = Vec::new();
        // Per path: the rounds settled (by a run's start or a miss), in order.
        let mut rounds: Vec<Vec<u64>> = vec![Vec::new(); paths.len()];
        let mut draws = lengths.iter().cycle();
        let mut held: Vec<(u64, u64, usize)> = Vec::new();
        while now < horizon {
            let (starts, missed) = sched.poll(now);
            for m in &missed {
                rounds[m.path].push(m.round_ms);
            }
            for s in starts {
                let p = paths[s.path];
                let t = &m.tests[p.test];
                // Within the round's slip.
                prop_assert!(now >= s.round_ms && now <= s.round_ms + ms(t.slip), "{now} {s:?}");
                if t.kind == Kind::Throughput {
                    for r in &running {
                        let q = paths[r.path];
                        if m.tests[q.test].kind == Kind::Throughput && !r.busy {
                            let shared = [q.source, q.destination]
                                .iter()
                                .any(|h| *h == p.source || *h == p.destination);
                            prop_assert!(!shared, "{p:?} beside {q:?} at {now}");
                        }
                    }
                }
                let &(len, busy) = draws.next().expect("cycle");
                let busy = busy == 0;
                running.push(Running { id: s.id, path: s.path, from: now, until: now + if busy { 5 } else { len }, busy });
            }
            // The next event: a run's end, or the schedule's wake.
            let next_end = running.iter().map(|r| r.until).min();
            let wake = sched.next_wake();
            let next = [next_end, wake].into_iter().flatten().min().unwrap_or(horizon).max(now + 1);
            now = next;
            let (ended, still): (Vec<Running>, Vec<Running>) =
                running.into_iter().partition(|r| r.until <= now);
            running = still;
            for r in ended {
                let ended = if r.busy { Ended::Busy } else { Ended::Ran };
                if !r.busy {
                    rounds[r.path].push(u64::MAX); // a run: its round is checked below
                    held.push((r.from, r.until, r.path));
                }
                sched.finished(r.id, now, ended);
            }
        }
        // Each path's rounds: as many as `every` allows over the horizon, give or take the
        // first one's phase and the one in progress.
        for (i, p) in paths.iter().enumerate() {
            let every = ms(m.tests[p.test].every);
            let settled = rounds[i].len() as u64;
            prop_assert!(settled + 2 >= horizon / every, "{p:?}: {settled} rounds in {horizon} ms, every {every}");
            prop_assert!(settled <= horizon / every + 1, "{p:?}: {settled} rounds in {horizon} ms, every {every}");
        }
        // No two throughput runs that shared a host overlapped.
        for (a, &(f1, u1, p1)) in held.iter().enumerate() {
            for &(f2, u2, p2) in &held[a + 1..] {
                let (x, y) = (paths[p1], paths[p2]);
                if m.tests[x.test].kind != Kind::Throughput || m.tests[y.test].kind != Kind::Throughput {
                    continue;
                }
                let shared = [x.source, x.destination].iter().any(|h| *h == y.source || *h == y.destination);
                prop_assert!(!shared || u1 <= f2 || u2 <= f1, "{x:?} {f1}-{u1} and {y:?} {f2}-{u2}");
            }
        }
    }
}

#[test]
fn a_busy_server_is_asked_again_within_the_slip_then_the_round_is_missed() {
    let m = mesh(2, &[(Kind::Throughput, 10, 2)]);
    let one = [m.paths[0]];
    let mut s = Schedule::new(&m, &one, 0, 7, &|_| Some(0));
    let mut tries = 0;
    let mut now = 0;
    let mut missed = Vec::new();
    while now < 2_500 {
        let (starts, miss) = s.poll(now);
        missed.extend(miss);
        for st in starts {
            tries += 1;
            s.finished(st.id, now + 10, Ended::Busy);
        }
        now = s.next_wake().expect("wake").max(now + 1);
    }
    assert!(tries >= 3, "{tries} tries");
    assert_eq!(missed.len(), 1, "{missed:?}");
    assert_eq!(missed[0].why, MissedWhy::ServerBusy);
    assert_eq!(missed[0].round_ms, 0);
}

#[test]
fn a_resumed_path_keeps_its_next_round_and_makes_up_none() {
    let m = mesh(2, &[(Kind::Latency, 10, 0)]);
    let one = [m.paths[0]];
    // Its next round was at 5 s; the agent comes back at 60 s: one run now, then every 10 s.
    let mut s = Schedule::new(&m, &one, 60_000, 1, &|_| Some(5_000));
    let (starts, missed) = s.poll(60_000);
    assert_eq!((starts.len(), missed.len()), (1, 0));
    s.finished(starts[0].id, 60_100, Ended::Ran);
    assert_eq!(s.next_rounds().next().map(|r| r.1), Some(70_000));
    let (starts, missed) = s.poll(69_999);
    assert!(starts.is_empty() && missed.is_empty());
    let (starts, _) = s.poll(70_000);
    assert_eq!(starts.len(), 1);
}

#[test]
fn a_resumed_round_a_day_ahead_is_the_wall_clock_stepped_back_and_comes_within_a_period() {
    let m = mesh(2, &[(Kind::Latency, 10, 0)]);
    let one = [m.paths[0]];
    let s = Schedule::new(&m, &one, 1_000, 1, &|_| Some(1_000 + 86_400_000));
    assert_eq!(s.next_rounds().next().map(|r| r.1), Some(11_000));
}

#[test]
fn an_agent_held_up_for_a_day_makes_up_no_backlog() {
    let m = mesh(2, &[(Kind::Latency, 1, 0)]);
    let one = [m.paths[0]];
    let mut s = Schedule::new(&m, &one, 0, 3, &|_| Some(0));
    let (starts, _) = s.poll(0);
    s.finished(starts[0].id, 10, Ended::Ran);
    // A day later: one round missed (late), not 86,400.
    let (starts, missed) = s.poll(86_400_000 + 500);
    assert!(starts.is_empty());
    assert_eq!(missed.len(), 1, "{missed:?}");
    assert_eq!(missed[0].why, MissedWhy::Late);
    assert_eq!(missed[0].round_ms, 86_400_000);
    let (starts, _) = s.poll(86_401_000);
    assert_eq!(starts.len(), 1);
}
