//! The mesh's archive: an SQLite file with a row for every scheduled run, done or failed
//! with its typed reason (never a gap), and each path's next round, so that an agent that
//! restarts resumes its schedule. A run's row and its path's next round are written in one
//! transaction: a crash or a full disk loses nothing already written and never leaves half
//! a row (SQLite's write-ahead log, synchronous writes).
//!
//! `runs` holds, per row: `started_unix_ms`, `ended_unix_ms`, `source`, `destination`,
//! `test`, `kind` (`throughput`/`latency`), `outcome` (`done`/`failed`), `error_kind` and
//! `reason` (failed runs), the headline figures (`throughput_bps`, `latency_us`,
//! `loss_ratio`: null where the test does not measure them) and `results`, the run's whole
//! results document (JSON). Indexed by time, and by path and time.

use std::path::{Path, PathBuf};

use rusqlite::{params, Connection, OpenFlags, OptionalExtension};
use serde::Serialize;
use wirebench_proto::results::Results;

pub mod metrics;
pub mod query;
pub mod report;

/// The archive's schema, as `meta.schema` records it.
pub const SCHEMA: u32 = 1;

const CREATE: &str = "
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS runs (
    id INTEGER PRIMARY KEY,
    started_unix_ms INTEGER NOT NULL,
    ended_unix_ms INTEGER NOT NULL,
    source TEXT NOT NULL,
    destination TEXT NOT NULL,
    test TEXT NOT NULL,
    kind TEXT NOT NULL,
    outcome TEXT NOT NULL CHECK (outcome IN ('done', 'failed')),
    error_kind TEXT,
    reason TEXT,
    throughput_bps REAL,
    latency_us REAL,
    loss_ratio REAL,
    results TEXT
);
CREATE INDEX IF NOT EXISTS runs_by_time ON runs (started_unix_ms);
CREATE INDEX IF NOT EXISTS runs_by_path ON runs (source, destination, test, started_unix_ms);
CREATE TABLE IF NOT EXISTS rounds (
    test TEXT NOT NULL,
    source TEXT NOT NULL,
    destination TEXT NOT NULL,
    next_unix_ms INTEGER NOT NULL,
    PRIMARY KEY (test, source, destination)
);
";

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
    /// A database that is not a wirebench archive, or of a newer schema.
    #[error("archive {path}: {why}")]
    NotAnArchive {
        /// The file.
        path: PathBuf,
        /// What was found.
        why: String,
    },
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
    fn as_str(self) -> &'static str {
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

/// An open archive.
#[derive(Debug)]
pub struct Archive {
    conn: Connection,
    path: PathBuf,
}

impl Archive {
    fn err(&self, source: rusqlite::Error) -> ArchiveError {
        ArchiveError::Sqlite {
            path: self.path.clone(),
            source,
        }
    }

    /// Opens the archive at `path` to write, making it if there is none.
    ///
    /// # Errors
    ///
    /// It cannot be opened or made, or it is not a wirebench archive.
    pub fn create(path: &Path) -> Result<Self, ArchiveError> {
        let conn = Connection::open(path).map_err(|source| ArchiveError::Sqlite {
            path: path.to_path_buf(),
            source,
        })?;
        let a = Self {
            conn,
            path: path.to_path_buf(),
        };
        // Every committed run on disk before the next begins.
        a.conn
            .pragma_update(None, "journal_mode", "WAL")
            .and_then(|()| a.conn.pragma_update(None, "synchronous", "FULL"))
            .and_then(|()| a.conn.execute_batch(CREATE))
            .map_err(|e| a.err(e))?;
        a.conn
            .execute(
                "INSERT OR IGNORE INTO meta (key, value) VALUES ('schema', ?1)",
                params![SCHEMA.to_string()],
            )
            .map_err(|e| a.err(e))?;
        a.check_schema()?;
        Ok(a)
    }

