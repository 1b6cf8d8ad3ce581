//! A results document in iperf3's `-J` schema (`run --iperf3-json`), for the scripts,
//! dashboards and parsers written for iperf3: `start`, `intervals[].streams[]`/`sum`
//! (`sum_bidir_reverse` with `--bidir`), `end.streams[]`, `end.sum_sent`/`sum_received`,
//! `end.sum` (UDP) and `end.cpu_utilization_percent`, as iperf3 3.12 writes them.
//!
//! Every value is one wirebench measured (or the test as asked, where iperf3 echoes it too);
//! a key iperf3 always prints that wirebench has no measurement for is `null`, never a
//! made-up number (wirebench's rule: unknown is null, never 0). `docs/results.md` ("iperf3's
//! schema") lists those keys and where each figure comes from. As iperf3's client does, the
//! intervals hold the client's own figures: a sender's when it sends, a receiver's when it
//! receives.

use std::io::{self, Write};
use std::net::SocketAddr;

use serde_json::{json, Map, Value};
use wirebench_proto::results::{End, IntervalRecord, IntervalView, Resources, Results};
use wirebench_proto::spec::{Direction, Protocol};

use super::Exporter;

/// What the document needs that the results document does not hold: when and where to the
/// client started the test, the machine it ran on, its data connections and, with several
/// streams, each stream's own intervals.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Iperf3Client {
    /// The test's start on the client's clock, s since the Unix epoch.
    pub unix_s: u64,
    /// The server as the user named it (`start.connecting_to.host`).
    pub host: String,
    /// Its port.
    pub port: u16,
    /// The client's machine as `uname -a` names it (iperf3's `system_info`).
    pub system_info: String,
    /// The data connections the client opened (`start.connected`).
    pub connected: Vec<Connected>,
    /// Each stream's intervals as the client closed them, by stream index (the forward
    /// streams, then `--bidir`'s reverse ones): `intervals[].streams` with `-P` above 1,
    /// where the results document holds the streams' sums only.
    pub stream_intervals: Vec<Vec<IntervalRecord>>,
}

/// One data connection (or UDP data socket) as the client opened it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Connected {
    /// Its stream's index: the forward streams, then `--bidir`'s reverse ones.
    pub stream: u32,
    /// The client's end.
    pub local: SocketAddr,
    /// The server's end.
    pub remote: SocketAddr,
}

/// Writes a results document in iperf3's schema, pretty-printed, with a final newline.
pub struct Iperf3Json(pub Iperf3Client);

impl Exporter<Results> for Iperf3Json {
    fn export(&self, doc: &Results, out: &mut dyn Write) -> io::Result<()> {
        serde_json::to_writer_pretty(&mut *out, &document(doc, &self.0))?;
        writeln!(out)
    }
}

/// The document iperf3 writes when a test fails before it starts: empty sections and the
/// error, as `iperf3 -c HOST -J` does when it cannot connect.
pub fn failure(error: &str) -> Value {
    json!({
        "start": {
            "connected": [],
            "version": crate::meta::tool_version(),
            "system_info": system_info(),
        },
        "intervals": [],
        "end": {},
        "error": error,
    })
}

/// This machine as `uname -a` prints its first words (iperf3's `system_info`): system,
/// host name, kernel release, kernel version and machine; what cannot be read is left out.
pub fn system_info() -> String {
    let read = |p: &str| {
        std::fs::read_to_string(format!("/proc/sys/kernel/{p}"))
            .map(|s| s.trim().to_string())
            .unwrap_or_default()
    };
    let words = [
        read("ostype"),
        read("hostname"),
        read("osrelease"),
        read("version"),
        std::env::consts::ARCH.to_string(),
    ];
    let words: Vec<String> = words.into_iter().filter(|w| !w.is_empty()).collect();
    words.join(" ")
}

/// One direction of the test as iperf3's client sees it.
struct Half<'a> {
    intervals: &'a [IntervalView],
    end: &'a End,
    /// Each stream's totals: the streams' own with several, else the direction's `end`.
    streams: Vec<&'a End>,
    /// Whether the client sends in this direction (iperf3's `sender`).
    client_sends: bool,
    /// The socket number of its first stream (iperf3's are file descriptors; these are
    /// stream numbers: 1.. forward, then on for `--bidir`'s reverse streams).
    first_socket: u64,
}

