//! NDJSON: one compact JSON document per line, for tools that read a stream of records
//! (`jq -c`, log shippers, a database's bulk import).

use std::io::{self, Write};

use serde::Serialize;
use wirebench_proto::results::Results;

use super::{BothDirections, Exporter};
use crate::experiment::summary::ExperimentSummary;

/// A line per document: one for a result, one each for several or for a pair, one per point
/// of an experiment's summary (its knees are in `summary.json`).
pub struct Ndjson;

fn line(doc: &impl Serialize, out: &mut dyn Write) -> io::Result<()> {
    serde_json::to_writer(&mut *out, doc)?;
    writeln!(out)
}

impl Exporter<Results> for Ndjson {
    fn export(&self, doc: &Results, out: &mut dyn Write) -> io::Result<()> {
        line(doc, out)
    }
}

impl Exporter<[Results]> for Ndjson {
    fn export(&self, docs: &[Results], out: &mut dyn Write) -> io::Result<()> {
        docs.iter().try_for_each(|d| line(d, out))
    }
}

impl Exporter<BothDirections> for Ndjson {
    fn export(&self, doc: &BothDirections, out: &mut dyn Write) -> io::Result<()> {
        line(&doc.send, out)?;
        line(&doc.receive, out)
    }
}

impl Exporter<ExperimentSummary> for Ndjson {
    fn export(&self, doc: &ExperimentSummary, out: &mut dyn Write) -> io::Result<()> {
        doc.points.iter().try_for_each(|p| line(p, out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::export::csv::tests::sample;

    #[test]
    fn one_line_per_document_each_the_whole_document() {
        let r = sample();
        let mut out = Vec::new();
        Ndjson
            .export(&[r.clone(), r.clone()][..], &mut out)
            .expect("write");
        let text = String::from_utf8(out).expect("utf-8");
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2);
        let back: Results = serde_json::from_str(lines[1]).expect("a results document");
        assert_eq!(back, r);
    }
}