    /// Opens an existing archive to read.
    ///
    /// # Errors
    ///
    /// There is none at `path`, or it is not a wirebench archive.
    pub fn open(path: &Path) -> Result<Self, ArchiveError> {
        if !path.is_file() {
            return Err(ArchiveError::NotAnArchive {
                path: path.to_path_buf(),
                why: "no such file (an agent makes it: wirebench mesh FILE --archive PATH)".into(),
            });
        }
        let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let conn =
            Connection::open_with_flags(path, flags).map_err(|source| ArchiveError::Sqlite {
                path: path.to_path_buf(),
                source,
            })?;
        let a = Self {
            conn,
            path: path.to_path_buf(),
        };
        a.check_schema()?;
        Ok(a)
    }

    /// Refuses a database that is not an archive of this schema.
    fn check_schema(&self) -> Result<(), ArchiveError> {
        let not = |why: String| ArchiveError::NotAnArchive {
            path: self.path.clone(),
            why,
        };
        let v: Option<String> = self
            .conn
            .query_row("SELECT value FROM meta WHERE key = 'schema'", [], |r| {
                r.get(0)
            })
            .optional()
            .map_err(|e| not(format!("not a wirebench archive ({e})")))?;
        match v.as_deref().map(str::parse::<u32>) {
            Some(Ok(SCHEMA)) => Ok(()),
            Some(Ok(n)) => Err(not(format!(
                "schema {n}, this wirebench reads {SCHEMA}: use the wirebench that wrote it"
            ))),
            _ => Err(not("not a wirebench archive (no schema in meta)".into())),
        }
    }