impl<'a> Half<'a> {
    fn new(intervals: &'a [IntervalView], end: &'a End, streams: &'a [End], sends: bool) -> Self {
        Self {
            intervals,
            end,
            streams: if streams.is_empty() {
                vec![end]
            } else {
                streams.iter().collect()
            },
            client_sends: sends,
            first_socket: 1,
        }
    }
}

/// The directions of a test: the top level, and `--bidir`'s reverse half.
fn halves(r: &Results) -> Vec<Half<'_>> {
    let forward = r.test.direction != Direction::Reverse;
    let mut v = vec![Half::new(&r.intervals, &r.end, &r.streams, forward)];
    if let Some(rev) = &r.reverse {
        let mut h = Half::new(&rev.intervals, &rev.end, &rev.streams, false);
        h.first_socket = 1 + v[0].streams.len() as u64;
        v.push(h);
    }
    v
}

/// The results document `r` in iperf3's `-J` schema.
pub fn document(r: &Results, client: &Iperf3Client) -> Value {
    let halves = halves(r);
    let mut doc = Map::new();
    doc.insert("start".into(), start_section(r, &halves, client));
    doc.insert("intervals".into(), intervals(r, &halves, client));
    doc.insert("end".into(), end_section(r, &halves, client));
    if let Some(e) = &r.error {
        doc.insert("error".into(), e.as_str().into());
    }
    Value::Object(doc)
}

/// A number as iperf3 writes it: whole numbers without a fraction.
fn num(v: f64) -> Value {
    if v.fract() == 0.0 && v.abs() < 9.0e15 {
        json!(v as i64)
    } else {
        json!(v)
    }
}

