//! The archive in a PostgreSQL database (`--archive postgres://USER@HOST/DB`), so that many
//! agents share one: the tables of `sqlite.rs` in PostgreSQL's types, each run and its
//! path's next round in one transaction. Connections are made within 10 s (an unreachable
//! server is a one-line error), without TLS (reach a remote server over a tunnel or a
//! private network).

use std::time::Duration;

use postgres::{Client, Config, NoTls};

use super::{ArchiveError, Filter, NextRound, Outcome, Row, SCHEMA};

/// The advisory lock agents take to make the tables: "wirebnch" as a number.
const CREATE_LOCK: i64 = 0x7769_7265_626e_6368;

/// How long a connection may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

const CREATE: &str = "
CREATE TABLE IF NOT EXISTS wirebench_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS wirebench_runs (
    id BIGSERIAL PRIMARY KEY,
    started_unix_ms BIGINT NOT NULL,
    ended_unix_ms BIGINT NOT NULL,
    source TEXT NOT NULL,
    destination TEXT NOT NULL,
    test TEXT NOT NULL,
    kind TEXT NOT NULL,
    outcome TEXT NOT NULL CHECK (outcome IN ('done', 'failed')),
    error_kind TEXT,
    reason TEXT,
    throughput_bps DOUBLE PRECISION,
    latency_us DOUBLE PRECISION,
    loss_ratio DOUBLE PRECISION,
    results TEXT
);
CREATE INDEX IF NOT EXISTS wirebench_runs_by_time ON wirebench_runs (started_unix_ms);
CREATE INDEX IF NOT EXISTS wirebench_runs_by_path
    ON wirebench_runs (source, destination, test, started_unix_ms);
CREATE TABLE IF NOT EXISTS wirebench_rounds (
    test TEXT NOT NULL,
    source TEXT NOT NULL,
    destination TEXT NOT NULL,
    next_unix_ms BIGINT NOT NULL,
    PRIMARY KEY (test, source, destination)
);
";

/// A PostgreSQL archive, connected.
pub(super) struct Pg {
    client: Client,
    /// The URL without its password, for errors.
    url: String,
}

impl std::fmt::Debug for Pg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pg").field("url", &self.url).finish()
    }
}

/// `url` without a password (`postgres://user:secret@host/db` → `postgres://user@host/db`).
fn shown(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    match rest.split_once('@') {
        Some((user, host)) => {
            let user = user.split(':').next().unwrap_or_default();
            format!("{scheme}://{user}@{host}")
        }
        None => url.to_string(),
    }
}

impl Pg {
    /// Connects to `url`; with `create`, makes the tables if there are none.
    pub(super) fn open(url: &str, create: bool) -> Result<Self, ArchiveError> {
        let shown = shown(url);
        let err = |source| ArchiveError::Postgres {
            url: shown.clone(),
            source,
        };
        let mut cfg: Config = url.parse().map_err(err)?;
        if cfg.get_connect_timeout().is_none() {
            cfg.connect_timeout(CONNECT_TIMEOUT);
        }
        let mut client = cfg.connect(NoTls).map_err(err)?;
        if create {
            // Agents that start together make the tables one at a time: CREATE ... IF NOT
            // EXISTS alone races in PostgreSQL's catalogue.
            let mut tx = client.transaction().map_err(err)?;
            tx.execute("SELECT pg_advisory_xact_lock($1)", &[&CREATE_LOCK])
                .map_err(err)?;
            tx.batch_execute(CREATE).map_err(err)?;
            tx.execute(
                "INSERT INTO wirebench_meta (key, value) VALUES ('schema', $1)
                 ON CONFLICT (key) DO NOTHING",
                &[&SCHEMA.to_string()],
            )
            .map_err(err)?;
            tx.commit().map_err(err)?;
        }
        let mut pg = Self { client, url: shown };
        pg.check_schema()?;
        Ok(pg)
    }

    fn err(&self, source: postgres::Error) -> ArchiveError {
        ArchiveError::Postgres {
            url: self.url.clone(),
            source,
        }
    }

