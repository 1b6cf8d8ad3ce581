//! End-to-end tests on loopback: exact counts for every protocol, mechanism and direction.

mod common;

use common::{f, u, Server};

/// Both sides agree on every byte and message.
fn assert_exact(v: &serde_json::Value, bytes: u64, messages: u64) {
    assert_eq!(u(v, "end.sent.bytes"), bytes, "{v}");
    assert_eq!(u(v, "end.sent.messages"), messages, "{v}");
    assert_eq!(u(v, "end.received.bytes"), bytes, "{v}");
    assert_eq!(u(v, "end.received.messages"), messages, "{v}");
    assert!(v.get("error").is_none(), "{v}");
}

#[test]
fn tcp_stream_is_exact_both_ways_with_a_short_last_message() {
    let s = Server::start(&[]);
    for dir in [&[][..], &["-R"][..]] {
        let v = s.run_json(&[&["-n", "10000001", "-l", "100000"], dir].concat());
        assert_exact(&v, 10_000_001, 101);
        assert_eq!(v["test"]["protocol"], "tcp");
        assert!(f(&v, "end.received_bps") > 0.0);
    }
}

#[test]
fn timed_tcp_streams_write_large_calls_and_end_on_a_message_boundary() {
    // Streaming writes go out in calls of 2 MiB, not one message per write: messages are
    // counted where the byte stream crosses their boundaries, and a timed test completes
    // the message under way, so both sides count whole messages of the size asked.
    // On loopback (segments of 65,483 bytes) a write hands the kernel 2 MiB and a read asks
    // for 512 KiB, or a whole message when that is larger; the results say so.
    let s = Server::start(&[]);
    for (size, dir, reads) in [
        ("1000", &[][..], 512 * 1024),
        ("100003", &["-R"][..], 512 * 1024),
        ("1M", &[][..], 1_000_000),
    ] {
        let v = s.run_json(&[&["-t", "300ms", "-l", size], dir].concat());
        let bytes = u(&v, "end.sent.bytes");
        let messages = u(&v, "end.sent.messages");
        assert!(messages > 0, "{v}");
        assert_eq!(bytes, messages * u(&v, "test.size"), "{v}");
        assert_exact(&v, bytes, messages);
        let (sender, receiver) = if dir.is_empty() {
            ("client", "server")
        } else {
            ("server", "client")
        };
        let calls = |side: &str| v["datapath"][side]["call_bytes"].as_u64();
        assert_eq!(calls(sender), Some(2 << 20), "{v}");
        assert_eq!(calls(receiver), Some(reads), "{v}");
    }
}

#[test]
fn tcp_stop_and_wait_is_exact_both_ways() {
    let s = Server::start(&[]);
    for dir in [&[][..], &["-R"][..]] {
        let v = s.run_json(
            &[
                &["--mode", "stop-and-wait", "-n", "300001", "-l", "1000"],
                dir,
            ]
            .concat(),
        );
        assert_exact(&v, 300_001, 301);
        assert_eq!(v["test"]["mechanism"], "stop-and-wait");
    }
}

#[test]
fn udp_stream_accounts_for_every_datagram_both_ways() {
    let s = Server::start(&[]);
    for dir in [&[][..], &["-R"][..]] {
        let v = s.run_json(&[&["-u", "-n", "2000000", "-l", "1000", "-b", "100M"], dir].concat());
        assert_eq!(u(&v, "end.sent.messages"), 2000);
        assert_eq!(u(&v, "end.sent.bytes"), 2_000_000);
        let received = u(&v, "end.received.messages");
        // Loopback may drop a few under load; whatever it drops is counted exactly.
        assert_eq!(received + u(&v, "end.udp.lost"), 2000, "{v}");
        assert_eq!(u(&v, "end.received.bytes"), received * 1000);
        assert!(received >= 1000, "{v}");
        assert_eq!(v["end"]["udp"]["sequenced"], true);
    }
}

