//! `wirebench mesh` and `wirebench archive`'s flags.

use std::path::PathBuf;

use clap::{Args, Subcommand};

/// The archive an agent writes unless told otherwise, in the current directory.
pub const DEFAULT_ARCHIVE: &str = "wirebench-archive.sqlite";

/// `wirebench mesh`.
#[derive(Debug, Args)]
pub struct MeshArgs {
    /// The mesh file (TOML): hosts, groups, tests and how often (docs/mesh.md).
    #[arg(value_name = "FILE")]
    pub file: PathBuf,
    /// The archive: an SQLite file (made if there is none), or a PostgreSQL database that
    /// many agents share (postgres://USER@HOST[:PORT]/DB; its tables are made if there are
    /// none). A row per scheduled run.
    #[arg(long, value_name = "PATH|URL", default_value = DEFAULT_ARCHIVE)]
    pub archive: PathBuf,
    /// Stop after this long (e.g. 60s, 24h): runs under way finish, none start. Default:
    /// until SIGINT or SIGTERM.
    #[arg(long = "for", value_name = "DURATION", value_parser = wirebench_proto::units::parse_duration)]
    pub run_for: Option<std::time::Duration>,
    /// The hosts of the mesh file this agent runs tests from (by name; repeat it). Default:
    /// every host whose address is this machine's.
    #[arg(long = "as", value_name = "HOST")]
    pub hosts: Vec<String>,
    /// The pre-shared key of the servers, from this file (as run's --psk-file).
    #[arg(long, value_name = "FILE")]
    pub psk_file: Option<PathBuf>,
    /// Serve each path's latest figures for Prometheus at http://ADDR/metrics (OpenMetrics
    /// or Prometheus' text format, as the scraper asks), e.g. 127.0.0.1:9300.
    #[arg(long, value_name = "ADDR")]
    pub metrics: Option<std::net::SocketAddr>,
    /// The seed of the random slips (default: random).
    #[arg(long, value_name = "N")]
    pub seed: Option<u64>,
}

/// `wirebench archive`.
#[derive(Debug, Args)]
pub struct ArchiveArgs {
    /// What to do with it.
    #[command(subcommand)]
    pub action: ArchiveAction,
}

/// `wirebench archive query|...`.
#[derive(Debug, Subcommand)]
pub enum ArchiveAction {
    /// Print the archive's runs, oldest first, with the steps to worse found in each
    /// path's series.
    Query(QueryArgs),
    /// Write a self-contained HTML report of the archive: a time series per path and
    /// test, the steps to worse, each path's runs and failures.
    Report(ArchiveReportArgs),
}

/// `wirebench archive report`.
#[derive(Debug, Args)]
pub struct ArchiveReportArgs {
    /// The archive (an agent's --archive: a file or a postgres:// URL).
    #[arg(value_name = "PATH|URL")]
    pub path: PathBuf,
    /// The HTML file to write.
    #[arg(short, long, default_value = "archive.html")]
    pub output: PathBuf,
    /// Only runs that started within this long before now (e.g. 7d, 12h).
    #[arg(long, value_name = "AGE", value_parser = age)]
    pub since: Option<std::time::Duration>,
}

/// `wirebench archive query`.
#[derive(Debug, Args)]
pub struct QueryArgs {
    /// The archive (an agent's --archive: a file or a postgres:// URL).
    #[arg(value_name = "PATH|URL")]
    pub path: PathBuf,
    /// Only runs from this host (its name in the mesh file).
    #[arg(long, value_name = "HOST")]
    pub from: Option<String>,
    /// Only runs against this host.
    #[arg(long, value_name = "HOST")]
    pub to: Option<String>,
    /// Only this test.
    #[arg(long, value_name = "NAME")]
    pub test: Option<String>,
    /// Only runs that started within this long before now (e.g. 7d, 12h, 30m).
    #[arg(long, value_name = "AGE", value_parser = age)]
    pub since: Option<std::time::Duration>,
    /// Print JSON (an array of runs) instead of the table.
    #[arg(long, conflicts_with = "csv")]
    pub json: bool,
    /// Print CSV instead of the table.
    #[arg(long)]
    pub csv: bool,
}

/// An age: a duration as run's flags take them, or whole days (`7d`) or weeks (`2w`).
fn age(s: &str) -> Result<std::time::Duration, String> {
    let t = s.trim();
    for (suffix, secs) in [("d", 86_400u64), ("w", 7 * 86_400)] {
        if let Some(n) = t.strip_suffix(suffix) {
            if let Ok(n) = n.trim().parse::<u64>() {
                return n
                    .checked_mul(secs)
                    .map(std::time::Duration::from_secs)
                    .ok_or_else(|| format!("{t}: too long"));
            }
        }
    }
    wirebench_proto::units::parse_duration(t).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_take_days_and_weeks_and_durations() {
        assert_eq!(age("7d"), Ok(std::time::Duration::from_secs(7 * 86_400)));
        assert_eq!(age("2w"), Ok(std::time::Duration::from_secs(14 * 86_400)));
        assert_eq!(age("90m"), Ok(std::time::Duration::from_secs(5400)));
        assert!(age("soon").is_err());
    }
}