/// `start`: the streams, the tool, the machine, the time, the server and the test as asked.
fn start_section(r: &Results, halves: &[Half<'_>], start: &Iperf3Client) -> Value {
    let connected: Vec<Value> = halves
        .iter()
        .flat_map(|h| (0..h.streams.len() as u64).map(move |i| h.first_socket + i))
        .map(|socket| {
            // Unknown (null) only for a user-space stack's connections.
            let c = start
                .connected
                .iter()
                .find(|c| u64::from(c.stream) + 1 == socket);
            json!({
                "socket": socket,
                "local_host": c.map(|c| c.local.ip().to_string()),
                "local_port": c.map(|c| c.local.port()),
                "remote_host": c.map(|c| c.remote.ip().to_string()),
                "remote_port": c.map(|c| c.remote.port()),
            })
        })
        .collect();
    let t = &r.test;
    let client = r.datapath.client.as_ref();
    let mut s = Map::new();
    s.insert("connected".into(), connected.into());
    s.insert("version".into(), r.wirebench.as_str().into());
    s.insert("system_info".into(), start.system_info.as_str().into());
    s.insert(
        "timestamp".into(),
        json!({ "time": http_date(start.unix_s), "timesecs": start.unix_s }),
    );
    s.insert(
        "connecting_to".into(),
        json!({ "host": start.host, "port": start.port }),
    );
    // wirebench's cookie keys the UDP sequence numbers: a secret, never printed.
    s.insert("cookie".into(), Value::Null);
    if t.protocol == Protocol::Tcp {
        let mss = halves[0].streams[0].tcp.map(|i| i.snd_mss_bytes);
        s.insert("tcp_mss_default".into(), json!(mss));
    }
    s.insert("target_bitrate".into(), t.rate_bps.into());
    s.insert(
        "sock_bufsize".into(),
        t.socket_buffer_bytes.unwrap_or(0).into(),
    );
    s.insert(
        "sndbuf_actual".into(),
        json!(client.map(|d| d.send_buffer_bytes)),
    );
    s.insert(
        "rcvbuf_actual".into(),
        json!(client.map(|d| d.recv_buffer_bytes)),
    );
    s.insert(
        "test_start".into(),
        json!({
            "protocol": if t.protocol == Protocol::Tcp { "TCP" } else { "UDP" },
            "num_streams": t.streams,
            "blksize": t.size,
            "omit": num(t.omit_s.unwrap_or(0.0)),
            "duration": num(t.duration_s.unwrap_or(0.0)),
            "bytes": t.bytes.unwrap_or(0),
            // `-k` is asked as bytes (blocks × size): the amount is in `bytes`.
            "blocks": 0,
            "reverse": u8::from(t.direction == Direction::Reverse),
            // wirebench sets no TOS on its sockets.
            "tos": 0,
            "target_bitrate": t.rate_bps,
        }),
    );
    Value::Object(s)
}

/// An HTTP date (RFC 7231), as iperf3's `timestamp.time`: `Sun, 29 Nov 2026 01:27:16 GMT`.
fn http_date(unix_s: u64) -> String {
    const DAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let days = unix_s / 86_400;
    let (y, m, d) = crate::meta::civil_from_days(days as i64);
    let t = unix_s % 86_400;
    format!(
        "{}, {d:02} {} {y} {:02}:{:02}:{:02} GMT",
        DAYS[(days % 7) as usize],
        MONTHS[(m as usize).saturating_sub(1).min(11)],
        t / 3600,
        t / 60 % 60,
        t % 60
    )
}

/// The common keys of an interval or end entry: `socket` (streams only), the time span,
/// bytes and rate.
fn span(socket: Option<u64>, from: f64, to: Option<f64>, bytes: Option<u64>) -> Map<String, Value> {
    let mut m = Map::new();
    if let Some(s) = socket {
        m.insert("socket".into(), s.into());
    }
    m.insert("start".into(), num(from));
    m.insert("end".into(), json!(to));
    m.insert("seconds".into(), json!(to.map(|t| (t - from).max(0.0))));
    m.insert("bytes".into(), json!(bytes));
    m
}

/// `lost` over `packets`, in percent; 0 of 0 is 0 (as iperf3).
fn percent(lost: Option<u64>, packets: Option<u64>) -> Value {
    match (lost, packets) {
        (Some(_), Some(0)) => json!(0),
        (Some(l), Some(p)) => json!(l as f64 * 100.0 / p as f64),
        _ => Value::Null,
    }
}

/// `intervals`: each interval's streams (a direction's one stream is its sum; several are
/// the client's own records of each) and sums.
fn intervals(r: &Results, halves: &[Half<'_>], client: &Iperf3Client) -> Value {
    let udp = r.test.datagrams();
    let omit_s = r.test.omit_s.unwrap_or(0.0);
    let out: Vec<Value> = (0..halves[0].intervals.len())
        .map(|i| {
            let mut streams = Vec::new();
            let mut sums = Vec::new();
            for h in halves {
                let Some(iv) = h.intervals.get(i) else {
                    continue;
                };
                if h.streams.len() == 1 {
                    let socket = Some(h.first_socket);
                    streams.push(interval_entry(iv, h, udp, omit_s, socket));
                } else {
                    // A stream that had ended (or began late) moved nothing in this
                    // interval: its entry says 0 over the interval, as iperf3's does.
                    let (from, to) = client_span(iv, h.client_sends);
                    let idle = IntervalRecord {
                        start_ns: (from * 1e9) as u64,
                        end_ns: (to * 1e9) as u64,
                        ..IntervalRecord::default()
                    };
                    for socket in h.first_socket..h.first_socket + h.streams.len() as u64 {
                        let own = client.stream_intervals.get(socket as usize - 1);
                        let rec = own.and_then(|v| v.get(i)).unwrap_or(&idle);
                        streams.push(stream_entry(rec, h, udp, omit_s, socket));
                    }
                }
                sums.push(interval_entry(iv, h, udp, omit_s, None));
            }
            let mut m = Map::new();
            m.insert("streams".into(), streams.into());
            let mut sums = sums.into_iter();
            m.insert("sum".into(), sums.next().unwrap_or(Value::Null));
            if let Some(rev) = sums.next() {
                m.insert("sum_bidir_reverse".into(), rev);
            }
            Value::Object(m)
        })
        .collect();
    out.into()
}

/// An interval's start and end on the client's clock: a receiver's own (as its rate is
/// counted, and as its streams' records are), else the sender's.
fn client_span(iv: &IntervalView, client_sends: bool) -> (f64, f64) {
    match (client_sends, iv.received_start_s, iv.received_end_s) {
        (false, Some(a), Some(b)) => (a, b),
        _ => (iv.start_s, iv.end_s),
    }
}

/// One interval of one direction, the client's figures: a stream's entry (`socket` given)
/// or the sum.
fn interval_entry(
    iv: &IntervalView,
    h: &Half<'_>,
    udp: bool,
    omit_s: f64,
    socket: Option<u64>,
) -> Value {
    let sends = h.client_sends;
    let bytes = if sends {
        iv.sent_bytes
    } else {
        iv.received_bytes
    };
    let (from, to) = client_span(iv, sends);
    let mut m = span(socket, from, Some(to), bytes);
    let bps = if sends { iv.sent_bps } else { iv.received_bps };
    m.insert("bits_per_second".into(), json!(bps));
    match (udp, sends) {
        (false, true) => {
            m.insert("retransmits".into(), json!(iv.retransmits));
            if socket.is_some() {
                m.insert("snd_cwnd".into(), json!(iv.cwnd_bytes));
                // TCP_INFO is read for these once, at the end: `end.tcp`.
                for k in ["snd_wnd", "rtt", "rttvar", "pmtu"] {
                    m.insert(k.into(), Value::Null);
                }
            }
        }
        (false, false) => {}
        (true, true) => {
            m.insert("packets".into(), json!(iv.sent_messages));
        }
        (true, false) => {
            let lost = iv.lost.flatten();
            let packets = iv.received_messages.zip(lost).map(|(r, l)| r + l);
            m.insert("jitter_ms".into(), json!(iv.jitter_ms.flatten()));
            m.insert("lost_packets".into(), json!(lost));
            m.insert("packets".into(), json!(packets));
            m.insert("lost_percent".into(), percent(lost, packets));
        }
    }
    m.insert("omitted".into(), (to <= omit_s).into());
    m.insert("sender".into(), sends.into());
    Value::Object(m)
}

/// One stream's interval as the client closed it (`-P` above 1): its own figures, as
/// [`interval_entry`] gives a direction's.
fn stream_entry(rec: &IntervalRecord, h: &Half<'_>, udp: bool, omit_s: f64, socket: u64) -> Value {
    let (from, to) = (rec.start_ns as f64 / 1e9, rec.end_ns as f64 / 1e9);
    let secs = to - from;
    let mut m = span(Some(socket), from, Some(to), Some(rec.bytes));
    let bps = (secs > 0.0).then(|| rec.bytes as f64 * 8.0 / secs);
    m.insert("bits_per_second".into(), json!(bps.unwrap_or(0.0)));
    match (udp, h.client_sends) {
        (false, true) => {
            m.insert("retransmits".into(), json!(rec.retransmits));
            m.insert("snd_cwnd".into(), json!(rec.cwnd_bytes));
            for k in ["snd_wnd", "rtt", "rttvar", "pmtu"] {
                m.insert(k.into(), Value::Null);
            }
        }
        (false, false) => {}
        (true, true) => {
            m.insert("packets".into(), json!(rec.messages));
        }
        (true, false) => {
            let packets = rec.messages + rec.lost;
            m.insert("jitter_ms".into(), json!(rec.jitter_ns.map(|j| j / 1e6)));
            m.insert("lost_packets".into(), json!(rec.lost));
            m.insert("packets".into(), json!(packets));
            m.insert(
                "lost_percent".into(),
                percent(Some(rec.lost), Some(packets)),
            );
        }
    }
    m.insert("omitted".into(), (to <= omit_s).into());
    m.insert("sender".into(), h.client_sends.into());
    Value::Object(m)
}

/// `end`: each stream's totals, the sums per direction, CPU, congestion control.
fn end_section(r: &Results, halves: &[Half<'_>], client: &Iperf3Client) -> Value {
    let udp = r.test.datagrams();
    let mut streams = Vec::new();
    for h in halves {
        for (i, e) in h.streams.iter().enumerate() {
            let socket = h.first_socket + i as u64;
            streams.push(if udp {
                json!({ "udp": udp_entry(e, h, Some(socket), true) })
            } else {
                json!({
                    "sender": tcp_total(e, h, true, Some(socket), client),
                    "receiver": tcp_total(e, h, false, Some(socket), client),
                })
            });
        }
    }
    let mut m = Map::new();
    m.insert("streams".into(), streams.into());
    for (h, suffix) in halves.iter().zip(["", "_bidir_reverse"]) {
        if udp {
            m.insert(format!("sum{suffix}"), udp_entry(h.end, h, None, false));
            m.insert(format!("sum_sent{suffix}"), udp_side(h, true));
            m.insert(format!("sum_received{suffix}"), udp_side(h, false));
        } else {
            let (sent, received) = (
                tcp_total(h.end, h, true, None, client),
                tcp_total(h.end, h, false, None, client),
            );
            m.insert(format!("sum_sent{suffix}"), sent);
            m.insert(format!("sum_received{suffix}"), received);
        }
    }
    m.insert(
        "cpu_utilization_percent".into(),
        cpu(&r.end.resources.client, &r.end.resources.server),
    );
    congestion(r, &halves[0], &mut m);
    Value::Object(m)
}

/// A TCP direction's (or stream's) sender or receiver totals.
fn tcp_total(
    e: &End,
    h: &Half<'_>,
    sent: bool,
    socket: Option<u64>,
    client: &Iperf3Client,
) -> Value {
    let (t, bps) = if sent {
        (&e.sent, e.sent_bps)
    } else {
        (&e.received, e.received_bps)
    };
    let mut m = span(socket, 0.0, t.duration_s, t.bytes);
    m.insert("bits_per_second".into(), json!(bps));
    if sent {
        m.insert("retransmits".into(), json!(retransmits(e, h, socket)));
    }
    if let (true, Some(socket)) = (sent, socket) {
        // The largest window of the stream's intervals: the direction's for one stream,
        // each stream's own records for several.
        let max_cwnd = if h.streams.len() == 1 {
            h.intervals.iter().filter_map(|i| i.cwnd_bytes).max()
        } else {
            let own = client.stream_intervals.get(socket as usize - 1);
            own.and_then(|v| v.iter().filter_map(|i| i.cwnd_bytes).max())
        };
        m.insert("max_snd_cwnd".into(), json!(max_cwnd));
        // Only the smoothed round trip at the end is measured (`end.tcp.rtt_us`).
        for k in ["max_snd_wnd", "max_rtt", "min_rtt", "mean_rtt"] {
            m.insert(k.into(), Value::Null);
        }
    }
    m.insert("sender".into(), h.client_sends.into());
    Value::Object(m)
}

/// Segments retransmitted: a stream's TCP_INFO at its end; a direction's, the sum of its
/// streams' (null when a stream's is unknown).
fn retransmits(e: &End, h: &Half<'_>, socket: Option<u64>) -> Option<u64> {
    if socket.is_some() || h.streams.len() == 1 {
        return e.tcp.map(|t| t.retransmits);
    }
    h.streams.iter().map(|s| s.tcp.map(|t| t.retransmits)).sum()
}

/// A UDP stream's `end.streams[].udp` (`stream`) or a direction's `end.sum`: the client's
/// bytes, the receiver's jitter, loss and reordering, the sender's datagrams.
fn udp_entry(e: &End, h: &Half<'_>, socket: Option<u64>, stream: bool) -> Value {
    let (t, bps) = if h.client_sends {
        (&e.sent, e.sent_bps)
    } else {
        (&e.received, e.received_bps)
    };
    let mut m = span(socket, 0.0, t.duration_s, t.bytes);
    m.insert("bits_per_second".into(), json!(bps));
    udp_loss(e, &mut m, true);
    if stream {
        let reordered = e.udp.as_ref().and_then(|u| u.reordered);
        m.insert("out_of_order".into(), json!(reordered));
    }
    m.insert("sender".into(), h.client_sends.into());
    Value::Object(m)
}

/// A UDP direction's `sum_sent` or `sum_received`: that side's bytes and time, the test's
/// loss; jitter only on the receiver's (the sender measures none).
fn udp_side(h: &Half<'_>, sent: bool) -> Value {
    let e = h.end;
    let (t, bps) = if sent {
        (&e.sent, e.sent_bps)
    } else {
        (&e.received, e.received_bps)
    };
    let mut m = span(None, 0.0, t.duration_s, t.bytes);
    m.insert("bits_per_second".into(), json!(bps));
    udp_loss(e, &mut m, !sent);
    m.insert("sender".into(), h.client_sends.into());
    Value::Object(m)
}

/// UDP's `jitter_ms` (null where not the receiver's), `lost_packets`, `packets` (the
/// sender's datagrams) and `lost_percent`.
fn udp_loss(e: &End, m: &mut Map<String, Value>, receiver: bool) {
    let u = e.udp.as_ref();
    let jitter = u.and_then(|u| u.jitter_ms).filter(|_| receiver);
    let lost = u.and_then(|u| u.lost);
    m.insert("jitter_ms".into(), json!(jitter));
    m.insert("lost_packets".into(), json!(lost));
    m.insert("packets".into(), json!(e.sent.messages));
    m.insert(
        "lost_percent".into(),
        json!(u.and_then(|u| u.loss_ratio).map(|r| r * 100.0)),
    );
}

/// `cpu_utilization_percent`: each side's data threads (wirebench measures those, iperf3 its
/// whole process), user and system split as their CPU times are.
fn cpu(client: &Option<Resources>, server: &Option<Resources>) -> Value {
    let split = |r: &Option<Resources>| match r {
        Some(r) => {
            let busy = r.cpu_user_s + r.cpu_system_s;
            let part = |s: f64| {
                if busy > 0.0 {
                    r.cpu_percent * s / busy
                } else {
                    0.0
                }
            };
            (
                json!(r.cpu_percent),
                json!(part(r.cpu_user_s)),
                json!(part(r.cpu_system_s)),
            )
        }
        None => (Value::Null, Value::Null, Value::Null),
    };
    let (ht, hu, hs) = split(client);
    let (rt, ru, rs) = split(server);
    json!({
        "host_total": ht, "host_user": hu, "host_system": hs,
        "remote_total": rt, "remote_user": ru, "remote_system": rs,
    })
}

/// `sender_tcp_congestion`, `receiver_tcp_congestion`: the kernel's answer on each side of
/// the first direction, left out where unknown (as iperf3 leaves them out where it cannot
/// read them).
fn congestion(r: &Results, forward: &Half<'_>, m: &mut Map<String, Value>) {
    if r.test.protocol != Protocol::Tcp {
        return;
    }
    let of = |d: &Option<wirebench_proto::results::Datapath>| {
        d.as_ref().and_then(|d| d.tcp_congestion.clone())
    };
    let (client, server) = (of(&r.datapath.client), of(&r.datapath.server));
    let (sender, receiver) = if forward.client_sends {
        (client, server)
    } else {
        (server, client)
    };
    if let Some(s) = sender {
        m.insert("sender_tcp_congestion".into(), s.into());
    }
    if let Some(s) = receiver {
        m.insert("receiver_tcp_congestion".into(), s.into());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn http_dates_are_as_iperf3_writes_them() {
        assert_eq!(http_date(0), "Thu, 01 Jan 1970 00:00:00 GMT");
        assert_eq!(http_date(1_795_915_636), "Sun, 29 Nov 2026 01:27:16 GMT");
    }

    #[test]
    fn whole_numbers_have_no_fraction() {
        assert_eq!(num(2.0), json!(2));
        assert_eq!(num(0.5), json!(0.5));
    }

    #[test]
    fn percent_of_nothing_is_zero_and_of_unknown_null() {
        assert_eq!(percent(Some(0), Some(0)), json!(0));
        assert_eq!(percent(Some(1), Some(4)), json!(25.0));
        assert_eq!(percent(None, Some(4)), Value::Null);
    }
}
