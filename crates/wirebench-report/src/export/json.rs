//! The results document as JSON, pretty-printed.

use std::io::{self, Write};

use wirebench_proto::results::Results;

use super::Exporter;

/// The results document as pretty-printed JSON (the contract in `docs/results.md`).
pub struct Json;

impl Exporter for Json {
    fn export(&self, results: &Results, out: &mut dyn Write) -> io::Result<()> {
        serde_json::to_writer_pretty(&mut *out, results)?;
        writeln!(out)
    }
}
