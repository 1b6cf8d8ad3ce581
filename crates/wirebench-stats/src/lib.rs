//! Measurement statistics for wirebench: pure state machines and functions.
//!
//! This crate holds no sockets and reads no clocks; every time value is passed
//! in by the caller as `u64` nanoseconds. Nothing here panics on any input, and
//! the per-packet entry points ([`SeqTracker::record`], [`Jitter::on_packet`])
//! never allocate: all storage is reserved when the state is constructed.
//!
//! - [`SeqTracker`]: receiver-side loss, duplicate and reorder accounting of
//!   UDP datagram sequence numbers, with a [`LossRuns`] histogram of gap sizes.
//! - [`Jitter`]: the RFC 3550 (section 6.4.1, appendix A.8) interarrival
//!   jitter estimator.
//! - [`TimeHistogram`]: HDR distribution of signed ns values (one-way delay, interarrival
//!   gaps) with p50/p90/p99/p99.9 ([`TimeSummary`]).
//! - [`summarize`]: count, min, max, mean, sample standard deviation and median
//!   of a slice of `f64` ([`Summary`]).
//! - [`steps::steps`]: where a series stepped to worse (a rank test over rolling windows),
//!   for the mesh's archive.

#![deny(unsafe_code)]
#![deny(missing_docs)]

pub mod bounded;
mod hist;
mod jitter;
mod loss_runs;
mod seq;
pub mod steps;
mod summary;

pub use hist::{TimeHistogram, TimeSummary};
pub use jitter::Jitter;
pub use loss_runs::{LossRunBucket, LossRuns, LossRunsSummary};
pub use seq::{Arrival, LostRun, SeqCounts, SeqTracker};
pub use summary::{knee, summarize, t975, Summary};
