//! JSON, pretty-printed: the results document (the contract in `docs/results.md`), and any
//! other document wirebench saves (`summary.json`, `experiment.json`, a `--both-directions`
//! pair).

use std::io::{self, Write};

use serde::Serialize;

use super::Exporter;

/// Any document as pretty-printed JSON, with a final newline.
pub struct Json;

impl<T: Serialize + ?Sized> Exporter<T> for Json {
    fn export(&self, doc: &T, out: &mut dyn Write) -> io::Result<()> {
        serde_json::to_writer_pretty(&mut *out, doc)?;
        writeln!(out)
    }
}
