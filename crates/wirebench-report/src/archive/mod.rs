//! The mesh's archive: a row for every scheduled run, done or failed with its typed reason
//! (never a gap), and each path's next round, so that an agent that restarts resumes its
//! schedule. In an SQLite file (`sqlite.rs`, the default) or, for many agents sharing one,
//! a PostgreSQL database (`pg.rs`, `--archive postgres://...`): the same tables, the same
//! reads. A run's row and its path's next round are written in one transaction: a crash or
//! a full disk loses nothing already written and never leaves half a row.
//!
//! `runs` holds, per row: `started_unix_ms`, `ended_unix_ms`, `source`, `destination`,
//! `test`, `kind` (`throughput`/`latency`), `outcome` (`done`/`failed`), `error_kind` and
//! `reason` (failed runs), the headline figures (`throughput_bps`, `latency_us`,
//! `loss_ratio`: null where the test does not measure them) and `results`, the run's whole
//! results document (JSON). Indexed by time, and by path and time.

use std::path::{Path, PathBuf};

use serde::Serialize;
use wirebench_proto::results::Results;

pub mod metrics;
mod pg;
pub mod query;
pub mod report;
mod sqlite;

/// The archive's schema, as `meta.schema` records it.
pub const SCHEMA: u32 = 1;

/// What went wrong with an archive, and which.
#[derive(Debug, thiserror::Error)]
pub enum ArchiveError {
    /// SQLite refused (cannot open, disk full, not a database).
    #[error("archive {path}: {source}")]
    Sqlite {
        /// The archive.
        path: PathBuf,
        /// SQLite's error.
        source: rusqlite::Error,
    },
    /// The PostgreSQL server refused, or cannot be reached.
    #[error("archive {url}: {}", first_line(.source))]
    Postgres {
        /// The database's URL, without its password.
        url: String,
        /// The client's error.
        source: postgres::Error,
    },
    /// A database that is not a wirebench archive, or of a newer schema.
    #[error("archive {path}: {why}")]
    NotAnArchive {
        /// The file.
        path: PathBuf,
        /// What was found.
        why: String,
    },
}

/// An error's first line (a server's error may add lines of detail).
fn first_line(e: &dyn std::fmt::Display) -> String {
    let text = e.to_string();
    text.lines().next().unwrap_or_default().to_string()
}

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    /// It ran and made results.
    Done,
    /// It did not (refused, peer down, timed out, not started within its slip).
    Failed,
}

impl Outcome {
    /// The word the tables keep: `done` or `failed`.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Done => "done",
            Outcome::Failed => "failed",
        }
    }
}

/// One run, as the archive keeps it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Row {
    /// When it started (or its round, for a run never started), ms since the Unix epoch.
    pub started_unix_ms: i64,
    /// When it ended, ms since the Unix epoch.
    pub ended_unix_ms: i64,
    /// Where it ran from (a host's name in the mesh file).
    pub source: String,
    /// Whose server it ran against.
    pub destination: String,
    /// The test's name.
    pub test: String,
    /// `throughput` or `latency`.
    pub kind: String,
    /// Whether it made results.
    pub outcome: Outcome,
    /// A failed run's error kind (`busy`, `connect`, `timeout`, ...).
    pub error_kind: Option<String>,
    /// A failed run's reason, in words.
    pub reason: Option<String>,
    /// Received bits per second over the test's time (streaming tests).
    pub throughput_bps: Option<f64>,
    /// Median round trip, µs (request/response tests).
    pub latency_us: Option<f64>,
    /// UDP: lost over sent.
    pub loss_ratio: Option<f64>,
    /// The run's results document, JSON (done runs).
    #[serde(skip)]
    pub results: Option<String>,
}

