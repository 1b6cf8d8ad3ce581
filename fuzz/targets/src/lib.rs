//! The bodies of wirebench's fuzz targets: one function per reader of untrusted bytes (the
//! control frames and data headers a peer sends, and every file wirebench reads back: packet
//! logs, link logs, results and experiment JSON, scenario and mesh TOML, Mahimahi traces), and the
//! lab's readers of the packets its hosts send through a link.
//!
//! They are plain functions so that two drivers share them: `cargo +nightly fuzz run`
//! (coverage-guided libFuzzer, `fuzz/fuzz_targets/*.rs`, one line each) and the stable smoke
//! run `fuzz-smoke` that CI runs for a short time (seeds plus mutations, [`mutate`]), since
//! CI machines have no nightly toolchain. A target panics or hangs only on a bug: each
//! decoder must return an error for anything it does not accept.
#![deny(unsafe_code)]

pub mod mutate;

use std::path::PathBuf;

use wirebench_engine::iperf3::{admit_anything, decode_everything, UdpHeader};
use wirebench_lab::headers::{ecn, flow_hash, set_ce};
use wirebench_lab::netem::{complete_checksum, corrupt_payload};
use wirebench_lab::scenario::{trial_topology, Scenario};
use wirebench_lab::summary::{ScenarioSummary, TrialFile};
use wirebench_proto::control::{encode, FrameDecoder, MAX_FRAME, MAX_HELLO_FRAME};
use wirebench_proto::header::{decode_ack, DataHeader, SeqToken, UdpHello};
use wirebench_proto::packet_log::{Reader, Record, RECORD_LEN};
use wirebench_proto::results::Results;
use wirebench_report::experiment::summary::ExperimentSummary;
use wirebench_report::input::{arrivals_from, parse_json};
use wirebench_report::meta::ExperimentMeta;
use wirebench_report::plot::{chart_for, experiment_chart, svg_string, Kind};

