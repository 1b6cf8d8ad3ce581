//! Loss injected by the kernel, independent of wirebench: an nftables rule in a private
//! network namespace drops a random tenth of the UDP datagrams on loopback, in both
//! directions. Stop-and-wait must still deliver every byte (resending what was lost), and
//! streaming must count every loss. Needs root (CAP_NET_ADMIN) and nft: the tests are
//! `#[ignore]`d and fail in one line without them; `.ci/run` installs nftables and runs them.

mod common;

use std::process::Command;

use common::u;

/// Runs `wirebench run ARGS --json` in a new network namespace whose output hook drops
/// UDP at random with probability `percent`/100; fails the test when namespaces or nft are
/// missing.
fn run_lossy(percent: u32, args: &str) -> serde_json::Value {
    common::require_root();
    common::require("nft");
    let script = format!(
        "set -e; ip link set lo up; \
         nft add table inet wbtest; \
         nft add chain inet wbtest out '{{ type filter hook output priority 0; }}'; \
         nft add rule inet wbtest out meta l4proto udp numgen random mod 100 '<' {percent} drop; \
         exec \"$0\" run {args} --json"
    );
    let out = Command::new("unshare")
        .args(["-n", "sh", "-c", &script, env!("CARGO_BIN_EXE_wirebench")])
        .output()
        .expect("run unshare");
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        panic!("wirebench run {args} failed: {err}");
    }
    serde_json::from_slice(&out.stdout).expect("results JSON")
}

#[test]
#[ignore = "needs root and nftables"]
fn udp_stop_and_wait_resends_what_the_kernel_drops() {
    let v = run_lossy(
        10,
        "-u --mode stop-and-wait -n 100001 -l 1000 --ack-timeout 10ms",
    );
    assert_eq!(u(&v, "end.received.bytes"), 100_001, "{v}");
    assert_eq!(u(&v, "end.received.messages"), 101, "{v}");
    assert_eq!(u(&v, "end.udp.lost"), 0);
    // About 10% of 101 data datagrams and of their acks are dropped: each needs a resend.
    // (Loose bound: P(no drop at all in ~200 datagrams at 10%) is about 1e-9.)
    let resent = u(&v, "end.retransmits");
    assert!(resent >= 1, "{v}");
    // A lost ack makes the receiver see the message twice; it is not counted twice.
    assert!(u(&v, "end.udp.duplicates") <= resent);
}

#[test]
#[ignore = "needs root and nftables"]
fn udp_stream_counts_exactly_what_the_kernel_drops() {
    for dir in ["", "-R"] {
        // One datagram per send: with GSO a firewall drops a whole batch at once.
        let v = run_lossy(
            10,
            &format!("-u -n 2000000 -l 1000 -b 100M --no-offload {dir}"),
        );
        let lost = u(&v, "end.udp.lost");
        // On loopback nothing else drops at this rate: the sender saw each drop as EPERM.
        assert_eq!(lost, u(&v, "end.local_drops"), "{v}");
        assert_eq!(u(&v, "end.received.messages") + lost, 2000);
        // 10% of 2000: expect 200, sd about 13; allow a wide band.
        assert!((120..=300).contains(&lost), "{v}");
    }
}

/// GSO never fragments: datagrams larger than the path MTU make the kernel refuse a GSO send
/// (EMSGSIZE). The sender must fall back to one datagram per message, which the kernel
/// fragments, and say so in the results.
#[test]
#[ignore = "needs root"]
fn datagrams_above_the_mtu_fall_back_from_gso() {
    common::require_root();
    let script = "set -e; ip link set lo up; ip link set lo mtu 1500; \
                  exec \"$0\" run -u -l 8000 -n 8000000 -b 500M --json";
    let out = Command::new("unshare")
        .args(["-n", "sh", "-c", script, env!("CARGO_BIN_EXE_wirebench")])
        .output()
        .expect("run unshare");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("results JSON");
    assert_eq!(u(&v, "end.sent.messages"), 1000);
    assert_eq!(
        u(&v, "end.received.messages") + u(&v, "end.udp.lost"),
        1000,
        "{v}"
    );
    let features = v["datapath"]["client"]["features"].to_string();
    assert!(features.contains("udp_gso_refused"), "{v}");
    assert!(!features.contains("\"udp_gso\""), "{v}");
    // Said once, with the kernel's reason.
    let fallbacks = v["datapath"]["client"]["fallbacks"]
        .as_array()
        .expect("fallbacks");
    assert_eq!(fallbacks.len(), 1, "{v}");
    assert_eq!(fallbacks[0]["feature"], "udp_gso", "{v}");
    let reason = fallbacks[0]["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("a send with GSO failed ("), "{reason}");
}
