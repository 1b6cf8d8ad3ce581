//! Every output format wirebench writes, behind one trait: a format takes a finished document
//! (a results document, an experiment summary, a link log) and writes it out. Each format is a
//! file of its own here.

use std::io::{self, Write};

use wirebench_proto::results::Results;

/// Writes one kind of document (by default a test's [`Results`]) in one format.
pub trait Exporter<T: ?Sized = Results> {
    /// Writes `doc` to `out`.
    fn export(&self, doc: &T, out: &mut dyn Write) -> io::Result<()>;
}

pub mod link_log;
