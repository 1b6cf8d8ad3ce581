//! The link model in virtual time, as smoltcp's `tests/netsim.rs` sweeps its fault
//! injector: a fixed seed and a fixed packet schedule through loss → drop-tail queue →
//! serializer → delay, over a grid of rate × queue × loss, summarized as a table and pinned
//! as a snapshot. No socket, no clock: the same table on every machine, every run.
//!
//! A change to the model that moves a figure shows here as a diff of the table; if the
//! change is meant, print the new table (`cargo test -p wirebench-lab --test netsim --
//! --nocapture`), check it, and paste it below.

use wirebench_lab::link::{Fate, Link, LinkConfig, Loss};

/// The test's own random numbers (splitmix64), apart from the link's.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn uniform(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// The packet schedule: 4000 packets of 64 to 1500 bytes, arriving as a Poisson process
/// at a mean of 5 Mbit/s: (time ns, length bytes).
fn schedule() -> Vec<(u64, u64)> {
    let mut rng = Rng(2024);
    let mut t = 0.0f64;
    (0..4000)
        .map(|_| {
            let len = 64 + rng.next() % (1500 - 64 + 1);
            // Mean gap: a mean packet (782 bytes) at 5 Mbit/s.
            let mean_gap_ns = 782.0 * 8.0 / 5e6 * 1e9;
            t += -(1.0 - rng.uniform()).ln() * mean_gap_ns;
            (t as u64, len)
        })
        .collect()
}

struct Row {
    offered: u64,
    delivered: u64,
    lost: u64,
    queue_full: u64,
    delay_ms: [f64; 4],
}

fn simulate(cfg: LinkConfig, packets: &[(u64, u64)]) -> Row {
    let mut link = Link::new(cfg);
    let mut delays = Vec::new();
    let (mut lost, mut queue_full) = (0, 0);
    for &(at, len) in packets {
        match link.offer(at, len) {
            Fate::Lost => lost += 1,
            Fate::QueueFull => queue_full += 1,
            Fate::Deliver { at_ns, .. } => delays.push(at_ns - at),
        }
    }
    delays.sort_unstable();
    let q = |p: f64| {
        let i = ((delays.len() as f64 - 1.0) * p).round() as usize;
        delays.get(i).map_or(0.0, |d| *d as f64 / 1e6)
    };
    let c = link.counters();
    assert_eq!(c.packets_in, packets.len() as u64);
    assert_eq!((c.dropped_loss, c.dropped_queue), (lost, queue_full));
    Row {
        offered: c.packets_in,
        delivered: c.delivered,
        lost,
        queue_full,
        delay_ms: [q(0.0), q(0.5), q(0.99), q(1.0)],
    }
}

fn table() -> String {
    let packets = schedule();
    let losses = [
        ("none", Loss::None),
        ("bernoulli 2%", Loss::Bernoulli { p: 0.02 }),
        (
            // 2% of the time bad, bursts of 4 packets on average (as `loss-burst = 4`).
            "burst 2% x4",
            Loss::GilbertElliott {
                p_gb: 0.02 * 0.25 / 0.98,
                p_bg: 0.25,
                loss_good: 0.0,
                loss_bad: 1.0,
            },
        ),
    ];
    let mut s = format!(
        "{:<6} {:>5} {:>12} {:>7} {:>9} {:>4} {:>5} {:>8} {:>8} {:>8} {:>8}\n",
        "rate",
        "queue",
        "loss",
        "offered",
        "delivered",
        "lost",
        "qdrop",
        "min ms",
        "p50 ms",
        "p99 ms",
        "max ms"
    );
    for (rate_name, rate_bps) in [("4M", 4_000_000), ("10M", 10_000_000)] {
        for queue in [4u32, 64] {
            for (loss_name, loss) in losses {
                let cfg = LinkConfig {
                    rate_bps,
                    overhead_bytes: 0,
                    delay_ns: 10_000_000,
                    jitter_ns: 0,
                    queue_packets: queue,
                    queue_bytes: 0,
                    loss,
                    seed: 7,
                    ..LinkConfig::new(0, 0)
                };
                let r = simulate(cfg, &packets);
                s += &format!(
                    "{:<6} {:>5} {:>12} {:>7} {:>9} {:>4} {:>5} {:>8.3} {:>8.3} {:>8.3} {:>8.3}\n",
                    rate_name,
                    queue,
                    loss_name,
                    r.offered,
                    r.delivered,
                    r.lost,
                    r.queue_full,
                    r.delay_ms[0],
                    r.delay_ms[1],
                    r.delay_ms[2],
                    r.delay_ms[3],
                );
            }
        }
    }
    s
}

#[test]
fn the_link_model_sweep_is_pinned() {
    let got = table();
    println!("{got}");
    assert_eq!(got, SNAPSHOT, "the link model's sweep changed:\n{got}");
}

const SNAPSHOT: &str = "\
rate   queue         loss offered delivered lost qdrop   min ms   p50 ms   p99 ms   max ms\n\
4M         4         none    4000      3035    0   965   10.142   15.504   21.060   22.409\n\
4M         4 bernoulli 2%    4000      3023   68   909   10.142   15.427   21.171   22.675\n\
4M         4  burst 2% x4    4000      3019   49   932   10.142   15.420   21.071   22.409\n\
4M        64         none    4000      3297    0   703   11.330  106.672  125.816  130.796\n\
4M        64 bernoulli 2%    4000      3296   68   636   11.330  105.703  125.302  129.398\n\
4M        64  burst 2% x4    4000      3317   49   634   11.330  105.388  124.264  129.026\n\
10M        4         none    4000      3989    0    11   10.051   10.890   13.184   14.109\n\
10M        4 bernoulli 2%    4000      3921   68    11   10.051   10.885   13.148   14.109\n\
10M        4  burst 2% x4    4000      3941   49    10   10.051   10.889   13.177   14.070\n\
10M       64         none    4000      4000    0     0   10.051   10.897   13.337   15.009\n\
10M       64 bernoulli 2%    4000      3932   68     0   10.051   10.888   13.308   15.009\n\
10M       64  burst 2% x4    4000      3951   49     0   10.051   10.891   13.316   14.755\n";
