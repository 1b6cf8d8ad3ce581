//! What an experiment records of how it was run (`experiment.json`): the command, the tool,
//! the server, the plan, and the machine, so that a rerun can match it; and the UTC time
//! stamp that names a result directory.

use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::experiment::plan::Vary;

/// Facts of the machine that ran an experiment, which a rerun should match.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Machine {
    /// The kernel release (`/proc/sys/kernel/osrelease`), empty if unreadable.
    #[serde(default)]
    pub kernel: String,
    /// The CPU's model name (`/proc/cpuinfo`), empty if unreadable.
    #[serde(default)]
    pub cpu: String,
    /// Cores this process may use.
    #[serde(default)]
    pub cores: usize,
}

impl Machine {
    /// This machine, as far as it can be read (what cannot be read is left empty).
    pub fn this() -> Self {
        let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
        let cpu = read("/proc/cpuinfo")
            .lines()
            .find_map(|l| {
                l.strip_prefix("model name")
                    .map(|v| v.trim_start_matches([' ', '\t', ':']).to_string())
            })
            .unwrap_or_default();
        Self {
            kernel: read("/proc/sys/kernel/osrelease").trim().to_string(),
            cpu,
            cores: std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(0),
        }
    }
}

/// `experiment.json`: how an experiment was run. A sweep writes every key; a lab scenario
/// writes the common ones and its own beside them (ignored here), so every key this reads is
/// optional.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ExperimentMeta {
    /// `wirebench VERSION`.
    #[serde(default)]
    pub wirebench: String,
    /// The command line, word by word.
    #[serde(default)]
    pub command: Vec<String>,
    /// The server measured against (`HOST:PORT`, or what a lab scenario names).
    #[serde(default)]
    pub server: String,
    /// What the sweep varied.
    #[serde(default)]
    pub varies: Vec<Vary>,
    /// Trials per point.
    #[serde(default)]
    pub repeat: u32,
    /// Whether the trials ran in grid order (else shuffled).
    #[serde(default)]
    pub ordered: bool,
    /// The shuffle's seed, to run the same order again; null in grid order.
    #[serde(default)]
    pub shuffle_seed: Option<u64>,
    /// The machine that ran it (a sharded sweep: shard 0's).
    #[serde(default)]
    pub machine: Machine,
    /// The hash of the experiment's `manifest.json`, which every shard of it shares.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manifest_hash: Option<String>,
    /// How many shards ran it (1: one process); `shards/` has each one's record.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shards: Option<u32>,
}

/// The tool's name and version, as results and `experiment.json` record it.
pub fn tool_version() -> String {
    format!("wirebench {}", env!("CARGO_PKG_VERSION"))
}

/// The UTC date and time now, as result directories are named (`2026-11-22T150258`).
pub fn timestamp() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    timestamp_of(secs)
}

/// The UTC date and time of a Unix time in seconds, as [`timestamp`] writes it.
pub fn timestamp_of(secs: u64) -> String {
    // No calendar crate for one name.
    let (y, m, d) = civil_from_days((secs / 86_400) as i64);
    let t = secs % 86_400;
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}{:02}{:02}",
        t / 3600,
        t / 60 % 60,
        t % 60
    )
}

/// The proleptic Gregorian date of a day count since 1970-01-01 (H. Hinnant's algorithm).
pub(crate) fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_name_utc_dates() {
        assert_eq!(timestamp_of(0), "1970-01-01T000000");
        // 2026-11-22 15:02:58 UTC.
        assert_eq!(timestamp_of(1_795_359_778), "2026-11-22T150258");
        // A leap day.
        assert_eq!(timestamp_of(951_782_400), "2000-02-29T000000");
    }

    #[test]
    fn a_lab_scenarios_experiment_json_reads_with_its_own_keys() {
        let text = r#"{"wirebench":"wirebench 0.1.0","command":["wirebench","lab"],
            "server":"lab scenario x","scenario":{"name":"x"},"repeat":3,"parallel":2,
            "ordered":true,"machine":{"kernel":"6.1","cpu":"c","cores":2}}"#;
        let m: ExperimentMeta = serde_json::from_str(text).expect("reads");
        assert_eq!((m.repeat, m.ordered, m.machine.cores), (3, true, 2));
        assert!(m.varies.is_empty() && m.shuffle_seed.is_none());
    }
}
