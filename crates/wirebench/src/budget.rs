//! `serve`'s flags for what tests may cost the server beyond their bytes (`--max-memory`,
//! `--max-pps`, `--save-quota`), flattened into `ServeArgs`, and the budget they make.

use clap::Args;
use wirebench_engine::{SaveDir, ServerBudget, DEFAULT_SAVE_QUOTA};
use wirebench_proto::units::{parse_rate, parse_size, Rate};

/// The bits of the smallest packet `--max-rate` implies a packet rate for: a 64-byte
/// Ethernet frame, the least any packet costs the link.
const MIN_PACKET_BITS: u64 = 64 * 8;

/// `serve`'s limits on what tests cost it beyond their bytes.
#[derive(Debug, Args)]
pub struct BudgetArgs {
    /// Most server memory all running tests may hold together (e.g. 1GiB; 0: no limit). Each
    /// test's share is estimated from what it asks (streams, message and response sizes,
    /// socket buffers, packet log) and held while it runs; a test that would go past it is
    /// refused.
    #[arg(long, value_name = "SIZE", value_parser = parse_size, default_value = "512MiB")]
    pub max_memory: u64,
    /// Most server memory one client address (IPv6: its /64) may hold with its running
    /// tests, estimated as for --max-memory (e.g. 64MiB; 0: no share of its own) [default:
    /// half of --max-memory, with two test slots or more]: one address cannot take the
    /// whole budget.
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub max_memory_per_client: Option<u64>,
    /// Highest packet rate accepted, packets/s, over all of a test's streams and both ways
    /// (datagrams; each request and response of rr), e.g. 100k; tests whose rate and message
    /// size imply more are refused, and a test that moves more is ended. Default: none, or
    /// with --max-rate, --max-rate / 512 bits (every packet counted as at least 64 bytes,
    /// the smallest Ethernet frame). 0: none.
    #[arg(long, value_name = "PPS", value_parser = parse_rate)]
    pub max_pps: Option<Rate>,
    /// Most bytes --save-dir may hold in all (e.g. 50G): a transfer that would take it past
    /// is refused before a byte is written [default: 10G].
    #[arg(long, value_name = "SIZE", value_parser = parse_size, requires = "save_dir")]
    pub save_quota: Option<u64>,
}

impl BudgetArgs {
    /// `--save-dir DIR` under `--save-quota`.
    pub fn save_dir(&self, dir: std::path::PathBuf) -> SaveDir {
        SaveDir::new(dir, self.save_quota.unwrap_or(DEFAULT_SAVE_QUOTA))
    }

    /// The server's budget these flags describe, under `max_rate_bps` (`--max-rate`), for
    /// a server of `max_tests` slots (a one-slot server has nothing to share).
    pub fn budget(
        &self,
        max_rate_bps: Option<u64>,
        max_tests: u32,
    ) -> Result<ServerBudget, String> {
        // A packet rate: `100k` and `100kpps` say the same here.
        let max_pps = match self.max_pps {
            Some(Rate::BitsPerSecond(0) | Rate::PacketsPerSecond(0)) => None,
            Some(Rate::BitsPerSecond(n) | Rate::PacketsPerSecond(n)) => Some(n),
            // Tiny messages must not turn the byte limit into a flood of packets.
            None => max_rate_bps.map(|bps| (bps / MIN_PACKET_BITS).max(1)),
        };
        Ok(ServerBudget {
            max_memory: (self.max_memory > 0).then_some(self.max_memory),
            max_memory_per_client: match self.max_memory_per_client {
                Some(0) => None,
                Some(n) => Some(n),
                None => (self.max_memory > 0 && max_tests >= 2).then_some(self.max_memory / 2),
            },
            max_pps,
        })
    }
}
