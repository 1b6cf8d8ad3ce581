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
/// any client reads (about 250 bytes an entry, 500 kB in all) and the server holds little
/// for it while the test runs, whatever `-t` and `-P` the test has; the intervals past it
/// are left out, the end is always there.
pub(super) const MAX_ENTRIES: usize = 2000;

/// The document as the test goes: its `start`, and each closed interval's figures, kept as
/// numbers (about 60 bytes a stream an interval) until the end renders them.
#[derive(Debug)]
pub(super) struct ServerOutput {
    start: Value,
    intervals: Vec<Interval>,
    entries: usize,
    /// Each stream's counts at the last interval's end: bytes, datagrams, retransmissions.
    last: Vec<(u64, u64, u64)>,
}

/// One closed interval.
#[derive(Debug)]
struct Interval {
    from: f64,
    to: f64,
    omitted: bool,
    streams: Vec<Figures>,
}

/// One stream's figures in an interval.
#[derive(Debug, Clone, Copy)]
struct Figures {
    bytes: u64,
    packets: u64,
    tcp: crate::sys::SenderTcpInfo,
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
        let streams = s
            .live
            .iter()
            .zip(&mut self.last)
            .map(|(live, last)| {
                let bytes = live.bytes.load(Ordering::Relaxed);
                let packets = live.packets.load(Ordering::Relaxed);
                let mut tcp = live.tcp.load();
                let (b0, p0, r0) = *last;
                *last = (bytes, packets, tcp.retransmits);
                tcp.retransmits = tcp.retransmits.saturating_sub(r0);
                Figures {
                    bytes: bytes.saturating_sub(b0),
                    packets: packets.saturating_sub(p0),
                    tcp,
                }
            })
            .collect();
        self.entries += n + 2;
        self.intervals.push(Interval {
            from: from.as_secs_f64(),
            to: to.as_secs_f64(),
            omitted,
            streams,
        });
    }

    /// An interval as iperf3 writes it: each stream, and the sum of each direction.
    fn render(i: &Interval, senders: &[bool], udp: bool) -> Value {
        let one = |id: i64, f: &Figures, sender: bool| {
            let mut e = entry(id, i.from, i.to, f.bytes, sender);
            if udp {
                e.insert("packets".into(), f.packets.into());
            } else if sender {
                e.insert("retransmits".into(), f.tcp.retransmits.into());
                if id > 0 {
                    e.insert("snd_cwnd".into(), f.tcp.snd_cwnd_bytes.into());
                    e.insert("rtt".into(), f.tcp.rtt_us.into());
                    e.insert("rttvar".into(), f.tcp.rttvar_us.into());
                    e.insert("pmtu".into(), f.tcp.pmtu_bytes.into());
                }
            }
            e.insert("omitted".into(), i.omitted.into());
            Value::Object(e)
        };
        let streams: Vec<Value> = i
            .streams
            .iter()
            .zip(senders)
            .enumerate()
            .map(|(k, (f, sender))| one(stream_id(k), f, *sender))
            .collect();
        let mut record = json!({ "streams": streams });
        let first = senders.first().copied().unwrap_or(true);
        for (name, way) in [("sum", first), ("sum_bidir_reverse", !first)] {
            let mut sum: Option<Figures> = None;
            for (f, _) in i.streams.iter().zip(senders).filter(|(_, s)| **s == way) {
                let t = sum.get_or_insert(Figures {
                    bytes: 0,
                    packets: 0,
                    tcp: crate::sys::SenderTcpInfo::default(),
                });
                t.bytes += f.bytes;
                t.packets += f.packets;
                t.tcp.retransmits += f.tcp.retransmits;
            }
            if let Some(sum) = sum {
                record[name] = one(0, &sum, way);
            }
        }
        record
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
        let intervals: Vec<Value> = self
            .intervals
            .iter()
            .map(|i| Self::render(i, &s.senders, s.udp))
            .collect();
        json!({ "start": self.start, "intervals": intervals, "end": end })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An interval of a `--bidir` TCP test: each stream under its iperf3 id, the server's
    /// sending stream with the kernel's figures under iperf3's names, a sum each way.
    #[test]
    fn an_interval_renders_as_iperf3s() {
        let tcp = crate::sys::SenderTcpInfo {
            retransmits: 2,
            snd_cwnd_bytes: 65_536,
            rtt_us: 40,
            rttvar_us: 10,
            pmtu_bytes: 1500,
        };
        let i = Interval {
            from: 1.0,
            to: 2.0,
            omitted: false,
            streams: vec![
                Figures {
                    bytes: 1000,
                    packets: 0,
                    tcp: crate::sys::SenderTcpInfo::default(),
                },
                Figures {
                    bytes: 2000,
                    packets: 0,
                    tcp,
                },
            ],
        };
        let v = ServerOutput::render(&i, &[false, true], false);
        let mine = &v["streams"][1];
        assert_eq!(mine["socket"], 3);
        assert_eq!(mine["bits_per_second"], 16_000.0);
        for (key, want) in [
            ("snd_cwnd", 65_536),
            ("rtt", 40),
            ("rttvar", 10),
            ("pmtu", 1500),
        ] {
            assert_eq!(mine[key], want, "{key}");
        }
        assert!(
            v["streams"][0].get("rtt").is_none(),
            "a receiver has no TCP figures"
        );
        assert_eq!(v["sum"]["bytes"], 1000);
        assert_eq!(v["sum_bidir_reverse"]["bytes"], 2000);
        assert_eq!(v["sum_bidir_reverse"]["retransmits"], 2);
    }
}
