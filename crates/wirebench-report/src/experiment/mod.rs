//! Experiments: the plan of a sweep (`--vary`, or a named preset; `plan`), its directory,
//! what is left to measure and the loop that measures and saves each trial (`sweep`,
//! `resume`), and the summary of its trials (statistics per point, the knee of a rate
//! sweep; `summary`), and what it warns of (`warnings`). No socket: the binary passes in how one trial runs.

pub mod lock;
pub mod merge;
pub mod plan;
pub mod resume;
pub mod shard;
pub mod summary;
pub mod sweep;
pub mod trial;
pub mod warnings;

pub use lock::{DirLock, Holder, RunKind};
pub use merge::{MergeError, Merged};
pub use plan::*;
pub use resume::{resume, sweep_manifest, Resume, Todo};
pub use shard::{Manifest, ReplacedTrial, Shard, ShardError, ShardRecord};
pub use summary::*;
pub use trial::{NotThisTrial, TrialFile, TrialTag, Unmeasured};
pub use warnings::{warnings_of, Concern, Warning};

/// The experiment's summary as CSV (the [`Csv`](crate::export::csv::Csv) exporter's text):
/// a row per point, the parameters, then for each figure its mean, sd, min, median, max and
/// 95% CI half-width.
pub fn summary_csv(s: &ExperimentSummary) -> String {
    use crate::Exporter as _;
    let mut out = Vec::new();
    // Writing to a Vec cannot fail, and the exporter writes UTF-8.
    let _ = crate::export::csv::Csv.export(s, &mut out);
    String::from_utf8_lossy(&out).into_owned()
}