#[test]
fn udp_stop_and_wait_delivers_every_byte_both_ways() {
    let s = Server::start(&[]);
    for dir in [&[][..], &["-R"][..]] {
        let v = s.run_json(
            &[
                &[
                    "-u",
                    "--mode",
                    "stop-and-wait",
                    "-n",
                    "200001",
                    "-l",
                    "1000",
                ],
                dir,
            ]
            .concat(),
        );
        assert_exact(&v, 200_001, 201);
        assert_eq!(u(&v, "end.udp.lost"), 0);
        assert!(v["end"]["retransmits"].is_u64());
    }
}

#[test]
fn udp_one_byte_and_largest_datagrams() {
    let s = Server::start(&[]);
    let v = s.run_json(&["-u", "--mode", "stop-and-wait", "-n", "500", "-l", "1"]);
    assert_exact(&v, 500, 500);
    assert_eq!(v["end"]["udp"]["sequenced"], false);
    let v = s.run_json(&[
        "-u",
        "--mode",
        "stop-and-wait",
        "-n",
        "655070",
        "-l",
        "65507",
        "-R",
    ]);
    assert_exact(&v, 655_070, 10);
    // A last datagram too short for the header is still counted.
    let v = s.run_json(&["-u", "-n", "100005", "-l", "1000", "-b", "50M"]);
    assert_eq!(u(&v, "end.sent.messages"), 101);
    assert_eq!(u(&v, "end.received.messages") + u(&v, "end.udp.lost"), 101);
    let v = s.run_json(&["-u", "-n", "1000", "-l", "1", "-b", "1M"]);
    assert_eq!(u(&v, "end.sent.messages"), 1000);
    assert_eq!(u(&v, "end.received.messages") + u(&v, "end.udp.lost"), 1000);
}

#[test]
fn json_document_has_the_contract_keys() {
    let s = Server::start(&[]);
    let v = s.run_json(&["-u", "-t", "300ms", "-i", "100ms", "-b", "10M"]);
    assert_eq!(u(&v, "schema"), 1);
    assert!(v["wirebench"].as_str().unwrap().starts_with("wirebench "));
    assert_eq!(v["test"]["duration_s"], 0.3);
    assert!(
        v["datapath"]["client"]["send_buffer_bytes"]
            .as_u64()
            .unwrap()
            > 0
    );
    assert!(
        v["datapath"]["server"]["recv_buffer_bytes"]
            .as_u64()
            .unwrap()
            > 0
    );
    let intervals = v["intervals"].as_array().unwrap();
    assert!(intervals.len() >= 3, "{v}");
    let sent: u64 = intervals
        .iter()
        .map(|i| i["sent_bytes"].as_u64().unwrap())
        .sum();
    assert_eq!(sent, u(&v, "end.sent.bytes"));
    let received: u64 = intervals
        .iter()
        .map(|i| i["received_bytes"].as_u64().unwrap())
        .sum();
    assert_eq!(received, u(&v, "end.received.bytes"));
    for key in ["lost", "duplicates", "reordered", "loss_ratio", "jitter_ms"] {
        assert!(v["end"]["udp"].get(key).is_some(), "end.udp.{key}");
    }
    // 10 Mbit/s for 0.3 s is 375 kB; allow wide bounds on a shared machine.
    let rate = f(&v, "end.sent_bps");
    assert!(rate > 5e6 && rate < 12e6, "{rate}");
}

