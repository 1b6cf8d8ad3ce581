//! The server's output an iperf3 client asks for with `--get-server-output`: the document
//! `iperf3 -s -J` would have printed for the test (`start`, one `intervals` record a second
//! with each stream's figures, `end`), sent in the results as `server_output_json`. A
//! sending TCP stream's intervals carry the kernel's figures under iperf3's names
//! (`retransmits`, `snd_cwnd`, `rtt`, `rttvar`, `pmtu`), its end `max_snd_cwnd`, `max_rtt`,
//! `min_rtt` and `mean_rtt`.

use std::sync::atomic::Ordering;
use std::time::Duration;

use serde_json::{json, Map, Value};

use super::Streams;
use crate::iperf3::codec::stream_id;
use crate::iperf3::ResultsDoc;

/// The most interval entries (a stream's or a sum's) kept: the document stays within what
/// any client reads (about 250 bytes an entry), whatever `-t` and `-P` the test has; the
/// intervals past it are left out, the end is always there.
pub(super) const MAX_ENTRIES: usize = 2000;

/// The document as the test goes.
#[derive(Debug)]
pub(super) struct ServerOutput {
    start: Value,
    intervals: Vec<Value>,
    entries: usize,
    /// Each stream's counts at the last interval's end: bytes, datagrams, retransmissions.
    last: Vec<(u64, u64, u64)>,
}

/// One interval or end entry's common figures.
fn entry(id: i64, from: f64, to: f64, bytes: u64, sender: bool) -> Map<String, Value> {
    let seconds = (to - from).max(0.0);
    let bps = if seconds > 0.0 {
        bytes as f64 * 8.0 / seconds
    } else {
        0.0
    };
    let mut m = Map::new();
    if id > 0 {
        m.insert("socket".into(), id.into());
    }
    m.insert("start".into(), from.into());
    m.insert("end".into(), to.into());
    m.insert("seconds".into(), seconds.into());
    m.insert("bytes".into(), bytes.into());
    m.insert("bits_per_second".into(), bps.into());
    m.insert("sender".into(), sender.into());
    m
}

/// The `start` section: the data connections (iperf3's socket numbers are its stream ids
/// here), the client, and the test as admitted.
pub(super) fn start_section(
    connected: &[(std::net::SocketAddr, std::net::SocketAddr)],
    client: std::net::SocketAddr,
    p: &crate::iperf3::Params,
    tos: u64,
) -> Value {
    let connected: Vec<Value> = connected
        .iter()
        .enumerate()
        .map(|(i, (local, remote))| {
            json!({
                "socket": stream_id(i),
                "local_host": local.ip().to_string(),
                "local_port": local.port(),
                "remote_host": remote.ip().to_string(),
                "remote_port": remote.port(),
            })
        })
        .collect();
    json!({
        "connected": connected,
        "version": concat!("wirebench ", env!("CARGO_PKG_VERSION")),
        "timestamp": { "timesecs": crate::sys::unix_now_ns() / 1_000_000_000 },
        "accepted_connection": { "host": client.ip().to_string(), "port": client.port() },
        "target_bitrate": p.bandwidth,
        "test_start": {
            "protocol": if p.udp { "UDP" } else { "TCP" },
            "num_streams": p.parallel,
            "blksize": p.len,
            "omit": p.omit,
            "duration": p.time,
            "bytes": p.num,
            "blocks": p.blockcount,
            "reverse": u8::from(p.reverse),
            "tos": tos,
            "target_bitrate": p.bandwidth,
        },
    })
}

impl ServerOutput {
    /// A test's output, from its `start` section, for `streams` streams.
    pub(super) fn new(start: Value, streams: usize) -> Self {
        Self {
            start,
            intervals: Vec::new(),
            entries: 0,
            last: vec![(0, 0, 0); streams],
        }
    }

