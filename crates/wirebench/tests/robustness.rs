//! The server keeps serving whatever clients do; limits are enforced; bad input gets one
//! clear line and a defined exit code.

mod common;

use std::io::{Read, Write};
use std::net::{TcpStream, UdpSocket};
use std::time::Duration;

use common::{u, wait_for_line, wirebench, Server};

/// A good test still completes exactly on `s`.
fn still_serves(s: &mut Server) {
    assert!(s.alive(), "the server died");
    for proto in [&[][..], &["-u"][..]] {
        let v = s.run_json(
            &[
                &["-n", "100000", "-l", "1000", "--mode", "stop-and-wait"],
                proto,
            ]
            .concat(),
        );
        assert_eq!(u(&v, "end.received.bytes"), 100_000);
    }
}

#[test]
fn server_survives_killed_clients() {
    let mut s = Server::start(&[]);
    for args in [
        &["-t", "30s", "-i", "50ms"][..],
        &["-t", "30s", "-i", "50ms", "-R"][..],
        &["-u", "-t", "30s", "-i", "50ms", "-b", "100M"][..],
        &["-u", "-t", "30s", "-i", "50ms", "-R", "-b", "100M"][..],
        &["-u", "-t", "30s", "-i", "50ms", "--mode", "stop-and-wait"][..],
    ] {
        let mut client = s.spawn(args);
        // Killed while data flows: after its first interval line.
        wait_for_line(&mut client, "-0.");
        client.kill().unwrap();
        client.wait().unwrap();
    }
    still_serves(&mut s);
}

