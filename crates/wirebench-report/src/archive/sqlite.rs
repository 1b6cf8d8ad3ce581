//! The archive in an SQLite file (`--archive PATH`, the default): the write-ahead log and
//! synchronous writes, so a committed run is on disk before the next begins.

use std::path::{Path, PathBuf};

use rusqlite::{params, Connection, OpenFlags, OptionalExtension};

use super::{ArchiveError, Filter, NextRound, Outcome, Row, SCHEMA};

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

/// An SQLite archive, open.
#[derive(Debug)]
pub struct Sqlite {
    conn: Connection,
    path: PathBuf,
}

impl Sqlite {
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
            let why = if path.exists() {
                "not a file (a FIFO, a directory or a device)"
            } else {
                "no such file (an agent makes it: wirebench mesh FILE --archive PATH)"
            };
            return Err(ArchiveError::NotAnArchive {
                path: path.to_path_buf(),
                why: why.into(),
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

    /// Every path's next round as the last agent left it (`&mut`: as every store's).
    ///
    /// # Errors
    ///
    /// SQLite could not read them.
    pub fn next_rounds(&mut self) -> Result<Vec<NextRound>, ArchiveError> {
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
    pub fn query(&mut self, filter: &Filter) -> Result<Vec<Row>, ArchiveError> {
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
                        outcome: Outcome::from_word(&outcome),
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
    use crate::archive::Archive;

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
        let mut a = Archive::open(&p).expect("open");
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
        let e = Archive::open(&std::env::temp_dir())
            .expect_err("a directory")
            .to_string();
        assert!(e.contains("not a file"), "{e}");
        let _ = std::fs::remove_file(&p);
    }
}
