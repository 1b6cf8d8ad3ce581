//! QUIC tests through the binary: exact counts both sides in every mode, the stack's own
//! figures in `end.quic`, the server's key checked by its fingerprint, and a server that
//! keeps serving through Initials that lead nowhere.

mod common;

use std::net::UdpSocket;

use common::{u, Server};

/// The fingerprint the server's banner names (`...; QUIC, key sha256:...)`).
fn key_of(s: &Server) -> String {
    s.quic_key
        .clone()
        .expect("the server's banner names its QUIC key")
}

/// Both sides agree on every byte and message.
fn assert_exact(v: &serde_json::Value, bytes: u64) {
    assert!(v.get("error").is_none(), "{v}");
    assert_eq!(v["test"]["protocol"], "quic", "{v}");
    assert_eq!(u(v, "end.sent.bytes"), bytes, "{v}");
    assert_eq!(u(v, "end.received.bytes"), bytes, "{v}");
    assert_eq!(
        u(v, "end.sent.messages"),
        u(v, "end.received.messages"),
        "{v}"
    );
}

#[test]
fn every_mode_counts_exactly_and_reports_the_stack() {
    let s = Server::start(&[]);
    let key = key_of(&s);
    let pin = ["--quic", "--quic-pin", key.as_str()];
    for (args, connections) in [
        (&["-n", "20000001", "-l", "100000"][..], 1),
        (&["-n", "20000001", "-l", "100000", "-R"][..], 1),
        (&["-n", "20000000", "-P", "2"][..], 2),
        (&["-n", "20000000", "--quic-streams", "2"][..], 1),
        (
            &["-n", "20000000", "-P", "2", "--quic-streams", "2", "-R"][..],
            2,
        ),
        (&["-n", "20000000", "--cc", "newreno"][..], 1),
        (&["-n", "20000000", "--cc", "bbr", "-R"][..], 1),
    ] {
        let v = s.run_json(&[&pin[..], args].concat());
        // -n is each stream's amount.
        let bytes = args[1].parse::<u64>().expect("bytes") * u(&v, "test.streams");
        assert_exact(&v, bytes);
        let q = &v["end"]["quic"];
        assert_eq!(u(&v, "end.quic.connections"), connections, "{args:?}: {q}");
        // Measured by the stack, not made up: packets went out, the wire carried at least
        // the goodput, a round trip and a handshake took time.
        assert!(u(&v, "end.quic.sent_packets") > 0, "{q}");
        assert!(u(&v, "end.quic.wire_bytes_sent") > bytes, "{q}");
        assert!(
            u(&v, "end.quic.rtt_us") > 0 && u(&v, "end.quic.handshake_us") > 0,
            "{q}"
        );
        let cc = args
            .iter()
            .position(|a| *a == "--cc")
            .map_or("cubic", |i| args[i + 1]);
        assert_eq!(q["congestion_control"], cc, "{args:?}");
        assert!(
            v["intervals"][0]["cwnd_bytes"]
                .as_u64()
                .is_some_and(|c| c > 0),
            "{v}"
        );
    }
    // Request/response over a QUIC stream: every request answered.
    let v = s.run_json(&[&pin[..], &["--mode", "rr", "-t", "1"]].concat());
    assert!(v.get("error").is_none(), "{v}");
    assert!(u(&v, "end.latency_us.count") > 100, "{v}");
    assert_eq!(u(&v, "end.sent.bytes"), u(&v, "end.received.bytes"));
}

#[test]
fn the_server_is_checked_by_its_key() {
    let s = Server::start(&[]);
    let wrong = format!("sha256:{}", "ab".repeat(32));
    let out = s.run(&["--quic", "--quic-pin", &wrong, "-t", "1"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("not the one pinned") && err.contains(&wrong),
        "{err}"
    );
    let out = s.run(&["--quic", "-t", "1"]);
    assert_eq!(out.status.code(), Some(2), "a usage error");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--quic-pin") && err.contains("--quic-insecure"),
        "{err}"
    );
    let out = s.run(&["--quic", "--quic-pin", "sha256:12", "-t", "1"]);
    assert_eq!(out.status.code(), Some(2));
    // --quic-insecure: no check, a lab's choice.
    let v = s.run_json(&["--quic", "--quic-insecure", "-n", "1000000"]);
    assert_exact(&v, 1_000_000);
}

