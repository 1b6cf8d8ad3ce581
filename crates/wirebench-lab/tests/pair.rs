//! A built pair of hosts passes real packets through the emulator, with the configured delay
//! and loss. Needs root: `#[ignore]`d, and fails in one line without it; `.ci/run` runs it.

use std::net::UdpSocket;
use std::time::{Duration, Instant};

use wirebench_lab::link::{LinkConfig, Loss};
use wirebench_lab::topo::{Lab, Topology};

fn root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .map(|s| {
            s.lines()
                .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(2) == Some("0"))
        })
        .unwrap_or(false)
}

fn cfg(delay_ms: u64, loss: f64, seed: u64) -> LinkConfig {
    LinkConfig {
        rate_bps: 100_000_000,
        overhead_bytes: 0,
        delay_ns: delay_ms * 1_000_000,
        jitter_ns: 0,
        queue_packets: 1000,
        queue_bytes: 0,
        loss: if loss > 0.0 {
            Loss::Bernoulli { p: loss }
        } else {
            Loss::None
        },
        seed,
        ..LinkConfig::new(0, 0)
    }
}

#[test]
#[ignore = "needs root"]
fn udp_crosses_the_emulated_link_with_its_delay_and_loss() {
    assert!(
        root(),
        "this test needs root (CAP_NET_ADMIN); run it as root, as CI does"
    );
    let lab = Lab::build(&Topology::pair(cfg(20, 0.0, 1), cfg(5, 0.5, 2))).expect("build");
    let server = lab
        .netns(1)
        .run(|| UdpSocket::bind("10.77.0.2:9000"))
        .expect("bind server");
    let client = lab
        .netns(0)
        .run(|| UdpSocket::bind("10.77.0.1:0"))
        .expect("bind client");
    server
        .set_read_timeout(Some(Duration::from_secs(2)))
        .unwrap();
    client
        .set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    // The first packet waits for ARP; then time a few.
    let mut buf = [0u8; 64];
    let mut delays = Vec::new();
    for i in 0..20u8 {
        let t = Instant::now();
        client.send_to(&[i; 32], "10.77.0.2:9000").unwrap();
        let (n, from) = server.recv_from(&mut buf).expect("server receives");
        assert_eq!(n, 32);
        if i > 0 {
            delays.push(t.elapsed());
        }
        server.send_to(&buf[..n], from).unwrap();
    }
    let mut back = 0;
    while client.recv_from(&mut buf).is_ok() {
        back += 1;
    }
    let reports = lab.stop().expect("stop");
    for d in &delays {
        assert!(
            *d >= Duration::from_millis(20),
            "{d:?} below the link delay"
        );
        // Loose: a loaded machine wakes the emulator late; bench/fidelity times the delay.
        assert!(
            *d < Duration::from_millis(1020),
            "{d:?} far above the link delay"
        );
    }
    let down = reports[0].down;
    assert_eq!(down.link.packets_in, 20);
    assert_eq!(back as u64, down.link.delivered, "{reports:?}");
    assert!(
        down.link.dropped_loss > 0 && down.link.dropped_loss < 20,
        "{reports:?}"
    );
    assert_eq!(reports[0].up.link.delivered, 20);
    assert_eq!(reports[0].up.emulator_drops, 0);
}

#[test]
#[ignore = "needs root"]
fn a_link_that_queues_packets_carries_each_and_its_copy() {
    assert!(
        root(),
        "this test needs root (CAP_NET_ADMIN); run it as root, as CI does"
    );
    // A drop-head queue (one that holds packets under a handle) and netem duplicating every
    // packet: each datagram arrives twice, and the link counts what the receiver sees.
    let up = LinkConfig {
        aqm: Some(wirebench_lab::aqm::AqmConfig::parse("drophead").expect("drophead")),
        netem: wirebench_lab::netem::NetemConfig {
            duplicate: 1.0,
            ..Default::default()
        },
        ..cfg(2, 0.0, 1)
    };
    let lab = Lab::build(&Topology::pair(up, cfg(2, 0.0, 2))).expect("build");
    let server = lab
        .netns(1)
        .run(|| UdpSocket::bind("10.77.0.2:9000"))
        .expect("bind server");
    let client = lab
        .netns(0)
        .run(|| UdpSocket::bind("10.77.0.1:0"))
        .expect("bind client");
    server
        .set_read_timeout(Some(Duration::from_secs(2)))
        .unwrap();
    let mut buf = [0u8; 64];
    for i in 0..20u8 {
        client.send_to(&[i; 32], "10.77.0.2:9000").unwrap();
        for _ in 0..2 {
            let (n, _) = server.recv_from(&mut buf).expect("server receives");
            assert_eq!((n, buf[0]), (32, i));
        }
    }
    let reports = lab.stop().expect("stop");
    let up = reports[0].up;
    assert!(!up.offload, "offloads off for a link that queues packets");
    assert_eq!((up.link.duplicated, up.link.packets_in), (20, 40));
    assert_eq!(
        (up.udp_in, up.udp_duplicates, up.udp_lost, up.udp_late),
        (20, 20, 0, 0)
    );
    assert_eq!(up.link.delivered, up.link.packets_in);
}
