//! File transfers: a generated 200 MB file goes both ways over TCP and over UDP
//! stop-and-wait and arrives byte for byte (checked with `cmp`-like comparison here, and by
//! the digests in the results); the server never reads or writes outside its directories.

mod common;

use std::path::{Path, PathBuf};

use common::{f, u, Server};

/// A fresh directory for one test, removed when dropped.
struct Dir(PathBuf);

impl Dir {
    fn new(tag: &str) -> Self {
        let d = std::env::temp_dir().join(format!("wirebench-files-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(d.join("save")).expect("save dir");
        std::fs::create_dir_all(d.join("files")).expect("files dir");
        Self(d)
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.0.join(rel)
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `len` bytes that no compression flatters and that differ at every offset.
fn make_file(path: &Path, len: usize) {
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let data: Vec<u8> = (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    std::fs::write(path, data).expect("write the test file");
}

fn same_file(a: &Path, b: &Path) -> bool {
    std::fs::read(a).expect("read a") == std::fs::read(b).expect("read b")
}

fn server(dir: &Dir) -> Server {
    let save = dir.path("save");
    let files = dir.path("files");
    Server::start(&[
        "--save-dir",
        save.to_str().expect("utf-8"),
        "--files-dir",
        files.to_str().expect("utf-8"),
    ])
}

fn check_identical(v: &serde_json::Value, bytes: u64) {
    let fe = &v["end"]["file"];
    assert_eq!(fe["identical"], true, "{v}");
    assert_eq!(u(fe, "bytes"), bytes);
    assert_eq!(u(fe, "received_bytes"), bytes);
    assert_eq!(fe["algorithm"], "xxh3-64");
    assert_eq!(fe["sent_digest"], fe["received_digest"]);
    // The send and receive times and rates agree with the bytes.
    for side in ["sent", "received"] {
        let t = f(v, &format!("end.{side}.transfer_s"));
        let r = f(v, &format!("end.{side}.transfer_bps"));
        let b = u(v, &format!("end.{side}.bytes")) as f64;
        assert!(t > 0.0, "{v}");
        assert!((r - b * 8.0 / t).abs() <= 1e-6 * r, "{side}: {v}");
    }
}

#[test]
fn a_200_mb_file_arrives_identical_over_tcp_and_udp_stop_and_wait_both_ways() {
    let dir = Dir::new("big");
    let src = dir.path("files/big.bin");
    let len = 200_000_000usize;
    make_file(&src, len);
    let s = server(&dir);
    let src_arg = src.to_str().expect("utf-8");
    for proto in [
        &["--tcp"][..],
        &["-u", "--mode", "stop-and-wait", "-l", "60000"][..],
    ] {
        // Forward: the server saves the copy in its --save-dir, named in the results.
        let v = s.run_json(&[&["--file", src_arg][..], proto].concat());
        check_identical(&v, len as u64);
        let saved = PathBuf::from(v["end"]["file"]["saved_as"].as_str().expect("saved_as"));
        assert!(saved.starts_with(dir.path("save")), "{v}");
        assert!(same_file(&src, &saved), "forward copy differs ({proto:?})");
        std::fs::remove_file(&saved).expect("remove copy");
        // Reverse: the server sends from its --files-dir, the client saves with --save.
        let copy = dir.path("copy.bin");
        let copy_arg = copy.to_str().expect("utf-8");
        let v = s.run_json(&[&["-R", "--file", "big.bin", "--save", copy_arg][..], proto].concat());
        check_identical(&v, len as u64);
        assert!(same_file(&src, &copy), "reverse copy differs ({proto:?})");
        std::fs::remove_file(&copy).expect("remove copy");
    }
}

#[test]
fn a_save_dir_past_its_quota_refuses_the_transfer_before_a_byte_is_written() {
    let dir = Dir::new("quota");
    let src = dir.path("files/f.bin");
    make_file(&src, 100_000);
    let save = dir.path("save");
    let s = Server::start(&[
        "--save-dir",
        save.to_str().expect("utf-8"),
        "--save-quota",
        "150K",
    ]);
    let src_arg = src.to_str().expect("utf-8");
    let identical = |v: serde_json::Value| assert_eq!(v["end"]["file"]["identical"], true, "{v}");
    identical(s.run_json(&["--file", src_arg]));
    // 100 kB saved, 102.4 kB on disk in whole blocks: another would pass 150 kB.
    let out = s.run(&["--file", src_arg]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--save-quota 150.00 KB (102.40 KB used)"),
        "{err}"
    );
    let saved: Vec<_> = std::fs::read_dir(&save).expect("save dir").collect();
    assert_eq!(saved.len(), 1, "the refused transfer left a file");
    // Room again once the operator removes a copy.
    for e in saved {
        std::fs::remove_file(e.expect("entry").path()).expect("remove");
    }
    identical(s.run_json(&["--file", src_arg]));
}

#[test]
fn udp_streaming_reports_missing_ranges_and_the_server_keeps_to_its_directories() {
    let dir = Dir::new("udp");
    let src = dir.path("files/small.bin");
    make_file(&src, 1_000_000);
    let s = server(&dir);
    let v = s.run_json(&["-u", "-b", "100M", "--file", src.to_str().expect("utf-8")]);
    let fe = &v["end"]["file"];
    let lost = u(&v, "end.udp.lost");
    // Loopback at 100 Mbit/s loses nothing, almost always; whatever it loses is listed.
    let missing = u(fe, "missing_bytes");
    assert_eq!(missing == 0, lost == 0, "{v}");
    assert_eq!(fe["identical"], lost == 0, "{v}");
    assert_eq!(u(fe, "received_bytes") + missing, 1_000_000, "{v}");
    // The server refuses what it must not touch.
    for name in ["missing.bin", "..", "../small.bin"] {
        let out = s.run(&["-R", "--file", name]);
        assert!(!out.status.success(), "{name}");
    }
    // A link out of the files directory is not followed.
    let link = dir.path("files/passwd");
    std::os::unix::fs::symlink("/etc/passwd", &link).expect("symlink");
    let out = s.run(&["-R", "--file", "passwd"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no file"));
}

#[test]
fn both_directions_prints_the_send_and_receive_table_and_both_documents() {
    let dir = Dir::new("both");
    let src = dir.path("files/both.bin");
    make_file(&src, 3_000_000);
    let s = server(&dir);
    let v = s.run_json(&["--both-directions", "--file", src.to_str().expect("utf-8")]);
    for (half, direction) in [("send", "forward"), ("receive", "reverse")] {
        assert_eq!(v[half]["test"]["direction"], direction, "{v}");
        assert_eq!(v[half]["end"]["file"]["identical"], true, "{v}");
    }
    assert!(f(&v, "send.end.sent.transfer_s") > 0.0);
    assert!(f(&v, "receive.end.received.transfer_s") > 0.0);
    // The table, for people: send and receive sizes, times and rates.
    let out = s.run(&["--both-directions", "-n", "5M"]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    for col in [
        "Xfer size",
        "Send time (s)",
        "Send rate",
        "Recv time (s)",
        "Recv rate",
    ] {
        assert!(text.contains(col), "{text}");
    }
    assert!(text.contains("5000000"), "{text}");
}

#[test]
fn results_report_the_server_memory_before_and_after() {
    let s = Server::start(&[]);
    let v = s.run_json(&["-n", "50M"]);
    let res = &v["end"]["resources"]["server"];
    let (before, after, peak) = (
        u(res, "rss_before_kib"),
        u(res, "rss_after_kib"),
        u(res, "max_rss_kib"),
    );
    // Loose: an idle server holds a few MiB (8 MiB is the goal, in BENCHMARKS.md).
    assert!(before > 0 && before < 64 * 1024, "{v}");
    assert!(after > 0 && peak >= before, "{v}");
}

/// A transfer cut off midway (the client killed) leaves nothing in `--save-dir`: no half
/// copy under its name, no temporary file, nothing counted against the quota.
#[test]
fn a_transfer_cut_off_midway_leaves_nothing_and_takes_no_quota() {
    let dir = Dir::new("cutoff");
    let src = dir.path("files/f.bin");
    make_file(&src, 10_000_000);
    let save = dir.path("save");
    let s = Server::start(&[
        "--save-dir",
        save.to_str().expect("utf-8"),
        "--save-quota",
        "15M",
    ]);
    let src_arg = src.to_str().expect("utf-8");
    // 10 MB at 8 Mbit/s: ten seconds, cut once the copy has begun to arrive.
    let mut client = s.spawn(&["--file", src_arg, "-b", "8M"]);
    let entries = || std::fs::read_dir(&save).expect("save dir").count();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let written = || {
        std::fs::read_dir(&save)
            .expect("save dir")
            .filter_map(Result::ok)
            .any(|e| e.metadata().is_ok_and(|m| m.len() > 0))
    };
    while !written() {
        assert!(std::time::Instant::now() < deadline, "no copy began");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    client.kill().expect("kill");
    let _ = client.wait();
    while entries() > 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "a cut-off copy stayed"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    // The whole quota is free: the same file fits (10 MB of 15 MB).
    let v = s.run_json(&["--file", src_arg]);
    assert_eq!(v["end"]["file"]["identical"], true, "{v}");
    assert_eq!(entries(), 1);
}