    /// Writes `row`, and its path's next round when given, in one transaction.
    ///
    /// # Errors
    ///
    /// SQLite could not write it (a full disk): nothing of it is in the archive.
    pub fn insert(&mut self, row: &Row, next: Option<&NextRound>) -> Result<(), ArchiveError> {
        let path = self.path.clone();
        let err = |source| ArchiveError::Sqlite {
            path: path.clone(),
            source,
        };
        let tx = self.conn.transaction().map_err(err)?;
        tx.execute(
            "INSERT INTO runs (started_unix_ms, ended_unix_ms, source, destination, test, kind,
                 outcome, error_kind, reason, throughput_bps, latency_us, loss_ratio, results)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)",
            params![
                row.started_unix_ms,
                row.ended_unix_ms,
                row.source,
                row.destination,
                row.test,
                row.kind,
                row.outcome.as_str(),
                row.error_kind,
                row.reason,
                row.throughput_bps,
                row.latency_us,
                row.loss_ratio,
                row.results,
            ],
        )
        .map_err(err)?;
        if let Some(n) = next {
            tx.execute(
                "INSERT INTO rounds (test, source, destination, next_unix_ms) VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT (test, source, destination) DO UPDATE SET next_unix_ms = ?4",
                params![n.test, n.source, n.destination, n.next_unix_ms],
            )
            .map_err(err)?;
        }
        tx.commit().map_err(err)
    }

    /// Every path's next round as the last agent left it.
    ///
    /// # Errors
    ///
    /// SQLite could not read them.
    pub fn next_rounds(&self) -> Result<Vec<NextRound>, ArchiveError> {
        let mut st = self
            .conn
            .prepare("SELECT test, source, destination, next_unix_ms FROM rounds")
            .map_err(|e| self.err(e))?;
        let rows = st
            .query_map([], |r| {
                Ok(NextRound {
                    test: r.get(0)?,
                    source: r.get(1)?,
                    destination: r.get(2)?,
                    next_unix_ms: r.get(3)?,
                })
            })
            .map_err(|e| self.err(e))?;
        rows.collect::<Result<Vec<_>, _>>().map_err(|e| self.err(e))
    }

    /// The runs `filter` wants, oldest first (without their results documents).
    ///
    /// # Errors
    ///
    /// SQLite could not read them.
    pub fn query(&self, filter: &Filter) -> Result<Vec<Row>, ArchiveError> {
        let mut st = self
            .conn
            .prepare(
                "SELECT started_unix_ms, ended_unix_ms, source, destination, test, kind, outcome,
                        error_kind, reason, throughput_bps, latency_us, loss_ratio
                 FROM runs
                 WHERE (?1 IS NULL OR source = ?1) AND (?2 IS NULL OR destination = ?2)
                   AND (?3 IS NULL OR test = ?3) AND (?4 IS NULL OR started_unix_ms >= ?4)
                 ORDER BY started_unix_ms, id",
            )
            .map_err(|e| self.err(e))?;
        let rows = st
            .query_map(
                params![
                    filter.source,
                    filter.destination,
                    filter.test,
                    filter.since_unix_ms
                ],
                |r| {
                    let outcome: String = r.get(6)?;
                    Ok(Row {
                        started_unix_ms: r.get(0)?,
                        ended_unix_ms: r.get(1)?,
                        source: r.get(2)?,
                        destination: r.get(3)?,
                        test: r.get(4)?,
                        kind: r.get(5)?,
                        outcome: if outcome == "done" {
                            Outcome::Done
                        } else {
                            Outcome::Failed
                        },
                        error_kind: r.get(7)?,
                        reason: r.get(8)?,
                        throughput_bps: r.get(9)?,
                        latency_us: r.get(10)?,
                        loss_ratio: r.get(11)?,
                        results: None,
                    })
                },
            )
            .map_err(|e| self.err(e))?;
        rows.collect::<Result<Vec<_>, _>>().map_err(|e| self.err(e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp(tag: &str) -> PathBuf {
        let p = std::env::temp_dir().join(format!(
            "wirebench-archive-{}-{tag}.sqlite",
            std::process::id()
        ));
        let _ = std::fs::remove_file(&p);
        p
    }

    fn row(t: i64, src: &str, outcome: Outcome) -> Row {
        Row {
            started_unix_ms: t,
            ended_unix_ms: t + 100,
            source: src.into(),
            destination: "b".into(),
            test: "throughput".into(),
            kind: "throughput".into(),
            outcome,
            error_kind: (outcome == Outcome::Failed).then(|| "connect".into()),
            reason: (outcome == Outcome::Failed).then(|| "refused".into()),
            throughput_bps: (outcome == Outcome::Done).then_some(1e9),
            latency_us: None,
            loss_ratio: None,
            results: Some("{}".into()),
        }
    }

    #[test]
    fn rows_and_rounds_survive_a_reopen_and_filters_select() {
        let p = temp("reopen");
        {
            let mut a = Archive::create(&p).expect("create");
            let next = NextRound {
                test: "throughput".into(),
                source: "a".into(),
                destination: "b".into(),
                next_unix_ms: 5000,
            };
            a.insert(&row(1000, "a", Outcome::Done), Some(&next))
                .expect("insert");
            a.insert(&row(2000, "c", Outcome::Failed), None)
                .expect("insert");
            let next = NextRound {
                next_unix_ms: 9000,
                ..next
            };
            a.insert(&row(3000, "a", Outcome::Done), Some(&next))
                .expect("insert");
        }
        let a = Archive::open(&p).expect("open");
        assert_eq!(a.query(&Filter::default()).expect("all").len(), 3);
        let from_a = Filter {
            source: Some("a".into()),
            since_unix_ms: Some(1500),
            ..Filter::default()
        };
        let rows = a.query(&from_a).expect("a");
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].started_unix_ms, 3000);
        let failed = &a
            .query(&Filter {
                source: Some("c".into()),
                ..Filter::default()
            })
            .expect("c")[0];
        assert_eq!(failed.outcome, Outcome::Failed);
        assert_eq!(failed.reason.as_deref(), Some("refused"));
        let rounds = a.next_rounds().expect("rounds");
        assert_eq!(rounds.len(), 1);
        assert_eq!(rounds[0].next_unix_ms, 9000);
        let _ = std::fs::remove_file(&p);
    }

    #[test]
    fn a_file_that_is_not_an_archive_is_refused_in_one_line() {
        let p = temp("not");
        std::fs::write(
            &p,
            b"hello, not a database at all, not even close to one....",
        )
        .expect("write");
        let e = Archive::open(&p).expect_err("not an archive").to_string();
        assert!(
            e.contains("not a wirebench archive") && !e.contains('\n'),
            "{e}"
        );
        let e = Archive::open(&temp("missing"))
            .expect_err("missing")
            .to_string();
        assert!(e.contains("no such file"), "{e}");
        let _ = std::fs::remove_file(&p);
    }
}