#[test]
fn initials_that_lead_nowhere_cost_a_bounded_handshake_and_nothing_else() {
    let s = Server::start(&["--no-quic"]);
    assert!(s.quic_key.is_none(), "--no-quic names no key");
    let s = Server::start(&[]);
    let key = key_of(&s);
    // Well-formed Initial headers with junk inside, from many ports of one address and
    // from several addresses: each may take a handshake place, none gets further.
    let mut junk = vec![0u8; 1200];
    junk[0] = 0xc3;
    junk[1..5].copy_from_slice(&[0, 0, 0, 1]);
    junk[5] = 8;
    let mut socks = Vec::new();
    // Eight addresses' worth: every handshake place taken at once.
    for ip in 2..=9u8 {
        for _ in 0..10 {
            let sock = UdpSocket::bind((std::net::Ipv4Addr::new(127, 0, 0, ip), 0)).expect("bind");
            sock.send_to(&junk, ("127.0.0.1", s.port)).expect("send");
            socks.push(sock);
        }
    }
    // Other tests go on meanwhile: TCP, and a real QUIC client (whose Initial finds the
    // places full, or not; its resent Initial gets one once the junk's places are given
    // back, a second after each came).
    let v = s.run_json(&["-n", "1000000"]);
    assert_eq!(u(&v, "end.received.bytes"), 1_000_000);
    let v = s.run_json(&["--quic", "--quic-pin", &key, "-n", "1000000"]);
    assert_exact(&v, 1_000_000);
}

