//! The human tables: of a results document, of a `--both-directions` pair, of an
//! experiment's summary; and the live interval lines printed while a test runs (built from
//! the same interval records that end up in the document).
//!
//! Protocols and mechanisms are spelled as in the JSON (`tcp`, `udp`; `stream`,
//! `stop-and-wait`, `rr`, `crr`): one spelling everywhere.

use std::io::{self, Write};

use wirebench_proto::results::{End, FileEnd, Percentiles, ProbeCounts, Results, UdpEnd};
use wirebench_proto::spec::{Direction, Mechanism, Protocol};
use wirebench_proto::units::{format_bytes, format_rate_bps};

use super::lines::{format_rate, format_us, RateUnits};
use super::summary;
use super::{BothDirections, Exporter};
use crate::experiment::summary::ExperimentSummary;

/// The human summary. For a results document: a row per direction (time, messages and bytes
/// each way, protocol, mechanism, both sides' rates, loss), then a line per detail the test
/// has. For a `--both-directions` pair and an experiment's summary, see their impls.
pub struct Table;

/// Renders rows as columns, right-aligned, separated by two spaces.
pub(crate) fn columns(rows: &[Vec<String>]) -> String {
    let n = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..n)
        .map(|i| {
            rows.iter()
                .filter_map(|r| r.get(i))
                .map(|c| c.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for row in rows {
        let line: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:>w$}"))
            .collect();
        out.push_str(line.join("  ").trim_end());
        out.push('\n');
    }
    out
}

/// What the table prints for a figure the side never reported (null in JSON).
const UNKNOWN: &str = "unknown";

/// A count, or "unknown".
fn count(v: Option<u64>) -> String {
    v.map_or_else(|| UNKNOWN.to_string(), |x| x.to_string())
}

/// A rate in `units`, or "unknown".
fn rate(v: Option<f64>, units: RateUnits) -> String {
    v.map_or_else(|| UNKNOWN.to_string(), |x| format_rate(x, units))
}

/// An amount of data, or "unknown".
fn amount(v: Option<u64>) -> String {
    v.map_or_else(|| UNKNOWN.to_string(), format_bytes)
}

/// Seconds to the ms, or "unknown".
fn seconds(v: Option<f64>) -> String {
    v.map_or_else(|| UNKNOWN.to_string(), |s| format!("{s:.3} s"))
}

/// The row of one direction's totals; with `-O`, of the part after the omitted start
/// (`end.after_omit`), as every figure the summary prints.
fn table_row(r: &Results, e: &wirebench_proto::results::End, units: RateUnits) -> Vec<String> {
    let ms =
        |s: Option<f64>| s.map_or_else(|| UNKNOWN.to_string(), |s| format!("{:.0}", s * 1000.0));
    let loss = |lost: Option<u64>, ratio: Option<f64>| match (lost, ratio) {
        (Some(lost), Some(ratio)) => format!("{lost} ({:.3}%)", ratio * 100.0),
        // The sender's count unknown: the gaps seen, of a total unknown.
        (Some(lost), None) => format!("{lost} (of {UNKNOWN})"),
        (None, _) => UNKNOWN.to_string(),
    };
    let (time, sent, received, sent_bps, received_bps, lost) = match &e.after_omit {
        Some(a) => (
            ms(a.sent_duration_s.or(a.received_duration_s)),
            (a.sent_messages, a.sent_bytes),
            (a.received_messages, a.received_bytes),
            a.sent_bps,
            a.received_bps,
            e.udp
                .as_ref()
                .map(|_| loss(a.lost.flatten(), a.loss_ratio.flatten())),
        ),
        None => (
            ms(Some(e.duration_s)),
            (e.sent.messages, e.sent.bytes),
            (e.received.messages, e.received.bytes),
            e.sent_bps,
            e.received_bps,
            e.udp.as_ref().map(|u| loss(u.lost, u.loss_ratio)),
        ),
    };
    vec![
        time,
        count(sent.0),
        count(sent.1),
        count(received.0),
        count(received.1),
        r.test.protocol.to_string(),
        r.test.mechanism.to_string(),
        rate(sent_bps, units),
        rate(received_bps, units),
        lost.unwrap_or_else(|| "0".into()),
    ]
}

/// Which stack carried each side's data connection, when one was a user-space stack.
fn stacks(r: &Results, out: &mut dyn Write) -> io::Result<()> {
    let side = |d: &Option<wirebench_proto::results::Datapath>| match d
        .as_ref()
        .and_then(|d| d.stack.as_ref())
    {
        Some(s) => format!(
            "{} {} on {} ({}, {}, MSS {}, buffers {} each way)",
            s.name,
            s.version,
            s.device,
            s.address,
            s.congestion_control,
            s.mss_bytes,
            format_bytes(s.send_buffer_bytes)
        ),
        None => "the kernel's".to_owned(),
    };
    let (c, s) = (&r.datapath.client, &r.datapath.server);
    if [c, s]
        .iter()
        .any(|d| d.as_ref().is_some_and(|d| d.stack.is_some()))
    {
        writeln!(out, "stack: client {}; server {}", side(c), side(s))?;
    }
    Ok(())
}

/// Writes what `table` writes with every control character escaped: names, errors and
/// descriptions come from files and peers, and a raw `ESC` would act on the terminal.
fn escaped(
    out: &mut dyn Write,
    table: impl FnOnce(&mut dyn Write) -> io::Result<()>,
) -> io::Result<()> {
    let mut text = Vec::new();
    table(&mut text)?;
    let text = String::from_utf8_lossy(&text);
    out.write_all(crate::text::printable_text(&text).as_bytes())
}

impl Exporter for Table {
    fn export(&self, r: &Results, out: &mut dyn Write) -> io::Result<()> {
        Human::default().export(r, out)
    }
}

/// The human summary with `run`'s options: the rate units (`-f`) and whether to show every
/// figure (`-V`). [`Table`] is it with the defaults: automatic units, not verbose.
#[derive(Debug, Clone, Copy, Default)]
pub struct Human {
    /// Units of every rate printed.
    pub units: RateUnits,
    /// Also the totals table, percentiles, pacing, cost and the data path.
    pub verbose: bool,
}

impl Exporter for Human {
    fn export(&self, r: &Results, out: &mut dyn Write) -> io::Result<()> {
        escaped(out, |out| results_table(r, *self, out))
    }
}

/// One result as the terminal shows it: iperf3's summary (a few lines within 80 columns:
/// each direction's rates, TCP's retransmits, UDP's loss and jitter), what the test checked
/// (a file, rrul's round trips), and with `-V` every other figure.
fn results_table(r: &Results, opts: Human, out: &mut dyn Write) -> io::Result<()> {
    let e = &r.end;
    if r.test.mechanism.is_rr() {
        summary::rr_line(r, opts.verbose, out)?;
    } else {
        summary::write(r, opts.units, out)?;
    }
    summary::omit_note(r, out)?;
    if e.live_intervals_dropped > 0 {
        writeln!(
            out,
            "({} live interval lines were not shown: this client read the control connection too slowly; the figures above count every interval)",
            e.live_intervals_dropped
        )?;
    }
    if let Some(u) = &e.udp {
        udp_notices(r, u, out)?;
    }
    if r.test.mechanism == Mechanism::StopAndWait && r.test.protocol == Protocol::Udp {
        writeln!(out, "retransmits: {}", count(e.retransmits))?;
    }
    if let Some(f) = &e.file {
        file_line(f, out)?;
    }
    if let Some(rrul) = &e.rrul {
        rrul_lines(rrul, out)?;
    }
    if opts.verbose {
        verbose_lines(r, opts.units, out)?;
    }
    if let Some(err) = &r.error {
        writeln!(out, "incomplete: {err}")?;
    }
    Ok(())
}

/// `-V`: the totals table and every figure beyond the summary.
fn verbose_lines(r: &Results, units: RateUnits, out: &mut dyn Write) -> io::Result<()> {
    let e = &r.end;
    totals(r, units, out)?;
    stacks(r, out)?;
    if let Some(u) = &e.udp {
        udp_lines(r, u, units, out)?;
    }
    if r.test.mechanism == Mechanism::Stream || e.file.is_some() {
        writeln!(
            out,
            "first to last byte: sent in {}, {}; received in {}, {}",
            seconds(e.sent.transfer_s),
            rate(e.sent.transfer_bps, units),
            seconds(e.received.transfer_s),
            rate(e.received.transfer_bps, units)
        )?;
    }
    stream_lines(r, units, out)?;
    datapath_lines(r, out)?;
    if let Some(sp) = &e.send_rate_spread {
        if r.test.rate_bps > 0 || r.test.rate_pps > 0 {
            let f = |v: f64| format_rate(v, units);
            writeln!(
                out,
                "pacing: send rate per millisecond p50 {}, p99 {}, min {}, max {}",
                f(sp.p50),
                f(sp.p99),
                f(sp.min),
                f(sp.max)
            )?;
        }
    }
    cost_line(e, out)
}

/// The table of totals (with `-O`, after the omitted start), a row per direction, and the
/// line that says what was measured.
fn totals(r: &Results, units: RateUnits, out: &mut dyn Write) -> io::Result<()> {
    let e = &r.end;
    let mut rows = vec![
        [
            "Time (ms)",
            "Sent messages",
            "Sent bytes",
            "Read messages",
            "Read bytes",
            "Protocol",
            "Mechanism",
            "Send rate",
            "Receive rate",
            "Lost",
        ]
        .map(String::from)
        .to_vec(),
        table_row(r, e, units),
    ];
    if let Some(rev) = &r.reverse {
        rows.push(table_row(r, &rev.end, units));
    }
    out.write_all(columns(&rows).as_bytes())?;
    if let Some(rev) = &r.reverse {
        let lost = rev
            .end
            .udp
            .as_ref()
            .map(|u| format!(", {} lost", count(u.lost)))
            .unwrap_or_default();
        writeln!(
            out,
            "both directions at once: the first row is client → server, the second server → client (received {} in {}{lost})",
            amount(rev.end.received.bytes),
            seconds(rev.end.received.duration_s)
        )?;
    }
    let dir = match r.test.direction {
        Direction::Forward | Direction::Bidir => "client → server",
        Direction::Reverse => "server → client",
    };
    writeln!(
        out,
        "{dir} {}, {} messages of {} bytes; received {} in {}",
        r.server,
        r.test.protocol,
        r.test.size,
        amount(e.received.bytes),
        seconds(e.received.duration_s),
    )
}

/// `run --file`: the file's digests on both sides and whether the copy is the file.
fn file_line(f: &FileEnd, out: &mut dyn Write) -> io::Result<()> {
    let verdict = if f.identical {
        "identical".to_string()
    } else if f.missing_bytes > 0 {
        format!(
            "incomplete: {} bytes missing in {} ranges{}",
            f.missing_bytes,
            f.missing.len() as u64 + f.missing_ranges_more,
            f.missing
                .first()
                .map(|(a, b)| format!(", the first {a}..{b}"))
                .unwrap_or_default()
        )
    } else if whole_but_not_hashed(f) {
        // A UDP receiver hashes the copy it saved, read back (datagrams may come in
        // any order): without one there is nothing to compare, which is not a
        // difference.
        "every byte arrived; not compared: the receiver saved no copy to hash \
         (serve --save-dir, or run -R --save)"
            .to_string()
    } else {
        "DIFFERENT".to_string()
    };
    writeln!(
        out,
        "file {}: {} bytes; {} {} sent, {} received: {verdict}{}",
        f.name,
        f.bytes,
        f.algorithm,
        f.sent_digest.as_deref().unwrap_or("?"),
        f.received_digest.as_deref().unwrap_or("?"),
        f.saved_as
            .as_ref()
            .map(|p| format!("; saved as {p}"))
            .unwrap_or_default()
    )
}

/// A line per stream of a parallel test.
fn stream_lines(r: &Results, units: RateUnits, out: &mut dyn Write) -> io::Result<()> {
    for (i, st) in r.streams.iter().enumerate() {
        let lost = st
            .udp
            .as_ref()
            .map(|u| format!(", {} lost", count(u.lost)))
            .unwrap_or_default();
        writeln!(
            out,
            "  stream {i}: sent {} in {} messages ({}), received {} ({}){lost}",
            amount(st.sent.bytes),
            count(st.sent.messages),
            rate(st.sent_bps, units),
            amount(st.received.bytes),
            rate(st.received_bps, units),
        )?;
    }
    Ok(())
}

/// What the kernel said of the data path: the TCP sender's state, and each side's
/// zerocopy sends.
fn datapath_lines(r: &Results, out: &mut dyn Write) -> io::Result<()> {
    if let Some(t) = &r.end.tcp {
        let cc = r
            .datapath
            .client
            .as_ref()
            .and_then(|d| d.tcp_congestion.clone())
            .unwrap_or_else(|| "?".into());
        writeln!(
            out,
            "tcp (sender's TCP_INFO): {} retransmits, rtt {:.3} ms, cwnd {} segments of {} bytes; congestion control {cc}",
            t.retransmits,
            t.rtt_us as f64 / 1e3,
            t.snd_cwnd_segments,
            t.snd_mss_bytes
        )?;
    }
    for (side, dp) in [
        ("client", &r.datapath.client),
        ("server", &r.datapath.server),
    ] {
        if let Some(z) = dp.as_ref().and_then(|d| d.zerocopy) {
            writeln!(
                out,
                "zerocopy ({side} sends): {}",
                if !z.enabled {
                    "refused by the kernel, plain sends made".to_string()
                } else {
                    format!(
                        "{} MSG_ZEROCOPY sends, {} completed, {} of them copied by the kernel after all",
                        z.sends, z.completed, z.copied
                    )
                }
            )?;
        }
    }
    Ok(())
}

/// What the test cost each side that measured it: CPU and memory.
fn cost_line(e: &End, out: &mut dyn Write) -> io::Result<()> {
    let side = |name: &str, res: Option<&wirebench_proto::results::Resources>| {
        res.map(|x| {
            format!(
                "{name} {:.0}% of a core ({:.2} s user, {:.2} s system), RSS {:.1} → {:.1} MiB (peak {:.1})",
                x.cpu_percent,
                x.cpu_user_s,
                x.cpu_system_s,
                x.rss_before_kib as f64 / 1024.0,
                x.rss_after_kib as f64 / 1024.0,
                x.max_rss_kib as f64 / 1024.0
            )
        })
    };
    let cost: Vec<String> = [
        side("client", e.resources.client.as_ref()),
        side("server", e.resources.server.as_ref()),
    ]
    .into_iter()
    .flatten()
    .collect();
    if !cost.is_empty() {
        writeln!(out, "cost: {}", cost.join("; "))?;
    }
    Ok(())
}

/// `run --mode rrul`: the UDP probes' idle and loaded round trips (the headline, as irtt's),
/// the TCP probe's apart, how many of each phase's probes were answered, the ratio, and the
/// load's rates and retransmits. Each line fits 80 columns.
fn rrul_lines(rrul: &wirebench_proto::results::Rrul, out: &mut dyn Write) -> io::Result<()> {
    let figures = |p: &Option<Percentiles>, n: Option<ProbeCounts>| {
        let answered = n.map_or(String::new(), |n| {
            format!(" ({} of {} answered)", n.answered, n.sent)
        });
        match p {
            Some(p) => format!(
                "p50 {}, p90 {}, p99 {}{answered}",
                format_us(p.p50),
                format_us(p.p90),
                format_us(p.p99),
            ),
            None => format!("no probe answered{answered}"),
        }
    };
    let counts = rrul.probe_counts;
    let udp = counts.map(|c| c.udp);
    let tcp = counts.map(|c| c.tcp);
    let rows = [
        (
            "UDP idle  ",
            &rrul.idle_latency_us,
            udp.map(|c| c.idle_before),
        ),
        ("UDP loaded", &rrul.loaded_latency_us, udp.map(|c| c.loaded)),
        (
            "TCP idle  ",
            &rrul.tcp_idle_latency_us,
            tcp.map(|c| c.idle_before),
        ),
        (
            "TCP loaded",
            &rrul.tcp_loaded_latency_us,
            tcp.map(|c| c.loaded),
        ),
    ];
    for (name, p, n) in rows {
        // A document from before the TCP probe was reported apart has no TCP rows.
        if name.starts_with("TCP") && p.is_none() && n.is_none() {
            continue;
        }
        writeln!(out, "rrul: {name} {}", figures(p, n))?;
    }
    if let Some(x) = rrul.latency_ratio_p50 {
        writeln!(
            out,
            "rrul: the load multiplied the UDP probes' median round trip by {x:.1}"
        )?;
    }
    let retransmits = rrul
        .retransmits
        .map_or(String::new(), |r| format!(", {r} retransmits"));
    writeln!(
        out,
        "rrul: upload {}, download {} ({} streams{retransmits})",
        rrul.upload_bps.map_or("unknown".into(), format_rate_bps),
        rrul.download_bps.map_or("unknown".into(), format_rate_bps),
        rrul.streams.len(),
    )
}

/// `p50 a, p90 b, p99 c, p99.9 d, max e`, each in the unit that suits it (`24.3 µs`,
/// `19.9 ms`); `to_us`: what one unit of the distribution is in µs.
fn percentiles(p: &Percentiles, to_us: f64) -> String {
    let t = |v: f64| format_us(v * to_us);
    format!(
        "p50 {}, p90 {}, p99 {}, p99.9 {}, max {}",
        t(p.p50),
        t(p.p90),
        t(p.p99),
        t(p.p999),
        t(p.max)
    )
}

/// What a UDP summary must say beside its figures: datagrams too short to be counted as
/// others are, and datagrams that were not the test's.
fn udp_notices(r: &Results, u: &UdpEnd, out: &mut dyn Write) -> io::Result<()> {
    if !u.sequenced {
        writeln!(
            out,
            "udp: {}-byte datagrams carry no header: lost = sent - received, no jitter",
            r.test.size
        )?;
    }
    if let Some(n) = u.foreign.filter(|&n| n > 0) {
        writeln!(
            out,
            "udp: {n} datagrams not of this test reached its socket: dropped, not counted"
        )?;
    }
    if let Some(n) = u.checksum_errors.filter(|&n| n > 0) {
        writeln!(
            out,
            "udp: the receiving host's kernel dropped {n} UDP datagrams with a bad checksum \
             during the test (corrupted on the way; counted host-wide, so any UDP traffic's)"
        )?;
    }
    Ok(())
}

/// `-V`, UDP: duplicates and reordering, then delay, loss runs and UDPmon's figures.
fn udp_lines(r: &Results, u: &UdpEnd, units: RateUnits, out: &mut dyn Write) -> io::Result<()> {
    if u.sequenced {
        writeln!(
            out,
            "udp: {} lost, {} duplicates, {} reordered, jitter {} (the whole test)",
            count(u.lost),
            count(u.duplicates),
            count(u.reordered),
            u.jitter_ms
                .map_or_else(|| UNKNOWN.to_string(), |j| format!("{j:.3} ms"))
        )?;
        if r.test.mechanism == Mechanism::Stream {
            udp_details(u, r.test.size, units, out)?;
        }
    }
    Ok(())
}

/// Delay, loss runs and UDPmon's figures, a line each.
fn udp_details(u: &UdpEnd, size: u64, units: RateUnits, out: &mut dyn Write) -> io::Result<()> {
    if let Some(d) = &u.delay_ms {
        writeln!(out, "one-way delay (one clock): {}", percentiles(d, 1e3))?;
    } else if let Some(d) = &u.delay_variation_ms {
        writeln!(
            out,
            "delay variation (clocks not shared: above the smallest delay): {}",
            percentiles(d, 1e3)
        )?;
    }
    if let Some(g) = &u.interarrival_us {
        writeln!(out, "interarrival: {}", percentiles(&g.percentiles, 1.0))?;
    }
    if let Some(lr) = u.loss_runs.as_ref().filter(|lr| lr.runs > 0) {
        let runs: Vec<String> = lr
            .buckets
            .iter()
            .map(|b| format!("{}: {}", b.label, b.count))
            .collect();
        writeln!(out, "loss runs (length: count): {}", runs.join(", "))?;
    }
    if u.last_in_order_seq.is_none() && u.lost.unwrap_or(0) == 0 {
        // Several streams: UDPmon's figures are per sequence, in `streams[]`.
        return Ok(());
    }
    let last = u
        .last_in_order_seq
        .map_or_else(|| "none".to_string(), |s| s.to_string());
    let bw = u
        .bandwidth_without_loss_bps
        .map_or_else(|| "n/a".to_string(), |b| format_rate(b, units));
    writeln!(
        out,
        "udpmon: last in-order sequence number {last}, bandwidth without loss {bw} ({size}-byte datagrams)"
    )
}

impl Exporter<BothDirections> for Table {
    /// The table of a send test and a receive test: transfer size, send time and rate (this
    /// side sending), receive time and rate (this side receiving), each timed from the first
    /// byte to the last on the side that measures it.
    fn export(&self, doc: &BothDirections, out: &mut dyn Write) -> io::Result<()> {
        Human::default().export(doc, out)
    }
}

impl Exporter<BothDirections> for Human {
    fn export(&self, doc: &BothDirections, out: &mut dyn Write) -> io::Result<()> {
        escaped(out, |out| both_table(doc, self.units, out))
    }
}

fn both_table(doc: &BothDirections, units: RateUnits, out: &mut dyn Write) -> io::Result<()> {
    let (send, receive) = (&doc.send, &doc.receive);
    let e = &send.end;
    let r = &receive.end;
    let size = |x: &wirebench_proto::results::End| {
        count(x.file.as_ref().map_or(x.sent.bytes, |f| Some(f.bytes)))
    };
    let secs = |v: Option<f64>| v.map_or_else(|| UNKNOWN.to_string(), |s| format!("{s:.3}"));
    let rows = vec![
        [
            "Xfer size",
            "Send time (s)",
            "Send rate",
            "Recv size",
            "Recv time (s)",
            "Recv rate",
            "Protocol",
            "Mechanism",
        ]
        .map(String::from)
        .to_vec(),
        vec![
            size(e),
            secs(e.sent.transfer_s),
            rate(e.sent.transfer_bps, units),
            size(r),
            secs(r.received.transfer_s),
            rate(r.received.transfer_bps, units),
            send.test.protocol.to_string(),
            send.test.mechanism.to_string(),
        ],
    ];
    out.write_all(columns(&rows).as_bytes())?;
    for (what, res) in [("send", send), ("receive", receive)] {
        if let Some(f) = &res.end.file {
            writeln!(
                out,
                "{what}: file {} {}",
                f.name,
                if f.identical {
                    "arrived identical"
                } else if whole_but_not_hashed(f) {
                    "arrived whole (not compared: no copy was saved to hash)"
                } else {
                    "did NOT arrive identical"
                }
            )?;
        }
        if let Some(err) = &res.error {
            writeln!(out, "{what}: incomplete: {err}")?;
        }
    }
    Ok(())
}

impl Exporter<ExperimentSummary> for Table {
    /// A line per point (mean received rate with its 95% CI, the data delivered), the
    /// transfer table when the amount varies, and the knee of each rate series.
    fn export(&self, s: &ExperimentSummary, out: &mut dyn Write) -> io::Result<()> {
        escaped(out, |out| summary_table(s, out))
    }
}

fn summary_table(s: &ExperimentSummary, out: &mut dyn Write) -> io::Result<()> {
    for p in &s.points {
        let params: Vec<String> = p.point.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let rate = p.figures.get("received_bps");
        let frac = p.figures.get("delivered_fraction");
        writeln!(
            out,
            "{:<40} {} trials  received {} ± {} (95% CI)  delivered {}{}",
            params.join(" "),
            p.trials,
            rate.map_or("-".into(), |x| format_rate_bps(x.mean)),
            rate.map_or("-".into(), |x| format_rate_bps(x.ci95)),
            // No trial completed: nothing to say, rather than "NaN%".
            frac.map_or("-".into(), |x| format!("{:.2}%", x.mean * 100.0)),
            p.failed_words()
                .map_or(String::new(), |w| format!("  ({w})"))
        )?;
    }
    if let Some(t) = transfer_table(s) {
        writeln!(out, "{t}")?;
    }
    for k in &s.knees {
        let series: Vec<String> = k.series.iter().map(|(a, b)| format!("{a}={b}")).collect();
        writeln!(
            out,
            "knee {}: at 99% delivered, {}; at 95%, {}",
            series.join(" "),
            k.describe(0.99),
            k.describe(0.95),
        )?;
    }
    Ok(())
}

/// The transfer table of an experiment that varies the amount, a row per point (means over
/// the trials): time (ms), sent messages and bytes, read messages and bytes, protocol,
/// mechanism. `None` when the amount does not vary.
pub fn transfer_table(s: &ExperimentSummary) -> Option<String> {
    if !s.points.iter().any(|p| p.point.contains_key("bytes")) {
        return None;
    }
    let mut rows = vec![[
        "Time (ms)",
        "Sent messages",
        "Sent bytes",
        "Read messages",
        "Read bytes",
        "Protocol",
        "Mechanism",
    ]
    .map(String::from)
    .to_vec()];
    for p in &s.points {
        let m = |k: &str| p.figures.get(k).map_or(0.0, |x| x.mean);
        rows.push(vec![
            format!("{:.0}", m("duration_s") * 1000.0),
            format!("{:.0}", m("sent_messages")),
            format!("{:.0}", m("sent_bytes")),
            format!("{:.0}", m("received_messages")),
            format!("{:.0}", m("received_bytes")),
            p.point
                .get("proto")
                .cloned()
                .unwrap_or_else(|| Protocol::Tcp.to_string()),
            p.point
                .get("mode")
                .cloned()
                .unwrap_or_else(|| Mechanism::Stream.to_string()),
        ]);
    }
    Some(columns(&rows))
}

/// A UDP file transfer that lost nothing but was not compared: a UDP receiver hashes the
/// copy it saved, read back (datagrams may come in any order), and none was saved. That is
/// no difference, and is not shown as one.
fn whole_but_not_hashed(f: &wirebench_proto::results::FileEnd) -> bool {
    f.received_digest.is_none() && f.received_bytes == f.bytes && f.missing_bytes == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn verbose() -> Human {
        Human {
            verbose: true,
            ..Human::default()
        }
    }

    #[test]
    fn the_summary_is_short_and_the_rest_is_behind_verbose() {
        let r = crate::export::csv::tests::sample();
        let text = |h: Human| {
            let mut out = Vec::new();
            h.export(&r, &mut out).expect("write");
            String::from_utf8(out).expect("utf-8")
        };
        let short = text(Human::default());
        assert!(short.lines().count() <= 5, "{short}");
        assert!(short.lines().all(|l| l.chars().count() <= 80), "{short}");
        assert!(!short.contains("Time (ms)"), "{short}");
        let long = text(verbose());
        assert!(
            long.starts_with(&short[..short.find('\n').unwrap_or(0)]),
            "{long}"
        );
        assert!(long.contains("Time (ms)"), "{long}");
        // -f: the units of every rate, the summary's and the totals'.
        let m = text(Human {
            units: RateUnits::Bits('k'),
            verbose: true,
        });
        assert!(!m.contains("Mbit/s") && m.contains("kbit/s"), "{m}");
    }

    #[test]
    fn columns_align_right() {
        let rows = vec![
            vec!["a".to_string(), "bbb".to_string()],
            vec!["ccc".to_string(), "d".to_string()],
        ];
        assert_eq!(columns(&rows), "  a  bbb\nccc    d\n");
    }

    #[test]
    fn a_user_space_stack_is_named_for_its_side_and_the_kernels_is_said_only_beside_one() {
        let mut r = crate::export::csv::tests::sample();
        let text = |r: &Results| {
            let mut out = Vec::new();
            verbose().export(r, &mut out).expect("write");
            String::from_utf8(out).expect("utf-8")
        };
        assert!(!text(&r).contains("stack:"));
        r.datapath.server = Some(wirebench_proto::results::Datapath {
            stack: Some(wirebench_proto::results::UserStack {
                name: "smoltcp".into(),
                version: "0.12.0".into(),
                device: "wbsmol0".into(),
                address: "10.77.0.102/24".into(),
                congestion_control: "cubic".into(),
                mss_bytes: 1460,
                send_buffer_bytes: 65536,
                ..Default::default()
            }),
            ..Default::default()
        });
        let t = text(&r);
        let line = t.lines().find(|l| l.starts_with("stack:")).expect("{t}");
        assert_eq!(
            line,
            "stack: client the kernel's; server smoltcp 0.12.0 on wbsmol0 (10.77.0.102/24, cubic, MSS 1460, buffers 65.54 KB each way)"
        );
    }

    #[test]
    fn a_peers_control_characters_are_shown_escaped_not_obeyed() {
        // A server's words (its stack's name, an error) reach the terminal: a raw ESC in
        // them would clear it.
        let mut r = crate::export::csv::tests::sample();
        r.error = Some("refused\u{1b}[2J".into());
        let mut out = Vec::new();
        Table.export(&r, &mut out).expect("write");
        let text = String::from_utf8(out).expect("utf-8");
        assert!(!text.contains('\u{1b}'), "{text}");
        assert!(text.contains("refused\\u{1b}[2J"), "{text}");
        assert!(text.contains('\n'), "line breaks stay");
    }

    #[test]
    fn foreign_datagrams_are_mentioned_only_when_some_came() {
        let mut r = crate::export::csv::tests::sample();
        let text = |r: &Results| {
            let mut out = Vec::new();
            Table.export(r, &mut out).expect("write");
            String::from_utf8(out).expect("utf-8")
        };
        assert!(!text(&r).contains("not the test's"));
        if let Some(u) = r.end.udp.as_mut() {
            u.foreign = Some(3);
        }
        let t = text(&r);
        assert!(
            t.contains("udp: 3 datagrams not of this test reached its socket: dropped"),
            "{t}"
        );
    }

    #[test]
    fn checksum_errors_are_mentioned_only_when_some_came() {
        let mut r = crate::export::csv::tests::sample();
        let text = |r: &Results| {
            let mut out = Vec::new();
            Table.export(r, &mut out).expect("write");
            String::from_utf8(out).expect("utf-8")
        };
        for none in [None, Some(0)] {
            if let Some(u) = r.end.udp.as_mut() {
                u.checksum_errors = none;
            }
            assert!(!text(&r).contains("bad checksum"), "{none:?}");
        }
        if let Some(u) = r.end.udp.as_mut() {
            u.checksum_errors = Some(12);
        }
        let t = text(&r);
        assert!(
            t.contains(
                "udp: the receiving host's kernel dropped 12 UDP datagrams with a bad checksum"
            ),
            "{t}"
        );
    }

    #[test]
    fn the_table_spells_mechanisms_as_the_json_does() {
        let r = crate::export::csv::tests::sample();
        let mut out = Vec::new();
        verbose().export(&r, &mut out).expect("write");
        let text = String::from_utf8(out).expect("utf-8");
        let row = text
            .lines()
            .skip_while(|l| !l.starts_with("Time (ms)"))
            .nth(1)
            .expect("a row");
        assert!(row.contains("  udp  stop-and-wait  "), "{row}");
        let both = BothDirections {
            send: r.clone(),
            receive: r,
        };
        let mut out = Vec::new();
        Table.export(&both, &mut out).expect("write");
        let text = String::from_utf8(out).expect("utf-8");
        assert!(text.lines().next().is_some_and(|h| h.contains("Xfer size")));
        assert!(text.contains("udp  stop-and-wait"), "{text}");
    }
}
