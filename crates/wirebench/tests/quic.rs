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
