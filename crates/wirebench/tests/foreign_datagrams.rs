//! Datagrams that are not the test's do not change its counts. The attack as found: during a
//! `wirebench run -u` test, datagrams spoofed from the peer's own address and port with
//! sequence number 2^62 made the receiver report most of the test lost (one datagram: 61.9%
//! in the issue). Here an attacker sends such datagrams onto a running test's data socket,
//! against the server (forward) and against the client (`-R`), and the test's figures must
//! be exactly those of a clean run, with the attacker's datagrams counted as `foreign`.
//!
//! Why the attacker spoofs, and how: both ends' UDP data sockets are connected (the server's
//! to the client's address and port once its hello proved the cookie, the client's to the
//! server's port), so the kernel gives them only datagrams from exactly that address and
//! port; from another 127/8 address a datagram reaches the server's hello socket, never the
//! test. Writing another address into a packet takes a raw socket (CAP_NET_RAW). Each test
//! therefore runs again inside `unshare -Urn`: a user and network namespace of its own, where
//! it holds that capability over a private loopback, so nothing outside sees its packets. The
//! attacker reads the ports from the namespace's `/proc/net/udp`, standing in for the blind
//! attacker of the issue who sends one datagram to each of the 28,232 ephemeral ports (the
//! measured outcome is the same; a spray is left to the measurement, not pinned here).
//!
//! The same holds for UDP rr (issue 44): 20,000 requests spoofed from the client's address
//! were all answered and counted, and forged responses made a 0.89 µs minimum round trip
//! against 3.4 µs clean. `spoofed_rr_requests_and_responses_are_foreign_not_answered` sprays
//! requests numbered as the client numbers them (without the token, as every request was
//! before) at the server, and responses at the client, during a running `--mode rr -u`.
//! What it does not cover: an attacker who reads the test's traffic (the token is in the
//! clear in the hello), and a blind guess of a keyed number (a chance of about 2^-42 per
//! datagram: `role::rr_key`'s unit tests, not here).

mod common;

use std::net::{Ipv4Addr, SocketAddrV4};
use std::process::Command;
use std::time::{Duration, Instant};

use common::{f, u, Server};
use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use wirebench_proto::header::{DataHeader, SeqToken, HEADER_LEN};

/// Set in the copy of the test that runs inside the namespace.
const IN_NAMESPACE: &str = "WIREBENCH_TEST_IN_NETNS";

/// The sequence number.
const FORGED_SEQ: u64 = 1 << 62;

/// Datagrams the attacker sends during one test.
const FORGED: u64 = 40;

/// Datagram size of the tests.
const SIZE: usize = 1000;

/// True in the copy of `test` inside a fresh user and network namespace, with loopback up:
/// the caller then runs the test. In the outer process, runs that copy and checks that it
/// ran and passed, then returns false. Where namespaces are not available, fails in one line
/// (these tests are `#[ignore = "needs user namespaces"]`; `.ci/run` runs them).
fn inside_private_namespace(test: &str) -> bool {
    if std::env::var_os(IN_NAMESPACE).is_some() {
        let up = Command::new("ip")
            .args(["link", "set", "lo", "up"])
            .status()
            .expect("run ip");
        assert!(up.success(), "ip link set lo up failed in the namespace");
        return true;
    }
    common::require("unshare");
    common::require("ip");
    let exe = std::env::current_exe().expect("the test executable");
    let out = Command::new("unshare")
        .arg("-Urn")
        .arg(exe)
        .args([test, "--exact", "--include-ignored", "--nocapture"])
        .arg("--test-threads=1")
        .env(IN_NAMESPACE, "1")
        .output()
        .expect("run unshare");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() || !stderr.trim_start().starts_with("unshare:"),
        "this test needs user namespaces (unshare -Urn), which are not available here: {}",
        stderr.trim()
    );
    assert!(
        out.status.success(),
        "the test in the namespace failed:\n{stdout}\n{stderr}"
    );
    assert!(
        stdout.contains("1 passed"),
        "the test did not run in the namespace:\n{stdout}"
    );
    false
}