/// A target: its name (the corpus directory's) and its body.
pub type Target = (&'static str, fn(&[u8]));

/// Every target, by name.
pub const TARGETS: &[Target] = &[
    ("control_frames", control_frames),
    ("data_header", data_header),
    ("packet_log", packet_log),
    ("link_log", link_log),
    ("results_json", results_json),
    ("summary_json", summary_json),
    ("scenario_toml", scenario_toml),
    ("mesh_toml", mesh_toml),
    ("iperf3", iperf3),
    ("iperf3_params", iperf3_params),
    ("lab_packet", lab_packet),
    ("trace", trace),
];

/// Inputs larger than this are drawn only up to the parse: drawing costs milliseconds a
/// point set, and the fuzzer's inputs are short anyway.
const DRAW_MAX: usize = 64 << 10;

/// Arbitrary bytes, in arbitrary pieces, to the control-frame decoder; whatever decodes must
/// encode again.
pub fn control_frames(data: &[u8]) {
    // The first byte picks the piece size, so partial frames are exercised too.
    let Some((&split, rest)) = data.split_first() else {
        return;
    };
    let piece = usize::from(split).max(1);
    let max = if split & 1 == 0 {
        MAX_HELLO_FRAME
    } else {
        MAX_FRAME
    };
    let mut d = FrameDecoder::new(max);
    for chunk in rest.chunks(piece) {
        d.feed(chunk);
        while let Ok(Some(msg)) = d.next_message() {
            let _ = encode(&msg);
        }
    }
}

/// Arbitrary datagrams to the data-header, hello and ack decoders; what decodes round-trips.
pub fn data_header(data: &[u8]) {
    let token = SeqToken(0x0123_4567_89ab_cdef);
    if let Ok(h) = DataHeader::read(data, token) {
        let mut buf = [0u8; 16];
        assert!(h.write(token, &mut buf).is_ok(), "16 bytes hold a header");
        assert_eq!(DataHeader::read(&buf, token), Ok(h));
    }
    if let Ok(h) = UdpHello::decode(data) {
        assert_eq!(&h.encode()[..], data);
    }
    let _ = decode_ack(data);
}

/// A per-thread scratch file with extension `ext`: the plot's entry point takes a path, and
/// the path is what `wirebench plot` gives it.
fn scratch(ext: &str, data: &[u8]) -> Option<PathBuf> {
    let id = format!("{:?}", std::thread::current().id());
    let id: String = id.chars().filter(char::is_ascii_digit).collect();
    let p = std::env::temp_dir().join(format!("wirebench-fuzz-{}-{id}{ext}", std::process::id()));
    std::fs::write(&p, data).ok()?;
    Some(p)
}

/// Draws `kinds` of the file `data` (saved with extension `ext`) as `wirebench plot` does.
fn plot_file(ext: &str, data: &[u8], kinds: &[Option<Kind>]) {
    if data.len() > DRAW_MAX {
        return;
    }
    let Some(path) = scratch(ext, data) else {
        return;
    };
    for &k in kinds {
        if let Ok(chart) = chart_for(&path, k) {
            let _ = svg_string(&chart);
        }
    }
    let _ = std::fs::remove_file(path);
}

/// Arbitrary bytes as a packet log: every record read must encode back to its bytes; the
/// arrival plot's reader and the CSV export (`wirebench packet-log`) must end with a result
/// or an error, in memory bounded by the input.
pub fn packet_log(data: &[u8]) {
    if let Ok(reader) = Reader::new(data) {
        for rec in reader {
            let Ok(rec) = rec else { break };
            let mut buf = [0u8; RECORD_LEN];
            rec.encode(&mut buf);
            assert_eq!(Record::decode(&buf, 0).ok(), Some(rec));
        }
    }
    if arrivals_from(data).is_ok_and(|a| !a.received.is_empty()) {
        plot_file(".log", data, &[Some(Kind::Arrival)]);
    }
    let _ = wirebench_report::packet_log_csv(data, &mut std::io::sink());
}

/// Arbitrary bytes as a link log (CSV): the check, then both of its plots.
pub fn link_log(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if wirebench_proto::link_log::check_csv(text).is_ok() {
        plot_file(".csv", data, &[Some(Kind::Throughput), Some(Kind::Latency)]);
    }
}

/// Arbitrary bytes as a results document: the checked loader, then its plots.
pub fn results_json(data: &[u8]) {
    if parse_json::<Results>("fuzz.json".as_ref(), data).is_ok() {
        plot_file(
            ".json",
            data,
            &[Some(Kind::Throughput), Some(Kind::Latency)],
        );
    }
}

/// Arbitrary bytes as an experiment's files (its summary, its record, a sweep's or a lab
/// trial's file, a lab scenario's summary): the checked loader, then every plot of a summary.
pub fn summary_json(data: &[u8]) {
    let path = std::path::Path::new("summary.json");
    if let Ok(s) = parse_json::<ExperimentSummary>(path, data) {
        if data.len() <= DRAW_MAX {
            for k in [Kind::Rate, Kind::Received, Kind::Time, Kind::Box] {
                if let Ok(chart) = experiment_chart(k, &s) {
                    let _ = svg_string(&chart);
                }
            }
        }
    }
    let _ = parse_json::<ExperimentMeta>(path, data);
    let _ = parse_json::<TrialFile>(path, data);
    let _ = wirebench_report::experiment::trial::TrialFile::parse(path, data);
    let _ = parse_json::<ScenarioSummary>(path, data);
}

/// Arbitrary bytes as a scenario file: parsed and checked, then everything a run builds from
/// it before it needs privileges (the topology of a trial, the profiles and their hosts, the
/// tests' start delays).
pub fn scenario_toml(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(s) = Scenario::parse(text) else {
        return;
    };
    if let Ok(topo) = s.topology() {
        let _ = trial_topology(&topo, 7);
    }
    for p in s.profiles() {
        let _ = s.profile_hosts(&p);
        let _ = p.sysctls();
    }
    for t in &s.tests {
        let _ = t.delay();
    }
}

/// Arbitrary text as a mesh file: an error or a mesh whose every path names a host and a
/// test it has (never a host against itself), and a schedule of those paths that polls.
pub fn mesh_toml(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(m) = wirebench_mesh::Mesh::parse(text) else {
        return;
    };
    for p in &m.paths {
        assert!(p.test < m.tests.len() && p.source < m.hosts.len());
        assert!(p.destination < m.hosts.len() && p.source != p.destination);
    }
    let mut s = wirebench_mesh::Schedule::new(&m, &m.paths, 0, 7, &|_| None);
    let (starts, _) = s.poll(u64::MAX / 2);
    for st in starts {
        s.finished(st.id, u64::MAX / 2, wirebench_mesh::Ended::Ran);
    }
}

/// Arbitrary JSON as an iperf3 client's parameters, parsed and checked against the server's
/// limits (none, and tight ones): never a panic, and whatever is admitted has every number
/// within its bound (len, streams, time, window, counts), so nothing the server then sizes
/// by them can be unbounded.
pub fn iperf3_params(data: &[u8]) {
    admit_anything(data);
}

/// Arbitrary bytes to every iperf3 decoder (state bytes, length-prefixed JSON, server error
/// codes, parameters and results documents, cookies, connect datagrams, both control
/// sessions), and as a UDP header of either width, which must encode again to itself.
pub fn iperf3(data: &[u8]) {
    decode_everything(data, std::time::Instant::now());
    for wide in [false, true] {
        if let Ok(h) = UdpHeader::decode(wide, data) {
            let mut buf = [0u8; 16];
            h.encode(wide, &mut buf).expect("16 bytes hold a header");
            assert_eq!(UdpHeader::decode(wide, &buf), Ok(h));
        }
    }
}

/// Arbitrary bytes as an IP packet the lab's link corrupts (netem's `corrupt`): a bit is
/// flipped only inside the packet, exactly one, past its headers; filling in its transport
/// checksum first never panics either, whatever the lengths and headers claim; nor do the
/// AQM's flow hash, ECN read and CE mark, which changes only the ECN bits (and IPv4's
/// checksum).
pub fn lab_packet(data: &[u8]) {
    let mut p = data.to_vec();
    let r = data.iter().fold(0x9E37_79B9_7F4A_7C15u64, |h, &b| {
        h.rotate_left(5) ^ u64::from(b)
    });
    if let Some(at) = corrupt_payload(&mut p, r) {
        assert!(at < p.len());
        let flipped: u32 = p.iter().zip(data).map(|(a, b)| (a ^ b).count_ones()).sum();
        assert_eq!(flipped, 1);
        assert_ne!(p[at], data[at]);
    } else {
        assert_eq!(p, data);
    }
    let mut q = data.to_vec();
    if complete_checksum(&mut q) {
        // Only the checksum field changed: the packet keeps its length.
        assert_eq!(q.len(), data.len());
    }
    // What an AQM link reads and writes: the flow, the ECN field, the CE mark (only on an
    // ECN-capable packet, and nothing else but its IPv4 checksum changes).
    let _ = flow_hash(data);
    let mut m = data.to_vec();
    let capable = ecn(data) != 0;
    if set_ce(&mut m) {
        assert!(capable);
        assert_eq!(ecn(&m), 3);
        let changed: Vec<usize> = (0..m.len()).filter(|&i| m[i] != data[i]).collect();
        assert!(
            changed.iter().all(|&i| [1, 10, 11].contains(&i)),
            "{changed:?}"
        );
    } else {
        assert_eq!(m, data);
    }
}

/// Arbitrary bytes as a Mahimahi trace (`lab --trace-up FILE`): parsed, then replayed by a
/// trace-driven link for packets whose sizes and arrivals come from the same bytes. Every
/// start is at or after its packet was ready, every packet leaves at or after it starts,
/// departures never go back, and the capacity of adjacent intervals adds up.
pub fn trace(data: &[u8]) {
    use wirebench_lab::trace::{Trace, TraceLink};
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(t) = Trace::parse(text) else {
        return;
    };
    let mut link = TraceLink::new(t.clone());
    let (mut arrival, mut left) = (0u64, 0u64);
    for w in data.chunks(3).take(2000) {
        let gap = u64::from(w[0]) * u64::from(*w.get(1).unwrap_or(&1)) * 37_000;
        let bytes = 40 + u64::from(*w.get(2).unwrap_or(&0)) * 257;
        arrival += gap;
        let ready = arrival.max(left);
        let start = link.next_start(ready);
        assert!(start >= ready, "started at {start} before ready at {ready}");
        let out = link.send(start, bytes);
        assert!(
            out >= start && out >= left,
            "left at {out}: started {start}, before {left}"
        );
        left = out;
    }
    let (a, b) = (arrival / 3, arrival / 3 * 2 + 1);
    assert_eq!(
        t.opportunities_in(0, a) + t.opportunities_in(a, b),
        t.opportunities_in(0, b)
    );
}
