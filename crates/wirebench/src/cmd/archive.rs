//! `wirebench archive query PATH`: a mesh's runs from its archive, oldest first, with the
//! steps to worse in each path's series; as a table, JSON or CSV. `wirebench archive
//! report PATH -o FILE`: the same as an HTML report.

use std::io::{self, Write};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use wirebench_report::archive::query::{csv, table, with_steps};
use wirebench_report::archive::{Archive, Filter};

use crate::cli::{ArchiveAction, ArchiveArgs, ArchiveReportArgs, QueryArgs};
use crate::Failure;

/// Dispatches `wirebench archive ...`.
pub fn archive(args: &ArchiveArgs) -> Result<(), Failure> {
    match &args.action {
        ArchiveAction::Query(q) => query(q),
        ArchiveAction::Report(r) => report(r),
    }
}

/// Ms since the Unix epoch `age` ago.
fn since(age: Option<Duration>) -> Option<i64> {
    age.map(|age| {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or(Duration::ZERO);
        i64::try_from(now.saturating_sub(age).as_millis()).unwrap_or(i64::MAX)
    })
}

fn report(r: &ArchiveReportArgs) -> Result<(), Failure> {
    let mut archive = Archive::open(&r.path).map_err(|e| Failure::Runtime(e.into()))?;
    let filter = Filter {
        since_unix_ms: since(r.since),
        ..Filter::default()
    };
    let rows = with_steps(
        archive
            .query(&filter)
            .map_err(|e| Failure::Runtime(e.into()))?,
    );
    let name = r.path.display().to_string();
    let html = wirebench_report::archive::report::report(&rows, &name)
        .map_err(|e| Failure::Runtime(e.into()))?;
    // Whole or not at all, as `wirebench report` writes.
    wirebench_report::rundir::write(&r.output, html.as_bytes())
        .map_err(|e| Failure::Runtime(e.into()))?;
    eprintln!(
        "report: {}",
        wirebench_report::text::printable(&r.output.display().to_string())
    );
    Ok(())
}

fn query(q: &QueryArgs) -> Result<(), Failure> {
    let mut archive = Archive::open(&q.path).map_err(|e| Failure::Runtime(e.into()))?;
    let filter = Filter {
        source: q.from.clone(),
        destination: q.to.clone(),
        test: q.test.clone(),
        since_unix_ms: since(q.since),
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