    /// Refuses a database without an archive of this schema.
    fn check_schema(&mut self) -> Result<(), ArchiveError> {
        let not = |why: String| ArchiveError::NotAnArchive {
            path: self.url.clone().into(),
            why,
        };
        let row = self
            .client
            .query_opt("SELECT value FROM wirebench_meta WHERE key = 'schema'", &[])
            .map_err(|e| not(format!("not a wirebench archive ({e})")))?;
        let v: Option<String> = row.map(|r| r.get(0));
        match v.as_deref().map(str::parse::<u32>) {
            Some(Ok(SCHEMA)) => Ok(()),
            Some(Ok(n)) => Err(not(format!(
                "schema {n}, this wirebench reads {SCHEMA}: use the wirebench that wrote it"
            ))),
            _ => Err(not(
                "not a wirebench archive (no schema in wirebench_meta)".into()
            )),
        }
    }

    pub(super) fn insert(
        &mut self,
        row: &Row,
        next: Option<&NextRound>,
    ) -> Result<(), ArchiveError> {
        let url = self.url.clone();
        let err = |source| ArchiveError::Postgres {
            url: url.clone(),
            source,
        };
        let mut tx = self.client.transaction().map_err(err)?;
        tx.execute(
            "INSERT INTO wirebench_runs (started_unix_ms, ended_unix_ms, source, destination, test,
                 kind, outcome, error_kind, reason, throughput_bps, latency_us, loss_ratio, results)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)",
            &[
                &row.started_unix_ms,
                &row.ended_unix_ms,
                &row.source,
                &row.destination,
                &row.test,
                &row.kind,
                &row.outcome.as_str(),
                &row.error_kind,
                &row.reason,
                &row.throughput_bps,
                &row.latency_us,
                &row.loss_ratio,
                &row.results,
            ],
        )
        .map_err(err)?;
        if let Some(n) = next {
            tx.execute(
                "INSERT INTO wirebench_rounds (test, source, destination, next_unix_ms)
                 VALUES ($1, $2, $3, $4)
                 ON CONFLICT (test, source, destination) DO UPDATE SET next_unix_ms = $4",
                &[&n.test, &n.source, &n.destination, &n.next_unix_ms],
            )
            .map_err(err)?;
        }
        tx.commit().map_err(err)
    }

    pub(super) fn next_rounds(&mut self) -> Result<Vec<NextRound>, ArchiveError> {
        let rows = self
            .client
            .query(
                "SELECT test, source, destination, next_unix_ms FROM wirebench_rounds",
                &[],
            )
            .map_err(|e| self.err(e))?;
        Ok(rows
            .iter()
            .map(|r| NextRound {
                test: r.get(0),
                source: r.get(1),
                destination: r.get(2),
                next_unix_ms: r.get(3),
            })
            .collect())
    }

    pub(super) fn query(&mut self, filter: &Filter) -> Result<Vec<Row>, ArchiveError> {
        let rows = self
            .client
            .query(
                "SELECT started_unix_ms, ended_unix_ms, source, destination, test, kind, outcome,
                        error_kind, reason, throughput_bps, latency_us, loss_ratio
                 FROM wirebench_runs
                 WHERE ($1::TEXT IS NULL OR source = $1) AND ($2::TEXT IS NULL OR destination = $2)
                   AND ($3::TEXT IS NULL OR test = $3) AND ($4::BIGINT IS NULL OR started_unix_ms >= $4)
                 ORDER BY started_unix_ms, id",
                &[
                    &filter.source,
                    &filter.destination,
                    &filter.test,
                    &filter.since_unix_ms,
                ],
            )
            .map_err(|e| self.err(e))?;
        Ok(rows
            .iter()
            .map(|r| {
                let outcome: String = r.get(6);
                Row {
                    started_unix_ms: r.get(0),
                    ended_unix_ms: r.get(1),
                    source: r.get(2),
                    destination: r.get(3),
                    test: r.get(4),
                    kind: r.get(5),
                    outcome: Outcome::from_word(&outcome),
                    error_kind: r.get(7),
                    reason: r.get(8),
                    throughput_bps: r.get(9),
                    latency_us: r.get(10),
                    loss_ratio: r.get(11),
                    results: None,
                }
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_password_is_never_shown() {
        assert_eq!(
            shown("postgres://mesh:s3cret@db.example:5432/archive"),
            "postgres://mesh@db.example:5432/archive"
        );
        assert_eq!(shown("postgres://db/archive"), "postgres://db/archive");
    }
}