/// The connected UDP sockets on `port` in this namespace: each is the server's data socket
/// of one stream, as (its address, the client's address), from `/proc/net/udp`.
fn data_sockets(port: u16) -> Vec<(SocketAddrV4, SocketAddrV4)> {
    let table = std::fs::read_to_string("/proc/net/udp").expect("read /proc/net/udp");
    let addr = |field: &str| -> Option<SocketAddrV4> {
        let (ip, port) = field.split_once(':')?;
        let ip = u32::from_str_radix(ip, 16).ok()?;
        let port = u16::from_str_radix(port, 16).ok()?;
        // The kernel prints the address in network order read as a native integer.
        Some(SocketAddrV4::new(Ipv4Addr::from(ip.to_ne_bytes()), port))
    };
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let mut fields = line.split_whitespace().skip(1);
            Some((addr(fields.next()?)?, addr(fields.next()?)?))
        })
        .filter(|(local, remote)| local.port() == port && remote.port() != 0)
        .collect()
}

/// Polls until the server has `streams` data sockets, for at most 10 s.
fn wait_for_data_sockets(port: u16, streams: usize) -> Vec<(SocketAddrV4, SocketAddrV4)> {
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        let found = data_sockets(port);
        if found.len() >= streams {
            return found;
        }
        assert!(
            Instant::now() < until,
            "the test's data sockets never showed"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// An IPv4 packet from `src` to `dst` carrying a UDP datagram of `payload` (no UDP
/// checksum, which IPv4 allows).
fn spoofed(src: SocketAddrV4, dst: SocketAddrV4, payload: &[u8]) -> Vec<u8> {
    let udp_len = 8 + payload.len();
    let total = (20 + udp_len) as u16;
    let mut p = Vec::with_capacity(total as usize);
    p.extend([0x45, 0]);
    p.extend(total.to_be_bytes());
    p.extend([0, 0, 0x40, 0, 64, 17, 0, 0]); // id, don't fragment, TTL, UDP, checksum
    p.extend(src.ip().octets());
    p.extend(dst.ip().octets());
    let sum = p
        .chunks(2)
        .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
        .sum::<u32>();
    let sum = (sum & 0xffff) + (sum >> 16);
    let sum = !((sum & 0xffff) + (sum >> 16)) as u16;
    p[10..12].copy_from_slice(&sum.to_be_bytes());
    p.extend(src.port().to_be_bytes());
    p.extend(dst.port().to_be_bytes());
    p.extend((udp_len as u16).to_be_bytes());
    p.extend([0, 0]);
    p.extend(payload);
    p
}

/// Sends [`FORGED`] datagrams with sequence number 2^62 in the old, unkeyed header from
/// `src` to `dst` through a raw socket; returns how many the kernel took.
fn attack(src: SocketAddrV4, dst: SocketAddrV4) -> u64 {
    let raw = Socket::new(
        Domain::IPV4,
        Type::RAW,
        Some(Protocol::from(libc::IPPROTO_RAW)),
    )
    .expect("a raw socket (CAP_NET_RAW in the namespace)");
    let mut payload = vec![0xabu8; SIZE];
    DataHeader {
        seq: FORGED_SEQ,
        stream: 0,
        send_ns: 0,
    }
    .write(SeqToken::default(), &mut payload[..HEADER_LEN])
    .expect("16 bytes hold a header");
    let packet = spoofed(src, dst, &payload);
    let to = SockAddr::from(SocketAddrV4::new(*dst.ip(), 0));
    (0..FORGED)
        .filter(|_| raw.send_to(&packet, &to).is_ok_and(|n| n == packet.len()))
        .count() as u64
}

/// UDP datagrams the kernel of this namespace dropped for a full receive buffer: real loss
/// on loopback, to tell apart from loss the attacker made up.
fn receive_buffer_drops() -> u64 {
    udp_counter("RcvbufErrors")
}

/// A counter of the `Udp:` lines of this namespace's `/proc/net/snmp`, 0 if absent.
fn udp_counter(name: &str) -> u64 {
    let snmp = std::fs::read_to_string("/proc/net/snmp").expect("read /proc/net/snmp");
    let mut udp = snmp.lines().filter(|l| l.starts_with("Udp:"));
    let (names, values) = (udp.next().unwrap_or(""), udp.next().unwrap_or(""));
    names
        .split_whitespace()
        .zip(values.split_whitespace())
        .find(|(n, _)| *n == name)
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0)
}

/// Runs a two-stream UDP test (`-R` if `reverse`) from `wirebench run` against `wirebench
/// serve`, attacks the receiver of stream 0 while it runs, and checks the results.
fn attacked_test(reverse: bool) {
    let server = Server::start(&[]);
    let mut args = vec![
        "-u", "-b", "10M", "-t", "2s", "-l", "1000", "-P", "2", "--json",
    ];
    if reverse {
        args.push("-R");
    }
    let client = server.spawn(&args);
    // Each stream's pair of addresses; the receiver's peer is the spoofed source.
    let (server_end, client_end) = wait_for_data_sockets(server.port, 2)[0];
    let (src, dst) = if reverse {
        (server_end, client_end)
    } else {
        (client_end, server_end)
    };
    let sent_by_attacker = attack(src, dst);
    assert!(sent_by_attacker > 0, "the attacker sent nothing");
    let out = client.wait_with_output().expect("wait for wirebench run");
    assert!(
        out.status.success(),
        "wirebench run {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("results JSON");
    let drops = receive_buffer_drops();
    let why = format!("kernel receive-buffer drops {drops}; results {doc}");
    // The attacker's datagrams reached the receiver, and were counted as foreign only.
    assert_eq!(u(&doc, "end.udp.foreign"), sent_by_attacker, "{why}");
    // Stream 0 is the one attacked: find it by its foreign count, the other has none.
    let streams = doc["streams"].as_array().expect("streams[] with -P 2");
    let per_stream: Vec<u64> = streams.iter().map(|s| u(s, "udp.foreign")).collect();
    assert_eq!(per_stream.iter().sum::<u64>(), sent_by_attacker, "{why}");
    assert!(per_stream.contains(&0), "{why}");
    // Nothing was lost, duplicated or reordered, and every datagram sent was received.
    assert_eq!(u(&doc, "end.udp.lost"), 0, "{why}");
    for key in ["duplicates", "reordered", "too_old"] {
        assert_eq!(u(&doc, &format!("end.udp.{key}")), 0, "{key}: {why}");
    }
    assert_eq!(
        u(&doc, "end.received.messages"),
        u(&doc, "end.sent.messages"),
        "{why}"
    );
    assert_eq!(
        u(&doc, "end.received.bytes"),
        u(&doc, "end.sent.bytes"),
        "{why}"
    );
    assert!(u(&doc, "end.sent.messages") > 0);
}

#[test]
#[ignore = "needs user namespaces"]
fn spoofed_datagrams_to_the_server_are_foreign_not_lost() {
    if inside_private_namespace("spoofed_datagrams_to_the_server_are_foreign_not_lost") {
        attacked_test(false);
    }
}

#[test]
#[ignore = "needs user namespaces"]
fn spoofed_datagrams_to_the_client_in_reverse_are_foreign_not_lost() {
    if inside_private_namespace("spoofed_datagrams_to_the_client_in_reverse_are_foreign_not_lost") {
        attacked_test(true);
    }
}

/// Forged rr datagrams sent each way during the attacked test.
const FORGED_RR: u64 = 2_000;

/// Sends each of `payloads` from `src` to `dst` through a raw socket, 50 at a time with a
/// millisecond between (a pace the receiving socket's buffer takes, so that the kernel drops
/// none); returns how many the kernel took.
fn spray(src: SocketAddrV4, dst: SocketAddrV4, payloads: &[Vec<u8>]) -> u64 {
    let raw = Socket::new(
        Domain::IPV4,
        Type::RAW,
        Some(Protocol::from(libc::IPPROTO_RAW)),
    )
    .expect("a raw socket (CAP_NET_RAW in the namespace)");
    let to = SockAddr::from(SocketAddrV4::new(*dst.ip(), 0));
    let mut sent = 0;
    for burst in payloads.chunks(50) {
        for payload in burst {
            let packet = spoofed(src, dst, payload);
            sent += u64::from(raw.send_to(&packet, &to).is_ok_and(|n| n == packet.len()));
        }
        // Pacing the attacker, not waiting for anything.
        std::thread::sleep(Duration::from_millis(1));
    }
    sent
}

/// 64-byte rr datagrams whose first 8 bytes are plain sequence numbers (as requests and
/// responses carried them before they were keyed), spread over the numbers a 2 s debug-build
/// test passes through, so that before the fix the client met most of the forged responses
/// as the answer to a request it had just sent; and a few too short to carry a number.
fn forged_rr_datagrams() -> Vec<Vec<u8>> {
    let mut out: Vec<Vec<u8>> = (0..FORGED_RR - 8)
        .map(|i| {
            let mut d = vec![0x5au8; 64];
            d[..8].copy_from_slice(&(i * 64).to_be_bytes());
            d
        })
        .collect();
    out.extend((0..8).map(|len| vec![0u8; len]));
    out
}

/// A `--mode rr -u` test with requests spoofed to the server from the client's address and
/// port, and responses spoofed to the client from the server's, against a clean run first.
fn attacked_rr_test() {
    let server = Server::start(&[]);
    let args = ["--mode", "rr", "-u", "-t", "2s", "--json"];
    let clean = server.run_json(&args[..5]);
    assert_eq!(u(&clean, "end.udp.foreign"), 0, "{clean}");
    let clean_min_us = f(&clean, "end.latency_us.min");
    let before: Vec<_> = data_sockets(server.port);
    let (drops_before, out_before) = (receive_buffer_drops(), udp_counter("OutDatagrams"));
    let client = server.spawn(&args);
    let until = Instant::now() + Duration::from_secs(10);
    let (server_end, client_end) = loop {
        // The attacked test's pair: one the clean run did not leave behind.
        if let Some(pair) = data_sockets(server.port)
            .into_iter()
            .find(|p| !before.contains(p))
        {
            break pair;
        }
        assert!(
            Instant::now() < until,
            "the test's data socket never showed"
        );
        std::thread::sleep(Duration::from_millis(5));
    };
    let forged = forged_rr_datagrams();
    let requests = spray(client_end, server_end, &forged);
    let responses = spray(server_end, client_end, &forged);
    assert!(requests > 0 && responses > 0, "the attacker sent nothing");
    let out = client.wait_with_output().expect("wait for wirebench run");
    assert!(
        out.status.success(),
        "wirebench run {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("results JSON");
    let drops = receive_buffer_drops() - drops_before;
    let sent_datagrams = udp_counter("OutDatagrams") - out_before;
    let why = format!("kernel receive-buffer drops {drops}; results {doc}");
    let (foreign_requests, foreign_responses) = (
        u(&doc, "end.udp.foreign_requests"),
        u(&doc, "end.udp.foreign_responses"),
    );
    let (requests_sent, requests_taken) = (
        u(&doc, "end.sent.messages"),
        u(&doc, "end.received.messages"),
    );
    assert!(requests_sent > 1000, "{why}");
    // Every forged datagram that reached a socket was counted foreign, and only those: an
    // answer to a forged request would echo its unkeyed number to the client and count
    // among the foreign responses too, so equality also says none was answered.
    assert!(foreign_requests <= requests, "{why}");
    assert!(foreign_responses <= responses, "{why}");
    assert!(
        foreign_requests + foreign_responses + drops >= requests + responses,
        "{why}"
    );
    assert_eq!(
        u(&doc, "end.udp.foreign"),
        foreign_requests + foreign_responses,
        "{why}"
    );
    // The server answered and counted the client's requests alone (before: +2,000).
    assert!(requests_taken <= requests_sent, "{why}");
    if drops == 0 {
        assert_eq!(foreign_requests, requests, "{why}");
        assert_eq!(foreign_responses, responses, "{why}");
        assert_eq!(requests_taken, requests_sent, "{why}");
    }
    // The kernel's own count of UDP datagrams sent in the namespace: the client's requests,
    // the server's answers and a few hellos (the raw socket's are not UDP sends). Answers
    // to the forged requests would add up to 2,000.
    assert!(
        sent_datagrams <= requests_sent + requests_taken + 500,
        "{sent_datagrams} UDP datagrams sent: {why}"
    );
    // No forged response was taken for a round trip: none shorter than a clean run's
    // shortest, within a loose factor (before: 0.89 µs against 3.4 µs in a release build).
    let min_us = f(&doc, "end.latency_us.min");
    assert!(
        min_us >= clean_min_us / 2.0,
        "min round trip {min_us} µs under attack, {clean_min_us} µs clean: {why}"
    );
}

#[test]
#[ignore = "needs user namespaces"]
fn spoofed_rr_requests_and_responses_are_foreign_not_answered() {
    if inside_private_namespace("spoofed_rr_requests_and_responses_are_foreign_not_answered") {
        attacked_rr_test();
    }
}
