//! iperf3's own client flags that wirebench passes to an iperf3 server (`run --iperf3`).

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

#[cfg(test)]
mod tests {
    use super::*;

    /// -M and --fq-rate are refused without --iperf3 (the caller asks only then).
    #[test]
    fn iperf3_only_flags_are_named_without_iperf3() {
        let none = Iperf3Args {
            set_mss: None,
            fq_rate: None,
        };
        assert_eq!(none.without_iperf3(), None);
        for a in [
            Iperf3Args {
                set_mss: Some(1400),
                ..none.clone()
            },
            Iperf3Args {
                fq_rate: Some(1),
                ..none.clone()
            },
        ] {
            let e = a.without_iperf3().unwrap_or_default();
            assert!(e.contains("--iperf3"), "{e}");
        }
    }

    /// --fq-rate is in bits/s; a packet rate is refused in words.
    #[test]
    fn fq_rate_takes_bits_per_second() {
        assert_eq!(parse_bits_per_second("100M"), Ok(100_000_000));
        assert!(parse_bits_per_second("1kpps").is_err_and(|e| e.contains("bits/s")));
    }
}
