//! iperf3's own client flags that wirebench passes to an iperf3 server (`run --iperf3`),
//! and `-k`, iperf3's amount in blocks.

use clap::Args;
use wirebench_proto::units::{parse_rate, Rate};

/// Flags of `run` that only an iperf3 server takes.
#[derive(Debug, Clone, Args)]
pub struct Iperf3Args {
    /// --iperf3, TCP: the data connections' maximum segment size (TCP_MAXSEG), bytes, on
    /// both sides, as iperf3's -M/--set-mss (88 to 9216).
    #[arg(
        short = 'M',
        long = "set-mss",
        value_name = "BYTES",
        help_heading = "iperf3"
    )]
    pub set_mss: Option<u32>,
    /// --iperf3: cap each data socket's sending rate with the kernel's fair-queue pacing
    /// (SO_MAX_PACING_RATE), on both sides, as iperf3's --fq-rate, in bits/s (e.g. 100M).
    #[arg(long, value_name = "RATE", help_heading = "iperf3",
          value_parser = parse_bits_per_second)]
    pub fq_rate: Option<u64>,
}

impl Iperf3Args {
    /// Why these flags cannot be used without `--iperf3`, if any is given. (Not clap's
    /// `requires`: it lets a requirement go when HOST, which --iperf3 conflicts with, is
    /// given.)
    pub fn without_iperf3(&self) -> Option<String> {
        (self.set_mss.is_some() || self.fq_rate.is_some()).then(|| {
            "-M/--set-mss and --fq-rate are for an iperf3 server (--iperf3 HOST): a wirebench server does not take them".into()
        })
    }
}

/// A rate in bits/s (`--fq-rate`): packets/s do not apply.
fn parse_bits_per_second(s: &str) -> Result<u64, String> {
    match parse_rate(s).map_err(|e| e.to_string())? {
        Rate::BitsPerSecond(b) => Ok(b),
        Rate::PacketsPerSecond(_) => Err("a rate in bits/s, e.g. 100M or 2.5G".into()),
    }
}

/// The amount to send: `-n` (`bytes`), or `-k N` (`blockcount`) messages of `size` bytes
/// (iperf3's blocks).
pub fn amount(bytes: Option<u64>, blockcount: Option<u64>, size: u64) -> Option<u64> {
    bytes.or(blockcount.map(|k| k.saturating_mul(size)))
}