#[test]
fn run_without_host_measures_loopback_in_process() {
    let out = common::wirebench()
        .args(["run", "-n", "1M", "--json"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_exact(&v, 1_000_000, 8);
}

#[test]
fn human_output_has_the_seed_table() {
    let s = Server::start(&[]);
    let out = s.run(&[
        "-u", "-n", "10000", "-l", "100", "-b", "10M", "-i", "50ms", "-V",
    ]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    for col in [
        "Time (ms)",
        "Sent messages",
        "Sent bytes",
        "Read messages",
        "Read bytes",
        "Protocol",
        "Mechanism",
        "Lost",
    ] {
        assert!(text.contains(col), "{col} missing in {text}");
    }
    // Live lines: the receiver's view of each interval, then the sender and receiver.
    assert!(
        text.contains("[  1]") && text.contains("  receiver\n") && text.contains("  sender\n"),
        "{text}"
    );
    // The mechanism is spelled as in the JSON.
    assert!(text.contains("udp     stream"), "{text}");
}

#[test]
fn udp_results_carry_delay_loss_runs_and_udpmon_figures() {
    let s = Server::start(&[]);
    let v = s.run_json(&[
        "-u", "-n", "1000000", "-l", "1000", "-b", "100M", "-i", "50ms",
    ]);
    let udp = &v["end"]["udp"];
    // One host: one clock, so the one-way delay is absolute.
    assert_eq!(udp["clocks"], "same-host", "{v}");
    for key in ["delay_ms", "delay_variation_ms", "interarrival_us"] {
        for p in ["count", "min", "mean", "p50", "p90", "p99", "p999", "max"] {
            assert!(udp[key][p].is_number(), "end.udp.{key}.{p} in {v}");
        }
    }
    let d = &udp["delay_ms"];
    assert!(f(&v, "end.udp.delay_ms.min") >= 0.0, "{v}");
    assert!(d["p50"].as_f64() <= d["p99"].as_f64() && d["p99"].as_f64() <= d["max"].as_f64());
    assert_eq!(f(&v, "end.udp.delay_variation_ms.min"), 0.0);
    assert_eq!(
        u(&v, "end.udp.delay_ms.count"),
        u(&v, "end.received.messages")
    );
    assert_eq!(u(&v, "end.udp.loss_runs.lost"), u(&v, "end.udp.lost"));
    if u(&v, "end.udp.lost") == 0 {
        assert_eq!(u(&v, "end.udp.last_in_order_seq"), 999);
        assert!(v["end"]["udp"]["first_lost_seq"].is_null());
        assert!(f(&v, "end.udp.bandwidth_without_loss_bps") > 0.0);
    }
    let iv = v["intervals"].as_array().expect("intervals");
    assert!(iv.len() >= 2, "{v}");
    assert!(iv.iter().any(|i| i["delay_p99_ms"].is_number()), "{v}");
    assert!(iv.iter().any(|i| i["jitter_ms"].is_number()), "{v}");
}

#[test]
fn packet_log_has_a_record_per_datagram_and_per_loss_both_ways() {
    let s = Server::start(&[]);
    let dir = std::env::temp_dir().join(format!("wirebench-loopback-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    for dir_flag in [&[][..], &["-R"][..]] {
        let log = dir.join(format!("log{}", dir_flag.len()));
        let log = log.to_str().expect("utf-8 path");
        let v = s.run_json(
            &[
                &[
                    "-u",
                    "-n",
                    "3000000",
                    "-l",
                    "1000",
                    "-b",
                    "200M",
                    "--packet-log",
                    log,
                ][..],
                dir_flag,
            ]
            .concat(),
        );
        let out = common::wirebench()
            .args(["packet-log", log])
            .output()
            .expect("packet-log");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8(out.stdout).expect("utf-8");
        let mut seqs = std::collections::BTreeSet::new();
        let (mut received, mut lost) = (0u64, 0u64);
        for line in text.lines().skip(1) {
            let fields: Vec<&str> = line.split(',').collect();
            let seq: u64 = fields[1].parse().expect("seq");
            match fields[0] {
                "received" => received += 1,
                "lost" => lost += fields[2].parse::<u64>().expect("count"),
                _ => continue,
            }
            assert!(seqs.insert(seq), "seq {seq} appears twice");
        }
        assert_eq!(received, u(&v, "end.received.messages"), "{v}");
        assert_eq!(lost, u(&v, "end.udp.lost"), "{v}");
        assert_eq!(
            seqs.len() as u64,
            3000,
            "every sequence number exactly once"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn offloaded_and_plain_paths_count_the_same() {
    let s = Server::start(&[]);
    for dir in [&[][..], &["-R"][..]] {
        let mut seen = Vec::new();
        for off in [&[][..], &["--no-offload"][..]] {
            // 3001 datagrams, the last one 500 bytes: a short GSO tail.
            let v = s.run_json(
                &[
                    &["-u", "-n", "3000500", "-l", "1000", "-b", "200M"],
                    dir,
                    off,
                ]
                .concat(),
            );
            assert_eq!(u(&v, "end.sent.messages"), 3001, "{v}");
            let lost = u(&v, "end.udp.lost");
            assert_eq!(u(&v, "end.received.messages") + lost, 3001, "{v}");
            assert_eq!(u(&v, "end.udp.loss_runs.lost"), lost);
            let features = v["datapath"]["client"]["features"].to_string();
            assert_eq!(features.contains("mmsg"), off.is_empty(), "{v}");
            seen.push((
                u(&v, "end.sent.bytes"),
                u(&v, "end.received.bytes") + lost * 1000,
            ));
        }
        // Both paths sent the same bytes and accounted for all of them (the tail datagram
        // is 500 bytes; a lost tail would make this off by 500, which loopback at 200M
        // does not do).
        assert_eq!(seen[0], seen[1], "{seen:?}");
        assert_eq!(seen[0].0, 3_000_500);
    }
}

#[test]
fn request_response_times_every_transaction() {
    let s = Server::start(&[]);
    for proto in ["--tcp", "-u"] {
        let v = s.run_json(&[
            proto,
            "--mode",
            "rr",
            "-l",
            "64",
            "--response-size",
            "200",
            "-n",
            "64000",
        ]);
        assert_eq!(v["test"]["mechanism"], "rr");
        assert_eq!(u(&v, "test.response_size"), 200);
        let sent = u(&v, "end.sent.messages");
        assert_eq!(sent, 1000, "{v}");
        let timeouts = if proto == "-u" {
            u(&v, "end.rr_timeouts")
        } else {
            0
        };
        // Every transaction answered is one round trip in the histogram.
        assert_eq!(u(&v, "end.latency_us.count") + timeouts, 1000, "{v}");
        // A timeout lost the request or the response: the server saw at least the rest.
        assert!(
            u(&v, "end.received.messages") >= 1000 - timeouts.min(1000),
            "{v}"
        );
        let l = &v["end"]["latency_us"];
        let (p50, p99, max) = (l["p50"].as_f64(), l["p99"].as_f64(), l["max"].as_f64());
        assert!(p50 <= p99 && p99 <= max, "{v}");
        assert!(f(&v, "end.latency_us.min") > 0.0);
        assert!(f(&v, "end.transactions_per_s") > 0.0);
        assert!(v["intervals"][0]["latency_p50_us"].is_number(), "{v}");
    }
    // Bad combinations are usage errors.
    for args in [
        &["--mode", "rr", "-R"][..],
        &["-u", "--mode", "rr", "-l", "4"][..],
        &["--response-size", "10"][..],
    ] {
        let out = s.run(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
    }
}

#[test]
fn parallel_streams_add_up_exactly_both_ways() {
    let s = Server::start(&[]);
    for dir in [&[][..], &["-R"][..]] {
        for proto in [
            &["--tcp", "-l", "100000"][..],
            &["-u", "-l", "1000", "-b", "100M"][..],
        ] {
            // 1,000,100 bytes per stream: a short last message in each (with a UDP header).
            let v = s.run_json(&[&["-P", "3", "-n", "1000100"][..], proto, dir].concat());
            let streams = v["streams"].as_array().expect("per-stream results");
            assert_eq!(streams.len(), 3, "{v}");
            assert_eq!(u(&v, "test.streams"), 3);
            let sum = |key: &str| -> u64 { streams.iter().map(|st| u(st, key)).sum() };
            assert_eq!(u(&v, "end.sent.bytes"), 3_000_300, "{v}");
            assert_eq!(sum("sent.bytes"), 3_000_300);
            assert_eq!(sum("received.bytes"), u(&v, "end.received.bytes"));
            assert_eq!(sum("received.messages"), u(&v, "end.received.messages"));
            if proto[0] == "-u" {
                let lost = u(&v, "end.udp.lost");
                assert_eq!(sum("udp.lost"), lost, "{v}");
                assert_eq!(
                    u(&v, "end.received.messages") + lost,
                    u(&v, "end.sent.messages")
                );
                assert_eq!(u(&v, "end.udp.loss_runs.lost"), lost);
                // the side's delay distribution holds every stream's datagrams
                assert_eq!(
                    u(&v, "end.udp.delay_ms.count"),
                    u(&v, "end.received.messages")
                );
            } else {
                assert_eq!(u(&v, "end.received.bytes"), 3_000_300, "{v}");
                for st in streams {
                    assert!(st["tcp"]["snd_mss_bytes"].as_u64().is_some(), "{st}");
                }
            }
            assert!(v.get("error").is_none(), "{v}");
        }
    }
    // Out of range: a usage error.
    assert_eq!(s.run(&["-P", "0"]).status.code(), Some(2));
    assert_eq!(s.run(&["-P", "65"]).status.code(), Some(2));
}

#[test]
fn bidir_measures_both_directions_at_once() {
    let s = Server::start(&[]);
    for proto in [
        &["--tcp", "-l", "100000"][..],
        &["-u", "-l", "1000", "-b", "100M"][..],
    ] {
        let v = s.run_json(&[&["--bidir", "-P", "2", "-n", "1000000"][..], proto].concat());
        assert_eq!(v["test"]["direction"], "bidir");
        assert!(v.get("error").is_none(), "{v}");
        for half in [&v, &v["reverse"]] {
            assert_eq!(u(half, "end.sent.bytes"), 2_000_000, "{v}");
            assert_eq!(half["streams"].as_array().map(Vec::len), Some(2), "{v}");
            let received = u(half, "end.received.messages");
            let lost = if proto[0] == "-u" {
                u(half, "end.udp.lost")
            } else {
                0
            };
            assert_eq!(received + lost, u(half, "end.sent.messages"), "{v}");
        }
    }
    assert_eq!(s.run(&["--bidir", "-R"]).status.code(), Some(2));
    assert_eq!(s.run(&["--bidir", "--mode", "rr"]).status.code(), Some(2));
}

#[test]
fn zerocopy_reports_what_the_kernel_did() {
    let s = Server::start(&[]);
    for (dir, side) in [(&[][..], "client"), (&["-R"][..], "server")] {
        let v = s.run_json(&[&["--zerocopy", "-n", "50000000", "-l", "100000"][..], dir].concat());
        assert_eq!(u(&v, "end.received.bytes"), 50_000_000, "{v}");
        let z = &v["datapath"][side]["zerocopy"];
        assert_eq!(z["enabled"], true, "{v}");
        let (sends, completed, copied) = (u(z, "sends"), u(z, "completed"), u(z, "copied"));
        assert!(
            sends >= 500 && completed <= sends && copied <= completed,
            "{v}"
        );
    }
    assert_eq!(s.run(&["-u", "--zerocopy"]).status.code(), Some(2));
}

#[test]
fn connect_request_response_opens_a_connection_per_transaction() {
    let s = Server::start(&[]);
    let v = s.run_json(&[
        "--mode",
        "crr",
        "-l",
        "100",
        "--response-size",
        "300",
        "-n",
        "20000",
    ]);
    assert_eq!(v["test"]["mechanism"], "crr");
    assert_eq!(u(&v, "end.sent.messages"), 200, "{v}");
    assert_eq!(u(&v, "end.received.messages"), 200, "{v}");
    assert_eq!(u(&v, "end.latency_us.count"), 200);
    assert!(f(&v, "end.latency_us.p50") > 0.0);
    // The server keeps serving other tests afterwards: no transaction left a slot behind.
    let v = s.run_json(&["-n", "1000000"]);
    assert_eq!(u(&v, "end.received.bytes"), 1_000_000);
    assert_eq!(s.run(&["--mode", "crr", "-P", "2"]).status.code(), Some(2));
}

#[test]
fn busy_polling_request_response_is_exact_and_recorded_on_both_sides() {
    let s = Server::start(&[]);
    for args in [
        &["--mode", "rr", "--busy-poll"][..],
        &["--mode", "rr", "-u", "--busy-poll=20us"][..],
        &["--mode", "crr", "--busy-poll"][..],
    ] {
        let v = s.run_json(&[args, &["-l", "64", "-n", "64000"]].concat());
        let timeouts = if args.contains(&"-u") {
            u(&v, "end.rr_timeouts")
        } else {
            0
        };
        assert_eq!(u(&v, "end.sent.messages"), 1000, "{v}");
        assert_eq!(u(&v, "end.latency_us.count") + timeouts, 1000, "{v}");
        if timeouts == 0 {
            assert_eq!(u(&v, "end.received.messages"), 1000, "{v}");
        }
        let spin_ns = if args.contains(&"--busy-poll=20us") {
            20_000
        } else {
            50_000
        };
        for side in ["client", "server"] {
            let bp = &v["datapath"][side]["busy_poll"];
            assert_eq!(bp["spin_ns"].as_u64(), Some(spin_ns), "{side}: {v}");
            // Every wait either ended in the spin or blocked after it: the client waited
            // for each response, the server for each request (UDP: and maybe a late one).
            let waits = bp["spun"].as_u64().unwrap_or(0) + bp["blocked"].as_u64().unwrap_or(0);
            assert!(waits >= 1000 - timeouts, "{side}: {v}");
            // The kernel's answer to SO_BUSY_POLL is recorded either way.
            assert!(
                bp["so_busy_poll_us"].is_u64() || bp["so_busy_poll_refused"].is_string(),
                "{side}: {v}"
            );
        }
    }
    // Without the flag nothing is recorded.
    let v = s.run_json(&["--mode", "rr", "-n", "6400"]);
    assert!(v["datapath"]["client"].get("busy_poll").is_none(), "{v}");
    // Other modes refuse it in one line, as a usage error.
    for mode in ["stream", "stop-and-wait"] {
        let out = s.run(&["--mode", mode, "-n", "1000", "--busy-poll"]);
        assert_eq!(out.status.code(), Some(2), "{mode}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.trim().lines().count(), 1, "{err}");
        assert!(
            err.contains("--busy-poll applies to --mode rr and crr"),
            "{err}"
        );
    }
}

/// Issue 46: 35 Gbit/s on a laptop read like a network. A run without a host says first
/// what it measures; a run against a host does not.
#[test]
fn a_run_without_a_host_says_it_measured_this_machine() {
    let out = common::wirebench()
        .args(["run", "-n", "1M"])
        .output()
        .expect("run");
    assert!(out.status.success(), "{out:?}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let first = stdout.lines().next().unwrap_or_default();
    assert!(
        first.starts_with(
            "No host: measuring this machine's loopback against a server in this process"
        ),
        "{stdout}"
    );
    let s = Server::start(&[]);
    let out = common::wirebench()
        .args([
            "run",
            "127.0.0.1",
            "--port",
            &s.port.to_string(),
            "-n",
            "1M",
        ])
        .output()
        .expect("run");
    assert!(!String::from_utf8_lossy(&out.stdout).contains("No host"));
}
