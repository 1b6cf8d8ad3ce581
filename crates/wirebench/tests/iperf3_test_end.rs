//! An iperf3 client that ends its `-n` test later than its last byte (iperf3 3.21 sends
//! TEST_END on its next second, not when the amount is sent): `wirebench serve` counts its
//! streams to the test's end, as `iperf3 -s` does, so the server's rate is the client's and
//! not the amount over the few milliseconds it took on loopback. The client is written
//! here from iperf3's protocol (its state bytes and JSON frames), so no iperf3 is needed.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::Server;
use serde_json::{json, Value};

const TEST_START: u8 = 1;
const TEST_RUNNING: u8 = 2;
const TEST_END: u8 = 4;
const PARAM_EXCHANGE: u8 = 9;
const CREATE_STREAMS: u8 = 10;
const EXCHANGE_RESULTS: u8 = 13;
const DISPLAY_RESULTS: u8 = 14;
const IPERF_DONE: u8 = 16;

/// Reads iperf3's next state byte, which must be `want`.
fn expect_state(c: &mut TcpStream, want: u8) {
    let mut b = [0u8; 1];
    c.read_exact(&mut b).expect("a state byte");
    assert_eq!(b[0], want, "iperf3 state");
}

/// Writes a JSON frame: its length (4 bytes, big-endian) and the document.
fn send_json(c: &mut TcpStream, v: &Value) {
    let doc = serde_json::to_vec(v).expect("json");
    c.write_all(&(doc.len() as u32).to_be_bytes())
        .expect("length");
    c.write_all(&doc).expect("json");
}

/// Reads a JSON frame.
fn read_json(c: &mut TcpStream) -> Value {
    let mut len = [0u8; 4];
    c.read_exact(&mut len).expect("length");
    let mut doc = vec![0u8; u32::from_be_bytes(len) as usize];
    c.read_exact(&mut doc).expect("json");
    serde_json::from_slice(&doc).expect("the server's results")
}

#[test]
fn a_late_test_end_is_the_end_of_the_servers_streams() {
    const AMOUNT: u64 = 5 * 1024 * 1024;
    // How much later than its last byte the client ends the test: the behaviour under test
    // (3.21 waits up to a second), not a wait for anything.
    const LATE: Duration = Duration::from_millis(400);
    let server = Server::start(&[]);
    let addr = ("127.0.0.1", server.port);
    let cookie = *b"wirebenchlatetestendclientabcdef2345\0";
    let mut control = TcpStream::connect(addr).expect("control");
    control
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    control.write_all(&cookie).expect("cookie");
    expect_state(&mut control, PARAM_EXCHANGE);
    send_json(
        &mut control,
        &json!({"tcp": true, "omit": 0, "time": 0, "num": AMOUNT, "blockcount": 0,
                "parallel": 1, "len": 131072, "pacing_timer": 1000,
                "client_version": "3.21"}),
    );
    expect_state(&mut control, CREATE_STREAMS);
    let mut data = TcpStream::connect(addr).expect("data");
    data.write_all(&cookie).expect("data cookie");
    expect_state(&mut control, TEST_START);
    expect_state(&mut control, TEST_RUNNING);
    let started = Instant::now();
    let block = vec![0x5au8; 131072];
    for _ in 0..AMOUNT / block.len() as u64 {
        data.write_all(&block).expect("data");
    }
    let sent_in = started.elapsed();
    // Not a synchronisation: the client's own pace, which the server must count.
    std::thread::sleep(LATE);
    control.write_all(&[TEST_END]).expect("TEST_END");
    let ended_at = started.elapsed().as_secs_f64();
    expect_state(&mut control, EXCHANGE_RESULTS);
    send_json(
        &mut control,
        &json!({"cpu_util_total": 0.0, "cpu_util_user": 0.0, "cpu_util_system": 0.0,
                "sender_has_retransmits": 1,
                "streams": [{"id": 1, "bytes": AMOUNT, "retransmits": 0, "jitter": 0,
                             "errors": 0, "packets": 0, "start_time": 0,
                             "end_time": ended_at}]}),
    );
    let theirs = read_json(&mut control);
    expect_state(&mut control, DISPLAY_RESULTS);
    control.write_all(&[IPERF_DONE]).expect("IPERF_DONE");
    let stream = &theirs["streams"][0];
    assert_eq!(stream["bytes"], AMOUNT, "{theirs}");
    let end = stream["end_time"].as_f64().expect("end_time");
    // The server's stream ends at TEST_END (its clock started a little after ours), not
    // at the last byte, which came `sent_in` after the start.
    assert!(
        end >= LATE.as_secs_f64() && end <= ended_at + 1.0,
        "the server's stream ended at {end} s; the client sent for {sent_in:?} and ended the test at {ended_at} s: {theirs}"
    );
}
