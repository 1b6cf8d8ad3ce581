//! Every output format wirebench writes, behind one trait: a format takes a finished document
//! (a results document, an experiment summary, a link log) and writes it out. Each format is a
//! file of its own here:
//!
//! | format | results | `--both-directions` pair | several results | experiment summary |
//! |---|---|---|---|---|
//! | [`Table`] | the human table | the send/receive table | | a line per point, knees |
//! | [`Json`] | pretty JSON | `{send, receive}` | an array | `summary.json` |
//! | [`Csv`] | a row per direction | two rows | a row each | `summary.csv` |
//! | [`Ndjson`] | one line | two lines | a line each | a line per point |
//!
//! [`iperf3::Iperf3Json`] writes a results document in iperf3's `-J` schema (`run
//! --iperf3-json`); it is not a `--format`, as it writes results only.
//!
//! A packet log is streamed from its file, not held whole: [`csv::packet_log`] writes it.

pub mod csv;
pub mod iperf3;
pub mod json;
pub mod lines;
pub mod link_log;
pub mod ndjson;
mod summary;
pub mod table;

use std::io::{self, Write};

use serde::{Deserialize, Serialize};
use wirebench_proto::results::Results;

pub use csv::Csv;
pub use iperf3::{Connected, Iperf3Client, Iperf3Json};
pub use json::Json;
pub use lines::RateUnits;
pub use ndjson::Ndjson;
pub use table::{Human, Table};

/// Writes one kind of document (by default a test's [`Results`]) in one format.
pub trait Exporter<T: ?Sized = Results> {
    /// Writes `doc` to `out`.
    fn export(&self, doc: &T, out: &mut dyn Write) -> io::Result<()>;
}

/// The two documents of `run --both-directions`: the test as given (this side sends), then
/// the same reversed (this side receives). As JSON: `{"send": ..., "receive": ...}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BothDirections {
    /// The test as given.
    pub send: Results,
    /// The same test reversed.
    pub receive: Results,
}

/// A format by name, for a `--format` flag.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// [`Table`].
    Table,
    /// [`Json`].
    Json,
    /// [`Csv`].
    Csv,
    /// [`Ndjson`].
    Ndjson,
}

/// A format name that is not one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("--format {0}: table, json, csv or ndjson")]
pub struct UnknownFormat(pub String);

impl Format {
    /// Parses `table`, `json`, `csv` or `ndjson`.
    pub fn parse(name: &str) -> Result<Self, UnknownFormat> {
        Ok(match name {
            "table" => Self::Table,
            "json" => Self::Json,
            "csv" => Self::Csv,
            "ndjson" => Self::Ndjson,
            other => return Err(UnknownFormat(other.to_string())),
        })
    }

    /// The exporter of this format for documents of type `T`.
    pub fn exporter<T: ?Sized>(self) -> &'static dyn Exporter<T>
    where
        Table: Exporter<T>,
        Json: Exporter<T>,
        Csv: Exporter<T>,
        Ndjson: Exporter<T>,
    {
        match self {
            Self::Table => &Table,
            Self::Json => &Json,
            Self::Csv => &Csv,
            Self::Ndjson => &Ndjson,
        }
    }
}
