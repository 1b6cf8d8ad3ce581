//! Loss injected by the kernel between two hosts, independent of wirebench: two network
//! namespaces joined by veth, the server in one, the client in the other, and an nftables
//! rule on the receiver's input hook that drops the test's data datagrams, with a counter.
//! The sender cannot see these drops (unlike an output rule, which fails the send), so
//! wirebench's loss must equal the kernel's counter from sequence numbers alone.
//!
//! The runs use `--no-offload`: with UDP GSO, a batch of datagrams crosses the veth as one
//! packet, which netfilter sees, counts and drops as one, so the kernel's counter would count
//! batches, not datagrams.
//!
//! Needs root (CAP_NET_ADMIN), `ip` and `nft`: the tests are `#[ignore]`d and fail in one line
//! without them; `.ci/run` installs them and runs the tests.

mod common;

use std::collections::HashSet;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

use common::{u, wait_for_line};
use serde_json::Value;

const PORT: &str = "5300";

/// Two namespaces joined by veth, deleted (with every process and device in them) on drop.
struct Pair {
    client: String,
    server: String,
    server_proc: Option<Child>,
}

fn sh(args: &[&str]) -> Result<(), String> {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .map_err(|e| format!("{}: {e}", args[0]))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// A subnet per pair, so that tests running at once do not meet.
static NEXT: AtomicU32 = AtomicU32::new(0);

impl Pair {
    /// Makes the pair; fails the test when this machine cannot.
    fn new() -> Self {
        Self::with_server(&[])
    }

    /// As `new`, with more flags for the server.
    fn with_server(extra: &[&str]) -> Self {
        common::require_root();
        common::require("ip");
        common::require("nft");
        let n = NEXT.fetch_add(1, Ordering::SeqCst);
        let id = format!("{}-{n}", std::process::id());
        let mut pair = Pair {
            client: format!("wbtc-{id}"),
            server: format!("wbts-{id}"),
            server_proc: None,
        };
        let subnet = format!("10.213.{n}");
        let setup = || -> Result<(), String> {
            sh(&["ip", "netns", "add", &pair.client])?;
            sh(&["ip", "netns", "add", &pair.server])?;
            let (wbc, wbs) = (format!("wbc{n}"), format!("wbs{n}"));
            sh(&[
                "ip",
                "link",
                "add",
                &wbc,
                "netns",
                &pair.client,
                "type",
                "veth",
                "peer",
                "name",
                &wbs,
                "netns",
                &pair.server,
            ])?;
            for (ns, dev, host) in [(&pair.client, &wbc, 1), (&pair.server, &wbs, 2)] {
                sh(&[
                    "ip",
                    "-n",
                    ns,
                    "addr",
                    "add",
                    &format!("{subnet}.{host}/24"),
                    "dev",
                    dev,
                ])?;
                sh(&["ip", "-n", ns, "link", "set", dev, "up"])?;
                sh(&["ip", "-n", ns, "link", "set", "lo", "up"])?;
            }
            Ok(())
        };
        if let Err(e) = setup() {
            panic!("cannot make a veth pair in two namespaces: {e}");
        }
        let mut child = Command::new("ip")
            .args([
                "netns",
                "exec",
                &pair.server,
                env!("CARGO_BIN_EXE_wirebench"),
            ])
            .args(["serve", "--bind", &format!("{subnet}.2"), "--port", PORT])
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start the server in its namespace");
        wait_for_line(&mut child, "listening");
        pair.server_proc = Some(child);
        pair
    }

    /// The pair's number: its subnet's and devices'.
    fn number(&self) -> u32 {
        self.client
            .rsplit('-')
            .next()
            .and_then(|n| n.parse().ok())
            .expect("pair number")
    }

    fn server_addr(&self) -> String {
        format!("10.213.{}.2", self.number())
    }

    /// Adds an input-hook rule `expr counter drop` for the test's data datagrams in `ns`
    /// (UDP from or to the test port, longer than the 16-byte hello).
    fn drop_rule(&self, ns: &str, expr: &str) {
        self.drop_rule_sized(ns, "udp length > 100", expr);
    }

    /// As [`Pair::drop_rule`], for the test's datagrams of the lengths `sized` matches.
    fn drop_rule_sized(&self, ns: &str, sized: &str, expr: &str) {
        let script = format!(
            "add table inet wb\n\
             add chain inet wb in {{ type filter hook input priority 0; }}\n\
             add rule inet wb in udp sport {PORT} {sized} {expr} counter drop\n\
             add rule inet wb in udp dport {PORT} {sized} {expr} counter drop\n"
        );
        nft_script(ns, &script);
    }

    /// Sets both ends' MTU.
    fn set_mtu(&self, mtu: u32) {
        let n = self.number();
        for (ns, dev) in [
            (&self.client, format!("wbc{n}")),
            (&self.server, format!("wbs{n}")),
        ] {
            sh(&["ip", "-n", ns, "link", "set", &dev, "mtu", &mtu.to_string()])
                .expect("set the veth's MTU");
        }
    }

    /// Adds input-hook rules in `ns` that count (and let through) the test's packets each
    /// of `matches` selects, in order.
    fn count_rules(&self, ns: &str, matches: &[&str]) {
        let mut script = String::from(
            "add table inet wbc\n\
             add chain inet wbc in { type filter hook input priority 0; }\n",
        );
        for m in matches {
            script.push_str(&format!("add rule inet wbc in {m} counter\n"));
        }
        nft_script(ns, &script);
    }

    /// Each rule's packet count in `ns`, in the order of the ruleset.
    fn counters(&self, ns: &str) -> Vec<u64> {
        let out = Command::new("ip")
            .args(["netns", "exec", ns, "nft", "-j", "list", "ruleset"])
            .output()
            .expect("nft list");
        let v: Value = serde_json::from_slice(&out.stdout).expect("nft JSON");
        let mut counts = Vec::new();
        for item in v["nftables"].as_array().expect("nftables array") {
            for e in item["rule"]["expr"].as_array().into_iter().flatten() {
                if let Some(n) = e["counter"]["packets"].as_u64() {
                    counts.push(n);
                }
            }
        }
        counts
    }

    /// Packets the rules in `ns` dropped, from the kernel's counters.
    fn dropped(&self, ns: &str) -> u64 {
        let out = Command::new("ip")
            .args(["netns", "exec", ns, "nft", "-j", "list", "ruleset"])
            .output()
            .expect("nft list");
        let v: Value = serde_json::from_slice(&out.stdout).expect("nft JSON");
        let mut total = 0;
        for item in v["nftables"].as_array().expect("nftables array") {
            for e in item["rule"]["expr"].as_array().into_iter().flatten() {
                if let Some(n) = e["counter"]["packets"].as_u64() {
                    total += n;
                }
            }
        }
        total
    }

    /// Runs `wirebench run SERVER ARGS --json` in the client namespace.
    fn run(&self, args: &[&str]) -> Value {
        let out = Command::new("ip")
            .args([
                "netns",
                "exec",
                &self.client,
                env!("CARGO_BIN_EXE_wirebench"),
            ])
            .args(["run", &self.server_addr(), "--port", PORT, "--json"])
            .args(args)
            .output()
            .expect("run the client in its namespace");
        assert!(
            out.status.success(),
            "wirebench run {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).expect("results JSON")
    }
}

/// Loads `script` into nftables in `ns`.
fn nft_script(ns: &str, script: &str) {
    let out = Command::new("ip")
        .args(["netns", "exec", ns, "nft", "-f", "-"])
        .stdin(Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            use std::io::Write;
            c.stdin
                .take()
                .expect("nft stdin")
                .write_all(script.as_bytes())?;
            c.wait()
        })
        .expect("run nft");
    assert!(out.success(), "nft rejected {script}");
}

impl Drop for Pair {
    fn drop(&mut self) {
        if let Some(mut c) = self.server_proc.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        // Deleting a namespace deletes its end of the veth, and with it the other end.
        let _ = sh(&["ip", "netns", "del", &self.client]);
        let _ = sh(&["ip", "netns", "del", &self.server]);
    }
}

#[test]
#[ignore = "needs root and nftables"]
fn random_drops_on_the_receiver_are_counted_exactly_both_ways() {
    let pair = Pair::new();
    for (receiver_ns, dir) in [(pair.server.clone(), ""), (pair.client.clone(), "-R")] {
        pair.drop_rule(&receiver_ns, "numgen random mod 100 < 10");
        let before = pair.dropped(&receiver_ns);
        let args: Vec<&str> = [
            "-u",
            "-n",
            "2000000",
            "-l",
            "1000",
            "-b",
            "50M",
            "--no-offload",
            dir,
        ]
        .into_iter()
        .filter(|a| !a.is_empty())
        .collect();
        let v = pair.run(&args);
        let dropped = pair.dropped(&receiver_ns) - before;
        let lost = u(&v, "end.udp.lost");
        assert_eq!(lost, dropped, "direction {dir:?}: {v}");
        assert_eq!(u(&v, "end.udp.loss_runs.lost"), lost, "{v}");
        assert_eq!(u(&v, "end.received.messages") + lost, 2000);
        // 10% of 2000: expect 200, sd about 13; a wide, safe band.
        assert!((120..=300).contains(&lost), "{v}");
        assert_eq!(u(&v, "end.local_drops"), 0, "the sender saw nothing");
        // Remove the table so that the next direction starts clean.
        sh(&[
            "ip",
            "netns",
            "exec",
            &receiver_ns,
            "nft",
            "delete",
            "table",
            "inet",
            "wb",
        ])
        .expect("delete table");
    }
}

/// QUIC's datagrams (`--quic --datagrams`) through the same kernel: a rule drops every
/// eighth packet that carries one. They are the only packets of their length (a 1000-byte
/// datagram makes a UDP payload of about 1,030 bytes; QUIC pads its handshake packets to
/// 1,200 or more and its path probes are larger, its acknowledgements and control frames
/// short), and QUIC never sends a datagram again, so the test's loss must be the kernel's
/// count exactly, and both stacks' own counts agree with it. `--no-offload`, as for UDP: a
/// GSO batch of packets would cross the veth, and be counted, as one.
#[test]
#[ignore = "needs root and nftables"]
fn quic_datagrams_lost_are_exactly_the_packets_the_kernel_dropped() {
    let pair = Pair::new();
    pair.drop_rule_sized(
        &pair.server,
        "udp length 1030-1100",
        "numgen inc mod 8 == 3",
    );
    let v = pair.run(&[
        "--quic",
        "--quic-insecure",
        "--datagrams",
        "-n",
        "2000000",
        "-l",
        "1000",
        "-b",
        "50M",
        "--no-offload",
    ]);
    assert_eq!(pair.dropped(&pair.server), 250, "the kernel's count");
    assert_eq!(u(&v, "end.udp.lost"), 250, "{v}");
    assert_eq!(u(&v, "end.received.messages"), 1750, "{v}");
    assert_eq!(u(&v, "end.udp.duplicates"), 0, "{v}");
    assert_eq!(u(&v, "end.quic.datagrams_sent"), 2000, "{v}");
    assert_eq!(u(&v, "end.quic.peer_datagrams_received"), 1750, "{v}");
}

#[test]
#[ignore = "needs root and nftables"]
fn quic_packets_grow_to_the_paths_mtu_and_no_further_than_asked_both_ways() {
    let pair = Pair::new();
    pair.set_mtu(9000);
    // The server's input: what the client sent (UDP length is the payload and 8 bytes).
    pair.count_rules(
        &pair.server,
        &[
            &format!("udp dport {PORT} udp length > 1480"),
            &format!("udp dport {PORT} udp length > 6508"),
        ],
    );
    let v = pair.run(&["--quic", "--quic-insecure", "-n", "20M", "--no-offload"]);
    let [over_ethernet, over_ceiling] = pair.counters(&pair.server)[..] else {
        panic!("two counters")
    };
    assert!(
        over_ethernet > 1000,
        "packets past 1472 bytes: {over_ethernet}"
    );
    assert_eq!(over_ceiling, 0, "packets past 6500 bytes");
    assert_eq!(u(&v, "end.quic.mtu_bytes"), 6500, "{v}");

    // Asked smaller, from the client: the server's packets keep to it too.
    pair.count_rules(
        &pair.client,
        &[
            &format!("udp sport {PORT} udp length 1308"),
            &format!("udp sport {PORT} udp length > 1308"),
        ],
    );
    let v = pair.run(&[
        "--quic",
        "--quic-insecure",
        "-n",
        "20M",
        "-R",
        "--no-offload",
        "--quic-mtu",
        "1300",
    ]);
    let [full, over] = pair.counters(&pair.client)[..] else {
        panic!("two counters")
    };
    assert!(full > 1000, "the server's full-size packets: {full}");
    assert_eq!(over, 0, "the server's packets past 1300 bytes");
    assert_eq!(u(&v, "test.quic_mtu"), 1300, "{v}");
}

#[test]
#[ignore = "needs root and nftables"]
fn a_deterministic_drop_pattern_shows_exactly_in_results_and_packet_log() {
    let pair = Pair::new();
    // The kernel counts the test's datagrams as they arrive (one stream over one veth: in
    // sequence order) and drops each whose count is 3 mod 8. The header's sequence field is
    // keyed with the test's secret, so the rule counts rather than reading it.
    pair.drop_rule(&pair.server, "numgen inc mod 8 == 3");
    let dir = tempdir();
    let log = dir.join("packets.log");
    let log_arg = log.to_str().expect("utf-8 path");
    let v = pair.run(&[
        "-u",
        "-n",
        "2000000",
        "-l",
        "1000",
        "-b",
        "50M",
        "--no-offload",
        "--packet-log",
        log_arg,
    ]);
    assert_eq!(pair.dropped(&pair.server), 250, "the kernel's count");
    assert_eq!(u(&v, "end.udp.lost"), 250, "{v}");
    assert_eq!(u(&v, "end.received.messages"), 1750);
    assert_eq!(u(&v, "end.udp.loss_runs.runs"), 250);
    assert_eq!(u(&v, "end.udp.first_lost_seq"), 3);
    assert_eq!(u(&v, "end.udp.last_in_order_seq"), 2);
    assert_eq!(v["end"]["udp"]["clocks"], "same-host");
    assert!(v["end"]["udp"]["delay_ms"]["p99"].as_f64().is_some(), "{v}");

    // The log: one received record per datagram counted, the lost ones exactly 3 mod 8.
    let csv = common::wirebench()
        .args(["packet-log", log_arg])
        .output()
        .expect("packet-log");
    assert!(csv.status.success());
    let text = String::from_utf8(csv.stdout).expect("utf-8");
    let mut received = HashSet::new();
    let mut lost = HashSet::new();
    for line in text.lines().skip(1) {
        let f: Vec<&str> = line.split(',').collect();
        let seq: u64 = f[1].parse().expect("seq");
        match f[0] {
            "received" => assert!(received.insert(seq), "seq {seq} twice"),
            "lost" => assert!(lost.insert(seq), "lost {seq} twice"),
            other => panic!("unexpected record {other}"),
        }
    }
    assert_eq!(received.len(), 1750);
    assert_eq!(lost, (0..2000).filter(|s| s % 8 == 3).collect());
    assert!(received.is_disjoint(&lost));
    let _ = std::fs::remove_dir_all(&dir);
}

/// A fresh directory under the system's temporary directory.
fn tempdir() -> std::path::PathBuf {
    let n = NEXT.fetch_add(1, Ordering::SeqCst);
    let d = std::env::temp_dir().join(format!("wirebench-test-{}-{n}", std::process::id()));
    std::fs::create_dir_all(&d).expect("temp dir");
    d
}

#[test]
#[ignore = "needs root and nftables"]
fn a_file_over_a_lossy_path_reports_exactly_the_missing_ranges() {
    let dir = tempdir();
    let save = dir.join("save");
    std::fs::create_dir_all(&save).expect("save dir");
    let src = dir.join("data.bin");
    let data: Vec<u8> = (0..1_000_000u32).map(|i| (i % 253) as u8).collect();
    std::fs::write(&src, &data).expect("source file");
    let pair = Pair::with_server(&["--save-dir", save.to_str().expect("utf-8")]);
    pair.drop_rule(&pair.server, "numgen inc mod 8 == 3");
    let v = pair.run(&[
        "-u",
        "-l",
        "1000",
        "-b",
        "50M",
        "--no-offload",
        "--file",
        src.to_str().expect("utf-8"),
    ]);
    // 1000-byte datagrams carry 984 file bytes each: 1017 datagrams, 3 mod 8 dropped.
    let chunk = 984u64;
    let datagrams = 1_000_000u64.div_ceil(chunk);
    let expect: Vec<(u64, u64)> = (0..datagrams)
        .filter(|s| s % 8 == 3)
        .map(|s| (s * chunk, ((s + 1) * chunk).min(1_000_000)))
        .collect();
    let fe = &v["end"]["file"];
    let got: Vec<(u64, u64)> = fe["missing"]
        .as_array()
        .expect("missing ranges")
        .iter()
        .map(|r| (r[0].as_u64().expect("start"), r[1].as_u64().expect("end")))
        .collect();
    assert_eq!(got, expect, "{v}");
    assert_eq!(fe["identical"], false);
    assert_eq!(
        u(fe, "missing_bytes") + u(fe, "received_bytes"),
        1_000_000,
        "{v}"
    );
    // A copy with holes is not kept (only a whole one takes its name), and says why.
    assert!(fe["saved_as"].is_null(), "{v}");
    assert!(
        fe["save_error"]
            .as_str()
            .is_some_and(|e| e.contains("not whole")),
        "{v}"
    );
    assert_eq!(std::fs::read_dir(&save).expect("save dir").count(), 0);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Sends `n` UDP datagrams with a wrong checksum from namespace `ns` (address `from`) to
/// `to`, port 9: the receiving kernel drops each as a checksum error (`InCsumErrors`),
/// whichever socket it was for, as it drops a datagram corrupted on the way. A raw socket
/// sends them whole, checksum as written (no offload completes it).
#[allow(unsafe_code)]
fn send_bad_checksums(ns: &str, from: [u8; 4], to: [u8; 4], n: usize) {
    let path = format!("/run/netns/{ns}");
    std::thread::spawn(move || {
        let file = std::fs::File::open(&path).expect("the namespace's file");
        use std::os::fd::AsRawFd;
        // SAFETY: setns takes a descriptor this thread holds open; it moves only this
        // thread, which ends when the datagrams are sent.
        let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
        assert_eq!(rc, 0, "setns {path}: {}", std::io::Error::last_os_error());
        let sock = socket2::Socket::new(
            socket2::Domain::IPV4,
            socket2::Type::RAW,
            Some(socket2::Protocol::UDP),
        )
        .expect("a raw UDP socket");
        let payload = [0x5au8; 64];
        let len = 8 + payload.len();
        let mut d = vec![0u8; len];
        d[0..2].copy_from_slice(&40000u16.to_be_bytes());
        d[2..4].copy_from_slice(&9u16.to_be_bytes());
        d[4..6].copy_from_slice(&(len as u16).to_be_bytes());
        d[8..].copy_from_slice(&payload);
        // The right checksum (RFC 768), then a different non-zero one.
        let mut sum: u32 = 17 + len as u32;
        for w in from.chunks(2).chain(to.chunks(2)).chain(d.chunks(2)) {
            sum += u32::from(u16::from_be_bytes([w[0], *w.get(1).unwrap_or(&0)]));
        }
        while sum > 0xffff {
            sum = (sum & 0xffff) + (sum >> 16);
        }
        let right = !(sum as u16);
        let wrong: u16 = if right == 0x1234 { 0x4321 } else { 0x1234 };
        d[6..8].copy_from_slice(&wrong.to_be_bytes());
        let to = std::net::SocketAddr::from((to, 0));
        for _ in 0..n {
            sock.send_to(&d, &to.into()).expect("send a raw datagram");
        }
    })
    .join()
    .expect("the sending thread");
}

#[test]
#[ignore = "needs root and nftables"]
fn checksum_errors_count_exactly_the_corrupt_datagrams_the_receiver_host_got() {
    // Datagrams corrupted on the way never reach the test's socket: the receiver reads its
    // kernel's InCsumErrors at its start and end. 25 bad datagrams sent into the receiving
    // namespace while the test runs: exactly 25, both ways, and 0 without them.
    let pair = Pair::new();
    let n: u8 = pair
        .client
        .rsplit('-')
        .next()
        .and_then(|n| n.parse().ok())
        .expect("pair number");
    let (client, server) = ([10, 213, n, 1], [10, 213, n, 2]);
    for (dir, sender_ns, from, to, bad) in [
        ("", &pair.client, client, server, 25),
        ("-R", &pair.server, server, client, 25),
        ("", &pair.client, client, server, 0),
    ] {
        let mut child = Command::new("ip")
            .args([
                "netns",
                "exec",
                &pair.client,
                env!("CARGO_BIN_EXE_wirebench"),
            ])
            .args(["run", &pair.server_addr(), "--port", PORT, "--json-stream"])
            .args(["-u", "-b", "1M", "-t", "3", "-i", "0.2"])
            .args([dir].into_iter().filter(|d| !d.is_empty()))
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("run the client in its namespace");
        let stdout = child.stdout.take().expect("stdout");
        let mut lines = std::io::BufRead::lines(std::io::BufReader::new(stdout));
        // Both sides' roles run once an interval is reported; the test has 2.8 s left.
        for line in lines.by_ref() {
            if line.expect("a line").contains("\"event\":\"interval\"") {
                break;
            }
        }
        send_bad_checksums(sender_ns, from, to, bad);
        let end: Value = lines
            .map_while(Result::ok)
            .filter_map(|l| serde_json::from_str::<Value>(&l).ok())
            .find(|e| e["event"] == "end")
            .expect("the end event");
        let _ = child.wait();
        assert_eq!(
            end["end"]["udp"]["checksum_errors"].as_u64(),
            Some(bad as u64),
            "direction {dir:?}: {end}"
        );
    }
}