#[test]
fn server_survives_garbage_and_silence() {
    let mut s = Server::start(&[]);
    let addr = ("127.0.0.1", s.port);
    // Huge length prefix, bad JSON, a valid frame of the wrong kind, random bytes.
    let junk: Vec<Vec<u8>> = vec![
        vec![0xff, 0xff, 0xff, 0xff, 1, 2, 3],
        [&5u32.to_be_bytes()[..], b"{nope"].concat(),
        [&15u32.to_be_bytes()[..], br#"{"type":"begin"}"#].concat(),
        (0..4096u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect(),
        b"GET / HTTP/1.1\r\nHost: x\r\n\r\n".to_vec(),
    ];
    for bytes in &junk {
        let mut c = TcpStream::connect(addr).unwrap();
        let _ = c.write_all(bytes);
        // The server answers with an error (or just closes); it must not hang the read.
        c.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
        let mut sink = Vec::new();
        let _ = c.read_to_end(&mut sink);
    }
    // Connections that send nothing, or half a frame, then vanish.
    for _ in 0..20 {
        let mut c = TcpStream::connect(addr).unwrap();
        let _ = c.write_all(&[0, 0]);
    }
    // UDP garbage and forged hellos to the data port.
    let u = UdpSocket::bind("127.0.0.1:0").unwrap();
    for i in 0..2000u32 {
        let mut d = b"WBUH".to_vec();
        d.extend_from_slice(&u64::from(i).to_be_bytes());
        d.extend_from_slice(&0u32.to_be_bytes());
        let _ = u.send_to(&d, addr);
        let _ = u.send_to(&i.to_be_bytes(), addr);
    }
    still_serves(&mut s);
}

#[test]
fn limits_are_enforced_with_clear_messages() {
    let mut s = Server::start(&[
        "--max-tests",
        "1",
        "--max-duration",
        "5s",
        "--max-rate",
        "100M",
    ]);
    let refused = |args: &[&str], needle: &str| {
        let out = s.run(args);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(needle), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "one line: {err}");
    };
    refused(&["-t", "10s", "-b", "10M"], "--max-duration");
    refused(&["-n", "1M", "-b", "1G"], "--max-rate");
    refused(&["-n", "1M"], "unlimited rate");
    let mut busy = s.spawn(&["-t", "4s", "-b", "10M", "-i", "50ms"]);
    wait_for_line(&mut busy, "-0.");
    refused(&["-n", "1M", "-b", "10M"], "server busy");
    busy.kill().unwrap();
    busy.wait().unwrap();
    // The slot is freed once the killed client's session ends.
    let mut ok = false;
    for _ in 0..50 {
        let out = s.run(&["-n", "10000", "-b", "10M"]);
        if out.status.success() {
            ok = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(ok, "the busy slot was never freed");
    assert!(s.alive());
}

#[test]
fn bad_flags_exit_2_with_one_line_naming_the_flag() {
    for (args, needle) in [
        (&["run", "-u", "-l", "70000"][..], "--size 70000"),
        (&["run", "-l", "0"][..], "--size 0"),
        (&["run", "-l", "17Mi"][..], "--size"),
        (&["run", "-n", "0"][..], "--bytes"),
        (&["run", "-n", "12Q"][..], "--bytes"),
        (&["run", "-b", "fast"][..], "--rate"),
        (&["run", "-t", "1x"][..], "--time"),
        (&["run", "-n", "1M", "-t", "1s"][..], "--time"),
        (&["run", "--mode", "nope"][..], "--mode"),
        (&["run", "-i", "1ms"][..], "--interval"),
        (&["serve", "--max-rate", "10kpps"][..], "--max-rate"),
    ] {
        let out = wirebench().args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        let first = err.lines().next().unwrap_or("");
        assert!(first.starts_with("error:"), "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
    }
}

#[test]
fn unreachable_server_is_one_line_exit_1() {
    // A port nobody listens on: bind one, note it, close it.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let out = wirebench()
        .args(["run", "127.0.0.1", "--port", &port.to_string(), "-n", "1K"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("cannot connect"), "{err}");
}

#[test]
fn a_pre_shared_key_is_proven_both_ways_and_a_wrong_one_refused() {
    let dir = std::env::temp_dir().join(format!("wirebench-psk-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (good, bad) = (dir.join("good"), dir.join("bad"));
    std::fs::write(&good, "correct horse battery staple\n").unwrap();
    std::fs::write(&bad, "incorrect horse battery staple\n").unwrap();
    let mut s = Server::start(&["--psk-file", good.to_str().unwrap()]);
    let run = |extra: &[&str]| s.run(&[&["-n", "100000"][..], extra].concat());
    // No key, wrong key: refused, one line each, exit 1.
    for (extra, needle) in [
        (&[][..], "pre-shared key"),
        (
            &["--psk-file", bad.to_str().unwrap()][..],
            "wrong pre-shared key",
        ),
    ] {
        let out = run(extra);
        assert_eq!(out.status.code(), Some(1), "{extra:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(needle), "{err}");
        assert_eq!(err.lines().count(), 1, "{err}");
    }
    // The right key, from the file or the variable: the test runs.
    assert!(run(&["--psk-file", good.to_str().unwrap()])
        .status
        .success());
    let out = common::wirebench()
        .args([
            "run",
            "127.0.0.1",
            "--port",
            &s.port.to_string(),
            "-u",
            "-n",
            "100000",
        ])
        .env("WIREBENCH_PSK", "correct horse battery staple")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // A client with a key refuses a server that cannot prove it has it.
    let open = Server::start(&[]);
    let out = open.run(&["-n", "1000", "--psk-file", good.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("did not prove"));
    // A short key is a usage error.
    std::fs::write(dir.join("short"), "tiny").unwrap();
    let out = s.run(&["--psk-file", dir.join("short").to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(s.alive());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn every_limit_refuses_ten_times_too_much_with_the_limit_in_the_message() {
    let mut s = Server::start(&[
        "--max-bytes",
        "10M",
        "--max-streams",
        "2",
        "--max-size",
        "10000",
        "--max-rate",
        "100M",
        "--max-duration",
        "2s",
    ]);
    for (args, needle) in [
        (
            &["-n", "100M", "-l", "1000", "-b", "10M"][..],
            "--max-bytes",
        ),
        (
            &["-n", "1M", "-l", "1000", "-b", "10M", "-P", "20"][..],
            "--max-streams",
        ),
        (&["-n", "1M", "-l", "100000", "-b", "10M"][..], "--max-size"),
        (&["-n", "1M", "-l", "1000", "-b", "1G"][..], "--max-rate"),
        // -b is per stream: two streams at 60M are 120M in all
        (
            &["-n", "1M", "-l", "1000", "-b", "60M", "-P", "2"][..],
            "--max-rate",
        ),
        (
            &["-t", "20s", "-l", "1000", "-b", "1M"][..],
            "--max-duration",
        ),
        (&["-t", "2s", "-l", "1000", "-b", "100M"][..], "--max-bytes"),
    ] {
        let out = s.run(args);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(needle), "{args:?}: {err}");
    }
    let v = s.run_json(&["-n", "1M", "-l", "1000", "-b", "50M", "-P", "2"]);
    assert_eq!(u(&v, "end.received.bytes"), 2_000_000);
    assert!(s.alive());
}

#[test]
fn per_client_limits_count_running_and_recent_tests() {
    let s = Server::start(&[
        "--max-tests",
        "10",
        "--max-tests-per-client",
        "1",
        "--max-tests-per-minute",
        "3",
    ]);
    let mut busy = s.spawn(&["-t", "3s", "-b", "10M", "-i", "50ms"]);
    wait_for_line(&mut busy, "-0.");
    let out = s.run(&["-n", "1000"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("--max-tests-per-client"));
    busy.kill().unwrap();
    busy.wait().unwrap();
    // One started so far; two more fit in the minute, the fourth does not.
    let mut started = 1;
    let mut refused_for_rate = false;
    for _ in 0..40 {
        let out = s.run(&["-n", "1000"]);
        let err = String::from_utf8_lossy(&out.stderr).to_string();
        if out.status.success() {
            started += 1;
        } else if err.contains("--max-tests-per-minute") {
            refused_for_rate = true;
            break;
        } else {
            // The killed client's slot is still being freed.
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    assert_eq!(started, 3);
    assert!(refused_for_rate);
}

#[test]
fn sigterm_ends_running_tests_with_a_message_and_exits() {
    let mut s = Server::start(&[]);
    let mut client = s.spawn(&["-t", "30s", "-b", "50M", "-i", "50ms"]);
    wait_for_line(&mut client, "-0.");
    let pid = s.pid().to_string();
    let killed = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    assert!(killed.success());
    let out = client.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("shutting down"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let status = s
        .wait_exit(Duration::from_secs(15))
        .expect("the server exits");
    assert!(status.success());
}

#[test]
fn a_thousand_silent_connections_then_a_good_test() {
    let mut s = Server::start(&[]);
    let addr = ("127.0.0.1", s.port);
    let conns: Vec<TcpStream> = (0..1000)
        .filter_map(|_| TcpStream::connect(addr).ok())
        .collect();
    assert!(conns.len() > 200);
    std::thread::sleep(Duration::from_millis(500));
    drop(conns);
    // A client that said start, got its accept and vanished before any data stream.
    let mut c = TcpStream::connect(addr).unwrap();
    let spec = serde_json::json!({"type": "start", "version": 4, "tool": "test",
        "spec": {"protocol": "tcp", "mechanism": "stream", "direction": "forward", "size": 1000,
                 "bytes": 1000, "rate_bps": 0, "streams": 1, "interval_ns": 1000000000u64,
                 "drain_ns": 1000000000u64, "ack_timeout_ns": 200000000u64}});
    let body = serde_json::to_vec(&spec).unwrap();
    c.write_all(&(body.len() as u32).to_be_bytes()).unwrap();
    c.write_all(&body).unwrap();
    let mut prefix = [0u8; 4];
    c.read_exact(&mut prefix).unwrap();
    drop(c);
    still_serves(&mut s);
}

/// A fake peer on loopback that answers the first connection with `answer` (after reading
/// what the client sent) and keeps it open until the client goes.
fn fake_peer(answer: &'static [u8]) -> (u16, std::thread::JoinHandle<()>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a loopback port");
    let port = listener.local_addr().expect("its address").port();
    let t = std::thread::spawn(move || {
        let Ok((mut c, _)) = listener.accept() else {
            return;
        };
        let mut buf = [0u8; 4096];
        let _ = c.read(&mut buf);
        let _ = c.write_all(answer);
        // Until the client closes.
        let _ = c.read_to_end(&mut Vec::new());
    });
    (port, t)
}

#[test]
fn a_server_that_is_not_wirebench_is_named_in_one_line() {
    for (answer, needle) in [
        (
            &b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n"[..],
            "like an HTTP server",
        ),
        // iperf3 answers a connection with its PARAM_EXCHANGE state byte.
        (&[9u8][..], "like an iperf3 server"),
    ] {
        let (port, peer) = fake_peer(answer);
        let out = wirebench()
            .args(["run", "127.0.0.1", "--port", &port.to_string(), "-n", "1K"])
            .output()
            .unwrap();
        peer.join().unwrap();
        assert_eq!(out.status.code(), Some(1));
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains("is not a wirebench server"), "{err}");
        assert!(err.contains(needle), "{err}");
    }
}