/// `--datagrams`: each message one QUIC datagram with the UDP data header, counted as UDP's
/// are, and the stacks' own counts agree with the test's: what the sender's stack put in
/// packets is what the test sent, what the receiver's stack took from packets is at least
/// what the test read, and nothing is counted twice.
#[test]
fn datagrams_are_counted_as_udp_datagrams_and_agree_with_the_stack() {
    let s = Server::start(&[]);
    let key = key_of(&s);
    let pin = ["--quic", "--quic-pin", key.as_str(), "--datagrams"];
    for (args, connections) in [
        (&["-n", "2200000", "-b", "100M"][..], 1),
        (&["-n", "2200000", "-b", "100M", "-R"][..], 1),
        (
            &["-n", "1000000", "-b", "50M", "-P", "2", "-l", "1000"][..],
            2,
        ),
        // A last datagram too short for the header, as over UDP.
        (&["-n", "1000005", "-b", "50M", "-l", "1000"][..], 1),
    ] {
        let v = s.run_json(&[&pin[..], args].concat());
        assert!(v.get("error").is_none(), "{args:?}: {v}");
        assert_eq!(v["test"]["quic_datagrams"], true, "{v}");
        let bytes = args[1].parse::<u64>().expect("bytes") * u(&v, "test.streams");
        assert_eq!(u(&v, "end.sent.bytes"), bytes, "{args:?}: {v}");
        let (sent, got) = (u(&v, "end.sent.messages"), u(&v, "end.received.messages"));
        assert!(got > 0, "{v}");
        // Every datagram arrived or is counted lost; a short last one carries no
        // sequence number, so it is never counted lost (as over UDP).
        let accounted = got + u(&v, "end.udp.lost");
        let short_tail = args[1].ends_with('5');
        assert!(
            accounted == sent || (short_tail && accounted + 1 == sent),
            "{args:?}: {v}"
        );
        assert_eq!(u(&v, "end.udp.duplicates"), 0, "{v}");
        assert_eq!(u(&v, "end.quic.connections"), connections, "{v}");
        // The stacks' own counts: every datagram the test gave went out in a packet; the
        // receiver's stack took at least what the test read (more if its buffer dropped
        // some unread, which the test counts as lost).
        assert_eq!(u(&v, "end.quic.datagrams_sent"), sent, "{v}");
        assert!(u(&v, "end.quic.peer_datagrams_received") >= got, "{v}");
        assert!(v["end"]["udp"]["jitter_ms"].as_f64().is_some(), "{v}");
        assert!(v["intervals"][0]["lost"].as_u64().is_some(), "{v}");
    }
    // What does not fit, or does not apply, is refused before anything is sent.
    for (bad, says) in [
        (&["-l", "1401", "-t", "1"][..], "16 to 1400"),
        (&["--mode", "rr", "-t", "1"][..], "--datagrams applies to"),
        (
            &["--quic-streams", "2", "-t", "1"][..],
            "--datagrams applies to",
        ),
    ] {
        let out = s.run(&[&pin[..], bad].concat());
        assert_eq!(out.status.code(), Some(2), "{bad:?}: {out:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(says), "{bad:?}: {err}");
    }
}

/// `--mode rrul --quic`: the load is QUIC streams both ways, the probes the UDP and TCP
/// ones as for a TCP load; the load's document carries the stack's figures and rrul's.
#[test]
fn rrul_with_a_quic_load_measures_latency_under_it() {
    let s = Server::start(&[]);
    let key = key_of(&s);
    let v = s.run_json(&[
        "--quic",
        "--quic-pin",
        &key,
        "--mode",
        "rrul",
        "-t",
        "1s",
        "--idle",
        "500ms",
    ]);
    assert_eq!(v["test"]["protocol"], "quic", "{v}");
    let rrul = &v["end"]["rrul"];
    for key in [
        "loaded_latency_us",
        "tcp_loaded_latency_us",
        "idle_latency_us",
    ] {
        assert!(
            rrul[key]["p50"].as_f64().is_some_and(|p| p > 0.0),
            "{key}: {rrul}"
        );
    }
    assert!(
        rrul["upload_bps"].as_f64().is_some_and(|b| b > 0.0),
        "{rrul}"
    );
    assert!(
        rrul["download_bps"].as_f64().is_some_and(|b| b > 0.0),
        "{rrul}"
    );
    assert!(u(&v, "end.quic.sent_packets") > 0, "{v}");
    // A load of QUIC datagrams is not rrul's.
    let out = s.run(&[
        "--quic",
        "--quic-pin",
        &key,
        "--datagrams",
        "--mode",
        "rrul",
        "-t",
        "1s",
    ]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("--datagrams"));
}

/// `--mode crr --quic`: a new QUIC connection per transaction, every one answered; with
/// `--quic-0rtt` each resumes a session of one before and sends its request in 0-RTT,
/// which the server takes (all but the first can; the results count those it took).
#[test]
fn crr_makes_a_connection_per_transaction_with_and_without_0rtt() {
    let s = Server::start(&[]);
    let key = key_of(&s);
    let base = ["--quic", "--quic-pin", key.as_str(), "--mode", "crr"];
    for zero_rtt in [false, true] {
        let mut args = base.to_vec();
        args.extend(["-l", "64", "-n", "3200"]);
        if zero_rtt {
            args.push("--quic-0rtt");
        }
        let v = s.run_json(&args);
        assert!(v.get("error").is_none(), "{v}");
        // 50 transactions of 64 bytes, each on a connection of its own, each answered.
        assert_eq!(u(&v, "end.sent.messages"), 50, "{v}");
        assert_eq!(u(&v, "end.received.messages"), 50, "{v}");
        assert_eq!(u(&v, "end.quic.connections"), 50, "{v}");
        assert!(u(&v, "end.latency_us.count") == 50, "{v}");
        let took = v["end"]["quic"]["zero_rtt_accepted"].as_u64().unwrap_or(0);
        if zero_rtt {
            assert_eq!(v["test"]["quic_zero_rtt"], true);
            assert!((1..50).contains(&took), "0-RTT taken {took} times: {v}");
        } else {
            assert_eq!(took, 0, "no session resumed without --quic-0rtt: {v}");
        }
    }
    // 0-RTT is crr's: elsewhere it is a usage error.
    let out = s.run(&["--quic", "--quic-pin", &key, "--quic-0rtt", "-t", "1"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("--quic-0rtt applies to"));
}

/// A QUIC side's `end.resources` CPU counts its connection's thread, where the stack
/// encrypts, sends and receives: most of what the client process took (the kernel's count
/// from wait4), and no more than it.
#[test]
#[allow(unsafe_code, clippy::zombie_processes)] // wait4 reaps it
fn a_quic_sides_cpu_counts_its_connections_thread() {
    use std::io::Read;
    let s = Server::start(&[]);
    let key = key_of(&s);
    let mut child = s.spawn(&["--quic", "--quic-pin", &key, "-n", "1G", "--json"]);
    let mut out = Vec::new();
    child
        .stdout
        .take()
        .expect("stdout")
        .read_to_end(&mut out)
        .expect("read the results");
    let pid = i32::try_from(child.id()).expect("pid");
    let mut status = 0;
    // SAFETY: all-zero is a valid rusage, which wait4 fills for the child it reaps.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `pid` is our child, not yet waited for; the pointers are valid for writes.
    let rc = unsafe { libc::wait4(pid, &mut status, 0, &mut ru) };
    assert_eq!(rc, pid, "wait4");
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    let process = secs(ru.ru_utime) + secs(ru.ru_stime);
    let v: serde_json::Value = serde_json::from_slice(&out).expect("results JSON");
    assert_exact(&v, 1_000_000_000);
    let r = &v["end"]["resources"]["client"];
    let side =
        r["cpu_user_s"].as_f64().expect("user") + r["cpu_system_s"].as_f64().expect("system");
    assert!(process > 0.05, "the client process took CPU: {process} s");
    assert!(
        side >= 0.5 * process && side <= process + 0.02,
        "the client's data side {side} s, its process {process} s"
    );
}

/// A client with the server's pre-shared key and no pin: the server proves the key over
/// the connection's own TLS session, and the test's other connections (-P, crr's) reach
/// the same key. A wrong key, or a server without one, fails in words.
#[test]
fn the_pre_shared_key_proves_the_server_to_a_client_without_a_pin() {
    let dir = common::attack::tmp_dir("quic-psk");
    let (right, wrong) = (dir.join("right"), dir.join("wrong"));
    std::fs::write(&right, "the server's key of sixteen bytes or more").expect("key");
    std::fs::write(&wrong, "another key of sixteen bytes or more").expect("key");
    let (right, wrong) = (right.to_string_lossy(), wrong.to_string_lossy());
    let keyed = Server::start(&["--psk-file", &right]);
    let v = keyed.run_json(&["--quic", "--psk-file", &right, "-n", "10M", "-P", "2"]);
    assert_exact(&v, 20_000_000);
    assert_eq!(u(&v, "end.quic.connections"), 2, "{v}");
    for zero_rtt in [&[][..], &["--quic-0rtt"]] {
        let crr = [
            "--quic",
            "--psk-file",
            &right,
            "--mode",
            "crr",
            "-n",
            "3200",
        ];
        let v = keyed.run_json(&[&crr[..], zero_rtt].concat());
        assert!(v.get("error").is_none(), "{v}");
        assert_eq!(u(&v, "end.quic.connections"), 50, "{v}");
    }

    let out = keyed.run(&["--quic", "--psk-file", &wrong, "-n", "1M"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("wrong pre-shared key"), "{err}");

    let unkeyed = Server::start(&[]);
    let out = unkeyed.run(&["--quic", "--psk-file", &right, "-n", "1M"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("the server did not prove it holds the pre-shared key"),
        "{err}"
    );
}
