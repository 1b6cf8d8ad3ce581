//! The server's output as `iperf3 -s` prints it in text, for `--get-server-output`: the
//! lines an iperf3 client shows under "Server output:" and puts in `server_output_text`,
//! where scripts read them. Rendered from the JSON document ([`super::output`]) once the
//! test is over, with iperf3's formats (iperf_locale.c) and units (unit_snprintf: bytes in
//! powers of 1024, bits/s in powers of 1000, 3 significant digits).

use std::fmt::Write;

use serde_json::Value;

const SEPARATOR: &str = "- - - - - - - - - - - - - - - - - - - - - - - - -\n";

/// `1.11 GByte`, `10.2 Mbit`: iperf3's unit_snprintf, automatic unit; the format adds the
/// `s` (`GBytes`, `Mbits/sec`).
fn unit(value: f64, bytes: bool) -> String {
    let (base, names) = if bytes {
        (1024.0, ["Byte", "KByte", "MByte", "GByte", "TByte"])
    } else {
        (1000.0, ["bit", "Kbit", "Mbit", "Gbit", "Tbit"])
    };
    let mut v = value.max(0.0);
    let mut i = 0;
    while v >= base && i + 1 < names.len() {
        v /= base;
        i += 1;
    }
    let digits = if v < 9.995 {
        2
    } else if v < 99.95 {
        1
    } else {
        0
    };
    format!("{v:4.digits$} {}", names[i])
}

/// C's `%.2g` for a percentage: two significant digits, no trailing zeros (`0`, `8.5`, `12`).
fn g2(x: f64) -> String {
    if x == 0.0 || !x.is_finite() {
        return "0".into();
    }
    let decimals = (1 - x.abs().log10().floor() as i32).max(0) as usize;
    let s = format!("{x:.decimals$}");
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

fn num(v: &Value, key: &str) -> f64 {
    v.get(key).and_then(Value::as_f64).unwrap_or(0.0)
}

fn int(v: &Value, key: &str) -> u64 {
    v.get(key).and_then(Value::as_u64).unwrap_or(0)
}

/// `[  5]   0.00-1.00   sec  1.11 GBytes  9.56 Gbits/sec`: an entry's common columns.
fn columns(id: &str, e: &Value) -> String {
    format!(
        "[{id}] {:6.2}-{:<6.2} sec  {}s  {}s/sec",
        num(e, "start"),
        num(e, "end"),
        unit(num(e, "bytes"), true),
        unit(num(e, "bits_per_second"), false)
    )
}

fn stream_id(e: &Value) -> String {
    format!("{:3}", int(e, "socket"))
}

/// One interval entry: a TCP sender's with its retransmissions and window, a UDP one with
/// its datagrams, a TCP receiver's alone.
fn interval_line(out: &mut String, id: &str, e: &Value, udp: bool) {
    let sender = e.get("sender").and_then(Value::as_bool).unwrap_or(false);
    let base = columns(id, e);
    let _ = if udp {
        writeln!(out, "{base}  {}  ", int(e, "packets"))
    } else if sender && e.get("retransmits").is_some() {
        let cwnd = e
            .get("snd_cwnd")
            .and_then(Value::as_f64)
            .map_or(String::new(), |c| format!("{}s", unit(c, true)));
        writeln!(out, "{base}  {:3}   {cwnd}       ", int(e, "retransmits"))
    } else {
        writeln!(out, "{base}                  ")
    };
}

/// The header of the interval lines: the first entry says what the server did.
fn interval_header(first: Option<&Value>, udp: bool) -> &'static str {
    let sender = first
        .and_then(|e| e.get("sender"))
        .and_then(Value::as_bool)
        .unwrap_or(false);
    match (udp, sender) {
        (true, _) => "[ ID] Interval           Transfer     Bitrate         Total Datagrams\n",
        (false, true) => "[ ID] Interval           Transfer     Bitrate         Retr  Cwnd\n",
        (false, false) => "[ ID] Interval           Transfer     Bitrate\n",
    }
}

/// The text of `doc` (the server's JSON output), `senders[k]` whether the server sent on
/// its `k`th stream.
pub(super) fn text(doc: &Value, senders: &[bool], udp: bool) -> String {
    let mut out = String::new();
    let start = &doc["start"];
    if let Some(c) = start.get("accepted_connection") {
        let host = c.get("host").and_then(Value::as_str).unwrap_or("?");
        let _ = writeln!(
            out,
            "Accepted connection from {host}, port {}",
            int(c, "port")
        );
    }
    for c in start["connected"].as_array().into_iter().flatten() {
        let _ = writeln!(
            out,
            "[{}] local {} port {} connected to {} port {}",
            stream_id(c),
            c.get("local_host").and_then(Value::as_str).unwrap_or("?"),
            int(c, "local_port"),
            c.get("remote_host").and_then(Value::as_str).unwrap_or("?"),
            int(c, "remote_port"),
        );
    }
    let intervals = doc["intervals"].as_array().map_or(&[][..], Vec::as_slice);
    let first = intervals.first().and_then(|i| i["streams"].get(0));
    out.push_str(interval_header(first, udp));
    for i in intervals {
        let streams = i["streams"].as_array().map_or(&[][..], Vec::as_slice);
        for e in streams {
            interval_line(&mut out, &stream_id(e), e, udp);
        }
        if streams.len() > 1 {
            for key in ["sum", "sum_bidir_reverse"] {
                if let Some(sum) = i.get(key) {
                    interval_line(&mut out, "SUM", sum, udp);
                }
            }
        }
        out.push_str(SEPARATOR);
    }
    end_lines(&mut out, &doc["end"], senders, udp);
    out
}

