//! `wirebench archive query PATH`: a mesh's runs from its archive, oldest first, with the
//! steps to worse in each path's series; as a table, JSON or CSV.

use std::io::{self, Write};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use wirebench_report::archive::query::{csv, table, with_steps};
use wirebench_report::archive::{Archive, Filter};

use crate::cli::{ArchiveAction, ArchiveArgs, QueryArgs};
use crate::Failure;

/// Dispatches `wirebench archive ...`.
pub fn archive(args: &ArchiveArgs) -> Result<(), Failure> {
    match &args.action {
        ArchiveAction::Query(q) => query(q),
    }
}

fn query(q: &QueryArgs) -> Result<(), Failure> {
    let archive = Archive::open(&q.path).map_err(|e| Failure::Runtime(e.into()))?;
    let since = q.since.map(|age| {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or(Duration::ZERO);
        let from = now.saturating_sub(age);
        i64::try_from(from.as_millis()).unwrap_or(i64::MAX)
    });
    let filter = Filter {
        source: q.from.clone(),
        destination: q.to.clone(),
        test: q.test.clone(),
        since_unix_ms: since,
    };
    let rows = archive
        .query(&filter)
        .map_err(|e| Failure::Runtime(e.into()))?;
    let rows = with_steps(rows);
    let mut out = io::stdout().lock();
    let written = if q.json {
        serde_json::to_writer_pretty(&mut out, &rows)
            .map_err(io::Error::other)
            .and_then(|()| writeln!(out))
    } else if q.csv {
        csv(&rows, &mut out)
    } else {
        table(&rows, &mut out)
    };
    written
        .and_then(|()| out.flush())
        .context("writing the runs")?;
    Ok(())
}
