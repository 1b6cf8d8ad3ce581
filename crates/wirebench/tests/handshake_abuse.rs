//! What a peer that has not proven the key can cost a server with `--psk-file`: memory
//! (frames stay at the hello's 64 KiB cap until the key is proven), places in the pending
//! stage (a flood from ten addresses cannot push out a slow keyed client), and key guesses
//! and log lines (wrong keys make their address wait, twice as long each time; refusal lines
//! are rate limited with a count of those left out). Each attack comes from other 127/8
//! addresses; a keyed test from 127.0.0.1 completes after it.

mod common;

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::attack::{connect_port, proc_status, raise_fd_limit, recv, send, spec, start, tmp_dir};
use common::{u, wirebench, Server};
use wirebench_engine::Psk;
use wirebench_proto::control::{FrameDecoder, Message};
use wirebench_proto::error_kind::ErrorKind;

const KEY: &str = "a key of at least sixteen bytes";

/// The attacks here load the machine; run one at a time, so that one's flood does not slow
/// another's server into a result that says nothing.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner())
}

/// A key file with [`KEY`], for test `name`.
fn key_file(name: &str) -> String {
    let key = tmp_dir(name).join("key");
    std::fs::write(&key, KEY).expect("key file");
    key.to_string_lossy().to_string()
}

/// A keyed test from 127.0.0.1 completes, exactly.
fn keyed_test_completes(s: &Server, key: &str) {
    let v = s.run_json(&["-n", "100000", "-l", "1000", "--psk-file", key]);
    assert_eq!(u(&v, "end.received.bytes"), 100_000);
}

#[test]
fn frames_before_the_keys_proof_cannot_take_the_servers_memory() {
    let _one = one_at_a_time();
    raise_fd_limit();
    let key = key_file("preauth");
    let s = Server::start(&["--psk-file", &key]);
    let before_kb = proc_status(s.pid(), "VmHWM");
    // 256 connections from four addresses (the pending stage's 64 each) say start, then
    // each announces a 4 MiB frame and writes all of it but its end, 16 at a time: a server
    // that waited for such frames would hold 1 GiB for them until the handshake deadline.
    let mut conns: Vec<TcpStream> = (0..256)
        .filter_map(|i| connect_port(&format!("127.0.0.{}", 2 + i % 4), s.port).ok())
        .collect();
    assert!(conns.len() > 200, "only {} connections", conns.len());
    for c in &mut conns {
        let _ = c.write_all(&common_start_frame());
    }
    let frame_len = 4u32 * 1024 * 1024;
    let body = vec![b'x'; 256 * 1024];
    let pushed = Arc::new(AtomicU64::new(0));
    std::thread::scope(|scope| {
        for chunk in conns.chunks_mut(16) {
            let (body, pushed) = (&body, &pushed);
            scope.spawn(move || {
                for c in chunk.iter_mut() {
                    let _ = c.set_write_timeout(Some(Duration::from_secs(2)));
                    if c.write_all(&frame_len.to_be_bytes()).is_err() {
                        continue;
                    }
                    for _ in 0..15 {
                        match c.write(body) {
                            Ok(n) => pushed.fetch_add(n as u64, Ordering::Relaxed),
                            Err(_) => break,
                        };
                    }
                }
            });
        }
    });
    let peak_kb = proc_status(s.pid(), "VmHWM");
    // The instrument saw something: the server's socket buffers took bytes of the frames.
    assert!(
        pushed.load(Ordering::Relaxed) > 0,
        "no frame bytes went out"
    );
    // A frame over 64 KiB ends its connection at its length prefix: nothing is held for
    // it. 256 frames of 4 MiB held would be 1 GiB; the bound here is 64 KiB each and the
    // process's own growth.
    let grew_kb = peak_kb.saturating_sub(before_kb);
    assert!(
        grew_kb < 48 * 1024,
        "the server grew by {grew_kb} kB (peak {peak_kb} kB) under 256 unauthenticated 4 MiB frames"
    );
    drop(conns);
    keyed_test_completes(&s, &key);
}

/// A `start` frame for the spec of [`spec`], as an attacker sends it.
fn common_start_frame() -> Vec<u8> {
    wirebench_proto::control::encode(&start(spec(1000), "x")).expect("encodes")
}