/// The headline figures of a results document: throughput (received bits/s), the median
/// round trip (request/response) and UDP's loss ratio; `None` where not measured.
pub fn figures(r: &Results) -> (Option<f64>, Option<f64>, Option<f64>) {
    let e = &r.end;
    let latency = e.latency_us.as_ref().map(|p| p.p50);
    let throughput = if latency.is_some() {
        None
    } else {
        e.received_bps
    };
    let loss = e.udp.as_ref().and_then(|u| u.loss_ratio);
    (throughput, latency, loss)
}

/// A path's next round, as the schedule left it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NextRound {
    /// The test's name.
    pub test: String,
    /// The source host's name.
    pub source: String,
    /// The destination host's name.
    pub destination: String,
    /// When, ms since the Unix epoch.
    pub next_unix_ms: i64,
}

/// Which rows a query wants.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    /// Only runs from this host.
    pub source: Option<String>,
    /// Only runs against this host.
    pub destination: Option<String>,
    /// Only this test.
    pub test: Option<String>,
    /// Only runs started at or after this, ms since the Unix epoch.
    pub since_unix_ms: Option<i64>,
}

/// Whether `target` names a PostgreSQL database rather than a file.
pub fn is_postgres(target: &Path) -> bool {
    target
        .to_str()
        .is_some_and(|s| s.starts_with("postgres://") || s.starts_with("postgresql://"))
}

/// An open archive: an SQLite file or a PostgreSQL database.
#[derive(Debug)]
pub struct Archive(Store);

#[derive(Debug)]
enum Store {
    Sqlite(sqlite::Sqlite),
    Postgres(Box<pg::Pg>),
}

impl Archive {
    /// Opens the archive `target` (a file, or a `postgres://` URL) to write, making its
    /// tables if there are none.
    ///
    /// # Errors
    ///
    /// It cannot be opened, reached or made, or it is not a wirebench archive.
    pub fn create(target: &Path) -> Result<Self, ArchiveError> {
        Ok(Self(match target.to_str() {
            Some(url) if is_postgres(target) => Store::Postgres(Box::new(pg::Pg::open(url, true)?)),
            _ => Store::Sqlite(sqlite::Sqlite::create(target)?),
        }))
    }

    /// Opens an existing archive (a file, or a `postgres://` URL) to read.
    ///
    /// # Errors
    ///
    /// There is none there, or it is not a wirebench archive.
    pub fn open(target: &Path) -> Result<Self, ArchiveError> {
        Ok(Self(match target.to_str() {
            Some(url) if is_postgres(target) => {
                Store::Postgres(Box::new(pg::Pg::open(url, false)?))
            }
            _ => Store::Sqlite(sqlite::Sqlite::open(target)?),
        }))
    }

    /// Writes `row`, and its path's next round when given, in one transaction.
    ///
    /// # Errors
    ///
    /// The database could not write it (a full disk, a server gone): nothing of it is in
    /// the archive.
    pub fn insert(&mut self, row: &Row, next: Option<&NextRound>) -> Result<(), ArchiveError> {
        match &mut self.0 {
            Store::Sqlite(s) => s.insert(row, next),
            Store::Postgres(p) => p.insert(row, next),
        }
    }

    /// Every path's next round as the last agent left it.
    ///
    /// # Errors
    ///
    /// The database could not read them.
    pub fn next_rounds(&mut self) -> Result<Vec<NextRound>, ArchiveError> {
        match &mut self.0 {
            Store::Sqlite(s) => s.next_rounds(),
            Store::Postgres(p) => p.next_rounds(),
        }
    }

    /// The runs `filter` wants, oldest first (without their results documents).
    ///
    /// # Errors
    ///
    /// The database could not read them.
    pub fn query(&mut self, filter: &Filter) -> Result<Vec<Row>, ArchiveError> {
        match &mut self.0 {
            Store::Sqlite(s) => s.query(filter),
            Store::Postgres(p) => p.query(filter),
        }
    }
}

impl Outcome {
    /// The word the tables keep.
    fn from_word(w: &str) -> Self {
        if w == "done" {
            Outcome::Done
        } else {
            Outcome::Failed
        }
    }
}
