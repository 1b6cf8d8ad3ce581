//! What `run`'s flags ask for: the output format, the transport, and the validated test.

use std::time::Duration;

use wirebench_proto::spec::{Direction, Mechanism, Protocol, TestSpec};
use wirebench_proto::units::Rate;
use wirebench_report::export::Format;

use super::{FormatArg, ModeArg, RateUnits, RunArgs, DEFAULT_QUIC_DATAGRAM, DEFAULT_UDP_RATE_BPS};

fn ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl RunArgs {
    /// The format the results are printed in: `--format`, `--json`, else the table.
    pub fn output_format(&self) -> Format {
        match (self.json, self.format) {
            (true, _) => Format::Json,
            (false, Some(FormatArg::Document(f))) => f,
            (false, _) => Format::Table,
        }
    }

    /// The units of rates in live lines and the summary (`-f k|m|g|K|M|G|a`).
    pub fn rate_units(&self) -> RateUnits {
        match self.format {
            Some(FormatArg::Units(u)) => u,
            _ => RateUnits::Auto,
        }
    }

    /// The transport these flags ask for.
    fn protocol(&self) -> Protocol {
        match (self.udp, self.quic || self.quic_perf.is_some()) {
            (true, _) => Protocol::Udp,
            (_, true) => Protocol::Quic,
            _ => Protocol::Tcp,
        }
    }

    /// The mechanism `--mode` asks for; rrul is three tests, which only a wirebench
    /// server runs.
    fn mechanism(&self) -> Result<Mechanism, String> {
        Ok(match self.mode {
            ModeArg::Stream => Mechanism::Stream,
            ModeArg::StopAndWait => Mechanism::StopAndWait,
            ModeArg::Rr => Mechanism::Rr,
            ModeArg::Crr => Mechanism::Crr,
            // `run` and `sweep` plan rrul as three tests (cmd/rrul.rs); only an iperf3
            // server, which runs one test at a time, gets here.
            ModeArg::Rrul if self.quic_perf.is_some() => {
                return Err(
                    "--mode rrul runs three wirebench tests at once: a QUIC perf \
                                server runs none of them, leave out --quic-perf"
                        .into(),
                )
            }
            ModeArg::Rrul => {
                return Err("--mode rrul runs three wirebench tests at once: an iperf3 \
                                server runs one, leave out --iperf3"
                    .into())
            }
        })
    }

    /// The validated test these flags describe.
    pub fn spec(&self) -> Result<TestSpec, String> {
        let protocol = self.protocol();
        let size = self.size.unwrap_or(match (protocol, self.mode) {
            // Request/response measures latency: small messages, as netperf's and sockperf's.
            (_, ModeArg::Rr | ModeArg::Crr) => 64,
            // A QUIC datagram fits one packet of the smallest path QUIC allows.
            (Protocol::Quic, _) if self.datagrams => DEFAULT_QUIC_DATAGRAM,
            (Protocol::Tcp | Protocol::Quic, _) => 128 * 1024,
            (Protocol::Udp, _) => 1472,
        });
        let (rate_bps, rate_pps) = match self.rate {
            // `-b 0`: unlimited, as iperf3's.
            Some(Rate::BitsPerSecond(b)) => ((b > 0).then_some(b), None),
            Some(Rate::PacketsPerSecond(0)) => {
                return Err("--rate 0pps is not a rate: use -b 0 for unlimited".into())
            }
            Some(Rate::PacketsPerSecond(p)) => (None, Some(p)),
            None if protocol == Protocol::Udp => (Some(DEFAULT_UDP_RATE_BPS), None),
            None => (None, None),
        };
        let bytes = match (self.bytes, self.blockcount) {
            (None, Some(blocks)) => Some(blocks.checked_mul(size).ok_or_else(|| {
                format!("-k {blocks} messages of {size} bytes is too many bytes: give fewer")
            })?),
            (bytes, _) => bytes,
        };
        let duration = match (bytes, self.time) {
            (None, None) => Some(Duration::from_secs(10)),
            (_, t) => t,
        };
        // As iperf3's -O: the omitted seconds come on top of -t, which is what is measured.
        let duration = duration.map(|d| d + self.omit.unwrap_or_default());
        let spec = TestSpec {
            protocol,
            mechanism: self.mechanism()?,
            direction: if self.bidir {
                Direction::Bidir
            } else if self.reverse {
                Direction::Reverse
            } else {
                Direction::Forward
            },
            size,
            bytes,
            duration_ns: duration.map(ns),
            rate_bps,
            rate_pps,
            gap_ns: self.gap.map_or(0, ns),
            streams: self.parallel.saturating_mul(self.quic_streams.unwrap_or(1)),
            interval_ns: ns(self
                .interval
                .filter(|d| !d.is_zero())
                .unwrap_or(Duration::from_secs(1))),
            drain_ns: ns(self.drain),
            ack_timeout_ns: ns(self.ack_timeout),
            packet_log: self.packet_log.is_some(),
            no_offload: self.no_offload,
            response_size: self.response_size.filter(|&r| r > 0),
            congestion: self.cc.clone(),
            zerocopy: self.zerocopy,
            file: None,
            file_back: false,
            socket_buffer_bytes: self.window,
            omit_ns: self.omit.map_or(0, ns),
            busy_poll_ns: self.busy_poll.map(ns).filter(|&n| n > 0),
            open_loop_interval_ns: None,
            live_streams: false,
            exclusive: self.exclusive,
            quic_streams: self.quic_streams,
            quic_datagrams: self.datagrams,
            quic_zero_rtt: self.quic_zero_rtt,
            quic_mtu: self.quic_mtu,
        };
        let mut spec = spec;
        if let Some(path) = &self.file {
            if self.reverse {
                spec.file = Some(path.to_string_lossy().into_owned());
                spec.bytes = None;
                spec.duration_ns = None;
            } else {
                let meta = std::fs::metadata(path)
                    .map_err(|e| format!("--file {}: {e}", path.display()))?;
                if !meta.is_file() {
                    return Err(format!("--file {}: not a regular file", path.display()));
                }
                spec.file = path.file_name().map(|n| n.to_string_lossy().into_owned());
                spec.bytes = Some(spec.bytes_for_file(meta.len()));
                spec.duration_ns = None;
                // The server says now, before the file goes, whether it can send it back.
                spec.file_back = self.both_directions;
            }
        } else if self.save.is_some() {
            return Err("--save applies to -R --file".into());
        }
        if self.save.is_some() && !self.reverse {
            return Err(
                "--save applies to -R --file: the server saves a forward file (--save-dir)".into(),
            );
        }
        if self.response_size.is_some() && !spec.mechanism.is_rr() {
            return Err("--response-size applies to --mode rr and crr only".into());
        }
        if self.probe_interval.is_some() {
            return Err("--probe-interval applies to --mode rrul only".into());
        }
        spec.validate().map_err(|e| e.to_string())?;
        Ok(spec)
    }
}