#[test]
fn a_keyed_client_with_a_one_second_round_trip_gets_in_under_a_ten_address_flood() {
    let _one = one_at_a_time();
    raise_fd_limit();
    let key = key_file("flood");
    let s = Server::start(&["--psk-file", &key]);
    let port = s.port;
    let stop = Arc::new(AtomicBool::new(false));
    let opened = Arc::new(AtomicU64::new(0));
    // Ten addresses open silent connections as fast as they can, each keeping its newest
    // 100 open: the stage (256) is full all the time and pushes one out for each new one.
    let flood: Vec<_> = (10..20)
        .map(|last| {
            let (stop, opened) = (Arc::clone(&stop), Arc::clone(&opened));
            std::thread::spawn(move || {
                let from = format!("127.0.0.{last}");
                let mut held = VecDeque::new();
                while !stop.load(Ordering::Relaxed) {
                    if let Ok(c) = connect_port(&from, port) {
                        opened.fetch_add(1, Ordering::Relaxed);
                        held.push_back(c);
                        if held.len() > 100 {
                            held.pop_front();
                        }
                    }
                }
            })
        })
        .collect();
    // The stage is full before the client comes.
    let until = Instant::now() + Duration::from_secs(20);
    while opened.load(Ordering::Relaxed) < 2000 && Instant::now() < until {
        std::thread::yield_now();
    }
    let before = opened.load(Ordering::Relaxed);
    // The keyed client: start, the challenge, then its answer a round trip later: at least
    // 1 s, and long enough for the flood to push out more than a whole stage (on a loaded
    // machine the server accepts the flood more slowly), within the handshake's 10 s.
    let psk = Psk::new(KEY.as_bytes()).expect("key");
    let sp = spec(100_000);
    let mut c = connect_port("127.0.0.1", port).expect("connect");
    send(&mut c, &start(sp.clone(), "slow-client"));
    let mut d = FrameDecoder::new(1 << 20);
    let nonce = match recv(&mut c, &mut d) {
        Some(Message::Challenge { nonce }) => nonce,
        other => panic!("expected a challenge, got {other:?}"),
    };
    let asked = Instant::now();
    let at_challenge = opened.load(Ordering::Relaxed);
    while asked.elapsed() < Duration::from_secs(8)
        && (asked.elapsed() < Duration::from_secs(1)
            || opened.load(Ordering::Relaxed) - at_challenge < 600)
    {
        std::thread::sleep(Duration::from_millis(10));
    }
    let spec_json = serde_json::to_string(&sp).expect("spec JSON");
    let mac = psk.client_mac("c", &nonce, &spec_json);
    send(&mut c, &Message::Auth { mac });
    let answer = recv(&mut c, &mut d);
    let during = opened.load(Ordering::Relaxed) - before;
    stop.store(true, Ordering::Relaxed);
    for t in flood {
        let _ = t.join();
    }
    // The flood went on while the client waited: hundreds of connections pushed others out.
    assert!(
        during > 256,
        "only {during} flood connections during the round trip"
    );
    assert!(
        matches!(answer, Some(Message::Accept { .. })),
        "the keyed client was not admitted under the flood: {answer:?}"
    );
    drop(c);
    keyed_test_completes(&s, &key);
}

/// A child process that is killed when the test ends, also when it fails.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn wrong_keys_make_their_address_wait_and_their_log_lines_are_capped() {
    let _one = one_at_a_time();
    let key = key_file("guess");
    let mut child = KillOnDrop(
        wirebench()
            .args([
                "serve",
                "--bind",
                "127.0.0.1",
                "--port",
                "0",
                "--psk-file",
                &key,
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start wirebench serve"),
    );
    let child = &mut child.0;
    let mut banner = String::new();
    let mut out = BufReader::new(child.stdout.take().expect("stdout"));
    out.read_line(&mut banner).expect("banner");
    // The log is read as it comes: a server that logged every attempt must not block on a
    // full pipe (it would then fail the count below, not hang).
    let err = child.stderr.take().expect("stderr");
    let log_reader = std::thread::spawn(move || {
        let mut log = String::new();
        let _ = std::io::Read::read_to_string(&mut BufReader::new(err), &mut log);
        log
    });
    let port: u16 = banner
        .split_whitespace()
        .nth(4)
        .and_then(|a| a.rsplit(':').next()?.parse().ok())
        .unwrap_or_else(|| panic!("no port in {banner:?}"));
    // Wrong keys from 127.0.0.2 for three seconds, as fast as the server answers.
    let (mut looked_at, mut held_back) = (0, 0);
    let until = Instant::now() + Duration::from_secs(3);
    while Instant::now() < until {
        let Ok(mut c) = connect_port("127.0.0.2", port) else {
            continue;
        };
        send(&mut c, &start(spec(1000), "guesser"));
        let mut d = FrameDecoder::new(1 << 20);
        let mut answer = recv(&mut c, &mut d);
        if matches!(answer, Some(Message::Challenge { .. })) {
            send(
                &mut c,
                &Message::Auth {
                    mac: "00".repeat(32),
                },
            );
            answer = recv(&mut c, &mut d);
        }
        match answer {
            Some(Message::Refuse {
                reason,
                error_kind: Some(ErrorKind::Auth),
            }) if reason.contains("too many wrong") => {
                held_back += 1;
            }
            Some(Message::Refuse {
                reason,
                error_kind: Some(ErrorKind::Auth),
            }) if reason.contains("wrong pre-shared key") => {
                looked_at += 1;
            }
            other => panic!("unexpected answer {other:?}"),
        }
    }
    // Three free guesses, then waits of 1 s and 2 s: at most six keys in three seconds
    // (the server answered thousands a second before).
    assert!((3..=6).contains(&looked_at), "{looked_at} keys looked at");
    assert!(held_back > 10, "only {held_back} attempts held back");
    // Another address is not held back: a keyed test from 127.0.0.1 runs.
    let run = wirebench()
        .args(["run", "127.0.0.1", "--port", &port.to_string()])
        .args(["-n", "100000", "-l", "1000", "--psk-file", &key, "--json"])
        .output()
        .expect("run");
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let _ = child.kill();
    let _ = child.wait();
    let log = log_reader.join().unwrap_or_default();
    let refused: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("client=127.0.0.2"))
        .collect();
    // Five lines at once, then one every ten seconds: the attempts of three seconds leave
    // five lines, however many there were.
    assert!(
        !refused.is_empty() && refused.len() <= 6,
        "{} log lines for {} attempts:\n{log}",
        refused.len(),
        looked_at + held_back
    );
}