    /// The interval from `from` to `to` just closed: each stream's figures in it.
    pub(super) fn interval(&mut self, s: &Streams, from: Duration, to: Duration, omitted: bool) {
        let n = s.senders.len();
        if self.entries + n + 2 > MAX_ENTRIES {
            return;
        }
        let (from, to) = (from.as_secs_f64(), to.as_secs_f64());
        let mut streams = Vec::with_capacity(n);
        let mut sums: [(u64, u64, u64, bool); 2] = [(0, 0, 0, false); 2];
        for (i, (live, sender)) in s.live.iter().zip(&s.senders).enumerate() {
            let bytes = live.bytes.load(Ordering::Relaxed);
            let packets = live.packets.load(Ordering::Relaxed);
            let tcp = live.tcp.load();
            let (b0, p0, r0) = self.last[i];
            self.last[i] = (bytes, packets, tcp.retransmits);
            let mut e = entry(stream_id(i), from, to, bytes - b0.min(bytes), *sender);
            let retrans = tcp.retransmits.saturating_sub(r0);
            if s.udp {
                e.insert("packets".into(), packets.saturating_sub(p0).into());
            } else if *sender {
                e.insert("retransmits".into(), retrans.into());
                e.insert("snd_cwnd".into(), tcp.snd_cwnd_bytes.into());
                e.insert("rtt".into(), tcp.rtt_us.into());
                e.insert("rttvar".into(), tcp.rttvar_us.into());
                e.insert("pmtu".into(), tcp.pmtu_bytes.into());
            }
            e.insert("omitted".into(), omitted.into());
            // The first direction's sum, then --bidir's other one.
            let k = usize::from(Some(sender) != s.senders.first());
            let sum = &mut sums[k];
            *sum = (
                sum.0 + bytes - b0.min(bytes),
                sum.1 + packets.saturating_sub(p0),
                sum.2 + retrans,
                *sender,
            );
            streams.push(Value::Object(e));
        }
        let mut record = json!({ "streams": streams });
        for (k, name) in [(0, "sum"), (1, "sum_bidir_reverse")] {
            let (bytes, packets, retrans, sender) = sums[k];
            if k == 1 && !s.senders.iter().any(|x| Some(x) != s.senders.first()) {
                continue;
            }
            let mut e = entry(0, from, to, bytes, sender);
            if s.udp {
                e.insert("packets".into(), packets.into());
            } else if sender {
                e.insert("retransmits".into(), retrans.into());
            }
            e.insert("omitted".into(), omitted.into());
            record[name] = Value::Object(e);
            self.entries += 1;
        }
        self.entries += n;
        self.intervals.push(record);
    }

    /// The whole document, once the results are known: `ours` this side's, `peer` the
    /// client's.
    pub(super) fn finish(self, s: &Streams, ours: &ResultsDoc, peer: &ResultsDoc) -> Value {
        let mut streams = Vec::new();
        let mut sums: Vec<(&str, u64, f64, u64, bool)> = Vec::new();
        for (i, r) in ours.streams.iter().enumerate() {
            let sender = s.senders.get(i).copied().unwrap_or(false);
            let theirs = peer.streams.iter().find(|p| p.id == r.id);
            let end = s.snapshot(i);
            let mut mine = entry(r.id, 0.0, r.end_time, r.bytes, sender);
            if s.udp {
                let lost = r.errors.max(0) as u64;
                let pct = if r.packets > 0 {
                    lost as f64 * 100.0 / r.packets as f64
                } else {
                    0.0
                };
                mine.insert("jitter_ms".into(), (r.jitter * 1000.0).into());
                mine.insert("lost_packets".into(), lost.into());
                mine.insert("packets".into(), r.packets.into());
                mine.insert("lost_percent".into(), pct.into());
                mine.insert("out_of_order".into(), end.out_of_order.into());
                streams.push(json!({ "udp": mine }));
                continue;
            }
            if sender {
                mine.insert("retransmits".into(), r.retransmits.max(0).into());
                mine.insert("max_snd_cwnd".into(), end.rtt.max_snd_cwnd_bytes.into());
                mine.insert("max_rtt".into(), end.rtt.max_rtt_us.into());
                mine.insert("min_rtt".into(), end.rtt.min_rtt_us.into());
                mine.insert("mean_rtt".into(), end.rtt.mean_rtt_us().into());
            }
            let other = theirs.map(|p| entry(r.id, 0.0, p.end_time, p.bytes, !sender));
            let (snd, rcv) = if sender {
                (Some(mine), other)
            } else {
                (other, Some(mine))
            };
            for (name, e) in [("sender", &snd), ("receiver", &rcv)] {
                if let Some(e) = e {
                    let secs = e.get("seconds").and_then(Value::as_f64).unwrap_or(0.0);
                    let bytes = e.get("bytes").and_then(Value::as_u64).unwrap_or(0);
                    let retrans = e.get("retransmits").and_then(Value::as_u64).unwrap_or(0);
                    sums.push((name, bytes, secs, retrans, name == "sender"));
                }
            }
            streams.push(json!({ "sender": snd, "receiver": rcv }));
        }
        let mut end = json!({
            "streams": streams,
            "cpu_utilization_percent": {
                "host_total": ours.cpu_util_total,
                "host_user": ours.cpu_util_user,
                "host_system": ours.cpu_util_system,
                "remote_total": peer.cpu_util_total,
                "remote_user": peer.cpu_util_user,
                "remote_system": peer.cpu_util_system,
            },
        });
        if !s.udp {
            for (name, key) in [("sender", "sum_sent"), ("receiver", "sum_received")] {
                let (bytes, secs, retrans) = sums
                    .iter()
                    .filter(|x| x.0 == name)
                    .fold((0, 0.0f64, 0), |(b, t, r), x| {
                        (b + x.1, t.max(x.2), r + x.3)
                    });
                let mut e = entry(0, 0.0, secs, bytes, name == "sender");
                if name == "sender" {
                    e.insert("retransmits".into(), retrans.into());
                }
                end[key] = Value::Object(e);
            }
            if let Some(cc) = &ours.congestion_used {
                end["sender_tcp_congestion"] = cc.clone().into();
                end["receiver_tcp_congestion"] = cc.clone().into();
            }
        }
        json!({ "start": self.start, "intervals": self.intervals, "end": end })
    }
}
