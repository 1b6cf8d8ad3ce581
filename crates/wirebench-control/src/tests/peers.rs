//! A client talking to something that is not a wirebench server.

use std::time::Duration;

use super::pair::{spec, Pair};
use crate::Session;
use crate::FIRST_BYTES_TIMEOUT;

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

fn client_hears(bytes: &[u8], then_wait: Duration) -> (String, Duration) {
    let mut p = Pair::with(spec());
    p.server_reads = false;
    p.client.handle_bytes(p.now, bytes);
    p.run_for(then_wait);
    let closed = p.client_closed_at.expect("the client gave up");
    (p.client_error(), closed - p.base)
}

#[test]
fn an_http_server_is_named_as_such() {
    let (err, t) = client_hears(
        b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n",
        secs(60),
    );
    assert!(
        err.starts_with(
            "server.test:5300 is not a wirebench server: it answered like an HTTP server"
        ),
        "{err}"
    );
    assert!(err.contains("400 Bad Request"), "{err}");
    assert!(!err.contains("1213486160"), "{err}");
    assert_eq!(t, Duration::ZERO);
}

#[test]
fn an_iperf3_server_is_named_as_such() {
    for byte in [9u8, 0xff] {
        let (err, t) = client_hears(&[byte], secs(60));
        assert!(err.contains("it answered like an iperf3 server"), "{err}");
        assert!(err.contains("wirebench run --iperf3 HOST"), "{err}");
        assert_eq!(t, Duration::ZERO);
    }
}

#[test]
fn bytes_that_never_make_a_frame_fail_within_two_seconds() {
    let (err, t) = client_hears(&[0, 0], secs(60));
    assert!(err.contains("is not a wirebench server"), "{err}");
    assert_eq!(t, FIRST_BYTES_TIMEOUT);
}