/// The summary: each stream's line from this side's view, and the sums.
fn end_lines(out: &mut String, end: &Value, senders: &[bool], udp: bool) {
    let streams = end["streams"].as_array().map_or(&[][..], Vec::as_slice);
    if udp {
        out.push_str(
            "[ ID] Interval           Transfer     Bitrate         Jitter    Lost/Total Datagrams\n",
        );
        for (k, s) in streams.iter().enumerate() {
            let e = &s["udp"];
            let role = if senders.get(k).copied().unwrap_or(false) {
                "sender"
            } else {
                "receiver"
            };
            let _ = writeln!(
                out,
                "{}  {:5.3} ms  {}/{} ({}%)  {role}",
                columns(&stream_id(e), e),
                num(e, "jitter_ms"),
                int(e, "lost_packets"),
                int(e, "packets"),
                g2(num(e, "lost_percent")),
            );
        }
        return;
    }
    let any_sender = senders.iter().any(|s| *s);
    out.push_str(if any_sender {
        "[ ID] Interval           Transfer     Bitrate         Retr\n"
    } else {
        "[ ID] Interval           Transfer     Bitrate\n"
    });
    for (k, s) in streams.iter().enumerate() {
        let role = if senders.get(k).copied().unwrap_or(false) {
            "sender"
        } else {
            "receiver"
        };
        let e = &s[role];
        if e.is_null() {
            continue;
        }
        let id = stream_id(e);
        let _ = if role == "sender" {
            writeln!(
                out,
                "{}  {:3}             {role}",
                columns(&id, e),
                int(e, "retransmits")
            )
        } else {
            writeln!(out, "{}                  {role}", columns(&id, e))
        };
    }
    if streams.len() > 1 {
        for (key, role) in [("sum_sent", "sender"), ("sum_received", "receiver")] {
            let ours = senders.iter().any(|s| (role == "sender") == *s);
            if let (true, Some(e)) = (ours, end.get(key)) {
                let _ = writeln!(out, "{}                  {role}", columns("SUM", e));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn units_are_iperf3s() {
        assert_eq!(unit(1.11 * 1024.0 * 1024.0 * 1024.0, true), "1.11 GByte");
        assert_eq!(unit(10.2e6, false), "10.2 Mbit");
        assert_eq!(unit(19.0e9, false), "19.0 Gbit");
        assert_eq!(unit(4.37e9, false), "4.37 Gbit");
        assert_eq!(unit(512.0, true), " 512 Byte");
        assert_eq!(
            [0.0, 8.5, 12.34, 0.123].map(g2),
            ["0", "8.5", "12", "0.12"].map(String::from)
        );
    }

    /// A receiving TCP server with two streams: iperf3's layout line for line.
    #[test]
    fn a_receiving_servers_text_is_laid_out_as_iperf3s() {
        let entry = |id: i64, bytes: f64| {
            json!({"socket": id, "start": 0.0, "end": 1.0, "seconds": 1.0, "bytes": bytes,
                   "bits_per_second": bytes * 8.0, "sender": false})
        };
        let doc = json!({
            "start": {"accepted_connection": {"host": "127.0.0.1", "port": 47878},
                      "connected": [{"socket": 5, "local_host": "127.0.0.1", "local_port": 5201,
                                     "remote_host": "127.0.0.1", "remote_port": 47882}]},
            "intervals": [{"streams": [entry(5, 1.2e9), entry(8, 1.1e9)], "sum": entry(0, 2.3e9)}],
            "end": {"streams": [{"receiver": entry(5, 1.2e9), "sender": null},
                                {"receiver": entry(8, 1.1e9), "sender": null}],
                    "sum_received": entry(0, 2.3e9), "sum_sent": entry(0, 2.3e9)},
        });
        let t = text(&doc, &[false, false], false);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines[0], "Accepted connection from 127.0.0.1, port 47878");
        assert_eq!(
            lines[1],
            "[  5] local 127.0.0.1 port 5201 connected to 127.0.0.1 port 47882"
        );
        assert_eq!(lines[2], "[ ID] Interval           Transfer     Bitrate");
        assert_eq!(
            lines[3],
            "[  5]   0.00-1.00   sec  1.12 GBytes  9.60 Gbits/sec                  "
        );
        assert!(lines[5].starts_with("[SUM]   0.00-1.00   sec  2.14 GBytes  18.4 Gbits/sec"));
        assert_eq!(lines[6], SEPARATOR.trim_end());
        assert!(lines[8].ends_with("receiver"), "{t}");
        assert!(
            lines[10].starts_with("[SUM]") && lines[10].ends_with("receiver"),
            "{t}"
        );
        assert_eq!(lines.len(), 11, "{t}");
    }
}
